"""Both wires accept exactly what e28e94d accepted and answer the same: the recorded corpus
(``fixtures/wire_corpus.json``, made by ``tests/support/record_wire_corpus.py`` from
e28e94d) replayed on this code, message by message.

A message type added to a wire is an extension: the list of accepted types an unknown type's
refusal quotes may only grow (:func:`extension_only`).

Pure: the daemon wire at its codec and client (a scripted websocket), the ``deskpod
serve`` wire over an in-process websocket with the fake sandbox. A failure names each
message whose answer changed, where the two answers first differ, and both answers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import record_wire_corpus

pytestmark = pytest.mark.timeout(120)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "wire_corpus.json"

PARTS = ("handshake", "daemon", "server", "client", "service")
"""The corpus's parts: the daemon's handshake, its requests, its messages read by the
controller, the controller's client against a scripted daemon, the ``deskpod serve`` service."""

SHOWN_CHARS = 2000
"""Characters of each answer a failure shows."""

ADDED_ON_PURPOSE = {
    "max_looks": "looks are no steps, bounded by their own limit, shown with the run's limits",
    "masked": "each image says how many boxes the daemon painted over the session's secrets",
    "mask": "act and navigate may name secrets for the daemon to mask (none by default)",
    "windows": "a GUI run lists the desktop's windows in the observations its agent plans on and the step records",
}
"""Keys an answer may now carry where e28e94d's had none, each with why: every other
difference fails. A key is dropped from the new answer only where the old one lacks it."""

EVENTS_ADDED_ON_PURPOSE = {
    "recording": "every GUI run names its screen recording and the video's SHA-256 (or why there is none) in a "
                 "record before run_finished",
}
"""Audit events a run now streams where e28e94d's streamed none, each with why: such an event
message is dropped from the new answer only where the old one has none of that event."""

REWORDED_ON_PURPOSE = {
    "daemon/action_wait_for_bad_regex": ("RE2", "patterns are RE2 (linear time); the refusal says so"),
    "service/agent/open_success_bad_regex": ("RE2", "patterns are RE2 (linear time); the refusal says so"),
    "daemon/action_wait_for_none": ("text_absent", "wait_for gained the condition text_absent; the refusal names it"),
    "daemon/action_wait_for_two": ("text_absent", "wait_for gained the condition text_absent; the refusal names it"),
    "service/agent/open_success_empty": ("files", "a success check may check workspace files (desktop tasks); "
                                                  "the refusal names them"),
    "daemon/action_click_element_e0": ("[en]", "a ref may also name a desktop application's native control (nN); "
                                               "the refusal quotes the pattern"),
    "daemon/observe_element_ref_bad": ("[en]", "a ref may also name a desktop application's native control (nN); "
                                               "the refusal quotes the pattern"),
}
"""Messages whose error texts were reworded on purpose: entry -> (what each new text must
contain, why). Everything else of the answer (codes, details, order) must stay the same."""


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    """The recording of e28e94d."""
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data




_TAG_LIST = re.compile(r"(expected tags: |; known: )((?:'?[a-z_]+'?(?:, )?)+)")
"""The list of accepted ``type`` values that pydantic's refusal of an unknown one quotes
(``expected tags: 'a', 'b'``), or the daemon's (``known: a, b``)."""


def extension_only(old: Any, new: Any) -> Any:
    """``new`` with each list of accepted message types it quotes put back to ``old``'s, when
    that list only gained types: a message type added to a wire is an extension, and every
    recorded message is still answered the same (a type gone, or any other change, stays)."""
    old_text, new_text = json.dumps(old, sort_keys=True), json.dumps(new, sort_keys=True)
    olds, news = _TAG_LIST.findall(old_text), _TAG_LIST.findall(new_text)
    if len(olds) != len(news) or any(not set(a[1].split(", ")) <= set(b[1].split(", "))
                                     for a, b in zip(olds, news, strict=True)):
        return new
    quoted = iter(olds)
    return json.loads(_TAG_LIST.sub(lambda _: "".join(next(quoted)), new_text))


