"""The clean-room verdict of a code task: what changed, what may change, and what the tests say.

Pure functions (no I/O); :mod:`.code_agent` sends the requests. The procedure:

1. **The seed's tests.** Right after seeding, the seed archive alone is run in a
   clean room with ``pytest --collect-only -q`` (:func:`pytest_argv`); the node ids
   it prints (:func:`parse_collected`) are the tests the verdict requires.
2. **The change.** On a claim, the workspace is listed as it is on disk
   (``workspace_manifest``: no git, so no ``.gitignore``, ``.git/info/exclude`` or
   excludes file applies, and untracked files count) and compared with the host's
   own seed archive (:func:`seed_files`, :func:`compute_changes`). Every changed path
   is in the change summary, ignored or not.
3. **What may change** (:func:`refusals`): a path matching the task's ``editable``
   globs and none of its ``protected`` ones; never a test configuration file
   (``conftest.py`` anywhere, ``pytest.ini``, ``.pytest.ini``, ``tox.ini``,
   ``setup.cfg``, a ``pyproject.toml`` whose old or new text has a ``tool.pytest*``
   table), nor a module or package that shadows the test runner or Python's site
   hooks (:data:`SHADOW_MODULES`, ``*.pth``, ``*.dist-info``...). With
   ``new_tests``, new files under the protected globs are accepted: they run
   beside the seed's tests, never instead of them. Caches (``__pycache__``,
   ``*.pyc``) are listed but never carried over. Any refusal fails the verdict,
   with the path and the reason.
4. **The clean room** (:func:`clean_room_archive`): the seed archive with the
   accepted change applied, made on the host from the host's seed and the bytes
   read back from the workspace (each checked against its SHA-256), run by the
   workspace runner in a fresh folder after it killed every agent process, with
   ``python3 -I -B -m pytest`` (no user site, no ``PYTHON*`` variable, no working
   folder on ``sys.path``), the project root put on the path explicitly, the
   rootdir, the configuration file (the seed's own, else none) and the conftest
   boundary fixed to the room, caches off, and a JUnit XML report.
5. **The verdict** (:func:`judge`): the report, parsed as untrusted input
   (:func:`parse_junit`: size-capped, no DTD so no entity can expand), must list
   every seed test as passed, no test may have failed, and the test command must
   have exited 0: neither is evidence alone (``os._exit(0)`` sets the exit status,
   and the process under test can rewrite its report).

What this cannot stop is stated in SECURITY.md ("Code tasks: the clean-room
verdict"): the code under test runs inside the test process and can tamper with it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import posixpath
import re
import tarfile
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from deskpod.errors import JUnitError
from deskpod.protocol import MAX_SEED_ARCHIVE_BYTES, MAX_TEST_REPORT_BYTES, ManifestEntry

__all__ = [
    "CACHE_NAMES",
    "Change",
    "SHADOW_MODULES",
    "SITE_HOOK_SUFFIXES",
    "SeedFile",
    "TEST_CONFIG_NAMES",
    "Verdict",
    "clean_room_archive",
    "compute_changes",
    "is_cache",
    "judge",
    "junit_key",
    "parse_collected",
    "parse_junit",
    "pytest_argv",
    "refusals",
    "seed_files",
    "seed_ini",
]

TEST_CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg"})
"""File names that configure pytest wherever they are; a change to one is refused."""

SHADOW_MODULES = frozenset(
    {
        "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "attr", "attrs", "exceptiongroup",
        "tomli", "more_itertools", "sitecustomize", "usercustomize",
    }
)
"""Top-level module names of the test runner (Debian's python3-pytest and what it
imports) and of Python's site hooks: a file or package of that name is refused."""

SITE_HOOK_SUFFIXES = (".pth", ".dist-info", ".egg-info", ".egg-link")
"""Path components that would act as site hooks or installed distributions; refused."""

CACHE_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
"""Cache folders: listed as changes, never carried into the clean room."""

_INI_CANDIDATES = (
    ("pytest.ini", None),
    (".pytest.ini", None),
    ("pyproject.toml", "[tool.pytest.ini_options]"),
    ("tox.ini", "[pytest]"),
    ("setup.cfg", "[tool:pytest]"),
)
_DTD = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)


