"""X authority records: the binary format libXau reads (``XauReadAuth``/``XauWriteAuth``).

An Xauthority file is a sequence of records. Each record is the address family
as a big-endian 16-bit number, then four counted fields (a big-endian 16-bit
length and the bytes): the address, the display number, the authorization
scheme's name and its data. deskpod writes only ``MIT-MAGIC-COOKIE-1`` records
(the scheme's data is the 16-byte cookie): for the X server's own file (read
with ``-auth``) and for the one-command file a display grant gives an agent
command.
"""

from __future__ import annotations

import struct

__all__ = ["COOKIE_BYTES", "COOKIE_SCHEME", "FAMILY_LOCAL", "FAMILY_WILD", "xauthority_record"]

FAMILY_LOCAL = 0x0100
"""``FamilyLocal``: a Unix-socket display; the address is the host's name."""

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
