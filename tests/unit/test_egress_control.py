"""The egress proxy's run list without Docker: the control endpoint's checks (a subset of the
stack's list, by squid's ``dstdomain`` reading) and the ``--task`` helper's answers as the
list file appears, changes and goes away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from egress_stand_ins import load_egress_module

control = load_egress_module("egress_control")
grant_check = load_egress_module("grant_check")


@pytest.mark.parametrize(("value", "stack", "expected"), [
    (None, ["demo.test"], (None, [])),
    (["demo.test"], ["demo.test", "allowed.test"], (["demo.test"], [])),
    ([".Demo.Test"], ["demo.test"], (["demo.test"], [])),
    (["a.demo.test"], ["demo.test"], (["a.demo.test"], ["a.demo.test"])),  # dstdomain: exact host only
    (["a.demo.test", "demo.test"], [".demo.test"], (["a.demo.test", "demo.test"], [])),
    (["blocked.test"], ["demo.test"], (["blocked.test"], ["blocked.test"])),
    ([], ["demo.test"], ([], [])),
])
def test_a_run_list_must_be_inside_the_stacks(value: list[str] | None, stack: list[str],
                                              expected: tuple[list[str] | None, list[str]]) -> None:
    assert control.check_domains(value, stack) == expected


@pytest.mark.parametrize("value", ["demo.test", [1], ["demo test"], ["-x.test"], ["a" * 300], ["d.test"] * 201])
def test_anything_but_a_list_of_host_names_is_refused(value: object) -> None:
    with pytest.raises(ValueError):
        control.check_domains(value, ["demo.test"])


def test_the_task_helper_follows_the_list_file(tmp_path: Path) -> None:
    path = tmp_path / "task-allowlist.txt"
    helper = grant_check.TaskList(str(path))
    assert helper.answer("allowed.test\n") == "OK", "no file: no run list"
    path.write_text("demo.test\n")
    assert helper.answer("demo.test -\n") == "OK"
    assert helper.answer("a.demo.test\n") == "OK"
    assert helper.answer("allowed.test\n").startswith("ERR")
    assert helper.answer("evildemo.test\n").startswith("ERR")
    replacement = tmp_path / "new.txt"
    replacement.write_text("allowed.test\n")
    os.replace(replacement, path)
    assert helper.answer("allowed.test\n") == "OK" and helper.answer("demo.test\n").startswith("ERR")
    path.write_text("")
    assert helper.answer("demo.test\n").startswith("ERR"), "an empty list refuses every host"
    path.unlink()
    assert helper.answer("allowed.test\n") == "OK"
