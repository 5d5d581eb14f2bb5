"""TLS test sites for integration stacks: a CA minted for the test, certificates it signs, and
sites on a stack's ``outside`` network that serve them.

The stack trusts a CA through ``DESKPOD_TRUSTED_CAS`` (PEM text, :func:`pem`); a site is a
container of the demo image, named by a network alias, started by :func:`start_site` and
waited for by :func:`wait_listening`. :func:`start_ca_stack` puts it together.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from deskpod_stack import DEMO_IMAGE, Stack, start_stack

__all__ = ["BAD_BLOCK", "make_ca", "pem", "server_cert", "start_ca_stack", "start_site", "wait_listening"]

BAD_BLOCK = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
"""A certificate block that is not one, given to :func:`start_ca_stack`'s stacks after the operator's CA."""

LISTENING = "import socket; socket.create_connection(('127.0.0.1', 443), timeout=2).close()"
"""Exits 0 once a site's server accepts connections on 443 (run inside the site's container)."""


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA (P-256, valid from an hour ago for two days) named ``cn``."""
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


def pem(cert: x509.Certificate) -> str:
    """``cert`` as PEM text."""
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def server_cert(host: str, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate) -> tuple[str, str]:
    """A server certificate for ``host`` signed by ``ca``.

    Returns:
        The certificate and its private key (PKCS#8), both PEM text.
    """
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
    return pem(cert), key_pem


def start_site(stack: Stack, host: str, command: list[str], environment: dict[str, str]) -> Any:
    """Start a container of the demo image running ``command`` as ``host`` on the stack's
    ``outside`` network (read-only, a 4 MiB ``/tmp``, no capabilities); the stack's project
    label makes ``down`` remove it. Returns the started container."""
    container = stack.docker.containers.create(
        DEMO_IMAGE, command, name=f"{stack.project}-{host.split('.')[0]}", environment=environment,
        labels={"com.docker.compose.project": stack.project}, read_only=True,
        tmpfs={"/tmp": "size=4m"}, cap_drop=["ALL"], network=f"{stack.project}_outside",
        networking_config={f"{stack.project}_outside": stack.docker.api.create_endpoint_config(aliases=[host])},
    )
    container.start()
    return container


def wait_listening(site: Any, timeout_s: float = 60.0) -> None:
    """Wait until ``site``'s server accepts connections on 443: a navigation before that fails in
    the proxy's tunnel (ERR_TUNNEL_CONNECTION_FAILED), not on the certificate."""
    deadline = time.monotonic() + timeout_s
    while site.exec_run(["python3", "-c", LISTENING]).exit_code != 0:
        assert time.monotonic() < deadline, site.logs().decode(errors="replace")[-2000:]
        time.sleep(0.5)


def start_ca_stack(name: str, **extra_env: str) -> Iterator[Stack]:
    """Start a stack (:func:`deskpod_stack.start_stack`, ``extra_env`` added) whose sandbox trusts
    an operator CA minted here (``DESKPOD_TRUSTED_CAS``, then :data:`BAD_BLOCK`), with three
    allowlisted sites of the demo server on ``outside``, each on http (80) and https (443):
    ``trusted.test`` and ``secure.test`` with certificates of the operator's CA,
    ``untrusted.test`` with one of a stranger's CA. Yield it, then take it down."""
    op_key, op_ca = make_ca("deskpod operator test CA")
    other_key, other_ca = make_ca("stranger test CA")
    gen = start_stack(name, "1280x800", DESKPOD_TRUSTED_CAS=pem(op_ca) + BAD_BLOCK,
                      DESKPOD_EGRESS_ALLOWLIST="demo.test allowed.test trusted.test untrusted.test secure.test",
                      **extra_env)
    stack = next(gen)
    sites = []
    try:
        for host, key, ca in (("trusted.test", op_key, op_ca), ("untrusted.test", other_key, other_ca),
                              ("secure.test", op_key, op_ca)):
            cert, key_pem = server_cert(host, key, ca)
            sites.append(start_site(stack, host, ["python3", "/opt/demo/server.py"], {
                "DEMO_PORTS": "80", "DEMO_TLS_PORTS": "443", "DEMO_TLS_CERT": cert, "DEMO_TLS_KEY": key_pem}))
        for site in sites:
            wait_listening(site)
        yield stack
    finally:
        for site in sites:
            site.remove(force=True)
        next(gen, None)
