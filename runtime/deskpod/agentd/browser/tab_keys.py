"""Chromium's tab-switching keys, for when a JavaScript dialog makes Chromium drop them.

While a dialog is open in a tab, Chromium ignores the input of every tab of that tab's
renderer process ("While a JS message dialog is showing, tabs in the same process
shouldn't process input events": ``WebContentsImpl::RunJavaScriptDialog``), and it drops
a key event to such a tab before looking for its own shortcuts. So with a dialog open in
a background tab (a page that asks after it opened a tab, an opener asked by its popup),
Ctrl+Tab, Ctrl+PageDown or Ctrl+1 pressed in the tab in front, which shares that
renderer, do nothing: the user's way to the dialog, short of clicking its tab, is lost.
The daemon then carries such a key out itself through DevTools
(:meth:`deskpod.agentd.browser.tab_switch.TabSwitching.switch_tab`): the tab the key names comes to
the front, Chromium shows its dialog there, and Escape or Return answer it as they
answer any dialog in the tab in front.

The keys are Chromium's on Linux (its keyboard shortcuts page,
https://support.google.com/chrome/answer/157179): Ctrl+Tab and Ctrl+PageDown the next
tab, Ctrl+Shift+Tab and Ctrl+PageUp the previous one (both wrap around), Ctrl+1 to
Ctrl+8 the tab at that place, Ctrl+9 the last tab. Keys are keysym names as
:func:`deskpod.keys.resolve_chord` gives them.

DevTools names no tab's place in the tab strip (nor lists the tabs in any fixed order),
so :func:`strip_order` rebuilds it from the order the daemon first saw the pages in, as
Chromium fills it (``TabStripModelOrderController::DetermineInsertionIndex``): a page
another page opened (``window.open``, a ``target=_blank`` link) goes just right of its
opener, any other page at the end.

A tab the user brings to the front by a click on the tab strip is not seen either: the
pages of the dialog's renderer cannot answer the daemon's visibility probe. Chromium
titles its window after the active tab, so :func:`titled_page` names the tab the
window's title names (:meth:`deskpod.agentd.browser.targets.BrowserTargets._ordered_pages`
asks for it then); a title that names several pages (a page may copy the front tab's title)
is settled by asking just those pages whether they are visible (:func:`titled_front`).
Everything here is pure but for the probe :func:`titled_front` is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["strip_order", "switched_to", "tab_move", "title_named", "titled_front", "titled_page"]

_CONTROL = frozenset({"Control_L", "Control_R"})
_SHIFT = frozenset({"Shift_L", "Shift_R"})
_NEXT = frozenset({"Tab", "Page_Down", "Next"})
_PREVIOUS = frozenset({"Page_Up", "Prior", "ISO_Left_Tab"})
_PLACES = {str(n): n - 1 for n in range(1, 9)}


def tab_move(keysyms: list[str]) -> tuple[str, int] | None:
    """What a chord does to the tabs: ``("step", 1)`` the next tab, ``("step", -1)`` the
    previous one, ``("place", i)`` the tab at 0-based place ``i`` (``-1``: the last);
    ``None`` for any other chord.

    Args:
        keysyms: one chord, modifiers first (:func:`deskpod.keys.resolve_chord`).
    """
    modifiers = {k for k in keysyms if k in _CONTROL | _SHIFT}
    others = [k for k in keysyms if k not in modifiers]
    if len(others) != 1 or not modifiers & _CONTROL:
        return None
    key, shifted = others[0], bool(modifiers & _SHIFT)
    if key in ("Tab", "ISO_Left_Tab") and shifted:
        return ("step", -1)
    if shifted:
        return None
    if key in _NEXT:
        return ("step", 1)
    if key in _PREVIOUS:
        return ("step", -1)
    if key in _PLACES:
        return ("place", _PLACES[key])
    return ("place", -1) if key == "9" else None


def strip_order(pages: list[dict[str, Any]], created: dict[str, int]) -> list[str]:
    """The ids of ``pages`` (``Target.getTargets`` infos of one window, in any order) in the
    order of the window's tab strip (see the module docstring).

    Args:
        pages: the window's page targets.
        created: when each page was first seen (larger: later); a page it does not name
            counts as the oldest.
    """
    order: list[str] = []
    for page in sorted(pages, key=lambda p: created.get(str(p.get("targetId", "")), -1)):
        target, opener = str(page.get("targetId", "")), page.get("openerId")
        if opener in order:
            order.insert(order.index(opener) + 1, target)
        else:
            order.append(target)
    return order


def switched_to(move: tuple[str, int], order: list[str], front: str) -> str | None:
    """The tab ``move`` (:func:`tab_move`) brings to the front when ``front`` is there;
    ``None`` when it brings none (no tab at that place, ``front`` not in ``order``)."""
    if front not in order:
        return None
    kind, value = move
    if kind == "step":
        return order[(order.index(front) + value) % len(order)]
    if value == -1:
        return order[-1]
    return order[value] if value < len(order) else None


def title_named(pages: list[dict[str, Any]], window_title: str | None) -> list[dict[str, Any]]:
    """The pages the browser window's title could name, in the order of ``pages``: Chromium
    titles its window after the active tab (``"<tab title> - Chromium"``); a page's title is its
    own to choose, so several may fit.

    Args:
        pages: page targets.
        window_title: the active X window's title (``None``: none).
    """
    return [p for p in pages if window_title and p.get("title") and window_title.startswith(f"{p['title']} - ")]


def titled_page(pages: list[dict[str, Any]], front: str, window_title: str | None,
                visible: set[str] | None = None) -> dict[str, Any] | None:
    """The page the browser window's title names when it does not name ``front``
    (:func:`title_named`). A page may take another tab's title (so that a click on that tab's
    strip goes unseen, or is taken for a click on its own): when the title names several
    pages, the one of them in ``visible`` is, if only one is. ``None``: the title names
    ``front`` alone, or several pages none or more than one of which is visible, no page, is
    not known, or ``front`` has no title (Chromium then shows its URL, which any page could
    take as its title).

    Args:
        pages: page targets, the newest first.
        front: the id of the page taken as in front so far.
        window_title: the active X window's title.
        visible: the ids of the named pages that answered the visibility probe ``visible``
            (``None``: not asked).
    """
    named = title_named(pages, window_title)
    untitled = not any(p.get("targetId") == front and p.get("title") for p in pages)
    if not named or untitled:
        return None
    if len(named) > 1:
        named = [p for p in named if visible is not None and p.get("targetId") in visible]
        if len(named) != 1:
            return None
    return None if named[0].get("targetId") == front else named[0]


async def titled_front(pages: list[dict[str, Any]], front: str, window_title: str | None,
                       visible: Callable[[str], Awaitable[bool | None]]) -> dict[str, Any] | None:
    """:func:`titled_page`, the named pages asked ``visible`` (the daemon's visibility probe of a
    page by id: ``None`` when it cannot answer) only when the title names several pages."""
    named = [str(p.get("targetId", "")) for p in title_named(pages, window_title)]
    shown = {t for t in named if await visible(t) is True} if len(named) > 1 else None
    return titled_page(pages, front, window_title, shown)
