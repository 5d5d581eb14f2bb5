"""Text as a reader sees it, for the injection scan: one spelling for each look.

A page can hide an instruction from a pattern match without hiding it from a
reader (a model reading the page text or the screenshot): zero-width characters
inside a keyword, full-width letters, Cyrillic or Greek letters that look like
Latin ones, text stored backwards and shown forwards by a bidi override, letters
spaced out, digits for letters. :func:`normalize` undoes the spellings that do not
change what a word is:

1. NFKC (Unicode Standard Annex #15): full-width and mathematical letters,
   ligatures and compatibility spaces become their plain forms, a letter and its
   combining accent one character.
2. Unicode tag characters (U+E0020..U+E007E, invisible, read by a model as the
   ASCII they shadow) become that ASCII; other format characters (general
   category ``Cf``: zero-width space and joiners, word joiner, soft hyphen,
   byte-order mark, the bidi embeddings, overrides and isolates) are removed, so
   ``ig\\u200bnore`` reads ``ignore``.
3. Combining marks NFKC could not compose into a Latin, Greek or Cyrillic letter
   (or that stand on a space, digit or punctuation) are removed, so
   ``i\\u0307gnore`` reads ``ignore``; so are the generic combining blocks anywhere,
   the Arabic vowel signs and the tatweel (most Arabic is written without them).
   Marks that are part of other scripts' letters (Devanagari vowel signs) stay.
4. :func:`fold`: letters that Unicode Technical Standard #39 (Unicode Security
   Mechanisms, section 4 "Confusable Detection", data file ``confusables.txt``)
   lists as confusable with a Latin letter are folded to it (the Cyrillic and
   Greek lookalikes and a few Latin-script ones: dotless i, script g), accented
   Latin and Greek letters to their base letter, Arabic alef forms to the bare
   alef. Real Russian folds too: the scan's Russian phrases are folded the same
   way, and :func:`readable` keeps the text unfolded for quoting.
5. Runs of whitespace collapse to one space; line breaks stay.

:func:`match_form` lower-cases and folds, and unifies apostrophes, quotes and
dashes, character for character (offsets into it are offsets into the
:func:`readable` text). Digits and symbols written for letters (``1gn0r3``,
``p@$$word``) are matched by the scan's own patterns (:data:`LEET`), which keeps the
digits that commands and URLs need. Every pattern here is RE2
(:mod:`deskpod.protocol.patterns`): linear in the text.

:func:`reversed_lines` gives each line backwards, for text stored in reverse and
displayed through a right-to-left override (``<bdo dir="rtl">``, U+202E): the
reader sees the reversed string, the DOM holds the other. :func:`spaced_runs`
finds words written letter by letter (``i g n o r e``, ``i.g.n.o.r.e``) and joins
them.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any

from deskpod.protocol.patterns import compile_pattern

__all__ = ["CONFUSABLES", "LEET", "collapse_spaces", "fold", "match_form", "normalize", "plain_text", "readable",
           "reversed_lines", "spaced_runs"]

_LOOKALIKES = {
    # Cyrillic (UTS #39 confusables.txt, the Latin prototypes of the Cyrillic letters)
    "а": "a", "в": "b", "с": "c", "ԁ": "d", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i", "ј": "j",
    "к": "k", "ӏ": "l", "м": "m", "н": "h", "о": "o", "р": "p", "ԛ": "q", "г": "r", "ѕ": "s", "т": "t",
    "ѵ": "v", "ԝ": "w", "х": "x", "у": "y", "ү": "y",
    "А": "A", "В": "B", "С": "C", "Е": "E", "Н": "H", "І": "I", "Ј": "J", "К": "K", "М": "M", "О": "O",
    "Р": "P", "Ѕ": "S", "Т": "T", "Х": "X", "У": "Y", "Ү": "Y", "Ԁ": "D", "Ԛ": "Q", "Ԝ": "W", "Ӏ": "I",
    # Greek
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t",
    "υ": "u", "χ": "x", "γ": "y", "ω": "w", "ϲ": "c", "ϳ": "j", "ѡ": "w",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C",
    # Latin-script lookalikes NFKC leaves alone
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɡ": "g", "ɩ": "i", "ɪ": "i", "ʏ": "y", "ʀ": "r", "ɴ": "n", "ᴏ": "o",
    "ꓲ": "I", "ǀ": "l",
}
CONFUSABLES: dict[int, str] = {ord(k): v for k, v in _LOOKALIKES.items()}
"""Code point to its Latin lookalike (a subset of UTS #39's ``confusables.txt``)."""

LEET: dict[str, str] = {"a": "4@", "b": "8", "e": "3€", "g": "69", "i": "1!|", "l": "1|", "o": "0", "s": "5$", "t": "7+"}
"""Characters written for a letter (leetspeak), by letter: the scan's patterns accept
any of them where a phrase of four characters or more has the letter."""

_MATCH_FOLD = {ord(k): v for k, v in {
    "\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2032": "'", "`": "'", "\u00b4": "'", "\u201c": '"', "\u201d": '"',
    "\u201e": '"', "\u00ab": '"', "\u00bb": '"', "\u2010": "-", "\u2011": "-", "\u2013": "-", "\u2014": "-",
    "\uff1a": ":"}.items()}
_ARABIC_FOLD = {ord("\u0623"): "\u0627", ord("\u0625"): "\u0627", ord("\u0622"): "\u0627", ord("\u0671"): "\u0627",
                ord("\u0649"): "\u064a"}
_TAGS = {cp: chr(cp - 0xE0000) for cp in range(0xE0020, 0xE007F)}
_HAS_TAGS = compile_pattern(r"[\x{E0020}-\x{E007E}]")
_FORMATS = compile_pattern(r"\p{Cf}+")
_LATIN_MARKS = compile_pattern(r"[\x00-\x{2ff}\x{370}-\x{3ff}\x{400}-\x{52f}\x{1e00}-\x{1fff}\x{2c60}-\x{2c7f}"
                               r"\x{a640}-\x{a69f}\x{a720}-\x{a7ff}][\p{Mn}\p{Me}]+")
"""A Latin, Greek, Cyrillic or common character and the combining marks NFKC could not compose into it."""
_LOOSE_MARKS = compile_pattern(r"[\x{300}-\x{36f}\x{1ab0}-\x{1aff}\x{1dc0}-\x{1dff}\x{20d0}-\x{20ff}\x{fe20}-\x{fe2f}"
                               r"\x{610}-\x{61a}\x{64b}-\x{65f}\x{670}\x{6d6}-\x{6dc}\x{6df}-\x{6e8}\x{6ea}-\x{6ed}"
                               r"\x{640}]+")
"""Combining marks no letter of the scanned scripts needs, wherever they stand, and
the Arabic vowel signs and tatweel."""
_SPACED = compile_pattern(r"(?:[\pL\pN][ .\-_*·•|/]){3,}[\pL\pN]")
"""Four or more letters or digits, each followed by one separator: a word spelled out."""


@functools.cache
def _fold_table() -> dict[int, str]:
    """Lookalikes to Latin, accented Latin and Greek letters to their base letter, Arabic
    alef forms to the bare alef: one character for one (built on first use)."""
    table: dict[int, str] = {}
    for cps in (range(0xC0, 0x2B0), range(0x370, 0x400), range(0x1E00, 0x2000)):
        for cp in cps:
            parts = unicodedata.normalize("NFKD", chr(cp))
            if len(parts) > 1 and all(unicodedata.category(ch).startswith("M") for ch in parts[1:]):
                table[cp] = parts[0].translate(CONFUSABLES)
    return {**table, **CONFUSABLES, **_ARABIC_FOLD}


@functools.cache
def _match_table() -> dict[int, str]:
    return {**_fold_table(), **_MATCH_FOLD}


def _cut(pattern: Any, text: str, keep_first: bool = False) -> str:
    """``text`` without the matches of ``pattern`` (RE2, linear); ``keep_first``: keep each
    match's first character."""
    pieces: list[str] = []
    pos = 0
    for match in pattern.finditer(text):
        start, end = match.span()
        pieces.append(text[pos:start + 1 if keep_first else start])
        pos = end
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def plain_text(text: str) -> str:
    """Steps 1 to 3 of the module docstring: NFKC, tag characters read, format
    characters and loose combining marks removed.

    Args:
        text: untrusted page text (any length; linear time).

    Returns:
        The text without hidden characters, in the scripts and accents it was
        written in; whitespace untouched.
    """
    if text.isascii():
        return text
    plain = unicodedata.normalize("NFKC", text)
    if _HAS_TAGS.search(plain):
        plain = plain.translate(_TAGS)
    plain = _cut(_FORMATS, plain)
    plain = _cut(_LATIN_MARKS, plain, keep_first=True)
    return _cut(_LOOSE_MARKS, plain)


def collapse_spaces(text: str) -> str:
    """Step 5: each run of whitespace one space, line breaks kept (``\r\n`` and ``\r`` read
    as ``\n``), no space at either end of a line."""
    return "\n".join(" ".join(line.split()) for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def readable(text: str) -> str:
    """:func:`plain_text` with whitespace collapsed, letters not folded: the text to
    quote to a human.

    Args:
        text: untrusted page text.

    Returns:
        The text as read, one space for each run of spaces, line breaks kept.
    """
    return collapse_spaces(plain_text(text))


def fold(text: str) -> str:
    """Step 4: lookalikes to Latin, accents off Latin and Greek letters, Arabic alef forms
    to the bare alef.

    Args:
        text: :func:`readable` text.

    Returns:
        A string as long as ``text``, character for character.
    """
    return text.translate(_fold_table())


def normalize(text: str) -> str:
    """One spelling for text that reads the same (see the module docstring).

    Args:
        text: untrusted page text.

    Returns:
        :func:`readable` text :func:`fold`-ed.
    """
    return fold(readable(text))


def match_form(text: str) -> str:
    """:func:`readable` text lower-cased and :func:`fold`-ed, typographic apostrophes,
    quotes and dashes as ASCII, the full-width colon as ``:``: what the scan's patterns match.

    Args:
        text: :func:`readable` text.

    Returns:
        A string as long as ``text`` (one character for each), so offsets carry over.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # only U+0130 lengthens; NFKC leaves it
        lowered = "".join(ch.lower()[0] for ch in text)
    return lowered.translate(_match_table())


def reversed_lines(text: str) -> str:
    """Each line of ``text`` written backwards (line order kept).

    Args:
        text: normalized text.

    Returns:
        The text as a right-to-left override of each line would display it.
    """
    return "\n".join(line[::-1] for line in text.split("\n"))


def spaced_runs(text: str) -> str:
    """The words ``text`` spells out letter by letter, each joined, in order.

    Four or more letters or digits, each followed by one separator (space, ``.``,
    ``-``, ``_``, ``*``, ``·``, ``•``, ``|``, ``/``), are one run: ``"i g n o r e  y o u r"``
    (two spaces between words) gives ``"ignore your"``; single spaces throughout give
    one run, ``"ignoreyour"``.

    Args:
        text: :func:`plain_text` output (whitespace not yet collapsed).

    Returns:
        The joined runs separated by spaces; ``""`` when there are none.
    """
    return " ".join(match.group()[::2] for match in _SPACED.finditer(text))
