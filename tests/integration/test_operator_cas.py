"""Operator CAs (DESKPOD_TRUSTED_CAS) are trusted by Chromium and by ``network`` agent
commands, and nothing else is: certificate checks stay on.

The test makes two CAs: the operator's (given to the stack) and a stranger's. Two tiny
TLS servers on the stack's ``outside`` network, allowlisted on port 443, serve a
certificate from each. Chromium, through the egress proxy's CONNECT, loads the first
and gets a certificate error on the second; so does an agent command with ``network``.
A bad certificate block next to the good one is logged, and the browser still starts.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from deskpod.client import SandboxClient
from deskpod.errors import NavigationError
from deskpod.protocol import ObserveOptions
from deskpod_stack import DEMO_IMAGE, Stack, ok, start_stack, with_client

pytestmark = pytest.mark.integration

BAD_BLOCK = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"

SERVER = r"""
import http.server, os, ssl
for name in ("cert", "key"):
    with open(f"/tmp/{name}.pem", "w") as f:
        f.write(os.environ["TLS_" + name.upper()])
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("<html><body>TLS OK " + os.environ["TLS_NAME"] + "</body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
server = http.server.ThreadingHTTPServer(("0.0.0.0", 443), Page)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""

LISTENING = "import socket; socket.create_connection(('127.0.0.1', 443), timeout=2).close()"
"""Exits 0 once a site's server accepts connections (run inside the site's container)."""

FETCH = r"""
import json, sys, urllib.request
out = {}
for host in sys.argv[1:]:
    try:
        out[host] = urllib.request.urlopen(f"https://{host}/", timeout=15).read().decode()
    except Exception as e:
        out[host] = "error: " + str(e)
print(json.dumps(out))
"""


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _server_cert(host: str, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(host)).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    chain = cert.public_bytes(serialization.Encoding.PEM).decode()
    return chain, key_pem


def _wait_listening(site: Any, timeout_s: float = 60.0) -> None:
    """Wait until ``site``'s server accepts connections: a navigation before that fails in
    the proxy's tunnel (ERR_TUNNEL_CONNECTION_FAILED), not on the certificate."""
    deadline = time.monotonic() + timeout_s
    while site.exec_run(["python3", "-c", LISTENING]).exit_code != 0:
        assert time.monotonic() < deadline, site.logs().decode(errors="replace")[-2000:]
        time.sleep(0.5)


@pytest.fixture(scope="module")
def ca_stack() -> Iterator[Stack]:
    """A stack that trusts the operator's CA (plus a bad block), and two TLS sites."""
    op_key, op_ca = _ca("deskpod operator test CA")
    other_key, other_ca = _ca("stranger test CA")
    cas = op_ca.public_bytes(serialization.Encoding.PEM).decode() + BAD_BLOCK
    gen = start_stack("eca", "1280x800", DESKPOD_TRUSTED_CAS=cas,
                      DESKPOD_EGRESS_ALLOWLIST="demo.test allowed.test trusted.test untrusted.test")
    stack = next(gen)
    sites = []
    try:
        for host, key, ca in (("trusted.test", op_key, op_ca), ("untrusted.test", other_key, other_ca)):
            cert, key_pem = _server_cert(host, key, ca)
            c = stack.docker.containers.create(
                DEMO_IMAGE, ["python3", "-c", SERVER], name=f"{stack.project}-{host.split('.')[0]}",
                environment={"TLS_CERT": cert, "TLS_KEY": key_pem, "TLS_NAME": host},
                labels={"com.docker.compose.project": stack.project}, read_only=True,
                tmpfs={"/tmp": "size=4m"}, cap_drop=["ALL"], network=f"{stack.project}_outside",
                networking_config={f"{stack.project}_outside": stack.docker.api.create_endpoint_config(
                    aliases=[host])},
            )
            sites.append(c)
            c.start()
        for c in sites:
            _wait_listening(c)
        yield stack
    finally:
        for c in sites:
            c.remove(force=True)
        next(gen, None)


def test_chromium_trusts_the_operators_ca_and_no_other(ca_stack: Stack) -> None:
    async def body(client: SandboxClient) -> tuple[Any, str]:
        trusted = await client.navigate("https://trusted.test/", observe=ObserveOptions(page_text=True))
        try:
            other = await client.navigate("https://untrusted.test/", observe=ObserveOptions(page_text=True))
        except NavigationError as exc:
            return trusted, exc.message
        return trusted, other.page_text or ""

    trusted, refused = with_client(ca_stack, body)
    assert "TLS OK trusted.test" in (trusted.page_text or ""), trusted.page_text
    # The stranger's site: a failed navigation (or Chromium's interstitial) naming the error.
    assert "TLS OK" not in refused and "ERR_CERT_AUTHORITY_INVALID" in refused, refused


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
    assert out["trusted.test"] == "<html><body>TLS OK trusted.test</body></html>", out
    assert "CERTIFICATE_VERIFY_FAILED" in out["untrusted.test"], out
    # A command without network gets neither the proxy nor the bundle.
    assert "SSL_CERT_FILE" not in plain["env"], plain
