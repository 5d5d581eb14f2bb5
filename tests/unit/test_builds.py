"""Build hygiene, without Docker: declared dependencies, the lock files, the images' pins,
tags, labels, and compose.yaml's conventions (health checks, profiles, loopback-only ports).

The images themselves are checked against the lock files in
``tests/integration/test_compose_services.py``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from deskpod.backend.config import default_seccomp_profile
from deskpod.service.console.app import STATIC_DIR

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PYPROJECT["version"]
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
DOCKERFILES = [ROOT / "Dockerfile", *sorted((ROOT / "images").glob("*/Dockerfile"))]
LOCKS = {
    "sandbox.txt": ["agentd"],
    "controller.txt": ["serve", "agents"],
}
"""Each lock file and the extras it holds besides the base dependencies (scripts/lock.sh)."""


def requirements(*extras: str) -> list[Requirement]:
    """pyproject's base dependencies plus those of ``extras``."""
    found = [Requirement(r) for r in PYPROJECT["dependencies"]]
    for extra in extras:
        found += [Requirement(r) for r in PYPROJECT["optional-dependencies"][extra]]
    return found


def read_lock(name: str) -> dict[str, tuple[str, list[str]]]:
    """``{canonical name: (version, [sha256 hashes])}`` of a lock file in requirements/."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current = ""
    for line in (ROOT / "requirements" / name).read_text().splitlines():
        pin = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if pin:
            current = canonicalize_name(pin[1])
            pins[current] = (pin[2], [])
        for digest in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
            pins[current][1].append(digest)
    return pins


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


DEBIAN_MODULES = {"pyatspi": "python3-pyatspi"}
"""Modules a program of the package imports from Debian's packages, not PyPI (run by Debian's
python3 in an image: :mod:`deskpod.agentd.atspi_reader`), with the package the Dockerfile installs."""


def test_every_third_party_import_of_the_package_is_a_declared_dependency() -> None:
    """starlette and typing_extensions were imported but not declared: an install from
    pyproject worked only because another package happened to pull them in. A module of
    Debian's (:data:`DEBIAN_MODULES`) is installed by the Dockerfile instead."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert all(re.search(rf"^\s+{package} \\$", dockerfile, re.M) for package in DEBIAN_MODULES.values())
    declared = {canonicalize_name(r.name) for r in requirements(*PYPROJECT["optional-dependencies"])}
    owners = importlib.metadata.packages_distributions()
    undeclared = {}
    package = ROOT / "runtime" / "deskpod"
    for path in sorted(package.rglob("*.py")):
        if path.is_relative_to(package / "examples"):
            continue  # the example repository a code agent works on, not the package's code
        for module in imported_modules(path) - set(sys.stdlib_module_names) - {"deskpod", "__future__", *DEBIAN_MODULES}:
            dists = {canonicalize_name(d) for d in owners.get(module, [])}
            if not dists & declared:
                undeclared.setdefault(module, []).append(str(path.relative_to(ROOT)))
    assert undeclared == {}, f"imported but not declared in pyproject.toml: {undeclared}"


@pytest.mark.parametrize("lock, extras", LOCKS.items())
def test_each_lock_pins_every_declared_dependency_with_hashes(lock: str, extras: list[str]) -> None:
    """The images install the lock with --require-hashes --no-deps: a dependency added to
    pyproject.toml without running scripts/lock.sh would be missing from the image."""
    pins = read_lock(lock)
    for requirement in [*requirements(*extras), Requirement("setuptools>=68")]:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in requirements/{lock}: run scripts/lock.sh"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), \
            f"requirements/{lock} pins {name}=={version}, outside {requirement}: run scripts/lock.sh"
    unhashed = [name for name, (_, hashes) in pins.items() if not hashes]
    assert unhashed == [], f"pins without hashes in requirements/{lock}: {unhashed}"


