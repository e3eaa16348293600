"""`pd-doctor check-config`: static checks of a P/D launch (no import of vLLM or torch).

Core modules (parse, model_info, inspect_vllm, nixl_info, rules) return frozen dataclasses from
`types`; only `render` and the command layer turn them into text.
"""
