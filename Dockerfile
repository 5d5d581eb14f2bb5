# deskpod sandbox image: Xvfb + openbox + Chromium + the deskpod daemon (agentd).
#
# Build context is the repository root:   docker build --target sandbox -t deskpod/sandbox:0.1.0 .
# (the last stage, `desktop`, is the desktop profile's applications' zone: see its comment).
# (compose.yaml builds it as deskpod/sandbox:<version> with the OCI labels' values).
# Behind a TLS-intercepting proxy, put its CA certificate(s) (*.crt, PEM) in certs/
# first; see certs/README.md.
#
# Run it with compose.yaml (read-only root, tmpfs for mutable state, cap_drop ALL,
# no-new-privileges, seccomp/sandbox.json); never with --privileged, and Chromium
# always keeps its own sandbox.
# The same image runs the workspace container (compose.yaml's `workspace` service:
# uid 1001, entrypoint `python -m deskpod.agentd.runner`), where agent commands run.
#
# The base is pinned by digest (Docker Hub's multi-platform index of
# debian:bookworm-slim). Without a registry, images/base/bootstrap.sh makes a local
# debian:bookworm-slim and scripts/compose.sh builds FROM it (BASE_IMAGE, docs/guides/
# proxies-builds.md, "Without a registry"). The same default is in every image's Dockerfile and in
# compose.yaml (tests/unit/test_builds.py keeps them equal).
ARG BASE_IMAGE=debian:bookworm-slim@sha256:d5d3f9c23164ea16f31852f95bd5959aad1c5e854332fe00f7b3a20fcc9f635c
FROM ${BASE_IMAGE} AS sandbox

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# System packages. No recommends: chromium-sandbox (a setuid helper) is not wanted,
# Chromium uses its user-namespace sandbox (see seccomp/README.md).
# /etc/chromium.d/dev-shm is dropped: it makes Debian's chromium wrapper pass
# --disable-dev-shm-usage whenever /dev/shm is under 3.8 GB, which would move
# Chromium's shared memory onto /tmp; the sandbox gets a sized /dev/shm instead.
# Docs, man pages and gettext translations are never read in the sandbox; keep
# dpkg from unpacking them. git and python3-pytest serve the code agents'
# workspace tools (diffs and rollback; the example repository's tests).
RUN printf '%s\n' \
        'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
        'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
        'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias' \
        > /etc/dpkg/dpkg.cfg.d/deskpod-slim \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
        ca-certificates \
        tini \
        xvfb \
        openbox \
        chromium \
        fonts-noto-cjk \
        fonts-noto-color-emoji \
        fonts-dejavu-core \
        python3 \
        python3-venv \
        git \
        python3-pytest \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && rm -f /etc/chromium.d/dev-shm

# Fonts for the scripts of the most-spoken languages beyond those above (Indic, Southeast
# Asian, Ethiopic, Tibetan, Javanese, Urdu's letters...): Debian's Noto core set, in a layer
# of its own so the layer above keeps its cache. Without them such pages show only boxes
# (images/demo/fixtures/fonts-scripts.html lists the letters checked).
RUN apt-get update \
 && apt-get install -y --no-install-recommends fonts-noto-core \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

# WebGL on the CPU: Mesa's llvmpipe behind GLX, which Chromium's ANGLE uses in its GPU
# process (deskpod/agentd/browser/chromium.py, WEBGL_ARGS). xvfb pulls these in today;
# named here so WebGL does not depend on another package's dependencies. A layer of its
# own, after the big one, so that layer keeps its cache.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgl1-mesa-dri libglx-mesa0 libgl1 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

# fontconfig's system cache, built in a layer of its own: a cache records each font
# folder's mtime to the nanosecond, and an image layer keeps mtimes to the second, so a
# cache built in the layer that installed the fonts no longer matched once that layer was
# committed. Then every first fontconfig client of a container (Chromium's start)
# rescanned all fonts into a user cache (0.26 s measured; 0.01 s with this cache).
RUN fc-cache -f

# certutil (libnss3-tools) imports the operator's run-time CAs into Chromium's NSS
# database (DESKPOD_TRUSTED_CAS; certs/README.md, deskpod/agentd/browser/trusted_ca.py).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libnss3-tools \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

