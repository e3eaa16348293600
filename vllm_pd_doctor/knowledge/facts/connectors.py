"""The one registry of P/D connectors: keys, vLLM names, aliases, packages, hooks, first fixed
release (stdlib; `packaging`, which every vLLM imports, for versions).

Imported by the tool process (`vllm_pd_doctor.knowledge.facts.connectors`) and by the code that runs inside
the target vLLM interpreter (shipped there as `vllm_pd_doctor_target.connectors`, see
`targetrun.target_sources`): keep it stdlib + `packaging`, with no import of the package. Adding a
connector is one entry here; `problems()` names what an entry lacks and a test fails on it.

These are *facts to explain and to look things up by*, never verdicts: whether a release truncates
before or after the lookup is always observed on the installed code (in-process harness, live
trace, or the source read with `ast`). `fixed_in` only words the upgrade advice (`knowledge.fixes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.version import Version

LATE_HOOK = "get_num_new_matched_tokens"
"""The hook that runs after the scheduler's local prefix-cache lookup (buggy releases truncate here)."""
EARLY_HOOK = "on_new_request"
"""The hook the scheduler calls when the request is added, before any lookup (the fix)."""
TRUNCATION_HELPER_WORDS = ("truncate", "prefill")
"""A function whose name holds all of these words is a P-side truncation helper
(`_truncate_mamba_request_for_prefill`, `_truncate_request_for_prefill`)."""


@dataclass(frozen=True)
class Connector:
    """One P/D KV connector pd-doctor knows."""

    key: str
    """pd-doctor's name for it (`--connector KEY`)."""
    label: str
    """Human label for tables."""
    vllm_names: tuple[str, ...]
    """`kv_connector` names vLLM registers for it; the first registered one is used."""
    library: str
    """Python module of the transfer library the worker half needs (not the scheduler half)."""
    source_words: tuple[str, ...]
    """Lower-case words of the vLLM source paths that hold its scheduler half (`nixl/`, ...)."""
    truncating_hooks: tuple[str, ...]
    """Connector-scheduler hooks known (in some release) to call the P-side truncation helper."""
    fixed_in: str
    """First release whose P side truncates in `on_new_request` (advice wording only)."""
    fix_refs: tuple[str, ...] = ()
    """Upstream issue / PR references for the fix."""
    live: bool = False
    """`repro --engine live` can start a P/D pair with it."""
    kv_connector_extra: dict[str, object] = field(default_factory=dict)
    """Extra kv-transfer-config keys the live engine passes for it."""
    hybrid_extra: dict[str, object] = field(default_factory=dict)
    """kv_connector_extra_config a deployment of a hybrid (Mamba-state) model needs with it (the
    in-process repro passes it too)."""
    other_files: tuple[str, ...] = ()
    """Words of a source file name that make it another connector's, among the files its
    `source_words` find (NIXL pull and push share `nixl/`: `push_scheduler.py` is push's)."""
    extra_packages: tuple[str, ...] = ()
    """What its vLLM module imports that vLLM does not depend on (installed into pd-doctor's
    environments so that its scheduler half can be driven)."""

    @property
    def truncates_late(self) -> bool:
        """Known (in some release) to truncate in the hook after the local prefix-cache lookup."""
        return LATE_HOOK in self.truncating_hooks

    def owns_source(self, family: str, path: str) -> bool:
        """A truncation site of source family `family` (a `source_words` word) in `path` is this
        connector's."""
        name = path.rsplit("/", 1)[-1]
        return family in self.source_words and not any(w in name for w in self.other_files)


NIXL_LIBRARY = "nixl"
"""The NIXL transfer library's Python module (also the name of the NIXL extra of pd-doctor's
environments and the word of NIXL's source files and metric names)."""
NIXL_PACKAGES = ("nixl-cu12==1.5.1", "nixl==1.5.1")
"""NIXL for the live engine, installed without dependencies: the `nixl` meta package asks for
both CUDA variants, and newer meta releases ask for a nixl-cu12 that does not exist."""
DEFAULT_KEY = "nixl"
"""The connector a command uses when none is named (and the one #53514 was filed against)."""
PUSH_KEY = "nixl-push"
"""The NIXL connector whose P side pushes the KV blocks to D (NIXL's handshake compares the
transfer mode: push on one side, pull on the other do not pair)."""
TRANSFER_PACKAGES = ("nixl", "lmcache", "mooncake")
"""Python packages of the KV transfer libraries whose source files P/D tracebacks name (a frame's
file is public from its package on)."""

LAUNCHER_CONNECTORS: dict[str, dict[str, str]] = {
    "dynamo.vllm": {
        "nixl": "NixlConnector",
        "lmcache": "LMCacheConnectorV1",
        "kvbm": "DynamoConnector",
        "mooncake": "MooncakeConnectorV1",
    },
}
"""Connector names a launcher takes (`python -m dynamo.vllm --connector nixl`) -> the vLLM
`kv_connector` it configures (some are connectors pd-doctor has no entry for)."""
LMCACHE_CONNECTORS: dict[str, str] = {"v1": "LMCacheConnectorV1", "v0": "LMCacheConnector"}
"""LMCache's vLLM connector per engine (what the production-stack chart's `lmcacheConfig` sets)."""
LAUNCHER_DEFAULT: dict[str, str] = {"dynamo.vllm": "nixl"}
"""The connector a launcher configures when given none."""

_CONNECTORS: dict[str, Connector] = {}


def register(c: Connector) -> Connector:
    """Add (or replace) a connector. Tests register fakes through this and `unregister`."""
    _CONNECTORS[c.key] = c
    return c


def unregister(key: str) -> None:
    _CONNECTORS.pop(key, None)


