"""The web console in a real browser (Playwright driving Debian's Chromium) on a real stack.

One controller service with the console (in this process, on a loopback port), one
browser with two signed-in people: ``ada`` (approver) and ``vic`` (viewer). The agent
is a plain websocket client of ``/v1/controller`` whose sessions run on the integration
stack's real sandbox, on the demo site's fixtures; the people answer in the page, by
clicking its buttons. ``DESKPOD_CONSOLE_SCREENSHOT=PATH`` saves the approver's page with
a confirmation card (the console guide's picture, docs/console.png).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.async_api import Page, async_playwright, expect
from websockets.asyncio.client import ClientConnection, connect

from deskpod_stack import Stack
from running_service import running_service
from deskpod.service.console.auth import ConsoleUser

pytestmark = pytest.mark.integration

PAY = {"type": "click", "x": 640, "y": 380}
NOTE = {"type": "click", "x": 640, "y": 560}
APPROVER = secrets.token_urlsafe(32)
VIEWER = secrets.token_urlsafe(32)
USERS = (ConsoleUser("ada", "approver", hashlib.sha256(APPROVER.encode()).hexdigest()),
         ConsoleUser("vic", "viewer", hashlib.sha256(VIEWER.encode()).hexdigest()))
HOSTILE_TITLE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
"""The title of images/demo/fixtures/console-hostile.html, as the page sets it."""

T = TypeVar("T")


class Console:
    """The service, the browser and the two people's pages, on one event loop in a thread."""

    def __init__(self, tmp: Path, sandbox_url: str) -> None:
        self.sandbox_url = sandbox_url
        """The stack's sandbox, the one the service vouches for (its sessions may ask for credentials)."""
        self.token = secrets.token_urlsafe(32)
        self.audit = tmp / "audit"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.stack = AsyncExitStack()
        self.port = 0
        self.approver: Page
        self.viewer: Page
        self.errors: list[str] = []
        """Script errors of the console's pages (none expected)."""

    def run(self, body: Callable[[], Awaitable[T]], timeout_s: float = 120) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(asyncio.wait_for(body(), timeout_s), self.loop)  # type: ignore[arg-type]
        return future.result(timeout_s + 5)

    async def start(self) -> None:
        self.port = await self.stack.enter_async_context(
            running_service(self.token, self.audit, console_users=USERS, sandboxes=frozenset({self.sandbox_url})))
        playwright = await self.stack.enter_async_context(async_playwright())
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        self.stack.push_async_callback(browser.close)
        self.approver = await self.sign_in(browser, APPROVER)
        self.viewer = await self.sign_in(browser, VIEWER)

    async def sign_in(self, browser: Any, token: str) -> Page:
        context = await browser.new_context(viewport={"width": 1280, "height": 1000})
        page = await context.new_page()
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        await page.goto(f"http://127.0.0.1:{self.port}/console/")
        assert page.url.endswith("/console/signin")  # no session: the sign-in form
        await page.fill("#token", token)
        await page.click("button[type=submit]")
        await expect(page.locator("#status")).to_contain_text("connected as")
        return page

    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/controller"


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, stack: Stack) -> Iterator[Console]:
    rig = Console(tmp_path_factory.mktemp("console"), stack.ws_url)
    rig.thread.start()
    rig.run(rig.start)
    yield rig
    rig.run(rig.stack.aclose)
    rig.loop.call_soon_threadsafe(rig.loop.stop)
    rig.thread.join(10)


async def next_of(ws: ClientConnection, kind: str) -> dict:
    """The agent's next message of ``type`` ``kind`` (others are skipped)."""
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if message["type"] == kind:
            return message


async def open_session(ws: ClientConnection, stack: Stack, start_url: str, success: dict) -> str:
    await ws.send(json.dumps({"type": "open", "id": "o1", "sandbox": {"url": stack.ws_url, "token": stack.token},
                              "task": {"name": "console-test", "start_url": start_url,
                                       "allowed_domains": ["demo.test"], "success": {"timeout_s": 3, **success}}}))
    session = (await next_of(ws, "opened"))["session"]
    await next_of(ws, "observation")
    return str(session)


