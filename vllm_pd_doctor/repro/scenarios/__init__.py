"""`pd-doctor repro --scenario`: P/D failure scenarios on vLLM's real scheduler, per release.

`run.py` runs the target's `repro/scenarios/runner.py` in one vLLM child and reads its answer into the
types of `results.py`; `repro/matrix.py` does it release by release; `formats.py` renders them. The
scenarios themselves (ids, references) are `vllm_pd_doctor/knowledge/facts/scenarios.py`.
"""
