"""The daemon's workspace tools on a temporary folder (no Docker): confinement, output caps, processes."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deskpod.agentd.workspace.confined import confine
from deskpod.agentd.workspace.process import TRUNCATION_MARKER, OutputCap, exec_env, run_process
from deskpod.agentd.workspace.tools import Workspace, patch_paths
from deskpod.errors import InvalidRequestError, PathDeniedError, WorkspaceError
from deskpod.protocol import Result, parse_request, parse_server_message


@pytest.fixture()
def ws(tmp_path: Path) -> Workspace:
    (tmp_path / "ws").mkdir()
    (tmp_path / "state").mkdir()
    workspace = Workspace(tmp_path / "ws", tmp_path / "state")
    assert workspace.root == str((tmp_path / "ws").resolve())  # also makes its private folders
    return workspace


def call(ws: Workspace, **fields: Any) -> Any:
    """Parse ``fields`` as a wire request, run it, and send the output through the wire format too."""
    request = parse_request(json.dumps({"id": "t", **fields}))
    output = ws._run(request, threading.Event())  # type: ignore[arg-type]
    reply = parse_server_message(Result(id="t", workspace=output).model_dump_json())
    assert isinstance(reply, Result)
    return reply.workspace


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def targz(members: list[tuple[str, bytes | None, str | None]]) -> str:
    """A base64 tar.gz of (name, data, symlink target) members; data None and target None = folder."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, target in members:
            info = tarfile.TarInfo(name)
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


