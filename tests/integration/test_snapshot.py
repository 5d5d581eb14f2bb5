"""Named browser snapshots against the real sandbox: a session logged in on the demo
site's login fixture is captured, kept in a host-side :class:`SnapshotStore`, and
restored into a fresh sandbox (the container restarted, its tmpfs gone) and into a
reset one, already logged in. Tampered or hostile archives are refused before the
browser is touched.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from deskpod_stack import Stack, storage_state, wait_healthy, with_client
from deskpod.client import SandboxClient
from deskpod.tokens import new_token
from deskpod.errors import BusyError, InvalidRequestError, SnapshotError, SnapshotIntegrityError, UnauthorizedError
from deskpod.protocol import SNAPSHOT_MANIFEST_NAME, ObserveOptions
from deskpod.client.snapshot_store import SnapshotStore

pytestmark = pytest.mark.integration

ACCOUNT = "http://demo.test/account"
STORAGE = "http://demo.test/fixtures/storage"
TEXT = ObserveOptions(screenshot=False, page_text=True)
SET_STATE = {"cookie": "snapmark", "local": "snapmark", "session": "snapmark", "idb": "snapmark"}


async def stored(client: SandboxClient) -> dict[str, object]:
    """What the storage fixture finds in the cookie, Local/Session Storage and IndexedDB."""
    state = await storage_state(client)
    return {key: state[key] for key in SET_STATE}


async def account_status(client: SandboxClient) -> str:
    obs = await client.navigate(ACCOUNT, TEXT)
    return (obs.page_text or "").strip()


def members(archive: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return [(m, (tar.extractfile(m) or io.BytesIO()).read() if m.isreg() else b"") for m in tar.getmembers()]


def repack(items: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in items:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def test_a_logged_in_snapshot_restores_into_a_fresh_and_a_reset_sandbox(stack: Stack, tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "snapshots")

    async def capture(client: SandboxClient) -> None:
        await client.navigate(f"{STORAGE}?set=snapmark")
        assert await stored(client) == SET_STATE
        obs = await client.navigate("http://demo.test/login?user=alice", TEXT)
        assert obs.url == ACCOUNT and "logged in as alice" in (obs.page_text or ""), obs.page_text
        archive = await client.snapshot()
        info = store.save("alice-logged-in", archive)
        assert info.sha256 == hashlib.sha256(archive).hexdigest() and info.size == len(archive)
        # The browser came back at the page it showed, still logged in.
        obs = await client.act([], TEXT)
        assert obs.url == ACCOUNT and "logged in as alice" in (obs.page_text or "")
        manifest = json.loads(members(archive)[0][1])
        assert members(archive)[0][0].name == SNAPSHOT_MANIFEST_NAME
        assert any("Cookies" in path for path in manifest["files"]), manifest["files"].keys()
        assert not any("Cache" in path or "History" in path for path in manifest["files"])

    with_client(stack, capture)
    assert [i.name for i in store.list()] == ["alice-logged-in"]

    # A fresh sandbox: the container restarts, its tmpfs mounts (and the rotated token) are gone.
    stack.container("sandbox").restart(timeout=5)
    stack.token = stack.env["DESKPOD_TOKEN"]
    wait_healthy(stack)

    async def restore_fresh(client: SandboxClient) -> None:
        assert await account_status(client) == "not logged in"
        obs = await client.restore(store.load("alice-logged-in"), ACCOUNT)
        assert obs.screenshot is not None and obs.url == ACCOUNT
        assert await account_status(client) == "logged in as alice"
        # Cookies, Local Storage and IndexedDB came back; Session Storage belongs to a tab
        # of the stopped browser and does not.
        await client.navigate(STORAGE)
        assert await stored(client) == {**SET_STATE, "session": None}

    with_client(stack, restore_fresh)

    async def restore_after_reset() -> None:
        client = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        token = new_token()
        await client.reset(ACCOUNT, token_sha256=hashlib.sha256(token.encode()).hexdigest())
        await client.close()
        stack.token = token
        client = await SandboxClient.connect(stack.ws_url, token, timeout_s=30)
        try:
            assert await account_status(client) == "not logged in"
            await client.restore(store.load("alice-logged-in"))
            assert await account_status(client) == "logged in as alice"
        finally:
            await client.close()

    asyncio.run(restore_after_reset())


def test_tampered_and_hostile_snapshots_are_refused_before_the_browser_is_touched(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        await client.navigate("http://demo.test/login?user=carol")
        good = await client.snapshot()
        items = members(good)
        manifest = json.loads(items[0][1])
        victim = next(i for i, (m, data) in enumerate(items) if m.isreg() and data and i > 0)

        flipped = list(items)
        info, data = flipped[victim]
        flipped[victim] = (info, bytes([data[0] ^ 1]) + data[1:])
        escaping = list(items)
        escaping.append((tarfile.TarInfo("../evil"), b"x"))
        absolute = list(items)
        absolute.append((tarfile.TarInfo("/tmp/evil"), b"x"))
        link = tarfile.TarInfo("Default/link")
        link.type, link.linkname = tarfile.SYMTYPE, "Preferences"
        with_link = [*items, (link, b"")]
        hard = tarfile.TarInfo("Default/hard")
        hard.type, hard.linkname = tarfile.LNKTYPE, "Local State"
        with_hard = [*items, (hard, b"")]
        fifo = tarfile.TarInfo("Default/fifo")
        fifo.type = tarfile.FIFOTYPE
        with_fifo = [*items, (fifo, b"")]
        unlisted = [*items, (tarfile.TarInfo("Default/Extra"), b"not in the manifest")]
        no_manifest = items[1:]
        manifest["files"]["Default/Missing"] = {"sha256": "0" * 64, "size": 1}
        missing = [(items[0][0], json.dumps(manifest).encode()), *items[1:]]

        cases: list[tuple[bytes, type[Exception], str]] = [
            (repack(flipped), SnapshotIntegrityError, "digest_mismatch"),
            (repack(unlisted), SnapshotIntegrityError, "digest_mismatch"),
            (repack(missing), SnapshotIntegrityError, "digest_mismatch"),
            (repack(escaping), SnapshotError, "bad_archive"),
            (repack(absolute), SnapshotError, "bad_archive"),
            (repack(with_link), SnapshotError, "bad_archive"),
            (repack(with_hard), SnapshotError, "bad_archive"),
            (repack(with_fifo), SnapshotError, "bad_archive"),
            (repack(no_manifest), SnapshotError, "bad_archive"),
            (b"not a tar at all", SnapshotError, "bad_archive"),
            (gzip.compress(b"\0" * 1024), SnapshotError, "bad_archive"),
        ]
        for archive, error, reason in cases:
            with pytest.raises(error) as caught:
                await client.restore(archive, ACCOUNT)
            assert caught.value.detail.get("reason") == reason, (caught.value.code, caught.value.detail)
        with pytest.raises(InvalidRequestError):
            await client.restore(good, "javascript:alert(1)")
        # Nothing was touched: still logged in, on the same browser.
        assert await account_status(client) == "logged in as carol"
        await client.navigate("http://demo.test/logout")

    with_client(stack, body)


def test_snapshot_endpoint_checks_the_token_and_the_executor(stack: Stack) -> None:
    async def body(client: SandboxClient) -> None:
        stranger = SandboxClient(client._ws, client.hello, url=client.url, token="x" * 43)
        with pytest.raises(UnauthorizedError):
            await stranger.snapshot()
        with pytest.raises(UnauthorizedError):
            await stranger.restore(b"whatever")
        other = await SandboxClient.connect(stack.ws_url, stack.token, timeout_s=30)
        try:
            busy = asyncio.create_task(other.act([{"type": "wait", "seconds": 3.0}]))
            await asyncio.sleep(0.5)
            with pytest.raises(BusyError):
                await client.snapshot()
            await busy
        finally:
            await other.close()

    with_client(stack, body)
