"""The server of ``deskpod serve``: the controller as a websocket service for other services.

Modules, each importing only those before it: :mod:`.owned` (the sandboxes the service
owns: their tokens, and the reset before each session), :mod:`.session` (a session, its remote
agent and its pending questions), :mod:`.service_state` (:class:`~.service_state.ControllerService`: the
configuration and the live state), :mod:`.approvals` (a session's questions over the
wire and who may answer them), :mod:`.runs` (opening, running and resetting a session),
:mod:`.connection` (reading and dispatching one connection's messages), :mod:`.metrics` (the
Prometheus metrics, one registry per service), :mod:`.metrics_settings` (who may read them, where),
:mod:`.metrics_http` (``GET /metrics``), :mod:`.app` (the FastAPI app and uvicorn) and
:mod:`.token_env` (the tokens' hashes from the settings). The messages are
:mod:`deskpod.service.messages`; the metrics are described in ``docs/guides/metrics.md``.

The service is a FastAPI application (:func:`~.app.create_app`) run by uvicorn
(:func:`~.app.serve`); ``GET /healthz`` answers ``{"ok": true, "sessions": N,
"running": M}`` (sessions open on live connections, runs going). A remote service (an
eval harness, a model loop, an approval UI) connects to
``ws://HOST:PORT/v1/controller`` with ``Authorization: Bearer <token>``; the
service holds only the token's SHA-256 (``DESKPOD_SERVE_TOKEN_SHA256``, or the
SHA-256 of ``DESKPOD_SERVE_TOKEN``) and compares in constant time. Requests from
browsers (any ``Origin`` header) are refused. Messages are JSON objects with a
``type`` (:data:`~deskpod.service.messages.ClientMessage`); at most
:data:`~deskpod.service.messages.MAX_MESSAGE_BYTES` each (a larger
one closes the connection with code 1009).

A *session* is one run (:func:`deskpod.controller.gui.run_task`) on one
sandbox, whose agent is the remote service. One session at a time may run on a
sandbox, whatever URL reaches it: the service connects to the sandbox when the
session opens and knows it by the ``sandbox_id`` of the daemon's hello, not by the
URL's spelling.

The service *owns* the sandboxes its operator registers by name in
``DESKPOD_SERVE_SANDBOXES`` (``NAME=URL token_file=PATH [token_env=VAR]``,
:mod:`deskpod.settings.sandboxes`): an agent opens a session on one by its name and never
holds its token; the service resets it before every session (nothing of the previous
session's browser, files or allowlist is left; the reset takes seconds) and keeps the
rotated token in the entry's token file, where the operator's tools read it. ``open``
with ``restore: NAME`` continues from that snapshot of the service's store instead. An
``open`` naming an owned sandbox's URL (today's ``{url, token}``) opens it the same way
(the service tries its own token first, the opener's last). A second session asking for a
busy owned sandbox gets ``busy`` with ``detail: {sandbox, retry_after_s}`` at once (no
queue: the opener retries).

Approvals come from a principal other than the agent. The service has a second
token, the *approver* token (``DESKPOD_SERVE_APPROVER_TOKEN_SHA256`` or
``DESKPOD_SERVE_APPROVER_TOKEN``); a connection made with it is an *approver
connection* (a console, a human's tool), which may only answer: it receives every
``confirmation_required`` and ``pause_required`` of the sessions that wait for an
approver (also those asked before it connected) and answers them with ``confirm``
and ``review``. The opener says who approves its session (``open.approver``):
``"approver"`` (the default) or ``"self"``, its own connection, which only an
operator's policy with ``allow_self_approval: true`` permits (unattended evals
against test sites); every confirmation record of such a run says
``self_approval: true``. An answer from a connection not allowed to give it is
refused (``unauthorized``) and the question stays open. The opener still sees its
session's questions, to know why a step waits. The web console's connections
(``/console/ws``, :mod:`deskpod.service.console.app`) are approver connections of a signed-in
person, or *viewer* connections, which receive what an approver receives and answer
nothing. Approver and viewer connections also receive a ``session`` view
(:class:`~deskpod.service.messages.ServiceSession`) of every session when it opens,
changes state or page, and ends (and of every open one when they connect), in the
order the run made them relative to its questions.

- ``open {id, sandbox: {name} | {url, token, egress_control?: {url, token, tenant?}}, task: {name,
  start_url, allowed_domains?, limits?, model_size?, success}, policy?, approver?, restore?}`` →
  ``opened {id, session}``, then
  ``observation {id: null, session, status: "ready", observation}``. The run's allowlist
  goes to the sandbox's egress proxy too (:mod:`deskpod.controller.egress`): the stack's
  (``DESKPOD_EGRESS_CONTROL``) when ``sandbox.url`` is the stack's sandbox
  (``DESKPOD_SANDBOX_URL``); a leased pool slot's own when the opener gives it
  (``egress_control``: the lease's ``ID.egress`` file, ``http://ADDRESS:3129``; ``tenant``: the
  sandbox's tenant on a shared proxy, whose list alone it sets); else none
  (the browser's line only). Never one sandbox's proxy for another. A session's
  ``policy`` can only tighten the operator's (``deskpod serve --policy``): more
  blocked or confirmed actions and levels, smaller timeouts and limits.
  Only a session on a sandbox the operator vouches for (``sandbox.url`` exactly one of
  ``DESKPOD_SERVE_SANDBOXES``, :attr:`~.service_state.ControllerService.sandboxes`) may type a host-held
  secret (``type_secret``) or ask a person for a credential (``request_credential``):
  the opener chooses the URL, and the daemon there reports the URL, the page and the
  focused field those actions are checked on, so on any other sandbox they are refused
  (``policy_denied``, ``rule`` ``credential_sandbox``) and its run holds no secret.
- ``submit {id, session, actions, sensitive?, risk?, intent?}``: one proposal,
  accepted only while the session waits for one (else ``busy``); every action
  goes through the policy (risk levels, confirmations, allowlist, limits) →
  ``observation {id: <the submit's id>, session, status: ok|error|denied,
  observation, error}``.
- ``finish {id, session, claim}``: the agent says it is done; the controller
  verifies from the environment → ``finished {session, result}``.
- ``confirm {id, request_id, approve, digest}`` answers a
  ``confirmation_required {session, request}`` (the request carries the action,
  target, data, risk, reversibility, URL, screenshot and the digest to repeat).
- ``review {id, pause_id, answer: resume|cancel|takeover}`` answers
  ``pause_required {session, notice}``.
- ``pause`` / ``resume`` / ``cancel {id, session}`` → ``ok {id}``; a cancel ends
  the run at once, a pause is shown as ``pause_required`` at once.
- ``reset {id, session, start_url?}`` after the run resets the session's sandbox
  in place → ``reset_done {id, session, token, url}`` (the token rotates; the new
  one is returned only on this connection, and never for an owned sandbox: ``""``).
- ``takeover {id, session}`` (approver connections; or the answer ``takeover`` to a pause):
  a person takes the sandbox over (:mod:`deskpod.controller.takeover`) → ``ok {id}``, then
  ``takeover_state {session, active: true, by}`` to the opener and every approver;
  ``human_input {id, session, action}`` runs one protocol action on the run's executor,
  audited as ``human:<principal>`` → ``ok {id}``; ``handback {id, session}`` → ``ok``,
  ``takeover_state {active: false}``, and the agent plans on a fresh observation.
- ``credential {id, request_id, secret | cancel: true}`` (approver connections) answers a
  ``credential_required {session, request}`` (:mod:`deskpod.controller.credentials`).
  The agent's connection sending any of these four is refused (``unauthorized``).
- every audit record is streamed as ``event {session, record}``; bad input gets
  ``error {id, error: {code, message, detail}}`` and the connection stays usable.
  The outbound messages are the models of :mod:`deskpod.service.messages`.

Closing the connection cancels its sessions; unanswered confirmations are denials.
"""

__all__: list[str] = []
