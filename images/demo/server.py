"""deskpod demo site (standard library only).

GET /            search page; the big input sits where a click at screen (640, 400)
                 lands even below Chromium's tab strip and toolbar in a 1280x800 window
GET /search?q=X  "Results for X" with a few fake results
GET /healthz     200 "ok"
GET /fixtures/N  the test fixture page fixtures/N.html
GET /fixtures/N.js  the fixture script fixtures/N.js (text/javascript; a service worker's)
GET /hsts        a page sent with "Strict-Transport-Security: max-age=86400" (browsers
                 keep it only from an https response)
GET /cached      a random token as text, cacheable for a day ("Cache-Control: max-age=86400",
                 the token as its ETag): one a browser answers from its HTTP cache is an
                 earlier response's token
GET /tls-session  "STATE {json}": whether this connection's TLS session was resumed
                 ({"tls": true, "resumed": bool}; {"tls": false} over plain HTTP). Every
                 response ends its connection (HTTP/1.0), so each request is a new one
GET /fixtures/N.pdf[?ms=M]  the test fixture document fixtures/N.pdf (application/pdf),
                 sent in 8 pieces over M ms (0-10000) when asked
GET /redirect?to=URL  302 to URL (the tests' server-side redirect off the allowlist)
GET /login?user=X     sets the cookie "session=X" (persistent, one day, HttpOnly) and
                      302s to /account; X is 1-32 characters of [A-Za-z0-9_-]
GET /logout           expires the session cookie and 302s to /account
GET /account          "logged in as X" when the session cookie names X, else "not logged in"
GET /download?name=N[&ms=M]  a small text file N (1-64 characters of [A-Za-z0-9._-]) sent
                      as an attachment, so the browser downloads it; its headers after M ms
                      (0-3000, default 0), for downloads that begin well after the click
GET /slow-download?name=N&seconds=S  64 KiB as attachment N, sent in 16 pieces over S
                      seconds (1-30), for downloads seen in progress
GET /delay?ms=M&text=T  T (1-64 characters of [A-Za-z0-9 _-]) as plain text after M ms
                      (0-3000), for pages that fetch after a click
GET /ws               a websocket (RFC 6455) echoing every text message back, prefixed
                      with "echo: "
anything else    "hello from <Host>" (the tests use it as allowed.test / blocked.test)

Listens on 0.0.0.0 on each port of $DEMO_PORTS (default "80 8081": a second port for
the egress proxy's host:port allowlist entries), and with TLS on each port of
$DEMO_TLS_PORTS (default none) with the certificate chain and key given as PEM text in
$DEMO_TLS_CERT and $DEMO_TLS_KEY (written to a temporary file for the ssl module, then
removed). Non-root is enough: Docker sets net.ipv4.ip_unprivileged_port_start=0 inside
containers.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import secrets
import signal
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parent / "fixtures"

INDEX = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>deskpod demo search</title>
<style>
  body { margin: 0; font-family: "DejaVu Sans", sans-serif; background: #fafafa; }
  h1 { position: absolute; top: 40px; left: 5%; margin: 0; font-size: 56px; color: #333; }
  #q { position: absolute; top: 220px; left: 5%; width: 90%; height: 240px;
       font-size: 48px; box-sizing: border-box; padding: 0 24px;
       border: 3px solid #4a67d6; border-radius: 12px; }
  #go { position: absolute; top: 490px; left: 5%; font-size: 32px; padding: 8px 32px; }
</style>
</head>
<body>
<h1>deskpod demo search</h1>
<form action="/search" method="get">
  <input name="q" id="q" type="text" placeholder="Search..." autocomplete="off">
  <button id="go" type="submit">Search</button>
</form>
</body>
</html>
"""

RESULTS = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Results for {q}</title>
<style>
  body {{ font-family: "DejaVu Sans", sans-serif; margin: 40px 5%; font-size: 24px; }}
  li {{ margin: 16px 0; }}