def test_websockets_current_majors_are_allowed() -> None:
    """A client library capped below the current major clashes in users' environments."""
    spec = next(r for r in requirements() if r.name == "websockets").specifier
    assert spec.contains("16.0") and spec.contains("17.4"), spec


def dockerfile_args(path: Path) -> dict[str, str]:
    """The defaults of a Dockerfile's ``ARG NAME=VALUE`` lines."""
    return dict(re.findall(r"^ARG ([A-Z_]+)=(\S+)$", path.read_text(), re.MULTILINE))


def test_every_image_builds_from_one_digest_pinned_base() -> None:
    pinned = COMPOSE["x-build-args"]["BASE_IMAGE"]
    default = re.fullmatch(r"\$\{DESKPOD_BASE_IMAGE:-(.+)\}", pinned)
    assert default and re.fullmatch(r"debian:bookworm-slim@sha256:[0-9a-f]{64}", default[1]), pinned
    for path in DOCKERFILES:
        text = path.read_text()
        assert dockerfile_args(path).get("BASE_IMAGE") == default[1], path
        assert re.search(r"^FROM \$\{BASE_IMAGE\}( AS [a-z]+)?$", text, re.MULTILINE), path
        assert "FROM debian" not in text, path


def test_images_are_tagged_and_labelled_with_the_package_version() -> None:
    assert COMPOSE["x-build-args"]["DESKPOD_VERSION"] == VERSION
    for name, service in COMPOSE["services"].items():
        tag = re.fullmatch(r"\$\{DESKPOD_[A-Z]+_IMAGE:-deskpod/([a-z]+):(.+)\}", service["image"])
        assert tag and tag[2] == VERSION, (name, service["image"])
        if "build" in service:
            assert service["build"]["args"] == COMPOSE["x-build-args"], name
    for path in DOCKERFILES:
        assert dockerfile_args(path).get("DESKPOD_VERSION") == VERSION, path
        for stage in re.split(r"^(?=FROM )", path.read_text(), flags=re.MULTILINE)[1:]:
            for key in ("title", "version", "revision", "created", "source"):
                assert f"org.opencontainers.image.{key}=" in stage, (path, key)
            # Declared after the stage's last RUN: a new commit's labels rebuild no other layer.
            assert stage.rindex("\nRUN ") < stage.index("ARG DESKPOD_REVISION"), path


def test_the_integration_test_sites_run_an_image_this_checkout_builds() -> None:
    """The tests' extra sites (allowed.test, blocked.test) once ran ``deskpod/demo:latest``:
    an older build, without the newest fixtures, so tests of new fixtures on those hosts
    failed on a machine that had one and passed where the tag was fresh."""
    extra = yaml.safe_load((ROOT / "tests" / "integration" / "compose.test.yaml").read_text())
    built = {service["image"] for service in COMPOSE["services"].values() if "build" in service}
    for name, service in extra["services"].items():
        if name not in COMPOSE["services"]:  # a site of its own, not a setting of compose.yaml's service
            assert service["image"] in built, (name, service["image"])


def image_healthcheck(service: dict) -> bool:
    """Whether the Dockerfile that builds ``service``'s image (or the service it shares an
    image with) declares a HEALTHCHECK."""
    builder = service if "build" in service else next(
        (s for s in COMPOSE["services"].values() if s["image"] == service["image"] and "build" in s), None)
    if builder is None:
        return False
    build = builder["build"]
    dockerfile = ROOT / build["context"] / build.get("dockerfile", "Dockerfile")
    return "\nHEALTHCHECK " in dockerfile.read_text()


def test_every_long_running_service_has_a_health_check() -> None:
    long_running = {name: s for name, s in COMPOSE["services"].items() if s.get("restart") != "no"}
    assert {"egress", "sandbox", "workspace", "serve", "demo"} <= set(long_running)
    for name, service in long_running.items():
        own = service.get("healthcheck", {})
        assert not own.get("disable"), name
        assert own.get("test") or image_healthcheck(service), f"{name} has no health check"


