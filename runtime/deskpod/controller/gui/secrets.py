"""Secrets in a GUI run: a credential a person gives, or a host-held secret, typed into a checked field.

``request_credential`` and ``type_secret`` (:mod:`deskpod.controller.credentials`) are
typed by the controller, never by the agent: the focused element must be a password
field on the secret's domains, which must also be the run's; the check runs on a fresh
observation (again after the person answered), and the keys go to the daemon bound to
that whole screen, its URL and that focused element, so a change voids them and the
field is checked again (at most three times). From the request that types it on, the
daemon is asked to mask the value in every image and text, and it is scrubbed from every
observation's text (:class:`~deskpod.controller.credentials.ScrubbingSandbox` reads
:attr:`Secrets.typed`); the audit log holds only the label or name.
"""

from __future__ import annotations

import uuid
from typing import Any

from deskpod.controller.credentials import (
    CREDENTIAL_SCREEN_TOLERANCE_PX,
    CredentialChannel,
    CredentialRequest,
    RequestCredential,
    SecretStore,
    TypeSecret,
    check_secret_text,
    credential_field_refusal,
)
from deskpod.controller.gui.allowlist import Allowlist
from deskpod.controller.gui.record import RunRecord, changed_reason
from deskpod.controller.gui.step_record import StepRecord
from deskpod.controller.policy.policy_file import check_url, redact_url
from deskpod.controller.policy.risk import url_host
from deskpod.controller.sandbox import SandboxAPI
from deskpod.controller.state import RunState
from deskpod.errors import BadReplyError, DeskpodError, ExecutionError, PolicyDeniedError, ScreenChangedError
from deskpod.protocol import Observation, ObserveOptions, ScreenExpectation, TypeText
from deskpod.protocol.mask import MAX_MASK_SECRETS

__all__ = ["Secrets"]


