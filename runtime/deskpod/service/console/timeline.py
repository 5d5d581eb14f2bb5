"""Runs as a person reads them: the audit folder's logs turned into timelines (no I/O but reading).

A controller's audit folder (:mod:`deskpod.controller.audit_log`) holds one hash-chained
JSONL log per run, ``<run_id>.jsonl``, the screenshots by content hash in
``screenshots/<sha256>.<ext>`` and, for a run that did not succeed, its failure scene in
``scenes/<run_id>/scene.json`` (:mod:`deskpod.controller.scene`), and its screen recording in
``recordings/<run_id>.mp4`` (:mod:`deskpod.controller.recording_store`). :func:`list_runs`
summarises the runs (task, start, status, steps, the log's verdict) and
:func:`load_run` reads one as a :class:`RunTimeline`: one :class:`Entry` per record
(state changes, steps with their risks and approvals, confirmations, pauses, policy
events, verifications...), the screenshots in the order the records name them, the
scene, and the recording checked against the hash its log holds. The verdict is :func:`deskpod.controller.audit_log.verify_log`'s, never a second
implementation of the chain.

Everything read here is data, not markup: records carry text from the sandbox and its
pages (titles, URLs, typed text), so the templates print it as text, and every field is
clipped (:data:`MAX_TEXT_CHARS`). Names that reach the file system are checked against
fixed patterns (:data:`RUN_ID_PATTERN`, :data:`SCREENSHOT_NAME_PATTERN`) and resolved
inside the audit folder only. Everything is bounded, whatever the folder holds: at most
:data:`MAX_LIST_RUNS` runs listed, :data:`MAX_LOG_BYTES` of a log read,
:data:`MAX_ENTRIES` entries kept, a log over :data:`MAX_VERIFY_BYTES` not verified; each
cut is said in :attr:`RunTimeline.notes`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deskpod.controller.audit_log import FINAL_EVENT, NO_PINNED_KEY, verify_log
from deskpod.controller.audit_sign import AuditPublicKey
from deskpod.controller.recording_store import RecordingCheck, check_recording, recording_path
from deskpod.client.untrusted import IMAGE_EXTENSIONS

__all__ = [
    "Entry", "MAX_ENTRIES", "MAX_LIST_RUNS", "MAX_LOG_BYTES", "MAX_SCREENSHOT_BYTES", "MAX_TEXT_CHARS",
    "MAX_VERIFY_BYTES", "MEDIA_TYPES", "RUN_ID_PATTERN", "RunSummary", "RunTimeline", "SCREENSHOT_NAME_PATTERN",
    "SUMMARY_CACHE_SIZE", "Scene", "Shot", "Verdict", "list_runs", "load_run", "log_path", "recording_file",
    "screenshot_path", "verdict_of",
]

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""A run id the console accepts (the controller's are ``run-`` or ``code-`` and 12 hex
digits): no dot, slash or other character a path could use."""

SCREENSHOT_NAME_PATTERN = re.compile(r"([0-9a-f]{64})\.(" + "|".join(sorted(set(IMAGE_EXTENSIONS.values()))) + ")")
"""A stored screenshot's file name: its SHA-256 and the fixed extension of its format."""

MEDIA_TYPES: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
"""The media type of each screenshot extension."""

MAX_LIST_RUNS = 200
"""The newest runs (by the log's modification time) a list shows."""

MAX_LOG_BYTES = 16 * 1024 * 1024
"""How much of a log is read for its timeline; the rest is not shown (the page says so)."""

MAX_VERIFY_BYTES = 256 * 1024 * 1024
"""A larger log is not verified here (``deskpod verify-log`` checks it)."""

MAX_ENTRIES = 2000
"""Records shown as entries of one timeline; later ones are counted, not shown."""

MAX_TEXT_CHARS = 600
"""Characters of one field shown (a step's actions: four times as many)."""

MAX_SCREENSHOT_BYTES = 8 * 1024 * 1024
"""A larger screenshot file is not served or inlined."""

SUMMARY_CACHE_SIZE = 1024
"""Run summaries kept between lists, keyed by the log's inode, size and change time and the key."""