def test_plain_up_runs_sandbox_proxy_and_serve_and_the_demo_is_a_profile() -> None:
    default = {name for name, s in COMPOSE["services"].items() if not s.get("profiles")}
    assert default == {"hostguard", "egress", "sandbox", "workspace", "serve"}
    assert COMPOSE["services"]["controller"]["profiles"] == ["demo"]
    assert COMPOSE["services"]["demo"]["profiles"] == ["demo"]
    assert "build" not in COMPOSE["services"]["controller"], "the demo controller uses serve's image"


def test_serve_is_published_on_the_hosts_loopback_only() -> None:
    serve = COMPOSE["services"]["serve"]
    assert serve["ports"] == ["127.0.0.1:${DESKPOD_SERVE_PORT:-8766}:8766"]
    # It listens on its address on `outside` (the network that carries the published port),
    # never on sandbox_net, where the sandbox and the agent's workspace are.
    listen = serve["command"][serve["command"].index("--listen") + 1]
    assert listen == "deskpod-serve:8766" and serve["networks"]["outside"]["aliases"] == ["deskpod-serve"]
    assert "deskpod-serve" in json.dumps(serve["healthcheck"]["test"])
    assert "DESKPOD_SERVE_TOKEN" not in serve["environment"], "serve holds only the token's hash"
    assert not any(s.get("ports") for name, s in COMPOSE["services"].items() if name != "serve")


def test_controller_image_has_no_desktop() -> None:
    text = (ROOT / "images" / "controller" / "Dockerfile").read_text()
    install = re.search(r"apt-get install -y --no-install-recommends ([^\n\\]+)", text)
    assert install and set(install[1].split()) == {"ca-certificates", "tini", "python3", "python3-venv"}
    assert "requirements/controller.txt" in text and "--require-hashes --no-deps" in text


def test_the_egress_proxy_logs_to_standard_output() -> None:
    conf = (ROOT / "images" / "egress" / "squid.conf").read_text()
    assert re.search(r"^access_log stdio:/dev/stdout ", conf, re.MULTILINE)
    assert "/var/log/squid" not in conf
    assert not any("/var/log/squid" in t for t in COMPOSE["services"]["egress"]["tmpfs"])


def test_the_seccomp_profile_is_package_data() -> None:
    """The pool backend's default profile is the package's own file, so a regular install
    needs no DESKPOD_SECCOMP_PROFILE (the controller image, a non-editable install, is
    checked in tests/integration/test_compose_services.py); the repository path and
    compose.yaml still reach the same file."""
    shipped = ROOT / "runtime" / "deskpod" / "seccomp" / "sandbox.json"
    assert "seccomp/*.json" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["deskpod"]
    assert default_seccomp_profile() == shipped.resolve()
    assert (ROOT / "seccomp" / "sandbox.json").resolve() == shipped.resolve()
    assert json.loads(shipped.read_text())["defaultAction"] == "SCMP_ACT_ERRNO"
    for name in ("sandbox", "workspace"):
        assert "seccomp:${DESKPOD_SECCOMP_PROFILE:-./runtime/deskpod/seccomp/sandbox.json}" in \
            COMPOSE["services"][name]["security_opt"]


def test_the_consoles_pages_scripts_and_templates_are_package_data() -> None:
    """The controller image installs the package (not editable): every file the console
    serves (its static pages, scripts and style sheet) or renders (its templates) must be
    package data, found where :mod:`deskpod.service.console` reads it."""
    package = ROOT / "runtime" / "deskpod"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["deskpod"]
    shipped = {p for pattern in patterns for p in package.glob(pattern) if p.is_file()}
    console = package / "service" / "console"
    assets = [p for p in console.rglob("*") if p.is_file() and p.suffix in {".html", ".js", ".css"}]
    assert STATIC_DIR.resolve() == (console / "static").resolve()
    assert {"console.js", "live.js", "index.html", "signin.html", "console.css"} <= {p.name for p in assets}
    assert sorted(set(assets) - shipped) == []
