#!/usr/bin/env bash
# Run deskpod's tests.
#
#   scripts/test.sh [PYTEST_ARGS...]       the whole suite (what CI runs): Docker, the base
#                                          image and CA certificates (scripts/prepare.sh),
#                                          Xvfb, openbox and Chromium, mypy, ruff, then every
#                                          test: unit, daemon on Xvfb, integration in real
#                                          containers built from this repo
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
# images with compose (cached after the first run).
lint
exec .venv/bin/python -m pytest "$@"
