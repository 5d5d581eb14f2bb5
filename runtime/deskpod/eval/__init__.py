"""``deskpod eval``: run a suite of tasks over a pool of sandboxes and report the success rate.

:mod:`.suite` reads suite files, :mod:`.harness` plays them N at a time and judges each
run from its sealed audit log, :mod:`.report` writes the JSON and HTML report.
Submodules are imported on use (the harness pulls in the controller and the client).
"""

from __future__ import annotations

__all__: list[str] = []
