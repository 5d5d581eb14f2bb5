"""One live stream per sandbox, fanned out to every viewer (the console's live view).

:class:`LiveHub` keeps, for each session that someone watches, one
:class:`~deskpod.client.live.LiveClient` to its sandbox's daemon, however many viewers
there are: a viewer costs the sandbox nothing. The stream starts with the first viewer
and stops (the daemon stops capturing) when the last one leaves. When the daemon ends
it (a reset rotated the token, the display restarted) or the connection breaks, the
hub connects again with the session's current token while anyone watches.

Fan-out never waits for a viewer: each :class:`Viewer` holds only the newest frame it
has not yet taken, the newest pointer and the newest meta; a frame that arrives
before the viewer took the previous one replaces it (``dropped`` counts them). A slow
or stalled viewer therefore loses frames, and neither slows the others nor the
sandbox, nor grows the controller's memory.

A viewer that asks for video (``video=True``: the console's live view where WebCodecs
can decode it) gets H.264 instead of JPEG: the upstream runs one
:class:`~deskpod.service.live_video.VideoFeed` while it has such viewers, and each of
them queues the feed's chunks in order (a decoder needs every frame since the last key
frame). A video viewer that falls :data:`MAX_VIDEO_BACKLOG` chunks behind loses its
queue and waits for a key frame, which the feed then makes next: its frame rate follows
what its link and its decoder keep up with, and neither slows the others.

Beside the pixels each viewer gets the session's meta: the current URL (as the run's
audit records show it, redacted) and the run's state, from the records the controller
writes (:meth:`LiveHub.note`), plus the screen's size and whether the stream is live.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from deskpod.errors import DeskpodError, InvalidRequestError
from deskpod.protocol.live import DEFAULT_LIVE_FPS, DEFAULT_LIVE_QUALITY, LiveEnd, LivePointer
from deskpod.service.live_video import VideoChunk, VideoFeed

__all__ = [
    "LiveHub",
    "LiveMeta",
    "LiveTarget",
    "MAX_META_SESSIONS",
    "MAX_VIDEO_BACKLOG",
    "RECONNECT_MAX_S",
    "RECONNECT_MIN_S",
    "SESSION_CHECK_S",
    "Viewer",
]

log = logging.getLogger(__name__)

RECONNECT_MIN_S: Final = 0.25
"""First pause before the hub connects to a sandbox's stream again (seconds); it doubles
after each failure up to :data:`RECONNECT_MAX_S`."""

RECONNECT_MAX_S: Final = 2.0
"""Longest pause between attempts to connect a sandbox's stream again (seconds)."""

SESSION_CHECK_S: Final = 1.0
"""How often a stream's session is checked while the stream runs: a closed session's
stream is closed within this time, seconds."""
MAX_META_SESSIONS: Final = 256
"""Sessions whose URL and state the hub remembers (the most recent ones)."""

MAX_VIDEO_BACKLOG: Final = 8
"""Chunks a video viewer may have waiting; one more and it skips to the next key frame."""


class LiveTarget(Protocol):
    """Where a session's sandbox is: its daemon's ``/v1/ws`` URL and current control token."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str: ...


@dataclass
class LiveMeta:
    """What a viewer shows beside the pixels: the page's URL and the run's state (``None``:
    not known yet), the screen's size (pixels, ``None`` before the stream started) and the
    stream's status (``ended``: the session is gone)."""

    url: str | None = None
    state: str | None = None
    screen: tuple[int, int] | None = None
    stream: Literal["connecting", "live", "reconnecting", "ended"] = "connecting"

    def to_json(self) -> dict[str, Any]:
        """The meta message a viewer is sent."""
        screen = None if self.screen is None else {"width": self.screen[0], "height": self.screen[1]}
        return {"type": "meta", "url": self.url, "state": self.state, "screen": screen, "stream": self.stream}


