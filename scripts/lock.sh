#!/usr/bin/env bash
# Refresh the images' lock files from pyproject.toml (run after changing a dependency):
#   requirements/sandbox.txt     base dependencies + [agentd]          (Dockerfile)
#   requirements/controller.txt  base dependencies + [serve] + [agents] (images/controller)
# Each pins every package, transitive ones included, with the SHA-256 of every file
# PyPI holds for that version (so the lock serves amd64 and arm64 builds alike); the
# Dockerfiles install them with `pip install --require-hashes --no-deps`.
# Resolved for Debian bookworm's Python (3.11, Linux) with uv (installed into .venv when
# missing). Behind a TLS-intercepting proxy uv uses the system's trust store.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
    .venv/bin/pip install -q --disable-pip-version-check 'uv>=0.5'
fi

lock() {
    local out="$1"; shift
    UV_NATIVE_TLS=1 .venv/bin/uv pip compile --quiet --generate-hashes \
        --python-version 3.11 --python-platform linux \
        --custom-compile-command scripts/lock.sh \
        pyproject.toml requirements/build.in "$@" -o "$out"
}
lock requirements/sandbox.txt --extra agentd
lock requirements/controller.txt --extra serve --extra agents
