"""The environment setting that enables the opt-in #53514 hotfix plugin (`repro/hotfix.py`).

A module of its own, without imports, so that `pd-doctor`'s help can name it without loading
the hotfix machinery (`import vllm_pd_doctor.cli` stays light).
"""

ENV = "PD_DOCTOR_HOTFIX"
ISSUE = "53514"
ENV_SETTING = f"{ENV}={ISSUE}"
