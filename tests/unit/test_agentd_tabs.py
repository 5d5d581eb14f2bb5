"""The browser's tabs, the pure parts (no Docker, no X): which tab is in front while a
JavaScript dialog keeps the pages from answering the visibility probe
(agentd/browser/targets.py), and the tab-switching keys the daemon carries out beside such a
dialog (agentd/browser/tab_keys.py). The real thing runs in tests/integration/test_tabs.py."""

from __future__ import annotations

import asyncio

from deskpod.agentd.browser.tab_keys import strip_order, switched_to, tab_move, titled_front, titled_page
from deskpod.agentd.browser.targets import front_page


def _page(target: str, opener: str | None = None) -> dict[str, str]:
    page = {"targetId": target, "type": "page", "url": f"http://x.test/{target}"}
    if opener is not None:
        page["openerId"] = opener
    return page


def test_a_popup_opened_since_the_last_look_is_in_front() -> None:
    """A popup that alerts on load: the opener was in front at the last look, the popup is
    new and the screen shows it (on main the reply named the opener)."""
    pages = [_page("popup", opener="opener"), _page("opener")]
    assert front_page(pages, "opener", {"opener"})["targetId"] == "popup"


def test_the_newest_of_several_opened_pages_is_in_front() -> None:
    pages = [_page("second", opener="opener"), _page("first", opener="opener"), _page("opener")]
    assert front_page(pages, "opener", {"opener"})["targetId"] == "second"


def test_without_a_newly_opened_page_the_one_in_front_stays() -> None:
    """A dialog in a background tab: the pages are those of the last look, so the tab found
    in front then stays in front (a tab the user opened is not opened by a page)."""
    pages = [_page("typed"), _page("child", opener="opener"), _page("opener")]
    assert front_page(pages, "child", {"child", "opener"})["targetId"] == "child"
    assert front_page(pages, "opener", {"child", "opener"})["targetId"] == "opener"


def test_a_front_page_that_went_away_gives_the_newest() -> None:
    pages = [_page("b"), _page("a")]
    assert front_page(pages, "gone", {"a", "b"})["targetId"] == "b"


def test_a_popup_window_beside_its_visible_opener_is_in_front() -> None:
    """Both answer the probe visible (a popup window does not hide its opener): the popup,
    new since the last look, is in front."""
    pages = [_page("popup", opener="opener"), _page("opener")]
    assert front_page(pages, "opener", {"opener"}, {"popup", "opener"})["targetId"] == "popup"


def test_a_hidden_page_is_not_in_front_even_when_newly_opened() -> None:
    """A link opened in a background tab (ctrl+click) is hidden: the current tab stays."""
    pages = [_page("background", opener="opener"), _page("opener")]
    assert front_page(pages, "opener", {"opener"}, {"opener"})["targetId"] == "opener"
    assert front_page(pages, "opener", {"opener"}, set())["targetId"] == "background"


def test_tab_switching_keys_are_chromiums() -> None:
    """Chromium's shortcuts on Linux (tab_keys.py), as resolve_chord spells them; any other
    chord is pressed as it is."""
    assert tab_move(["Control_L", "Tab"]) == tab_move(["Control_R", "Page_Down"]) == ("step", 1)
    assert tab_move(["Control_L", "Next"]) == ("step", 1)
    assert tab_move(["Control_L", "Shift_L", "Tab"]) == tab_move(["Control_L", "ISO_Left_Tab"]) == ("step", -1)
    assert tab_move(["Control_L", "Page_Up"]) == tab_move(["Control_L", "Prior"]) == ("step", -1)
    assert tab_move(["Control_L", "1"]) == ("place", 0) and tab_move(["Control_L", "8"]) == ("place", 7)
    assert tab_move(["Control_L", "9"]) == ("place", -1)
    for other in (["Tab"], ["Control_L", "t"], ["Control_L", "Shift_L", "Page_Down"], ["Alt_L", "1"],
                  ["Control_L", "Alt_L", "Tab"], ["Control_L", "0"], ["Control_L", "1", "2"], ["Escape"]):
        assert tab_move(other) is None, other


