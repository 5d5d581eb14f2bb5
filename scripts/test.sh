#!/usr/bin/env bash
# Run deskpod's tests.
#
#   scripts/test.sh [PYTEST_ARGS...]       the whole suite (what CI runs): Docker, the base
#                                          image and CA certificates (scripts/prepare.sh),
#                                          Xvfb, openbox and Chromium, mypy, ruff, then every
#                                          test: unit (on two workers), daemon on Xvfb,
#                                          integration in real containers built from this repo
#   scripts/test.sh unit [PYTEST_ARGS...]  the pure tier: tests/unit without the tests marked
#                                          `process`, on two workers; no subprocess, display
#                                          or Docker (tests/unit/conftest.py refuses them)
#   scripts/test.sh lint                   mypy and ruff only
#
# Needs Python >= 3.11; the whole suite also needs Docker (started here when missing and
# run as root). As root on Debian it installs what the display tests need. Every target
# makes .venv, and installs the package with its test extras again whenever pyproject.toml
# changed since the last install. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

tier=all
case "${1:-}" in
    unit | lint) tier=$1; shift ;;
esac

venv() {
    local stamp=.venv/.deskpod-installed
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    if [ ! -e "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        .venv/bin/pip install -q --disable-pip-version-check -e '.[agentd,test]'
        touch "$stamp"
    fi
}

lint() {
    # Settings in pyproject.toml.
    .venv/bin/python -m mypy
    .venv/bin/python -m ruff check .
}

case "$tier" in
    unit)
        venv
        # testpaths applies only when no path is given: `unit tests/unit/test_x.py` runs that file.
        exec .venv/bin/python -m pytest -o testpaths=tests/unit -m 'not process' -n 2 "$@"
        ;;
    lint)
        venv
        lint
        exit 0
        ;;
esac

scripts/prepare.sh

need=()
for bin in Xvfb openbox chromium; do
    command -v "$bin" >/dev/null 2>&1 || need+=("$bin")
done
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends xvfb openbox chromium \
            fonts-noto-cjk fonts-noto-color-emoji fonts-dejavu-core >/dev/null
    else
        echo "test.sh: missing ${need[*]}; install xvfb, openbox and chromium" >&2
        exit 1
    fi
fi

venv
# The package is type-checked and linted, then tested. The integration fixtures build the
# images with compose once per run (cached after the first run).
lint
# Arguments that name test paths run just those, in one pytest process. Otherwise tests/unit
# runs on two workers (its tests share nothing: each has its own temporary folders, ports
# and processes); then tests/display (the daemon on this machine's Xvfb, alone: its input
# tests time what they see); then tests/integration in two processes side by side: BESIDE,
# the backend and pool tests (which make and remove their own sandboxes and mostly wait on
# Docker) and the modules with a stack of their own that time nothing, and the rest (which
# share the compose stacks). The side process's report is
# printed after the other's. Each folder is its own pytest run, so each folder's conftest is
# the `conftest` its test modules import. Exit code 5, no test collected, of some parts only
# (a -k or -m that selects tests of other parts) is not a failure.
for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then
        exec .venv/bin/python -m pytest "$@"
    fi
done
BESIDE=(tests/integration/test_backend.py tests/integration/test_backend_pool.py
        tests/integration/test_kubernetes_backend.py
        tests/integration/test_shared_egress.py tests/integration/test_host_firewall.py
        tests/integration/test_eval.py tests/integration/test_zone.py
        tests/integration/test_downloads.py tests/integration/test_operator_cas.py)
ignore=()
for path in "${BESIDE[@]}"; do ignore+=("--ignore=$path"); done
# Both integration processes use the images: built once here, then cached for each.
PYTHONPATH=tests/integration .venv/bin/python -c 'import deskpod_stack; deskpod_stack.build_images()'
codes=()
.venv/bin/python -m pytest -n 2 "$@" tests/unit && codes+=(0) || codes+=($?)
.venv/bin/python -m pytest "$@" tests/display && codes+=(0) || codes+=($?)
side_log=$(mktemp)
.venv/bin/python -m pytest "$@" "${BESIDE[@]}" >"$side_log" 2>&1 &
side=$!
.venv/bin/python -m pytest "$@" "${ignore[@]}" tests/integration && codes+=(0) || codes+=($?)
wait "$side" && codes+=(0) || codes+=($?)
echo "== tests/integration, the backend and pool tests (run beside the rest):"
cat "$side_log"
rm -f "$side_log"
# 0 when every part passed or collected nothing while another part ran tests; else the
# first part's failure.
ran=0
for code in "${codes[@]}"; do [ "$code" = 0 ] && ran=1; done
for code in "${codes[@]}"; do
    if [ "$code" != 0 ] && { [ "$code" != 5 ] || [ "$ran" = 0 ]; }; then exit "$code"; fi
done
exit 0
