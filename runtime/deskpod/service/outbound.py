"""A client's messages to ``deskpod serve``, each validated before it is sent as the service
will validate it (:mod:`deskpod.service.messages`): a bad one is the caller's typed error,
and nothing goes out."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from deskpod.errors import InvalidRequestError

__all__ = ["build_message"]

M = TypeVar("M", bound=BaseModel)


def build_message(model: type[M], **fields: Any) -> M:
    """The message ``model`` of ``fields`` (a model among them is taken as its JSON).

    Raises:
        InvalidRequestError: ``fields`` do not validate as ``model``; the message names the
            first field that does not, and why.
    """
    try:
        return model.model_validate({k: (v.model_dump(mode="json") if isinstance(v, BaseModel) else v)
                                     for k, v in fields.items()})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in error["loc"]) or model.__name__
        raise InvalidRequestError(f"{where}: {error['msg']}") from exc
