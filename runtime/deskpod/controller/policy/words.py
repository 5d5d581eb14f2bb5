"""Matching words of a policy's lists in the texts it judges, and spotting card numbers.

Pure functions of text: the risk rules (:mod:`.risk`, :mod:`.native_risk`) decide what a
matched word means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["looks_like_card_number", "matching_word", "word_pattern"]


def word_pattern(words: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern matching any of ``words`` in lower-cased text (``None``: no words): a Latin
    word as a whole word (a space in it matches any run of white space), a word of another
    script anywhere (CJK text has no spaces between words)."""
    parts = []
    for word in words:
        escaped = re.escape(word.strip().lower()).replace(r"\ ", r"\s+")
        if not escaped:
            continue
        parts.append(rf"(?<![a-z0-9]){escaped}(?![a-z0-9])" if word.isascii() else escaped)
    return re.compile("|".join(parts)) if parts else None


def matching_word(text: str, pattern: re.Pattern[str] | None) -> str | None:
    """The first word of ``pattern`` (:func:`word_pattern`) found in ``text``, as found
    (lower case), or ``None``."""
    if pattern is None or not text:
        return None
    found = pattern.search(text.lower())
    return found.group(0) if found else None


def looks_like_card_number(text: str) -> bool:
    """True when ``text`` holds 13 to 19 digits (spaces or dashes between) that pass
    the Luhn check, as payment card numbers do."""
    for candidate in re.findall(r"(?:\d[ -]?){12,18}\d", text):
        digits = [int(c) for c in candidate if c.isdigit()]
        total = 0
        for index, digit in enumerate(reversed(digits)):
            if index % 2 == 1:
                digit *= 2
                if digit > 9:
                    digit -= 9
            total += digit
        if total % 10 == 0:
            return True
    return False
