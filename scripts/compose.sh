#!/usr/bin/env bash
# Run Docker Compose: `docker compose` (v2) where installed, else `docker-compose` (1.29).
set -euo pipefail
if docker compose version >/dev/null 2>&1; then
    exec docker compose "$@"
fi
exec docker-compose "$@"
