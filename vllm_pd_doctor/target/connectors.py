"""The one registry of P/D connectors and release facts (stdlib; `packaging`, which every vLLM
imports, for versions).

Imported by the tool process (`vllm_pd_doctor.target.connectors`) and by the code that runs inside
the target vLLM interpreter (`vllm_pd_doctor_target.connectors`). Adding a connector or a release
fact is one entry here; `problems()` names what an entry lacks and a test fails on it.

These are *facts to explain and to look things up by*, never verdicts: whether a release truncates
before or after the lookup is always observed on the installed code (in-process harness, live
trace, or the source read with `ast`). `fixed_in` only words the upgrade advice.
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

    def owns_source(self, family: str, path: str) -> bool:
        """A truncation site of source family `family` (a `source_words` word) in `path` is this
        connector's."""
        name = path.rsplit("/", 1)[-1]
        return family in self.source_words and not any(w in name for w in self.other_files)


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
        library="nixl",
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
        key="nixl-push",
        label="NIXL (push)",
        vllm_names=("NixlPushConnector",),
        library="nixl",
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


def by_source_path(rel: str) -> tuple[Connector, ...]:
    """Connectors whose scheduler half may live at this vLLM source path (lower-cased match)."""
    low = rel.lower()
    return tuple(c for c in _CONNECTORS.values() if any(w in low for w in c.source_words))


def is_truncation_helper(name: str) -> bool:
    low = name.lower()
    return all(w in low for w in TRUNCATION_HELPER_WORDS)


# --- release facts ------------------------------------------------------------------------


@dataclass(frozen=True)
class Advisory:
    """A security advisory that kills the engine on P/D traffic."""

    id: str
    what: str
    affected_through: str
    """Last affected release (inclusive) when `inclusive`, else first unaffected release."""
    inclusive: bool

    def affects(self, version: Version) -> bool:
        """`version` (a `release_version`) is affected."""
        limit = release_version(self.affected_through)
        if limit is None:
            return False
        return version <= limit if self.inclusive else version < limit


ADVISORIES: tuple[Advisory, ...] = (
    Advisory("CVE-2026-94622", "incomplete kv_transfer_params kill the engine", "0.29.0", True),
    Advisory("CVE-2026-94623", "multi-prompt assert kills the engine", "0.29.0", True),
    Advisory("CVE-2026-114051", "P/D request kills the engine", "0.31.0", False),
)

BAD_NIXL: dict[str, str] = {"1.0.1": "SIGSEGV at exit", "1.3.1": "known crash"}
"""NIXL releases known to crash (version -> what happens)."""


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
    for a in ADVISORIES:
        if not (a.id and a.what) or release_version(a.affected_through) is None:
            out.append(f"advisory {a.id!r}: incomplete")
    for v, what in BAD_NIXL.items():
        if release_version(v) is None or not what:
            out.append(f"bad NIXL entry {v!r}: incomplete")
    return out