class TestConfine:
    ROOT = "/workspace"

    @pytest.mark.parametrize(
        "path, rel",
        [
            ("a.txt", "a.txt"),
            ("sub/../ok.txt", "ok.txt"),
            ("./x/y", "x/y"),
            (".", ""),
            ("/workspace/a", "a"),
            ("/workspace", ""),
        ],
    )
    def test_paths_inside_resolve_relative_to_the_root(self, path: str, rel: str) -> None:
        assert confine(self.ROOT, path) == rel

    @pytest.mark.parametrize(
        "path, reason",
        [
            ("../../etc/passwd", "outside_workspace"),
            ("/etc/passwd", "outside_workspace"),
            ("sub/../../x.txt", "outside_workspace"),
            ("/workspace2/a", "outside_workspace"),
            ("a\x00b", "nul_byte"),
            ("", "empty"),
        ],
    )
    def test_escapes_are_denied_with_a_reason(self, path: str, reason: str) -> None:
        """``..``, absolute paths outside and NUL bytes are refused with ``path_denied``."""
        with pytest.raises(PathDeniedError) as info:
            confine(self.ROOT, path)
        assert info.value.code == "path_denied"
        assert info.value.detail["reason"] == reason

    def test_symlinks_are_resolved_before_the_check(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        (root / "inside").mkdir(parents=True)
        (root / "to_etc").symlink_to("/etc")
        (root / "to_inside").symlink_to("inside")
        (root / "dangling_out").symlink_to("/nonexistent/file")
        assert confine(str(root), "to_inside/x") == "inside/x"
        for path in ("to_etc", "to_etc/passwd", "dangling_out", "to_etc/../workspace"):
            with pytest.raises(PathDeniedError) as info:
                confine(str(root), path)
            assert info.value.detail["reason"] == "symlink_escape", path


class TestFileTools:
    def test_cases_end_to_end_nothing_created_outside(self, ws: Workspace, tmp_path: Path) -> None:
        """The four bad paths are refused and create nothing; ``sub/../ok.txt`` writes ``<ws>/ok.txt``."""
        before = tree(tmp_path)
        for fields in (
            {"type": "read_file", "path": "../../etc/passwd"},
            {"type": "read_file", "path": "/etc/passwd"},
            {"type": "write_file", "path": "sub/../../x.txt", "content": "x"},
            {"type": "read_file", "path": "a\x00b"},
            {"type": "write_file", "path": "../state/evil.txt", "content": "x"},
        ):
            with pytest.raises(PathDeniedError):
                call(ws, **fields)
        assert tree(tmp_path) == before
        written = call(ws, type="write_file", path="sub/../ok.txt", content="ok\n")
        assert written.path == "ok.txt" and written.created and written.size == 3
        assert (tmp_path / "ws" / "ok.txt").read_text() == "ok\n"
        assert tree(tmp_path) - before == {"ws/ok.txt"}

    def test_a_symlink_to_etc_inside_the_workspace_leads_nowhere(self, ws: Workspace, tmp_path: Path) -> None:
        (tmp_path / "ws" / "etc").symlink_to("/etc")
        (tmp_path / "ws" / "sub").mkdir()
        (tmp_path / "ws" / "sub" / "up").symlink_to("../..")
        for fields in (
            {"type": "read_file", "path": "etc/passwd"},
            {"type": "list_dir", "path": "etc"},
            {"type": "write_file", "path": "etc/evil.conf", "content": "x"},
            {"type": "write_file", "path": "sub/up/state/evil", "content": "x"},
            {"type": "exec", "argv": ["true"], "cwd": "etc"},
            {"type": "apply_patch", "patch": "--- /dev/null\n+++ b/etc/evil\n@@ -0,0 +1 @@\n+x\n"},
        ):
            with pytest.raises(PathDeniedError) as info:
                call(ws, **fields)
            assert info.value.detail["reason"] == "symlink_escape", fields
        listing = call(ws, type="list_dir", path=".")
        assert {(e.name, e.kind, e.target) for e in listing.entries} == {
            ("etc", "symlink", "/etc"),
            ("sub", "dir", None),
        }
        assert not (tmp_path / "state" / "evil").exists()

    def test_a_symlinked_file_is_never_written_through_on_replace(self, ws: Workspace, tmp_path: Path) -> None:
        target = tmp_path / "ws" / "real.txt"
        target.write_text("old")
        (tmp_path / "ws" / "alias.txt").symlink_to("real.txt")
        call(ws, type="write_file", path="alias.txt", content="new")
        assert target.read_text() == "new" and (tmp_path / "ws" / "alias.txt").is_symlink()

    def test_read_file_line_ranges_and_byte_caps(self, ws: Workspace, tmp_path: Path) -> None:
        (tmp_path / "ws" / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
        whole = call(ws, type="read_file", path="f.txt")
        assert whole.content.count("\n") == 10 and not whole.truncated and whole.end_line == 10 and whole.size == 71
        part = call(ws, type="read_file", path="f.txt", start_line=3, max_lines=2)
        assert part.content == "line 3\nline 4\n" and (part.start_line, part.end_line) == (3, 4) and part.truncated
        capped = call(ws, type="read_file", path="f.txt", max_bytes=15)
        assert capped.content == "line 1\nline 2\n" and capped.truncated
        past = call(ws, type="read_file", path="f.txt", start_line=50)
        assert past.content == "" and past.end_line == 49 and not past.truncated
        (tmp_path / "ws" / "long.txt").write_bytes(b"x" * 100 + b"\xff")
        long = call(ws, type="read_file", path="long.txt", max_bytes=10)
        assert long.content == "x" * 10 and long.truncated
        assert call(ws, type="read_file", path="long.txt").replaced_invalid_utf8

    def test_reading_a_fifo_or_a_folder_fails_at_once(self, ws: Workspace, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "ws" / "pipe")
        (tmp_path / "ws" / "dir").mkdir()
        started = time.monotonic()
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="read_file", path="pipe")
        assert info.value.detail["reason"] == "not_a_file" and time.monotonic() - started < 2
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="read_file", path="dir")
        assert info.value.detail["reason"] == "not_a_file"
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="read_file", path="missing.txt")
        assert info.value.detail["reason"] == "not_found"

    def test_write_keeps_the_mode_and_create_dirs_can_be_refused(self, ws: Workspace, tmp_path: Path) -> None:
        script = tmp_path / "ws" / "run.sh"
        script.write_text("old")
        script.chmod(0o755)
        assert not call(ws, type="write_file", path="run.sh", content="new").created
        assert script.stat().st_mode & 0o777 == 0o755
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="write_file", path="a/b/c.txt", content="x", create_dirs=False)
        assert info.value.detail["reason"] == "not_found"
        call(ws, type="write_file", path="a/b/c.txt", content="x")
        assert (tmp_path / "ws" / "a" / "b" / "c.txt").read_text() == "x"
        assert not [p for p in (tmp_path / "ws").rglob("*.tmp")]

    def test_edit_file_needs_exactly_one_match(self, ws: Workspace, tmp_path: Path) -> None:
        (tmp_path / "ws" / "m.py").write_text("a = 1\nb = 1\n")
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="edit_file", path="m.py", old_text="= 1", new_text="= 2")
        assert info.value.detail["reason"] == "ambiguous" and info.value.detail["count"] == 2
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="edit_file", path="m.py", old_text="c = 1", new_text="")
        assert info.value.detail["reason"] == "no_match"
        call(ws, type="edit_file", path="m.py", old_text="b = 1", new_text="b = 2")
        assert (tmp_path / "ws" / "m.py").read_text() == "a = 1\nb = 2\n"


