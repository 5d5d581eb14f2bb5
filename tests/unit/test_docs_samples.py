"""Every code sample of the docs (``docs/``) and of README.md runs, or at least parses.

- Each Python sample is executed as written, against the fake stand-ins of
  ``tests/support``: a daemon on a loopback websocket (:class:`HostileDaemon`, made to play
  the demo site at 1280x800 here), the controller service in-process
  (:func:`running_service`), a fake backend for the pool and for ``DockerSandbox.create()``
  (an integration test runs that one on Docker). Only the addresses are rewritten
  (``ws://sandbox:8765/v1/ws`` and ``ws://127.0.0.1:8766/v1/controller`` become the stand-ins'
  ports; ``attach()`` finds the service's port as on a host, in ``DESKPOD_SERVE_PORT``); the
  free names a fragment uses (``token``, ``url``, ``task``, ...) are given. Every sample
  must have a runner below, so a new one cannot go untested.
- Each ``deskpod ...`` command line of a shell sample parses: the command and every option
  exist (``--help`` appended, through typer's runner); each ``scripts/...`` it runs exists.
- JSON, YAML and TOML samples parse, and those that are a protocol request, a policy, a
  suite or a configuration file validate against their models.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import hashlib
import inspect
import io
import json
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from deskpod.backend import Readiness, SandboxHandle
from deskpod.backend.base import Backend
from deskpod.cli import app
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.task import TaskSpec
from deskpod.eval.suite import SuiteSpec
from deskpod.protocol import SnapshotRestored, parse_request
from deskpod.service.server.metrics_http import METRICS_PATH
from deskpod.settings import Settings, get_settings
from hostile_daemon import HostileDaemon, png
from running_service import running_service

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SANDBOX_URL = "ws://sandbox:8765/v1/ws"
SERVICE_URL = "ws://127.0.0.1:8766/v1/controller"
SCREEN = {"width": 1280, "height": 800}
TOKEN = "sandbox-token-0123456789abcdef"
SERVE_TOKEN = "serve-token-0123456789abcdef"
APPROVER_TOKEN = "approver-token-0123456789abcdef"
TASK = {"name": "pay", "start_url": "http://demo.test/", "allowed_domains": ["demo.test"],
        "success": {"url_matches": "paid", "timeout_s": 0.5}}
"""The ``task`` a fragment opens a session with (the stand-in has no page that pays: a claim
is checked for half a second, then refused)."""


@dataclass(frozen=True)
class Sample:
    """One fenced code block: its page (relative to ``docs/``, or ``README.md``), its number
    among the page's blocks of its language, the language and the code."""

    page: str
    number: int
    language: str
    code: str

    @property
    def id(self) -> str:
        """``page#number``, e.g. ``guides/driving.md#0``."""
        return f"{self.page}#{self.number}"


def samples(*languages: str) -> list[Sample]:
    """The code blocks of every page and of README.md in ``languages``.

    Args:
        languages: fence languages (``""`` is a fence without one).

    Returns:
        The samples, page by page.
    """
    files = [(p.relative_to(DOCS).as_posix(), p) for p in sorted(DOCS.rglob("*.md"))]
    found = []
    for name, path in [*files, ("README.md", ROOT / "README.md")]:
        counts: dict[str, int] = {}
        for match in FENCE.finditer(path.read_text(encoding="utf-8")):
            language = match.group(1)
            counts[language] = counts.get(language, 0) + 1
            if language in languages:
                found.append(Sample(name, counts[language] - 1, language, match.group(2)))
    return found


# ---- stand-ins -------------------------------------------------------------------------------------------


