"""The workspace: the code agents' files, commands and tests, served by the runner.

:mod:`.confined` (paths resolved inside a root), :mod:`.archive` (checked tar
archives), :mod:`.output` (command output a model can read), :mod:`.process` (one
command), :mod:`.tools` (files, exec, tests, diff), :mod:`.egress_grants` (a
``network: true`` command's proxy credential) and :mod:`.runner_client` (agentd's
side of the runner wire).
"""

__all__: list[str] = []
