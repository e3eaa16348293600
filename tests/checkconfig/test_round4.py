"""check-config round 4 (issue 33): the kubelet's $(VAR) expansion, non-engine containers, flag
arity from each release's own parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_pd_doctor.checkconfig import core
from vllm_pd_doctor.deployment import parse, reader
from vllm_pd_doctor.deployment.parse import k8s_env
from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.readers import serve_flags

KTC = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def _expand(text: str, env: dict[str, str]) -> str:
    return k8s_env.expand(text, env.get)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("--kv-transfer-config=$(KTC)", f"--kv-transfer-config={KTC}"),  # defined
        ("$(UNDEFINED)", "$(UNDEFINED)"),  # undefined: as written
        ("$$(KTC)", "$(KTC)"),  # escaped
        ("$$$(KTC)", f"${KTC}"),  # escaped $, then a reference
        ("a-$(KTC", "a-$(KTC"),  # unclosed: as written
        ("$(KTC", "$(KTC"),
        ("$x $1 $", "$x $1 $"),  # a $ before anything else, and a trailing $
        ("$()", "$()"),  # the empty name is not defined
        ("$(A)$(B)", "1$(B)"),
        ("$(A )", "$(A )"),  # the name is everything up to `)`: `A ` is not defined
    ],
)
def test_kubelet_expansion_rules(text: str, want: str) -> None:
    assert _expand(text, {"KTC": KTC, "A": "1"}) == want


def _pod(env: str, args: str, extra: str = "") -> str:
    return f"""{extra}
apiVersion: v1
kind: Pod
metadata: {{name: vllm-prefill}}
spec:
  containers:
  - name: vllm
    image: vllm/vllm-openai:v0.28.0
    command: [vllm, serve]
    args: {args}
    env:
{env}
"""


def _load(text: str, tmp_path: Path, **kw: object) -> tuple[list[parse.LaunchCommand], list[str]]:
    p = tmp_path / "deploy.yaml"
    p.write_text(text, encoding="utf-8")
    others: list[str] = []
    return list(parse.load_config_file(p, others=others, **kw)), others  # type: ignore[arg-type]


def test_env_value_and_configmap_key(tmp_path: Path) -> None:
    cm = f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: pd}}
data:
  kv: '{KTC}'
---"""
    env = """    - {name: M, value: Qwen/Qwen3-0.6B}
    - name: KTC
      valueFrom: {configMapKeyRef: {name: pd, key: kv}}
    - {name: NAME_ARG, value: "--served-model-name=$(N)"}
    - {name: N, value: "qwen"}"""
    (cmd,), _ = _load(_pod(env, '["$(M)", "--kv-transfer-config=$(KTC)", "$(NAME_ARG)"]', cm), tmp_path)
    s = parse.parse_launch(cmd)
    assert s.model == "Qwen/Qwen3-0.6B" and s.kv_transfer_config == {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_both",
    }
    # an env value only sees the variables defined before it: N came later
    assert "--served-model-name=$(N)" in cmd.args


def test_envfrom_with_prefix_and_escape(tmp_path: Path) -> None:
    cm = f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: pd}}
data: {{KTC: '{KTC}'}}
---"""
    text = _pod(
        "    - {name: X, value: x}",
        '["M", "--kv-transfer-config=$(VLLM_KTC)", "--served-model-name=$$(X)"]',
        cm,
    )
    text = text.replace("    env:\n", "    envFrom: [{prefix: VLLM_, configMapRef: {name: pd}}]\n    env:\n")
    (cmd,), _ = _load(text, tmp_path)
    s = parse.parse_launch(cmd)
    assert s.kv_transfer_config and s.kv_transfer_config["kv_role"] == "kv_both"
    assert "--served-model-name=$(X)" in cmd.args  # $$ escapes the reference


def test_secret_is_a_known_unknown(tmp_path: Path) -> None:
    env = """    - name: KTC
      valueFrom: {secretKeyRef: {name: pd-secret, key: kv}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}"""
    (cmd,), _ = _load(_pod(env, '["M", "--kv-transfer-config", "$(KTC)", "--host", "$(POD_IP)"]'), tmp_path)
    assert dict(cmd.unknowns) == {
        "KTC": "Secret pd-secret key kv (not in the files)",
        "POD_IP": "fieldRef:status.podIP",
    }
    p = tmp_path / "deploy.yaml"
    with pytest.raises(BadInput, match=r"\$\(KTC\) comes from Secret pd-secret key kv") as ei:
        reader.gather_servers(None, None, p)
    assert "--set KTC=VALUE" in (ei.value.hint or "")
    notes: list[str] = []
    servers, _ = reader.gather_servers(None, None, p, variables={"KTC": KTC}, notes=notes)
    assert servers[0].config.kv_transfer_config is not None
    assert any("$(POD_IP) comes from fieldRef:status.podIP" in n for n in notes)


def test_secret_in_the_files_is_read(tmp_path: Path) -> None:
    sec = f"""apiVersion: v1
