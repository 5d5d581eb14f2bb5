"""deskpod.keys: key names in every dialect → X keysym names, without X."""

from __future__ import annotations

import pytest

from deskpod import keys
from deskpod.errors import UnknownKeyError

# -- Enter ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ENTER", "Enter", "Return", "enter", "RETURN", "return"])
def test_enter_spellings_are_return(name: str) -> None:
    """O ["ENTER"], O ["Enter"], A "Return", A "enter" all mean the Return keysym."""
    assert keys.to_keysym_name(name) == "Return"
    assert keys.keysym_value(name) == 0xFF0D


def test_kp_enter_is_its_own_keysym() -> None:
    """A "KP_Enter" is valid and stays the keypad Enter."""
    assert keys.to_keysym_name("KP_Enter") == "KP_Enter"
    assert keys.keysym_value("KP_Enter") == 0xFF8D


@pytest.mark.parametrize("name", ["Entr", "Ente", "Retrun", "KP_Entr", "ctrl+a", "F36", "Fn"])
def test_unknown_names_raise_naming_the_key(name: str) -> None:
    """A "Entr" is an error naming the key, never silently dropped."""
    with pytest.raises(UnknownKeyError) as caught:
        keys.to_keysym_name(name)
    assert caught.value.detail == {"key": name}
    assert repr(name) in caught.value.message
    assert caught.value.code == "unknown_key"


# -- Control and chords ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["CTRL", "ctrl", "Ctrl", "Control", "CONTROL", "control", "Control_L"]
)
def test_control_spellings(name: str) -> None:
    """O "CTRL", "ctrl", "Control" are all the left Control key."""
    assert keys.to_keysym_name(name) == "Control_L"


@pytest.mark.parametrize(
    "chord",
    [["CTRL", "A"], ["ctrl", "a"], ["Control", "a"], keys.parse_chord("ctrl+a"), ["a", "ctrl"]],
)
def test_ctrl_a_chords_resolve_to_control_then_lowercase_a(chord: list[str]) -> None:
    """["CTRL","A"] is Ctrl+A (select all): modifier first, the letter as its key."""
    assert keys.resolve_chord(chord) == ["Control_L", "a"]


def test_shift_with_an_uppercase_letter_keeps_it() -> None:
    assert keys.resolve_chord(["SHIFT", "A"]) == ["Shift_L", "A"]
    assert keys.resolve_chord(["A"]) == ["A"]
    assert keys.resolve_chord(["CTRL", "SHIFT", "T"]) == ["Control_L", "Shift_L", "t"]


def test_resolve_chord_keeps_caller_order_and_drops_repeats() -> None:
    assert keys.resolve_chord(["a", "ALT", "CTRL", "ctrl", "Delete"]) == [
        "Alt_L",
        "Control_L",
        "a",
        "Delete",
    ]


def test_resolve_chord_fails_whole_chord_on_one_unknown_name() -> None:
    with pytest.raises(UnknownKeyError) as caught:
        keys.resolve_chord(["CTRL", "Entr", "a"])
    assert caught.value.detail["key"] == "Entr"
    with pytest.raises(UnknownKeyError):
        keys.resolve_chord([])


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("ctrl+a", ["ctrl", "a"]),
        ("ctrl+shift+t", ["ctrl", "shift", "t"]),
        (" ctrl + Return ", ["ctrl", "Return"]),
        ("Return", ["Return"]),
        ("ctrl++", ["ctrl", "+"]),
        ("+", ["+"]),
        ("super+KP_Add", ["super", "KP_Add"]),
    ],
)
def test_parse_chord(text: str, names: list[str]) -> None:
    assert keys.parse_chord(text) == names


@pytest.mark.parametrize("text", ["", "ctrl+", "   "])
def test_parse_chord_refuses_empty_names(text: str) -> None:
    with pytest.raises(UnknownKeyError) as caught:
        keys.parse_chord(text)
    assert caught.value.detail["key"] == text


