"""Catalogue entries: engine, scheduler and configuration failures (#53514 and its lookalikes,
Mamba/HMA, block size and TP, handshake and side channel). See `entries.py`."""

from __future__ import annotations

from vllm_pd_doctor.knowledge.facts import fixes
from vllm_pd_doctor.triage.catalogue import CHECK, C, FailureClass
from vllm_pd_doctor.triage.catalogue import Matcher as M

NNT = "num_new_tokens"
NIXL_DIR = "distributed/kv_transfer/kv_connector/v1/nixl/"
"""The NIXL connector's package (0.20+: worker.py, then base_worker.py/pull_worker.py/push_worker.py)."""


ENGINE_CLASSES: tuple[FailureClass, ...] = (
    FailureClass(
        id="nixl-p-side-truncation-53514",
        title="vLLM #53514? P-side N-1 truncation after the prefix-cache lookup "
        "(`assert num_new_tokens > 0` kills the prefill engine)",
        matchers=(
            M(NNT, r"assert num_new_tokens > 0", "possible", source_needle="assert num_new_tokens > 0"),
            M("sched/scheduler.py", r"v1/core/sched/scheduler\.py.*in schedule\b", "possible", "support"),
            C(
                "v1/core/sched/scheduler.py",
                "schedule",
                "possible",
                kind="assert",
                condition="num_new_tokens > 0",
            ),
        ),
        excludes=(
            M("async_llm_engine", r"async_llm_engine|vllm/core/scheduler\.py", origin="vllm"),
            M("prompt: ''", r"prompt: ''|prompt_token_ids: \[\]", origin="vllm"),
        ),
        lookalikes="The same assertion comes from other producers: an empty prompt on the V0 engine "
        "(vllm/core/scheduler.py, #7283/#7632), LMCache returning an incomplete load (llm-d-router#157). "
        "#53514 needs a hybrid (Mamba/SSM) model, a NIXL or Mooncake producer, prefix caching, and a "
        "release whose connector truncates in get_num_new_matched_tokens.",
        decides=(
            "the model (hybrid Mamba/SSM + attention or not): --model or the log's `Resolved architecture`",
            "the release: --python (where its connector truncates the prompt) or the log's vLLM version",
            "the connector and role: NixlConnector/MooncakeConnector on the prefill (kv_producer) side",
        ),
        fix=fixes.n1_fix_sentence(),
        fix_per_release=fixes.n1_per_release(),
        references=("vllm#53514", "vllm PR #53523", "vllm PR #53663", "vllm#53706"),
        next="pd-doctor repro --python PYTHON --model MODEL (reproduces it in-process in seconds)",
        side="prefill",
        fatal=True,
        known_issue=fixes.n1_known_issue(),
    ),
    FailureClass(
        id="num-new-tokens-empty-prompt",
        title="`assert num_new_tokens > 0` from an empty prompt (V0 engine), not a P/D cause",
        matchers=(
            M(NNT, r"assert num_new_tokens > 0", "possible"),
            M("prompt: ''", r"prompt: ''|prompt_token_ids: \[\]", "likely", "support"),
            M("core/scheduler.py", r"vllm/core/scheduler\.py", "likely", "support"),
        ),
        excludes=(M("v1/core/sched", r"v1/core/sched/scheduler\.py"),),
        lookalikes="#53514 fires the same assertion in the V1 scheduler (v1/core/sched/scheduler.py); "
        "this one is the V0 scheduler (vllm/core/scheduler.py) fed an empty prompt.",
        decides=("the request that preceded it (an empty prompt or prompt_token_ids [])",),
        fix="Reject empty prompts at the client or proxy; upgrade to a vLLM with the V1 engine, "
        "which validates empty prompts.",
        references=("vllm#7632", "vllm#7283"),
        next="pd-doctor report --log LOG (attach the request that preceded the crash)",
        fatal=True,
    ),
    FailureClass(
        id="mamba-conv-state-layout",
        title="Hybrid model over NIXL without the DS conv-state layout "
        "(VLLM_SSM_CONV_STATE_LAYOUT=DS missing)",
        matchers=(
            M(
                "requires DS conv state layout",
                r"requires DS conv state layout",
                "decisive",
                source_needle="requires DS conv state layout",
            ),
            C(NIXL_DIR, "__init__", "decisive", kind="assert", condition="is_conv_state_dim_first()"),
            C(
                "distributed/kv_transfer/kv_connector/v1/ssm_conv_transfer_utils.py",
                "derive_mamba_conv_split",
                "decisive",
                kind="assert",
                condition="is_conv_state_dim_first()",
            ),
        ),
        lookalikes="A launch line that merely sets VLLM_SSM_CONV_STATE_LAYOUT=DS is not the failure; "
        "the worker's assertion is.",
        fix="Set VLLM_SSM_CONV_STATE_LAYOUT=DS in the environment of both the prefill and the decode engine.",
        references=("vllm#54387", "vllm PR #54489", "vllm PR #37416", "1CatAI/1Cat-vLLM#555"),
        next=CHECK,
        fatal=True,
    ),
    FailureClass(
        id="hma-disabled-by-connector",
        title="The KV connector turned the hybrid KV cache manager off for a hybrid model",
        matchers=(
            M(
                "Hybrid KV cache manager is disabled",
                r"Hybrid KV cache manager is disabled for this hybrid model",
                "likely",
                source_needle="Hybrid KV cache manager is disabled",
            ),
            M("To serve at least one request", r"To serve at least one request", "decisive", "support"),
            # the function that unifies the specs once HMA is off: a warning since 0.27, a ValueError
            # ("... disabled but failed to convert ...") before; kv_cache_planning.py in 0.33
            C("v1/core/", "unify_hybrid_kv_cache_specs", "likely"),
        ),
        lookalikes="`Turning off hybrid kv cache manager because --kv-transfer-config is set` alone is "
        "harmless for a model without hybrid layers.",
        decides=("the model: hybrid (sliding window, Mamba) or not",),
        fix="Pass --no-disable-hybrid-kv-cache-manager with a connector that supports HMA (NixlConnector), "
        "or upgrade to a vLLM that keeps HMA on for such connectors (PR #41847).",
        references=("vllm#41830", "vllm PR #41847", "vllm#42024"),
        next=CHECK,
    ),
    FailureClass(
        id="block-size-mismatch",
        title="Prefill and decode use different KV block sizes (NIXL cannot map the blocks)",
        matchers=(
            M(
                "is not divisible by remote block size",
                r"is not divisible by remote block size|Remote block size \d+ is not divisible",
                "decisive",
                source_needle="Local block size {self.block_size} is not divisible",
            ),
            C(
                "distributed/kv_transfer/kv_connector/utils.py",
                "block_size_ratio",
                "decisive",
                kind="assert",
                condition="% remote_block_size == 0",
            ),
        ),
        lookalikes="`NIXL compatibility check passed` and a `Transfer plan` line are the healthy "
        "handshake; the block-size assertion during handshake setup is the failure. Hybrid models "
        "raise the attention block size on their own (`Setting attention block size to N`).",
        decides=("both engines' effective block sizes (hybrid models align them per side)",),
        fix="Give both engines the same --block-size; for hybrid models make the aligned block size "
        "equal on both sides (same TP, same mamba_cache_mode), or upgrade to a release with "
        "heterogeneous block-size support.",
        references=("vllm#42895", "vllm PR #26759", "vllm PR #45443"),
        next=CHECK,
        side="decode",
    ),
    FailureClass(
        id="heterogeneous-tp",
        title="Heterogeneous tensor parallelism between prefill and decode that this release cannot transfer",
        matchers=(
            M(
                "num_remote_blocks",
                r"handshake_failed.*'num_local_blocks': (\d+), 'num_remote_blocks': (?!\1\b)\d+",
                "likely",
            ),
            M("tp_ratio", r"tp_ratio=-?\d+", "possible", "support"),
        ),
        lookalikes="A block count that differs between P and D in a successful transfer is normal; "
        "the handshake failing on it with unequal TP sizes is the failure.",
        decides=("both engines' --tensor-parallel-size", "the model (Mamba needs equal TP)"),
        fix="Use the same tensor-parallel size on prefill and decode, or a release that supports the "
        "P/D TP ratio for this model (see the NIXL compatibility doc).",
        references=("vllm#50765", "vllm#43366", "llm-d#2187"),
        next=CHECK,
        side="decode",
    ),
    FailureClass(
        id="handshake-keyerror-after-peer-death",
        title="Decode-side KeyError after a failed NIXL handshake with a dead or restarted prefill engine",
        matchers=(
            M(
                "handshake_setup_failed",
                r"NIXL transfer failure: handshake_setup_failed",
                "possible",
                source_needle='"handshake_setup_failed"',
            ),
            M("KeyError", r"^KeyError: ", "likely", "require"),
            M("_remote_agents", r"_remote_agents\[", "likely", "support"),
        ),
        excludes=(M("is not divisible", r"is not divisible"),),
        lookalikes="handshake_setup_failed also follows a block-size mismatch (an AssertionError, not "
        "a KeyError); a KeyError alone is not a NIXL cause.",
        decides=("the prefill engine's log around the same time (why it died)",),
        fix="Find why the prefill engine died (its own log); upgrade to a vLLM whose handshake callback "
        "fails the request instead of raising KeyError (PR #41863).",
        references=("vllm PR #41863",),
        next="pd-doctor triage --prefill-log P.log --decode-log D.log",
        side="decode",
        consequence=True,
    ),
    FailureClass(
        id="nixl-handshake-failed",
        title="NIXL handshake with the remote engine failed",
        matchers=(
            M(
                "handshake_failed",
                r"NIXL transfer failure: handshake_failed",
                "possible",
                source_needle='"handshake_failed"',
            ),
            M(
                "Handshake with",
                r"Handshake with \S+ failed",
                "possible",
                source_needle="Handshake with %s failed",
            ),
            M("handshake_setup_failed", r"NIXL transfer failure: handshake_setup_failed", "possible"),
        ),
        excludes=(
            M("is not divisible", r"is not divisible"),
            M("num_remote_blocks", r"'num_remote_blocks'"),
            M("KeyError", r"^KeyError: "),
        ),
        lookalikes="`NIXL handshake: get metadata took ...` debug lines are a successful handshake.",
        decides=(
            "the side-channel host and port each side advertises (VLLM_NIXL_SIDE_CHANNEL_HOST/PORT)",
            "the other side's log (did it die, restart, or run another vLLM/NIXL version?)",
        ),
        fix="Check that the decode engine can reach the prefill engine's side channel "
        "(VLLM_NIXL_SIDE_CHANNEL_HOST set to a routable address, port free and open), and that both sides "
        "run the same vLLM and NIXL versions.",
        references=("vllm PR #24249", "volcano-sh/kthena#503", "vllm docs nixl_connector_usage"),
        next=CHECK,
        side="decode",
        consequence=True,
    ),
    FailureClass(
        id="side-channel-port-in-use",
        title="The NIXL side-channel port is already in use (two engines or a kv-events socket on one port)",
        matchers=(
            M("Address already in use", r"ZMQError: Address already in use", "likely", origin="zmq"),
            M("nixl_handshake_listener", r"nixl_handshake_listener", "decisive", "support"),
        ),
        lookalikes="`OSError: [Errno 98] Address already in use` from the HTTP server is the API port, "
        "not the side channel.",
        decides=("the VLLM_NIXL_SIDE_CHANNEL_PORT (base + DP rank) of every engine on the host",),
        fix="Give each engine on a host its own VLLM_NIXL_SIDE_CHANNEL_PORT range (base + data-parallel "
        "rank), away from the kv-events port 5557.",
        references=("vllm#20965", "vllm#25059", "ray-project/ray#60057"),
        next=CHECK,
        fatal=True,
    ),
    FailureClass(
        id="side-channel-host-misconfigured",
        title="VLLM_NIXL_SIDE_CHANNEL_HOST unset or wrong: the handshake reached another engine",
        matchers=(
            M(
                "engine ID mismatch",
                r"Remote NIXL agent engine ID mismatch",
                "likely",
                source_needle="Remote NIXL agent engine ID mismatch",
            ),
            C(
                NIXL_DIR,
                "_nixl_handshake",
                "likely",
                kind="raise",
                condition="engine_id != expected_engine_id",
            ),
        ),
        lookalikes="`Querying metadata on path: tcp://localhost:...` is normal on one host.",
        decides=(
            "VLLM_NIXL_SIDE_CHANNEL_HOST of the prefill engine (must be routable from decode)",
            "whether the prefill engine restarted (a new engine id behind the same address)",
        ),
        fix="Set VLLM_NIXL_SIDE_CHANNEL_HOST on every engine to its own routable address "
        "(not localhost/0.0.0.0 when P and D are on different nodes).",
        references=("vllm#27083", "vllm PR #24249", "NVIDIA/srt-slurm PR #158"),
        next=CHECK,
        side="decode",
    ),
)
