"""A small lexer for the shell strings of ``exec`` requests, enough to judge what they run.

:func:`parse_shell` splits a bash command line into its simple commands
(separated by ``;``, ``&``, ``&&``, ``||``, ``|``, ``|&``, newlines and
parentheses) with each command's words, redirections, whether its stdin is a pipe,
and the text fed by a here-document or here-string. Quotes are removed as bash
removes them (``r''m`` is ``rm``, ``$'\\x72\\x6d'`` is ``rm``); a word that holds a
parameter expansion (``$X``, ``${X:-rm}``), a command substitution (``$(...)``,
backticks) or a process substitution (``<(...)``) is marked *dynamic*: its value is
known only when it runs. The code of every command and process substitution is
returned too, so the caller can judge it like the command itself.

It is not a full bash parser: keywords (``if``, ``for``, ``case``...) are left as
ordinary words, arithmetic and ``case`` patterns are not interpreted, and aliases and
functions are not expanded. Anything it cannot split (an unterminated quote or
substitution) raises :class:`ValueError`, which the classifier treats as a command
it cannot judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Redirect", "ShellCommand", "ShellParse", "Word", "parse_shell"]

_MAX_NESTING = 64
_OPERATOR_CHARS = frozenset(";&|()")
_WORD_END = frozenset(" \t\n;&|()<>")
_SPECIAL_PARAMS = frozenset("@*#?-$!0123456789")
_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f",
              "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


@dataclass(frozen=True)
class Word:
    """One word after quote removal. ``dynamic``: it holds an expansion whose value is known only at run time."""

    text: str
    dynamic: bool = False


@dataclass(frozen=True)
class Redirect:
    """A redirection: ``op`` (``>``, ``>>``, ``>|``, ``&>``, ``&>>``, ``<``, ``<>``, ``<<``, ``<<<``, ``>&``,
    ``<&``), the file descriptor written before it (``""``: the default) and its ``target`` word."""

    op: str
    fd: str
    target: Word


@dataclass
class ShellCommand:
    """A simple command. ``piped``: its stdin is the previous command's output. ``stdin_text``: what a
    here-document or here-string feeds it (``None``: none); ``stdin_dynamic``: that text holds expansions."""

    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    piped: bool = False
    stdin_text: str | None = None
    stdin_dynamic: bool = False


@dataclass
class ShellParse:
    """The simple commands of a shell string, and the code of its command and process substitutions."""

    commands: list[ShellCommand]
    substitutions: list[str]


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.commands: list[ShellCommand] = [ShellCommand()]
        self.substitutions: list[str] = []
        self.heredocs: list[tuple[ShellCommand, str, bool, bool]] = []
        self.nesting = 0

    # ---- helpers

    def _peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.s[j] if j < len(self.s) else ""

    def _end_command(self, piped: bool) -> None:
        current = self.commands[-1]
        if current.words or current.redirects:
            self.commands.append(ShellCommand(piped=piped))
        else:
            current.piped = current.piped or piped

    def _enter(self) -> None:
        self.nesting += 1
        if self.nesting > _MAX_NESTING:
            raise ValueError("quotes and substitutions nested too deeply")

    def _matching_paren(self, start: int) -> int:
        """Index of the ``)`` closing the ``(`` just before ``start``, skipping quotes and nested parens."""
        self._enter()
        try:
            return self._find_paren(start)
        finally:
            self.nesting -= 1

    def _find_paren(self, start: int) -> int:
        depth, j, s = 1, start, self.s
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                end = s.find("'", j + 1)
                if end < 0:
                    raise ValueError("unterminated quote in a substitution")
                j = end + 1
                continue
            if c == '"':
                j = self._skip_double(j + 1)
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise ValueError("unterminated substitution")

    def _skip_double(self, j: int) -> int:
        self._enter()
        try:
            return self._find_double_end(j)
        finally:
            self.nesting -= 1

    def _find_double_end(self, j: int) -> int:
        s = self.s
        while j < len(s):
            if s[j] == "\\":
                j += 2
            elif s[j] == '"':
                return j + 1
            elif s.startswith("$(", j):
                j = self._matching_paren(j + 2) + 1
            else:
                j += 1
        raise ValueError("unterminated double quote")

    def _substitution(self) -> str:
        """At ``$(`` or ``<(``/``>(``: read the substitution, record its code, return its text."""
        start = self.i + 2
        end = self._matching_paren(start)
        code = self.s[start:end]
        self.i = end + 1
        if code.startswith("(") and code.endswith(")"):  # $(( arithmetic ))
            return "$((" + code + "))"
        self.substitutions.append(code)
        return "$(" + code + ")"

    def _backtick(self) -> str:
        j, s, out = self.i + 1, self.s, []
        while j < len(s) and s[j] != "`":
            if s[j] == "\\" and j + 1 < len(s) and s[j + 1] in "`\\$":
                out.append(s[j + 1])
                j += 2
                continue
            out.append(s[j])
            j += 1
        if j >= len(s):
            raise ValueError("unterminated backtick substitution")
        self.i = j + 1
        code = "".join(out)
        self.substitutions.append(code)
        return "`" + code + "`"

    def _dollar(self) -> tuple[str, bool]:
        """At ``$``: read one expansion; return its text and whether it is dynamic."""
        nxt = self._peek(1)
        if nxt == "(":
            return self._substitution(), True
        if nxt == "{":
            end = self._matching_brace(self.i + 2)
            inner = self.s[self.i + 2 : end]
            self.i = end + 1
            if "$(" in inner or "`" in inner:
                self.substitutions.extend(_substitutions_in(inner, self.nesting + 1))
            return "${" + inner + "}", True
        if nxt == "'":
            return self._ansi_c(), False
        if nxt.isalpha() or nxt == "_":
            j = self.i + 1
            while j < len(self.s) and (self.s[j].isalnum() or self.s[j] == "_"):
                j += 1
            text = self.s[self.i : j]
            self.i = j
            return text, True
        if nxt and nxt in _SPECIAL_PARAMS:
            self.i += 2
            return "$" + nxt, True
        self.i += 1
        return "$", False

    def _matching_brace(self, start: int) -> int:
        depth, j = 1, start
        while j < len(self.s):
            if self.s[j] == "\\":
                j += 2
                continue
            if self.s[j] == "{":
                depth += 1
            elif self.s[j] == "}":
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise ValueError("unterminated ${...}")

    def _ansi_c(self) -> str:
        """At ``$'``: decode an ANSI-C quoted string (``\\xHH``, ``\\NNN``, ``\\uHHHH``, ``\\n``...)."""
        j, s, out = self.i + 2, self.s, []
        while j < len(s) and s[j] != "'":
            if s[j] != "\\" or j + 1 >= len(s):
                out.append(s[j])
                j += 1
                continue
            c = s[j + 1]
            if c in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[c]
                digits = ""
                k = j + 2
                while k < len(s) and len(digits) < width and s[k] in "0123456789abcdefABCDEF":
                    digits += s[k]
                    k += 1
                out.append(chr(int(digits, 16)) if digits else "\\" + c)
                j = k
            elif c in "01234567":
                k = j + 1
                while k < len(s) and k < j + 4 and s[k] in "01234567":
                    k += 1
                out.append(chr(int(s[j + 1 : k], 8)))
                j = k
            else:
                out.append(_C_ESCAPES.get(c, "\\" + c))
                j += 2
        if j >= len(s):
            raise ValueError("unterminated $'...' string")
        self.i = j + 1
        return "".join(out)

    def _double(self) -> tuple[str, bool]:
        self.i += 1
        out: list[str] = []
        dynamic, s = False, self.s
        while True:
            if self.i >= len(s):
                raise ValueError("unterminated double quote")
            c = s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out), dynamic
            if c == "\\" and self._peek(1) in '$`"\\\n':
                if self._peek(1) != "\n":
                    out.append(self._peek(1))
                self.i += 2
            elif c == "$":
                text, dyn = self._dollar()
                out.append(text)
                dynamic = dynamic or dyn
            elif c == "`":
                out.append(self._backtick())
                dynamic = True
            else:
                out.append(c)
                self.i += 1

    def _word(self) -> Word | None:
        """Read one word at the cursor (quotes removed); ``None`` when none starts here."""
        out: list[str] = []
        dynamic = False
        started = False
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in "<>" and self._peek(1) == "(":
                out.append(self._substitution())
                dynamic = started = True
                continue
            if c in _WORD_END:
                break
            started = True
            if c == "\\":
                if self._peek(1) == "\n":
                    self.i += 2
                    continue
                out.append(self._peek(1))
                self.i += 2
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise ValueError("unterminated single quote")
                out.append(s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                text, dyn = self._double()
                out.append(text)
                dynamic = dynamic or dyn
            elif c == "$":
                text, dyn = self._dollar()
                out.append(text)
                dynamic = dynamic or dyn
            elif c == "`":
                out.append(self._backtick())
                dynamic = True
            else:
                out.append(c)
                self.i += 1
        return Word("".join(out), dynamic) if started else None

    def _redirect(self, fd: str) -> None:
        s, i = self.s, self.i
        for op in ("&>>", "<<<", "<<-", "&>", ">>", ">|", ">&", "<&", "<>", "<<", ">", "<"):
            if s.startswith(op, i):
                break
        self.i = i + len(op)
        while self._peek() in (" ", "\t"):
            self.i += 1
        target = self._word()
        if target is None:
            raise ValueError(f"redirection {op} without a target")
        current = self.commands[-1]
        current.redirects.append(Redirect(op, fd, target))
        if op in ("<<", "<<-"):
            raw = s[i : self.i]
            self.heredocs.append((current, target.text, op == "<<-", any(q in raw for q in "'\"\\")))
        elif op == "<<<":
            current.stdin_text, current.stdin_dynamic = target.text, target.dynamic

    def _read_heredocs(self) -> None:
        s = self.s
        for command, delimiter, strip_tabs, quoted in self.heredocs:
            body: list[str] = []
            while self.i < len(s):
                end = s.find("\n", self.i)
                end = len(s) if end < 0 else end
                line = s[self.i : end]
                self.i = end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                body.append(line)
            text = "\n".join(body) + ("\n" if body else "")
            command.stdin_text = text
            if not quoted and ("$" in text or "`" in text):
                command.stdin_dynamic = True
                self.substitutions.extend(_substitutions_in(text, self.nesting + 1))
        self.heredocs = []

    # ---- main loop

    def run(self) -> ShellParse:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and self._peek(1) == "\n":
                self.i += 2
            elif c == "\n":
                self.i += 1
                self._end_command(False)
                self._read_heredocs()
            elif c == "#" and (self.i == 0 or s[self.i - 1] in " \t\n;&|()"):
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif c == "&" and self._peek(1) == ">":
                self._redirect("")
            elif c in _OPERATOR_CHARS:
                two = s[self.i : self.i + 2]
                if two in ("&&", "||", ";;", "|&"):
                    self.i += 2
                else:
                    self.i += 1
                self._end_command(two in ("|&",) or (c == "|" and two != "||"))
            elif c in "<>" and self._peek(1) != "(":
                self._redirect("")
            else:
                word = self._word()
                if word is None:
                    raise ValueError(f"unexpected character {c!r}")
                if word.text.isdigit() and not word.dynamic and self._peek() in ("<", ">") and self._peek(1) != "(":
                    self._redirect(word.text)
                else:
                    self.commands[-1].words.append(word)
        if self.heredocs:
            self._read_heredocs()
        return ShellParse([c for c in self.commands if c.words or c.redirects], self.substitutions)


def _substitutions_in(text: str, nesting: int) -> list[str]:
    """The code of the command substitutions in ``text`` read as the inside of double quotes."""
    lexer = _Lexer('"' + text.replace('"', '\\"') + '"')
    lexer.nesting = nesting
    lexer._enter()
    lexer._word()
    return lexer.substitutions


def parse_shell(text: str) -> ShellParse:
    """Split a bash command line into simple commands (see the module).

    Args:
        text: the shell string, as ``bash -c`` would get it.

    Returns:
        The :class:`ShellParse`.

    Raises:
        ValueError: an unterminated quote, substitution or ``${...}``, or a redirection
            without a target.
    """
    return _Lexer(text).run()