_SUMMARIES: OrderedDict[tuple[str, int, int, int, str], RunSummary] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_SCREENSHOT_EVENTS_KEY = "screenshot_sha256"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Verdict:
    """What :func:`~deskpod.controller.audit_log.verify_log` says of a log.

    ``state``: ``"sealed"`` (chain intact, ends with ``run_finished``, seal verified with
    ``key_id``), ``"intact"`` (chain intact and finished, seal NOT verified: no pinned key, the
    text :data:`~deskpod.controller.audit_log.NO_PINNED_KEY` as ``deskpod verify-log`` prints it),
    ``"unfinished"`` (chain intact, no ``run_finished`` yet: the run is going, or the log
    was cut short), ``"broken"`` (the chain or the seal fails: ``text`` says where) or
    ``"unchecked"`` (the log is too large or unreadable here). ``lines``: good lines;
    ``head``: SHA-256 of the last good line.
    """

    state: str
    text: str
    lines: int = 0
    head: str = ""
    key_id: str = ""

    @property
    def ok(self) -> bool:
        """Whether the log checked out (sealed, or intact with no key to check the seal)."""
        return self.state in ("sealed", "intact")


@dataclass(frozen=True)
class Shot:
    """A screenshot a record names: ``sha256``; ``name``: its file in ``screenshots/``
    (``None``: not kept, by the retention setting or pruned); ``size_bytes`` of that file;
    ``width_px``/``height_px``: its size read from a PNG's header (``None``: another format)."""

    sha256: str
    name: str | None
    size_bytes: int = 0
    width_px: int | None = None
    height_px: int | None = None

    @property
    def media_type(self) -> str:
        """The file's media type (``image/png``...; ``""`` when not kept)."""
        return MEDIA_TYPES[self.name.rsplit(".", 1)[1]] if self.name else ""


@dataclass(frozen=True)
class Entry:
    """One record of the log as a line of the timeline.

    ``kind``: ``state``, ``step``, ``confirmation``, ``pause``, ``policy``, ``verify``,
    ``start``, ``finish`` or ``info`` (the record's family, for its style); ``title``: a
    one-line summary; ``details``: (label, text) pairs; ``level``: the highest risk of a
    step or a confirmation's level (``L0``-``L3``, or ``None``); ``outcome``: a step's
    outcome or an answer (``ok``, ``denied``, ``approved``...); ``actor``: who acted when
    the record says (``human:NAME`` for a person's input); ``shot``: its screenshot;
    ``point``: a confirmation's action point on that screenshot (model-space pixels).
    """

    seq: int
    time: str
    event: str
    kind: str
    title: str
    details: tuple[tuple[str, str], ...] = ()
    level: str | None = None
    outcome: str | None = None
    actor: str | None = None
    shot: Shot | None = None
    point: tuple[int, int] | None = None


@dataclass(frozen=True)
class Scene:
    """A failed or cancelled run's failure scene (``scenes/<run_id>/scene.json``):
    ``reason``, ``state``, ``url``, ``title``, the recent ``actions`` (as JSON text) and
    its screenshot (``shot``; the file in the scene folder is ``screenshot_file``)."""

    reason: str
    state: str
    url: str
    title: str
    actions: tuple[str, ...]
    shot: Shot | None
    screenshot_file: Path | None


@dataclass(frozen=True)
class RunSummary:
    """One run of the list: ``run_id``, ``task``, ``kind`` (``gui`` or ``code``),
    ``started`` (ISO 8601 UTC), ``status`` (``succeeded``, ``failed``, ``cancelled``, ``ended`` or
    ``unfinished``: no ``run_finished`` record), ``reason``, ``steps``, ``duration_s``,
    ``verdict``."""

    run_id: str
    task: str
    kind: str
    started: str
    status: str
    reason: str
    steps: int
    duration_s: float | None
    verdict: Verdict


@dataclass(frozen=True)
class RunTimeline:
    """One run as a timeline: its ``summary``, ``entries`` in log order, the distinct
    ``screenshots`` in the order the records name them, its ``scene`` (``None``: none),
    ``records`` (how many lines were read), ``notes``: what was cut, in words, and its
    ``recording`` checked against the log's hash (``None``: not looked for)."""

    summary: RunSummary
    entries: tuple[Entry, ...]
    screenshots: tuple[Shot, ...]
    scene: Scene | None
    records: int
    notes: tuple[str, ...] = field(default=())
    recording: RecordingCheck | None = None


