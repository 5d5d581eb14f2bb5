"""The element verbs of :class:`~deskpod.client.sandbox.Sandbox`: a snapshot with refs, and
acting on an element by its ``[ref=eN]`` (:mod:`deskpod.protocol.actions`).

Each verb is one ``act`` request; the daemon turns it into real input at the element's
box (:mod:`deskpod.agentd.browser.elements`). A ref is valid until the next snapshot: a stale one
raises :class:`~deskpod.errors.StaleRefError` and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from deskpod.client.wire import SandboxClient
from deskpod.client.workspace import ObserveLike, observe_options
from deskpod.protocol import Observation, ObserveOptions

__all__ = ["ElementVerbs"]


class ElementVerbs:
    """The element verbs, on the connection :attr:`client` (a base of :class:`~deskpod.client.sandbox.Sandbox`)."""

    client: SandboxClient
    """The connection the requests go to."""

    async def element_snapshot(self, *, max_nodes: int = 300, screenshot: bool = False) -> Observation:
        """Read the page's accessibility tree with a ref on each actionable node.

        Args:
            max_nodes: most lines.
            screenshot: take a screenshot with it (the one the refs' screen check compares with).

        Returns:
            The observation; its ``snapshot`` holds the text (``- role "name" [ref=eN]``),
            ``None`` when the page could not be read (``unread`` says why).
        """
        return await self.client.act([], ObserveOptions(snapshot=True, max_ax_nodes=max_nodes,
                                                        screenshot=screenshot))

    async def _element(self, action: dict[str, Any], observe: ObserveLike) -> Observation:
        return await self.client.act([action], observe_options(observe))

    async def click_element(self, ref: str, *, button: Literal["left", "right", "middle"] = "left",
                            count: Literal[1, 2, 3] = 1, observe: ObserveLike = None) -> Observation:
        """Click the element ``ref`` (``count`` clicks of ``button`` at its box's centre).

        Raises:
            StaleRefError: ``ref`` is not valid now; nothing was pressed.
        """
        return await self._element({"type": "click_element", "ref": ref, "button": button, "count": count}, observe)

    async def type_element(self, ref: str, text: str, *, submit: bool = False,
                           observe: ObserveLike = None) -> Observation:
        """Replace what the element ``ref`` holds with ``text`` (click, ``ctrl+a``, typing;
        Return with ``submit``).

        Raises:
            StaleRefError: ``ref`` is not valid now; nothing was typed.
        """
        return await self._element({"type": "type_element", "ref": ref, "text": text, "submit": submit}, observe)

    async def select_option(self, ref: str, values: Sequence[str], *, by: Literal["label", "value"] = "label",
                            observe: ObserveLike = None) -> Observation:
        """Select the options with these labels (``by="value"``: values, or labels, as Playwright's
        ``selectOption``) in the ``<select>`` ``ref`` (:class:`~deskpod.protocol.SelectOption`).

        Raises:
            StaleRefError: ``ref`` is not valid now.
            InvalidActionError: it is not a select, or an option is missing.
        """
        return await self._element({"type": "select_option", "ref": ref, "values": list(values), "by": by}, observe)

    async def hover_element(self, ref: str, *, observe: ObserveLike = None) -> Observation:
        """Move the pointer to the centre of the element ``ref``.

        Raises:
            StaleRefError: ``ref`` is not valid now.
        """
        return await self._element({"type": "hover_element", "ref": ref}, observe)

    async def drag_element(self, ref: str, to_ref: str, *, observe: ObserveLike = None) -> Observation:
        """Drag the element ``ref`` onto the element ``to_ref`` (a left-button drag between their
        centres).

        Raises:
            StaleRefError: a ref is not valid now.
        """
        return await self._element({"type": "drag_element", "ref": ref, "to_ref": to_ref}, observe)

    async def fill_form(self, fields: Mapping[str, str], *, observe: ObserveLike = None) -> Observation:
        """Fill fields by ref, in order: ``{ref: value}`` (text typed, an option chosen, a
        checkbox set to ``"true"``/``"false"``).

        Raises:
            StaleRefError: a ref is not valid now; fields before it were filled.
        """
        return await self._element({"type": "fill_form", "fields": [{"ref": r, "value": v} for r, v in fields.items()]},
                                   observe)
