"""Record a run's screen: the sandbox's live stream, encoded as an MP4 while the run goes on.

A :class:`RunRecorder` opens its own :class:`~deskpod.client.live.LiveClient` to the run's
sandbox (one of the daemon's :data:`~deskpod.protocol.live.MAX_LIVE_STREAMS`) at
:data:`RECORDING_FPS` frames per second at most. The daemon sends a frame only when the
screen changed, and paints over every secret the run named before it encodes one (the mask
of screenshots: :mod:`deskpod.agentd.secret_mask`), so the video shows what the screenshots
show. Each frame is stamped with its arrival and handed to an encoder thread
(:class:`~deskpod.controller.video.Mp4Writer`) through a queue of
:data:`MAX_QUEUED_FRAMES`: the event loop never encodes, and a frame that finds the queue
full is dropped (counted), so the recorder never slows the run. When the daemon ends the
stream (a display restarted) or the connection breaks, the recorder connects again
while the run goes on; a still screen in between is the previous frame lasting.

:meth:`RunRecorder.stop` ends it at the run's end and returns the fields of the run's
:data:`~deskpod.controller.recording_store.RECORDING_EVENT` record (file, bytes, frames,
duration, SHA-256). A recorder that fails (PyAV missing, the sandbox's streams all taken,
the file not writable, an encoder error) never fails the run: it is logged, its file is
removed, and the record says ``recorded: false`` with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from deskpod.client.live import LiveClient, LiveImage
from deskpod.controller.audit_log import utc_now
from deskpod.controller.recording_store import RECORDINGS_DIR, recording_path
from deskpod.controller.video import Mp4Writer, VideoFacts
from deskpod.errors import BadReplyError, DeskpodError, InvalidRequestError, UnauthorizedError
from deskpod.protocol.live import LiveEnd

__all__ = [
    "LiveSource", "MAX_QUEUED_FRAMES", "RECONNECT_MAX_S", "RECONNECT_MIN_S", "RECORDING_FPS", "RECORDING_QUALITY",
    "RunRecorder", "STOP_WAIT_S",
]

log = logging.getLogger(__name__)

RECORDING_FPS: Final = 10
"""Frames per second a recording takes at most while the screen changes (the daemon's ``max_fps``)."""

RECORDING_QUALITY: Final = 70
"""JPEG quality the recorder asks the daemon's frames in (1..95), before they are encoded as H.264."""

MAX_QUEUED_FRAMES: Final = 30
"""Frames waiting for the encoder at most (three seconds at :data:`RECORDING_FPS`); one more is dropped."""

RECONNECT_MIN_S: Final = 0.25
"""First pause before the recorder connects to the stream again, seconds; it doubles up to :data:`RECONNECT_MAX_S`."""

RECONNECT_MAX_S: Final = 4.0
"""Longest pause between attempts to connect the stream again, seconds."""

STOP_WAIT_S: Final = 5.0
"""Longest wait, seconds, for the recorder's stream task to end when the run stops it."""

Connect = Callable[[str, str], Awaitable[Any]]
"""Opens a sandbox's live stream from its ``/v1/ws`` URL and token (a :class:`LiveClient`)."""


@dataclass(frozen=True)
class LiveSource:
    """Where the recorder opens the run's live stream: the daemon's ``/v1/ws`` ``url`` and control ``token``."""

    url: str
    token: str


async def _connect(url: str, token: str) -> LiveClient:
    return await LiveClient.connect(url, token, max_fps=RECORDING_FPS, quality=RECORDING_QUALITY)


class _Encoder:
    """The encoder thread: takes ``(jpeg, arrival_s)`` from its queue and writes them (see the module)."""

    def __init__(self, writer: Mp4Writer) -> None:
        self.writer = writer
        self.frames: queue.Queue[tuple[bytes, float] | None] = queue.Queue(MAX_QUEUED_FRAMES)
        self.dropped = 0
        self.error: str | None = None
        self.thread = threading.Thread(target=self._work, name="deskpod-recording", daemon=True)
        self.thread.start()

    def offer(self, jpeg: bytes, at_s: float) -> None:
        """Queue a frame, or drop it when the queue is full or the encoder failed (never waits)."""
        if self.error is not None:
            return
        try:
            self.frames.put_nowait((jpeg, at_s))
        except queue.Full:
            self.dropped += 1

    def _work(self) -> None:
        while (item := self.frames.get()) is not None:
            if self.error is not None:
                continue
            try:
                self.writer.add(*item)
            except Exception as exc:  # noqa: BLE001 - an encoder error ends the recording, never the run
                self.error = f"the encoder failed: {type(exc).__name__}: {str(exc)[:200]}"
                log.warning("recording %s: %s", self.writer.path.name, self.error)

    def finish(self, end_s: float) -> VideoFacts:
        """Let the queued frames be encoded, end the thread and close the file (blocks: call it in a thread).

        Raises:
            RuntimeError: the encoder failed (its reason).
            OSError: the file cannot be finished.
        """
        self.frames.put(None)
        self.thread.join()
        if self.error is not None:
            self.writer.abort()
            raise RuntimeError(self.error)
        return self.writer.close(end_s)


class RunRecorder:
    """One run's recording (see the module): :meth:`start` when the run has its sandbox,
    :meth:`stop` before its log is sealed.

    Args:
        audit_dir: the run's audit folder; the file is ``recordings/<run_id>.mp4`` in it.
        run_id: the run.
        source: the sandbox's stream.
        connect: opens a stream (default :meth:`LiveClient.connect` at :data:`RECORDING_FPS`
            and :data:`RECORDING_QUALITY`).
    """

    def __init__(self, audit_dir: Path, run_id: str, source: LiveSource, connect: Connect | None = None) -> None:
        self.path = recording_path(audit_dir, run_id)
        self.source = source
        self._connect = connect or _connect
        self._encoder: _Encoder | None = None
        self._task: asyncio.Task[None] | None = None
        self._first_s: float | None = None
        self._started_at: str | None = None
        self._failure: str | None = None
        self._stopping = False
        self.connects = 0

    def start(self) -> None:
        """Start recording in a task of the running loop (returns at once)."""
        self._task = asyncio.get_running_loop().create_task(self._record(), name=f"recording {self.path.stem}")

    async def _record(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._encoder = _Encoder(await asyncio.to_thread(Mp4Writer, self.path))
        except (DeskpodError, OSError) as exc:
            self._fail(exc)
            return
        pause = RECONNECT_MIN_S
        while not self._stopping:
            try:
                client = await self._connect(self.source.url, self.source.token)
            except (UnauthorizedError, BadReplyError, InvalidRequestError) as exc:  # trying again cannot help
                self._fail(exc)
                return
            except DeskpodError as exc:  # busy (every stream taken), or not reachable: try again
                self._failure = f"{exc.code}: {exc.message}"[:300]
                await asyncio.sleep(pause)
                pause = min(pause * 2, RECONNECT_MAX_S)
                continue
            self.connects += 1
            pause = RECONNECT_MIN_S
            broke = False
            try:
                await self._frames(client)
            except BadReplyError as exc:  # the sandbox broke the protocol: no more of its frames
                self._fail(exc)
                return
            except DeskpodError as exc:
                log.info("recording %s: the stream broke (%s): connecting again", self.path.stem, exc.message)
                broke = True
            except Exception as exc:  # noqa: BLE001 - a recorder failure never fails the run
                self._fail(exc)
                return
            finally:
                await client.close()
            if broke:  # not at once: a connection that breaks as it opens would spin
                await asyncio.sleep(RECONNECT_MIN_S)

    async def _frames(self, client: Any) -> None:
        """Hand every frame of ``client``'s stream to the encoder until the daemon ends it."""
        assert self._encoder is not None
        while True:
            message = await client.next()
            if isinstance(message, LiveEnd):
                return
            if isinstance(message, LiveImage):
                now = time.monotonic()
                if self._first_s is None:
                    self._first_s, self._started_at = now, utc_now()
                self._encoder.offer(message.jpeg, now - self._first_s)

    async def _halt(self) -> None:
        """End the stream task: cancel it until it ends (a cancellation can be lost in a connection
        that completes at that moment), at most :data:`STOP_WAIT_S`."""
        self._stopping = True
        deadline = time.monotonic() + STOP_WAIT_S
        while self._task is not None and not self._task.done() and time.monotonic() < deadline:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=0.2)
        task = self._task
        if task is not None and task.done() and not task.cancelled() and (error := task.exception()) is not None:
            log.warning("recording %s: the stream task failed: %r", self.path.stem, error)

    def _fail(self, exc: BaseException) -> None:
        message = exc.message if isinstance(exc, DeskpodError) else str(exc)
        self._failure = f"{type(exc).__name__}: {message}"[:300]
        log.warning("recording %s failed: %s", self.path.stem, self._failure)

    async def stop(self, keep: bool) -> dict[str, Any]:
        """End the recording: close the stream, encode what is queued, close the file, and delete
        it unless ``keep`` (the retention rule: its hash is returned either way).

        Returns:
            The fields of the run's ``recording`` record: ``recorded`` true with ``file``
            (relative to the audit folder), ``size_bytes``, ``frames``, ``dropped``,
            ``duration_s``, ``width``, ``height``, ``started_at`` (UTC, the first frame) and
            ``sha256``, and ``kept``; or ``recorded`` false with ``reason`` (the file is then removed).
        """
        await self._halt()
        encoder, reason = self._encoder, self._failure
        if encoder is not None:
            end_s = time.monotonic() - self._first_s if self._first_s is not None else 0.0
            try:
                facts = await asyncio.to_thread(encoder.finish, end_s)
            except RuntimeError as exc:  # the encoder's own failure, in words
                reason = str(exc)[:300]
            except Exception as exc:  # noqa: BLE001 - a recorder failure never fails the run
                log.warning("recording %s: the file could not be finished: %r", self.path.stem, exc)
                reason = f"the file could not be finished: {type(exc).__name__}: {str(exc)[:200]}"
            else:
                if facts.frames:
                    if not keep:
                        self.path.unlink(missing_ok=True)
                    return {"recorded": True, "file": f"{RECORDINGS_DIR}/{self.path.name}",
                            "size_bytes": facts.size_bytes, "frames": facts.frames, "dropped": encoder.dropped,
                            "duration_s": round(facts.duration_s, 3), "width": facts.width, "height": facts.height,
                            "started_at": self._started_at, "sha256": facts.sha256, "kept": keep}
        self.path.unlink(missing_ok=True)
        return {"recorded": False, "reason": reason or "no frame came from the sandbox's live stream"}