def agent(console: Console) -> Any:
    return connect(console.url(), additional_headers={"Authorization": f"Bearer {console.token}"})


def card(page: Page, kind: str, session: str) -> Any:
    return page.locator(f'article.question.{kind}[data-session="{session}"]')


def test_an_approval_in_the_page_runs_the_action_and_a_viewer_cannot_approve(stack: Stack, console: Console) -> None:
    async def body() -> dict:
        async with agent(console) as ws:
            session = await open_session(ws, stack, "http://demo.test/fixtures/pay", {"page_text_contains": "Payment sent"})
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [PAY]}))
            ask = card(console.approver, "confirm", session)
            await expect(ask).to_be_visible(timeout=60_000)
            await expect(ask.locator(".level")).to_have_text("L3")
            await expect(ask.locator(".summary")).to_contain_text("Pay now")
            await expect(ask.locator(".url")).to_have_text("http://demo.test/fixtures/pay")
            await expect(ask.locator("figure.shot img")).to_be_visible()
            await expect(ask.locator("figure.shot .mark")).to_be_visible()
            await expect(ask.locator(".countdown")).to_contain_text("s left")
            # The viewer sees the card, its buttons disabled, and a forged answer from its page is refused.
            seen = card(console.viewer, "confirm", session)
            await expect(seen).to_be_visible()
            await expect(seen.locator("button.approve")).to_be_disabled()
            request_id = await ask.get_attribute("data-id")
            digest_reply = await console.viewer.evaluate(FORGE, {"request_id": request_id})
            if os.environ.get("DESKPOD_CONSOLE_SCREENSHOT"):
                await console.approver.screenshot(path=os.environ["DESKPOD_CONSOLE_SCREENSHOT"], full_page=True)
            await ask.locator("button.approve").click()
            finished = await next_of(ws, "finished")
            state = console.approver.locator(f'article.session[data-session="{session}"] .state')
            await expect(state).to_have_text("succeeded")
            await expect(ask).to_have_count(0)
            await expect(seen).to_have_count(0)
            return {"finished": finished["result"], "forged": digest_reply}

    outcome = console.run(body)
    assert outcome["forged"]["type"] == "error" and outcome["forged"]["error"]["code"] == "unauthorized"
    assert outcome["finished"]["status"] == "succeeded", outcome["finished"]["reason"]
    records = [json.loads(line) for line in Path(outcome["finished"]["audit_log"]).read_text().splitlines()]
    answers = [r for r in records if r["event"] == "confirmation_answer"]
    assert [a["outcome"] for a in answers] == ["approved"]


FORGE = """async ({request_id}) => {
  // What a viewer could try from the page's own context (the devtools console), which holds
  // the viewer's page secret.
  const ws = new WebSocket(`ws://${location.host}/console/ws`, window.deskpodPageSecret.protocols());
  const reply = await new Promise((resolve, reject) => {
    ws.onopen = () => ws.send(JSON.stringify({type: "confirm", id: "forged", request_id, approve: true,
                                              digest: "0".repeat(64)}));
    ws.onmessage = (event) => { const m = JSON.parse(event.data); if (m.id === "forged") resolve(m); };
    ws.onerror = () => reject(new Error("websocket failed"));
  });
  ws.close();
  return reply;
}"""


