"""Target-side check (runs in a vLLM interpreter): the #53514 hotfix across a real preemption.

`python hotfix_preempt.py SPEC_JSON` with `vllm_pd_doctor_target` importable. Builds the harness's
real Scheduler for one connector, warms the prefix cache, then sends the trigger with a token
budget of one block so its prefill is chunked, preempts it after the first chunk through the
scheduler's own `_preempt_request` (popped from `running` first, as vLLM does), and steps it to
the end. Prints one JSON line: truncation events, hooks, whether an assertion fired.
"""

from __future__ import annotations

import json
import sys
import time

from vllm_pd_doctor_target import harness, hotfix, observe


def main() -> int:
    spec = json.loads(sys.argv[1])
    applied = hotfix.apply(spec["kv_connectors"]) if spec.get("hotfix") else None
    setup = harness.Setup(spec)
    results = {name: one(setup, spec, name) for name in spec["kv_connectors"]}
    print(
        json.dumps(
            {"results": results, "hotfix": [e["status"] for e in applied] if applied is not None else None}
        )
    )
    return 0


def one(setup: harness.Setup, spec: dict[str, object], name: str) -> dict[str, object]:
    vllm_config = setup.vllm_config(name)
    kv_cache_config = harness.build_kv_cache_config(setup, vllm_config, num_blocks=512)
    sched = harness.build_scheduler(vllm_config, kv_cache_config)
    rec = observe.Recorder()
    observe.wrap_connector(rec, sched.connector)
    observe.wrap_lookups(rec, sched.kv_cache_manager)
    factory = harness.RequestFactory(vllm_config)
    block = int(str(spec["block_size"]))
    prompt = [3 + (i * 7) % 500 for i in range(int(str(spec["prompt_len"])))]
    rec.phase = "warmup"
    harness.run_request(sched, rec, factory.make("warmup", prompt, {"do_remote_decode": True}))

    rec.phase = "trigger"
    sched.max_num_scheduled_tokens = block  # chunk the trigger's prefill: one block a step
    req = factory.make("trigger", prompt, {"do_remote_decode": True})
    observe.watch_prompt(rec, req)
    sched.add_request(req)
    fired = None
    preempted = False
    try:
        for _ in range(32):
            out = sched.schedule()
            sched.update_from_output(out, harness.fabricate_model_output(sched, out, token=7))
            if req.request_id not in sched.requests or req.is_finished():
                break
            if not preempted and req in sched.running and req.num_computed_tokens > 0:
                sched.running.remove(req)
                sched._preempt_request(req, time.time())
                rec.emit("preempted", request_id="trigger")
                preempted = True
    except AssertionError as exc:
        fired = str(exc) or "assert"
    truncs = rec.of_kind("truncate", "trigger")
    hooks = [e["hook"] for e in rec.of_kind("hook_enter", "trigger")]
    return {
        "preempted": preempted,
        "fired": fired,
        "num_preemptions": getattr(req, "num_preemptions", None),
        "truncations": [{"hook": e["hook"], "len_after": e["len_after"]} for e in truncs],
        "hooks": hooks,
        "prompt_len_after": len(req.prompt_token_ids),
        "finished": req.is_finished(),
    }


if __name__ == "__main__":
    sys.exit(main())
