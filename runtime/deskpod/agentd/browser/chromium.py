"""Chromium's command line in the sandbox.

The daemon starts Chromium (:mod:`deskpod.agentd.session`) with the argv of
:func:`chromium_args`: its own sandbox on (``--no-sandbox`` is never passed), DevTools
on its pipe only (``--remote-debugging-pipe``, no port), nothing that calls Google's
hosts on its own, and a fixed device scale factor.
"""

from __future__ import annotations

from pathlib import Path

from deskpod.agentd.config import AgentdConfig

__all__ = ["chromium_args"]


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
        "--disable-gpu",
        "--password-store=basic",
        "--hide-crash-restore-bubble",
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
