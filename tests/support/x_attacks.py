"""An agent's program that attacks the display it was granted, for the display and integration tests.

:data:`X_ATTACKS` is the source of a python-xlib program run as an agent's command (``python3 -c``)
with the ``DISPLAY`` and ``XAUTHORITY`` a display grant gives. Its arguments: the class (``WM_CLASS``,
compared in lower case) of the window it attacks (the browser's), then where to put a window of its
own (``x,y,width,height`` in screen pixels, override-redirect, filled red), how long to keep it
open at the end, seconds, and optionally a file whose appearance ends that wait early (a test
that has seen what it looks for need not wait the rest). It prints two JSON lines; the first
holds, in this order of attempts:

- ``extensions``: the extensions the server lists to it; ``xtest``: whether XTEST answers it;
- ``target``: the attacked window was found (walking the window tree: the first viewable window
  whose ``WM_CLASS`` class holds the one asked);
- ``get_image``: reading 16x16 pixels of that window: ``"ok"`` or the X error's name;
- ``own_image``: the first pixel of its own window as bytes in hex (``"0000ff00"`` is red);
- ``grab_keyboard``, ``grab_pointer``: the status of an active grab on its own window (0 is
  Success), each released at once;
- ``warped``: whether ``WarpPointer`` moved the pointer;
- ``send_key``: a ``KeyPress`` sent (``SendEvent``) to the attacked window: ``"ok"`` or the error;
- ``clipboard``: what converting ``CLIPBOARD`` to ``UTF8_STRING`` gave: the text, ``None`` when
  the owner answered no data, ``"timeout"`` when no answer came within 3 s;
- ``server_grab_blocks``: whether its ``GrabServer`` kept a second connection of its own from
  being answered for 2 s;
- ``printed_window``: ``true``; the line is printed (flushed) with its own window mapped, then it
  sleeps the time asked, so that a test can look at the screen meanwhile.

The second line holds ``deleted``: after a ``WM_DELETE_WINDOW`` ``ClientMessage`` to the attacked
window, whether that window (its id) is gone 3 s later.
"""

from __future__ import annotations

__all__ = ["X_ATTACKS"]

X_ATTACKS = r'''
import json, os, sys, threading, time
from Xlib import X, Xatom, display, error, xauth
from Xlib.protocol import event
from Xlib.support import unix_connect

# The cookie of the first record, whatever its address family (python-xlib matches none but
# FamilyLocal and FamilyInternet): what an attacker reads from the file it was given.
cookie = xauth.Xauthority(os.environ["XAUTHORITY"]).entries[0][4]
unix_connect.get_auth = lambda *args: (b"MIT-MAGIC-COOKIE-1", cookie)
target_class, place, keep_s = sys.argv[1].lower(), [int(v) for v in sys.argv[2].split(",")], float(sys.argv[3])
d = display.Display()
errors = []
d.set_error_handler(lambda err, request: errors.append(type(err).__name__))
screen = d.screen()
root = screen.root
out = {"extensions": sorted(d.list_extensions()), "xtest": d.query_extension("XTEST") is not None}


def find(cls):
    queue = [root]
    while queue:
        window = queue.pop(0)
        try:
            wm_class = window.get_wm_class()
            if wm_class and cls in (wm_class[1] or "").lower() \
                    and window.get_attributes().map_state == X.IsViewable:
                return window
            queue += list(window.query_tree().children)
        except error.XError:
            pass
    return None


def attempt(fn):
    errors.clear()
    try:
        fn()
        d.sync()
    except error.XError as exc:
        return type(exc).__name__
    return errors[0] if errors else "ok"


target = find(target_class)
out["target"] = target is not None
out["get_image"] = attempt(lambda: target.get_image(0, 0, 16, 16, X.ZPixmap, 0xFFFFFFFF))

red = screen.default_colormap.alloc_color(65535, 0, 0).pixel
x, y, width, height = place
mine = root.create_window(x, y, width, height, 0, screen.root_depth, X.InputOutput, X.CopyFromParent,
                          background_pixel=red, override_redirect=True,
                          event_mask=X.KeyPressMask | X.PropertyChangeMask)
mine.set_wm_class("deskpod-probe", "DeskpodProbe")
mine.set_wm_name("probe window")
mine.map()
d.sync()
time.sleep(0.3)
out["own_image"] = mine.get_image(0, 0, 1, 1, X.ZPixmap, 0xFFFFFFFF).data[:4].hex()

out["grab_keyboard"] = mine.grab_keyboard(True, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)
d.ungrab_keyboard(X.CurrentTime)
out["grab_pointer"] = mine.grab_pointer(True, X.ButtonPressMask, X.GrabModeAsync, X.GrabModeAsync, 0, 0,
                                        X.CurrentTime)
d.ungrab_pointer(X.CurrentTime)

before = root.query_pointer()
root.warp_pointer((before.root_x + 37) % screen.width_in_pixels, (before.root_y + 23) % screen.height_in_pixels)
d.sync()
after = root.query_pointer()
out["warped"] = (after.root_x, after.root_y) != (before.root_x, before.root_y)

key = event.KeyPress(time=X.CurrentTime, root=root, window=target, same_screen=1, child=X.NONE, root_x=0,
                     root_y=0, event_x=0, event_y=0, state=0, detail=38)
out["send_key"] = attempt(lambda: target.send_event(key, event_mask=X.KeyPressMask))

clipboard, utf8, into = (d.intern_atom(name) for name in ("CLIPBOARD", "UTF8_STRING", "DESKPOD_PROBE"))
mine.convert_selection(clipboard, utf8, into, X.CurrentTime)
d.flush()
out["clipboard"] = "timeout"
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    if not d.pending_events():
        time.sleep(0.05)
        continue
    ev = d.next_event()
    if ev.type == X.SelectionNotify:
        if ev.property == X.NONE:
            out["clipboard"] = None
        else:
            prop = mine.get_full_property(into, X.AnyPropertyType)
            out["clipboard"] = prop.value.decode("utf-8", "replace") if prop is not None else None
        break

other = display.Display()
d.grab_server()
d.sync()
answered = threading.Event()
threading.Thread(target=lambda: (other.get_input_focus(), answered.set()), daemon=True).start()
out["server_grab_blocks"] = not answered.wait(2)
d.ungrab_server()
d.sync()
answered.wait(5)

print(json.dumps({**out, "printed_window": True}), flush=True)
kept_until = time.monotonic() + keep_s
while time.monotonic() < kept_until and not (len(sys.argv) > 4 and os.path.exists(sys.argv[4])):
    time.sleep(0.1)

protocols, delete = d.intern_atom("WM_PROTOCOLS"), d.intern_atom("WM_DELETE_WINDOW")
message = event.ClientMessage(window=target, client_type=protocols, data=(32, [delete, X.CurrentTime, 0, 0, 0]))
target.send_event(message, event_mask=X.NoEventMask)
d.sync()
time.sleep(3)
try:
    target.get_attributes()
    print(json.dumps({"deleted": False}), flush=True)
except error.BadWindow:
    print(json.dumps({"deleted": True}), flush=True)
'''
