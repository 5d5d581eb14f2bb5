"""The live view without a sandbox: the frame wire format against hostile bytes, the
client's checks against a hostile daemon, and the hub's fan-out (one stream per session,
a stalled viewer only loses frames, the stream stops with the last viewer, it follows a
rotated token)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from deskpod.client.live import LiveClient, LiveImage, live_url
from deskpod.service import live_hub as live_module
from deskpod.service.live_hub import LiveHub
from deskpod.errors import BadReplyError, BusyError, InvalidRequestError
from deskpod.protocol import Hello, Size, encode_message
from deskpod.protocol.live import (
    MAX_LIVE_FRAME_BYTES,
    LiveEnd,
    LiveFrame,
    LivePointer,
    Watching,
    pack_frame,
    unpack_frame,
)

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 60
SCREEN = Size(width=1280, height=800)


def header(seq: int = 1, size: int = len(JPEG), **fields: Any) -> LiveFrame:
    return LiveFrame(seq=seq, width=fields.pop("width", 1280), height=fields.pop("height", 800), size_bytes=size,
                     **fields)


def test_a_frame_round_trips_and_hostile_frames_are_refused() -> None:
    data = pack_frame(header(pointer=LivePointer(x=3, y=4)), JPEG)
    parsed, jpeg = unpack_frame(data)
    assert jpeg == JPEG and parsed.pointer == LivePointer(x=3, y=4)
    good_head = header().model_dump_json().encode()
    hostile = [
        b"\x00\x00",                                                      # shorter than the prefix
        (10**6).to_bytes(4, "big") + good_head + JPEG,                    # a header length past the cap
        len(good_head).to_bytes(4, "big") + good_head + JPEG[:-1],        # the JPEG cut short
        len(good_head).to_bytes(4, "big") + good_head + b"GIF89a" + JPEG[6:],  # not a JPEG
        (5).to_bytes(4, "big") + b"{bad}" + JPEG,                         # not a header
    ]
    for data in hostile:
        with pytest.raises(BadReplyError) as caught:
            unpack_frame(data)
        assert caught.value.detail["reason"] == "live_frame"
    with pytest.raises(ValueError):
        LiveFrame(seq=1, width=1, height=1, size_bytes=MAX_LIVE_FRAME_BYTES + 1)
    with pytest.raises(ValueError):
        pack_frame(header(size=3), JPEG)


def test_the_stream_url_sits_beside_the_control_channel() -> None:
    assert live_url("ws://sandbox:8765/v1/ws") == "ws://sandbox:8765/v1/live"
    assert live_url("wss://10.0.0.2:8765/v1/ws?x=1") == "wss://10.0.0.2:8765/v1/live"
    with pytest.raises(InvalidRequestError):
        live_url("http://sandbox:8765/v1/ws")


@asynccontextmanager
async def hostile_daemon(*messages: str | bytes, start: str | None = None) -> AsyncIterator[str]:
    """A daemon that greets, starts the stream (or answers ``start``) and sends ``messages``."""

    async def handler(ws: ServerConnection) -> None:
        await ws.send(encode_message(Hello(screen=SCREEN, model_size=SCREEN, sandbox_id="sbx-hostile0")))
        watch = json.loads(await ws.recv())
        await ws.send(start or Watching(id=watch["id"], screen=SCREEN, max_fps=20, quality=60).model_dump_json())
        for message in messages:
            await ws.send(message)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/v1/ws"


@pytest.mark.parametrize("bad", [
    pack_frame(header(width=1281), JPEG),                          # larger than the screen
    pack_frame(header(pointer=LivePointer(x=1280, y=0)), JPEG),    # the pointer off the screen
    LivePointer(x=5, y=900).model_dump_json(),
    '{"type": "frame", "seq": 1}',                                 # a header as text
    "not json",
], ids=["too_wide", "pointer_off_frame", "pointer_off_screen", "text_frame", "garbage"])
def test_the_client_refuses_a_hostile_daemons_stream(bad: str | bytes) -> None:
    async def main() -> None:
        async with hostile_daemon(pack_frame(header(), JPEG), bad) as url:
            client = await LiveClient.connect(url, "t" * 20)
            assert isinstance(await client.next(5), LiveImage)
            with pytest.raises(BadReplyError):
                await client.next(5)

    asyncio.run(main())


def test_the_client_refuses_frames_out_of_order_and_reports_a_busy_daemon() -> None:
    async def main() -> None:
        async with hostile_daemon(pack_frame(header(seq=2), JPEG), pack_frame(header(seq=2), JPEG)) as url:
            client = await LiveClient.connect(url, "t" * 20)
            assert isinstance(await client.next(5), LiveImage)
            with pytest.raises(BadReplyError):
                await client.next(5)
        busy = json.dumps({"type": "error", "id": None, "error": {"code": "busy", "message": "4 streams run",
                                                                  "detail": {}}})
        async with hostile_daemon(start=busy) as url:
            with pytest.raises(BusyError):
                await LiveClient.connect(url, "t" * 20)

    asyncio.run(main())


@dataclass
class Target:
    url: str
    token: str


class FakeStream:
    """A daemon stream the test feeds: frames, pointer moves and an end."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.hello = Hello(screen=SCREEN, model_size=SCREEN, sandbox_id="sbx-fake0000")
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = False
        self.seq = 0

    def frame(self, jpeg: bytes = JPEG) -> None:
        self.seq += 1
        self.inbox.put_nowait(LiveImage(header(seq=self.seq, size=len(jpeg), pointer=LivePointer(x=1, y=2)), jpeg))

    async def next(self, timeout_s: float | None = None) -> Any:
        return await self.inbox.get()

    async def close(self) -> None:
        self.closed = True


