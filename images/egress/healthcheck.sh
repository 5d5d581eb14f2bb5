#!/bin/bash
# Health check: squid answers an HTTP request on its port (any status line will do).
# The request names a reserved domain that no allowlist holds, so squid refuses it
# before any DNS lookup; squid.conf keeps loopback clients' requests out of its log.
set -eu
exec 3<>/dev/tcp/127.0.0.1/3128
printf 'GET http://healthcheck.invalid/ HTTP/1.0\r\n\r\n' >&3
IFS= read -r -t 3 status <&3
case "$status" in
    HTTP/1.*) exit 0 ;;
esac
echo "deskpod-egress: unexpected answer: $status" >&2
exit 1
