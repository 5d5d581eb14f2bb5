"""Every ``DESKPOD_*`` variable's field: its type, default, who reads it and what it means.

The fields are declared in three layers, each the base of the next, so that the model's
order (the docs' table order) stays the order written here: :class:`HostVariables`
(the configuration file, control tokens, the controller and the CLI),
:class:`SandboxVariables` (the daemon and the workspace runner in their containers) and
:class:`StackVariables` (the Docker backend, warm pools, images and compose). The model
read from the environment and the file, with its checks, is
:class:`deskpod.settings.load.Settings`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, NoDecode

__all__ = ["ENV_PREFIX", "HostVariables", "SIDES", "SandboxVariables", "Side", "StackVariables", "variable_name"]

ENV_PREFIX: Final = "DESKPOD_"
"""The prefix of every deskpod environment variable."""

Side = Literal["controller", "daemon", "runner", "backend", "compose", "scripts"]
"""Who reads a variable: ``controller`` (the controller, the CLI and ``deskpod serve`` on
the host), ``daemon`` (agentd in the sandbox container), ``runner`` (the workspace runner,
the workspace container's PID 1), ``backend`` (the Docker backend and warm pools on the
host), ``compose`` (``compose.yaml`` only), ``scripts`` (``scripts/``, ``images/``)."""

SIDES: Final[tuple[Side, ...]] = get_args(Side)
"""Every :data:`Side`, in the order the docs' table lists them."""


def variable_name(field: str) -> str:
    """The environment variable of a settings field (``screen_size`` → ``DESKPOD_SCREEN_SIZE``)."""
    return ENV_PREFIX + field.upper()


def _field(default: Any, *sides: Side, doc: str, default_doc: str | None = None, **constraints: Any) -> Any:
    """A settings field: its default, who reads it, its description (the table's "meaning")
    and, where the default is ``None`` standing for a computed one, how the table shows it."""
    extra: dict[str, Any] = {"sides": list(sides)}
    if default_doc is not None:
        extra["default_doc"] = default_doc
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


