"""Typing 5,000 characters, deskpod's insertion beside key-by-key XTEST typing.

``python -m bench typing`` (from the repository root, package installed) starts its own
compose project (``-p deskpodtyping``: egress, demo, the hardened sandbox), or with
``--sandbox URL --token T --site URL`` measures a running daemon. On the demo site's
``/fixtures/events`` page it clicks the text field, then per row and round:

- **deskpod**: one ``type`` action with the whole text (its long runs go in through
  ``Input.insertText``, the last character and line breaks by XTEST: agentd/browser/fasttype.py);
- **baseline, key by key**: the same text as ``type`` actions one character shorter
  than the insertion threshold (``INSERT_MIN_CHARS``), in requests of up to
  ``MAX_ACTIONS_PER_REQUEST`` actions, so every character is an XTEST key
  press and every character not on the keymap a spare-keycode remap (how every
  ``type`` was typed before).

Time = the request sent → the field holds the exact text (page state read every
20 ms, without screenshots). Then one click on the page's range slider, timed
(request → reply, which includes reading the page's state over DevTools once the
renderer is free; the click's own input time from the reply's timings beside it) and
checked (the slider moved). Texts: 5,000 ASCII characters, and
5,000 characters mixing ASCII with 29 letters not on the keymap (CJK, Cyrillic,
accented Latin).

Prints Markdown for BENCHMARKS.md; tears the compose project down, also on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import secrets
import statistics
import sys
import time
from typing import Any

import docker

from bench.common import compose, compose_env, exit_on_sigterm, ready_client, sandbox_url, teardown
from deskpod.agentd.browser.fasttype import INSERT_MIN_CHARS
from deskpod.client import SandboxClient
from deskpod.errors import DeskpodError
from deskpod.protocol import MAX_ACTIONS_PER_REQUEST, ObserveOptions

FILES = ("compose.yaml",)
FIELD = (400, 440)
SLIDER = ((800, 300), (300, 300))
CHUNK_CHARS = INSERT_MIN_CHARS - 1
"""The baseline's ``type`` actions: one character below the insertion threshold."""
EXTRA = ([chr(c) for c in range(0x4E00, 0x4E00 + 10)] + [chr(c) for c in range(0x0410, 0x0410 + 10)]
         + list("éèàüößñçø"))
STATE = ObserveOptions(screenshot=False, settle=False, page_text=True, max_text_chars=200_000)
QUICK = ObserveOptions(screenshot=False, settle=False)


