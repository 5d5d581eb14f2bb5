#!/usr/bin/env bash
# Run deskpod's whole test suite: unit tests, daemon tests on a local Xvfb and
# Chromium, and integration tests against real containers built from this repo.
#
# Needs Python >= 3.11 and Docker (started here when missing and run as root).
# As root on Debian it installs what the display tests need (Xvfb, openbox,
# Chromium, fonts). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

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

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[agentd,test]'

# The package is type-checked and linted (settings in pyproject.toml), then tested. The
# integration fixtures build the images with compose (cached after the first run).
.venv/bin/python -m mypy
.venv/bin/python -m ruff check .
exec .venv/bin/python -m pytest "$@"
