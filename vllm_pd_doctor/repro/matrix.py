"""The release matrix and release bisection: the in-process repro, release by release.

Each release runs in pd-doctor's own environment of it (`envs`, provisioned with uv and cached).
Up to `jobs` workers provision environments and run repros at once (each repro is a child
process that mostly imports vLLM, so on a multi-core box `--jobs 2` takes well under the
sequential time); `--jobs 1` runs them one at a time, for timings not skewed by each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from vllm_pd_doctor.infra.errors import BadInput, FieldError, PdDoctorError
from vllm_pd_doctor.infra.progress import Progress, phase, quiet
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.facts.releases import version_key
from vllm_pd_doctor.repro import envs, inprocess
from vllm_pd_doctor.results.matrix import (
    FIRED,
    NOT_FIRED,
    NOT_PRESENT,
    NOT_PROVISIONED,
    NOT_PUBLISHED,
    NOT_RUN,
    NOT_RUNNABLE,
    RAN,
    BisectReport,
    BisectResult,
    BisectStep,
    MatrixCell,
    MatrixReport,
    ReleaseRow,
)
from vllm_pd_doctor.results.repro import ConnectorVerdict, ReproReport

__all__ = [  # the results live in results/matrix.py; re-exported for callers of this module
    "FIRED",
    "NOT_FIRED",
    "NOT_PRESENT",
    "NOT_PROVISIONED",
    "NOT_PUBLISHED",
    "NOT_RUN",
    "NOT_RUNNABLE",
    "RAN",
    "BisectReport",
    "BisectResult",
    "BisectStep",
    "MatrixCell",
    "MatrixReport",
    "ReleaseRow",
    "bisect_releases",
    "cells_of",
    "repro_options",
    "run_bisect",
    "run_matrix",
]


def repro_options(timeout: float = 600.0) -> inprocess.ReproOptions:
    """The scenario every matrix cell runs: all connectors, block 16, N = 33, kv_producer."""
    return inprocess.make_options(
        connector="all",
        block_size=16,
        prompt_len=None,
        mamba_cache_mode=None,
        kv_role="kv_producer",
        model=None,
        timeout=timeout,
    )


def cells_of(report: ReproReport) -> tuple[MatrixCell, ...]:
    """One cell per known connector: what the release's repro said about it."""
    by_key = {r.connector: r for r in report.results}
    return tuple(_cell(key, by_key.get(key)) for key in connectors.connector_keys())


