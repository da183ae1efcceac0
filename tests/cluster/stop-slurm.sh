#!/usr/bin/env bash
# Stop the daemons start-slurm.sh started (by their pid files only). Packages, configuration,
# logs and state are kept, so start-slurm.sh brings the cluster back in about a second.
set -euo pipefail
[[ $EUID -eq 0 ]] || { echo "stop-slurm.sh: must run as root" >&2; exit 1; }
. "$(dirname "$0")/common.sh"
# Compute daemon, then controller, then munge, through which both authenticate.
stop_daemon slurmd /run/slurmd.pid 15
stop_daemon slurmctld /run/slurmctld.pid 15
stop_daemon munged /run/munge/munged.pid 15
