"""The rules of :mod:`deskpod.controller.policy.exec_risk` that look at one program's command line:
the level type (:class:`RiskAssessment`), where a path may write, and the rules for
redirections, writers, ``awk``, inline code, package managers, ``git`` and deletes.

Pure functions of their arguments; the working folder is passed in (``cwd``: relative to
the workspace root, ``None`` when outside it or known only at run time). The walk through
a shell string, its wrappers and nested code is :mod:`.exec_risk`'s.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from deskpod.controller.policy.levels import CONFIRM_LEVELS, RiskLevel, level_rank
from deskpod.controller.policy.shell_parse import Redirect, Word

__all__ = [
    "BUILD_FOLDERS",
    "LOW",
    "NOTHING",
    "PROXY_TEXT",
    "RiskAssessment",
    "WORKSPACE_ROOT",
    "assignment",
    "assignment_risk",
    "awk_risk",
    "change_folder",
    "delete_risk",
    "git_risk",
    "higher",
    "in_build_folder",
    "inline_risk",
    "is_package_manager",
    "module_risk",
    "package_risk",
    "redirect_risk",
    "sets_special_bits",
    "split_options",
    "writes_outside",
    "writes_risk",
]

WORKSPACE_ROOT = "/workspace"
"""The workspace's absolute path in the workspace container (absolute paths below it are inside)."""

BUILD_FOLDERS: frozenset[str] = frozenset(
    (
        "build dist target out node_modules __pycache__ .pytest_cache .mypy_cache .ruff_cache .tox .nox "
        ".cache htmlcov .eggs"
    ).split()
)
"""Folder names whose contents may be deleted without confirmation (``*.egg-info`` too)."""

_GIT_OBSERVE = frozenset({"status", "diff", "log", "show", "rev-parse", "ls-files", "blame", "grep", "describe"})
_GIT_NETWORK = frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule", "remote"})
_GIT_RUNS = re.compile(
    r"^(alias\.|core\.(pager|sshcommand|editor|fsmonitor|hookspath|gitproxy)|diff\.external|sequence\.editor|"
    r"credential\.helper|uploadpack\.|receivepack\.|filter\.|diff\..*\.command|merge\..*\.driver)",
    re.IGNORECASE,
)
_PACKAGE_MANAGERS: dict[str, set[str] | None] = {
    "pip": {"install", "uninstall", "download"},
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
    "apk": None,
    "yum": None,
    "dnf": None,
    "easy_install": None,
    "brew": {"install", "uninstall", "upgrade"},
    "composer": {"install", "require", "update", "remove"},
}
_PIP = re.compile(r"pip[0-9.]*")
_PROXY_VARS = frozenset({"http_proxy", "https_proxy", "all_proxy", "ftp_proxy", "no_proxy", "socks_proxy"})
_CODE_VARS = frozenset({"LD_PRELOAD", "LD_AUDIT", "BASH_ENV", "ENV", "PROMPT_COMMAND", "GIT_SSH_COMMAND",
                        "GIT_SSH", "GIT_EXEC_PATH", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR", "PAGER",
                        "PYTHONSTARTUP", "PERL5OPT", "NODE_OPTIONS", "RUBYOPT"})
PROXY_TEXT = re.compile(r"(?i)(://|@)egress\b|\begress:\d+|--proxy\b|\bproxy_?handler\b")
"""Text that names the egress proxy or a proxy option (a way to the network without ``network: true``)."""
_INLINE_HIDES = re.compile(
    r"(?i)b64decode|base64|\bexec\s*\(|\beval\s*\(|__import__|\bcompile\s*\(|subprocess|os\.system|os\.popen|"
    r"os\.exec|pty\.spawn|codecs\.decode|fromhex|child_process|\bsystem\s*\(|`"
)
_INLINE_WRITES = re.compile(r"""open\s*\(\s*(?:r|f|rb)?['"](?:/(?!workspace/)|~|\.\./)""")
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_HARMLESS_PATHS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
_AWK_HIDES = re.compile(r"""\bsystem\s*\(|\|\s*&?\s*"|"\s*\|\s*getline|>\s*"(?:/|~|\.\./)""")


