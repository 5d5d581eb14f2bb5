"""The session's mask set: the secrets hidden from every image and text the daemon sends.

The controller names them (``mask`` on ``act`` and ``navigate``,
:mod:`deskpod.protocol.mask`); they are kept until the next reset. Before any image is
encoded (a screenshot, a zoom, a live frame), :meth:`SecretMask.plan` asks the page
where it shows one (:mod:`deskpod.agentd.browser.secret_regions`) and the capturing
thread paints that plan (:func:`~deskpod.agentd.display.mask_paint.paint_mask`). When
the page cannot be read (a JavaScript dialog blocks it, the browser does not answer) or
a frame of it cannot be, the plan is the whole screen: the daemon cannot tell where the
secret is, so it shows nothing. Observations the daemon returns pass through :meth:`SecretMask.observation`.
With no secret set, nothing is asked and nothing changes. The secrets are never logged.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from deskpod.agentd.browser.cdp import Browser
from deskpod.agentd.browser.secret_regions import find_secret_regions
from deskpod.agentd.display.mask_paint import MaskPlan
from deskpod.errors import BrowserError, InvalidRequestError
from deskpod.protocol import Observation
from deskpod.protocol.mask import MAX_MASK_SECRETS, mask_values

__all__ = ["MASK_MARGIN_PX", "MAX_MASK_BOXES", "SecretMask"]

log = logging.getLogger(__name__)

MASK_MARGIN_PX = 2
"""Screen pixels each box is grown by on every side (anti-aliased glyph edges, rounding)."""

MAX_MASK_BOXES = 1024
"""Most boxes painted on one image; a page showing a secret in more places than that is
painted over whole."""


class SecretMask:
    """The secrets one session masks (see the module docstring).

    Args:
        browser: the DevTools client whose active tab is read.
    """

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self._secrets: list[str] = []

    @property
    def count(self) -> int:
        """How many secrets are masked."""
        return len(self._secrets)

    def add(self, secrets: list[str]) -> None:
        """Mask ``secrets`` too, from now until :meth:`clear`.

        Raises:
            InvalidRequestError: the set would hold more than
                :data:`~deskpod.protocol.mask.MAX_MASK_SECRETS` (nothing is added).
        """
        new = [s for s in dict.fromkeys(secrets) if s not in self._secrets]
        if len(self._secrets) + len(new) > MAX_MASK_SECRETS:
            raise InvalidRequestError(f"at most {MAX_MASK_SECRETS} secrets are masked in a session")
        self._secrets += new

    def clear(self) -> None:
        """Forget every secret (a reset)."""
        self._secrets = []

    async def plan(self) -> MaskPlan:
        """Where to paint on the screen now, screen pixels (an empty plan when no secret
        is set; the painter clips the boxes to the image).

        Never raises: a page that cannot be read gives the whole screen.
        """
        if not self._secrets:
            return MaskPlan()
        try:
            found = await self.browser.read_page(
                lambda reader: find_secret_regions(reader, list(self._secrets), self.browser.device_scale_factor))
        except (BrowserError, TimeoutError) as exc:
            log.info("secret mask: the page could not be read (%s); the whole screen is masked", type(exc).__name__)
            return MaskPlan(whole=True)
        if not found.complete or len(found.boxes) > MAX_MASK_BOXES:
            return MaskPlan(whole=True)
        boxes = tuple((max(0, math.floor(x0) - MASK_MARGIN_PX), max(0, math.floor(y0) - MASK_MARGIN_PX),
                       math.ceil(x1) + MASK_MARGIN_PX, math.ceil(y1) + MASK_MARGIN_PX)
                      for x0, y0, x1, y1 in found.boxes)
        return MaskPlan(boxes, found.tooltip)

    def text(self, value: Any) -> Any:
        """``value`` (a JSON-like value: a dumped model, a string) with every secret
        replaced (:func:`~deskpod.protocol.mask.mask_values`)."""
        return mask_values(value, self._secrets) if self._secrets else value

    def observation(self, observation: Observation) -> Observation:
        """``observation`` with every secret replaced in every text of it (page text,
        snapshot, accessibility, focus, elements, text sources, dialogs, URLs...); its
        images are left as they are (they were painted when captured)."""
        if not self._secrets:
            return observation
        images = {"screenshot": observation.screenshot, "zoom": observation.zoom}
        texts = self.text(observation.model_dump(mode="json", exclude=set(images)))
        return Observation.model_validate({**texts, **images})
