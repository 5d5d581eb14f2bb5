"""What the controller's policy checks cost per action, next to protocol validation alone.

For a mix of actions in realistic page contexts (a click on a "Pay now" button, a
link to another site, typing into a password field, Enter in a search form, a
scroll), each round times, in microseconds on one CPU:

- **baseline**: validating the action against the protocol (``parse_action``),
  which every action costs with or without a policy;
- **policy per action**: assigning the risk level (:class:`ActionClassifier`),
  checking the URL against two allowlists (:func:`check_url`) and redacting it,
  plus the confirmation digest for the actions that need one;
- **injection scan per observation**: :func:`scan_text` over the page text the
  observation carries (a 20,000-character page, the default cap).

Keyboard actions that can move the focus are also timed the way the runner now
judges them (:mod:`deskpod.controller.keysplit`): split into pieces, each piece
classified against the element focused when it lands (the focus after each piece is
given here; the runner reads it from the daemon's reply to the previous piece), the
secret-field check after each piece, then the URL checks and digests as above.

The screen check a bound pointer action costs in the daemon right before its input
(:mod:`deskpod.agentd.screen_check`) is timed on two 1280x800 frames that differ in a
banner away from the point: the 48x48 square around a click, and the whole screen an
approved action is bound to. (Its other cost, waiting for the page to handle the
pointer's move, is a round trip through the browser and not in this table.)

No Docker needed; pure CPU. Prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from deskpod.agentd.display.capture import Frame
from deskpod.agentd.screen_check import changed_pixels, region_box
from deskpod.controller.confirm import binding_digest
from deskpod.controller.policy.injection import scan_text
from deskpod.controller.policy.policy_file import check_url, redact_url
from deskpod.controller.keysplit import chord_segments, next_text_segment
from deskpod.controller.policy.risk import ActionClassifier, ActionContext, is_sensitive_field
from deskpod.protocol import ElementInfo, FocusedElement, Keypress, TypeText, parse_action

CASES: list[tuple[str, dict[str, Any], ActionContext]] = [
    ("click on a 'Pay now' button", {"type": "click", "x": 640, "y": 380},
     ActionContext(url="http://demo.test/fixtures/pay", element=ElementInfo(tag="button", text="Pay now"))),
    ("click on a link to a new site", {"type": "click", "x": 200, "y": 300},
     ActionContext(url="http://demo.test/", element=ElementInfo(tag="a", href="http://other.test/x", text="docs"))),
    ("type into a password field", {"type": "type", "text": "correct-horse-battery-staple"},
     ActionContext(url="http://demo.test/login", focused=FocusedElement(tag="input", is_password=True))),
    ("Enter in a search form", {"type": "keypress", "keys": ["Return"]},
     ActionContext(url="http://demo.test/", focused=FocusedElement(tag="input", form_submit="Search"))),
    ("scroll", {"type": "scroll", "x": 640, "y": 400, "scroll_y": 3}, ActionContext(url="http://demo.test/")),
]

_PAY = FocusedElement(tag="button", role="button", name="Pay now")
_EMAIL = FocusedElement(tag="input", role="textbox", name="Email", input_type="text", editable=True)
_PASSWORD = FocusedElement(tag="input", role="textbox", name="Password", input_type="password", is_password=True,
                           editable=True)

KEY_CASES: list[tuple[str, dict[str, Any], list[FocusedElement | None]]] = [
    ("chord Tab+Return, nothing focused (2 pieces)", {"type": "keypress", "keys": ["Tab", "Return"]}, [None, _PAY]),
    ("type 'alice@example.com\\t<password>' (3 pieces)", {"type": "type", "text": "alice@example.com\thunter2-SECRET"},
     [_EMAIL, _EMAIL, _PASSWORD]),
    ("type a 60-character sentence into a field (1 piece)",
     {"type": "type", "text": "Ten facts about penguins and where they live in the far south"}, [_EMAIL]),
]
"""Keyboard cases: the action and the element focused as each of its pieces lands."""

PAGE_TEXT = ("Results for penguin. Ten facts about penguins: they live in the southern hemisphere, "
             "they cannot fly, and they swim very well. " * 200)[:20_000]


SCREEN_PX = (1280, 800)
"""The frames' size for the screen-check rows, pixels."""


