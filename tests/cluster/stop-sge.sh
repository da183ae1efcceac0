#!/usr/bin/env bash
# Stop the daemons start-sge.sh started (by their pid files only). Packages, configuration and
# spool are kept, so start-sge.sh brings the cluster back in a few seconds.
set -euo pipefail
[[ $EUID -eq 0 ]] || { echo "stop-sge.sh: must run as root" >&2; exit 1; }
. "$(dirname "$0")/common.sh"
spool=/var/spool/gridengine
for pidfile in "$spool"/execd/*/execd.pid; do   # execd spools under the name it resolved
  [[ ! -e $pidfile ]] || stop_daemon sge_execd "$pidfile" 30
done
stop_daemon sge_qmaster "$spool/qmaster/qmaster.pid" 30   # a clean shutdown takes ~10 s
