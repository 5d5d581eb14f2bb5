"""Regular expressions that tasks, suites, policies and agents supply, matched in linear time.

A pattern from outside (a task's ``success.url_matches``, a ``wait_for`` action's
``url_matches``, an exec policy's ``re:`` rule) is searched in text a page or an agent
controls. Python's :mod:`re` backtracks: ``(a+)+$`` against 30 ``a`` and a ``b`` takes
minutes, on whichever event loop matches it. These patterns are compiled with RE2
(``google-re2``, https://github.com/google/re2/wiki/Syntax), whose matching time is
linear in the text, so no pattern can stall the daemon, the controller or the service.

RE2 refuses what needs backtracking: lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``),
backreferences (``\\1``), possessive quantifiers and atomic groups. Such a pattern is
refused when its message is validated, with :class:`~deskpod.errors.PatternError` naming the
construct, never at match time.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

from deskpod.errors import PatternError

__all__ = ["MATCHES_NOTHING", "MAX_PATTERN_MEMORY_BYTES", "compile_pattern", "pattern_search"]

MAX_PATTERN_MEMORY_BYTES = 8 * 1_048_576
"""Most memory one compiled pattern may take (RE2's ``max_mem``), bytes: a pattern
needing more is refused (:class:`~deskpod.errors.PatternError`)."""

MATCHES_NOTHING = r"\b\B"
"""A pattern that matches no text (a word boundary that is not one; RE2 has no lookahead)."""


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str, max_mem: int = MAX_PATTERN_MEMORY_BYTES) -> Any:
    """``pattern`` compiled by RE2 (cached: the same task's pattern is matched again and again).

    Args:
        pattern: RE2 syntax.
        max_mem: RE2's memory budget for it, bytes (a pattern needing more is refused).

    Returns:
        The compiled pattern (``re2._Regexp``: ``search(text)`` returns a match or ``None``).

    Raises:
        PatternError: RE2 refuses it; the message names the construct.
    """
    options = re2.Options()
    options.log_errors = False
    options.max_mem = max_mem
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"not a regular expression RE2 accepts ({reason}); lookaround and "
                           "backreferences are not supported") from None


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (RE2 syntax) matches anywhere in ``text``, in time linear in ``text``.

    Raises:
        PatternError: RE2 refuses the pattern.
    """
    return compile_pattern(pattern).search(text) is not None
