"""Catalogue entries: transport and packaging failures (lost peers, leases, stranded requests,
UCX, NIXL packages, Mooncake, telemetry, transfers). See `entries.py`."""

from __future__ import annotations

from vllm_pd_doctor.triage.catalogue import CHECK, NIXL_ENV, C, FailureClass
from vllm_pd_doctor.triage.catalogue import Matcher as M

NIXL_DIR = "distributed/kv_transfer/kv_connector/v1/nixl/"

EXPIRY_FUNCTIONS = "get_finished|get_transfer_results|_reap_expired_send_leases"
"""The NIXL worker's functions that release expired blocks (`Releasing expired KV blocks`), per release."""

TRANSPORT_CLASSES: tuple[FailureClass, ...] = (
    FailureClass(
        id="kv-never-read-by-decode",
        title="The decode never read the prefill's KV blocks (`retrieved by 0 decode worker(s)`, repeated: "
        "the NIXL handshake never completed)",
        matchers=(
            C(
                NIXL_DIR,
                EXPIRY_FUNCTIONS,
                "possible",
                values=(("count", "==", 0),),
                min_count=3,  # every request expiring unread; one or two are aborts
                kind="log",
                words="Releasing expired KV blocks",
            ),
        ),
        excludes=(
            M(
                "Potentially invalid KV blocks",
                r"Potentially invalid KV blocks",
                source_needle="Potentially invalid KV blocks",
            ),
            # requests the client cancelled, then the scheduler's KeyError for them (vllm#25562)
            M("update_from_kv_xfer_finished", r"in _?update_from_kv_xfer_finished"),
        ),
        lookalikes="Requests the client cancelled also expire unread, repeated (vllm#25562: then a KeyError "
        "in update_from_kv_xfer_finished). A decode that read late (`Potentially invalid KV blocks ... "
        "were retrieved by a decode worker` after `retrieved by 0`) is kv-lease-expired (aws-samples/"
        "aws-do-eks PR #84); `retrieved by 1` or more is a decode that connected but read slowly; one or two "
        "lines are requests the client aborted. Every request expiring unread (the line repeated) is a "
        "decode that never connected.",
        decides=(
            "the decode log: a NIXL handshake error, or no KV load attempted at all",
            "VLLM_NIXL_SIDE_CHANNEL_HOST of the prefill (localhost across hosts is unreachable)",
        ),
        fix="Make the prefill's NIXL side channel reachable from the decode: set VLLM_NIXL_SIDE_CHANNEL_HOST "
        "to the prefill's routable address (not localhost) and open VLLM_NIXL_SIDE_CHANNEL_PORT (+ the TP "
        "rank) between the hosts; check that the proxy hands the prefill's kv_transfer_params to the decode.",
        references=("vllm#30153",),
        next=CHECK,
        side="prefill",
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
            M(
                "genNotif",
                r"genNotif: no specified or potential backend",
                "possible",
                "support",
                origin="nixl",
            ),
            # NIXL drops a disconnected agent's metadata, so the next transfer to it fails in the
            # C++ agent (`createXferReq: metadata for remote agent '<uuid>' not found`,
            # ai-dynamo/nixl#1983); `no backends are found in metadata ...` is a compatibility
            # failure of a loaded peer, not this
            C(
                "src/core/nixl_agent.cpp",
                "nixlAgent::createXferReq|nixlAgent::prepXferDlist|nixlAgent::makeConnection",
                "possible",
                package="libnixl",
                kind="log",
                words="' not found",
            ),
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
            C(NIXL_DIR, "_get_new_notifs", "decisive", kind="log", what="ERROR", words="invalid KV blocks"),
            M(
                "Releasing expired KV blocks",
                r"Releasing expired KV blocks",
                "possible",
                "support",
                source_needle="Releasing expired KV blocks",
            ),
            C(
                NIXL_DIR,
                "get_finished|get_transfer_results|_reap_expired_send_leases",
                "possible",
                "support",
                kind="log",
                words="Releasing expired KV blocks",
            ),
            # the values: blocks read by some decode worker(s) but not all before expiry = a slow decode
            C(
                NIXL_DIR,
                EXPIRY_FUNCTIONS,
                "possible",
                values=(("count", ">=", 1),),
                kind="log",
                words="Releasing expired KV blocks",
            ),
        ),
        lookalikes="`Releasing expired KV blocks` alone is P reclaiming blocks of an aborted request; the "
        "late read (`Potentially invalid KV blocks`) is what corrupts output. `retrieved by 0` repeated "
        "with no late read is a decode that never connected (kv-never-read-by-decode).",
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
            C(
                NIXL_DIR,
                "get_finished|get_transfer_results",
                "possible",
                "support",
                kind="log",
                words="Skipping KV post-processing",
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
            # the catch-all leaves the devx modify `Remote I/O error` to the class that names it
            # (stale-ucx-after-peer-restart, smg-project/smg#2382 and #2503): that line says the
            # peer's endpoint is stale, not that the network cannot reach it
            M(
                "UCX",
                r"UCX\s+ERROR (?!.*mlx5dv_devx_obj_modify\(.*Remote I/O error)"
                r".*(failed|timeout|unreachable|refused)",
                "likely",
                origin="ucx",
            ),
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
            # NIXL's C++ agent logs it before the Python exception (glog `E... nixl_agent.cpp:473]
            # registerMem: registration failed for the specified or all potential backends`,
            # ai-dynamo/nixl#987); a log cut before the traceback holds only this line
            C(
                "src/core/nixl_agent.cpp",
                "nixlAgent::registerMem",
                package="libnixl",
                kind="log",
                words="registration failed",
            ),
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
            C(
                "v1/engine/core.py",
                "add_request",
                "decisive",
                kind="log",
                what="WARNING",
                words="no KVConnector",
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
                origin="mooncake",
            ),
            M(
                "transfer timeout",
                r"Sync batch data transfer timeout",
                "likely",
                "support",
                origin="mooncake",
            ),
            # the Mooncake store client's put/get after the transfer engine gave up on its retries
            # (`Put operation failed with error: TRANSFER_FAIL`, kvcache-ai/Mooncake#397; its
            # statement moved from store_py.cpp to pybind_client.cpp/real_client.cpp); another
            # error code (NO_AVAILABLE_HANDLE: the store is full) is not a transfer failure
            M(
                "TRANSFER_FAIL",
                r"\w+ operation failed with error: TRANSFER_FAIL\b",
                "likely",
                origin="mooncake",
            ),
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
            C(
                NIXL_DIR,
                "_read_blocks|_xfer_blocks",
                "likely",
                kind="assert",
                condition="len(local_block_descs_ids) == len(remote_block_descs_ids)",
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