@dataclass(eq=False)
class Viewer:
    """One viewer's mailbox: the newest frame, pointer and meta it has not taken yet and,
    for a ``video`` viewer, its queue of video chunks (see :meth:`offer_chunk`)."""

    session: str
    video: bool = False
    frame: bytes | None = None
    pointer: tuple[int, int] | None = None
    meta: dict[str, Any] | None = None
    dropped: int = 0
    delivered: int = 0
    chunks: deque[dict[str, Any] | bytes] = field(default_factory=deque)
    needs_key: bool = True
    config: dict[str, Any] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer_frame(self, jpeg: bytes) -> None:
        """Put ``jpeg`` in the mailbox, replacing a frame not yet taken."""
        if self.frame is not None:
            self.dropped += 1
        self.frame = jpeg
        self._wake.set()

    def offer_chunk(self, chunk: VideoChunk) -> bool:
        """Queue a video chunk (after its ``video`` config message when that changed).

        Returns:
            ``True`` when the viewer fell :data:`MAX_VIDEO_BACKLOG` chunks behind: its
            queue was dropped and it waits for a key frame (the feed should make one).
        """
        if not chunk.key and self.needs_key:
            self.dropped += 1
            return False
        waiting = sum(isinstance(item, bytes) for item in self.chunks)
        behind = not chunk.key and waiting >= MAX_VIDEO_BACKLOG
        if chunk.key or behind:
            # A key frame makes what waits useless; a viewer behind must wait for one.
            self.dropped += waiting + behind
            self.chunks.clear()
            self.config = None
            self.needs_key = behind
            if behind:
                return True
        config = chunk.config()
        if config != self.config:
            self.chunks.append(config)
            self.config = config
        self.chunks.append(chunk.packed())
        self._wake.set()
        return False

    def offer_pointer(self, x: int, y: int) -> None:
        """The pointer moved to (x, y), screen pixels."""
        self.pointer = (x, y)
        self._wake.set()

    def offer_meta(self, meta: dict[str, Any]) -> None:
        """The URL, state, screen or stream status changed."""
        self.meta = meta
        self._wake.set()

    async def take(self) -> list[dict[str, Any] | bytes]:
        """Wait for something new; return it, oldest kind first: the meta, the pointer
        (``{"type": "pointer", "x", "y"}``), then the frame's JPEG bytes or, for a video
        viewer, its queued ``{"type": "video"}`` configs and chunks in order."""
        await self._wake.wait()
        self._wake.clear()
        items: list[dict[str, Any] | bytes] = []
        if self.meta is not None:
            items.append(self.meta)
        if self.pointer is not None:
            items.append({"type": "pointer", "x": self.pointer[0], "y": self.pointer[1]})
        if self.frame is not None:
            items.append(self.frame)
            self.delivered += 1
        self.delivered += sum(isinstance(item, bytes) for item in self.chunks)
        items.extend(self.chunks)
        self.chunks.clear()
        self.meta = self.pointer = self.frame = None
        return items