@dataclass(frozen=True)
class SeedFile:
    """A seed file or symlink from the host's archive: ``data`` (a symlink's target, UTF-8 encoded)."""

    kind: Literal["file", "symlink"]
    data: bytes
    executable: bool = False

    @property
    def sha256(self) -> str:
        """SHA-256 hex of ``data``."""
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Change:
    """One changed path since the seed: ``status`` ``added``, ``modified`` (content or
    execute bit), ``deleted`` or ``type_changed``; ``kind``: what is there now
    (``"none"`` when deleted)."""

    path: str
    status: Literal["added", "modified", "deleted", "type_changed"]
    kind: Literal["file", "symlink", "other", "none"]


@dataclass(frozen=True)
class Verdict:
    """The clean room's judgement: ``ok`` and the human reason; counts of the report."""

    ok: bool
    reason: str
    passed: int = 0
    failed: int = 0
    missing: tuple[str, ...] = ()


def _norm(name: str) -> str:
    return posixpath.normpath(name.removeprefix("./"))


def _is_git(path: str) -> bool:
    return path == ".git" or path.startswith(".git/")


def seed_files(archive: bytes) -> dict[str, SeedFile]:
    """The regular files and symlinks of a seed archive (the host's copy), the root ``.git`` left out.

    Args:
        archive: the gzip'd tar sent with ``seed_workspace``.

    Returns:
        ``{path relative to the workspace: SeedFile}``.
    """
    out: dict[str, SeedFile] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for info in tar:
            path = _norm(info.name)
            if path == "." or _is_git(path):
                continue
            if info.issym():
                out[path] = SeedFile("symlink", info.linkname.encode("utf-8", "surrogateescape"))
            elif info.isfile():
                data = tar.extractfile(info).read()  # type: ignore[union-attr]
                out[path] = SeedFile("file", data, bool(info.mode & 0o111))
    return out


def compute_changes(seed: Mapping[str, SeedFile], entries: Iterable[ManifestEntry]) -> list[Change]:
    """Every path whose entry differs from the seed's, sorted.

    Args:
        seed: :func:`seed_files` of the seed archive.
        entries: the workspace's manifest entries (all of them).

    Returns:
        The changes: added, modified (bytes, symlink target or execute bit),
        type_changed (file ↔ symlink, anything → other), deleted.
    """
    changes: list[Change] = []
    present: set[str] = set()
    for entry in entries:
        present.add(entry.path)
        old = seed.get(entry.path)
        if old is None:
            changes.append(Change(entry.path, "added", entry.kind))
        elif entry.kind != old.kind:
            changes.append(Change(entry.path, "type_changed", entry.kind))
        elif entry.sha256 != old.sha256 or (entry.kind == "file" and entry.executable != old.executable):
            changes.append(Change(entry.path, "modified", entry.kind))
    changes += [Change(path, "deleted", "none") for path in seed if path not in present]
    return sorted(changes, key=lambda c: c.path)


def is_cache(path: str) -> bool:
    """Whether ``path`` is a cache (a cache folder's content, ``*.pyc``, ``*.pyo``)."""
    parts = path.split("/")
    return any(p in CACHE_NAMES for p in parts[:-1]) or path.endswith((".pyc", ".pyo"))


def _pytest_tables(text: bytes | None) -> bool | None:
    """Whether TOML text has a ``tool.pytest*`` table; ``None``: not valid TOML."""
    if text is None:
        return False
    try:
        tool = tomllib.loads(text.decode("utf-8")).get("tool", {})
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return isinstance(tool, dict) and any(str(key).startswith("pytest") for key in tool)


def _refusal(
    change: Change,
    new_text: bytes | None,
    seed: Mapping[str, SeedFile],
    editable: Sequence[str],
    protected: Sequence[str],
    new_tests: bool,
) -> str | None:
    path = change.path
    parts = path.split("/")
    name = parts[-1]
    top = parts[0].removesuffix(".py") if len(parts) == 1 else parts[0]
    if top in SHADOW_MODULES:
        return f"shadows the test runner or a site hook (top-level module {top!r})"
    if any(part.endswith(SITE_HOOK_SUFFIXES) for part in parts):
        return "a Python site hook or distribution metadata"
    if name in TEST_CONFIG_NAMES:
        return "test configuration"
    if name == "pyproject.toml":
        old = seed.get(path)
        before, after = _pytest_tables(old.data if old else None), _pytest_tables(new_text)
        if before is None or after is None:
            return "a pyproject.toml that is not valid TOML (it may configure the tests)"
        if before or after:
            return "test configuration (a tool.pytest table of pyproject.toml)"
    if any(fnmatch.fnmatchcase(path, pattern) for pattern in protected):
        if new_tests and change.status == "added" and change.kind == "file":
            return None
        return "a test or test file (protected)" + ("" if new_tests else "; the task allows no new tests")
    if not any(fnmatch.fnmatchcase(path, pattern) for pattern in editable):
        return "outside the files the task allows the agent to change (editable)"
    return None


