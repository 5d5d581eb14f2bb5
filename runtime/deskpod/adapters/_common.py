"""Helpers shared by the vendor adapters: building protocol actions, and the screen the model saw.

A vendor's pointer action is planned on the screenshot the adapter last returned to the
model: its points are that image's pixels, and the screen under them must still be the
one the image showed. :func:`shown` keeps, per sandbox connection, that screenshot
(:class:`ShownScreen`); both adapters' ``execute`` map the points of a call from the
image to the model space through it (an image the daemon scaled down to fit the vendors'
limits, :attr:`~deskpod.protocol.Screenshot.fitted` ``"downscaled"``, is smaller than the
model space) and bind the call to it with the controller's own binding
(:func:`deskpod.protocol.expect.expectation`): the daemon refuses a click planned on a
screen that has since shifted with ``screen_changed`` and sends nothing.
:func:`display_size` is the size a tool definition declares: the images actually sent.
The model agents (:mod:`deskpod.agents`) keep a :class:`ShownScreen` of their own, fed the
observations whose screenshots they send.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from deskpod.errors import InvalidActionError, UnknownActionError
from deskpod.protocol import Action, Observation, Point, ScreenExpectation, Size, parse_action
from deskpod.protocol.expect import expectation

__all__ = [
    "CHOOSER_NOTE", "ShownScreen", "UNRESPONSIVE_NOTE", "build", "display_size", "point", "require", "shown", "state_note",
    "unknown",
]


CHOOSER_NOTE = ("A file chooser is open (no window shows it): type the path of a workspace file (for example "
                "/workspace/report.pdf; one a line for several) and press Return to choose it, or press Escape "
                "to cancel.")
"""What the vendor formats tell the model while a file chooser is reported: the controller
reads typing and Return then as the chooser's answer (:mod:`deskpod.controller.gui.chooser`)."""


UNRESPONSIVE_NOTE = ("The page in the front tab is not responding (a script on it never ends): press ctrl+w "
                     "(key action) to close that tab, or wait for it.")
"""What the vendor formats tell the model while the tab in front is listed unresponsive: their
computer tools have no ``recover_tab`` (an operator's policy may recover it by itself:
:mod:`deskpod.controller.gui.recovery`), and closing the tab recovers."""


def state_note(observation: Observation) -> str | None:
    """What the screenshot cannot say about ``observation``: :data:`CHOOSER_NOTE` while it
    reports the page's file chooser (an application's file dialog is on the screen), :data:`UNRESPONSIVE_NOTE` while the tab in front does not answer
    (both, in that order, when both hold); ``None`` when neither does."""
    front = observation.tabs[0].id if observation.tabs else None
    notes = [note for note, holds in (
        (CHOOSER_NOTE, observation.file_chooser is not None and observation.file_chooser.application is None),
        (UNRESPONSIVE_NOTE, front is not None and any(p.tab_id == front for p in observation.unresponsive)),
    ) if holds]
    return " ".join(notes) or None


def build(data: dict[str, Any]) -> Action:
    """Validate a protocol action built by an adapter (errors name the vendor field)."""
    return parse_action(data)


def require(source: dict[str, Any], key: str, vendor_action: str) -> Any:
    """Return ``source[key]`` or raise :class:`InvalidActionError` naming it."""
    if key not in source:
        raise InvalidActionError(f"{vendor_action}: missing {key!r}", detail={"action": vendor_action, "field": key})
    return source[key]