# Python deps first (they change rarely): exactly the lock file's pins, each checked
# against its SHA-256 (requirements/sandbox.txt, made from pyproject.toml's base
# dependencies and [agentd] by scripts/lock.sh; --no-deps: nothing unlisted comes in).
# The package itself is installed afterwards with --no-deps.
# Optional extra CA certificates (corporate / intercepting proxies), certs/*.crt,
# are trusted by pip for this step only: they never enter the image's trust store,
# so nothing in the sandbox (Chromium included) trusts them. CAs to trust at run
# time come in DESKPOD_TRUSTED_CAS instead (certs/README.md).
COPY certs/ /tmp/certs/
COPY requirements/sandbox.txt /tmp/requirements.txt
RUN cat /etc/ssl/certs/ca-certificates.crt > /tmp/pip-ca.pem \
 && for f in /tmp/certs/*.crt; do [ -f "$f" ] && cat "$f" >> /tmp/pip-ca.pem; done; \
    python3 -m venv /opt/deskpod/venv \
 && PIP_CERT=/tmp/pip-ca.pem /opt/deskpod/venv/bin/pip install --require-hashes --no-deps -r /tmp/requirements.txt \
 && rm -rf /tmp/requirements.txt /tmp/pip-ca.pem /tmp/certs

# The package itself: offline, with the setuptools installed above.
COPY pyproject.toml README.md /src/
COPY runtime/ /src/runtime/
RUN set -e; \
    /opt/deskpod/venv/bin/pip install --no-deps --no-build-isolation '/src[agentd]'; \
    rm -rf /src/build /src/runtime/*.egg-info; \
    ln -s /opt/deskpod/venv/lib/python3.11/site-packages/deskpod/tasks /opt/deskpod/tasks

# Chromium managed policy (file://, chrome://, javascript: and loopback, where the
# daemon listens, blocked; no extensions, password manager, autofill, sync or
# printing; downloads to /tmp/downloads).
# chrome://* is blocked, but the new-tab page stays usable (URLAllowlist wins over
# URLBlocklist); about:blank is not a chrome:// URL and is unaffected.
RUN mkdir -p /etc/chromium/policies/managed \
 && python3 -c 'import json, sys; json.dump({ \
      "URLBlocklist": ["file://*", "chrome://*", "javascript://*", "localhost", "127.0.0.1", "[::1]", "0.0.0.0"], \
      "URLAllowlist": ["chrome://newtab", "chrome://new-tab-page", "chrome://new-tab-page-third-party"], \
      "ExtensionInstallBlocklist": ["*"], \
      "PasswordManagerEnabled": False, \
      "AutofillAddressEnabled": False, \
      "AutofillCreditCardEnabled": False, \
      "SyncDisabled": True, \
      "PrintingEnabled": False, \
      "DownloadDirectory": "/tmp/downloads", \
      "PromptForDownloadLocation": False, \
      "BrowserSignin": 0, \
      "MetricsReportingEnabled": False, \
      "DefaultBrowserSettingEnabled": False, \
    }, sys.stdout, indent=2)' > /etc/chromium/policies/managed/deskpod.json

# No blinking text caret (Chromium reads GTK's setting): a still screen stays
# byte-identical, which confirmations bound to a screenshot's hash rely on.
RUN mkdir -p /etc/xdg/gtk-3.0 /etc/xdg/gtk-4.0 \
 && printf '[Settings]\ngtk-cursor-blink = false\n' | tee /etc/xdg/gtk-3.0/settings.ini > /etc/xdg/gtk-4.0/settings.ini

# Unprivileged users; no sudo, no setuid/setgid binaries anywhere in the image.
# deskpod (1000) runs agentd, Xvfb, openbox and Chromium in the sandbox container;
# agent (1001) runs the workspace runner and every command an agent starts, in the
# workspace container (same image, see compose.yaml and SECURITY.md "Trust zones").
RUN groupadd --gid 1000 deskpod \
 && useradd --uid 1000 --gid 1000 --home-dir /home/deskpod --create-home --shell /bin/bash deskpod \
 && groupadd --gid 1001 agent \
 && useradd --uid 1001 --gid 1001 --home-dir /home/agent --create-home --shell /bin/bash agent \
 && install -d -o 1001 -g 1001 -m 0700 /workspace \
 && install -d -o 1000 -g 1000 -m 0700 /var/lib/deskpod/audit \
 && find / -xdev -perm /6000 -type f -exec chmod a-s {} + \
 && chmod 0644 /etc/chromium/policies/managed/deskpod.json

# deskpod's own processes non-dumpable: the kernel marks a process so when it execs
# a binary it may execute but not read (execve(2), "dumpable"), and then refuses its
# /proc/<pid>/mem, environ and fd, and ptrace, to every other process of the same uid.
# So the real binaries of tini (the container's init, which a reset cannot kill),
# Python (agentd, and anything else run with python3), Xvfb and openbox are 0711.
# Not Chromium's: its sandbox must write its own user namespace maps, which fails
# for a non-dumpable process ("No usable sandbox").
RUN chmod 0711 "$(readlink -f /usr/bin/tini)" "$(readlink -f /usr/bin/python3)" \
        "$(readlink -f /usr/bin/Xvfb)" "$(readlink -f /usr/bin/openbox)"

ENV HOME=/home/deskpod \
    PATH=/opt/deskpod/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    DISPLAY=:99 \
    XDG_RUNTIME_DIR=/tmp/xdg \
    PYTHONUNBUFFERED=1

USER deskpod
WORKDIR /home/deskpod
EXPOSE 8765 8770
# agentd answers GET /healthz with 200 once Xvfb, the window manager and Chromium run.
# (Plain http.client: the proxy variables must not apply to loopback.)
HEALTHCHECK --interval=5s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import http.client, sys; c = http.client.HTTPConnection('127.0.0.1', 8765, timeout=3); c.request('GET', '/healthz'); sys.exit(0 if c.getresponse().status == 200 else 1)"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-m", "deskpod.agentd"]

# OCI annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
# compose.yaml passes the values (scripts/compose.sh: the checkout's commit, its time
# and its origin remote); declared last, so a new commit rebuilds no other layer.
ARG BASE_IMAGE
ARG DESKPOD_VERSION=0.1.0
ARG DESKPOD_REVISION=unknown
ARG DESKPOD_CREATED=unknown
ARG DESKPOD_SOURCE=unknown
LABEL org.opencontainers.image.title="deskpod sandbox" \
      org.opencontainers.image.description="Xvfb, openbox, Chromium and the deskpod daemon (agentd); also the workspace runner" \
      org.opencontainers.image.version="${DESKPOD_VERSION}" \
      org.opencontainers.image.revision="${DESKPOD_REVISION}" \
      org.opencontainers.image.created="${DESKPOD_CREATED}" \
      org.opencontainers.image.source="${DESKPOD_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"


# The desktop applications' zone (compose profile `desktop`, service `desktop`;
# docs/guides/desktop.md, SECURITY.md "Trust zones"): the applications an agent opens
# (deskpod.protocol.APPS: xterm, Mousepad, Thunar, AbiWord, Gnumeric, Zathura, Ristretto), a
# D-Bus session bus of the zone's own with its accessibility bus (at-spi2-core; pyatspi for
# deskpod.agentd.atspi_reader, on Debian's python3; GTK's introspection data, so the agent's
# own Python programs can show windows too), and the applications runner
# (python -m deskpod.agentd.apps_runner, PID 1), as uid 1001, the workspace's (/workspace
# is shared with the workspace container, whose runner can then empty whatever the
# applications made there at a reset). No Chromium,
# no X server: the applications reach the sandbox's display through the daemon's X gate
# as untrusted clients. The package's venv is the sandbox stage's, copied.
FROM ${BASE_IMAGE} AS desktop
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1
# The sandbox stage's dpkg excludes (no docs, man pages or translations) and GTK settings
# (no blinking caret: a still screen stays byte-identical), copied, not written twice.
COPY --from=sandbox /etc/dpkg/dpkg.cfg.d/deskpod-slim /etc/dpkg/dpkg.cfg.d/deskpod-slim
COPY --from=sandbox /etc/xdg/gtk-3.0/settings.ini /etc/xdg/gtk-3.0/settings.ini
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 \
        xterm \
        mousepad \
        thunar \
        abiword \
        gnumeric \
        zathura \
        zathura-pdf-poppler \
        ristretto \
        dbus-daemon \
        at-spi2-core \
        python3-pyatspi \
        gir1.2-gtk-3.0 \
        fonts-dejavu-core \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
RUN groupadd --gid 1001 agent \
 && useradd --uid 1001 --gid 1001 --home-dir /home/apps --create-home --shell /bin/bash agent \
 && install -d -o 1001 -g 1001 -m 0770 /workspace \
 && find / -xdev -perm /6000 -type f -exec chmod a-s {} + \
 && chmod 0711 "$(readlink -f /usr/bin/python3)"
COPY --from=sandbox /opt/deskpod /opt/deskpod
ENV HOME=/home/apps \
    PATH=/opt/deskpod/venv/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONUNBUFFERED=1
USER agent
WORKDIR /workspace
EXPOSE 8771
ENTRYPOINT ["python", "-m", "deskpod.agentd.apps_runner"]
ARG BASE_IMAGE
ARG DESKPOD_VERSION=0.1.0
ARG DESKPOD_REVISION=unknown
ARG DESKPOD_CREATED=unknown
ARG DESKPOD_SOURCE=unknown
LABEL org.opencontainers.image.title="deskpod desktop applications" \
      org.opencontainers.image.description="The desktop profile's applications and the deskpod applications runner" \
      org.opencontainers.image.version="${DESKPOD_VERSION}" \
      org.opencontainers.image.revision="${DESKPOD_REVISION}" \
      org.opencontainers.image.created="${DESKPOD_CREATED}" \
      org.opencontainers.image.source="${DESKPOD_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
