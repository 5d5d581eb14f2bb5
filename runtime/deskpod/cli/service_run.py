"""Play a scripted task file as a session of ``deskpod serve`` (``deskpod run --service``).

The run is the service's: it connects to the sandbox, applies its operator's policy,
writes and seals the audit log, and sends the run's confirmations and pauses to its
approver connections, the web console's signed-in approvers among them. This side is
only the session's agent: it opens the session with the task (its steps removed), plays
the task's scripted steps as ``submit`` messages and says ``finish`` after the last.
That is how the compose demo's confirmations reach the console (scripts/up.sh): a run
of ``deskpod run`` without ``--service`` asks at its own terminal instead.
"""

from __future__ import annotations

from deskpod.controller.gui_agent import Done, StepOutcome, scripted_gui_agent
from deskpod.service.messages import SessionTask
from deskpod.controller.task import TaskSpec
from deskpod.errors import TaskFileError
from deskpod.service.messages import ServiceFinished, ServiceRunSummary
from deskpod.service.client import ControllerClient

__all__ = ["run_via_service", "session_task"]


def session_task(task: TaskSpec) -> SessionTask:
    """The task as ``deskpod serve`` takes it: the same task without its steps.

    Raises:
        TaskFileError: the task names a model agent (the service is given a scripted task only).
    """
    if task.agent is not None:
        raise TaskFileError(f"task {task.name!r} names a model agent: --service plays scripted steps only "
                            "(connect your own agent to deskpod serve)")
    if not task.steps:
        raise TaskFileError(f"task {task.name!r} has no steps to play")
    return SessionTask(name=task.name, start_url=task.start_url, model_size=task.model_size,
                       allowed_domains=list(task.allowed_domains), limits=task.limits, success=task.success,
                       permissions=task.permissions, allow_clipboard_read=task.allow_clipboard_read)


async def run_via_service(task: TaskSpec, service_url: str, service_token: str, sandbox_url: str,
                          sandbox_token: str) -> ServiceRunSummary:
    """Open a session of ``task`` on the service and play its steps; return how the run ended.

    Args:
        task: a task file with scripted steps.
        service_url: ``ws://HOST:PORT/v1/controller`` of ``deskpod serve``.
        service_token: its agents' bearer token (``DESKPOD_SERVE_TOKEN``).
        sandbox_url: the sandbox daemon's websocket URL, as the service reaches it.
        sandbox_token: the sandbox's control token.

    Returns:
        The service's summary of the run (``status="succeeded"`` only when the success check held).

    Raises:
        TaskFileError: the task has no scripted steps.
        DeskpodError: the service refused the connection, the session or a message.
    """
    spec = session_task(task)
    agent = scripted_gui_agent([(step.actions, step.sensitive) for step in task.steps])
    async with await ControllerClient.connect(service_url, service_token) as client:
        session = (await client.open(sandbox_url, sandbox_token, spec)).session
        reply = await client.ready(session, None)
        last: StepOutcome | None = None
        while not isinstance(reply, ServiceFinished):
            proposal = await agent.propose(reply.observation, last)
            if isinstance(proposal, Done):
                return await client.finish(session, proposal.claim)
            actions = [a.model_dump(mode="json") for a in proposal.actions]
            reply = await client.submit(session, actions, sensitive=proposal.sensitive, risk=proposal.risk,
                                        intent=proposal.intent)
            if not isinstance(reply, ServiceFinished):
                last = StepOutcome(status="ok" if reply.status == "ready" else reply.status,
                                   observation=reply.observation, error=dict(reply.error))
        return reply.result
