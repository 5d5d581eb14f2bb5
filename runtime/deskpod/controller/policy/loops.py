"""Loop detection: the same action on the same screen at the same URL,
again and again, is a loop; the run stops instead of retrying blindly.

A step's signature is its normalized actions (their JSON with sorted keys), the
URL after it, and the screenshot's perceptual hash. Screens count as the same
when their hashes differ in at most ``max_distance`` bits, so a blinking caret or
a ticking clock does not hide a loop.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from deskpod.controller.credentials import ProposedAction

__all__ = ["DEFAULT_MAX_DISTANCE_BITS", "LoopDetector", "hamming"]

DEFAULT_MAX_DISTANCE_BITS = 4
"""Perceptual-hash bits two screens may differ in and still count as the same screen."""


def hamming(a: str, b: str) -> int:
    """Bits that differ between two hex hashes of the same length."""
    return bin(int(a, 16) ^ int(b, 16)).count("1")


@dataclass
class LoopDetector:
    """Counts consecutive steps with the same signature.

    Args:
        threshold: this many equal steps in a row are a loop (at least 2).
        max_distance: see :data:`DEFAULT_MAX_DISTANCE_BITS`.
    """

    threshold: int = 3
    max_distance: int = DEFAULT_MAX_DISTANCE_BITS
    _last: tuple[str, str | None, str | None] | None = field(default=None, repr=False)
    repeats: int = 0

    def step(self, actions: Sequence[ProposedAction], url: str | None, screen_hash: str | None) -> bool:
        """Record one step; return True when it completes a loop.

        Args:
            actions: the step's protocol actions.
            url: the URL observed after the step.
            screen_hash: the screenshot's ``perceptual_hash`` after the step (``None``:
                no screenshot, so screens are not compared).
        """
        signature = json.dumps([a.model_dump(mode="json") for a in actions], sort_keys=True)
        last = self._last
        same = (
            last is not None
            and last[0] == signature
            and last[1] == url
            and (last[2] is None or screen_hash is None or hamming(last[2], screen_hash) <= self.max_distance)
        )
        self.repeats = self.repeats + 1 if same else 1
        self._last = (signature, url, screen_hash)
        return self.repeats >= self.threshold
