"""The hotfix registry as invllm/ code imports it (`from . import hotfixes`).

The registry itself is `vllm_pd_doctor/knowledge/facts/hotfixes.py` (stdlib only). In the tool process this
module *is* that one (it replaces itself in `sys.modules`); in the target interpreter and in the
installed hotfix plugin `targetrun.target_sources()` ships the knowledge file under this name.
"""

from __future__ import annotations

import sys

from vllm_pd_doctor.knowledge.facts import hotfixes as _registry
from vllm_pd_doctor.knowledge.facts.hotfixes import *  # noqa: F403 - the names mypy sees here

sys.modules[__name__] = _registry
