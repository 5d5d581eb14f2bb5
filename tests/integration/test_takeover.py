"""Take over, hand back, credentials and host-held secrets through ``deskpod serve`` on a real sandbox.

The service runs in this process (the agent and the person are plain ``websockets``
clients: the agent's token and the approver token); the sandbox is the integration
stack's. The fixture ``takeover-login`` reports the note field's value, and the
password and comment fields only by length and FNV-1a hash, so a test sees where a
secret landed without the page showing it.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import secrets
from pathlib import Path
from typing import Any

import av
import pytest
from PIL import Image, ImageChops
from pydantic import SecretStr
from websockets.asyncio.client import connect

from deskpod.client import Sandbox
from deskpod.controller.audit_log import verify_log
from deskpod.controller.audit_sign import AuditSigner
from deskpod.controller.credentials import HostSecret, SecretStore
from deskpod.controller.recording_store import check_log_recording, recording_path
from deskpod.errors import ScreenChangedError
from deskpod.protocol import FocusedElement, ObserveOptions, ScreenExpectation
from deskpod_stack import Stack, page_state
from running_service import running_service

pytestmark = pytest.mark.integration

APPROVER = secrets.token_urlsafe(32)
PAGE = "http://demo.test/fixtures/takeover-login"
NOTE = {"type": "click", "x": 640, "y": 220}
PASSWORD = {"type": "click", "x": 640, "y": 350}
COMMENT = {"type": "click", "x": 640, "y": 480}
HUMAN_SECRET = "Pw-" + secrets.token_hex(8)
HOST_SECRET = "Host-" + secrets.token_hex(8)


def fnv(text: str) -> str:
    """FNV-1a 32-bit of ``text``'s UTF-8, as the fixture computes it."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


