"""Credentials the model never sees: typed by the controller into a checked password field.

Two actions of the controller's proposal vocabulary (an agent proposes them like any
action; they are not daemon actions, and no secret is ever in a proposal):

- :class:`RequestCredential` ``{"type": "request_credential", "label", "domains"?}``: the
  run needs a credential a person types into the console. The controller sends
  ``credential_required`` to the approvers (:class:`CredentialChannel`), and types the
  person's answer.
- :class:`TypeSecret` ``{"type": "type_secret", "name"}``: a secret the controller holds
  (:class:`SecretStore`: ``DESKPOD_SECRET_<NAME>`` with ``DESKPOD_SECRET_<NAME>_DOMAINS``, or a
  0600 JSON file), each with its own domains.

Either is typed only when the focused element is a password field
(:func:`credential_field_refusal`: a ``type=password`` field, which masks what is typed;
an ``autocomplete`` token such as ``one-time-code`` on a text field does not count, the
screenshot would show the value) of a page on the secret's domains, which must
also be the run's; the ``act`` request that types it carries a whole-screen
:class:`~deskpod.protocol.ScreenExpectation` with that focused element, so the daemon
refuses (``screen_changed``) if the focus or one pixel changed between the check and
the keys. The audit log, the agent's observations and the failure scene hold the
label or name, never the value: every request the run sends once a secret is to be
typed (the one that types it included) passes through :class:`ScrubbingSandbox`, which
asks the daemon to mask the run's secrets (``mask``, :mod:`deskpod.protocol.mask`: boxes
painted over every place the page shows one, in every screenshot, zoom and live frame,
and replaced in every text: a "Show password" toggle, a copy into another field, a
text node, a tooltip), and replaces each value wherever it is still in the
observation's text itself.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Discriminator, Field, SecretStr, Tag

from deskpod.controller.download_watch import DownloadWatch
from deskpod.controller.egress import WatchedSandbox
from deskpod.controller.page_logs import redact_requests
from deskpod.controller.policy.policy_file import check_url
from deskpod.errors import PolicyDeniedError, SettingsError
from deskpod.protocol import (
    Action,
    AgentWindow,
    BlockedRequest,
    FocusedElement,
    Observation,
    ObserveOptions,
    PermissionRequest,
    ScreenExpectation,
)
from deskpod.protocol._base import STRICT
from deskpod.settings import get_settings

__all__ = [
    "CREDENTIAL_SCREEN_TOLERANCE_PX",
    "CredentialAnswer",
    "CredentialChannel",
    "CredentialRequest",
    "HostSecret",
    "MAX_SECRET_CHARS",
    "ProposedAction",
    "RequestCredential",
    "SECRET_ENV_PREFIX",
    "ScrubbingSandbox",
    "SecretAction",
    "SecretStore",
    "TypeSecret",
    "check_secret_text",
    "credential_field_refusal",
    "scrub_observation",
]

MAX_SECRET_CHARS = 1024
"""Longest credential or host-held secret the controller types (characters)."""

SECRET_ENV_PREFIX = "DESKPOD_SECRET_"
"""``DESKPOD_SECRET_<NAME>`` holds a host-held secret; ``DESKPOD_SECRET_<NAME>_DOMAINS`` its domains."""

CREDENTIAL_SCREEN_TOLERANCE_PX = 256
"""Screen pixels that may differ between the checked screenshot and the screen right before
a secret's keys: the focused field's blinking caret (about 2x40 pixels, on or off) must
pass; a field, a banner or a dialog moving in changes thousands. The focus itself is
compared exactly (:attr:`~deskpod.protocol.ScreenExpectation.focus`)."""

MIN_SCRUB_CHARS = 4
"""Shorter values are not scrubbed from observations' text (they would match ordinary words)."""

_NAME = r"^[A-Z][A-Z0-9_]{0,63}$"
_Domain = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.-]+$")]
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class RequestCredential(BaseModel):
    """Ask a person for a credential (``label``: what it is, e.g. ``"demo shop password"``),
    typed by the controller into the focused password field. ``domains``: where it may be
    typed (``None``: the host of the page now); each must be one of the run's."""

    model_config = STRICT
    type: Literal["request_credential"]
    label: Annotated[str, Field(min_length=1, max_length=200)]
    domains: Annotated[list[_Domain], Field(min_length=1, max_length=20)] | None = None