def _frames() -> tuple[Frame, Frame]:
    """Two screen frames (BGRX) that differ in a 100 px banner at the top."""
    width, height = SCREEN_PX
    before = bytearray(b"\xf0\xf0\xf0\x00" * width * height)
    now = bytearray(before)
    now[: width * 100 * 4] = b"\x20\x40\xc0\x00" * width * 100
    return Frame(bytes(before), SCREEN_PX), Frame(bytes(now), SCREEN_PX)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m bench policy``."""
    parser.add_argument("--rounds", type=int, default=20_000, help="timed repetitions per case (default 20000)")


def _timed(body: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        body()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def _row(name: str, samples: list[float]) -> tuple[str, float, float]:
    ordered = sorted(samples)
    return name, statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


def run(args: argparse.Namespace) -> None:
    """Time each case and print the table."""
    classifier = ActionClassifier()
    allowlists = (["demo.test"], ["demo.test", "allowed.test"])
    print("| case | baseline: protocol validation, median µs | policy per action, median µs | p99 µs |")
    print("|---|---|---|---|")
    for name, data, context in CASES:
        action = parse_action(data, 0)
        raw = action.model_dump(mode="json")

        def policy(action: Any = action, context: ActionContext = context, raw: dict[str, Any] = raw) -> None:
            risk = classifier.classify(action, context)
            for allowed in allowlists:
                check_url(context.url or "", allowed)
            redact_url(context.url)
            if risk.level in ("L2", "L3"):
                binding_digest(raw, context.url, "ab" * 32)

        base = _row(name, _timed(lambda data=data: parse_action(data, 0), args.rounds))
        cost = _row(name, _timed(policy, args.rounds))
        print(f"| {name} | {base[1]:.1f} | {cost[1]:.1f} | {cost[2]:.1f} |")
    for name, data, focus in KEY_CASES:
        action = parse_action(data, 0)

        def keyed(action: Any = action, focus: list[FocusedElement | None] = focus) -> None:
            url = "http://demo.test/fixtures/pay"
            pieces: list[Any] = list(chord_segments(action)) if isinstance(action, Keypress) else []
            left = action.text if isinstance(action, TypeText) else ""
            index = 0
            while pieces or left:
                focused = focus[min(index, len(focus) - 1)]
                if left:
                    piece: Any = TypeText(type="type", text=next_text_segment(left, focused))
                    left = left[len(piece.text):]
                else:
                    piece = pieces.pop(0)
                risk = classifier.classify(piece, ActionContext(url=url, focused=focused))
                is_sensitive_field(focus[min(index + 1, len(focus) - 1)])
                if risk.level in ("L2", "L3"):
                    binding_digest(piece.model_dump(mode="json"), url, "ab" * 32)
                index += 1
            for allowed in allowlists:
                check_url(url, allowed)
            redact_url(url)

        base = _row(name, _timed(lambda data=data: parse_action(data, 0), args.rounds))
        cost = _row(name, _timed(keyed, args.rounds))
        print(f"| {name} | {base[1]:.1f} | {cost[1]:.1f} | {cost[2]:.1f} |")
    before, now = _frames()
    click = {"type": "click", "x": 640, "y": 400}
    square = region_box((640, 400), 24, SCREEN_PX)
    for name, box, min_delta in (("screen check: the 48x48 square around a click", square, 48),
                                 ("screen check: the whole screen (an approved action)", (0, 0, *SCREEN_PX), 1)):
        base = _row(name, _timed(lambda: parse_action(click, 0), args.rounds))
        cost = _row(name, _timed(lambda box=box, d=min_delta: changed_pixels(before, now, box, d),
                                 max(50, args.rounds // 100)))
        print(f"| {name} | {base[1]:.1f} | {cost[1]:.1f} | {cost[2]:.1f} |")
    scan = _row("scan", _timed(lambda: scan_text({"page_text": PAGE_TEXT, "title": "Results for penguin"}),
                               max(100, args.rounds // 20)))
    print()
    print(f"Injection scan of a {len(PAGE_TEXT):,}-character page (once per observation): "
          f"median {scan[1]:.0f} µs, p99 {scan[2]:.0f} µs.")
