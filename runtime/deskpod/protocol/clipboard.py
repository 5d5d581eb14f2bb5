"""The clipboard actions: read and write the desktop's clipboard (the X ``CLIPBOARD`` selection).

A user's copy (Ctrl+C, a page's copy button) puts text on the X ``CLIPBOARD``
selection, and a paste (Ctrl+V) reads it from there
(https://specifications.freedesktop.org/clipboard-spec/latest/, ICCCM section 2).
``clipboard_read`` reports that text in the observation's ``clipboard``;
``clipboard_write`` makes the daemon the selection's owner with the given text, so the
next paste in the browser pastes it. A reset starts a new X server, which has no
selection: the clipboard is then empty.

With the desktop profile the agent's programs (the desktop applications, a ``display: true``
command) share a clipboard among themselves, never with the browser, and these two actions
are the only way across: ``clipboard_read`` reads an application's copy when one owns the
selection, and ``clipboard_write`` with an agent's window focused puts the text on the
applications' side, so their next paste pastes it (:mod:`deskpod.agentd.clipboard_bridge`).

What a page copied may be a secret (a password manager's copy button, a one-time
code): the controller judges a read ``L2`` unless the task allows reading, and the
text comes back masked and scrubbed like every other text of an observation.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT

__all__ = ["ClipboardRead", "ClipboardWrite", "MAX_CLIPBOARD_CHARS"]

MAX_CLIPBOARD_CHARS = 16_384
"""Longest clipboard text an action writes or an observation reports (characters;
a longer clipboard is reported cut to this length)."""


class ClipboardRead(BaseModel):
    """An action: read the clipboard's text (UTF-8) into the observation's ``clipboard``
    (``""``: the clipboard is empty or holds no text). A clipboard held by a window that
    does not answer within two seconds fails with ``execution_failed``
    (``detail["reason"] == "clipboard_unreadable"``)."""

    model_config = STRICT
    type: Literal["clipboard_read"]


class ClipboardWrite(BaseModel):
    """An action: put ``text`` on the clipboard (as a user's copy does), for the next paste."""

    model_config = STRICT
    type: Literal["clipboard_write"]
    text: Annotated[str, Field(max_length=MAX_CLIPBOARD_CHARS, pattern=r"^[^\x00]*$")]