register(
    Connector(
        key="nixl",
        label="NIXL (pull)",
        vllm_names=("NixlConnector", "NixlPullConnector"),
        library=NIXL_LIBRARY,
        source_words=("nixl",),
        truncating_hooks=(LATE_HOOK, EARLY_HOOK),
        fixed_in="0.29.0",
        fix_refs=("vllm#53514", "vllm#53523"),
        live=True,
        other_files=("push",),
    )
)
register(
    Connector(
        key=PUSH_KEY,
        label="NIXL (push)",
        vllm_names=("NixlPushConnector",),
        library=NIXL_LIBRARY,
        source_words=("nixl",),
        truncating_hooks=(LATE_HOOK, EARLY_HOOK),
        fixed_in="0.29.0",
        fix_refs=("vllm#53514", "vllm#53523"),
        other_files=("pull",),
    )
)
register(
    Connector(
        key="mooncake",
        label="Mooncake",
        vllm_names=("MooncakeConnector",),
        library="mooncake",
        source_words=("mooncake",),
        truncating_hooks=(LATE_HOOK, EARLY_HOOK),
        fixed_in="0.29.0",
        fix_refs=("vllm#53514", "vllm#53663"),
    )
)
register(
    Connector(
        key="moriio",
        label="MoRIIO",
        vllm_names=("MoRIIOConnector",),
        library="mori",
        source_words=("moriio",),
        truncating_hooks=(EARLY_HOOK,),
        fixed_in="0.31.0",
        fix_refs=("vllm#53514",),
        # vLLM 0.32: "MoRIIO hybrid (mamba/KDA) transfer is implemented for READ mode only".
        hybrid_extra={"read_mode": "true"},
        extra_packages=("msgpack",),
    )
)


def all_connectors() -> tuple[Connector, ...]:
    """Every registered connector, in registration order (read at call time, never cached)."""
    return tuple(_CONNECTORS.values())


def connector_keys() -> tuple[str, ...]:
    return tuple(_CONNECTORS)


def get(key: str) -> Connector | None:
    return _CONNECTORS.get(key)


def by_vllm_name(name: str) -> Connector | None:
    """The connector a `kv_connector` name belongs to (None: it does not truncate on the P side)."""
    for c in _CONNECTORS.values():
        if name in c.vllm_names:
            return c
    return None


def late_truncating() -> tuple[Connector, ...]:
    """Connectors known (in some release) to truncate after the lookup: the #53514 producers."""
    return tuple(c for c in _CONNECTORS.values() if c.truncates_late)


def late_source_words() -> frozenset[str]:
    """Source families (`nixl`, `mooncake`) whose truncation sites belong to late truncators."""
    return frozenset(w for c in late_truncating() for w in c.source_words)


def extra_packages() -> tuple[str, ...]:
    """Every connector's extra packages, in registration order, once each."""
    return tuple(dict.fromkeys(p for c in _CONNECTORS.values() for p in c.extra_packages))


def launcher_connector(launcher: str, name: str) -> str:
    """The vLLM `kv_connector` a launcher's connector name configures (the name itself when the
    launcher's table does not have it)."""
    return LAUNCHER_CONNECTORS.get(launcher, {}).get(name.lower(), name)


def literals() -> frozenset[str]:
    """Every string that names a connector: keys, vLLM names, launcher names and what they map to,
    LMCache's (a test fails on one of these as a literal outside knowledge/)."""
    out = {DEFAULT_KEY, *LAUNCHER_DEFAULT.values()}
    for c in _CONNECTORS.values():
        out.update((c.key, *c.vllm_names))
    for table in LAUNCHER_CONNECTORS.values():
        out.update(table)
        out.update(table.values())
    out.update(LMCACHE_CONNECTORS.values())
    return frozenset(out)


def by_source_path(rel: str) -> tuple[Connector, ...]:
    """Connectors whose scheduler half may live at this vLLM source path (lower-cased match)."""
    low = rel.lower()
    return tuple(c for c in _CONNECTORS.values() if any(w in low for w in c.source_words))


def is_truncation_helper(name: str) -> bool:
    low = name.lower()
    return all(w in low for w in TRUNCATION_HELPER_WORDS)


# --- versions ------------------------------------------------------------------------------


def release_version(v: str | None) -> Version | None:
    """The release a version string names, as the one version type pd-doctor compares:
    '0.28.0+cpu' / '0.28.0.dev3+g1a2b' -> 0.28.0, '0.29' -> 0.29 (== 0.29.0); None for
    anything that is not a version ('main', '')."""
    from packaging.version import InvalidVersion, Version  # imported when used: vLLM needs it

    if not v:
        return None
    try:
        return Version(Version(v).base_version)
    except InvalidVersion:
        return None


def problems() -> list[str]:
    """What registered entries lack (a test asserts this is empty)."""
    out: list[str] = []
    seen: dict[str, str] = {}
    for c in _CONNECTORS.values():
        for attr in ("key", "label", "library", "fixed_in"):
            if not getattr(c, attr):
                out.append(f"connector {c.key!r}: {attr} is empty")
        if not c.vllm_names:
            out.append(f"connector {c.key!r}: no vLLM connector names")
        if not c.source_words:
            out.append(f"connector {c.key!r}: no source words")
        if not c.truncating_hooks:
            out.append(f"connector {c.key!r}: no truncating hooks")
        if release_version(c.fixed_in) is None:
            out.append(f"connector {c.key!r}: fixed_in {c.fixed_in!r} is not a release")
        for n in c.vllm_names:
            if n in seen:
                out.append(f"vLLM name {n!r} registered by {seen[n]!r} and {c.key!r}")
            seen[n] = c.key
    return out
