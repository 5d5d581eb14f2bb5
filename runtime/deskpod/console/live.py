"""Re-export kept for the old import path ``deskpod.console.live.live_router`` (README shows it):
the live view's route is :mod:`deskpod.service.console.live_view`."""

from deskpod.service.console.live_view import live_router

__all__ = ["live_router"]
