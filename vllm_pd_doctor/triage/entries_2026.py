"""Catalogue entries: P/D failures reported in 2026 (field-2026.md §1 classes A, E, H). See
`entries.py`.

Each entry names, in a comment, the code origin it is keyed to (file, function, statement or
exception), so keying the catalogue to code origins (issue 24 items 1-3) is mechanical. Every
`vllm` matcher's `source_needle` is checked against the installed releases by a `-m vllm` test
(`tests/triage/test_triage_vllm.py`), with the releases where a statement is absent noted there.
"""

from __future__ import annotations

from vllm_pd_doctor.knowledge.facts import fixes
from vllm_pd_doctor.triage.catalogue import C, FailureClass
from vllm_pd_doctor.triage.catalogue import Matcher as M

STATUS = "pd-doctor status --prefill-url URL --decode-url URL (or check-config: handshake-compat)"
"""The `next` command of version/config skew between the two sides."""

CLASSES_2026: tuple[FailureClass, ...] = (
    # origin: vllm/v1/core/sched/scheduler.py, Scheduler._update_from_kv_xfer_finished,
    #   `assert req_id in self.requests` (AssertionError) in both loops (finished_recving,
    #   finished_sending); 0.27.1 :2731/:2740, 0.28.0 :2819/:2828, 0.32.0 :3224/:3234, 0.33.0 too.
    FailureClass(
        id="kv-xfer-finished-for-freed-request",
        title="A KV transfer finished for a request the scheduler already freed (abort race): "
        "`assert req_id in self.requests` kills EngineCore",
        matchers=(
            M(
                "assert req_id in self.requests",
                r"^\s*assert req_id in self\.requests\s*$",
                "likely",
                source_needle="assert req_id in self.requests",
            ),
            M(
                "_update_from_kv_xfer_finished",
                r"\bin _update_from_kv_xfer_finished\b",
                "likely",
                "support",
                source_needle="def _update_from_kv_xfer_finished",
            ),
        ),
        lookalikes="The same function's other assert, `assert RequestStatus.is_finished(req.status)`, "
        "is a receive finishing for a request that left WAITING_FOR_REMOTE_KVS without finishing "
        "(preemption, PR #53631), not a freed request; MoRIIO/Mooncake docstrings quote the statement "
        "in backticks, never as a traceback line.",
        decides=(
            "client aborts around the crash (finished_reason=abort spike)",
            "an async KV connector (LMCache, offloading) or NIXL on both sides of a MultiConnector",
        ),
        fix=f"Open upstream through {fixes.ABORT_RACE.open_through} (#46240; fixes #56089 / #46304 / "
        "PR #48615 not merged): an "
        "aborted request whose receive and send finish in one step is freed by the first loop and "
        "asserted on by the second. Until a release skips unknown request ids, carry that hotfix "
        "(pd-doctor hotfix), cut client aborts during the KV transfer, and on DP expect one rank's "
        "death to take the pool down (sync_dp_state).",
        references=(
            "https://github.com/vllm-project/vllm/issues/46240",
            "https://github.com/vllm-project/vllm/pull/48615",
            "https://github.com/vllm-project/vllm/issues/43226",
            "https://github.com/vllm-project/vllm/issues/49089",
            "https://github.com/PrimeIntellect-ai/prime-rl/pull/2843",
        ),
        next="pd-doctor repro --scenario abort-race",
        side="either",
        fatal=True,
    ),
    # origin: vllm/v1/core/sched/scheduler.py, Scheduler._update_requests_with_invalid_blocks,
    #   `(req_block_ids,) = self.kv_cache_manager.get_block_ids(req_id)` -> ValueError (too many
    #   values to unpack) for more than one KV cache group; unguarded in 0.27.1/0.28.0; 0.32.0
    #   guards it in Scheduler._handle_invalid_blocks with `raise RuntimeError("A KV connector
    #   reported block-level load failures ...")`.
    FailureClass(
        id="hybrid-kv-load-failure-crash",
        title="A failed KV load on a hybrid (multi-group) model kills EngineCore in "
        "_update_requests_with_invalid_blocks",
        matchers=(
            M(
                "(req_block_ids,) = self.kv_cache_manager.get_block_ids(req_id)",
                r"^\s*\(req_block_ids,\) = self\.kv_cache_manager\.get_block_ids\(req_id\)\s*$",
                "likely",
                source_needle="(req_block_ids,) = self.kv_cache_manager.get_block_ids(req_id)",
            ),
            M(
                "A KV connector reported block-level load failures",
                r"A KV connector reported block-level load failures",
                "likely",
                source_needle="A KV connector reported block-level load failures",
            ),
            M(
                "too many values to unpack",
                r"ValueError: too many values to unpack \(expected 1\b",
                "possible",
                "support",
                origin="python",
            ),
            M(
                "_update_requests_with_invalid_blocks",
                r"\bin _update_requests_with_invalid_blocks\b",
                "likely",
                "support",
                source_needle="def _update_requests_with_invalid_blocks",
            ),
        ),
        lookalikes="`ValueError: too many values to unpack` anywhere else (any unpack of the wrong "
        "arity); here it is the statement that unpacks one block list per KV cache group.",
        decides=("a hybrid model (more than one KV cache group)", "a KV load failure just before"),
        fix="Hybrid requests must recompute in full on a failed load: releases with PR #50388 do; 0.32 "
        "fails closed for block-level failures on multi-group layouts (connectors must report "
        "failed_recving). Until then set kv_load_failure_policy to fail requests, or keep the "
        "connector from reporting invalid blocks for hybrid loads (vllm-ascend PR #10933's stopgap).",
        references=(
            "https://github.com/vllm-project/vllm/issues/45474",
            "https://github.com/vllm-project/vllm/pull/50388",
            "https://github.com/vllm-project/vllm/issues/50687",
            "https://github.com/vllm-project/vllm/pull/56855",
        ),
        next="pd-doctor repro --scenario hybrid-load-failure",
        side="decode",
        fatal=True,
    ),
    # origin: the NIXL worker's "decode has no more blocks than prefill sent" assert, across its
    #   moves: nixl_connector.py NixlConnectorWorker._read_blocks `assert num_local_blocks <=
    #   num_remote_blocks` (0.10, vllm#21583); nixl/base_worker.py _apply_prefix_caching `assert
    #   num_local_blocks <= len(remote_group)` (0.27.1 :2420) and `assert num_decode_blocks <=
    #   len(prefill_group)` (0.28.0 :2444, 0.32.0 :3453, 0.33.0 :3791). PR #50558 (closed unmerged).
    FailureClass(
        id="decode-more-blocks-than-prefill",
        title="The decode allocated more KV blocks for a request than the prefill sent: the NIXL worker's "
        "block-count assert kills the decode worker",
        matchers=(
            M(
                "assert num_decode_blocks <= len(prefill_group)",
                r"^\s*assert num_decode_blocks <= len\(prefill_group\)",
                "likely",
                source_needle="assert num_decode_blocks <= len(prefill_group)",
            ),
            M(
                "assert num_local_blocks <= len(remote_group)",
                r"^\s*assert num_local_blocks <= len\(remote_group\)",
                "likely",
                source_needle="assert num_local_blocks <= len(remote_group)",
            ),
            M(
                "assert num_local_blocks <= num_remote_blocks",
                r"^\s*assert num_local_blocks <= num_remote_blocks\s*$",
                "likely",
            ),
            C(
                "distributed/kv_transfer/kv_connector/v1/nixl/",
                "_apply_prefix_caching",
                kind="assert",
                condition="<= len(",
            ),
        ),
        lookalikes="The same worker's other block assert, `assert len(local_block_descs_ids) == "
        "len(remote_block_descs_ids)` in _read_blocks (hybrid/Mamba prefix-cache trimming, PR #41693), "
        "is a descriptor mismatch of equal block counts, not a decode with more blocks.",
        decides=(
            "a proxy that appends the prefill's first token to a prompt of an exact block multiple "
            "(PR #50558)",
            "speculative decoding on the decode (lookahead blocks, vllm#21583)",
        ),
        fix="Have the proxy send the decode the prompt the prefill computed (the first token as the "
        "request's first output, not appended to the prompt); PR #50558, which trims the extra local "
        "block, was closed unmerged, so no release tolerates it. With speculative decoding on the "
        "decode, keep the lookahead blocks out of the transfer (vllm#21583).",
        references=(
            "https://github.com/vllm-project/vllm/pull/50558",
            "https://github.com/vllm-project/vllm/issues/21583",
        ),
        next="pd-doctor repro --scenario d-extra-block",
        side="decode",
        fatal=True,
    ),
    # origin: vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py,
    #   NixlConnectorWorker._nixl_handshake, `raise RuntimeError(f"NIXL compatibility hash
    #   mismatch. Local: ..., Remote: ...")` when enforce_compat_hash and the hashes differ;
    #   0.27.1 :668, 0.28.0 :674, 0.32.0 :1081 (the hash covers vLLM and connector version, model,
    #   dtype, KV heads, attention backend, cache dtype, HMA, spec config, push/pull).
    FailureClass(
        id="nixl-compat-hash-mismatch",
        title="Prefill and decode disagree on the NIXL compatibility hash (vLLM version or config skew)",
        matchers=(
            M(
                "NIXL compatibility hash mismatch",
                r"NIXL compatibility hash mismatch",
                "decisive",
                source_needle="NIXL compatibility hash mismatch",
            ),
        ),
        lookalikes="`NIXL compatibility check passed` is the healthy line; a handshake that fails after it "
        "(block size, TP, layout) is another class.",
        fix="Run the same vLLM release and NIXL connector version on both sides with the same model, "
        "dtype, KV cache dtype, attention backend, HMA and connector options (e.g. "
        "enable_cross_layers_blocks on both, push or pull on both); roll upgrades as a new pool "
        "(llm-d: a new InferencePool per upgrade). enforce_handshake_compat=false only hides it.",
        references=(
            "https://github.com/ai-dynamo/dynamo/issues/10027",
            "https://github.com/vllm-project/vllm/pull/29503",
            "https://github.com/vllm-project/vllm/pull/49230",
        ),
        next=STATUS,
        side="decode",
    ),
    # origin: UCX (uct ib_mlx5_dv.c, `mlx5dv_devx_obj_modify(...) failed ... Remote I/O error`),
    #   not vLLM: the prefill engine's NIXL agent keeps UCX endpoints of a decode peer that was
    #   replaced on the same host:port; vLLM evicts replaced peers from 0.31.0 (TestPeerReplacement).
    FailureClass(
        id="stale-ucx-after-peer-restart",
        title="Prefill keeps stale UCX/NIXL state for a decode peer that restarted (every transfer fails)",
        matchers=(
            M(
                "mlx5dv_devx_obj_modify",
                r"mlx5dv_devx_obj_modify\([^)]*\) failed.*Remote I/O error",
                "possible",
                origin="ucx",
            ),
        ),
        excludes=(M("[ RUN", r"^\[ RUN\s+\]", origin="ucx"),),
        lookalikes="The same devx error inside a UCX test run (`[ RUN ]` gtest lines) is a UCX bug on "
        "devices without DDP (ucx PR #10478), not a restarted peer; a decode that segfaults in "
        "loadRemoteMD after a prefill restart (vllm#49238) is the mirror image.",
        decides=(
            "did a decode pod restart on the same host:port before the errors began?",
            "does restarting only this prefill engine clear it?",
        ),
        fix="Restart the prefill engines that had peered with the restarted decoders (their NIXL agent "
        f"holds stale endpoints); upgrade to a release that evicts replaced peers "
        f"({fixes.NIXL_EVICTS_REPLACED_PEERS.release}+), and do "
        "not trust HTTP 200 meanwhile (smg#2382: failed generations returned 200, finish_reason error).",
        references=(
            "https://github.com/smg-project/smg/issues/2382",
            "https://github.com/vllm-project/vllm/issues/49238",
        ),
        next=STATUS,
        side="prefill",
        consequence=True,
    ),
)
"""The 2026 entries, in the order verdicts of equal confidence are listed."""
