"""Ports and hosts: which servers share a host / network namespace, and what collides there.

Each server's place is decided from what the input says, in this order: the parser's network
identity (`host:`, `pod:`, `container:` ...), a `host:` entry, a literal
VLLM_NIXL_SIDE_CHANNEL_HOST, a literal --host. A value that is only known at run time
(`$(POD_IP)`, `valueFrom: fieldRef status.podIP`) is unknown, never loopback. Two servers whose
input says nothing about either are assumed to share one host (a plain script or two commands).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from itertools import combinations

from vllm_pd_doctor.checkconfig.rules.catalog import E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import Context, connector_names, label, uses_nixl
from vllm_pd_doctor.results.checkconfig import Finding
from vllm_pd_doctor.results.launch import Server

DEFAULT_SIDE_CHANNEL_PORT = 5600
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")
"""Empty is not among them: a manifest's `valueFrom` leaves the value to run time."""
WILDCARD = ("0.0.0.0", "::")
"""Binds every interface, but is advertised to the peer as is (remote_host in kv_transfer_params)."""
OWN_SIDE_CHANNEL = ("dynamo.vllm", "Ray Serve LLM")
"""Launchers that set VLLM_NIXL_SIDE_CHANNEL_HOST/PORT themselves, whatever the environment says:
dynamo.vllm reserves a port per worker and takes the host's IP (ai-dynamo/dynamo
components/backends/vllm/src/dynamo/vllm/args.py `set_side_channel_host_and_port`, ports.py);
Ray Serve LLM's NixlConnectorBackend takes an open port (+ a rank offset) and the node IP when
the variable is not set (ray python/ray/llm/_internal/serve/engines/vllm/kv_transfer/nixl.py)."""


def own_side_channel(s: Server) -> str | None:
    """The launcher that sets the side channel itself, if any."""
    return next((w for w in OWN_SIDE_CHANNEL if w in s.launcher), None)


SIDE_HOST = "VLLM_NIXL_SIDE_CHANNEL_HOST"
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Place:
    """Where one server runs: a namespace key, or None (unknown / not said) and why."""

    key: str | None
    evidence: str
    said: bool
    """The input says something about it (False: nothing at all, a plain command)."""
    bind: bool = False
    """The key is only a --host bind address: one machine binds several, so two different ones do
    not prove two machines."""


def _literal_host(v: str) -> bool:
    """A value that names a host now, not one filled in at run time."""
    if not v or any(c in v for c in "$`{}() "):
        return False
    try:
        ipaddress.ip_address(v)
        return True
    except ValueError:
        return bool(_HOSTNAME_RE.match(v))


def place(s: Server) -> Place:
    if s.network:
        if s.network == "loopback":
            return Place(None, s.network_evidence or "loopback only", False)
        return Place(s.network, s.network_evidence or s.network, True)
    cfg = s.config
    if cfg.machine:
        return Place(f"host:{cfg.machine}", f"host: {cfg.machine}", True)
    side = cfg.env.get(SIDE_HOST)
    if side is not None and side not in LOOPBACK:
        if _literal_host(side):
            return Place(f"host:{side}", f"{SIDE_HOST}={side}", True)
        return Place(
            None,
            f"{SIDE_HOST}={side or '(empty)'} is only known at run time "
            "(e.g. valueFrom fieldRef status.podIP)",
            True,
        )
    if cfg.host and cfg.host not in LOOPBACK and cfg.host != "::":
        if _literal_host(cfg.host):
            return Place(f"host:{cfg.host}", f"--host {cfg.host}", True, bind=True)
        return Place(None, f"--host {cfg.host} is only known at run time", True)
    return Place(None, "nothing says where it runs", False)


class Same(Enum):
    yes = "yes"
    no = "no"
    unknown = "unknown"


def same_host(a: Server, b: Server) -> tuple[Same, str]:
    """Whether two servers share a host / network namespace, and what that rests on."""
    pa, pb = place(a), place(b)
    why = f"{label(a)}: {pa.evidence}; {label(b)}: {pb.evidence}"
    if pa.key is not None and pb.key is not None:
        if pa.key != pb.key and (pa.bind or pb.bind):
            return Same.unknown, why + " (--host is a bind address: one machine can bind several)"
        return (Same.yes if pa.key == pb.key else Same.no), why
    if pa.key is None and pb.key is None and not pa.said and not pb.said:
        return Same.yes, f"neither {label(a)} nor {label(b)} says where it runs: assumed one host"
    return Same.unknown, why


def side_channel(s: Server, default: int) -> tuple[int, int] | None:
    """[first, last] side-channel port of the instance (base + DP rank range); None when the
    launcher allocates it."""
    if own_side_channel(s):
        return None
    cfg = s.config
    raw = cfg.env.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
    try:
        base = int(raw) if raw is not None else default
    except ValueError:
        return None
    n = cfg.data_parallel_size_local or cfg.data_parallel_size
    start = (
        base + (cfg.data_parallel_rank or 0)
        if cfg.data_parallel_size_local is None and cfg.data_parallel_rank is not None
        else base
    )
    return start, start + max(1, n) - 1