class TypeSecret(BaseModel):
    """Type the host-held secret ``name`` (upper case, digits, ``_``) into the focused
    password field, on the secret's own domains only."""

    model_config = STRICT
    type: Literal["type_secret"]
    name: Annotated[str, Field(pattern=_NAME)]


SecretAction = Annotated[RequestCredential | TypeSecret, Field(discriminator="type")]
"""An action of the controller's vocabulary that types a secret."""

_SECRET_TYPES = frozenset({"request_credential", "type_secret"})


def _vocabulary(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "controller" if kind in _SECRET_TYPES else "daemon"


ProposedAction = Annotated[Annotated[Action, Tag("daemon")] | Annotated[SecretAction, Tag("controller")],
                           Discriminator(_vocabulary)]
"""What an agent may propose: a protocol action (the daemon runs it) or a :data:`SecretAction`
(the controller types the secret)."""


@dataclass(frozen=True)
class HostSecret:
    """A secret the controller holds: ``name``, ``value`` (never logged) and the ``domains``
    (and their subdomains) it may be typed on."""

    name: str
    value: SecretStr
    domains: tuple[str, ...]


class SecretStore:
    """The host-held secrets of ``deskpod serve``, by name.

    Args:
        secrets: the secrets (default none).
    """

    def __init__(self, secrets: Sequence[HostSecret] = ()) -> None:
        self._secrets = {s.name: s for s in secrets}

    @property
    def names(self) -> list[str]:
        """The names held (sorted)."""
        return sorted(self._secrets)

    def get(self, name: str) -> HostSecret:
        """The secret ``name``.

        Raises:
            PolicyDeniedError: no such secret (``rule`` ``unknown_secret``).
        """
        found = self._secrets.get(name)
        if found is None:
            raise PolicyDeniedError(f"the controller holds no secret named {name!r}",
                                    detail={"rule": "unknown_secret"})
        return found

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, secrets_file: Path | None = None) -> SecretStore:
        """Secrets from ``DESKPOD_SECRET_<NAME>`` (with ``DESKPOD_SECRET_<NAME>_DOMAINS``, comma- or
        space-separated) and from ``secrets_file``, a JSON file ``{"NAME": {"value": "...",
        "domains": ["..."]}}`` (default: the ``secrets_file`` setting when ``environ`` is not
        given). The per-secret variables are read here, not in :mod:`deskpod.settings`: their
        names are the secrets' own.

        Raises:
            SettingsError: a secret without domains, a bad name or value, a file that is not
                JSON of that shape, or a file another user may read or write (mode other
                than 0600 or 0400, or not owned by this user).
        """
        env = os.environ if environ is None else environ
        found: dict[str, HostSecret] = {}
        for key, value in env.items():
            if not key.startswith(SECRET_ENV_PREFIX) or key.endswith("_DOMAINS"):
                continue
            name = key[len(SECRET_ENV_PREFIX):]
            domains = env.get(f"{key}_DOMAINS", "")
            found[name] = _secret(name, value, re.split(r"[\s,]+", domains.strip()) if domains.strip() else [],
                                  f"{key}_DOMAINS")
        path = secrets_file if secrets_file is not None or environ is not None else get_settings().secrets_file
        if path is not None:
            for secret in _file_secrets(Path(path)):
                found[secret.name] = secret
        return cls(list(found.values()))


def _secret(name: str, value: str, domains: Sequence[str], where: str) -> HostSecret:
    if not re.match(_NAME, name):
        raise SettingsError(f"{where}: secret name {name!r} is not upper case letters, digits and _",
                            detail={"variables": [], "config_file": None})
    if check_secret_text(value) is not None:
        raise SettingsError(f"secret {name}: {check_secret_text(value)}", detail={"variables": [], "config_file": None})
    if not domains or not all(re.match(r"^[A-Za-z0-9.-]+$", d) for d in domains):
        raise SettingsError(f"secret {name} needs its own domains ({where}): a secret is typed only on them",
                            detail={"variables": [where], "config_file": None})
    return HostSecret(name, SecretStr(value), tuple(d.lower() for d in domains))


