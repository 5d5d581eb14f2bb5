"""The host-side controller: it decides and enforces; it never touches X11.

Modules: :mod:`.task` (task files), :mod:`.gui` (play and verify a task),
:mod:`.audit_log` (the JSONL audit log), :mod:`.recording` (a GUI run's screen recorded as an MP4, written by
:mod:`.video`; where it is kept and checked: :mod:`.recording_store`), :mod:`.code_task` (code task files) and :mod:`.code_agent` (code runs in the
workspace, verified by re-running the tests). Shared by both run kinds:
:mod:`.policy` (the policy file, risk levels, the classifiers of GUI actions and
commands, the injection scan, loops and limits), :mod:`.confirm` (confirmation requests
and approval channels), :mod:`.agent` (the agent interface); :mod:`.gui_agent` holds the
GUI agent's proposals.
"""

from deskpod.controller.code_agent import CodeRunResult, run_code_task
from deskpod.controller.code_task import CodeTaskSpec, load_code_task
from deskpod.controller.run_api import RunResult
from deskpod.controller.gui import run_task
from deskpod.controller.task import TaskSpec, load_task

__all__ = [
    "CodeRunResult",
    "CodeTaskSpec",
    "RunResult",
    "TaskSpec",
    "load_code_task",
    "load_task",
    "run_code_task",
    "run_task",
]
