"""The clean-room verdict's pure parts (what changed, what may change, the command, the report) and the
workspace manifest it reads, on a temporary folder (no Docker)."""

from __future__ import annotations

import base64
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest
from deskpod.agentd.workspace.tools import Workspace
from deskpod.controller.verdict import (
    Change,
    SeedFile,
    clean_room_archive,
    compute_changes,
    judge,
    junit_key,
    parse_collected,
    parse_junit,
    pytest_argv,
    refusals,
    seed_files,
    seed_ini,
)
from deskpod.errors import JUnitError
from deskpod.protocol import (
    MAX_TEST_REPORT_BYTES,
    CleanRoomRequest,
    ManifestEntry,
    WorkspaceManifestRequest,
)


def tar_gz(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


SEED = {"billing.py": b"x = 1\n", "tests/test_billing.py": b"def test_a():\n    pass\n", "run.sh": b"true\n",
        ".git/HEAD": b"ref: refs/heads/main\n"}


def entry(path: str, data: bytes, executable: bool = False) -> ManifestEntry:
    import hashlib

    return ManifestEntry(path=path, kind="file", size=len(data), executable=executable,
                         sha256=hashlib.sha256(data).hexdigest())


def test_seed_files_leave_git_out_and_changes_cover_bytes_modes_and_deletions() -> None:
    seed = seed_files(tar_gz(SEED))
    assert sorted(seed) == ["billing.py", "run.sh", "tests/test_billing.py"] and seed["run.sh"].executable
    entries = [entry("billing.py", b"x = 2\n"), entry("run.sh", b"true\n", executable=False),
               entry("new.py", b""), ManifestEntry(path="fifo", kind="other", size=0)]
    assert compute_changes(seed, entries) == [
        Change("billing.py", "modified", "file"),
        Change("fifo", "added", "other"),
        Change("new.py", "added", "file"),
        Change("run.sh", "modified", "file"),
        Change("tests/test_billing.py", "deleted", "none"),
    ]


def _refused(path: str, data: bytes = b"", status: str = "added", *, seed: dict[str, SeedFile] | None = None,
             editable: tuple[str, ...] = ("*",), new_tests: bool = False) -> str | None:
    change = Change(path, status, "file")  # type: ignore[arg-type]
    found = refusals([change], {path: data}, seed or {}, editable, ["tests/*"], new_tests)
    return found.get(path)


@pytest.mark.parametrize(
    "path, fragment",
    [
        ("conftest.py", "test configuration"),
        ("src/deep/conftest.py", "test configuration"),
        ("pytest.ini", "test configuration"),
        (".pytest.ini", "test configuration"),
        ("tox.ini", "test configuration"),
        ("setup.cfg", "test configuration"),
        ("pytest.py", "shadows the test runner"),
        ("pytest/__main__.py", "shadows the test runner"),
        ("_pytest/python.py", "shadows the test runner"),
        ("py.py", "shadows the test runner"),
        ("pluggy/__init__.py", "shadows the test runner"),
        ("sitecustomize.py", "site hook"),
        ("usercustomize.py", "site hook"),
        ("evil.pth", "site hook"),
        ("lib/x.dist-info/entry_points.txt", "site hook"),
        ("tests/test_billing.py", "protected"),
    ],
)
def test_tests_their_configuration_and_runner_shadows_are_refused(path: str, fragment: str) -> None:
    assert fragment in (_refused(path) or "")


def test_pyproject_is_refused_only_when_it_configures_pytest() -> None:
    assert _refused("pyproject.toml", b"[project]\nname = 'x'\n") is None
    assert "tool.pytest" in (_refused("pyproject.toml", b"[tool.pytest.ini_options]\naddopts = '-x'\n") or "")
    assert "tool.pytest" in (_refused("pyproject.toml", b"tool.pytest.ini_options.addopts = '-x'\n") or "")
    assert "not valid TOML" in (_refused("pyproject.toml", b"[tool.pytest.ini_options\n") or "")
    # Removing the seed's pytest table is a change of test configuration too.
    seed = {"pyproject.toml": SeedFile("file", b"[tool.pytest.ini_options]\nx = 1\n")}
    assert "tool.pytest" in (_refused("pyproject.toml", b"", "modified", seed=seed) or "")


def test_editable_globs_new_tests_and_caches() -> None:
    assert _refused("billing.py", editable=("billing.py",)) is None
    assert "editable" in (_refused("README.md", editable=("billing.py",)) or "")
    assert _refused("tests/test_new.py", new_tests=True) is None
    assert "protected" in (_refused("tests/test_billing.py", status="modified", new_tests=True) or "")
    assert "test configuration" in (_refused("tests/conftest.py", new_tests=True) or "")
    assert _refused("__pycache__/billing.cpython-311.pyc") is None  # listed, never carried over


def test_the_clean_room_archive_is_the_seed_with_the_change() -> None:
    archive = tar_gz(SEED, {"link": "billing.py"})
    changes = [Change("billing.py", "modified", "file"), Change("tests/test_billing.py", "deleted", "none"),
               Change("new.sh", "added", "file"), Change("link", "modified", "symlink"),
               Change("__pycache__/b.pyc", "added", "file")]
    contents = {"billing.py": b"x = 2\n", "new.sh": b"echo\n", "__pycache__/b.pyc": b"\0"}
    room = clean_room_archive(archive, changes, contents, {"link": "run.sh"}, {"new.sh": True, "billing.py": False})
    with tarfile.open(fileobj=io.BytesIO(room), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == [".git/HEAD", "billing.py", "link", "new.sh", "run.sh"]
        assert tar.extractfile("billing.py").read() == b"x = 2\n"  # type: ignore[union-attr]
        assert members["new.sh"].mode == 0o755 and members["link"].linkname == "run.sh"
    with pytest.raises(ValueError, match="not read back"):
        clean_room_archive(archive, [Change("new.py", "added", "file")], {}, {}, {})


def test_the_command_is_isolated_and_reads_no_file_above_the_room() -> None:
    argv = pytest_argv(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], None, collect=False)
    assert argv[:5] == ["python3", "-I", "-B", "-m", "pytest"]
    assert ["-c", "/dev/null"] == argv[argv.index("-c"):argv.index("-c") + 2]
    assert {"--rootdir={room}/src", "--confcutdir={room}/src", "pythonpath={room}/src",
            "--junitxml={room}/report.xml"} <= set(argv)
    collect = pytest_argv(["python3", "-m", "pytest", "-q", "-vv", "tests"], "pytest.ini", collect=True)
    assert "-vv" not in collect and collect.count("-q") == 1 and collect[-2:] == ["--collect-only", "-q"]
    assert "{room}/src/pytest.ini" in collect and "tests" in collect
    for bad in (["pytest"], ["sh", "-c", "pytest"], ["python3", "-c", "import pytest"]):
        with pytest.raises(ValueError):
            pytest_argv(bad, None, collect=False)


def test_the_seeds_own_configuration_file_is_found_in_pytests_order() -> None:
    def seed(**files: bytes) -> dict[str, SeedFile]:
        return {name.replace("_", "."): SeedFile("file", data) for name, data in files.items()}

    assert seed_ini({}) is None
    assert seed_ini(seed(pyproject_toml=b"[project]\n")) is None
    assert seed_ini(seed(pyproject_toml=b"[tool.pytest.ini_options]\n", tox_ini=b"[pytest]\n")) == "pyproject.toml"
    assert seed_ini(seed(setup_cfg=b"[tool:pytest]\n", pytest_ini=b"")) == "pytest.ini"


def test_collected_ids_and_their_junit_names() -> None:
    output = ("tests/test_a.py::test_one\ntests/test_a.py::TestK::test_two[a b-1]\n\n"
              "2 tests collected in 0.01s\n")
    ids = parse_collected(output)
    assert ids == ["tests/test_a.py::test_one", "tests/test_a.py::TestK::test_two[a b-1]"]
    assert junit_key(ids[0]) == ("tests.test_a", "test_one")
    assert junit_key(ids[1]) == ("tests.test_a.TestK", "test_two[a b-1]")


REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.test_a" name="test_one" time="0.1"/>
<testcase classname="tests.test_a" name="test_two" time="0.1"><failure message="x">boom</failure></testcase>
<testcase classname="tests.test_a" name="test_one" time="0.1"><error message="teardown">e</error></testcase>
<testcase classname="tests.test_a" name="test_skip"><skipped/></testcase>
</testsuite></testsuites>"""


def test_the_junit_report_is_parsed_as_untrusted_input() -> None:
    outcomes = parse_junit(REPORT)
    assert outcomes == {("tests.test_a", "test_one"): "error", ("tests.test_a", "test_two"): "failed",
                        ("tests.test_a", "test_skip"): "skipped"}
    laughs = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
              "<testsuites>&lol2;</testsuites>")
    for bad, fragment in [(None, "no JUnit report"), (laughs, "DTD"), ("<testsuites>", "not XML"),
                          ("<html/>", "not <testsuites>"), ("<a/>" + " " * MAX_TEST_REPORT_BYTES, "larger")]:
        with pytest.raises(JUnitError, match=fragment):
            parse_junit(bad)


def test_every_seed_test_must_pass_and_nothing_may_fail() -> None:
    ids = ["tests/test_a.py::test_one", "tests/test_a.py::test_two"]
    good = {("tests.test_a", "test_one"): "passed", ("tests.test_a", "test_two"): "passed"}
    assert judge(ids, good, 0).ok and judge(ids, good, 0).reason == "all 2 seed tests passed (2 passed in all)"
    assert "not in the report: tests/test_a.py::test_two" in judge(ids, {("tests.test_a", "test_one"): "passed"}, 1).reason
    skipped = {**good, ("tests.test_a", "test_two"): "skipped"}
    assert "did not pass: tests/test_a.py::test_two (skipped)" in judge(ids, skipped, 0).reason
    extra = {**good, ("tests.test_b", "test_new"): "failed"}
    assert "1 other test(s) failed" in judge(ids, extra, 1).reason
    assert not judge([], good, 0).ok
    assert "exited 1" in judge(ids, good, 1).reason and not judge(ids, good, 1).ok


def test_the_manifest_ignores_no_ignore_rule_and_follows_no_symlink(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".git" / "info").mkdir(parents=True)
    (ws / ".git" / "info" / "exclude").write_text("conftest.py\n")
    (ws / ".gitignore").write_text(".gitignore\nsecret/\n")
    (ws / "secret").mkdir()
    (ws / "secret" / "x.py").write_bytes(b"1")
    (ws / "conftest.py").write_text("")
    (ws / "out").symlink_to("/etc")
    os.mkfifo(ws / "pipe")
    workspace = Workspace(ws, tmp_path / "state")
    listing = workspace.manifest(WorkspaceManifestRequest(type="workspace_manifest", id="m"))
    kinds = {e.path: e.kind for e in listing.entries}
    assert kinds == {".gitignore": "file", "conftest.py": "file", "out": "symlink", "pipe": "other",
                     "secret/x.py": "file"}
    assert all(e.content is None for e in listing.entries)
    some = workspace.manifest(WorkspaceManifestRequest(type="workspace_manifest", id="m", paths=["secret/x.py"],
                                                       max_content_bytes=1))
    assert [(e.path, e.content) for e in some.entries] == [("secret/x.py", base64.b64encode(b"1").decode())]
    none = workspace.manifest(WorkspaceManifestRequest(type="workspace_manifest", id="m", paths=["conftest.py",
                                                       "secret/x.py"], max_content_bytes=0))
    assert none.content_omitted == ["secret/x.py"]  # the empty conftest.py fits in 0 bytes


@pytest.mark.process
def test_the_clean_room_is_fresh_isolated_and_removed(tmp_path: Path) -> None:
    """The room's files are the archive's alone; HOME and TMPDIR are its own; the report comes back."""
    (tmp_path / "ws").mkdir()
    workspace = Workspace(tmp_path / "ws", tmp_path / "state", verdict_root=tmp_path / "rooms")
    script = ("import os, sys; print(sorted(os.listdir('.')), os.environ['HOME'].endswith('/home'), "
              "os.environ['TMPDIR'].endswith('/tmp')); open(sys.argv[1], 'w').write('<testsuites/>')")
    request = CleanRoomRequest(type="clean_room", id="c", archive=base64.b64encode(tar_gz({"a.py": b""})).decode(),
                               argv=["python3", "-c", script, "{room}/report.xml"], timeout_s=30)
    run = workspace.clean_room(request, threading.Event())
    assert run.exit_code == 0 and "['a.py'] True True" in run.output, run.output
    assert run.report == "<testsuites/>" and run.report_bytes == 13
    assert os.listdir(tmp_path / "rooms") == []
