# Stage selection and timing shared by recipes; source it after parse_options.sh.
#   stage=N (--stage N): run stage N and every later one, as Kaldi recipes do.
#   stage empty (the default): run a stage only when its outputs are missing, and say so when
#   they are complete, so that re-running ./run.sh after a failure goes on where it stopped.
#   stop_stage=M (--stop-stage M, where a recipe has it): no stage after M.
# Usage: if run_stage 1 exp/egs/info/num_archives; then ...; stage_done egs; fi
# stage_done NAME writes "NAME <wall s> <peak MB>" into $stage_times (default exp/stage_times):
# the wall time since the previous stage ended and the largest "# Peak memory" of the task logs
# (nnet-queue's, so whatever ran through $cmd / $train_cmd) written under exp/ meanwhile.
if [ -n "${stage:-}" ] && ! [[ "$stage" =~ ^-?[0-9]+$ ]]; then
  echo "$0: --stage must be an integer, got '$stage'" 1>&2; exit 1
fi
run_stage() {
  local n=$1 missing=0 f
  shift
  if [ -n "${stop_stage:-}" ] && [ "$n" -gt "$stop_stage" ]; then return 1; fi
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

stage_times=${stage_times:-exp/stage_times}
mkdir -p "$(dirname "$stage_times")"
stage_start=$(dirname "$stage_times")/.stage_start
touch "$stage_start"
stage_done() {
  local wall peak
  wall=$(( $(date +%s) - $(stat -c %Y "$stage_start") ))
  peak=$(find "$(dirname "$stage_times")" -name '*.log' -newer "$stage_start" -print0 | xargs -0 -r cat |
         awk '/^# Peak memory: [0-9]+ kB$/ && $4 > m { m = $4 } END { printf "%d", (m + 1023) / 1024 }')
  touch "$stage_times"
  sed -i "/^$1 /d" "$stage_times"
  echo "$1 $wall $peak" >> "$stage_times"
  touch "$stage_start"
}

# The table of $stage_times: wall time and peak memory per stage, and the total wall time.
print_stage_times() {
  [ -f "$stage_times" ] || return 0
  echo "Stage wall times (s) and peak memory of their tasks (MB):"
  awk '{ printf "  %-12s %6d %7s\n", $1, $2, ($3 == "" ? "-" : $3); t += $2 }
       END { printf "  %-12s %6d\n", "total", t }' "$stage_times"
}