def demo_daemon() -> HostileDaemon:
    """A daemon playing the demo site on a 1280x800 screen: typed text then Enter loads
    ``http://demo.test/search?q=TEXT``, whose page text names the query.

    Returns:
        The daemon (not started: use it as a context manager).
    """
    image = png(SCREEN["width"], SCREEN["height"])
    shot = {"id": "s-1", "format": "png", **SCREEN, "screen_width": SCREEN["width"],
            "screen_height": SCREEN["height"], "scale_x": 1.0, "scale_y": 1.0, "offset_x": 0, "offset_y": 0,
            "sha256": hashlib.sha256(image).hexdigest(), "data": base64.b64encode(image).decode("ascii"),
            "perceptual_hash": "0" * 16}
    site = {"url": "about:blank", "typed": ""}

    def play(n: int, request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
        if n == 0:
            return reply | {"screen": SCREEN, "model_size": SCREEN}
        kind = request.get("type")
        if kind == "navigate":
            site["url"] = request["url"]
        elif kind == "reset":
            site.update(url=request.get("start_url") or "about:blank", typed="")
        elif kind == "act":
            for action in request.get("actions", []):
                if action.get("type") == "type":
                    site["typed"] += action["text"]
                elif action.get("type") == "keypress" and action.get("keys") in (["ENTER"], ["Return"]):
                    site["url"] = f"http://demo.test/search?q={site['typed']}"
        if kind == "configure":
            return reply | {"model_size": SCREEN}
        observation = reply.get("observation")
        if isinstance(observation, dict):
            observation.update(url=site["url"], tabs=[{"id": "t1", "url": site["url"], "title": "Demo",
                                                       "active": True}])
            if "screenshot" in observation:
                observation["screenshot"] = shot
            if "page_text" in observation:
                observation["page_text"] = f"Results for {site['typed']}" if "search" in site["url"] else "Search"
        return reply

    return HostileDaemon(tamper=play)


class FakeBackend(Backend):
    """Sandboxes that exist only as handles, all served by one stand-in daemon on 127.0.0.1."""

    def __init__(self) -> None:
        self.count = 0
        self.destroyed: list[str] = []

    async def create(self, *, token: str | None = None, pool: str = "") -> SandboxHandle:
        self.count += 1
        return SandboxHandle(id=f"s{self.count:04d}", container=f"c{self.count}", network="n", egress="e",
                             address="127.0.0.1", token=token or TOKEN, pool=pool)

    async def wait_ready(self, handle: SandboxHandle, timeout_s: float = 1.0) -> Readiness:
        return Readiness(attempts=1, elapsed_s=0.0, last_status="running, /healthz 200")

    async def recreate(self, handle: SandboxHandle, *, token: str | None = None) -> SandboxHandle:
        return handle

    async def destroy(self, sandbox_id: str) -> None:
        self.destroyed.append(sandbox_id)

    async def is_healthy(self, handle: SandboxHandle) -> bool:
        return True

    async def failure(self, handle: SandboxHandle) -> str | None:
        return None

    async def list_ids(self, pool: str | None = None) -> list[str]:
        return [f"s{i:04d}" for i in range(1, self.count + 1)]


def run_sample(code: str, namespace: dict[str, Any], name: str) -> None:
    """Execute a sample as written; a fragment with top-level ``await`` runs on its own event loop.

    Args:
        code: the sample's code.
        namespace: its globals (the free names it uses).
        name: the file name its tracebacks show.
    """
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)  # the docs' own sample: running it is the point
    if inspect.iscoroutine(result):
        asyncio.run(result)


def addressed(code: str, **urls: str) -> str:
    """``code`` with the stack's addresses replaced by the stand-ins'.

    Args:
        code: the sample.
        urls: ``sandbox`` and ``service``: the stand-ins' URLs.

    Returns:
        The code to run.
    """
    if "sandbox" in urls:
        code = code.replace(SANDBOX_URL, urls["sandbox"])
    if "service" in urls:
        code = code.replace(SERVICE_URL, urls["service"])
    return code


# ---- runners: one per Python sample ----------------------------------------------------------------------

Runner = Callable[[Sample, Path, pytest.MonkeyPatch], None]


