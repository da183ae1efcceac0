#!/usr/bin/env bash
# Bring up a single-node Grid Engine (Son of Grid Engine 8.1.9 from Debian, cell "default")
# for nnet-queue's integration tests.
#
#   tests/cluster/start-sge.sh                # as root; then qsub / qstat / qacct work
#   FAKE_GPUS=2 tests/cluster/start-sge.sh    # also a consumable complex gpu=2 (-l gpu=N)
#
# Queue all.q with one slot per CPU, parallel environment smp and consumable ram_free (what
# Kaldi's queue.pl options ask for), dispatch every second, accounting written at once (qacct),
# root may submit. sge_qmaster and sge_execd are started directly (no systemd).
# Idempotent: running daemons are left alone and the configuration is re-applied.
set -euo pipefail

timeout=${START_TIMEOUT:-60}
fake_gpus=${FAKE_GPUS:-0}
slots=$(nproc)
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
export PATH=$PATH:/usr/sbin:/sbin
common=$SGE_ROOT/$SGE_CELL/common
spool=/var/spool/gridengine

[[ $EUID -eq 0 ]] || { echo "start-sge.sh: must run as root" >&2; exit 1; }
. "$(dirname "$0")/common.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

installed() { [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) == ii* ]]; }
# sge_execd spools under the name it resolves for itself, which may be the alias.
execd_alive() { local f; for f in "$spool"/execd/*/execd.pid; do alive "$f" && return 0; done; return 1; }
fail() {
  echo "start-sge.sh: $*" >&2
  for f in "$spool"/qmaster/messages "$spool"/execd/*/messages /tmp/execd_messages.*; do
    [[ -e $f ]] || continue
    echo "----- tail of $f -----" >&2
    tail -n 30 "$f" >&2
  done
  exit 1
}

# The packages' set-up fails unless the host name resolves.
getent hosts "$(hostname)" >/dev/null || echo "127.0.1.1 $(hostname)" >>/etc/hosts

# --- packages (debconf answers for a non-interactive cell set-up) ------------------------------
if ! installed gridengine-master || ! installed gridengine-exec || ! installed gridengine-client; then
  debconf-set-selections <<ANSWERS
gridengine-common shared/gridengineconfig boolean true
gridengine-common shared/gridenginecell string $SGE_CELL
gridengine-common shared/gridenginemaster string $(hostname)
ANSWERS
  apt_install gridengine-master gridengine-exec gridengine-client
fi
if [[ ! -e $spool/spooldb/sge ]]; then   # the master's postinst normally made the cell
  su -s /bin/sh -c "/usr/share/gridengine/scripts/init_cluster $SGE_ROOT $SGE_CELL $spool/spooldb sgeadmin" sgeadmin
fi

# --- host names: local clients connect from 127.0.0.1, whose name ("localhost") must be
# declared an alias of this host or qmaster refuses them ---------------------------------
host=$(/usr/lib/gridengine/gethostname -aname)
addr=$(/usr/lib/gridengine/gethostbyname -all "$host" | sed -n 's/^Host Address(es): *\([^ ]*\).*/\1/p')
[[ $addr != 127.* ]] || addr=127.0.0.1
back=$(/usr/lib/gridengine/gethostbyaddr -name "$addr" 2>/dev/null || true)
if [[ -n $back && $back != "$host" ]]; then
  echo "$host $back" >"$common/host_aliases"
else
  rm -f "$common/host_aliases"
fi
echo "$host" >"$common/act_qmaster"

# --- qmaster -------------------------------------------------------------------------------
install -d -o sgeadmin -g sgeadmin /run/gridengine
alive "$spool/qmaster/qmaster.pid" || sge_qmaster || fail "sge_qmaster failed to start"
for (( i = 0; ; i++ )); do
  qconf -sh >/dev/null 2>&1 && break
  (( i < 3 )) || alive "$spool/qmaster/qmaster.pid" || fail "sge_qmaster is not running"
  (( i < timeout )) || fail "qmaster does not answer after ${timeout}s"
  sleep 1
done

