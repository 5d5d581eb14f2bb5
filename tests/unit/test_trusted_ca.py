"""The operator's run-time CAs (DESKPOD_TRUSTED_CAS): parsing, the NSS import's
certutil calls, the bundle for ``network`` commands, and the daemon's and runner's use."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from deskpod.agentd.browser import trusted_ca
from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.runner import Runner, RunnerConfig
from deskpod.agentd.session import DesktopSession
from deskpod.backend.config import DockerBackendConfig, sandbox_service, workspace_service
from deskpod.agentd.browser.trusted_ca import bundle_env, import_into_nss, load_trusted_cas, write_bundle
from deskpod.errors import SettingsError, TrustedCaError

TOKEN_SHA256 = "0" * 64


def _cert(name: str, ca: bool) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now)
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    return builder.sign(key, hashes.SHA256()).public_bytes(Encoding.PEM).decode()


@pytest.fixture(scope="module")
def ca_pem() -> str:
    return _cert("deskpod test CA", ca=True)


def test_no_value_is_no_ca() -> None:
    assert load_trusted_cas(None) == ([], [])
    assert load_trusted_cas("  \n") == ([], [])


def test_valid_cas_are_kept_in_order(ca_pem: str) -> None:
    other = _cert("second CA", ca=True)
    cas, errors = load_trusted_cas(ca_pem + "\n" + other)
    assert errors == []
    assert [c.subject for c in cas] == ["CN=deskpod test CA", "CN=second CA"]
    assert [c.index for c in cas] == [1, 2]
    assert cas[0].pem.decode() == ca_pem


def test_a_bad_block_is_a_typed_error_and_the_others_stay(ca_pem: str, caplog: pytest.LogCaptureFixture) -> None:
    leaf = _cert("just a server", ca=False)
    broken = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----"
    cas, errors = load_trusted_cas("\n".join([leaf, ca_pem, broken]))
    assert [c.index for c in cas] == [2]
    assert all(isinstance(e, TrustedCaError) and isinstance(e, SettingsError) for e in errors)
    assert [e.detail["certificate"] for e in errors] == [1, 3]
    assert "not a CA certificate" in errors[0].message and "CN=just a server" in errors[0].message
    assert "not a valid PEM certificate" in errors[1].message
    assert "DESKPOD_TRUSTED_CAS certificate 1" in caplog.text and "DESKPOD_TRUSTED_CAS certificate 3" in caplog.text


def test_text_without_a_certificate_is_an_error() -> None:
    cas, errors = load_trusted_cas("/etc/ssl/my-ca.crt")
    assert cas == [] and len(errors) == 1 and "no PEM certificate" in errors[0].message


def test_too_long_a_value_is_ignored(ca_pem: str) -> None:
    cas, errors = load_trusted_cas(ca_pem * (trusted_ca.MAX_TRUSTED_CAS_BYTES // len(ca_pem) + 1))
    assert cas == [] and len(errors) == 1 and "longer than" in errors[0].message


def _fake_certutil(tmp_path: Path, fail_on: str | None = None) -> tuple[str, Path]:
    """A certutil stand-in that records each call (argv, stdin) and makes cert9.db on -N."""
    record = tmp_path / "calls.jsonl"
    script = tmp_path / "certutil"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "argv = sys.argv[1:]\n"
        f"open({str(record)!r}, 'a').write(json.dumps([argv, sys.stdin.read()]) + '\\n')\n"
        "if argv[0] == '-N':\n"
        "    open(os.path.join(argv[2].removeprefix('sql:'), 'cert9.db'), 'w').close()\n"
        f"if {fail_on!r} in argv:\n"
        "    sys.stderr.write('SEC_ERROR_BAD_DATABASE: security library: bad database.')\n"
        "    sys.exit(255)\n"
    )
    script.chmod(0o755)
    return str(script), record


def _calls(record: Path) -> list[list[object]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.process
def test_import_creates_the_database_and_adds_each_ca_as_a_tls_anchor(tmp_path: Path, ca_pem: str) -> None:
    certutil, record = _fake_certutil(tmp_path)
    home = tmp_path / "home"
    cas, _ = load_trusted_cas(ca_pem + _cert("second CA", ca=True))
    assert import_into_nss(cas, home, certutil=certutil) == []
    db = f"sql:{home / '.pki' / 'nssdb'}"
    calls = _calls(record)
    assert calls[0] == [["-N", "-d", db, "--empty-password"], ""]
    assert calls[1] == [["-A", "-d", db, "-n", "deskpod-trusted-1", "-t", "C,,", "-a"], ca_pem]
    assert calls[2][0] == ["-A", "-d", db, "-n", "deskpod-trusted-2", "-t", "C,,", "-a"]
    # A second start (the database exists) only adds them again.
    assert import_into_nss(cas, home, certutil=certutil) == []
    assert [c[0][0] for c in _calls(record)] == ["-N", "-A", "-A", "-A", "-A"]


def test_import_without_cas_runs_nothing(tmp_path: Path) -> None:
    certutil, record = _fake_certutil(tmp_path)
    assert import_into_nss([], tmp_path / "home", certutil=certutil) == []
    assert not record.exists() and not (tmp_path / "home").exists()


@pytest.mark.process
def test_a_failed_import_is_returned_not_raised(tmp_path: Path, ca_pem: str) -> None:
    certutil, _ = _fake_certutil(tmp_path, fail_on="-A")
    cas, _ = load_trusted_cas(ca_pem)
    errors = import_into_nss(cas, tmp_path / "home", certutil=certutil)
    assert len(errors) == 1 and isinstance(errors[0], TrustedCaError)
    assert "certificate 1" in errors[0].message and "SEC_ERROR_BAD_DATABASE" in errors[0].message


@pytest.mark.process
def test_a_missing_certutil_is_an_error_and_the_session_goes_on(tmp_path: Path, ca_pem: str) -> None:
    config = AgentdConfig(token_sha256=TOKEN_SHA256, home_dir=tmp_path / "home", runtime_dir=tmp_path / "rt",
                          trusted_cas=ca_pem + "garbage -----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----")
    errors = DesktopSession(config).trust_operator_cas()
    assert all(isinstance(e, TrustedCaError) for e in errors)
    assert any("certificate 2" in e.message for e in errors)


def test_daemon_config_reads_the_variable(ca_pem: str) -> None:
    config = AgentdConfig.from_env({"DESKPOD_TOKEN_SHA256": TOKEN_SHA256, "DESKPOD_TRUSTED_CAS": ca_pem})
    assert config.trusted_cas == ca_pem
    assert AgentdConfig.from_env({"DESKPOD_TOKEN_SHA256": TOKEN_SHA256}).trusted_cas is None


def test_bundle_is_the_system_cas_then_the_operators(tmp_path: Path, ca_pem: str) -> None:
    system = tmp_path / "system.pem"
    system.write_text("SYSTEM\n")
    cas, _ = load_trusted_cas(ca_pem)
    path = write_bundle(cas, tmp_path / "state" / "trusted-ca.pem", system=system)
    assert path is not None and path.read_text() == "SYSTEM\n" + ca_pem
    assert write_bundle([], tmp_path / "none.pem", system=system) is None
    env = bundle_env(path)
    assert set(env) == {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
                        "NODE_EXTRA_CA_CERTS"}
    assert set(env.values()) == {str(path)}


def test_runner_gives_the_bundle_to_network_commands_only(tmp_path: Path, ca_pem: str) -> None:
    def runner(cas: str | None) -> Runner:
        return Runner(RunnerConfig(workspace=tmp_path / "ws", home=tmp_path / "home", state_dir=tmp_path / "state",
                                   proxy="http://egress:3128", trusted_cas=cas), is_init=False)

    with_cas = runner(ca_pem)
    env = with_cas._network_env("grant-credential")
    assert env["HTTPS_PROXY"].startswith("http://") and env["SSL_CERT_FILE"] == str(tmp_path / "state/trusted-ca.pem")
    assert Path(env["SSL_CERT_FILE"]).read_text().endswith(ca_pem)
    # No grant: no network, no proxy, no bundle.
    assert with_cas._network_env(None) == {}
    assert "SSL_CERT_FILE" not in runner(None)._network_env("grant-credential")


def test_runner_config_reads_the_variable(ca_pem: str) -> None:
    assert RunnerConfig.from_env({"DESKPOD_TRUSTED_CAS": ca_pem}).trusted_cas == ca_pem


def test_a_pools_sandbox_and_workspace_get_the_variable(ca_pem: str) -> None:
    config = DockerBackendConfig.from_env({"DESKPOD_TRUSTED_CAS": ca_pem}, seccomp_profile="/dev/null")
    assert sandbox_service(config, TOKEN_SHA256)["environment"]["DESKPOD_TRUSTED_CAS"] == ca_pem
    assert workspace_service(config)["environment"]["DESKPOD_TRUSTED_CAS"] == ca_pem