def point(value: Any, vendor_action: str, key: str = "coordinate") -> tuple[Any, Any]:
    """Read an ``[x, y]`` pair (Anthropic's ``coordinate``)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidActionError(
            f"{vendor_action}: {key!r} must be [x, y]", detail={"action": vendor_action, "field": key}
        )
    return value[0], value[1]


def unknown(vendor: str, name: Any, known: list[str]) -> UnknownActionError:
    """The error for an action a vendor format does not define (or deskpod does not support)."""
    shown_name = name if isinstance(name, str) else repr(name)[:64]
    return UnknownActionError(
        f"unknown {vendor} action {shown_name!r}; supported: {', '.join(known)}",
        detail={"action": shown_name, "vendor": vendor},
    )


class ShownScreen:
    """The screenshot an adapter last returned to the model on one sandbox connection
    (see the module). ``observation``: the observation it came with (``None``: none yet)."""

    def __init__(self) -> None:
        self.observation: Observation | None = None

    def returned(self, observation: Observation) -> None:
        """Remember ``observation`` as the one whose screenshot the model was just given."""
        if observation.screenshot is not None:
            self.observation = observation

    def image_size(self, model: Size) -> Size:
        """The size of that screenshot, pixels (``model``, the model space, before the first)."""
        shot = self.observation.screenshot if self.observation is not None else None
        return model if shot is None else Size(width=shot.width, height=shot.height)

    def bind(self, actions: Sequence[Action], model: Size) -> tuple[list[Action], ScreenExpectation | None]:
        """``actions`` as planned on that screenshot, ready to send.

        Args:
            actions: the call's actions, points in the image's pixels.
            model: the model space in force (``SandboxClient.model_size``).

        Returns:
            The actions with their points in the model space, and the expectation binding
            them to the screenshot (``None``: no screenshot yet, or no bound pointer action).
        """
        mapped = self.to_model(actions, model)
        seen = self.observation
        if seen is None:
            return mapped, None
        bound = (expectation(a, seen, seen) for a in mapped)
        return mapped, next((e for e in bound if e is not None), None)

    def to_model(self, actions: Sequence[Action], model: Size) -> list[Action]:
        """``actions`` with every point they name (``x``/``y``, a drag's ``path``, a zoom's
        ``region``) mapped from that screenshot's pixels to the model space ``model``
        (unchanged when the image is the model space's size).

        Raises:
            InvalidActionError: a mapped action fails the protocol's validation.
        """
        image = self.image_size(model)
        fx, fy = model.width / image.width, model.height / image.height
        return list(actions) if (fx, fy) == (1.0, 1.0) else [_scaled(a, fx, fy) for a in actions]

    def to_image(self, where: Point, model: Size) -> Point:
        """A model-space point (the cursor's) in that screenshot's pixels."""
        image = self.image_size(model)
        return Point(x=min(image.width - 1, round(where.x * image.width / model.width)),
                     y=min(image.height - 1, round(where.y * image.height / model.height)))


def _scaled(action: Action, fx: float, fy: float) -> Action:
    """``action`` with every point it names scaled by ``fx``/``fy`` (image pixels → model space)."""
    data = action.model_dump(mode="json")
    if data.get("x") is not None:
        data["x"], data["y"] = round(data["x"] * fx), round(data["y"] * fy)
    if "path" in data:
        data["path"] = [{"x": round(p["x"] * fx), "y": round(p["y"] * fy)} for p in data["path"]]
    if "region" in data:
        x0, y0, x1, y1 = data["region"]
        data["region"] = [round(x0 * fx), round(y0 * fy), round(x1 * fx), round(y1 * fy)]
    return build(data)


_SHOWN: dict[int, ShownScreen] = {}
"""Each live connection's :class:`ShownScreen`, by the connection's ``id`` (a connection
need not be hashable); an entry goes when its connection is collected."""


def shown(client: Any) -> ShownScreen:
    """The :class:`ShownScreen` of ``client`` (a sandbox connection), made on first use and
    dropped with the connection; both adapters share it, as the model sees one screen."""
    key = id(client)
    screen = _SHOWN.get(key)
    if screen is None:
        screen = _SHOWN[key] = ShownScreen()
        weakref.finalize(client, _SHOWN.pop, key, None)
    return screen


def display_size(client: Any) -> Size:
    """The size of the images the adapters send the model on ``client``: the screenshot they
    last returned, or the model space (``client.model_size``) before the first. Declare it in
    the tool definition (``anthropic.tool_definition(display_size(client))``) on every request:
    an image the daemon scaled down to fit the vendors' limits is smaller than the model space,
    and the model's coordinates are that image's pixels (the adapters map them back)."""
    size: Size = shown(client).image_size(client.model_size)
    return size
