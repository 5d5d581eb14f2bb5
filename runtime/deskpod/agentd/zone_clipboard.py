"""The applications' zone's side of the clipboard bridge: reads or owns the X ``CLIPBOARD``
as one of the zone's own X clients.

The applications runner (:mod:`deskpod.agentd.apps_runner`) runs ``python -m
deskpod.agentd.zone_clipboard read`` or ``... own`` with ``DISPLAY`` and ``XAUTHORITY`` of a
display grant of its own (an untrusted cookie, as each application's): through the X gate it
can convert a selection an application owns, or own one the applications can paste, and
nothing of the browser's (the gate and the X server refuse an untrusted client the browser's
selections, and the browser's pastes of an untrusted owner's). ``read`` prints
``{"text": ...}``; ``own`` reads ``{"text": ...}`` on stdin, takes the selection, prints
``{"text": null}``, closes its output and answers the applications' pastes until another
client takes the selection, its grant is revoked or the zone's reset kills it. A failure prints
``{"error": ...}``. Everything it prints is checked by the runner and by agentd.
"""

from __future__ import annotations

import json
import os
import sys

from deskpod.agentd.display.clipboard import XClipboard
from deskpod.errors import DeskpodError
from deskpod.protocol import MAX_CLIPBOARD_CHARS

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Read (``read``) or own (``own``) the zone's clipboard (see the module)."""
    mode = (argv if argv is not None else sys.argv[1:])[:1]
    clipboard = XClipboard(lambda: os.environ.get("DISPLAY", ""))
    try:
        if mode == ["read"]:
            print(json.dumps({"text": clipboard.read()}), flush=True)
            return
        if mode != ["own"]:
            raise SystemExit("usage: python -m deskpod.agentd.zone_clipboard read|own")
        text = str(json.loads(sys.stdin.read(MAX_CLIPBOARD_CHARS * 8))["text"])[:MAX_CLIPBOARD_CHARS]
        clipboard.write(text)
    except (DeskpodError, ValueError, KeyError) as exc:
        print(json.dumps({"error": str(exc)[:300]}), flush=True)
        return
    print(json.dumps({"text": None}), flush=True)
    os.close(sys.stdout.fileno())  # the runner reads to the end of the output
    clipboard.wait_owner()


if __name__ == "__main__":
    main()
