"""The audit log's signing key: Ed25519, held by the controller, its public half exportable.

A hash chain shows that no line was changed, inserted or removed *before* the last
one; it cannot show that the last line is the run's last line, and anyone who can
write the file can recompute the whole chain. So the controller signs the end: the
log's final ``run_finished`` record carries a ``seal``, the Ed25519 signature
(RFC 8032, through the ``cryptography`` package) of that record's own line without
the seal, and that line holds ``prev``, the SHA-256 of the line before it. The
signature therefore covers every line of the log. Only the holder of the private key
can seal a log; a reviewer, an exported report or an eval runner checks it with the
public key alone (:func:`deskpod.controller.audit_log.verify_log`).

What is signed is :data:`SEAL_CONTEXT`, then the :class:`SealBinding` (the run id and the
log's file name, as one JSON line), then the line: a seal holds only for the file name
and run it was made for, so a whole log copied under another run's name fails. A seal
made before seals named their run (``deskpod audit log seal v1``: the context
:data:`SEAL_CONTEXT_V1` and the line alone, no ``v`` member) still verifies; its log's
file name must then be ``<run_id>.jsonl``, as every controller has named its logs
(:func:`~deskpod.controller.audit_log.verify_log`).

The private key is a PEM (PKCS #8) file of mode 0600 in a folder of mode 0700,
created on first use: ``$DESKPOD_AUDIT_KEY``, else ``STATE_DIR/audit/signing.key``
(``STATE_DIR`` as for the pools: :func:`deskpod.backend.pool_state.state_dir`). A mounted
secret works too (the file is only read). The public key is written beside it as
``signing.pub`` (PEM SubjectPublicKeyInfo) when the folder is writable, and
``deskpod audit-key`` prints it. A key is named by its *key id*: the first 16 bytes
(32 hex digits) of the SHA-256 of its 32 raw public bytes.

A verifier trusts only a key the operator pinned (:func:`pinned_public_key`,
``--public-key FILE``), never one it finds on disk beside the logs: whoever can
rewrite a log in that folder can put a key of their own there too, and seal the
forgery with it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from deskpod.errors import AuditKeyError

__all__ = [
    "AuditPublicKey", "AuditSigner", "SEAL_ALGORITHM", "SEAL_CONTEXT", "SEAL_CONTEXT_V1", "SEAL_VERSION", "SealBinding",
    "default_key_path", "pinned_public_key", "public_key_path",
]

log = logging.getLogger(__name__)

SEAL_CONTEXT = b"deskpod audit log seal v2\n"
"""Prefixed to the :class:`SealBinding` and the line before they are signed, so that a seal
cannot be taken for a signature over anything else made with the same key."""

SEAL_VERSION = 2
"""The ``v`` of every seal made now (:data:`SEAL_CONTEXT`)."""

SEAL_CONTEXT_V1 = b"deskpod audit log seal v1\n"
"""The context of a seal without ``v`` (made before seals named their run): it was
prefixed to the line alone."""

SEAL_ALGORITHM = "ed25519"
"""The ``alg`` of every seal."""

_MAX_KEY_FILE_BYTES = 16_384


@dataclass(frozen=True)
class SealBinding:
    """What a seal covers besides its line: the run and the file the log was written as.

    Args:
        run_id: the ``run_id`` of the log's records.
        log_name: the log's file name (``<run_id>.jsonl``), without its folder: a log may
            move to another folder, not to another name.
    """

    run_id: str
    log_name: str

    def signed(self, line: bytes) -> bytes:
        """The bytes a seal of ``line`` signs: :data:`SEAL_CONTEXT`, this binding as a JSON
        line (``{"run_id", "log"}``, so that no name can pass for another), then ``line``."""
        binding = json.dumps({"run_id": self.run_id, "log": self.log_name}, ensure_ascii=False, separators=(",", ":"))
        return SEAL_CONTEXT + binding.encode("utf-8") + b"\n" + line


def default_key_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the controller's private signing key is: ``DESKPOD_AUDIT_KEY``, else
    ``STATE_DIR/audit/signing.key``.

    Args:
        environ: the environment to read, never with a configuration file; ``None``: the
            process's settings (:func:`deskpod.settings.get_settings`).

    Raises:
        SettingsError: a ``DESKPOD_*`` variable does not parse.
    """
    from deskpod.backend.pool_state import state_dir
    from deskpod.settings import get_settings, load_settings

    settings = get_settings() if environ is None else load_settings(environ, config_file=None)
    if settings.audit_key is not None:
        return settings.audit_key
    return state_dir(environ) / "audit" / "signing.key"


def pinned_public_key(environ: Mapping[str, str] | None = None) -> AuditPublicKey | None:
    """The public key the operator pinned for checking seals: ``DESKPOD_AUDIT_PUBLIC_KEY``
    (a PEM public key, or a private key file whose public half is taken); ``None`` when
    it is not set. Never a key found beside the logs or the private key.

    Args:
        environ: the environment to read, never with a configuration file; ``None``: the
            process's settings (:func:`deskpod.settings.get_settings`).

    Raises:
        AuditKeyError: the file cannot be read, or is not an Ed25519 key.
        SettingsError: a ``DESKPOD_*`` variable does not parse.
    """
    from deskpod.settings import get_settings, load_settings

    settings = get_settings() if environ is None else load_settings(environ, config_file=None)
    return AuditPublicKey.load(settings.audit_public_key) if settings.audit_public_key is not None else None


