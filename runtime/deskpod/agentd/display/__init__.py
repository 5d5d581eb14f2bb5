"""The X display side of the daemon: input, capture and what the X server reports.

:mod:`.xconn` (one X connection for synthesised input), :mod:`.xkeymap` (where each
keysym is), :mod:`.xkeyboard` (XTEST keys and text), :mod:`.xinput` (the pointer, on
top of the keyboard), :mod:`.actions` (one protocol action as X input), :mod:`.xauth`
(X authority records and files), :mod:`.capture` (screenshots with mss), :mod:`.fit`
(an image within a byte limit), :mod:`.damage` (the DAMAGE extension's change reports),
:mod:`.refresh` (the display's refresh rate), :mod:`.live` (the live JPEG streams),
:mod:`.xwindows` (the window manager's windows, and focusing, closing, moving and resizing
them), and
the display grant's way in: :mod:`.xgate` (the X gate, the agent's zone's only way to the
display), :mod:`.xfilter` (its rules on an agent client's requests, pure) and
:mod:`.xtrusted` (untrusted cookies and what the gate asks of the display).
"""

__all__: list[str] = []
