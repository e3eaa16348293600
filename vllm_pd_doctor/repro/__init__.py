"""The repro feature: the request, the in-process and live engines, the scenario runner, matrix/bisect and
the hotfix.

Every engine takes one request (request.py) and answers one `ReproReport` (results/repro.py); the code
that runs inside vLLM is invllm/.
"""
