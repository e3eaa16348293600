"""Read one vLLM engine over HTTP, read-only: /health, /version, /v1/models and /metrics.

httpx with short timeouts and no retries; `PD_DOCTOR_STATUS_TOKEN` (else `VLLM_API_KEY`) is sent as a
bearer token and never printed; `PD_DOCTOR_STATUS_CA` names a CA bundle, `PD_DOCTOR_STATUS_INSECURE=1`
turns TLS verification off. The exposition text is parsed by prometheus_client's own parser.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

TOKEN_ENVS = ("PD_DOCTOR_STATUS_TOKEN", "VLLM_API_KEY")
MAX_METRICS_BYTES = 16 * 1024 * 1024

Sample = tuple[str, tuple[tuple[str, str], ...]]
"""(sample name as exposed, sorted labels without model_name/engine)."""
SHARED_LABELS = {"model_name", "engine"}


@dataclass
class Scrape:
    """What one engine answered at one moment (mutable while it is gathered)."""

    url: str
    at: float
    health: int | None = None
    version: str | None = None
    models: tuple[str, ...] = ()
    model_root: str | None = None
    samples: dict[Sample, float] = field(default_factory=dict)
    info: dict[str, dict[str, str]] = field(default_factory=dict)
    """Info-style gauges (`vllm:cache_config_info`): name -> their labels."""
    error: str | None = None
    """Why the engine could not be read (connection refused, not vLLM); None when it was."""
    down: str | None = None
    """What kind of failure `error` is: `hung` (no answer within the timeout), `dead` (the
    connection failed: nothing listens there), `not-vllm` (an answer that is not a vLLM server's),
    `refused` (401/403: a token is needed)."""
    metrics_text: str | None = None


def client(timeout: float, *, tls: bool = True) -> httpx.Client:
    """`tls` False: no https URL to read, so no CA bundle is loaded (about 0.1 s of start-up)."""
    headers = {}
    token = next((os.environ[e] for e in TOKEN_ENVS if os.environ.get(e)), None)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    verify: Any = True
    if os.environ.get("PD_DOCTOR_STATUS_INSECURE") == "1" or not tls:
        verify = False
    elif os.environ.get("PD_DOCTOR_STATUS_CA"):
        verify = os.environ["PD_DOCTOR_STATUS_CA"]
    return httpx.Client(timeout=timeout, headers=headers, verify=verify, trust_env=False)


def _why(exc: httpx.HTTPError) -> tuple[str, str]:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout | httpx.ReadTimeout | httpx.PoolTimeout | httpx.WriteTimeout):
        return "no answer within the timeout", "hung"
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed ({text})", "dead"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer within the timeout", "hung"
    return f"{type(exc).__name__}: {text}", "dead"


KEEP_PREFIXES = ("vllm:nixl_", "vllm:mooncake_")
"""Families kept whole: their presence tells the connector (besides the metrics `USED`)."""
_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def _wanted(line: str) -> bool:
    """A line of a family status reads (comment lines by the family they describe)."""
    from vllm_pd_doctor.knowledge.facts.metrics import USED

    if line.startswith("#"):
        parts = line.split(" ", 3)
        name = parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE", "UNIT") else ""
    else:
        name = line.split("{", 1)[0].split(" ", 1)[0]
    if name.startswith(KEEP_PREFIXES) or name in USED:
        return True
    return any(name.endswith(s) and name[: -len(s)] in USED for s in _SUFFIXES)


def relevant(text: str) -> str:
    """Only the families status reads (the exposition of a busy engine has hundreds of others:
    histogram buckets, Python process metrics), so prometheus_client's parser, pure Python, reads a
    fraction of it. Lines stay whole and in order: the result is exposition text too."""
    return "\n".join(ln for ln in text.splitlines() if ln and _wanted(ln)) + "\n"


def parse_metrics(
    text: str, *, all_families: bool = False
) -> tuple[dict[Sample, float], dict[str, dict[str, str]]]:
    """Samples summed over model_name/engine (one engine's data-parallel ranks add up), and the
    labels of info gauges, of the families status reads (`all_families`: every one). Raises
    ValueError on text that is not the exposition format."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[Sample, float] = {}
    info: dict[str, dict[str, str]] = {}
    if not all_families:
        _check_format(text)
        text = relevant(text)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_info"):
                info[s.name] = {k: v for k, v in s.labels.items() if k not in SHARED_LABELS}
                continue
            if s.name.endswith("_created"):
                continue
            key: Sample = (
                s.name,
                tuple(sorted((k, v) for k, v in s.labels.items() if k not in SHARED_LABELS)),
            )
            samples[key] = samples.get(key, 0.0) + float(s.value)
    return samples, info


def _check_format(text: str) -> None:
    """What the filter would hide: a body that is not exposition text at all (an HTML page)."""
    for ln in text.splitlines()[:50]:
        s = ln.strip()
        if s and not s.startswith("#") and not (s[0].isalpha() or s[0] in "_:"):
            raise ValueError(f"not exposition text: {s[:40]!r}")
    head = text.lstrip()[:200].lower()
    if head.startswith(("<", "{", "[")):
        raise ValueError(f"not exposition text: {head[:40]!r}")


def _json(c: httpx.Client, url: str) -> Any:
    r = c.get(url)
    if r.status_code != 200:
        return None
    try:
        return r.json()
    except ValueError:
        return None


def read(c: httpx.Client, base: str, *, metrics_only: bool = False) -> Scrape:
    """One engine now. Never raises: `error` says what went wrong."""
    sc = Scrape(url=base, at=time.monotonic())
    try:
        if not metrics_only:
            sc.health = c.get(f"{base}/health").status_code
            ver = _json(c, f"{base}/version")
            sc.version = str(ver["version"]) if isinstance(ver, dict) and "version" in ver else None
            models = _json(c, f"{base}/v1/models")
            data = models.get("data") if isinstance(models, dict) else None
            if isinstance(data, list):
                sc.models = tuple(str(m.get("id")) for m in data if isinstance(m, dict))
                roots = [m.get("root") for m in data if isinstance(m, dict) and m.get("root")]
                sc.model_root = str(roots[0]) if roots else None
        sc.at = time.monotonic()
        r = c.get(f"{base}/metrics")
    except httpx.HTTPError as exc:
        sc.error, sc.down = _why(exc)
        return sc
    if r.status_code in (401, 403):
        sc.error = (
            f"/metrics answered HTTP {r.status_code} (set PD_DOCTOR_STATUS_TOKEN for a secured endpoint)"
        )
        sc.down = "refused"
        return sc
    if r.status_code != 200 or len(r.content) > MAX_METRICS_BYTES:
        sc.error, sc.down = f"/metrics answered HTTP {r.status_code}", "not-vllm"
        return sc
    try:
        sc.samples, sc.info = parse_metrics(r.text)
    except ValueError as exc:
        sc.error, sc.down = f"/metrics is not Prometheus text ({str(exc)[:80]})", "not-vllm"
        return sc
    sc.metrics_text = r.text
    if "vllm:" not in r.text and not sc.version:
        sc.error, sc.down = "not a vLLM server (no /version and no vllm: metrics)", "not-vllm"
    return sc


def total(sc: Scrape, name: str, **labels: str) -> float | None:
    """The sum of `name`'s samples whose labels include `labels`; None when it has none."""
    found = [v for (n, lab), v in sc.samples.items() if n == name and set(labels.items()) <= set(lab)]
    return sum(found) if found else None


def names(sc: Scrape) -> Iterable[str]:
    return {n for n, _ in sc.samples}