class HostVariables(BaseSettings):
    """The configuration file, the control tokens, and what the controller and the CLI read."""

    # The configuration file itself.
    config: Path | None = _field(
        None, "controller", "backend",
        doc="the TOML configuration file (keys: the field names, e.g. `screen_size = \"1920x1080\"`); "
            "environment only. The daemon and the workspace runner read no file",
        default_doc="`$XDG_CONFIG_HOME/deskpod/config.toml` (`~/.config/deskpod/config.toml`), if it exists",
    )

    # Control tokens.
    token: SecretStr | None = _field(
        None, "controller", "daemon",
        doc="the control token (the controller's side), at least 16 characters; the daemon accepts it too, "
            "for development only (`deskpod audit` fails a sandbox that holds it)",
        default_doc="(required by the controller)",
    )
    token_sha256: str | None = _field(
        None, "daemon", "compose",
        doc="the token's SHA-256 in hex (the sandbox's side); `scripts/up.sh` writes both to `.env`",
        default_doc="(required by the sandbox)",
    )
    token_file: Path | None = _field(
        None, "daemon",
        doc="a file holding the control token, read by the daemon when neither `DESKPOD_TOKEN_SHA256` nor "
            "`DESKPOD_TOKEN` is set (development)",
    )

    # The controller and the CLI.
    sandbox_url: str = _field(
        "ws://127.0.0.1:8765/v1/ws", "controller",
        doc="the sandbox daemon's websocket URL (`deskpod run`, `deskpod code`)",
    )
    audit_dir: Path | None = _field(
        None, "controller",
        doc="the folder of audit logs, screenshots and failure scenes",
        default_doc="`audit/` in the state folder (`~/.local/state/deskpod/audit`)",
    )
    pool: str = _field("default", "controller", doc="the warm pool `deskpod pool` and `deskpod reset` act on")
    serve_listen: str = _field(
        "127.0.0.1:8766", "controller", doc="`HOST:PORT` the controller service (`deskpod serve`) listens on",
    )
    stack_env: Path = _field(
        Path(".env"), "controller",
        doc="the compose stack's `.env` (`scripts/up.sh` writes it): where a client on the Docker host reads the "
            "stack's published port (`DESKPOD_SERVE_PORT`) and tokens (`deskpod.attach`, the CLI's "
            "`--service` hint) when they are not in the environment; a relative path is from the current folder",
    )
    serve_token: SecretStr | None = _field(
        None, "controller", doc="the bearer token clients of `deskpod serve` present",
        default_doc="(`deskpod serve` needs it or its hash)",
    )
    serve_token_sha256: str | None = _field(
        None, "controller", doc="the SHA-256 (hex) of `DESKPOD_SERVE_TOKEN`; the service then never holds the token",
    )
    serve_approver_token: SecretStr | None = _field(
        None, "controller",
        doc="the bearer token of `deskpod serve`'s approver connections (a human's console), which alone answer "
            "confirmations; it must differ from `DESKPOD_SERVE_TOKEN`",
        default_doc="(none: no approver can connect, unanswered confirmations are denials)",
    )
    serve_approver_token_sha256: str | None = _field(
        None, "controller", doc="the SHA-256 (hex) of `DESKPOD_SERVE_APPROVER_TOKEN`",
    )
    serve_metrics_token: SecretStr | None = _field(
        None, "controller",
        doc="the bearer token a scraper presents to read `GET /metrics` on `deskpod serve`'s address (Prometheus "
            "metrics); a token of its own, which reads the metrics and nothing else (neither the agents' nor the "
            "approvers' token reads them)",
        default_doc="(none: the service's address serves no `/metrics`)",
    )
    serve_metrics_token_sha256: str | None = _field(
        None, "controller", "compose",
        doc="the SHA-256 (hex) of `DESKPOD_SERVE_METRICS_TOKEN` (compose's `serve` takes this one from `.env`)",
    )
    serve_metrics_listen: str | None = _field(
        None, "controller",
        doc="`HOST:PORT` of a second listener of `deskpod serve` that serves `GET /metrics` without a token; a "
            "loopback address only (`127.0.0.1`, `::1`, `localhost`), else the service refuses to start",
        default_doc="(none)",
    )
    serve_sandboxes: Annotated[frozenset[str], NoDecode] = _field(
        frozenset(), "controller", "compose",
        doc="comma-separated sandboxes `deskpod serve` vouches for or owns (a TOML list of strings in the file). "
            "`URL` (`ws://sandbox:8765/v1/ws`, recognised by the endpoint it reaches): vouched for, only a session on it may "
            "type a host-held secret (`type_secret`) or ask a person for a credential (`request_credential`). "
            "`NAME=URL token_file=PATH [token_env=VAR]`: owned (and vouched for): sessions open it by `NAME` "
            "without its token, and start clean, the service resetting it first and writing the rotated token "
            "to `PATH` (mode 0600; `VAR`: the token it was started with, for a missing file or a restarted "
            "sandbox). `NAME=pool:POOL`: a warm pool of this host (`deskpod pool up --name POOL`): each session "
            "opened by `NAME` leases a fresh sandbox of it, released (reset by the pool) when the run ends. "
            "Sessions on any other sandbox still run, without secrets or credentials",
        default_doc="(none: no session types a secret or asks for a credential)",
    )
    console: bool = _field(
        True, "controller", doc="serve the web console (`/console/`) on `deskpod serve`'s address",
    )
    console_tokens_file: Path | None = _field(
        None, "controller",
        doc="the console's users, one `NAME ROLE SHA256` per line (`ROLE`: `viewer` or `approver`; `SHA256`: of "
            "the token the user signs in with; `#` starts a comment); the approver token signs in as `approver` too",
        default_doc="(none: only the approver token signs in)",
    )
    console_origins: str | None = _field(
        None, "controller", "compose",
        doc="comma-separated origins the console is opened at (`http://127.0.0.1:8766`): state-changing requests "
            "and websockets from any other `Origin`, and requests for any other host, are refused",
        default_doc="`http://127.0.0.1:PORT` and `http://localhost:PORT` of `DESKPOD_SERVE_LISTEN`",
    )
    console_secure_cookie: bool | None = _field(
        None, "controller",
        doc="mark the console's session cookie `Secure` (a console behind TLS)",
        default_doc="on when every console origin is `https://`",
    )
    mcp_token: SecretStr | None = _field(
        None, "controller", doc="the bearer token clients of `deskpod mcp --transport http` present",
        default_doc="(`deskpod mcp --transport http` needs it or its hash)",
    )
    mcp_token_sha256: str | None = _field(
        None, "controller", doc="the SHA-256 (hex) of `DESKPOD_MCP_TOKEN`; the MCP server then never holds the token",
    )
    mcp_session_idle_s: float = _field(
        1800.0, "controller",
        doc="how long a session of `deskpod mcp --transport http` may stay idle (no request in flight, no open "
            "stream), seconds: then it ends as a client's `DELETE` ends it (its run ends, its sandbox is reset or "
            "released) and its id is refused, so a client that vanished holds no sandbox",
        gt=0, allow_inf_nan=False,
    )
    audit_key: Path | None = _field(
        None, "controller",
        doc="the controller's Ed25519 private key sealing every audit log (a 0600 file, created on first use; "
            "`signing.pub` beside it is its public half, to export; nothing trusts it for checking)",
        default_doc="`audit/signing.key` in the state folder",
    )
    audit_public_key: Path | None = _field(
        None, "controller",
        doc="the pinned public key (PEM, from `deskpod audit-key` on the controller's host) that `deskpod "
            "verify-log`, `deskpod replay` and the console check audit log seals with; keep it outside the audit "
            "folder, where whoever rewrites a log could replace it. Never taken from beside the logs",
        default_doc="(none: `verify-log` needs `--public-key`, else exit 5; the console checks with the key it "
                    "seals with)",
    )
    secrets_file: Path | None = _field(
        None, "controller",
        doc="a JSON file of host-held secrets `type_secret` may type, `{\"NAME\": {\"value\", \"domains\"}}` "
            "(mode 0600 or 0400, this user's, else `deskpod serve` refuses to start); `DESKPOD_SECRET_<NAME>` and "
            "`DESKPOD_SECRET_<NAME>_DOMAINS` add one each",
        default_doc="(none: only `DESKPOD_SECRET_<NAME>` variables)",
    )
    traces_endpoint: str | None = _field(
        None, "controller",
        doc="the OTLP/HTTP endpoint the controller exports its traces of runs and steps to, e.g. "
            "`http://collector:4318/v1/traces` (needs `deskpod[serve]`); the standard "
            "`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` turn traces on as well",
        default_doc="(none: no traces, unless a standard `OTEL_EXPORTER_OTLP_*ENDPOINT` is set)",
    )


