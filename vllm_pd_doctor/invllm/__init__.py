"""Code that runs INSIDE the target vLLM interpreter (stdlib + vLLM only), shipped there by
`targetrun` as the package `vllm_pd_doctor_target`; each module answers typed JSON (`wire.py`)."""
