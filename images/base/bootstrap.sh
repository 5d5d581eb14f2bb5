#!/usr/bin/env bash
# Provide the base image: the digest-pinned debian:bookworm-slim the Dockerfiles
# name (their BASE_IMAGE default), or DESKPOD_BASE_IMAGE.
#
# Pulls it when a registry is reachable; otherwise builds an equivalent minimal
# Debian bookworm root filesystem with debootstrap and imports it under the tag
# without the digest (debian:bookworm-slim: a digest names a registry's manifest,
# which a local import cannot have). scripts/compose.sh then builds from that tag.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"

PINNED="${DESKPOD_BASE_IMAGE:-$(sed -n 's/^ARG BASE_IMAGE=//p' "$root/Dockerfile")}"
IMAGE="${PINNED%@*}"

if docker image inspect "$PINNED" >/dev/null 2>&1; then
    exit 0
fi
# Bootstrapped before (a local image has no registry digest).
if [ "$(docker image inspect -f '{{len .RepoDigests}}' "$IMAGE" 2>/dev/null)" = 0 ]; then
    exit 0
fi
if timeout 60 docker pull "$PINNED" >/dev/null 2>&1; then
    exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q debootstrap >/dev/null
fi

ROOT="$(mktemp -d)"
trap 'rm -rf "$ROOT"' EXIT
echo "bootstrap: no registry; building $IMAGE with debootstrap" >&2
debootstrap --variant=minbase bookworm "$ROOT" >/dev/null
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
tar -C "$ROOT" -c . | docker import - "$IMAGE" >/dev/null
echo "bootstrap: imported $IMAGE (scripts/compose.sh builds from it instead of $PINNED)" >&2
