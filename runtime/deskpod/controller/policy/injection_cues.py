"""The injection scan's cues: phrases of each category, in twelve languages, found in linear time.

The phrases and the rules that combine them are data, in ``injection_lexicon.toml``
beside this module (its header says how a phrase is written and what each category
means): English, French, German, Spanish, Portuguese, Italian, Russian, Chinese,
Japanese, Korean, Arabic and Hindi, and a few language-neutral cues (shell words, model
names, chat-template markers). Each phrase is normalized as the page text is
(:func:`~deskpod.controller.policy.text_norm.match_form`), and each of its letters also
matches the digits and symbols written for it (:data:`~.text_norm.LEET`), so ``1gn0r3``
and ``p@$$w0rd`` are the phrases they spell.

All phrases compile into one RE2 alternation (:mod:`deskpod.protocol.patterns`: linear
in the text, no backtracking), longest first, matched on the text's UTF-8 bytes; each
match is looked up in a table for its categories. Phrases in scripts written with
spaces start at a word's start; a whole-word phrase must also end at a word's end.
A few cues are shapes rather than words (:data:`STRUCTURAL`): a link, an e-mail address,
a pipe into a shell, a Unix path, Win+R, a line opening ``SYSTEM:``.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
import unicodedata
from dataclasses import dataclass
from importlib.resources import files
from typing import Any


from deskpod.controller.policy.text_norm import LEET, match_form, readable
from deskpod.errors import PatternError
from deskpod.protocol.patterns import MATCHES_NOTHING, compile_pattern

__all__ = ["CATEGORIES", "Cue", "Lexicon", "Rule", "STRUCTURAL", "find_cues", "lexicon", "load_lexicon"]

CATEGORIES = frozenset({
    "override", "rules", "prior", "user", "addressee", "vocative", "role", "jailbreak", "modal", "reveal", "enter",
    "secret", "sysprompt", "run", "launch", "command", "terminal", "disable", "safety", "conceal", "notice", "visit",
    "authority", "authority_word", "notice_word", "stop", "negation", "negation_after", "url", "dest"})
"""Every category a cue may have; ``url`` and ``dest`` come only from :data:`STRUCTURAL`."""

VERBS = frozenset({"override", "reveal", "enter", "run", "launch", "disable", "visit"})
"""The categories a negation cancels."""

NEGATION_GAP_BYTES = 12
"""Most bytes between a negation and the verb it cancels (one word at most, no punctuation)."""

NEGATION_AFTER_GAP_BYTES = 18
"""Most bytes between a verb and a negation written after it (Japanese, Korean: six
characters, no punctuation)."""

_PUNCTUATION = frozenset(".,;:!?\"()[]。，；：！？、「」")

LEXICON_MEMORY_BYTES = 64 * 1_048_576
"""RE2's memory budget for the lexicon's alternation, bytes (the DFA it builds lazily:
about 10 MB on a megabyte of cue-dense text; with the 8 MB :mod:`deskpod.protocol.patterns`
gives a task's pattern, the DFA thrashes and a 1 MB page takes seconds)."""

_LOOSE_MIN_CHARS = 4
"""Shortest phrase the loose matcher (letters spelled out and joined) looks for."""

_KEY_TABLE = str.maketrans({**{ch: letter for letter, shapes in LEET.items() if letter != "l" for ch in shapes},
                            "l": "i", "\n": " ", "\t": " ", "-": " ", "_": " "})
"""Folds a matched string to its table key: leet shapes to their letter, ``l`` to ``i``
(``1`` and ``|`` stand for either), separators to spaces."""

_LEET_MIN_CHARS = 4
"""Shortest phrase whose letters also match their leet shapes ("ai" is not "a1")."""

_WORDLESS_RANGES = ((0x0600, 0x06FF), (0x3040, 0x30FF), (0x3400, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FFFF))
_OTHER_WORDS = ((0x0900, 0x097F), (0x1100, 0x11FF), (0xAC00, 0xD7AF), (0x3130, 0x318F))
"""Devanagari and Hangul: written with spaces, so their phrases start at a word's start,
but a Latin word ends where they begin."""

STRUCTURAL: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"url", "dest"}), r"https?://|www\."),
    (frozenset({"dest"}), r"[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}"),
    (frozenset({"run", "command"}), r"\b(?:curl|wget|iwr|irm)\b[^\n|]{0,120}\|\s{0,3}(?:sudo\s+)?(?:ba|z)?sh\b"),
    (frozenset({"command"}),
     r"(?:^|[\s\"'(=:])(?:~|\.{1,2})/[\w.-]+|(?:^|[\s\"'(=:])/(?:tmp|etc|usr|bin|home|var|dev|root|opt)\b"),
    (frozenset({"launch", "terminal"}),
     r"\b(?:press|hit|use|hold|appuyez sur|appuie sur|drücken sie|drücke|pulsa|pulse|presione|pressione|premi)\b"
     r"[^\n]{0,12}\b(?:win(?:dows)?(?:[ -]?key)?|super|meta|⊞)\s{0,2}\+\s{0,2}r\b"),
    (frozenset({"launch", "terminal"}),
     r"\bpaste\b[^\n]{0,40}\binto\b\s{0,3}(?:a |the |your )?\s{0,3}(?:terminal|shell|command prompt|powershell|"
     r"run dialog|run box)\b"),
)
"""Cues found by shape: ``(categories, RE2 pattern)`` on the match form; the line that
opens with an authority (``SYSTEM:``) is built from the lexicon's words."""


