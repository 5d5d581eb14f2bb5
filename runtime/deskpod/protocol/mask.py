"""Secrets the daemon masks: in every image it encodes and every text it returns.

A secret the controller typed (a credential, a host-held secret) is masked by Chromium
only while it sits in a ``type=password`` field. A page can show it otherwise: a
"Show password" toggle turns the field to ``type=text``, a script copies the value into
another field, a text node or a ``title`` tooltip. An ``act`` or ``navigate`` request
names the secrets to mask in its ``mask`` field (:data:`MaskSecrets`); the daemon adds
them to the session's mask set, which holds until the next ``reset``. From then on,
before it encodes any image (screenshots, zooms, live frames), the daemon paints an
opaque box over every place the page shows one of them from its DOM, and replaces each
in every text it returns by :func:`mask_string` (same length, ``*``). Each image says
how many boxes it got (:attr:`~deskpod.protocol.Screenshot.masked`).

The secrets are never logged nor sent back. The daemon already received each as the
text it typed, so naming it again adds no exposure.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

__all__ = ["MAX_MASK_SECRETS", "MAX_MASK_SECRET_CHARS", "MaskSecrets", "mask_string", "mask_values"]

MAX_MASK_SECRETS = 16
"""Most secrets one session masks (a request beyond it is refused: ``invalid_request``)."""

MAX_MASK_SECRET_CHARS = 1024
"""Longest secret masked, characters (the controller's longest typed secret)."""

MaskSecrets = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_MASK_SECRET_CHARS)]],
    Field(max_length=MAX_MASK_SECRETS),
]
"""The secrets a request asks the daemon to mask (see the module docstring)."""


def mask_string(secret: str) -> str:
    """What a secret is replaced by in a text: ``*`` as many times as it has characters
    (so every length cap that held before still holds)."""
    return "*" * len(secret)


def mask_values(value: Any, secrets: list[str]) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every occurrence of each
    of ``secrets`` in its strings replaced by :func:`mask_string`; keys and other values
    are left as they are. The longest secrets are replaced first."""
    if isinstance(value, str):
        for secret in sorted(secrets, key=len, reverse=True):
            if secret in value:
                value = value.replace(secret, mask_string(secret))
        return value
    if isinstance(value, dict):
        return {k: mask_values(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_values(v, secrets) for v in value]
    return value
