"""`pd-doctor report`: the bundle a vLLM maintainer needs for a P/D bug report.

collect.py (collectors with timeouts), redact.py, logs.py and render.py (pure functions),
bundle.py (assemble and write).
"""