class Peer:
    """One websocket client of the service; keeps every message it did not ask for."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.seen: list[dict] = []

    async def send(self, **message: Any) -> None:
        await self.ws.send(json.dumps(message))

    async def next(self, kind: str, **match: Any) -> dict:
        for i, message in enumerate(self.seen):
            if message["type"] == kind and all(message.get(k) == v for k, v in match.items()):
                return self.seen.pop(i)
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), 60))
            if message["type"] == kind and all(message.get(k) == v for k, v in match.items()):
                return message
            self.seen.append(message)

    async def reply(self, request_id: str) -> dict:
        """The ``ok`` or ``error`` answering ``request_id``."""
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), 60))
            if message["type"] in ("ok", "error") and message.get("id") == request_id:
                return message
            self.seen.append(message)


def run(tmp_path: Path, body: Any, sandbox_url: str) -> Any:
    token = secrets.token_urlsafe(32)
    store = SecretStore([HostSecret("DEMO_PW", SecretStr(HOST_SECRET), ("demo.test",)),
                         HostSecret("BANK_PW", SecretStr("Bank-" + HOST_SECRET), ("bank.test",))])

    async def main() -> Any:
        async with running_service(token, tmp_path / "audit", approver_token=APPROVER, secrets=store,
                                   sandboxes=frozenset({sandbox_url})) as port:
            url = f"ws://127.0.0.1:{port}/v1/controller"
            async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as a, \
                    connect(url, additional_headers={"Authorization": f"Bearer {APPROVER}"}) as h:
                return await asyncio.wait_for(body(Peer(a), Peer(h)), 150)

    return asyncio.run(main())


async def open_session(stack: Stack, agent: Peer, start_url: str) -> str:
    await agent.send(type="open", id="o1", sandbox={"url": stack.ws_url, "token": stack.token},
                     task={"name": "takeover", "start_url": start_url, "allowed_domains": ["demo.test"],
                           "limits": {"max_errors": 20},  # the refusals this test asks for come in a row
                           "success": {"page_text_contains": "never on this page", "timeout_s": 0.5}})
    session = (await agent.next("opened"))["session"]
    await agent.next("observation", id=None)
    return str(session)


async def submit(agent: Peer, session: str, sid: str, *actions: dict) -> dict:
    """Submit ``actions``; a step refused because the screen changed under a click (nothing was
    pressed: a loaded machine repaints late) is submitted again, as an agent re-plans."""
    for attempt in range(4):
        await agent.send(type="submit", id=f"{sid}-{attempt}", session=session, actions=list(actions))
        outcome = await agent.next("observation", id=f"{sid}-{attempt}")
        if outcome["error"].get("rule") != "screen_changed":
            return outcome
    return outcome


def files_text(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_a_person_takes_over_types_hands_back_and_gives_a_credential_no_log_holds(
        stack: Stack, tmp_path: Path) -> None:
    async def body(agent: Peer, human: Peer) -> dict:
        session = await open_session(stack, agent, PAGE)
        # The agent's own connection may not act as the person, nor take over.
        await agent.send(type="takeover", id="a1", session=session)
        refused = [await agent.reply("a1")]
        await agent.send(type="human_input", id="a2", session=session, action={"type": "type", "text": "x"})
        refused.append(await agent.reply("a2"))
        await agent.send(type="credential", id="a3", request_id="credential-x", secret="stolen")
        refused.append(await agent.reply("a3"))
        await human.send(type="takeover", id="t1", session=session)
        took = [await human.reply("t1"), await human.next("takeover_state"), await agent.next("takeover_state")]
        inputs = []
        for n, action in enumerate([NOTE, {"type": "type", "text": "hello from a person"},
                                    {"type": "teleport"}, {"type": "click", "x": 99999, "y": 1}]):
            await human.send(type="human_input", id=f"h{n}", session=session, action=action)
            inputs.append(await human.reply(f"h{n}"))
        await human.send(type="handback", id="b1", session=session)
        back = [await human.reply("b1"), await agent.next("takeover_state", active=False)]
        # The agent's first look after the handback is answered with the screen the person left.
        after_handback = await submit(agent, session, "s1", {"type": "screenshot"})
        # A credential: the agent focuses the password field and asks; the person answers.
        await submit(agent, session, "s2", PASSWORD)
        asking = asyncio.ensure_future(submit(agent, session, "s3",
                                              {"type": "request_credential", "label": "demo shop password"}))
        asked = await human.next("credential_required")
        await human.send(type="credential", id="k1", request_id=asked["request"]["request_id"], secret=HUMAN_SECRET)
        credential = [await human.reply("k1"), await asking]
        # Refused: into a text field, for a domain off the run, a host secret off its domains.
        await submit(agent, session, "s4", COMMENT)
        into_text = await submit(agent, session, "s5", {"type": "request_credential", "label": "pw"})
        await submit(agent, session, "s6", PASSWORD)
        off_run = await submit(agent, session, "s7",
                               {"type": "request_credential", "label": "pw", "domains": ["other.test"]})
        host_off = await submit(agent, session, "s8", {"type": "type_secret", "name": "BANK_PW"})
        await submit(agent, session, "s9", COMMENT)
        host_text = await submit(agent, session, "s10", {"type": "type_secret", "name": "DEMO_PW"})
        # Back into the password field by keyboard: a click on a password field holding a value is
        # refused by the screen binding on this machine (screen_changed, element) however often it is sent.
        await submit(agent, session, "s11", {"type": "keypress", "keys": ["shift", "Tab"]})
        host_ok = await submit(agent, session, "s12", {"type": "type_secret", "name": "DEMO_PW"})
        await agent.send(type="finish", id="f1", session=session, claim="done")
        finished = await agent.next("finished")
        return {"refused": refused, "took": took, "inputs": inputs, "back": back, "after": after_handback,
                "asked": asked, "credential": credential, "into_text": into_text, "off_run": off_run,
                "host_off": host_off, "host_text": host_text, "host_ok": host_ok, "finished": finished,
                "seen": agent.seen + human.seen}

    out = run(tmp_path, body, stack.ws_url)
    for log in (tmp_path / "audit").glob("*.jsonl"):  # shown when an assertion fails
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record["event"] in ("step", "policy", "credential_void", "human_input"):
                print(record["event"], record.get("outcome"), record.get("rule"), str(record.get("reason"))[:160])
    assert [r["error"]["code"] for r in out["refused"]] == ["unauthorized"] * 3, out["refused"]
    assert out["took"][0]["type"] == "ok" and out["took"][1]["active"] and out["took"][1]["by"] == "approver"
    assert out["took"][2]["active"]
    assert [r["type"] for r in out["inputs"]] == ["ok", "ok", "error", "error"], out["inputs"]
    assert out["inputs"][2]["error"]["code"] == "invalid_request"  # validated like any action: the run survives
    assert out["inputs"][3]["error"]["code"] == "out_of_bounds"
    assert out["back"][0]["type"] == "ok" and out["back"][1]["by"] is None
    after = out["after"]
    assert after["status"] == "ok" and after["error"] == {} and after["observation"]["screenshot"], after["error"]
    assert page_state(after["observation"]["page_text"])["note"] == "hello from a person"
    assert out["asked"]["request"]["field"] == {"role": "textbox", "name": "Password"}
    assert out["credential"][0]["type"] == "ok" and out["credential"][1]["status"] == "ok", out["credential"]
    state = page_state(out["credential"][1]["observation"]["page_text"])
    assert state["password_length"] == len(HUMAN_SECRET) and state["password_fnv"] == fnv(HUMAN_SECRET)
    assert out["into_text"]["status"] == "denied" and out["into_text"]["error"]["rule"] == "credential_field"
    assert out["off_run"]["error"]["rule"] == "credential_domain"
    assert out["host_off"]["error"]["rule"] == "credential_domain"
    assert out["host_text"]["error"]["rule"] == "credential_field"
    assert out["host_ok"]["status"] == "ok", out["host_ok"]["error"]
    state = page_state(out["host_ok"]["observation"]["page_text"])
    # Focusing a field by keyboard selects its value, which the typing replaces.
    assert state["password_fnv"] in (fnv(HOST_SECRET), fnv(HUMAN_SECRET + HOST_SECRET)), state
    assert state["comment_length"] == 0
    result = out["finished"]["result"]
    assert verify_log(result["audit_log"], result["audit_head"], public_key=AuditSigner.load_or_create().public_key).ok
    records = [json.loads(line) for line in Path(result["audit_log"]).read_text().splitlines()]
    human = [r for r in records if r["event"] == "human_input"]
    assert {r["actor"] for r in human} == {"human:approver"} and len(human) == 3  # the click, the text, the refusal
    assert human[1]["action"] == {"type": "type", "text": "hello from a person"}
    assert [r["by"] for r in records if r["event"] == "credential_typed"] == ["human:approver", "host"]
    # Neither secret is in any file the run left (log, screenshots, scene), nor in any message sent.
    every = files_text(tmp_path / "audit")
    assert HUMAN_SECRET.encode() not in every and HOST_SECRET.encode() not in every
    sent = json.dumps(out)
    assert sent.count(HUMAN_SECRET) == 0 and HOST_SECRET not in sent


def test_a_hostile_page_that_moves_the_focus_gets_no_credential(stack: Stack, tmp_path: Path) -> None:
    async def body(agent: Peer, human: Peer) -> dict:
        session = await open_session(stack, agent, PAGE + "?steal=1")
        await submit(agent, session, "s1", PASSWORD)
        asking = asyncio.ensure_future(human.next("credential_required"))
        answered = asyncio.ensure_future(submit(agent, session, "s2",
                                                {"type": "request_credential", "label": "demo shop password"}))
        done, _ = await asyncio.wait({asking, answered}, return_when=asyncio.FIRST_COMPLETED)
        if asking in done:  # the focus was still the password field when the agent asked
            await asyncio.sleep(2.5)  # the page moves the focus 2 s after the password field got it
            await human.send(type="credential", id="k1", request_id=asking.result()["request"]["request_id"],
                             secret=HUMAN_SECRET)
            await human.reply("k1")
        else:  # a slow machine: the focus had moved before the agent asked, and nobody was asked
            asking.cancel()
        outcome = await answered
        await agent.send(type="cancel", id="c1", session=session)
        await agent.next("finished")
        return outcome

    outcome = run(tmp_path, body, stack.ws_url)
    assert outcome["status"] == "denied" and outcome["error"]["rule"] == "credential_field", outcome
    state = page_state(outcome["observation"]["page_text"])
    assert state["password_length"] == 0 and state["comment_length"] == 0
    assert HUMAN_SECRET.encode() not in files_text(tmp_path / "audit")


def test_the_daemon_types_nothing_when_the_focus_is_not_the_one_checked(stack: Stack) -> None:
    """The same-step check: the expectation names the password field; the focus is the comment field."""
    async def body() -> tuple[str, dict]:
        async with await Sandbox.open(stack.ws_url, stack.token) as sb:
            await sb.navigate(PAGE)
            await sb.click(PASSWORD["x"], PASSWORD["y"])
            checked = await sb.client.act([], ObserveOptions())
            await sb.click(COMMENT["x"], COMMENT["y"])  # what a page's script could do
            assert checked.screenshot is not None and checked.focused is not None and checked.focused.is_password
            expect = ScreenExpectation(screenshot_sha256=None, radius_px=None, url=checked.url,
                                       focus=FocusedElement.model_validate(checked.focused.model_dump()))
            reason = ""
            try:
                await sb.client.act([{"type": "type", "text": HOST_SECRET}], ObserveOptions(), expect=expect)
            except ScreenChangedError as exc:
                reason = str(exc.detail.get("reason"))
            state = page_state((await sb.client.act([], ObserveOptions(screenshot=False, page_text=True))).page_text)
            return reason, state

    reason, state = asyncio.run(body())
    assert reason == "focus" and state["comment_length"] == 0 and state["password_length"] == 0


def test_a_shown_password_is_painted_over_in_what_the_agent_and_the_scene_get(stack: Stack, tmp_path: Path) -> None:
    """The page's "Show password" box turns the field into a text field and a line repeats the
    value: the agent's screenshot has a black box over the field and the line, and only there
    (the guard of the third review: only the secret is masked, not the whole screen): every
    other pixel is the one the same page shows, with the same text typed, to a client that asked
    for no mask. The failure scene keeps that screen."""
    show = f"{PAGE.rsplit('/', 1)[0]}/show-password"

    async def unmasked() -> Any:
        """The same steps straight through the daemon, before any run named the secret."""
        async with await Sandbox.open(stack.ws_url, stack.token) as sb:
            await sb.reset()  # the secret earlier tests' runs named is masked until a reset
            stack.token = sb.token
            await sb.navigate(show)
            await sb.click(PASSWORD["x"], PASSWORD["y"])
            await sb.type_text(HOST_SECRET)
            await sb.click(300, 420)
            seen = await sb.observe()
            await sb.navigate(PAGE)  # the run below opens the page afresh
            return seen.screenshot

    reference_shot = asyncio.run(unmasked())

    async def body(agent: Peer, human: Peer) -> dict:
        session = await open_session(stack, agent, show)
        await submit(agent, session, "m1", PASSWORD)
        typed = await submit(agent, session, "m2", {"type": "type_secret", "name": "DEMO_PW"})
        shown = await submit(agent, session, "m3", {"type": "click", "x": 300, "y": 420})
        await agent.send(type="finish", id="f1", session=session, claim="done")
        return {"typed": typed, "shown": shown, "finished": await agent.next("finished")}

    out = run(tmp_path, body, stack.ws_url)
    assert out["typed"]["status"] == "ok", out["typed"]["error"]
    assert out["shown"]["status"] == "ok", out["shown"]["error"]
    observation = out["shown"]["observation"]
    shot = observation["screenshot"]
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    field_band, echo_band = (300, 335, 1000, 365), (420, 470, 600, 490)
    assert shot["masked"] >= 2, shot["masked"]
    assert image.crop(field_band).getextrema() == ((0, 0),) * 3, "the shown password is not painted over"
    assert image.crop(echo_band).getextrema() == ((0, 0),) * 3, "the echoed password is not painted over"
    heading = image.crop((64, 85, 500, 120)).getextrema()
    assert all(high > 200 for _, high in heading), "the heading was painted over"
    assert reference_shot is not None and reference_shot.masked == 0 and reference_shot.format == "png"
    reference = Image.open(io.BytesIO(base64.b64decode(reference_shot.data))).convert("RGB")
    assert reference.size == image.size
    assert reference.crop(field_band).getextrema() != ((0, 0),) * 3  # the secret shows there, unmasked
    changed = ImageChops.difference(reference, image).convert("L").point(lambda v: 255 if v else 0)
    not_black = image.convert("L").point(lambda v: 255 if v else 0)
    assert ImageChops.multiply(changed, not_black).getbbox() is None, "a pixel changed to something but black"
    field_box, echo_box = (240, 295, 1040, 405), (240, 440, image.size[0], 515)
    for region in (field_box, echo_box):
        assert changed.crop(region).getbbox() is not None, f"nothing painted in {region}"
        changed.paste(0, region)
    assert changed.getbbox() is None, f"pixels painted outside the field and the echoed line: {changed.getbbox()}"
    assert HOST_SECRET not in json.dumps(out)
    scenes = list((tmp_path / "audit").rglob("screenshot.*"))
    assert scenes, "the run left no failure scene"
    for scene in scenes:
        kept = Image.open(scene).convert("RGB")
        assert kept.crop(field_band).getextrema() == ((0, 0),) * 3
    # The run's recording shows the same: the last frames (the password shown) black over the
    # field and the echoed line (JPEG and H.264 blur the edges: the inner band), the heading not.
    run_id = out["finished"]["result"]["run_id"]
    log = tmp_path / "audit" / f"{run_id}.jsonl"
    assert check_log_recording(log).state == "matches"
    with av.open(str(recording_path(tmp_path / "audit", run_id))) as video:
        frames = [frame.to_image() for frame in video.decode(video=0)]
    assert len(frames) >= 3 and frames[-1].size == image.size, (len(frames), frames[-1].size)
    last = frames[-1]
    for band in ((310, 340, 990, 360), (425, 472, 590, 488)):
        assert max(high for _, high in last.crop(band).getextrema()) < 40, f"the video shows {band} unmasked"
    assert all(high > 200 for _, high in last.crop((64, 85, 500, 120)).getextrema()), "the video's heading is black"
