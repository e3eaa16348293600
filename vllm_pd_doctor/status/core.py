"""`pd-doctor status`: read every engine twice `interval` apart, probe the NIXL side channels, judge.

Endpoints come as URLs (`--prefill-url` / `--decode-url`, any number: xPyD) or from the launch as
check-config reads it (the one reader of a deployment: `deployment.reader`). Read-only throughout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.facts import metrics as km
from vllm_pd_doctor.results.status import EngineStatus, HandshakeView, StatusReport
from vllm_pd_doctor.status import compare, downed, findings, scenarios, scrape, sidechannel
from vllm_pd_doctor.status.window import Window

SIDE_PORT_ENV = "VLLM_NIXL_SIDE_CHANNEL_PORT"
SIDE_HOST_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST"


@dataclass(frozen=True)
class Endpoint:
    role: str
    url: str
    side: tuple[str, int] | None = None
    """The NIXL side channel (host, port); None: not known, not probed."""
    tp: int | None = None


def from_launch(
    config: Path | None, prefill_cmd: str | None, decode_cmd: str | None, python: str | None
) -> list[Endpoint]:
    """Endpoints from the launch commands: host (--host, else 127.0.0.1), --port (vLLM's 8000),
    the side channel from VLLM_NIXL_SIDE_CHANNEL_HOST/PORT where the launch sets them."""
    from vllm_pd_doctor.deployment.reader import gather_servers

    servers, _ = gather_servers(prefill_cmd, decode_cmd, config, python=python)
    out = []
    for s in servers:
        if s.role not in ("prefill", "decode"):
            continue
        cfg = s.config
        host = cfg.host if cfg.host and cfg.host not in ("0.0.0.0", "::") else "127.0.0.1"
        port = cfg.port or 8000
        side = None
        sp = cfg.env.get(SIDE_PORT_ENV)
        if sp and sp.isdigit():
            side = (cfg.env.get(SIDE_HOST_ENV) or host, int(sp))
        out.append(Endpoint(s.role, f"http://{host}:{port}", side, cfg.tensor_parallel_size))
    if not any(e.role == "prefill" for e in out) or not any(e.role == "decode" for e in out):
        raise BadInput(
            "the launch has no prefill and decode server pair", hint="give --prefill-url and --decode-url"
        )
    return out


def same_release(python_vllm: Path | None, version: str | None) -> bool:
    """Whether --python's vLLM is the release this engine reports (only then is its source used)."""
    if python_vllm is None or not version:
        return False
    mine = km.installed_version(python_vllm)
    return mine is not None and mine.split("+")[0] == version.split("+")[0]


def _release(sc: scrape.Scrape, python_vllm: Path | None) -> km.ReleaseMetrics | None:
    if python_vllm is not None and same_release(python_vllm, sc.version):
        return km.from_source(python_vllm, sc.version or "installed")
    return km.for_release(sc.version)


def _probe_side(e: Endpoint, timeout: float) -> sidechannel.ProbeAnswer | None:
    if e.side is None:
        return None
    host, port = e.side
    return sidechannel.probe(host, port, timeout_s=timeout)


def _warm(
    endpoints: list[Endpoint], first: list[scrape.Scrape], python_vllm: Path | None
) -> dict[str | None, km.ReleaseMetrics | None]:
    """What the judgement and the rendering need, read while the interval runs (so the time after
    the second reading is the judgement alone): each release's metric list, the prefill release's
    source (#53514), the scenario data, the renderer's modules."""
    import rich.console
    import rich.panel
    import rich.table  # noqa: F401 - imported for their import time only

    from vllm_pd_doctor.knowledge import exposure  # noqa: F401
    from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx

    sx.releases()
    releases = {}
    for e, sc in zip(endpoints, first, strict=True):
        if sc.error:
            continue
        releases[sc.version] = _release(sc, python_vllm)
        if e.role == "prefill":
            compare.prepare(sc.version, python_vllm)
    return releases


def _read_again(c: httpx.Client, e: Endpoint) -> scrape.Scrape:
    """The second reading; one more try after a failure (a busy engine), never more."""
    sc = scrape.read(c, e.url, metrics_only=True)
    if sc.error:
        time.sleep(0.5)
        sc = scrape.read(c, e.url, metrics_only=True)
    return sc


def gather(
    endpoints: list[Endpoint],
    interval: float,
    *,
    timeout: float = 5.0,
    python_vllm: Path | None = None,
    progress: Callable[[str], None] = lambda s: None,
    on_first_read: Callable[[], None] | None = None,
) -> list[Window]:
    """Every engine read, the side channels probed (in the interval), every engine read again.

    Never raises for an engine that does not answer: its window carries `down` (hung, dead, not
    vLLM) and the others are judged. `on_first_read` is called once every engine has been read the
    first time: what happens after it falls inside the window (a test starts its traffic there)."""
    tls = any(e.url.startswith("https:") for e in endpoints)
    workers = min(16, 2 * len(endpoints))
    with scrape.client(timeout, tls=tls) as c, ThreadPoolExecutor(max_workers=workers) as pool:
        t0 = time.monotonic()
        first = list(pool.map(lambda e: scrape.read(c, e.url), endpoints))
        for e, s in zip(endpoints, first, strict=True):
            if s.error:
                progress(f"{e.role} {e.url}: {s.error}")
        if on_first_read is not None:
            on_first_read()
        # the side channels are asked while the interval runs: a silent one costs no time beyond it
        probes = [
            None if sc.error else pool.submit(_probe_side, e, timeout)
            for e, sc in zip(endpoints, first, strict=True)
        ]
        releases = _warm(endpoints, first, python_vllm)
        rest = interval - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
        second = list(
            pool.map(
                lambda ea: ea[1] if ea[1].error else _read_again(c, ea[0]), zip(endpoints, first, strict=True)
            )
        )
        sides = [None if f is None else f.result() for f in probes]
    windows = []
    for e, a, b, sp in zip(endpoints, first, second, sides, strict=True):
        if b is not a:
            b.version, b.models, b.model_root, b.health = a.version, a.models, a.model_root, a.health
        if b.error and not a.error:
            b.error = f"stopped answering during the window: {b.error}"
        w = Window(e.role, a, b, None if b.error else releases.get(a.version))
        if e.side and sp is not None:
            w.side_address = f"{e.side[0]}:{e.side[1]}"
            w.handshake, w.side_error, frames = sp
            w.side_frames = tuple(frames)
        elif e.side:
            w.side_address = f"{e.side[0]}:{e.side[1]}"
        windows.append(w)
    return windows


def judge(
    windows: list[Window],
    endpoints: list[Endpoint],
    *,
    interval: float,
    elapsed: float,
    python_vllm: Path | None = None,
    timeout: float = 5.0,
) -> StatusReport:
    """Findings from the engines that answered, and one finding per engine that did not."""
    up = [w for w in windows if not w.down]
    p = [w for w in up if w.role == "prefill"]
    d = [w for w in up if w.role == "decode"]
    found = [downed.finding(w, timeout) for w in windows if w.down]
    found += findings.evaluate(p, d)
    found += [downed.side_finding(w, timeout) for w in up if w.side_address and w.handshake is None]
    rows = []
    tps = {id(w): e.tp for w, e in zip(windows, endpoints, strict=True)}
    for pw in p:
        for dw in d:
            cmp = compare.comparisons(pw, dw, (tps[id(pw)], tps[id(dw)]))
            rows.extend(cmp if len(p) * len(d) == 1 else [])
            found.extend(compare.handshake_findings(pw, dw, cmp))
    for pw in p:
        found.extend(compare.exposure_53514(pw, python_vllm))
    for w in (*p, *d):
        found.extend(scenarios.scenario_exposure(w))
    order = {"error": 0, "warning": 1, "info": 2}
    found.sort(key=lambda f: order.get(f.severity, 3))
    seen = [t for t in (w.traffic() for w in up) if t is not None]
    return StatusReport(
        engines=tuple(_engine(w) for w in windows),
        comparisons=tuple(rows),
        findings=tuple(found),
        interval_s=round(interval, 3),
        elapsed_s=round(elapsed, 3),
        notes=tuple(_notes(windows, up, any(seen) if seen else None)),
        window_s=round(max((w.interval for w in up), default=0.0), 1),
        traffic=any(seen) if seen else None,
    )


def _engine(w: Window) -> EngineStatus:
    if w.down:
        return EngineStatus(
            role=w.role,
            url=w.after.url,
            health=w.before.health,
            version=w.before.version,
            model=w.before.model_root or (w.before.models[0] if w.before.models else None),
            block_size=None,
            metrics_from=None,
            not_exposed=(),
            handshake=None,
            down=w.down,
            error=w.after.error,
        )
    info = w.after.info.get("vllm:cache_config_info") or w.before.info.get("vllm:cache_config_info") or {}
    bs = info.get("block_size")
    not_exposed = tuple(
        n for n in km.USED if w.release is not None and not w.release.exposes(n) and n not in km.OPTIONAL
    )
    hv = None
    if w.side_address is not None:
        hs = w.handshake
        hv = HandshakeView(
            address=w.side_address,
            compatibility_hash=hs.compatibility_hash if hs else None,
            metadata=dict(hs.metadata) if hs else {},
            fields=hs.fields if hs else (),
            error=w.side_error,
        )
    figures = []
    for name, kind in ((km.PROMPT_TOKENS, "counter"), (km.XFER_TIME, "histogram"), (km.FAILED, "counter")):
        ev = w.ev(name, kind)
        figures.append((ev.metric, ev.value))
    for name in (km.KV_USAGE, km.RUNNING, km.WAITING):
        v = w.now(name)
        figures.append((name, "-" if v is None else f"{v:g}"))
    return EngineStatus(
        role=w.role,
        url=w.after.url,
        health=w.after.health,
        version=w.after.version,
        model=w.after.model_root or (w.after.models[0] if w.after.models else None),
        block_size=int(bs) if bs and bs.isdigit() else None,
        metrics_from=(f"vLLM {w.release.version} ({w.release.source})" if w.release else None),
        not_exposed=not_exposed,
        handshake=hv,
        key_values=tuple(figures),
    )


def _notes(windows: list[Window], up: list[Window], traffic: bool | None) -> list[str]:
    out = []
    if traffic is False:
        out.append(
            "no traffic in this window (no request taken or finished on any engine that answered): "
            "nothing moved, so the traffic checks (disaggregation, transfers, lease expiry) had "
            "nothing to judge; the handshake and exposure checks still hold"
        )
    out += findings.history(up)
    if not any(w.side_address for w in windows):
        out.append(
            "no NIXL side channel given: handshakes not compared (--prefill-side-channel / "
            "--decode-side-channel HOST:PORT, or the launch's VLLM_NIXL_SIDE_CHANNEL_PORT)"
        )
    for w in up:
        if w.release is None:
            out.append(
                f"{w.label}: vLLM {w.after.version or '?'} is not in pd-doctor's metric index "
                f"({', '.join(km.known_releases())}); metrics are read as present, absent ones as absent "
                "(give --python for this release's own list)"
            )
    return out


def run_status(
    endpoints: list[Endpoint],
    interval: float,
    *,
    timeout: float = 5.0,
    python_vllm: Path | None = None,
    progress: Callable[[str], None] = lambda s: None,
) -> StatusReport:
    t0 = time.monotonic()
    windows = gather(endpoints, interval, timeout=timeout, python_vllm=python_vllm, progress=progress)
    return judge(
        windows,
        endpoints,
        interval=interval,
        elapsed=time.monotonic() - t0,
        python_vllm=python_vllm,
        timeout=timeout,
    )