def refusals(
    changes: Iterable[Change],
    contents: Mapping[str, bytes],
    seed: Mapping[str, SeedFile],
    editable: Sequence[str],
    protected: Sequence[str],
    new_tests: bool,
) -> dict[str, str]:
    """The changes the task does not allow, with the reason for each.

    Args:
        changes: :func:`compute_changes`' result (caches are skipped: never carried over).
        contents: new bytes of changed files (needed for ``pyproject.toml``).
        seed: the seed's files.
        editable: fnmatch globs of paths the agent may change.
        protected: fnmatch globs of the tests (never changed; new ones only with ``new_tests``).
        new_tests: the task allows new test files.

    Returns:
        ``{path: reason}``, empty when everything may stand.
    """
    out: dict[str, str] = {}
    for change in changes:
        if is_cache(change.path):
            continue
        why = _refusal(change, contents.get(change.path), seed, editable, protected, new_tests)
        if why is not None:
            out[change.path] = why
    return out


def clean_room_archive(archive: bytes, changes: Iterable[Change], contents: Mapping[str, bytes],
                       links: Mapping[str, str], executable: Mapping[str, bool]) -> bytes:
    """The seed archive with the accepted change applied (caches and ``other`` entries dropped).

    Args:
        archive: the host's seed archive (its ``.git``, if any, kept as it is).
        changes: the accepted changes.
        contents: new bytes of each added/modified file.
        links: new target of each added/modified symlink.
        executable: execute bit of each added/modified file.

    Returns:
        A gzip'd tar for ``clean_room``.

    Raises:
        ValueError: a changed file's bytes are missing, or the archive is larger than
            :data:`~deskpod.protocol.MAX_SEED_ARCHIVE_BYTES`.
    """
    changes = list(changes)
    replaced = {c.path for c in changes}
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as seed, tarfile.open(fileobj=buf, mode="w:gz") as out:
        for info in seed:
            path = _norm(info.name)
            if path in replaced or any(path.startswith(p + "/") for p in replaced):
                continue
            out.addfile(info, seed.extractfile(info) if info.isfile() else None)
        for change in changes:
            if change.status == "deleted" or change.kind in ("other", "none") or is_cache(change.path):
                continue
            info = tarfile.TarInfo(change.path)
            if change.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = links[change.path]
                out.addfile(info)
                continue
            if change.path not in contents:
                raise ValueError(f"the bytes of {change.path} were not read back from the workspace")
            data = contents[change.path]
            info.size = len(data)
            info.mode = 0o755 if executable.get(change.path) else 0o644
            out.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    if len(data) > MAX_SEED_ARCHIVE_BYTES:
        raise ValueError(f"the clean room's archive is {len(data)} bytes; the limit is {MAX_SEED_ARCHIVE_BYTES}")
    return data


def seed_ini(seed: Mapping[str, SeedFile]) -> str | None:
    """The seed's own pytest configuration file at its root, in pytest's order of
    precedence (``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with
    ``[tool.pytest.ini_options]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg`` with
    ``[tool:pytest]``), or ``None``."""
    for name, marker in _INI_CANDIDATES:
        found = seed.get(name)
        if found is not None and found.kind == "file" and (marker is None or marker.encode() in found.data):
            return name
    return None


def pytest_argv(test_command: Sequence[str], ini: str | None, *, collect: bool) -> list[str]:
    """The clean room's command from the task's ``python3 -m pytest ARGS`` (``{room}`` is
    replaced by the runner).

    Args:
        test_command: the task's test command.
        ini: the seed's configuration file (:func:`seed_ini`), or ``None`` (then
            ``-c /dev/null``: no file above the room is ever read).
        collect: ``--collect-only -q`` (the seed's test ids), else run with a JUnit report.

    Returns:
        The argv.

    Raises:
        ValueError: the test command is not ``python3 -m pytest ...`` (or ``python``).
    """
    command = list(test_command)
    if len(command) < 3 or posixpath.basename(command[0]) not in ("python3", "python") or command[1:3] != [
        "-m",
        "pytest",
    ]:
        raise ValueError("the clean-room verdict runs pytest: the test command must be `python3 -m pytest ...`")
    args = command[3:]
    if collect:
        args = [a for a in args if not re.fullmatch(r"-[qv]+|--quiet|--verbose", a)]
    src = "{room}/src"
    argv = [
        command[0], "-I", "-B", "-m", "pytest", *args,
        "-p", "no:cacheprovider", "-c", f"{src}/{ini}" if ini else "/dev/null",
        f"--rootdir={src}", f"--confcutdir={src}", "-o", f"pythonpath={src}",
    ]
    if collect:
        return [*argv, "-p", "no:warnings", "--collect-only", "-q"]
    return [*argv, "--junitxml={room}/report.xml", "-o", "junit_family=xunit2"]


