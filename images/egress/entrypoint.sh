#!/bin/sh
# Write the egress allowlist from DESKPOD_EGRESS_ALLOWLIST (domains separated by
# spaces and/or commas; ".example.com" also allows its subdomains), then run squid
# in the foreground. Logs: the container's standard output (access log, one line per
# request, denials included) and standard error (squid's own messages).
set -eu

allowlist=/run/squid/allowlist.txt   # /etc/squid/allowlist.txt links here
domains=$(printf '%s' "${DESKPOD_EGRESS_ALLOWLIST:-demo.test}" | tr ',' ' ')

: > "$allowlist"
for d in $domains; do
    case "$d" in
        *[!A-Za-z0-9.-]*) echo "deskpod-egress: ignoring invalid domain: $d" >&2; continue ;;
    esac
    printf '%s\n' "$d" >> "$allowlist"
done
echo "deskpod-egress: allowlist: $(tr '\n' ' ' < "$allowlist")" >&2

# squid refuses an empty dstdomain file in some versions; a reserved name that can
# never resolve keeps "allow nothing" working.
if [ ! -s "$allowlist" ]; then
    echo "deskpod-egress: empty allowlist, all egress is denied" >&2
    echo "nothing.invalid" > "$allowlist"
fi

# The controller's control endpoint for each run's allowlist (egress_control.py); off
# without DESKPOD_EGRESS_CONTROL_TOKEN_SHA256. squid, started next, becomes its parent.
rm -f /run/squid/task-allowlist.txt
if [ -n "${DESKPOD_EGRESS_CONTROL_TOKEN_SHA256:-}" ]; then
    /usr/local/bin/deskpod-egress-control &
fi

exec squid -N -f /etc/squid/squid.conf "$@"
