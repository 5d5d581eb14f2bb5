"""Element actions in a run: judged, checked and logged as the pixels they land on.

An agent may name an element by the ``[ref=eN]`` of the latest snapshot instead of a
point (:data:`deskpod.protocol.ELEMENT_ACTION_TYPES`). The controller never judges the
ref's own label: right before the action it asks the daemon where the action would land
(``ObserveOptions.element_ref``: the centre of the element's box on screen, and the control
a click there activates, hit-tested through frames and shadow roots exactly as for a pixel
click) and replaces the element action by the pointer and key actions that do the same
(:func:`deskpod.protocol.pixel_actions`, the function the daemon runs them by): ``click_element`` is a ``click`` at that point, ``hover_element``
a ``move``, ``drag_element`` a ``drag`` from its ref's point to its ``to_ref``'s (judged at
that drop point, as a drag is), ``type_element`` a click, ``ctrl+a``, the typed text and, with ``submit``,
Return. Each of those then goes through the run's ordinary path: the same risk
classifier on the same control (its accessible role and name, its form, its link's
target), the same confirmation levels, the same screen check bound to the agent's
screenshot, the allowlist on every URL after it, and the same audit record (with the ref
it came from). So switching from coordinates to refs cannot lower a level: both are the
same input at the same pixels, judged by the same rules.

Two element actions have no pixel equivalent and go to the daemon as they are, judged as
a click on the control at the ref's point (:meth:`deskpod.controller.policy.risk.ActionClassifier`)
and bound to the screen like one: ``select_option`` (chosen through DevTools: a native
select's popup is not part of the page), whose chosen labels count as the control's label
too (one by value is first turned into the labels of the options its values choose,
:func:`by_label`, so what is judged, shown and run is always labels), and a ``fill_form`` field that is a checkbox, radio button or select (sent as a
one-field ``fill_form``: the daemon knows whether it is checked). A ``fill_form``'s text
fields become ``type_element`` pixels, one field after the other, so their text is judged
key by key as ``type`` is. Which kind a field is comes from
:func:`deskpod.protocol.form_field_kind` of the control hit at the ref's point, the
function the daemon fills it by; the daemon refuses a ref whose point another element
covers (``ref_obscured``), so that control is the ref's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from deskpod.controller.sandbox import SandboxAPI
from deskpod.errors import InvalidActionError, StaleRefError
from deskpod.protocol import (
    CHOICE_ROLES,
    Action,
    ClickElement,
    DragElement,
    ElementInfo,
    FillForm,
    HoverElement,
    Observation,
    ObserveOptions,
    SelectOption,
    TypeElement,
    form_field_kind,
    pixel_actions,
)

__all__ = ["CHOICE_ROLES", "action_ref", "by_label", "expand_element_action", "resolve_ref"]

_BY_REF = (ClickElement, TypeElement, SelectOption, HoverElement, DragElement)
"""The element actions that name one ref themselves (a ``fill_form`` names one per field)."""


def action_ref(action: Action) -> str | None:
    """The ref an element action acts on (a ``fill_form``'s first field's), else ``None``."""
    if isinstance(action, FillForm):
        return action.fields[0].ref
    return action.ref if isinstance(action, _BY_REF) else None


async def resolve_ref(client: SandboxAPI, ref: str, timeout_s: float) -> Observation:
    """Ask the daemon where an element action on ``ref`` lands and what control is there.

    Returns:
        An observation (no screenshot) whose ``element_ref_point`` is the point (model
        space) and ``element_at`` the control hit-tested there.

    Raises:
        StaleRefError: the ref is not valid now, or the daemon gave no point.
        DeskpodError: the sandbox failed.
    """
    obs = await client.act([], ObserveOptions(screenshot=False, element_ref=ref), timeout_s=timeout_s)
    if obs.element_ref_point is None:
        raise StaleRefError(f"the sandbox gave no point for ref {ref!r}", detail={"reason": "unknown_ref", "ref": ref})
    return obs


async def expand_element_action(client: SandboxAPI, action: Action, timeout_s: float
                                ) -> tuple[list[Action], Observation | None]:
    """What the run executes for one element action, resolved now.

    Returns:
        ``(actions, resolved)``: the actions in its place, and the observation describing
        the control at the first one's point (``None`` when ``actions`` are again element
        actions, a ``fill_form``'s fields, each resolved when its turn comes).

    Raises:
        StaleRefError: the ref is not valid now.
        DeskpodError: the sandbox failed.
    """
    if isinstance(action, FillForm):
        if len(action.fields) > 1:
            singles: Sequence[Action] = [FillForm(type="fill_form", fields=[f]) for f in action.fields]
            return list(singles), None
        field = action.fields[0]
        resolved = await resolve_ref(client, field.ref, timeout_s)
        element = resolved.element_at
        kind = form_field_kind(element.tag, element.input_type, element.role) if element else "text"
        if kind == "select":
            return [SelectOption(type="select_option", ref=field.ref, values=[field.value])], resolved
        if kind == "choice":
            return [action], resolved
        point = resolved.element_ref_point
        assert point is not None
        return pixel_actions(TypeElement(type="type_element", ref=field.ref, text=field.value),
                             (point.x, point.y)), resolved
    if not isinstance(action, _BY_REF):
        return [action], None
    resolved = await resolve_ref(client, action.ref, timeout_s)
    point = resolved.element_ref_point
    assert point is not None
    if isinstance(action, SelectOption) and action.by == "value":
        return [by_label(action, resolved.element_at)], resolved
    if isinstance(action, DragElement):  # judged at its drop point, as a drag is
        dropped = await resolve_ref(client, action.to_ref, timeout_s)
        end = dropped.element_ref_point
        assert end is not None
        return pixel_actions(action, (point.x, point.y), (end.x, end.y)), dropped
    return pixel_actions(action, (point.x, point.y)), resolved


def by_label(action: SelectOption, select: ElementInfo | None) -> SelectOption:
    """``action`` (``by="value"``) as the ``select_option`` by label of the options it chooses in
    ``select`` (the control at its ref's point, :attr:`~deskpod.protocol.ElementInfo.options`):
    for each value, as Playwright's ``selectOption`` matches, the first option whose value or
    label it is. What is judged, shown to an approver and run is then those labels.

    Raises:
        InvalidActionError: the control is not a select, or a value chooses no option of it
            (``detail["value"]``).
    """
    if select is None or select.options is None:
        raise InvalidActionError(f"select_option {action.ref}: the control there is not a <select>",
                                 detail={"action": "select_option", "ref": action.ref})
    labels: list[str] = []
    for value in action.values:
        option = next((o for o in select.options if value in (o.value, o.label)), None)
        if option is None:
            raise InvalidActionError(f"select_option {action.ref}: no option has the value {value[:200]!r}",
                                     detail={"action": "select_option", "ref": action.ref, "value": value[:200]})
        labels.append(option.label)
    return SelectOption(type="select_option", ref=action.ref, values=labels)
