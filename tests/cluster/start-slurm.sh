#!/usr/bin/env bash
# Bring up a single-node Slurm (munge, slurmctld, slurmd) for nnet-queue's integration tests.
#
#   tests/cluster/start-slurm.sh                # as root; then sbatch / squeue / scontrol work
#   FAKE_GPUS=2 tests/cluster/start-slurm.sh    # the node also offers 2 GPUs (--gres=gpu:N)
#
# Debian/Ubuntu packages, daemons started directly (no systemd, no cgroups, no slurmdbd).
# Idempotent: running daemons are left alone unless the configuration this script writes
# changed (e.g. another FAKE_GPUS), in which case they are restarted to pick it up.
# Fake GPUs are character devices aliasing /dev/null, so Slurm counts, schedules and hands
# them out (CUDA_VISIBLE_DEVICES) exactly as real ones; nothing can compute on them.
set -euo pipefail

timeout=${START_TIMEOUT:-60}
fake_gpus=${FAKE_GPUS:-0}
cpus=$(nproc)
host=$(hostname -s)
logs=/var/log/slurm
spool=/var/spool/slurmd
export PATH=$PATH:/usr/sbin:/sbin

[[ $EUID -eq 0 ]] || { echo "start-slurm.sh: must run as root" >&2; exit 1; }
. "$(dirname "$0")/common.sh"
new=$(mktemp -d)
trap 'rm -rf "$new"' EXIT

fail() {
  echo "start-slurm.sh: $*" >&2
  for f in /var/log/munge/munged.log "$logs/slurmctld.log" "$logs/slurmd.log"; do
    echo "----- tail of $f -----" >&2
    tail -n 30 "$f" >&2 2>/dev/null || echo "(missing)" >&2
  done
  exit 1
}

for c in munged slurmctld slurmd sbatch; do
  command -v $c >/dev/null || { apt_install munge slurmctld slurmd slurm-client; break; }
done

# --- configuration, written to a temp dir and installed only when it differs ------------------
id slurm >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin slurm
install -d /etc/slurm "$spool"
install -d -o slurm -g slurm /var/spool/slurmctld "$logs"
mem_mb=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')   # what slurmd will detect
gres=""
if (( fake_gpus > 0 )); then
  gres="Gres=gpu:$fake_gpus"
  for (( g = 0; g < fake_gpus; g++ )); do
    [[ -c $spool/nvidia$g ]] || { rm -f "$spool/nvidia$g"; mknod -m 666 "$spool/nvidia$g" c 1 3; }
  done
  echo "Name=gpu File=$spool/nvidia[0-$(( fake_gpus - 1 ))]" >"$new/gres.conf"
fi
cat >"$new/slurm.conf" <<CONF
# Written by nnet-tools tests/cluster/start-slurm.sh: one node, no cgroups, no accounting database.
ClusterName=nnet
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=$spool
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
# Consumable CPUs and memory; with a default per CPU, small jobs share the node.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$(( mem_mb / cpus ))
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Without slurmdbd: one line per finished job or array task here, and finished jobs stay
# visible to scontrol for 10 minutes.
JobCompType=jobcomp/filetxt
JobCompLoc=$logs/jobcomp.log
MinJobAge=600
# Start queued tasks as soon as resources free up (the default waits up to 3 s per wave).
SchedulerParameters=batch_sched_delay=0
${gres:+GresTypes=gpu}
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb $gres State=UNKNOWN
# The partitions Kaldi's slurm.pl (and conf/queue.conf) ask for: -p shared, -p gpu.
PartitionName=shared Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
CONF
changed=
for f in slurm.conf gres.conf; do
  if [[ -e $new/$f ]]; then
    cmp -s "$new/$f" "/etc/slurm/$f" || { install -m 644 "$new/$f" "/etc/slurm/$f"; changed=1; }
  elif [[ -e /etc/slurm/$f ]]; then
    rm -f "/etc/slurm/$f"; changed=1
  fi
done

# --- daemons -------------------------------------------------------------------------------
start() {  # start <pidfile> <command...>: a self-daemonising command, unless already running
  local pidfile=$1; shift
  alive "$pidfile" && return 0
  rm -f "$pidfile"
  "$@" || fail "'$*' failed"
  for _ in $(seq 50); do alive "$pidfile" && return 0; sleep 0.2; done   # pid file comes late
  fail "'$*' did not stay up (no live pid in $pidfile)"
}
if [[ -n $changed ]]; then   # running daemons must re-read it
  ! alive /run/slurmd.pid || stop_daemon slurmd /run/slurmd.pid 15
  ! alive /run/slurmctld.pid || stop_daemon slurmctld /run/slurmctld.pid 15
fi
[[ -s /etc/munge/munge.key ]] || mungekey --create --keyfile /etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
install -d -o munge -g munge /run/munge
start /run/munge/munged.pid runuser -u munge -- munged
start /run/slurmctld.pid slurmctld
start /run/slurmd.pid slurmd

# --- ready when the node is idle (or busy) -------------------------------------------------
for (( i = 0; i < timeout; i++ )); do
  for d in /run/munge/munged.pid /run/slurmctld.pid /run/slurmd.pid; do
    alive "$d" || fail "$(basename "$d" .pid) is not running"
  done
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  case $state in
    idle|mixed|allocated)
      # Jobs an earlier test run left (killed at its time limit; slurmctld keeps its state across
      # restarts) would hold the node's CPUs while this run's tests wait: cancel those, only those.
      left=$(squeue -h -o '%A %Z' | awk '$2 ~ "^/tmp/pytest-of-" {print $1}' | sort -u)
      [[ -z $left ]] || { scancel $left; echo "start-slurm.sh: cancelled $(wc -w <<<"$left") jobs left by earlier test runs"; }
      echo "Slurm is up: node $host $state, $cpus CPUs, $mem_mb MB, $fake_gpus fake GPUs"
      exit 0 ;;
    down*|drain*) scontrol update NodeName="$host" State=RESUME 2>/dev/null || true ;;
    inval*) fail "slurmctld rejected node $host (see 'INVAL' in $logs/slurmctld.log)" ;;
  esac
  sleep 1
done
fail "node $host not idle after ${timeout}s (state: '${state:-none}')"
