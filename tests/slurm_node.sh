# slurm_node.sh: a private single-node Slurm for tests and benchmarks (sourced,
# not run). ../shared/reference/slurm-single-node.md's recipe (Debian 12,
# slurm-wlm 22.05, no systemd, no cgroups), but everything of its own under
# one directory: its munged on its own socket and key, slurm.conf there (the
# clients and jobs find it through $SLURM_CONF), state, spool, logs and pid
# files there, and ports nothing else listens on, so /etc is not touched and
# two copies (two worktrees' test suites) can run side by side.
#
#   slurm_node_usable            0 when this machine can run it (root, packages)
#   slurm_node_start DIR         starts munged, slurmctld, slurmd; returns once
#                                the node is idle (fails after 30 s)
#   slurm_node_stop              stops them (slurmd, slurmctld, munged), waits
#   slurm_node_wait TIMEOUT ID…  waits until the jobs have left the queue;
#                                fails when TIMEOUT seconds pass first
#   slurm_job_state ID           a job's JobState (COMPLETED, CANCELLED, …)

# Seconds slurm_node_start waits for the node to come up.
SLURM_NODE_START_S=30

# Why this machine cannot run a private Slurm (on stdout), or nothing.
slurm_node_usable() {
  if [ "$(id -u)" -ne 0 ]; then echo "not root (slurmd runs jobs as their users)"; return 1; fi
  local b
  for b in munged mungekey slurmctld slurmd; do
    [ -x "/usr/sbin/$b" ] || { echo "/usr/sbin/$b missing (apt-get install slurm-wlm munge)"; return 1; }
  done
  for b in sbatch squeue scontrol sinfo scancel; do
    command -v "$b" >/dev/null || { echo "$b missing (apt-get install slurm-wlm)"; return 1; }
  done
  return 0
}

# A TCP port on 127.0.0.1 that nothing listens on, from $1 upward.
slurm_free_port() {
  local p=$1
  while grep -qi ":$(printf '%04X' "$p") 00000000:0000 0A" /proc/net/tcp 2>/dev/null; do
    p=$((p + 1))
  done
  echo "$p"
}

slurm_node_start() {
  SLURM_NODE_DIR=$1
  local d=$SLURM_NODE_DIR
  mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/log"
  chmod 0700 "$d/munge"
  mungekey --create --keyfile="$d/munge/munge.key" >/dev/null 2>&1 || return 1
  chmod 0400 "$d/munge/munge.key"
  /usr/sbin/munged --force --socket="$d/munge/socket" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/log/munged.log" \
    --seed-file="$d/munge/seed" || return 1
  # Ports from a per-process base, so that two copies rarely probe the same.
  local ctl_port slurmd_port
  ctl_port=$(slurm_free_port $((20000 + $$ % 20000)))
  slurmd_port=$(slurm_free_port $((ctl_port + 1)))
  cat >"$d/slurm.conf" <<EOF
# A private single-node Slurm (tests/slurm_node.sh), no cgroups.
ClusterName=pgtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/socket
CryptoType=crypto/munge
MpiDefault=none
MailProg=/bin/true
SlurmctldPort=$ctl_port
SlurmdPort=$slurmd_port
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ReturnToService=2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# Jobs start as soon as they are submitted (the default waits up to 3 s a wave).
SchedulerParameters=batch_sched_delay=0
# A dependent whose afterok can no longer be met is cancelled, not left
# pending forever (DependencyNeverSatisfied).
DependencyParameters=kill_invalid_depend
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$d/slurm.conf
  /usr/sbin/slurmctld -D -i >"$d/log/slurmctld.stdout" 2>&1 &
  SLURM_CTLD_PID=$!
  /usr/sbin/slurmd -D -N localhost >"$d/log/slurmd.stdout" 2>&1 &
  SLURM_SLURMD_PID=$!
  local i
  for ((i = 0; i < SLURM_NODE_START_S * 10; i++)); do
    [ "$(sinfo -h -N -o %T 2>/dev/null)" = idle ] && return 0
    sleep 0.1
  done
  echo "slurm_node: the node did not come up in ${SLURM_NODE_START_S} s; logs in $d/log" >&2
  return 1
}

# Sends TERM to pid $1 and waits up to 10 s for it to go (then KILL).
slurm_stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    # A zombie (PID 1 reaps lazily) has stopped.
    [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ] && return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

slurm_node_stop() {
  local d=${SLURM_NODE_DIR:-}
  slurm_stop_pid "${SLURM_SLURMD_PID:-}"
  slurm_stop_pid "${SLURM_CTLD_PID:-}"
  [ -n "${SLURM_SLURMD_PID:-}" ] && wait "$SLURM_SLURMD_PID" 2>/dev/null
  [ -n "${SLURM_CTLD_PID:-}" ] && wait "$SLURM_CTLD_PID" 2>/dev/null
  if [ -n "$d" ] && [ -s "$d/munge/munged.pid" ]; then
    slurm_stop_pid "$(cat "$d/munge/munged.pid")"
  fi
  SLURM_SLURMD_PID="" SLURM_CTLD_PID=""
  return 0
}

slurm_node_wait() {
  local timeout=$1
  shift
  local ids
  ids=$(IFS=,; echo "$*")
  local deadline=$((SECONDS + timeout))
  while [ -n "$(squeue -h -j "$ids" 2>/dev/null)" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "slurm_node: jobs $ids still queued after ${timeout} s:" >&2
      squeue -j "$ids" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

slurm_job_state() {
  scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -1
}
