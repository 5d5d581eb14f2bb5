"""Reads the desktop applications' accessibility trees over AT-SPI, once per call.

The applications runner (:mod:`deskpod.agentd.apps_runner`) runs this file as a program of
its own, ``/usr/bin/python3 -I atspi_reader.py``, one process per question, with the zone's
D-Bus session bus in ``DBUS_SESSION_BUS_ADDRESS``: the applications register on that bus's
accessibility bus (at-spi2-core's ``org.a11y.Bus``, started on demand), which only the zone's
processes reach. It reads the question as JSON on stdin and writes one JSON answer on stdout.
A hostile or stuck application can make the AT-SPI library block or fail: every D-Bus call
is bounded by :data:`CALL_TIMEOUT_MS`, the runner kills the process after its own deadline,
and nothing this process prints is trusted on the way up (the runner and agentd validate it).

AT-SPI is reached through ``pyatspi``, the Python binding of GNOME's AT-SPI library as Debian
packages it (``python3-pyatspi``, with ``at-spi2-core``; https://gitlab.gnome.org/GNOME/pyatspi2),
hence the system interpreter: the package's virtual environment does not see Debian's Python
packages. This file imports nothing but the standard library and ``pyatspi``.

The question: ``point`` ([x, y], screen pixels) and ``window`` (the screen box [x0, y0, x1,
y1] of the X window on top there) and ``window_title`` (its title): the deepest accessible at
that point in the application window whose box and name they are; ``focus_window`` and
``focus_title`` (the X window with the keyboard focus): the control with the focus there; ``summary``: that window's tree, at most ``max_nodes``
nodes. The answer: ``at``, ``focused`` (a node or ``null``), ``nodes``, ``truncated`` and
``dialog`` (that window when it is a dialog: its ``role``, ``title``, ``app``, ``message`` and
``buttons``, or ``null``);
a node is ``role``, ``name``, ``text`` (a text control's content, cut), ``states``, ``box``
(screen pixels), ``app`` (the application's own name) and ``depth``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

__all__ = [
    "CALL_TIMEOUT_MS", "DIALOG_ROLES", "MAX_DIALOG_PARTS", "MAX_FRAME_PX", "MAX_NAME_CHARS", "STATES", "TEXT_ROLES",
    "answer", "at_point", "main", "node", "walk", "windows",
]

CALL_TIMEOUT_MS = 800
"""Longest wait for one application's answer to one AT-SPI call, milliseconds."""

MAX_NAME_CHARS = 200
"""Longest name or text kept of one node, characters."""

MAX_WALK = 3000
"""Most accessibles visited by one question, across every search it makes."""

MAX_DEPTH = 40
"""Deepest level visited below an application window."""

MAX_CHILDREN = 200
"""Most children visited of one accessible."""

MAX_FRAME_PX = 48
"""Largest difference, pixels, between an edge of an X window's box and the same edge of its
application window's extents for the two to be the same window: a toolkit reports a
top-level's extents with the window manager's frame around it (GTK 3: its title bar and border),
the X server's box is the client window alone."""

DIALOG_ROLES = frozenset({"dialog", "alert", "file chooser"})
"""Roles of an application window that is a dialog: a message box (``alert``), a save prompt or
another ``dialog``, GTK's file chooser (``file chooser``)."""

MAX_DIALOG_PARTS = 12
"""Most labels and most buttons of a dialog the answer names."""

STATES = ("active", "checked", "editable", "focusable", "focused", "modal", "pressed", "selected",
          "sensitive", "showing")
"""The AT-SPI states a node reports (others are left out)."""

TEXT_ROLES = frozenset({"text", "paragraph", "entry", "password text", "terminal", "document text",
                        "document frame", "label", "heading"})
"""Roles whose text content is read (cut to :data:`MAX_NAME_CHARS`); ``password text`` is
read as ``None`` whatever it holds."""


class _Budget:
    """Counts accessibles visited against :data:`MAX_WALK`."""

    def __init__(self) -> None:
        self.left = MAX_WALK

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


def _cut(text: object) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    return " ".join(text.split())[:MAX_NAME_CHARS]


def _states(acc: Any, pyatspi: Any) -> list[str]:
    held = {pyatspi.stateToString(s) for s in acc.getState().getStates()}
    return [s for s in STATES if s in held]


def _box(acc: Any, pyatspi: Any) -> list[int] | None:
    try:
        x, y, w, h = acc.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
    except NotImplementedError:
        return None
    if w <= 0 or h <= 0 or x < -(1 << 20) or y < -(1 << 20):
        return None
    return [x, y, x + w, y + h]


def _text(acc: Any, role: str) -> str | None:
    if role not in TEXT_ROLES or role == "password text":
        return None
    try:
        text = acc.queryText()
        return _cut(text.getText(0, min(text.characterCount, MAX_NAME_CHARS * 4)))
    except NotImplementedError:
        return None


def node(acc: Any, app: str | None, depth: int, pyatspi: Any) -> dict[str, Any]:
    """One accessible as the answer carries it (see the module)."""
    role = str(acc.getRoleName())
    return {"role": role[:MAX_NAME_CHARS], "name": _cut(acc.name), "text": _text(acc, role),
            "states": _states(acc, pyatspi), "box": _box(acc, pyatspi), "app": _cut(app), "depth": depth}


def _children(acc: Any, budget: _Budget) -> Iterator[Any]:
    for i in range(min(acc.childCount, MAX_CHILDREN)):
        if not budget.take():
            return
        child = acc.getChildAtIndex(i)
        if child is not None:
            yield child


