# shellcheck shell=bash
# `phase NAME COMMAND...` runs COMMAND and records how long it took; `phase_summary` prints every phase's time.
# Sourced by scripts/check and .ci/run so a log says where the minutes went. When PIW_PHASE_LOG names a file,
# phases are appended there too, so .ci/run's summary includes the phases scripts/check ran.
PHASES=()

_now_ms() {
  local now=${EPOCHREALTIME/[.,]/}
  echo $((now / 1000))
}

phase() {
  local name=$1 start status=0 elapsed line
  shift
  start=$(_now_ms)
  "$@" || status=$?
  elapsed=$(($(_now_ms) - start))
  line=$(printf '%-20s %6d.%d s' "$name" $((elapsed / 1000)) $((elapsed % 1000 / 100)))
  [ "$status" = 0 ] || line="$line  (failed, exit $status)"
  PHASES+=("$line")
  if [ -n "${PIW_PHASE_LOG:-}" ]; then echo "$line" >>"$PIW_PHASE_LOG"; fi
  echo "── phase $line" >&2
  if [ "$status" != 0 ]; then
    phase_summary
    return "$status"
  fi
}

phase_summary() {
  echo "── phase times" >&2
  if [ -n "${PIW_PHASE_LOG:-}" ]; then
    sed 's/^/   /' "$PIW_PHASE_LOG" >&2
  else
    printf '   %s\n' "${PHASES[@]}" >&2
  fi
}