def _file_secrets(path: Path) -> list[HostSecret]:
    where = {"variables": [], "config_file": str(path)}
    try:
        info = path.stat()
    except OSError as exc:
        raise SettingsError(f"secrets file {path} cannot be read ({exc.strerror})", detail=where) from exc
    if not stat.S_ISREG(info.st_mode):
        raise SettingsError(f"secrets file {path} is not a regular file", detail=where)
    if info.st_mode & 0o077 or info.st_uid != os.getuid():
        raise SettingsError(f"secrets file {path} has mode {stat.S_IMODE(info.st_mode):04o} and owner "
                            f"{info.st_uid}: a secrets file must be 0600 (or 0400) and this user's", detail=where)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"secrets file {path} cannot be read ({exc.strerror})", detail=where) from exc
    except ValueError:
        raise SettingsError(f"secrets file {path} is not JSON", detail=where) from None
    if not isinstance(data, dict):
        raise SettingsError(f"secrets file {path} must hold an object of secrets by name", detail=where)
    out = []
    for name, entry in data.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("value"), str) and isinstance(entry.get("domains"), list)
                and all(isinstance(d, str) for d in entry["domains"])):
            raise SettingsError(f"secrets file {path}: secret {str(name)[:64]!r} must be "
                                '{"value": "...", "domains": ["..."]}', detail=where)
        out.append(_secret(str(name), entry["value"], entry["domains"], str(path)))
    return out


def check_secret_text(value: str) -> str | None:
    """Why ``value`` cannot be typed as a secret (``None``: it can): empty, longer than
    :data:`MAX_SECRET_CHARS`, or holding a control character (a newline or Tab would
    submit the form or move the focus out of the checked field)."""
    if not value:
        return "the secret is empty"
    if len(value) > MAX_SECRET_CHARS:
        return f"the secret is longer than {MAX_SECRET_CHARS} characters"
    if _CONTROL.search(value):
        return "the secret holds a control character (a newline or Tab would leave the checked field)"
    return None


def credential_field_refusal(focused: FocusedElement | None, url: str | None, domains: Sequence[str],
                             focus_window: AgentWindow | None = None) -> str | None:
    """Why a secret may not be typed into ``focused`` on the page ``url`` (``None``: it may).

    Args:
        focused: the focused element, as the daemon reported it.
        url: the active tab's URL.
        domains: where the secret may be typed (a subdomain counts as its domain).
        focus_window: the agent's window with the keyboard focus, as the daemon reported it
            (a secret typed now would go to that program, whatever the page's focus).

    Returns:
        ``None`` when ``focused`` is an editable password field (``type=password``: it masks
        what is typed, so no screenshot shows the value) of a document (the page, or the
        frame holding the field) on ``domains``; else the reason. A text field is refused
        whatever its ``autocomplete`` says (``one-time-code`` fields are often text fields).
    """
    if focus_window is not None:
        return ("a window of the agent's own programs has the keyboard focus: what is typed would go to it, "
                "not to the page")
    if focused is None:
        return "nothing has the keyboard focus: focus the password field first"
    if not (focused.is_password or (focused.input_type or "").lower() == "password"):
        return (f"the focused element ({focused.role or focused.tag} {focused.name or ''!r}) is not a password "
                "field (type=password): what is typed into it would show on the screen")
    if not focused.editable:
        return "the focused password field is not editable"
    if url is None or not domains:
        return "the page's URL or the secret's domains are unknown"
    for where in (url, focused.frame):
        if where is not None and not check_url(where, tuple(domains)).allowed:
            return f"the field's page is not on the secret's domains ({', '.join(domains)})"
    return None


