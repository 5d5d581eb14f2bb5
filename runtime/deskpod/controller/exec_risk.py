"""Risk levels of a code agent's ``exec`` commands.

A deterministic classifier into the controller's four risk levels:

- ``L0`` observation: reading the workspace (``ls``, ``cat``, ``grep``, ``git diff``...).
- ``L1`` reversible work inside the workspace: editing, building, running tests
  and any program not listed below (the workspace is a git repository with its
  seed committed, so this is what rollback covers).
- ``L2`` widening data access: network tools (``curl``, ``wget``, ``ssh``, ``nc``,
  ``git clone/fetch/pull/push``...).
- ``L3`` irreversible or high impact: installing or removing packages (``pip
  install``, ``npm install``, ``apt-get``...), deleting anything outside build
  folders, privilege changes (``sudo``, ``su``, ``chmod +s``...), running a shell
  fed from a pipe, or a command line that cannot be analysed.

``L2`` and ``L3`` need a confirmation bound to that one command
(:class:`~deskpod.controller.confirm.CommandSubject`); the default channel refuses. A shell string is split into its simple commands
(``;``, ``&&``, ``||``, ``|``, ``&``, newlines, ``$(...)`` and backticks) with
:mod:`shlex`, wrappers such as ``env``, ``timeout``, ``xargs`` and ``bash -c``
are looked through, and the highest level wins. This is a first filter against
honest mistakes and obvious risk, not a security boundary: a program can do
anything its code says. The barriers are the sandbox itself, the egress
allowlist and the workspace confinement of the file tools.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass

from deskpod.controller.levels import CONFIRM_LEVELS, RiskLevel, level_rank

__all__ = [
    "BUILD_FOLDERS",
    "RiskAssessment",
    "classify_exec",
]

BUILD_FOLDERS: frozenset[str] = frozenset(
    (
        "build dist target out node_modules __pycache__ .pytest_cache .mypy_cache .ruff_cache .tox .nox "
        ".cache htmlcov .eggs"
    ).split()
)
"""Folder names whose contents may be deleted without confirmation (``*.egg-info`` too)."""

_OBSERVE = frozenset(
    (
        "ls cat head tail wc grep egrep fgrep rg pwd echo printf true false stat file tree diff cmp which "
        "sort uniq cut nl basename dirname realpath readlink du df date whoami id uname test ["
    ).split()
)
_GIT_OBSERVE = frozenset({"status", "diff", "log", "show", "rev-parse", "ls-files", "blame", "grep", "describe"})
_GIT_NETWORK = frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule", "remote"})
_NETWORK = frozenset(
    (
        "curl wget nc ncat netcat socat ssh scp sftp rsync ftp telnet aria2c http https dig nslookup host "
        "ping openssl"
    ).split()
)
_PRIVILEGE = frozenset({"sudo", "su", "doas", "pkexec", "chown", "chgrp", "setcap", "setfacl", "mount", "umount"})
_PACKAGE_MANAGERS = {
    "pip": {"install", "uninstall", "download"},
    "pip3": {"install", "uninstall", "download"},
    "pipx": {"install", "uninstall", "run"},
    "uv": {"pip", "add", "remove", "sync", "tool"},
    "poetry": {"add", "remove", "install", "update"},
    "pipenv": {"install", "uninstall", "update"},
    "conda": {"install", "remove", "create", "update"},
    "mamba": {"install", "remove", "create", "update"},
    "npm": {"install", "i", "ci", "add", "uninstall", "remove", "update", "publish", "exec"},
    "npx": None,
    "pnpm": {"install", "i", "add", "remove", "update", "dlx"},
    "yarn": {"install", "add", "remove", "upgrade", "dlx"},
    "gem": {"install", "uninstall", "update"},
    "bundle": {"install", "update", "add"},
    "cargo": {"install", "add", "remove", "update"},
    "go": {"install", "get"},
    "apt": None,
    "apt-get": None,
    "aptitude": None,
    "dpkg": None,
    "brew": {"install", "uninstall", "upgrade"},
    "composer": {"install", "require", "update", "remove"},
}
_DELETE = frozenset({"rm", "rmdir", "unlink", "shred"})
_WRAPPERS = frozenset({"env", "nice", "nohup", "time", "command", "exec", "stdbuf", "ionice", "setsid", "builtin"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&"})


@dataclass(frozen=True)
class RiskAssessment:
    """The level of one command and why.

    ``rule``: the rule that set the level (``"observe"``, ``"workspace"``,
    ``"network_tool"``, ``"package_install"``, ``"delete_outside_build"``,
    ``"privilege"``, ``"shell_from_stdin"``, ``"unparsable"``, ``"network_access"``). ``program``: the
    word that triggered it.
    """

    level: RiskLevel
    rule: str
    reason: str
    program: str = ""

    @property
    def needs_confirmation(self) -> bool:
        """Whether the command may run only after a confirmation."""
        return self.level in CONFIRM_LEVELS


def _max(a: RiskAssessment, b: RiskAssessment) -> RiskAssessment:
    return b if level_rank(b.level) > level_rank(a.level) else a


def _split_commands(cmd: str) -> list[list[str]]:
    text = cmd.replace("\n", ";").replace("`", ";").replace("$(", ";(")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _SEPARATORS or (token and set(token) <= set(";&|()")):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _in_build_folder(target: str) -> bool:
    """Whether deleting ``target`` stays inside a build folder (a glob only below one)."""
    if not target or any(ch in target for ch in "$~`"):
        return False
    target = target.removeprefix("/workspace/")
    if target.startswith("/"):
        return False
    parts = posixpath.normpath(target).split("/")
    if parts[0] in {".", ".."}:
        return False
    for part in parts:
        if any(ch in part for ch in "*?[{"):
            return False
        if part in BUILD_FOLDERS or part.endswith(".egg-info"):
            return True
    return parts[-1].endswith((".pyc", ".pyo"))


def _sets_special_bits(mode: str) -> bool:
    if mode.isdigit():
        return len(mode) == 4 and mode[0] != "0"
    if "+" not in mode and "=" not in mode:
        return False
    return any(ch in "st" for ch in mode.replace("=", "+").split("+", 1)[1])


def _classify_simple(words: list[str], depth: int) -> RiskAssessment:
    low = RiskAssessment("L1", "workspace", "runs inside the sandbox workspace")
    while words and "=" in words[0] and not words[0].startswith("=") and words[0].split("=", 1)[0].isidentifier():
        words = words[1:]
    if not words:
        return RiskAssessment("L0", "observe", "only sets variables")
    program = posixpath.basename(words[0])
    args = words[1:]
    if program in _WRAPPERS or program in {"timeout", "xargs", "watch"}:
        rest = [a for a in args if not a.startswith("-")] if program != "env" else args
        if program == "timeout" and rest:
            rest = rest[1:]
        if program == "env":
            rest = [a for a in rest if not a.startswith("-")]
        return _classify_simple(rest, depth) if rest else low
    if program in _SHELLS:
        if "-c" in args:
            index = args.index("-c")
            if index + 1 < len(args):
                return _classify(args[index + 1], depth + 1)
            return RiskAssessment("L3", "unparsable", "a shell -c without a command", program)
        if not [a for a in args if not a.startswith("-")]:
            return RiskAssessment(
                "L3", "shell_from_stdin", "runs shell code fed from stdin, which is not shown", program
            )
        return low
    if program == "eval":
        return _classify(" ".join(args), depth + 1)
    if program in _PRIVILEGE:
        return RiskAssessment("L3", "privilege", "changes privileges or ownership", program)
    if program == "chmod" and any(_sets_special_bits(a) for a in args):
        return RiskAssessment("L3", "privilege", "sets setuid/setgid/sticky bits", program)
    if program in _NETWORK:
        return RiskAssessment("L2", "network_tool", "reaches the network (the egress allowlist still applies)", program)
    py_pip = program.startswith("python") and args[:2] in (["-m", "pip"], ["-m", "pip3"])
    if py_pip or program in _PACKAGE_MANAGERS:
        name = "pip" if py_pip else program
        sub = [a for a in (args[2:] if py_pip else args) if not a.startswith("-")]
        verbs = _PACKAGE_MANAGERS[name]
        if verbs is None or (sub and sub[0] in verbs) or (name in {"npm", "pnpm", "yarn"} and not sub):
            return RiskAssessment("L3", "package_install", "installs or removes packages (a dependency change)", name)
        return low
    if program == "git":
        sub = [a for a in args if not a.startswith("-")]
        if sub and sub[0] in _GIT_NETWORK:
            return RiskAssessment("L2", "network_tool", f"git {sub[0]} reaches a remote", "git")
        if sub and sub[0] in _GIT_OBSERVE:
            return RiskAssessment("L0", "observe", f"git {sub[0]} only reads", "git")
        return low
    if program in _DELETE:
        targets = [a for a in args if not a.startswith("-") or a == "-"]
        outside = [t for t in targets if not _in_build_folder(t)]
        if outside or (not targets and args):
            shown = ", ".join(outside[:3]) or "(no target)"
            return RiskAssessment("L3", "delete_outside_build", f"deletes outside build folders: {shown}", program)
        return low
    if program == "find" and "-delete" in args:
        roots = [a for a in args[: next((i for i, a in enumerate(args) if a.startswith("-")), len(args))]]
        if not roots or not all(_in_build_folder(r) for r in roots):
            return RiskAssessment("L3", "delete_outside_build", "find -delete outside build folders", program)
        return low
    if program == "find" and ("-exec" in args or "-execdir" in args):
        flag = "-exec" if "-exec" in args else "-execdir"
        inner = args[args.index(flag) + 1 :]
        inner = inner[: next((i for i, a in enumerate(inner) if a in {";", "+", "\\;"}), len(inner))]
        return _max(RiskAssessment("L1", "workspace", "find -exec"), _classify_simple(inner, depth)) if inner else low
    if program in _OBSERVE:
        if any(">" in a and set(a) <= set("<>&|0123456789") for a in args):
            return RiskAssessment("L1", "workspace", "writes a file through a redirection", program)
        return RiskAssessment("L0", "observe", "only reads", program)
    return low


def _classify(cmd: str, depth: int) -> RiskAssessment:
    if depth > 4:
        return RiskAssessment("L3", "unparsable", "shell code nested too deeply to analyse")
    try:
        commands = _split_commands(cmd)
    except ValueError as exc:
        return RiskAssessment("L3", "unparsable", f"the shell string cannot be analysed ({exc})")
    result = RiskAssessment("L0", "observe", "does nothing")
    for words in commands:
        result = _max(result, _classify_simple(words, depth))
    return result


def classify_exec(argv: list[str] | None = None, cmd: str | None = None, *, network: bool = False) -> RiskAssessment:
    """Classify one ``exec`` command.

    Args:
        argv: the program and its arguments, or
        cmd: a shell string (run with ``bash -c``).
        network: the request asks for the egress proxy; the command is then at least ``L2``.

    Returns:
        The highest :class:`RiskAssessment` over the command's simple commands.
    """
    result = _classify_simple(list(argv), 0) if argv is not None else _classify(cmd or "", 0)
    if network:
        wants = RiskAssessment("L2", "network_access", "asks for network access through the egress proxy")
        result = _max(result, wants)
    return result
