"""A run's screen recording: the MP4 its frames make, the record its log seals, the retention
that keeps or drops it, and the check that finds a recording changed after its run.

The sandbox's live stream is the part these tests are not about: a fake stream hands the
recorder JPEG frames as :class:`~deskpod.client.live.LiveClient` does (the real stream is
tested in tests/integration/test_live.py; a run recorded from it, in test_takeover.py and
test_console.py).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import av
import pytest
from fastapi import FastAPI, Request
from PIL import Image
from typer.testing import CliRunner

from deskpod.cli import EXIT_FAILURE, EXIT_OK, app
from deskpod.client.live import LiveImage
from deskpod.controller import recording
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.gui import run_task
from deskpod.controller.policy.policy_file import Policy
from deskpod.controller.recording import LiveSource, RunRecorder
from deskpod.controller.recording_store import (
    check_log_recording, check_recording, keeps_recording, prune_recordings, recording_path,
)
from deskpod.controller.run_api import RunResult
from deskpod.controller.task import TaskSpec
from deskpod.controller.video import Mp4Writer, file_sha256
from deskpod.errors import BusyError, UnauthorizedError
from deskpod.protocol.live import LiveEnd, LiveFrame
from deskpod.service.console.history import history_router
from deskpod.service.console.replay_html import EXPORT_CSP, render_run
from deskpod.service.console.timeline import load_run
from deskpod.settings import get_settings
from fake_sandbox import FakeSandbox, Page


def jpeg(colour: tuple[int, int, int], size: tuple[int, int] = (321, 201)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "JPEG", quality=90)
    return out.getvalue()


def decoded(path: Path) -> list[tuple[float, tuple[int, int], tuple[int, int, int]]]:
    """Each frame of the MP4 at ``path``: its time (seconds), size and centre pixel."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        frames = []
        for frame in container.decode(stream):
            image = frame.to_image()
            frames.append((float(frame.time), image.size, image.getpixel((image.width // 2, image.height // 2))))
        return frames


def near(pixel: tuple[int, int, int], colour: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 12 for a, b in zip(pixel, colour, strict=True))


def test_the_mp4_has_each_frame_at_its_arrival_and_the_last_one_lasts_to_the_end(tmp_path: Path) -> None:
    path = tmp_path / "run.mp4"
    writer = Mp4Writer(path)
    assert writer.add(jpeg((250, 0, 0)), 0.0)
    assert writer.add(jpeg((0, 250, 0)), 0.5)
    assert writer.add(jpeg((0, 0, 250), (160, 100)), 1.25)  # a smaller frame: scaled to the video's size
    assert not writer.add(b"\xff\xd8\xff not a JPEG", 1.3)
    bomb = io.BytesIO()
    Image.new("L", (7000, 5000)).save(bomb, "JPEG", quality=5)  # more pixels than an 8K screen, in 0.5 MB
    assert not writer.add(bomb.getvalue(), 1.4), "a JPEG over MAX_SCREENSHOT_PIXELS is not decoded"
    facts = writer.close(3.0)
    frames = decoded(path)
    assert [t for t, _, _ in frames] == [0.0, 0.5, 1.25, 3.0]
    assert {size for _, size, _ in frames} == {(320, 200)}  # even sides, as H.264's 4:2:0 needs
    assert [near(p, c) for (_, _, p), c in zip(frames, [(250, 0, 0), (0, 250, 0), (0, 0, 250), (0, 0, 250)], strict=True)] == [True] * 4
    assert (facts.frames, facts.duration_s, facts.width, facts.height) == (4, 3.0, 320, 200)
    assert facts.size_bytes == path.stat().st_size and facts.sha256 == file_sha256(path)
    assert writer.skipped == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with av.open(str(path)) as container:
        keys = [packet.is_keyframe for packet in container.demux(video=0) if packet.size]
    # The first frame is a key frame; the next (a small change) and the repeated last one are not
    # (the third, a new colour over the whole screen, may be one: x264's scene cut).
    assert len(keys) == 4 and keys[0] and not keys[1] and not keys[3], keys


class FakeStream:
    """A live stream that sends ``frames`` (colours) ``gap_s`` apart, then ends (``end``) or goes quiet."""

    def __init__(self, frames: list[tuple[int, int, int]], gap_s: float = 0.05, end: bool = False) -> None:
        self.frames = list(frames)
        self.gap_s = gap_s
        self.end = end
        self.seq = 0
        self.closed = False

    async def next(self) -> Any:
        if not self.frames:
            if self.end:
                return LiveEnd(reason="display_restarted")
            await asyncio.sleep(3600)
        await asyncio.sleep(self.gap_s)
        data = jpeg(self.frames.pop(0))
        self.seq += 1
        return LiveImage(LiveFrame(seq=self.seq, width=321, height=201, size_bytes=len(data)), data)

    async def close(self) -> None:
        self.closed = True


def record(tmp_path: Path, streams: list[Any], keep: bool, run_s: float = 0.5) -> tuple[dict[str, Any], list[Any]]:
    opened: list[Any] = []

    async def connect(url: str, token: str) -> Any:
        stream = streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        opened.append(stream)
        return stream

    async def main() -> dict[str, Any]:
        recorder = RunRecorder(tmp_path, "run-abc", LiveSource("ws://sandbox:8765/v1/ws", "t"), connect)
        recorder.start()
        await asyncio.sleep(run_s)
        return await recorder.stop(keep)

    return asyncio.run(main()), opened


def test_the_recorder_writes_the_streams_frames_and_reconnects_when_the_daemon_ends_it(tmp_path: Path) -> None:
    streams = [BusyError("every stream taken"), FakeStream([(250, 0, 0), (0, 250, 0)], end=True),
               FakeStream([(0, 0, 250)])]
    fields, opened = record(tmp_path, streams, keep=True, run_s=0.6)
    path = recording_path(tmp_path, "run-abc")
    assert fields["recorded"] is True and fields["kept"] is True, fields
    assert fields["file"] == "recordings/run-abc.mp4" and fields["sha256"] == file_sha256(path)
    assert fields["frames"] == 4 and fields["dropped"] == 0 and (fields["width"], fields["height"]) == (320, 200)
    assert all(stream.closed for stream in opened) and len(opened) == 2
    frames = decoded(path)
    assert [near(p, c) for (_, _, p), c in zip(frames, [(250, 0, 0), (0, 250, 0), (0, 0, 250), (0, 0, 250)], strict=True)] == [True] * 4
    assert frames[0][0] == 0.0 and frames[-1][0] == pytest.approx(fields["duration_s"], abs=0.002)
    assert 0.15 < fields["duration_s"] < 0.6  # from the first frame (after a pause for the busy stream) to the stop


def test_a_recording_not_kept_is_deleted_and_its_hash_still_returned(tmp_path: Path) -> None:
    fields, _ = record(tmp_path, [FakeStream([(250, 0, 0)])], keep=False, run_s=0.2)
    assert fields["recorded"] is True and fields["kept"] is False and len(fields["sha256"]) == 64
    assert not recording_path(tmp_path, "run-abc").exists()


def test_a_recorder_that_cannot_record_says_why_and_leaves_no_file(tmp_path: Path) -> None:
    fields, _ = record(tmp_path, [UnauthorizedError("the sandbox refused the control token")], keep=True, run_s=0.1)
    assert fields == {"recorded": False, "reason": "UnauthorizedError: the sandbox refused the control token"}
    fields, _ = record(tmp_path, [FakeStream([])], keep=True, run_s=0.1)
    assert fields == {"recorded": False, "reason": "no frame came from the sandbox's live stream"}
    assert not recording_path(tmp_path, "run-abc").exists()


def test_the_retention_of_screenshots_is_the_recordings(tmp_path: Path) -> None:
    assert [keeps_recording(r, ok) for r in ("all", "failures", "none") for ok in (True, False)] == [
        True, True, False, True, False, False]
    old, new = recording_path(tmp_path, "run-old"), recording_path(tmp_path, "run-new")
    old.parent.mkdir()
    old.write_bytes(b"old")
    new.write_bytes(b"new")
    os.utime(old, (time.time() - 8 * 86_400,) * 2)
    assert prune_recordings(tmp_path, None) == 0 and old.exists()
    assert prune_recordings(tmp_path, 7.0) == 1
    assert not old.exists() and new.exists()


def test_the_check_finds_a_recording_changed_replaced_or_not_sealed(tmp_path: Path) -> None:
    path = recording_path(tmp_path, "run-abc")
    path.parent.mkdir()
    path.write_bytes(b"the video")
    sealed = [{"event": "recording", "recorded": True, "sha256": file_sha256(path)}]
    assert check_recording(tmp_path, "run-abc", sealed).state == "matches"
    path.write_bytes(b"the video, edited")
    found = check_recording(tmp_path, "run-abc", sealed)
    assert found.state == "modified" and not found.ok and "was modified" in found.text
    assert check_recording(tmp_path, "run-abc", [{"event": "recording", "recorded": False, "reason": "x"}]).state \
        == "unsealed"
    path.unlink()
    assert check_recording(tmp_path, "run-abc", sealed).state == "not_kept"
    assert check_recording(tmp_path, "run-abc", []).state == "none"


SIGNER = AuditSigner.generate()


def recorded_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunResult:
    """A failed run on the in-memory sandbox, recorded from a fake stream of two frames."""
    async def connect(url: str, token: str) -> Any:
        assert (url, token) == ("ws://sandbox:8765/v1/ws", "the-token")
        return FakeStream([(250, 0, 0), (0, 250, 0)], gap_s=0.01)

    monkeypatch.setattr(recording, "_connect", connect)
    task = TaskSpec.model_validate({"name": "look", "start_url": "http://a.test/", "allowed_domains": [],
                                    "success": {"page_text_contains": "never", "timeout_s": 0.3},
                                    "steps": [{"actions": [{"type": "wait", "seconds": 0.2}]}]})
    sandbox = FakeSandbox({"http://a.test/": Page("A", "a page")})
    return asyncio.run(run_task(task, sandbox, audit_dir=tmp_path, policy=Policy(screenshots="failures"),
                                signer=SIGNER, live=LiveSource("ws://sandbox:8765/v1/ws", "the-token")))


def test_a_run_records_its_screen_and_seals_the_hash_before_run_finished(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKPOD_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "controller.pub").write_text(SIGNER.public_key.pem(), encoding="utf-8")
    result = recorded_run(tmp_path / "audit", monkeypatch)
    assert result.status == "failed"
    lines = [json.loads(line) for line in result.audit_log.read_text().splitlines()]
    assert [r["event"] for r in lines[-2:]] == ["recording", "run_finished"]
    assert lines[-2]["recorded"] is True and lines[-2]["kept"] is True  # a failed run's, under "failures"
    assert check_log_recording(result.audit_log).state == "matches"
    verify = ["verify-log", str(result.audit_log), "--public-key", str(tmp_path / "controller.pub")]
    get_settings.cache_clear()
    try:
        intact = CliRunner().invoke(app, verify)
        video = recording_path(tmp_path / "audit", result.run_id)
        video.write_bytes(video.read_bytes() + b"\0")
        tampered = CliRunner().invoke(app, verify)
    finally:
        get_settings.cache_clear()
    assert intact.exit_code == EXIT_OK and "recording: " in intact.stdout and "matches" in intact.stdout, intact.output
    assert tampered.exit_code == EXIT_FAILURE and "was modified" in tampered.stdout, tampered.output


async def get(router_app: FastAPI, path: str, *headers: tuple[bytes, bytes]) -> tuple[int, dict[str, str], bytes]:
    """One GET through the ASGI app: status, headers (lower-case names), body."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), *headers], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}
    await router_app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, body


def test_the_console_plays_and_offers_the_recording_and_the_export_inlines_it(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    result = recorded_run(tmp_path, monkeypatch)
    video = recording_path(tmp_path, result.run_id).read_bytes()

    async def authorize(request: Request) -> object | None:
        return "alice"

    console = FastAPI()
    console.include_router(history_router(tmp_path, authorize, public_key=SIGNER.public_key))
    src = f"/console/runs/{result.run_id}/recording"
    status, headers, page = asyncio.run(get(console, f"/console/runs/{result.run_id}"))
    assert status == 200 and "media-src 'self'" in headers["content-security-policy"]
    assert f'<video class="recording" controls preload="metadata" src="{src}"'.encode() in page
    assert f'href="{src}" download="deskpod-{result.run_id}.mp4"'.encode() in page
    status, headers, body = asyncio.run(get(console, src))
    assert status == 200 and headers["content-type"] == "video/mp4" and body == video
    status, headers, body = asyncio.run(get(console, src, (b"range", b"bytes=0-99")))
    assert status == 206 and body == video[:100], "a player seeks with byte ranges"
    run = load_run(tmp_path, result.run_id, public_key=SIGNER.public_key)
    assert run is not None
    exported = render_run(run, tmp_path)
    assert f'src="data:video/mp4;base64,{base64.b64encode(video).decode()}"' in exported
    assert "media-src data:" in EXPORT_CSP
    recording_path(tmp_path, result.run_id).write_bytes(video[:-1] + b"\1")
    status, _, page = asyncio.run(get(console, f"/console/runs/{result.run_id}"))
    assert b"was modified" in page and b"<video" not in page
    assert asyncio.run(get(console, src))[0] == 404, "a modified recording is not served"
