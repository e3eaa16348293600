"""Infrastructure every layer uses: errors and their exit codes, processes and their reaper, safe I/O,
input limits, sanitizing, progress, caches, the run of invllm/ code in another interpreter, provisioned
environments and the shell reader.
"""
