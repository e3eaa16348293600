"""The entries of the failure-class catalogue (see `catalogue.py`); a new class is one entry.

Every entry has a real public log in tests/fixtures/triage/ (SOURCES names the thread and the
established cause) and a lookalike it must not claim; `vllm` lines carry the literal that vLLM's
source holds for them, checked against the installed releases by a `-m vllm` test.
"""

from __future__ import annotations

from vllm_pd_doctor.triage.catalogue import FailureClass
from vllm_pd_doctor.triage.entries_2026 import CLASSES_2026
from vllm_pd_doctor.triage.entries_engine import ENGINE_CLASSES
from vllm_pd_doctor.triage.entries_transport import TRANSPORT_CLASSES

CLASSES: tuple[FailureClass, ...] = (*ENGINE_CLASSES, *TRANSPORT_CLASSES, *CLASSES_2026)
"""Every failure class, in the order verdicts of equal confidence are listed."""
