"""vllm-pd-doctor: diagnose and reproduce vLLM P/D disaggregation failures over NIXL.

This package never imports vllm or torch at module level: code that needs them lives in
`vllm_pd_doctor.invllm` and runs inside the target vLLM interpreter, in its own process.
"""

__version__ = "0.1.0"

import sys as _sys

if _sys.argv and _sys.argv[0].rpartition("/")[2] == "pd-doctor":  # the console script: no
    from vllm_pd_doctor.infra import early as _early  # KeyboardInterrupt traceback while importing

    _early.install()
