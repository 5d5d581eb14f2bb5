"""Parsing and encoding of the daemon wire's JSON frames (size caps, surrogate checks)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from deskpod.errors import (
    BadReplyError,
    InvalidActionError,
    InvalidRequestError,
    MessageTooLargeError,
    UnknownActionError,
    printable,
)
from deskpod.protocol._base import error_summary, first_error
from deskpod.protocol.actions import parse_action
from deskpod.protocol.limits import MAX_ACTIONS_PER_REQUEST, MAX_MESSAGE_BYTES, MAX_SERVER_MESSAGE_BYTES
from deskpod.protocol.replies import ErrorReply, Hello, Result
from deskpod.protocol.requests import REQUEST_TYPES, AnyRequest

__all__ = [
    "encode_message",
    "error_summary",
    "find_lone_surrogate",
    "first_error",
    "parse_request",
    "parse_server_message",
    "request_id",
    "scrub_json",
    "scrub_surrogates",
]

_SERVER_MESSAGE: TypeAdapter[Any] = TypeAdapter(
    Annotated[Hello | Result | ErrorReply, Field(discriminator="type")]
)

_SURROGATE = re.compile("[\ud800-\udfff]")


def find_lone_surrogate(data: Any, where: str = "message") -> str | None:
    """Where decoded JSON holds a lone UTF-16 surrogate, or ``None``.

    JSON text may escape one (``"\\ud800"``); Python decodes it into a ``str`` that
    cannot be encoded as UTF-8, so echoing it, logging it or passing it on fails.
    A well-formed pair (``"\\ud83d\\ude00"``) decodes to one character and is fine.

    Args:
        data: what :func:`json.loads` returned (dicts, lists, strings, numbers...).
        where: the name of ``data`` in the answer.

    Returns:
        The dotted path of the first string (a value or a key) holding one, e.g.
        ``"message.actions.0.text"``, or ``None`` when there is none.
    """
    stack: list[tuple[str, Any]] = [(where, data)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path
        elif isinstance(item, dict):
            for key, value in item.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return f"{path} (a key)"
                stack.append((f"{path}.{key}", value))
        elif isinstance(item, list):
            stack.extend((f"{path}.{i}", value) for i, value in enumerate(item))
    return None


def scrub_surrogates(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate replaced by U+FFFD (a string that
    always encodes as UTF-8)."""
    return _SURROGATE.sub("\ufffd", text)


def scrub_json(data: Any) -> Any:
    """Decoded JSON with :func:`scrub_surrogates` applied to every string, keys included
    (returned unchanged, not copied, when it holds no lone surrogate)."""
    if find_lone_surrogate(data) is None:
        return data
    return _scrubbed(data)


