"""`pd-doctor report`: the bundle a vLLM maintainer needs for a P/D bug report.

collect.py (collectors with timeouts; check-config and the repro through their own cores, in
this process), docs.py (typed results -> redacted documents), redact.py, logs.py and render.py
(pure functions), bundle.py (gather, build, write).
"""
