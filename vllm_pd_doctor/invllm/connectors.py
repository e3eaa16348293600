"""The connector registry as invllm/ code imports it (`from . import connectors`).

The registry itself is `vllm_pd_doctor/knowledge/facts/connectors.py` (stdlib + `packaging`). In the tool
process this module *is* that one (it replaces itself in `sys.modules`, so `register` and the
entries are shared); in the target interpreter `targetrun.target_sources()` ships the knowledge
file under this name, so the registry has one source and invllm/ stays stdlib + vLLM.
"""

from __future__ import annotations

import sys

from vllm_pd_doctor.knowledge.facts import connectors as _registry
from vllm_pd_doctor.knowledge.facts.connectors import *  # noqa: F403 - the names mypy sees here

sys.modules[__name__] = _registry
