#!/usr/bin/env bash
# Stop what scripts/cluster/up.sh started (its pids under $CLUSTER_DIR), jobs first. Safe to run twice.
C=${CLUSTER_DIR:-/tmp/vitbench-cluster}
[[ -f $C/pids ]] || exit 0
command -v scancel >/dev/null && scancel --quiet --full -u "$(id -un)" 2>/dev/null || true
stop() {  # stop PID: SIGTERM to its process group, SIGKILL after 10 s
  local pid=$1
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}
export RAY_AUTH_MODE=disabled
# in reverse order of start: ray, slurmd, slurmctld, slurmdbd, mariadb, munge
tac "$C/pids" | while read -r pid name; do stop "$pid"; done
rm -f "$C/pids"
echo "cluster down"
