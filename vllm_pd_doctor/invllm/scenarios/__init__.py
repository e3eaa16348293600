"""P/D failure scenarios on vLLM's real scheduler: one module per scenario, found by its id.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). `runner.py` is the entry point
(`python -m <pkg>.scenarios.runner --spec JSON --out FILE`); `common.py` builds the real Scheduler,
connector scheduler half and KV cache manager (through `kvconfig.Setup`) and turns what vLLM does
into an outcome; each `<id>.py` (dashes as underscores) holds one recipe and its control. The
references of each scenario live in the tool's `vllm_pd_doctor/knowledge/facts/scenarios.py`.
"""