class TestPatches:
    def test_patch_paths_reads_headers_renames_and_quoted_names(self) -> None:
        patch = (
            "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n--- not a header\n"
            "-old\n+new\n"
            "diff --git a/old.txt b/new.txt\nrename from old.txt\nrename to new.txt\n"
            '--- /dev/null\n+++ "b/caf\\303\\251.txt"\n@@ -0,0 +1 @@\n+x\n'
        )
        assert patch_paths(patch) == ["src/x.py", "old.txt", "new.txt", "café.txt"]
        with pytest.raises(WorkspaceError):
            patch_paths("just text\n")

    @pytest.mark.process
    def test_apply_patch_applies_whole_or_not_at_all(self, ws: Workspace, tmp_path: Path) -> None:
        (tmp_path / "ws" / "a.txt").write_text("one\ntwo\n")
        good = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
        applied = call(ws, type="apply_patch", patch=good)
        assert applied.files == ["a.txt"] and (tmp_path / "ws" / "a.txt").read_text() == "one\nTWO\n"
        half = good.replace("-two\n+TWO", "-nope\n+x") + "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+n\n"
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="apply_patch", patch=half)
        assert info.value.detail["reason"] == "patch_failed"
        assert not (tmp_path / "ws" / "new.txt").exists()
        with pytest.raises(PathDeniedError):
            call(ws, type="apply_patch", patch="--- /dev/null\n+++ b/../evil\n@@ -0,0 +1 @@\n+x\n")
        assert not (tmp_path / "evil").exists()


class TestOutputCap:
    def test_short_output_is_kept_whole(self) -> None:
        cap = OutputCap.split(100)
        cap.feed(b"hello ")
        cap.feed(b"world")
        assert cap.text() == "hello world" and not cap.truncated and cap.total == 11

    def test_long_output_keeps_head_and_tail_around_a_marker(self) -> None:
        cap = OutputCap.split(24)
        for i in range(10_000):
            cap.feed(f"{i:05d}\n".encode())
        text = cap.text()
        assert cap.truncated and cap.total == 60_000
        assert text.startswith("00000\n00001\n") and text.endswith("09998\n09999\n")
        assert TRUNCATION_MARKER.format(omitted=60_000 - 24, total=60_000) in text
        assert len(cap._tail) <= 5  # memory stays bounded

    def test_tail_only_cap_and_chunks_larger_than_the_cap(self) -> None:
        cap = OutputCap(0, 4)
        cap.feed(b"abcdefgh")
        cap.feed(b"ij")
        assert cap.text().endswith("ghij") and "8 of 10 bytes" not in cap.text() and "6 of 10 bytes" in cap.text()


