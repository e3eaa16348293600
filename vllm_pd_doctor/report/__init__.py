"""`pd-doctor report`: the bundle a vLLM maintainer needs for a P/D bug report.

collect.py (collectors with timeouts; check-config and the repro through their own cores, in
this process), bundle.py (gather, build, write), facts.py (the public facts: flags vLLM declares
non-secret, typed results made public with `dataclasses.replace`), public.py (`SafeText`: only
words of known-safe kinds, stable placeholders), redact/ (the second line: what is recognised is
replaced), render.py (report.md / report.json, the commands' results through `formats/`),
docs.py (title, commands), standalone.py (the repro/ folder), logs.py (log excerpts).
"""
