"""The script the settle wait runs in the page (:mod:`deskpod.agentd.settle`): it waits for the
request's input to reach the page as a DOM event, then for a painted frame with no finite
animation running, and answers what it saw."""

from __future__ import annotations

import json
from typing import Final

from deskpod.agentd.browser.frame_calls import VIEWPORT_ORIGIN_SCRIPT

__all__ = ["INPUT_EVENTS", "PAGE_SETTLE_SCRIPT"]

INPUT_EVENTS: Final = ("pointerup", "pointerdown", "wheel", "keyup")
"""The DOM events the page's listener counts (``isTrusted`` ones only: real input; pointer
events of the left button only, as the executor counts them)."""

PAGE_SETTLE_SCRIPT: Final = (
    """(async (budgetMs, expect) => {
  // A document hidden before it answers (a click opened a tab in front of it) paints no frame:
  // it answers {hidden: true} at once, and the tab now in front is asked instead.
  let onHidden = null;
  const hidden = new Promise(resolve => {
    onHidden = () => { if (document.visibilityState === "hidden") resolve({hidden: true}); };
    document.addEventListener("visibilitychange", onHidden);
    onHidden();
  });
  const settled = (async () => {
    const t0 = performance.now();
    const input = globalThis.__deskpodInput || (globalThis.__deskpodInput = (() => {
      const seen = {doc: Math.random().toString(36).slice(2), counts: {}, notify: null};
      for (const type of """ + json.dumps(list(INPUT_EVENTS)) + """) {
        seen.counts[type] = 0;
        addEventListener(type, event => {
          if (!event.isTrusted || (type.startsWith("pointer") && event.button !== 0)) return;
          seen.counts[type]++;
          if (seen.notify) seen.notify();
        }, {capture: true, passive: true});
      }
      return seen;
    })());
    const framed = e => !!e && ["IFRAME", "FRAME", "EMBED", "OBJECT"].includes(e.tagName);
    const reaches = () => {
      if (expect.event === "keyup") return document.hasFocus() && !framed(document.activeElement);
      const [ox, oy, z] = """ + VIEWPORT_ORIGIN_SCRIPT + """(expect.scale);
      const x = (expect.x - ox) / z, y = (expect.y - oy) / z;
      if (!(x >= 0 && y >= 0 && x < innerWidth && y < innerHeight)) return false;
      const hit = document.elementFromPoint(x, y);
      return !!hit && !framed(hit);
    };
    let exact = false;
    if (expect && expect.doc === input.doc && reaches()) {
      const arrived = () => input.counts[expect.event] > expect.count;
      const came = await new Promise(resolve => {
        // A task later: the event's dispatch (its other listeners, the click a release makes) is over.
        const notify = () => { if (arrived()) setTimeout(() => done(true), 0); };
        const done = value => {
          if (input.notify === notify) input.notify = null;
          clearTimeout(timer);
          resolve(value);
        };
        const timer = setTimeout(() => done(arrived()), Math.min(expect.wait_ms, budgetMs));
        input.notify = notify;
        notify();
      });
      exact = came && expect.exact === true;
    }
    const turn = () => new Promise(resolve => setTimeout(resolve, 0));
    const frame = () => new Promise(resolve => requestAnimationFrame(() => {
      const channel = new MessageChannel();
      channel.port1.onmessage = () => resolve();
      channel.port2.postMessage(0);
    }));
    if (!exact) {
      await frame();
      await frame();
    }
    await turn();
    await frame();
    let animations = 0, endless = false;
    for (;;) {
      const running = document.getAnimations().filter(a => a.playState === 'running');
      const finite = running.filter(a => {
        const timing = a.effect && a.effect.getComputedTiming();
        return timing && Number.isFinite(timing.endTime);
      });
      endless = running.length > finite.length;
      const left = budgetMs - (performance.now() - t0);
      if (!finite.length || left <= 0) break;
      animations += finite.length;
      await Promise.race([Promise.all(finite.map(a => a.finished.catch(() => null))),
                          new Promise(resolve => setTimeout(resolve, left))]);
      await frame();
      await frame();
    }
    return {animations, endless, input: {doc: input.doc, counts: {...input.counts}, exact}};
  })();
  try {
    return await Promise.race([settled, hidden]);
  } finally {
    document.removeEventListener("visibilitychange", onHidden);
  }
})""")
"""Run in the active tab with the time budget in ms and the expected input (``null``, or
``{doc, event, count, exact, x, y, scale, wait_ms}``: wait at most ``wait_ms`` for the
listener of document ``doc`` to count more than ``count`` ``event`` events, when a pointer
event at screen pixel (``x``, ``y``) would reach this document, not a frame in it, or a key
would; ``exact``: that count is every such event the request sent, see :meth:`deskpod.agentd.settle.Settler.mark`);
resolves once the input's DOM event has come (when it can), the frame after it is painted
and no finite animation runs (see the module docstring), or ``{hidden: true}`` as soon as
the document is hidden (it paints no frame then: another tab came to the front). ``input``: this document's
listener (``doc``, a random id), its event ``counts`` so far, and ``exact``: the wait
ended on every event expected, so one frame was counted after it."""
