#!/bin/sh
# deskpod host guard: keep a sandbox network's containers from opening connections
# to the Docker host.
#
#   deskpod-hostguard install BRIDGE...   insert the rule for each bridge (idempotent)
#   deskpod-hostguard remove BRIDGE...    delete every copy of it
#   deskpod-hostguard check BRIDGE...     exit 0 only when every rule is in place
#
# The rule, for IPv4 and (when the host has IPv6) IPv6, first in INPUT:
#
#   -i BRIDGE -m conntrack --ctstate NEW,INVALID -m comment --comment deskpod-hostguard:BRIDGE -j DROP
#
# INPUT sees only packets addressed to the host itself, on any of its addresses:
# traffic between containers on the bridge (the sandbox to its egress proxy) is
# bridged, not input, and the host's own connections to a sandbox come back
# ESTABLISHED. Docker 20.10 gives even `internal: true` networks a gateway address
# on the host, and the host's INPUT policy is often ACCEPT: without this rule every
# service listening on 0.0.0.0 on the host answers the sandbox.
#
# Needs host networking (`network_mode: host`) and CAP_NET_ADMIN. The iptables
# backend is the one Docker uses on this host (DESKPOD_HOST_IPTABLES=auto: where
# Docker's chains are; or nft / legacy). iptables-legacy also needs CAP_NET_RAW and
# the host's /run/xtables.lock (shared with dockerd); nf_tables needs neither.
#
# DESKPOD_HOST_FIREWALL=off makes `install` succeed without a rule (for engines
# without a host firewall, e.g. Docker Desktop); `deskpod audit` then fails
# host_unreachable. `remove` and `check` ignore it. Exit status: 0 done, 1 failed (the message says why), 2 usage.
set -eu

TAG=deskpod-hostguard
WAIT_S=10

say() { echo "hostguard: $*"; }
die() { echo "hostguard: ERROR: $*" >&2; exit 1; }
usage() {
    echo "usage: deskpod-hostguard install|remove|check BRIDGE..." >&2
    exit 2
}

action="${1:-}"
case "$action" in
    install|remove|check) shift ;;
    *) usage ;;
esac
[ "$#" -gt 0 ] || usage
for bridge in "$@"; do
    case "$bridge" in
        ""|-*|*[!A-Za-z0-9_.-]*) die "invalid bridge name '$bridge' (letters, digits, '_', '.', '-')" ;;
    esac
    [ "${#bridge}" -le 15 ] || die "bridge name '$bridge' is longer than 15 characters"
done

case "${DESKPOD_HOST_FIREWALL:-on}" in
    on) ;;
    off)
        if [ "$action" = install ]; then
            say "WARNING: DESKPOD_HOST_FIREWALL=off: no rule for $*; containers on it can reach this host"
            exit 0
        fi
        ;;
    *) die "DESKPOD_HOST_FIREWALL must be on or off, not '${DESKPOD_HOST_FIREWALL}'" ;;
esac

# ---- which iptables backend Docker uses here ---------------------------------
nft_rules="$(iptables-nft -w "$WAIT_S" -S 2>&1)" \
    || die "cannot read the host's nf_tables rules ($nft_rules): run with network_mode host and CAP_NET_ADMIN"
docker_chains=no
backend="${DESKPOD_HOST_IPTABLES:-auto}"
case "$backend" in
    nft)
        case "$nft_rules" in *"-N DOCKER"*) docker_chains=yes ;; esac
        ;;
    legacy)
        legacy_rules="$(iptables-legacy -w "$WAIT_S" -S 2>&1)" \
            || die "cannot read the host's iptables-legacy rules ($legacy_rules): needs CAP_NET_RAW and the host's /run/xtables.lock"
        case "$legacy_rules" in *"-N DOCKER"*) docker_chains=yes ;; esac
        ;;
    auto)
        case "$nft_rules" in
            *"-N DOCKER"*) backend=nft docker_chains=yes ;;
            *)
                backend=nft
                if [ -s /proc/net/ip_tables_names ]; then
                    legacy_rules="$(iptables-legacy -w "$WAIT_S" -S 2>&1)" \
                        || die "Docker's chains are not in nf_tables and iptables-legacy is unreadable ($legacy_rules): if Docker uses iptables-legacy here, run the guard with DESKPOD_HOST_IPTABLES=legacy, CAP_NET_RAW and the host's /run/xtables.lock"
                    case "$legacy_rules" in *"-N DOCKER"*) backend=legacy docker_chains=yes ;; esac
                fi
                ;;
        esac
        ;;
    *) die "DESKPOD_HOST_IPTABLES must be auto, nft or legacy, not '$backend'" ;;
esac

families=4
if [ -e /proc/net/if_inet6 ]; then
    families="4 6"
fi

ipt() {
    # ipt FAMILY ARGS...: the backend's iptables or ip6tables.
    family="$1"
    shift
    if [ "$family" = 6 ]; then
        "ip6tables-$backend" -w "$WAIT_S" "$@"
    else
        "iptables-$backend" -w "$WAIT_S" "$@"
    fi
}

rule() {
    # rule FAMILY BRIDGE COMMAND...: run iptables COMMAND (-C INPUT, -I INPUT 1, ...)
    # with the bridge's rule: its match, its tag and its target.
    rule_family="$1"
    rule_bridge="$2"
    shift 2
    ipt "$rule_family" "$@" -i "$rule_bridge" -m conntrack --ctstate NEW,INVALID \
        -m comment --comment "$TAG:$rule_bridge" -j DROP
}

count() {
    # count FAMILY BRIDGE: how many copies of the bridge's rule INPUT holds.
    ipt "$1" -S INPUT | grep -cF -e "--comment $TAG:$2 " -e "--comment \"$TAG:$2\" " || true
}

status=0
for bridge in "$@"; do
    case "$action" in
        install)
            if [ "$docker_chains" = no ] && [ ! -e "/sys/class/net/$bridge" ]; then
                die "neither Docker's chains nor bridge $bridge are visible: not in the host's network namespace (network_mode host?)"
            fi
            for family in $families; do
                if ! rule "$family" "$bridge" -C INPUT 2>/dev/null; then
                    rule "$family" "$bridge" -I INPUT 1 \
                        || die "could not insert the IPv$family rule for $bridge ($backend)"
                fi
                # Two guards racing between -C and -I leave two copies: keep one.
                while [ "$(count "$family" "$bridge")" -gt 1 ]; do
                    rule "$family" "$bridge" -D INPUT
                done
                rule "$family" "$bridge" -C INPUT \
                    || die "the IPv$family rule for $bridge is not in INPUT after inserting it ($backend)"
                say "IPv$family: new connections from $bridge to this host are dropped ($backend)"
            done
            ;;
        remove)
            for family in $families; do
                removed=0
                while rule "$family" "$bridge" -C INPUT 2>/dev/null; do
                    rule "$family" "$bridge" -D INPUT || die "could not delete the IPv$family rule for $bridge"
                    removed=$((removed + 1))
                done
                say "IPv$family: removed $removed rule(s) for $bridge ($backend)"
            done
            ;;
        check)
            for family in $families; do
                if rule "$family" "$bridge" -C INPUT 2>/dev/null; then
                    say "IPv$family: rule for $bridge in place ($backend)"
                else
                    say "IPv$family: NO rule for $bridge ($backend)"
                    status=1
                fi
            done
            ;;
    esac
done
exit "$status"
