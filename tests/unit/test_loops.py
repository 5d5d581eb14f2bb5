"""Unit tests for loop detection."""

from __future__ import annotations

from deskpod.controller.policy.loops import LoopDetector, hamming
from deskpod.protocol import parse_action

CLICK = [parse_action({"type": "click", "x": 10, "y": 20})]


def test_same_action_screen_and_url_three_times_is_a_loop() -> None:
    loops = LoopDetector(threshold=3)
    assert not loops.step(CLICK, "http://a.test/", "ff00ff00ff00ff00")
    assert not loops.step(CLICK, "http://a.test/", "ff00ff00ff00ff01")  # a caret blinked: 1 bit
    assert loops.step(CLICK, "http://a.test/", "ff00ff00ff00ff00")


def test_progress_resets_the_count() -> None:
    loops = LoopDetector(threshold=3)
    other = [parse_action({"type": "click", "x": 11, "y": 20})]
    for actions, url, screen in [(CLICK, "http://a.test/", "0" * 16), (CLICK, "http://a.test/2", "0" * 16),
                                 (CLICK, "http://a.test/2", "f" * 16), (other, "http://a.test/2", "f" * 16),
                                 (other, "http://a.test/2", "f" * 16)]:
        assert not loops.step(actions, url, screen)
    assert loops.repeats == 2


def test_hamming_counts_differing_bits() -> None:
    assert hamming("00", "ff") == 8 and hamming("0f0f", "0f0e") == 1
