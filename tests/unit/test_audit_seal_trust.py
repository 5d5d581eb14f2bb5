"""Seals that hold only under the operator's pinned key, for their own run and file name.

A security review forged seals where the key and the logs share a folder (the default:
``STATE_DIR/audit`` holds ``signing.key``, ``signing.pub`` and the logs): ``verify-log``
and the console trusted the ``signing.pub`` found there, so a log rewritten and sealed
again with a key of the forger's own, who also put its public half there, verified; and
a whole log copied under another run's name verified too. Each test is the attacker's
move, made with the files alone: write access to the audit folder, no read access to the
controller's private key.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fake_sandbox import FakeSandbox, Page
from running_service import running_service
from typer.testing import CliRunner

from deskpod.cli import EXIT_FAILURE, EXIT_OK, EXIT_UNVERIFIED, app
from deskpod.controller.audit_log import AuditLog, verify_log
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec
from deskpod.service.console.auth import ConsoleUser
from deskpod.settings import get_settings

APPROVER = "a" * 43
USERS = (ConsoleUser("ada", "approver", hashlib.sha256(APPROVER.encode()).hexdigest()),)
_BASE = ("run_id", "seq", "event", "time", "prev")


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A controller host with the default layout: the key and the logs in ``STATE_DIR/audit``."""
    monkeypatch.setenv("DESKPOD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DESKPOD_AUDIT_KEY", raising=False)
    monkeypatch.delenv("DESKPOD_AUDIT_PUBLIC_KEY", raising=False)
    get_settings.cache_clear()
    yield tmp_path / "state" / "audit"
    get_settings.cache_clear()


def failed_run(audit_dir: Path) -> Path:
    """A run of the controller on this host (its default key) that failed: its log."""
    task = TaskSpec.model_validate({"name": "pay", "start_url": "http://shop.test/",
                                    "success": {"page_text_contains": "Payment sent", "timeout_s": 0.2},
                                    "steps": [{"actions": [{"type": "scroll", "x": 5, "y": 5, "scroll_y": 1}]}]})
    sandbox = FakeSandbox({"http://shop.test/": Page("Shop", "Total: 10 EUR")})
    result = asyncio.run(run_task(task, sandbox, audit_dir=audit_dir))
    assert result.status == "failed", result.reason
    return Path(result.audit_log)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def forge(path: Path, signer: AuditSigner, **final: Any) -> None:
    """Rewrite the log at ``path`` with deskpod's own writer, its final record changed by
    ``final``, and seal it with ``signer`` (the forger's key)."""
    lines = records(path)
    path.unlink()
    log = AuditLog(path, lines[0]["run_id"], signer)
    for record in lines[:-1]:
        log.write(record["event"], **{k: v for k, v in record.items() if k not in _BASE})
    log.finish(**{**{k: v for k, v in lines[-1].items() if k not in (*_BASE, "seal")}, **final})


def plant_key(audit_dir: Path) -> AuditSigner:
    """The forger's public key, put where the controller's is: ``signing.pub`` replaced
    (the folder is writable; the file itself need not be)."""
    forger = AuditSigner.generate()
    (audit_dir / "signing.pub").unlink()
    (audit_dir / "signing.pub").write_text(forger.public_key.pem())
    return forger


def verify_cli(*args: str) -> Any:
    get_settings.cache_clear()
    return CliRunner().invoke(app, ["verify-log", *args])


