"""The old import path of the web console, kept for the paths README shows.

The console is :mod:`deskpod.service.console`; :mod:`.live` and :mod:`.history` here are
re-exports kept for the old import paths (``deskpod.console.live.live_router``,
``deskpod.console.history.history_router``).
"""

__all__: list[str] = []
