"""One input vocabulary at the command layer (issue 27 item 4): the shared options mean the same in
every command, one model resolver serves every command and both repro engines, the repro options
are one frozen `ReproRequest`, and the cores' `FieldError`s are worded with each command's flags."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from vllm_pd_doctor.commands import _common, check_config, report, repro, triage
from vllm_pd_doctor.formats import OutputFormat, emit, to_dict
from vllm_pd_doctor.infra.errors import BadInput, FieldError
from vllm_pd_doctor.knowledge.models import resolve as models
from vllm_pd_doctor.repro import inprocess
from vllm_pd_doctor.repro.live import options as live_options
from vllm_pd_doctor.repro.request import INPROCESS_ONLY, LIVE_ONLY, REQUEST_FIELDS, ReproRequest
from vllm_pd_doctor.results.envs import EnvChange

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "assets" / "models"
FIX = ROOT / "tests" / "fixtures" / "check_config"
HYB = FIX / "models" / "granite-hybrid"
KTC = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'


def test_family_name_resolves_for_every_command_and_a_path_wins(tmp_path: Path, monkeypatch) -> None:
    r = models.resolve("nemotron-h")
    assert r.source == "family" and r.directory == MODELS / "nemotron-h"
    assert "nemotron-h" in r.described
    # in-process repro: the same directory the live engine uses
    opts = inprocess.make_options(
        connector="nixl",
        block_size=None,
        prompt_len=None,
        mamba_cache_mode=None,
        kv_role="kv_producer",
        model="nemotron-h",
        timeout=60,
    )
    assert opts.model == (MODELS / "nemotron-h").resolve()
    assert live_options.live_model("nemotron-h") == MODELS / "nemotron-h"
    # a directory of that name where the user stands is theirs, not the bundled family
    own = tmp_path / "nemotron-h"
    own.mkdir()
    (own / "config.json").write_text((HYB / "config.json").read_text())
    monkeypatch.chdir(tmp_path)
    assert models.resolve("nemotron-h").source == "directory"


def test_launch_command_models_are_never_taken_for_a_family() -> None:
    with pytest.raises(models.ModelNotResolved) as exc:
        models.resolve("jamba", what="prefill model", bundled=False)
    assert "bundled family" not in (exc.value.hint or "")
    with pytest.raises(models.ModelNotResolved) as exc:
        models.resolve("no-such-family")
    assert "nemotron-h" in (exc.value.hint or "")


def test_live_engine_takes_a_hugging_face_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live engine resolves an id like the other commands (here: the local HF cache, offline):
    the directory of its config.json, where a tiny model of that family is made from."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(ROOT / "tests" / "fixtures" / "hf-cache"))
    d = live_options.live_model("ibm-granite/granite-4.0-h-tiny")
    assert (d / "config.json").is_file()
    assert d == models.resolve("ibm-granite/granite-4.0-h-tiny").directory
    lo = live_options.from_request(ReproRequest(engine="live", model="ibm-granite/granite-4.0-h-tiny"))
    assert lo.model == d
    # the tiny model made from it is named after the model, not the cache's snapshot revision
    from vllm_pd_doctor.repro.live import engines

    assert engines.family_cache_dir(d).name.startswith("granite-4.0-h-tiny-")


def test_request_fields_are_the_repro_options() -> None:
    """Every `ReproRequest` field is a repro option (declared once, in `repro.OPTIONS`), and the
    engine-only fields are fields."""
    assert set(REQUEST_FIELDS) <= set(repro.OPTIONS)
    assert set(INPROCESS_ONLY) | set(LIVE_ONLY) <= set(REQUEST_FIELDS)
    assert ReproRequest().scenario == "n1-truncation"
    req = repro.request_of({**{k: d for k, (_a, d) in repro.OPTIONS.items()}, "model": Path("nemotron-h")})
    assert req == ReproRequest(model="nemotron-h")
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.model = "x"  # type: ignore[misc]


def test_field_errors_are_worded_with_the_commands_flags() -> None:
    req = ReproRequest(blocks=0)
    with pytest.raises(FieldError) as exc:
        inprocess.options(req)
    assert exc.value.fields == ("blocks",) and exc.value.value == 0
    worded = exc.value.worded({"blocks": "--blocks-of-W"})
    assert worded.message.startswith("--blocks-of-W 0:") and "--blocks-of-W 2" in (worded.hint or "")
    assert repro.FLAGS["confirm_remote"] == "--i-understand-this-may-kill-prefill"
    assert repro.FLAGS["fmt"] == "--format"
    with pytest.raises(BadInput) as bad, _common.worded(repro.FLAGS):
        inprocess.options(ReproRequest(prompt_len=9, blocks=2))
    assert not isinstance(bad.value, FieldError)
    assert bad.value.message == "--prompt-len and --blocks both given"


def test_shared_options_are_declared_once() -> None:
    """--prefill-cmd, --decode-cmd, --config and --model: the same declaration in every command."""
    import inspect

    for cmd in (check_config.check_config, triage.triage, report.report, repro.repro):
        params = inspect.signature(cmd).parameters
        for name, opt in (
            ("prefill_cmd", _common.PrefillCmdOpt),
            ("decode_cmd", _common.DecodeCmdOpt),
            ("config", _common.ConfigOpt),
            ("model", _common.ModelOpt),
        ):
            if name in params:
                ann = params[name].annotation
                got = eval(ann, vars(inspect.getmodule(cmd))) if isinstance(ann, str) else ann
                assert got == opt, (cmd, name)


def test_config_and_commands_merge_the_same_way_everywhere(cli, tmp_path: Path) -> None:
    """One rule: --prefill-cmd replaces the --config file's prefill server (check-config, report)."""
    cfg = str(FIX / "multihost_nixl.yaml")
    cmd = f"vllm serve {HYB} --port 8100 --kv-transfer-config '{KTC}'"
    env = {"HF_HUB_OFFLINE": "1"}
    check = cli("check-config", "--config", cfg, "--prefill-cmd", cmd, "--format", "json", env=env)
    assert check.returncode in (0, 1), check.stderr
    servers = {s["role"]: s for s in json.loads(check.stdout)["servers"]}
    assert servers["prefill"]["model"] == str(HYB)
    assert servers["decode"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    out = tmp_path / "bundle"
    rep = cli("report", "--config", cfg, "--prefill-cmd", cmd, "--no-repro", "-q", "-o", str(out), env=env)
    assert rep.returncode in (0, 1), rep.stderr
    doc = json.loads((out / "report.json").read_text())
    assert doc["check_config"]["collected"], doc["check_config"]
    assert len(doc["check_config"]["value"]["servers"]) == 2


def test_to_dict_is_what_emit_writes() -> None:
    change = EnvChange("rm", ("/x/\x1b[31mred",))
    assert to_dict(change) == json.loads(emit(change, OutputFormat.json))


@pytest.mark.vllm
def test_inprocess_repro_takes_a_family_name(python_buggy, repro_json) -> None:
    """`pd-doctor repro --model nemotron-h` on the in-process engine (it said "no such file or
    directory" before): the bundled family's config, #53514 fires on the buggy release."""
    rc, doc, err = repro_json(python_buggy, "--model", "nemotron-h", "--block-size", "16")
    assert rc == 1, err
    assert doc["assertion"]["matches_53514"] is True
    assert (
        doc["config"]["model"].endswith("NemotronHForCausalLM")
        or "nemotron" in doc["config"]["model"].lower()
    )
    assert doc["config"]["prompt_len"] == doc["config"]["block_size"] + 1