def _cell(key: str, r: ConnectorVerdict | None) -> MatrixCell:
    if r is None:
        return MatrixCell(key, NOT_PRESENT)
    if r.error is not None:
        if r.error.kind == "connector_missing":
            return MatrixCell(key, NOT_PRESENT, reason=r.error.message)
        return MatrixCell(key, NOT_RUNNABLE, reason=f"{r.error.stage}: {r.error.message}")
    if not r.ran or r.assertion is None:
        return MatrixCell(key, NOT_RUNNABLE, reason="no verdict")
    t = r.truncation
    return MatrixCell(
        key,
        FIRED if r.assertion.fired else NOT_FIRED,
        hook=t.hook if t else None,
        call_site=t.call_site if t else None,
        assertion_location=r.assertion.location,
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, PdDoctorError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


class _Runner:
    """Provision then repro each release, up to `jobs` at once."""

    def __init__(self, package: str, *, jobs: int, timeout: float, progress: Progress):
        if jobs < 1:
            raise FieldError("jobs", "{flag} {value}: must be at least 1", value=jobs)
        self.package = package
        self.jobs = jobs
        self.opts = repro_options(timeout)
        self.progress = progress
        self._repro_slots = threading.BoundedSemaphore(jobs)

    def row(self, release: str) -> ReleaseRow:
        cached = envs.find(self.package, release) is not None
        t0 = time.perf_counter()
        try:
            env = envs.ensure_or_clean(self.package, release, progress=self.progress)
        except Exception as exc:
            self.progress(f"{release}: could not provision: {_reason(exc)}")
            return ReleaseRow(
                release,
                NOT_PROVISIONED,
                reason=_reason(exc),
                cached=False,
                provision_s=round(time.perf_counter() - t0, 2),
            )
        provision_s = round(time.perf_counter() - t0, 2)
        with self._repro_slots, phase(self.progress, f"{release}: running the repro"):
            t1 = time.perf_counter()
            try:
                report = inprocess.run_inprocess(str(env.python), self.opts, quiet)
            except Exception as exc:
                self.progress(f"{release}: could not run: {_reason(exc)}")
                return ReleaseRow(
                    release,
                    NOT_RUN,
                    reason=_reason(exc),
                    python=str(env.python),
                    cached=cached,
                    provision_s=provision_s,
                    repro_s=round(time.perf_counter() - t1, 2),
                )
            repro_s = round(time.perf_counter() - t1, 2)
        row = ReleaseRow(
            release,
            RAN,
            cells=cells_of(report),
            vllm_version=report.vllm.version,
            python=str(env.python),
            cached=cached,
            provision_s=provision_s,
            repro_s=repro_s,
        )
        fired = [c.connector for c in row.cells if c.status == FIRED]
        self.progress(
            f"{release}: {'FIRED for ' + ', '.join(fired) if fired else 'did not fire'} ({repro_s:.1f} s)"
        )
        return row

    def rows(self, releases: Sequence[str]) -> list[ReleaseRow]:
        with ThreadPoolExecutor(max_workers=min(self.jobs, max(1, len(releases)))) as pool:
            futures: list[Future[ReleaseRow]] = [pool.submit(self.row, r) for r in releases]
            return [f.result() for f in futures]


def run_matrix(
    package: str,
    releases: Sequence[str],
    *,
    unknown: Mapping[str, str] | None = None,
    jobs: int = 2,
    timeout: float = 600.0,
    releases_source: str | None = None,
    progress: Progress = quiet,
) -> MatrixReport:
    """Run the repro in every release (provisioning as needed).

    `unknown` maps releases that are not published to the reason shown in their row.
    """
    t0 = time.perf_counter()
    runner = _Runner(package, jobs=jobs, timeout=timeout, progress=progress)
    rows = runner.rows(list(releases))
    rows += [ReleaseRow(u, NOT_PUBLISHED, reason=why) for u, why in (unknown or {}).items()]
    rows.sort(key=lambda r: version_key(r.release))
    return MatrixReport(
        package=package,
        rows=tuple(rows),
        connectors=connectors.connector_keys(),
        releases_source=releases_source,
        wall_s=round(time.perf_counter() - t0, 2),
        jobs=jobs,
    )


# --- bisection -------------------------------------------------------------------------------


def bisect_releases(
    candidates: Sequence[str],
    probe: Callable[[str], BisectStep],
    *,
    prefer: Callable[[str], bool] = lambda _: False,
) -> BisectResult:
    """Binary search for the first release whose verdict differs from the oldest one's.

    Assumes one change in the range. `prefer` marks releases that are cheap to test (cached
    environments): among the untested releases strictly inside the current interval, a preferred
    one nearest the middle is tested before any other. Releases that cannot be tested are dropped
    from the search and reported in `untested_between` when they end up inside the answer.
    """
    cands = tuple(sorted(dict.fromkeys(candidates), key=version_key))
    if len(cands) < 2:
        raise BadInput(
            "bisect needs two different releases", hint="give --good and --bad releases that differ"
        )
    steps: list[BisectStep] = []

    def test(release: str) -> BisectStep:
        s = probe(release)
        steps.append(s)
        return s

    lo, hi = 0, len(cands) - 1
    for end in (lo, hi):
        if test(cands[end]).verdict is None:
            return BisectResult(cands, tuple(steps), None, None, endpoint_failed=cands[end])
    v_lo = steps[0].verdict
    if steps[0].verdict == steps[1].verdict:
        return BisectResult(cands, tuple(steps), cands[lo], cands[hi], same_verdict=True)
    skipped: set[int] = set()
    while True:
        inside = [i for i in range(lo + 1, hi) if i not in skipped]
        if not inside:
            break
        middle = (lo + hi) / 2
        cheap = [i for i in inside if prefer(cands[i])]
        mid = min(cheap or inside, key=lambda i: (abs(i - middle), i))
        s = test(cands[mid])
        if s.verdict is None:
            skipped.add(mid)
        elif s.verdict == v_lo:
            lo = mid
        else:
            hi = mid
    return BisectResult(
        cands, tuple(steps), cands[lo], cands[hi], untested_between=tuple(cands[i] for i in range(lo + 1, hi))
    )


def run_bisect(
    package: str,
    good: str,
    bad: str,
    candidates: Sequence[str],
    *,
    connector: str = connectors.DEFAULT_KEY,
    timeout: float = 600.0,
    only_cached: bool = False,
    releases_source: str | None = None,
    progress: Progress = quiet,
) -> BisectReport:
    """Bisect `candidates` (published releases between good and bad) on `connector` firing."""
    if connector not in connectors.connector_keys():
        raise FieldError(
            "connector",
            "{flag} {value}: unknown connector",
            value=connector,
            hint=f"use one of {', '.join(connectors.connector_keys())}",
        )
    t0 = time.perf_counter()
    runner = _Runner(package, jobs=1, timeout=timeout, progress=progress)
    rows: dict[str, ReleaseRow] = {}
    provisioned: list[str] = []

    def probe(release: str) -> BisectStep:
        was_cached = envs.find(package, release) is not None
        if only_cached and not was_cached:
            row = ReleaseRow(release, NOT_RUN, reason="not cached (--only-cached)", cached=False)
            rows[release] = row
            return BisectStep(release, None, row)
        progress(f"testing {release}")
        row = runner.row(release)
        rows[release] = row
        if not was_cached and row.status in (RAN, NOT_RUN):
            provisioned.append(release)
        cell = row.cell(connector)
        if row.status != RAN or cell is None or cell.status not in (FIRED, NOT_FIRED):
            return BisectStep(release, None, row)
        return BisectStep(release, cell.status == FIRED, row)

    def cached(release: str) -> bool:
        return envs.find(package, release) is not None

    result = bisect_releases(candidates, probe, prefer=cached)
    return BisectReport(
        package=package,
        connector=connector,
        good=good,
        bad=bad,
        only_cached=only_cached,
        result=result,
        provisioned=tuple(provisioned),
        releases_source=releases_source,
        wall_s=round(time.perf_counter() - t0, 2),
        rows=rows,
    )
