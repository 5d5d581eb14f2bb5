"""The host's check of a screenshot a sandbox sends (deskpod/client/untrusted.py,
``screenshot_bytes``), as a hostile daemon would try it: a JPEG is decoded at 1/8 scale
to check it, and must be refused exactly when a full-size decode refuses it, whatever
was cut or damaged in the stream."""

from __future__ import annotations

import io
import random

import pytest
from hostile_daemon import screenshot
from PIL import Image, ImageDraw

from deskpod.errors import BadReplyError
from deskpod.protocol import Screenshot
from deskpod.client.untrusted import screenshot_bytes

SIZE = (640, 400)
"""A small screen: the check reads any size the same way, and 240 full decodes of it stay quick."""


def _screen_jpeg(progressive: bool) -> bytes:
    """A JPEG of a page-like screen: lines of text on a light background, a coloured bar."""
    image = Image.new("RGB", SIZE, (246, 246, 250))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, SIZE[0], 80), fill=(40, 90, 200))
    for row, y in enumerate(range(100, SIZE[1], 22)):
        draw.text((20 + row % 7 * 9, y), "Penguins waddle across icy shores, 640x400. " * 2, fill=(20, 20, 20))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=80, progressive=progressive)
    return out.getvalue()


def _damaged(data: bytes, seed: int) -> list[bytes]:
    """``data`` cut at 60 points, with 1-20 random bytes changed (120 times), and with a
    run of up to 2000 bytes taken out (60 times)."""
    rng = random.Random(seed)
    cases = [data[:cut] for cut in range(0, len(data), max(1, len(data) // 60))]
    for _ in range(120):
        changed = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            changed[rng.randrange(len(changed))] = rng.randrange(256)
        cases.append(bytes(changed))
    for _ in range(60):
        start = rng.randrange(len(data))
        cases.append(data[:start] + data[start + rng.randint(1, 2000):])
    return cases


def _full_decode_reads(data: bytes) -> bool:
    """Whether Pillow decodes ``data`` at full size as a JPEG of :data:`SIZE`."""
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as image:
            if image.size != SIZE:
                return False
            image.load()
    except (OSError, ValueError, SyntaxError):
        return False
    return True


def _passes(data: bytes) -> bool:
    shot = Screenshot.model_validate(screenshot(data, format="jpeg", width=SIZE[0], height=SIZE[1],
                                                screen_width=SIZE[0], screen_height=SIZE[1]))
    try:
        return screenshot_bytes(shot) == data
    except BadReplyError as exc:
        assert exc.detail["reason"] == "bad_image", exc
        return False


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
def test_a_damaged_jpeg_is_refused_exactly_when_a_full_decode_refuses_it(progressive: bool) -> None:
    data = _screen_jpeg(progressive)
    assert _passes(data)
    cases = _damaged(data, seed=19)
    verdicts = [(_full_decode_reads(case), _passes(case)) for case in cases]
    differ = [i for i, (full, checked) in enumerate(verdicts) if full != checked]
    assert not differ, [(i, len(cases[i]), verdicts[i]) for i in differ[:5]]
    refused = sum(1 for full, _ in verdicts if not full)
    assert refused >= len(cases) // 5, (refused, len(cases))  # the damage is real, not only harmless bytes
