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
# and processes), then the rest of tests/ in one process (their tests share one desktop and
# the compose stacks). The rest is collected from tests/ itself, folder by folder, so each
# folder's conftest is the `conftest` its test modules import from (given as two paths,
# pytest would load both folders' conftests first and the display tests would import the
# integration one). Exit code 5, no test collected, of one part only (a -k or -m that
# selects tests of the other part) is not a failure.
for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then
        exec .venv/bin/python -m pytest "$@"
    fi
done
unit=0
rest=0
.venv/bin/python -m pytest -n 2 "$@" tests/unit || unit=$?
.venv/bin/python -m pytest "$@" --ignore=tests/unit tests || rest=$?
if [ "$unit" = 5 ] && [ "$rest" != 5 ]; then unit=0; fi
if [ "$rest" = 5 ] && [ "$unit" != 5 ]; then rest=0; fi
if [ "$unit" != 0 ]; then exit "$unit"; fi
exit "$rest"