async def play_recording(console: Console, run_id: str) -> dict:
    """Open the run's page of the run history in a tab of the approver's and play its recording
    for a moment: what the video element says (readiness, duration, the time it reached)."""
    page = await console.approver.context.new_page()
    try:
        await page.goto(f"http://127.0.0.1:{console.port}/console/runs/{run_id}")
        await expect(page.locator('section.recording[data-recording="matches"] video')).to_have_count(1)
        await page.wait_for_function("() => document.querySelector('video.recording').readyState >= 2", timeout=30_000)
        facts = await page.evaluate("""async () => {
            const v = document.querySelector('video.recording');
            v.muted = true;
            const start = v.currentTime;
            await v.play();
            await new Promise(resolve => setTimeout(resolve, 700));
            v.pause();
            return {type: v.canPlayType('video/mp4; codecs="avc1.42E01F"'), duration: v.duration, start,
                    reached: v.currentTime, width: v.videoWidth, height: v.videoHeight, error: v.error && v.error.code};
        }""")
        facts["download"] = await page.locator("section.recording a.download").get_attribute("download")
        return dict(facts)
    finally:
        await page.close()


def test_a_denial_in_the_page_cancels_the_run_and_its_recording_plays_in_the_run_history(
        stack: Stack, console: Console) -> None:
    async def body() -> dict:
        async with agent(console) as ws:
            session = await open_session(ws, stack, "http://demo.test/fixtures/pay", {"page_text_contains": "Payment sent"})
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [PAY]}))
            ask = card(console.approver, "confirm", session)
            await ask.locator("button.deny").click(timeout=60_000)
            finished = await next_of(ws, "finished")
            state = console.approver.locator(f'article.session[data-session="{session}"] .state')
            await expect(state).to_have_text("cancelled")
            result = dict(finished["result"])
            return {**result, "played": await play_recording(console, result["run_id"])}

    result = console.run(body)
    assert result["status"] == "cancelled"
    played = result["played"]
    assert played["type"] == "probably" and played["error"] is None, played
    assert played["duration"] > 0.1 and played["reached"] > played["start"], played  # it played
    assert (played["width"], played["height"]) == (1280, 800), played
    assert played["download"] == f"deskpod-{result['run_id']}.mp4"


def test_a_pause_is_resumed_from_the_page(stack: Stack, console: Console) -> None:
    async def body() -> dict:
        async with agent(console) as ws:
            session = await open_session(ws, stack, "http://demo.test/fixtures/pay", {"page_text_contains": '"notes":1'})
            await ws.send(json.dumps({"type": "pause", "id": "p", "session": session}))
            paused = card(console.approver, "pause", session)
            await expect(paused).to_be_visible(timeout=60_000)
            await expect(paused.locator(".kind")).to_have_text("requested")
            await expect(card(console.viewer, "pause", session).locator("button.resume")).to_be_disabled()
            await paused.locator("button.resume").click()
            await expect(paused).to_have_count(0)
            await ws.send(json.dumps({"type": "submit", "id": "s1", "session": session, "actions": [NOTE]}))
            return dict((await next_of(ws, "finished"))["result"])

    result = console.run(body)
    assert result["status"] == "succeeded", result["reason"]


def test_a_hostile_page_title_is_shown_as_text(stack: Stack, console: Console) -> None:
    async def body() -> dict:
        async with agent(console) as ws:
            session = await open_session(ws, stack, "http://demo.test/fixtures/console-hostile",
                                         {"page_text_contains": "never there"})
            shown = console.approver.locator(f'article.session[data-session="{session}"]')
            await expect(shown.locator(".title")).to_have_text(HOSTILE_TITLE)
            outcome = {
                "pwned": await console.approver.evaluate("() => window.__pwned === undefined ? null : window.__pwned"),
                "images": await shown.locator(".title img, .title script").count(),
            }
            await ws.send(json.dumps({"type": "cancel", "id": "c", "session": session}))
            await next_of(ws, "finished")
            return outcome

    assert console.run(body) == {"pwned": None, "images": 0}
    assert console.errors == []


LOGIN = "http://demo.test/fixtures/takeover-login"
"""Its note field's value and its password's length and FNV-1a hash are shown as text
(images/demo/fixtures/takeover-login.html)."""
PASSWORD_FIELD = {"type": "click", "x": 640, "y": 350}
CREDENTIAL = "pw-" + secrets.token_urlsafe(12)


