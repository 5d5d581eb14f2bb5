"""Text as a reader sees it, for the injection scan: one spelling for each look.

A page can hide an instruction from a pattern match without hiding it from a
reader (a model reading the page text or the screenshot): zero-width characters
inside a keyword, full-width letters, Cyrillic or Greek letters that look like
Latin ones, text stored backwards and shown forwards by a bidi override.
:func:`normalize` undoes those spellings before the scan:

1. NFKC (Unicode Standard Annex #15): full-width and mathematical letters,
   ligatures and compatibility spaces become their plain forms.
2. Format characters (general category ``Cf``: zero-width space and joiners,
   word joiner, soft hyphen, byte-order mark, the bidi embeddings, overrides and
   isolates) and combining marks (``Mn``, ``Me``) are removed, so ``ig\\u200bnore``
   and ``i\\u0307gnore`` read ``ignore``.
3. Letters that Unicode Technical Standard #39 (Unicode Security Mechanisms,
   section 4 "Confusable Detection", data file ``confusables.txt``) lists as
   confusable with a Latin letter are folded to it: the Cyrillic and Greek
   lookalikes and a few Latin-script ones (dotless i, script g). Only this
   subset of the table is carried: the scan's patterns are Latin and Chinese,
   and folding whole scripts would turn real Russian or Greek text into noise.
4. Runs of whitespace (any ``Zs``, tabs) collapse to one space; line breaks stay.

:func:`reversed_lines` gives each line backwards, for text stored in reverse and
displayed through a right-to-left override (``<bdo dir="rtl">``, U+202E): the
reader sees the reversed string, the DOM holds the other.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["CONFUSABLES", "normalize", "reversed_lines"]

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

_SPACES = re.compile(r"[^\S\n]+")
_DROPPED = frozenset({"Cf", "Mn", "Me"})


def normalize(text: str) -> str:
    """One spelling for text that reads the same (see the module docstring).

    Args:
        text: untrusted page text.

    Returns:
        The text after NFKC, without format characters and combining marks, with
        confusable letters folded to Latin and whitespace runs collapsed.
    """
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    kept = "".join(ch for ch in decomposed if unicodedata.category(ch) not in _DROPPED)
    folded = unicodedata.normalize("NFC", kept).translate(CONFUSABLES)
    return _SPACES.sub(" ", folded.replace("\r\n", "\n").replace("\r", "\n"))


def reversed_lines(text: str) -> str:
    """Each line of ``text`` written backwards (line order kept).

    Args:
        text: normalized text.

    Returns:
        The text as a right-to-left override of each line would display it.
    """
    return "\n".join(line[::-1] for line in text.split("\n"))