class Sandboxes:
    """The hub's sessions and the streams it opened."""

    def __init__(self) -> None:
        self.targets = {"s1": Target("ws://sandbox:8765/v1/ws", "token-1")}
        self.streams: list[FakeStream] = []
        self.opened = asyncio.Event()

    def target(self, session: str) -> Target | None:
        return self.targets.get(session)

    async def connect(self, url: str, token: str) -> FakeStream:
        stream = FakeStream(token)
        self.streams.append(stream)
        self.opened.set()
        return stream

    async def stream(self, count: int = 1) -> FakeStream:
        while len(self.streams) < count:
            self.opened.clear()
            await asyncio.wait_for(self.opened.wait(), 5)
        return self.streams[count - 1]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_hub_opens_one_stream_for_every_viewer_and_a_stalled_viewer_only_drops() -> None:
    async def main() -> None:
        sandboxes = Sandboxes()
        hub = LiveHub(sandboxes.target, connect=sandboxes.connect)
        async with hub.watch("s1") as reader, hub.watch("s1") as stalled:
            stream = await sandboxes.stream()
            got: list[bytes] = []
            for index in range(50):
                stream.frame(JPEG + bytes([index]))
                await settle()
                got += [item for item in await reader.take() if isinstance(item, bytes)]
            assert len(sandboxes.streams) == 1, "one daemon stream for two viewers"
            assert len(got) == 50, "the reading viewer got every frame"
            assert stream.inbox.empty(), "the stalled viewer never held the stream up"
            assert stalled.dropped == 49 and stalled.frame == JPEG + bytes([49]), "it holds only the newest"
            items = await stalled.take()
            assert items[-1] == JPEG + bytes([49]) and {"type": "pointer", "x": 1, "y": 2} in items
        await settle()
        assert stream.closed and not hub.upstreams, "the stream stops when nobody watches"

    asyncio.run(main())


def test_the_hub_follows_a_rotated_token_and_a_late_viewer_gets_the_last_frame() -> None:
    async def main() -> None:
        sandboxes = Sandboxes()
        hub = LiveHub(sandboxes.target, connect=sandboxes.connect)
        async with hub.watch("s1") as viewer:
            first = await sandboxes.stream()
            first.frame()
            await settle()
            sandboxes.targets["s1"] = Target("ws://sandbox:8765/v1/ws", "token-2")
            first.inbox.put_nowait(LiveEnd(reason="reset"))
            second = await sandboxes.stream(2)
            assert first.closed and second.token == "token-2"
            second.frame(JPEG + b"late")
            await settle()
            async with hub.watch("s1") as late:
                items = await late.take()
                assert items[0]["type"] == "meta" and items[0]["stream"] == "live"
                assert items[-1] == JPEG + b"late"
            metas = [i["stream"] for i in await viewer.take() if isinstance(i, dict) and i["type"] == "meta"]
            assert metas == ["live"]
        with pytest.raises(InvalidRequestError):
            async with hub.watch("no-such-session"):
                pass

    asyncio.run(main())


