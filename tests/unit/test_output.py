"""Exec output a model can read (:mod:`deskpod.agentd.workspace.output`): caps, markers, binary and control bytes."""

from __future__ import annotations

import os
import re

import pytest
from deskpod.agentd.workspace.output import OMITTED_MARKER, StreamCap, clean_text
from deskpod.protocol import DEFAULT_EXEC_OUTPUT_BYTES, DEFAULT_EXEC_OUTPUT_LINES, ExecRequest

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def capped(data: bytes, limit_bytes: int = DEFAULT_EXEC_OUTPUT_BYTES,
           limit_lines: int | None = DEFAULT_EXEC_OUTPUT_LINES, chunk: int = 65_536) -> StreamCap:
    cap = StreamCap.split(limit_bytes, limit_lines)
    for start in range(0, len(data), chunk):
        cap.feed(data[start : start + chunk])
    return cap


def test_the_request_defaults_are_near_ten_kb_and_a_few_hundred_lines() -> None:
    request = ExecRequest(type="exec", id="x", cmd="true")
    assert (request.max_output_bytes, request.max_output_lines) == (10_240, 256)
    with pytest.raises(ValueError):
        ExecRequest(type="exec", id="x", cmd="true", max_output_bytes=4 * 1_048_576)
    with pytest.raises(ValueError):
        ExecRequest(type="exec", id="x", cmd="true", max_output_lines=1_000_000)


def test_seq_two_million_keeps_head_and_tail_lines_and_says_what_was_omitted() -> None:
    data = "".join(f"{i}\n" for i in range(1, 2_000_001)).encode()
    cap = capped(data)
    text = cap.text()
    lines = text.splitlines()
    assert lines[:3] == ["1", "2", "3"] and lines[-2:] == ["1999999", "2000000"]
    assert cap.truncated and not cap.binary and cap.newlines == 2_000_000 and cap.total == len(data)
    assert len(text) <= DEFAULT_EXEC_OUTPUT_BYTES + 200 and text.count("\n") <= DEFAULT_EXEC_OUTPUT_LINES + 2
    shown = [line for line in lines if line.isdigit()]
    assert len(shown) == DEFAULT_EXEC_OUTPUT_LINES
    omitted_bytes = len(data) - sum(len(line) + 1 for line in shown)
    assert OMITTED_MARKER.format(
        omitted_bytes=omitted_bytes, omitted_lines=2_000_000 - len(shown), total_bytes=len(data),
        total_lines=2_000_000,
    ) in text


def test_random_bytes_become_a_binary_marker_with_size_and_hex_preview() -> None:
    data = os.urandom(20_000_000)
    cap = capped(data)
    text = cap.text()
    assert cap.binary and cap.truncated and len(text) < 300
    assert "binary output not shown: 20000000 bytes" in text and data[:32].hex() in text
    assert not _UNSAFE.search(text.replace("\n", ""))


def test_control_bytes_are_escaped_or_stripped_and_newlines_and_tabs_stay() -> None:
    data = b"an ordinary line of test output, as a test runner prints it\n" * 2
    data += b"col1\tcol2\r\n\x1b[31mred\x1b[0m\x07bell\x00nul\x1b]0;title\x07\rprogress \xff\xfe end\n\xe2\x80\xaeevil\n"
    cap = capped(data)
    text = cap.text()
    assert not cap.binary and not cap.truncated
    assert text.split("\n", 2)[2] == "col1\tcol2\nred\\x07bell\\x00nul\\rprogress \\xff\\xfe end\n\\u202eevil\n"
    assert not _UNSAFE.search(text.replace("\n", "").replace("\t", ""))
    assert clean_text(b"\x1b[2J\x1b[Hplain") == "plain"


def test_escapes_never_make_the_text_longer_than_the_cap() -> None:
    cap = capped(b"ok\x07" * 10 + b"text " * 200, limit_bytes=100)
    assert cap.truncated and len(cap.text().split("\n[...")[0]) <= 50 and len(cap.text()) < 300


def test_a_long_single_line_is_cut_in_bytes() -> None:
    cap = capped(b"y" * 5_000_000 + b"\n")
    text = cap.text()
    head, tail = text.split(OMITTED_MARKER.format(
        omitted_bytes=5_000_001 - DEFAULT_EXEC_OUTPUT_BYTES, omitted_lines=0, total_bytes=5_000_001, total_lines=1,
    ))
    assert head == "y" * (DEFAULT_EXEC_OUTPUT_BYTES // 2) and tail == "y" * (DEFAULT_EXEC_OUTPUT_BYTES // 2 - 1) + "\n"


@pytest.mark.parametrize("limit_bytes", [1001, 1002, 1003, 1004])
def test_utf8_characters_are_never_split_at_the_cut(limit_bytes: int) -> None:
    data = ("é€😀" * 5000).encode()
    text = capped(data, limit_bytes=limit_bytes, limit_lines=None).text()
    head, tail = text.split("\n[...")[0], text.split("...]\n")[1]
    assert "\ufffd" not in text and "\\x" not in text
    assert head and tail and set(head + tail) <= set("é€😀")
    omitted = int(re.search(r"truncated: (\d+) bytes", text).group(1))  # type: ignore[union-attr]
    assert omitted + len(head.encode()) + len(tail.encode()) == len(data)


def test_short_output_is_kept_whole_and_the_marker_counts_are_exact() -> None:
    assert capped(b"hello\n").text() == "hello\n"
    cap = capped(b"".join(b"line %d\n" % i for i in range(1000)), limit_bytes=100_000, limit_lines=10)
    lines = cap.text().splitlines()
    assert lines[:5] == [f"line {i}" for i in range(5)] and lines[-5:] == [f"line {i}" for i in range(995, 1000)]
    assert "8810 bytes and 990 line breaks omitted (of 8890 bytes, 1000 line breaks)" in cap.text()


def test_memory_stays_bounded() -> None:
    cap = StreamCap.split(1000, 10)
    for _ in range(10_000):
        cap.feed(b"x" * 4096)
    assert len(cap._head) <= 500 and cap._tail_len <= 500 + 4096
