"""The press guard: the judged control held to the press itself, inside the page.

The daemon's last check of the control under the pointer (:mod:`deskpod.agentd.screen_check`)
and the press it sends through XTEST are milliseconds apart, and a page can change the
control in between: a label flipped on a 2 ms timer, another node swapped in under the
point. The guard closes most of that gap where the press arrives, in the page:

- **Installed before the page's scripts.** :data:`GUARD_SCRIPT` is registered with
  ``Page.addScriptToEvaluateOnNewDocument`` in the isolated world :data:`GUARD_WORLD`, so
  every new document of the page (and of its same-process frames) runs it before any of
  its own scripts. It adds capture-phase listeners on ``window`` for
  :data:`PRESS_EVENTS`: a press event is dispatched to ``window``'s capture listeners
  first, in the order they were added, so the guard's run before any listener of the page
  on that event (the page cannot remove a listener of another world, nor reach the
  guard's state). A frame loaded before the script was registered (an out-of-process
  frame attached after its document started) gets it when armed, after its page's own
  scripts: its own ``window`` capture listeners added earlier then run first.
- **Armed for one press** (:func:`arm`), after the pointer has moved to the point and
  before the daemon's last check: the guard of the frame holding the deepest node under
  the point is given that node; every other frame's guard is armed with none (a press
  arriving there is not the judged one). From then on it records the mutations of the
  page that could change what is pressed there: anything inside the control, the
  control's or its ancestors' attributes that restyle it, and the node (or an ancestor)
  leaving or joining the document.
- **At each press event** (trusted ones; the page's own synthetic events are its own
  doing) it stops the event (``stopImmediatePropagation``, ``preventDefault``: no
  listener of the page, no default action such as following a link or submitting a
  form) when its target is not the armed node (as a listener on ``window`` sees it:
  a closed shadow root's host; a ``<label>``'s forwarded click to its control counts),
  when a recorded mutation happened before the press's first event (the control the
  daemon then checked may not be the one pressed), when the node (or an ancestor) left or
  joined the document after the press's first event (Chromium makes no click of a press
  whose ``mousedown`` target was removed, even when put back: the press would otherwise be
  reported landed with nothing pressed; changes inside the control after the first event,
  such as a ripple effect, are the press's own doing), or when the control's label
  (its text, its labelling attributes, CSS generated content) differs from what it was
  when armed. Once one event is stopped, the rest of the press is stopped too.
- **After the press** the daemon waits until the armed frame's guard has seen the press's
  last event (:func:`wait_pressed`, at most :data:`SEEN_WAIT_S`), disarms every frame
  (:func:`finish`, with a time budget of its own) and
  refuses the request (``screen_changed``, reason ``"press"``) when any event was stopped.
  A press whose last event the guard has not seen by then did not reach the page: Chromium
  drops input sent to a page it has not drawn yet (its ``DropInputEventsWhilePaintHolding``
  feature: a document that is only an ``<iframe>`` is held up to about a second after it
  loads), and a busy renderer can take longer. It is refused the same way (the missing
  event stopped as ``not_received``), never answered landed, and instead of disarming, the
  guards are closed: an event of that press arriving later (its time stamp, the input's
  own time, is before the close) is stopped (``late``) until they rest; the first event
  made after the close rests them (a new press the guard was not armed for).
  The judged frame's guard also rests by itself once the press's last event and the click
  it makes are dispatched (a dialog the click opens blocks the page, and the disarming
  with it), and every guard after :data:`ARMED_MS`.

Because the daemon's check reads the judged control after arming, and no mutation that
could change it is allowed between arming and the press, the control pressed is the one
checked. Not covered: a control drawn on a canvas; a label changed through the CSSOM
(``insertRule``, ``adoptedStyleSheets``: no mutation record); a frame created under the
point after arming (its guard was not armed); a compromised renderer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Final

from deskpod.agentd.browser.frame_calls import FrameCalls
from deskpod.errors import BrowserError, ScreenChangedError

__all__ = ["ARMED_MS", "ArmedPress", "GUARD_SCRIPT", "GUARD_WORLD", "PRESS_EVENTS", "SEEN_WAIT_S", "arm", "finish",
           "wait_pressed"]

log = logging.getLogger(__name__)

GUARD_WORLD: Final = "deskpod-guard"
"""The isolated world the guard lives in (apart from the reads' world: nothing it holds is released)."""

PRESS_EVENTS: Final = ("pointerdown", "mousedown", "pointerup", "mouseup", "click", "auxclick", "dblclick",
                       "contextmenu")
"""The events of a press the guard holds to the judged control."""

SEEN_WAIT_S: Final = 1.0
"""Longest wait after the press's input for the armed frame's guard to see its last event."""

ARMED_MS: Final = 5000
"""A guard disarms itself this long after it was armed (ms), should the daemon never disarm it."""

GUARD_SCRIPT: Final = r"""(() => {
  if (globalThis.__deskpodPressGuard) return;
  const EVENTS = EVENTS_JSON;
  const CONTROL = "a[href],button,input,select,textarea,label,summary,[role],[onclick],[tabindex]";
  const LABELS = ["aria-label", "aria-labelledby", "alt", "title", "value", "src", "href", "type", "role",
                  "disabled", "hidden", "aria-hidden"];
  const RESTYLE = ["class", "style", "hidden"];
  const early = document.readyState === "loading";
  const up = (n) => n.assignedSlot || n.parentElement || (n.parentNode && n.parentNode.host) || null;
  const inside = (outer, n) => { for (; n; n = up(n) || (n.nodeType === 11 ? n.host : null)) if (n === outer) return true; return false; };
  const seenFrom = (n) => {  // the target a listener on window sees for an event on n
    for (let root = n.getRootNode(); root.nodeType === 11 && root.mode === "closed"; root = n.getRootNode()) n = root.host;
    return n;
  };
  let armed = null;
  const noteChanges = (records) => {
    const a = armed;
    if (!a || a.element === null) return;
    if (!a.started) a.changed = a.changed || records.some((r) => relevant(a, r));
    else a.moved = a.moved || records.some((r) => moves(a, r));
  };
  const observer = new MutationObserver(noteChanges);
  function print(a) {
    const parts = a.chain.map((e) => {
      const before = getComputedStyle(e, "::before").content, after = getComputedStyle(e, "::after").content;
      return [e.tagName, e.isConnected, LABELS.map((k) => e.getAttribute(k)), "value" in e ? String(e.value) : null,
              before, after];
    });
    return JSON.stringify([parts, (a.control.textContent || "").slice(0, 2000)]);
  }
  function relevant(a, r) {
    if (inside(a.control, r.target)) return true;
    if (r.type === "attributes") return inside(r.target, a.element) && (a.chain.includes(r.target) || RESTYLE.includes(r.attributeName));
    return moves(a, r);
  }
  function moves(a, r) {  // the control, or an ancestor, left or joined the document
    return r.type === "childList" && [...r.addedNodes, ...r.removedNodes].some((n) => inside(n, a.element));
  }
  function stop(a, e, why) {
    a.blocked.push([e.type, why]);
    e.stopImmediatePropagation();
    e.preventDefault();
  }
  function onPress(e) {
    const a = armed;
    if (!a || !e.isTrusted || a.done) return;
    if (performance.now() > a.until) { disarm(); return; }
    a.seen.push(e.type);
    if (a.closed !== false) {  // only the press it was armed for, made before the close, is stopped
      if (e.timeStamp <= a.closed) return stop(a, e, "late");
      disarm();
      return;
    }
    if (e.type === a.last && a.seen.filter((t) => t === a.last).length >= a.count && !a.ending) {
      // The press's last event: the click it makes follows in this same task, then the guard rests.
      a.ending = true;
      setTimeout(() => { a.done = true; }, 0);
    }
    noteChanges(observer.takeRecords());
    if (a.blocked.length) return stop(a, e, "after");
    if (a.element === null) return stop(a, e, "frame");
    const target = e.composedPath()[0];
    if (target !== a.target && !a.forwarded.includes(target)) return stop(a, e, "target");
    if (a.changed) return stop(a, e, "changed");
    if (a.moved) return stop(a, e, "moved");
    a.started = true;
    if (print(a) !== a.print) return stop(a, e, "label");
  }
  function disarm() { observer.disconnect(); armed = null; }
  const guard = {
    arm(node, token, last, count) {
      disarm();
      const element = node === null ? null : (node.nodeType === 1 ? node : up(node));
      const a = {token, element, last, count, ending: false, done: false, closed: false, seen: [], blocked: [],
                 started: false,
                 changed: false, moved: false, until: performance.now() + ARMED_MS,
                 chain: [], control: element, target: null, forwarded: [], print: null};
      if (element !== null) {
        for (let e = element; e && a.chain.length < 7 && e !== document.body && e !== document.documentElement; e = up(e)) {
          a.chain.push(e);
          if (e.matches(CONTROL) || getComputedStyle(e).cursor === "pointer") break;
        }
        if (a.chain.length === 0) a.chain.push(element);
        a.control = a.chain[a.chain.length - 1];
        a.target = seenFrom(element);
        a.forwarded = a.chain.filter((e) => e.tagName === "LABEL" && e.control).map((e) => seenFrom(e.control));
        const options = {subtree: true, childList: true, characterData: true, attributes: true};
        observer.observe(document, options);
        for (let e = element; e; e = up(e)) {
          const root = e.getRootNode();
          if (root.nodeType === 11) observer.observe(root, options);
        }
        observer.takeRecords();
        a.print = print(a);
      }
      armed = a;
      return {early};
    },
    state(token) { return armed && armed.token === token ? {seen: armed.seen, blocked: armed.blocked} : null; },
    disarm(token) {
      const found = guard.state(token);
      if (found !== null) disarm();
      return found;
    },
    close(token) {
      const found = guard.state(token);
      if (found !== null) armed.closed = performance.now();
      return found;
    },
  };
  Object.freeze(guard);
  Object.defineProperty(globalThis, "__deskpodPressGuard", {value: guard});
  for (const type of EVENTS) window.addEventListener(type, onPress, {capture: true});
})()""".replace("EVENTS_JSON", json.dumps(list(PRESS_EVENTS))).replace("ARMED_MS", str(ARMED_MS))
"""The guard, run in :data:`GUARD_WORLD` of every document (see the module docstring). Its
state is ``globalThis.__deskpodPressGuard`` of that world: ``arm(node, token)``,
``state(token)``, ``disarm(token)`` and ``close(token)`` (every event of the press made
before the close and arriving after it stopped until the guard rests), each answering ``{seen, blocked}``: the press events seen,
and the stopped ones as ``[type, why]``."""

_ARM_NODE = "function (token, last, count) { return globalThis.__deskpodPressGuard.arm(this, token, last, count); }"

_LAST_EVENT = {"click": ("pointerup", 1), "double_click": ("pointerup", 2), "triple_click": ("pointerup", 3),
               "mouse_down": ("pointerdown", 1), "mouse_up": ("pointerup", 1)}
"""Per press action: the event the guard must have seen, and how many times, once the press is
over. Pointer events, not mouse events: a ``pointerdown`` stopped (its default prevented)
suppresses the compatibility ``mousedown`` and ``mouseup``; the ``mouseup`` and the
``click`` a ``pointerup`` makes follow it in the same task."""


@dataclass
class ArmedPress:
    """The guards armed for one press: ``frames`` are ``(session, isolated world's context
    id)`` of every armed frame, ``target`` the one holding the judged node (``None``: the
    node under the point could not be reached, only the other frames are armed), ``token``
    the press's id."""

    token: str
    frames: list[tuple[str, int]] = field(default_factory=list)
    target: tuple[str, int] | None = None


async def _world(calls: FrameCalls, session: str, frame_id: str) -> int:
    made = await calls.cdp("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": GUARD_WORLD}, session)
    return int(made["executionContextId"])