def texts(length: int) -> dict[str, str]:
    rnd = random.Random(19)
    return {
        "ASCII": ("The quick brown fox jumps over the lazy dog 0123456789 " * (length // 50 + 1))[:length],
        "mixed scripts (29 letters off the keymap)":
            "".join(rnd.choice([*"abcdefghijklmnopqrstuvwxyz ", *EXTRA]) for _ in range(length)),
    }


async def field_value(client: SandboxClient) -> tuple[str, int]:
    """The field's text and the slider's value (``("", -1)`` while the page does not answer)."""
    obs = await client.act([], STATE)
    line = next((x for x in (obs.page_text or "").splitlines() if x.startswith("STATE ")), None)
    if line is None:  # the page was too busy to be read in time
        return "", -1
    state = json.loads(line[len("STATE "):])
    return state["field"], state["slider"]


async def one_round(client: SandboxClient, page: str, text: str, key_by_key: bool, index: int) -> dict[str, Any]:
    await client.navigate(page, timeout_s=120)
    await client.act([{"type": "click", "x": FIELD[0], "y": FIELD[1]}], ObserveOptions(screenshot=False))
    if key_by_key:
        actions = [{"type": "type", "text": text[i:i + CHUNK_CHARS]} for i in range(0, len(text), CHUNK_CHARS)]
    else:
        actions = [{"type": "type", "text": text}]
    t0 = time.perf_counter()
    for i in range(0, len(actions), MAX_ACTIONS_PER_REQUEST):
        await client.act(actions[i:i + MAX_ACTIONS_PER_REQUEST], QUICK, timeout_s=300)
    replied = time.perf_counter() - t0
    while True:
        value, slider = await field_value(client)
        if value == text or time.perf_counter() - t0 > 120:
            break
        await asyncio.sleep(0.02)
    exact_s = time.perf_counter() - t0
    x, y = SLIDER[index % 2]
    t1 = time.perf_counter()
    failed, input_ms = None, float("nan")
    try:
        clicked = await client.act([{"type": "click", "x": x, "y": y}], QUICK)
        input_ms = sum(t.duration_s for t in clicked.timings) * 1000
    except DeskpodError as exc:  # e.g. the pointer frozen by the window manager's keymap backlog
        failed = exc.code
    click_ms = (time.perf_counter() - t1) * 1000
    _, after = await field_value(client)
    return {"replied_s": replied, "exact_s": exact_s, "exact": value == text, "click_ms": click_ms,
            "click_landed": failed is None and after != slider, "click_error": failed,
            "click_input_ms": input_ms}


async def measure(url: str, token: str, site: str, rounds: int, baseline_rounds: int, length: int) -> list[dict[str, Any]]:
    page = f"{site}/fixtures/events"
    client = await ready_client(url, token, page)
    rows = []
    try:
        # deskpod's rows first: the baseline's remaps leave the window manager busy for a while.
        for system, key_by_key, n in (("deskpod", False, rounds), ("baseline, key by key", True, baseline_rounds)):
            for name, text in texts(length).items():
                samples = [await one_round(client, page, text, key_by_key, i) for i in range(n)]
                rows.append({"text": name, "system": system, "samples": samples})
                print(f"  {name}, {system} done", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return rows


def report(rows: list[dict[str, Any]], length: int, meta: str) -> str:
    lines = [meta, "", f"| {length:,} characters | system | n | to exact text, p50 s | max s | reply p50 s | exact | "
             "click right after, p50 ms | max ms | of which the click's input, p50 ms | click landed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        s = row["samples"]
        exact = [x["exact_s"] for x in s]
        clicks = [x["click_ms"] for x in s]
        lines.append(f"| {row['text']} | {row['system']} | {len(s)} | {statistics.median(exact):.3f} | "
                     f"{max(exact):.3f} | {statistics.median(x['replied_s'] for x in s):.3f} | "
                     f"{sum(x['exact'] for x in s)}/{len(s)} | {statistics.median(clicks):.0f} | {max(clicks):.0f} | "
                     f"{statistics.median(x['click_input_ms'] for x in s):.0f} | "
                     f"{sum(x['click_landed'] for x in s)}/{len(s)}"
                     f"{''.join(sorted({' (' + x['click_error'] + ')' for x in s if x['click_error']}))} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5, help="rounds of deskpod's typing per text (default 5)")
    parser.add_argument("--baseline-rounds", type=int, default=2, help="rounds of key-by-key typing (default 2)")
    parser.add_argument("--chars", type=int, default=5000, help="characters per text (default 5000)")
    parser.add_argument("--no-build", action="store_true", help="use the images as they are")
    parser.add_argument("--project", default="deskpodtyping", help="compose project name (default deskpodtyping)")
    parser.add_argument("--sandbox", help="measure this running daemon (ws://...) instead of a compose project")
    parser.add_argument("--token", help="with --sandbox: its token")
    parser.add_argument("--site", default="http://demo.test", help="where the demo site answers (default demo.test)")


def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    if args.sandbox:
        rows = asyncio.run(measure(args.sandbox, args.token, args.site, args.rounds, args.baseline_rounds, args.chars))
    else:
        exit_on_sigterm()
        token = secrets.token_urlsafe(32)
        env = compose_env(token, DESKPOD_SCREEN_SIZE="1280x800")
        dk = docker.from_env()
        if not args.no_build:
            compose(args.project, env, "--profile", "demo", "build", files=FILES)
        teardown(args.project, env, FILES)
        try:
            compose(args.project, env, "up", "-d", "--no-build", "egress", "demo", "sandbox", files=FILES)
            rows = asyncio.run(measure(sandbox_url(dk, args.project), token, args.site, args.rounds,
                                       args.baseline_rounds, args.chars))
        finally:
            teardown(args.project, env, FILES)
    meta = (f"`python -m bench typing {' '.join(sys.argv[2:])}`, {dt.date.today().isoformat()}; {os.cpu_count()} cores; "
            f"load average at the end {os.getloadavg()[0]:.2f}; run took {time.monotonic() - started:.0f} s.")
    print(report(rows, args.chars, meta))
