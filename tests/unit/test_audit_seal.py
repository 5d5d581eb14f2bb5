"""An audit log that proves its own end (found by a security review of the controller).

Before, ``verify-log`` without ``--head`` accepted a log with its last lines cut, an
empty file, and a log rewritten with its chain recomputed, and a run that raised or
was cancelled left no ``run_finished``. Each test here is one way an attacker who can
write the log file (but does not hold the controller's private key) would try it, or
one way a run can end.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_sandbox import FakeSandbox, Page

from deskpod.controller.agent import ScriptedAgent
from deskpod.controller.audit_log import GENESIS, AuditLog, verify_log
from deskpod.controller.audit_sign import AuditPublicKey, AuditSigner, public_key_path
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.errors import AuditKeyError

SIGNER = AuditSigner.generate()
KEY = SIGNER.public_key


def sealed_log(path: Path, signer: AuditSigner = SIGNER) -> str:
    log = AuditLog(path, "run-1", signer)
    for index in range(4):
        log.write("step", step=index, text="naïve ✓")
    log.finish(status="failed", reason="limit reached")
    return log.head


def rechain(lines: list[bytes]) -> list[bytes]:
    """What an attacker without the key can do: fix every ``prev`` and ``seq`` after an edit."""
    out, prev = [], GENESIS
    for seq, line in enumerate(lines):
        record = json.loads(line)
        record["prev"], record["seq"] = prev, seq
        raw = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
        out.append(raw)
        prev = hashlib.sha256(raw).hexdigest()
    return out


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def test_a_sealed_log_verifies_with_the_exported_public_key_alone(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    head = sealed_log(path)
    reviewer_key = AuditPublicKey.from_pem(KEY.pem().encode())
    check = verify_log(path, public_key=reviewer_key)
    assert check.ok and check.lines == 5 and check.head == head and check.key_id == KEY.key_id, check
    last = json.loads(path.read_bytes().splitlines()[-1])
    assert last["event"] == "run_finished" and list(last)[-1] == "seal" and last["seal"]["alg"] == "ed25519"
    assert verify_log(path, head, public_key=reviewer_key).ok


def test_a_log_cut_short_fails_without_a_head(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    sealed_log(path)
    lines = path.read_bytes().splitlines()
    for keep in (1, 3, 4):
        write_lines(path, lines[:keep])
        check = verify_log(path, public_key=KEY)
        assert not check.ok and "cut short" in check.error, (keep, check)


def test_an_empty_log_fails(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"")
    check = verify_log(path, public_key=KEY)
    assert not check.ok and "empty" in check.error


def test_a_rechained_log_fails_without_a_head(tmp_path: Path) -> None:
    """Drop a step, flip the verdict, recompute the whole chain: the seal no longer verifies."""
    path = tmp_path / "run.jsonl"
    sealed_log(path)
    lines = path.read_bytes().splitlines()
    edited = [lines[0], *lines[2:-1], lines[-1].replace(b'"status":"failed"', b'"status":"succeeded"')]
    write_lines(path, rechain(edited))
    check = verify_log(path, public_key=KEY)
    assert not check.ok and "does not verify" in check.error, check
    # Cutting the log and ending it with a run_finished of one's own: no seal to give it.
    forged = json.loads(lines[-1])
    del forged["seal"]
    write_lines(path, rechain([*lines[:2], json.dumps(forged).encode()]))
    check = verify_log(path, public_key=KEY)
    assert not check.ok and "no seal" in check.error, check


def test_a_log_sealed_by_another_key_fails(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    sealed_log(path, AuditSigner.generate())
    check = verify_log(path, public_key=KEY)
    assert not check.ok and "not by the key given" in check.error


def test_an_unsealed_log_passes_only_when_told_and_anchored_by_its_head(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    log = AuditLog(path, "run-1")
    log.write("step", step=1)
    log.finish(status="succeeded", reason="ok")
    assert "no seal" in verify_log(path, public_key=KEY).error
    assert verify_log(path, log.head, public_key=None, require_seal=False).ok


def test_the_key_is_created_once_private_and_its_public_half_is_written_beside(tmp_path: Path) -> None:
    path = tmp_path / "state" / "audit" / "signing.key"
    first = AuditSigner.load_or_create(path)
    second = AuditSigner.load_or_create(path)
    assert first.public_key.key_id == second.public_key.key_id
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert AuditPublicKey.load(public_key_path(path)).key_id == first.public_key.key_id
    assert AuditPublicKey.load(path).key_id == first.public_key.key_id, "the public half of a private key file"
    path.write_text("not a key\n")
    with pytest.raises(AuditKeyError):
        AuditSigner.load_or_create(path)


# ---- every exit path of a run writes the sealed run_finished ----------------------------------


class Exploding:
    """An agent with a bug: its first proposal raises."""

    async def propose(self, observation: Any, last: Any) -> Any:
        raise RuntimeError("the model SDK broke")

    async def close(self) -> None:
        pass


class Waiting:
    """An agent that never answers (the run is then cancelled from outside)."""

    async def propose(self, observation: Any, last: Any) -> Any:
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


def gui_task() -> TaskSpec:
    return TaskSpec.model_validate({"name": "fake", "start_url": "http://shop.test/",
                                    "success": {"page_text_contains": "Payment sent"}})


def last_record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_bytes().splitlines()[-1])


def test_an_agent_that_raises_ends_the_run_failed_with_a_sealed_log(tmp_path: Path) -> None:
    sandbox = FakeSandbox({"http://shop.test/": Page("Shop", "Welcome")})
    result = asyncio.run(run_task(gui_task(), sandbox, audit_dir=tmp_path, agent=Exploding(), signer=SIGNER))
    assert result.status == "failed" and "RuntimeError" in result.reason
    assert last_record(result.audit_log)["event"] == "run_finished"
    assert verify_log(result.audit_log, result.audit_head, public_key=KEY).ok


def test_a_cancelled_run_task_still_ends_its_log(tmp_path: Path) -> None:
    sandbox = FakeSandbox({"http://shop.test/": Page("Shop", "Welcome")})

    async def main() -> None:
        run = asyncio.create_task(run_task(gui_task(), sandbox, audit_dir=tmp_path, agent=Waiting(), signer=SIGNER))
        await asyncio.sleep(0.3)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    [path] = tmp_path.glob("run-*.jsonl")
    record = last_record(path)
    assert record["event"] == "run_finished" and record["status"] == "cancelled"
    assert verify_log(path, public_key=KEY).ok


def test_a_code_run_that_hits_a_bug_or_is_cancelled_ends_its_log(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from deskpod.controller import code_agent
    from deskpod.controller.code_task import load_code_task

    task = load_code_task(Path(code_agent.__file__).parents[1] / "tasks" / "code_mini_billing.yaml")

    class Broken:
        """A sandbox connection that fails with a bug, or never completes."""

        hang = False

        @classmethod
        async def connect(cls, *_: Any, **__: Any) -> Any:
            if cls.hang:
                await asyncio.Event().wait()
            raise ValueError("a bug before the sandbox was reached")

    async def main() -> None:
        failed = await code_agent.run_code_task(task, "ws://unused", "t" * 20, audit_dir=tmp_path / "a",
                                                signer=SIGNER)
        assert failed.status == "failed" and "ValueError" in failed.reason and failed.audit_head
        assert verify_log(failed.audit_log, failed.audit_head, public_key=KEY).ok
        Broken.hang = True
        run = asyncio.create_task(code_agent.run_code_task(task, "ws://unused", "t" * 20, audit_dir=tmp_path / "b",
                                                           signer=SIGNER, agent=ScriptedAgent([], None)))
        await asyncio.sleep(0.2)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    monkeypatch.setattr(code_agent, "SandboxClient", Broken)
    asyncio.run(main())
    [path] = (tmp_path / "b").glob("code-*.jsonl")
    assert last_record(path)["status"] == "cancelled" and verify_log(path, public_key=KEY).ok


# ---- the commands -----------------------------------------------------------------------------


def deskpod(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from deskpod.cli import main; main()", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env})


@pytest.mark.process
def test_verify_log_and_audit_key_commands(tmp_path: Path) -> None:
    env = {"DESKPOD_AUDIT_KEY": str(tmp_path / "keys" / "signing.key")}
    exported = deskpod("audit-key", env=env)
    assert exported.returncode == 0 and exported.stdout.startswith("-----BEGIN PUBLIC KEY-----"), exported.stderr
    (tmp_path / "controller.pub").write_text(exported.stdout)
    path = tmp_path / "run-1.jsonl"
    head = sealed_log(path, AuditSigner.load_or_create(tmp_path / "keys" / "signing.key"))
    beside = deskpod("verify-log", str(path), env=env)
    assert beside.returncode == 5 and "no pinned key" in beside.stdout, "the key file on this host is not a pin"
    pinned = {**env, "DESKPOD_AUDIT_PUBLIC_KEY": str(tmp_path / "controller.pub")}
    ok = deskpod("verify-log", str(path), env=pinned)
    assert ok.returncode == 0 and "sealed by key" in ok.stdout, ok.stdout + ok.stderr
    reviewer = deskpod("verify-log", str(path), "--public-key", str(tmp_path / "controller.pub"),
                       env={"DESKPOD_AUDIT_KEY": str(tmp_path / "nowhere.key")})
    assert reviewer.returncode == 0, reviewer.stdout + reviewer.stderr
    write_lines(path, path.read_bytes().splitlines()[:-1])
    cut = deskpod("verify-log", str(path), env=pinned)
    assert cut.returncode == 1 and "cut short" in cut.stdout
    assert deskpod("verify-log", str(path), "--unsigned", env=env).returncode == 2
    assert deskpod("verify-log", str(path), "--unsigned", "--head", head, env=env).returncode == 1


def test_verify_log_without_any_key_says_the_seal_is_not_verified_with_its_own_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a reviewer's machine (no controller key) ``verify-log LOG`` said "BROKEN ... no public key"
    and exited 1, the code of a broken log: an intact log is "chain intact, seal NOT verified (no
    pinned key)", exit 5; with the key pinned it is sealed (0); a cut log is still broken (1)."""
    from typer.testing import CliRunner

    from deskpod.cli import EXIT_FAILURE, EXIT_OK, EXIT_UNVERIFIED, app
    from deskpod.settings import get_settings

    monkeypatch.setenv("DESKPOD_AUDIT_KEY", str(tmp_path / "no-key-here" / "signing.key"))
    monkeypatch.setenv("DESKPOD_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "controller.pub").write_text(KEY.pem(), encoding="utf-8")
    path = tmp_path / "run.jsonl"
    head = sealed_log(path)
    get_settings.cache_clear()
    try:
        unpinned = CliRunner().invoke(app, ["verify-log", str(path)])
        as_json = CliRunner().invoke(app, ["verify-log", str(path), "--json"])
        pinned = CliRunner().invoke(app, ["verify-log", str(path), "--public-key", str(tmp_path / "controller.pub")])
        write_lines(path, path.read_bytes().splitlines()[:-1])
        cut = CliRunner().invoke(app, ["verify-log", str(path)])
    finally:
        get_settings.cache_clear()
    assert unpinned.exit_code == EXIT_UNVERIFIED, unpinned.output
    assert "chain intact, seal NOT verified (no pinned key)" in unpinned.stdout, unpinned.output
    document = json.loads(as_json.stdout)
    assert as_json.exit_code == EXIT_UNVERIFIED and document["ok"] is False and document["seal_verified"] is False
    assert document["head"] == head and document["intact"] is True
    assert pinned.exit_code == EXIT_OK and f"sealed by key {KEY.key_id}" in pinned.stdout, pinned.output
    assert cut.exit_code == EXIT_FAILURE and "BROKEN" in cut.stdout, cut.output


def test_deskpod_code_prints_the_audit_head_like_deskpod_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    import typer

    from deskpod.cli.context import Invocation
    from deskpod.cli.defaults import builtin_defaults
    from deskpod.cli.run import _report
    from deskpod.controller.code_agent import CodeRunResult

    result = CodeRunResult("code-1", "failed", "not verified", 2, 1.0, [], tmp_path / "code-1.jsonl", "ab" * 32)
    with pytest.raises(typer.Exit) as exited:
        _report(Invocation(json=False, defaults=builtin_defaults(), command="code"), "task", result, "changed: (nothing)")
    assert exited.value.exit_code == 1
    assert f"audit log head: {'ab' * 32}" in capsys.readouterr().out