@dataclass(frozen=True, slots=True)
class Cue:
    """One cue in a text: UTF-8 byte offsets ``start``..``end`` into the match form, and its
    ``categories``."""

    start: int
    end: int
    categories: frozenset[str]


@dataclass(frozen=True)
class Rule:
    """A combination of cues that is one kind of instruction (see the lexicon's header).

    ``need``: groups of categories, a cue of each group within ``span`` bytes (and in one
    sentence, unless ``one_sentence`` is false); ``base``: the kind's score; ``boost``:
    category to the score a cue of it adds nearby."""

    kind: str
    need: tuple[frozenset[str], ...]
    base: int
    span: int
    boost: dict[str, int]
    one_sentence: bool = True
    rivals: frozenset[str] = frozenset()
    """For a verb and its target: the other verbs that take the same target (see
    :mod:`.injection_score`); empty for other rules."""


@dataclass(frozen=True)
class _Entry:
    categories: frozenset[str]
    whole_word: bool
    latin_end: bool


@dataclass(frozen=True)
class Lexicon:
    """The loaded lexicon: ``entries`` by key, the compiled ``pattern`` (and ``loose_pattern``
    for joined spelled-out letters), the ``authority`` line pattern, the ``rules`` and,
    by category, the rules that need it or that it boosts (``rules_by_category``)."""

    entries: dict[str, _Entry]
    pattern: Any
    loose_pattern: Any
    authority: Any
    rules: tuple[Rule, ...]
    rules_by_category: dict[str, tuple[Rule, ...]]
    languages: tuple[str, ...]


def _script_class(ch: str) -> str:
    """``"wordless"`` (Han, Kana, Arabic), ``"spaced"`` (Cyrillic, Greek, Devanagari, Hangul)
    or ``"latin"`` (Latin, digits, punctuation) for a phrase's character."""
    cp = ord(ch)
    if any(low <= cp <= high for low, high in _WORDLESS_RANGES):
        return "wordless"
    if cp >= 0x370 and ch.isalpha():
        return "spaced"
    return "latin"


def _key(text: str) -> str:
    return " ".join(text.translate(_KEY_TABLE).split())


def _expand(phrase: str) -> str:
    """The RE2 pattern for a phrase in match form: leet shapes for its letters (phrases of
    :data:`_LEET_MIN_CHARS` or more), separators for its spaces and dashes."""
    words = phrase.replace("-", " ").replace("_", " ").split()
    leet = len(phrase) >= _LEET_MIN_CHARS
    return r"[\s_\-]+".join("".join(_piece(ch) if leet else _literal(ch) for ch in word) for word in words)


