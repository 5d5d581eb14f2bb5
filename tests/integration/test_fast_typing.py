"""Typing long text, end to end in the hardened sandbox: 5,000 characters of mixed
scripts (CJK, Cyrillic, accented Latin, ASCII) arrive in the page's field exactly, and
a click right after is answered and lands (the keymap is not left churning, the pointer
is not frozen). Long runs go in as one insertion (agentd/browser/fasttype.py); a short text is
still typed key by key.
"""

from __future__ import annotations

import random

import pytest

from deskpod_stack import Stack, page_state, with_client
from deskpod.agentd.browser.fasttype import INSERT_MIN_CHARS
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
    assert len(text) < INSERT_MIN_CHARS

    async def body(client: SandboxClient) -> None:
        await client.navigate(EVENTS)
        await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]}], ObserveOptions(screenshot=False))
        await client.act([{"type": "type", "text": text}], ObserveOptions(screenshot=False))
        state = page_state((await client.act([], STATE)).page_text)
        assert state["field"] == text
        assert state["inputs"] == len(text), "one input event per key"

    with_client(stack, body)


def test_a_run_of_the_insertion_threshold_goes_in_as_one_insertion_and_its_last_key(stack: Stack) -> None:
    """A run of :data:`INSERT_MIN_CHARS` characters into a focused field is one insertion
    and one real key press (two input events); one character fewer is typed key by key."""
    run = ("penguins waddle fast " * 4)[:INSERT_MIN_CHARS]

    async def body(client: SandboxClient) -> None:
        for text, inputs in ((run, 2), (run[:-1], len(run) - 1)):
            await client.navigate(EVENTS)
            await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]}], ObserveOptions(screenshot=False))
            await client.act([{"type": "type", "text": text}], ObserveOptions(screenshot=False))
            state = page_state((await client.act([], STATE)).page_text)
            assert (state["field"], state["inputs"]) == (text, inputs)

    with_client(stack, body)


def test_a_page_that_lies_about_its_focus_gets_no_text_typed_in_the_address_bar(stack: Stack) -> None:
    """Found on review: the check that decides whether a run goes in as one insertion ran
    in the page's own world, where the page can redefine ``document.hasFocus`` and
    ``activeElement``. With the address bar focused, such a page had the run inserted into
    its own field instead of the address bar. The check now runs in the isolated world:
    the run is typed where the keyboard focus is, and the page gets nothing."""
    lie = "http://demo.test/fixtures/typing-focus-lie"
    typed = "http://demo.test/fixtures/form?typed=in-the-address-bar-after-ctrl-l-by-the-agent"
    assert len(typed) >= INSERT_MIN_CHARS

    async def body(client: SandboxClient) -> None:
        await client.navigate(lie)  # its field takes the focus
        await client.act([{"type": "keypress", "keys": ["ctrl", "l"]}], ObserveOptions(screenshot=False))
        await client.act([{"type": "type", "text": typed}], ObserveOptions(screenshot=False))
        state = page_state((await client.act([], STATE)).page_text)
        assert state == {"field": "", "inputs": 0}, "the page's field got the text typed in the address bar"
        await client.act([{"type": "keypress", "keys": ["Return"]}], ObserveOptions(screenshot=False))
        obs = await client.act([], ObserveOptions(screenshot=False))
        assert obs.url == typed, "the text went to the address bar"

    with_client(stack, body)
