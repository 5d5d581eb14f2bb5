"""Browser permissions in the sandbox: deny by default, the run's grants, and the requests
pages made (:mod:`deskpod.protocol.permissions`).

Three parts:

- Chromium runs with ``--deny-permission-prompts`` (:mod:`deskpod.agentd.browser.chromium`):
  a request no grant covers is denied at once, with no prompt bubble (a prompt would stay
  pending until someone pressed Escape, and Chromium draws it after the action's reply).
- :class:`PermissionSetter` applies the controller's grants on the browser target:
  ``Browser.resetPermissions`` then ``Browser.setPermission`` ``granted`` for every origin
  (https://chromedevtools.github.io/devtools-protocol/tot/Browser/#method-setPermission),
  and for ``geolocation`` ``Emulation.setGeolocationOverride`` with the configured position
  in every page session (the override belongs to a page's session; the daemon's
  auto-attached session of each tab lives as long as the tab).
- DevTools has no event for a page's permission request, so :func:`permission_hook_script`,
  registered with ``Page.addScriptToEvaluateOnNewDocument`` on every page before its
  scripts run, wraps the requesting calls (``Geolocation.prototype.getCurrentPosition`` and
  ``watchPosition``, ``Notification.requestPermission``, ``MediaDevices.prototype.getUserMedia``,
  ``Clipboard.prototype.read`` and ``readText``, ``Navigator.prototype.requestMIDIAccess``) and
  records each permission asked; :data:`TAKE_EXPRESSION` takes the record in the active tab.
  The record is page data: a page that knows the property can empty or fill it. The answer
  a page gets never depends on it.

Residuals: requests from frames (each frame has its own record; the top document's alone is
read) and from tabs other than the active one, and a page's request made just before it
navigated away, are not reported (each is still denied unless granted).
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from deskpod.protocol import PermissionGrants, PermissionRequest
from deskpod.protocol.permissions import MAX_PERMISSION_REQUESTS, PERMISSION_NAMES

__all__ = ["PERMISSION_KEY", "PermissionSetter", "TAKE_EXPRESSION", "permission_hook_script", "requests_seen"]

PERMISSION_KEY = f"__deskpod_permissions_{secrets.token_hex(8)}"
"""Name of the window property through which the hook's record is taken (random per daemon)."""

_MAX_RECORDED = 256
"""Most requests one document's record keeps between two reads."""

_DESCRIPTORS: dict[str, dict[str, Any]] = {
    "geolocation": {"name": "geolocation"},
    "notifications": {"name": "notifications"},
    "camera": {"name": "camera"},
    "microphone": {"name": "microphone"},
    "clipboard_read": {"name": "clipboard-read"},
    "midi": {"name": "midi", "sysex": False},
}
"""Each permission's ``PermissionDescriptor`` for ``Browser.setPermission`` (the Permissions
API's names, https://w3c.github.io/permissions/#permission-registry)."""

_HOOK = r"""(() => {
  const key = __KEY__;
  if (Object.prototype.hasOwnProperty.call(window, key)) return;
  const asked = [];
  const splice = Array.prototype.splice;
  const apply = Reflect.apply;
  const note = (name) => { if (asked.length < __MAX__) asked[asked.length] = name; };
  Object.defineProperty(window, key, {value: () => apply(splice, asked, [0, asked.length]),
                                      enumerable: false, configurable: false, writable: false});
  const wrap = (owner, prop, names) => {
    if (!owner) return;
    const original = owner[prop];
    if (typeof original !== "function") return;
    const wrapped = {[prop](...args) {
      try { for (const name of names(args)) note(name); } catch (e) { /* a hostile argument */ }
      return apply(original, this, args);
    }}[prop];
    try {
      Object.defineProperty(owner, prop, {value: wrapped, writable: false, configurable: false});
    } catch (e) { /* already fixed by the page: not recorded */ }
  };
  const one = (name) => () => [name];
  const media = (args) => {
    const c = args[0] || {};
    return [...(c.video ? ["camera"] : []), ...(c.audio ? ["microphone"] : [])];
  };
  wrap(window.Geolocation && Geolocation.prototype, "getCurrentPosition", one("geolocation"));
  wrap(window.Geolocation && Geolocation.prototype, "watchPosition", one("geolocation"));
  wrap(window.Notification, "requestPermission", one("notifications"));
  wrap(window.MediaDevices && MediaDevices.prototype, "getUserMedia", media);
  wrap(window.Clipboard && Clipboard.prototype, "read", one("clipboard_read"));
  wrap(window.Clipboard && Clipboard.prototype, "readText", one("clipboard_read"));
  wrap(window.Navigator && Navigator.prototype, "requestMIDIAccess", one("midi"));
})()"""

