"""Models: one resolver for `--model` (a directory, a config.json, a bundled family or a Hugging Face id),
what a config.json says, and the family through the installed vLLM.
"""
