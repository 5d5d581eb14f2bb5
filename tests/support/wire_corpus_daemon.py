"""The daemon wire's corpus for :mod:`record_wire_corpus`: upgrade headers for the daemon's
handshake, client frames for its decoder, daemon frames for the controller's decoder, and
(request, reply) pairs for the controller's client.

Inputs only, written out as literals: nothing here imports ``deskpod``, so that the corpus
does not move with the code it checks (sizes and limits are spelled as numbers).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from typing import Any

from PIL import Image

__all__ = ["Case", "DAEMON_ORIGIN", "DAEMON_TOKEN", "HELLO", "ROTATED_TOKEN", "client_cases", "daemon_cases",
           "handshake_cases", "j", "server_cases"]

Case = tuple[str, Any]
"""A case's name and its input."""


def j(data: Any) -> str:
    """``data`` as compact JSON text (ASCII escapes, so lone surrogates survive)."""
    return json.dumps(data, separators=(",", ":"))


def _png(width: int = 64, height: int = 40) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, format="PNG")
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# The daemon wire, inbound: client frames.

_SHA = "0123456789abcdef" * 4


def _act(*actions: Any, **fields: Any) -> str:
    return j({"type": "act", "id": "a1", "actions": list(actions), **fields})


_ACTIONS_MINIMAL: dict[str, dict[str, Any]] = {
    "click": {"type": "click"},
    "double_click": {"type": "double_click", "x": 1, "y": 2},
    "triple_click": {"type": "triple_click", "x": 1, "y": 2},
    "mouse_down": {"type": "mouse_down"},
    "mouse_up": {"type": "mouse_up"},
    "move": {"type": "move", "x": 0, "y": 0},
    "drag": {"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 5, "y": 5}]},
    "scroll": {"type": "scroll", "x": 3, "y": 4},
    "keypress": {"type": "keypress", "keys": ["ENTER"]},
    "hold_key": {"type": "hold_key", "keys": ["shift"], "seconds": 0.5},
    "type": {"type": "type", "text": ""},
    "wait": {"type": "wait"},
    "wait_for": {"type": "wait_for", "screen_changed": True},
    "screenshot": {"type": "screenshot"},
    "cursor_position": {"type": "cursor_position"},
    "zoom": {"type": "zoom", "region": [0, 0, 10, 10]},
    "set_files": {"type": "set_files", "paths": ["a.txt"]},
    "dialog_accept": {"type": "dialog_accept"},
    "dialog_dismiss": {"type": "dialog_dismiss"},
    "click_element": {"type": "click_element", "ref": "e1"},
    "type_element": {"type": "type_element", "ref": "e2", "text": "x"},
    "select_option": {"type": "select_option", "ref": "e3", "values": ["One"]},
    "hover_element": {"type": "hover_element", "ref": "e4"},
    "fill_form": {"type": "fill_form", "fields": [{"ref": "e5", "value": "v"}]},
}

_ACTIONS_FULL: dict[str, dict[str, Any]] = {
    "click": {"type": "click", "x": 10, "y": 20, "button": "right", "hold_keys": ["shift", "ctrl"]},
    "mouse_down": {"type": "mouse_down", "x": 1, "y": 1, "button": "middle"},
    "move": {"type": "move", "x": 5, "y": 6, "hold_keys": ["alt"]},
    "scroll": {"type": "scroll", "x": 3, "y": 4, "scroll_x": -100, "scroll_y": 100, "hold_keys": ["ctrl"]},
    "keypress": {"type": "keypress", "keys": ["ctrl+a", "Return", "x"]},
    "type": {"type": "type", "text": "héllo \U0001f600 \ud83d\ude00 <b>"},
    "wait": {"type": "wait", "seconds": 60},
    "wait_for": {"type": "wait_for", "url_matches": "^https://x\\.test/", "timeout_s": 60},
    "wait_for_text": {"type": "wait_for", "text_present": "Done", "timeout_s": 0.1},
    "dialog_accept": {"type": "dialog_accept", "text": "answer", "tab_id": "t1"},
    "click_element": {"type": "click_element", "ref": "e123456789", "button": "middle", "count": 3},
    "type_element": {"type": "type_element", "ref": "e2", "text": "x", "submit": True},
    "fill_form": {"type": "fill_form", "fields": [{"ref": "e5", "value": "true"}, {"ref": "e6", "value": ""}]},
}

_ACTIONS_INVALID: dict[str, Any] = {
    "not_an_object": ["click"],
    "null": None,
    "no_type": {"x": 1, "y": 1},
    "type_unknown": {"type": "tap", "x": 1, "y": 1},
    "type_int": {"type": 7},
    "type_list": {"type": ["click"]},
    "click_x_only": {"type": "click", "x": 1},
    "click_x_float": {"type": "click", "x": 1.0, "y": 2},
    "click_x_string": {"type": "click", "x": "1", "y": 2},
    "click_x_bool": {"type": "click", "x": True, "y": 2},
    "click_button_bad": {"type": "click", "button": "side"},
    "click_extra": {"type": "click", "x": 1, "y": 1, "force": True},
    "click_hold_9_keys": {"type": "click", "hold_keys": ["a"] * 9},
    "click_hold_empty_key": {"type": "click", "hold_keys": [""]},
    "mouse_down_button_back": {"type": "mouse_down", "button": "back"},
    "move_no_y": {"type": "move", "x": 1},
    "drag_one_point": {"type": "drag", "path": [{"x": 0, "y": 0}]},
    "drag_point_extra": {"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 1, "y": 1, "z": 0}]},
    "scroll_101": {"type": "scroll", "x": 0, "y": 0, "scroll_y": 101},
    "scroll_float": {"type": "scroll", "x": 0, "y": 0, "scroll_x": 1.5},
    "keypress_empty": {"type": "keypress", "keys": []},
    "keypress_17": {"type": "keypress", "keys": ["a"] * 17},
    "keypress_long_name": {"type": "keypress", "keys": ["k" * 65]},
    "hold_key_no_seconds": {"type": "hold_key", "keys": ["a"]},
    "type_too_long": {"type": "type", "text": "x" * 10_001},
    "type_not_string": {"type": "type", "text": 5},
    "wait_61": {"type": "wait", "seconds": 61},
    "wait_negative": {"type": "wait", "seconds": -1},
    "wait_string": {"type": "wait", "seconds": "1"},
    "wait_for_none": {"type": "wait_for"},
    "wait_for_two": {"type": "wait_for", "url_matches": "x", "text_present": "y"},
    "wait_for_bad_regex": {"type": "wait_for", "url_matches": "(("},
    "wait_for_screen_false": {"type": "wait_for", "screen_changed": False},
    "wait_for_timeout_0": {"type": "wait_for", "screen_changed": True, "timeout_s": 0},
    "zoom_reversed": {"type": "zoom", "region": [10, 10, 0, 0]},
    "zoom_three": {"type": "zoom", "region": [0, 0, 10]},
    "set_files_empty": {"type": "set_files", "paths": []},
    "set_files_nul": {"type": "set_files", "paths": ["a\u0000b"]},
    "dialog_accept_long": {"type": "dialog_accept", "text": "x" * 2001},
    "dialog_dismiss_empty_tab": {"type": "dialog_dismiss", "tab_id": ""},
    "click_element_e0": {"type": "click_element", "ref": "e0"},
    "click_element_count_4": {"type": "click_element", "ref": "e1", "count": 4},
    "type_element_no_text": {"type": "type_element", "ref": "e1"},
    "select_option_empty": {"type": "select_option", "ref": "e1", "values": []},
    "hover_element_ref_int": {"type": "hover_element", "ref": 1},
    "fill_form_empty": {"type": "fill_form", "fields": []},
    "fill_form_field_extra": {"type": "fill_form", "fields": [{"ref": "e1", "value": "v", "kind": "text"}]},
    "screenshot_extra": {"type": "screenshot", "format": "png"},
}


def _workspace_requests() -> list[Case]:
    valid: dict[str, dict[str, Any]] = {
        "seed_workspace": {"type": "seed_workspace", "id": "w"},
        "seed_workspace_full": {"type": "seed_workspace", "id": "w", "archive": base64.b64encode(b"\x1f\x8b" + b"\0" * 20).decode(),
                                "clear": False, "git_init": False},
        "list_dir": {"type": "list_dir", "id": "w"},
        "list_dir_full": {"type": "list_dir", "id": "w", "path": "src/pkg", "max_entries": 10_000},
        "read_file": {"type": "read_file", "id": "w", "path": "a.py"},
        "read_file_full": {"type": "read_file", "id": "w", "path": "a.py", "start_line": 3, "max_lines": 4,
                           "max_bytes": 8 * 1_048_576},
        "write_file": {"type": "write_file", "id": "w", "path": "a.py", "content": "x = 1\n"},
        "edit_file": {"type": "edit_file", "id": "w", "path": "a.py", "old_text": "1", "new_text": "2"},
        "apply_patch": {"type": "apply_patch", "id": "w", "patch": "--- a/x\n+++ b/x\n"},
        "exec_argv": {"type": "exec", "id": "w", "argv": ["python", "-V"]},
        "exec_cmd_full": {"type": "exec", "id": "w", "cmd": "ls | wc -l", "cwd": "src", "timeout_s": 600,
                          "max_output_bytes": 1_048_576, "max_output_lines": 20_000, "network": True,
                          "allowed_domains": ["pypi.org"], "display": True},
        "run_tests": {"type": "run_tests", "id": "w", "argv": ["pytest", "-q"]},
        "workspace_diff": {"type": "workspace_diff", "id": "w"},
        "workspace_diff_base": {"type": "workspace_diff", "id": "w", "base": "abcdef1", "max_bytes": 10},
        "workspace_manifest": {"type": "workspace_manifest", "id": "w"},
        "workspace_manifest_paths": {"type": "workspace_manifest", "id": "w", "paths": ["a.py", "b/c.py"],
                                     "max_content_bytes": 0},
        "clean_room": {"type": "clean_room", "id": "w", "archive": base64.b64encode(b"\x1f\x8b").decode(),
                       "argv": ["pytest"]},
    }
    invalid: dict[str, dict[str, Any]] = {
        "list_dir_absolute": {"type": "list_dir", "id": "w", "path": "/etc"},
        "list_dir_parent": {"type": "list_dir", "id": "w", "path": "../x"},
        "list_dir_max_0": {"type": "list_dir", "id": "w", "max_entries": 0},
        "read_file_no_path": {"type": "read_file", "id": "w"},
        "read_file_start_0": {"type": "read_file", "id": "w", "path": "a", "start_line": 0},
        "read_file_max_bytes_over": {"type": "read_file", "id": "w", "path": "a", "max_bytes": 8 * 1_048_576 + 1},
        "write_file_nul_path": {"type": "write_file", "id": "w", "path": "a\u0000", "content": ""},
        "edit_file_empty_old": {"type": "edit_file", "id": "w", "path": "a", "old_text": "", "new_text": "x"},
        "apply_patch_empty": {"type": "apply_patch", "id": "w", "patch": ""},
        "exec_neither": {"type": "exec", "id": "w"},
        "exec_both": {"type": "exec", "id": "w", "argv": ["ls"], "cmd": "ls"},
        "exec_argv_empty": {"type": "exec", "id": "w", "argv": []},
        "exec_timeout_over": {"type": "exec", "id": "w", "argv": ["ls"], "timeout_s": 601},
        "exec_output_0": {"type": "exec", "id": "w", "argv": ["ls"], "max_output_bytes": 0},
        "exec_domains_without_network": {"type": "exec", "id": "w", "argv": ["ls"], "allowed_domains": ["x.test"]},
        "run_tests_no_argv": {"type": "run_tests", "id": "w"},
        "workspace_diff_bad_base": {"type": "workspace_diff", "id": "w", "base": "HEAD"},
        "workspace_manifest_abs_path": {"type": "workspace_manifest", "id": "w", "paths": ["/etc/passwd"]},
        "clean_room_bad_archive": {"type": "clean_room", "id": "w", "archive": "not base64!", "argv": ["x"]},
        "seed_workspace_extra": {"type": "seed_workspace", "id": "w", "mode": "fast"},
    }
    return [(f"daemon/{name}", j(data)) for name, data in {**valid, **invalid}.items()]


def daemon_cases() -> list[Case]:
    """Client frames for the daemon's decoder: every request and action type valid (minimal
    and with every field), and the ways each can be wrong."""
    cases: list[Case] = [
        ("daemon/not_json_empty", ""),
        ("daemon/not_json_cut", '{"type": "act"'),
        ("daemon/not_json_bytes", b"\xff\xfe\x00"),
        ("daemon/json_array", "[]"),
        ("daemon/json_number", "42"),
        ("daemon/json_null", "null"),
        ("daemon/json_string", '"act"'),
        ("daemon/nested_too_deeply", "[" * 100_000 + "]" * 100_000),
        ("daemon/oversized", '{"type":"act","id":"big","actions":[],"pad":"' + "x" * 1_048_576 + '"}'),
        ("daemon/exactly_the_limit", '{"type":"act","id":"lim","actions":[],"pad":"' + "x" * (1_048_576 - 47) + '"}'),
        ("daemon/bytes_frame_valid", j({"type": "configure", "id": "b"}).encode()),
        ("daemon/bytes_frame_bad_utf8", b'{"type":"configure","id":"\xc3"}'),
        ("daemon/no_type", j({"id": "x"})),
        ("daemon/type_unknown", j({"type": "screenshot", "id": "x"})),
        ("daemon/type_int", j({"type": 1, "id": "x"})),
        ("daemon/type_null_no_id", j({"type": None})),
        ("daemon/hello_from_client", j({"type": "hello", "id": "x"})),
        ("daemon/id_missing", j({"type": "configure"})),
        ("daemon/id_empty", j({"type": "configure", "id": ""})),
        ("daemon/id_int", j({"type": "configure", "id": 5})),
        ("daemon/id_129", j({"type": "configure", "id": "i" * 129})),
        ("daemon/id_129_unknown_type", j({"type": "nope", "id": "i" * 129})),
        ("daemon/id_lone_surrogate", '{"type":"configure","id":"a\\ud800b"}'),
        ("daemon/text_lone_surrogate", '{"type":"act","id":"s","actions":[{"type":"type","text":"\\udfff"}]}'),
        ("daemon/key_lone_surrogate", '{"type":"act","id":"s","actions":[],"\\ud800":1}'),
        ("daemon/surrogate_pair_ok", '{"type":"act","id":"s","actions":[{"type":"type","text":"\\ud83d\\ude00"}]}'),
        ("daemon/nan_timeout", '{"type":"act","id":"n","actions":[],"timeout_s":NaN}'),
        ("daemon/infinity_timeout", '{"type":"act","id":"n","actions":[],"timeout_s":Infinity}'),
        ("daemon/duplicate_key", '{"type":"configure","id":"first","id":"second"}'),
        ("daemon/act_empty", _act()),
        ("daemon/act_full", _act({"type": "click", "x": 1, "y": 2}, {"type": "type", "text": "hi"},
                                 observe={"screenshot": False, "format": "jpeg", "quality": 95, "cursor": True,
                                          "page_text": True, "max_text_chars": 0, "accessibility": True,
                                          "max_ax_nodes": 5000, "element_at": {"x": 3, "y": 4},
                                          "text_sources": True, "max_scan_chars": 200_000, "snapshot": True,
                                          "element_ref": "e9"},
                                 timeout_s=600, allow_downloads=True,
                                 expect={"screenshot_sha256": _SHA, "radius_px": None, "tolerance_px": 5,
                                         "min_delta": 255, "url": "https://x.test/",
                                         "element": {"tag": "button", "role": "button", "name": "Go",
                                                     "text": "Go", "box": [1, 2, 3, 4]}})),
        ("daemon/act_100_actions", _act(*[{"type": "wait", "seconds": 0}] * 100)),
        ("daemon/act_101_actions", _act(*[{"type": "wait", "seconds": 0}] * 101)),
        ("daemon/act_actions_missing", j({"type": "act", "id": "a1"})),
        ("daemon/act_actions_object", j({"type": "act", "id": "a1", "actions": {"type": "click"}})),
        ("daemon/act_extra_field", _act(priority=1)),
        ("daemon/act_timeout_0", _act(timeout_s=0)),
        ("daemon/act_timeout_601", _act(timeout_s=601)),
        ("daemon/act_timeout_string", _act(timeout_s="5")),
        ("daemon/act_allow_downloads_string", _act(allow_downloads="yes")),
        ("daemon/act_expect_bad_sha", _act(expect={"screenshot_sha256": "ABC"})),
        ("daemon/act_expect_radius_0", _act(expect={"radius_px": 0})),
        ("daemon/act_expect_extra", _act(expect={"hash": _SHA})),
        ("daemon/act_second_action_bad", _act({"type": "wait"}, {"type": "click", "x": 1})),
        ("daemon/observe_quality_0", _act(observe={"quality": 0})),
        ("daemon/observe_format_gif", _act(observe={"format": "gif"})),
        ("daemon/observe_element_at_no_y", _act(observe={"element_at": {"x": 1}})),
        ("daemon/observe_element_ref_bad", _act(observe={"element_ref": "x1"})),
        ("daemon/observe_max_text_negative", _act(observe={"max_text_chars": -1})),
        ("daemon/observe_extra", _act(observe={"video": True})),
        ("daemon/observe_not_object", _act(observe=True)),
        ("daemon/navigate", j({"type": "navigate", "id": "n", "url": "http://x.test/"})),
        ("daemon/navigate_full", j({"type": "navigate", "id": "n", "url": "https://x.test/a?b=c", "timeout_s": 0.5,
                                     "allow_downloads": True, "observe": {"screenshot": False}})),
        ("daemon/navigate_ftp", j({"type": "navigate", "id": "n", "url": "ftp://x.test/"})),
        ("daemon/navigate_javascript", j({"type": "navigate", "id": "n", "url": "javascript:alert(1)"})),
        ("daemon/navigate_no_url", j({"type": "navigate", "id": "n"})),
        ("daemon/navigate_url_8193", j({"type": "navigate", "id": "n", "url": "http://x.test/" + "a" * 8179})),
        ("daemon/configure", j({"type": "configure", "id": "c"})),
        ("daemon/configure_model_size", j({"type": "configure", "id": "c", "model_size": {"width": 1024, "height": 768},
                                            "max_image_bytes": 100_000})),
        ("daemon/configure_max_dimension", j({"type": "configure", "id": "c", "max_dimension": 1280})),
        ("daemon/configure_both", j({"type": "configure", "id": "c", "model_size": {"width": 10, "height": 10},
                                      "max_dimension": 1280})),
        ("daemon/configure_side_too_long", j({"type": "configure", "id": "c", "model_size": {"width": 9000, "height": 10}})),
        ("daemon/configure_too_many_pixels", j({"type": "configure", "id": "c",
                                                 "model_size": {"width": 8000, "height": 8000}})),
        ("daemon/configure_width_0", j({"type": "configure", "id": "c", "model_size": {"width": 0, "height": 10}})),
        ("daemon/configure_max_dimension_15", j({"type": "configure", "id": "c", "max_dimension": 15})),
        ("daemon/configure_max_dimension_float", j({"type": "configure", "id": "c", "max_dimension": 1280.0})),
        ("daemon/configure_image_bytes_small", j({"type": "configure", "id": "c", "max_image_bytes": 10})),
        ("daemon/reset", j({"type": "reset", "id": "r", "token_sha256": _SHA})),
        ("daemon/reset_full", j({"type": "reset", "id": "r", "token_sha256": _SHA, "start_url": "https://x.test/",
                                  "observe": {"page_text": True}})),
        ("daemon/reset_no_token", j({"type": "reset", "id": "r"})),
        ("daemon/reset_upper_hex", j({"type": "reset", "id": "r", "token_sha256": _SHA.upper()})),
        ("daemon/reset_token_itself", j({"type": "reset", "id": "r", "token_sha256": _SHA, "token": "secret"})),
        ("daemon/reset_start_url_file", j({"type": "reset", "id": "r", "token_sha256": _SHA,
                                            "start_url": "file:///etc/passwd"})),
        ("daemon/egress_null", j({"type": "egress", "id": "e", "allowed_domains": None})),
        ("daemon/egress_list", j({"type": "egress", "id": "e", "allowed_domains": ["x.test", "sub.y.test"]})),
        ("daemon/egress_empty", j({"type": "egress", "id": "e", "allowed_domains": []})),
        ("daemon/egress_missing", j({"type": "egress", "id": "e"})),
        ("daemon/egress_wildcard", j({"type": "egress", "id": "e", "allowed_domains": ["*.x.test"]})),
        ("daemon/egress_empty_name", j({"type": "egress", "id": "e", "allowed_domains": [""]})),
        ("daemon/egress_url", j({"type": "egress", "id": "e", "allowed_domains": ["http://x.test/"]})),
        ("daemon/egress_upper", j({"type": "egress", "id": "e", "allowed_domains": ["X.Test"]})),
    ]
    cases += [(f"daemon/action_{name}_minimal", _act(action)) for name, action in _ACTIONS_MINIMAL.items()]
    cases += [(f"daemon/action_{name}_full", _act(action)) for name, action in _ACTIONS_FULL.items()]
    cases += [(f"daemon/action_{name}", _act(action)) for name, action in _ACTIONS_INVALID.items()]
    cases += _workspace_requests()
    return cases


DAEMON_TOKEN = "daemon-token-" + "d" * 30
"""The daemon's control token in the handshake cases (it holds the SHA-256 only)."""

ROTATED_TOKEN = "rotated-token-" + "r" * 29
"""The token a reset rotated to."""

DAEMON_ORIGIN = "http://console.test"
"""The one ``Origin`` the daemon of the handshake cases accepts."""


def handshake_cases() -> list[Case]:
    """The headers of a websocket upgrade to the daemon (lower-case names): who may connect,
    and the longest reply a client may declare it reads."""
    bearer = {"authorization": f"Bearer {DAEMON_TOKEN}"}
    size = "deskpod-max-message-bytes"
    return [(f"handshake/{name}", headers) for name, headers in [
        ("none", {}),
        ("bearer", bearer),
        ("bearer_lower_case", {"authorization": f"bearer {DAEMON_TOKEN}"}),
        ("bearer_two_spaces", {"authorization": f"Bearer  {DAEMON_TOKEN}"}),
        ("bearer_no_token", {"authorization": "Bearer"}),
        ("wrong_token", {"authorization": "Bearer wrong"}),
        ("the_digest_as_token", {"authorization": "Bearer " + hashlib.sha256(DAEMON_TOKEN.encode()).hexdigest()}),
        ("basic", {"authorization": "Basic " + base64.b64encode(f"x:{DAEMON_TOKEN}".encode()).decode()}),
        ("rotated_token", {"authorization": f"Bearer {ROTATED_TOKEN}"}),
        ("origin_accepted", bearer | {"origin": DAEMON_ORIGIN}),
        ("origin_other", bearer | {"origin": "http://evil.test"}),
        ("origin_null", bearer | {"origin": "null"}),
        ("size_smallest", bearer | {size: "262144"}),
        ("size_largest", bearer | {size: str(64 * 1_048_576)}),
        ("size_too_small", bearer | {size: "262143"}),
        ("size_too_large", bearer | {size: str(64 * 1_048_576 + 1)}),
        ("size_spaces", bearer | {size: " 300000 "}),
        ("size_exponent", bearer | {size: "1e6"}),
        ("size_negative", bearer | {size: "-1"}),
        ("size_fullwidth_digits", bearer | {size: "\uff13\uff10\uff10\uff10\uff10\uff10"}),
        ("size_13_digits", bearer | {size: "0000000300000"}),
        ("size_empty", bearer | {size: ""}),
    ]]


# ---------------------------------------------------------------------------------------------
# The daemon wire, outbound: what a (possibly hostile) daemon sends the controller.

HELLO = {"type": "hello", "protocol_version": "1", "screen": {"width": 64, "height": 40},
         "model_size": {"width": 64, "height": 40}, "sandbox_id": "sandbox-0123456789"}


def _shot(data: bytes | None = None, **fields: Any) -> dict[str, Any]:
    data = _png() if data is None else data
    return {"id": "s-1", "format": "png", "width": 64, "height": 40, "screen_width": 64, "screen_height": 40,
            "scale_x": 1.0, "scale_y": 1.0, "offset_x": 0, "offset_y": 0,
            "sha256": hashlib.sha256(data).hexdigest(), "data": base64.b64encode(data).decode("ascii"),
            "perceptual_hash": "0" * 16} | fields


def _observation(**fields: Any) -> dict[str, Any]:
    return {"settled": True, "url": "http://x.test/", "title": "Demo", "events": [],
            "tabs": [{"id": "t1", "url": "http://x.test/", "title": "Demo", "active": True}],
            "screenshot": _shot()} | fields


def server_cases() -> list[Case]:
    """Daemon frames for the controller's decoder."""
    result = {"type": "result", "id": "r-1", "observation": _observation()}
    error = {"type": "error", "id": "r-1", "error": {"code": "busy", "message": "busy", "detail": {"x": 1}}}
    return [(f"server/{name}", raw) for name, raw in [
        ("hello", j(HELLO)),
        ("hello_full", j(HELLO | {"max_message_bytes": 262_144})),
        ("hello_version_2", j(HELLO | {"protocol_version": "2"})),
        ("hello_short_sandbox_id", j(HELLO | {"sandbox_id": "short"})),
        ("hello_sandbox_id_slash", j(HELLO | {"sandbox_id": "sandbox/0123456789"})),
        ("hello_screen_0", j(HELLO | {"screen": {"width": 0, "height": 40}})),
        ("hello_extra", j(HELLO | {"os": "linux"})),
        ("hello_max_bytes_small", j(HELLO | {"max_message_bytes": 1000})),
        ("hello_max_bytes_big", j(HELLO | {"max_message_bytes": 64 * 1_048_576 + 1})),
        ("result_observation", j(result)),
        ("result_model_size", j({"type": "result", "id": "r-1", "model_size": {"width": 10, "height": 10}})),
        ("result_egress", j({"type": "result", "id": "r-1", "egress": {"allowed_domains": ["x.test"]}})),
        ("result_no_payload", j({"type": "result", "id": "r-1"})),
        ("result_no_id", j({"type": "result", "observation": _observation()})),
        ("result_id_129", j(result | {"id": "i" * 129})),
        ("result_extra", j(result | {"debug": True})),
        ("result_url_too_long", j(result | {"observation": _observation(url="http://x.test/" + "a" * 8192)})),
        ("result_title_too_long", j(result | {"observation": _observation(title="t" * 2001)})),
        ("result_101_tabs", j(result | {"observation": _observation(
            tabs=[{"id": f"t{i}", "url": "http://x.test/", "title": "", "active": i == 0} for i in range(101)])})),
        ("result_shot_format_gif", j(result | {"observation": _observation(screenshot=_shot(format="gif"))})),
        ("result_shot_sha_upper", j(result | {"observation": _observation(screenshot=_shot(sha256="A" * 64))})),
        ("result_workspace_exec", j({"type": "result", "id": "r-1", "workspace": {
            "type": "exec_output", "exit_code": 0, "duration_s": 0.1, "stdout": "", "stderr": "",
            "stdout_bytes": 0, "stderr_bytes": 0}})),
        ("result_workspace_unknown", j({"type": "result", "id": "r-1", "workspace": {"type": "mystery"}})),
        ("error", j(error)),
        ("error_id_null", j(error | {"id": None})),
        ("error_no_detail", j({"type": "error", "id": "r-1", "error": {"code": "timeout", "message": "slow"}})),
        ("error_code_65", j(error | {"error": {"code": "c" * 65, "message": "m"}})),
        ("error_no_message", j(error | {"error": {"code": "busy"}})),
        ("error_extra_in_body", j(error | {"error": {"code": "busy", "message": "m", "trace": "..."}})),
        ("type_unknown", j({"type": "progress", "id": "r-1"})),
        ("no_type", j({"id": "r-1"})),
        ("array", "[]"),
        ("not_json", "<html>"),
        ("bad_utf8", b"\xff"),
        ("lone_surrogate", '{"type":"error","id":"r-1","error":{"code":"busy","message":"\\ud800"}}'),
        ("oversized", b'{"type":"result","id":"r-1","pad":"' + b"x" * (64 * 1_048_576) + b'"}'),
    ]]


# ---------------------------------------------------------------------------------------------
# The controller's client: a request, the daemon's scripted reply, what the client makes of it.

def _well_behaved(request: dict[str, Any]) -> dict[str, Any]:
    """The reply a correct daemon sends to ``request``."""
    kind, rid = request["type"], request["id"]
    if kind in ("act", "navigate", "reset"):
        return {"type": "result", "id": rid, "observation": _observation()}
    if kind == "configure":
        return {"type": "result", "id": rid, "model_size": {"width": 64, "height": 40}}
    if kind == "egress":
        return {"type": "result", "id": rid, "egress": {"allowed_domains": request["allowed_domains"]}}
    outputs: dict[str, dict[str, Any]] = {
        "seed_workspace": {"type": "workspace_seeded", "files": 3, "size": 100, "git_head": "a" * 40},
        "list_dir": {"type": "dir_listing", "path": ".", "entries": [{"name": "b.py", "kind": "file", "size": 10}]},
        "read_file": {"type": "file_content", "path": "a.py", "content": "x = 1\n", "size": 6,
                      "start_line": 1, "end_line": 1},
        "write_file": {"type": "file_written", "path": "a.py", "size": 1, "created": True},
        "edit_file": {"type": "file_written", "path": "a.py", "size": 1, "created": False},
        "apply_patch": {"type": "patch_applied", "files": ["b.py"]},
        "exec": {"type": "exec_output", "exit_code": 0, "duration_s": 0.1, "stdout": "ok\n", "stderr": "",
                 "stdout_bytes": 3, "stderr_bytes": 0},
        "run_tests": {"type": "test_run", "passed": False, "exit_code": 1, "duration_s": 0.1, "tail": "1 failed",
                      "output_bytes": 8},
        "workspace_diff": {"type": "workspace_diff", "base": "a" * 40, "files": [], "diff": "", "diff_bytes": 0},
        "workspace_manifest": {"type": "workspace_manifest", "entries": []},
        "clean_room": {"type": "clean_room_run", "exit_code": 0, "duration_s": 0.1, "output": "ok\n",
                       "output_bytes": 3},
    }
    return {"type": "result", "id": rid, "workspace": outputs[kind]}


_CLIENT_REQUESTS: dict[str, dict[str, Any]] = {
    "act": {"type": "act", "id": "r-1", "actions": [{"type": "click", "x": 1, "y": 1}]},
    "act_text": {"type": "act", "id": "r-1", "actions": [], "observe": {"page_text": True, "max_text_chars": 5}},
    "navigate": {"type": "navigate", "id": "r-1", "url": "http://x.test/"},
    "reset": {"type": "reset", "id": "r-1", "token_sha256": _SHA},
    "configure": {"type": "configure", "id": "r-1"},
    "egress": {"type": "egress", "id": "r-1", "allowed_domains": ["x.test"]},
    "seed_workspace": {"type": "seed_workspace", "id": "r-1"},
    "list_dir": {"type": "list_dir", "id": "r-1", "max_entries": 1},
    "read_file": {"type": "read_file", "id": "r-1", "path": "a.py", "max_bytes": 10},
    "write_file": {"type": "write_file", "id": "r-1", "path": "a.py", "content": "x"},
    "edit_file": {"type": "edit_file", "id": "r-1", "path": "a.py", "old_text": "1", "new_text": "2"},
    "apply_patch": {"type": "apply_patch", "id": "r-1", "patch": "p"},
    "exec": {"type": "exec", "id": "r-1", "argv": ["ls"], "max_output_bytes": 10, "max_output_lines": 1},
    "run_tests": {"type": "run_tests", "id": "r-1", "argv": ["pytest"]},
    "workspace_diff": {"type": "workspace_diff", "id": "r-1"},
    "workspace_manifest": {"type": "workspace_manifest", "id": "r-1", "paths": ["a.py"]},
    "clean_room": {"type": "clean_room", "id": "r-1", "archive": "H4s=", "argv": ["pytest"]},
}


def client_cases() -> list[Case]:
    """Pairs (request, the daemon's raw reply) for the controller's client."""
    r = _CLIENT_REQUESTS
    cases: list[tuple[str, dict[str, Any], Any]] = [
        (f"{name}_well_behaved", request, j(_well_behaved(request))) for name, request in r.items()]

    def obs(**fields: Any) -> str:
        return j({"type": "result", "id": "r-1", "observation": _observation(**fields)})

    def err(code: Any, message: Any = "m", detail: Any = None, rid: Any = "r-1") -> str:
        body: dict[str, Any] = {"code": code, "message": message}
        if detail is not None:
            body["detail"] = detail
        return j({"type": "error", "id": rid, "error": body})

    act = r["act"]
    exec_output = {"type": "exec_output", "exit_code": 0, "duration_s": 0.1, "stdout_bytes": 0, "stderr_bytes": 0}
    cases += [
        ("act_wrong_id", act, j(_well_behaved(act) | {"id": "r-2"})),
        ("act_no_observation", act, j({"type": "result", "id": "r-1"})),
        ("act_workspace_reply", act, j(_well_behaved(r["exec"]))),
        ("act_hello_reply", act, j(HELLO)),
        ("act_not_json", act, "not json"),
        ("act_no_reply", act, None),
        ("act_sha_mismatch", act, obs(screenshot=_shot(sha256="0" * 64))),
        ("act_not_base64", act, obs(screenshot=_shot() | {"data": "!!!!"})),
        ("act_size_mismatch", act, obs(screenshot=_shot(_png(32, 40)))),
        ("act_not_png", act, obs(screenshot=_shot(b"GIF89a not an image"))),
        ("act_too_many_pixels", act, obs(screenshot=_shot(width=8000, height=8000))),
        ("act_two_timings", act, obs(timings=[{"type": "click", "duration_s": 0.1}] * 2)),
        ("act_snapshot_not_asked", act, obs(snapshot="- button [ref=e1]")),
        ("act_text_over_request", r["act_text"], obs(page_text="123456")),
        ("act_text_within_request", r["act_text"], obs(page_text="12345")),
        ("configure_no_size", r["configure"], obs()),
        ("egress_other_list", r["egress"], j({"type": "result", "id": "r-1", "egress": {"allowed_domains": []}})),
        ("egress_no_state", r["egress"], j({"type": "result", "id": "r-1"})),
        ("exec_wrong_kind", r["exec"], j(_well_behaved(r["run_tests"]))),
        ("exec_stdout_over", r["exec"], j({"type": "result", "id": "r-1", "workspace": exec_output | {
            "stdout": "x" * 1035, "stderr": ""}})),
        ("exec_lines_over", r["exec"], j({"type": "result", "id": "r-1", "workspace": exec_output | {
            "stdout": "\n" * 6, "stderr": ""}})),
        ("read_file_over", r["read_file"], j({"type": "result", "id": "r-1", "workspace": {
            "type": "file_content", "path": "a.py", "content": "x" * 1035, "size": 1035, "start_line": 1,
            "end_line": 1}})),
        ("list_dir_over", r["list_dir"], j({"type": "result", "id": "r-1", "workspace": {
            "type": "dir_listing", "path": ".", "entries": [{"name": "a", "kind": "file", "size": 1}] * 2}})),
        ("manifest_escapes", r["workspace_manifest"], j({"type": "result", "id": "r-1", "workspace": {
            "type": "workspace_manifest", "entries": [{"path": "../a.py", "kind": "file", "size": 1}]}})),
        ("manifest_not_asked", r["workspace_manifest"], j({"type": "result", "id": "r-1", "workspace": {
            "type": "workspace_manifest", "entries": [{"path": "b.py", "kind": "file", "size": 1}]}})),
        ("manifest_twice", r["workspace_manifest"], j({"type": "result", "id": "r-1", "workspace": {
            "type": "workspace_manifest", "entries": [{"path": "a.py", "kind": "file", "size": 1}] * 2}})),
        ("error_busy", act, err("busy", "another request is running")),
        ("error_out_of_bounds", act, err("out_of_bounds", "x", {"action_index": 0})),
        ("error_invalid_action", act, err("invalid_action", "bad")),
        ("error_screen_changed", act, err("screen_changed", "moved", {"reason": "region"})),
        ("error_timeout", act, err("timeout", "slow")),
        ("error_unauthorized", act, err("unauthorized", "no")),
        ("error_unknown_code", act, err("weird_code", "?")),
        ("error_host_only_code", act, err("bad_reply", "spoofed")),
        ("error_policy_denied_spoofed", act, err("policy_denied", "spoofed")),
        ("error_long_message", act, err("internal", "m" * 5000)),
        ("error_control_chars", act, err("internal", "a\u001b[31mred\u0007\nb")),
        ("error_detail_huge", act, err("internal", "m", {"x": "y" * 20_000})),
        ("error_null_id", act, err("busy", rid=None)),
        ("error_other_id", act, err("busy", rid="r-9")),
    ]
    return [(f"client/{name}", {"request": request, "reply": reply}) for name, request, reply in cases]

