"""`network: true` is enforced at the egress proxy, tried the way an agent's command would.

Every command here runs through the daemon in the workspace container (uid 1001,
the agent's zone). The proxy refuses with 407 (credentials required) a request that
carries none, and with 403 one whose credential is no live grant for its host. Without ``network: true`` the proxy must refuse it however it
asks: proxy variables set inline, a credential saved by an earlier network-enabled
command, a guessed one, a forged request to the workspace runner; a direct
connection has no route. With ``network: true`` a host on the request's (the task's)
allowlist answers and one off it is refused. Chromium's own egress (the sandbox
container) is unchanged: ``test_egress.py``. Probes target only the stack's own
test sites (``demo.test``, ``allowed.test``, ``blocked.test``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from deskpod.client import SandboxClient
from deskpod_stack import Stack, ok, with_client

pytestmark = pytest.mark.integration

FETCH = r"""
import json, socket, sys, urllib.parse, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor

def status(url, proxy=None):
    # proxy None: the environment's proxy variables (urllib's default), as most tools do.
    handlers = [] if proxy is None else [urllib.request.ProxyHandler({"http": proxy, "https": proxy})]
    try:
        return urllib.request.build_opener(*handlers).open(url, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return "error: " + str(e)

def connect(host, auth=None):
    if auth == "env":  # the grant this command was given, from its proxy variables
        import base64, os
        proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
        auth = base64.b64encode(("%s:%s" % (proxy.username, proxy.password)).encode()).decode()
    try:
        s = socket.create_connection(("egress", 3128), timeout=5)
        head = "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n" % (host, host)
        if auth:
            head += "Proxy-Authorization: Basic %s\r\n" % auth
        s.sendall((head + "\r\n").encode())
        line = s.recv(64).decode(errors="replace").split("\r\n")[0]
        s.close()
        return line
    except OSError as e:
        return "error: " + str(e)

def attempt(spec):
    kind = spec[0]
    if kind == "get":
        return status(spec[2], spec[3] if len(spec) > 3 else None)
    if kind == "connect":
        return connect(spec[2], spec[3] if len(spec) > 3 else None)
    try:
        if kind == "direct":
            socket.create_connection((spec[2], spec[3]), timeout=3).close()
            return "connected"
        return socket.gethostbyname(spec[2])  # "dns"
    except OSError as e:
        return "error: " + str(e)

# An attempt that must fail waits out its timeout: all of them run at once.
specs = json.loads(sys.argv[1])
with ThreadPoolExecutor(max(1, len(specs))) as pool:
    print(json.dumps(dict(zip([spec[1] for spec in specs], pool.map(attempt, specs)))))
"""

SAVE_GRANT = r"""
import base64, json, os, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
saved = {"url": os.environ["HTTP_PROXY"], "password": proxy.password,
         "basic": base64.b64encode(("%s:%s" % (proxy.username, proxy.password)).encode()).decode()}
open("/workspace/saved-grant.json", "w").write(json.dumps(saved))
"""


async def fetch(client: SandboxClient, specs: list[list[Any]], *, cmd_prefix: str = "", **fields: Any) -> dict:
    """Run :data:`FETCH` as an agent command (``cmd_prefix``: shell text before it, e.g.
    inline variables) and return what it printed."""
    arg = json.dumps(specs).replace("'", "")
    out = await ok(client, type="exec", cmd=f"{cmd_prefix}python3 /workspace/fetch.py '{arg}'", **fields)
    assert out.exit_code == 0, out
    return dict(json.loads(out.stdout))


def _prepare(client: SandboxClient) -> Any:
    async def go() -> None:
        await ok(client, type="seed_workspace")
        await ok(client, type="write_file", path="fetch.py", content=FETCH)
        await ok(client, type="write_file", path="save_grant.py", content=SAVE_GRANT)

    return go()


def test_a_network_command_reaches_only_its_allowlist(stack: Stack) -> None:
    """network: true with allowed_domains [demo.test]: demo.test answers (HTTP, through the
    proxy variables it was given), allowed.test (on the proxy's allowlist, off the task's)
    and blocked.test are refused; the same command without a list reaches the proxy's allowlist."""

    async def body(client: SandboxClient) -> tuple[dict, dict]:
        await _prepare(client)
        specs = [["get", "demo", "http://demo.test/"], ["get", "allowed", "http://allowed.test/"],
                 ["get", "blocked", "http://blocked.test/"], ["connect", "connect_demo", "demo.test", "env"],
                 ["connect", "connect_allowed", "allowed.test", "env"], ["connect", "connect_bare", "demo.test"]]
        narrow = await fetch(client, specs, network=True, allowed_domains=["demo.test"])
        wide = await fetch(client, specs, network=True)
        return narrow, wide

    narrow, wide = with_client(stack, body)
    assert narrow["demo"] == 200, narrow
    assert narrow["allowed"] == 403 and narrow["blocked"] == 403, narrow
    # CONNECT with the grant: demo.test is let through (200 from squid; the site has no
    # TLS listener, so 503 is fine too), allowed.test refused; without the header, refused.
    assert " 403 " not in narrow["connect_demo"] + " " and narrow["connect_demo"].startswith("HTTP/"), narrow
    assert " 403 " in narrow["connect_allowed"] + " ", narrow
    assert " 407 " in narrow["connect_bare"] + " ", narrow
    assert wide["demo"] == 200 and wide["allowed"] == 200 and wide["blocked"] == 403, wide


def test_git_sends_the_grant_from_its_proxy_variables(stack: Stack) -> None:
    """git (libcurl) sends the proxy URL's credential once challenged (407): with the grant
    the demo site itself answers (no such repository); with the proxy set inline and no
    grant, the proxy's 407."""

    async def body(client: SandboxClient) -> tuple[str, str]:
        await ok(client, type="seed_workspace")
        cmd = "git ls-remote http://demo.test/nothing.git"
        granted = await ok(client, type="exec", cmd=cmd, network=True, allowed_domains=["demo.test"])
        inline = await ok(client, type="exec", cmd=f"http_proxy=http://egress:3128 {cmd}")
        return granted.stderr, inline.stderr

    granted, inline = with_client(stack, body)
    assert "403" not in granted and "407" not in granted and "demo.test" in granted, granted
    assert "407" in inline, inline


def test_without_network_inline_proxy_variables_are_refused(stack: Stack) -> None:
    """The review's way in: a proxy variable set inline in the command, no network: true."""

    async def body(client: SandboxClient) -> dict:
        await _prepare(client)
        specs = [["get", "env_http", "http://demo.test/"], ["get", "explicit", "http://demo.test/", "http://egress:3128"],
                 ["connect", "connect", "demo.test"]]
        return await fetch(client, specs, cmd_prefix="HTTP_PROXY=http://egress:3128 http_proxy=http://egress:3128 ")

    out = with_client(stack, body)
    assert out["env_http"] == 407 and out["explicit"] == 407, out
    assert " 407 " in out["connect"] + " ", out


def test_a_saved_credential_is_dead_once_its_command_ended(stack: Stack) -> None:
    """A network-enabled command saves its credential in /workspace; the next command,
    without network, replays it (proxy URL and raw header, HTTP and CONNECT): refused."""

    async def body(client: SandboxClient) -> tuple[dict, dict]:
        await _prepare(client)
        first = await ok(client, type="exec", cmd="python3 /workspace/save_grant.py && python3 /workspace/fetch.py "
                         "'[[\"get\", \"demo\", \"http://demo.test/\"]]'", network=True, allowed_domains=["demo.test"])
        assert first.exit_code == 0, first
        saved = json.loads((await ok(client, type="read_file", path="saved-grant.json")).content)
        specs = [["get", "replay", "http://demo.test/", saved["url"]],
                 ["connect", "replay_connect", "demo.test", saved["basic"]]]
        return json.loads(first.stdout), await fetch(client, specs)

    first, replay = with_client(stack, body)
    assert first["demo"] == 200, first
    assert replay["replay"] == 403, replay
    assert " 403 " in replay["replay_connect"] + " ", replay


def test_a_guessed_credential_is_refused(stack: Stack) -> None:
    async def body(client: SandboxClient) -> dict:
        await _prepare(client)
        guess = "deskpod:" + "A" * 43
        specs = [["get", "guess", "http://demo.test/", f"http://{guess}@egress:3128"],
                 ["connect", "guess_connect", "demo.test", "ZGVza3BvZDpBQUFB"]]
        return await fetch(client, specs)

    out = with_client(stack, body)
    assert out["guess"] == 403, out
    assert " 403 " in out["guess_connect"] + " ", out


FORGE = r"""
import json, socket, struct
request = {"type": "workspace", "egress_credential": "A" * 43,
           "request": {"type": "exec", "id": "forged", "network": True,
                       "argv": ["python3", "/workspace/fetch.py", '[["get", "demo", "http://demo.test/"]]']}}
out = {}
for host in ("127.0.0.1", "workspace"):
    try:
        s = socket.create_connection((host, 8770), timeout=5)
        payload = json.dumps(request).encode()
        s.sendall(struct.pack(">I", len(payload)) + payload)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        out[host] = json.loads(data[4:]) if data else "closed"
    except OSError as e:
        out[host] = "error: " + str(e)
print(json.dumps(out))
"""


def test_a_forged_runner_request_gets_no_network(stack: Stack) -> None:
    """An agent command connects to the workspace runner itself (its own container's port
    8770, by loopback and by name) and asks for a network-enabled exec with a made-up
    credential: the runner answers agentd's address alone, so by name the connection is closed
    unread and by loopback (where it answers its health check's ping) the request is refused
    ``unauthorized``; the credential was never issued anyway, so the proxy would refuse it (the
    guessed-credential test). Before ``DESKPOD_RUNNER_CLIENT`` both were answered ``busy``: only
    the agent's own request, still running, kept the runner from carrying them out."""

    async def body(client: SandboxClient) -> dict:
        await _prepare(client)
        await ok(client, type="write_file", path="forge.py", content=FORGE)
        out = await ok(client, type="exec", argv=["python3", "/workspace/forge.py"])
        assert out.exit_code == 0, out
        return dict(json.loads(out.stdout))

    out = with_client(stack, body)
    loopback = out["127.0.0.1"]
    assert isinstance(loopback, dict) and loopback["type"] == "error", out
    assert loopback["error"]["code"] == "unauthorized" and loopback["error"]["detail"] == {"reason": "not_agentd"}, out
    assert out["workspace"] in ("closed", "error: [Errno 104] Connection reset by peer"), out


def test_without_network_direct_connections_and_dns_fail(stack: Stack) -> None:
    """No route around the proxy: the demo site's address directly, external DNS."""
    demo_ip = stack.ip("demo", "outside")

    async def body(client: SandboxClient) -> dict:
        await _prepare(client)
        specs = [["direct", "direct_http", demo_ip, 80], ["dns", "dns", "demo.test"],
                 ["get", "ip_literal", f"http://{demo_ip}/", "http://egress:3128"]]
        return await fetch(client, specs)

    out = with_client(stack, body)
    assert str(out["direct_http"]).startswith("error"), out
    assert str(out["dns"]).startswith("error"), out
    assert out["ip_literal"] == 403, out


def test_the_daemon_answers_the_proxys_check_with_no_for_an_unknown_credential(stack: Stack) -> None:
    """The check endpoint (what the proxy's helper asks) from the agent's zone: a made-up
    hash is not a grant, and the endpoint reveals nothing else."""

    async def body(client: SandboxClient) -> Any:
        await _prepare(client)
        code = (
            "import http.client, json; c = http.client.HTTPConnection('sandbox', 8765, timeout=5); "
            "c.request('POST', '/v1/egress/check', body=json.dumps({'credential_sha256': 'a' * 64, "
            "'host': 'demo.test'}), headers={'Content-Type': 'application/json'}); r = c.getresponse(); "
            "print(json.dumps([r.status, json.loads(r.read())]))"
        )
        out = await ok(client, type="exec", argv=["python3", "-c", code])
        assert out.exit_code == 0, out
        return json.loads(out.stdout)

    assert with_client(stack, body) == [200, {"allowed": False}]
