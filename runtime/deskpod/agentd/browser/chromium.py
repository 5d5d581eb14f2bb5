"""Chromium's command line in the sandbox.

The daemon starts Chromium (:mod:`deskpod.agentd.session`) with the argv of
:func:`chromium_args`: its own sandbox on (``--no-sandbox`` is never passed), DevTools
on its pipe only (``--remote-debugging-pipe``, no port), nothing that calls Google's
hosts on its own, a fixed device scale factor, and no permission prompt ever
(``--deny-permission-prompts``: a page's request is denied at once unless the run granted
it, :mod:`deskpod.agentd.browser.permissions`). The windows the browser draws its own UI
in (a ``<select>``'s list, the date and colour pickers) show drawn, not fading in over
150 ms (``--wm-window-animations-disabled``: a screenshot taken as one opens shows it
whole, :mod:`deskpod.agentd.settle`); pages' own animations are untouched.

WebGL and WebGL2 run on the CPU: ANGLE on OpenGL (GLX) on Mesa's llvmpipe, in Chromium's
GPU process, inside that process's own seccomp-bpf sandbox. :data:`WEBGL_ARGS` and
:data:`WEBGL_ENV` say how; docs/concepts/architecture.md weighs this against SwiftShader
(deprecated for WebGL, ``--enable-unsafe-swiftshader``) and BENCHMARKS.md gives the cost.
"""

from __future__ import annotations

from pathlib import Path

from deskpod.agentd.config import AgentdConfig

__all__ = ["WEBGL_ARGS", "WEBGL_ENV", "chromium_args", "chromium_env"]

WEBGL_ARGS: tuple[str, ...] = (
    "--use-gl=angle",
    "--use-angle=gl",
    "--ignore-gpu-blocklist",
    "--disable-gpu-compositing",
    "--disable-gpu-rasterization",
    "--disable-accelerated-2d-canvas",
    "--disable-accelerated-video-decode",
    "--gpu-sandbox-failures-fatal=yes",
)
"""Chromium's flags for WebGL on Mesa's llvmpipe, and nothing else on GL.

``--use-gl=angle --use-angle=gl``: WebGL's commands go through ANGLE (validation, shader
translation) to the system's OpenGL, Mesa's llvmpipe on a display without a GPU.
``--ignore-gpu-blocklist``: Chromium's GPU blocklist refuses WebGL on a software
rasterizer (``WebGL1 blocklisted``); the four ``--disable-*`` flags keep every other use
of the GPU process as it was with ``--disable-gpu`` (software compositing, which the
screen capture reads, page raster, 2D canvas and video decoding on the CPU).
``--gpu-sandbox-failures-fatal=yes``: a GPU process that cannot start its seccomp-bpf
sandbox exits instead of running without it (Chromium lets it run unsandboxed by
default), and after its third exit Chromium runs without WebGL.
"""

WEBGL_ENV: dict[str, str] = {
    "GALLIUM_DRIVER": "llvmpipe",
    "LP_NUM_THREADS": "0",
    "MESA_SHADER_CACHE_DISABLE": "true",
}
"""Mesa's environment for Chromium's GPU process.

Chromium starts the GPU process's sandbox after OpenGL is set up, and only in a process
of one thread (``InitializeSandbox() called with multiple threads in process
gpu-process``). llvmpipe starts one rasterizer thread per core and Mesa's shader cache a
writer thread: ``LP_NUM_THREADS=0`` rasterizes on the calling thread and
``MESA_SHADER_CACHE_DISABLE`` keeps the cache (and its thread, and its files) off, so the
sandbox starts. ``GALLIUM_DRIVER`` names the driver rather than relying on the absence of
``/dev/dri``. Mesa's variables: https://docs.mesa3d.org/envvars.html.
"""


def chromium_args(config: AgentdConfig, profile_dir: Path, start_url: str | None = None) -> list[str]:
    """Return Chromium's argv for ``config``.

    The ``--disable-*`` flags stop Chromium from calling Google's hosts on its own
    (background networking, component updates, sync, crash reports); each is
    described in Chromium's list of command-line switches
    (https://peter.sh/experiments/chromium-command-line-switches/).
    ``--force-device-scale-factor`` is always given (1 by default), so the X server's
    DPI never changes how many screen pixels a CSS pixel takes.

    Args:
        config: the daemon's configuration.
        profile_dir: the ``--user-data-dir``.
        start_url: the page to open; ``None``: ``config.start_url``.
    """
    args = [
        config.chromium,
        f"--user-data-dir={profile_dir}",
        "--remote-debugging-pipe",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-breakpad",
        *WEBGL_ARGS,
        "--password-store=basic",
        "--hide-crash-restore-bubble",
        # No permission prompt: a request the run's grants do not cover is denied at once.
        "--deny-permission-prompts",
        # The browser's own popups (a select's list, the pickers) show at once instead of fading in.
        "--wm-window-animations-disabled",
        "--disable-features=Translate,MediaRouter,OptimizationHints,DialMediaRouteProvider",
        "--window-position=0,0",
        # The window's size is in device-independent pixels (screen pixels / scale factor).
        f"--window-size={round(config.screen.width / config.device_scale_factor)},"
        f"{round(config.screen.height / config.device_scale_factor)}",
        "--start-maximized",
        f"--force-device-scale-factor={config.device_scale_factor:g}",
    ]
    if config.proxy:
        args.append(f"--proxy-server={config.proxy}")
    args.append(start_url or config.start_url)
    return args


def chromium_env(base: dict[str, str]) -> dict[str, str]:
    """Return Chromium's environment: ``base`` with :data:`WEBGL_ENV` over it."""
    return base | WEBGL_ENV
