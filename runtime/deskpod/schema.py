"""JSON Schemas of both wires, for ``deskpod schema``.

The daemon wire (:mod:`deskpod.protocol`: websocket requests, replies, hello, the
error envelope, the snapshot endpoints' bodies) and the controller service wire
(``deskpod serve``, :mod:`deskpod.service.messages`: the inbound models of
:data:`~deskpod.service.messages.ClientMessage` and the outbound ones of
:data:`~deskpod.service.messages.ServiceMessage`). One schema per message model, made by pydantic
(``model_json_schema``, JSON Schema draft 2020-12, validation mode), plus an index
that also lists every constant of :mod:`deskpod.protocol.limits` (``limits``: the
caps the schemas cannot say, such as the byte caps of page text and of the
accessibility summary, and the message-size header).
The service's one HTTP endpoint besides its websocket (``GET /healthz``) is also
described as an OpenAPI document, ``service/openapi.json``, made by FastAPI from the
service's own app (written when FastAPI is installed: the ``serve`` extra).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel

from deskpod.protocol import (
    REPLY_TYPES,
    REQUEST_TYPES,
    ErrorBody,
    ErrorReply,
    Hello,
    RestoreQuery,
    Result,
    SnapshotManifest,
    SnapshotRestored,
)
from deskpod.protocol import limits
from deskpod.protocol.live import LiveEnd, LiveFrame, LivePointer, WatchRequest, Watching
from deskpod.service.messages import ClientMessage, ServiceHealth, ServiceMessage
from deskpod.service.server.app import create_app
from deskpod.service.server.service_state import ControllerService

__all__ = [
    "INDEX_NAME", "OPENAPI_FILE", "SCHEMA_FORMAT", "WireMessage", "index", "service_openapi", "wire_messages",
    "write_schemas",
]

SCHEMA_FORMAT = "deskpod-schema/1"
"""The ``format`` the index names."""

INDEX_NAME = "index.json"
"""File name of the index in the output folder."""

OPENAPI_FILE = "service/openapi.json"
"""Where the service's OpenAPI document goes, relative to the output folder."""

Direction = Literal["to_daemon", "from_daemon", "to_service", "from_service"]


@dataclass(frozen=True)
class WireMessage:
    """One message model of a wire: ``wire`` (``daemon`` or ``service``), ``name`` (the
    model's class name), ``direction`` (who receives it), ``file`` (its schema's path,
    relative to the output folder), ``model`` (the pydantic model)."""

    wire: Literal["daemon", "service"]
    name: str
    direction: Direction
    file: str
    model: type[BaseModel]


def _entry(wire: Literal["daemon", "service"], model: type[BaseModel], direction: Direction) -> WireMessage:
    return WireMessage(wire=wire, name=model.__name__, direction=direction, file=f"{wire}/{model.__name__}.json",
                       model=model)


def wire_messages() -> list[WireMessage]:
    """Every message model of both wires, in a stable order (no duplicates)."""
    daemon: list[tuple[type[BaseModel], Direction]] = [
        *((m, "to_daemon") for m in REQUEST_TYPES.values()),
        (RestoreQuery, "to_daemon"),
        (SnapshotManifest, "to_daemon"),
        (Hello, "from_daemon"),
        (Result, "from_daemon"),
        *((m, "from_daemon") for m in REPLY_TYPES.values()),
        (ErrorReply, "from_daemon"),
        (ErrorBody, "from_daemon"),
        (SnapshotRestored, "from_daemon"),
        # The live stream (/v1/live): its request, its start, a frame's header, the pointer, its end.
        (WatchRequest, "to_daemon"),
        (Watching, "from_daemon"),
        (LiveFrame, "from_daemon"),
        (LivePointer, "from_daemon"),
        (LiveEnd, "from_daemon"),
    ]
    inbound = get_args(get_args(ClientMessage)[0])
    service: list[tuple[type[BaseModel], Direction]] = [
        *((m, "to_service") for m in inbound),
        *((m, "from_service") for m in get_args(ServiceMessage)),
        (ServiceHealth, "from_service"),
    ]
    return [_entry("daemon", m, d) for m, d in daemon] + [_entry("service", m, d) for m, d in service]


def service_openapi() -> dict[str, Any] | None:
    """The OpenAPI document of the service's HTTP endpoints, from its FastAPI app.

    Returns:
        The document, or ``None`` when FastAPI is not installed.
    """
    try:
        app = create_app(ControllerService("0" * 64))
    except ImportError:
        return None
    document: dict[str, Any] = app.openapi()
    return document


def index(messages: list[WireMessage], openapi: str | None = None) -> dict[str, Any]:
    """The index of the schemas: ``{"format", "wires": {wire: [{name, direction, file}]},
    "openapi", "limits"}``; ``openapi`` is the service's OpenAPI file, ``None`` when not
    written; ``limits``: each constant of :mod:`deskpod.protocol.limits` by name."""
    wires: dict[str, list[dict[str, str]]] = {"daemon": [], "service": []}
    for m in messages:
        wires[m.wire].append({"name": m.name, "direction": m.direction, "file": m.file})
    caps = {name: getattr(limits, name) for name in limits.__all__}
    return {"format": SCHEMA_FORMAT, "wires": wires, "openapi": openapi, "limits": caps}


def write_schemas(out_dir: Path) -> dict[str, Any]:
    """Write one JSON Schema file per message model and :data:`INDEX_NAME` into ``out_dir``.

    Args:
        out_dir: the output folder (created, with its ``daemon/`` and ``service/``
            subfolders, if missing; files already there are overwritten).

    Returns:
        The index written.

    Raises:
        OSError: a file could not be written.
    """
    messages = wire_messages()
    for m in messages:
        path = out_dir / m.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(m.model.model_json_schema(), indent=2, sort_keys=True) + "\n")
    openapi = service_openapi()
    if openapi is not None:
        path = out_dir / OPENAPI_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(openapi, indent=2, sort_keys=True) + "\n")
    result = index(messages, OPENAPI_FILE if openapi is not None else None)
    (out_dir / INDEX_NAME).write_text(json.dumps(result, indent=2) + "\n")
    return result
