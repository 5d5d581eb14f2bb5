#!/usr/bin/env bash
# Make sure a Docker engine answers `docker info`.
#
# On machines without an engine, install Debian's
# docker.io and docker-compose and start dockerd in the background. Needs root
# for that path; on a machine that already has Docker it does nothing.
set -euo pipefail

if docker info >/dev/null 2>&1; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "ensure-docker: no Docker engine answers and we are not root; start Docker first" >&2
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
    echo "ensure-docker: installing docker.io and docker-compose from Debian" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q docker.io docker-compose debootstrap iproute2 >/dev/null
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
    echo "ensure-docker: starting dockerd (log: /var/log/dockerd.log)" >&2
    # In its own session, so that the end of the shell (or job) that started it
    # does not take the engine down with its process group.
    setsid nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null &
fi

for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "ensure-docker: dockerd did not answer within 60 s; see /var/log/dockerd.log" >&2
tail -n 30 /var/log/dockerd.log >&2 || true
exit 1