async def _evaluate(calls: FrameCalls, session: str, context: int, expression: str) -> Any:
    result = await calls.cdp("Runtime.evaluate", {"expression": expression, "contextId": context,
                                                  "returnByValue": True, "timeout": 1000}, session)
    if "exceptionDetails" in result:
        raise BrowserError(f"press guard script failed: {result['exceptionDetails'].get('text', 'exception')}")
    return result.get("result", {}).get("value")


async def arm(calls: FrameCalls, hit: tuple[str, str, int] | None, kind: str) -> ArmedPress:
    """Arm the guard of every frame of the page for one press (see the module docstring).

    Args:
        calls: budgeted calls into the page's frames.
        kind: the press action's type (``click``, ``mouse_down``...): the guard of the judged
            node rests once that press's last event has been dispatched (the events after
            it are not the press's), should the daemon not disarm it (a dialog the click
            opened blocks the page).
        hit: the deepest node under the press's point as ``(session, frame_id, backend
            node id)`` (:meth:`~deskpod.agentd.browser.frames.FrameReader.node_at`);
            ``None``: no node can be given, every frame is armed with none.

    Returns:
        What :func:`finish` needs. A frame that does not answer is left unarmed (logged).

    Raises:
        BrowserError: the frame holding the node could not be armed.
    """
    armed = ArmedPress(secrets.token_hex(8))
    token = json.dumps(armed.token)
    last, count = _LAST_EVENT.get(kind, (None, 0))

    async def one(session: str, frame_id: str) -> None:
        context = await _world(calls, session, frame_id)
        holds = hit is not None and hit[0] == session and hit[1] == frame_id
        early = await _evaluate(calls, session, context,
                                f"{GUARD_SCRIPT}; {'null' if holds else f'globalThis.__deskpodPressGuard.arm(null, {token})'}")
        if holds:
            assert hit is not None
            node = await calls.cdp("DOM.resolveNode", {"backendNodeId": hit[2], "executionContextId": context,
                                                       "objectGroup": GUARD_WORLD}, session)
            object_id = node.get("object", {}).get("objectId")
            if not object_id:
                raise BrowserError("the node under the pointer left the page before the press guard was armed")
            done = await calls.cdp("Runtime.callFunctionOn", {"functionDeclaration": _ARM_NODE, "objectId": object_id,
                                                              "arguments": [{"value": armed.token}, {"value": last},
                                                                            {"value": count}],
                                                              "returnByValue": True}, session)
            await calls.cdp("Runtime.releaseObjectGroup", {"objectGroup": GUARD_WORLD}, session)
            early = done.get("result", {}).get("value")
            armed.target = (session, context)
        if isinstance(early, dict) and not early.get("early"):
            log.debug("press guard in frame %s installed after the page's scripts", frame_id[:32])
        armed.frames.append((session, context))

    frames = await calls.frames()
    outcomes = await asyncio.gather(*(one(f.session, f.frame_id) for f in frames), return_exceptions=True)
    for frame, outcome in zip(frames, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if hit is not None and (frame.session, frame.frame_id) == hit[:2]:
                await finish(calls, armed, None)
                raise BrowserError(f"the press guard could not be armed: {outcome}") from outcome
            log.info("press guard not armed in frame %s: %s", frame.url[:200], outcome)
    return armed


async def wait_pressed(calls: FrameCalls, armed: ArmedPress, kind: str) -> bool:
    """After the press ``kind`` (a press action's type) was sent, wait until the judged frame's
    guard has seen its last event (at most :data:`SEEN_WAIT_S`; not at all when the page can
    no longer be asked: a link followed, a dialog opened).

    Returns:
        ``False`` when the guard was still waiting for that event after :data:`SEEN_WAIT_S`
        (the press did not reach the page), else ``True``.
    """
    last = _LAST_EVENT.get(kind)
    if last is None or armed.target is None:
        return True
    token = json.dumps(armed.token)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SEEN_WAIT_S
    while loop.time() < deadline:
        try:
            state = await _evaluate(calls, *armed.target, f"globalThis.__deskpodPressGuard.state({token})")
        except BrowserError:
            return True
        if not isinstance(state, dict) or list(state.get("seen", [])).count(last[0]) >= last[1]:
            return True
        await asyncio.sleep(0.005)
    return False


async def finish(calls: FrameCalls, armed: ArmedPress, kind: str | None, received: bool = True) -> None:
    """Disarm every frame armed for the press ``kind`` (a press action's type; ``None``: it
    was not sent), after :func:`wait_pressed`; ``received`` is what that answered. A press
    sent and not received closes the guards instead (its later events are stopped).

    Raises:
        ScreenChangedError: a guard stopped an event of the press, or the press did not reach
            the page (``reason`` ``"press"``, ``detail["stopped"]`` the events and why, the
            press's last event as ``not_received`` for the latter, ``detail["seen"]`` every
            press event the judged control's frame saw).
    """
    token = json.dumps(armed.token)
    lost = not received and kind in _LAST_EVENT
    verb = "close" if lost else "disarm"
    seen: list[str] = []
    stopped: list[list[str]] = []
    for session, context in armed.frames:
        try:
            state = await _evaluate(calls, session, context, f"globalThis.__deskpodPressGuard.{verb}({token})")
        except BrowserError as exc:
            log.info("press guard not disarmed%s: %s", " in the judged frame" if (session, context) == armed.target
                     else "", exc)
            continue
        if isinstance(state, dict):
            stopped += [[str(v)[:32] for v in entry][:2] for entry in state.get("blocked", [])[:16]]
            if (session, context) == armed.target:
                seen = [str(v)[:32] for v in state.get("seen", [])[:32]]
    if lost and kind is not None:
        stopped.append([_LAST_EVENT[kind][0], "not_received"])
        raise ScreenChangedError(
            f"the press did not reach the page within {SEEN_WAIT_S:g} s (Chromium drops input to a page it has "
            f"not drawn yet): {'only ' + ', '.join(seen) + ' did' if seen else 'nothing was pressed'}; its later "
            "events are stopped should they arrive",
            detail={"reason": "press", "stopped": stopped, "seen": seen})
    if stopped and kind is not None:
        raise ScreenChangedError(
            "the control under the pointer changed between the daemon's check and the press: the page's "
            f"press events were stopped ({', '.join(f'{e} ({why})' for e, why in stopped[:4])})",
            detail={"reason": "press", "stopped": stopped, "seen": seen})