def _text(value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """``value`` as display text, at most ``limit`` characters (cut with an ellipsis)."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _regular_inside(path: Path, audit_dir: Path, max_bytes: int | None = None) -> bool:
    """Whether ``path`` is a regular file (of at most ``max_bytes``), not a link, and lies inside
    ``audit_dir`` once every link of its folders is resolved (a linked folder leads nowhere else)."""
    try:
        info = path.lstat()
        inside = path.resolve(strict=True).is_relative_to(audit_dir.resolve(strict=True))
    except (OSError, RuntimeError):
        return False
    return inside and stat.S_ISREG(info.st_mode) and (max_bytes is None or info.st_size <= max_bytes)


def log_path(audit_dir: Path, run_id: str) -> Path | None:
    """The log of ``run_id`` in ``audit_dir``: ``None`` unless the id matches
    :data:`RUN_ID_PATTERN` and the log is a regular file (not a link)."""
    if not RUN_ID_PATTERN.fullmatch(run_id):
        return None
    path = audit_dir / f"{run_id}.jsonl"
    return path if _regular_inside(path, audit_dir) else None


def screenshot_path(audit_dir: Path, name: str) -> Path | None:
    """The stored screenshot ``name`` (``<sha256>.<ext>``): ``None`` unless the name matches
    :data:`SCREENSHOT_NAME_PATTERN` and the file is a regular file (not a link) of at most
    :data:`MAX_SCREENSHOT_BYTES`."""
    if not SCREENSHOT_NAME_PATTERN.fullmatch(name):
        return None
    path = audit_dir / "screenshots" / name
    return path if _regular_inside(path, audit_dir, MAX_SCREENSHOT_BYTES) else None


def recording_file(audit_dir: Path, run_id: str) -> Path | None:
    """The recording of ``run_id`` (``recordings/<run_id>.mp4``): ``None`` unless the id matches
    :data:`RUN_ID_PATTERN` and the file is a regular file (not a link) inside the audit folder."""
    if not RUN_ID_PATTERN.fullmatch(run_id):
        return None
    path = recording_path(audit_dir, run_id)
    return path if _regular_inside(path, audit_dir) else None


def _png_size(path: Path) -> tuple[int | None, int | None]:
    """Width and height in pixels from a PNG's IHDR chunk (``None, None``: not a PNG)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(24)
    except OSError:
        return None, None
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None, None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _point(action: Any) -> tuple[int, int] | None:
    """An action's point (model space), when it has integer ``x`` and ``y``."""
    if isinstance(action, dict) and type(action.get("x")) is int and type(action.get("y")) is int:
        return action["x"], action["y"]
    return None


def _shot(audit_dir: Path, sha256: Any, cache: dict[str, Shot]) -> Shot | None:
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        return None
    if sha256 not in cache:
        found = None
        for ext in sorted(set(IMAGE_EXTENSIONS.values())):
            path = screenshot_path(audit_dir, f"{sha256}.{ext}")
            if path is not None:
                found = Shot(sha256, path.name, path.stat().st_size, *_png_size(path))
                break
        cache[sha256] = found or Shot(sha256, None)
    return cache[sha256]


def verdict_of(path: Path, public_key: AuditPublicKey | None) -> Verdict:
    """Check the log at ``path`` with :func:`~deskpod.controller.audit_log.verify_log`.

    Args:
        path: the log.
        public_key: the pinned key the seal must verify with; ``None``: none is pinned, so
            the chain and the final record are checked, not the seal (never a key found
            beside the logs).

    Returns:
        The :class:`Verdict` (``unchecked`` for a log over :data:`MAX_VERIFY_BYTES` or an
        unreadable one).
    """
    try:
        if path.stat().st_size > MAX_VERIFY_BYTES:
            return Verdict("unchecked", f"not checked here: the log is over {MAX_VERIFY_BYTES} bytes "
                           "(check it with deskpod verify-log)")
        check = verify_log(path, public_key=public_key, require_seal=public_key is not None)
    except OSError as exc:
        return Verdict("unchecked", f"not checked: {_text(str(exc), 200)}")
    if not check.ok and check.error.startswith("the last record is "):
        return Verdict("unfinished", f"hash chain intact over {check.lines} lines, but no run_finished record: the "
                       "run is still going, or its log was cut short", check.lines, check.head)
    if not check.ok:
        return Verdict("broken", f"broken after {check.lines} good lines: {check.error}", check.lines, check.head)
    if public_key is None:
        return Verdict("intact", f"{NO_PINNED_KEY}: {check.lines} lines, ends with run_finished (check the seal "
                       "with deskpod verify-log --public-key FILE)", check.lines, check.head)
    return Verdict("sealed", f"hash chain intact over {check.lines} lines, ends with run_finished, sealed by key "
                   f"{check.key_id}", check.lines, check.head, check.key_id)


def _records(path: Path) -> tuple[list[dict[str, Any]], int, list[str]]:
    """The JSON object lines of the first :data:`MAX_LOG_BYTES` of ``path``, the file's size,
    and notes on what was skipped."""
    notes: list[str] = []
    with path.open("rb") as handle:
        data = handle.read(MAX_LOG_BYTES + 1)
        size = os.fstat(handle.fileno()).st_size
    if len(data) > MAX_LOG_BYTES:
        data = data[: data.rfind(b"\n", 0, MAX_LOG_BYTES) + 1]
        notes.append(f"the log is {size} bytes: only its first {len(data)} bytes are shown")
    records: list[dict[str, Any]] = []
    bad = 0
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad += 1
    if bad:
        notes.append(f"{bad} line(s) of the log are not JSON objects and are not shown")
    return records, size, notes


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _action_text(action: Any) -> str:
    if not isinstance(action, dict):
        return _text(action)
    kind = _text(action.get("type"), 40)
    rest = ", ".join(f"{_text(k, 40)}={_text(v)}" for k, v in action.items() if k != "type" and v is not None)
    return _text(f"{kind} {rest}" if rest else kind, 4 * MAX_TEXT_CHARS)


_LEVELS = ("L0", "L1", "L2", "L3")


def _top_level(risks: Any) -> str | None:
    levels = [r.get("risk") for r in risks if isinstance(r, dict)] if isinstance(risks, list) else []
    known = [level for level in levels if level in _LEVELS]
    return max(known, key=_LEVELS.index) if known else None


def _step_entry(record: dict[str, Any], base: dict[str, Any]) -> Entry:
    actions = _list(record.get("actions"))
    risks = _list(record.get("risks"))
    details: list[tuple[str, str]] = []
    if record.get("intent"):
        details.append(("intent", _text(record.get("intent"))))
    if record.get("tool"):
        details.append(("tool", _text(record.get("tool"), 80)))
    for number, action in enumerate(actions, start=1):
        details.append((f"action {number}", _action_text(action)))
    for risk in risks:
        if isinstance(risk, dict):
            reasons = "; ".join(_text(r, 200) for r in risk.get("reasons", []) if isinstance(r, str))
            index = risk.get("index")
            where = f"action {index + 1}" if isinstance(index, int) else "action"
            details.append((f"risk of {where}", f"{_text(risk.get('risk'), 8)}, approval "
                            f"{_text(risk.get('approval'), 20)}; target {_text(risk.get('target'), 200) or '-'}"
                            + (f"; {reasons}" if reasons else "")))
    for key in ("args", "level", "approval", "rule", "reason", "error", "url", "title", "result"):
        if record.get(key) not in (None, "", {}):
            details.append((key, _text(record.get(key))))
    outcome = _text(record.get("outcome"), 20) or None
    decision = _text(record.get("decision"), 20)
    tool = f"{_text(record.get('tool'), 80)} {_text(record.get('args'), 160)}".strip()
    first = _action_text(actions[0]) if actions else (tool or "no action")
    more = f" (+{len(actions) - 1} more)" if len(actions) > 1 else ""
    title = f"step {_text(record.get('step'), 12)}: {_text(first, 160)}{more}: {decision or '-'}, {outcome or '-'}"
    return Entry(**base, kind="step", title=title, details=tuple(details), level=_top_level(risks),
                 outcome=outcome)


def _entry(record: dict[str, Any], audit_dir: Path, shots: dict[str, Shot]) -> Entry:
    """One record as an :class:`Entry` (unknown events generically: every field as text)."""
    event = _text(record.get("event"), 60) or "?"
    seq = record.get("seq") if isinstance(record.get("seq"), int) else -1
    actor = _text(record.get("actor"), 120) or None
    base: dict[str, Any] = {"seq": seq, "time": _text(record.get("time"), 40), "event": event, "actor": actor,
                            "shot": _shot(audit_dir, record.get(_SCREENSHOT_EVENTS_KEY), shots)}
    fields = {k: v for k, v in record.items() if k not in ("run_id", "seq", "event", "time", "prev", "seal",
                                                            _SCREENSHOT_EVENTS_KEY, "actor")}

    def pairs(*keys: str) -> tuple[tuple[str, str], ...]:
        return tuple((k, _text(fields[k])) for k in keys if fields.get(k) not in (None, "", [], {}))

    if event == "state":
        title = f"state: {_text(fields.get('src'), 40)} → {_text(fields.get('dst'), 40)}"
        return Entry(**base, kind="state", title=title, details=pairs("reason"))
    if event == "step":
        return _step_entry(fields, base)
    if event.startswith("confirmation_"):
        outcome = _text(fields.get("outcome"), 20) or None
        word = {"confirmation_requested": "confirmation asked", "confirmation_answer": f"confirmation {outcome}",
                "confirmation_void": "confirmation void"}.get(event, event)
        title = f"{word}: {_text(fields.get('summary') or fields.get('reason') or fields.get('id'), 200)}"
        level = fields.get("level") if fields.get("level") in _LEVELS else None
        return Entry(**base, kind="confirmation", title=title, level=level, outcome=outcome, point=_point(fields.get("action")),
                     details=tuple((k, _action_text(fields[k]) if k == "action" else v)
                                   for k, v in pairs("id", "level", "reasons", "action", "url", "by", "reason",
                                                     "attempt", "self_approval", "digest")))
    if event in ("pause", "pause_answer", "loop", "injection_scan", "proposal_discarded"):
        title = {"pause": f"paused ({_text(fields.get('kind'), 20)}): {_text(fields.get('message'), 200)}",
                 "pause_answer": f"pause answered: {_text(fields.get('answer'), 20)}",
                 "loop": f"loop: {_text(fields.get('repeats'), 8)} repeats",
                 "injection_scan": "injection scan: " + ("pause" if fields.get("pause") else "noted"),
                 "proposal_discarded": f"proposal discarded: {_text(fields.get('reason'), 200)}"}[event]
        return Entry(**base, kind="pause", title=title, outcome=_text(fields.get("answer"), 20) or None,
                     details=pairs("id", "evidence", "url", "step", "reason"))
    if event in ("policy", "egress", "url_flags"):
        title = f"{event}: {_text(fields.get('decision') or fields.get('proxy') or fields.get('flags'), 60)}"
        if fields.get("rule"):
            title += f" ({_text(fields.get('rule'), 60)})"
        keys = [k for k in fields if k not in ("decision",)]
        return Entry(**base, kind="info" if event == "egress" else "policy", title=title, details=pairs(*keys))
    if event in ("verify", "claim"):
        title = ("verified" if fields.get("ok") else "not verified") if event == "verify" else "the agent claims done"
        return Entry(**base, kind="verify", title=title, outcome="ok" if fields.get("ok") else None,
                     details=pairs("evidence", "claim", "url", "title"))
    if event == "run_started":
        return Entry(**base, kind="start", title=f"run started: {_text(fields.get('task'), 200)}",
                     details=pairs("kind", "start_url", "limits"))
    if event == FINAL_EVENT:
        status = _text(fields.get("status"), 20)
        return Entry(**base, kind="finish", title=f"run finished: {status}", outcome=status or None,
                     details=pairs("reason", "steps", "screenshots", "duration_s"))
    if event == "navigate":
        return Entry(**base, kind="info", title=f"navigate: {_text(fields.get('url'), 200)}",
                     details=pairs("title", "decision"))
    return Entry(**base, kind="info", title=event, details=pairs(*fields))


def _scene(audit_dir: Path, run_id: str, shots: dict[str, Shot]) -> Scene | None:
    folder = audit_dir / "scenes" / run_id
    path = folder / "scene.json"
    try:
        if not _regular_inside(path, audit_dir, MAX_LOG_BYTES):
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    file: Path | None = None
    name = data.get("screenshot")
    if isinstance(name, str) and re.fullmatch(r"screenshot\.(png|jpeg|webp)", name):
        candidate = folder / name
        if _regular_inside(candidate, audit_dir, MAX_SCREENSHOT_BYTES):
            file = candidate
    actions = _list(data.get("recent_actions"))
    return Scene(reason=_text(data.get("reason")), state=_text(data.get("state"), 40), url=_text(data.get("url")),
                 title=_text(data.get("title")), actions=tuple(_action_text(a) for a in actions[:20]),
                 shot=_shot(audit_dir, data.get("screenshot_sha256"), shots), screenshot_file=file)


def _summary(run_id: str, records: list[dict[str, Any]], verdict: Verdict) -> RunSummary:
    start = next((r for r in records if r.get("event") == "run_started"), {})
    final = records[-1] if records and records[-1].get("event") == FINAL_EVENT else None
    steps = final.get("steps") if final is not None else None
    if not isinstance(steps, int):
        steps = sum(1 for r in records if r.get("event") == "step")
    duration = final.get("duration_s") if final is not None else None
    return RunSummary(
        run_id=run_id, task=_text(start.get("task"), 200), kind="code" if start.get("kind") == "code" else "gui",
        started=_text(start.get("time"), 40), status=_text(final.get("status"), 20) if final else "unfinished",
        reason=_text(final.get("reason")) if final else "", steps=steps,
        duration_s=float(duration) if isinstance(duration, int | float) else None, verdict=verdict)


def load_run(audit_dir: str | Path, run_id: str, *, public_key: AuditPublicKey | None = None,
             max_entries: int = MAX_ENTRIES) -> RunTimeline | None:
    """Read the run ``run_id`` of ``audit_dir`` as a timeline.

    Args:
        audit_dir: the controller's audit folder.
        run_id: the run (its log is ``<run_id>.jsonl``); checked against :data:`RUN_ID_PATTERN`.
        public_key: the key the log's seal must verify with (see :func:`verdict_of`).
        max_entries: entries kept; the rest are counted in :attr:`RunTimeline.notes`.

    Returns:
        The :class:`RunTimeline`, or ``None`` when there is no such run (or the id is not
        one the console accepts).

    Raises:
        OSError: the log exists and cannot be read.
    """
    folder = Path(audit_dir)
    path = log_path(folder, run_id)
    if path is None:
        return None
    records, _, notes = _records(path)
    shots: dict[str, Shot] = {}
    entries = [_entry(r, folder, shots) for r in records[:max_entries]]
    if len(records) > max_entries:
        notes.append(f"the log has {len(records)} records: only the first {max_entries} are shown")
    ordered: dict[str, Shot] = {}
    for entry in entries:
        if entry.shot is not None:
            ordered.setdefault(entry.shot.sha256, entry.shot)
    summary = _summary(run_id, records, verdict_of(path, public_key))
    return RunTimeline(summary, tuple(entries), tuple(ordered.values()), _scene(folder, run_id, shots), len(records),
                       tuple(notes), check_recording(folder, run_id, records))


def list_runs(audit_dir: str | Path, *, public_key: AuditPublicKey | None = None,
              limit: int = MAX_LIST_RUNS) -> tuple[list[RunSummary], int]:
    """The newest runs of ``audit_dir``, newest first.

    Args:
        audit_dir: the controller's audit folder (missing: no runs).
        public_key: the key seals must verify with (see :func:`verdict_of`).
        limit: how many runs to summarise.

    Returns:
        The summaries of the ``limit`` newest logs (by modification time) and how many
        logs the folder holds in all.
    """
    folder = Path(audit_dir)
    try:
        names = [entry for entry in os.scandir(folder)
                 if entry.name.endswith(".jsonl") and RUN_ID_PATTERN.fullmatch(entry.name[:-6])
                 and entry.is_file(follow_symlinks=False)]
    except OSError:
        return [], 0
    names.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns, reverse=True)
    runs: list[RunSummary] = []
    for entry in names[:limit]:
        info = entry.stat(follow_symlinks=False)
        # The change time cannot be set back by whoever edits a file (unlike its mtime).
        cache_key = (entry.path, info.st_ino, info.st_size, info.st_ctime_ns,
                     public_key.key_id if public_key else "")
        with _CACHE_LOCK:
            summary = _SUMMARIES.get(cache_key)
        if summary is None:
            path = Path(entry.path)
            try:
                records, _, _ = _records(path)
            except OSError:
                continue
            summary = _summary(entry.name[:-6], records, verdict_of(path, public_key))
            with _CACHE_LOCK:
                _SUMMARIES[cache_key] = summary
                while len(_SUMMARIES) > SUMMARY_CACHE_SIZE:
                    _SUMMARIES.popitem(last=False)
        runs.append(summary)
    return runs, len(names)