class SandboxVariables(HostVariables):
    """What the daemon (agentd) and the workspace runner read in their containers."""

    # The daemon (agentd) in the sandbox container.
    screen_size: str = _field(
        "1280x800", "daemon", "backend", "compose",
        doc="the Xvfb screen size, `WIDTHxHEIGHT` in pixels: at most 8000 a side and 7680x4320 pixels in all "
            "(the daemon refuses a larger one at start)",
    )
    device_scale_factor: float = _field(
        1.0, "daemon", "backend", "compose", doc="the browser's device scale factor, 0.5 to 4 (HiDPI: 2 renders pages at two screen "
                           "pixels per CSS pixel; coordinates stay screen pixels)",
        ge=0.5, le=4.0, allow_inf_nan=False,
    )
    display: str | None = _field(None, "daemon", doc="the X display name", default_doc="`$DISPLAY`, else `:99`")
    display_refresh_hz: int = _field(
        240, "daemon", "backend", "compose",
        doc="the display's refresh rate, frames a second (30 to 480), which Chromium paints by: a settled "
            "screenshot waits for about two frames, so it comes sooner at a higher rate; an idle page draws "
            "nothing at any rate, an endless animation one frame each (a spinner: 0.15 of a core at 60, 0.30 at "
            "240 on the 2-core machine of BENCHMARKS.md). A screen whose width × height × rate is over 2^32 (a RandR "
            "mode's dot clock) runs at the highest rate under it: 7680x4320 at 129",
        ge=30, le=480,
    )
    display_grant_host: str = _field(
        "sandbox", "daemon",
        doc="the sandbox's host name as the workspace container resolves it, in a display grant's `display` "
            "(`sandbox:99`)",
    )
    port: int = _field(8765, "daemon", doc="the daemon's port (on the container's interfaces)", ge=1, le=65535)
    start_url: str | None = _field(
        None, "daemon", "backend", doc="Chromium's first page", default_doc="`about:blank`",
    )
    proxy: str | None = _field(
        None, "daemon", doc="Chromium's proxy URL", default_doc="`$HTTPS_PROXY`, else `$HTTP_PROXY`",
    )
    allowed_origins: Annotated[frozenset[str], NoDecode] = _field(
        frozenset(), "daemon",
        doc="websocket `Origin`s accepted, separated by commas (a TOML list in the file); by default a request "
            "with any `Origin` is refused",
        default_doc="(none)",
    )
    chromium: str = _field("/usr/bin/chromium", "daemon", doc="the Chromium binary")
    manage_session: bool = _field(
        True, "daemon",
        doc="`0`: attach to an already running display instead of starting Xvfb, the window manager and Chromium",
    )
    standby_browser: bool = _field(
        False, "daemon", "backend", "compose",
        doc="`on`: keep a standby desktop (its own X server, window manager and fresh Chromium on the next "
            "display number), started after each in-place reset and swapped in at the next one (faster resets; "
            "see SECURITY.md, \"Reset\")",
        default_doc="`off`",
    )
    settle_by_signal: bool = _field(
        True, "daemon",
        doc="`0`: settle by the quiet window alone (frames compared until the screen is unchanged for "
            "`settle_window_s`), as before settling by signal; for benchmarks (`python -m bench latency`)",
    )
    runtime_dir: Path = _field(
        Path("/tmp/deskpod"), "daemon", doc="the daemon's runtime folder (browser profile, Xauthority, logs)",
    )
    workspace_runner: str = _field(
        "workspace:8770", "daemon", doc="where agentd forwards workspace requests: the workspace runner's `host:port`",
    )
    apps_runner: str | None = _field(
        None, "daemon", doc="where agentd asks for desktop applications (`open_app`): the applications runner's "
                            "`host:port` in the desktop profile's zone (compose sets `desktop:8771`); unset: none",
        default_doc="(none)",
    )
    trusted_cas: str | None = _field(
        None, "daemon", "runner", "backend", "compose",
        doc="extra CA certificates, PEM text (one or more `-----BEGIN CERTIFICATE-----` blocks, CA:TRUE), that "
            "Chromium and `network` agent commands trust at run time (`certs/README.md`), e.g. "
            "`\"$(cat my-ca.crt)\"`. Certificate checks stay on; a bad block is logged and left out",
        default_doc="(none)",
    )
    reset_wipe: Annotated[tuple[Path, ...] | None, NoDecode] = _field(
        None, "daemon",
        doc="the folders a reset empties, separated by colons (a TOML list in the file): absolute, never `/`; "
            "they must hold the runtime folder (the browser's profile; with a standby desktop its `-seat1` sibling) "
            "and the home folder, or the daemon refuses to start",
        default_doc="`/tmp:/dev/shm:$HOME`",
    )

    # The workspace runner in the workspace container.
    workspace: Path = _field(Path("/workspace"), "runner", doc="the code agents' workspace folder")
    runner_state: Path = _field(
        Path("/tmp/deskpod-runner"), "runner", doc="the runner's scratch folder (per-command Xauthority files)",
    )
    runner_host: str = _field("0.0.0.0", "runner", doc="the address the runner listens on")
    runner_port: int = _field(8770, "runner", doc="the runner's port", ge=1, le=65535)
    runner_client: str | None = _field(
        None, "runner", doc="the workspace runner answers only connections from the address this host name resolves "
                            "to, agentd's (compose sets `sandbox`), and from its own loopback (its health check); "
                            "unset: any", default_doc="(any)",
    )
    apps_client: str | None = _field(
        None, "runner", doc="the applications runner (the desktop profile's zone) answers only connections from "
                            "the address this host name resolves to, agentd's (compose sets `sandbox`); unset: any",
        default_doc="(any)",
    )


