"""Fixtures for the display tests: a real Xvfb, openbox and Chromium on this machine.

One session-wide desktop serves every test in ``tests/display``:

- ``Xvfb`` on a display number it picks itself (``-displayfd``, so two test runs never
  race for the same number), :data:`SCREEN_SIZE` at :data:`REFRESH_HZ` (the sandbox's
  frame clock), no TCP listener;
- ``openbox`` as the window manager (focus and full-screen behave as in the sandbox);
- Chromium in kiosk mode (page CSS pixels == screen pixels, page origin at the screen's
  top-left) with a throw-away profile, DevTools on a loopback port Chromium picks itself
  (``--remote-debugging-port=0``, read back from ``DevToolsActivePort``);
- a tiny ``http.server`` thread on 127.0.0.1 serving ``tests/display/fixtures``.

Chromium and the tests run with ``LANG``/``LC_*`` unset, the worst case for typing text.

Tests talk to the page through :class:`Page` (``Runtime.evaluate`` over the DevTools
websocket, using the ``websockets`` library's sync client) and drive input through the
product's own :class:`deskpod.agentd.display.xinput.XInput`.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from deskpod.agentd.config import AgentdConfig
from deskpod.agentd.display.refresh import apply_refresh_rate
from deskpod.agentd.session import OPENBOX_RC, DesktopSession
from deskpod.agentd.display.xinput import XInput
from deskpod.protocol import Size

SCREEN_SIZE = (1280, 800)
"""(width, height) of the test Xvfb screen, in screen pixels."""

REFRESH_HZ = AgentdConfig.display_refresh_hz
"""The test display's refresh rate: the sandbox's default (:mod:`deskpod.agentd.display.refresh`)."""

FIXTURES_DIR = Path(__file__).parent / "fixtures"
START_TIMEOUT_S = 30.0
CDP_TIMEOUT_S = 10.0

_LOCALE_VARS = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES")


def wait_for(predicate: Callable[[], Any], timeout_s: float = 5.0, interval_s: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Raises:
        TimeoutError: ``predicate`` stayed falsy for ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout_s} s: {predicate}")
        time.sleep(interval_s)


def _env_without_locale(display_name: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LOCALE_VARS}
    if display_name is not None:
        env["DISPLAY"] = display_name
    return env


class Page:
    """The fixture page in Chromium, reached over the DevTools protocol (CDP)."""

    def __init__(self, ws_url: str) -> None:
        # ExitStack: websockets >= 17 wants connect() used as a context manager.
        self._stack = contextlib.ExitStack()
        self._ws: ClientConnection = self._stack.enter_context(
            connect(ws_url, max_size=None, open_timeout=CDP_TIMEOUT_S)
        )
        self._ids = itertools.count(1)
        self._loads = itertools.count(1)

    def close(self) -> None:
        self._stack.close()

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one CDP command and return its ``result`` (events are skipped)."""
        call_id = next(self._ids)
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + CDP_TIMEOUT_S
        while True:
            message = json.loads(self._ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") != call_id:
                continue
            if "error" in message:
                raise RuntimeError(f"CDP {method} failed: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def read_events(self, duration_s: float) -> list[dict[str, Any]]:
        """The CDP events (``{"method", "params"}``) that arrive within ``duration_s``, in order."""
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + duration_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = json.loads(self._ws.recv(timeout=left))
            except TimeoutError:
                break
            if "method" in message:
                events.append(message)
        return events

    def evaluate(self, expression: str) -> Any:
        """Evaluate JavaScript in the page and return its JSON value."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Load ``url`` afresh and wait until its script has set ``window.__ready``.

        A unique query string makes every load a new document, so the wait can never be
        satisfied by the page that was there before.
        """
        url = f"{url}{'&' if '?' in url else '?'}load={next(self._loads)}"
        self.call("Page.navigate", {"url": url})
        wait_for(
            lambda: self.evaluate(
                f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
                " && window.__ready === true"
            ),
            timeout_s=CDP_TIMEOUT_S,
        )
        # Chromium drops input aimed at a new document until it has painted (paint
        # holding): wait for the first contentful paint, then two more frames.
        wait_for(
            lambda: self.evaluate(
                "performance.getEntriesByName('first-contentful-paint').length > 0"
            ),
            timeout_s=CDP_TIMEOUT_S,
        )
        self.evaluate(
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"
        )

    # Helpers for the input fixture page -------------------------------------------------

    @staticmethod
    def wait_until(predicate: Callable[[], Any], timeout_s: float = 5.0) -> Any:
        """:func:`wait_for`, reachable from test modules (they never import conftest)."""
        return wait_for(predicate, timeout_s=timeout_s)

    def settled_value(self, element_id: str, expected: str, timeout_s: float = 5.0) -> str:
        """The element's value once it equals ``expected``, or whatever it is at the timeout
        (so the test's assertion shows the difference)."""
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: self.value(element_id) == expected, timeout_s=timeout_s)
        value: str = self.value(element_id)
        return value

    def word_center(self, element_id: str, word: str) -> tuple[int, int]:
        """Screen point in the middle of ``word`` inside the element's first text node."""
        point = self.evaluate(
            f"""(() => {{
                const node = document.getElementById({json.dumps(element_id)}).firstChild;
                const start = node.textContent.indexOf({json.dumps(word)});
                const range = document.createRange();
                range.setStart(node, start);
                range.setEnd(node, start + {len(word)});
                const r = range.getBoundingClientRect();
                return [r.x + r.width / 2, r.y + r.height / 2];
            }})()"""
        )
        return int(point[0]), int(point[1])

    def events(self, *types: str) -> list[dict[str, Any]]:
        """The recorded DOM events, optionally only those of the given types."""
        events: list[dict[str, Any]] = self.evaluate("window.__events")
        return [e for e in events if not types or e["type"] in types]

    def reset_events(self) -> None:
        self.evaluate("window.__reset()")

    def value(self, element_id: str) -> Any:
        return self.evaluate(f"document.getElementById({json.dumps(element_id)}).value")

    def rect(self, element_id: str) -> dict[str, float]:
        """The element's bounding box in screen pixels (kiosk: page origin == screen origin)."""
        rect: dict[str, float] = self.evaluate(
            f"(() => {{ const r = document.getElementById({json.dumps(element_id)})"
            ".getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width,"
            " height: r.height}; })()"
        )
        return rect

    def center(self, element_id: str) -> tuple[int, int]:
        r = self.rect(element_id)
        return int(r["x"] + r["width"] / 2), int(r["y"] + r["height"] / 2)


class XProbe:
    """A separate X connection the tests use to look at the server's input state."""

    def __init__(self, display_name: str) -> None:
        from Xlib import display

        self._display = display.Display(display_name)

    def keys_down(self) -> list[int]:
        """Keycodes the server reports as down (``QueryKeymap``)."""
        keymap = self._display.query_keymap()
        return [8 * i + bit for i, byte in enumerate(keymap) for bit in range(8) if byte >> bit & 1]

    def pointer_mask(self) -> int:
        """Modifier and button state of the pointer (``QueryPointer``)."""
        return int(self._display.screen().root.query_pointer().mask)

    def buttons_down(self) -> int:
        """Bits of buttons 1-5 that read as down (0 when none is)."""
        from Xlib import X

        buttons = X.Button1Mask | X.Button2Mask | X.Button3Mask | X.Button4Mask | X.Button5Mask
        return self.pointer_mask() & int(buttons)

    def keysyms(self, keycode: int) -> list[int]:
        return list(self._display.get_keyboard_mapping(keycode, 1)[0])

    def close(self) -> None:
        self._display.close()


def display_in_use(number: int) -> bool:
    """Whether an X server holds display ``:number``: its lock file ``/tmp/.X<number>-lock``
    names a running process. A lock whose process is gone is stale; an X server starting
    on that number replaces it and its socket (Xorg's ``os/utils.c``, ``LockServer``)."""
    try:
        owner = int(Path(f"/tmp/.X{number}-lock").read_text().strip())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unused_display_number(count: int = 1) -> int:
    """The first display number ``N`` in 900-999 such that no X server holds any of
    ``:N`` to ``:N+count-1``; the stale lock files and sockets of those numbers (left by
    a killed server) are removed, so a test that waits for a socket sees its own server's.

    Raises:
        RuntimeError: every such run of numbers is held.
    """
    for number in range(900, 1001 - count):
        numbers = range(number, number + count)
        if not any(display_in_use(n) for n in numbers):
            for n in numbers:
                Path(f"/tmp/.X11-unix/X{n}").unlink(missing_ok=True)
                Path(f"/tmp/.X{n}-lock").unlink(missing_ok=True)
            return number
    raise RuntimeError(f"no {count} unused display number(s) in a row between 900 and 999")


@dataclass
class Desktop:
    """The session's running desktop."""

    display_name: str
    size: tuple[int, int]
    base_url: str
    page: Page


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _start_xvfb(size: tuple[int, int], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [
                "Xvfb", "-displayfd", str(write_fd), "-screen", "0",
                f"{size[0]}x{size[1]}x24", "-nolisten", "tcp",
            ],
            pass_fds=(write_fd,),
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            start_new_session=True,
        )  # fmt: skip
    finally:
        os.close(write_fd)
    # Xvfb writes the number and the newline separately, and dies if the pipe is closed
    # in between: read up to the newline.
    received = b""
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not received.endswith(b"\n"):
            ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(read_fd, 64) if ready else b""
            if not chunk:
                break
            received += chunk
    finally:
        os.close(read_fd)
    number = received.decode().strip() if received.endswith(b"\n") else ""
    if not number:
        _stop(proc)
        raise RuntimeError(f"Xvfb did not report a display number; see {log}")
    return proc, f":{number}"


def _wait_for_wm(display_name: str) -> None:
    from Xlib import X, display

    d = display.Display(display_name)
    try:
        atom = d.intern_atom("_NET_SUPPORTING_WM_CHECK")

        def has_wm() -> bool:
            prop = d.screen().root.get_full_property(atom, X.AnyPropertyType)
            return prop is not None and len(prop.value) > 0

        wait_for(has_wm, timeout_s=START_TIMEOUT_S, interval_s=0.05)
    finally:
        d.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process this fixture started, and its process group (it leads one)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("Chromium is not installed (apt-get install -y chromium)")


@pytest.fixture(scope="session")
def desktop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desktop]:
    """Start Xvfb + openbox + Chromium + the fixture web server for the whole session."""
    tmp = tmp_path_factory.mktemp("desktop")
    for var in _LOCALE_VARS:  # nothing here may depend on the locale
        os.environ.pop(var, None)
    procs: list[subprocess.Popen[bytes]] = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(FIXTURES_DIR))
    )
    server_thread = threading.Thread(target=server.serve_forever, daemon=True)
    server_thread.start()
    page: Page | None = None
    try:
        xvfb, display_name = _start_xvfb(SCREEN_SIZE, tmp / "xvfb.log")
        procs.append(xvfb)
        # The sandbox's frame clock (its default DESKPOD_DISPLAY_REFRESH_HZ), before Chromium reads it.
        apply_refresh_rate(display_name, Size(width=SCREEN_SIZE[0], height=SCREEN_SIZE[1]), REFRESH_HZ)
        # The sandbox's openbox configuration: without key bindings, so that a keymap change
        # (Unicode typing makes many) does not make openbox re-grab keys and hold the pointer.
        rc = tmp / "openbox-rc.xml"
        rc.write_text(OPENBOX_RC, encoding="utf-8")
        procs.append(
            subprocess.Popen(
                ["openbox", "--sm-disable", "--config-file", str(rc)],
                env=_env_without_locale(display_name),
                stdout=subprocess.DEVNULL,
                stderr=(tmp / "openbox.log").open("wb"),
                start_new_session=True,
            )
        )
        _wait_for_wm(display_name)

        profile = tmp / "chromium-profile"
        profile.mkdir()
        env = _env_without_locale(display_name)
        env["HOME"] = str(tmp)
        env["TMPDIR"] = str(tmp)  # its singleton socket's folder goes with the desktop's
        procs.append(
            subprocess.Popen(
                [
                    _chromium_binary(),
                    # --no-sandbox ONLY because these host-side tests run as root, where
                    # Chromium refuses to start its sandbox. The product never passes it:
                    # in the sandbox image Chromium runs as a non-root user with its own
                    # sandbox on.
                    "--no-sandbox",
                    f"--user-data-dir={profile}",
                    "--remote-debugging-port=0",
                    "--remote-debugging-address=127.0.0.1",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-features=Translate,MediaRouter,OptimizationHints",
                    "--password-store=basic",
                    "--ozone-platform=x11",
                    "--force-device-scale-factor=1",
                    "--kiosk",
                    "about:blank",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=(tmp / "chromium.log").open("wb"),
                start_new_session=True,
            )
        )
        port_file = profile / "DevToolsActivePort"
        wait_for(
            lambda: port_file.exists() and port_file.read_text().strip(),
            timeout_s=START_TIMEOUT_S,
            interval_s=0.05,
        )
        port = int(port_file.read_text().splitlines()[0])

        def page_target() -> str | None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            return pages[0]["webSocketDebuggerUrl"] if pages else None

        page = Page(wait_for(page_target, timeout_s=START_TIMEOUT_S, interval_s=0.1))
        base_url = f"http://127.0.0.1:{server.server_address[1]}"
        page.open(f"{base_url}/input.html")
        # Kiosk mode must give the page the whole screen at scale 1, so that element
        # boxes read through CDP are screen pixels.
        geometry = wait_for(
            lambda: (
                (
                    g := page.evaluate(
                        "[innerWidth, innerHeight, screenX, screenY, devicePixelRatio]"
                    )
                )
                == [*SCREEN_SIZE, 0, 0, 1]
                and g
            ),
            timeout_s=START_TIMEOUT_S,
            interval_s=0.1,
        )
        assert geometry == [*SCREEN_SIZE, 0, 0, 1]
        yield Desktop(display_name, SCREEN_SIZE, base_url, page)
    finally:
        if page is not None:
            page.close()
        for proc in reversed(procs):
            _stop(proc)
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def _session_xinput(desktop: Desktop) -> Iterator[XInput]:
    xinput = XInput(desktop.display_name)
    try:
        yield xinput
    finally:
        xinput.close()


@pytest.fixture
def xinput(_session_xinput: XInput) -> Iterator[XInput]:
    """The session's XInput (one per daemon, as in the product); releases all after each test."""
    yield _session_xinput
    _session_xinput.release_all()


@pytest.fixture(scope="session")
def x_probe(desktop: Desktop) -> Iterator[XProbe]:
    """Inspect the test display's key and button state from a separate connection."""
    probe = XProbe(desktop.display_name)
    try:
        yield probe
    finally:
        probe.close()


@dataclass
class PrivateXvfb:
    """An extra Xvfb that a test may kill (to see how a dead X server is reported)."""

    display_name: str
    size: tuple[int, int]
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        _stop(self.process)


@pytest.fixture
def private_xvfb(tmp_path: Path) -> Iterator[PrivateXvfb]:
    """A small Xvfb of the test's own, stopped afterwards if the test has not."""
    size = (640, 480)
    process, display_name = _start_xvfb(size, tmp_path / "xvfb.log")
    server = PrivateXvfb(display_name, size, process)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def unused_display() -> str:
    """A display name no X server listens on (:func:`unused_display_number`)."""
    return f":{unused_display_number()}"


@pytest.fixture
def unused_display_pair() -> str:
    """A display number ``N`` (as text) such that no X server holds ``:N`` or ``:N+1``
    (a daemon's display and its standby's, :func:`unused_display_number`)."""
    return str(unused_display_number(2))


@pytest.fixture
def daemon_session(unused_display: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                   ) -> Iterator[DesktopSession]:
    """The daemon's own :class:`DesktopSession` on an unused display (640x480, the
    refresh rate ``DESKPOD_DISPLAY_REFRESH_HZ=120``), not started; killed afterwards.
    ``XAUTHORITY`` is restored after the test (a start points it at the session's file)."""
    monkeypatch.setenv("XAUTHORITY", str(tmp_path / "none"))
    config = AgentdConfig.from_env({
        "DESKPOD_TOKEN": "t" * 32, "DESKPOD_DISPLAY": unused_display, "DESKPOD_SCREEN_SIZE": "640x480",
        "DESKPOD_RUNTIME_DIR": str(tmp_path / "runtime"), "DESKPOD_DISPLAY_GRANT_HOST": "sandbox",
        "DESKPOD_DISPLAY_REFRESH_HZ": "120",
    })
    session = DesktopSession(config)
    try:
        yield session
    finally:
        session.kill_desktop()


@pytest.fixture
def page(desktop: Desktop) -> Page:
    """The input fixture page, freshly loaded, with an empty event log."""
    desktop.page.open(f"{desktop.base_url}/input.html")
    return desktop.page
