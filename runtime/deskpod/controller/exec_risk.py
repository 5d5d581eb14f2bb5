"""Risk levels of a code agent's ``exec`` commands: a speed bump, not a boundary.

A deterministic classifier into the controller's four risk levels, which decides
which commands a human is asked about (with the operator's exec policy,
:class:`~deskpod.controller.policy.Policy` ``exec_confirm``):

- ``L0`` observation: reading the workspace (``ls``, ``cat``, ``grep``, ``git status``...).
- ``L1`` reversible work inside the workspace: editing, building, running the
  project's code and its tests, and any program not listed below (the workspace
  is a git repository with its seed committed, so this is what rollback covers).
- ``L2`` widened access or a command that hides what it runs: network tools
  (``curl``, ``git push``...), a proxy variable set inline or the proxy named
  (``HTTPS_PROXY=... python3 x.py``), writes outside the workspace (``touch
  /tmp/marker``, ``> ~/.bashrc``, ``cp``/``mv``/``tee``/``dd``/``ln`` targets,
  ``-o /path``, ``cd /tmp && touch x``), a program name computed at run time
  (``"$(echo rm)" -rf src``, ``$X``), code given as an expansion (``sh -c "$X"``,
  ``eval "$(...)"``, ``python3 -c "$(...)"``), inline code that decodes or runs
  other code (``base64``, ``exec(``, ``subprocess``), code-injecting variables
  (``LD_PRELOAD``, ``BASH_ENV``) and git settings that run commands.
- ``L3`` irreversible or high impact: installing or removing packages (``pip
  install``, ``python3 -mpip install``, ``npm install``, ``apt-get``...), deleting
  outside build folders (also when the targets come from stdin: ``xargs rm``,
  ``find -exec rm``), privilege changes (``sudo``, ``chown``, ``chmod`` with
  setuid/setgid/sticky bits: ``u+s``, ``04755``), a shell or interpreter fed
  code from a pipe or a run-time here-string (``base64 -d | sh``, ``bash
  <(curl ...)``), and a command line that cannot be analysed.

A shell string is split into its simple commands by :mod:`.shell_parse` (quotes
removed as bash removes them, ``$'\\x72\\x6d'`` decoded, expansions marked,
here-documents read); wrappers (``env``, ``timeout``, ``xargs``, ``nice``,
``exec``, ``command``, ``stdbuf``, ``setsid``, ``find -exec``, ``watch``...),
``sh -c``/``bash -lc`` strings, ``eval`` and every command substitution are looked
through, and the highest level wins.

**What it is not.** This is a first filter against honest mistakes and
obvious attempts, a speed bump that makes a human look at the commands that
matter: it is not a security boundary. A program can do anything its code says
(``python3 build.py`` may write anywhere the agent's uid may, open sockets or
run ``rm``), a symlink made earlier can point a workspace path outside, and a
shell has more ways to hide a command than any lexer knows. The boundaries are
the zone separation (agent code runs in the workspace container, apart from the
daemon and the browser), the egress proxy and its allowlist, and the workspace
confinement of the file tools; SECURITY.md lists what this classifier does not
stop.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field

from deskpod.controller.levels import CONFIRM_LEVELS, RiskLevel, level_rank
from deskpod.controller.shell_parse import Redirect, ShellCommand, Word, parse_shell

__all__ = [
    "BUILD_FOLDERS",
    "RiskAssessment",
    "WORKSPACE_ROOT",
    "classify_exec",
    "matches_pattern",
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

_MAX_DEPTH = 6
_OBSERVE = frozenset(
    (
        "ls cat head tail wc grep egrep fgrep rg pwd echo printf true false stat file tree diff cmp which "
        "sort uniq cut nl basename dirname realpath readlink du df date whoami id uname test [ type"
    ).split()
)
_GIT_OBSERVE = frozenset({"status", "diff", "log", "show", "rev-parse", "ls-files", "blame", "grep", "describe"})
_GIT_NETWORK = frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule", "remote"})
_GIT_RUNS = re.compile(
    r"^(alias\.|core\.(pager|sshcommand|editor|fsmonitor|hookspath|gitproxy)|diff\.external|sequence\.editor|"
    r"credential\.helper|uploadpack\.|receivepack\.|filter\.|diff\..*\.command|merge\..*\.driver)",
    re.IGNORECASE,
)
_NETWORK = frozenset(
    (
        "curl wget nc ncat netcat socat ssh scp sftp rsync ftp tftp telnet aria2c http https dig nslookup host "
        "ping openssl lynx links w3m nmap sshpass gh"
    ).split()
)
_PRIVILEGE = frozenset(
    "sudo su doas pkexec chown chgrp setcap setfacl mount umount chroot nsenter unshare capsh runuser setpriv".split()
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
_PYTHON = re.compile(r"python[0-9.]*|pypy[0-9.]*")
_DELETE = frozenset({"rm", "rmdir", "unlink", "shred"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "fish"})
_INTERPRETERS = {"perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p", "--print"),
                 "nodejs": ("-e", "--eval", "-p", "--print"), "php": ("-r",), "lua": ("-e",), "Rscript": ("-e",)}
_RESERVED = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until"})
# Wrappers that run the rest of their arguments as a command, with the options that take a value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid"}),
    "setsid": frozenset(),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "xargs": frozenset({"-I", "-n", "-L", "-P", "-d", "-E", "-e", "-s", "-a", "--arg-file", "--delimiter",
                        "--max-args", "--max-procs", "--max-lines", "--replace", "--eof", "--max-chars"}),
    "parallel": frozenset({"-j", "--jobs", "-S", "--sshlogin"}),
    "flock": frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}),
    "chronic": frozenset(),
    "unbuffer": frozenset(),
    "busybox": frozenset(),
    "strace": frozenset({"-e", "-o", "-p", "-s", "-u"}),
    "ltrace": frozenset({"-e", "-o", "-p", "-s", "-u"}),
    "caffeinate": frozenset(),
}
_UNKNOWN_ARGS_WRAPPERS = frozenset({"xargs", "parallel"})
_PROXY_VARS = frozenset({"http_proxy", "https_proxy", "all_proxy", "ftp_proxy", "no_proxy", "socks_proxy"})
_CODE_VARS = frozenset({"LD_PRELOAD", "LD_AUDIT", "BASH_ENV", "ENV", "PROMPT_COMMAND", "GIT_SSH_COMMAND",
                        "GIT_SSH", "GIT_EXEC_PATH", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR", "PAGER",
                        "PYTHONSTARTUP", "PERL5OPT", "NODE_OPTIONS", "RUBYOPT"})
_PROXY_TEXT = re.compile(r"(?i)(://|@)egress\b|\begress:\d+|--proxy\b|\bproxy_?handler\b")
_INLINE_HIDES = re.compile(
    r"(?i)b64decode|base64|\bexec\s*\(|\beval\s*\(|__import__|\bcompile\s*\(|subprocess|os\.system|os\.popen|"
    r"os\.exec|pty\.spawn|codecs\.decode|fromhex|child_process|\bsystem\s*\(|`"
)
_INLINE_WRITES = re.compile(r"""open\s*\(\s*(?:r|f|rb)?['"](?:/(?!workspace/)|~|\.\./)""")
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_OUTPUT_OPTIONS = frozenset({"-o", "--output", "--output-file", "--output-dir", "--outdir", "--out", "--outfile",
                             "--log-file", "--logfile", "--target-dir", "--prefix", "--root", "--basetemp",
                             "--directory"})
_HARMLESS_PATHS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
_STDIN_PATHS = frozenset({"-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"})
_GLOB_PROGRAM = re.compile(r"[*?]|\[.+\]|\{[^}]*(,|\.\.)[^}]*\}")
# Options that make a program run a command given as their value.
_COMMAND_OPTIONS = frozenset({"--to-command", "--checkpoint-action", "--use-compress-program", "--rsh",
                              "--upload-pack", "--receive-pack", "--exec", "--unzip-command", "--info-script",
                              "--new-volume-script", "--rsync-path", "--pre-invoke", "--post-invoke"})
_AWK = frozenset({"awk", "gawk", "mawk", "nawk", "busybox-awk"})
_AWK_HIDES = re.compile(r"""\bsystem\s*\(|\|\s*&?\s*"|"\s*\|\s*getline|>\s*"(?:/|~|\.\./)""")
_SED_RUNS = re.compile(r"(?:^|[;\n}])\s*(?:\d+|\$|/[^/]*/)?\s*e\b|^s(.).*\1.*\1[gpiImM0-9w]*e|\bw\s+/")
_EDITORS = frozenset({"vi", "vim", "nvim", "ex", "view", "vimdiff", "emacs", "nano", "ed"})


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


def _max(a: RiskAssessment, b: RiskAssessment) -> RiskAssessment:
    return b if level_rank(b.level) > level_rank(a.level) or a is _NOTHING else a


_LOW = RiskAssessment("L1", "workspace", "runs inside the sandbox workspace")
_NOTHING = RiskAssessment("L0", "observe", "does nothing")


@dataclass
class _Context:
    depth: int = 0
    cwd: str | None = "."
    """The working folder relative to the workspace root; ``None``: outside it, or unknown."""
    seen: list[str] = field(default_factory=list)


def _outside(word: Word, cwd: str | None) -> bool:
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


def _in_build_folder(word: Word) -> bool:
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


def _assignment(word: Word) -> tuple[str, str] | None:
    name, sep, value = word.text.partition("=")
    if sep and name.isidentifier():
        return name, value
    return None


def _check_assignment(name: str, program: str) -> RiskAssessment | None:
    if name.lower() in _PROXY_VARS:
        return RiskAssessment(
            "L2", "network_access", f"sets the proxy variable {name} to reach the network without network: true",
            program or name,
        )
    if name in _CODE_VARS:
        return RiskAssessment("L2", "hidden_code", f"sets {name}, which makes programs run other code", name)
    return None


def _options(args: list[Word], with_value: frozenset[str]) -> tuple[list[Word], list[tuple[str, Word | None]]]:
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


class _Classifier:
    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx

    # ---- entry points

    def shell(self, text: str) -> RiskAssessment:
        if self.ctx.depth > _MAX_DEPTH:
            return RiskAssessment("L3", "unparsable", "shell code nested too deeply to analyse")
        try:
            parsed = parse_shell(text)
        except ValueError as exc:
            return RiskAssessment("L3", "unparsable", f"the shell string cannot be analysed ({exc})")
        result = _NOTHING
        saved_cwd = self.ctx.cwd
        for command in parsed.commands:
            result = _max(result, self.command(command))
        self.ctx.cwd = saved_cwd
        for code in parsed.substitutions:
            result = _max(result, self.nested(code))
        return result

    def nested(self, code: str) -> RiskAssessment:
        self.ctx.depth += 1
        saved_cwd = self.ctx.cwd
        try:
            return self.shell(code)
        finally:
            self.ctx.depth -= 1
            self.ctx.cwd = saved_cwd

    def command(self, command: ShellCommand) -> RiskAssessment:
        result = _NOTHING
        for redirect in command.redirects:
            result = _max(result, self.redirect(redirect))
        words = list(command.words)
        stdin = "pipe" if command.piped else None
        if command.stdin_text is not None:
            stdin = "dynamic" if command.stdin_dynamic else "text"
        for redirect in command.redirects:
            if redirect.op == "<" and redirect.fd in ("", "0"):
                stdin = "dynamic" if redirect.target.dynamic or redirect.target.text in _STDIN_PATHS else "file"
        return _max(result, self.words(words, stdin, command.stdin_text))

    def redirect(self, redirect: Redirect) -> RiskAssessment:
        if redirect.target.text.startswith(("/dev/tcp/", "/dev/udp/")):
            return RiskAssessment(
                "L2", "network_access", "opens a network connection through bash's /dev/tcp", redirect.op
            )
        if redirect.op not in _WRITE_REDIRECTS:
            return _NOTHING
        if _outside(redirect.target, self.ctx.cwd):
            return RiskAssessment(
                "L2", "writes_outside_workspace", f"redirects output to {redirect.target.text[:200]!r}, "
                "outside the workspace (or a path known only at run time)", redirect.op,
            )
        return RiskAssessment("L1", "workspace", "writes a file through a redirection", redirect.op)

    # ---- one simple command

    def words(self, words: list[Word], stdin: str | None, stdin_text: str | None = None,
              unknown_args: bool = False) -> RiskAssessment:
        result = _NOTHING
        while words and not words[0].dynamic and _assignment(words[0]):
            name, value = _assignment(words[0])  # type: ignore[misc]
            flagged = _check_assignment(name, "")
            if flagged:
                result = _max(result, flagged)
            words = words[1:]
        while words and not words[0].dynamic and words[0].text in _RESERVED:
            words = words[1:]
        if not words:
            return _max(result, RiskAssessment("L0", "observe", "only sets variables"))
        if words[0].dynamic or (words[0].text != "[" and _GLOB_PROGRAM.search(words[0].text)):
            self.ctx.seen.append(" ".join(w.text for w in words))
            return _max(result, RiskAssessment(
                "L2", "hidden_program", "the program's name is known only at run time "
                f"({words[0].text[:100]!r}: a variable, a command substitution or a pattern)", words[0].text[:100],
            ))
        for word in words:
            if _PROXY_TEXT.search(word.text):
                result = _max(result, RiskAssessment(
                    "L2", "network_access", "names the egress proxy or a proxy option, to reach the network "
                    "without network: true", words[0].text,
                ))
        return _max(result, self.program(words, stdin, stdin_text, unknown_args))

    def program(self, words: list[Word], stdin: str | None, stdin_text: str | None,
                unknown_args: bool) -> RiskAssessment:
        program = posixpath.basename(words[0].text)
        args = words[1:]
        if program in _WRAPPERS:
            return self.wrapper(program, args, stdin, stdin_text, unknown_args)
        self.ctx.seen.append(" ".join([program, *(w.text for w in args)]))
        result = self.generic(program, args)
        return _max(result, self.specific(program, args, stdin, stdin_text, unknown_args))

    def wrapper(self, program: str, args: list[Word], stdin: str | None, stdin_text: str | None,
                unknown_args: bool) -> RiskAssessment:
        rest, options = _options(args, _WRAPPERS[program])
        result = _NOTHING
        for name, value in options:
            if name in ("-o", "--output") and value is not None and program in ("time", "strace", "ltrace"):
                result = _max(result, self.writes(program, [value]))
            if name in ("-S", "--split-string") and value is not None:
                result = _max(result, self.nested(value.text + " " + " ".join(w.text for w in rest)))
                return result
            if program == "command" and name in ("-v", "-V"):
                return RiskAssessment("L0", "observe", "only describes a command", program)
            if program == "env" and name in ("-C", "--chdir") and value is not None:
                self.ctx.cwd = self._cd(value)
        if program == "env":
            while rest and _assignment(rest[0]):
                flagged = _check_assignment(_assignment(rest[0])[0], program)  # type: ignore[index]
                if flagged:
                    result = _max(result, flagged)
                rest = rest[1:]
        if program == "timeout" and rest:
            rest = rest[1:]
        if program == "flock" and rest:
            rest = rest[1:]
            if rest and rest[0].text in ("-c", "--command") and len(rest) > 1:
                return _max(result, self.code_string(program, rest[1]))
        if program in _UNKNOWN_ARGS_WRAPPERS:
            unknown_args = True
            if not rest:
                rest = [Word("echo")]
        if not rest:
            return _max(result, _LOW)
        return _max(result, self.words(rest, stdin, stdin_text, unknown_args))

    def awk(self, program: str, args: list[Word]) -> RiskAssessment:
        """awk: its program text may run commands (``system()``, ``print | "sh"``) or write files."""
        rest, options = _options(args, frozenset({"-f", "-v", "-F", "--file", "--assign", "--field-separator"}))
        if any(name in ("-f", "--file") for name, _ in options) or not rest:
            return _LOW
        if rest[0].dynamic:
            return RiskAssessment("L2", "hidden_code", f"{program} runs a program known only at run time", program)
        if _AWK_HIDES.search(rest[0].text):
            return RiskAssessment(
                "L2", "hidden_code", f"the {program} program runs commands or writes outside the workspace", program
            )
        return _LOW

    def code_string(self, program: str, code: Word) -> RiskAssessment:
        """Shell code given as one word (``sh -c CODE``, ``eval``, ``watch``)."""
        if code.dynamic:
            return RiskAssessment(
                "L2", "hidden_code", f"{program} runs shell code that is known only at run time", program
            )
        return self.nested(code.text)

    def generic(self, program: str, args: list[Word]) -> RiskAssessment:
        """Rules for any program: output options pointing outside the workspace."""
        targets: list[Word] = []
        for i, word in enumerate(args):
            name, sep, value = word.text.partition("=")
            if name in _COMMAND_OPTIONS:
                code = Word(value, word.dynamic) if sep else (args[i + 1] if i + 1 < len(args) else Word(""))
                return _max(
                    RiskAssessment("L2", "hidden_code", f"{program} {name} runs a command given as an option", program),
                    self.code_string(program, code),
                )
            if sep and name in _OUTPUT_OPTIONS:
                targets.append(Word(value, word.dynamic))
            elif word.text in _OUTPUT_OPTIONS and i + 1 < len(args) and not args[i + 1].text.startswith("-"):
                targets.append(args[i + 1])
        outside = [t for t in targets if _looks_like_path(t) and _outside(t, self.ctx.cwd)]
        if outside:
            return RiskAssessment(
                "L2", "writes_outside_workspace", f"writes to {outside[0].text[:200]!r}, outside the workspace",
                program,
            )
        return _NOTHING

    def writes(self, program: str, targets: list[Word]) -> RiskAssessment:
        outside = [t for t in targets if _outside(t, self.ctx.cwd)]
        if outside:
            return RiskAssessment(
                "L2", "writes_outside_workspace",
                f"writes to {outside[0].text[:200]!r}, outside the workspace (or a path known only at run time)",
                program,
            )
        return RiskAssessment("L1", "workspace", "writes in the workspace", program)

    def _cd(self, target: Word | None) -> str | None:
        if target is None or target.dynamic or target.text.startswith("~") or target.text == "-":
            return None
        if target.text.startswith("/"):
            norm = posixpath.normpath(target.text)
            if norm == WORKSPACE_ROOT:
                return "."
            return posixpath.relpath(norm, WORKSPACE_ROOT) if norm.startswith(WORKSPACE_ROOT + "/") else None
        if self.ctx.cwd is None:
            return None
        norm = posixpath.normpath(posixpath.join(self.ctx.cwd, target.text))
        return None if norm == ".." or norm.startswith("../") else norm

    def specific(self, program: str, args: list[Word], stdin: str | None, stdin_text: str | None,
                 unknown_args: bool) -> RiskAssessment:
        plain = [w for w in args if not w.text.startswith("-") or w.text == "-"]
        if program in ("cd", "pushd"):
            self.ctx.cwd = self._cd(plain[0] if plain else None)
            return RiskAssessment("L0", "observe", "changes the working folder", program)
        if program in ("export", "declare", "typeset", "local", "readonly"):
            result = RiskAssessment("L0", "observe", "sets variables", program)
            for word in plain:
                assigned = _assignment(word)
                flagged = _check_assignment(assigned[0], program) if assigned else None
                if flagged:
                    result = _max(result, flagged)
            return result
        if program in _SHELLS:
            return self.shell_program(program, args, stdin, stdin_text)
        if _PYTHON.fullmatch(program):
            return self.python(program, args, stdin, stdin_text)
        if program in _INTERPRETERS:
            return self.interpreter(program, args, stdin, stdin_text)
        if program == "eval":
            if any(w.dynamic for w in args):
                return RiskAssessment("L2", "hidden_code", "eval runs shell code known only at run time", program)
            return self.nested(" ".join(w.text for w in args))
        if program in ("source", "."):
            if not plain or plain[0].dynamic or plain[0].text in _STDIN_PATHS:
                return RiskAssessment("L3", "shell_from_stdin", "sources shell code produced at run time", program)
            return _LOW
        if program == "alias" and plain:
            return RiskAssessment("L2", "hidden_code", "defines an alias: a command that runs under another name",
                                  program)
        if program == "trap" and plain:
            return _max(_LOW, self.code_string(program, plain[0]))
        if program in _AWK:
            return self.awk(program, args)
        if program in _EDITORS and any(w.text.startswith("+") or w.text in ("-c", "--cmd", "-s", "--eval")
                                       for w in args):
            return RiskAssessment("L2", "hidden_code", f"{program} runs editor commands given on the command line",
                                  program)
        if program == "sed" and any(_SED_RUNS.search(w.text) for w in plain[:1] + [
                args[i + 1] for i, w in enumerate(args[:-1]) if w.text in ("-e", "--expression")]):
            return RiskAssessment("L2", "hidden_code", "the sed script runs a command or writes a file (e, w)",
                                  program)
        if program == "watch":
            rest, _ = _options(args, frozenset({"-n", "--interval", "-d", "--differences"}))
            return self.code_string(program, Word(" ".join(w.text for w in rest), any(w.dynamic for w in rest)))
        if program in _PRIVILEGE:
            return RiskAssessment("L3", "privilege", "changes privileges or ownership", program)
        if program in ("chmod", "install", "mkdir") and self._special_bits(program, args):
            return RiskAssessment("L3", "privilege", "sets setuid/setgid/sticky bits", program)
        if program in _NETWORK:
            return RiskAssessment(
                "L2", "network_tool", "reaches the network (the egress allowlist still applies)", program
            )
        if _PIP.fullmatch(program) or program in _PACKAGE_MANAGERS:
            return self.package(program, [w.text for w in args])
        if program == "git":
            return self.git(args)
        if program in _DELETE:
            return self.delete(program, args, unknown_args)
        if program == "find":
            return self.find(args)
        written = self.writers(program, args, plain, unknown_args)
        if written is not None:
            return written
        if program in _OBSERVE:
            return RiskAssessment("L0", "observe", "only reads", program)
        return _LOW

    def _special_bits(self, program: str, args: list[Word]) -> bool:
        if program == "chmod":
            modes = [w.text for w in args if not w.text.startswith("-") or re.fullmatch(r"-[rwxXst,ugoa=+-]+", w.text)]
            return bool(modes) and _special_mode(modes[0].lstrip("-") if modes[0].startswith("-") else modes[0])
        _, options = _options(args, frozenset({"-m", "--mode", "-o", "-g", "-t", "-S", "--owner", "--group"}))
        return any(name in ("-m", "--mode") and value is not None and _special_mode(value.text)
                   for name, value in options)

    def writers(self, program: str, args: list[Word], plain: list[Word], unknown_args: bool) -> RiskAssessment | None:
        """Programs that write files: their targets must stay in the workspace."""
        if program in ("touch", "mkdir", "tee", "truncate", "rmdir", "mktemp"):
            targets = [w for w in plain if w.text != "-"]
            if unknown_args and program != "tee":
                targets.append(Word("", True))
            return self.writes(program, targets) if targets else RiskAssessment("L1", "workspace", "", program)
        if program in ("cp", "mv", "ln", "install", "rsync"):
            _, options = _options(args, frozenset({"-t", "--target-directory", "-S", "--suffix", "-m", "--mode"}))
            target_dir = [v for n, v in options if n in ("-t", "--target-directory") and v is not None]
            paths = [w for w in plain if not any(w is v for v in target_dir)]
            targets = target_dir or paths[-1:]
            if program == "mv":
                targets = [*paths, *target_dir]
            if unknown_args:
                targets.append(Word("", True))
            return self.writes(program, targets)
        if program == "dd":
            return self.writes(program, [Word(w.text[3:], w.dynamic) for w in args if w.text.startswith("of=")])
        if program == "sed" and any(w.text.startswith("-i") or w.text.startswith("--in-place") for w in args):
            files = plain[1:] if plain else []
            return self.writes(program, files)
        if program in ("tar", "unzip"):
            names = ("-C", "--directory") if program == "tar" else ("-d",)
            targets = [args[i + 1] for i, w in enumerate(args[:-1]) if w.text in names]
            return self.writes(program, targets) if targets else None
        return None

    def shell_program(self, program: str, args: list[Word], stdin: str | None,
                      stdin_text: str | None) -> RiskAssessment:
        script: Word | None = None
        reads_stdin = False
        skip = False
        for i, word in enumerate(args):
            text = word.text
            if skip:
                skip = False
                continue
            if text in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                skip = True
                continue
            if text.startswith("-") and text not in ("-", "--") and not word.dynamic:
                if "c" in text.lstrip("-") and not text.startswith("--"):
                    if i + 1 < len(args):
                        return self.code_string(program, args[i + 1])
                    return RiskAssessment("L3", "unparsable", "a shell -c without a command", program)
                if "s" in text.lstrip("-") and not text.startswith("--"):
                    reads_stdin = True
                    break
                continue
            if text == "--":
                continue
            script = word
            break
        if script is not None and not reads_stdin:
            if script.dynamic or script.text in _STDIN_PATHS:
                return RiskAssessment("L3", "shell_from_stdin", "runs a shell script produced at run time", program)
            return _LOW
        return self.stdin_code(program, stdin, stdin_text, shell=True)

    def stdin_code(self, program: str, stdin: str | None, stdin_text: str | None, shell: bool) -> RiskAssessment:
        """A shell or interpreter that reads its code from stdin."""
        if stdin == "text" and stdin_text is not None:
            return self.nested(stdin_text) if shell else self.inline(program, Word(stdin_text))
        if stdin == "file":
            return _LOW
        if stdin is None:
            return _LOW  # stdin is /dev/null: nothing runs
        return RiskAssessment(
            "L3", "shell_from_stdin", "runs code fed from stdin (a pipe or a run-time here-string), which is not shown",
            program,
        )

    def inline(self, program: str, code: Word) -> RiskAssessment:
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
        if _PROXY_TEXT.search(code.text):
            return RiskAssessment("L2", "network_access", f"{program}'s inline code names the egress proxy", program)
        return _LOW

    def python(self, program: str, args: list[Word], stdin: str | None, stdin_text: str | None) -> RiskAssessment:
        i = 0
        while i < len(args):
            text = args[i].text
            if args[i].dynamic:
                return RiskAssessment("L2", "hidden_code", f"{program} runs code known only at run time", program)
            if text == "-":
                return self.stdin_code(program, stdin or "pipe", stdin_text, shell=False)
            if not text.startswith("-") or text == "--":
                return _LOW  # a script file: the project's code
            flags = text[1:]
            for j, flag in enumerate(flags):
                value = flags[j + 1 :]
                if flag in "mcWXQ":
                    if not value:
                        i += 1
                        value = args[i].text if i < len(args) else ""
                        if i < len(args) and args[i].dynamic:
                            return RiskAssessment(
                                "L2", "hidden_code", f"{program} runs code known only at run time", program
                            )
                    if flag == "m":
                        return self.module(program, value, [w.text for w in args[i + 1 :]])
                    if flag == "c":
                        return self.inline(program, Word(value))
                    break
            i += 1
        return self.stdin_code(program, stdin, stdin_text, shell=False)

    def module(self, program: str, module: str, rest: list[str]) -> RiskAssessment:
        if _PIP.fullmatch(module):
            return self.package("pip", rest)
        if module == "ensurepip":
            return RiskAssessment("L3", "package_install", "installs pip", program)
        return _LOW

    def interpreter(self, program: str, args: list[Word], stdin: str | None,
                    stdin_text: str | None) -> RiskAssessment:
        flags = _INTERPRETERS[program]
        for i, word in enumerate(args):
            if word.text in flags:
                return self.inline(program, args[i + 1] if i + 1 < len(args) else Word(""))
            if any(word.text.startswith(f) and len(word.text) > len(f) and not f.startswith("--") for f in flags):
                return self.inline(program, Word(word.text[2:], word.dynamic))
            if word.text == "-":
                return self.stdin_code(program, stdin or "pipe", stdin_text, shell=False)
            if not word.text.startswith("-"):
                return RiskAssessment("L2", "hidden_code", "runs a script known only at run time", program) \
                    if word.dynamic else _LOW
        return self.stdin_code(program, stdin, stdin_text, shell=False)

    def package(self, program: str, args: list[str]) -> RiskAssessment:
        name = "pip" if _PIP.fullmatch(program) else program
        sub = [a for a in args if not a.startswith("-")]
        verbs = _PACKAGE_MANAGERS[name]
        if verbs is None or (sub and sub[0] in verbs) or (name in {"npm", "pnpm", "yarn"} and not sub):
            return RiskAssessment("L3", "package_install", "installs or removes packages (a dependency change)", name)
        return _LOW

    def git(self, args: list[Word]) -> RiskAssessment:
        result = _NOTHING
        for i, word in enumerate(args):
            if word.text == "-c" and i + 1 < len(args):
                key = args[i + 1].text.split("=", 1)[0]
                if key.lower() in ("http.proxy", "https.proxy") or key.lower().endswith(".proxy"):
                    result = _max(result, RiskAssessment("L2", "network_access", "sets a git proxy", "git"))
                elif _GIT_RUNS.match(key):
                    result = _max(result, RiskAssessment(
                        "L2", "hidden_code", f"git -c {key} makes git run a command", "git"
                    ))
        sub: list[str] = []
        skip = False
        for i, word in enumerate(args):
            if skip:
                skip = False
            elif word.text in ("-c", "-C", "--git-dir", "--work-tree", "--namespace"):
                skip = True
                if word.text != "-c" and i + 1 < len(args) and _outside(args[i + 1], self.ctx.cwd):
                    result = _max(result, RiskAssessment(
                        "L2", "writes_outside_workspace", f"runs git on {args[i + 1].text[:200]!r}, outside the "
                        "workspace", "git",
                    ))
            elif not word.text.startswith("-"):
                sub.append(word.text)
        if sub and sub[0] in _GIT_NETWORK:
            return _max(result, RiskAssessment("L2", "network_tool", f"git {sub[0]} reaches a remote", "git"))
        if sub and sub[0] in _GIT_OBSERVE:
            return _max(result, RiskAssessment("L0", "observe", f"git {sub[0]} only reads", "git"))
        return _max(result, _LOW)

    def delete(self, program: str, args: list[Word], unknown_args: bool) -> RiskAssessment:
        targets = [a for a in args if not a.text.startswith("-") or a.text == "-" or a.dynamic]
        cwd = self.ctx.cwd
        outside = [
            t for t in targets
            if cwd is None or not _in_build_folder(t if t.text.startswith("/") else Word(posixpath.join(cwd, t.text)))
        ]
        if unknown_args:
            outside.append(Word("(targets read from stdin)"))
        if outside or (not targets and args):
            shown = ", ".join(t.text[:100] for t in outside[:3]) or "(no target)"
            return RiskAssessment("L3", "delete_outside_build", f"deletes outside build folders: {shown}", program)
        return _LOW

    def find(self, args: list[Word]) -> RiskAssessment:
        first_option = next((i for i, a in enumerate(args) if a.text.startswith("-")), len(args))
        roots = args[:first_option]
        texts = [a.text for a in args]
        result = _NOTHING
        if "-delete" in texts and (not roots or not all(_in_build_folder(r) for r in roots)):
            return RiskAssessment("L3", "delete_outside_build", "find -delete outside build folders", "find")
        if "-delete" in texts:
            result = _LOW
        for flag in ("-exec", "-execdir", "-ok", "-okdir"):
            if flag in texts:
                inner = args[texts.index(flag) + 1 :]
                end = next((i for i, a in enumerate(inner) if a.text in {";", "+", "\\;"}), len(inner))
                if inner[:end]:
                    result = _max(result, self.words(inner[:end], None, None, unknown_args=True))
        if any(t in ("-fprint", "-fprintf", "-fls", "-fprint0") for t in texts):
            result = _max(result, _LOW)
        return _max(result, RiskAssessment("L0", "observe", "only reads", "find"))


def _looks_like_path(word: Word) -> bool:
    return word.dynamic or word.text.startswith(("/", "~", ".."))


def classify_exec(
    argv: list[str] | None = None, cmd: str | None = None, *, network: bool = False, cwd: str = "."
) -> RiskAssessment:
    """Classify one ``exec`` command.

    Args:
        argv: the program and its arguments (each one word, never split or expanded), or
        cmd: a shell string (run with ``bash -c``).
        network: the request asks for the egress proxy; the command is then at least ``L2``.
        cwd: the request's working folder, relative to the workspace root.

    Returns:
        The highest :class:`RiskAssessment` over the command's simple commands, with
        :attr:`RiskAssessment.commands` filled.
    """
    start = posixpath.normpath(cwd.removeprefix(WORKSPACE_ROOT + "/").lstrip("/") or ".")
    ctx = _Context(cwd=None if start == ".." or start.startswith("../") else start)
    classifier = _Classifier(ctx)
    if argv is not None:
        result = classifier.words([Word(a) for a in argv], None) if argv else _NOTHING
    else:
        result = classifier.shell(cmd or "")
    if network:
        wants = RiskAssessment("L2", "network_access", "asks for network access through the egress proxy")
        result = _max(result, wants)
    seen = tuple(dict.fromkeys(ctx.seen))
    return RiskAssessment(result.level, result.rule, result.reason, result.program, seen)


def matches_pattern(assessment: RiskAssessment, command: str, pattern: str) -> bool:
    """Whether an exec policy pattern matches a command (see :class:`~deskpod.controller.policy.Policy`).

    Args:
        assessment: the command's assessment (its simple commands).
        command: the command as shown to a human (argv shell-quoted, or the shell string).
        pattern: ``re:REGEX`` (searched) or a glob (``fnmatch``, matched whole).

    Returns:
        Whether the pattern matches the whole command or one of its simple commands.
    """
    texts = (command, *assessment.commands)
    if pattern.startswith("re:"):
        regex = re.compile(pattern[3:])
        return any(regex.search(text) for text in texts)
    return any(fnmatch.fnmatchcase(text, pattern) for text in texts)
