"""Can the release's `KVConnectorFactory` load a kv_connector name? (the connector-unregistered
rule's reasoning; the registries are read by `knowledge.connector_registry`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.readers import connector_registry
from vllm_pd_doctor.knowledge.readers.connector_registry import Registry
from vllm_pd_doctor.results.checkconfig import Severity, VllmSource


@dataclass(frozen=True)
class Unloadable:
    evidence: str
    severity: Severity | None = None
    """None: the rule's own (error)."""


def _release_registry(v: VllmSource | None) -> Registry | None:
    """The deployment's own release, read from its files (None: not installed here)."""
    if v is None or v.path is None:
        return None
    reg = connector_registry.read(Path(v.path), v.version)
    if reg.read:
        return reg
    if v.connectors:  # the factory read another way (source cache)
        regs = tuple(connector_registry.Registered(n, "", n, 0) for n in v.connectors)
        return Registry(v.version, regs, module_path=True)  # (the field is older than the cache)
    return None


def _ec_note(name: str, regs: tuple[Registry, ...]) -> str:
    ec = [r.release or "?" for r in regs if name in r.ec_names]
    if not ec:
        return ""
    return (
        f"; it is an encoder-cache connector (ECConnectorFactory of vLLM {', '.join(ec)}): it belongs "
        "in --ec-transfer-config as ec_connector"
    )


def _said(name: str, reg: Registry) -> str:
    return (
        f"kv_connector {name!r} is not among the {len(reg.kv)} connectors vLLM {reg.release or '?'} "
        f"registers (\"Connector '{name}' is not registered\")"
    )


def _ec_said(name: str, reg: Registry) -> str:
    import difflib  # only when a name is refused

    near = difflib.get_close_matches(name, reg.ec_names, n=1, cutoff=0.6)
    same_words = [n for n in reg.ec_names if sorted(_words(n)) == sorted(_words(name))]
    hint = same_words or near
    return (
        f"ec_connector {name!r} is not among the encoder-cache connectors vLLM {reg.release or '?'} "
        f"registers ({', '.join(reg.ec_names)}): the encoder and prefill fail at start-up "
        f'("Unsupported connector type: {name}")' + (f"; the release's name is {hint[0]!r}" if hint else "")
    )


def _words(name: str) -> list[str]:
    return re.findall(r"[A-Z]+(?![a-z])|[A-Z][a-z]*|[a-z]+|\d+", name)


def check_ec(v: VllmSource | None, name: str, *, external: bool) -> Unloadable | None:
    """Why an ec_connector name cannot be loaded by the release's `ECConnectorFactory` (None: it
    can, or nothing tells): its own release when read, else the release an image names, else every
    release pd-doctor has provisioned (a name none of them registers)."""
    own = _release_registry(v)
    if own is not None and own.ec:
        if name in own.ec_names or (external and own.ec_module_path):
            return None
        return Unloadable(_ec_said(name, own))
    if external or own is not None:
        return None
    regs = [r for r in connector_registry.provisioned() if r.ec]
    named = v.version if v is not None else None
    same = [r for r in regs if named and r.release == named]
    if same:
        return None if name in same[0].ec_names else Unloadable(_ec_said(name, same[0]))
    if not regs or any(name in r.ec_names for r in regs):
        return None
    return Unloadable(
        _ec_said(name, regs[-1])
        + f"; none of the releases read registers it ({', '.join(r.release or '?' for r in regs)})"
    )


def check(v: VllmSource | None, name: str, *, external: bool) -> Unloadable | None:
    """Why `name` cannot be loaded, or None when it can (or nothing tells)."""
    own = _release_registry(v)
    if own is not None:
        if name in own.kv_names or (external and own.module_path):
            return None
        return Unloadable(_said(name, own) + _ec_note(name, (own,)))
    if external or connectors.by_vllm_name(name) is not None:
        return None  # an external module, or a name pd-doctor's connector registry knows
    regs = connector_registry.provisioned()
    if not regs:
        return None
    named = v.version if v is not None else None  # the release an image tag names
    same = [r for r in regs if named and r.release == named]
    if same:
        return None if name in same[0].kv_names else Unloadable(_said(name, same[0]) + _ec_note(name, regs))
    having = [r.release or "?" for r in regs if name in r.kv_names]
    if having:
        return None
    read = ", ".join(r.release or "?" for r in regs)
    return Unloadable(
        f"kv_connector {name!r} is registered by none of the vLLM releases read ({read}; the "
        "deployment's own vLLM is not installed here: give --python or --vllm to check its release)"
        + _ec_note(name, regs)
    )
