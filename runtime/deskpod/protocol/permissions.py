"""Browser permissions (location, notifications, camera, microphone, clipboard, MIDI): what
the run grants and what pages asked for (wire models).

Chromium in the sandbox never shows a permission prompt: it runs with
``--deny-permission-prompts``, so a page's request that no grant covers is denied at
once (nothing is left pending for an agent to find, or for Escape to answer). At the
start of a run the controller sends ``permissions`` (:class:`PermissionsRequest`) with the
task's grants (:class:`PermissionGrants`); the daemon sets each granted permission for
every origin (DevTools ``Browser.setPermission``) and, for a granted ``geolocation``,
the configured position in every tab (``Emulation.setGeolocationOverride``: no location
service is reachable from the sandbox, so a grant without a position would answer
"Network error"). An empty grant list (sent when the run ends; a reset restores it) is
the default: every permission denied.

Each request a page made in the active tab is reported in the next observation
(:attr:`Observation.permission_requests`, :class:`PermissionRequest`), with the answer
it got; the controller writes each as a ``permission`` event to the audit log.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from deskpod.protocol._base import STRICT
from deskpod.protocol.limits import MAX_URL_CHARS

__all__ = [
    "GeoPosition",
    "MAX_PERMISSION_REQUESTS",
    "PERMISSION_NAMES",
    "PermissionGrants",
    "PermissionName",
    "PermissionRequest",
    "PermissionsRequest",
]

PermissionName = Literal["geolocation", "notifications", "camera", "microphone", "clipboard_read", "midi"]
"""A browser permission a task may grant and a page may ask for: ``geolocation``
(``navigator.geolocation``), ``notifications`` (``Notification.requestPermission``),
``camera`` and ``microphone`` (``getUserMedia``; the sandbox has no such device, so a
grant answers ``NotFoundError``), ``clipboard_read`` (``navigator.clipboard.read``,
``readText``), ``midi`` (``navigator.requestMIDIAccess``; system-exclusive messages stay denied)."""

PERMISSION_NAMES: tuple[PermissionName, ...] = (
    "geolocation", "notifications", "camera", "microphone", "clipboard_read", "midi")
"""Every :data:`PermissionName`, in a fixed order."""

MAX_PERMISSION_REQUESTS = 32
"""Most permission requests one observation reports (repeats of one permission in one tab
are counted in :attr:`PermissionRequest.count`)."""


class GeoPosition(BaseModel):
    """A position the browser reports to pages: ``lat`` and ``lon`` in degrees (WGS 84),
    ``accuracy_m`` in metres."""

    model_config = STRICT
    lat: Annotated[float, Field(ge=-90.0, le=90.0, allow_inf_nan=False)]
    lon: Annotated[float, Field(ge=-180.0, le=180.0, allow_inf_nan=False)]
    accuracy_m: Annotated[float, Field(gt=0.0, le=100_000.0, allow_inf_nan=False)] = 50.0


class PermissionGrants(BaseModel):
    """The permissions granted to every page; every other one is denied.

    ``granted``: each at most once. ``position``: where a granted ``geolocation`` says the
    browser is; required with it and refused without it.
    """

    model_config = STRICT
    granted: Annotated[list[PermissionName], Field(max_length=len(PERMISSION_NAMES))] = []
    position: GeoPosition | None = None

    @model_validator(mode="after")
    def _coherent(self) -> PermissionGrants:
        if len(set(self.granted)) != len(self.granted):
            raise ValueError("a permission is granted twice")
        if ("geolocation" in self.granted) != (self.position is not None):
            raise ValueError("a granted geolocation needs a position, and a position needs geolocation granted "
                             "(no location service is reachable from the sandbox)")
        return self


class PermissionsRequest(BaseModel):
    """Grant ``grants`` from now on (and after a browser restart, until a reset); every
    permission not granted is denied."""

    model_config = STRICT
    type: Literal["permissions"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    grants: PermissionGrants


class PermissionRequest(BaseModel):
    """A page's request for a permission, seen in the active tab since the last observation.

    ``name``: the permission. ``tab``: the tab's id. ``origin``: the tab's origin when the
    observation was taken (``scheme://host[:port]``). ``granted``: the answer the browser
    gave under the grants in force (never a prompt). ``count``: how many such requests
    were seen. Reported by a script the daemon adds to every page before its own
    scripts run: page data, so a page may leave it out or add to it; the answer it got
    does not depend on the report.
    """

    model_config = STRICT
    name: PermissionName
    tab: Annotated[str, Field(max_length=128)]
    origin: Annotated[str, Field(max_length=MAX_URL_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$")]
    granted: bool
    count: Annotated[int, Field(strict=True, ge=1, le=1_000_000)] = 1
