"""The X11 wire helpers the audit's stdlib probes share, as source text (stdlib only).

The probes (:mod:`.probes`, :mod:`.gate_probe`, :mod:`.untrusted_probe`) are run as
``python3 -c SOURCE`` in a container, so they cannot import this package: each probe's
source is its own imports, then :data:`X_WIRE_SOURCE`, then its body. The source needs
``struct`` imported before it.

- ``recv_exactly(sock, n)``: ``n`` bytes, or ``ConnectionError`` when the peer closes first.
- ``pad(b)``: ``b`` padded to a multiple of four bytes, as the X protocol lays out strings.
- ``setup_request(cookie=b"")``: an X11 connection setup (little-endian, protocol 11.0) with
  no authorization, or with an MIT-MAGIC-COOKIE-1 (X Window System Protocol, section 8,
  "Connection Setup": https://www.x.org/releases/current/doc/xproto/x11protocol.html).
- ``setup_reply(sock)``: ``(head, body)`` of the server's answer: its first byte is 0
  (Failed), 1 (Success) or 2 (Authenticate); a failure's body starts with its reason, whose
  length is byte 1.
- ``setup_answer(head, body)``: that answer as the audit reports it: ``"refused: <reason>"``
  (at most 200 bytes of it), ``"accepted"``, ``"authenticate"`` or ``"?"``.

Nothing here is executed by importing it.
"""

from __future__ import annotations

__all__ = ["X_WIRE_SOURCE"]

X_WIRE_SOURCE = r'''
def recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data

def pad(b):
    return b + b"\0" * (-len(b) % 4)

def setup_request(cookie=b""):
    name = b"MIT-MAGIC-COOKIE-1" if cookie else b""
    return struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(cookie)) + pad(name) + pad(cookie)

def setup_reply(sock):
    head = recv_exactly(sock, 8)
    return head, recv_exactly(sock, 4 * struct.unpack("<H", head[6:8])[0])

def setup_answer(head, body):
    reason = body[:min(head[1], 200)] if head[0] == 0 else b""
    return {0: "refused", 1: "accepted", 2: "authenticate"}.get(head[0], "?") + (
        ": " + reason.decode(errors="replace") if reason else "")
'''