class StackVariables(SandboxVariables):
    """What the Docker backend and warm pools read, and what only compose and the scripts read."""

    # The Docker backend and warm pools; images and the stack (compose).
    sandbox_image: str | None = _field(
        None, "backend", "compose", doc="the sandbox image", default_doc="the backend's `SANDBOX_IMAGE`",
    )
    egress_image: str | None = _field(
        None, "backend", "compose", doc="the egress proxy image", default_doc="the backend's `EGRESS_IMAGE`",
    )
    hostguard_image: str | None = _field(
        None, "backend", "compose", doc="the host guard image", default_doc="the backend's `HOSTGUARD_IMAGE`",
    )
    demo_image: str | None = _field(
        None, "compose", doc="the demo site's image (and the integration tests')", default_doc="compose.yaml's",
    )
    desktop_image: str | None = _field(
        None, "backend", "compose", doc="the desktop applications' zone's image (the `desktop` profile)",
        default_doc="the backend's `DESKTOP_IMAGE`",
    )
    desktop: bool = _field(
        False, "backend",
        doc="`on`: each pool slot also runs the desktop applications' zone (compose.yaml's `desktop` profile: "
            "`open_app`), sharing a memory-only `/workspace` volume of its own with the slot's workspace container "
            "(docs/guides/desktop.md)",
        default_doc="`off`",
    )
    egress_allowlist: str = _field(
        "demo.test", "backend", "compose", doc="domains the egress proxy lets through (ports 80 and 443, websockets included), separated by "
            "spaces or commas; a `host:port` entry lets that host through on that port only",
    )
    outside_network: str = _field(
        "bridge", "backend", doc="the existing Docker network each pool slot's egress proxy joins to reach sites",
    )
    seccomp_profile: Path | None = _field(
        None, "backend", "compose", doc="the sandbox's seccomp profile",
        default_doc="`seccomp/sandbox.json` of the checkout",
    )
    name_prefix: str = _field(
        "deskpod", "backend", doc="the prefix of every container and network a pool creates",
        pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,40}$",
    )
    host_firewall: bool = _field(
        True, "backend", "compose",
        doc="`off`: the host guard installs no rule, and the sandbox can reach the host's services; only for "
            "engines without a host firewall (Docker Desktop). `deskpod audit` then fails `host_unreachable`",
        default_doc="`on`",
    )
    host_iptables: Literal["auto", "nft", "legacy"] = _field(
        "auto", "backend", "compose",
        doc="which iptables the host guard edits: `auto` (where Docker's chains are), `nft` or `legacy`",
    )
    subnet_pool: str | None = _field(
        None, "backend",
        doc="an address range (CIDR, e.g. `10.220.0.0/16`) each pool slot's network takes a free subnet of, "
            "instead of Docker's default address pools (which hold about 30 networks)",
        default_doc="Docker's default address pools",
    )
    subnet_size: int = _field(
        28, "backend", doc="the prefix length of each slot's subnet taken from `DESKPOD_SUBNET_POOL` "
                           "(a slot uses 4 addresses: gateway, egress proxy, workspace, sandbox)", ge=16, le=29,
    )
    slot_memory: str | None = _field(
        None, "backend",
        doc="the memory of one pool slot (sandbox + workspace + egress proxy, compose size notation, e.g. "
            "`720m`), split by the backend's fixed policy; `auto`: the engine's memory less a 2 GiB reserve, "
            "divided by the pool's size",
        default_doc="the full limits (3 GiB sandbox, 2 GiB workspace, 512 MiB proxy)",
    )
    pool_lease_s: float = _field(
        60.0, "backend",
        doc="how long a pool lease lasts after its last renewal, seconds; its holder renews it every third of "
            "that while it runs, so a killed holder's sandbox is back in the pool (reset) within it",
        gt=0, allow_inf_nan=False,
    )
    state_dir: Path | None = _field(
        None, "backend", doc="the folder of pool state files and leased tokens",
        default_doc="`$XDG_STATE_HOME/deskpod` (`~/.local/state/deskpod`)",
    )
    k8s_namespace: str = _field(
        "deskpod", "backend", doc="the Kubernetes backend's namespace (`deskpod eval --backend kubernetes`)",
    )
    k8s_warm_pool: str = _field("deskpod", "backend", doc="the `SandboxWarmPool` the Kubernetes backend claims from")
    k8s_api_url: str | None = _field(
        None, "backend", doc="the Kubernetes API server's URL",
        default_doc="the in-cluster configuration, else the kubeconfig",
    )
    k8s_bootstrap_token_file: Path | None = _field(
        None, "backend", doc="the file holding the bootstrap token warm pods accept until adopted (the "
                             "`deskpod-bootstrap` Secret, mounted read-only)",
        default_doc="none: the Kubernetes backend refuses to start",
    )
    sandbox_bridge: str = _field(
        "dp-sandbox", "compose",
        doc="`sandbox_net`'s bridge name, the one the host firewall rule names; at most 15 characters, one per "
            "stack on a host (`scripts/compose.sh` derives `dp-` + 12 hex digits of the project name's SHA-256)",
        max_length=15,
    )
    egress_daemon: str = _field(
        "sandbox:8765", "compose", "scripts",
        doc="agentd's `host:port` as the egress proxy resolves it, where its grant check asks about egress grants "
            "(`images/egress/`)",
    )
    egress_control: str | None = _field(
        None, "controller",
        doc="`http://host:port` of the sandbox's egress proxy control endpoint (compose: `http://egress:3129`); "
            "`deskpod run` and `deskpod serve` (sessions on `DESKPOD_SANDBOX_URL`) then give the proxy each run's "
            "allowlist and restore the stack's after; a pool slot's own proxy comes from the lease (`ID.egress`)",
        default_doc="(none: only the browser's interception holds a run's list)",
    )
    egress_control_token: SecretStr | None = _field(
        None, "controller", "compose",
        doc="the bearer token of the egress proxy's control endpoint (the controller's side; never in the sandbox)",
    )
    egress_control_token_sha256: str | None = _field(
        None, "compose", "scripts",
        doc="its SHA-256 in hex, the egress proxy's side (`images/egress/egress_control.py`; none: the endpoint "
            "is off and the proxy keeps the stack's allowlist); `scripts/up.sh` writes both to `.env`",
    )
    egress_control_listen: str = _field(
        "0.0.0.0:3129", "scripts",
        doc="`host:port` the egress proxy's control endpoint listens on, inside its container "
            "(`images/egress/egress_control.py`)",
    )
    egress_mode: Literal["single", "tenants"] = _field(
        "single", "scripts",
        doc="the egress proxy's mode (`images/egress/`): `single` serves one sandbox (compose, a Docker pool "
            "slot); `tenants` serves many (the Kubernetes egress Deployment), each a tenant the controller "
            "registers at the control endpoint with its addresses, daemon and allowlist; an unregistered "
            "client is refused everything",
    )
    serve_port: int = _field(
        8766, "controller", "compose", "scripts",
        doc="the Docker host's loopback port compose publishes the `serve` service on (its console and "
            "`/v1/controller`); `scripts/up.sh` takes 8766, or a free port when that one is taken, records it in "
            "`.env` and prints it; clients on the host read it there (`DESKPOD_STACK_ENV`)",
        ge=1, le=65535,
    )
    controller_image: str | None = _field(
        None, "compose", doc="the slim controller image (the `serve` and `controller` services)",
        default_doc="compose.yaml's",
    )
    revision: str = _field("unknown", "compose", "scripts",
                           doc="the images' `org.opencontainers.image.revision` label (`scripts/compose.sh`: the "
                               "checkout's commit)")
    created: str = _field("unknown", "compose", "scripts",
                          doc="the images' `org.opencontainers.image.created` label (`scripts/compose.sh`: the "
                              "commit's time, UTC)")
    source: str = _field("unknown", "compose", doc="the images' `org.opencontainers.image.source` label")
    extra_ca_dir: Path | None = _field(
        None, "scripts", doc="where `scripts/prepare.sh` takes extra CA certificates for `docker build` from",
        default_doc="`/usr/local/share/ca-certificates`",
    )
    base_image: str = _field(
        "debian:bookworm-slim", "compose", "scripts",
        doc="every image's base (the build argument `BASE_IMAGE`); compose.yaml defaults to the digest-pinned "
            "`debian:bookworm-slim@sha256:...`, and `scripts/compose.sh` sets the bootstrapped `debian:bookworm-slim` "
            "(`images/base/bootstrap.sh`) when only that one exists (docs: Hosts, proxies and builds)",
        default_doc="the digest-pinned `debian:bookworm-slim` (compose.yaml's `x-build-args`)",
    )
