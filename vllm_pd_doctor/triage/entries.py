"""The entries of the failure-class catalogue (see `catalogue.py`); a new class is one entry.

Every entry has a real public log in tests/fixtures/triage/ (SOURCES names the thread and the
established cause) and a lookalike it must not claim; `vllm` lines carry the literal that vLLM's
source holds for them, checked against the installed releases by a `-m vllm` test.
"""

from __future__ import annotations

from vllm_pd_doctor.triage.catalogue import FailureClass
from vllm_pd_doctor.triage.catalogue import Matcher as M

NNT = "num_new_tokens"
CHECK = "pd-doctor check-config --prefill-cmd '...' --decode-cmd '...' (or --config FILE)"
NIXL_ENV = "pd-doctor check-config --python PYTHON (lists the NIXL packages and UCX plugin)"

CLASSES: tuple[FailureClass, ...] = (
    FailureClass(
        id="nixl-p-side-truncation-53514",
        title="vLLM #53514? P-side N-1 truncation after the prefix-cache lookup "
        "(`assert num_new_tokens > 0` kills the prefill engine)",
        matchers=(
            M(NNT, r"assert num_new_tokens > 0", "possible", source_needle="assert num_new_tokens > 0"),
            M("sched/scheduler.py", r"v1/core/sched/scheduler\.py.*in schedule\b", "possible", "support"),
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
        fix="Upgrade vLLM to 0.29.0 or later (PR #53523; Mooncake: PR #53663), or "
        "`pd-doctor hotfix install --python PYTHON`; meanwhile disable prefix caching on the prefill engine.",
        fix_per_release=(
            (">= 0.29.0", "fixed (truncation moved to on_new_request)"),
            ("0.20.0 - 0.28.x", "upgrade, or pd-doctor hotfix install, or --no-enable-prefix-caching on P"),
        ),
        references=("vllm#53514", "vllm PR #53523", "vllm PR #53663", "vllm#53706"),
        next="pd-doctor repro --python PYTHON --model MODEL (reproduces it in-process in seconds)",
        side="prefill",
        fatal=True,
        known_issue="vLLM #53514, fixed in 0.29.0 by PR #53523; upgrade, or `pd-doctor hotfix install`.",
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
                "decisive",
                source_needle="Remote NIXL agent engine ID mismatch",
            ),
        ),
        lookalikes="`Querying metadata on path: tcp://localhost:...` is normal on one host.",
        decides=("VLLM_NIXL_SIDE_CHANNEL_HOST of the prefill engine (must be routable from decode)",),
        fix="Set VLLM_NIXL_SIDE_CHANNEL_HOST on every engine to its own routable address "
        "(not localhost/0.0.0.0 when P and D are on different nodes).",
        references=("vllm#27083", "vllm PR #24249", "NVIDIA/srt-slurm PR #158"),
        next=CHECK,
        side="decode",
    ),
    FailureClass(
        id="peer-disconnected",
        title="The remote NIXL/UCX peer disconnected (crashed or restarted engine, stale endpoint)",
        matchers=(
            M("NIXL_ERR_REMOTE_DISCONNECT", r"NIXL_ERR_REMOTE_DISCONNECT", "likely", origin="nixl"),
            M("NIXL_ERR_NOT_FOUND", r"NIXL_ERR_NOT_FOUND", "possible", "support", origin="nixl"),
            M(
                "UCX",
                r"UCX\s+ERROR .*(Connection reset by remote peer|UCS_ERR_CONNECTION_RESET)",
                "likely",
                origin="ucx",
            ),
            M("genNotif", r"genNotif: no specified or potential backend", "possible", "support", "nixl"),
        ),
        lookalikes="NIXL_ERR_BACKEND at startup is a registration/transport failure, not a lost peer.",
        decides=("the other side's log (did it restart?)", "uptime and UCX endpoint timeouts"),
        fix="Restart both engines of the pair (the connector does not reconnect); upgrade vLLM/NIXL "
        "(NIXL < 0.10 pin, vllm#35495), and watch for HTTP 200 with wrong tokens after it.",
        references=("wtdcode/vllm-backport#33", "ai-dynamo/nixl#1983", "vllm PR #35495"),
        next="pd-doctor triage --prefill-log P.log --decode-log D.log",
        consequence=True,
    ),
    FailureClass(
        id="kv-lease-expired",
        title="KV lease expired on the prefill side before decode read the blocks (HTTP 200, wrong output)",
        matchers=(
            M(
                "Potentially invalid KV blocks",
                r"Potentially invalid KV blocks",
                "decisive",
                source_needle="Potentially invalid KV blocks",
            ),
            M(
                "Releasing expired KV blocks",
                r"Releasing expired KV blocks",
                "possible",
                "support",
                source_needle="Releasing expired KV blocks",
            ),
        ),
        lookalikes="`Releasing expired KV blocks` alone is P reclaiming blocks of an aborted request; the "
        "late read (`Potentially invalid KV blocks`) is what corrupts output.",
        decides=("kv_lease_duration and the decode queue time",),
        fix="Raise kv_lease_duration in kv_connector_extra_config (default 30 s) above the longest decode "
        "queue time, or upgrade to a release with lease renewal (PR #41383).",
        references=("aws-samples/aws-do-eks PR #84", "vllm PR #41383", "vllm#58222"),
        next=CHECK,
        side="prefill",
    ),
    FailureClass(
        id="mooncake-lease-expired",
        title="Mooncake store keys fetched after their lease expired (error -707)",
        matchers=(M("-707", r"error_codes=\[[^\]]*-707", "decisive", origin="mooncake"),),
        lookalikes="Other Mooncake error codes (not found, evicted) are capacity problems, not leases.",
        fix="Raise default_kv_lease_ttl on the Mooncake master above the P-to-D delay, or refresh leases.",
        references=("kvcache-ai/Mooncake#3076",),
        next="pd-doctor report --log LOG",
    ),
    FailureClass(
        id="requests-stranded-waiting-for-kv",
        title="Decode requests stranded in WAITING_FOR_REMOTE_KVS (the KV load never completes)",
        matchers=(
            M(
                "WAITING_FOR_REMOTE_KVS",
                r"is still in WAITING_FOR_REMOTE_KVS state",
                "likely",
                source_needle="is still in WAITING_FOR_REMOTE_KVS state",
                min_count=5,
            ),
            M(
                "Skipping KV post-processing",
                r"Skipping KV post-processing for failed request",
                "possible",
                "support",
                source_needle="Skipping KV post-processing",
            ),
        ),
        lookalikes="A request seen once or twice in WAITING_FOR_REMOTE_KVS is a normal transfer in flight.",
        decides=("the router/sidecar and engine NIXL connector versions", "the prefill log for the request"),
        fix="Match the router sidecar's connector protocol to the engine's vLLM (llm-d#355), and set "
        "kv_load_failure_policy so a failed load fails or recomputes the request instead of waiting.",
        references=("llm-d/llm-d#355", "vllm PR #25897"),
        next="pd-doctor report --log LOG",
        side="decode",
    ),
    FailureClass(
        id="ucx-no-cuda-transports",
        title="UCX has no CUDA transports (built without CUDA): GPU KV cannot be registered or moved",
        matchers=(
            M(
                "are not available",
                r"transports '[^']*cuda[^']*'.* are not available",
                "decisive",
                origin="ucx",
            ),
            M(
                "VRAM memory is detected as host",
                r"VRAM memory is detected as host",
                "decisive",
                origin="nixl",
            ),
        ),
        lookalikes="UCX_TLS=cuda_ipc,cuda_copy in the environment is configuration, not the failure.",
        fix="Use a UCX built with CUDA (the one bundled in the nixl wheel, or rebuild --with-cuda) and make "
        "sure no other libucp shadows it (LD_LIBRARY_PATH, ucx_info -v).",
        references=("LMCache/LMCache#605", "ai-dynamo/nixl PR #1385", "ai-dynamo/nixl#166"),
        next=NIXL_ENV,
        fatal=True,
    ),
    FailureClass(
        id="ucx-unreachable",
        title="UCX cannot reach the peer over the chosen interface "
        "(endpoint timeout, I/O errors, RDMA retries)",
        matchers=(
            M("Endpoint timeout", r"UCX error: Endpoint timeout", "likely", origin="ucx"),
            M("UCX", r"UCX\s+ERROR .*(failed|timeout|unreachable|refused)", "likely", origin="ucx"),
            M("retry counter exceeded", r"transport retry counter exceeded", "likely", origin="mooncake"),
            M(
                "UCX",
                r"UCX\s+ERROR .*(Destination is unreachable|UCS_ERR_UNREACHABLE)",
                "likely",
                origin="ucx",
            ),
        ),
        lookalikes="`Setting UCX_RCACHE_MAX_UNRELEASED` and `UCX  WARN` lines are routine.",
        decides=("UCX_NET_DEVICES / UCX_TLS on both sides", "routability between the two hosts"),
        fix="Pin UCX_NET_DEVICES to an interface both hosts can reach (and UCX_TLS to transports they "
        "share); check firewalls and RDMA link state.",
        references=("LMCache/LMCache#725", "vllm PR #10884", "ai-dynamo/nixl#1097"),
        next=NIXL_ENV,
    ),
    FailureClass(
        id="nixl-memory-registration",
        title="NIXL could not register the KV cache memory (NIXL_ERR_BACKEND in register_memory)",
        matchers=(
            M("NIXL_ERR_BACKEND", r"nixlBackendError: NIXL_ERR_BACKEND", "possible", origin="nixl"),
            M("register_memory", r"register_memory|registerMem", "likely", "support"),
        ),
        excludes=(M("num_remote_blocks", r"'num_remote_blocks'"),),
        lookalikes="NIXL_ERR_BACKEND during a handshake (loadRemoteMD) is a peer/compatibility failure.",
        decides=(
            "UCX's CUDA support (ucx_info -d)",
            "GPU memory type and driver (GPUDirect, nvidia_peermem)",
        ),
        fix="Give UCX CUDA support and the RDMA/IPC transports for GPU memory; in containers add the "
        "devices and IPC_LOCK/ulimit -l for memory registration.",
        references=("vllm-project/aibrix#1433", "vllm#22430", "ai-dynamo/nixl#334"),
        next=NIXL_ENV,
        fatal=True,
    ),
    FailureClass(
        id="nixl-plugin-load-failed",
        title="NIXL backend plugins failed to load (missing CUDA libraries or plugin path)",
        matchers=(
            M(
                "Failed to load plugin",
                r"Failed to load plugin from \S+: lib\S+: cannot open",
                "likely",
                origin="nixl",
            ),
            M(
                "unsupported backend",
                r"createBackend: unsupported backend|backend '\w+' not found",
                "likely",
                origin="nixl",
            ),
        ),
        lookalikes="`Backend UCX was instantiated` is the healthy start.",
        decides=("the host (CUDA driver present?) and the nixl wheel installed (nixl-cu12/cu13)",),
        fix="On a non-CUDA host use a NIXL build without CUDA plugins; otherwise install the wheel for "
        "the host's CUDA major and point NIXL_PLUGIN_DIR at its plugins.",
        references=("ai-dynamo/nixl#838", "ai-dynamo/nixl#1561"),
        next=NIXL_ENV,
        fatal=True,
    ),
    FailureClass(
        id="nixl-wheel-cuda-major",
        title="A NIXL wheel built for another CUDA major (libcudart.so.N missing)",
        matchers=(
            M(
                "libcudart.so",
                r"ImportError: libcudart\.so\.\d+: cannot open shared object",
                "possible",
                origin="python",
            ),
            M("nixl_ep", r"nixl_ep", "likely", "require"),
        ),
        lookalikes="libcudart missing for a non-NIXL extension is a CUDA install problem.",
        decides=("torch's CUDA version and the nixl-cu12/nixl-cu13 wheels installed",),
        fix="Install the nixl backend wheel for torch's CUDA major (nixl >= 1.1 picks it at runtime) and "
        "remove the other (vllm#42364).",
        references=("vllm#39923", "vllm#42525", "vllm PR #42364", "kaito-project/kaito PR #2050"),
        next=NIXL_ENV,
        fatal=True,
    ),
    FailureClass(
        id="nixl-api-too-old",
        title="The installed NIXL Python API is older than this vLLM needs",
        matchers=(
            M(
                "nixl_agent_config",
                r"nixl_agent_config\.__init__\(\) got an unexpected keyword argument",
                "decisive",
                origin="python",
            ),
        ),
        lookalikes="Other `unexpected keyword argument` errors are unrelated API drift.",
        fix="Install the NIXL version vLLM's requirements/kv_connectors.txt pins for this release.",
        references=("ray-project/ray PR #57201", "vllm#39521"),
        next=NIXL_ENV,
        fatal=True,
    ),
    FailureClass(
        id="no-kv-connector",
        title="A request carried kv_transfer_params to an engine without a KV connector "
        "(decode silently recomputes)",
        matchers=(
            M(
                "no KVConnector found",
                r"Got kv_transfer_params, but no KVConnector found",
                "decisive",
                source_needle="Got kv_transfer_params, but no KVConnector",
            ),
        ),
        lookalikes="`Creating v1 connector with name: NixlConnector` shows a configured connector.",
        fix="Pass --kv-transfer-config with the same connector to both engines.",
        references=("kserve/kserve PR #6027", "kserve/kserve#5987"),
        next=CHECK,
    ),
    FailureClass(
        id="mooncake-transfer-failed",
        title="Mooncake transfer engine failed to move the KV cache (connect failures or timeouts)",
        matchers=(
            M("Mooncake transfer failed", r"Mooncake transfer failed", "likely", origin="vllm-ascend"),
            M(
                "Failed to connect to",
                r"Failed to connect to (target|segment)",
                "likely",
                "support",
                "mooncake",
            ),
            M("transfer timeout", r"Sync batch data transfer timeout", "likely", "support", "mooncake"),
        ),
        lookalikes="`Connected to segment` and the transfer engine's protocol line are healthy.",
        decides=("the Mooncake protocol/devices on both sides", "the prefill log for the request"),
        fix="Check the transfer engine's protocol and devices on both sides (RDMA devices visible in the "
        "container, routable segment addresses), and raise the transfer timeout for long prompts.",
        references=("vllm-project/vllm-ascend#4866", "vllm-project/vllm-ascend#7846", "vllm#51518"),
        next="pd-doctor report --log LOG",
    ),
    FailureClass(
        id="nixl-telemetry-misfire",
        title="NIXL telemetry unavailable: completed transfers are marked failed (transfer_exception)",
        matchers=(
            M("getXferTelemetry", r"getXferTelemetry: cannot return values", "decisive", origin="nixl"),
            M(
                "nixlNoTelemetryError",
                r"nixlNoTelemetryError|has no attribute 'xferDuration'",
                "decisive",
                origin="python",
            ),
            M("transfer_exception", r"NIXL transfer failure: transfer_exception", "possible", "support"),
        ),
        lookalikes="`NIXL telemetry is disabled; ignoring telemetry requested` alone is noise: transfers "
        "still succeed unless the telemetry call raises.",
        fix="Use NIXL 1.3.2 or later (telemetry gating fix), or set NIXL_TELEMETRY_ENABLE=1, or a vLLM "
        "that guards get_xfer_telemetry (PR #58038).",
        references=("ai-dynamo/dynamo#12952", "vllm PR #58038", "ai-dynamo/nixl#2266", "vllm PR #51777"),
        next=NIXL_ENV,
    ),
    FailureClass(
        id="nixl-transfer-failed",
        title="NIXL KV transfer failed after the handshake (blocks marked invalid: recompute or fail)",
        matchers=(
            M(
                "NIXL transfer failure",
                r"NIXL transfer failure: (transfer_setup_failed|transfer_failed|notification_failed"
                r"|transfer_release_failed|push_\w+)",
                "likely",
                source_needle="NIXL transfer failure",
            ),
        ),
        excludes=(
            M("getXferTelemetry", r"getXferTelemetry"),
            M("nixlNoTelemetryError", r"nixlNoTelemetryError"),
        ),
        lookalikes="handshake_failed / handshake_setup_failed are handshake classes; "
        "transfer_exception right after a telemetry error is the telemetry misfire.",
        decides=(
            "the exception in the Context / traceback that follows",
            "the other side's log at the same time",
            "kv_load_failure_policy (recompute hides it as slow requests; fail returns errors)",
        ),
        fix="Read the failure's exception and the remote side's log; with kv_load_failure_policy=recompute "
        "the request is recomputed locally (slow but correct), with fail it returns an error.",
        references=("vllm PR #32031", "vllm PR #25897"),
        next="pd-doctor triage --prefill-log P.log --decode-log D.log",
        side="decode",
    ),
    FailureClass(
        id="mamba-decode-descriptor-mismatch",
        title="Decode-side NIXL assertion on Mamba descriptors (prefix-cache hit on a hybrid model)",
        matchers=(
            M(
                "local_block_descs_ids",
                r"assert len\(local_block_descs_ids\) == len\(remote_block_descs_ids\)",
                "likely",
                source_needle="assert len(local_block_descs_ids) == len(remote_block_descs_ids)",
            ),
        ),
        lookalikes="`start_load_kv ... Num local_block_ids: 4. Num remote_block_ids: 4.` is a normal load.",
        decides=("the model (hybrid)", "prefix caching on decode", "the release (PR #41693 / #50153)"),
        fix="Upgrade to a release with the Mamba prefix-cache trimming fixes (PR #41693, PR #50153), or "
        "disable prefix caching on the decode engine.",
        references=("vllm PR #41693", "vllm PR #50153", "vllm PR #42554"),
        next="pd-doctor repro --engine live --python PYTHON --model MODEL",
        side="decode",
        fatal=True,
    ),
)
