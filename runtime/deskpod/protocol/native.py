"""Native controls of the desktop applications, read from their accessibility trees.

A desktop application (:mod:`deskpod.protocol.apps`) has no DOM: what its controls are comes
from AT-SPI, the accessibility interface of the Linux desktop
(https://docs.gtk.org/atk/ and https://gitlab.gnome.org/GNOME/at-spi2-core), on the
applications' zone's own accessibility bus. The observation carries the control at
``element_at``'s point in an application's window
(:attr:`~deskpod.protocol.Observation.native_at`), the control with the keyboard focus in the
application window that has it (:attr:`~deskpod.protocol.Observation.native_focused`), that
window as a dialog when it is one (:attr:`~deskpod.protocol.Observation.native_dialog`) and,
with ``accessibility``, its tree (:attr:`~deskpod.protocol.Observation.native_accessibility`).
The controller judges native actions by them as it judges the page's by the DOM.

Everything here is the application's own words, as untrusted as a page's: a hostile program
can name a "Delete" button "Cancel". A terminal (xterm) has no accessibility tree: its windows
carry none of these.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, get_args

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT
from deskpod.protocol.actions import ElementRef

__all__ = ["MAX_NATIVE_NODES", "MAX_NATIVE_TEXT_CHARS", "NATIVE_STATES", "NativeDialog", "NativeElement", "NativeNode",
           "NativeState"]

MAX_NATIVE_NODES: Final = 300
"""Most nodes of an application window's tree an observation carries."""

MAX_NATIVE_TEXT_CHARS: Final = 200
"""Longest name or text of one native control, characters (longer ones are cut)."""

NativeState = Literal["active", "checked", "editable", "focusable", "focused", "modal", "pressed", "selected",
                      "sensitive", "showing"]
"""An AT-SPI state a native control reports (others are not carried)."""

NATIVE_STATES: Final[tuple[str, ...]] = get_args(NativeState)
"""Every :data:`NativeState`, in order."""

_Text = Annotated[str, Field(max_length=MAX_NATIVE_TEXT_CHARS)]
_Coord = Annotated[int, Field(strict=True, ge=-(1 << 20), le=1 << 20)]


class NativeElement(BaseModel):
    """One native control. ``role``: its AT-SPI role name (``"push button"``, ``"menu item"``,
    ``"check box"``, ``"text"``...); ``name``: its accessible name; ``text``: a text control's
    or a label's content (cut; never a password field's); ``states``: of :data:`NATIVE_STATES`;
    ``box``: [x0, y0, x1, y1] in the model space (``None``: not on screen); ``app``: the
    application's own name for itself (``"mousepad"``, ``"zenity"``: the program's words, not
    :attr:`~deskpod.protocol.AgentWindow.source`)."""

    model_config = STRICT
    role: _Text
    name: _Text | None = None
    text: _Text | None = None
    states: Annotated[list[NativeState], Field(max_length=len(NATIVE_STATES))] = []
    box: Annotated[list[_Coord], Field(min_length=4, max_length=4)] | None = None
    app: _Text | None = None


class NativeNode(NativeElement):
    """A node of an application window's tree: a :class:`NativeElement`, its ``depth`` below
    the window (0) and, for one with a box, its ``ref`` (``nN``), which the element actions
    (``click_element``, ``type_element``, ``hover_element``, ``drag_element``) take as they take a
    page's ``eN``: they land at the centre of its box, judged by the native control there."""

    depth: Annotated[int, Field(strict=True, ge=0, le=100)] = 0
    ref: ElementRef | None = None


class NativeDialog(BaseModel):
    """The desktop application window with the keyboard focus, when it is a dialog: ``role``
    ``"alert"`` (a message box), ``"dialog"`` (a save prompt, a settings dialog...) or ``"file
    chooser"`` (GTK's open or save dialog); ``title``, ``app`` (the application's own name),
    ``message`` (its labels' text, joined and cut) and ``buttons`` (its push buttons' names, at
    most 12). The application's own words: untrusted."""

    model_config = STRICT
    role: Literal["dialog", "alert", "file chooser"]
    title: _Text | None = None
    app: _Text | None = None
    message: _Text | None = None
    buttons: Annotated[list[_Text], Field(max_length=12)] = []
