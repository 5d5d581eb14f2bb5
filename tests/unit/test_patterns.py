"""Patterns from outside are matched in linear time (the security review's finding on patterns).

The review's reproduction: an agent's ``open`` carried ``success.url_matches`` that
backtracks on a 27-character URL; matched on the service's event loop, it stopped every
session, the console, approvals and ``/healthz``. Every place a task's, a suite's, a
policy's or an agent's pattern is matched now uses RE2; syntax RE2 refuses (lookaround,
backreferences) is a typed error when the message or file is read, never at match time.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from deskpod.controller.policy.exec_risk import classify_exec, matches_pattern
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.run_api import check_success
from deskpod.controller.task import TaskSpec
from deskpod.errors import InvalidActionError
from deskpod.protocol import Observation, parse_action
from deskpod.errors import PatternError
from deskpod.protocol.patterns import compile_pattern, pattern_search

EVIL = r"^(a+)+$"
"""Exponential for a backtracking engine on ``a`` * n + ``b``."""
HOSTILE_URL = "http://x.test/" + "a" * 40 + "!"


LINEAR_TIME_PROBE = f"""
from deskpod.controller.policy.exec_risk import classify_exec, matches_pattern
from deskpod.controller.run_api import check_success
from deskpod.controller.task import SuccessCheck
from deskpod.protocol import Observation
from deskpod.protocol.patterns import pattern_search

check = SuccessCheck.model_validate({{"url_matches": r"^http://x\\.test/(a+)+$"}})
ok, why = check_success(check, Observation(settled=True, url={HOSTILE_URL!r}, title=""))
assert ok is False and "does not match" in why, why
command = "echo " + "a" * 40 + "!"
assert matches_pattern(classify_exec(cmd=command), command, "re:(a+)+$") is False
assert pattern_search({EVIL!r}, "a" * 40 + "b") is False
print("linear")
"""
"""The three places an outside pattern meets text an agent or a page controls: the success
check (the service's and the runner's), an exec policy rule, the daemon's ``wait_for``. A
backtracking engine holds the interpreter for hours on each (it never yields the lock, so
the probe runs in a process of its own, with a deadline)."""


@pytest.mark.process
def test_outside_patterns_meet_hostile_text_in_linear_time() -> None:
    assert _run_with_deadline(LINEAR_TIME_PROBE, 60) == "linear"


def _run_with_deadline(code: str, deadline_s: float) -> str:
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=deadline_s)
    except subprocess.TimeoutExpired:
        return f"still matching after {deadline_s:g} s: the pattern backtracked"
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_ordinary_patterns_match_as_before() -> None:
    assert pattern_search(r"^http://demo\.test/search\?q=penguin$", "http://demo.test/search?q=penguin")
    assert not pattern_search(r"^http://demo\.test/$", "http://demo.test/x")


@pytest.mark.parametrize("pattern, construct", [(r"(?=x)", "(?="), (r"(?<!a)b", "(?<"), (r"(a)\1", "\\1"),
                                                (r"a++", "++"), (r"(", "missing )")])
def test_syntax_re2_refuses_is_a_typed_error_naming_it(pattern: str, construct: str) -> None:
    with pytest.raises(PatternError, match="RE2") as refused:
        compile_pattern(pattern)
    assert construct in str(refused.value)


def test_each_place_a_pattern_enters_refuses_lookaround_with_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="url_matches: not a regular expression RE2 accepts"):
        TaskSpec.model_validate({"name": "t", "start_url": "http://demo.test/", "success": {"url_matches": "(?!x)"}})
    with pytest.raises(InvalidActionError, match="RE2"):
        parse_action({"type": "wait_for", "url_matches": r"(a)\1"}, 0)
    with pytest.raises(ValidationError, match="RE2"):
        Policy.model_validate({"exec_confirm_patterns": ["re:(?<=rm )-rf"]})


def test_ordinary_patterns_still_work_everywhere() -> None:
    spec = TaskSpec.model_validate({"name": "t", "start_url": "http://demo.test/",
                                    "success": {"url_matches": r"(?i)^https?://demo\.test/(search|find)\?q=\w+$"}})
    assert spec.success.url_matches is not None
    obs = Observation(settled=True, url="http://DEMO.test/find?q=penguin", title="")
    assert check_success(spec.success, obs)[0] is True
    assert parse_action({"type": "wait_for", "url_matches": r"/done(\?|$)"}, 0)
    assert matches_pattern(classify_exec(cmd="rm -rf /tmp/x"), "rm -rf /tmp/x", r"re:\brm\s+-rf\b")