def fnv(text: str) -> str:
    """FNV-1a, 32 bits, as the fixture page computes it (hex)."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def page_state(text: str | None) -> dict:
    """The fixture's ``STATE {...}`` line."""
    line = next(part for part in (text or "").splitlines() if part.startswith("STATE "))
    return dict(json.loads(line[len("STATE "):]))


async def observed(ws: ClientConnection, session: str, sid: str, *actions: dict) -> dict:
    """Submit ``actions``; a step refused because the screen changed under it (a late repaint)
    is planned again, as an agent does."""
    for attempt in range(4):
        await ws.send(json.dumps({"type": "submit", "id": f"{sid}-{attempt}", "session": session,
                                  "actions": list(actions)}))
        while True:
            message = await next_of(ws, "observation")
            if message["id"] == f"{sid}-{attempt}":
                break
        if message["error"].get("rule") != "screen_changed":
            return message
    return message


def test_the_page_shows_the_sandbox_live_the_person_takes_over_types_and_gives_a_credential(
        stack: Stack, console: Console) -> None:
    """In the approver's page: the live canvas draws frames of the sandbox's screen; Take
    over, a click on the note field and keys on the canvas type into the sandbox (audited as
    the person's); Hand back gives the agent a fresh observation; a credential typed in the
    credential card reaches the password field and no file of the audit folder."""
    async def body() -> dict:
        async with agent(console) as ws:
            session = await open_session(ws, stack, LOGIN, {"page_text_contains": "never there"})
            page = console.approver
            shown = page.locator(f'article.session[data-session="{session}"]')
            canvas = shown.locator("canvas.live")
            await expect(canvas).to_have_attribute("data-live-session", session)
            await canvas.evaluate(
                "c => { window.__frames = 0; c.addEventListener('deskpod-live-frame',"
                " e => { window.__frames = e.detail.frames; }); }")
            lit = ("(c) => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                   " let lit = 0; for (let i = 0; i < d.length; i += 4 * 97) if (d[i] + d[i + 1] + d[i + 2] > 0)"
                   " lit++; return lit; }")
            await page.wait_for_function(f"() => ({lit})(document.querySelector("
                                         f"'canvas[data-live-session=\"{session}\"]')) > 0", timeout=60_000)
            painted = await canvas.evaluate(lit)
            await shown.locator("button.takeover").click()
            await expect(shown.locator(".takeover-state")).to_contain_text("Taken over by ada")
            box = await canvas.bounding_box()
            assert box is not None
            width = await canvas.evaluate("c => c.width")
            scale = box["width"] / width
            await page.mouse.click(box["x"] + 640 * scale, box["y"] + 220 * scale)
            await page.keyboard.type("hi ada")
            await page.wait_for_function("() => window.__frames >= 1", timeout=60_000)  # frames of the typing
            await expect(shown.locator("button.handback")).to_be_visible()
            await shown.locator("button.handback").click()
            await expect(shown.locator(".takeover-state")).to_have_text("")
            after = await observed(ws, session, "s1", {"type": "screenshot"})  # answered with the screen
            await observed(ws, session, "s2", PASSWORD_FIELD)
            await ws.send(json.dumps({"type": "submit", "id": "s3", "session": session,
                                      "actions": [{"type": "request_credential", "label": "demo shop password"}]}))
            asked = card(page, "credential", session)
            await expect(asked).to_be_visible(timeout=60_000)
            await expect(asked.locator(".label")).to_have_text("demo shop password")
            await asked.locator("input.secret").fill(CREDENTIAL)
            await asked.locator("button.send").click()
            while True:
                typed = await next_of(ws, "observation")
                if typed["id"] == "s3":
                    break
            await expect(asked).to_have_count(0)
            await ws.send(json.dumps({"type": "cancel", "id": "c", "session": session}))
            finished = await next_of(ws, "finished")
            return {"painted": painted, "after": after, "typed": typed, "result": finished["result"]}

    out = console.run(body, timeout_s=300)
    assert out["painted"] > 0  # the canvas shows the sandbox's screen, not a black box
    after = out["after"]
    assert after["status"] == "ok" and after["observation"]["screenshot"], after["error"]
    assert page_state(after["observation"]["page_text"])["note"] == "hi ada"
    assert out["typed"]["status"] == "ok", out["typed"]["error"]
    state = page_state(out["typed"]["observation"]["page_text"])
    assert state["password_length"] == len(CREDENTIAL) and state["password_fnv"] == fnv(CREDENTIAL)
    records = [json.loads(line) for line in Path(out["result"]["audit_log"]).read_text().splitlines()]
    human = [r for r in records if r["event"] == "human_input"]
    assert human and {r["actor"] for r in human} == {"human:ada"}
    assert "".join(r["action"].get("text", "") for r in human if r["action"]["type"] == "type") == "hi ada"
    assert [r["by"] for r in records if r["event"] == "credential_typed"] == ["human:ada"]
    every = b"".join(p.read_bytes() for p in console.audit.rglob("*") if p.is_file())
    assert CREDENTIAL.encode() not in every
    assert CREDENTIAL not in json.dumps(out)


