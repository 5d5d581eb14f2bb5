"""Shared pieces of the wire models: the strict model config, common field types,
the validation-error formatters (public as :func:`deskpod.protocol.first_error` and
:func:`deskpod.protocol.error_summary`)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field, ValidationError

__all__ = ["MAX_NAMED_ERRORS", "RequestId", "STRICT", "Sha256", "StartUrl", "TabId", "error_summary", "first_error"]

STRICT = ConfigDict(extra="forbid", frozen=True)
"""The one strict model config of deskpod: every wire model, and every file or message model
(task, suite, policy, backend config) outside this package, uses it: unknown fields are
refused, instances are immutable."""

RequestId = Annotated[str, Field(min_length=1, max_length=128)]
"""A request's ``id`` (1..128 characters), echoed in its reply."""

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A SHA-256 digest: 64 lower-case hex digits."""

StartUrl = Annotated[str, Field(min_length=1, max_length=8192, pattern=r"^https?://")]
"""A page to open: http or https, at most 8192 characters."""

TabId = Annotated[str, Field(min_length=1, max_length=128)]
"""A tab's id as the daemon names it (1..128 characters): the same type where an action names a
tab and where a reply names one the controller may act on, so every tab a reply names is one an
action can name (a reply naming another is a bad reply, refused at the client's boundary)."""


_UNION_MEMBER_TAG = re.compile(r"^[a-z][a-z-]*\[.*\]$", re.DOTALL)
"""A union member's tag in a pydantic error location (``literal[...]``, ``list[...]``,
``function-after[...]``); field names and list indexes never match."""


MAX_NAMED_ERRORS = 5
"""Most errors :func:`error_summary` names; the rest are counted."""


def _error_lines(exc: ValidationError, empty: str) -> list[str]:
    """``"<dotted location>: <message>"`` for each location of ``exc`` that failed, in
    pydantic's order, once per location (a value that failed every member of a union is
    one location once the members' tags are left out)."""
    lines: list[str] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"] if not _UNION_MEMBER_TAG.match(str(p))) or empty
        if where not in seen:
            seen.add(where)
            lines.append(f"{where}: {err['msg']}")
    return lines


def first_error(exc: ValidationError, empty: str = "message") -> str:
    """The first error of a validation failure, for an error message.

    Args:
        exc: the failure.
        empty: what to name the location when the error has none (the whole input).

    Returns:
        ``"<dotted location>: <message>"``, e.g. ``"actions.0.x: Input should be a valid
        integer"``. The tags pydantic puts in a location for the member of a union it
        tried (``literal['a','b']``, ``list[str]``) are left out: they name no field.
    """
    return _error_lines(exc, empty)[0]


def error_summary(exc: ValidationError, empty: str = "message", limit: int = MAX_NAMED_ERRORS) -> str:
    """Every failed location of a validation failure, for a file a person edits: each
    as :func:`first_error` words it, at most ``limit`` of them, joined by ``"; "``, then
    ``" (and N more)"`` when there were more.

    Args:
        exc: the failure.
        empty: what to name the location when the error has none (the whole input).
        limit: most errors named (>= 1).
    """
    lines = _error_lines(exc, empty)
    more = f" (and {len(lines) - limit} more)" if len(lines) > limit else ""
    return "; ".join(lines[:limit]) + more
