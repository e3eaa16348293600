"""`pd-doctor repro --engine live`: a real colocated P/D pair over NIXL (being built)."""

from __future__ import annotations

from collections.abc import Callable

from vllm_pd_doctor.errors import CouldNotRun
from vllm_pd_doctor.inprocess import ReproOptions
from vllm_pd_doctor.model import ReproReport


def run_live(python: str, opts: ReproOptions, progress: Callable[[str], None]) -> ReproReport:
    raise CouldNotRun("the live engine is not available in this build",
                      hint="use the default --engine inprocess")