class _Upstream:
    """One session's stream from its sandbox and the viewers it feeds (and, while any
    viewer wants video, the session's video feed)."""

    def __init__(self, hub: LiveHub, session: str) -> None:
        self.hub = hub
        self.session = session
        self.viewers: set[Viewer] = set()
        self.frame: bytes | None = None
        self.frame_size: tuple[int, int] = (0, 0)
        self.feed: VideoFeed | None = None
        self.pointer: tuple[int, int] | None = None
        self.task: asyncio.Task[None] | None = None
        self.connects = 0
        self.frames = 0

    def meta(self) -> dict[str, Any]:
        return self.hub.meta_of(self.session).to_json()

    def add_video_viewer(self) -> None:
        """A video viewer joined: start the feed, or have its next frame be a key frame
        (encoded at once from the last frame, so a still screen shows too)."""
        if self.feed is None:
            self.feed = VideoFeed(self.deliver)
        self.feed.want_key()
        if self.frame is not None:
            self.feed.offer(self.frame, *self.frame_size)

    def deliver(self, chunk: VideoChunk) -> None:
        """Queue a chunk for every video viewer; a viewer that fell behind asks for a key frame."""
        for viewer in self.viewers:
            if viewer.video and viewer.offer_chunk(chunk) and self.feed is not None:
                self.feed.want_key()

    async def drop_viewer(self, viewer: Viewer) -> None:
        """``viewer`` left: the feed stops with the last video viewer."""
        self.viewers.discard(viewer)
        if self.feed is not None and not any(v.video for v in self.viewers):
            feed, self.feed = self.feed, None
            await feed.close()

    def broadcast_meta(self) -> None:
        message = self.meta()
        for viewer in self.viewers:
            viewer.offer_meta(message)

    async def run(self) -> None:
        """Keep one stream open while anyone watches; fan out what it pushes."""
        pause_s = RECONNECT_MIN_S
        meta = self.hub.meta_of(self.session)
        while True:
            target = self.hub.target(self.session)
            if target is None:
                log.info("live: session %s is gone; its viewers are closed", self.session)
                meta.stream = "ended"
                self.broadcast_meta()
                return
            try:
                client = await self.hub.connect(target.url, target.token)
            except DeskpodError as exc:
                log.info("live: the stream of %s is not available (%s); trying again", self.session, exc.code)
                meta.stream = "reconnecting"
                self.broadcast_meta()
                await asyncio.sleep(pause_s)
                pause_s = min(RECONNECT_MAX_S, pause_s * 2)
                continue
            self.connects += 1
            screen = client.hello.screen
            meta.screen, meta.stream = (screen.width, screen.height), "live"
            self.broadcast_meta()
            try:
                ended = await self._pump_while_open(client)
                pause_s = RECONNECT_MIN_S
                if ended is not None:
                    log.info("live: the sandbox ended the stream of %s (%s)", self.session, ended.reason)
            except DeskpodError as exc:
                log.warning("live: the stream of %s broke (%s): %s", self.session, exc.code, exc.message[:200])
                await asyncio.sleep(pause_s)
                pause_s = min(RECONNECT_MAX_S, pause_s * 2)
            finally:
                await client.close()
            meta.stream = "reconnecting"
            self.broadcast_meta()

    async def _pump_while_open(self, client: Any) -> LiveEnd | None:
        """:meth:`_pump` while the session exists; ``None`` once it is gone (checked every
        :data:`SESSION_CHECK_S`): a closed session's stream is closed, so that it does not
        hold one of the daemon's few stream slots while its viewers stay attached."""
        pump = asyncio.ensure_future(self._pump(client))
        try:
            while not pump.done():
                await asyncio.wait([pump], timeout=SESSION_CHECK_S)
                if not pump.done() and self.hub.target(self.session) is None:
                    return None
            return pump.result()
        finally:
            if not pump.done():
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)

    async def _pump(self, client: Any) -> LiveEnd:
        """Fan out the stream's frames and pointer moves until it ends.

        Raises:
            BadReplyError: the daemon broke the protocol.
            SandboxError: the connection closed.
        """
        while True:
            item = await client.next()
            if isinstance(item, LiveEnd):
                return item
            if isinstance(item, LivePointer):
                self.pointer = (item.x, item.y)
                for viewer in self.viewers:
                    viewer.offer_pointer(item.x, item.y)
                continue
            self.frames += 1
            self.frame = item.jpeg
            self.frame_size = (item.header.width, item.header.height)
            pointer = item.header.pointer
            for viewer in self.viewers:
                if pointer is not None:
                    viewer.offer_pointer(pointer.x, pointer.y)
                if not viewer.video:
                    viewer.offer_frame(item.jpeg)
            if self.feed is not None:
                self.feed.offer(item.jpeg, *self.frame_size)
            if pointer is not None:
                self.pointer = (pointer.x, pointer.y)


Connect = Callable[[str, str], Awaitable[Any]]
"""Opens a sandbox's live stream from its ``/v1/ws`` URL and token
(:meth:`deskpod.client.live.LiveClient.connect` with the hub's rate and quality)."""


