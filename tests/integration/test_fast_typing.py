"""Typing long text, end to end in the hardened sandbox: 5,000 characters of mixed
scripts (CJK, Cyrillic, accented Latin, ASCII) arrive in the page's field exactly, and
a click right after is answered and lands (the keymap is not left churning, the pointer
is not frozen). Long runs go in as one insertion (agentd/fasttype.py); a short text is
still typed key by key.
"""

from __future__ import annotations

import random

import pytest

from deskpod_stack import Stack, page_state, with_client
from deskpod.client import SandboxClient
from deskpod.protocol import ObserveOptions

pytestmark = pytest.mark.integration

EVENTS = "http://demo.test/fixtures/events"
FIELD = (400, 440)
SLIDER_RIGHT = (800, 300)
STATE = ObserveOptions(screenshot=False, page_text=True, max_text_chars=100_000)

EXTRA = ([chr(c) for c in range(0x4E00, 0x4E00 + 10)] + [chr(c) for c in range(0x0410, 0x0410 + 10)]
         + list("éèàüößñçø"))
"""29 characters that are not on the keymap (each would need a spare keycode)."""


def mixed_text(length: int) -> str:
    rnd = random.Random(19)
    return "".join(rnd.choice([*"abcdefghijklmnopqrstuvwxyz ", *EXTRA]) for _ in range(length))


def test_5000_mixed_characters_arrive_exactly_and_a_click_right_after_lands(stack: Stack) -> None:
    text = mixed_text(5000)

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS)
        await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]}], ObserveOptions(screenshot=False))
        await client.act([{"type": "type", "text": text}], ObserveOptions(screenshot=False, settle=False))
        await client.act([{"type": "click", "x": SLIDER_RIGHT[0], "y": SLIDER_RIGHT[1]}],
                         ObserveOptions(screenshot=False, settle=False))
        state = page_state((await client.act([], STATE)).page_text)
        assert state["field"] == text
        assert state["slider"] > 50, "the click right after the typing moved the slider"
        assert any(e["type"] == "click" and e["target"] == "slider" for e in state["events"])

    with_client(stack, body)


def test_a_short_mixed_text_is_typed_key_by_key_exactly(stack: Stack) -> None:
    """Below the insertion threshold every character is a key press, those off the keymap
    on spare keycodes (five here: each remap is a keymap change every X client handles)."""
    text = "Жук日é: " + "quick brown fox " * 2

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS)
        await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]}], ObserveOptions(screenshot=False))
        await client.act([{"type": "type", "text": text}], ObserveOptions(screenshot=False))
        assert page_state((await client.act([], STATE)).page_text)["field"] == text

    with_client(stack, body)
