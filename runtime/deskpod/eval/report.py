"""An eval's report: one JSON document and one self-contained HTML page.

The success rate counts passed runs among the runs that were judged (an
infrastructure error is not the agent's failure, so it is left out and counted on
its own). With more than one run of a task (``--repeat`` > 1) the rate carries a
95 % Wilson score interval (:func:`wilson_interval`; Wilson, "Probable Inference, the
Law of Succession, and Statistical Inference", JASA 22 (1927) 209-212), which stays
inside [0, 1] and is not degenerate at 0 or n successes, unlike the normal
approximation.

The HTML page (:func:`render_html`) is rendered by Jinja2 with autoescape on, so
every string that came from a sandbox, a page or an agent (reasons, URLs, names) is
text, never markup. It has no script, loads nothing (its ``Content-Security-Policy``,
:func:`report_csp`, allows only its own stylesheet, by hash, and ``data:`` images),
and inlines the small failure screenshots (at most :data:`MAX_REPORT_IMAGES`) as ``data:`` URIs with a media type fixed by
the file's extension.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from deskpod.eval.harness import EvalResult, RunRecord

__all__ = [
    "MAX_REPORT_IMAGES",
    "REPORT_CSS",
    "Z_95",
    "render_html",
    "report_csp",
    "report_document",
    "success_rate",
    "wilson_interval",
    "write_report",
]

Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95 % interval."""

MAX_REPORT_IMAGES = 50
"""Failure screenshots inlined in one report (each at most 1 MiB); later scenes are linked only."""

_MEDIA = {".png": "image/png", ".jpeg": "image/jpeg", ".jpg": "image/jpeg", ".webp": "image/webp"}

REPORT_CSS = """
body { font-family: "DejaVu Sans", sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
.rate { font-size: 1.3em; margin: 0.5em 0 1em; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #eee; }
.passed { color: #075e07; font-weight: bold; }
.failed { color: #a00; font-weight: bold; }
.infrastructure_error { color: #8a5a00; font-weight: bold; }
.reason { white-space: pre-wrap; word-break: break-word; max-width: 40em; }
img.scene { max-width: 320px; border: 1px solid #999; display: block; }
.muted { color: #666; }
"""
"""The page's only stylesheet (inline, allowed by its hash)."""


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion.

    Args:
        successes: passed runs (0 ≤ successes ≤ trials).
        trials: judged runs.
        z: the normal quantile (default: 95 %).

    Returns:
        ``(low, high)``, both in [0, 1]; ``(0.0, 1.0)`` when there are no trials.

    Raises:
        ValueError: ``successes`` is negative or above ``trials``.
    """
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be between 0 and trials, got {successes} of {trials}")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def success_rate(runs: list[RunRecord]) -> tuple[int, int, float | None]:
    """``(passed, judged, rate)`` over the runs that were judged (``rate`` ``None``: none were)."""
    judged = [r for r in runs if r.status != "infrastructure_error"]
    passed = sum(r.status == "passed" for r in judged)
    return passed, len(judged), (passed / len(judged) if judged else None)


def _run_document(run: RunRecord) -> dict[str, Any]:
    return {
        "task": run.task, "index": run.index, "kind": run.kind, "status": run.status,
        "run_status": run.run_status, "outcomes": list(run.outcomes), "expected": list(run.expected),
        "mismatch": run.mismatch or None, "reason": run.reason, "steps": run.steps,
        "wall_time_s": round(run.wall_time_s, 3), "model_tokens": run.model_tokens, "run_id": run.run_id,
        "audit_log": run.audit_log,
        "audit": {"verified": run.audit.ok, "lines": run.audit.lines, "head": run.audit.head,
                  "key_id": run.audit.key_id, "error": run.audit.error or None},
        "scene": run.scene, "scene_reason": run.scene_reason, "attempts": run.attempts,
        "infrastructure_errors": list(run.infrastructure), "sandbox_id": run.sandbox_id,
    }


def report_document(result: EvalResult, min_success: float) -> dict[str, Any]:
    """The report as a JSON-ready dict.

    Args:
        result: the eval's runs.
        min_success: the threshold the exit code is judged by.

    Returns:
        ``suite``, ``backend``, ``parallel``, ``repeat``, ``wall_time_s`` (``fill_time_s`` of it
        filling the pool), ``passed``,
        ``judged``, ``infrastructure_errors``, ``success_rate`` (``None``: nothing judged),
        ``interval`` (``[low, high]`` when a task ran more than once, else ``None``),
        ``min_success``, ``setup_errors`` and ``runs`` (one dict per run).
    """
    passed, judged, rate = success_rate(result.runs)
    repeated = any(r.index > 0 for r in result.runs)
    interval = list(wilson_interval(passed, judged)) if repeated and judged else None
    return {
        "suite": result.suite, "backend": result.backend, "parallel": result.parallel, "repeat": result.repeat,
        "wall_time_s": round(result.wall_time_s, 3), "fill_time_s": round(result.fill_time_s, 3), "passed": passed, "judged": judged,
        "infrastructure_errors": sum(r.status == "infrastructure_error" for r in result.runs),
        "success_rate": rate, "interval": interval, "min_success": min_success,
        "setup_errors": list(result.setup_errors), "runs": [_run_document(r) for r in result.runs],
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def report_csp() -> str:
    """The page's Content-Security-Policy: nothing but its stylesheet (by hash) and ``data:`` images."""
    digest = base64.b64encode(hashlib.sha256(REPORT_CSS.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; base-uri 'none'; "
            "form-action 'none'")


def _image_uri(path: str | None) -> str | None:
    if path is None:
        return None
    media = _MEDIA.get(Path(path).suffix.lower())
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return f"data:{media};base64,{base64.b64encode(data).decode('ascii')}" if media else None


def _templates() -> Environment:
    return Environment(loader=PackageLoader("deskpod.eval", "templates"),
                       autoescape=select_autoescape(["html"], default_for_string=True, default=True),
                       trim_blocks=True, lstrip_blocks=True)


def render_html(document: dict[str, Any], images: dict[tuple[str, int], str | None] | None = None) -> str:
    """The report's HTML page.

    Args:
        document: :func:`report_document`'s dict.
        images: ``(task, index)`` → the failure screenshot as a ``data:`` URI.

    Returns:
        One HTML document: no script, no external resource, every value escaped.
    """
    return _templates().get_template("report.html").render(
        doc=document, css=REPORT_CSS, csp=report_csp(), images=images or {})


def write_report(result: EvalResult, directory: Path, min_success: float) -> tuple[Path, Path, dict[str, Any]]:
    """Write ``report.json`` and ``report.html`` into ``directory`` (created if missing).

    Returns:
        The two paths and the JSON document.

    Raises:
        OSError: the folder or a file cannot be written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    document = report_document(result, min_success)
    shown = [r for r in result.runs if r.scene_image is not None][:MAX_REPORT_IMAGES]
    images = {(r.task, r.index): _image_uri(r.scene_image) for r in shown}
    json_path, html_path = directory / "report.json", directory / "report.html"
    json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    html_path.write_text(render_html(document, images), encoding="utf-8")
    return json_path, html_path, document
