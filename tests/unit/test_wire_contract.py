"""The daemon wire's typed contract: one reply model per request, the package's exports,
the fixed error-code table (no Docker, no X)."""

from __future__ import annotations

import ast
import builtins
import inspect
import json
from pathlib import Path

import pytest

import deskpod.errors
import deskpod.protocol
from deskpod.errors import BadReplyError, DeskpodError, InternalError, error_from_wire
from deskpod.protocol import (
    REPLY_TYPES,
    REQUEST_TYPES,
    ActReply,
    ActRequest,
    ConfigureReply,
    ConfigureRequest,
    ExecOutput,
    ExecReply,
    ExecRequest,
    FileWritten,
    Observation,
    Result,
    Size,
    WriteFileReply,
    WriteFileRequest,
    encode_message,
    parse_request,
    parse_server_message,
)
from deskpod.client.untrusted import check_result

PROTOCOL_DIR = Path(deskpod.protocol.__file__).parent


def test_every_request_has_exactly_one_reply_model() -> None:
    assert set(REPLY_TYPES) == set(REQUEST_TYPES.values())
    assert len(set(REPLY_TYPES.values())) == len(REPLY_TYPES)


def test_the_request_union_is_spelled_out_once() -> None:
    """Only protocol/requests.py lists the request models side by side."""
    spelled = []
    for path in Path(deskpod.protocol.__file__).parents[1].rglob("*.py"):
        text = path.read_text()
        if "ActRequest | NavigateRequest" in text or "Union[ActRequest, NavigateRequest" in text:
            spelled.append(path.relative_to(PROTOCOL_DIR.parent).as_posix())
    assert spelled == ["protocol/requests.py"]


def test_a_typed_reply_reads_as_a_result_and_narrows_back() -> None:
    """The daemon sends the typed reply; the client reads it as a Result and gets the typed one back."""
    request = parse_request(json.dumps({"type": "configure", "id": "c", "model_size": {"width": 8, "height": 6}}))
    assert isinstance(request, ConfigureRequest)
    wire = encode_message(ConfigureReply(id="c", model_size=Size(width=8, height=6)))
    assert json.loads(wire) == {"type": "result", "id": "c", "model_size": {"width": 8, "height": 6}}
    read = parse_server_message(wire)
    assert isinstance(read, Result)
    reply = check_result(request, read)
    assert isinstance(reply, ConfigureReply) and reply.model_size == Size(width=8, height=6)


def test_an_act_reply_and_an_exec_reply_narrow_to_their_models() -> None:
    act = ActRequest(type="act", id="a", actions=[])
    reply = check_result(act, Result(id="a", observation=Observation()))
    assert isinstance(reply, ActReply) and reply.observation == Observation()
    run = ExecRequest(type="exec", id="e", argv=["true"])
    output = ExecOutput(exit_code=0, stdout="", stderr="", stdout_bytes=0, stderr_bytes=0, duration_s=0.1)
    assert isinstance(check_result(run, Result(id="e", workspace=output)), ExecReply)


def test_an_old_style_reply_with_null_payloads_still_reads() -> None:
    """What a daemon sent before the typed replies (every payload field, null ones included)."""
    old = json.dumps({"type": "result", "id": "w", "observation": None, "model_size": None,
                      "workspace": FileWritten(path="a", size=1, created=True).model_dump(mode="json")})
    request = WriteFileRequest(type="write_file", id="w", path="a", content="x")
    assert isinstance(check_result(request, parse_server_message(old)), WriteFileReply)  # type: ignore[arg-type]


def test_a_reply_of_the_wrong_kind_is_refused() -> None:
    run = ExecRequest(type="exec", id="e", argv=["true"])
    with pytest.raises(BadReplyError) as info:
        check_result(run, Result(id="e", workspace=FileWritten(path="a", size=1, created=True)))
    assert info.value.detail["reason"] == "wrong_kind"


def test_the_package_exports_public_names_of_its_modules_sorted() -> None:
    """The package re-exports what its users import (not every name of its modules): each
    a public name of one of its modules, the list sorted."""
    public: set[str] = set()
    for path in sorted(PROTOCOL_DIR.glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text())
        names = next(ast.literal_eval(n.value) for n in tree.body
                     if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
        assert names == sorted(names), path.name
        public |= set(names)
    assert deskpod.protocol.__all__ == sorted(deskpod.protocol.__all__)
    assert set(deskpod.protocol.__all__) <= public
    assert all(hasattr(deskpod.protocol, name) for name in deskpod.protocol.__all__)


def test_the_protocol_package_is_pure() -> None:
    """No I/O stacks: the daemon and the controller both import it."""
    for path in PROTOCOL_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not roots & {"fastapi", "Xlib", "mss", "docker", "websockets", "os", "subprocess"}, path.name


def _error_classes() -> list[type[DeskpodError]]:
    found, stack = [], [DeskpodError]
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return [c for c in found if c.__module__ == "deskpod.errors"]


def test_every_error_code_of_the_exception_tree_is_in_the_wire_table() -> None:
    classes = _error_classes()
    assert len(classes) == len([c for _, c in inspect.getmembers(deskpod.errors, inspect.isclass)
                                if issubclass(c, DeskpodError)])
    missing = {c.__name__: c.code for c in classes if c.code not in deskpod.errors.codes._WIRE_CODES}
    assert missing == {}
    for code, cls in deskpod.errors.codes._WIRE_CODES.items():
        assert cls.code == code


@pytest.mark.parametrize("code", ["policy_denied", "limit_exceeded", "not_verified", "cancelled", "agent_failed",
                                  "invalid_config"])
def test_a_sandbox_cannot_raise_the_controllers_own_errors(code: str) -> None:
    """A hostile daemon naming a controller code gets an internal error, not a policy denial, a cancel
    or a configuration error of the host."""
    err = error_from_wire({"code": code, "message": "m", "detail": {}})
    assert type(err) is InternalError


def _exception_bases() -> set[str]:
    """Names a class may derive from to be an exception: the builtins' and the tree's."""
    builtin = {name for name, value in vars(builtins).items()
               if isinstance(value, type) and issubclass(value, BaseException)}
    return builtin | {name for name, value in vars(deskpod.errors).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}


def test_every_public_exception_class_is_in_the_tree() -> None:
    """An exception class defined outside :mod:`deskpod.errors` is out of reach of the wire table's
    checks above; only private control-flow exceptions (``_Cancelled``) may live beside their code."""
    bases = _exception_bases()
    package = PROTOCOL_DIR.parent
    outside = []
    for path in sorted(package.rglob("*.py")):
        if path.parent.name == "errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if names & bases:
                    outside.append(f"{path.relative_to(package).as_posix()}:{node.name}")
    assert outside == []


def test_the_strict_model_config_is_written_once() -> None:
    """Every strict model imports :data:`deskpod.protocol._base.STRICT`; none spells it out again."""
    package = PROTOCOL_DIR.parent
    spelled = [path.relative_to(package).as_posix() for path in sorted(package.rglob("*.py"))
               if 'ConfigDict(extra="forbid", frozen=True)' in path.read_text()]
    assert spelled == ["protocol/_base.py"]
