"""Risk levels of a code agent's ``exec`` commands: a speed bump, not a boundary.

A deterministic classifier into the controller's four risk levels, which decides
which commands a human is asked about (with the operator's exec policy,
:class:`~deskpod.controller.policy.policy_file.Policy` ``exec_confirm``):

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
The rules for one program's command line (redirections, writers, ``git``, package
managers, deletes, inline code) are :mod:`.exec_rules`'; this module walks the string.

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

from deskpod.controller.policy.exec_rules import (
    LOW,
    NOTHING,
    PROXY_TEXT,
    WORKSPACE_ROOT,
    RiskAssessment,
    assignment,
    assignment_risk,
    awk_risk,
    change_folder,
    delete_risk,
    git_risk,
    higher,
    in_build_folder,
    inline_risk,
    is_package_manager,
    module_risk,
    package_risk,
    redirect_risk,
    sets_special_bits,
    split_options,
    writes_outside,
    writes_risk,
)
from deskpod.controller.policy.shell_parse import ShellCommand, Word, parse_shell
from deskpod.protocol.patterns import compile_pattern

__all__ = ["classify_exec", "matches_pattern"]

_MAX_DEPTH = 6
_OBSERVE = frozenset(
    (
        "ls cat head tail wc grep egrep fgrep rg pwd echo printf true false stat file tree diff cmp which "
        "sort uniq cut nl basename dirname realpath readlink du df date whoami id uname test [ type"
    ).split()
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
_OUTPUT_OPTIONS = frozenset({"-o", "--output", "--output-file", "--output-dir", "--outdir", "--out", "--outfile",
                             "--log-file", "--logfile", "--target-dir", "--prefix", "--root", "--basetemp",
                             "--directory"})
_STDIN_PATHS = frozenset({"-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"})
_GLOB_PROGRAM = re.compile(r"[*?]|\[.+\]|\{[^}]*(,|\.\.)[^}]*\}")
# Options that make a program run a command given as their value.
_COMMAND_OPTIONS = frozenset({"--to-command", "--checkpoint-action", "--use-compress-program", "--rsh",
                              "--upload-pack", "--receive-pack", "--exec", "--unzip-command", "--info-script",
                              "--new-volume-script", "--rsync-path", "--pre-invoke", "--post-invoke"})
_AWK = frozenset({"awk", "gawk", "mawk", "nawk", "busybox-awk"})
_SED_RUNS = re.compile(r"(?:^|[;\n}])\s*(?:\d+|\$|/[^/]*/)?\s*e\b|^s(.).*\1.*\1[gpiImM0-9w]*e|\bw\s+/")
_EDITORS = frozenset({"vi", "vim", "nvim", "ex", "view", "vimdiff", "emacs", "nano", "ed"})


@dataclass
class _Context:
    depth: int = 0
    cwd: str | None = "."
    """The working folder relative to the workspace root; ``None``: outside it, or unknown."""
    seen: list[str] = field(default_factory=list)


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
        result = NOTHING
        saved_cwd = self.ctx.cwd
        for command in parsed.commands:
            result = higher(result, self.command(command))
        self.ctx.cwd = saved_cwd
        for code in parsed.substitutions:
            result = higher(result, self.nested(code))
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
        result = NOTHING
        for redirect in command.redirects:
            result = higher(result, redirect_risk(redirect, self.ctx.cwd))
        words = list(command.words)
        stdin = "pipe" if command.piped else None
        if command.stdin_text is not None:
            stdin = "dynamic" if command.stdin_dynamic else "text"
        for redirect in command.redirects:
            if redirect.op == "<" and redirect.fd in ("", "0"):
                stdin = "dynamic" if redirect.target.dynamic or redirect.target.text in _STDIN_PATHS else "file"
        return higher(result, self.words(words, stdin, command.stdin_text))
    # ---- one simple command
    def words(self, words: list[Word], stdin: str | None, stdin_text: str | None = None,
              unknown_args: bool = False) -> RiskAssessment:
        result = NOTHING
        while words and not words[0].dynamic and assignment(words[0]):
            name, value = assignment(words[0])  # type: ignore[misc]
            flagged = assignment_risk(name, "")
            if flagged:
                result = higher(result, flagged)
            words = words[1:]
        while words and not words[0].dynamic and words[0].text in _RESERVED:
            words = words[1:]
        if not words:
            return higher(result, RiskAssessment("L0", "observe", "only sets variables"))
        if words[0].dynamic or (words[0].text != "[" and _GLOB_PROGRAM.search(words[0].text)):
            self.ctx.seen.append(" ".join(w.text for w in words))
            return higher(result, RiskAssessment(
                "L2", "hidden_program", "the program's name is known only at run time "
                f"({words[0].text[:100]!r}: a variable, a command substitution or a pattern)", words[0].text[:100],
            ))
        for word in words:
            if PROXY_TEXT.search(word.text):
                result = higher(result, RiskAssessment(
                    "L2", "network_access", "names the egress proxy or a proxy option, to reach the network "
                    "without network: true", words[0].text,
                ))
        return higher(result, self.program(words, stdin, stdin_text, unknown_args))
    def program(self, words: list[Word], stdin: str | None, stdin_text: str | None,
                unknown_args: bool) -> RiskAssessment:
        program = posixpath.basename(words[0].text)
        args = words[1:]
        if program in _WRAPPERS:
            return self.wrapper(program, args, stdin, stdin_text, unknown_args)
        self.ctx.seen.append(" ".join([program, *(w.text for w in args)]))
        result = self.generic(program, args)
        return higher(result, self.specific(program, args, stdin, stdin_text, unknown_args))
    def wrapper(self, program: str, args: list[Word], stdin: str | None, stdin_text: str | None,
                unknown_args: bool) -> RiskAssessment:
        rest, options = split_options(args, _WRAPPERS[program])
        result = NOTHING
        for name, value in options:
            if name in ("-o", "--output") and value is not None and program in ("time", "strace", "ltrace"):
                result = higher(result, writes_risk(program, [value], self.ctx.cwd))
            if name in ("-S", "--split-string") and value is not None:
                result = higher(result, self.nested(value.text + " " + " ".join(w.text for w in rest)))
                return result
            if program == "command" and name in ("-v", "-V"):
                return RiskAssessment("L0", "observe", "only describes a command", program)
            if program == "env" and name in ("-C", "--chdir") and value is not None:
                self.ctx.cwd = change_folder(value, self.ctx.cwd)
        if program == "env":
            while rest and assignment(rest[0]):
                flagged = assignment_risk(assignment(rest[0])[0], program)  # type: ignore[index]
                if flagged:
                    result = higher(result, flagged)
                rest = rest[1:]
        if program == "timeout" and rest:
            rest = rest[1:]
        if program == "flock" and rest:
            rest = rest[1:]
            if rest and rest[0].text in ("-c", "--command") and len(rest) > 1:
                return higher(result, self.code_string(program, rest[1]))
        if program in _UNKNOWN_ARGS_WRAPPERS:
            unknown_args = True
            if not rest:
                rest = [Word("echo")]
        if not rest:
            return higher(result, LOW)
        return higher(result, self.words(rest, stdin, stdin_text, unknown_args))
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
                return higher(
                    RiskAssessment("L2", "hidden_code", f"{program} {name} runs a command given as an option", program),
                    self.code_string(program, code),
                )
            if sep and name in _OUTPUT_OPTIONS:
                targets.append(Word(value, word.dynamic))
            elif word.text in _OUTPUT_OPTIONS and i + 1 < len(args) and not args[i + 1].text.startswith("-"):
                targets.append(args[i + 1])
        outside = [t for t in targets if _looks_like_path(t) and writes_outside(t, self.ctx.cwd)]
        if outside:
            return RiskAssessment(
                "L2", "writes_outside_workspace", f"writes to {outside[0].text[:200]!r}, outside the workspace",
                program,
            )
        return NOTHING
    def specific(self, program: str, args: list[Word], stdin: str | None, stdin_text: str | None,
                 unknown_args: bool) -> RiskAssessment:
        plain = [w for w in args if not w.text.startswith("-") or w.text == "-"]
        if program in ("cd", "pushd"):
            self.ctx.cwd = change_folder(plain[0] if plain else None, self.ctx.cwd)
            return RiskAssessment("L0", "observe", "changes the working folder", program)
        if program in ("export", "declare", "typeset", "local", "readonly"):
            result = RiskAssessment("L0", "observe", "sets variables", program)
            for word in plain:
                assigned = assignment(word)
                flagged = assignment_risk(assigned[0], program) if assigned else None
                if flagged:
                    result = higher(result, flagged)
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
            return LOW
        if program == "alias" and plain:
            return RiskAssessment("L2", "hidden_code", "defines an alias: a command that runs under another name",
                                  program)
        if program == "trap" and plain:
            return higher(LOW, self.code_string(program, plain[0]))
        if program in _AWK:
            return awk_risk(program, args)
        if program in _EDITORS and any(w.text.startswith("+") or w.text in ("-c", "--cmd", "-s", "--eval")
                                       for w in args):
            return RiskAssessment("L2", "hidden_code", f"{program} runs editor commands given on the command line",
                                  program)
        if program == "sed" and any(_SED_RUNS.search(w.text) for w in plain[:1] + [
                args[i + 1] for i, w in enumerate(args[:-1]) if w.text in ("-e", "--expression")]):
            return RiskAssessment("L2", "hidden_code", "the sed script runs a command or writes a file (e, w)",
                                  program)
        if program == "watch":
            rest, _ = split_options(args, frozenset({"-n", "--interval", "-d", "--differences"}))
            return self.code_string(program, Word(" ".join(w.text for w in rest), any(w.dynamic for w in rest)))
        if program in _PRIVILEGE:
            return RiskAssessment("L3", "privilege", "changes privileges or ownership", program)
        if program in ("chmod", "install", "mkdir") and sets_special_bits(program, args):
            return RiskAssessment("L3", "privilege", "sets setuid/setgid/sticky bits", program)
        if program in _NETWORK:
            return RiskAssessment(
                "L2", "network_tool", "reaches the network (the egress allowlist still applies)", program
            )
        if is_package_manager(program):
            return package_risk(program, [w.text for w in args])
        if program == "git":
            return git_risk(args, self.ctx.cwd)
        if program in _DELETE:
            return delete_risk(program, args, unknown_args, self.ctx.cwd)
        if program == "find":
            return self.find(args)
        written = self.writers(program, args, plain, unknown_args)
        if written is not None:
            return written
        if program in _OBSERVE:
            return RiskAssessment("L0", "observe", "only reads", program)
        return LOW
    def writers(self, program: str, args: list[Word], plain: list[Word], unknown_args: bool) -> RiskAssessment | None:
        """Programs that write files: their targets must stay in the workspace."""
        if program in ("touch", "mkdir", "tee", "truncate", "rmdir", "mktemp"):
            targets = [w for w in plain if w.text != "-"]
            if unknown_args and program != "tee":
                targets.append(Word("", True))
            return writes_risk(program, targets, self.ctx.cwd) if targets else RiskAssessment("L1", "workspace", "", program)
        if program in ("cp", "mv", "ln", "install", "rsync"):
            _, options = split_options(args, frozenset({"-t", "--target-directory", "-S", "--suffix", "-m", "--mode"}))
            target_dir = [v for n, v in options if n in ("-t", "--target-directory") and v is not None]
            paths = [w for w in plain if not any(w is v for v in target_dir)]
            targets = target_dir or paths[-1:]
            if program == "mv":
                targets = [*paths, *target_dir]
            if unknown_args:
                targets.append(Word("", True))
            return writes_risk(program, targets, self.ctx.cwd)
        if program == "dd":
            return writes_risk(program, [Word(w.text[3:], w.dynamic) for w in args if w.text.startswith("of=")], self.ctx.cwd)
        if program == "sed" and any(w.text.startswith("-i") or w.text.startswith("--in-place") for w in args):
            files = plain[1:] if plain else []
            return writes_risk(program, files, self.ctx.cwd)
        if program in ("tar", "unzip"):
            names = ("-C", "--directory") if program == "tar" else ("-d",)
            targets = [args[i + 1] for i, w in enumerate(args[:-1]) if w.text in names]
            return writes_risk(program, targets, self.ctx.cwd) if targets else None
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
            return LOW
        return self.stdin_code(program, stdin, stdin_text, shell=True)
    def stdin_code(self, program: str, stdin: str | None, stdin_text: str | None, shell: bool) -> RiskAssessment:
        """A shell or interpreter that reads its code from stdin."""
        if stdin == "text" and stdin_text is not None:
            return self.nested(stdin_text) if shell else inline_risk(program, Word(stdin_text))
        if stdin == "file":
            return LOW
        if stdin is None:
            return LOW  # stdin is /dev/null: nothing runs
        return RiskAssessment(
            "L3", "shell_from_stdin", "runs code fed from stdin (a pipe or a run-time here-string), which is not shown",
            program,
        )
    def python(self, program: str, args: list[Word], stdin: str | None, stdin_text: str | None) -> RiskAssessment:
        i = 0
        while i < len(args):
            text = args[i].text
            if args[i].dynamic:
                return RiskAssessment("L2", "hidden_code", f"{program} runs code known only at run time", program)
            if text == "-":
                return self.stdin_code(program, stdin or "pipe", stdin_text, shell=False)
            if not text.startswith("-") or text == "--":
                return LOW  # a script file: the project's code
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
                        return module_risk(program, value, [w.text for w in args[i + 1 :]])
                    if flag == "c":
                        return inline_risk(program, Word(value))
                    break
            i += 1
        return self.stdin_code(program, stdin, stdin_text, shell=False)
    def interpreter(self, program: str, args: list[Word], stdin: str | None,
                    stdin_text: str | None) -> RiskAssessment:
        flags = _INTERPRETERS[program]
        for i, word in enumerate(args):
            if word.text in flags:
                return inline_risk(program, args[i + 1] if i + 1 < len(args) else Word(""))
            if any(word.text.startswith(f) and len(word.text) > len(f) and not f.startswith("--") for f in flags):
                return inline_risk(program, Word(word.text[2:], word.dynamic))
            if word.text == "-":
                return self.stdin_code(program, stdin or "pipe", stdin_text, shell=False)
            if not word.text.startswith("-"):
                return RiskAssessment("L2", "hidden_code", "runs a script known only at run time", program) \
                    if word.dynamic else LOW
        return self.stdin_code(program, stdin, stdin_text, shell=False)
    def find(self, args: list[Word]) -> RiskAssessment:
        first_option = next((i for i, a in enumerate(args) if a.text.startswith("-")), len(args))
        roots = args[:first_option]
        texts = [a.text for a in args]
        result = NOTHING
        if "-delete" in texts and (not roots or not all(in_build_folder(r) for r in roots)):
            return RiskAssessment("L3", "delete_outside_build", "find -delete outside build folders", "find")
        if "-delete" in texts:
            result = LOW
        for flag in ("-exec", "-execdir", "-ok", "-okdir"):
            if flag in texts:
                inner = args[texts.index(flag) + 1 :]
                end = next((i for i, a in enumerate(inner) if a.text in {";", "+", "\\;"}), len(inner))
                if inner[:end]:
                    result = higher(result, self.words(inner[:end], None, None, unknown_args=True))
        if any(t in ("-fprint", "-fprintf", "-fls", "-fprint0") for t in texts):
            result = higher(result, LOW)
        return higher(result, RiskAssessment("L0", "observe", "only reads", "find"))


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
        result = classifier.words([Word(a) for a in argv], None) if argv else NOTHING
    else:
        result = classifier.shell(cmd or "")
    if network:
        wants = RiskAssessment("L2", "network_access", "asks for network access through the egress proxy")
        result = higher(result, wants)
    seen = tuple(dict.fromkeys(ctx.seen))
    return RiskAssessment(result.level, result.rule, result.reason, result.program, seen)


def matches_pattern(assessment: RiskAssessment, command: str, pattern: str) -> bool:
    """Whether an exec policy pattern matches a command (see :class:`~deskpod.controller.policy.policy_file.Policy`).

    Args:
        assessment: the command's assessment (its simple commands).
        command: the command as shown to a human (argv shell-quoted, or the shell string).
        pattern: ``re:REGEX`` (searched, RE2 syntax: :mod:`deskpod.protocol.patterns`) or a glob (``fnmatch``, matched whole).

    Returns:
        Whether the pattern matches the whole command or one of its simple commands.
    """
    texts = (command, *assessment.commands)
    if pattern.startswith("re:"):
        regex = compile_pattern(pattern[3:])
        return any(regex.search(text) for text in texts)
    return any(fnmatch.fnmatchcase(text, pattern) for text in texts)
