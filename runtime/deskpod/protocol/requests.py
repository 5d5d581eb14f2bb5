"""The daemon's websocket requests (each answered by one reply, see
:mod:`deskpod.protocol.replies`).

``reset`` (a websocket request) stops every process of the session (the
browser, the window manager and anything an agent started), wipes every
writable path (browser profile, downloads, /tmp, /dev/shm, the workspace, the
home folder, the clipboard and X selections), starts the window manager and
Chromium again at ``start_url`` and answers with the first observation of the
fresh state. The controller chooses the next control token and sends only its
SHA-256: once the reply is sent the daemon accepts only the new token and
closes every connection made with the old one (including the one that asked).

"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, Field, model_validator

from deskpod.protocol._base import STRICT, Sha256, StartUrl
from deskpod.protocol.actions import Action, Size
from deskpod.protocol.egress import EgressRequest
from deskpod.protocol.expect import ScreenExpectation
from deskpod.protocol.mask import MaskSecrets
from deskpod.protocol.limits import (
    MAX_ACTIONS_PER_REQUEST,
    MAX_IMAGE_SIDE_PX,
    MAX_SCREENSHOT_BASE64_BYTES,
    MAX_SCREENSHOT_PIXELS,
    MIN_SCREENSHOT_BASE64_BYTES,
)
from deskpod.protocol.observation import ObserveOptions
from deskpod.protocol.permissions import PermissionsRequest
from deskpod.protocol.workspace import WorkspaceRequest

__all__ = [
    "ActRequest",
    "AnyRequest",
    "ConfigureRequest",
    "NavigateRequest",
    "REQUEST_TYPES",
    "Request",
    "ResetRequest",
]

class ActRequest(BaseModel):
    """Run ``actions`` in order, then observe.

    ``expect``: what must still hold right before each pointer action's input is sent
    (:class:`~deskpod.protocol.ScreenExpectation`); when it does not, the daemon sends
    nothing more and answers ``screen_changed``. ``None``: no check.
    ``allow_downloads``: the controller's permission for downloads this request starts
    (it attaches it to actions it judged at the download risk level and let through);
    without it the browser refuses every download that begins before the reply, and
    the observation reports each one ``blocked`` (:class:`~deskpod.protocol.Download`).
    ``mask``: secrets added to the session's mask set before the actions run, masked in
    every image and text from then until ``reset`` (:mod:`~deskpod.protocol.mask`).
    """

    model_config = STRICT
    type: Literal["act"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    actions: Annotated[list[Action], Field(max_length=MAX_ACTIONS_PER_REQUEST)]
    observe: ObserveOptions = ObserveOptions()
    timeout_s: Annotated[float, Field(gt=0.0, le=600.0, allow_inf_nan=False)] = 60.0
    expect: ScreenExpectation | None = None
    allow_downloads: bool = False
    mask: MaskSecrets = []


class NavigateRequest(BaseModel):
    """Load ``url`` (http or https only) in the active tab, then observe.
    ``allow_downloads``: as in :class:`ActRequest` (a URL that is a download);
    ``mask``: as in :class:`ActRequest`."""

    model_config = STRICT
    type: Literal["navigate"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    url: Annotated[str, Field(min_length=1, max_length=8192, pattern=r"^https?://")]
    observe: ObserveOptions = ObserveOptions()
    timeout_s: Annotated[float, Field(gt=0.0, le=600.0, allow_inf_nan=False)] = 30.0
    allow_downloads: bool = False
    mask: MaskSecrets = []


class ConfigureRequest(BaseModel):
    """Declare the model space: the size of the images the model is sent.

    ``model_size``: that size exactly. ``max_dimension``: instead, the screen scaled
    down (aspect kept) so its longer side is at most this many pixels, e.g. 1280 to
    stay under a vendor's downscaling limit. Neither: the screen itself. A model size
    with a side over :data:`~deskpod.protocol.MAX_IMAGE_SIDE_PX` or more than
    :data:`~deskpod.protocol.MAX_SCREENSHOT_PIXELS` pixels is refused
    (``invalid_request``). ``max_image_bytes``: the longest base64 text of a screenshot
    or zoom image from now on (the daemon re-encodes or scales an image down to stay
    within it; see :attr:`Screenshot.fitted <deskpod.protocol.Screenshot.fitted>`);
    ``None``: :data:`~deskpod.protocol.MAX_SCREENSHOT_BASE64_BYTES`.
    """

    model_config = STRICT
    type: Literal["configure"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    model_size: Size | None = None
    max_dimension: Annotated[int, Field(strict=True, ge=16, le=16384)] | None = None
    max_image_bytes: Annotated[
        int, Field(strict=True, ge=MIN_SCREENSHOT_BASE64_BYTES, le=MAX_SCREENSHOT_BASE64_BYTES)
    ] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> ConfigureRequest:
        if self.model_size is not None and self.max_dimension is not None:
            raise ValueError("give model_size or max_dimension, not both")
        size = self.model_size
        if size is not None and (max(size.width, size.height) > MAX_IMAGE_SIDE_PX
                                 or size.width * size.height > MAX_SCREENSHOT_PIXELS):
            raise ValueError(f"model_size {size.width}x{size.height} is too large: at most {MAX_IMAGE_SIDE_PX} "
                             f"px a side and {MAX_SCREENSHOT_PIXELS} pixels")
        return self



class ResetRequest(BaseModel):
    """Put the sandbox back to its baseline in place, then observe.

    ``start_url``: the page Chromium opens (http or https); ``None``: the sandbox's
    configured start page. ``token_sha256``: SHA-256 (64 lower-case hex digits) of
    the control token that replaces the current one; the daemon never sees the
    token itself. ``observe``: what the reply's observation of the fresh state holds.
    """

    model_config = STRICT
    type: Literal["reset"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    start_url: StartUrl | None = None
    token_sha256: Sha256
    observe: ObserveOptions = ObserveOptions()



AnyRequest = (ActRequest | NavigateRequest | ConfigureRequest | ResetRequest | EgressRequest | PermissionsRequest
              | WorkspaceRequest)
"""Any request of the daemon wire (a plain union, for annotations); the one list of them."""

Request = Annotated[AnyRequest, Field(discriminator="type")]
"""Any request, discriminated by ``type`` (for validation)."""


def _request_type(model: type[BaseModel]) -> str:
    """The ``type`` tag of a request model (its ``Literal`` annotation's one value)."""
    (tag,) = get_args(model.model_fields["type"].annotation)
    return str(tag)


REQUEST_TYPES: dict[str, type[BaseModel]] = {_request_type(m): m for m in get_args(AnyRequest)}
"""Request ``type`` → model, for every request (derived from :data:`AnyRequest`)."""
