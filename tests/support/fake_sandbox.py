"""An in-memory sandbox for unit tests of the run loops: it satisfies
:class:`deskpod.controller.sandbox.SandboxAPI` without Docker, a daemon or a browser.

A :class:`FakeSandbox` holds a few :class:`Page` objects by URL. A click on a
:class:`Button` (a box on the page) loads the button's target page, if it has one, and
a ``navigate`` its URL; typed text is kept per page; every action is recorded in ``executed``. The
screenshot is a deterministic function of the page and a version number, so a test
can change the screen (:meth:`FakeSandbox.change_screen`) and see the controller's
binding of an approval to the screen break. ``fail_actions`` makes every action of a
kind fail the way the daemon reports a failed action. An ``act`` with a
:class:`~deskpod.protocol.ScreenExpectation` is refused the way the daemon refuses it
(:class:`~deskpod.errors.ScreenChangedError`) when the screen's hash is not the
expected one or the button under a press is not the expected control; every
expectation received is kept in ``expectations``. An observation with ``snapshot`` lists
the page's buttons with refs numbered across snapshots (only the latest snapshot's are
valid: ``element_ref`` of another is refused with :class:`~deskpod.errors.StaleRefError`),
and ``element_ref`` gives the button's centre and the button there. ``egress`` is the browser allowlist the
controller set (``egress_calls`` every list it sent), and ``blocked`` the refused requests
the next observation reports (``permission_calls``: the grants it sent; ``permission_requests``:
the pages' requests the next observation reports). The screen shows what was typed (a page with "Show password"
ticked, or one that copies the value into its text): the secrets an ``act`` or ``navigate``
names in ``mask`` are kept until a reset (``masking``; every request's list in
``mask_requests``) and drawn as ``*`` from then on, the way the daemon paints them over
(the screenshot's ``masked`` is then 1).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deskpod.errors import ExecutionError, NoWindowError, ScreenChangedError, StaleRefError, WorkspaceError
from deskpod.protocol import (
    AnyWorkspaceReply,
    BlockedRequest,
    ElementInfo,
    FileContent,
    FileWritten,
    Hello,
    Observation,
    ObserveOptions,
    PermissionGrants,
    PermissionRequest,
    PRESS_ACTIONS,
    Point,
    ReadFileReply,
    ReadFileRequest,
    ScreenExpectation,
    Screenshot,
    Size,
    Tab,
    TextSource,
    UnresponsivePage,
    Window,
    WorkspaceRequest,
    WriteFileReply,
    WriteFileRequest,
    parse_action,
)
from pydantic import BaseModel

__all__ = ["Button", "FakeSandbox", "Page", "SCREEN"]

SCREEN = Size(width=1280, height=800)
"""The fake screen (and model space)."""


@dataclass
class Button:
    """A control on a page: its box ``(x0, y0, x1, y1)``, its label, and the URL a click loads."""

    box: tuple[int, int, int, int]
    name: str
    goes_to: str | None = None
    tag: str = "button"
    freezes: bool = False
    """A click starts an endless script: the page stops answering until a ``recover_tab``."""

    def contains(self, x: int, y: int) -> bool:
        """Whether (x, y) is inside the box."""
        x0, y0, x1, y1 = self.box
        return x0 <= x < x1 and y0 <= y < y1


@dataclass
class Page:
    """One page: its title, its visible text, its buttons, its other text sources by kind."""

    title: str
    text: str = ""
    buttons: list[Button] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeSandbox:
    """The sandbox (see the module's docstring). ``pages``: by URL; an unknown URL is an empty page."""

    pages: dict[str, Page]
    fail_actions: frozenset[str] = frozenset()
    hello: Hello = field(default_factory=lambda: Hello(screen=SCREEN, model_size=SCREEN, sandbox_id="fake-sandbox"))
    url: str = "about:blank"
    version: int = 0
    executed: list[dict[str, Any]] = field(default_factory=list)
    expectations: list[ScreenExpectation] = field(default_factory=list)
    typed: dict[str, str] = field(default_factory=dict)
    observations: int = 0
    download_permissions: list[bool] = field(default_factory=list)
    """``allow_downloads`` of every act request that ran actions, in order."""
    closed: bool = False
    egress: list[str] | None = None
    egress_calls: list[list[str] | None] = field(default_factory=list)
    permission_calls: list[PermissionGrants] = field(default_factory=list)
    permission_requests: list[PermissionRequest] = field(default_factory=list)
    blocked: list[BlockedRequest] = field(default_factory=list)
    refs: dict[str, Button] = field(default_factory=dict)
    """The latest snapshot's refs."""
    masking: list[str] = field(default_factory=list)
    """The secrets masked until the next reset."""
    mask_requests: list[tuple[str, list[str]]] = field(default_factory=list)
    """``(request type, mask)`` of every act and navigate, in order."""
    frozen: bool = False
    """The page does not answer: observations list its tab as unresponsive."""
    windows: list[Window] = field(default_factory=list)
    """The desktop's windows, listed when asked; window actions focus, move, resize and close them."""
    files: dict[str, str] = field(default_factory=dict)
    """The workspace: ``write_file`` and ``read_file`` requests write and read it by path; an
    ``open_app`` adds a focused window of the agent's zone to :attr:`windows`."""
    _ids: int = 0
    _next_ref: int = 1

    def next_id(self) -> str:
        """A fresh request id."""
        self._ids += 1
        return f"fake-{self._ids}"

    def change_screen(self) -> None:
        """Change a pixel of the screen (the next screenshot has another SHA-256)."""
        self.version += 1

    def page(self) -> Page:
        """The page at the current URL."""
        return self.pages.get(self.url, Page(title=""))

    async def act(
        self, actions: Sequence[dict[str, Any] | BaseModel], observe: ObserveOptions | None = None,
        timeout_s: float = 60.0, expect: ScreenExpectation | None = None, *, allow_downloads: bool = False,
        mask: Sequence[str] = (),
    ) -> Observation:
        """Run ``actions`` and observe; raise :class:`~deskpod.errors.ExecutionError` for a kind in
        ``fail_actions`` and :class:`~deskpod.errors.ScreenChangedError` when ``expect`` does not hold."""
        self._mask("act", mask)
        cursor: Point | None = None
        if expect is not None:
            self.expectations.append(expect)
        if actions:
            self.download_permissions.append(allow_downloads)
        for index, raw in enumerate(actions):
            action = raw if isinstance(raw, BaseModel) else parse_action(raw, index)
            data = action.model_dump(mode="json")
            if data["type"] in self.fail_actions:
                raise ExecutionError(f"{data['type']} failed in the fake sandbox")
            if expect is not None and data["type"] in PRESS_ACTIONS:
                self._check(expect, data, index)
            self.executed.append(data)
            if data["type"] == "click":
                button = self._button_at(data["x"], data["y"])
                if button is not None and button.goes_to is not None:
                    self.url = button.goes_to
                self.frozen = self.frozen or (button is not None and button.freezes)
            elif data["type"] == "recover_tab":
                self.frozen = False
            elif data["type"] == "open_app":
                self.windows = [w.model_copy(update={"focused": False}) for w in self.windows]
                self.windows.insert(0, Window(id=f"0x{len(self.windows) + 0x100:x}", app=data["app"],
                                              title=data["path"], box=[100, 100, 700, 500], focused=True,
                                              zone="agent"))
            elif data["type"].startswith("window_"):
                self._window_action(data)
            elif data["type"] == "navigate":
                self.url = data["url"]
            elif data["type"] == "type":
                self.typed[self.url] = self.typed.get(self.url, "") + data["text"]
            elif data["type"] == "cursor_position":
                cursor = Point(x=0, y=0)
        return self._observe(observe or ObserveOptions(), cursor)

    async def navigate(self, url: str, observe: ObserveOptions | None = None, timeout_s: float = 30.0, *,
                       allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        """Load ``url``."""
        self._mask("navigate", mask)
        self.url = url
        return self._observe(observe or ObserveOptions(), None)

    async def configure(self, model_size: Size | None) -> Size:
        """Accept any model space."""
        return model_size or SCREEN

    async def set_egress(self, allowed_domains: Sequence[str] | None) -> list[str] | None:
        """Remember the browser's allowlist."""
        self.egress = None if allowed_domains is None else list(allowed_domains)
        self.egress_calls.append(self.egress)
        return self.egress

    async def set_permissions(self, grants: PermissionGrants) -> PermissionGrants:
        """Remember the permission grants."""
        self.permission_calls.append(grants)
        return grants

    async def reset(
        self, start_url: str | None = None, *, token_sha256: str, observe: ObserveOptions | None = None
    ) -> Observation:
        """Back to ``start_url`` with nothing typed and nothing masked."""
        self.typed.clear()
        self.masking.clear()
        self.url = start_url or "about:blank"
        return self._observe(observe or ObserveOptions(), None)

    async def request(self, request: WorkspaceRequest) -> AnyWorkspaceReply:
        """Write or read :attr:`files` (a file never written: ``workspace_failed``); any other
        workspace request is not faked."""
        if isinstance(request, WriteFileRequest):
            created = request.path not in self.files
            self.files[request.path] = request.content
            return WriteFileReply(id=request.id, workspace=FileWritten(path=request.path, size=len(
                request.content.encode()), created=created))
        if isinstance(request, ReadFileRequest):
            if request.path not in self.files:
                raise WorkspaceError(f"no such file (fake): {request.path}", detail={"reason": "not_found"})
            text = self.files[request.path]
            return ReadFileReply(id=request.id, workspace=FileContent(path=request.path, content=text, size=len(
                text.encode()), start_line=1, end_line=text.count("\n") + 1))
        raise NotImplementedError(f"the fake sandbox has no {request.type}")

    async def close(self) -> None:
        """Remember the close."""
        self.closed = True

    def _mask(self, kind: str, mask: Sequence[str]) -> None:
        self.mask_requests.append((kind, list(mask)))
        self.masking += [m for m in mask if m not in self.masking]

    def _screen(self) -> bytes:
        shown = self.typed.get(self.url, "")
        for secret in self.masking:
            shown = shown.replace(secret, "*" * len(secret))
        return f"{self.url}|{self.version}|{shown}".encode()

    def _check(self, expect: ScreenExpectation, data: dict[str, Any], index: int) -> None:
        if expect.screenshot_sha256 not in (None, hashlib.sha256(self._screen()).hexdigest()):
            raise ScreenChangedError("the screen changed (fake)", detail={"reason": "region", "action_index": index})
        button = self._button_at(data["x"], data["y"]) if data.get("x") is not None else None
        if expect.element is not None and (button is None or button.name != expect.element.name):
            raise ScreenChangedError("the control changed (fake)", detail={"reason": "element", "action_index": index})

    def _button_at(self, x: int, y: int) -> Button | None:
        return next((b for b in self.page().buttons if b.contains(x, y)), None)

    def _observe(self, options: ObserveOptions, cursor: Point | None) -> Observation:
        self.observations += 1
        page = self.page()
        shot = None
        if options.screenshot:
            data = base64.b64encode(self._screen()).decode()
            shot = Screenshot(
                id=f"shot-{self.observations}", format="png", width=SCREEN.width, height=SCREEN.height,
                screen_width=SCREEN.width, screen_height=SCREEN.height, scale_x=1.0, scale_y=1.0,
                sha256=hashlib.sha256(base64.b64decode(data)).hexdigest(), data=data,
                perceptual_hash=hashlib.sha256(data.encode()).hexdigest()[:16],
                masked=int(any(m in self.typed.get(self.url, "") for m in self.masking)),
            )
        element = None
        at = options.element_at
        ref_point = None
        if options.element_ref is not None:
            if self.refs.get(options.element_ref) not in page.buttons:
                raise StaleRefError("unknown ref (fake)", detail={"reason": "unknown_ref", "ref": options.element_ref})
            x0, y0, x1, y1 = self.refs[options.element_ref].box
            at = ref_point = Point(x=(x0 + x1) // 2, y=(y0 + y1) // 2)
        if at is not None:
            button = self._button_at(at.x, at.y)
            if button is not None:
                element = ElementInfo(tag=button.tag, role="button", name=button.name, text=button.name,
                                      box=list(button.box))
        snapshot = None
        if options.snapshot:
            self.refs = {}
            for button in page.buttons:
                self.refs[f"e{self._next_ref}"] = button
                self._next_ref += 1
            snapshot = "\n".join(f'- button {json.dumps(b.name)} [ref={ref}]' for ref, b in self.refs.items())
        return Observation(
            snapshot=snapshot, element_ref_point=ref_point,
            screenshot=shot, settled=True, url=self.url, title=page.title,
            tabs=[Tab(id="t1", url=self.url, title=page.title, active=True)],
            page_text=page.text if options.page_text else None, element_at=element, cursor=cursor,
            text_sources=[TextSource.model_validate({"source": k, "text": v}) for k, v in page.sources.items()]
            if options.text_sources else None,
            blocked=self._take_blocked(), permission_requests=self._take_asked(),
            unresponsive=[UnresponsivePage(tab_id="t1", url=self.url, unresponsive_s=2.5)] if self.frozen else [],
            windows=list(self.windows) if options.windows else None,
        )

    def _window_action(self, data: dict[str, Any]) -> None:
        """Run a window action on :attr:`windows` (an unknown id: ``no_window``, as the daemon says)."""
        target = next((w for w in self.windows if w.id == data["window_id"]), None)
        if target is None:
            raise NoWindowError("no such window (fake)", detail={"window_id": data["window_id"]})
        x0, y0, x1, y1 = target.box
        if data["type"] == "window_close":
            self.windows.remove(target)
        elif data["type"] == "window_focus":
            self.windows = [w.model_copy(update={"focused": w is target}) for w in self.windows]
        elif data["type"] == "window_move":
            box = [data["x"], data["y"], data["x"] + x1 - x0, data["y"] + y1 - y0]
            self.windows = [w.model_copy(update={"box": box}) if w is target else w for w in self.windows]
        else:
            box = [x0, y0, x0 + data["width"], y0 + data["height"]]
            self.windows = [w.model_copy(update={"box": box}) if w is target else w for w in self.windows]

    def _take_asked(self) -> list[PermissionRequest]:
        asked, self.permission_requests = self.permission_requests, []
        return asked

    def _take_blocked(self) -> list[BlockedRequest]:
        blocked, self.blocked = self.blocked, []
        return blocked
