"""``python -m deskpod.settings``: see :func:`deskpod.settings.table.main`."""

from deskpod.settings.table import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
