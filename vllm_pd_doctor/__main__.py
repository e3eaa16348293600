"""`python -m vllm_pd_doctor`: the console script, with the early signal policy installed first."""

from vllm_pd_doctor.infra import early

if __name__ == "__main__":
    early.install()  # before the imports of the CLI (a Ctrl-C there: one line, no traceback)

from vllm_pd_doctor.cli import main

if __name__ == "__main__":
    main()
