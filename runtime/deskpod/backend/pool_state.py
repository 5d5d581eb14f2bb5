"""The host state file of a pool, for the ``deskpod pool`` and ``deskpod reset`` commands.

Each command is its own process, so a pool's members, their tokens and the
backend configuration it was made with live in a JSON file on the host:
``STATE_DIR/pools/NAME.json``, mode 0600, in a folder of mode 0700, written to a
temporary file and renamed into place, and changed only under an exclusive lock
(``NAME.lock``, ``flock``). Tokens are never printed and never put on a command
line: a leased sandbox's token is written to ``STATE_DIR/tokens/ID.token`` (mode
0600) for ``deskpod run --token-file``, and removed at release (the reset rotated
it anyway; a release refused because its lease was lost leaves it to the sandbox's
next holder: :meth:`PoolStateFile.release`). Beside it, ``STATE_DIR/tokens/ID.egress`` (mode 0600, JSON ``{"url", "token"}``)
names the slot's egress proxy control endpoint and the lease's lessee token (it sets the run's
allowlist only, and the next reset replaces it: :mod:`deskpod.backend.egress_lessee`):
``deskpod run --token-file ID.token`` finds it there and gives the slot's proxy the run's allowlist.

``STATE_DIR``: ``$DESKPOD_STATE_DIR`` (or ``state_dir`` in the configuration file), else ``$XDG_STATE_HOME/deskpod``, else
``~/.local/state/deskpod``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deskpod.backend.base import SandboxHandle
from deskpod.backend.egress_lessee import lessee_control
from deskpod.backend.config import DockerBackendConfig
from deskpod.backend.lease import renew_lease
from deskpod.backend.pool import MemberState, PoolMember, ResetMode, ResetReport, SandboxPool
from deskpod.errors import BackendError
from deskpod.settings import get_settings, load_settings

__all__ = ["MemberRecord", "POOL_NAME_PATTERN", "PoolRecord", "PoolStateFile", "state_dir"]

POOL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
"""What a pool name must match (it becomes a file name and a label value)."""


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The folder of deskpod's host state (see the module docstring).

    Args:
        environ: the environment to read, never with a configuration file; ``None``:
            the process's settings (:func:`deskpod.settings.get_settings`) and ``os.environ``.

    Raises:
        SettingsError: a ``DESKPOD_*`` variable does not parse.
    """
    env = os.environ if environ is None else environ
    settings = get_settings() if environ is None else load_settings(environ, config_file=None)
    if settings.state_dir is not None:
        return settings.state_dir
    base = Path(env["XDG_STATE_HOME"]) if env.get("XDG_STATE_HOME") else Path.home() / ".local" / "state"
    return base / "deskpod"


