"""Ordinary pages as agents meet them, against the real sandbox image.

Fonts: a page in any script of the most-spoken languages shows letters, not boxes. The
demo site's ``fonts-scripts`` fixture draws letters of each script with Chromium's font
fallback and lists those drawn as the ``.notdef`` glyph ("tofu") or as nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from deskpod_stack import Stack, with_client
from deskpod.protocol import ObserveOptions

pytestmark = pytest.mark.integration


def test_every_script_of_the_most_spoken_languages_renders_without_boxes(stack: Stack) -> None:
    """Indic, Southeast Asian, Ethiopic, Tibetan and Javanese letters, and Urdu's, were boxes
    with only the CJK, emoji and DejaVu fonts; every letter of the fixture's 31 scripts has a
    glyph now."""

    async def body(client: Any) -> str:
        observation = await client.navigate("http://demo.test/fixtures/fonts-scripts",
                                            ObserveOptions(screenshot=False, page_text=True))
        return str(observation.page_text)

    line = next(line for line in with_client(stack, body).splitlines() if line.startswith("FONTS "))
    found = json.loads(line.removeprefix("FONTS "))
    assert found["scripts"] == 31 and found["checked"] > 90, found
    assert found["missing"] == {}, found["missing"]


def test_a_page_gets_webgl_and_webgl2_drawn_by_llvmpipe(stack: Stack) -> None:
    """With ``--disable-gpu`` a page got no WebGL context at all; now WebGL and WebGL2 contexts
    exist, on ANGLE over Mesa's llvmpipe, draw the fixture's red triangle over its blue clear
    colour, and read both pixels back."""

    async def body(client: Any) -> str:
        observation = await client.navigate("http://demo.test/fixtures/webgl-triangle",
                                            ObserveOptions(screenshot=False, page_text=True))
        return str(observation.page_text)

    line = next(line for line in with_client(stack, body).splitlines() if line.startswith("WEBGL "))
    found = json.loads(line.removeprefix("WEBGL "))
    for kind in ("webgl", "webgl2"):
        drawn = found[kind]
        assert drawn is not None, found
        assert "llvmpipe" in drawn["renderer"] and "SwiftShader" not in drawn["renderer"], drawn
        assert (drawn["centre"], drawn["corner"], drawn["error"]) == ([255, 0, 0, 255], [0, 0, 255, 255], 0), drawn
