"""``python -m bench fonts``'s pure readers: the image's layers by kind, the fixture's boxed scripts."""

from __future__ import annotations

import pytest

from bench.fonts import boxed_scripts, layer_rows

HISTORY = [
    {"CreatedBy": "/bin/sh -c #(nop)  USER deskpod", "Size": 0},
    {"CreatedBy": "/bin/sh -c fc-cache -f", "Size": 692_664},
    {"CreatedBy": "/bin/sh -c apt-get update && apt-get install -y libgl1-mesa-dri libglx-mesa0 libgl1", "Size": 14_862},
    {"CreatedBy": "/bin/sh -c apt-get update && apt-get install -y fonts-noto-core", "Size": 45_677_756},
    {"CreatedBy": "/bin/sh -c apt-get install -y chromium fonts-noto-cjk fonts-noto-color-emoji", "Size": 1_003_383_046},
    {"CreatedBy": "", "Size": 116_666_717},
    {"CreatedBy": "/bin/sh -c pip install ...", "Size": 100_000_000},
]


def test_layers_are_named_by_what_they_install_and_add_up_to_the_image() -> None:
    rows = dict(layer_rows(HISTORY))
    assert rows["the whole image"] == sum(entry["Size"] for entry in HISTORY)
    assert rows["Noto core fonts (the other scripts of the 30)"] == 45_677_756
    assert rows["Mesa for WebGL, named on its own"] == 14_862
    assert rows["fontconfig's cache of every font"] == 692_664
    assert rows["the base image"] == 116_666_717
    assert rows["every other layer"] == 100_000_000
    assert list(rows)[0] == "the whole image"


def test_a_kind_without_a_layer_is_left_out() -> None:
    rows = dict(layer_rows([{"CreatedBy": "/bin/sh -c apt-get install -y chromium fonts-noto-cjk", "Size": 10}]))
    assert rows == {"the whole image": 10,
                    "packages: Chromium, Xvfb (with Mesa), CJK, emoji and DejaVu fonts, Python": 10}


def test_boxed_scripts_counts_the_fixtures_missing_scripts() -> None:
    text = 'heading\nFONTS {"checked": 102, "scripts": 31, "missing": {"Thai": ["ไ"], "Lao": ["ລ", "າ"]}}\n'
    assert boxed_scripts(text) == 2
    assert boxed_scripts('FONTS {"checked": 102, "scripts": 31, "missing": {}}') == 0


@pytest.mark.parametrize("text", ["FONTS pending", "no result here", 'FONTS {"missing": []}'])
def test_boxed_scripts_refuses_a_page_without_the_result(text: str) -> None:
    with pytest.raises(ValueError):
        boxed_scripts(text)
