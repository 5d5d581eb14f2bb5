"""XInput against a real Xvfb + openbox + Chromium: what the page sees is what we sent."""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING

import pytest
from Xlib import X

from deskpod import keys
from deskpod.agentd.display.xinput import XInput
from deskpod.errors import InputError, InvalidActionError, OutOfBoundsError, UnknownKeyError

if TYPE_CHECKING:  # the fixtures' types; test modules never import conftest at run time
    from conftest import Desktop, Page, XProbe

pytestmark = pytest.mark.display

QUIET_S = 0.3
"""How long to watch for events that must NOT arrive (a second submit, a stray key)."""

PARAGRAPH = "Alpha bravo charlie delta echo foxtrot golf hotel india juliett."


def focus(page: Page, xinput: XInput, element_id: str = "field", value: str = "") -> None:
    """Set an element's value, click into it (real X focus), then clear the event log."""
    page.evaluate(f"document.getElementById({json.dumps(element_id)}).value = {json.dumps(value)}")
    page.reset_events()
    xinput.click(*page.center(element_id))
    # Input reaches the page asynchronously: wait for the click itself before clearing
    # the log, or its tail would land in the next assertion.
    try:
        page.wait_until(lambda: page.events("click"), timeout_s=10)
    except TimeoutError:
        pytest.fail(f"the click never reached the page; events: {page.events()}")
    assert page.evaluate("document.activeElement.id") == element_id
    page.reset_events()


def break_click_chain(xinput: XInput, page: Page) -> None:
    """Click a blank spot far away so the next click starts a new multi-click count."""
    page.reset_events()
    xinput.click(1200, 780)
    page.wait_until(lambda: page.events("click"))
    page.reset_events()


# -- Enter in every spelling, unknown keys refused ---------------------------------


@pytest.mark.parametrize("name", ["ENTER", "Enter", "Return", "enter", "KP_Enter"])
def test_enter_spellings_submit_exactly_once(page: Page, xinput: XInput, name: str) -> None:
    """O ["ENTER"], O ["Enter"], A "Return", A "enter", A "KP_Enter" each submit once."""
    focus(page, xinput)
    xinput.keypress([name])
    page.wait_until(lambda: page.evaluate("window.__submits") >= 1)
    time.sleep(QUIET_S)
    assert page.evaluate("window.__submits") == 1
    assert [e["key"] for e in page.events("keydown")] == ["Enter"]


@pytest.mark.parametrize("chord", [["Entr"], ["CTRL", "Entr"], keys.parse_chord("shift+Entr")])
def test_unknown_key_raises_naming_it_and_presses_nothing(
    page: Page, xinput: XInput, x_probe: XProbe, chord: list[str]
) -> None:
    """A key "Entr" is an error that names the key, and nothing is typed or pressed."""
    focus(page, xinput, value="keep")
    with pytest.raises(UnknownKeyError) as caught:
        xinput.keypress(chord)
    assert caught.value.detail["key"] == "Entr"
    assert "Entr" in caught.value.message
    time.sleep(QUIET_S)
    assert page.events("keydown", "keyup", "input", "submit") == []
    assert page.value("field") == "keep"
    assert x_probe.keys_down() == []


# -- chords hold their modifiers ---------------------------------------------------


@pytest.mark.parametrize(
    "chord",
    [["CTRL", "A"], ["ctrl", "a"], ["Control", "a"], keys.parse_chord("ctrl+a")],
    ids=["O-CTRL-A", "O-ctrl-a", "O-Control-a", "A-ctrl+a"],
)
def test_ctrl_a_selects_all_then_typing_replaces(
    page: Page, xinput: XInput, chord: list[str]
) -> None:
    """Field "hello", keypress ["CTRL","A"] (and spellings), type "x" → field is "x"."""
    focus(page, xinput, value="hello")
    xinput.keypress(chord)
    xinput.type_text("x")
    assert page.settled_value("field", "x") == "x"
    key_events = [(e["type"], e["key"]) for e in page.events("keydown", "keyup")]
    # Modifier down first, released last; the "a" carries ctrlKey.
    assert key_events[:4] == [
        ("keydown", "Control"),
        ("keydown", "a"),
        ("keyup", "a"),
        ("keyup", "Control"),
    ]
    assert page.events("keydown")[1]["ctrl"] is True


