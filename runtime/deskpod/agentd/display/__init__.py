"""The X display side of the daemon: input, capture and what the X server reports.

:mod:`.xconn` (one X connection for synthesised input), :mod:`.xkeymap` (where each
keysym is), :mod:`.xinput` (XTEST mouse and keyboard), :mod:`.xauth` (X authority
records), :mod:`.capture` (screenshots with mss), :mod:`.fit` (an image within a byte
limit), :mod:`.damage` (the DAMAGE extension's change reports), :mod:`.refresh` (the
display's refresh rate) and :mod:`.live` (the live JPEG streams).
"""

__all__: list[str] = []