@dataclass(frozen=True)
class RiskAssessment:
    """The level of one command and why.

    ``rule``: the rule that set the level (``"observe"``, ``"workspace"``,
    ``"network_tool"``, ``"network_access"``, ``"writes_outside_workspace"``,
    ``"hidden_program"``, ``"hidden_code"``, ``"package_install"``,
    ``"delete_outside_build"``, ``"privilege"``, ``"shell_from_stdin"``,
    ``"unparsable"``). ``program``: the word that triggered it. ``commands``: every
    simple command the classifier looked at, wrappers removed, as its words joined
    by spaces (what the policy's ``exec_confirm_patterns`` are matched against).
    """

    level: RiskLevel
    rule: str
    reason: str
    program: str = ""
    commands: tuple[str, ...] = ()

    @property
    def needs_confirmation(self) -> bool:
        """Whether the command's level is one that needs a confirmation by default (``L2``, ``L3``)."""
        return self.level in CONFIRM_LEVELS


def higher(a: RiskAssessment, b: RiskAssessment) -> RiskAssessment:
    """The higher of two assessments (``a`` on a tie, unless ``a`` is :data:`NOTHING`)."""
    return b if level_rank(b.level) > level_rank(a.level) or a is NOTHING else a


LOW = RiskAssessment("L1", "workspace", "runs inside the sandbox workspace")
"""Work inside the workspace (``L1``): what any program not listed otherwise is."""

NOTHING = RiskAssessment("L0", "observe", "does nothing")
"""Nothing to judge yet (``L0``): the start of every :func:`higher` chain."""


def writes_outside(word: Word, cwd: str | None) -> bool:
    """Whether writing ``word`` (a path) may write outside the workspace."""
    path = word.text
    if path in _HARMLESS_PATHS or path.startswith("/dev/fd/"):
        return False
    if word.dynamic or path.startswith("~"):
        return True
    if path.startswith("/"):
        norm = posixpath.normpath(path)
        return not (norm == WORKSPACE_ROOT or norm.startswith(WORKSPACE_ROOT + "/"))
    if cwd is None:
        return True
    norm = posixpath.normpath(posixpath.join(cwd, path))
    return norm == ".." or norm.startswith("../")


def in_build_folder(word: Word) -> bool:
    """Whether deleting ``word`` stays inside a build folder (a glob only below one)."""
    target = word.text
    if not target or word.dynamic or any(ch in target for ch in "$~`"):
        return False
    target = target.removeprefix(WORKSPACE_ROOT + "/")
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


def _special_mode(mode: str) -> bool:
    """Whether a chmod/install mode sets the setuid, setgid or sticky bit (``4755``, ``04755``, ``u+s``)."""
    if re.fullmatch(r"[0-7]{1,5}", mode):
        return int(mode, 8) & 0o7000 != 0
    return any(re.search(r"[+=][^,]*[st]", clause) for clause in mode.split(","))


def assignment(word: Word) -> tuple[str, str] | None:
    """``(name, value)`` when ``word`` is a shell variable assignment (``NAME=value``), else ``None``."""
    name, sep, value = word.text.partition("=")
    if sep and name.isidentifier():
        return name, value
    return None


def assignment_risk(name: str, program: str) -> RiskAssessment | None:
    """The level of setting variable ``name`` (before ``program``, or by ``export``...): a proxy
    variable or one that makes programs run other code is ``L2``; ``None`` for any other."""
    if name.lower() in _PROXY_VARS:
        return RiskAssessment(
            "L2", "network_access", f"sets the proxy variable {name} to reach the network without network: true",
            program or name,
        )
    if name in _CODE_VARS:
        return RiskAssessment("L2", "hidden_code", f"sets {name}, which makes programs run other code", name)
    return None


def split_options(args: list[Word], with_value: frozenset[str]) -> tuple[list[Word], list[tuple[str, Word | None]]]:
    """Split a wrapper's leading options from the command it runs; return (command words, options)."""
    options: list[tuple[str, Word | None]] = []
    i = 0
    while i < len(args):
        text = args[i].text
        if text == "--":
            i += 1
            break
        if not text.startswith("-") or text == "-" or args[i].dynamic:
            break
        name = text.split("=", 1)[0]
        if "=" in text and name.startswith("--"):
            options.append((name, Word(text.split("=", 1)[1], args[i].dynamic)))
        elif name in with_value and i + 1 < len(args):
            options.append((name, args[i + 1]))
            i += 1
        elif not name.startswith("--") and len(name) > 2 and name[:2] in with_value:
            options.append((name[:2], Word(name[2:])))
        else:
            options.append((name, None))
        i += 1
    return args[i:], options


