""":class:`SyncSandbox`: every verb of :class:`~deskpod.client.sandbox.Sandbox`, blocking.

The async handle runs on a private event loop in a thread
(:class:`deskpod.client.loop_thread.LoopThread`). Each verb is one :class:`_Blocking` descriptor
made from the async method itself, so the blocking verb has the same parameters,
return type and docstring (for mypy as for ``help()``), and a verb added to
:class:`~deskpod.client.sandbox.Sandbox` needs one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from deskpod.client.sandbox import Sandbox
from deskpod.client.wire import CONNECT_TIMEOUT_S
from deskpod.client.loop_thread import LoopThread

__all__ = ["SyncSandbox"]

P = ParamSpec("P")
R = TypeVar("R")


class _Blocking(Generic[P, R]):
    """A blocking verb of :class:`SyncSandbox`: runs ``method`` (an async verb of
    :class:`Sandbox`) on the facade's loop and waits for its result.

    Args:
        method: the async method, taken from the class (``Sandbox.click``).
    """

    def __init__(self, method: Callable[Concatenate[Sandbox, P], Coroutine[Any, Any, R]]) -> None:
        self._method = method
        self.__doc__ = method.__doc__
        self.__name__ = method.__name__

    @overload
    def __get__(self, facade: None, owner: type[SyncSandbox]) -> _Blocking[P, R]: ...
    @overload
    def __get__(self, facade: SyncSandbox, owner: type[SyncSandbox]) -> Callable[P, R]: ...
    def __get__(self, facade: SyncSandbox | None, owner: type[SyncSandbox]) -> _Blocking[P, R] | Callable[P, R]:
        if facade is None:
            return self
        method, bound = self._method, facade

        def blocking(*args: P.args, **kwargs: P.kwargs) -> R:
            return bound._loop.run(method(bound.sandbox, *args, **kwargs))

        blocking.__doc__ = self.__doc__
        blocking.__name__ = self.__name__
        return blocking


class SyncSandbox:
    """:class:`Sandbox` for synchronous scripts: the same verbs, blocking.

    Args:
        loop: the private loop the async handle lives on.
        sandbox: the async handle, opened on ``loop``.

    Example::

        with SyncSandbox.open(url, token) as sb:     # url: as this machine reaches the daemon
            sb.click(640, 400)
            sb.write_file("notes.txt", "hello")
            png = sb.screenshot()
    """

    def __init__(self, loop: LoopThread, sandbox: Sandbox) -> None:
        self._loop = loop
        self.sandbox = sandbox
        """The async handle (use it only through this facade's loop)."""

    @classmethod
    def open(cls, url: str, token: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> SyncSandbox:
        """Connect to the sandbox at ``url`` (see :meth:`Sandbox.open`).

        Returns:
            The facade, connected.

        Raises:
            UnauthorizedError: the daemon refused the token.
            SandboxError: no connection within ``timeout_s``.
        """
        loop = LoopThread("deskpod-sandbox")
        try:
            return cls(loop, loop.run(Sandbox.open(url, token, timeout_s=timeout_s)))
        except BaseException:
            loop.close()
            raise

    @property
    def token(self) -> str:
        """The control token in force (a new one after each :meth:`reset`). Secret."""
        return self.sandbox.token

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and stop the loop."""
        try:
            self._loop.run(self.sandbox.close())
        finally:
            self._loop.close()

    configure = _Blocking(Sandbox.configure)
    allow_hosts = _Blocking(Sandbox.allow_hosts)
    grant_permissions = _Blocking(Sandbox.grant_permissions)
    reset = _Blocking(Sandbox.reset)
    snapshot = _Blocking(Sandbox.snapshot)
    restore = _Blocking(Sandbox.restore)
    navigate = _Blocking(Sandbox.navigate)
    act = _Blocking(Sandbox.act)
    observe = _Blocking(Sandbox.observe)
    click = _Blocking(Sandbox.click)
    double_click = _Blocking(Sandbox.double_click)
    triple_click = _Blocking(Sandbox.triple_click)
    mouse_down = _Blocking(Sandbox.mouse_down)
    mouse_up = _Blocking(Sandbox.mouse_up)
    move = _Blocking(Sandbox.move)
    drag = _Blocking(Sandbox.drag)
    scroll = _Blocking(Sandbox.scroll)
    keypress = _Blocking(Sandbox.keypress)
    hold_key = _Blocking(Sandbox.hold_key)
    type_text = _Blocking(Sandbox.type_text)
    set_files = _Blocking(Sandbox.set_files)
    drop_files = _Blocking(Sandbox.drop_files)
    wait = _Blocking(Sandbox.wait)
    wait_for = _Blocking(Sandbox.wait_for)
    accept_dialog = _Blocking(Sandbox.accept_dialog)
    dismiss_dialog = _Blocking(Sandbox.dismiss_dialog)
    recover_tab = _Blocking(Sandbox.recover_tab)
    windows = _Blocking(Sandbox.windows)
    focus_window = _Blocking(Sandbox.focus_window)
    close_window = _Blocking(Sandbox.close_window)
    move_window = _Blocking(Sandbox.move_window)
    resize_window = _Blocking(Sandbox.resize_window)
    open_app = _Blocking(Sandbox.open_app)
    screenshot = _Blocking(Sandbox.screenshot)
    cursor_position = _Blocking(Sandbox.cursor_position)
    zoom = _Blocking(Sandbox.zoom)
    read_clipboard = _Blocking(Sandbox.read_clipboard)
    write_clipboard = _Blocking(Sandbox.write_clipboard)
    element_snapshot = _Blocking(Sandbox.element_snapshot)
    click_element = _Blocking(Sandbox.click_element)
    type_element = _Blocking(Sandbox.type_element)
    select_option = _Blocking(Sandbox.select_option)
    hover_element = _Blocking(Sandbox.hover_element)
    drag_element = _Blocking(Sandbox.drag_element)
    fill_form = _Blocking(Sandbox.fill_form)
    seed = _Blocking(Sandbox.seed)
    list_dir = _Blocking(Sandbox.list_dir)
    read_file = _Blocking(Sandbox.read_file)
    write_file = _Blocking(Sandbox.write_file)
    edit_file = _Blocking(Sandbox.edit_file)
    apply_patch = _Blocking(Sandbox.apply_patch)
    exec = _Blocking(Sandbox.exec)
    run_tests = _Blocking(Sandbox.run_tests)
    diff = _Blocking(Sandbox.diff)
