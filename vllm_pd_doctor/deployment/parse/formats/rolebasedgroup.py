"""RoleBasedGroup (workloads.x-k8s.io, sgl-project/rbg): each role's pod template, after its
`templateRef` (+ `patch`, or the role's `templatePatch`) is resolved from `spec.roleTemplates` by
strategic merge as the controller does; then read as Kubernetes resources."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import merge, walk_docs
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source

KIND = "RoleBasedGroup"


def sniff(src: Source) -> bool:
    return KIND in src.kinds()


def read(src: Source) -> list[Found] | None:
    return walk_docs([_resolved(d) for d in src.docs], src.variables, src.others)


FORMAT = DeploymentFormat("rolebasedgroup", sniff, read)


def _resolved(d: Any) -> Any:
    if not (isinstance(d, dict) and d.get("kind") == KIND and isinstance(d.get("spec"), dict)):
        return d
    temps = {
        str(t.get("name")): t.get("template")
        for t in d["spec"].get("roleTemplates") or []
        if isinstance(t, dict)
    }
    return _resolve_refs(d, temps)


def _resolve_refs(obj: Any, temps: Mapping[str, Any]) -> Any:
    if isinstance(obj, list):
        return [_resolve_refs(x, temps) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _resolve_refs(v, temps) for k, v in obj.items() if k != "roleTemplates"}
    ref = obj.get("templateRef")
    if isinstance(ref, dict) and str(ref.get("name")) in temps:
        patch = ref.get("patch") or obj.get("templatePatch") or {}
        out.pop("templateRef")
        out.pop("templatePatch", None)
        out["template"] = merge(temps[str(ref["name"])], patch)
    return out
