#!/usr/bin/env bash
# Everything the images need before `compose build` on this machine:
# a Docker engine, the base image, and the extra CA certificates for pip.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-docker.sh
images/base/bootstrap.sh

# Behind a TLS-intercepting proxy pip inside `docker build` needs the proxy's CA.
# Extra CAs trusted by this host are copied into certs/ (see certs/README.md);
# DESKPOD_EXTRA_CA_DIR names another folder to take them from.
src="${DESKPOD_EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"
if [ -d "$src" ]; then
    find "$src" -maxdepth 1 -name '*.crt' -exec cp -f {} certs/ \;
fi
