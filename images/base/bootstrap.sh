#!/usr/bin/env bash
# Provide the base image debian:bookworm-slim.
#
# Pulls it when a registry is reachable; otherwise builds an equivalent
# minimal Debian bookworm root filesystem with debootstrap and imports it
# under the same tag, so the project's Dockerfiles build unchanged.
set -euo pipefail

IMAGE="${DESKPOD_BASE_IMAGE:-debian:bookworm-slim}"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    exit 0
fi
if timeout 60 docker pull "$IMAGE" >/dev/null 2>&1; then
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
echo "bootstrap: imported $IMAGE" >&2