@functools.cache
def _piece(ch: str) -> str:
    """One character of a phrase as RE2: a class of its leet shapes, or the character escaped."""
    if ch in LEET:
        return "[" + "".join(_literal(c) for c in ch + LEET[ch]) + "]"
    return _literal(ch)


def _literal(ch: str) -> str:
    return "\\" + ch if ch.isascii() and not ch.isalnum() else ch


def _alternation(phrases: list[str]) -> str:
    return "|".join(_expand(p) for p in sorted(set(phrases), key=lambda p: (-len(p), p)))


def load_lexicon(text: str) -> Lexicon:
    """Parse and compile a lexicon (the TOML described in ``injection_lexicon.toml``).

    Args:
        text: the TOML text.

    Returns:
        The :class:`Lexicon`.

    Raises:
        ValueError: a category or rule field that is not known, an empty phrase.
        tomllib.TOMLDecodeError: not TOML.
    """
    data = tomllib.loads(text)
    implies = {name: frozenset(cats) for name, cats in data.get("implies", {}).items()}
    cats_by_key: dict[str, set[str]] = {}
    whole: dict[str, bool] = {}
    latin_end: dict[str, bool] = {}
    groups: dict[str, list[str]] = {"latin": [], "spaced": [], "wordless": []}
    loose: list[str] = []
    line_words: dict[str, list[str]] = {"authority_word": [], "notice_word": []}
    for language, table in data.get("lang", {}).items():
        for category, phrases in table.items():
            if category not in CATEGORIES:
                raise ValueError(f"lexicon: unknown category {category!r} in {language}")
            for raw in phrases:
                stem = raw.endswith("*")
                phrase = match_form(readable(raw.rstrip("*")))
                if not phrase.strip():
                    raise ValueError(f"lexicon: empty phrase in {language}.{category}")
                if category in line_words:
                    line_words[category].append(phrase)
                    continue
                key = _key(phrase)
                cats_by_key.setdefault(key, set()).update({category, *implies.get(category, ())})
                script = _script_class(phrase[0])
                free = stem or any(_script_class(ch) == "wordless" for ch in phrase)
                whole[key] = whole.get(key, True) and not free
                latin_end[key] = _script_class(phrase[-1]) == "latin"
                groups[script].append(phrase)
                if len(key) >= _LOOSE_MIN_CHARS and script == "latin":
                    loose.append(phrase)
    entries = {key: _Entry(frozenset(cats), whole[key], latin_end[key]) for key, cats in cats_by_key.items()}
    after_word = r"(?:^|[^\pL\pM\pN]|[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Arabic}\p{Devanagari}])"
    pattern = "|".join(part for part in (
        f"{after_word}(?:{_alternation(groups['latin'])})" if groups["latin"] else "",
        rf"(?:^|[^\pL\pM\pN])(?:{_alternation(groups['spaced'])})" if groups["spaced"] else "",
        f"(?:{_alternation(groups['wordless'])})" if groups["wordless"] else "") if part)
    words = "|".join(_expand(w) for w in sorted(set(line_words["authority_word"]), key=len, reverse=True))
    notes = "|".join(_expand(w) for w in sorted(set(line_words["notice_word"]), key=len, reverse=True))
    authority = (rf"(?:^|\n)[ \t]*[\[(<]?[ \t]*(?:{words})(?:[ \t]*(?:{notes}))?[ \t]*[\])>]?[ \t]*:"
                 if words else MATCHES_NOTHING)
    rules = _with_rivals(tuple(_rule(entry) for entry in data.get("rule", [])))
    by_category: dict[str, list[Rule]] = {}
    for rule in rules:
        for category in sorted({c for group in rule.need for c in group} | set(rule.boost)):
            by_category.setdefault(category, []).append(rule)
    return Lexicon(entries, _compile(pattern or MATCHES_NOTHING), _compile(_alternation(loose) or MATCHES_NOTHING),
                   compile_pattern(authority), rules, {c: tuple(found) for c, found in by_category.items()},
                   tuple(data.get("lang", {})))