kind: Secret
metadata: {{name: pd-secret}}
stringData: {{kv: '{KTC}'}}
---"""
    env = """    - name: KTC
      valueFrom: {secretKeyRef: {name: pd-secret, key: kv}}"""
    (cmd,), _ = _load(_pod(env, '["M", "--kv-transfer-config", "$(KTC)"]', sec), tmp_path)
    assert not cmd.unknowns and parse.parse_launch(cmd).kv_transfer_config is not None


def test_frontend_and_init_containers_are_not_engines(tmp_path: Path) -> None:
    text = """apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: t}
spec:
  services:
    Frontend:
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
          args: ["-m", "dynamo.frontend", "--router-mode", "direct"]
    VllmPrefillWorker:
      subComponentType: prefill
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
          command: ["python3", "-m", "dynamo.vllm"]
          args: ["--model", "Qwen/Qwen3-0.6B", "--is-prefill-worker"]
        initContainers:
          - name: wait
            image: busybox
            command: ["sh", "-c", "until nslookup etcd; do sleep 2; done"]
"""
    cmds, others = _load(text, tmp_path)
    assert [c.role for c in cmds] == ["prefill"]
    assert len(others) == 2 and "python -m dynamo.frontend" in others[0]
    assert "(init container)" in others[1]


def test_vllm_image_entrypoint_still_an_engine(tmp_path: Path) -> None:
    """The lookalike: vLLM's own image runs `vllm serve` with the args alone."""
    text = _pod("    - {name: X, value: x}", f"[M, --kv-transfer-config, '{KTC}']").replace(
        "    command: [vllm, serve]\n", ""
    )
    cmds, others = _load(text, tmp_path)
    assert len(cmds) == 1 and not others


def test_boolean_then_valued_flag_without_python() -> None:
    """The issue's launch: a BooleanOptionalAction flag of 0.28/0.32 followed by a valued flag."""
    s = parse.parse_command(
        "vllm serve M --enable-mamba-cache-stochastic-rounding --mamba-cache-philox-rounds 5 --port 8100",
        role="prefill",
    )
    assert s.values["enable-mamba-cache-stochastic-rounding"] is True
    assert s.values["mamba-cache-philox-rounds"] == 5 and s.port == 8100 and not s.unknown_flags


def test_unknown_flag_of_a_release_is_a_finding_not_a_refusal() -> None:
    table = serve_flags.for_release("0.28.0")
    assert table is not None
    s = parse.parse_command("vllm serve M --frobnicate-kv 3 --port 1", role="prefill", table=table)
    assert s.model == "M" and s.unknown_flags == ("--frobnicate-kv",) and s.flags_release == "0.28.0"
    # argparse's abbreviations are accepted, as vLLM's parser accepts them
    s = parse.parse_command("vllm serve M --enable-chunked-prefil --port 1", role="prefill", table=table)
    assert not s.unknown_flags and s.values["enable-chunked-prefill"] is True


def test_stored_tables_cover_the_provisioned_releases() -> None:
    kept = serve_flags.stored()
    assert {"0.28.0", "0.32.0"} <= set(kept)
    for v in ("0.28.0", "0.32.0"):
        t = serve_flags.for_release(v)
        assert t is not None and t.kind("enable-prefix-caching") == serve_flags.BOOL
        assert t.kind("port") == serve_flags.INT and t.kind("kv-transfer-config") == serve_flags.JSON


