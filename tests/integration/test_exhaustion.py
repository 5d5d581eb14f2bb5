"""Resource exhaustion inside the sandbox is contained and the daemon keeps answering.

A fork bomb, a memory hog and a tmpfs fill run via ``docker exec`` as the sandbox
user (uid 1000), as an agent's command would. They run against a stack of their
own, so a slow recovery never disturbs the other integration tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from deskpod.protocol import ActRequest
from deskpod_stack import Stack, start_stack, wait_healthy, with_client

pytestmark = pytest.mark.integration

RECOVERY_TIMEOUT_S = 60.0

FORK_BOMB = r"""
import json, os, time
children, error = [], None
start = time.monotonic()
while time.monotonic() - start < 20:
    try:
        pid = os.fork()
    except OSError as e:
        error = e.strerror
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print(json.dumps({"forked": len(children), "error": error}))
"""

MEMORY_HOG = r"""
import json
chunks = []
try:
    for _ in range(4096):                       # up to 4 GiB, above the 3 GiB limit
        chunks.append(bytearray(1 << 20))       # zero-filled: every page touched
    result = {"allocated_mib": len(chunks), "stopped": "never"}
except MemoryError:
    result = {"allocated_mib": len(chunks), "stopped": "MemoryError"}
print(json.dumps(result))
"""

TMPFS_FILL = r"""
import errno, json, os
path, written, err = "/tmp/deskpod-fill", 0, None
block = b"\0" * (1 << 20)
try:
    with open(path, "wb") as f:
        for _ in range(2048):                   # up to 2 GiB into a 512 MiB tmpfs
            f.write(block)
            f.flush()
            written += 1
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
finally:
    if os.path.exists(path):
        os.remove(path)
print(json.dumps({"written_mib": written, "error": err}))
"""


@pytest.fixture(scope="module")
def ex_stack() -> Iterator[Stack]:
    yield from start_stack("ex", "1280x800")


def _daemon_answers(stack: Stack) -> None:
    """Wait until /healthz is 200 and a screenshot request is served."""
    wait_healthy(stack, RECOVERY_TIMEOUT_S)

    async def shot(client: object) -> int:
        result = await client.request(  # type: ignore[attr-defined]
            ActRequest.model_validate({"type": "act", "id": "after", "actions": [{"type": "screenshot"}]}))
        return len(result.observation.screenshot.data)

    assert with_client(stack, shot) > 0


def _exec(stack: Stack, code: str) -> dict:
    c = stack.container("sandbox")
    result = c.exec_run(["python3", "-c", code], user="1000", demux=True)
    out, err = result.output
    assert out, f"exit {result.exit_code}: {(err or b'').decode()[-1000:]}"
    return json.loads(out)


def test_fork_bomb_hits_the_pids_limit(ex_stack: Stack) -> None:
    result = _exec(ex_stack, FORK_BOMB)
    assert result["error"], result  # fork failed before the time ran out: the limit held
    assert result["forked"] < 512, result
    _daemon_answers(ex_stack)


def test_memory_hog_is_stopped_at_the_memory_limit(ex_stack: Stack) -> None:
    c = ex_stack.container("sandbox")
    result = c.exec_run(["python3", "-c", MEMORY_HOG], user="1000", demux=True)
    # Killed by the cgroup's OOM killer (137) or refused memory; never 4 GiB.
    out = (result.output[0] or b"").decode()
    assert result.exit_code == 137 or '"stopped": "MemoryError"' in out, (result.exit_code, out)
    assert '"stopped": "never"' not in out
    c.reload()
    assert c.status == "running"
    _daemon_answers(ex_stack)


def test_tmpfs_fill_stops_at_the_tmpfs_size(ex_stack: Stack) -> None:
    result = _exec(ex_stack, TMPFS_FILL)
    assert result["error"] == "ENOSPC", result
    assert result["written_mib"] <= 512, result
    _daemon_answers(ex_stack)