NATIVE_DIALOG = ("/usr/bin/python3 -c 'import gi; gi.require_version(\"Gtk\", \"3.0\"); from gi.repository import Gtk; "
                 "d = Gtk.MessageDialog(text=\"Delete every file?\"); d.set_title(\"Clean up\"); "
                 "d.add_button(\"Keep\", 2); d.add_button(\"Delete\", 1); d.set_default_response(1); "
                 "d.get_widget_for_response(1).grab_focus(); d.run()'")
"""A command line the agent types into the terminal: a native message box whose focused button
is "Delete" (GTK, as any desktop application's)."""


def test_an_l3_native_button_is_asked_for_in_the_console_with_its_application_named(
        desktop_stack: Stack, console: Console) -> None:
    """A remote agent opens the terminal, runs a program that shows a native "Delete" button
    (the Enter that runs it is ``L2``: approved in the page) and presses Enter on that button: the
    approver's card asks ``L3``, naming the control and the desktop application; denied in the
    page, the run ends cancelled. On main the key was ``L2`` (the terminal's rule), its card
    named no button."""
    stack = desktop_stack

    async def body() -> dict:
        async with agent(console) as ws:
            session = await open_session(ws, stack, "http://demo.test/", {"page_text_contains": "never there"})
            for attempt in range(60):  # while the zone's runner is still starting
                opened = await observed(ws, session, f"open{attempt}", {"type": "open_app", "app": "terminal"},
                                        {"type": "wait", "seconds": 2})
                if opened["error"].get("reason") != "no_desktop":
                    break
                await asyncio.sleep(1)
            assert not opened["error"], opened["error"]
            await ws.send(json.dumps({"type": "submit", "id": "run", "session": session, "actions": [
                {"type": "type", "text": NATIVE_DIALOG}, {"type": "keypress", "keys": ["ctrl+j"]},
                {"type": "wait", "seconds": 3}]}))
            await card(console.approver, "confirm", session).locator("button.approve").click(timeout=60_000)
            await next_of(ws, "observation")
            await ws.send(json.dumps({"type": "submit", "id": "press", "session": session,
                                      "actions": [{"type": "keypress", "keys": ["Return"]}]}))
            ask = card(console.approver, "confirm", session)
            await expect(ask.locator(".level")).to_have_text("L3", timeout=60_000)
            summary = await ask.locator(".summary").inner_text()
            await ask.locator("button.deny").click()
            finished = await next_of(ws, "finished")
            return {"summary": summary, "status": finished["result"]["status"]}

    outcome = console.run(body, timeout_s=180)
    assert "push button 'Delete'" in outcome["summary"], outcome
    assert "desktop application 'terminal'" in outcome["summary"], outcome
    assert outcome["status"] == "cancelled", outcome