def _showing(acc: Any, pyatspi: Any) -> bool:
    return bool(acc.getState().contains(pyatspi.STATE_SHOWING))


def windows(desktop: Any, budget: _Budget, pyatspi: Any) -> list[tuple[Any, str | None, list[int]]]:
    """Every showing application window: (accessible, its application's name, its box)."""
    found = []
    for app in _children(desktop, budget):
        for top in _children(app, budget):
            if _showing(top, pyatspi) and (box := _box(top, pyatspi)) is not None:
                found.append((top, app.name, box))
    return found


def _matching(tops: list[tuple[Any, str | None, list[int]]], box: list[int] | None, title: str | None
              ) -> list[tuple[Any, str | None, list[int]]]:
    """The application windows whose extents are ``box`` with at most a window manager's frame
    around it (:data:`MAX_FRAME_PX`): first those named ``title`` (the X window's; maximized
    windows share one box), then the closest."""
    if box is None:
        return []

    def edges(top: tuple[Any, str | None, list[int]]) -> list[int]:
        return [abs(a - b) for a, b in zip(top[2], box, strict=True)]

    return sorted((t for t in tops if max(edges(t)) <= MAX_FRAME_PX),
                  key=lambda t: (_cut(t[0].name) != _cut(title), sum(edges(t))))


def at_point(top: Any, app: str | None, x: int, y: int, budget: _Budget, pyatspi: Any) -> dict[str, Any]:
    """The deepest accessible at screen point (``x``, ``y``) in the window ``top``."""
    here, depth = top, 0
    while depth < MAX_DEPTH and budget.take():
        try:
            child = here.queryComponent().getAccessibleAtPoint(x, y, pyatspi.DESKTOP_COORDS)
        except NotImplementedError:
            break
        if child is None or child == here:
            break
        here, depth = child, depth + 1
    return node(here, app, depth, pyatspi)


def walk(top: Any, app: str | None, budget: _Budget, pyatspi: Any) -> Iterator[tuple[Any, int]]:
    """The showing accessibles of ``top``, depth first, with their depth."""
    stack = [(top, 0)]
    while stack:
        acc, depth = stack.pop()
        yield acc, depth
        if depth < MAX_DEPTH:
            kids = [c for c in _children(acc, budget) if _showing(c, pyatspi)]
            stack.extend((c, depth + 1) for c in reversed(kids))


def _dialog(top: Any, app: str | None, pyatspi: Any) -> dict[str, Any] | None:
    """The window ``top`` as a dialog (its role, title, app, and then its message and buttons, filled
    as its tree is walked), or ``None`` when it is not one (:data:`DIALOG_ROLES`)."""
    role = str(top.getRoleName())
    if role not in DIALOG_ROLES:
        return None
    return {"role": role, "title": _cut(top.name), "app": _cut(app), "message": [], "buttons": []}


def _note(dialog: dict[str, Any], acc: Any) -> None:
    """Add ``acc`` to ``dialog``'s message (a label) or buttons (a push button), within their caps."""
    role = str(acc.getRoleName())
    if role == "label" and len(dialog["message"]) < MAX_DIALOG_PARTS and (text := _cut(acc.name)):
        dialog["message"].append(text)
    elif role == "push button" and len(dialog["buttons"]) < MAX_DIALOG_PARTS and (name := _cut(acc.name)):
        dialog["buttons"].append(name)


def answer(question: dict[str, Any], pyatspi: Any) -> dict[str, Any]:
    """The answer to ``question`` (see the module)."""
    pyatspi.setTimeout(CALL_TIMEOUT_MS, CALL_TIMEOUT_MS)
    budget = _Budget()
    tops = windows(pyatspi.Registry.getDesktop(0), budget, pyatspi)
    out: dict[str, Any] = {"at": None, "focused": None, "nodes": [], "truncated": False, "dialog": None}
    point = question.get("point")
    for top, app, _ in _matching(tops, question.get("window"), question.get("window_title"))[:1]:
        if point is not None:
            out["at"] = at_point(top, app, int(point[0]), int(point[1]), budget, pyatspi)
    max_nodes = int(question.get("max_nodes") or 0)
    for top, app, _ in _matching(tops, question.get("focus_window"), question.get("focus_title"))[:1]:
        dialog = out["dialog"] = _dialog(top, app, pyatspi)
        for acc, depth in walk(top, app, budget, pyatspi):
            if question.get("summary") and len(out["nodes"]) < max_nodes:
                out["nodes"].append(node(acc, app, depth, pyatspi))
            elif question.get("summary"):
                out["truncated"] = True
            if out["focused"] is None and acc.getState().contains(pyatspi.STATE_FOCUSED):
                out["focused"] = node(acc, app, depth, pyatspi)
            if dialog is not None:
                _note(dialog, acc)
            elif out["focused"] is not None and not question.get("summary"):
                break
        if dialog is not None:
            dialog["message"] = _cut(" ".join(dialog["message"]))
    out["truncated"] = out["truncated"] or budget.left < 0
    return out


def main() -> None:
    """Answer the question on stdin (see the module); an error is printed as ``{"error": ...}``."""
    try:
        import pyatspi  # Debian's package, present only in the applications' zone

        print(json.dumps(answer(json.loads(sys.stdin.read(65536)), pyatspi)))
    except Exception as exc:  # an application's failure is an answer, never a trace on stderr
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:200]}"}))


if __name__ == "__main__":
    main()
