"""`pd-doctor status`: is a running P/D deployment healthy? Read-only, from its metrics and NIXL side channel.

`scrape` (HTTP: /health, /version, /v1/models, /metrics), `sidechannel` (the NIXL handshake metadata,
asked the way a peer asks), `window` (one engine over the interval: deltas), `findings` (what the
metrics say), `compare` (prefill vs decode handshakes; #53514 exposure), `core` (gather and judge),
`types` (the frozen result).
"""

from __future__ import annotations

from vllm_pd_doctor.results.status import StatusReport
from vllm_pd_doctor.status.core import Endpoint, from_launch, run_status

__all__ = ["Endpoint", "StatusReport", "from_launch", "run_status"]
