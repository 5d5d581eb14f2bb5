"""``python -m deskpod``: the ``deskpod`` command."""

from deskpod.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    main()