def _range(r: tuple[int, int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}"


def _port_src(s: Server, dflt: int) -> str:
    return s.config.env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", f"default {dflt}")


def relaunched(a: Server, b: Server) -> bool:
    """Two servers with the same HTTP --port and side-channel port cannot run side by side: the
    second could not bind its API port. A script that launches them relaunches one slot (its kill
    between the launches was not recognised, e.g. `pgrep VLLM | xargs kill`), so their side
    channels never meet (vLLM's own benchmarks/disagg_benchmarks/disagg_nixl_epd_benchmark.sh)."""
    pa, pb = a.config.port, b.config.port
    same_env = a.config.env.get("VLLM_NIXL_SIDE_CHANNEL_PORT") == b.config.env.get(
        "VLLM_NIXL_SIDE_CHANNEL_PORT"
    )
    return pa is not None and pa == pb and same_env


@rule(
    id="side-channel-port-collision",
    severity=E,
    title="NIXL side-channel port ranges collide on one host",
    fix="give each instance on a host its own VLLM_NIXL_SIDE_CHANNEL_PORT, at least data-parallel size apart",
    refs=("vllm#20965", "vllm#25059", "vllm PR #23756"),
)
def ports(ctx: Context) -> Iterator[Finding]:
    dflt = (ctx.vllm.side_channel_port_default if ctx.vllm else None) or DEFAULT_SIDE_CHANNEL_PORT
    for a, b in combinations(ctx.servers, 2):
        if a.phase != b.phase:
            continue  # one is stopped before the other starts (kill, then relaunch)
        same, why = same_host(a, b)
        if same is Same.no or relaunched(a, b):
            continue
        sev = None if same is Same.yes else W
        where = "on one host" if same is Same.yes else "if they share a host"
        if uses_nixl(a) and uses_nixl(b):
            ra, rb = side_channel(a, dflt), side_channel(b, dflt)
            if ra is not None and rb is not None and ra[0] <= rb[1] and rb[0] <= ra[1]:
                yield finding(
                    "side-channel-port-collision",
                    f"{label(a)} side channel {_range(ra)} and {label(b)} "
                    f"{_range(rb)} overlap {where} (VLLM_NIXL_SIDE_CHANNEL_PORT "
                    f"{label(a)}={_port_src(a, dflt)}, {label(b)}="
                    f"{_port_src(b, dflt)}; {why})",
                    severity=sev,
                )
        for x, y in ((a, b), (b, a)):
            r = side_channel(x, dflt) if uses_nixl(x) else None
            if r and y.config.port is not None and r[0] <= y.config.port <= r[1]:
                yield finding(
                    "side-channel-port-collision",
                    f"{label(x)} side channel {_range(r)} includes the {label(y)} "
                    f"HTTP --port {y.config.port} {where} ({why})",
                    severity=sev,
                )


@rule(
    id="side-channel-host-loopback",
    severity=E,
    title="VLLM_NIXL_SIDE_CHANNEL_HOST is loopback while P and D are on different hosts",
    fix="set VLLM_NIXL_SIDE_CHANNEL_HOST to an address the other host can reach",
    refs=("vllm PR #24249", "kserve#6027"),
)
def host_loopback(ctx: Context) -> Iterator[Finding]:
    seen: set[str] = set()
    for p, d in ctx.pairs():
        if not (uses_nixl(p) or uses_nixl(d)):
            continue
        same, why = same_host(p, d)
        if same is not Same.no:
            continue
        for s, other in ((p, d), (d, p)):
            if label(s) in seen or not _advertised(s) or own_side_channel(s):
                continue
            h = s.config.env.get(SIDE_HOST, "localhost")
            if h not in LOOPBACK and h not in WILDCARD:
                continue
            seen.add(label(s))
            dflt = "" if SIDE_HOST in s.config.env else " (default)"
            ev = (
                f"{label(s)} and {label(other)} are on different hosts ({why}); {label(s)} "
                f"has {SIDE_HOST}={h}{dflt}, which it advertises to {label(other)} as the "
                "side-channel address"
            )
            if h in WILDCARD:
                yield finding(
                    "side-channel-host-loopback",
                    ev + f"; {h} binds every interface "
                    "but works for the peer only if a router replaces remote_host in "
                    "kv_transfer_params",
                    severity=W,
                )
            else:
                yield finding("side-channel-host-loopback", ev)


def _advertised(s: Server) -> bool:
    """Whether the peer connects to this server's side channel: the prefill's (pull mode:
    remote_host in kv_transfer_params), the decode's only in push mode (decode_host)."""
    return s.role == "prefill" or any("Push" in n for n in connector_names(s.config))
