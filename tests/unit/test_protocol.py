"""Unit tests for the wire contract (no Docker, no X)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from deskpod.errors import (
    InvalidActionError,
    InvalidRequestError,
    MessageTooLargeError,
    OutOfBoundsError,
    UnknownActionError,
    error_from_wire,
    ActionTimeoutError,
    InternalError,
    RateLimitedError,
    SnapshotError,
    SnapshotIntegrityError,
)
from deskpod.protocol import (
    ACTION_TYPES,
    MAX_MESSAGE_BYTES,
    NO_INPUT_ACTION_TYPES,
    ActRequest,
    Click,
    CoordinateMap,
    Drag,
    ErrorBody,
    ErrorReply,
    Hello,
    Navigate,
    Result,
    Scroll,
    Size,
    parse_action,
    parse_request,
    parse_server_message,
    request_id,
    ResetRequest,
    RestoreQuery,
    SnapshotManifest,
)


def act(*actions: object, rid: str = "r1") -> str:
    return json.dumps({"type": "act", "id": rid, "actions": list(actions)})


def test_act_request_parses_every_action_type() -> None:
    raw = act(
        {"type": "click", "x": 1, "y": 2, "button": "right"},
        {"type": "double_click", "x": 3, "y": 4},
        {"type": "move", "x": 5, "y": 6},
        {"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 9, "y": 9}]},
        {"type": "scroll", "x": 1, "y": 1, "scroll_y": 3, "scroll_x": -2},
        {"type": "keypress", "keys": ["CTRL", "a"]},
        {"type": "type", "text": "👍🏽 日本語"},
        {"type": "wait", "seconds": 0.5},
        {"type": "screenshot"},
    )
    req = parse_request(raw)
    assert isinstance(req, ActRequest)
    assert [a.type for a in req.actions] == [
        "click", "double_click", "move", "drag", "scroll", "keypress", "type", "wait", "screenshot",
    ]
    assert req.actions[0] == Click(type="click", x=1, y=2, button="right")
    assert req.observe.format == "png"


def test_unknown_action_is_named_in_a_typed_error() -> None:
    """An unknown action gets a structured error that names it."""
    with pytest.raises(UnknownActionError) as info:
        parse_request(act({"type": "click", "x": 1, "y": 1}, {"type": "foo"}, rid="abc"))
    assert info.value.code == "unknown_action"
    assert info.value.detail == {"action_index": 1, "action": "foo", "id": "abc"}
    assert "'foo'" in info.value.message


@pytest.mark.parametrize(
    "action, fragment",
    [
        ({"type": "click", "x": "10", "y": 5}, "x"),
        ({"type": "click", "x": 1.5, "y": 5}, "x"),
        ({"type": "click", "x": 1, "y": 5, "button": "thumb"}, "button"),
        ({"type": "click", "x": 1}, "y"),
        ({"type": "click", "x": 1, "y": 1, "extra": True}, "extra"),
        ({"type": "drag", "path": [{"x": 1, "y": 1}]}, "path"),
        ({"type": "keypress", "keys": []}, "keys"),
        ({"type": "wait", "seconds": -1}, "seconds"),
        ({"type": "scroll", "x": 1, "y": 1, "scroll_y": 10_000}, "scroll_y"),
    ],
)
def test_bad_fields_are_invalid_action_errors_naming_the_field(action: dict, fragment: str) -> None:
    with pytest.raises(InvalidActionError) as info:
        parse_request(act(action))
    assert info.value.code == "invalid_action"
    assert fragment in info.value.message
    assert info.value.detail["action_index"] == 0


def test_a_navigate_action_parses_with_its_url_exactly_and_its_load_timeout() -> None:
    """``navigate`` is an action of the ``Action`` union (an ``act`` batch may hold
    it); the URL is kept exactly as given, never completed or normalised."""
    req = parse_request(act({"type": "navigate", "url": "http://demo.test/page"},
                            {"type": "navigate", "url": "HTTPS://Demo.test:8443/a%20b?q=1#f", "timeout_s": 5}))
    assert isinstance(req, ActRequest)
    assert req.actions == [Navigate(type="navigate", url="http://demo.test/page", timeout_s=30.0),
                           Navigate(type="navigate", url="HTTPS://Demo.test:8443/a%20b?q=1#f", timeout_s=5.0)]
    assert "navigate" in ACTION_TYPES and "navigate" not in NO_INPUT_ACTION_TYPES


@pytest.mark.parametrize(("url", "fragment"), [
    ("ftp://demo.test/", "only http and https"), ("javascript:alert(1)", "only http and https"),
    ("file:///etc/passwd", "only http and https"), ("demo.test/page", "only http and https"),
    ("http://", "no host"), ("http:///path", "no host"), ("http://demo.test:99999/", "port"),
    ("http://demo.test/a b", "control character"), ("http://demo.test/\nx", "control character"),
    ("http://demo.test/\x00", "control character"), ("http://demo.test/\x7f", "control character"),
    ("http://demo.test/\u0085", "control character"), ("http://demo.test/" + "a" * 8200, "8192"),
    ("", "at least 1"), ("http://[::1", "IPv6"),
])
def test_a_url_no_browser_should_open_is_an_invalid_action_naming_why(url: str, fragment: str) -> None:
    """Not http(s), no host, a bad port, whitespace or a control character, over
    MAX_URL_CHARS: ``invalid_action`` before anything runs, saying what is wrong."""
    with pytest.raises(InvalidActionError) as info:
        parse_request(act({"type": "navigate", "url": url}))
    assert info.value.code == "invalid_action" and info.value.detail["action"] == "navigate"
    assert fragment in info.value.message, info.value.message
    with pytest.raises(InvalidActionError):
        parse_request(act({"type": "navigate", "url": "http://demo.test/", "timeout_s": 61}))


@pytest.mark.parametrize(
    "raw",
    ["not json", "[]", '"act"', '{"type": "teleport", "id": "1"}', '{"type": "act", "id": "1"}',
     '{"type": "act", "id": "", "actions": []}', '{"type": "navigate", "id": "1", "url": "file:///etc/passwd"}',
     b"\xff\xfe"],
)
def test_malformed_requests_are_invalid_request_errors(raw: str | bytes) -> None:
    with pytest.raises(InvalidRequestError):
        parse_request(raw)


def test_oversized_message_is_refused_before_parsing() -> None:
    with pytest.raises(MessageTooLargeError):
        parse_request(" " * (MAX_MESSAGE_BYTES + 1))


def test_error_reply_keeps_the_request_id_when_readable() -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_request('{"type": "navigate", "id": "n1", "url": "javascript:alert(1)"}')
    assert info.value.detail["id"] == "n1"


def test_server_messages_round_trip() -> None:
    hello = Hello(screen=Size(width=1280, height=800), model_size=Size(width=1280, height=800),
                  sandbox_id="sbx-0123456789abcdef")
    assert parse_server_message(hello.model_dump_json()) == hello
    reply = ErrorReply(id="x", error={"code": "busy", "message": "m", "detail": {}})
    assert isinstance(parse_server_message(reply.model_dump_json()), ErrorReply)
    assert isinstance(parse_server_message(Result(id="1").model_dump_json()), Result)


def test_wire_codes_map_to_a_fixed_table_and_unknown_codes_are_internal() -> None:
    err = error_from_wire({"code": "timeout", "message": "slow", "detail": {"a": 1}})
    assert isinstance(err, ActionTimeoutError) and isinstance(err, TimeoutError)
    assert err.detail == {"a": 1}
    odd = error_from_wire({"code": "os.system", "message": "x" * 10_000, "detail": "nope"})
    assert type(odd) is InternalError
    assert len(odd.message) == 2000 and odd.detail == {}


def test_parse_action_accepts_models_shapes_only() -> None:
    assert isinstance(parse_action({"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 1, "y": 1}]}), Drag)
    assert isinstance(parse_action({"type": "scroll", "x": 0, "y": 0}), Scroll)
    with pytest.raises(InvalidActionError):
        parse_action("click")


class TestCoordinateMap:
    def test_identity_when_model_space_is_the_screen(self) -> None:
        cmap = CoordinateMap(Size(width=1280, height=800))
        assert cmap.scale_x == 1.0 and cmap.scale_y == 1.0
        assert cmap.to_screen(0, 0) == (0, 0)
        assert cmap.to_screen(1279, 799) == (1279, 799)
        assert cmap.to_screen(640, 400) == (640, 400)

    def test_scale_comes_from_the_sizes_never_defaults_to_one(self) -> None:
        """1920x1080 screen, 1280x720 model space: (640, 360) is (960, 540)."""
        cmap = CoordinateMap(Size(width=1920, height=1080), Size(width=1280, height=720))
        assert cmap.scale_x == 1.5
        assert abs(cmap.to_screen(640, 360)[0] - 960) <= 1
        assert abs(cmap.to_screen(640, 360)[1] - 540) <= 1

    def test_downscaled_click_lands_on_the_target(self) -> None:
        """1366x768 model space over 1920x1080; (1067, 640) is (1500, 900) ±1."""
        cmap = CoordinateMap(Size(width=1920, height=1080), Size(width=1366, height=768))
        x, y = cmap.to_screen(1067, 640)
        assert abs(x - 1500) <= 1 and abs(y - 900) <= 1

    def test_bounds_are_checked_in_model_space(self) -> None:
        """(1800, 100) and (-5, 10) are out of a 1366x768 model space; (1365, 767) maps to the corner."""
        cmap = CoordinateMap(Size(width=1920, height=1080), Size(width=1366, height=768))
        for x, y in [(1800, 100), (-5, 10), (1366, 0), (0, 768)]:
            with pytest.raises(OutOfBoundsError) as info:
                cmap.to_screen(x, y)
            assert info.value.detail["width"] == 1366
        x, y = cmap.to_screen(1365, 767)
        assert abs(x - 1919) <= 1 and abs(y - 1079) <= 1


def test_scroll_mapping_point_is_scaled_but_not_shifted() -> None:
    """960x540 over 1920x1080: (480, 270) is (960, 540); scroll notch counts never pass through the map."""
    cmap = CoordinateMap(Size(width=1920, height=1080), Size(width=960, height=540))
    assert cmap.to_screen(480, 270) == (960, 540)
    assert cmap.to_model(960, 540) == (480, 270)


# --- reset and snapshots


def test_reset_request_parses_and_checks_its_fields() -> None:
    digest = "ab" * 32
    req = parse_request(json.dumps({"type": "reset", "id": "z1", "token_sha256": digest}))
    assert isinstance(req, ResetRequest) and req.start_url is None and req.token_sha256 == digest
    req = parse_request(
        json.dumps({"type": "reset", "id": "z2", "token_sha256": digest, "start_url": "https://demo.test/x"})
    )
    assert isinstance(req, ResetRequest) and req.start_url == "https://demo.test/x"
    bad = [
        {"type": "reset", "id": "z3"},
        {"type": "reset", "id": "z4", "token_sha256": "AB" * 32},
        {"type": "reset", "id": "z5", "token_sha256": "ab" * 31},
        {"type": "reset", "id": "z6", "token_sha256": digest, "start_url": "file:///etc/passwd"},
        {"type": "reset", "id": "z7", "token_sha256": digest, "start_url": "javascript:alert(1)"},
        {"type": "reset", "id": "z8", "token_sha256": digest, "keep_cookies": True},
    ]
    for data in bad:
        with pytest.raises(InvalidRequestError) as caught:
            parse_request(json.dumps(data))
        assert caught.value.detail.get("id") == data["id"]


def test_request_id_is_read_from_any_object_and_none_otherwise() -> None:
    assert request_id('{"type": "whatever", "id": "q"}') == "q"
    assert request_id('{"id": 5}') is None
    assert request_id("[1]") is None
    assert request_id("{not json") is None
    assert request_id(b" " * (MAX_MESSAGE_BYTES + 1)) is None
    assert request_id(json.dumps({"id": "x" * 500})) == "x" * 128


def test_snapshot_manifest_and_restore_query_are_strict() -> None:
    entry = {"sha256": "0" * 64, "size": 3}
    manifest = SnapshotManifest.model_validate(
        {"format": "deskpod-snapshot/1", "created_at": 1.5, "files": {"Default/Cookies": entry}}
    )
    assert manifest.files["Default/Cookies"].size == 3
    for data in (
        {"format": "deskpod-snapshot/2", "created_at": 1.5, "files": {}},
        {"format": "deskpod-snapshot/1", "created_at": 1.5, "files": {"a": {"sha256": "xyz", "size": 1}}},
        {"format": "deskpod-snapshot/1", "created_at": 1.5, "files": {"a": {"sha256": "0" * 64, "size": -1}}},
        {"format": "deskpod-snapshot/1", "created_at": 1.5, "files": {}, "extra": 1},
    ):
        with pytest.raises(ValidationError):
            SnapshotManifest.model_validate(data)
    assert RestoreQuery.model_validate({}).start_url is None
    with pytest.raises(ValidationError):
        RestoreQuery.model_validate({"start_url": "chrome://settings"})


def test_new_error_codes_map_to_their_classes() -> None:
    for code, cls in (
        ("rate_limited", RateLimitedError), ("snapshot_failed", SnapshotError), ("snapshot_corrupt", SnapshotIntegrityError)
    ):
        err = error_from_wire({"code": code, "message": "m", "detail": {"reason": "r"}})
        assert type(err) is cls and err.code == code and err.detail == {"reason": "r"}
    assert isinstance(error_from_wire({"code": "snapshot_corrupt", "message": ""}), SnapshotError)



# ---- any byte sequence in any string field, and untrusted replies


@pytest.mark.parametrize("frame, where", [
    ('{"type": "act", "id": "\\ud800", "actions": []}', "message.id"),
    ('{"type": "act", "id": "a", "actions": [{"type": "type", "text": "x\\udfff"}]}', "message.actions.0.text"),
    ('{"type": "navigate", "id": "a", "url": "http://demo.test/\\udbff"}', "message.url"),
    ('{"type": "read_file", "id": "a", "path": "\\udc80"}', "message.path"),
    ('{"type": "act", "id": "a", "actions": [], "\\ud800": 1}', "message (a key)"),
])
def test_a_lone_surrogate_anywhere_is_invalid_request_with_an_id_that_can_be_echoed(frame: str, where: str) -> None:
    from deskpod.protocol import encode_message

    with pytest.raises(InvalidRequestError) as caught:
        parse_request(frame)
    assert caught.value.detail["where"] == where
    rid = caught.value.detail["id"]
    assert rid.encode("utf-8") and rid == request_id(frame)
    reply = ErrorReply(id=rid, error=ErrorBody(**caught.value.to_wire()))
    assert json.loads(encode_message(reply))["id"] == rid


def test_a_surrogate_pair_is_ordinary_text() -> None:
    request = parse_request('{"type": "act", "id": "a", "actions": [{"type": "type", "text": "\\ud83d\\ude00"}]}')
    assert request.actions[0].text == "\U0001F600"  # type: ignore[union-attr]


def test_encode_message_never_fails_on_a_string() -> None:
    from deskpod.protocol import DirEntry, DirListing, encode_message

    listing = DirListing.model_construct(path=".", entries=[DirEntry.model_construct(name="a\udcff", kind="file",
                                                                                      size=1, target=None)])
    assert json.loads(encode_message(listing))["entries"][0]["name"] == "a\ufffd"


def test_the_client_refuses_a_lone_surrogate_from_the_sandbox() -> None:
    from deskpod.errors import BadReplyError

    with pytest.raises(BadReplyError) as caught:
        parse_server_message('{"type": "error", "id": "a", "error": {"code": "x", "message": "\\ud800"}}')
    assert caught.value.detail["reason"] == "surrogate"


def test_an_oversized_error_detail_from_the_sandbox_is_dropped() -> None:


    exc = error_from_wire({"code": "internal", "message": "m" * 10_000, "detail": {"x": "d" * 100_000}})
    assert len(exc.message) == 2000 and exc.detail == {"truncated": True}


@pytest.mark.parametrize("frame", ['{"":"","id":""}', '{"id": "' + "i" * 500 + '"}', '{"type": "act", "id": 5}'])
def test_the_error_reply_to_any_readable_id_can_be_built_and_sent(frame: str) -> None:
    """Found by the fuzzer: an empty id made the daemon's error reply invalid, and the
    connection dropped."""
    from deskpod.protocol import encode_message

    with pytest.raises(InvalidRequestError) as caught:
        parse_request(frame)
    rid = caught.value.detail.get("id")
    assert json.loads(encode_message(ErrorReply(id=rid, error=ErrorBody(**caught.value.to_wire()))))["id"] == rid
