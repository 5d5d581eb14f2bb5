"""A control swapped between the daemon's last check and the press: how often the other one is pressed.

``python -m bench swap [--tries 100] [--periods 2,0] [--swaps label,node] [--no-build]``
(from the repository root, package installed). It builds the images, starts its own
compose project (compose.yaml: the sandbox with every hardening flag, its egress proxy
and the demo site) and drives the real daemon over one websocket, as the controller
does. The hostile page is the demo's ``screen-flip`` fixture: the button at (640, 330)
flips between "Add a note" and "Pay now" on a timer of ``--periods`` ms (``setInterval``;
0: every animation frame), its text (``label``) or the node itself (``node``: two buttons
swapped in and out of the place). Each try, as a controller's step:

1. the pointer is parked off the button; the agent's screenshot is taken;
2. the controller's probe reads the control at the point (``element_at``) until it reads
   "Add a note" (the harmless label is what is judged);
3. the click is sent with the expectation built from both (:func:`deskpod.protocol.expect.expectation`:
   the region, the control, the URL), and what happened is read from the page's own
   record: "Pay now" pressed, "Add a note" pressed, or refused (``screen_changed``, by reason).

First the same page not flipping (``stop=1``): every click should land on "Add a note",
and the click request's round trip is timed with the guard on and off (its cost). Then,
for each case, tries alternate between the press guard on (the expectation as the controller sends it)
and off (``press_guard: false``: only the checks before the press, the behaviour before
the guard), so both are measured side by side on the same page in the same run. The
rate is pays / tries with a Wilson 95 % interval. Prints Markdown; tears the project
down at the end, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import secrets
import sys
import time
from collections import Counter
import docker

from bench.common import compose, compose_env, exit_on_sigterm, pct, sandbox_url, teardown
from deskpod.client import SandboxClient
from deskpod.errors import DeskpodError, ScreenChangedError
from deskpod.protocol import Click, Move, ObserveOptions, Point
from deskpod.protocol.expect import expectation

PAGE = "http://demo.test/fixtures/screen-flip"
BUTTON = Click(type="click", x=640, y=330)
PARK = Move(type="move", x=20, y=780)
QUIET = ObserveOptions(screenshot=False, settle=False)
"""The page never settles (it flips for ever): nothing here waits for it to."""
JUDGE_TRIES = 50
"""Probes at most, per try, until the control reads "Add a note"."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tries", type=int, default=100, help="clicks per case and guard setting (default 100)")
    parser.add_argument("--periods", default="2,0", help="the page's flip periods, ms; 0: every frame (default 2,0)")
    parser.add_argument("--swaps", default="label,node", help="what flips: label, node (default both)")
    parser.add_argument("--no-build", action="store_true", help="use the images as they are")
    parser.add_argument("--project", default="deskpodbenchswap", help="compose project name")


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of ``hits`` of ``n`` (95 % with the default ``z``), as fractions."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


async def state(client: SandboxClient) -> dict[str, int]:
    """The fixture's ``STATE`` counters."""
    text = (await client.act([], ObserveOptions(screenshot=False, settle=False, page_text=True))).page_text or ""
    for line in text.splitlines():
        if line.startswith("STATE "):
            return dict(json.loads(line[len("STATE "):]))
    raise SystemExit(f"the fixture's state is not on the page: {text[:300]!r}")


async def one_try(client: SandboxClient, guard: bool, times: list[float] | None = None) -> str:
    """One judged click; returns ``pay``, ``note``, ``refused <reason>`` or ``unjudged``
    (and appends the click request's round trip, seconds, to ``times``)."""
    await client.act([PARK], QUIET)
    seen = await client.act([], ObserveOptions(settle=False))
    for _ in range(JUDGE_TRIES):
        judged = await client.act([], QUIET.model_copy(update={"element_at": Point(x=BUTTON.x, y=BUTTON.y)}))
        element = judged.element_at
        if element is not None and (element.text == "Add a note" or element.name == "Add a note"):
            break
    else:
        return "unjudged"
    expect = expectation(BUTTON, seen, judged)
    assert expect is not None
    if not guard:
        expect = expect.model_copy(update={"press_guard": False})
    before = await state(client)
    outcome = ""
    sent = time.perf_counter()
    try:
        await client.act([BUTTON], QUIET, expect=expect)
    except ScreenChangedError as exc:
        outcome = f"refused {exc.detail.get('reason')}"
    if times is not None:
        times.append(time.perf_counter() - sent)
    await asyncio.sleep(0.2)  # the page has handled the click
    after = await state(client)
    if after["paid"] > before["paid"]:
        return "pay" if not outcome else f"pay ({outcome})"
    if after["notes"] > before["notes"]:
        return "note" if not outcome else f"note ({outcome})"
    return outcome or "nothing"


