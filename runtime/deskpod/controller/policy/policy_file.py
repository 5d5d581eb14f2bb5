"""The controller's policy: the policy file, and the domain allowlist applied to the real URL.

A policy file (YAML, :class:`Policy`) holds the operator's rules for runs:
allowed domains, blocked actions, actions that always need a confirmation, the
risk levels that need one, the words that raise a control's level, timeouts,
screenshot retention and limits. Example (``runtime/deskpod/tasks/policy.yaml``)::

    allowed_domains: [demo.test]
    blocked_actions: [drag]
    confirm_actions: []
    confirm_levels: [L2, L3]
    confirmation_timeout_s: 120
    exec_confirm: risky                     # code runs: all | risky | none
    exec_confirm_patterns: ["git push*", "re:^make (deploy|release)"]
    pause_on_injection: true
    screenshots: failures
    limits: {max_steps: 40, max_wall_time_s: 600}

The allowlist is checked against where the browser actually is —
after redirects, in every tab and popup — never against what an agent or a page
says. The egress proxy enforces the sandbox-wide allowlist on the network; this
policy is the task's own, usually narrower, and stops the run when it is left.

For code runs (``deskpod code --policy FILE``) the policy decides which ``exec``
commands wait for a confirmation of that exact command: ``exec_confirm: all``
(every one), ``risky`` (the default: those the classifier,
:mod:`~deskpod.controller.policy.exec_risk`, rates at a level of ``confirm_levels``) or
``none`` (the classifier asks nothing); in every mode a command matching one of
``exec_confirm_patterns`` is confirmed too. A pattern is a glob (``fnmatch``:
``*`` matches anything, spaces included) matched against the whole command and
against each of its simple commands, written as its words joined by single
spaces after quotes and wrappers are removed (``env FOO=1 git push origin`` is
matched as ``git push origin``, a ``bash -c`` string's commands as themselves);
``re:REGEX`` is a Python regular expression searched in the same texts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import AfterValidator, BaseModel, Field

from deskpod.controller.policy.levels import RiskLevel
from deskpod.controller.policy.risk import DEFAULT_L2_WORDS, DEFAULT_L3_WORDS
from deskpod.controller.policy.run_limits import Limits
from deskpod.controller.task import load_model_file
from deskpod.protocol import ACTION_TYPES, PermissionName
from deskpod.protocol._base import STRICT
from deskpod.errors import PatternError
from deskpod.protocol.patterns import compile_pattern

__all__ = [
    "ExecConfirm", "Policy", "REFUSED_SCHEMES", "SECRET_PARAM", "UNREADABLE_URL", "UrlDecision", "check_url", "load_policy",
    "redact_url", "tightened",
]

_Word = Annotated[str, Field(min_length=1, max_length=100)]


def _action_type(value: str) -> str:
    if value not in ACTION_TYPES:
        raise ValueError(f"{value!r} is not an action type (one of {', '.join(sorted(ACTION_TYPES))})")
    return value


_ActionType = Annotated[str, AfterValidator(_action_type)]


def _exec_pattern(value: str) -> str:
    if value.startswith("re:"):
        try:
            compile_pattern(value[3:])
        except PatternError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
    return value


_ExecPattern = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(_exec_pattern)]
ExecConfirm = Literal["all", "risky", "none"]
"""Which ``exec`` commands of a code run need a confirmation (see the module)."""
_EXEC_CONFIRM_ORDER: dict[str, int] = {"none": 0, "risky": 1, "all": 2}


class Policy(BaseModel):
    """The operator's rules for a run.

    ``allowed_domains``: hosts (and subdomains) the browser may be at; checked in
    addition to the task's own list (both must allow; empty: no extra limit).
    ``blocked_actions``: action types refused outright. ``confirm_actions``: action
    types that always need a confirmation. ``confirm_levels``: risk levels that
    need one (default ``L2`` and ``L3``). ``l3_words``/``l2_words``: words in a
    control's label that raise pressing it to that level. ``confirmation_timeout_s``:
    seconds a human has to answer (no answer: deny). ``exec_confirm`` and
    ``exec_confirm_patterns``: which ``exec`` commands of a code run need a
    confirmation (see the module). ``max_confirmation_asks``: how
    often a confirmation is asked again after the screen changed before the run is
    cancelled. ``pause_on_injection``: pause on suspected prompt injection.
    ``pause_timeout_s``: seconds a human has to answer a pause (no answer: cancel).
    ``screenshots``: retention, ``"all"``, ``"failures"`` or ``"none"``;
    ``screenshot_max_age_days``: older stored screenshots are deleted (``None``:
    never). ``limits``: caps on the task's limits (the smaller one applies).
    ``allow_self_approval``: ``deskpod serve`` may let a session's own connection answer
    its confirmations and pauses (unattended evals against test sites); every
    confirmation record then says so. Default: only an approver connection may.
    ``recover_unresponsive``: a GUI run recovers a tab whose page does not answer itself,
    right after the step whose observation lists it (a ``recover_tab`` of the controller's,
    audited as ``tab_recovered``). Default: the agent is told and decides, since a page busy
    with a long computation looks the same for a while (left out of a dump when off).
    ``session_permissions``: the browser permissions a ``deskpod serve`` session's task may
    allow (its ``permissions``); ``session_clipboard_read``: whether its task may set
    ``allow_clipboard_read``. Default: neither, and an ``open`` asking for more is refused: a
    session's task is the client's word, widening what pages and the agent may do. Both stay
    the operator's (a client's policy cannot change them) and are left out of a dump when unset.
    """

    model_config = STRICT
    allowed_domains: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=1000)] = []
    blocked_actions: list[_ActionType] = []
    confirm_actions: list[_ActionType] = []
    confirm_levels: list[RiskLevel] = ["L2", "L3"]
    l3_words: Annotated[list[_Word], Field(max_length=1000)] = list(DEFAULT_L3_WORDS)
    l2_words: Annotated[list[_Word], Field(max_length=1000)] = list(DEFAULT_L2_WORDS)
    confirmation_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 120.0
    max_confirmation_asks: Annotated[int, Field(ge=1, le=20)] = 3
    exec_confirm: ExecConfirm = "risky"
    exec_confirm_patterns: Annotated[list[_ExecPattern], Field(max_length=500)] = []
    pause_on_injection: bool = True
    pause_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 300.0
    screenshots: Literal["all", "failures", "none"] = "failures"
    screenshot_max_age_days: Annotated[float, Field(gt=0, le=3650)] | None = 7.0
    limits: Limits | None = None
    allow_self_approval: bool = False
    recover_unresponsive: Annotated[bool, Field(exclude_if=lambda on: not on)] = False
    session_permissions: Annotated[list[PermissionName], Field(exclude_if=lambda given: not given)] = []
    session_clipboard_read: Annotated[bool, Field(exclude_if=lambda on: not on)] = False


def tightened(base: Policy, request: Policy) -> Policy:
    """``base`` (the operator's policy) made stricter by ``request`` (a client's), never looser.

    Lists that refuse or confirm are joined, the levels needing a confirmation are
    joined, timeouts and limits take the smaller value, the stricter ``exec_confirm``
    applies and exec patterns are joined, injection pauses stay on if either asks
    for them, self-approval and automatic tab recovery only if both allow them; what sessions may
    grant stays the operator's; ``allowed_domains`` and screenshot retention stay the
    operator's (a client's own domain list belongs in its task, which is checked too).
    """
    limits = base.limits.capped(request.limits) if base.limits else request.limits
    return base.model_copy(update={
        "blocked_actions": sorted(set(base.blocked_actions) | set(request.blocked_actions)),
        "confirm_actions": sorted(set(base.confirm_actions) | set(request.confirm_actions)),
        "confirm_levels": sorted(set(base.confirm_levels) | set(request.confirm_levels)),
        "l3_words": list(dict.fromkeys([*base.l3_words, *request.l3_words])),
        "l2_words": list(dict.fromkeys([*base.l2_words, *request.l2_words])),
        "confirmation_timeout_s": min(base.confirmation_timeout_s, request.confirmation_timeout_s),
        "max_confirmation_asks": min(base.max_confirmation_asks, request.max_confirmation_asks),
        "exec_confirm": max(base.exec_confirm, request.exec_confirm, key=_EXEC_CONFIRM_ORDER.__getitem__),
        "exec_confirm_patterns": list(dict.fromkeys([*base.exec_confirm_patterns, *request.exec_confirm_patterns])),
        "pause_on_injection": base.pause_on_injection or request.pause_on_injection,
        "pause_timeout_s": min(base.pause_timeout_s, request.pause_timeout_s),
        "limits": limits,
        "allow_self_approval": base.allow_self_approval and request.allow_self_approval,
        "recover_unresponsive": base.recover_unresponsive and request.recover_unresponsive,
    })


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file (an empty file is the default policy).

    Raises:
        TaskFileError: the file cannot be read, is not YAML, or does not match
            :class:`Policy` (the message names each bad field, up to five).
    """
    return load_model_file(path, Policy, "policy", empty_ok=True)


