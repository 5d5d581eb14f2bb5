"""The base of the payloads a ``deskpod serve`` question carries (:mod:`deskpod.service.messages`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from deskpod.protocol._base import STRICT

__all__ = ["Payload"]


class Payload(BaseModel):
    """What an outbound message carries about a question: its fields read as attributes, and
    also as ``payload["name"]``, ``payload.get("name")`` and ``"name" in payload``, kept for code
    written when these payloads were plain JSON objects (an approver reading
    ``notice.request["digest"]``)."""

    model_config = STRICT

    def __getitem__(self, name: str) -> Any:
        """The field ``name``.

        Raises:
            KeyError: the payload has no such field.
        """
        if name not in type(self).model_fields:
            raise KeyError(name)
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        """The field ``name``, or ``default`` when the payload has no such field."""
        return getattr(self, name) if name in type(self).model_fields else default

    def __contains__(self, name: object) -> bool:
        """Whether the payload has the field ``name``."""
        return name in type(self).model_fields
