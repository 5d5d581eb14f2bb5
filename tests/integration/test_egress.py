"""The sandbox's only way out is the egress proxy and its allowlist.

Every probe targets only the project's own test hosts (containers on the
``outside`` network), never a public address.
"""

from __future__ import annotations

import pytest

from deskpod_stack import Stack

pytestmark = pytest.mark.integration

PROBE = r"""
import json, socket, sys, urllib.request, urllib.error
target_ip = sys.argv[1]
out = {}
proxy = urllib.request.build_opener(urllib.request.ProxyHandler({'http': 'http://egress:3128', 'https': 'http://egress:3128'}))
for name in ('allowed.test', 'blocked.test', 'demo.test'):
    try:
        out[name] = proxy.open(f'http://{name}/', timeout=10).status
    except urllib.error.HTTPError as e:
        out[name] = e.code
    except OSError as e:
        out[name] = f'error: {e}'
try:
    out['ip_literal'] = proxy.open(f'http://{target_ip}/', timeout=10).status
except urllib.error.HTTPError as e:
    out['ip_literal'] = e.code
except OSError as e:
    out['ip_literal'] = f'error: {e}'
for host in ('blocked.test', 'allowed.test'):
    try:
        s = socket.create_connection(('egress', 3128), timeout=5)
        s.sendall(f'CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n'.encode())
        out['connect_' + host] = s.recv(64).decode(errors='replace').split('\r\n')[0]
        s.close()
    except OSError as e:
        out['connect_' + host] = f'error: {e}'
try:
    socket.create_connection((target_ip, 80), timeout=3).close()
    out['direct'] = 'connected'
except OSError as e:
    out['direct'] = f'error: {e}'
try:
    out['dns'] = socket.gethostbyname('allowed.test')
except OSError as e:
    out['dns'] = f'error: {e}'
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(stack: Stack) -> dict:
    target_ip = stack.ip("allowed", "outside")
    code = PROBE.replace("sys.argv[1]", repr(target_ip))
    return stack.exec_python("sandbox", code)


def test_allowlisted_site_answers_through_the_proxy(probe: dict) -> None:
    assert probe["allowed.test"] == 200
    assert probe["demo.test"] == 200


def test_other_sites_are_refused_by_the_proxy(probe: dict) -> None:
    assert probe["blocked.test"] == 403


def test_connect_tunnels_follow_the_allowlist(probe: dict) -> None:
    assert " 403 " in probe["connect_blocked.test"] + " ", probe
    # allowed.test has no TLS listener, but squid accepts the CONNECT itself
    # (200) or reports the failed upstream (503): either way, not 403.
    assert " 403 " not in probe["connect_allowed.test"] + " ", probe


def test_ip_literals_are_refused_by_the_proxy(probe: dict) -> None:
    assert probe["ip_literal"] == 403


def test_direct_connections_and_external_dns_fail(probe: dict) -> None:
    assert probe["direct"].startswith("error"), probe
    assert probe["dns"].startswith("error"), probe