REFUSED_SCHEMES = frozenset({"data", "file", "javascript", "chrome", "chrome-extension", "view-source", "ftp"})
"""URL schemes a task's browser must never be at."""

SECRET_PARAM = re.compile(r"(token|secret|passw|pwd|api[_-]?key|auth|session|sig)", re.IGNORECASE)
"""Query parameter names that suggest a credential travels in the URL."""

_NEUTRAL = frozenset({"about:blank", "chrome://newtab/", "chrome://new-tab-page/"})


@dataclass(frozen=True)
class UrlDecision:
    """``allowed``: the URL may be visited. ``rule``: which rule decided. ``flags``: warnings
    that do not refuse the URL (e.g. ``"credentials_in_url"``)."""

    allowed: bool
    rule: str
    flags: tuple[str, ...] = ()


def _host_allowed(host: str, allowed_domains: tuple[str, ...]) -> bool:
    host = host.rstrip(".").lower()
    for domain in allowed_domains:
        domain = domain.lower().lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def check_url(url: str, allowed_domains: tuple[str, ...] | list[str]) -> UrlDecision:
    """Decide whether the browser may be at ``url``.

    Args:
        url: the URL as the browser reports it (CDP), not as anyone claims it.
        allowed_domains: domains whose hosts (and subdomains) are allowed; empty
            means no domain restriction beyond the refused schemes.

    Returns:
        The :class:`UrlDecision`. A URL that does not parse is refused (rule
        ``unparsable_url``). ``about:blank`` and the new-tab page are always
        allowed, and so is the empty URL (rule ``no_url``) that DevTools reports for a
        tab whose first navigation has not committed yet, which shows nothing; refused
        schemes never are; http(s) hosts must match the list.
        User info in the URL or secret-looking query parameters add the flags
        ``"credentials_in_url"`` / ``"secret_in_query"``.
    """
    if url in _NEUTRAL:
        return UrlDecision(True, "neutral_page")
    if not url:
        return UrlDecision(True, "no_url")
    try:
        parts = urlsplit(url)
    except ValueError:  # page or sandbox data (a bad IPv6 address): refused, never an error
        return UrlDecision(False, "unparsable_url")
    scheme = parts.scheme.lower()
    if scheme in REFUSED_SCHEMES or scheme not in ("http", "https"):
        return UrlDecision(False, f"scheme_refused:{scheme or 'none'}")
    flags = []
    if parts.username or parts.password:
        flags.append("credentials_in_url")
    if any(SECRET_PARAM.search(name) for name, _ in parse_qsl(parts.query, keep_blank_values=True)):
        flags.append("secret_in_query")
    host = parts.hostname or ""
    if allowed_domains and not _host_allowed(host, tuple(allowed_domains)):
        return UrlDecision(False, "domain_not_allowed", tuple(flags))
    return UrlDecision(True, "domain_allowed" if allowed_domains else "no_domain_list", tuple(flags))


UNREADABLE_URL = "[redacted: not a URL]"
"""What :func:`redact_url` makes of a URL it cannot parse (a port out of range, a bad IPv6 address)."""


def redact_url(url: str | None) -> str | None:
    """Return ``url`` fit for the audit log: user info and the values of secret-looking
    query parameters replaced by ``[redacted]``; :data:`UNREADABLE_URL` for a URL that
    does not parse (page or sandbox data: never an error)."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return UNREADABLE_URL
    if not (parts.username or parts.password or parts.query):
        return url
    netloc = parts.hostname or ""
    if port:
        netloc += f":{port}"
    if parts.username or parts.password:
        netloc = "[redacted]@" + netloc
    query = urlencode(
        [(k, "[redacted]" if SECRET_PARAM.search(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