def _compile(pattern: str) -> Any:
    """The lexicon's alternation compiled by RE2 with :data:`LEXICON_MEMORY_BYTES` (the
    lexicon is ours, not a page's; its DFA needs more room than a task's pattern gets).

    Raises:
        ValueError: RE2 refuses the pattern (a phrase it cannot read).
    """
    try:
        return compile_pattern(pattern, LEXICON_MEMORY_BYTES)
    except PatternError as exc:
        raise ValueError(f"lexicon: {exc}") from None


def _rule(entry: dict[str, Any]) -> Rule:
    known = {"kind", "need", "base", "span", "boost", "one_sentence"}
    if set(entry) - known:
        raise ValueError(f"lexicon: unknown rule fields {sorted(set(entry) - known)}")
    need = tuple(frozenset(group) for group in entry["need"])
    boost = dict(entry.get("boost", {}))
    for category in {c for group in need for c in group} | set(boost):
        if category not in CATEGORIES:
            raise ValueError(f"lexicon: rule {entry['kind']!r} names unknown category {category!r}")
    return Rule(str(entry["kind"]), need, int(entry["base"]), int(entry["span"]), boost,
                bool(entry.get("one_sentence", True)))


def _with_rivals(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """Each verb-and-target rule (two groups, the first all verbs) with the verbs of the
    other rules that take a target of its target group."""
    out: list[Rule] = []
    for rule in rules:
        if len(rule.need) != 2 or not rule.need[0] <= VERBS:
            out.append(rule)
            continue
        rivals = {c for other in rules if len(other.need) == 2 and other.need[0] <= VERBS
                  and other.need[1] & rule.need[1] for c in other.need[0]}
        out.append(dataclasses.replace(rule, rivals=frozenset(rivals - rule.need[0])))
    return tuple(out)


@functools.cache
def lexicon() -> Lexicon:
    """The shipped lexicon (``injection_lexicon.toml``), compiled once."""
    text = files("deskpod.controller.policy").joinpath("injection_lexicon.toml").read_text(encoding="utf-8")
    return load_lexicon(text)


@functools.cache
def _structural() -> tuple[tuple[frozenset[str], Any], ...]:
    return tuple((cats, compile_pattern(pattern)) for cats, pattern in STRUCTURAL)


def _continues(data: bytes, end: int, latin: bool) -> bool:
    """Whether the word goes on after byte ``end``: a letter, mark or digit follows (a
    Chinese, Japanese, Korean, Arabic or Hindi character does not continue a Latin word)."""
    following = data[end:end + 4].decode("utf-8", "ignore")[:1]
    if not following or unicodedata.category(following)[0] not in "LMN":
        return False
    if latin:
        cp = ord(following)
        return not any(low <= cp <= high for low, high in (*_WORDLESS_RANGES, *_OTHER_WORDS))
    return True


def _look_up(lex: Lexicon, raw: bytes) -> tuple[_Entry | None, int]:
    """The entry a match is (``None`` for none, or a ``stop`` phrase) and how many bytes
    of the match come before the phrase (the character that bounds the word)."""
    found = raw.decode("utf-8", "ignore")
    skip = 0
    if found[:1].isspace():
        found, skip = found[1:], 1
    entry = lex.entries.get(_key(found))
    if entry is None and found:
        entry = lex.entries.get(_key(found[1:]))
        skip += len(found[0].encode("utf-8"))
    if entry is None or "stop" in entry.categories:
        return None, skip
    return entry, skip


def find_cues(text: str, loose: bool = False) -> tuple[bytes, list[Cue]]:
    """The cues in a text, in order of their start.

    Args:
        text: the text in :func:`~deskpod.controller.policy.text_norm.match_form`.
        loose: look for phrases anywhere, not at word starts, and no structural cues
            (for spelled-out letters joined into one run); phrases of four characters and more.

    Returns:
        ``(data, cues)``: the text's UTF-8 bytes (the cues' offsets index them) and the cues.
    """
    lex = lexicon()
    data = text.encode("utf-8")
    cues: list[Cue] = []
    looked_up: dict[bytes, tuple[_Entry | None, int]] = {}
    for match in (lex.loose_pattern if loose else lex.pattern).finditer(data):
        start, end = match.span()
        raw = data[start:end]
        entry, skip = looked_up.get(raw) or looked_up.setdefault(raw, _look_up(lex, raw))
        if entry is None:
            continue
        if entry.whole_word and not loose and _continues(data, end, entry.latin_end):
            continue
        cues.append(Cue(start + skip, end, entry.categories))
    if not loose:
        shaped = [Cue(match.start(), match.end(), categories)
                  for categories, pattern in (*_structural(), (frozenset({"authority"}), lex.authority))
                  for match in pattern.finditer(data)]
        cues = sorted(_outside_addresses(cues, shaped) + shaped, key=lambda cue: cue.start)
    return data, _headed(data, _negated(data, cues))


_HEADING_BYTES = 40
"""A mention of an AI at most this far into its line, and a colon at most this far after
it, make the line a heading addressed to it."""


def _headed(data: bytes, cues: list[Cue]) -> list[Cue]:
    """``cues`` with a mention of an AI that makes a short line's heading ("Note to automated
    assistants:", "AIアシスタントの方へ：") also a ``vocative``."""
    out: list[Cue] = []
    for cue in cues:
        if "addressee" not in cue.categories or "vocative" in cue.categories:
            out.append(cue)
            continue
        line_start = data.rfind(b"\n", max(0, cue.start - _HEADING_BYTES - 1), cue.start) + 1
        if (line_start or cue.start <= _HEADING_BYTES) and not _continues_line(data, line_start):
            after = data[cue.end:cue.end + _HEADING_BYTES].decode("utf-8", "ignore").split("\n", 1)[0]
            colon = after.find(":")
            if colon >= 0 and not _PUNCTUATION.intersection(after[:colon]):
                cue = Cue(cue.start, cue.end, cue.categories | {"vocative"})
        out.append(cue)
    return out


def _continues_line(data: bytes, line_start: int) -> bool:
    """Whether the line at ``line_start`` continues a paragraph wrapped by hand (the line
    before it ends with a letter, a digit or a comma)."""
    before = data[max(0, line_start - 8):max(0, line_start - 1)].decode("utf-8", "ignore").rstrip()
    return bool(before) and (before[-1].isalnum() or before[-1] in ",;")


def _outside_addresses(cues: list[Cue], shaped: list[Cue]) -> list[Cue]:
    """``cues`` without those that end inside an e-mail address (the words of
    ``verify@evil.test`` are no verb; a link's path is read: a page can write there)."""
    addresses = sorted((cue.start, cue.end) for cue in shaped if cue.categories == {"dest"})
    if not addresses:
        return cues
    kept: list[Cue] = []
    index = 0
    for cue in cues:
        while index < len(addresses) and addresses[index][1] < cue.end:
            index += 1
        if index < len(addresses) and addresses[index][0] < cue.end <= addresses[index][1]:
            continue
        kept.append(cue)
    return kept


def _negated(data: bytes, cues: list[Cue]) -> list[Cue]:
    """``cues`` without negations, and without the verb categories of the cues they negate
    ("never share", "do not simply ignore"; "共有しないで")."""
    kept: list[Cue] = []
    negation_end = -1
    for cue in cues:
        if "negation" in cue.categories:
            negation_end = cue.end
            continue
        if "negation_after" in cue.categories:
            if (kept and kept[-1].categories & VERBS and 0 <= cue.start - kept[-1].end <= NEGATION_AFTER_GAP_BYTES
                    and not _PUNCTUATION.intersection(data[kept[-1].end:cue.start].decode("utf-8", "ignore"))):
                verb = kept.pop()
                if verb.categories - VERBS:
                    kept.append(Cue(verb.start, verb.end, verb.categories - VERBS))
            continue
        if cue.categories & VERBS and negation_end >= 0 and 0 <= cue.start - negation_end <= NEGATION_GAP_BYTES:
            gap = data[negation_end:cue.start].decode("utf-8", "ignore")
            if len(gap.split()) <= 1 and not _PUNCTUATION.intersection(gap):
                if not cue.categories - VERBS:
                    continue
                cue = Cue(cue.start, cue.end, cue.categories - VERBS)
        kept.append(cue)
    return kept