def public_key_path(private_path: str | Path) -> Path:
    """The public key file written beside a private key file (``signing.key`` → ``signing.pub``)."""
    path = Path(private_path)
    return path.with_name(f"{path.stem}.pub")


def _read(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise AuditKeyError(f"cannot read the {what} {path}: {exc.strerror or exc}", detail={"path": str(path)}) from exc
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise AuditKeyError(f"the {what} {path} is too large to be a key", detail={"path": str(path)})
    return data


def _write_new(path: Path, data: bytes, mode: int) -> bool:
    """Write ``data`` to ``path`` unless it exists, atomically (a reader never sees half a
    key); return whether this call created it."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


class AuditPublicKey:
    """An Ed25519 public key that checks seals.

    Args:
        key: the key.
    """

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._key = key
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = hashlib.sha256(raw).hexdigest()[:32]
        """32 hex digits naming the key (see the module docstring)."""

    @classmethod
    def from_pem(cls, data: bytes, where: str = "the public key") -> AuditPublicKey:
        """Parse a PEM SubjectPublicKeyInfo (what :meth:`pem` writes).

        Raises:
            AuditKeyError: it is not PEM, or not an Ed25519 public key.
        """
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as exc:
            raise AuditKeyError(f"{where} is not a PEM public key", detail={"path": where}) from exc
        if not isinstance(key, Ed25519PublicKey):
            raise AuditKeyError(f"{where} is not an Ed25519 public key", detail={"path": where})
        return cls(key)

    @classmethod
    def load(cls, path: str | Path) -> AuditPublicKey:
        """Read a public key file, or derive the public key from a private key file.

        Raises:
            AuditKeyError: unreadable, or not an Ed25519 key.
        """
        path = Path(path)
        data = _read(path, "public key")
        if b"PRIVATE KEY" in data:
            return AuditSigner.from_pem(data, str(path)).public_key
        return cls.from_pem(data, str(path))

    def pem(self) -> str:
        """The key as PEM SubjectPublicKeyInfo text."""
        return self._key.public_bytes(serialization.Encoding.PEM,
                                      serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")

    def verify(self, message: bytes, signature_b64: str, binding: SealBinding | None) -> bool:
        """Whether ``signature_b64`` (base64) is this key's seal of ``message`` made for
        ``binding`` (``None``: a version 1 seal, of :data:`SEAL_CONTEXT_V1` and ``message`` alone)."""
        signed = SEAL_CONTEXT_V1 + message if binding is None else binding.signed(message)
        try:
            signature = base64.b64decode(signature_b64, validate=True)
            self._key.verify(signature, signed)
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return True


class AuditSigner:
    """The controller's private key, which seals audit logs.

    Args:
        key: the private key.
    """

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key = AuditPublicKey(key.public_key())
        """Its public half, for verifying."""

    @classmethod
    def generate(cls) -> AuditSigner:
        """A new random key held only in memory (tests, one-off runs)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes, where: str = "the private key") -> AuditSigner:
        """Parse an unencrypted PEM (PKCS #8) Ed25519 private key.

        Raises:
            AuditKeyError: it is not one.
        """
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise AuditKeyError(f"{where} is not an unencrypted PEM private key", detail={"path": where}) from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise AuditKeyError(f"{where} is not an Ed25519 private key", detail={"path": where})
        return cls(key)

    @classmethod
    def load_or_create(cls, path: str | Path | None = None) -> AuditSigner:
        """The key in ``path`` (default :func:`default_key_path`), created (mode 0600, folders
        0700) when the file does not exist; the public key is written beside it when missing.

        Two processes creating it at once end up with the same key: the file appears
        whole, once, and the loser reads the winner's.

        Raises:
            AuditKeyError: the file cannot be read, created or parsed.
        """
        path = Path(path) if path is not None else default_key_path()
        if not path.exists():
            signer = cls.generate()
            pem = signer._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption())
            try:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                created = _write_new(path, pem, 0o600)
            except OSError as exc:
                raise AuditKeyError(f"cannot create the audit signing key {path}: {exc.strerror or exc}",
                                    detail={"path": str(path)}) from exc
            if created:
                log.info("created the audit signing key %s (key id %s)", path, signer.public_key.key_id)
        data = _read(path, "audit signing key")
        if path.stat().st_mode & 0o077:
            log.warning("the audit signing key %s is readable by other users: chmod 600 it", path)
        signer = cls.from_pem(data, str(path))
        public = public_key_path(path)
        if not public.exists():
            try:
                _write_new(public, signer.public_key.pem().encode("ascii"), 0o644)
            except OSError as exc:  # a read-only mounted secret: the key is exported with `deskpod audit-key`
                log.info("public key not written beside %s: %s", path, exc)
        return signer

    def seal(self, message: bytes, binding: SealBinding) -> dict[str, str | int]:
        """The seal of ``message`` for ``binding``: ``{"alg", "v", "key_id", "signature"}``
        (``v``: :data:`SEAL_VERSION`; the signature of :meth:`SealBinding.signed`, in base64)."""
        signature = self._key.sign(binding.signed(message))
        return {"alg": SEAL_ALGORITHM, "v": SEAL_VERSION, "key_id": self.public_key.key_id,
                "signature": base64.b64encode(signature).decode("ascii")}
