"""The daemon's mask set: what a request may ask to
mask, that a page it cannot read is masked whole, how boxes are painted, and that every
text of an observation has the secret replaced (and only the secret)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from PIL import Image
from pydantic import ValidationError

from deskpod.agentd.display.mask_paint import MaskPlan, paint_mask
from deskpod.agentd.browser.secret_regions import SecretRegions
from deskpod.agentd.secret_mask import MAX_MASK_BOXES, SecretMask
from deskpod.errors import BrowserError, InvalidRequestError
from deskpod.protocol import ActRequest, FocusedElement, NavigateRequest, Observation, Screenshot, Tab
from deskpod.protocol.mask import MAX_MASK_SECRET_CHARS, MAX_MASK_SECRETS

SECRET = "s3cr3t-Pa55"


class _Unreadable:
    """A browser whose page cannot be read (a JavaScript dialog blocks it)."""

    device_scale_factor = 1.0
    reads = 0

    async def read_page(self, use: Any) -> Any:
        self.reads += 1
        raise BrowserError("a dialog is open")


def test_a_request_names_at_most_the_cap_of_secrets_each_bounded() -> None:
    ok = ActRequest.model_validate({"type": "act", "id": "a", "actions": [], "mask": [SECRET]})
    assert ok.mask == [SECRET]
    assert ActRequest.model_validate({"type": "act", "id": "a", "actions": []}).mask == []
    for bad in (["x"] * (MAX_MASK_SECRETS + 1), ["x" * (MAX_MASK_SECRET_CHARS + 1)], [""]):
        with pytest.raises(ValidationError):
            ActRequest.model_validate({"type": "act", "id": "a", "actions": [], "mask": bad})
    assert NavigateRequest.model_validate({"type": "navigate", "id": "n", "url": "https://a.test/",
                                           "mask": [SECRET]}).mask == [SECRET]


def test_the_set_is_bounded_kept_and_cleared_by_a_reset() -> None:
    mask = SecretMask(_Unreadable())  # type: ignore[arg-type]
    mask.add([SECRET, SECRET])
    mask.add([SECRET])
    assert mask.count == 1
    mask.add([f"other-{i}" for i in range(MAX_MASK_SECRETS - 1)])
    with pytest.raises(InvalidRequestError):
        mask.add(["one-too-many"])
    assert mask.count == MAX_MASK_SECRETS
    mask.clear()
    assert mask.count == 0


def test_no_secret_asks_nothing_and_an_unreadable_page_is_masked_whole() -> None:
    browser = _Unreadable()
    mask = SecretMask(browser)  # type: ignore[arg-type]
    assert asyncio.run(mask.plan()).empty and browser.reads == 0
    mask.add([SECRET])
    plan = asyncio.run(mask.plan())
    assert plan.whole and browser.reads == 1
    image, painted = paint_mask(Image.new("RGB", (40, 30), (255, 255, 255)), plan, None)
    assert painted == -1 and image.getextrema() == ((0, 0), (0, 0), (0, 0))


def test_a_page_showing_the_secret_too_often_is_masked_whole() -> None:
    class Repeating:
        device_scale_factor = 1.0

        async def read_page(self, use: Any) -> Any:
            return SecretRegions(boxes=[(0.0, float(i), 10.0, i + 1.0) for i in range(MAX_MASK_BOXES + 1)])

    mask = SecretMask(Repeating())  # type: ignore[arg-type]
    mask.add([SECRET])
    assert asyncio.run(mask.plan()).whole


def test_boxes_are_painted_in_screen_pixels_and_clipped_to_a_crop() -> None:
    white = Image.new("RGB", (100, 80), (255, 255, 255))
    plan = MaskPlan(boxes=((10, 10, 30, 20), (500, 500, 600, 600)))
    image, painted = paint_mask(white, plan, None)
    assert painted == 1 and image.getpixel((10, 10)) == (0, 0, 0) and image.getpixel((29, 19)) == (0, 0, 0)
    assert image.getpixel((30, 20)) == (255, 255, 255) and image.getpixel((50, 50)) == (255, 255, 255)
    crop, painted = paint_mask(white, plan, None, origin=(20, 15))  # a zoom whose corner is screen (20, 15)
    assert painted == 1 and crop.getpixel((0, 0)) == (0, 0, 0) and crop.getpixel((9, 4)) == (0, 0, 0)
    assert crop.getpixel((10, 5)) == (255, 255, 255)
    tip, painted = paint_mask(white, MaskPlan(tooltip=True), (50, 40))
    assert painted == 1 and tip.getpixel((50, 45)) == (0, 0, 0) and tip.getpixel((10, 10)) == (255, 255, 255)
    assert paint_mask(white, MaskPlan(), None) == (white, 0)


def test_every_text_of_an_observation_has_the_secret_replaced_and_nothing_else() -> None:
    shot = Screenshot(id="s-1", format="png", width=2, height=2, screen_width=2, screen_height=2, scale_x=1.0,
                      scale_y=1.0, sha256="0" * 64, data="AAAA")
    obs = Observation(
        screenshot=shot, url="https://shop.test/?echo=" + SECRET, title=f"Welcome {SECRET}",
        tabs=[Tab(id="t1", url="https://shop.test/", title=SECRET, active=True)],
        page_text=f"Your password is {SECRET}. Sign in to the demo shop.",
        snapshot=f'- textbox "Password" value="{SECRET}" [ref=e1]',
        focused=FocusedElement(tag="input", name=f"hint {SECRET}", editable=True),
    )
    mask = SecretMask(_Unreadable())  # type: ignore[arg-type]
    assert mask.observation(obs) is obs
    mask.add([SECRET])
    masked = mask.observation(obs)
    dumped = masked.model_dump_json()
    assert SECRET not in dumped
    stars = "*" * len(SECRET)
    assert masked.page_text == f"Your password is {stars}. Sign in to the demo shop."
    assert masked.snapshot == f'- textbox "Password" value="{stars}" [ref=e1]'
    assert masked.screenshot == shot and masked.focused is not None and masked.focused.editable
