"""The display's refresh rate: the frame clock Chromium paints by.

Chromium on X11 with software compositing (``--disable-gpu-compositing``) produces frames at the
refresh rate of the primary output's current RandR mode, and falls back to 60 Hz when
the mode reports none (``ui/base/x/x11_xrandr_interval_only_vsync_provider.cc``,
``GetPrimaryDisplayRefreshIntervalFromXrandr`` in Chromium's source). Xvfb's only mode
has no timings (a dot clock of 0), so a page's ``requestAnimationFrame``, a click's
repaint and the settle wait's frames (:mod:`deskpod.agentd.settle`) all run on a 60 Hz
clock: 16.7 ms a frame, most of what a settled screenshot waited for.

:func:`apply_refresh_rate` gives Xvfb's output a mode of the screen's size whose timings
say ``hz`` (RandR 1.2: ``CreateMode``, ``AddOutputMode``, ``SetCrtcConfig``; refresh =
dot clock / (htotal × vtotal)). The connection that makes it is closed with
``RetainPermanent``, so the mode lives as long as the X server; a reset starts a new X
server, which is given the mode again, before its Chromium starts. (Chromium also reads
the rate again when RandR reports an output change; seen with Debian's Chromium 156 on
Xvfb: ``requestAnimationFrame`` at 60, 120 and 239 per second for 60, 120 and 240 Hz.)
An idle page draws no frames at any rate; an endless animation draws one per frame, so
its CPU grows with the rate (docs/reference/configuration.md, ``DESKPOD_DISPLAY_REFRESH_HZ``).

Source: the X Resize and Rotate extension protocol, version 1.2
(https://gitlab.freedesktop.org/xorg/proto/xorgproto/-/blob/master/randrproto.txt).
Durations are float seconds.
"""

from __future__ import annotations

import logging
import sys
from contextlib import suppress
from typing import Final

from deskpod.errors import RefreshRateError
from deskpod.protocol import Size

__all__ = ["FALLBACK_REFRESH_HZ", "MAX_DOT_CLOCK_HZ", "apply_refresh_rate", "fitting_refresh_hz",
           "frame_interval_s", "main"]

log = logging.getLogger(__name__)

FALLBACK_REFRESH_HZ: Final = 60
"""What Chromium paints at when the display's mode reports no refresh rate (Xvfb's own
mode, or a display this module could not set)."""

MAX_DOT_CLOCK_HZ: Final = 2**32 - 1
"""A RandR mode's dot clock is a 32-bit count of Hz: width × height × rate must fit."""


def fitting_refresh_hz(size: Size, hz: int) -> int:
    """The highest refresh rate at most ``hz`` that a mode of ``size`` can say: ``hz`` itself
    unless ``size.width × size.height × hz`` is over :data:`MAX_DOT_CLOCK_HZ` (7680x4320 at
    240 Hz is: it runs at 129 Hz), in frames a second."""
    return max(1, min(hz, MAX_DOT_CLOCK_HZ // (size.width * size.height)))


def frame_interval_s(hz: float) -> float:
    """The time between two frames at ``hz`` frames a second, in seconds."""
    return 1.0 / hz


def apply_refresh_rate(display_name: str, size: Size, hz: int) -> None:
    """Make a mode of ``size`` at ``hz`` the current mode of the display's first output.

    Connects with the daemon's ``XAUTHORITY`` (the active session's cookie). The mode is
    named ``WIDTHxHEIGHT_HZ`` and kept by the X server after this connection closes.

    Args:
        display_name: the X display, e.g. ``":99"``.
        size: the screen's size in pixels (Xvfb's ``-screen``).
        hz: the refresh rate, frames a second; ``size.width × size.height × hz`` must be
            at most :data:`MAX_DOT_CLOCK_HZ`.

    Raises:
        RefreshRateError: the display cannot be opened, has no RandR output or CRTC, or
            refused the mode; the rate in force is then unchanged.
        ValueError: ``hz`` is not positive or the dot clock does not fit 32 bits.
    """
    from Xlib import X  # imported here, not with the daemon's configuration (which reads the constants)
    from Xlib import error as xerror
    from Xlib.display import Display
    from Xlib.ext import randr

    dot_clock = size.width * size.height * hz
    if hz <= 0 or dot_clock > MAX_DOT_CLOCK_HZ:
        raise ValueError(f"no RandR mode can say {hz} Hz at {size.width}x{size.height}")
    failures = (xerror.XError, xerror.ConnectionClosedError, OSError)
    try:
        display = Display(display_name)
    except (xerror.DisplayError, xerror.XauthError, xerror.XNoAuthError, *failures) as exc:
        raise RefreshRateError(f"cannot open X display {display_name!r}: {exc}") from exc
    try:
        if not display.has_extension("RANDR"):
            raise RefreshRateError(f"X display {display_name!r} has no RandR extension")
        root = display.screen().root
        resources = randr.get_screen_resources(root)
        if not resources.outputs or not resources.crtcs:
            raise RefreshRateError(f"X display {display_name!r} has no RandR output or CRTC")
        output, crtc = resources.outputs[0], resources.crtcs[0]
        name = f"{size.width}x{size.height}_{hz}"
        mode = randr.create_mode(root, {
            "id": 0, "width": size.width, "height": size.height, "dot_clock": dot_clock,
            "h_sync_start": size.width, "h_sync_end": size.width, "h_total": size.width, "h_skew": 0,
            "v_sync_start": size.height, "v_sync_end": size.height, "v_total": size.height,
            "name_length": len(name), "flags": 0,
        }, name).mode
        randr.add_output_mode(display, output, mode)
        current = randr.get_crtc_info(display, crtc, resources.config_timestamp)
        reply = randr.set_crtc_config(display, crtc, resources.config_timestamp, current.x, current.y, mode,
                                      current.rotation, [output])
        if reply.status != randr.SetConfigSuccess:
            raise RefreshRateError(f"X display {display_name!r} refused the {name} mode (status {reply.status})")
        display.set_close_down_mode(X.RetainPermanent)  # the mode outlives this connection
        display.sync()
    except failures as exc:
        raise RefreshRateError(f"X display {display_name!r}: RandR failed: {type(exc).__name__}: {exc}") from exc
    finally:
        with suppress(*failures):
            display.close()
    log.info("display %s refreshes at %d Hz", display_name, hz)


def main(argv: list[str] | None = None) -> int:
    """``python -m deskpod.agentd.display.refresh DISPLAY WIDTHxHEIGHT HZ``: :func:`apply_refresh_rate`
    with this process's ``XAUTHORITY`` (a standby session's cookie, which the daemon's own
    environment does not name).

    Returns:
        0 when the display took the rate, 1 when it refused it (the reason on stderr).
    """
    args = sys.argv[1:] if argv is None else argv
    display_name, size, hz = args
    width, height = (int(n) for n in size.split("x"))
    try:
        apply_refresh_rate(display_name, Size(width=width, height=height), int(hz))
    except (RefreshRateError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
