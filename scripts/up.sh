#!/usr/bin/env bash
# deskpod up: build the images, start the egress proxy, the demo site, the sandbox
# and the controller service with its web console, run the demo task as a session of
# that service (its confirmations reach the console), print the verified result and
# the console's address, and leave everything running.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/prepare.sh

# Tokens and their SHA-256, kept in .env (mode 600), which compose reads: the
# sandbox's control token (the demo controller gets the token, the sandbox only the
# hash), the controller service's and its approvers' (serve gets only the hashes; its
# clients and approvers the tokens), and the egress proxy's control token (the demo
# controller sets each run's allowlist with it; the proxy gets only the hash).
new_token() {
    local name="$1" token digest
    if ! grep -qs "^${name}_SHA256=" .env; then
        umask 077
        token="$(head -c 32 /dev/urandom | base64 | tr -d '/+=\n')"
        digest="$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)"
        grep -vs "^${name}=" .env > .env.new || true
        printf '%s=%s\n%s_SHA256=%s\n' "$name" "$token" "$name" "$digest" >> .env.new
        mv .env.new .env
    fi
}
new_token DESKPOD_TOKEN
new_token DESKPOD_SERVE_TOKEN
new_token DESKPOD_SERVE_APPROVER_TOKEN
new_token DESKPOD_EGRESS_CONTROL_TOKEN

# The console's port: 8766, or a free one when another stack (or anything) holds it,
# recorded in .env as DESKPOD_SERVE_PORT before compose reads it (scripts/serve-port.sh).
ours=""
if [ -n "$(scripts/compose.sh ps -q serve 2>/dev/null)" ]; then ours=--ours; fi
port="$(scripts/serve-port.sh $ours .env)"
if [ "$port" != 8766 ]; then
    echo "deskpod: the console and the controller service take port $port (8766 is taken or was not chosen)"
fi

scripts/compose.sh --profile demo build
# Plain `docker compose` (and deskpod's pool backend) find the images as :latest too.
if [ -z "${DESKPOD_SANDBOX_IMAGE:-}${DESKPOD_EGRESS_IMAGE:-}${DESKPOD_DEMO_IMAGE:-}${DESKPOD_HOSTGUARD_IMAGE:-}${DESKPOD_CONTROLLER_IMAGE:-}" ]; then
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)"
    for name in sandbox egress demo hostguard controller; do
        if docker image inspect "deskpod/$name:$version" >/dev/null 2>&1; then
            docker tag "deskpod/$name:$version" "deskpod/$name:latest"
        fi
    done
fi
scripts/compose.sh --profile demo up -d egress demo workspace sandbox serve
status=0
scripts/compose.sh --profile demo run --rm controller || status=$?

cat <<MSG

deskpod is up. The sandbox stays running for remote control:
  the console:       http://127.0.0.1:${port}/console/  (from this machine only)
                     sign in with DESKPOD_SERVE_APPROVER_TOKEN from .env (paste it into the form:
                     grep '^DESKPOD_SERVE_APPROVER_TOKEN=' .env); approvals, pauses and take-overs are answered there
  run another task:  scripts/compose.sh --profile demo run --rm controller   (a session of the service: see it on the console)
  the controller service: ws://127.0.0.1:${port}/v1/controller (token: DESKPOD_SERVE_TOKEN in .env;
                     open sessions on its sandbox by the name "stack", no sandbox token: each starts
                     clean; approvers, who alone answer its confirmations, present DESKPOD_SERVE_APPROVER_TOKEN)
  the control token: each session's reset rotates it; the one in force, for your own tools (--token-file):
                     scripts/compose.sh exec -T serve cat /var/lib/deskpod/sandbox/stack.token
  stop everything:   scripts/compose.sh down
MSG
exit "$status"
