"""``deskpod schema``: every model of both wires is published and its schema accepts
real messages (no Docker, no X)."""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

import deskpod.protocol
import deskpod.service.messages as service
from deskpod.cli import main
from deskpod.controller.confirm import ActionSubject, ConfirmationRequest, PauseNotice
from deskpod.controller.credentials import CredentialRequest
from deskpod.errors import BusyError
from deskpod.protocol import (
    ActReply,
    ConfigureReply,
    DirEntry,
    DirListing,
    ErrorBody,
    ErrorReply,
    ExecOutput,
    ExecReply,
    Hello,
    ListDirReply,
    Observation,
    Result,
    Screenshot,
    Size,
    SnapshotRestored,
    Tab,
    encode_message,
)
from deskpod.schema import INDEX_NAME, wire_messages, write_schemas
from deskpod.service.server.service_state import ControllerService


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """name → schema, as ``deskpod schema --out`` wrote them."""
    out = tmp_path_factory.mktemp("schemas")
    with pytest.raises(SystemExit) as info:
        main(["schema", "--out", str(out)])
    assert info.value.code == 0
    index = json.loads((out / INDEX_NAME).read_text())
    found = {}
    for wire, messages in index["wires"].items():
        for entry in messages:
            assert entry["file"].startswith(f"{wire}/")
            schema = json.loads((out / entry["file"]).read_text())
            Draft202012Validator.check_schema(schema)
            found[entry["name"]] = schema
    return found


def _wire_models() -> set[type[BaseModel]]:
    """Every pydantic model the two wires define: the protocol package's and the service's messages module's."""
    modules = [m for name, m in inspect.getmembers(deskpod.protocol, inspect.ismodule)] + [service]
    models = set()
    for module in modules:
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseModel) and obj.__module__ == module.__name__ and obj.__name__[0] != "_":
                models.add(obj)
    return models


def _names_in(schema: dict[str, Any]) -> set[str]:
    return {schema.get("title", "")} | set(schema.get("$defs", {}))


def test_every_model_of_both_wires_is_in_the_output(schemas: dict[str, dict[str, Any]]) -> None:
    published = set().union(*(_names_in(s) for s in schemas.values()))
    wire = {m.__name__ for m in _wire_models()}
    assert wire - {"Reply"} <= published  # Reply: the base of the reply models, never sent itself
    assert "SandboxRef" in published and "Click" in published  # nested models are in their messages' $defs
    messages = {m.name for m in wire_messages()}
    for name in ["Hello", "ErrorReply", "ErrorBody", "ActRequest", "ActReply", "ExecRequest", "ExecReply",
                 "OpenMessage", "ControlMessage", "ServiceObservation", "ServiceError", "ServiceFinished"]:
        assert name in messages
    # The thirteen outbound websocket messages, and the answer of GET /healthz; eleven inbound ones.
    assert len([m for m in wire_messages() if m.direction == "from_service"]) == 14
    assert len([m for m in wire_messages() if m.direction == "to_service"]) == 11


def test_without_out_it_prints_the_index(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["schema"])
    index = json.loads(capsys.readouterr().out)
    assert index["format"] == "deskpod-schema/1" and set(index["wires"]) == {"daemon", "service"}


def _check(schemas: dict[str, dict[str, Any]], name: str, message: dict[str, Any]) -> None:
    errors = list(Draft202012Validator(schemas[name]).iter_errors(message))
    assert errors == [], (name, [e.message for e in errors])


def _png() -> Screenshot:
    data = b"\x89PNG\r\n\x1a\n" + b"0" * 16
    return Screenshot(id="s-1", format="png", data=base64.b64encode(data).decode(),
                      sha256=hashlib.sha256(data).hexdigest(), width=4, height=3, screen_width=8, screen_height=6, scale_x=2.0, scale_y=2.0)