@dataclass(frozen=True)
class CredentialRequest:
    """A credential the run needs: ``request_id`` (what ``credential`` answers), the agent's
    ``label``, the page's ``url`` (redacted) and the ``field`` (its role and name) it goes into."""

    request_id: str
    run_id: str
    label: str
    url: str | None
    field_role: str | None
    field_name: str | None
    timeout_s: float

    def to_json(self) -> dict[str, Any]:
        """The request as ``credential_required`` carries it."""
        return {"request_id": self.request_id, "run_id": self.run_id, "label": self.label, "url": self.url,
                "field": {"role": self.field_role, "name": self.field_name}, "timeout_s": self.timeout_s}


@dataclass(frozen=True)
class CredentialAnswer:
    """A person's answer: the ``secret`` (``None``: they declined) and ``by``, their principal."""

    secret: SecretStr | None
    by: str


@runtime_checkable
class CredentialChannel(Protocol):
    """An approval channel that can also ask a person for a credential (``deskpod serve``)."""

    async def credential(self, request: CredentialRequest) -> CredentialAnswer | None:
        """Wait for the person's answer (``None``: none came)."""


def scrub_observation(obs: Observation, secrets: Sequence[str]) -> Observation:
    """``obs`` with every secret of ``secrets`` replaced by ``[secret]`` in its text (URL,
    title, page text, focus, elements, accessibility, text sources, dialogs...); images
    are left as they are. Secrets shorter than :data:`MIN_SCRUB_CHARS` are not looked for."""
    wanted = [s for s in secrets if len(s) >= MIN_SCRUB_CHARS]
    if not wanted:
        return obs
    text = json.dumps(obs.model_dump(mode="json", exclude={"screenshot", "zoom"}), ensure_ascii=False)
    scrubbed = text
    for secret in wanted:
        scrubbed = scrubbed.replace(json.dumps(secret, ensure_ascii=False)[1:-1], "[secret]")
    if scrubbed == text:
        return obs
    return Observation.model_validate({**json.loads(scrubbed), "screenshot": obs.screenshot, "zoom": obs.zoom})


class ScrubbingSandbox(WatchedSandbox):
    """The run's sandbox (:class:`~deskpod.controller.egress.WatchedSandbox`): every ``act``
    and ``navigate`` asks the daemon to mask the secrets of the run so far (``typed``: the
    daemon paints them over in its images and replaces them in its texts until a reset),
    and every observation is scrubbed of them, and its network requests' URLs redacted
    (:func:`~deskpod.controller.page_logs.redact_requests`), before the controller, the
    agent, the audit log or the failure scene sees it.

    Args:
        inner: the sandbox.
        on_blocked, on_permission, downloads: as for :class:`~deskpod.controller.egress.WatchedSandbox`
            (``downloads`` is given the scrubbed observations).
        typed: the values typed so far (the runner appends to it before typing one).
    """

    def __init__(self, inner: Any, on_blocked: Callable[[BlockedRequest], None], typed: list[str], *,
                 on_permission: Callable[[PermissionRequest], None] | None = None,
                 downloads: DownloadWatch | None = None) -> None:
        super().__init__(inner, on_blocked, on_permission, downloads)
        self.typed = typed

    def _seen(self, obs: Observation) -> Observation:
        return scrub_observation(redact_requests(super()._seen(obs)), self.typed)

    async def act(self, actions: Sequence[dict[str, Any] | Action], observe: ObserveOptions | None = None,
                  timeout_s: float = 60.0, expect: ScreenExpectation | None = None, *,
                  allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        """Run ``actions`` and observe, masking the run's secrets (see :meth:`SandboxAPI.act`)."""
        return await super().act(actions, observe, timeout_s, expect, allow_downloads=allow_downloads,
                                 mask=self._mask(mask))

    async def navigate(self, url: str, observe: ObserveOptions | None = None, timeout_s: float = 30.0, *,
                       allow_downloads: bool = False, mask: Sequence[str] = ()) -> Observation:
        """Load ``url`` and observe, masking the run's secrets."""
        return await super().navigate(url, observe, timeout_s, allow_downloads=allow_downloads,
                                      mask=self._mask(mask))

    def _mask(self, mask: Sequence[str]) -> list[str]:
        """The run's secrets and ``mask``, each once."""
        return list(dict.fromkeys([*self.typed, *mask]))
