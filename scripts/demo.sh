#!/usr/bin/env bash
# Side by side: a vLLM release whose P-side truncation fires #53514, and one that is fixed.
set -u
pd-doctor envs create 0.28.0 0.32.0 >/dev/null || exit $?
declare -A verdict
for v in 0.28.0 0.32.0; do
  echo
  echo "=== pd-doctor repro --vllm $v"
  pd-doctor repro --vllm "$v" --quiet
  rc=$?
  case $rc in 0) verdict[$v]="not reproduced (exit 0)";; 1) verdict[$v]="REPRODUCED (exit 1)";;
    *) verdict[$v]="could not run (exit $rc)";; esac
done
echo
for v in 0.28.0 0.32.0; do echo "vLLM $v: ${verdict[$v]}"; done
[ "${verdict[0.28.0]}" = "REPRODUCED (exit 1)" ] && [ "${verdict[0.32.0]}" = "not reproduced (exit 0)" ]
