"""The browser's tabs, the pure parts (no Docker, no X): which tab is in front while a
JavaScript dialog keeps the pages from answering the visibility probe
(agentd/browser/targets.py). The real thing runs in tests/integration/test_tabs.py."""

from __future__ import annotations

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
