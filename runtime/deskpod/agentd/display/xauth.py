"""X authority records: the binary format libXau reads (``XauReadAuth``/``XauWriteAuth``).

An Xauthority file is a sequence of records. Each record is the address family
as a big-endian 16-bit number, then four counted fields (a big-endian 16-bit
length and the bytes): the address, the display number, the authorization
scheme's name and its data. deskpod writes only ``MIT-MAGIC-COOKIE-1`` records
(the scheme's data is the 16-byte cookie): for the X server's own file (read
with ``-auth``) and for the one-command file a display grant gives an agent
command (whose cookie is an untrusted one: :mod:`deskpod.agentd.display.xtrusted`).
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

__all__ = ["COOKIE_BYTES", "COOKIE_SCHEME", "FAMILY_LOCAL", "FAMILY_WILD", "write_xauthority", "xauthority_record"]

FAMILY_LOCAL = 0x0100
"""``FamilyLocal``: a Unix-socket display; the address is the host's name (python-xlib also
looks it up for a ``host:N`` display)."""

FAMILY_WILD = 0xFFFF
"""``FamilyWild``: the record matches any address (libX11 and libxcb honour it)."""

COOKIE_SCHEME = b"MIT-MAGIC-COOKIE-1"
"""The authorization scheme of every record deskpod writes."""

COOKIE_BYTES = 16
"""Length of an MIT-MAGIC-COOKIE-1 cookie."""


def _counted(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def xauthority_record(family: int, address: bytes, display_number: str, cookie: bytes) -> bytes:
    """One Xauthority record holding an MIT-MAGIC-COOKIE-1 ``cookie``.

    Args:
        family: :data:`FAMILY_LOCAL` or :data:`FAMILY_WILD`.
        address: the host name for ``FamilyLocal``; empty for ``FamilyWild``.
        display_number: e.g. ``"99"``.
        cookie: the cookie, :data:`COOKIE_BYTES` bytes.

    Returns:
        The record's bytes.

    Raises:
        ValueError: the cookie is not :data:`COOKIE_BYTES` bytes long.
    """
    if len(cookie) != COOKIE_BYTES:
        raise ValueError(f"an MIT-MAGIC-COOKIE-1 cookie has {COOKIE_BYTES} bytes, not {len(cookie)}")
    return (struct.pack(">H", family) + _counted(address) + _counted(display_number.encode("ascii"))
            + _counted(COOKIE_SCHEME) + _counted(cookie))


def write_xauthority(path: Path, display_number: str, cookie: bytes) -> None:
    """Write an X authority file holding ``cookie`` for display ``display_number``.

    The format is libXau's (``XauWriteAuth``): per entry, the address family as a
    big-endian 16-bit number, then address, display number, scheme name and cookie,
    each a 16-bit big-endian length and the bytes. Two entries: ``FamilyLocal`` with
    this host's name (what python-xlib looks up for a Unix-socket display) and
    ``FamilyWild`` (matched by libxcb and libX11 for any address). The X server reads
    every entry's cookie and ignores the addresses. The file is written under a
    temporary name, mode 0600, and renamed into place.

    Args:
        path: the authority file.
        display_number: e.g. ``"99"``.
        cookie: the MIT-MAGIC-COOKIE-1 cookie.

    Raises:
        OSError: the file could not be written.
    """

    body = b"".join(
        xauthority_record(family, address, display_number, cookie)
        for family, address in ((FAMILY_LOCAL, socket.gethostname().encode()), (FAMILY_WILD, b""))
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, body)
    finally:
        os.close(fd)
    os.replace(tmp, path)
