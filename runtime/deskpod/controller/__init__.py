"""The host-side controller: it decides and enforces; it never touches X11.

Modules: :mod:`.task` (task files), :mod:`.runner` (play and verify a task),
:mod:`.audit` (the JSONL audit log).
"""

from deskpod.controller.runner import RunResult, run_task
from deskpod.controller.task import TaskSpec, load_task

__all__ = ["RunResult", "TaskSpec", "load_task", "run_task"]
