"""Render deskpod's kustomize overlays for tests, without the kustomize binary.

deskpod's kustomizations use only two fields: ``resources`` (files or directories
with their own kustomization) and ``patches`` with an inline JSON 6902 patch and a
``target`` naming group, version, kind and name. :func:`render` implements exactly
that subset (with the ``jsonpatch`` library) and refuses any other field, so what it
returns is what ``kubectl kustomize`` prints for these files, as documents.

Source: the Kustomization reference, https://kubectl.docs.kubernetes.io/references/kustomize/kustomization/
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonpatch
import yaml

__all__ = ["render"]

_FIELDS = {"apiVersion", "kind", "resources", "patches"}


def _matches(doc: dict[str, Any], target: dict[str, str]) -> bool:
    group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
    wanted = {"group": group, "version": version, "kind": doc.get("kind"), "name": doc["metadata"]["name"]}
    return all(wanted[key] == value for key, value in target.items())


def render(directory: Path) -> list[dict[str, Any]]:
    """The documents the kustomization in ``directory`` produces, in order.

    Raises:
        ValueError: the kustomization uses a field this renderer does not implement,
            or a patch's target matches no document.
    """
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - _FIELDS
    if unknown:
        raise ValueError(f"{directory}: kustomization fields not rendered here: {sorted(unknown)}")
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            docs.extend(render(path))
        else:
            docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    for patch in kustomization.get("patches", []):
        operations = yaml.safe_load(patch["patch"])
        hits = [i for i, doc in enumerate(docs) if _matches(doc, patch["target"])]
        if not hits:
            raise ValueError(f"{directory}: patch target {patch['target']} matches nothing")
        for i in hits:
            docs[i] = jsonpatch.apply_patch(docs[i], operations)
    return docs
