"""The sandboxes ``deskpod serve`` owns: their tokens kept by the service, each session started clean.

An :class:`OwnedSandbox` is a named entry of ``DESKPOD_SERVE_SANDBOXES``
(:mod:`deskpod.settings.sandboxes`). The service keeps its control token in force in
the entry's token file and reads it there whenever it connects; before each session it
resets the sandbox in place (:func:`~deskpod.client.wire.reset_and_reconnect`: a new
random token, which it writes back to the file, mode 0600, as soon as the sandbox took
it), and, when the opener asked to continue from a snapshot, restores it. The operator's
own tools read the same file (``--token-file``). The opener never sees the token.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from deskpod.client import SandboxClient
from deskpod.client.wire import reset_and_reconnect
from deskpod.errors import SandboxError, UnauthorizedError
from deskpod.protocol import Observation
from deskpod.settings.sandboxes import SandboxEntry

__all__ = ["OwnedSandbox", "RESET_CONNECT_TIMEOUT_S"]

log = logging.getLogger(__name__)

RESET_CONNECT_TIMEOUT_S = 30.0
"""Seconds the service waits to reconnect to a sandbox it reset before a session."""

_MAX_TOKEN_FILE_BYTES = 4096


@dataclass
class OwnedSandbox:
    """A sandbox the service owns (``entry.name`` is set), with where its token comes from.

    Args:
        entry: its registry entry (``name``, ``url``, ``token_file``, ``token_env``).
        environ: the service's environment, read for ``entry.token_env``.
    """

    entry: SandboxEntry
    environ: Mapping[str, str]

    @property
    def name(self) -> str:
        """The name sessions open it by."""
        return self.entry.name or ""

    def _started_with(self) -> str | None:
        """The token the sandbox was started with (``token_env``), if the environment holds one."""
        token = self.environ.get(self.entry.token_env or "", "").strip()
        return token or None

    def _file_token(self) -> str | None:
        """The first line of the token file (``None``: no file, or an empty one)."""
        assert self.entry.token_file is not None
        try:
            with open(self.entry.token_file, "rb") as f:
                text = f.read(_MAX_TOKEN_FILE_BYTES).decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SandboxError(f"sandbox {self.name!r}: cannot read its token file: {exc.strerror}",
                               detail={"sandbox": self.name}) from exc
        lines = text.splitlines()
        return (lines[0].strip() or None) if lines else None

    def store(self, token: str) -> None:
        """Write ``token`` to the token file: mode 0600, under a temporary name renamed into place.

        Raises:
            SandboxError: the file cannot be written (the token the sandbox took is then lost
                to the operator's tools; the service's session still holds it).
        """
        path = self.entry.token_file
        assert path is not None
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(token + "\n")
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise SandboxError(f"sandbox {self.name!r}: cannot write its token file: {exc.strerror}",
                               detail={"sandbox": self.name}) from exc

    def seed(self) -> None:
        """Write the token the sandbox was started with to a missing token file (at the service's start).

        Raises:
            SandboxError: the file cannot be read or written.
        """
        started = self._started_with()
        if started is not None and self._file_token() is None:
            self.store(started)

    async def connect(self, timeout_s: float, offered: str | None = None) -> SandboxClient:
        """Connect with the token in force: the file's, else (missing, or refused: the sandbox
        was restarted, or reset by someone else) the one it was started with, else the one an
        opener of today's ``{url, token}`` form ``offered``; the one that worked goes to the file.

        Raises:
            UnauthorizedError: the sandbox refused every token tried.
            SandboxError: no token at all, or no connection within ``timeout_s``.
        """
        kept = self._file_token()
        tokens = [t for t in (kept, self._started_with(), offered) if t is not None]
        if not tokens:
            raise SandboxError(f"sandbox {self.name!r}: no token (its token file is missing and "
                               f"{self.entry.token_env or 'no token_env'} is not set)", detail={"sandbox": self.name})
        for token in dict.fromkeys(tokens):
            try:
                client = await SandboxClient.connect(self.entry.url, token, timeout_s=timeout_s)
            except UnauthorizedError:
                log.warning("sandbox %s refused a token (%s)", self.name, "kept" if token == kept else "fallback")
                continue
            if token != kept:
                self.store(token)
            return client
        raise UnauthorizedError(f"sandbox {self.name!r} refused the service's token (its token file holds "
                                "another sandbox's, or the sandbox was reset by someone else)",
                                detail={"sandbox": self.name})

    async def fresh(self, client: SandboxClient, archive: bytes | None) -> tuple[str, SandboxClient, Observation]:
        """Reset the sandbox in place (its token rotates and goes to the file), then restore
        ``archive`` (a snapshot) when given.

        Args:
            client: a connection with the token in force (closed once the reset succeeded).
            archive: a snapshot to continue from (``None``: the clean state).

        Returns:
            The new token, the connection made with it, and the observation of the state the
            session starts in.

        Raises:
            SandboxError: the reset or the reconnection failed.
            SnapshotError: the snapshot could not be restored.
        """
        token, observation, fresh = await reset_and_reconnect(client, None, connect_timeout_s=RESET_CONNECT_TIMEOUT_S,
                                                          on_rotated=self.store)
        if archive is not None:
            try:
                observation = await fresh.restore(archive)
            except BaseException:
                await fresh.close()
                raise
        return token, fresh, observation
