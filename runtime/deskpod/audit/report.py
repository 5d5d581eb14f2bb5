"""The audit's result: one :class:`Check` per hardening property, the :class:`AuditReport`
that holds them, and its plain-text table (:func:`render_table`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "AuditReport",
    "Check",
    "Status",
    "render_table",
]

Status = Literal["pass", "fail", "warn"]


@dataclass(frozen=True)
class Check:
    """One hardening property and its verdict.

    Attributes:
        id: stable identifier, e.g. ``"cap_drop_all"``; tests and CI match on it.
        title: the property, as a short sentence.
        status: ``"pass"``, ``"fail"`` (the property does not hold) or ``"warn"``
            (could not be shown, or holds only partly; does not fail the audit).
        detail: the evidence, one line.
        source: ``"config"`` (Docker's view) or ``"inside"`` (the probe's view).
        cis: the CIS Docker Benchmark recommendation it covers, if any (``"5.3"``).
    """

    id: str
    title: str
    status: Status
    detail: str
    source: Literal["config", "inside"] = "config"
    cis: str | None = None


@dataclass
class AuditReport:
    """The result of auditing one container.

    Attributes:
        container: the container's name.
        container_id: its full id.
        image: its image reference.
        checks: every check, in report order.
    """

    container: str
    container_id: str
    image: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings do not fail the audit)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        """The failed checks."""
        return [c for c in self.checks if c.status == "fail"]

    def get(self, check_id: str) -> Check:
        """Return the check named ``check_id``.

        Raises:
            KeyError: no such check in this report.
        """
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (the ``--json`` output)."""
        return {
            "container": self.container,
            "container_id": self.container_id,
            "image": self.image,
            "ok": self.ok,
            "summary": {s: sum(c.status == s for c in self.checks) for s in ("pass", "fail", "warn")},
            "checks": [asdict(c) for c in self.checks],
        }


def _check(id: str, title: str, ok: bool, detail: str, *, source: Literal["config", "inside"] = "config",
           cis: str | None = None, warn: bool = False) -> Check:
    status: Status = "pass" if ok else ("warn" if warn else "fail")
    return Check(id, title, status, detail, source, cis)


def _runtime_transient(name: object) -> bool:
    """Whether a process named ``name`` (``/proc/<pid>/status`` ``Name``) is the container
    runtime setting up a concurrent ``docker exec`` (``runc:[0:PARENT]`` .. ``runc:[2:INIT]``;
    the images' health checks run every 5 s). It applies the container's seccomp filter,
    user and capabilities as it turns into the exec'd program, so the audit does not judge it."""
    return str(name or "").startswith("runc:[")


def _hex(value: str) -> int:
    try:
        return int(value, 16)
    except ValueError:
        return -1


def _summ(items: list[str], limit: int = 4) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more



def render_table(report: AuditReport) -> str:
    """Render a report as a plain-text table (the default ``deskpod audit`` output).

    Args:
        report: the audit's result.

    Returns:
        Text: a header line, one line per check (status, id, property, evidence)
        and a summary line.
    """
    lines = [f"deskpod audit: {report.container} ({report.container_id[:12]}, image {report.image})", ""]
    width = max((len(c.id) for c in report.checks), default=10)
    for c in report.checks:
        cis = f" [CIS {c.cis}]" if c.cis else ""
        lines.append(f"{c.status.upper():4}  {c.id:<{width}}  {c.title}{cis}")
        lines.append(f"{'':4}  {'':<{width}}  -> {c.detail}")
    counts = {s: sum(c.status == s for c in report.checks) for s in ("pass", "fail", "warn")}
    verdict = "PASSED" if report.ok else "FAILED: " + ", ".join(c.id for c in report.failed)
    lines += ["", f"{counts['pass']} passed, {counts['fail']} failed, {counts['warn']} warnings: {verdict}"]
    return "\n".join(lines)