def _scrubbed(data: Any) -> Any:
    if isinstance(data, str):
        return scrub_surrogates(data)
    if isinstance(data, dict):
        return {_scrubbed(k): _scrubbed(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_scrubbed(v) for v in data]
    return data


def encode_message(message: BaseModel) -> str:
    """Serialize a message for the wire; never fails on its strings.

    A string that cannot be encoded as UTF-8 (a lone surrogate that came from a page
    through CDP, or a file name's undecodable bytes that Python keeps as surrogates)
    is sent with U+FFFD in place of each lone surrogate.

    Returns:
        The JSON text (UTF-8 encodable).
    """
    try:
        return message.model_dump_json()
    except PydanticSerializationError:
        return json.dumps(_scrubbed(message.model_dump(mode="json")), ensure_ascii=False, separators=(",", ":"))


def _safe_id(rid: Any) -> str | None:
    """A request id that can be echoed: a string, cut to 128 characters, lone surrogates
    replaced by U+FFFD; ``None`` when it is not a string."""
    return scrub_surrogates(rid[:128]) if isinstance(rid, str) else None


def _loads(raw: str | bytes, limit: int = MAX_MESSAGE_BYTES) -> Any:
    size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
    if size > limit:
        raise MessageTooLargeError(
            f"message of {size} bytes exceeds the {limit}-byte limit",
            detail={"bytes": size, "limit": limit},
        )
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"message is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequestError("message is nested too deeply") from exc



def request_id(raw: str | bytes) -> str | None:
    """The ``id`` of a client message, safe to echo (cut to 128 characters, lone
    surrogates replaced by U+FFFD), or ``None`` when it cannot be read (too large, not
    JSON, not an object, or an id that is not a string)."""
    try:
        data = _loads(raw)
    except (MessageTooLargeError, InvalidRequestError):
        return None
    return _safe_id(data.get("id")) if isinstance(data, dict) else None


def parse_request(raw: str | bytes) -> AnyRequest:
    """Decode and validate one client message.

    Args:
        raw: the websocket frame's payload.

    Returns:
        The typed request.

    Raises:
        MessageTooLargeError: ``raw`` exceeds :data:`MAX_MESSAGE_BYTES`.
        InvalidRequestError: not JSON, not an object, a lone UTF-16 surrogate in any
            string (``detail["where"]`` says where), unknown request ``type``, or bad
            request fields. ``detail["id"]`` carries the id when readable, safe to
            echo (lone surrogates replaced by U+FFFD).
        UnknownActionError, InvalidActionError: an action is bad
            (``detail["action_index"]`` says which).
    """
    data = _loads(raw)
    if not isinstance(data, dict):
        raise InvalidRequestError("message must be a JSON object")
    rid = _safe_id(data.get("id"))
    id_detail = {"id": rid} if rid is not None else {}
    where = find_lone_surrogate(data)
    if where is not None:
        raise InvalidRequestError(
            f"{scrub_surrogates(where)[:200]}: a lone UTF-16 surrogate is not text",
            detail={**id_detail, "where": scrub_surrogates(where)[:200]},
        )
    kind = data.get("type")
    if kind not in REQUEST_TYPES:
        raise InvalidRequestError(
            f"unknown request type {kind!r}; known: {', '.join(sorted(REQUEST_TYPES))}", detail=id_detail
        )
    if kind == "act":
        actions = data.get("actions")
        if not isinstance(actions, list):
            raise InvalidRequestError("act: 'actions' must be a list", detail=id_detail)
        if len(actions) > MAX_ACTIONS_PER_REQUEST:
            raise InvalidRequestError(
                f"act: {len(actions)} actions exceed the limit of {MAX_ACTIONS_PER_REQUEST}", detail=id_detail
            )
        for i, item in enumerate(actions):
            try:
                parse_action(item, i)
            except (UnknownActionError, InvalidActionError) as exc:
                exc.detail.update(id_detail)
                raise
    model = REQUEST_TYPES[kind]
    try:
        return model.model_validate(data)  # type: ignore[return-value]
    except ValidationError as exc:
        raise InvalidRequestError(f"{kind}: {first_error(exc)}", detail=id_detail) from exc


def parse_server_message(raw: str | bytes) -> Hello | Result | ErrorReply:
    """Decode one daemon message (client side). The sandbox is untrusted: the message
    must fit every cap of the reply models.

    Raises:
        BadReplyError: the message is over :data:`MAX_SERVER_MESSAGE_BYTES`, not JSON,
            holds a lone UTF-16 surrogate, or is not a valid :class:`Hello`,
            :class:`Result` or :class:`ErrorReply` (``detail["reason"]`` says which).
    """
    try:
        data = _loads(raw, MAX_SERVER_MESSAGE_BYTES)
    except (MessageTooLargeError, InvalidRequestError) as exc:
        raise BadReplyError(f"bad message from the sandbox: {exc.message}"[:500],
                            detail={"reason": "too_large" if isinstance(exc, MessageTooLargeError) else "not_json"}
                            ) from exc
    where = find_lone_surrogate(data)
    if where is not None:
        raise BadReplyError(f"bad message from the sandbox: a lone UTF-16 surrogate in {printable(where)}"[:500],
                            detail={"reason": "surrogate"})
    try:
        return _SERVER_MESSAGE.validate_python(data)
    except ValidationError as exc:
        raise BadReplyError(f"bad message from the sandbox: {printable(first_error(exc))}"[:500],
                            detail={"reason": "invalid"}) from exc
