"""Operator-supplied CA certificates that Chromium and ``network`` agent commands trust.

``DESKPOD_TRUSTED_CAS`` holds PEM text: one or more ``-----BEGIN CERTIFICATE-----``
blocks, each a CA certificate (basic constraints ``CA:TRUE``). compose.yaml passes it
to the sandbox and the workspace container (an environment variable, not a mount: both
keep only tmpfs mounts, which ``deskpod audit`` checks; certificates are public).

- The daemon imports them, at every Chromium start, into the NSS database Chromium
  reads on Linux, ``$HOME/.pki/nssdb`` (the sandbox's tmpfs home, emptied by a reset),
  with ``certutil`` (libnss3-tools) as trusted for TLS servers (``C,,``). Certificate
  checks stay on: only these anchors are added (Chromium's "Linux Cert Management",
  https://chromium.googlesource.com/chromium/src/+/main/docs/linux/cert_management.md).
- The workspace runner gives a command that asks for ``network`` a bundle of the
  image's system CAs plus these, in ``SSL_CERT_FILE`` and the variables pip,
  requests, curl, git and Node read; other commands have no network and get nothing.

A block that is not a valid CA certificate is a :class:`~deskpod.errors.TrustedCaError`
in the daemon's or runner's log naming the block; the others still count and the
browser still starts.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from deskpod.errors import TrustedCaError
from deskpod.settings import variable_name

__all__ = [
    "CERTUTIL_TIMEOUT_S",
    "MAX_TRUSTED_CAS_BYTES",
    "SOURCE",
    "SYSTEM_BUNDLE",
    "TrustedCa",
    "bundle_env",
    "import_into_nss",
    "load_trusted_cas",
    "nss_db_dir",
    "write_bundle",
]

log = logging.getLogger(__name__)

SYSTEM_BUNDLE: Final = Path("/etc/ssl/certs/ca-certificates.crt")
"""The image's system CA bundle (Debian's ca-certificates)."""

SOURCE: Final = variable_name("trusted_cas")
"""The variable the certificates come from (named in every error)."""

MAX_TRUSTED_CAS_BYTES: Final = 65_536
"""Longest ``DESKPOD_TRUSTED_CAS`` read (about thirty certificates); a longer one is ignored
with a :class:`~deskpod.errors.TrustedCaError`."""

CERTUTIL_TIMEOUT_S: Final = 10.0
"""Longest one ``certutil`` call may take."""

_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.DOTALL)


@dataclass(frozen=True)
class TrustedCa:
    """One CA certificate of ``DESKPOD_TRUSTED_CAS``.

    Args:
        index: its place among the text's PEM blocks, from 1.
        subject: its subject, RFC 4514 text (for logs).
        pem: the certificate alone, PEM-encoded (re-encoded from its parsed form).
    """

    index: int
    subject: str
    pem: bytes


def _parse_block(index: int, block: bytes) -> TrustedCa:
    """Parse one PEM block into a CA certificate.

    Raises:
        TrustedCaError: the block does not parse or is not a CA certificate.
    """
    where = f"{SOURCE} certificate {index}"
    try:
        cert = x509.load_pem_x509_certificate(block)
    except ValueError as exc:
        raise TrustedCaError(f"{where}: not a valid PEM certificate: {exc}", detail={"certificate": index}) from exc
    subject = cert.subject.rfc4514_string()
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise TrustedCaError(f"{where} ({subject}): not a CA certificate (basic constraints CA:TRUE)",
                             detail={"certificate": index, "subject": subject})
    return TrustedCa(index=index, subject=subject, pem=cert.public_bytes(Encoding.PEM))


def load_trusted_cas(text: str | None) -> tuple[list[TrustedCa], list[TrustedCaError]]:
    """Parse ``DESKPOD_TRUSTED_CAS``: every PEM certificate block of ``text``, in order.

    Args:
        text: the variable's value; ``None`` or blank: no CA.

    Returns:
        The valid CA certificates, and one error per block that is not one, or one
        error for text that holds no block or is too long (all also logged).
    """
    if text is None or not text.strip():
        return [], []
    data = text.encode("utf-8", "replace")
    errors: list[TrustedCaError] = []
    blocks = _PEM_BLOCK.findall(data)
    if len(data) > MAX_TRUSTED_CAS_BYTES:
        errors.append(TrustedCaError(f"{SOURCE}: longer than {MAX_TRUSTED_CAS_BYTES} bytes; ignored",
                                     detail={"bytes": len(data)}))
        blocks = []
    elif not blocks:
        errors.append(TrustedCaError(f"{SOURCE}: no PEM certificate in it (-----BEGIN CERTIFICATE----- ... "
                                     "-----END CERTIFICATE-----)", detail={}))
    cas: list[TrustedCa] = []
    for index, block in enumerate(blocks, start=1):
        try:
            cas.append(_parse_block(index, block))
        except TrustedCaError as exc:
            errors.append(exc)
    for err in errors:
        log.error("%s (%s)", err.message, err.code)
    return cas, errors


def nss_db_dir(home: Path) -> Path:
    """The NSS database Chromium reads on Linux: ``$HOME/.pki/nssdb``."""
    return home / ".pki" / "nssdb"


def _certutil(argv: list[str], stdin: bytes = b"") -> None:
    """Run one ``certutil`` call (an argv list, never a shell line) within :data:`CERTUTIL_TIMEOUT_S`.

    Raises:
        TrustedCaError: it cannot start, times out or exits non-zero (its stderr's tail in the message).
    """
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=CERTUTIL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrustedCaError(f"certutil failed: {exc}", detail={"argv": argv[:2]}) from exc
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip()[-500:]
        raise TrustedCaError(f"certutil {argv[1]} exited with {proc.returncode}: {tail}",
                             detail={"argv": argv[:2]})


def import_into_nss(cas: list[TrustedCa], home: Path, certutil: str = "certutil") -> list[TrustedCaError]:
    """Add ``cas`` to the NSS database in ``home`` as trusted for TLS servers (``C,,``),
    creating the database (no password) if there is none. Nothing happens without CAs.

    Args:
        cas: the certificates (:func:`load_trusted_cas`).
        home: Chromium's ``HOME``.
        certutil: the ``certutil`` binary.

    Returns:
        One error per certificate not imported (also logged); empty when all were.
    """
    if not cas:
        return []
    db = nss_db_dir(home)
    errors: list[TrustedCaError] = []
    try:
        db.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not (db / "cert9.db").exists():
            _certutil([certutil, "-N", "-d", f"sql:{db}", "--empty-password"])
    except (OSError, TrustedCaError) as exc:
        err = exc if isinstance(exc, TrustedCaError) else TrustedCaError(
            f"cannot create the NSS database {db}: {exc}", detail={"folder": str(db)})
        log.error("%s (%s)", err.message, err.code)
        return [err]
    for ca in cas:
        nickname = f"deskpod-trusted-{ca.index}"
        try:
            _certutil([certutil, "-A", "-d", f"sql:{db}", "-n", nickname, "-t", "C,,", "-a"], stdin=ca.pem)
        except TrustedCaError as exc:
            err = TrustedCaError(f"{SOURCE} certificate {ca.index} ({ca.subject}): {exc.message}",
                                 detail={"certificate": ca.index})
            log.error("%s (%s)", err.message, err.code)
            errors.append(err)
        else:
            log.info("Chromium trusts CA %s (%s certificate %d)", ca.subject, SOURCE, ca.index)
    return errors


def write_bundle(cas: list[TrustedCa], path: Path, system: Path = SYSTEM_BUNDLE) -> Path | None:
    """Write the system bundle followed by ``cas`` to ``path`` (mode 0644), replacing it.

    Args:
        cas: the operator's CAs; none: nothing is written.
        path: the bundle's path.
        system: the system bundle (missing: the bundle holds ``cas`` only).

    Returns:
        ``path``, or ``None`` when there is no CA to add.

    Raises:
        TrustedCaError: the bundle cannot be written.
    """
    if not cas:
        return None
    try:
        base = system.read_bytes()
    except OSError:
        base = b""
    body = base.rstrip(b"\n") + b"\n" + b"".join(ca.pem for ca in cas) if base else b"".join(ca.pem for ca in cas)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.write_bytes(body)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        raise TrustedCaError(f"cannot write the CA bundle {path}: {exc.strerror or exc}",
                             detail={"file": str(path)}) from exc
    return path


def bundle_env(bundle: Path) -> dict[str, str]:
    """The variables that point TLS clients at ``bundle``: OpenSSL (Python's ``ssl``,
    curl, git), requests and pip, and Node (which adds it to its own roots)."""
    value = str(bundle)
    names = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
             "NODE_EXTRA_CA_CERTS")
    return dict.fromkeys(names, value)
