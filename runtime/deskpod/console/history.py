"""Re-export kept for the old import path ``deskpod.console.history.history_router`` (README shows it):
the run history's routes are :mod:`deskpod.service.console.history`."""

from deskpod.service.console.history import history_router

__all__ = ["history_router"]