TAKE_EXPRESSION = (f"(() => {{ const take = window[{json.dumps(PERMISSION_KEY)}]; "
                   f"return typeof take === 'function' ? take() : []; }})()")
"""Evaluated in the active tab's main world: the permissions asked since the last take, in
order (page data), and the record emptied."""


def permission_hook_script(key: str = PERMISSION_KEY) -> str:
    """The script that records permission requests in a document (see the module docstring).

    Args:
        key: the window property its record is taken through.

    Returns:
        JavaScript source for ``Page.addScriptToEvaluateOnNewDocument``.
    """
    return _HOOK.replace("__KEY__", json.dumps(key)).replace("__MAX__", str(_MAX_RECORDED))


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (``""`` when it has none)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.scheme and parts.netloc else ""


def requests_seen(taken: Any, tab: str, url: str, grants: PermissionGrants) -> list[PermissionRequest]:
    """The requests a take returned, as the observation reports them: each known permission
    once with its count, in the order first asked; anything else the page put there is left out.

    Args:
        taken: the value of :data:`TAKE_EXPRESSION` (page data: any JSON value).
        tab: the active tab's id.
        url: the active tab's URL (its origin is reported).
        grants: the grants in force (a request's answer).
    """
    if not isinstance(taken, list):
        return []
    counts = Counter(name for name in taken[:_MAX_RECORDED] if isinstance(name, str) and name in PERMISSION_NAMES)
    return [PermissionRequest(name=name, tab=tab[:128], origin=_origin(url)[:2048],
                              granted=name in grants.granted, count=count)
            for name, count in list(counts.items())[:MAX_PERMISSION_REQUESTS]]


Call = Callable[..., Awaitable[dict[str, Any]]]
"""A DevTools command: ``call(method, params, session)``."""


class PermissionSetter:
    """Puts :class:`~deskpod.protocol.PermissionGrants` in force over DevTools (see the module).

    Attributes:
        grants: the grants in force (the default: none, every permission denied).
    """

    def __init__(self) -> None:
        self.grants = PermissionGrants()

    async def apply(self, call: Call, page_sessions: Iterable[str]) -> None:
        """Reset the browser's permissions, grant :attr:`grants` for every origin and set or
        clear the position in each of ``page_sessions``.

        Raises:
            BrowserError: the browser refused a command.
        """
        await call("Browser.resetPermissions", {})
        for name in self.grants.granted:
            await call("Browser.setPermission", {"permission": _DESCRIPTORS[name], "setting": "granted"})
        for session in page_sessions:
            await self.position(call, session, clear=True)

    async def position(self, call: Call, session: str, clear: bool = False) -> None:
        """Set the configured position in a page's ``session`` (with ``clear``, clear it when
        no position is configured).

        Raises:
            BrowserError: the browser refused.
        """
        position = self.grants.position
        if position is not None:
            await call("Emulation.setGeolocationOverride",
                       {"latitude": position.lat, "longitude": position.lon, "accuracy": position.accuracy_m},
                       session)
        elif clear:
            await call("Emulation.clearGeolocationOverride", {}, session)