class MemberRecord(BaseModel):
    """One pool member as stored: its handle's fields (tokens included; a file written before
    slots had an egress control token has ``""``: the endpoint is off), state, reset count,
    why it was last replaced (``None``: never replaced after a failure) and its lease (id and
    expiry in epoch seconds; a file written before leases expired has none, so a member it
    holds as leased is expired: :mod:`deskpod.backend.lease`)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    container: str
    network: str
    egress: str
    address: str
    token: str
    pool: str
    state: MemberState
    resets: int = 0
    replaced: str | None = None
    egress_address: str = ""
    egress_token: str = ""
    egress_lessee: str = ""
    lease: str = ""
    lease_expires: float = 0.0


class PoolRecord(BaseModel):
    """A pool as stored in its state file.

    Attributes:
        version: the file format, 1.
        name: the pool's name.
        size: how many sandboxes it holds.
        reset_mode: the default reset of ``release``.
        start_url: the page a reset opens (``None``: the sandbox's start page).
        snapshot: name of the snapshot (in the :class:`~deskpod.client.snapshot_store.SnapshotStore`
            at ``STATE_DIR/snapshots``) that ``restore`` resets bring back.
        backend: the backend configuration the pool's sandboxes were made with.
        members: the sandboxes.
    """

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    name: str = Field(pattern=POOL_NAME_PATTERN)
    size: int = Field(ge=1)
    reset_mode: ResetMode = "in_place"
    start_url: str | None = None
    snapshot: str | None = None
    backend: DockerBackendConfig
    members: list[MemberRecord] = Field(default_factory=list)

    def to_members(self) -> list[PoolMember]:
        """The members as :class:`PoolMember` objects."""
        return [
            PoolMember(SandboxHandle(id=m.id, container=m.container, network=m.network, egress=m.egress,
                                     address=m.address, token=m.token, pool=m.pool, egress_address=m.egress_address,
                                     egress_token=m.egress_token, egress_lessee=m.egress_lessee),
                       m.state, m.resets,
                       m.replaced, m.lease, m.lease_expires)
            for m in self.members
        ]

    def update_from(self, pool: SandboxPool) -> None:
        """Take the pool's current members (after a command changed them)."""
        self.members = [
            MemberRecord(id=m.handle.id, container=m.handle.container, network=m.handle.network,
                         egress=m.handle.egress, address=m.handle.address, token=m.handle.token,
                         pool=m.handle.pool, state=m.state, resets=m.resets, replaced=m.replaced,
                         egress_address=m.handle.egress_address, egress_token=m.handle.egress_token,
                         egress_lessee=m.handle.egress_lessee, lease=m.lease, lease_expires=m.lease_expires)
            for m in pool.members
        ]


class PoolStateFile:
    """The state file of one pool, its lock and its lessees' token files.

    Args:
        name: the pool's name (:data:`POOL_NAME_PATTERN`).
        directory: the state folder; ``None``: :func:`state_dir`.

    Raises:
        BackendError: a bad pool name (``reason`` ``"config"``).
    """

    def __init__(self, name: str, directory: Path | None = None) -> None:
        if not re.fullmatch(POOL_NAME_PATTERN, name):
            raise BackendError(f"bad pool name {name[:40]!r}: 1-32 of a-z 0-9 _ -, starting with a letter or digit",
                               detail={"reason": "config"})
        self.name = name
        self.directory = directory or state_dir()
        self.path = self.directory / "pools" / f"{name}.json"
        self.tokens = self.directory / "tokens"

    def _mkdirs(self) -> None:
        for d in (self.directory, self.path.parent, self.tokens):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the pool's exclusive lock (other ``deskpod pool`` commands wait)."""
        self._mkdirs()
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def load(self) -> PoolRecord | None:
        """The stored pool, or ``None`` when there is none.

        Raises:
            BackendError: the file does not parse (``reason`` ``"state"``).
        """
        try:
            return PoolRecord.model_validate_json(self.path.read_bytes())
        except FileNotFoundError:
            return None
        except ValidationError as exc:
            raise BackendError(f"pool state file {self.path} is malformed: {exc}"[:500],
                               detail={"reason": "state"}) from exc

    def _write(self, path: Path, data: bytes) -> None:
        self._mkdirs()
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def save(self, record: PoolRecord) -> None:
        """Write the pool's state (mode 0600, atomically)."""
        self._write(self.path, record.model_dump_json(indent=2).encode())

    def delete(self) -> None:
        """Remove the state file and its lock file."""
        self.path.unlink(missing_ok=True)
        self.path.with_suffix(".lock").unlink(missing_ok=True)

    def renew(self, sandbox_id: str, lease: str, lease_s: float) -> float:
        """Renew a lease in the state file, under the lock: how a holder in its own process
        (``deskpod pool acquire --hold``, ``deskpod mcp --pool``) keeps its sandbox (see
        :mod:`deskpod.backend.lease`; a Docker sandbox needs nothing renewed on the engine).

        Args:
            sandbox_id: the leased sandbox.
            lease: the lease's id, as ``acquire`` gave it.
            lease_s: the lease's length from now, seconds.

        Returns:
            The new expiry, epoch seconds.

        Raises:
            BackendError: the pool or the sandbox is gone or the lease was lost (``reason``
                ``"lease_lost"``), or the state file does not parse (``"state"``).
        """
        with self.lock():
            record = self.load()
            member = next((m for m in record.members if m.id == sandbox_id), None) if record else None
            if record is None or member is None:
                raise BackendError(f"sandbox {sandbox_id} is no longer in pool {self.name!r}",
                                   detail={"reason": "lease_lost"})
            expires = renew_lease(member, sandbox_id, lease, lease_s, time.time())
            self.save(record)
        return expires

    async def release(self, pool: SandboxPool, sandbox_id: str, lease: str, *,
                      mode: ResetMode | None = None) -> ResetReport:
        """Release the lease ``lease`` of a pool loaded from this file
        (:meth:`SandboxPool.release`) and remove its token and egress control files.

        A release refused because the lease was lost (``reason`` ``"lease_lost"``) changes
        nothing, those files included: they are the sandbox's next holder's now. Any other
        failure removes them (the sandbox was reset or has left the pool).

        Args:
            pool: the pool, as loaded from this file (under its lock).
            sandbox_id: the leased sandbox.
            lease: the lease's id, as ``acquire`` gave it.
            mode: how to reset; ``None``: the pool's reset mode.

        Returns:
            What the reset did.

        Raises:
            BackendError: as :meth:`SandboxPool.release`.
        """
        try:
            report = await pool.release(sandbox_id, lease, mode=mode)
        except BackendError as exc:
            if exc.detail.get("reason") != "lease_lost":
                self.remove_token(sandbox_id)
            raise
        self.remove_token(sandbox_id)
        return report

    def token_path(self, sandbox_id: str) -> Path:
        """Where a leased sandbox's token file lives."""
        return self.tokens / f"{sandbox_id}.token"

    def write_token(self, sandbox_id: str, token: str) -> Path:
        """Write a lessee's token file (mode 0600) and return its path."""
        path = self.token_path(sandbox_id)
        self._write(path, token.encode())
        return path

    def egress_path(self, sandbox_id: str) -> Path:
        """Where a leased sandbox's egress control file lives (beside its token file)."""
        return self.tokens / f"{sandbox_id}.egress"

    def write_egress_control(self, handle: SandboxHandle) -> Path | None:
        """Write a lessee's egress control file (mode 0600: the slot's proxy control URL and
        lessee token, :func:`~deskpod.backend.egress_lessee.lessee_control`) and return its
        path; ``None`` (and no file) when the slot has none."""
        path = self.egress_path(handle.id)
        document = lessee_control(handle)
        if document is None:
            path.unlink(missing_ok=True)
            return None
        self._write(path, json.dumps(document).encode())
        return path

    def remove_token(self, sandbox_id: str) -> None:
        """Remove a lessee's token file and egress control file, if any."""
        self.token_path(sandbox_id).unlink(missing_ok=True)
        self.egress_path(sandbox_id).unlink(missing_ok=True)
