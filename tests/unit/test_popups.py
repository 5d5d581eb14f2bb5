"""Following the popups (agentd/display/popups.py) from the root window's events: what was
created, mapped and destroyed since a mark. The real X server's events: tests/display/test_popups_display.py."""

from __future__ import annotations

from types import SimpleNamespace

from Xlib import X

from deskpod.agentd.display.popups import MAX_UNMAPPED, Popups


def _event(kind: int, window: int, override: bool = True) -> SimpleNamespace:
    return SimpleNamespace(type=kind, window=SimpleNamespace(id=window), override=override)


def test_a_popup_created_then_mapped_after_the_mark_is_reported_and_others_are_not() -> None:
    popups = Popups()
    popups.on_event(_event(X.CreateNotify, 1))  # before the mark, never mapped: not waited for
    mark = popups.seq
    assert popups.since(mark).created_at is None and popups.since(mark).mapped_at is None
    popups.on_event(_event(X.CreateNotify, 2, override=False))  # an ordinary window: not a popup
    popups.on_event(_event(X.MapNotify, 2, override=False))
    assert popups.seq == mark
    popups.on_event(_event(X.CreateNotify, 3))
    opened = popups.since(mark)
    assert opened.created_at is not None and opened.mapped_at is None
    popups.on_event(_event(X.MapNotify, 3))
    opened = popups.since(mark)
    assert opened.created_at is None and opened.mapped_at is not None
    assert popups.since(popups.seq).mapped_at is None


def test_a_popup_destroyed_before_it_maps_is_no_longer_waited_for_and_the_unmapped_are_bounded() -> None:
    popups = Popups()
    popups.on_event(_event(X.CreateNotify, 7))
    popups.on_event(_event(X.DestroyNotify, 7))
    assert popups.since(0).created_at is None
    for window in range(100, 100 + 3 * MAX_UNMAPPED):
        popups.on_event(_event(X.CreateNotify, window))
    assert len(popups._unmapped) == MAX_UNMAPPED