DAEMON_REQUESTS: dict[str, dict[str, Any]] = {
    "ActRequest": {"type": "act", "id": "r1", "actions": [
        {"type": "click", "x": 1, "y": 2}, {"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 2, "y": 2}]},
        {"type": "keypress", "keys": ["CTRL", "a"]}, {"type": "type", "text": "hi"}, {"type": "zoom",
        "region": [0, 0, 4, 4]}], "observe": {"format": "jpeg", "quality": 50}},
    "NavigateRequest": {"type": "navigate", "id": "r2", "url": "https://example.test/"},
    "ConfigureRequest": {"type": "configure", "id": "r3", "model_size": {"width": 1280, "height": 800}},
    "ResetRequest": {"type": "reset", "id": "r4", "token_sha256": "0" * 64},
    "SeedWorkspaceRequest": {"type": "seed_workspace", "id": "w1", "archive": base64.b64encode(b"x").decode()},
    "ListDirRequest": {"type": "list_dir", "id": "w2", "path": "."},
    "ReadFileRequest": {"type": "read_file", "id": "w3", "path": "a.py"},
    "WriteFileRequest": {"type": "write_file", "id": "w4", "path": "a.py", "content": "x = 1\n"},
    "EditFileRequest": {"type": "edit_file", "id": "w5", "path": "a.py", "old_text": "1", "new_text": "2"},
    "ApplyPatchRequest": {"type": "apply_patch", "id": "w6", "patch": "--- a/a\n+++ b/a\n"},
    "ExecRequest": {"type": "exec", "id": "w7", "argv": ["python", "-V"]},
    "RunTestsRequest": {"type": "run_tests", "id": "w8", "argv": ["pytest", "-q"]},
    "WorkspaceDiffRequest": {"type": "workspace_diff", "id": "w9"},
}


def test_the_daemon_schemas_accept_real_requests(schemas: dict[str, dict[str, Any]]) -> None:
    for name, message in DAEMON_REQUESTS.items():
        model = getattr(deskpod.protocol, name)
        model.model_validate(message)  # the sample is a valid request
        _check(schemas, name, message)
        _check(schemas, name, json.loads(model.model_validate(message).model_dump_json()))


def test_the_daemon_schemas_accept_real_replies(schemas: dict[str, dict[str, Any]]) -> None:
    observation = Observation(screenshot=_png(), settled=True, url="https://example.test/", title="t",
                              tabs=[Tab(id="1", url="https://example.test/", title="t", active=True)])
    output = ExecOutput(exit_code=0, stdout="ok", stderr="", stdout_bytes=2, stderr_bytes=0, duration_s=0.5)
    samples: list[BaseModel] = [
        Hello(screen=Size(width=8, height=6), model_size=Size(width=4, height=3), sandbox_id="sbx-01234567"),
        ActReply(id="r1", observation=observation),
        ConfigureReply(id="r3", model_size=Size(width=4, height=3)),
        ExecReply(id="w7", workspace=output),
        ListDirReply(id="w2", workspace=DirListing(path=".", entries=[DirEntry(name="a.py", kind="file", size=1)])),
        Result(id="r1", observation=observation),
        ErrorReply(id="r1", error=ErrorBody(**BusyError("busy").to_wire())),
        SnapshotRestored(files=3, size=100, url="https://example.test/"),
    ]
    for message in samples:
        _check(schemas, type(message).__name__, json.loads(encode_message(message)))


def _confirmation_request() -> ConfirmationRequest:
    shot = _png()
    return ConfirmationRequest(
        id="confirm-1", run_id="run-1", step=2, summary="click Pay at (1, 2)",
        subject=ActionSubject(action={"type": "click", "x": 1, "y": 2, "button": "left"}, data=None,
                              url="http://demo.test/pay", screenshot_format="png", screenshot_data=shot.data,
                              screenshot_sha256=shot.sha256),
        level="L2", reasons=("payment",), reversible=True, digest="a" * 64, timeout_s=120.0)


PAUSE_NOTICE = PauseNotice("pause-1", "run-1", "injection", "the page instructs the agent", ("ignore the task",),
                           "http://demo.test/", None, 300.0)
CREDENTIAL_REQUEST = CredentialRequest("credential-1", "run-1", "shop password", "http://shop.test/login", "textbox",
                                       "Password", 120.0)
CONFIRMATION = service.ConfirmationRequestBody.model_validate(_confirmation_request().to_json())
PAUSE = service.PauseNoticeBody.model_validate(PAUSE_NOTICE.to_json())
CREDENTIAL = service.CredentialRequestBody.model_validate(CREDENTIAL_REQUEST.to_json())


def test_the_service_schemas_accept_real_messages(schemas: dict[str, dict[str, Any]]) -> None:
    inbound = {
        "OpenMessage": {"type": "open", "id": "o1", "sandbox": {"url": "ws://127.0.0.1:8765/v1/ws", "token": "t" * 32},
                        "task": {"name": "pay", "start_url": "http://demo.test/", "success": {"url_matches": "done"}}},
        "SubmitMessage": {"type": "submit", "id": "s1", "session": "session-1", "actions": [{"type": "screenshot"}]},
        "FinishMessage": {"type": "finish", "id": "f1", "session": "session-1", "claim": "done"},
        "ConfirmMessage": {"type": "confirm", "id": "c1", "request_id": "q1", "approve": True, "digest": "a" * 64},
        "ReviewMessage": {"type": "review", "id": "v1", "pause_id": "p1", "answer": "resume"},
        "ControlMessage": {"type": "pause", "id": "p1", "session": "session-1"},
        "ResetMessage": {"type": "reset", "id": "x1", "session": "session-1"},
        "TakeoverMessage": {"type": "takeover", "id": "t1", "session": "session-1"},
        "HumanInputMessage": {"type": "human_input", "id": "h1", "session": "session-1",
                              "action": {"type": "click", "x": 1, "y": 2}},
        "HandbackMessage": {"type": "handback", "id": "b1", "session": "session-1"},
        "CredentialMessage": {"type": "credential", "id": "k1", "request_id": "credential-1", "secret": "pw"},
    }
    for name, message in inbound.items():
        getattr(service, name).model_validate(message)
        _check(schemas, name, message)
    observation = Observation(url="http://demo.test/")
    outbound: list[BaseModel] = [
        service.ServiceOpened(id="o1", session="session-1"),
        service.ServiceObservation(id=None, session="session-1", status="ready", observation=observation),
        service.ServiceObservation(id="s1", session="session-1", status="error",
                                   error={"code": "busy", "message": "m"}, observation=observation),
        service.ServiceConfirmationRequired(session="session-1", request=CONFIRMATION),
        service.ServicePauseRequired(session="session-1", notice=PAUSE),
        service.ServiceOk(id="p1"),
        service.ServiceEvent(session="session-1", record={"event": "step", "seq": 1}),
        service.ServiceFinished(session="session-1", result=service.ServiceRunSummary(
            run_id="r", status="succeeded", reason="ok", steps=2, url=None, audit_log="/a.jsonl", audit_head="",
            scene=None)),
        service.ServiceResetDone(id="x1", session="session-1", token="t" * 32, url="http://demo.test/"),
        service.ServiceSession(session="session-1", task="t", start_url="http://demo.test/", url=None, title=None,
                               state="planning", screen={"width": 1280, "height": 800}),
        service.ServiceError(id=None, error=ErrorBody(code="invalid_request", message="bad")),
        service.ServiceTakeoverState(session="session-1", active=True, by="alice"),
        service.ServiceCredentialRequired(session="session-1", request=CREDENTIAL),
        service.ServiceQuestionWithdrawn(session="session-1", id="confirm-1", reason="no answer within 120 s"),
    ]
    assert {type(m) for m in outbound} == set(service.ServiceMessage.__args__)  # type: ignore[attr-defined]
    for message in outbound:
        _check(schemas, type(message).__name__, message.model_dump(mode="json"))


def test_a_schema_refuses_what_the_model_refuses(schemas: dict[str, dict[str, Any]]) -> None:
    bad = {"type": "act", "id": "r1", "actions": [], "extra": 1}
    assert list(Draft202012Validator(schemas["ActRequest"]).iter_errors(bad))


def test_write_schemas_overwrites_an_existing_folder(tmp_path: Path) -> None:
    first = write_schemas(tmp_path)
    assert write_schemas(tmp_path) == first


def test_the_service_models_dump_the_json_serve_sent_before() -> None:
    """The models replaced hand-built dicts: same keys, same order, same values."""
    observation = Observation(url="http://demo.test/")
    message = service.ServiceObservation(id="s1", session="session-1", status="ok", error={}, observation=observation)
    assert json.dumps(message.model_dump(mode="json")) == json.dumps(
        {"type": "observation", "id": "s1", "session": "session-1", "status": "ok", "error": {},
         "observation": observation.model_dump(mode="json")})
    summary = service.ServiceRunSummary(run_id="r", status="failed", reason="no", steps=1, url=None,
                                        audit_log="/a.jsonl", audit_head="ab", scene="/s")
    assert json.dumps(service.ServiceFinished(session="x", result=summary).model_dump(mode="json")) == json.dumps(
        {"type": "finished", "session": "x", "result": {"run_id": "r", "status": "failed", "reason": "no", "steps": 1,
                                                       "url": None, "audit_log": "/a.jsonl", "audit_head": "ab",
                                                       "scene": "/s"}})
    assert service.ServiceResetDone(id="i", session="x", token="t", url=None).model_dump(mode="json") == {
        "type": "reset_done", "id": "i", "session": "x", "token": "t", "url": None}


def test_the_typed_payloads_dump_the_json_serve_sent_before() -> None:
    """The questions' payloads became models: their JSON is still the controller's ``to_json()``,
    byte for byte (same keys, same order, same values), inside the same messages."""
    confirm = service.ServiceConfirmationRequired(session="s", request=CONFIRMATION, approver="self")
    assert json.dumps(confirm.model_dump(mode="json"), separators=(",", ":")) == json.dumps(
        {"type": "confirmation_required", "session": "s", "request": _confirmation_request().to_json(),
         "approver": "self"}, separators=(",", ":"))
    pause = service.ServicePauseRequired(session="s", notice=PAUSE)
    assert json.dumps(pause.model_dump(mode="json")) == json.dumps(
        {"type": "pause_required", "session": "s", "notice": PAUSE_NOTICE.to_json(), "approver": "approver"})
    credential = service.ServiceCredentialRequired(session="s", request=CREDENTIAL)
    assert json.dumps(credential.model_dump(mode="json")) == json.dumps(
        {"type": "credential_required", "session": "s", "request": CREDENTIAL_REQUEST.to_json()})


def test_a_payload_still_reads_as_a_json_object() -> None:
    """Code written when payloads were JSON objects keeps working: ``notice.request["digest"]``."""
    assert CONFIRMATION["digest"] == CONFIRMATION.digest == "a" * 64
    assert CONFIRMATION.get("attempt") == 1 and CONFIRMATION.get("nothing", "x") == "x"
    assert CREDENTIAL["field"]["role"] == "textbox" and PAUSE["evidence"] == ["ignore the task"]
    assert "digest" in CONFIRMATION and "nothing" not in CONFIRMATION
    with pytest.raises(KeyError):
        CONFIRMATION["nothing"]


def test_the_services_http_endpoint_is_in_its_openapi_document(tmp_path: Path) -> None:
    """``deskpod serve`` has one HTTP endpoint besides its websocket: ``GET /healthz``, in the
    OpenAPI document FastAPI makes from the service's app, whose answer schema accepts what
    the service answers."""
    written = write_schemas(tmp_path)
    assert written["openapi"] == "service/openapi.json"
    document = json.loads((tmp_path / "service" / "openapi.json").read_text())
    assert document["info"]["title"] == "deskpod serve" and set(document["paths"]) == {"/healthz"}
    answer = document["paths"]["/healthz"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/ServiceHealth"}
    health = ControllerService("0" * 64).health().model_dump()
    errors = list(Draft202012Validator(document["components"]["schemas"]["ServiceHealth"]).iter_errors(health))
    assert errors == [] and health == {"ok": True, "sessions": 0, "running": 0}