def test_the_hub_shows_the_runs_url_and_state_from_its_records() -> None:
    async def main() -> None:
        sandboxes = Sandboxes()
        hub = LiveHub(sandboxes.target, connect=sandboxes.connect)
        hub.note("s1", {"event": "run_started", "start_url": "http://demo.test/"})
        async with hub.watch("s1") as viewer:
            stream = await sandboxes.stream()
            await viewer.take()
            hub.note("s1", {"event": "navigate", "url": "http://demo.test/a"})
            hub.note("s1", {"event": "state", "src": "planning", "dst": "executing"})
            meta = [i for i in await viewer.take() if isinstance(i, dict) and i["type"] == "meta"][-1]
            assert meta["url"] == "http://demo.test/a" and meta["state"] == "executing"
            sandboxes.targets.clear()  # the session is gone: the viewer is told, the stream is not reopened
            stream.inbox.put_nowait(LiveEnd(reason="reset"))
            for _ in range(20):
                items = await viewer.take()
                if any(isinstance(i, dict) and i.get("stream") == "ended" for i in items):
                    break
            else:
                raise AssertionError("the viewer was not told the session ended")

    asyncio.run(main())


def test_a_closed_sessions_stream_is_closed_though_its_viewers_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon holds a few streams: a session that closed (its agent's connection went)
    gives its stream back while the stream still runs, though a console page still shows it."""
    monkeypatch.setattr(live_module, "SESSION_CHECK_S", 0.01)

    async def main() -> None:
        sandboxes = Sandboxes()
        hub = LiveHub(sandboxes.target, connect=sandboxes.connect)
        async with hub.watch("s1") as viewer:
            stream = await sandboxes.stream()
            stream.frame()
            await settle()
            sandboxes.targets.clear()
            for _ in range(100):
                if stream.closed:
                    break
                await asyncio.sleep(0.01)
            assert stream.closed and len(sandboxes.streams) == 1, "closed, not reopened"
            assert any(isinstance(i, dict) and i.get("stream") == "ended" for i in await viewer.take())

    asyncio.run(main())


def real_jpeg(colour: tuple[int, int, int]) -> bytes:
    from io import BytesIO

    from PIL import Image

    out = BytesIO()
    Image.new("RGB", (SCREEN.width, SCREEN.height), colour).save(out, "JPEG", quality=60)
    return out.getvalue()


def test_video_viewers_share_one_encoder_a_late_one_starts_on_a_key_frame_and_jpeg_viewers_keep_jpeg() -> None:
    async def chunks_of(viewer: Any, count: int) -> list[bytes]:
        got: list[bytes] = []
        while len(got) < count:
            items = await asyncio.wait_for(viewer.take(), 10)
            got += [item for item in items if isinstance(item, bytes)]
        return got

    async def main() -> None:
        sandboxes = Sandboxes()
        hub = LiveHub(sandboxes.target, connect=sandboxes.connect)
        async with hub.watch("s1", video=True) as first, hub.watch("s1") as jpeg_viewer:
            stream = await sandboxes.stream()
            frames = [real_jpeg((40 * i, 90, 200)) for i in range(4)]
            stream.frame(frames[0])
            got = await chunks_of(first, 1)
            stream.frame(frames[1])
            got += await chunks_of(first, 1)
            assert [c[0] & 1 for c in got] == [1, 0], "a key frame, then a delta"
            async with hub.watch("s1", video=True) as late:
                late_got = await chunks_of(late, 1)
                assert late_got[0][0] & 1 == 1, "the late viewer starts on a key frame made of the last frame"
            feed = hub.upstreams["s1"].feed
            assert feed is not None and feed.encoded == 3, "one encoding for all video viewers"
            jpegs = [i for i in await jpeg_viewer.take() if isinstance(i, bytes)]
            assert jpegs == [frames[1]], "a JPEG viewer still gets the daemon's JPEG"
        await settle()
        assert not hub.upstreams and stream.closed

    asyncio.run(main())
