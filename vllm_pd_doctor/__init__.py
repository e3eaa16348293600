"""vllm-pd-doctor: diagnose and reproduce vLLM P/D disaggregation failures over NIXL.

This package never imports vllm or torch at module level: code that needs them lives in
`vllm_pd_doctor.target` and runs inside the target vLLM interpreter, in its own process.
"""

__version__ = "0.1.0"
