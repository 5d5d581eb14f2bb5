#!/usr/bin/env bash
# Run Docker Compose: `docker compose` (v2) where installed, else `docker-compose` (1.29),
# with the variables compose.yaml reads for the bridge name, the base image and labels.
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

# The base image (compose.yaml's BASE_IMAGE build argument): the digest-pinned
# reference the Dockerfiles name, unless it is not here while a debian:bookworm-slim
# that images/base/bootstrap.sh made (no registry digest) is: then that one.
if [ -z "${DESKPOD_BASE_IMAGE:-}" ]; then
    pinned="$(sed -n 's/^ARG BASE_IMAGE=//p' "$root/Dockerfile")"
    if ! docker image inspect "$pinned" >/dev/null 2>&1 \
        && [ "$(docker image inspect -f '{{len .RepoDigests}}' "${pinned%@*}" 2>/dev/null)" = 0 ]; then
        DESKPOD_BASE_IMAGE="${pinned%@*}"
        export DESKPOD_BASE_IMAGE
    fi
fi

# The images' OCI labels: the checkout's commit, its time (UTC) and its origin remote
# (without credentials), unless set.
if [ -z "${DESKPOD_REVISION:-}" ] && git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
    DESKPOD_REVISION="$(git -C "$root" rev-parse HEAD)"
    DESKPOD_CREATED="${DESKPOD_CREATED:-$(TZ=UTC git -C "$root" log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)}"
    export DESKPOD_REVISION DESKPOD_CREATED
fi
if [ -z "${DESKPOD_SOURCE:-}" ] && origin="$(git -C "$root" remote get-url origin 2>/dev/null)"; then
    DESKPOD_SOURCE="$(printf '%s' "$origin" | sed -E 's#^([a-z+]+://)[^/@]*@#\1#')"
    export DESKPOD_SOURCE
fi

# `down` also stops the services of the `demo` profile (the demo site, a demo
# controller still running), unless COMPOSE_PROFILES says otherwise.
for arg in "$@"; do
    if [ "$arg" = down ] && [ -z "${COMPOSE_PROFILES:-}" ]; then
        export COMPOSE_PROFILES=demo
    fi
done

compose() {
    if docker compose version >/dev/null 2>&1; then
        docker compose "$@"
    else
        docker-compose "$@"
    fi
}

# `down` also takes the project's host firewall rule (installed by its hostguard
# service) off the host, when that guard ran: the project's containers are stopped
# first, so nothing runs on its network without the rule. The global options (those
# before `down`) choose the same project and files.
globals=()
for arg in "$@"; do
    if [ "$arg" = down ]; then
        if [ -n "$(compose "${globals[@]}" ps -a -q hostguard 2>/dev/null)" ]; then
            compose "${globals[@]}" stop
            compose "${globals[@]}" run --rm --no-deps -T hostguard remove "$DESKPOD_SANDBOX_BRIDGE" \
                || echo "compose.sh: WARNING: the host firewall rule for $DESKPOD_SANDBOX_BRIDGE may remain" >&2
        fi
        break
    fi
    globals+=("$arg")
done

compose "$@"