def is_package_manager(program: str) -> bool:
    """Whether ``program`` (a base name) is a package manager :func:`package_risk` judges."""
    return bool(_PIP.fullmatch(program)) or program in _PACKAGE_MANAGERS


def redirect_risk(redirect: Redirect, cwd: str | None) -> RiskAssessment:
    """The level of a redirection: a ``/dev/tcp`` connection, or a write inside or outside the workspace
    (``cwd``: the working folder relative to the workspace root, ``None`` when unknown)."""
    if redirect.target.text.startswith(("/dev/tcp/", "/dev/udp/")):
        return RiskAssessment(
            "L2", "network_access", "opens a network connection through bash's /dev/tcp", redirect.op
        )
    if redirect.op not in _WRITE_REDIRECTS:
        return NOTHING
    if writes_outside(redirect.target, cwd):
        return RiskAssessment(
            "L2", "writes_outside_workspace", f"redirects output to {redirect.target.text[:200]!r}, "
            "outside the workspace (or a path known only at run time)", redirect.op,
        )
    return RiskAssessment("L1", "workspace", "writes a file through a redirection", redirect.op)


def writes_risk(program: str, targets: list[Word], cwd: str | None) -> RiskAssessment:
    """The level of ``program`` writing ``targets``: ``L2`` when one may lie outside the workspace
    (``cwd`` as for :func:`redirect_risk`), else ``L1``."""
    outside = [t for t in targets if writes_outside(t, cwd)]
    if outside:
        return RiskAssessment(
            "L2", "writes_outside_workspace",
            f"writes to {outside[0].text[:200]!r}, outside the workspace (or a path known only at run time)",
            program,
        )
    return RiskAssessment("L1", "workspace", "writes in the workspace", program)


def change_folder(target: Word | None, cwd: str | None) -> str | None:
    """The working folder after ``cd target`` from ``cwd``, relative to the workspace root;
    ``None`` when it is outside the workspace or known only at run time."""
    if target is None or target.dynamic or target.text.startswith("~") or target.text == "-":
        return None
    if target.text.startswith("/"):
        norm = posixpath.normpath(target.text)
        if norm == WORKSPACE_ROOT:
            return "."
        return posixpath.relpath(norm, WORKSPACE_ROOT) if norm.startswith(WORKSPACE_ROOT + "/") else None
    if cwd is None:
        return None
    norm = posixpath.normpath(posixpath.join(cwd, target.text))
    return None if norm == ".." or norm.startswith("../") else norm


def awk_risk(program: str, args: list[Word]) -> RiskAssessment:
    """awk: its program text may run commands (``system()``, ``print | "sh"``) or write files."""
    rest, options = split_options(args, frozenset({"-f", "-v", "-F", "--file", "--assign", "--field-separator"}))
    if any(name in ("-f", "--file") for name, _ in options) or not rest:
        return LOW
    if rest[0].dynamic:
        return RiskAssessment("L2", "hidden_code", f"{program} runs a program known only at run time", program)
    if _AWK_HIDES.search(rest[0].text):
        return RiskAssessment(
            "L2", "hidden_code", f"the {program} program runs commands or writes outside the workspace", program
        )
    return LOW


def sets_special_bits(program: str, args: list[Word]) -> bool:
    """Whether a ``chmod``, ``install`` or ``mkdir`` command line sets the setuid, setgid or sticky bit."""
    if program == "chmod":
        modes = [w.text for w in args if not w.text.startswith("-") or re.fullmatch(r"-[rwxXst,ugoa=+-]+", w.text)]
        return bool(modes) and _special_mode(modes[0].lstrip("-") if modes[0].startswith("-") else modes[0])
    _, options = split_options(args, frozenset({"-m", "--mode", "-o", "-g", "-t", "-S", "--owner", "--group"}))
    return any(name in ("-m", "--mode") and value is not None and _special_mode(value.text)
               for name, value in options)


