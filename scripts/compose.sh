#!/usr/bin/env bash
# Run Docker Compose: `docker compose` (v2) where installed, else `docker-compose` (1.29).
#
# Unless DESKPOD_SANDBOX_BRIDGE is set, sandbox_net's bridge is named after the
# compose project (`dp-` and 12 hex digits of the SHA-256 of its name, as
# deskpod.backend.hostguard.project_bridge_name does), so several stacks can run on
# one host, each with its own host firewall rule.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

project="${COMPOSE_PROJECT_NAME:-$(basename "$root")}"
prev=""
for arg in "$@"; do
    case "$prev" in -p|--project-name) project="$arg" ;; esac
    case "$arg" in --project-name=*) project="${arg#--project-name=}" ;; esac
    prev="$arg"
done
# Compose's own normalisation of a project name: lower case, [a-z0-9_-] only.
project="$(printf '%s' "$project" | tr '[:upper:]' '[:lower:]' | tr -cd 'a-z0-9_-')"
if [ -z "${DESKPOD_SANDBOX_BRIDGE:-}" ]; then
    DESKPOD_SANDBOX_BRIDGE="dp-$(printf '%s' "$project" | sha256sum | cut -c1-12)"
    export DESKPOD_SANDBOX_BRIDGE
fi

if docker compose version >/dev/null 2>&1; then
    exec docker compose "$@"
fi
exec docker-compose "$@"
