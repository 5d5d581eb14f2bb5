"""The live view's video encoder without a sandbox: JPEG frames in, H.264 that a decoder
plays back out; key frames where a viewer needs them; a hostile frame refused with a
typed error while the stream goes on; and a video viewer's queue (in order, skipping to
a key frame when it falls behind)."""

from __future__ import annotations

import io

import av
import pytest
from PIL import Image

from deskpod.errors import BadReplyError
from deskpod.service.live_hub import MAX_VIDEO_BACKLOG, Viewer
from deskpod.service.live_video import KEY_FLAG, VIDEO_HEADER_BYTES, H264Encoder, VideoChunk, codec_string


def jpeg(colour: tuple[int, int, int], size: tuple[int, int] = (320, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "JPEG", quality=60)
    return out.getvalue()


def decode(chunks: list[VideoChunk]) -> list[av.VideoFrame]:
    decoder = av.CodecContext.create("h264", "r")
    frames = []
    for chunk in chunks:
        frames += decoder.decode(av.Packet(chunk.data))
    return frames


def test_frames_encode_to_h264_a_decoder_plays_back_with_key_frames_where_asked() -> None:
    encoder = H264Encoder()
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (220, 220, 220)]
    chunks = [encoder.encode(jpeg(c), 320, 200, 1000 * i, key=(i == 2)) for i, c in enumerate(colours)]
    assert all(chunk is not None for chunk in chunks)
    done = [c for c in chunks if c is not None]
    assert [c.key for c in done] == [True, False, True, False], "the first and the asked-for frame are key frames"
    assert done[0].codec.startswith("avc1.42") and done[0].codec == codec_string(done[0].data)
    assert (done[0].width, done[0].height) == (320, 200)
    frames = decode(done)
    assert len(frames) == 4
    for frame, colour in zip(frames, colours, strict=True):
        shown = frame.to_image().getpixel((160, 100))
        assert all(abs(a - b) < 24 for a, b in zip(shown, colour, strict=True)), (shown, colour)
    packed = done[2].packed()
    assert packed[0] == KEY_FLAG and int.from_bytes(packed[1:VIDEO_HEADER_BYTES], "big") == 2000
    assert packed[VIDEO_HEADER_BYTES:] == done[2].data


def test_a_new_size_starts_over_with_a_key_frame_and_odd_sizes_are_made_even() -> None:
    encoder = H264Encoder()
    assert encoder.encode(jpeg((10, 10, 10)), 320, 200, 0, key=False) is not None
    chunk = encoder.encode(jpeg((250, 250, 250), (161, 99)), 161, 99, 10, key=False)
    assert chunk is not None and chunk.key and (chunk.width, chunk.height) == (160, 98)
    assert decode([chunk])[0].width == 160


@pytest.mark.parametrize("data, size", [
    (b"GIF89a" + b"\x00" * 64, (320, 200)),           # not a JPEG
    (jpeg((1, 2, 3)), (640, 400)),                    # not the size its header states
    (jpeg((1, 2, 3))[:40], (320, 200)),               # cut short
    (b"\xff\xd8" + b"\xff" * 300, (320, 200)),        # a JPEG's start and garbage
])
def test_a_hostile_frame_is_refused_with_a_typed_error_and_the_stream_goes_on(data: bytes,
                                                                                size: tuple[int, int]) -> None:
    encoder = H264Encoder()
    with pytest.raises(BadReplyError) as caught:
        encoder.encode(data, *size, 0, key=True)
    assert caught.value.detail["reason"] == "bad_image"
    chunk = encoder.encode(jpeg((9, 9, 9)), 320, 200, 1, key=False)
    assert chunk is not None and chunk.key and len(decode([chunk])) == 1


def chunk(index: int, key: bool) -> VideoChunk:
    return VideoChunk(bytes([index]), key, index, "avc1.42c020", 320, 200)


def test_a_video_viewer_gets_its_config_then_every_chunk_in_order_and_skips_to_a_key_frame_when_behind() -> None:
    viewer = Viewer("s1", video=True)
    assert viewer.offer_chunk(chunk(0, False)) is False and not viewer.chunks, "nothing before a key frame"
    viewer.offer_chunk(chunk(1, True))
    viewer.offer_chunk(chunk(2, False))
    assert list(viewer.chunks) == [chunk(1, True).config(), chunk(1, True).packed(), chunk(2, False).packed()]
    behind = [viewer.offer_chunk(chunk(3 + i, False)) for i in range(MAX_VIDEO_BACKLOG - 1)]
    assert behind[-1] is True and behind.count(True) == 1, "one chunk past the backlog asks for a key frame"
    assert not viewer.chunks and viewer.needs_key
    assert viewer.offer_chunk(chunk(50, False)) is False and not viewer.chunks
    viewer.offer_chunk(chunk(51, True))
    assert list(viewer.chunks) == [chunk(51, True).config(), chunk(51, True).packed()], "the config comes again"


def test_a_still_screen_after_a_delta_frame_gets_its_last_frame_again_as_a_key_frame() -> None:
    """A viewer whose decoder fell behind skips to the next key frame: when the screen then
    stays still, the feed sends one (the last frame again), or that viewer would show a stale
    picture for as long as nothing moves (seen in CI: the video view a colour behind the JPEG)."""
    import asyncio

    from deskpod.service.live_video import KEY_WHEN_STILL_S, VideoFeed

    async def main() -> list[VideoChunk]:
        got: list[VideoChunk] = []
        feed = VideoFeed(got.append)
        feed.offer(jpeg((200, 30, 30)), 320, 200)
        while len(got) < 1:
            await asyncio.sleep(0.01)
        feed.offer(jpeg((30, 200, 30)), 320, 200)
        await asyncio.sleep(KEY_WHEN_STILL_S + 0.25)
        await feed.close()
        return got

    got = asyncio.run(main())
    assert [c.key for c in got] == [True, False, True], "key, delta, then the still screen as a key frame once"
    shown = decode([got[2]])[0].to_image().getpixel((160, 100))
    assert all(abs(a - b) < 24 for a, b in zip(shown, (30, 200, 30), strict=True)), shown
