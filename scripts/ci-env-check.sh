#!/usr/bin/env bash
# The conditions CI runners and operators impose, which the tests must set up themselves:
#  - the signal tests under `nohup` (SIGHUP inherited ignored) and from a shell's `&` (SIGINT ignored);
#  - the format/progress tests with TERM=dumb, NO_COLOR set, no TTY (stdin/stdout not a terminal);
#  - HOME pointing at an empty directory (tests use tmp_path / PD_DOCTOR_HOME, never the real HOME).
# Fast tier only (no vLLM): add PD_ENV_CHECK_MARK="" to include the vLLM signal tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=${PYTEST:-.venv/bin/pytest}
MARK=${PD_ENV_CHECK_MARK-"not vllm and not live"}
args=(-q -p no:cacheprovider)
[ -n "$MARK" ] && args+=(-m "$MARK")
rc=0
step() {
  local name=$1; shift
  echo "== env-check: $name" >&2
  # | cat: stdout is a pipe, not a TTY. Each step is bounded: one run of the formats step once hung
  # (pytest idle, no child) right after the live tier and passed in 7 s when repeated, cause not
  # found; a step past its bound is said and run once more, so a hang never eats CI's time.
  timeout -k 10 "${PD_ENV_CHECK_STEP_S:-300}" "$@" </dev/null 2>&1 | cat
  local r=${PIPESTATUS[0]}
  if [ "$r" -eq 124 ] || [ "$r" -eq 137 ]; then
    echo "env-check: $name did not finish within ${PD_ENV_CHECK_STEP_S:-300} s; running it once more" >&2
    timeout -k 10 "${PD_ENV_CHECK_STEP_S:-300}" "$@" </dev/null 2>&1 | cat
    r=${PIPESTATUS[0]}
  fi
  [ "$r" -eq 0 ] || { echo "env-check: $name failed (exit $r)" >&2; rc=$r; }
}
step "signals under nohup" nohup "$PYTEST" "${args[@]}" tests/infra/test_signals.py
step "signals with SIGINT ignored (a shell's &)" bash -c "trap '' INT; exec \"\$0\" \"\$@\"" \
  "$PYTEST" "${args[@]}" tests/infra/test_signals.py
step "formats with TERM=dumb NO_COLOR=1, no TTY" env TERM=dumb NO_COLOR=1 "$PYTEST" "${args[@]}" \
  tests/formats/test_formats.py tests/commands/test_cli_input.py
empty_home=$(mktemp -d)
step "formats and signals with an empty HOME" env HOME="$empty_home" XDG_CACHE_HOME= TERM=dumb \
  "$PYTEST" "${args[@]}" tests/formats/test_formats.py tests/infra/test_signals.py
rm -rf "$empty_home"
exit "$rc"
