"""Operator CAs (DESKPOD_TRUSTED_CAS) are trusted by Chromium and by ``network`` agent
commands, and nothing else is: certificate checks stay on.

The stack (``ca_stack``, conftest.py) trusts the operator's CA and not a stranger's. Two
demo sites on the stack's ``outside`` network, allowlisted, serve https with a certificate
from each. Chromium, through the egress proxy's CONNECT, loads the first
and gets a certificate error on the second; so does an agent command with ``network``.
A bad certificate block next to the good one is logged, and the browser still starts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from deskpod.client import SandboxClient
from deskpod.errors import NavigationError
from deskpod.protocol import ObserveOptions
from deskpod_stack import Stack, ok, with_client

pytestmark = pytest.mark.integration

FETCH = r"""
import json, sys, urllib.request
out = {}
for host in sys.argv[1:]:
    try:
        out[host] = urllib.request.urlopen(f"https://{host}/hello", timeout=15).read().decode()
    except Exception as e:
        out[host] = "error: " + str(e)
print(json.dumps(out))
"""


def test_chromium_trusts_the_operators_ca_and_no_other(ca_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Any, str]:
        trusted = await client.navigate("https://trusted.test/hello", observe=ObserveOptions(page_text=True))
        try:
            other = await client.navigate("https://untrusted.test/hello", observe=ObserveOptions(page_text=True))
        except NavigationError as exc:
            return trusted, exc.message
        return trusted, other.page_text or ""

    trusted, refused = with_client(ca_stack, body)
    assert "hello from trusted.test" in (trusted.page_text or ""), trusted.page_text
    # The stranger's site: a failed navigation (or Chromium's interstitial) naming the error.
    assert "hello from" not in refused and "ERR_CERT_AUTHORITY_INVALID" in refused, refused


def test_the_bad_block_is_logged_and_the_operators_ca_is_in_chromiums_database(ca_stack: Stack) -> None:
    logs = ca_stack.container("sandbox").logs().decode(errors="replace")
    assert "DESKPOD_TRUSTED_CAS certificate 2: not a valid PEM certificate" in logs, logs[-3000:]
    listing = ca_stack.container("sandbox").exec_run(
        ["certutil", "-L", "-d", "sql:/home/deskpod/.pki/nssdb"], user="1000").output.decode()
    assert "deskpod-trusted-1" in listing and "C,," in listing, listing


def test_a_network_command_trusts_the_operators_ca_and_no_other(ca_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[dict, dict]:
        await ok(client, type="seed_workspace")
        await ok(client, type="write_file", path="fetch_tls.py", content=FETCH)
        cmd = "python3 /workspace/fetch_tls.py trusted.test untrusted.test"
        granted = await ok(client, type="exec", cmd=cmd, network=True,
                           allowed_domains=["trusted.test", "untrusted.test"])
        env = await ok(client, type="exec", cmd="env")
        return json.loads(granted.stdout), {"env": env.stdout}

    out, plain = with_client(ca_stack, body)
    assert '<p id="hello">hello from trusted.test</p>' in out["trusted.test"], out
    assert "CERTIFICATE_VERIFY_FAILED" in out["untrusted.test"], out
    # A command without network gets neither the proxy nor the bundle.
    assert "SSL_CERT_FILE" not in plain["env"], plain