class LiveHub:
    """The controller's live streams, one per watched session.

    Args:
        target: the sandbox of a session (its daemon's URL and current token), or
            ``None`` when no such session runs.
        connect: opens a stream (default: :class:`~deskpod.client.live.LiveClient`
            at ``max_fps`` and ``quality``).
        max_fps: frames per second the hub asks each sandbox for, at most.
        quality: the JPEG quality it asks for.
    """

    def __init__(self, target: Callable[[str], LiveTarget | None], *, connect: Connect | None = None,
                 max_fps: int = DEFAULT_LIVE_FPS, quality: int = DEFAULT_LIVE_QUALITY) -> None:
        self.target = target
        self.max_fps = max_fps
        self.quality = quality
        self.connect: Connect = connect or self._connect
        self.upstreams: dict[str, _Upstream] = {}
        self._meta: OrderedDict[str, LiveMeta] = OrderedDict()

    async def _connect(self, url: str, token: str) -> Any:
        from deskpod.client.live import LiveClient

        return await LiveClient.connect(url, token, max_fps=self.max_fps, quality=self.quality)

    def meta_of(self, session: str) -> LiveMeta:
        """The session's meta (made when first asked; the oldest are forgotten beyond
        :data:`MAX_META_SESSIONS`)."""
        meta = self._meta.get(session)
        if meta is None:
            meta = self._meta[session] = LiveMeta()
            while len(self._meta) > MAX_META_SESSIONS:
                self._meta.popitem(last=False)
        else:
            self._meta.move_to_end(session)
        return meta

    def note(self, session: str, record: dict[str, Any]) -> None:
        """Learn a session's URL and state from one of its audit records (a record
        listener of :class:`~deskpod.service.server.service_state.ControllerService`)."""
        meta = self.meta_of(session)
        changed = False
        url = record.get("url")
        if isinstance(url, str) and url != meta.url:
            meta.url, changed = url[:2000], True
        if record.get("event") == "state" and isinstance(record.get("dst"), str):
            meta.state, changed = str(record["dst"])[:64], True
        upstream = self.upstreams.get(session)
        if changed and upstream is not None:
            upstream.broadcast_meta()

    @asynccontextmanager
    async def watch(self, session: str, *, video: bool = False) -> AsyncIterator[Viewer]:
        """Watch ``session`` for the block: the viewer gets the newest frame, pointer and
        meta at once, then whatever the stream pushes; as H.264 chunks when ``video``
        (:class:`~deskpod.service.live_video.VideoChunk`), otherwise as JPEG frames.

        Raises:
            InvalidRequestError: no such session runs.
        """
        if self.target(session) is None:
            raise InvalidRequestError(f"no session {session[:128]!r} to watch")
        upstream = self.upstreams.get(session)
        if upstream is None:
            upstream = self.upstreams[session] = _Upstream(self, session)
        viewer = Viewer(session, video=video)
        upstream.viewers.add(viewer)
        viewer.offer_meta(upstream.meta())
        if upstream.pointer is not None:
            viewer.offer_pointer(*upstream.pointer)
        if video:
            upstream.add_video_viewer()
        elif upstream.frame is not None:
            viewer.offer_frame(upstream.frame)
        if upstream.task is None or upstream.task.done():
            upstream.task = asyncio.get_running_loop().create_task(upstream.run())
        try:
            yield viewer
        finally:
            await upstream.drop_viewer(viewer)
            if not upstream.viewers:
                self.upstreams.pop(session, None)
                if upstream.task is not None:
                    upstream.task.cancel()
                    await asyncio.gather(upstream.task, return_exceptions=True)

    async def close(self) -> None:
        """Stop every stream."""
        for upstream in list(self.upstreams.values()):
            if upstream.task is not None:
                upstream.task.cancel()
            if upstream.feed is not None:
                await upstream.feed.close()
        await asyncio.gather(*(u.task for u in self.upstreams.values() if u.task is not None), return_exceptions=True)
        self.upstreams.clear()
