"""The daemon's side of Chromium, over the Chrome DevTools Protocol.

:mod:`.cdp_pipe` (one message off the pipe), :mod:`.cdp` (the DevTools client),
:mod:`.frames` (pages through frames and shadow roots), :mod:`.axtree` (accessibility
summaries), :mod:`.elements` (element refs), :mod:`.dialogs` (JavaScript dialogs),
:mod:`.fasttype` (long text as one insertion), :mod:`.text_sources` (readable text
beyond ``innerText``), :mod:`.request_filter` (the run's egress allowlist in the
browser), :mod:`.downloads` and :mod:`.download_gate` (downloads and their
permission), :mod:`.file_chooser` (``set_files``), :mod:`.snapshot` (browser
snapshots) and :mod:`.trusted_ca` (operator CA certificates).
"""

__all__: list[str] = []
