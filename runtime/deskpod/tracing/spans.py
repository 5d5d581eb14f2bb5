"""The closed vocabulary of deskpod's traces: every span's name and every attribute it may carry.

A span is named from :data:`SPANS`; an attribute's key is ``deskpod.<name>`` for a name of
:data:`ATTRIBUTES`, and its value is of the attribute's kind: a number, a flag, or a word of
a closed vocabulary (an action's type, a risk level, an error's code...). A text that is not
such a word becomes ``"other"``: page text, typed text, URLs, element names and secrets have
no attribute to go into, and no free text reaches an exporter by mistake. The docs' table of
spans and attributes is made from these two tables (``docs/guides/traces.md``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ATTRIBUTES", "AttributeSpec", "AttributeValue", "CAPTURE", "CONFIRMATION_WAIT", "DAEMON_REQUEST", "EXECUTE",
    "OTHER", "POLICY_DECISION", "RUN", "SETTLE", "SPANS", "STEP", "VERIFICATION", "attribute_key", "clean_attributes",
]

RUN: Final = "deskpod.run"
STEP: Final = "deskpod.step"
POLICY_DECISION: Final = "deskpod.policy_decision"
CONFIRMATION_WAIT: Final = "deskpod.confirmation_wait"
VERIFICATION: Final = "deskpod.verification"
DAEMON_REQUEST: Final = "deskpod.daemon_request"
EXECUTE: Final = "deskpod.daemon.execute"
SETTLE: Final = "deskpod.daemon.settle"
CAPTURE: Final = "deskpod.daemon.capture"

SPANS: Final[dict[str, tuple[str, str]]] = {
    RUN: ("(root)", "one run of a task, GUI or code, from its first record to its sealed last one"),
    STEP: (RUN, "one step of a GUI run: the agent's proposal validated and executed action by action"),
    POLICY_DECISION: (STEP, "one action judged: the control under it probed, its risk level and the decision"),
    CONFIRMATION_WAIT: (STEP, "a person asked to approve one action, until the answer (or none) came"),
    VERIFICATION: (RUN, "the task's success condition checked on the environment"),
    DAEMON_REQUEST: ("any span above", "one request to the sandbox's daemon, from sending it to its reply"),
    EXECUTE: (DAEMON_REQUEST, "the daemon executing the request's actions (from its reply's timings)"),
    SETTLE: (DAEMON_REQUEST, "the daemon waiting for the page to settle (from its reply's `settle_s`)"),
    CAPTURE: (DAEMON_REQUEST, "the daemon capturing and encoding the screenshot (from its reply's `capture_s`)"),
}
"""Every span's name → (its parent, what it covers)."""

OTHER: Final = "other"
"""What a text attribute's value becomes when it is not a word of its vocabulary."""

Kind = Literal["int", "float", "bool", "word", "run_id"]

_PATTERNS: Final[dict[str, re.Pattern[str]]] = {
    "word": re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}"),
    "run_id": re.compile(r"(run|code)-[0-9a-f]{12}"),
}


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute: its kind (``int``, ``float`` seconds, ``bool``, ``word``: an identifier
    of at most 40 characters, ``run_id``), the spans that carry it, and what it means."""

    kind: Kind
    spans: tuple[str, ...]
    doc: str


ATTRIBUTES: Final[dict[str, AttributeSpec]] = {
    "run_id": AttributeSpec("run_id", (RUN,), "the run's id (its audit log is `<run_id>.jsonl`)"),
    "run_kind": AttributeSpec("word", (RUN,), "`gui` or `code`"),
    "status": AttributeSpec("word", (RUN,), "how the run ended: `succeeded`, `failed`, `cancelled`, `ended`"),
    "steps": AttributeSpec("int", (RUN,), "the steps the run took"),
    "step": AttributeSpec("int", (STEP, POLICY_DECISION, CONFIRMATION_WAIT), "the step's number, from 1"),
    "actions": AttributeSpec("int", (STEP, DAEMON_REQUEST), "the actions of the proposal, or of the request"),
    "outcome": AttributeSpec("word", (STEP, CONFIRMATION_WAIT, VERIFICATION),
                             "a step's `ok`, `denied`, `error`; an answer's `approved`, `denied`, `timeout`, "
                             "`wrong_digest`; a check's `verified`, `not_yet`"),
    "rule": AttributeSpec("word", (STEP,), "the rule that refused a denied step (`blocked_action`, `allowlist`...)"),
    "action": AttributeSpec("word", (POLICY_DECISION,), "the action's type (`click`, `type`, `navigate`...)"),
    "action_index": AttributeSpec("int", (POLICY_DECISION,), "the action's place in its proposal, from 0"),
    "risk": AttributeSpec("word", (POLICY_DECISION, CONFIRMATION_WAIT), "the risk level, `L0` to `L3`"),
    "decision": AttributeSpec("word", (POLICY_DECISION,),
                              "`allow`, `confirm` (a person is asked) or `deny` (an allowlist refused it)"),
    "attempt": AttributeSpec("int", (CONFIRMATION_WAIT,), "which time the person is asked about the action, from 1"),
    "request": AttributeSpec("word", (DAEMON_REQUEST,), "the request's type (`act`, `navigate`, `exec`...)"),
    "error": AttributeSpec("word", tuple(SPANS), "the error's code when the span's work failed (`screen_changed`, "
                                                 "`policy_denied`...; `internal` for a bug, `cancelled`)"),
    "reported_s": AttributeSpec("float", (EXECUTE, SETTLE, CAPTURE), "the seconds the daemon reported"),
    "clamped": AttributeSpec("bool", (EXECUTE, SETTLE, CAPTURE),
                             "the reported time did not fit in the request's own interval and was cut"),
    "settled": AttributeSpec("bool", (SETTLE,), "the page settled (else the wait timed out)"),
    "settle_signal": AttributeSpec("word", (SETTLE,), "what ended the settle wait (`frame`, `quiet_window`...)"),
}
"""Every attribute's name (its key is ``deskpod.<name>``) → its kind, spans and meaning."""

AttributeValue = str | int | float | bool
"""An attribute's value as a caller gives it."""


def attribute_key(name: str) -> str:
    """The key of attribute ``name`` (``step`` → ``deskpod.step``).

    Raises:
        KeyError: ``name`` is not in :data:`ATTRIBUTES` (a mistake in deskpod's code).
    """
    if name not in ATTRIBUTES:
        raise KeyError(f"no trace attribute {name!r}: add it to deskpod.tracing.spans.ATTRIBUTES")
    return f"deskpod.{name}"


def clean_attributes(attributes: dict[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    """``attributes`` keyed as exported, each value of its attribute's kind: ``None`` left out,
    a text that is not a word of its vocabulary ``"other"``, a number not finite or of another
    kind left out.

    Raises:
        KeyError: a name is not in :data:`ATTRIBUTES`.
    """
    out: dict[str, AttributeValue] = {}
    for name, value in attributes.items():
        key = attribute_key(name)
        kind = ATTRIBUTES[name].kind
        if value is None:
            continue
        if kind in _PATTERNS:
            out[key] = value if isinstance(value, str) and _PATTERNS[kind].fullmatch(value) else OTHER
        elif kind == "bool":
            if isinstance(value, bool):
                out[key] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = int(value) if kind == "int" else float(value)
    return out