</style>
</head>
<body>
<p id="summary">You searched for: {q}</p>
<ol id="results">
  <li><a href="/result/1">{q} - a beginner's guide</a></li>
  <li><a href="/result/2">Ten facts about {q}</a></li>
  <li><a href="/result/3">{q} explained (demo result)</a></li>
</ol>
<p><a href="/">New search</a></p>
</body>
</html>
"""

HELLO = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>hello from {host}</title></head>
<body><p id="hello">hello from {host}</p></body>
</html>
"""

ACCOUNT = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>account</title></head>
<body><p id="status">{status}</p></body>
</html>
"""


class Handler(BaseHTTPRequestHandler):
    server_version = "deskpod-demo"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        url = urlsplit(self.path)
        if url.path == "/":
            self._send(200, INDEX)
        elif url.path == "/search":
            q = parse_qs(url.query).get("q", [""])[0]
            self._send(200, RESULTS.format(q=html.escape(q)))
        elif fixture := re.fullmatch(r"/fixtures/([a-z0-9-]{1,64})(\.js)?", url.path):
            name, script = fixture.groups()
            page = FIXTURES / f"{name}{script or '.html'}"
            if page.is_file():
                ctype = "text/javascript; charset=utf-8" if script else "text/html; charset=utf-8"
                self._send(200, page.read_text(encoding="utf-8"), ctype)
            else:
                self._send(404, "no such fixture\n", "text/plain; charset=utf-8")
        elif url.path == "/hsts":
            self._send(200, HELLO.format(host="hsts"), headers={"Strict-Transport-Security": "max-age=86400"})
        elif url.path == "/cached":
            token = secrets.token_hex(8)
            self._send(200, token, "text/plain; charset=utf-8",
                       headers={"Cache-Control": "max-age=86400", "ETag": f'"{token}"'})
        elif url.path == "/tls-session":
            conn = self.connection
            state = {"tls": True, "resumed": conn.session_reused} if isinstance(conn, ssl.SSLSocket) else {"tls": False}
            self._send(200, f"<!doctype html><pre>STATE {json.dumps(state)}</pre>")
        elif re.fullmatch(r"/fixtures/[a-z0-9-]{1,64}\.pdf", url.path):
            document = FIXTURES / url.path.rsplit("/", 1)[1]
            ms = parse_qs(url.query).get("ms", ["0"])[0]
            if not (ms.isdigit() and int(ms) <= 10_000):
                self._send(400, "bad duration\n", "text/plain; charset=utf-8")
            elif document.is_file():
                self._send_slowly(document.read_bytes(), "application/pdf", int(ms) / 1000)
            else:
                self._send(404, "no such fixture\n", "text/plain; charset=utf-8")
        elif url.path == "/redirect":
            target = parse_qs(url.query).get("to", ["/"])[0]
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif url.path == "/login":
            user = parse_qs(url.query).get("user", [""])[0]
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", user):
                self._send(400, "bad user name\n", "text/plain; charset=utf-8")
                return
            self._redirect("/account", f"session={user}; Max-Age=86400; Path=/; HttpOnly; SameSite=Lax")
        elif url.path == "/logout":
            self._redirect("/account", "session=; Max-Age=0; Path=/; HttpOnly; SameSite=Lax")
        elif url.path == "/account":
            cookie = SimpleCookie()
            try:
                cookie.load(self.headers.get("Cookie", ""))
            except CookieError:
                cookie = SimpleCookie()
            user = cookie["session"].value if "session" in cookie else ""
            status = f"logged in as {html.escape(user)}" if user else "not logged in"
            self._send(200, ACCOUNT.format(status=status))
        elif url.path == "/download":
            query = parse_qs(url.query)
            name, ms = query.get("name", [""])[0], query.get("ms", ["0"])[0]
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name) or name.startswith("."):
                self._send(400, "bad file name\n", "text/plain; charset=utf-8")
                return
            if not ms.isdigit() or int(ms) > 3000:
                self._send(400, "bad delay\n", "text/plain; charset=utf-8")
                return
            time.sleep(int(ms) / 1000)
            data = f"deskpod demo download {name}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        elif url.path == "/delay":
            query = parse_qs(url.query)
            ms, text = query.get("ms", ["0"])[0], query.get("text", [""])[0]
            if not ms.isdigit() or int(ms) > 3000 or not re.fullmatch(r"[A-Za-z0-9 _-]{1,64}", text):
                self._send(400, "bad delay or text\n", "text/plain; charset=utf-8")
                return
            time.sleep(int(ms) / 1000)
            self._send(200, text, "text/plain; charset=utf-8")
        elif url.path == "/slow-download":
            self._slow_download(parse_qs(url.query))
        elif url.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            self._websocket()
        elif url.path == "/healthz":
            self._send(200, "ok\n", "text/plain; charset=utf-8")
        else:
            host = self.headers.get("Host", "")
            self._send(200, HELLO.format(host=html.escape(host)))

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def _slow_download(self, query: dict[str, list[str]]) -> None:
        name = query.get("name", [""])[0]
        seconds = query.get("seconds", ["5"])[0]
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name) or name.startswith(".") or not seconds.isdigit() \
                or not 1 <= int(seconds) <= 30:
            self._send(400, "bad file name or duration\n", "text/plain; charset=utf-8")
            return
        piece = b"x" * 4096
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        self.send_header("Content-Length", str(16 * len(piece)))
        self.end_headers()
        if self.command == "HEAD":
            return
        for _ in range(16):
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(int(seconds) / 16)

    def _websocket(self) -> None:
        """The RFC 6455 handshake, then echo text frames until a close frame."""
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = int.from_bytes(self.rfile.read(2), "big")
            elif length == 127:
                length = int.from_bytes(self.rfile.read(8), "big")
            if length > 60000:
                return
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:
                self.wfile.write(b"\x88\x00")
                return
            if opcode == 1:
                out = b"echo: " + data
                size = bytes([len(out)]) if len(out) < 126 else b"\x7e" + len(out).to_bytes(2, "big")
                self.wfile.write(b"\x81" + size + out)
                self.wfile.flush()

    def _redirect(self, location: str, set_cookie: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Set-Cookie", set_cookie)
        self.send_header("Content-Length", "0")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _send_slowly(self, data: bytes, ctype: str, seconds: float, pieces: int = 8) -> None:
        """``data`` in ``pieces`` parts, the next one ``seconds / pieces`` after each."""
        if not seconds:
            self._send_bytes(200, data, ctype)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command == "HEAD":
            return
        for i in range(pieces):
            self.wfile.write(data[i * len(data) // pieces:(i + 1) * len(data) // pieces])
            self.wfile.flush()
            time.sleep(seconds / pieces)

    def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, body.encode("utf-8"), ctype, headers)

    def _send_bytes(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        headers = {"Cache-Control": "no-store", **(headers or {})}
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def tls_context() -> ssl.SSLContext:
    """A server context with $DEMO_TLS_CERT's chain and $DEMO_TLS_KEY (PEM text)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.NamedTemporaryFile("w", suffix=".pem") as pem:
        pem.write(os.environ["DEMO_TLS_KEY"] + "\n" + os.environ["DEMO_TLS_CERT"])
        pem.flush()
        context.load_cert_chain(pem.name)
    return context


def main() -> None:
    ports = [int(p) for p in os.environ.get("DEMO_PORTS", os.environ.get("DEMO_PORT", "80 8081")).split()]
    tls_ports = [int(p) for p in os.environ.get("DEMO_TLS_PORTS", "").split()]
    servers = [ThreadingHTTPServer(("0.0.0.0", port), Handler) for port in ports + tls_ports]
    if tls_ports:
        context = tls_context()
        for httpd in servers[len(ports):]:
            httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    for httpd in servers:
        httpd.daemon_threads = True
    for httpd in servers[1:]:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    # As PID 1 the server gets no default SIGTERM handling: stop promptly on it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"deskpod demo site on {', '.join(f':{p}' for p in ports)}"
          + (f", TLS on {', '.join(f':{p}' for p in tls_ports)}" if tls_ports else ""), flush=True)
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