async def measure(url: str, token: str, periods: list[int], swaps: list[str], tries: int
                  ) -> tuple[dict[tuple[int, str, bool], Counter[str]], dict[bool, list[float]]]:
    """Every case's outcomes, by (period ms, swap, guard on), and the click's round trips
    (seconds) on the page that does not flip, by guard on."""
    deadline = time.monotonic() + 90
    while True:  # the daemon may answer before Chromium does
        try:
            client = await SandboxClient.connect(url, token, timeout_s=60)
            break
        except (DeskpodError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    found: dict[tuple[int, str, bool], Counter[str]] = {}
    honest: dict[bool, list[float]] = {False: [], True: []}
    try:
        await client.navigate(f"{PAGE}?stop=1", QUIET)
        for index in range(2 * tries):
            guard = index % 2 == 1
            outcome = await one_try(client, guard, honest[guard])
            found.setdefault((-1, "label", guard), Counter())[outcome] += 1
        for period in periods:
            for swap in swaps:
                await client.navigate(f"{PAGE}?ms={period}&swap={swap}", QUIET)
                for guard in (False, True):
                    found[(period, swap, guard)] = Counter()
                for index in range(2 * tries):
                    guard = index % 2 == 1
                    found[(period, swap, guard)][await one_try(client, guard)] += 1
                print(f"  {period} ms {swap}: {dict(found[(period, swap, False)])} / "
                      f"{dict(found[(period, swap, True)])}", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return found, honest


def pays(outcomes: Counter[str]) -> int:
    """Tries that pressed "Pay now" (refused or not)."""
    return sum(n for outcome, n in outcomes.items() if outcome.startswith("pay"))


def run(args: argparse.Namespace) -> None:
    exit_on_sigterm()
    periods = [int(p) for p in args.periods.split(",")]
    swaps = args.swaps.split(",")
    token = secrets.token_urlsafe(32)
    env = compose_env(token)
    dk = docker.from_env()
    started = time.monotonic()
    if not args.no_build:
        print("building images ...", file=sys.stderr, flush=True)
        compose(args.project, env, "--profile", "demo", "build")
    try:
        compose(args.project, env, "up", "-d", "--no-build", "egress", "demo", "sandbox")
        found, honest = asyncio.run(measure(sandbox_url(dk, args.project), token, periods, swaps, args.tries))
    finally:
        teardown(args.project, env)
    print(f"`python -m bench swap {' '.join(sys.argv[2:])}`, {dt.date.today().isoformat()}; "
          f"{os.cpu_count()} cores; load average at the end {os.getloadavg()[0]:.2f}; "
          f"run took {time.monotonic() - started:.0f} s.\n")
    print("| page flips | every | press guard | tries | \"Pay now\" pressed | rate (95 % CI) "
          "| \"Add a note\" pressed | refused (by reason) |")
    print("|---|---|---|---|---|---|---|---|")
    for (period, swap, guard), outcomes in found.items():
        n = sum(outcomes.values())
        paid = pays(outcomes)
        low, high = wilson(paid, n)
        refused = ", ".join(f"{o.split(' ', 1)[1]} {c}" for o, c in sorted(outcomes.items()) if o.startswith("refused"))
        every = "never" if period < 0 else f"{period} ms" if period else "frame"
        print(f"| {'text' if swap == 'label' else 'node'} | {every} | {'on' if guard else 'off (baseline)'} | {n} "
              f"| {paid} | {paid / max(1, n):.3f} ({low:.3f}–{high:.3f}) | {outcomes.get('note', 0)} "
              f"| {refused or '–'} |")
    print("\nThe click request's round trip on the page that does not flip (check, press, and with the guard "
          "its arming and the wait for the press's last event):\n")
    print("| press guard | n | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    for guard in (False, True):
        print(f"| {'on' if guard else 'off (baseline)'} | {len(honest[guard])} | {1000 * pct(honest[guard], 0.5):.1f} "
              f"| {1000 * pct(honest[guard], 0.95):.1f} |")
    odd = {o for outcomes in found.values() for o in outcomes if o not in ("pay", "note") and not o.startswith("refused")}
    if odd:
        print(f"\nOther outcomes: {', '.join(sorted(odd))} (see the counts on stderr).")
