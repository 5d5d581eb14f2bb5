"""Helpers shared by the vendor adapters."""

from __future__ import annotations

from typing import Any

from deskpod.errors import InvalidActionError, UnknownActionError
from deskpod.protocol import Action, parse_action

__all__ = ["build", "point", "require", "unknown"]


def build(data: dict[str, Any]) -> Action:
    """Validate a protocol action built by an adapter (errors name the vendor field)."""
    return parse_action(data)


def require(source: dict[str, Any], key: str, vendor_action: str) -> Any:
    """Return ``source[key]`` or raise :class:`InvalidActionError` naming it."""
    if key not in source:
        raise InvalidActionError(f"{vendor_action}: missing {key!r}", detail={"action": vendor_action, "field": key})
    return source[key]


def point(value: Any, vendor_action: str, key: str = "coordinate") -> tuple[Any, Any]:
    """Read an ``[x, y]`` pair (Anthropic's ``coordinate``)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidActionError(
            f"{vendor_action}: {key!r} must be [x, y]", detail={"action": vendor_action, "field": key}
        )
    return value[0], value[1]


def unknown(vendor: str, name: Any, known: list[str]) -> UnknownActionError:
    """The error for an action a vendor format does not define (or deskpod does not support)."""
    shown = name if isinstance(name, str) else repr(name)[:64]
    return UnknownActionError(
        f"unknown {vendor} action {shown!r}; supported: {', '.join(known)}",
        detail={"action": shown, "vendor": vendor},
    )