# -- the other dialects ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "keysym"),
    [
        # OpenAI computer_call upper case
        ("ESC", "Escape"), ("ESCAPE", "Escape"), ("TAB", "Tab"), ("SPACE", "space"),
        ("BACKSPACE", "BackSpace"), ("DELETE", "Delete"), ("HOME", "Home"), ("END", "End"),
        ("PAGEUP", "Page_Up"), ("PAGEDOWN", "Page_Down"), ("ARROWUP", "Up"), ("UP", "Up"),
        ("ARROWDOWN", "Down"), ("ARROWLEFT", "Left"), ("ARROWRIGHT", "Right"),
        ("INSERT", "Insert"), ("CAPSLOCK", "Caps_Lock"), ("SHIFT", "Shift_L"),
        ("ALT", "Alt_L"), ("OPTION", "Alt_L"), ("CMD", "Super_L"), ("META", "Super_L"),
        ("SUPER", "Super_L"), ("WIN", "Super_L"), ("F1", "F1"), ("F12", "F12"),
        # lower / mixed case and DOM KeyboardEvent.key names
        ("escape", "Escape"), ("Backspace", "BackSpace"), ("ArrowLeft", "Left"),
        ("PageDown", "Page_Down"), ("page_down", "Page_Down"), ("f5", "F5"),
        ("kp_enter", "KP_Enter"), ("Meta", "Super_L"), ("AltGr", "ISO_Level3_Shift"),
        ("PrintScreen", "Print"), ("BrowserBack", "XF86Back"),
        ("AudioVolumeUp", "XF86AudioRaiseVolume"),
        # exact X keysym names
        ("Return", "Return"), ("KP_Enter", "KP_Enter"), ("Control_R", "Control_R"),
        ("BackSpace", "BackSpace"), ("Page_Up", "Page_Up"), ("Prior", "Prior"),
        ("a", "a"), ("A", "A"), ("1", "1"), ("slash", "slash"), ("Eacute", "Eacute"),
        ("eacute", "eacute"), ("dead_acute", "dead_acute"), ("XF86AudioMute", "XF86AudioMute"),
        ("ISO_Left_Tab", "ISO_Left_Tab"), ("F35", "F35"),
        # single characters and X's Unicode spelling
        ("/", "slash"), ("+", "plus"), (" ", "space"), ("é", "eacute"), ("É", "Eacute"),
        ("€", "U20AC"), ("日", "U65E5"), ("👍", "U1F44D"), ("U+20AC", "U20AC"),
        ("U20AC", "U20AC"), ("u+00e9", "eacute"), ("\n", "Return"), ("\t", "Tab"),
    ],
)  # fmt: skip
def test_accepted_names(name: str, keysym: str) -> None:
    assert keys.to_keysym_name(name) == keysym


def test_keysym_values() -> None:
    assert keys.keysym_value("a") == 0x61
    assert keys.keysym_value("€") == 0x010020AC
    assert keys.keysym_value("U1F44D") == 0x0101F44D
    assert keys.keysym_value("XF86Back") == 0x1008FF26


@pytest.mark.parametrize(
    ("char", "keysym"),
    [("a", 0x61), ("-", 0x2D), ("é", 0xE9), ("€", 0x010020AC), ("🏽", 0x0101F3FD),
     ("\n", 0xFF0D), ("\r", 0xFF0D), ("\t", 0xFF09), ("\u00a0", 0xA0)],
)  # fmt: skip
def test_char_keysym(char: str, keysym: int) -> None:
    assert keys.char_keysym(char) == keysym


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x7f", "\x85", "ab", ""])
def test_char_keysym_refuses_control_characters_and_non_characters(char: str) -> None:
    with pytest.raises(UnknownKeyError):
        keys.char_keysym(char)


@pytest.mark.parametrize(
    "name",
    ["AGRAVE", "Terminate_Server", "XF86Switch_VT_1", "XF86Ungrab", "Pointer_Button1",
     "U+110000", "U+D800", "\x07", "", "👍🏽"],
)  # fmt: skip
def test_refused_names(name: str) -> None:
    """Ambiguous case-folds, keysyms that control the X server, and non-keys are refused."""
    with pytest.raises(UnknownKeyError):
        keys.to_keysym_name(name)


def test_non_string_names_are_refused() -> None:
    with pytest.raises(UnknownKeyError):
        keys.to_keysym_name(13)  # type: ignore[arg-type]


def test_long_unknown_names_are_cut_in_the_error() -> None:
    with pytest.raises(UnknownKeyError) as caught:
        keys.to_keysym_name("x" * 10_000)
    assert len(caught.value.detail["key"]) <= 80
    assert len(caught.value.message) <= 200


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Control_L", True), ("CTRL", True), ("Shift_R", True), ("Alt_L", True), ("Super_L", True),
     ("Meta_L", True), ("ISO_Level3_Shift", True), ("Caps_Lock", False), ("a", False),
     ("Return", False), ("Entr", False)],
)  # fmt: skip
def test_is_modifier(name: str, expected: bool) -> None:
    assert keys.is_modifier(name) is expected


def test_keys_module_does_not_import_xlib() -> None:
    """keys.py stays pure: the controller validates key names without Xlib."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(keys))
    nodes = list(ast.walk(tree))
    imported = {a.name for n in nodes if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in nodes if isinstance(n, ast.ImportFrom)}
    assert not any(name.startswith("Xlib") for name in imported)


def test_keysym_table_agrees_with_python_xlib() -> None:
    """The committed table matches python-xlib's keysymdef wherever python-xlib is installed."""
    import importlib

    source: dict[str, int] = {}
    for group in ("latin1", "miscellany", "xkb", "xf86"):
        module = importlib.import_module(f"Xlib.keysymdef.{group}")
        for attr in dir(module):
            if attr.startswith("XK_"):
                name = attr[3:]
                if group == "xf86":
                    name = "XF86" + name[len("XF86_") :].removeprefix("XF86")
                source[name] = getattr(module, attr)
    for name, value in keys.KEYSYM_VALUES.items():
        assert source.get(name) == value, name
    for group in ("latin1", "miscellany"):  # taken whole
        module = importlib.import_module(f"Xlib.keysymdef.{group}")
        for attr in dir(module):
            if attr.startswith("XK_"):
                assert attr[3:] in keys.KEYSYM_VALUES, attr