# --- configuration, through qconf dumps edited and loaded back (safe to repeat) -------------
set_attrs() {  # set_attrs FILE ATTRIBUTE VALUE ...: edit a qconf dump in place
  local f=$1; shift
  sed -i -e ':a' -e '/\\$/{N;s/\\\n[[:space:]]*/ /;ba}' "$f"   # join continuation lines
  while (( $# )); do sed -i "s|^$1[[:space:]].*|$1 $2|" "$f"; shift 2; done
}
quiet() {  # quiet COMMAND...: its chatter only if it fails
  local out; out=$("$@" 2>&1) || { echo "$out" >&2; return 1; }
}
apply() {  # apply OBJECT NAME FILE: modify the object if it exists, else add it
  if qconf -s"$1" "$2" >/dev/null 2>&1; then quiet qconf -M"$1" "$3"; else quiet qconf -A"$1" "$3"; fi
}

mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)

# Root may run jobs (CI is root), no mail, accounting written at once for qacct. Job scripts run
# as plain shells, not login shells: a login shell sources the user's profile (here pyenv's
# re-hash, which waits 60 s on any lock an earlier killed task left), and qsub -v PATH passes
# what the tasks need.
qconf -sconf global >"$tmp/global"
set_attrs "$tmp/global" min_uid 0 min_gid 0 administrator_mail none login_shells none \
  reporting_params "accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00 accounting_flush_time=00:00:00"
quiet qconf -Mconf "$tmp/global"

# Dispatch every second (the default interval is 15 s).
qconf -ssconf >"$tmp/sconf"
set_attrs "$tmp/sconf" schedule_interval 0:0:1 flush_submit_sec 1 flush_finish_sec 1
quiet qconf -Msconf "$tmp/sconf"

# Consumables: ram_free always; gpu only with fake GPUs, so that elsewhere -l gpu=1 is
# refused at once ('unknown resource') instead of waiting for a GPU that never comes.
qconf -sc >"$tmp/complexes"
grep -q '^ram_free ' "$tmp/complexes" || echo 'ram_free rf MEMORY <= YES YES 0 0' >>"$tmp/complexes"
grep -q '^gpu ' "$tmp/complexes" || echo 'gpu gpu INT <= YES YES 0 0' >>"$tmp/complexes"
quiet qconf -Mc "$tmp/complexes"
# mem_free, a load value, gets a fixed host value too: qsub -w e checks a request against an
# empty cluster ignoring load values, so without it every -l mem_free=... would be refused.
host_values="ram_free=${mem_mb}M,mem_free=${mem_mb}M"
(( fake_gpus == 0 )) || host_values+=",gpu=$fake_gpus"
qconf -sh | grep -qx "$host" || quiet qconf -ah "$host"
qconf -ss 2>/dev/null | grep -qx "$host" || quiet qconf -as "$host"
cat >"$tmp/exechost" <<CONF
hostname $host
load_scaling NONE
complex_values $host_values
user_lists NONE
xuser_lists NONE
projects NONE
xprojects NONE
usage_scaling NONE
report_variables NONE
CONF
apply e "$host" "$tmp/exechost"
if (( fake_gpus == 0 )); then   # only now that no host refers to it
  sed -i '/^gpu /d' "$tmp/complexes" && quiet qconf -Mc "$tmp/complexes"
fi

printf 'group_name @allhosts\nhostlist %s\n' "$host" >"$tmp/allhosts"
apply hgrp @allhosts "$tmp/allhosts"

cat >"$tmp/smp" <<CONF
pe_name smp
slots 9999
user_lists NONE
xuser_lists NONE
start_proc_args NONE
stop_proc_args NONE
allocation_rule \$pe_slots
control_slaves FALSE
job_is_first_task TRUE
urgency_slots min
accounting_summary FALSE
qsort_args NONE
CONF
apply p smp "$tmp/smp"

qconf -sq >"$tmp/all.q"   # the built-in queue template
set_attrs "$tmp/all.q" qname all.q hostlist @allhosts slots "$slots" pe_list smp \
  load_thresholds NONE shell /bin/bash
apply q all.q "$tmp/all.q"

# --- execd; ready when the queue instance has a load value and no state flags --------------
execd_alive || sge_execd || fail "sge_execd failed to start"
for (( i = 0; i < timeout; i++ )); do
  line=$(qstat -f -q "all.q@$host" 2>/dev/null | awk -v q="all.q@$host" '$1 == q')
  if [[ -n $line && $(wc -w <<<"$line") -eq 5 && $line != *-NA-* ]]; then
    echo "Grid Engine is up: $line ($fake_gpus fake GPUs)"
    exit 0
  fi
  sleep 1
done
fail "queue all.q@$host not ready after ${timeout}s: '${line:-no queue instance}'"