def test_the_strip_order_puts_an_opened_tab_just_right_of_its_opener() -> None:
    """DevTools lists the tabs in no fixed order: they are ordered by when the daemon first
    saw them, each opened one just right of its opener (an older child further right)."""
    created = {"start": 0, "typed": 1, "child1": 2, "child2": 3}
    pages = [_page("child2", opener="start"), _page("typed"), _page("child1", opener="start"), _page("start")]
    assert strip_order(pages, created) == ["start", "child2", "child1", "typed"]
    assert strip_order([_page("b"), _page("a")], {"a": 0}) == ["b", "a"], "one not seen counts as the oldest"


def test_a_tab_switching_key_names_the_tab_it_brings_to_the_front() -> None:
    order = ["a", "b", "c"]
    assert switched_to(("step", 1), order, "c") == "a" and switched_to(("step", -1), order, "a") == "c"
    assert switched_to(("step", 1), order, "a") == "b"
    assert switched_to(("place", 1), order, "a") == "b" and switched_to(("place", -1), order, "a") == "c"
    assert switched_to(("place", 5), order, "a") is None, "no tab at that place: nothing happens"
    assert switched_to(("step", 1), order, "gone") is None


def test_the_window_title_names_the_tab_a_click_brought_to_the_front() -> None:
    pages = [{**_page("form"), "title": "fixture: form"}, {**_page("opener"), "title": "fixture: dialogs"}]
    assert titled_page(pages, "form", "fixture: dialogs - Chromium")["targetId"] == "opener"  # type: ignore[index]
    assert titled_page(pages, "form", "fixture: form - Chromium") is None
    assert titled_page(pages, "form", None) is None and titled_page(pages, "form", "xterm") is None
    same = [{**_page("form"), "title": "fixture: dialogs"}, pages[1]]
    assert titled_page(same, "form", "fixture: dialogs - Chromium") is None, "a page titled like the front moves nothing"
    untitled = [{**_page("form"), "title": ""}, pages[1]]
    assert titled_page(untitled, "form", "fixture: dialogs - Chromium") is None


def test_a_page_copying_the_front_tabs_title_cannot_hide_a_click_on_another_tab() -> None:
    """Beside a dialog, a click on a tab's strip is seen only in the window's title. A hostile
    page that took the title of the tab it expects the agent to switch to (``"Bank - Transfer"``)
    stayed in front for the daemon while the screen showed the bank's tab, so the next click, on
    the bank's page, was judged against the hostile page's control there (on main: no
    ``titled_front``, and ``titled_page`` kept the copier). The pages the title names are asked
    whether they are visible, and only they."""
    pages = [{**_page("copier"), "title": "Bank - Transfer"}, {**_page("bank"), "title": "Bank - Transfer"},
             {**_page("dialog"), "title": "asks"}]
    asked: list[str] = []

    async def probe(target: str) -> bool | None:
        asked.append(target)
        return {"copier": False, "bank": True}.get(target)

    shown = asyncio.run(titled_front(pages, "copier", "Bank - Transfer - Chromium", probe))
    assert shown is not None and shown["targetId"] == "bank"
    assert sorted(asked) == ["bank", "copier"]
    assert titled_page(pages, "copier", "Bank - Transfer - Chromium", {"copier"}) is None  # it is in front
    assert titled_page(pages, "copier", "Bank - Transfer - Chromium", set()) is None  # none can tell: it stays
    assert titled_page(pages, "copier", "Bank - Transfer - Chromium", {"copier", "bank"}) is None
    # From the dialog's tab too: the newest page so titled is not taken for the one shown.
    asked.clear()
    moved = asyncio.run(titled_front(pages, "dialog", "Bank - Transfer - Chromium", probe))
    assert moved is not None and moved["targetId"] == "bank" and sorted(asked) == ["bank", "copier"]
    assert titled_page(pages, "dialog", "Bank - Transfer - Chromium", set()) is None
    asked.clear()
    assert asyncio.run(titled_front(pages, "bank", "asks - Chromium", probe)) == pages[2] and asked == []