@pytest.mark.process
class TestProcesses:
    ENV = exec_env("/tmp")

    def run(self, cmd: str, timeout_s: float = 10.0, cancel: threading.Event | None = None) -> Any:
        out, err = OutputCap.split(65_536), OutputCap.split(65_536)
        result = run_process(
            ["/bin/bash", "-c", cmd],
            cwd="/tmp",
            env=self.ENV,
            timeout_s=timeout_s,
            stdout_cap=out,
            stderr_cap=err,
            cancel=cancel,
        )
        return result, out.text(), err.text()

    def test_prompts_see_eof_and_return_at_once(self) -> None:
        """Stdin is at EOF, so a prompt returns at once instead of waiting."""
        result, out, _ = self.run("read -p 'Ok to proceed? (y) ' a; echo got:$a", timeout_s=5)
        assert result.exit_code == 0 and out == "got:\n" and result.duration_s < 2
        result, _, err = self.run("python3 -c 'input()'", timeout_s=5)
        assert result.exit_code == 1 and "EOFError" in err and result.duration_s < 3

    def test_timeout_kills_the_whole_group(self, tmp_path: Path) -> None:
        pidfile = tmp_path / "child.pid"
        result, _, _ = self.run(f"sleep 60 & echo $! > {pidfile}; wait", timeout_s=1)
        assert result.timed_out and result.exit_code is None and result.signal == 9
        assert result.duration_s < 3
        assert not _alive(int(pidfile.read_text()))

    def test_background_children_do_not_outlive_the_command(self, tmp_path: Path) -> None:
        pidfile = tmp_path / "bg.pid"
        result, out, _ = self.run(f"sleep 60 & echo $! > {pidfile}; echo done", timeout_s=10)
        assert result.exit_code == 0 and out == "done\n" and result.duration_s < 3
        assert not _alive(int(pidfile.read_text()))

    def test_cancel_kills_at_once(self) -> None:
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        result, _, _ = self.run("sleep 30", cancel=cancel)
        assert result.cancelled and result.duration_s < 3

    def test_environment_is_fixed_and_holds_nothing_of_the_daemon(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("DESKPOD_TOKEN", "secret-token-value")
        monkeypatch.setenv("HTTPS_PROXY", "http://egress:3128")
        _, out, _ = self.run("env")
        names = {line.split("=", 1)[0] for line in out.splitlines()}
        assert "DESKPOD_TOKEN" not in names and "HTTPS_PROXY" not in names and "DISPLAY" not in names
        assert "secret-token-value" not in out
        assert exec_env("/h", "http://egress:3128")["HTTPS_PROXY"] == "http://egress:3128"
        assert exec_env("/h")["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process, waiting briefly for the kernel to finish the kill."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in {"Z", "X"}:
            return False
        time.sleep(0.05)
    return True


class TestExecTool:
    @pytest.mark.process
    def test_exec_reports_exit_codes_missing_programs_and_caps(self, ws: Workspace, tmp_path: Path) -> None:
        out = call(ws, type="exec", argv=["bash", "-c", "echo out; echo err >&2; exit 3"])
        assert (out.exit_code, out.stdout, out.stderr) == (3, "out\n", "err\n")
        missing = call(ws, type="exec", argv=["no-such-program-here"])
        assert missing.exit_code == 127 and "no-such-program-here" in missing.stderr
        big = call(ws, type="exec", cmd="head -c 3000000 /dev/zero | tr '\\0' a; echo; echo END", max_output_bytes=1000)
        assert big.truncated and big.stdout_bytes == 3_000_005 and big.stdout.endswith("END\n")
        assert "bytes and 0 line breaks omitted" in big.stdout and len(big.stdout) < 1200
        (tmp_path / "ws" / "sub").mkdir()
        assert call(ws, type="exec", cmd="pwd", cwd="sub").stdout.strip() == str((tmp_path / "ws" / "sub").resolve())

    def test_exec_needs_exactly_one_command_form(self) -> None:
        for fields in (
            {"type": "exec", "id": "1"},
            {"type": "exec", "id": "1", "cmd": "a", "argv": ["a"]},
            {"type": "exec", "id": "1", "argv": ["a\x00b"]},
            {"type": "exec", "id": "1", "argv": []},
        ):
            with pytest.raises(InvalidRequestError):
                parse_request(json.dumps(fields))


class TestSeedAndDiff:
    @pytest.mark.process
    def test_seed_makes_a_git_baseline_and_diff_shows_changes(self, ws: Workspace, tmp_path: Path) -> None:
        (tmp_path / "ws" / "stale.txt").write_text("from an earlier task")
        archive = targz(
            [
                ("src", None, None),
                ("src/app.py", b"x = 1\n", None),
                ("README", b"hi\n", None),
                ("link", None, "src/app.py"),
            ]
        )
        seeded = call(ws, type="seed_workspace", archive=archive)
        assert seeded.files == 2 and seeded.size == 9 and len(seeded.git_head) == 40
        assert not (tmp_path / "ws" / "stale.txt").exists()
        assert os.readlink(tmp_path / "ws" / "link") == "src/app.py"
        (tmp_path / "ws" / "src" / "app.py").write_text("x = 2\n")
        (tmp_path / "ws" / "new.txt").write_text("new\n")
        (tmp_path / "ws" / "README").unlink()
        diff = call(ws, type="workspace_diff", base=seeded.git_head)
        assert {(f.path, f.status) for f in diff.files} == {
            ("src/app.py", "modified"),
            ("new.txt", "added"),
            ("README", "deleted"),
        }
        assert "-x = 1\n+x = 2" in diff.diff and diff.base == seeded.git_head
        assert call(ws, type="exec", argv=["git", "status", "--porcelain"]).stdout.count("??") == 1  # index untouched

    @pytest.mark.process
    def test_a_host_git_repository_keeps_its_history_and_head(self, ws: Workspace, tmp_path: Path) -> None:
        from deskpod.controller.code_task import pack_workspace

        repo = tmp_path / "repo"
        repo.mkdir()
        (repo / "a.py").write_text("a = 1\n")
        env = exec_env(str(tmp_path))
        for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "host commit"]):
            subprocess.run(argv, cwd=repo, env=env, check=True)
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, env=env, check=True, capture_output=True, text=True
        )
        archive = base64.b64encode(pack_workspace(repo)).decode()
        seeded = call(ws, type="seed_workspace", archive=archive)
        assert seeded.git_head == head.stdout.strip() and seeded.files >= 2
        log = call(ws, type="exec", argv=["git", "log", "--format=%s"])
        assert log.stdout == "host commit\n"

    @pytest.mark.parametrize(
        "members",
        [
            [("../evil.txt", b"x", None)],
            [("/abs.txt", b"x", None)],
            [("out", None, "../../etc")],
            [("out", None, "/etc/passwd")],
            [("ok.txt", b"x", None), ("sub/../../evil", b"x", None)],
        ],
    )
    def test_bad_archives_are_refused_before_the_workspace_is_touched(
        self, ws: Workspace, tmp_path: Path, members: list[tuple[str, bytes | None, str | None]]
    ) -> None:
        (tmp_path / "ws" / "keep.txt").write_text("keep")
        before = tree(tmp_path)
        with pytest.raises(WorkspaceError) as info:
            call(ws, type="seed_workspace", archive=targz(members))
        assert info.value.detail["reason"] == "bad_archive"
        assert tree(tmp_path) == before

    def test_hard_links_and_garbage_are_refused(self, ws: Workspace) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("hard")
            info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
            tar.addfile(info)
        for archive in (base64.b64encode(buf.getvalue()).decode(), base64.b64encode(b"not gzip").decode(), "@@@"):
            with pytest.raises(WorkspaceError) as info_:
                call(ws, type="seed_workspace", archive=archive)
            assert info_.value.detail["reason"] == "bad_archive"
