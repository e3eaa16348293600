"""The frozen result types every feature returns and every format reads (one module per feature).

`base` (the `Result` base and `SCHEMA_VERSION`), `repro` (the repro verdicts, both engines),
`checkconfig` (exposure, findings, what was read about the target), `launch` (the launch commands
and servers check-config reads), `triage`, `envs`, `matrix` (matrix and bisect), `hotfix`.
This layer imports nothing of pd-doctor above it (only `invllm/wire.py`'s typed JSON and
`hotfix_env`'s constants), so `formats/` can read results without loading any feature.
"""

from __future__ import annotations

from vllm_pd_doctor.results.base import SCHEMA_VERSION as SCHEMA_VERSION
from vllm_pd_doctor.results.base import Result as Result