def against_daemon(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's own clients (``Sandbox``, ``SyncSandbox``) against the stand-in daemon, in a
    folder holding the checkout's ``runtime`` (the paths samples name), so nothing lands in it."""
    (tmp_path / "runtime").symlink_to(ROOT / "runtime")
    monkeypatch.chdir(tmp_path)
    with demo_daemon() as daemon:
        run_sample(addressed(sample.code, sandbox=daemon.url), {"token": TOKEN, "url": daemon.url}, sample.id)
        assert daemon.requests, "the sample sent the daemon nothing"


def on_docker(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``DockerSandbox.create()`` over a fake backend whose sandbox is the stand-in daemon; the
    sandbox must be removed when the sample's block ends."""
    import deskpod.backend.base
    import deskpod.backend.launch

    backend = FakeBackend()
    monkeypatch.setattr(deskpod.backend.launch, "DockerBackend", lambda config: backend)
    with demo_daemon() as daemon:
        monkeypatch.setattr(deskpod.backend.base, "DAEMON_PORT", int(daemon.url.split(":")[2].split("/")[0]))
        run_sample(sample.code, {}, sample.id)
        assert daemon.requests, "the sample sent the daemon nothing"
    assert backend.destroyed == ["s0001"], "leaving the block did not remove the sandbox"


def against_service(policy: Policy) -> Runner:
    """A runner for the controller service's clients: the service in-process, under ``policy``,
    driving the stand-in daemon (also as the sandbox it owns, named ``stack``); its port in
    ``DESKPOD_SERVE_PORT`` and no stack ``.env`` here."""

    def run(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("DESKPOD_SERVE_TOKEN", SERVE_TOKEN)
        monkeypatch.setenv("DESKPOD_TOKEN", TOKEN)
        monkeypatch.setenv("DESKPOD_STACK_ENV", str(tmp_path / "no.env"))

        async def body(daemon_url: str) -> None:
            token_file = tmp_path / "stack.token"  # the stand-in daemon is the sandbox the service owns
            token_file.write_text(TOKEN)
            async with running_service(SERVE_TOKEN, tmp_path / "audit", approver_token=APPROVER_TOKEN,
                                       policy=policy,
                                       sandboxes=frozenset({f"stack={daemon_url} token_file={token_file}"})) as port:
                monkeypatch.setenv("DESKPOD_SERVE_PORT", str(port))
                get_settings.cache_clear()
                code = addressed(sample.code, sandbox=daemon_url, service=f"ws://127.0.0.1:{port}/v1/controller")
                namespace = {"token": SERVE_TOKEN, "serve_token": SERVE_TOKEN, "approver_token": APPROVER_TOKEN,
                             "sandbox_url": daemon_url, "sandbox_token": TOKEN, "task": TASK}
                await asyncio.wait_for(asyncio.to_thread(run_sample, code, namespace, sample.id), 60)

        with demo_daemon() as daemon:
            try:
                asyncio.run(body(daemon.url))
            finally:
                get_settings.cache_clear()
            assert daemon.requests, "the sample drove no sandbox"

    return run


def against_fake_pool(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool over a fake backend whose sandboxes are all the stand-in daemon."""
    import deskpod.backend
    import deskpod.backend.base

    monkeypatch.setenv("DESKPOD_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    monkeypatch.setattr(deskpod.backend, "DockerBackend", lambda config: FakeBackend())
    with demo_daemon() as daemon:
        monkeypatch.setattr(deskpod.backend.base, "DAEMON_PORT", int(daemon.url.split(":")[2].split("/")[0]))
        run_sample(sample.code, {}, sample.id)
        assert any(r.get("type") == "reset" for r in daemon.requests), "the release reset nothing"
    get_settings.cache_clear()


def kubernetes_backend(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Kubernetes backend's construction (no cluster): the bootstrap token file is given."""
    monkeypatch.setenv("DESKPOD_EGRESS_CONTROL", "http://egress:3129")
    monkeypatch.setenv("DESKPOD_EGRESS_CONTROL_TOKEN", "egress-control-token-0123456789")
    namespace: dict[str, Any] = {"open": lambda path, *a, **k: io.StringIO("bootstrap-token-0123456789abcdef")}
    run_sample(sample.code, namespace, sample.id)
    assert namespace["pool"].backend is namespace["backend"]


def snapshots(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reset, snapshot and restore against the stand-in daemon; the snapshot endpoint's HTTP
    transfer (which the stand-in does not serve) is replaced by an archive in memory."""
    import deskpod.client.wire as wire

    archive = b"\x1f\x8b a snapshot archive"
    restored: list[bytes] = []

    def upload(url: str, token: str, data: bytes, start_url: str | None) -> SnapshotRestored:
        restored.append(data)
        return SnapshotRestored(files=3, size=len(data), url=start_url or "about:blank")

    monkeypatch.setattr(wire, "download_snapshot", lambda url, token: archive)
    monkeypatch.setattr(wire, "upload_snapshot", upload)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    against_daemon(sample, tmp_path, monkeypatch)
    assert restored == [archive]
    assert (tmp_path / "home" / ".local/state/deskpod/snapshots/alice.tar.gz").read_bytes() == archive


RUNNERS: dict[str, Runner] = {
    "README.md#0": against_service(Policy()),
    "guides/driving.md#0": on_docker,
    "guides/driving.md#1": against_daemon,
    "guides/driving.md#2": against_daemon,
    "guides/driving.md#3": against_service(Policy()),
    "guides/service.md#0": against_service(Policy(confirm_actions=["click"])),
    "guides/pool.md#0": against_fake_pool,
    "guides/kubernetes.md#0": kubernetes_backend,
    "guides/snapshots.md#0": snapshots,
}
"""Each Python sample (``page#number``) → how it is run."""


def test_every_python_sample_has_a_runner() -> None:
    assert {s.id for s in samples("python")} == set(RUNNERS)


@pytest.mark.parametrize("sample", samples("python"), ids=lambda s: s.id)
def test_the_python_sample_runs(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    RUNNERS[sample.id](sample, tmp_path, monkeypatch)
    if sample.id == "README.md#0":
        assert capsys.readouterr().out.strip() == "succeeded"


# ---- shell samples ---------------------------------------------------------------------------------------


def commands(code: str) -> Iterator[list[str]]:
    """The simple commands of a shell sample, as words (continuations joined, comments dropped).

    Args:
        code: the sample.

    Yields:
        Each command's words.
    """
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|;&")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set("|;&"):
                if words:
                    yield words
                words = []
            else:
                words.append(token)


def deskpod_arguments(words: list[str]) -> list[str] | None:
    """The arguments of the ``deskpod`` command a command line runs (``None``: it runs none).

    Args:
        words: the command's words (``VAR=value`` assignments before it allowed, or
            ``scripts/compose.sh ... SERVICE`` running it in a container).

    Returns:
        The words after ``deskpod``.
    """
    program = [i for i, word in enumerate(words) if "=" not in word][:1]
    if not program:
        return None
    start = program[0]
    if words[start] == "scripts/compose.sh":  # `scripts/compose.sh run --rm SERVICE deskpod ...`
        start = words.index("deskpod") if "deskpod" in words else start
    if words[start] == "deskpod" or words[start].endswith("/deskpod"):
        return words[start + 1:]
    return None


def test_the_command_parser_catches_a_wrong_option() -> None:
    assert CliRunner().invoke(app, ["run", "task.yaml", "--no-such-option", "--help"]).exit_code == 2
    assert deskpod_arguments(["scripts/compose.sh", "run", "controller", "deskpod", "code", "x"]) == ["code", "x"]
    assert deskpod_arguments(["kubectl", "create", "namespace", "deskpod"]) is None
    assert list(commands("A=1 deskpod pool up \\\n  --size 2  # note\nb; c")) == [
        ["A=1", "deskpod", "pool", "up", "--size", "2"], ["b"], ["c"]]


@pytest.mark.parametrize("sample", samples("sh"), ids=lambda s: s.id)
def test_the_shell_sample_parses(sample: Sample) -> None:
    for words in commands(sample.code):
        arguments = deskpod_arguments(words)
        if arguments is not None:
            result = CliRunner().invoke(app, [*arguments, "--help"], env={"COLUMNS": "200"})
            assert result.exit_code == 0, f"{shlex.join(words)}:\n{result.output}"
        elif words[0].startswith("scripts/"):
            assert (ROOT / words[0]).is_file(), words[0]


# ---- data samples ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", samples("json", "yaml", "toml"), ids=lambda s: s.id)
def test_the_data_sample_parses(sample: Sample) -> None:
    if sample.language == "json":
        data = json.loads(sample.code)
    elif sample.language == "yaml":
        data = yaml.safe_load(sample.code)
    else:
        data = tomllib.loads(sample.code)
    assert isinstance(data, dict) and data
    if data.get("type") == "act":
        parse_request(sample.code)
    if "exec_confirm" in data:
        Policy.model_validate(data)
    if "tasks" in data:
        SuiteSpec.model_validate(data)
    if "start_url" in data and "success" in data:
        TaskSpec.model_validate(data)
    if sample.language == "toml":
        assert set(data) <= set(Settings.model_fields)
    for job in data.get("scrape_configs", ()):
        assert job["metrics_path"] == METRICS_PATH
    for server in data.get("mcpServers", {}).values():
        if server.get("command") == "deskpod":
            assert CliRunner().invoke(app, [*server["args"], "--help"]).exit_code == 0