def inline_risk(program: str, code: Word) -> RiskAssessment:
    """Code given inline to an interpreter (``python3 -c``, ``perl -e``, a here-document)."""
    if code.dynamic:
        return RiskAssessment("L2", "hidden_code", f"{program} runs code known only at run time", program)
    if _INLINE_HIDES.search(code.text):
        return RiskAssessment(
            "L2", "hidden_code", f"{program}'s inline code decodes or runs other code or commands", program
        )
    if _INLINE_WRITES.search(code.text):
        return RiskAssessment(
            "L2", "writes_outside_workspace", f"{program}'s inline code opens a file outside the workspace", program
        )
    if PROXY_TEXT.search(code.text):
        return RiskAssessment("L2", "network_access", f"{program}'s inline code names the egress proxy", program)
    return LOW


def package_risk(program: str, args: list[str]) -> RiskAssessment:
    """The level of a package manager's command line: ``L3`` when it installs or removes packages."""
    name = "pip" if _PIP.fullmatch(program) else program
    sub = [a for a in args if not a.startswith("-")]
    verbs = _PACKAGE_MANAGERS[name]
    if verbs is None or (sub and sub[0] in verbs) or (name in {"npm", "pnpm", "yarn"} and not sub):
        return RiskAssessment("L3", "package_install", "installs or removes packages (a dependency change)", name)
    return LOW


def module_risk(program: str, module: str, rest: list[str]) -> RiskAssessment:
    """The level of ``python -m module`` (``pip`` installs, ``ensurepip`` installs pip)."""
    if _PIP.fullmatch(module):
        return package_risk("pip", rest)
    if module == "ensurepip":
        return RiskAssessment("L3", "package_install", "installs pip", program)
    return LOW


def git_risk(args: list[Word], cwd: str | None) -> RiskAssessment:
    """The level of a git command line: a proxy or a command set with ``-c``, a repository outside
    the workspace, a network or a reading subcommand (``cwd`` as for :func:`redirect_risk`)."""
    result = NOTHING
    for i, word in enumerate(args):
        if word.text == "-c" and i + 1 < len(args):
            key = args[i + 1].text.split("=", 1)[0]
            if key.lower() in ("http.proxy", "https.proxy") or key.lower().endswith(".proxy"):
                result = higher(result, RiskAssessment("L2", "network_access", "sets a git proxy", "git"))
            elif _GIT_RUNS.match(key):
                result = higher(result, RiskAssessment(
                    "L2", "hidden_code", f"git -c {key} makes git run a command", "git"
                ))
    sub: list[str] = []
    skip = False
    for i, word in enumerate(args):
        if skip:
            skip = False
        elif word.text in ("-c", "-C", "--git-dir", "--work-tree", "--namespace"):
            skip = True
            if word.text != "-c" and i + 1 < len(args) and writes_outside(args[i + 1], cwd):
                result = higher(result, RiskAssessment(
                    "L2", "writes_outside_workspace", f"runs git on {args[i + 1].text[:200]!r}, outside the "
                    "workspace", "git",
                ))
        elif not word.text.startswith("-"):
            sub.append(word.text)
    if sub and sub[0] in _GIT_NETWORK:
        return higher(result, RiskAssessment("L2", "network_tool", f"git {sub[0]} reaches a remote", "git"))
    if sub and sub[0] in _GIT_OBSERVE:
        return higher(result, RiskAssessment("L0", "observe", f"git {sub[0]} only reads", "git"))
    return higher(result, LOW)


def delete_risk(program: str, args: list[Word], unknown_args: bool, cwd: str | None) -> RiskAssessment:
    """The level of a delete (``rm``...): ``L3`` when a target is outside the build folders, or is read
    from stdin (``unknown_args``); ``cwd`` as for :func:`redirect_risk`."""
    targets = [a for a in args if not a.text.startswith("-") or a.text == "-" or a.dynamic]
    cwd = cwd
    outside = [
        t for t in targets
        if cwd is None or not in_build_folder(t if t.text.startswith("/") else Word(posixpath.join(cwd, t.text)))
    ]
    if unknown_args:
        outside.append(Word("(targets read from stdin)"))
    if outside or (not targets and args):
        shown = ", ".join(t.text[:100] for t in outside[:3]) or "(no target)"
        return RiskAssessment("L3", "delete_outside_build", f"deletes outside build folders: {shown}", program)
    return LOW
