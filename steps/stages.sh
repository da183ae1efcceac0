# Stage selection shared by recipes; source it after parse_options.sh.
#   stage=N (--stage N): run stage N and every later one, as Kaldi recipes do.
#   stage empty (the default): run a stage only when its outputs are missing, and say so when
#   they are complete, so that re-running ./run.sh after a failure goes on where it stopped.
# Usage: if run_stage 1 exp/egs/info/num_archives; then ...; fi
if [ -n "${stage:-}" ] && ! [[ "$stage" =~ ^-?[0-9]+$ ]]; then
  echo "$0: --stage must be an integer, got '$stage'" 1>&2; exit 1
fi
run_stage() {
  local n=$1 missing=0 f
  shift
  if [ -n "${stage:-}" ]; then
    [ "$stage" -le "$n" ]
    return
  fi
  for f in "$@"; do [ -e "$f" ] || missing=1; done
  if [ $# -gt 0 ] && [ $missing = 0 ]; then
    echo "$0: stage $n: outputs complete ($*); skipping it (--stage $n runs it again)"
    return 1
  fi
  return 0
}
