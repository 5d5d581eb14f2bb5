"""The workspace: the code agents' files, commands and tests, served by the runner.

:mod:`.confined` (paths resolved inside a root), :mod:`.archive` (checked tar
archives), :mod:`.output` (command output a model can read), :mod:`.process` (one
command), :mod:`.files` (list, read, write, edit), :mod:`.tools` (the rest: exec, tests,
patches, diff, seeding, the verdict's requests), :mod:`.pid1` (the runner's duties as
its container's init), :mod:`.egress_grants` (a ``network: true`` command's proxy
credential) and :mod:`.runner_client` (agentd's side of the runner wire).
"""

__all__: list[str] = []
