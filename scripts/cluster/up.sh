#!/usr/bin/env bash
# Bring up a real single-node Slurm 22.05 (munge, MariaDB, slurmdbd, slurmctld, slurmd) and a real two-raylet
# Ray on loopback, for the real-engine tests (tests/test_executors_real.py). Debian 12, run as root, no systemd.
# Usage: scripts/cluster/up.sh [--install]   (state, logs and pids under $CLUSTER_DIR, default /tmp/vitbench-cluster)
#        scripts/cluster/up.sh --install-only (Debian's packages only, nothing started: .ci/run, beside pip's install)
#        scripts/cluster/up.sh --ray-worker  (start the second raylet again, e.g. after a test killed it)
#        scripts/cluster/up.sh --ray         (stop what is left of both raylets, start them again: after a test stopped
#                                             the head; a raylet without its head exits, its agents may linger)
# Ray's raylets and Slurm's jobs inherit this shell's environment (PYTHONPATH, VITBENCH_PLUGINS): set it first.
# Stop everything with scripts/cluster/down.sh (it reads $CLUSTER_DIR/pids).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
C=${CLUSTER_DIR:-/tmp/vitbench-cluster}
# Every service listens on loopback only (.ci/run checks it: scripts/cluster/check_listeners.py): munge on its unix
# socket, MariaDB on its unix socket only (--skip-networking; slurmdbd connects to "localhost", i.e. the socket),
# slurmdbd, slurmctld and slurmd on 127.0.0.1 (slurm.conf's CommunicationParameters), Ray on 127.0.0.1.
# Ray: a head and a second raylet, one CPU each, started through ray_loopback.py (why: see there); drivers need
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 to reach 127.0.0.1:6379. No dashboard; the Ray client server and the agents
# bind to the node IP, loopback. `vitbench_node: 1` marks a whole node (the ray executor asks for it to give a
# timing trial a node to itself)
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
RAY_ARGS=(--node-ip-address=127.0.0.1 --num-cpus=1 --object-store-memory=200000000 --resources='{"vitbench_node": 1}' --block)
start() {  # start NAME CMD...: a daemon in the foreground under setsid, its pid kept for down.sh (in place of an
  local name=$1; shift  # earlier one of that name, stopped first (stop_named): down.sh never signals a stale pid)
  stop_named "$name"
  setsid "$@" > "$C/logs/$name.out" 2>&1 < /dev/null &
  echo "$! $name" >> "$C/pids"
}
stop_named() {  # stop_named NAME: SIGTERM, then SIGKILL after 10 s, to the process group up.sh started as NAME
  local pid; pid=$(awk -v n="$1" '$2 == n {print $1}' "$C/pids" 2>/dev/null) || true
  [[ -n $pid ]] || return 0
  sed -i "/ $1\$/d" "$C/pids"
  kill -TERM -- "-$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || true
}
wait_for() {  # wait_for WHAT SECONDS CMD...
  local what=$1 n=$2; shift 2
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "cluster up: $what did not come up; logs in $C/logs" >&2; tail -n 20 "$C"/logs/*.out >&2; exit 1
}
alive_is() {  # alive_is N: exactly N raylets are alive in the head's view
  python -c "import ray,sys; ray.init(address='127.0.0.1:6379', logging_level='ERROR'); sys.exit(len([n for n in ray.nodes() if n['Alive']]) != $1)"
}
ray_worker() {  # after a test killed the second raylet, the head may still count it alive for a while: wait until it
  stop_named ray-worker  # does, or "2 alive" below would be the old one, and the new one would make 3 a moment later
  wait_for "the head to let the old second raylet go" 90 alive_is 1
  start ray-worker env -u RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER python "$HERE/ray_loopback.py" start --address=127.0.0.1:6379 "${RAY_ARGS[@]}"
  wait_for "second raylet" 90 alive_is 2
}
ray_head() {
  start ray-head python "$HERE/ray_loopback.py" start --head --port=6379 --include-dashboard=false \
    --dashboard-host=127.0.0.1 --ray-client-server-port=10001 --temp-dir="$C/ray" "${RAY_ARGS[@]}"
  wait_for "ray head" 90 ray status --address=127.0.0.1:6379
}
if [[ ${1:-} == --ray-worker ]]; then ray_worker; exit 0; fi
if [[ ${1:-} == --ray ]]; then stop_named ray-worker; ray_head; ray_worker; exit 0; fi
if [[ ${1:-} == --install || ${1:-} == --install-only ]]; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server >/dev/null
  if [[ $1 == --install-only ]]; then exit 0; fi
fi
mkdir -p "$C/logs" "$C/slurm/state" "$C/slurm/spool" /run/munge /run/mysqld
chmod 755 "$C"  # the slurm user reaches its state and logs through it (mktemp makes it 0700)
chown munge:munge /run/munge; chown mysql:mysql /run/mysqld; chown -R slurm:slurm "$C/slurm"
: > "$C/pids"
[[ -s /etc/munge/munge.key ]] || { mungekey -c -f -k /etc/munge/munge.key 2>/dev/null \
  || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
start munged runuser -u munge -- /usr/sbin/munged -F
start mariadbd /usr/sbin/mariadbd --user=mysql --skip-networking --bind-address=127.0.0.1
wait_for mariadb 60 mariadb -e 'select 1'
# a fresh accounting database: SLURM's job ids start again at 1 with a fresh state directory, and sacct would
# report an earlier cluster's job of the same id
mariadb -e "DROP DATABASE IF EXISTS vitbench_acct_db; CREATE DATABASE vitbench_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw'; GRANT ALL ON vitbench_acct_db.* TO 'slurm'@'localhost';"
mkdir -p /etc/slurm
for f in slurm.conf slurmdbd.conf; do
  sed "s#@CLUSTER_DIR@#$C#g; s#@HOSTNAME@#$(hostname)#g" "$HERE/$f" > "$C/$f"; ln -sf "$C/$f" "/etc/slurm/$f"
done
chown slurm:slurm "$C/slurmdbd.conf"; chmod 600 "$C/slurmdbd.conf"
touch "$C/logs/slurmctld.log" "$C/logs/slurmdbd.log" "$C/logs/slurmd.log"; chown slurm:slurm "$C"/logs/slurm*.log
start slurmdbd /usr/sbin/slurmdbd -D
wait_for slurmdbd 60 sacctmgr -n list cluster
sacctmgr -i add cluster vbci >/dev/null 2>&1 || true
start slurmctld /usr/sbin/slurmctld -D -i
wait_for slurmctld 60 scontrol ping
start slurmd /usr/sbin/slurmd -D
wait_for "slurmd (node idle)" 60 bash -c 'sinfo -h -o %t | grep -qx idle'
ray_head
ray_worker
echo "cluster up: slurm ($(sinfo -h -o '%P %D %t %c')) and ray (2 raylets) at 127.0.0.1:6379; state in $C"
