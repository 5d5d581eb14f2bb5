"""The screenshot's perceptual hash (agentd/display/capture.py, ``average_hash``): its bits, and
no deprecated Pillow call on the way (``Image.getdata`` goes in Pillow 14)."""

from __future__ import annotations

import warnings

from PIL import Image, ImageDraw

from deskpod.agentd.display.capture import average_hash


def test_the_hash_sets_the_bits_of_the_brighter_pixels_row_by_row_without_a_deprecated_call() -> None:
    """A screen dark on its left half and bright on its right: in each of the 8 rows the
    last 4 of 8 bits are set (0x0f per row); all dark: no bit set."""
    image = Image.new("RGB", (1280, 800), (10, 10, 10))
    ImageDraw.Draw(image).rectangle((640, 0, 1279, 799), fill=(240, 240, 240))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert average_hash(image) == "0f" * 8
        assert average_hash(Image.new("RGB", (64, 40))) == "0" * 16
