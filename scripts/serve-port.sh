#!/usr/bin/env bash
# The host's loopback port the stack publishes its controller service (and console) on:
# print it and record it in the stack's .env as DESKPOD_SERVE_PORT, which compose, the
# `deskpod` command and the Python client's attach read (scripts/up.sh runs this).
#
#   scripts/serve-port.sh [--ours] [ENV_FILE [FIRST_PORT]]    # defaults: .env, 8766
#
# First match wins: DESKPOD_SERVE_PORT in the environment (the operator's choice, kept
# even when taken: compose then says so); the port ENV_FILE records, while it is free or
# this stack's own serve holds it (--ours: up.sh found the stack's serve running); else
# FIRST_PORT, or the next free port above it (at most 100 tried), so a second stack on
# one host takes another port instead of failing on 8766. "Free": nothing accepts a TCP
# connection on 127.0.0.1 there (bash's /dev/tcp).
set -euo pipefail
ours=0
if [ "${1:-}" = --ours ]; then ours=1; shift; fi
env_file="${1:-.env}"
first="${2:-8766}"

taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

recorded="$(sed -n 's/^DESKPOD_SERVE_PORT=//p' "$env_file" 2>/dev/null | tail -n 1)"
if [ -n "${DESKPOD_SERVE_PORT:-}" ]; then
    port="$DESKPOD_SERVE_PORT"
elif [ -n "$recorded" ] && { [ "$ours" = 1 ] || ! taken "$recorded"; }; then
    port="$recorded"
else
    port="$first"
    while taken "$port"; do
        port=$((port + 1))
        if [ "$port" -ge $((first + 100)) ]; then
            echo "serve-port: no free port in $first..$((first + 99)) on 127.0.0.1; set DESKPOD_SERVE_PORT" >&2
            exit 1
        fi
    done
fi
if [ "$port" != "$recorded" ]; then
    umask 077
    grep -vs '^DESKPOD_SERVE_PORT=' "$env_file" > "$env_file.new" || true
    printf 'DESKPOD_SERVE_PORT=%s\n' "$port" >> "$env_file.new"
    mv "$env_file.new" "$env_file"
fi
echo "$port"