def test_keypress_adds_shift_only_where_the_key_needs_it(page: Page, xinput: XInput) -> None:
    """A lone "A" or "!" types the shifted character; SHIFT+b is B; no Shift is left held."""
    focus(page, xinput)
    xinput.keypress(["!"])
    xinput.keypress(["A"])
    xinput.keypress(["SHIFT", "b"])
    xinput.keypress(["slash"])
    assert page.settled_value("field", "!AB/") == "!AB/"


# -- text is typed exactly --------------------------------------------------


@pytest.mark.parametrize("text", ["--help", "-- -x --delay 5", "-v"])
def test_text_starting_with_dash_is_typed_verbatim(
    page: Page, xinput: XInput, text: str
) -> None:
    """O type "--help", "-- -x --delay 5", A type "-v" land in the field exactly."""
    focus(page, xinput)
    xinput.type_text(text)
    assert page.settled_value("field", text) == text


def test_unicode_text_with_lang_unset(
    page: Page, xinput: XInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With LANG unset, type "👍🏽 日本語 Ελληνικά ✓ €" → exactly those code points."""
    for var in ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE"):
        monkeypatch.delenv(var, raising=False)
    text = "👍🏽 日本語 Ελληνικά ✓ €"
    for _ in range(2):  # the second time the characters are already on spare keycodes
        focus(page, xinput)
        xinput.type_text(text)
        value = page.settled_value("field", text)
        assert [f"U+{ord(c):04X}" for c in value] == [f"U+{ord(c):04X}" for c in text]


def test_more_distinct_characters_than_spare_keycodes(page: Page, xinput: XInput) -> None:
    """A text with far more distinct non-keymap characters than spare keycodes
    (Xvfb has 18) forces spare keycodes to be remapped while typing; none may be typed
    with a stale mapping."""
    chars = (
        [chr(c) for c in range(0x4E00, 0x4E00 + 24)]  # CJK
        + [chr(c) for c in range(0x0410, 0x0410 + 16)]  # Cyrillic capitals
        + [chr(c) for c in range(0x03B1, 0x03B1 + 12)]  # Greek small letters
        + ["😀", "🎉", "🚀", "✓", "€", "±", "Ω", "ß"]
    )
    text = "".join(chars) + " " + "".join(reversed(chars)) + " " + "".join(chars[::3])
    focus(page, xinput)
    xinput.type_text(text)
    assert page.settled_value("field", text, timeout_s=10) == text


def test_spares_are_not_remapped_under_unhandled_keys(page: Page, xinput: XInput) -> None:
    """After a long burst of keys Chromium is seconds behind; spare keycodes used
    before it must not be remapped until Chromium has handled them (_NET_WM_PING)."""
    cjk = [chr(c) for c in range(0x6100, 0x6100 + 60)]
    text = "".join(cjk[:20]) + "abcdefghij" * 200 + "".join(cjk[20:])
    focus(page, xinput, element_id="area")
    xinput.type_text(text)
    assert page.settled_value("area", text, timeout_s=20) == text


def test_wait_until_handled_returns_once_chromium_has_the_keys(page: Page, xinput: XInput) -> None:
    """After long typing, wait_until_handled() returns True once Chromium has taken the
    keys off its X queue; the text is then in the page (give or take a frame)."""
    text = "The quick brown fox jumps over the lazy dog. " * 30
    focus(page, xinput, element_id="area")
    xinput.type_text(text)
    assert xinput.wait_until_handled() is True
    assert page.settled_value("area", text, timeout_s=0.5) == text


def test_newlines_and_carriage_returns_press_return(page: Page, xinput: XInput) -> None:
    """ "\\n", "\\r\\n" and "\\r" each press Return once (a textarea gets "\\n")."""
    focus(page, xinput, element_id="area")
    xinput.type_text("one\ntwo\r\nthree\rfour")
    assert page.settled_value("area", "one\ntwo\nthree\nfour") == "one\ntwo\nthree\nfour"


def test_caps_lock_does_not_change_typed_case(page: Page, xinput: XInput, x_probe: XProbe) -> None:
    """Typing is exact even with Caps Lock on, and Caps Lock is left as it was."""
    xinput.keypress(["CAPSLOCK"])
    try:
        assert x_probe.pointer_mask() & X.LockMask
        focus(page, xinput)
        xinput.type_text("aB1é")
        assert page.settled_value("field", "aB1é") == "aB1é"
        assert x_probe.pointer_mask() & X.LockMask
    finally:
        xinput.keypress(["CAPSLOCK"])
    assert not x_probe.pointer_mask() & X.LockMask


def test_control_characters_are_refused_before_typing(page: Page, xinput: XInput) -> None:
    """A control character other than newline/tab fails the whole text: nothing is typed."""
    focus(page, xinput)
    with pytest.raises(UnknownKeyError) as caught:
        xinput.type_text("ab\x07cd")
    assert caught.value.detail["key"] == "U+0007"
    time.sleep(QUIET_S)
    assert page.value("field") == ""


def test_type_text_stops_when_cancelled(page: Page, xinput: XInput, x_probe: XProbe) -> None:
    """A set cancel event stops typing before the next character; nothing stays held."""
    focus(page, xinput)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(InputError) as caught:
        xinput.type_text("never typed", cancel=cancel)
    assert caught.value.detail.get("interrupted") is True
    time.sleep(QUIET_S)
    assert page.value("field") == ""
    assert x_probe.keys_down() == []


# -- multi-clicks ------------------------------------------------------------------


def test_double_click_fires_one_dblclick_with_detail_2(page: Page, xinput: XInput) -> None:
    """A double_click on a word → exactly 1 dblclick, detail 2, the word selected."""
    break_click_chain(xinput, page)
    xinput.click(*page.word_center("para", "golf"), count=2)
    page.wait_until(lambda: page.events("dblclick"))
    time.sleep(QUIET_S)
    assert [e["detail"] for e in page.events("dblclick")] == [2]
    assert [e["detail"] for e in page.events("mousedown")] == [1, 2]
    assert page.evaluate("getSelection().toString()") == "golf"


def test_triple_click_reaches_detail_3_and_selects_paragraph(
    page: Page, xinput: XInput
) -> None:
    """A triple_click → detail 3 on the third click and the whole paragraph selected."""
    break_click_chain(xinput, page)
    xinput.click(*page.word_center("para", "golf"), count=3)
    page.wait_until(lambda: len(page.events("click")) >= 3)
    time.sleep(QUIET_S)
    assert [e["detail"] for e in page.events("click")] == [1, 2, 3]
    assert [e["detail"] for e in page.events("dblclick")] == [2]
    assert page.evaluate("getSelection().toString()").strip() == PARAGRAPH


@pytest.mark.parametrize(
    ("button", "dom_button", "dom_event"),
    [
        ("left", 0, "click"),
        ("right", 2, "contextmenu"),
        ("middle", 1, "auxclick"),
        ("wheel", 1, "auxclick"),
        ("back", 3, "mouseup"),
        ("forward", 4, "mouseup"),
    ],
)
def test_click_buttons_reach_the_page(
    page: Page, xinput: XInput, button: str, dom_button: int, dom_event: str
) -> None:
    """Every button name arrives as the DOM button a real mouse would give."""
    break_click_chain(xinput, page)
    xinput.click(*page.center("pad"), button=button)
    page.wait_until(lambda: page.events(dom_event))
    assert [e["button"] for e in page.events(dom_event)] == [dom_button]
    assert [e["button"] for e in page.events("mousedown")] == [dom_button]


# -- drags, buttons, release_all ---------------------------------------------------------


def test_drag_moves_the_slider_and_releases_the_button(
    page: Page, xinput: XInput, x_probe: XProbe
) -> None:
    """A drag moves a range slider end to end; no button stays down."""
    rect = page.rect("slider")
    y = int(rect["y"] + rect["height"] / 2)
    start = (int(rect["x"]) + 8, y)
    end = (int(rect["x"] + rect["width"]) - 8, y)
    page.reset_events()
    xinput.drag([start, end])
    page.wait_until(lambda: int(page.value("slider")) >= 390)
    slider_inputs = [e for e in page.events("input") if e["target"] == "slider"]
    assert len(slider_inputs) >= 5  # intermediate mousemoves reached the page
    assert x_probe.buttons_down() == 0


def test_button_down_move_button_up_drags(page: Page, xinput: XInput, x_probe: XProbe) -> None:
    """left_mouse_down, mouse_move, left_mouse_up moves the slider."""
    rect = page.rect("slider")
    y = int(rect["y"] + rect["height"] / 2)
    xinput.move(int(rect["x"]) + 8, y)
    xinput.button_down("left")
    assert x_probe.buttons_down() == X.Button1Mask
    for x in range(int(rect["x"]) + 28, int(rect["x"] + rect["width"] / 2), 20):
        xinput.move(x, y)
    xinput.button_up("left")
    page.wait_until(lambda: 150 <= int(page.value("slider")) <= 250)
    assert x_probe.buttons_down() == 0


def test_drag_releases_the_button_when_cancelled(xinput: XInput, x_probe: XProbe) -> None:
    """A cancelled drag raises, and its button is up afterwards."""
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(InputError):
        xinput.drag([(300, 700), (600, 700)], cancel=cancel)
    assert x_probe.buttons_down() == 0


def test_release_all_releases_held_keys_and_buttons(
    page: Page, xinput: XInput, x_probe: XProbe
) -> None:
    """After key_down("shift") and button_down, release_all leaves nothing down
    (X keymap and pointer state), and the next text comes out in lower case."""
    xinput.move(*page.center("pad"))
    xinput.key_down("shift")
    xinput.button_down("left")
    assert x_probe.keys_down() != []
    assert x_probe.buttons_down() == X.Button1Mask
    xinput.release_all()
    assert x_probe.keys_down() == []
    assert x_probe.buttons_down() == 0
    focus(page, xinput)
    xinput.type_text("abc")
    assert page.settled_value("field", "abc") == "abc"


def test_key_down_and_key_up_hold_a_modifier(page: Page, xinput: XInput) -> None:
    """key_down("shift") then typing keys gives upper case; key_up lets go."""
    focus(page, xinput)
    xinput.key_down("SHIFT")
    xinput.keypress(["a"])
    xinput.key_up("SHIFT")
    xinput.keypress(["a"])
    assert page.settled_value("field", "Aa") == "Aa"


# -- scrolling ---------------------------------------------------------------------------


def test_scroll_sends_whole_notches_both_ways(page: Page, xinput: XInput) -> None:
    """N notches give exactly N times one notch's delta (never scaled),
    dy > 0 scrolls down, dx > 0 right, negative back. Chromium may merge notches into fewer
    wheel events when it is busy, so deltas are summed rather than events counted."""
    x, y = page.center("hscroll")
    top = "document.getElementById('hscroll').scrollTop"
    left = "document.getElementById('hscroll').scrollLeft"

    def total(axis: str) -> float:
        return float(sum(e[axis] for e in page.events("wheel")))

    def one_notch(dx: int, dy: int, axis: str) -> float:
        page.reset_events()
        xinput.scroll(x, y, dx, dy)
        page.wait_until(lambda: page.events("wheel"))
        return total(axis)

    for dx, dy, axis, other in ((0, 3, "deltaY", "deltaX"), (2, 0, "deltaX", "deltaY")):
        unit = one_notch(int(dx > 0), int(dy > 0), axis)
        assert unit > 0
        page.reset_events()
        xinput.scroll(x, y, dx, dy)
        notches = dx + dy
        page.wait_until(lambda: total(axis) >= notches * unit)  # noqa: B023 - used at once
        time.sleep(QUIET_S)
        assert total(axis) == notches * unit
        assert total(other) == 0
        assert 1 <= len(page.events("wheel")) <= notches
    assert page.evaluate(top) > 0
    assert page.evaluate(left) > 0
    page.reset_events()
    xinput.scroll(x, y, -3, -4)
    page.wait_until(lambda: page.evaluate(left) == 0 and page.evaluate(top) == 0)
    assert total("deltaX") < 0 and total("deltaY") < 0
    assert xinput.pointer_position() == (x, y)


# -- argument checks and failures --------------------------------------------------------


def test_points_outside_the_screen_are_refused_and_nothing_moves(xinput: XInput) -> None:
    """Out-of-screen points raise OutOfBoundsError before any event is sent."""
    xinput.move(10, 10)
    width, height = xinput.screen_size
    with pytest.raises(OutOfBoundsError):
        xinput.click(width, 10)
    with pytest.raises(OutOfBoundsError):
        xinput.move(-1, 0)
    with pytest.raises(OutOfBoundsError):
        xinput.scroll(10, height, 0, 1)
    with pytest.raises(OutOfBoundsError):
        xinput.drag([(10, 10), (10, height + 5)])
    assert xinput.pointer_position() == (10, 10)


def test_bad_arguments_raise_invalid_action(xinput: XInput) -> None:
    with pytest.raises(InvalidActionError):
        xinput.click(10, 10, button="thumb")
    with pytest.raises(InvalidActionError):
        xinput.click(10, 10, count=4)
    with pytest.raises(InvalidActionError):
        xinput.drag([])


def test_screen_size_matches_xvfb(desktop: Desktop, xinput: XInput) -> None:
    assert xinput.screen_size == desktop.size


def test_unreachable_display_raises_input_error_fast(unused_display: str) -> None:
    """A wrong DISPLAY fails at once with a message naming the display."""
    name = unused_display
    started = time.monotonic()
    with pytest.raises(InputError) as caught:
        XInput(name)
    assert time.monotonic() - started < 5
    assert name in caught.value.message


def test_new_xinput_reclaims_recorded_spares_and_close_empties_them(
    desktop: Desktop, page: Page, xinput: XInput, x_probe: XProbe
) -> None:
    """A daemon restarted after a crash must still type Unicode although the first XInput
    left its spare keycodes mapped: a second XInput reclaims the recorded spares, types
    "ꙮ", and close() empties the keycode it used. The first one still types afterwards."""
    char, keysym = "ꙮ", keys.char_keysym("ꙮ")
    focus(page, xinput)
    xinput.type_text("👍🏽 日本語 Ελληνικά ✓ €")  # the session XInput maps its spares
    page.settled_value("field", "👍🏽 日本語 Ελληνικά ✓ €")
    focus(page, xinput)
    other = XInput(desktop.display_name)
    try:
        other.type_text(char)
        assert page.settled_value("field", char) == char
        keycodes = [kc for kc in range(8, 256) if keysym in x_probe.keysyms(kc)[:2]]
        assert len(keycodes) == 1
    finally:
        other.close()
    assert not any(x_probe.keysyms(keycodes[0]))
    focus(page, xinput)
    xinput.type_text("€ꙮ")
    assert page.settled_value("field", "€ꙮ") == "€ꙮ"


def test_active_title_is_chromiums_window_named_after_its_tab(page: Page, xinput: XInput) -> None:
    """The window manager's active window is Chromium's, titled after the page in front (the
    daemon reads it to follow a tab brought to the front beside a JavaScript dialog)."""
    title = page.wait_until(lambda: (xinput.active_window() or (0, None))[1])
    assert title.startswith("deskpod input fixture - "), title
