"""Suspected prompt injection in what the sandbox shows.

Page text, dialogs and tab titles are third-party content: they can inform the
agent about the page, never authorize it. When that content addresses the agent
or instructs it to do what only the user may authorize (run a command, enter a
password or card, visit another domain, lift a safety check), the run pauses
and the human sees the quoted evidence. Resuming authorizes nothing: every
action after it is still validated and confirmed like any other.

The detector is deterministic and deliberately eager: a *strong* signal alone
pauses (text aimed at an AI agent, "ignore previous instructions", a request to
leave the browser: open a terminal, press Win+R, paste into a shell); *weak*
signals (a "System:" notice, an instruction to run a command, however short
("run touch /tmp/x", "execute ./setup"), to enter credentials, to
visit a URL, to turn off a safety check) pause when two different kinds appear
on the same page. Text is scanned as normalized by :mod:`.text_norm`
(zero-width characters, full-width letters, homoglyphs and bidi-reversed runs
read as a reader sees them), from every source the daemon collects
(:class:`~deskpod.protocol.TextSource`). Each finding is quoted once per run, so a
page the human already saw and resumed from does not pause again for the same text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deskpod.controller.policy.text_norm import normalize, reversed_lines

__all__ = ["Finding", "InjectionScan", "MAX_EVIDENCE_CHARS", "scan_text"]

MAX_EVIDENCE_CHARS = 240
"""Characters quoted around each finding."""

_I = re.IGNORECASE | re.DOTALL
_Rule = tuple[str, tuple[str, ...], re.Pattern[str]]
"""``(kind, needles, pattern)``: the pattern runs only when one of the lower-case
needles is in the text, which keeps a scan of an ordinary page well under a millisecond."""

_SHELL_WORDS = ("touch|rm|curl|wget|bash|sh|zsh|python3?|perl|ruby|node|nc|ncat|netcat|chmod|chown|mkdir|"
                "echo|cat|powershell|pwsh|cmd|iex|mshta|certutil|bitsadmin|osascript|eval|dd|scp|ssh")
"""Programs whose name right after "run"/"execute"/"paste" makes it a shell command however short."""

_STRONG: tuple[_Rule, ...] = (
    ("override", ("instruction", "prompt", "rules", "guideline", "directive"),
     re.compile(r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|your)\b"
                r".{0,20}\b(instructions?|prompts?|rules|guidelines|directives)", _I)),
    ("override", ("忽略", "无视"), re.compile(r"(忽略|无视).{0,10}(之前|以上|先前|所有).{0,10}(指令|指示|规则|提示)", _I)),
    ("addressed_to_agent", ("ai", "llm", "language model", "gpt", "claude", "computer use", "computer-use", "agent"),
     re.compile(r"\b(ai|llm|large language model|ai assistant|ai agent|chatgpt|gpt-?\d?|claude|"
                r"computer[- ]use( agent)?|automated agent|autonomous agent)\b[^.!?\n]{0,40}"
                r"\b(must|should|needs? to|is required|are required|has to|now|immediately|"
                r"please|instructions?)\b", _I)),
    ("leave_browser", ("terminal", "shell", "command prompt", "powershell", "run dialog", "cmd", "+"),
     re.compile(r"\b(open|launch|start)\b\s{0,3}(up\s+)?(a|the|your|an)?\s{0,3}(new\s+)?"
                r"(terminal|shell|command prompt|powershell|run dialog|cmd(\.exe)?)\b|"
                r"\bpaste\b[^\n]{0,40}\binto\b\s{0,3}(a|the|your)?\s{0,3}(terminal|shell|command prompt|powershell|"
                r"run dialog|run box)\b|"
                r"\b(press|hit|use|hold)\b[^\n]{0,12}\b(win(dows)?( key)?|⊞|super)\s{0,2}\+\s{0,2}r\b", _I)),
    ("addressed_to_agent", ("人工智能", "助手", "智能体", "大模型"),
     re.compile(r"(人工智能|AI\s*助手|智能体|大模型).{0,20}(必须|应该|需要|立即|请)", _I)),
)
_WEAK: tuple[_Rule, ...] = (
    ("fake_system_notice", ("system", "admin", "系统", "管理员"),
     re.compile(r"(^|\n)\s*[\[(<]?\s*(system|admin|administrator|系统|管理员)\s*"
                r"(notice|message|alert|prompt|update|安全检查|提示|通知)?\s*[\])>]?\s*[:：]", _I)),
    ("fake_system_notice", ("check", "alert", "notice", "warning", "verification"),
     re.compile(r"\b(security|safety|account) (check|alert|notice|warning|verification)\b", _I)),
    ("run_command", ("command", "terminal", "shell", "console", "powershell", "bash", "cmd.exe", "curl", "sudo"),
     re.compile(r"\b(run|execute|paste|type|enter)\b.{0,40}\b(command|terminal|shell|console|"
                r"powershell|bash|cmd\.exe)\b|\bcurl\b[^\n]{0,80}\|\s*(ba)?sh\b|\bsudo\s", _I)),
    ("run_command", ("run", "exec", "paste"),
     re.compile(r"\b(run|execute|exec|paste)\b\s{0,3}[:\"'`]?\s{0,3}(sudo\s+)?"
                rf"\b({_SHELL_WORDS})\b(\s|$|[;|&])", _I)),
    ("run_command", ("run", "exec"),
     re.compile(r"\b(run|execute|exec)\b[^\n.]{0,40}(\s|^|[\"'`])(~|\.{1,2})?/[\w.-]+/?", _I)),
    ("run_command", ("终端", "命令", "curl"), re.compile(r"(打开终端|执行命令|运行命令|执行\s*curl)", _I)),
    ("credentials", ("password", "passcode", "credential", "2fa", "otp", "one-time", "one time", "api key",
                     "secret key", "token", "credit card", "card number", "cvv", "seed phrase", "recovery phrase",
                     "ssn"),
     re.compile(r"\b(enter|type|provide|confirm|verify|re-?enter|submit|send)\b.{0,40}\b(password|"
                r"passcode|credentials|2fa|otp|one[- ]time code|api key|secret key|token|"
                r"credit card|card number|cvv|seed phrase|recovery phrase|ssn)\b", _I)),
    ("credentials", ("密码", "验证码", "银行卡", "身份证"), re.compile(r"(输入|提供|确认).{0,10}(密码|验证码|银行卡|身份证)", _I)),
    ("visit_url", ("http://", "https://", "www."),
     re.compile(r"\b(go to|visit|navigate to|open|browse to|head to)\b\s{0,5}(this |the )?"
                r"(link|page|site|url)?\s{0,5}[:：]?\s{0,5}(https?://|www\.)", _I)),
    ("disable_safety", ("safety", "security", "confirmation", "verification", "protection", "filter", "guard"),
     re.compile(r"\b(disable|turn off|bypass|skip)\b.{0,30}\b(safety|security|confirmation|"
                r"verification|protection|filter|guard)", _I)),
)


@dataclass(frozen=True)
class Finding:
    """One suspicious passage: ``kind`` (``override``, ``addressed_to_agent``,
    ``leave_browser``, ``fake_system_notice``, ``run_command``, ``credentials``, ``visit_url``,
    ``disable_safety``), ``strong`` (pauses alone), ``source`` (``page_text``,
    ``dialog``, ``title``, a :class:`~deskpod.protocol.TextSource` kind such as
    ``attributes`` or ``canvas``, or a page log: ``console``, ``network``
    (:mod:`deskpod.controller.page_logs`); ``" (reversed)"`` appended when the match was in the
    text read backwards) and ``quote`` (the passage as normalized, at most
    :data:`MAX_EVIDENCE_CHARS` characters, whitespace collapsed)."""

    kind: str
    strong: bool
    source: str
    quote: str


@dataclass(frozen=True)
class InjectionScan:
    """The findings on one observation; ``pause`` when they call for the human."""

    findings: tuple[Finding, ...]

    @property
    def pause(self) -> bool:
        """A strong finding, or weak findings of at least two kinds."""
        if any(f.strong for f in self.findings):
            return True
        return len({f.kind for f in self.findings}) >= 2

    def evidence(self) -> tuple[str, ...]:
        """One line per finding: ``"<kind> in <source>: <quote>"``."""
        return tuple(f"{f.kind} in {f.source}: {f.quote}" for f in self.findings)


def _quote(text: str, start: int, end: int, within_line: bool = False) -> str:
    """The passage around ``text[start:end]``; ``within_line``: not past its line (the
    lines around a reversed match are other lines backwards, noise to a reader)."""
    pad = max(0, (MAX_EVIDENCE_CHARS - (end - start)) // 2)
    low, high = max(0, start - pad), end + pad
    if within_line:
        line_end = text.find("\n", end)
        low, high = max(low, text.rfind("\n", 0, start) + 1), min(high, len(text) if line_end < 0 else line_end)
    passage = text[low:high]
    return " ".join(passage.split())[:MAX_EVIDENCE_CHARS]


def _variants(text: str) -> tuple[tuple[str, str], ...]:
    """``(suffix, text)`` pairs to scan: the normalized text, and each of its lines
    backwards (suffix ``" (reversed)"``)."""
    plain = normalize(text)
    return (("", plain), (" (reversed)", reversed_lines(plain)))


def scan_text(sources: dict[str, str | None], seen: set[str] | None = None) -> InjectionScan:
    """Look for instructions aimed at the agent in untrusted text.

    Each text is scanned as a reader sees it (:func:`~deskpod.controller.policy.text_norm.normalize`:
    NFKC, format characters and combining marks removed, confusable letters folded) and
    also with each line reversed, for text a right-to-left override displays backwards;
    the quote is of the normalized text, and the source of a reversed match reads
    ``"<source> (reversed)"``.

    Args:
        sources: text by where it came from (``{"page_text": ..., "dialog": ...}``);
            ``None`` values are skipped.
        seen: quotes already shown to the human in this run; matching findings are
            left out, and the new ones are added to it.

    Returns:
        The :class:`InjectionScan` (at most one finding per kind and source, and one
        per kind and quote).
    """
    findings: list[Finding] = []
    quoted: set[tuple[str, str]] = set()
    for source, raw in sources.items():
        if not raw:
            continue
        kinds: set[str] = set()
        for suffix, text in _variants(raw):
            lowered = text.lower()
            for strong, rules in ((True, _STRONG), (False, _WEAK)):
                for kind, needles, pattern in rules:
                    if kind in kinds or not any(needle in lowered for needle in needles):
                        continue
                    match = pattern.search(text)
                    if match is None:
                        continue
                    quote = _quote(text, match.start(), match.end(), within_line=bool(suffix))
                    kinds.add(kind)
                    if (seen is not None and quote in seen) or (kind, quote) in quoted:
                        continue
                    quoted.add((kind, quote))
                    findings.append(Finding(kind, strong, source + suffix, quote))
    if seen is not None:
        seen.update(f.quote for f in findings)
    return InjectionScan(tuple(findings))