def test_a_log_resealed_with_a_key_planted_beside_it_never_verifies(state: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    log = failed_run(state)
    pinned = tmp_path / "pinned" / "controller.pub"
    pinned.parent.mkdir()
    pinned.write_text(AuditSigner.load_or_create().public_key.pem())
    forge(log, plant_key(state), status="succeeded", reason="success check passed")
    assert records(log)[-1]["status"] == "succeeded"

    unpinned = verify_cli(str(log))
    assert unpinned.exit_code == EXIT_UNVERIFIED and "seal NOT verified (no pinned key)" in unpinned.stdout, \
        unpinned.output
    with_key = verify_cli(str(log), "--public-key", str(pinned))
    assert with_key.exit_code == EXIT_FAILURE and "not by the key given" in with_key.stdout, with_key.output
    monkeypatch.setenv("DESKPOD_AUDIT_PUBLIC_KEY", str(pinned))
    from_setting = verify_cli(str(log), "--json")
    document = json.loads(from_setting.stdout)
    assert from_setting.exit_code == EXIT_FAILURE and "not by the key given" in document["error"], document
    get_settings.cache_clear()
    replay = CliRunner().invoke(app, ["replay", str(log), "--html", str(tmp_path / "r.html"), "--json"])
    assert replay.exit_code == EXIT_FAILURE and json.loads(replay.stdout)["verdict"] == "broken", replay.output


def test_the_console_checks_seals_with_the_key_it_seals_with_not_a_file_beside_the_logs(state: Path) -> None:
    """The console's run history said "sealed" of the forged log: it read ``signing.pub``."""
    log = failed_run(state)
    forge(log, plant_key(state), status="succeeded", reason="success check passed")
    run_id = records(log)[0]["run_id"]

    async def main() -> tuple[str, str]:
        async with running_service("s" * 43, state, console_users=USERS) as port:
            cookie = await asyncio.to_thread(sign_in, port)
            listed = await asyncio.to_thread(get, port, "/console/runs", cookie)
            page = await asyncio.to_thread(get, port, f"/console/runs/{run_id}", cookie)
            return listed, page

    listed, page = asyncio.run(main())
    assert 'data-verdict="broken"' in page and "not by the key given" in page, page
    assert 'data-verdict="sealed"' not in listed


def test_a_log_copied_under_another_runs_name_fails_and_says_so(state: Path, tmp_path: Path) -> None:
    paid = failed_run(state)
    forge(paid, AuditSigner.load_or_create(), status="succeeded", reason="success check passed")  # a real success
    other = failed_run(state)
    key = tmp_path / "controller.pub"
    key.write_text(AuditSigner.load_or_create().public_key.pem())
    assert verify_log(other, public_key=AuditSigner.load_or_create().public_key).ok
    shutil.copyfile(paid, other)
    check = verify_log(other, public_key=AuditSigner.load_or_create().public_key)
    assert not check.ok and "copied under another run's name" in check.error, check
    assert f"its file name '{other.name}' is not run '{paid.stem}'" in check.error, check
    cli = verify_cli(str(other), "--public-key", str(key))
    assert cli.exit_code == EXIT_FAILURE and "another run's name" in cli.stdout, cli.output
    renamed = paid.with_name("run-000000000000.jsonl")
    paid.rename(renamed)
    assert "renamed" in verify_log(renamed, public_key=AuditSigner.load_or_create().public_key).error


def test_a_log_whose_run_id_was_changed_fails_and_says_so(state: Path) -> None:
    """The forger edits every record's run id to another run's (and fixes the chain), under
    the log's own name or under the other run's."""
    log = failed_run(state)
    key = AuditSigner.load_or_create().public_key
    lines, prev = [], "0" * 64
    for seq, record in enumerate(records(log)):
        record.update(run_id="run-feedfeedfeed", prev=prev, seq=seq)
        raw = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
        lines.append(raw)
        prev = hashlib.sha256(raw).hexdigest()
    forged = b"".join(line + b"\n" for line in lines)
    target = log.with_name("run-feedfeedfeed.jsonl")
    target.write_bytes(forged)
    check = verify_log(target, public_key=key)
    assert not check.ok and "the run id it names, changed" in check.error, check
    log.write_bytes(forged)
    check = verify_log(log, public_key=key)
    assert not check.ok and f"its file name '{log.name}' is not run 'run-feedfeedfeed'" in check.error, check
    assert "or its run id changed" in check.error


def seal_v1(path: Path, run_id: str, key: Ed25519PrivateKey) -> None:
    """A log as a controller wrote it before seals named their run: the seal of the line
    alone, under the context ``deskpod audit log seal v1``."""
    log = AuditLog(path, run_id)
    log.write("run_started", task="pay")
    log.finish(status="succeeded", reason="ok")
    *body, last = path.read_bytes().splitlines()
    signer = AuditSigner(key)
    signature = base64.b64encode(key.sign(b"deskpod audit log seal v1\n" + last)).decode()
    seal = {"alg": "ed25519", "key_id": signer.public_key.key_id, "signature": signature}
    last = last[:-1] + b',"seal":' + json.dumps(seal, separators=(",", ":")).encode() + b"}"
    path.write_bytes(b"".join(line + b"\n" for line in (*body, last)))


def test_a_v1_seal_still_verifies_under_its_runs_name_and_fails_under_another(tmp_path: Path) -> None:
    """A reviewer of an old log gets an answer: verified (saying the seal is v1), or why not."""
    key = Ed25519PrivateKey.generate()
    public = AuditSigner(key).public_key
    old = tmp_path / "run-0123456789ab.jsonl"
    seal_v1(old, "run-0123456789ab", key)
    check = verify_log(old, public_key=public)
    assert check.ok and check.key_id == public.key_id and check.seal_version == 1, check
    pem = tmp_path / "controller.pub"
    pem.write_text(public.pem())
    cli = verify_cli(str(old), "--public-key", str(pem))
    assert cli.exit_code == EXIT_OK and "v1 seal" in cli.stdout, cli.output
    copied = tmp_path / "run-ba9876543210.jsonl"
    shutil.copyfile(old, copied)
    check = verify_log(copied, public_key=public)
    assert not check.ok and "(v1) does not name its file" in check.error and "another run's name" in check.error


def test_a_new_seal_names_its_version_run_and_file(tmp_path: Path) -> None:
    signer = AuditSigner.generate()
    path = tmp_path / "run-1.jsonl"
    log = AuditLog(path, "run-1", signer)
    log.finish(status="succeeded", reason="ok")
    assert records(path)[-1]["seal"]["v"] == 2
    check = verify_log(path, public_key=signer.public_key)
    assert check.ok and check.seal_version == 2
    stripped = path.read_bytes().replace(b'"v":2,', b"")
    path.write_bytes(stripped)
    assert "does not verify" in verify_log(path, public_key=signer.public_key).error, "no downgrade to v1"


def sign_in(port: int) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/console/signin", body=urlencode({"token": APPROVER}),
                           headers={"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}",
                                    "Content-Type": "application/x-www-form-urlencoded"})
        response = connection.getresponse()
        assert response.status == 200, response.status  # the page that keeps the page secret
        return response.headers["set-cookie"].split(";", 1)[0]
    finally:
        connection.close()


def get(port: int, path: str, cookie: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
        response = connection.getresponse()
        assert response.status == 200, response.status
        return response.read().decode()
    finally:
        connection.close()
