#!/bin/sh
# Write the egress allowlist from DESKPOD_EGRESS_ALLOWLIST (domains separated by
# spaces and/or commas; ".example.com" also allows its subdomains; "host:port" allows
# that host on that port only, beyond 80 and 443), then run squid
# in the foreground. Logs: the container's standard output (access log, one line per
# request, denials included) and standard error (squid's own messages).
set -eu

allowlist=/run/squid/allowlist.txt   # /etc/squid/allowlist.txt links here
hostports=/run/squid/hostports.conf  # squid.conf includes it: acl extra_hostports
domains=$(printf '%s' "${DESKPOD_EGRESS_ALLOWLIST:-demo.test}" | tr ',' ' ')

: > "$allowlist"
: > "$hostports"
n=0
extra=""
listed=""
for d in $domains; do
    case "$d" in
        *:*)
            host=${d%:*}
            port=${d##*:}
            case "$host" in ''|*[!A-Za-z0-9.-]*) echo "deskpod-egress: ignoring invalid entry: $d" >&2; continue ;; esac
            case "$port" in ''|0*|*[!0-9]*) echo "deskpod-egress: ignoring invalid entry: $d" >&2; continue ;; esac
            if [ "${#port}" -gt 5 ] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
                echo "deskpod-egress: ignoring invalid port: $d" >&2
                continue
            fi
            n=$((n + 1))
            printf 'acl hostport%d_host dstdomain -n %s\nacl hostport%d_port port %d\nacl hostport%d all-of hostport%d_host hostport%d_port\n' \
                "$n" "$host" "$n" "$port" "$n" "$n" "$n" >> "$hostports"
            extra="$extra hostport$n"
            listed="$listed $host:$port"
            continue
            ;;
        *[!A-Za-z0-9.-]*) echo "deskpod-egress: ignoring invalid domain: $d" >&2; continue ;;
    esac
    printf '%s\n' "$d" >> "$allowlist"
done
if [ -n "$extra" ]; then
    echo "acl extra_hostports any-of$extra" >> "$hostports"
else
    echo "acl extra_hostports port 0" >> "$hostports"
fi
echo "deskpod-egress: allowlist: $(tr '\n' ' ' < "$allowlist")$listed" >&2

# squid refuses an empty dstdomain file in some versions; a reserved name that can
# never resolve keeps "allow nothing" working.
if [ ! -s "$allowlist" ]; then
    echo "deskpod-egress: empty allowlist, all egress is denied" >&2
    echo "nothing.invalid" > "$allowlist"
fi

# The mode: single (one sandbox: a compose stack, a Docker pool slot) or tenants (many
# sandboxes, each registered by the controller: the Kubernetes egress Deployment).
mode=${DESKPOD_EGRESS_MODE:-single}
case "$mode" in
    single|tenants) ;;
    *) echo "deskpod-egress: DESKPOD_EGRESS_MODE must be single or tenants, not: $mode" >&2; exit 2 ;;
esac
if [ "$mode" = tenants ] && [ -z "${DESKPOD_EGRESS_CONTROL_TOKEN_SHA256:-}" ]; then
    echo "deskpod-egress: the tenants mode needs DESKPOD_EGRESS_CONTROL_TOKEN_SHA256 (tenants register there)" >&2
    exit 2
fi
ln -sf "/etc/squid/access-$mode.conf" /run/squid/access.conf
echo "deskpod-egress: mode: $mode" >&2

# The controller's control endpoint for each run's allowlist (egress_control.py); off
# without DESKPOD_EGRESS_CONTROL_TOKEN_SHA256. squid, started next, becomes its parent.
rm -f /run/squid/task-allowlist.txt /run/squid/tenants.json
if [ -n "${DESKPOD_EGRESS_CONTROL_TOKEN_SHA256:-}" ]; then
    /usr/local/bin/deskpod-egress-control &
fi

exec squid -N -f /etc/squid/squid.conf "$@"
