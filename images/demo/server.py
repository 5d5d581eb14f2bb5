"""deskpod demo site (standard library only).

GET /            search page; the big input sits where a click at screen (640, 400)
                 lands even below Chromium's tab strip and toolbar in a 1280x800 window
GET /search?q=X  "Results for X" with a few fake results
GET /healthz     200 "ok"
GET /fixtures/N  the test fixture page fixtures/N.html
GET /redirect?to=URL  302 to URL (the tests' server-side redirect off the allowlist)
GET /login?user=X     sets the cookie "session=X" (persistent, one day, HttpOnly) and
                      302s to /account; X is 1-32 characters of [A-Za-z0-9_-]
GET /logout           expires the session cookie and 302s to /account
GET /account          "logged in as X" when the session cookie names X, else "not logged in"
GET /download?name=N  a small text file N (1-64 characters of [A-Za-z0-9._-]) sent as an
                      attachment, so the browser downloads it
anything else    "hello from <Host>" (the tests use it as allowed.test / blocked.test)

Listens on 0.0.0.0:$DEMO_PORT (default 80). Non-root is enough: Docker sets
net.ipv4.ip_unprivileged_port_start=0 inside containers.
"""

from __future__ import annotations

import html
import os
import re
import signal
import sys
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
        elif re.fullmatch(r"/fixtures/[a-z0-9-]{1,64}", url.path):
            page = FIXTURES / f"{url.path.rsplit('/', 1)[1]}.html"
            if page.is_file():
                self._send(200, page.read_text(encoding="utf-8"))
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
            name = parse_qs(url.query).get("name", [""])[0]
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name) or name.startswith("."):
                self._send(400, "bad file name\n", "text/plain; charset=utf-8")
                return
            data = f"deskpod demo download {name}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        elif url.path == "/healthz":
            self._send(200, "ok\n", "text/plain; charset=utf-8")
        else:
            host = self.headers.get("Host", "")
            self._send(200, HELLO.format(host=html.escape(host)))

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def _redirect(self, location: str, set_cookie: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Set-Cookie", set_cookie)
        self.send_header("Content-Length", "0")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8") -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def main() -> None:
    port = int(os.environ.get("DEMO_PORT", "80"))
    httpd = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    httpd.daemon_threads = True
    # As PID 1 the server gets no default SIGTERM handling: stop promptly on it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"deskpod demo site on :{port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
