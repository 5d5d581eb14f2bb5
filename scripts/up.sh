#!/usr/bin/env bash
# deskpod up: build the images, start the egress proxy, the demo site and the
# sandbox, run the demo task through the controller, print the verified result,
# and leave the sandbox running for remote control.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/prepare.sh

# A per-sandbox control token and its SHA-256, kept in .env (mode 600), which
# compose reads: the controller gets the token, the sandbox only the hash.
if ! grep -qs '^DESKPOD_TOKEN_SHA256=' .env; then
    umask 077
    token="$(head -c 32 /dev/urandom | base64 | tr -d '/+=\n')"
    digest="$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)"
    grep -vs '^DESKPOD_TOKEN=' .env > .env.new || true
    printf 'DESKPOD_TOKEN=%s\nDESKPOD_TOKEN_SHA256=%s\n' "$token" "$digest" >> .env.new
    mv .env.new .env
fi

scripts/compose.sh build
scripts/compose.sh up -d egress demo workspace sandbox
status=0
scripts/compose.sh run --rm controller || status=$?

cat <<MSG

deskpod is up. The sandbox stays running for remote control:
  run another task:  scripts/compose.sh run --rm controller deskpod run /opt/deskpod/tasks/demo.yaml --sandbox ws://sandbox:8765/v1/ws
  the control token: .env (DESKPOD_TOKEN)
  stop everything:   scripts/compose.sh down
MSG
exit "$status"
