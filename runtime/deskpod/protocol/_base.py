"""Shared pieces of the wire models: the strict model config, common field types,
the validation-error formatter (public as :func:`deskpod.protocol.first_error`)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field, ValidationError

__all__ = ["RequestId", "STRICT", "Sha256", "StartUrl", "first_error"]

STRICT = ConfigDict(extra="forbid", frozen=True)
"""Every wire model: unknown fields are refused, instances are immutable."""

RequestId = Annotated[str, Field(min_length=1, max_length=128)]
"""A request's ``id`` (1..128 characters), echoed in its reply."""

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A SHA-256 digest: 64 lower-case hex digits."""

StartUrl = Annotated[str, Field(min_length=1, max_length=8192, pattern=r"^https?://")]
"""A page to open: http or https, at most 8192 characters."""


_UNION_MEMBER_TAG = re.compile(r"^[a-z][a-z-]*\[.*\]$", re.DOTALL)
"""A union member's tag in a pydantic error location (``literal[...]``, ``list[...]``,
``function-after[...]``); field names and list indexes never match."""


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
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"] if not _UNION_MEMBER_TAG.match(str(p))) or empty
    return f"{where}: {err['msg']}"