def parse_collected(output: str) -> list[str]:
    """The node ids ``pytest --collect-only -q`` printed (lines holding ``::``), in order."""
    ids: list[str] = []
    for line in output.splitlines():
        if "::" in line and not line.startswith((" ", "=", "_")) and line not in ids:
            ids.append(line.strip())
    return ids


def junit_key(node_id: str) -> tuple[str, str]:
    """The ``(classname, name)`` pytest's JUnit report gives a node id (its own mangling)."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def parse_junit(text: str | None) -> dict[tuple[str, str], str]:
    """Each testcase's outcome in a JUnit XML report, read as untrusted input.

    Args:
        text: the report's text (``None``: there was none).

    Returns:
        ``{(classname, name): "passed" | "failed" | "error" | "skipped"}``; a testcase
        listed twice keeps its worst outcome.

    Raises:
        JUnitError: no report, over :data:`~deskpod.protocol.MAX_TEST_REPORT_BYTES`,
            a DTD or entity declaration, not XML, or no ``testsuite`` element.
    """
    if text is None:
        raise JUnitError("the test command wrote no JUnit report")
    raw = text.encode("utf-8", "replace")
    if len(raw) > MAX_TEST_REPORT_BYTES:
        raise JUnitError(f"the JUnit report is larger than {MAX_TEST_REPORT_BYTES} bytes")
    if _DTD.search(raw):
        raise JUnitError("the JUnit report declares a DTD or an entity")
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        raise JUnitError(f"the JUnit report is not XML: {exc}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(f"the JUnit report's root is <{root.tag[:40]}>, not <testsuites>")
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    out: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        outcome = "error" if "error" in tags else "failed" if "failure" in tags else (
            "skipped" if "skipped" in tags else "passed"
        )
        key = (case.get("classname", ""), case.get("name", ""))
        if rank[outcome] >= rank[out.get(key, "passed")]:
            out[key] = outcome
    return out


def judge(seed_ids: Sequence[str], outcomes: Mapping[tuple[str, str], str], exit_code: int | None) -> Verdict:
    """Every seed test collected and passed, no test failed, and the test command exited 0.

    Args:
        seed_ids: the node ids collected from the seed.
        outcomes: :func:`parse_junit`'s result.
        exit_code: the test command's exit status (``None``: it had none, it was killed).
            A report saying all passed from a run that did not exit 0 is not a pass: the process under test can rewrite its
            report (it cannot be the only evidence, nor can the exit status, which
            ``os._exit(0)`` sets).

    Returns:
        The :class:`Verdict`.
    """
    missing = tuple(i for i in seed_ids if junit_key(i) not in outcomes)
    not_passed = [(i, outcomes[junit_key(i)]) for i in seed_ids if junit_key(i) in outcomes
                  and outcomes[junit_key(i)] != "passed"]
    bad = [key for key, outcome in outcomes.items() if outcome in ("failed", "error")]
    passed = sum(1 for outcome in outcomes.values() if outcome == "passed")
    if not seed_ids:
        return Verdict(False, "the seed has no tests to judge by", passed, len(bad))
    if missing:
        return Verdict(False, f"{len(missing)} seed test(s) not in the report: {', '.join(missing[:5])}", passed,
                       len(bad), missing)
    if not_passed:
        shown = ", ".join(f"{i} ({o})" for i, o in not_passed[:5])
        return Verdict(False, f"{len(not_passed)} seed test(s) did not pass: {shown}", passed, len(bad))
    if bad:
        shown = ", ".join("::".join(k) for k in bad[:5])
        return Verdict(False, f"{len(bad)} other test(s) failed: {shown}", passed, len(bad))
    if exit_code != 0:
        return Verdict(False, f"the report says all {len(seed_ids)} seed tests passed, but the test command "
                              f"exited {'without a status' if exit_code is None else exit_code}", passed, 0)
    return Verdict(True, f"all {len(seed_ids)} seed tests passed ({passed} passed in all)", passed, 0)
