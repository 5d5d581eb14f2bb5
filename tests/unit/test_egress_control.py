"""The egress proxy's run list without Docker: the control endpoint's checks (a subset of the
stack's list, by squid's ``dstdomain`` reading), the ``--task`` helper's answers as the
list file appears, changes and goes away, and a pool slot's lessee token (served for real
on loopback), which a lease's holder gets and the next reset replaces."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from lease_backend import LeaseBackend

from deskpod.backend import SandboxPool, pool_reset
from deskpod.backend.base import SandboxHandle
from deskpod.backend.egress_lessee import lessee_control, new_lessee
from deskpod.client.egress_control import ControlEndpoint
from deskpod.controller.egress import egress_control_of
from deskpod.errors import DeskpodError, EgressControlError
from egress_stand_ins import control_endpoint, load_egress_module

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


# ---- the lessee token (a pool slot's proxy): what a lease's holder keeps after it

CONTROL_TOKEN = "control-token-" + "c" * 30


@pytest.fixture()
def single(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The real control endpoint in the single mode on loopback (stack: allowed.test, demo.test)."""
    with control_endpoint(control, tmp_path, monkeypatch, CONTROL_TOKEN) as url:
        yield url


def _call(url: str, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    status, answer = ControlEndpoint(url, token, 5.0).call(method, path, body)
    return status, answer


def test_a_lessee_token_sets_the_run_list_only_and_the_next_one_ends_it(single: str) -> None:
    """A pool lease's holder gets the lessee token: it reads and sets the run's list, and nothing
    else; once the pool puts the next lessee's token in force, the old one is answered 401 and
    its list is gone (main's proxy had no lessee token: holders got the control token itself,
    which no reset changed)."""
    first, second = "lessee-one-" + "a" * 30, "lessee-two-" + "b" * 30
    assert _call(single, "PUT", control.LESSEE_PATH, CONTROL_TOKEN,
                 {"token_sha256": hashlib.sha256(first.encode()).hexdigest()}) == (200, {"lessee": True})
    assert _call(single, "PUT", control.CONTROL_PATH, first, {"allowed_domains": ["demo.test"]})[0] == 200
    assert _call(single, "GET", control.CONTROL_PATH, first)[1]["allowed_domains"] == ["demo.test"]
    # The lessee token cannot name its own successor, nor keep itself in force.
    assert _call(single, "PUT", control.LESSEE_PATH, first, {"token_sha256": "0" * 64})[0] == 403
    assert _call(single, "PUT", control.LESSEE_PATH, first, {"token_sha256": None})[0] == 403
    # The pool's reset: the next lessee's token, and no run list.
    assert _call(single, "PUT", control.LESSEE_PATH, CONTROL_TOKEN,
                 {"token_sha256": hashlib.sha256(second.encode()).hexdigest()})[0] == 200
    assert _call(single, "GET", control.CONTROL_PATH, second)[1]["allowed_domains"] is None
    assert _call(single, "PUT", control.CONTROL_PATH, second, {"allowed_domains": ["allowed.test"]})[0] == 200
    for method, body in (("GET", None), ("PUT", {"allowed_domains": None}), ("PUT", {"allowed_domains": ["demo.test"]})):
        assert _call(single, method, control.CONTROL_PATH, first, body)[0] == 401
    assert _call(single, "GET", control.CONTROL_PATH, second)[1]["allowed_domains"] == ["allowed.test"]
    # The control token takes the lessee token away; the list goes with it.
    assert _call(single, "PUT", control.LESSEE_PATH, CONTROL_TOKEN, {"token_sha256": None}) == (200, {"lessee": False})
    assert _call(single, "GET", control.CONTROL_PATH, second)[0] == 401
    assert _call(single, "GET", control.CONTROL_PATH, CONTROL_TOKEN)[1]["allowed_domains"] is None


@pytest.mark.parametrize("body", [{"token_sha256": "ABC"}, {"token_sha256": "g" * 64}, {"token_sha256": 1}, {},
                                  {"token_sha256": "0" * 64, "x": 1}, ["0" * 64]])
def test_a_malformed_lessee_token_is_refused(single: str, body: Any) -> None:
    assert _call(single, "PUT", control.LESSEE_PATH, CONTROL_TOKEN, body)[0] == 400


def test_a_lease_hands_out_the_lessee_token_never_the_slots_control_token() -> None:
    handle = SandboxHandle(id="s1", container="c", network="n", egress="e", address="10.0.0.2", token="t",
                           egress_address="10.0.0.3", egress_token="control", egress_lessee="lessee")
    assert lessee_control(handle) == {"url": "http://10.0.0.3:3129", "token": "lessee"}
    held = egress_control_of(handle)
    assert held is not None and held.endpoint._token == "lessee"
    assert lessee_control(replace(handle, egress_lessee="")) is None
    assert "lessee" not in repr(handle) and "control" not in repr(handle)


def test_a_new_lessee_token_is_put_in_force_with_the_control_token(single: str) -> None:
    port = int(single.rsplit(":", 1)[1])
    handle = SandboxHandle(id="s1", container="c", network="n", egress="e", address="10.0.0.2", token="t",
                           egress_address="127.0.0.1", egress_token=CONTROL_TOKEN)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("deskpod.backend.base.EGRESS_CONTROL_PORT", port)
        first = asyncio.run(new_lessee(handle))
        second = asyncio.run(new_lessee(first))
    assert first.egress_lessee and second.egress_lessee and first.egress_lessee != second.egress_lessee
    assert _call(single, "GET", control.CONTROL_PATH, first.egress_lessee)[0] == 401
    assert _call(single, "GET", control.CONTROL_PATH, second.egress_lessee)[0] == 200
    with pytest.raises(EgressControlError):
        asyncio.run(new_lessee(replace(second, egress_token=second.egress_lessee)))
    tenant = replace(handle, egress_tenant="claim-1")
    assert asyncio.run(new_lessee(tenant)) is tenant


class _SlotBackend(LeaseBackend):
    """The lease tests' backend whose sandboxes name a slot proxy: the loopback endpoint, with
    ``control`` as the slot's control token."""

    def __init__(self, control: str) -> None:
        super().__init__()
        self.control = control
        self.destroyed: list[str] = []

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        handle = await super().create(token=token, pool=pool)
        return replace(handle, egress_address="127.0.0.1", egress_token=self.control)

    async def destroy(self, sandbox_id: str) -> None:
        self.destroyed.append(sandbox_id)


@pytest.fixture()
def slot_port(single: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The loopback endpoint stands in for every slot's proxy (its port as the control port)."""
    monkeypatch.setattr("deskpod.backend.base.EGRESS_CONTROL_PORT", int(single.rsplit(":", 1)[1]))

    async def observed(handle: SandboxHandle, start_url: str | None = None, timeout_s: float = 0) -> None:
        return None

    monkeypatch.setattr(pool_reset, "ready_observation", observed)
    return single


def test_every_release_and_every_lease_taken_back_puts_a_new_lessee_token_in_force(slot_port: str) -> None:
    """The pool's side: a sandbox is ready with a lessee token of its own; a release and an
    expired lease taken back each empty the run list and replace it, so the last holder's token
    is refused (401) and its list is gone."""
    async def run() -> list[str]:
        pool = SandboxPool(_SlotBackend(CONTROL_TOKEN), name="p", size=1, reset_mode="recreate", lease_s=0.2)
        await pool.fill()
        tokens = [pool.members[0].handle.egress_lessee]
        first = await pool.acquire()
        assert first.egress_lessee == tokens[0]
        assert _call(slot_port, "PUT", control.CONTROL_PATH, tokens[0], {"allowed_domains": ["demo.test"]})[0] == 200
        await pool.release(first.id, pool.member(first.id).lease)
        tokens.append(pool.members[0].handle.egress_lessee)
        await pool.acquire()  # and never released: the holder died
        await asyncio.sleep(0.25)
        taken_back = await pool.acquire()
        tokens.append(taken_back.egress_lessee)
        return tokens

    tokens = asyncio.run(run())
    assert len(set(tokens)) == 3 and all(tokens)
    assert [_call(slot_port, "GET", control.CONTROL_PATH, t)[0] for t in tokens] == [401, 401, 200]
    assert _call(slot_port, "GET", control.CONTROL_PATH, tokens[-1])[1]["allowed_domains"] is None


def test_a_slot_whose_proxy_refuses_a_new_lessee_token_leaves_the_pool(slot_port: str) -> None:
    """Fail closed: when the slot's proxy will not take a new lessee token (here it does not know
    the backend's control token), the reset tries a recreate, then a replacement, and the slot
    that never got one is destroyed and leaves the pool instead of being leased again."""
    async def run() -> tuple[SandboxPool, _SlotBackend]:
        backend = _SlotBackend(CONTROL_TOKEN)
        pool = SandboxPool(backend, name="p", size=1, reset_mode="recreate", lease_s=60)
        await pool.fill()
        handle = await pool.acquire()
        backend.control = "another-proxys-token-" + "z" * 30
        pool.member(handle.id).handle = replace(pool.member(handle.id).handle, egress_token=backend.control)
        with pytest.raises(DeskpodError):
            await pool.release(handle.id, pool.member(handle.id).lease)
        return pool, backend

    pool, backend = asyncio.run(run())
    assert pool.members == [] and backend.destroyed == ["s1", "s2"]