class Secrets:
    """Types one run's secrets (see the module).

    Args:
        run: the run's record.
        allowlist: checks every observation taken.
        store: the host-held secrets ``type_secret`` may type.
        refusal: why this run types no secret at all (``None``: it may).
    """

    def __init__(self, run: RunRecord, allowlist: Allowlist, store: SecretStore, refusal: str | None) -> None:
        self.run = run
        self.allowlist = allowlist
        self.store = store
        self.refusal = refusal
        self.typed: list[str] = []

    async def type_secret(self, client: SandboxAPI, step: StepRecord, action: RequestCredential | TypeSecret,
                          options: ObserveOptions) -> None:
        """Type a credential a person gives (``request_credential``) or a host-held secret
        (``type_secret``) into the focused password field; add it to ``step`` (its record
        with the label or name, its risk entry, the observation after it: ``options``).

        Raises:
            PolicyDeniedError: the field, a domain or the secret is refused, or the person
                declined (``detail["rule"]``; the step is refused, the run goes on); with
                ``detail["where"]`` ``"after"``: a tab left the allowlists (the run stops).
            RunCancelledError: the run was cancelled while waiting.
            ScreenChangedError: the screen or the focus kept changing.
            DeskpodError: the sandbox failed.
        """
        run = self.run
        if self.refusal is not None:
            raise PolicyDeniedError(f"no secret is typed in this run: {self.refusal}",
                                    detail={"rule": "credential_sandbox"})
        current = await self._look(client)
        if isinstance(action, TypeSecret):
            held = self.store.get(action.name)
            domains, by = list(held.domains), "host"
            shown: dict[str, Any] = {"type": "type_secret", "name": action.name}
        else:
            domains = list(action.domains) if action.domains else [url_host(current.url)]
            shown = {"type": "request_credential", "label": action.label, "domains": domains}
            by = ""
        for domain in domains:
            for allowed in (run.task.allowed_domains, run.policy.allowed_domains):
                if not domain or not check_url(f"https://{domain}/", allowed).allowed:
                    raise PolicyDeniedError(f"{domain or 'this page'} is not one of the run's domains: no secret is "
                                            "typed there", detail={"rule": "credential_domain"})
        self._field_check(current, domains)
        if isinstance(action, RequestCredential):
            value, by = await self._ask(action, current, domains)
            current = await self._look(client)
            self._field_check(current, domains)
        else:
            value = held.value.get_secret_value()
        why = check_secret_text(value)
        if why is not None:
            raise PolicyDeniedError(f"not typed: {why}", detail={"rule": "credential_invalid"})
        if value not in self.typed and len(set(self.typed)) >= MAX_MASK_SECRETS:
            raise PolicyDeniedError(f"not typed: a run types at most {MAX_MASK_SECRETS} different secrets (the "
                                    "daemon masks no more)", detail={"rule": "credential_limit"})
        # From here every request of the run (the one typing it first) asks the daemon to mask it.
        self.typed.append(value)
        for attempt in range(1, 4):
            run.sm.to(RunState.EXECUTING, f"typing the {shown['type'].replace('_', ' ')} into the checked field")
            shot = current.screenshot
            expect = ScreenExpectation(screenshot_sha256=shot.sha256 if shot else None, radius_px=None,
                                       tolerance_px=CREDENTIAL_SCREEN_TOLERANCE_PX, min_delta=1, url=current.url,
                                       focus=current.focused)
            try:
                after = await client.act([TypeText(type="type", text=value)], options,
                                         timeout_s=run.limits.action_timeout_s, expect=expect)
                break
            except ScreenChangedError as exc:
                run.emit("credential_void", attempt=attempt, reason=changed_reason(exc), **shown)
                if attempt == 3:
                    raise
                run.sm.to(RunState.VALIDATING, "the screen or the focus changed: checking the field again")
                current = await self._look(client)
                self._field_check(current, domains)
            except BadReplyError:
                raise
            except DeskpodError as exc:  # its message may quote what was typed: only the code is kept
                raise ExecutionError(f"typing the secret failed ({exc.code})", detail={"code": exc.code}) from None
        moved = None if after.focused is None else credential_field_refusal(after.focused, after.url, domains,
                                                                            after.focus_window)
        if moved is not None:  # the page moved the focus during the keys (an unread focus is not known to have)
            run.emit("policy", decision="flagged", rule="credential_focus_moved", reason=moved,
                     url=redact_url(after.url))
        run.emit("credential_typed", **shown, by=by, url=redact_url(current.url),
                 field={"role": current.focused.role if current.focused else None,
                        "name": current.focused.name if current.focused else None})
        try:
            self.allowlist.observed(after, f"step {run.steps}")
        except PolicyDeniedError as exc:
            exc.detail["where"] = "after"
            raise
        step.risks.append({"index": step.index, "risk": "L2",
                           "reasons": ["a secret typed into a checked password field"],
                           "target": current.focused.name if current.focused else None, "approval": by})
        recorded = {**shown, "by": by}
        step.done.append(recorded)
        run.recent_actions.append(recorded)
        step.current, step.asked = after, None

    async def _look(self, client: SandboxAPI) -> Observation:
        """A fresh observation with a screenshot, to check the focused field on and bind the keys to."""
        run = self.run
        obs = run.count_screenshot(await client.act([], ObserveOptions(), timeout_s=run.limits.action_timeout_s))
        return self.allowlist.observed(obs, f"step {run.steps}")

    def _field_check(self, current: Observation, domains: list[str]) -> None:
        """Raises:
            PolicyDeniedError: the focused element is not a password field on ``domains``.
        """
        refusal = credential_field_refusal(current.focused, current.url, domains, current.focus_window)
        if refusal is not None:
            self.run.emit("policy", decision="denied", rule="credential_field", reason=refusal,
                          url=redact_url(current.url))
            raise PolicyDeniedError(f"no secret is typed here: {refusal}", detail={"rule": "credential_field"})

    async def _ask(self, action: RequestCredential, current: Observation, domains: list[str]) -> tuple[str, str]:
        """Ask a person for the credential; return it and ``human:<principal>``.

        Raises:
            PolicyDeniedError: no channel can ask, or the person declined or did not answer.
            RunCancelledError: the run was cancelled meanwhile.
        """
        run = self.run
        if not isinstance(run.channel, CredentialChannel):
            raise PolicyDeniedError("this run's approval channel cannot ask a person for a credential",
                                    detail={"rule": "credential_unavailable"})
        focused = current.focused
        request = CredentialRequest(f"credential-{uuid.uuid4().hex[:12]}", run.run_id, action.label,
                                    redact_url(current.url), focused.role if focused else None,
                                    focused.name if focused else None,
                                    run.question_timeout(run.policy.confirmation_timeout_s))
        run.emit("credential_requested", id=request.request_id, label=action.label, domains=domains, url=request.url,
                 field={"role": request.field_role, "name": request.field_name})
        run.sm.to(RunState.AWAITING_CONFIRMATION, f"waiting for a person to give {action.label!r}")
        answer = await run.answer(run.channel.credential(request), request.timeout_s, withdrawable=True)
        run.sm.to(RunState.VALIDATING, "the credential request was answered")
        outcome = "timeout" if answer is None else ("declined" if answer.secret is None else "given")
        run.emit("credential_answer", id=request.request_id, outcome=outcome, by=answer.by if answer else "")
        if answer is None or answer.secret is None:
            raise PolicyDeniedError(f"credential {outcome}: {action.label}", detail={"rule": f"credential_{outcome}"})
        return answer.secret.get_secret_value(), f"human:{answer.by}"