def without_added(old: Any, new: Any) -> Any:
    """``new`` without the keys of :data:`ADDED_ON_PURPOSE` that ``old`` lacks, at any depth."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {key: without_added(old.get(key), value) for key, value in new.items()
                if key in old or key not in ADDED_ON_PURPOSE}
    if isinstance(old, list) and isinstance(new, list):
        return [without_added(a, b) for a, b in zip(old, new, strict=False)] + new[len(old):]
    return new


def _event(message: Any) -> Any:
    record = message.get("record") if isinstance(message, dict) else None
    return record.get("event") if isinstance(record, dict) else None


def without_added_events(old: Any, new: Any) -> Any:
    """``new`` without the event messages of :data:`EVENTS_ADDED_ON_PURPOSE` that ``old``'s list has none of."""
    if not (isinstance(old, list) and isinstance(new, list)):
        return new
    had = {_event(message) for message in old}
    return [message for message in new if _event(message) in had or _event(message) not in EVENTS_ADDED_ON_PURPOSE]


def reworded(old: Any, new: Any, must_contain: str) -> Any:
    """``new`` with each error ``message`` that contains ``must_contain`` put back to ``old``'s,
    at any depth (the answer is otherwise compared as it is)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = {key: reworded(old.get(key), value, must_contain) for key, value in new.items()}
        if isinstance(new.get("message"), str) and must_contain in new["message"] and "message" in old:
            out["message"] = old["message"]
        return out
    if isinstance(old, list) and isinstance(new, list):
        return [reworded(a, b, must_contain) for a, b in zip(old, new, strict=False)] + new[len(old):]
    return new


def first_difference(old: Any, new: Any, path: str = "") -> str:
    """The dotted path of the first place two JSON values differ (``""``: the whole value)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                return f"{path}.{key} ({'added' if key not in old else 'gone'})"
            if old[key] != new[key]:
                return first_difference(old[key], new[key], f"{path}.{key}")
    if isinstance(old, list) and isinstance(new, list):
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            if a != b:
                return first_difference(a, b, f"{path}.{i}")
        if len(old) != len(new):
            return f"{path} ({len(old)} items, now {len(new)})"
    return path or "(the whole answer)"


def test_the_recording_is_of_e28e94d_and_of_this_corpus(recorded: dict[str, Any]) -> None:
    """The fixture was recorded from e28e94d, from exactly the corpus's inputs."""
    assert recorded["recorded_from"] == "e28e94d"
    digests = record_wire_corpus.corpus_digest()
    entries = recorded["entries"]
    assert sorted(digests) == sorted(entries), "the corpus's cases are not the recorded ones: record from e28e94d"
    changed = [name for name, digest in digests.items() if entries[name]["input_sha256"] != digest]
    assert not changed, f"inputs changed since the recording (record again from e28e94d): {changed}"
    assert {name.split("/")[0] for name in entries} == set(PARTS)


@pytest.mark.parametrize("part", PARTS)
def test_every_message_is_answered_as_e28e94d_answered(part: str, recorded: dict[str, Any]) -> None:
    """Each message of ``part``: the same decoded request or error, reply or exception, or
    service answers as in the recording."""
    replayed = record_wire_corpus.record(part)
    changed = []
    for name, entry in recorded["entries"].items():
        if not name.startswith(f"{part}/"):
            continue
        old = entry["outcome"]
        new = without_added(old, without_added_events(old, extension_only(old, replayed[name]["outcome"])))
        if name in REWORDED_ON_PURPOSE:
            new = reworded(old, new, REWORDED_ON_PURPOSE[name][0])
        if old != new:
            changed.append(f"{name}: differs at {first_difference(old, new)}\n"
                           f"  e28e94d: {json.dumps(old, sort_keys=True)[:SHOWN_CHARS]}\n"
                           f"  now:     {json.dumps(new, sort_keys=True)[:SHOWN_CHARS]}")
    cases = sum(1 for name in recorded["entries"] if name.startswith(f"{part}/"))
    assert not changed, f"{len(changed)} of {cases} {part} messages answered differently:\n" + "\n".join(changed)
