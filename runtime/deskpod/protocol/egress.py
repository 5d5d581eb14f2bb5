"""The run's egress allowlist as the daemon enforces it in the browser (wire models).

At the start of a run the controller sends ``egress`` (:class:`EgressRequest`) with the
hosts the run may reach: the task's ``allowed_domains`` intersected with the operator
policy's (:func:`intersect_domains`). From then on the daemon intercepts every request
Chromium makes, in every tab, frame and worker (each redirect hop included), and fails
one to a host outside that list before it is sent; a document (a navigation of a tab or
a frame) gets a deskpod page naming the host and the rule instead. ``allowed_domains:
None`` (the controller sends it when the run ends, and a reset restores it) turns the
interception off: only the egress proxy's allowlist applies.

Each refused request is reported in the next observation (:attr:`Observation.blocked`,
:class:`BlockedRequest`) and the controller writes it to the audit log as a policy event.
The daemon's zone may be compromised, so this is the first line only: the egress proxy
holds the same per-run list (``images/egress``), and the controller re-checks every
tab's real URL after each action.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from deskpod.protocol._base import STRICT
from deskpod.protocol.limits import MAX_URL_CHARS

__all__ = [
    "BLOCK_RULE",
    "BlockedRequest",
    "Domain",
    "EgressRequest",
    "EgressState",
    "MAX_BLOCKED_PER_OBSERVATION",
    "MAX_EGRESS_DOMAINS",
    "intersect_domains",
]

MAX_EGRESS_DOMAINS = 200
"""Most domains an egress allowlist may name."""

MAX_BLOCKED_PER_OBSERVATION = 64
"""Most distinct refused requests one observation reports (the daemon counts repeats of
one host and resource type in :attr:`BlockedRequest.count`; beyond this, it keeps the first)."""

BLOCK_RULE = "task_allowlist"
"""The rule a refused request names: its host is outside the run's allowed domains."""

Domain = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^\.?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")]
"""A host name (``example.com`` also allows its subdomains; a leading dot is accepted)."""


class EgressRequest(BaseModel):
    """Set the hosts the browser may reach (and their subdomains); ``None``: no run limit
    (the proxy's own allowlist alone). An empty list refuses every host."""

    model_config = STRICT
    type: Literal["egress"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    allowed_domains: Annotated[list[Domain], Field(max_length=MAX_EGRESS_DOMAINS)] | None


class EgressState(BaseModel):
    """The allowlist in force in the browser (``None``: interception off)."""

    model_config = STRICT
    allowed_domains: Annotated[list[Domain], Field(max_length=MAX_EGRESS_DOMAINS)] | None


class BlockedRequest(BaseModel):
    """A request the browser's interception refused before it was sent.

    ``url``: the first one refused for this host and type (page data: untrusted, may hold
    what a page tried to carry out). ``host``: its host, lowercase. ``resource_type``: as
    DevTools names it (``Document``, ``Image``, ``XHR``, ``Fetch``, ``Ping`` for a beacon,
    ...). ``document``: a tab's or frame's navigation (it got deskpod's blocked page).
    ``count``: how many such requests were refused since the last observation.
    """

    model_config = STRICT
    url: Annotated[str, Field(max_length=MAX_URL_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$")]
    host: Annotated[str, Field(max_length=253, pattern=r"^[^\x00-\x20\x7f]*$")]
    resource_type: Annotated[str, Field(max_length=32, pattern=r"^[A-Za-z]*$")]
    document: bool
    rule: Literal["task_allowlist"] = "task_allowlist"
    count: Annotated[int, Field(strict=True, ge=1, le=1_000_000)] = 1


def _covered(host: str, domains: Sequence[str]) -> bool:
    host = host.lstrip(".").rstrip(".").lower()
    return any(host == d or host.endswith("." + d) for d in (x.lstrip(".").rstrip(".").lower() for x in domains))


def intersect_domains(*lists: Sequence[str]) -> list[str] | None:
    """The hosts every non-empty list allows, as one list (an empty list is no limit,
    as in a task or policy file).

    A host is allowed by a list when it is one of its domains or a subdomain of one, so
    the intersection is every domain of one list that another list covers.

    Returns:
        The domains, lowercase, without a leading dot, sorted; ``None`` when every list
        is empty (no limit at all).
    """
    given = [list(x) for x in lists if x]
    if not given:
        return None
    out: set[str] = set()
    for i, domains in enumerate(given):
        for domain in domains:
            if all(_covered(domain, other) for j, other in enumerate(given) if j != i):
                out.add(domain.lstrip(".").rstrip(".").lower())
    return sorted(out)
