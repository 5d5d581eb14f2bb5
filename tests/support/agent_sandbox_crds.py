"""agent-sandbox's CRD schemas for tests: where they are and how they are checked.

The CRDs (``SandboxClaim``, ``SandboxTemplate``, ``SandboxWarmPool``, ``Sandbox``)
are data for tests, not part of deskpod (users install them with agent-sandbox).
They are read from the first of: ``$DESKPOD_AGENT_SANDBOX_CRDS``, ``shared/k8s/
agent-sandbox-crds`` beside the checkout, ``/work/shared/k8s/agent-sandbox-crds``.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import yaml

__all__ = ["crd_dir", "crd_schemas", "strict_schema"]

_ROOT = Path(__file__).resolve().parents[2]


def crd_dir() -> Path:
    """The directory holding the CRDs.

    Raises:
        AssertionError: none of the places holds them (the test fails, never skips).
    """
    search = [Path(p) for p in filter(None, [os.environ.get("DESKPOD_AGENT_SANDBOX_CRDS")])] + [
        _ROOT.parent / "shared" / "k8s" / "agent-sandbox-crds",
        Path("/work/shared/k8s/agent-sandbox-crds"),
    ]
    found = [d for d in search if d.is_dir()]
    assert found, f"agent-sandbox CRDs not found in {search} (set DESKPOD_AGENT_SANDBOX_CRDS)"
    return found[0]


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's ``openAPIV3Schema`` with unknown fields refused (the API server prunes
    them silently; a test wants to know), except where it preserves unknown fields."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@functools.cache
def crd_schemas() -> dict[tuple[str, str, str], dict[str, Any]]:
    """Strict schemas by (group, version, kind), for every version of every CRD.

    Read once per process (800 kB of YAML, with libyaml where PyYAML has it) and shared
    by every caller: read them, never change them.
    """
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    schemas = {}
    for path in crd_dir().glob("*.yaml"):
        crd = yaml.load(path.read_text(), Loader=loader)
        for version in crd["spec"]["versions"]:
            key = (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"])
            schemas[key] = strict_schema(version["schema"]["openAPIV3Schema"])
    return schemas
