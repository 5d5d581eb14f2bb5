"""The GUI run: play a task against a sandbox under the controller's policy.

:func:`run_task` (:mod:`.run`) is the loop; each concern of a run is one module below it,
each importing only the ones listed after it:

- :mod:`.run`: the loop (observe, verify, ask the agent, look or step) and :func:`run_task`.
- :mod:`.recovery`: tabs whose page stopped answering, recovered when the policy allows.
- :mod:`.looks`: proposals that only look, answered outside the steps, with their own limit.
- :mod:`.step`: one proposal validated and executed action by action.
- :mod:`.keyed`: ``type``, ``keypress`` and ``hold_key`` judged piece by piece as they land.
- :mod:`.secrets`: ``request_credential`` and ``type_secret`` typed into a checked field.
- :mod:`.chooser`: typing and Enter while a file chooser is reported, read as its answer.
- :mod:`.endings`: the success check, the failure scene, the sealed last record.
- :mod:`.confirming`: a person's approval bound to the exact action, URL and screen.
- :mod:`.judge`: an action's risk level from the action and the page under it.
- :mod:`.human`: pauses, take-overs, and the checks that call for a pause.
- :mod:`.allowlist`: the run's allowlist in force, and every observation's URLs checked.
- :mod:`.permissions`: the task's browser permission grants in force, and pages' requests audited.
- :mod:`.step_record`: the typed record of one step that its concerns fill in.
- :mod:`.record`: the state a run's concerns share, its audit events and screenshots.
- :mod:`.element_actions`: an action by snapshot ref replaced by the pixels it lands on.
- :mod:`.omnibox`: address-bar navigation, judged like a link.
"""

from deskpod.controller.gui.run import run_task

__all__ = ["run_task"]
