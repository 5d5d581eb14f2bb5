"""The untrusted-client probe ``deskpod audit`` runs in the sandbox container (stdlib only).

Like :mod:`deskpod.audit.probes`, this module is never imported for its code: its *source
text* is run in the container, as its user, with a fixed argv (``python3 -c SOURCE PARAMS``,
``PARAMS`` a JSON list of ``[authority file, display number]``, the X servers' own authority
files). For each X server whose own cookie it can read, it does what a display grant does
(``deskpod.agentd.display.xtrusted``): asks the server, through the SECURITY extension, for an
*untrusted* MIT-MAGIC-COOKIE-1 (``SecurityGenerateAuthorization``, a 10 s timeout); connects
with it as the grant's client would; asks for the XTEST extension and for the root window's
pixels (``GetImage`` of one pixel); then revokes it (``SecurityRevokeAuthorization``) and
connects with it again.

Its output, one JSON object: ``displays``: ``[{"number", "generated", "xtest", "get_image",
"after_revoke"}, ...]``: ``generated`` is ``"ok"`` or why not (``"no SECURITY extension"``,
``"refused: ..."``, ``"unreachable: ..."``); ``xtest`` whether the untrusted client sees
XTEST; ``get_image`` ``"BadAccess"``, ``"allowed"`` or ``"error <code>"``; ``after_revoke``
the answer to a setup with the revoked cookie (``"refused: ..."``, ``"accepted"``...).

Nothing here is executed by importing it.
"""

from __future__ import annotations

from deskpod.audit.x_wire import X_WIRE_SOURCE

__all__ = ["UNTRUSTED_PROBE_SOURCE"]

UNTRUSTED_PROBE_SOURCE = r'''
import errno, json, socket, struct, sys
''' + X_WIRE_SOURCE + r'''
T = 5.0
TIMEOUT_S = 10
NAME = b"MIT-MAGIC-COOKIE-1"

def err(e):
    return errno.errorcode.get(getattr(e, "errno", None) or 0) or type(e).__name__

def connect(number, cookie):
    """(socket, answer, root window id): the setup's answer and, when accepted, the root."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(T)
    sock.connect(f"/tmp/.X11-unix/X{number}")
    sock.sendall(setup_request(cookie))
    head, body = setup_reply(sock)
    if head[0] != 1:
        sock.close()
        return None, setup_answer(head, body), None
    vendor_len, _, _, formats = struct.unpack("<HHBB", body[16:22])
    root = struct.unpack("<I", body[32 + len(pad(b"x" * vendor_len)) + 8 * formats:][:4])[0]
    return sock, "accepted", root

def request(sock, data, reply=True):
    """Send one request; its reply (32 bytes and the rest), or ("error", code)."""
    sock.sendall(data)
    if not reply:
        return None
    while True:
        head = recv_exactly(sock, 32)
        if head[0] == 0:
            return ("error", head[1])
        if head[0] == 1:
            return head + recv_exactly(sock, 4 * struct.unpack("<I", head[4:8])[0])
        # an event: skip it

def extension(sock, name):
    """(present, major opcode) of the extension ``name``."""
    r = request(sock, struct.pack("<BxHHxx", 98, 2 + len(pad(name)) // 4, len(name)) + pad(name))
    return bool(r[8]), r[9]

out = {"displays": []}
for path, number in json.loads(sys.argv[1]):
    try:
        cookie = open(path, "rb").read()[-16:]
    except OSError:
        continue
    rec = {"number": number}
    out["displays"].append(rec)
    try:
        trusted, answer, _ = connect(number, cookie)
    except (OSError, ConnectionError) as e:
        rec["generated"] = "unreachable: " + err(e)
        continue
    if trusted is None:
        rec["generated"] = answer
        continue
    with trusted:
        present, major = extension(trusted, b"SECURITY")
        if not present:
            rec["generated"] = "no SECURITY extension"
            continue
        # SecurityGenerateAuthorization: the value mask's Timeout (1) and TrustLevel (2, Untrusted = 1).
        body = pad(NAME) + struct.pack("<II", TIMEOUT_S, 1)
        r = request(trusted, struct.pack("<BBHHHI", major, 1, 3 + len(body) // 4, len(NAME), 0, 3) + body)
        if r[0] == "error":
            rec["generated"] = "refused: error %d" % r[1]
            continue
        authid, length = struct.unpack("<IH", r[8:14])
        untrusted_cookie = bytes(r[32:32 + length])
        rec["generated"] = "ok"
        try:
            client, answer, root = connect(number, untrusted_cookie)
            if client is None:
                rec["xtest"], rec["get_image"] = None, "not connected: " + answer
            else:
                with client:
                    rec["xtest"] = extension(client, b"XTEST")[0]
                    # GetImage (73), ZPixmap, one pixel of the root window, all planes.
                    r = request(client, struct.pack("<BBHIhhHHI", 73, 2, 5, root, 0, 0, 1, 1, 0xFFFFFFFF))
                    rec["get_image"] = ("BadAccess" if r == ("error", 10) else
                                        "error %d" % r[1] if r[0] == "error" else "allowed")
        finally:
            # SecurityRevokeAuthorization, then a round trip (GetInputFocus) so it took effect.
            request(trusted, struct.pack("<BBHI", major, 2, 2, authid), reply=False)
            request(trusted, struct.pack("<BxH", 43, 1))
        try:
            again, answer, _ = connect(number, untrusted_cookie)
            if again is not None:
                again.close()
            rec["after_revoke"] = answer
        except (OSError, ConnectionError) as e:
            rec["after_revoke"] = "closed: " + err(e)
print(json.dumps(out))
'''