@pytest.mark.vllm
@pytest.mark.parametrize("fixture", ["python_buggy", "python_fixed"])
def test_every_boolean_flag_from_the_release_parser(fixture: str, request: pytest.FixtureRequest) -> None:
    """Ask the release's own parser (make_arg_parser in its interpreter) and check that pd-doctor's
    kept table reads every boolean as a boolean (and every valued flag as taking a value), and that
    each boolean followed by a valued flag parses without a refusal."""
    python = request.getfixturevalue(fixture)
    run = targetrun.run_module(python, "serve_parser", [], timeout=300)
    live = run.answer["flags"]
    table = serve_flags.for_python(python)
    assert table.release == run.answer["vllm"]
    bools = [k for k, v in live.items() if "bool" in v]
    assert len(bools) > 50
    for name, d in live.items():
        assert (table.kind(name) == serve_flags.BOOL) is ("bool" in d), name
    for name in bools:
        s = parse.parse_command(f"vllm serve M --{name} --max-num-seqs 4", role="prefill", table=table)
        assert s.model == "M" and s.values["max-num-seqs"] == 4 and not s.unknown_flags, name
        if live[name]["bool"] == "optional":
            s = parse.parse_command(f"vllm serve M --no-{name} --max-num-seqs 4", role="prefill", table=table)
            assert s.values[name] is False, name


@pytest.mark.vllm
def test_ec_connector_names_from_the_release_factory(python_buggy: str, python_fixed: str) -> None:
    """The issue's E/P/D example names MooncakeECConnector: 0.32.0's ECConnectorFactory registers
    ECMooncakeConnector (the hint names it); 0.28.0 registers neither Mooncake name."""
    from vllm_pd_doctor.checkconfig.rules import unregistered
    from vllm_pd_doctor.knowledge.readers import inspect_vllm, nixl_info

    def source(python: str) -> object:
        facts = nixl_info.probe(python, import_nixl=False)
        return inspect_vllm.read_source(python, facts.vllm_path, facts.vllm_version)

    fixed, buggy = source(python_fixed), source(python_buggy)
    got = unregistered.check_ec(fixed, "MooncakeECConnector", external=False)  # type: ignore[arg-type]
    assert got is not None and "'ECMooncakeConnector'" in got.evidence
    assert unregistered.check_ec(fixed, "ECMooncakeConnector", external=False) is None  # type: ignore[arg-type]
    assert unregistered.check_ec(buggy, "ECMooncakeConnector", external=False) is not None  # type: ignore[arg-type]
    assert unregistered.check_ec(buggy, "ECExampleConnector", external=False) is None  # type: ignore[arg-type]


@pytest.mark.vllm
def test_a_release_not_kept_is_asked_in_its_interpreter(
    python_fixed: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A release pd-doctor keeps no table for: its own parser is built in its interpreter once and
    the answer cached (a second read does not start the interpreter)."""
    monkeypatch.setattr(serve_flags, "stored", lambda: {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    serve_flags._read.cache_clear()
    table = serve_flags.for_python(python_fixed)
    assert table.release == "0.32.0" and "vLLM 0.32.0's parser" in table.source
    assert table.kind("enable-mamba-cache-stochastic-rounding") == serve_flags.BOOL
    serve_flags._read.cache_clear()
    monkeypatch.setattr(serve_flags, "_ask_parser", lambda python: pytest.fail("asked again"))
    again = serve_flags.for_python(python_fixed)
    assert "(cached)" in again.source and again.installed == table.installed
    serve_flags._read.cache_clear()


def test_report_names_the_non_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Dynamo recipe's frontend is in the report (JSON `inputs.non_engines`, an inputs line),
    its two workers are the servers."""
    from vllm_pd_doctor.formats import checkconfig as fmt

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = Path(__file__).resolve().parents[1] / "fixtures" / "check_config" / "corpus"
    r = core.check(config=corpus / "dynamo_recipe_axk2_disagg_h200_env_args.yaml", import_nixl=False)
    assert [s.config.role for s in r.servers] == ["prefill", "decode"]
    assert r.inputs.non_engines == (
        "axk2-vllm-disagg-h200/Frontend/main: python3 -m dynamo.frontend: not a vLLM engine",
    )
    assert fmt.check_obj(r)["inputs"]["non_engines"] == list(r.inputs.non_engines)
    assert any(line.startswith("not an engine (not checked): ") for line in fmt.check_inputs_lines(r))
