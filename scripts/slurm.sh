#!/usr/bin/env bash
# A throwaway single-node Slurm 22.05 cluster (Debian 12's packages), for
# tests and for trying jobcast with a real scheduler. Needs root; needs no
# systemd: the daemons run under nohup, tracked by PID files.
#
#   scripts/slurm.sh install          # the packages; starts no service
#   eval "$(scripts/slurm.sh up)"     # install if need be, start, wait for an idle node;
#                                     # prints `export SLURM_CONF=...`
#   scripts/slurm.sh status | down    # [DIR] after each command, too
#
# DIR (default $JOBCAST_SLURM_DIR, else ~/.cache/jobcast/slurm) holds the
# config, state (kept by `down`: job IDs go on; remove DIR to start afresh),
# spool, logs and PID files. The node offers
# JOBCAST_SLURM_CPUS (8) CPUs and JOBCAST_SLURM_MEMORY_MB (8000) MB whatever
# the machine has. The cluster is JOBCAST_SLURM_CLUSTER (jobcast), its
# controller listens on JOBCAST_SLURM_PORT (6817) and its node on the port
# after; its job IDs start at JOBCAST_SLURM_FIRST_JOB_ID (1). Two clusters
# side by side (a federation) take other ports and job ID ranges.
#
# With JOBCAST_SLURM_ACCOUNTING=1 the cluster keeps accounting, for
# `sacct`: a MariaDB of its own (DIR/mysql, on 127.0.0.1 at the port three
# after the controller's, no passwords: a throwaway) under a slurmdbd (two
# after). `down` stops them too; the database stays with DIR. Finished
# jobs stay listed JOBCAST_SLURM_MIN_JOB_AGE (300) seconds. With
# JOBCAST_SLURM_DBD_PORT=PORT the cluster keeps its accounting in the
# slurmdbd already listening on PORT (another cluster's, up first) and
# starts none: clusters sharing a slurmdbd take `sbatch -M`.
set -euo pipefail

cmd=${1:-}
dir=$(realpath -m "${2:-${JOBCAST_SLURM_DIR:-$HOME/.cache/jobcast/slurm}}")
export SLURM_CONF=$dir/slurm.conf
node=$(hostname -s)
cpus=${JOBCAST_SLURM_CPUS:-8}
mem=${JOBCAST_SLURM_MEMORY_MB:-8000}
cluster=${JOBCAST_SLURM_CLUSTER:-jobcast}
port=${JOBCAST_SLURM_PORT:-6817}
first_job_id=${JOBCAST_SLURM_FIRST_JOB_ID:-1}
accounting=${JOBCAST_SLURM_ACCOUNTING:-0}
min_job_age=${JOBCAST_SLURM_MIN_JOB_AGE:-300}
dbd_port=$((port + 2))
db_port=$((port + 3))
shared_dbd=${JOBCAST_SLURM_DBD_PORT:-}
if [[ -n $shared_dbd ]]; then
    [[ $shared_dbd =~ ^[0-9]+$ ]] ||
        { echo "slurm: JOBCAST_SLURM_DBD_PORT=$shared_dbd: expected a port number" >&2; exit 2; }
    accounting=1
    dbd_port=$shared_dbd
fi

log() { echo "slurm: $*" >&2; }
need_root() { [[ $(id -u) -eq 0 ]] || { log "must run as root"; exit 1; }; }
# alive NAME: DIR/NAME.pid names a live process called NAME (not a reused PID).
alive() { [[ $(cat "/proc/$(cat "$dir/$1.pid" 2>/dev/null)/comm" 2>/dev/null) == "$1" ]]; }

install_packages() {
    need_root
    local p missing=()
    local packages=(slurmctld slurmd slurm-client munge)
    [[ $accounting == 1 ]] && packages+=(slurmdbd mariadb-server)
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]}"
    # The postinst scripts start their services through invoke-rc.d; a
    # policy-rc.d answering 101 (forbidden) keeps them stopped. Ours only if
    # there is none already (Docker-like images ship one).
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    # needrestart (if installed) would ask, and warns without a terminal.
    export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
    # stdout is `up`'s answer (what `eval` runs): apt's goes to stderr.
    compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || apt-get update -qq >&2
    apt-get install -y -qq "${missing[@]}" >/dev/null ||
        { apt-get update -qq >&2 && apt-get install -y -qq "${missing[@]}" >/dev/null; }
}

# One munged serves every cluster of this script on the machine. Its users
# (cluster DIRs, one a line) and the PID of the munged the script started
# are kept under /run, changed only under the lock: a cluster's `down`
# stops munged only when no other cluster still uses it (another test's
# cluster may have come up meanwhile), and never one it did not start.
munge_lock=/run/jobcast-munge.lock
munge_users=/run/jobcast-munge.users
munge_pid=/run/jobcast-munge.pid

# munge_users_without DIR: the users but DIR and those whose DIR is gone (a
# cluster removed without `down`).
munge_users_without() {
    local d
    [[ -f $munge_users ]] || return 0
    while IFS= read -r d; do
        if [[ $d != "$1" && -d $d ]]; then echo "$d"; fi
    done <"$munge_users"
}

# munged as the munge user, unless one already answers. It refuses a key or
# directories that others could read or write, or that munge does not own.
# One start at a time (the lock is let go as the function returns): tests
# bring clusters up side by side, and of two munged started at once all but
# one fail to lock the socket.
start_munge() {
    local lock users
    exec {lock}>"$munge_lock"
    flock "$lock"
    users=$(munge_users_without "$dir")
    printf '%s\n' ${users:+"$users"} "$dir" >"$munge_users"
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    local key=/etc/munge/munge.key
    [[ -s $key ]] || mungekey --create --keyfile="$key"
    chown munge:munge "$key" && chmod 0400 "$key"
    if ! munge_answers; then
        local tries
        for ((tries = 0; tries < 40; tries++)); do
            # Forks once its socket is up; without the lock, which it would
            # otherwise hold for as long as it runs.
            if runuser -u munge -- munged {lock}>&- 2>"$dir/munged.err"; then
                cp /run/munge/munged.pid "$munge_pid"
                break
            fi
            # Another munged holds the socket: one too busy to answer the
            # check in time, or one a cluster's `down` is still stopping.
            # Use it if it answers now, else start ours once it is gone.
            sleep 0.5
            munge_answers && break
        done
        if ! munge_answers; then
            cat "$dir/munged.err" >&2
            exec {lock}>&-
            return 1
        fi
    fi
    exec {lock}>&-
}

# Whether a munged answers: a credential it makes can be decoded.
munge_answers() {
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1
}

# This cluster no longer uses munged; the last user stops the munged that
# `start_munge` started (SIGTERM, then SIGKILL after 20 s).
stop_munge() {
    local lock users pid i
    exec {lock}>"$munge_lock"
    flock "$lock"
    users=$(munge_users_without "$dir")
    printf '%s' "${users:+$users$'\n'}" >"$munge_users"
    pid=$(cat "$munge_pid" 2>/dev/null) || pid=
    if [[ -z $users && -n $pid ]]; then
        if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == munged ]]; then
            kill "$pid"
            for ((i = 0; i < 40; i++)); do
                [[ $(cat "/proc/$pid/comm" 2>/dev/null) == munged ]] || break
                sleep 0.5
            done
            if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == munged ]]; then kill -9 "$pid"; fi
        fi
        rm -f "$munge_pid"
    fi
    exec {lock}>&-
}

write_conf() {
    mkdir -p "$dir/state" "$dir/spool"
    cat >"$SLURM_CONF" <<EOF
# Written by scripts/slurm.sh: a throwaway single-node cluster.
ClusterName=$cluster
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
FirstJobId=$first_job_id
SlurmUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No cgroups here: plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((mem / cpus))
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1,bf_resolution=1
PriorityType=priority/multifactor
MailProg=/bin/true
# Slurm starts pending work when a job's epilog completes. With no epilog
# it waits for its next periodic pass (up to sched_interval, a second),
# and anything that calls the scheduler sooner (each scontrol update
# does) starts jobs faster: an empty epilog has every job's end schedule.
Epilog=/bin/true
JobCompType=jobcomp/none
$(accounting_conf)
ReturnToService=2
# Finished jobs stay this long (s) in squeue --json, squeue -t all, scontrol.
MinJobAge=$min_job_age
# The node offers what is written below, not what the machine has.
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

# The lines of slurm.conf that send the jobs to slurmdbd, with accounting.
accounting_conf() {
    [[ $accounting == 1 ]] || return 0
    cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
JobAcctGatherType=jobacct_gather/none
EOF
}

# db_answers: MariaDB takes a query.
db_answers() { mariadb -h 127.0.0.1 -P "$db_port" -u root -e 'select 1' >/dev/null 2>&1; }

# MariaDB on DIR/mysql and slurmdbd over it, unless they run; the cluster
# registered. slurmdbd reads slurmdbd.conf beside SLURM_CONF.
start_accounting() {
    local i
    if [[ -n $shared_dbd ]]; then
        :   # another cluster's slurmdbd
    elif ! alive mariadbd; then
        if [[ ! -d $dir/mysql/mysql ]]; then
            mariadb-install-db --user=root --datadir="$dir/mysql" --skip-test-db \
                --auth-root-authentication-method=normal >"$dir/mariadb-install.log" 2>&1 ||
                { cat "$dir/mariadb-install.log" >&2; return 1; }
        fi
        # No grant tables: any local client is root (a throwaway database).
        nohup mariadbd --user=root --datadir="$dir/mysql" --socket="$dir/mysql.sock" \
            --port="$db_port" --bind-address=127.0.0.1 --skip-grant-tables \
            --pid-file="$dir/mysql/mariadbd.pid" --log-error="$dir/mariadbd.log" \
            >>"$dir/mariadbd.out" 2>&1 </dev/null &
        echo $! >"$dir/mariadbd.pid"
        for ((i = 0; i < 60; i++)); do
            sleep 0.5   # first, so that nohup has exec'd mariadbd
            db_answers && break
            alive mariadbd || break
        done
        db_answers ||
            { log "MariaDB did not answer; its log ends with:"; tail -n 15 "$dir/mariadbd.log" >&2; return 1; }
    fi
    if [[ -z $shared_dbd ]] && ! alive slurmdbd; then
        install -m 0600 /dev/null "$dir/slurmdbd.conf" || return 1
        cat >"$dir/slurmdbd.conf" <<EOF || return 1
# Written by scripts/slurm.sh: the accounting of a throwaway cluster.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/slurmdbd.pid.own
LogFile=$dir/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=root
StorageLoc=slurm_acct_db
EOF
        nohup slurmdbd -D >>"$dir/slurmdbd.out" 2>&1 </dev/null &
        echo $! >"$dir/slurmdbd.pid"
    fi
    for ((i = 0; i < 60; i++)); do
        sleep 0.5   # first, so that nohup has exec'd slurmdbd
        sacctmgr -n list cluster >/dev/null 2>&1 && break
        [[ -n $shared_dbd ]] || alive slurmdbd || break
    done
    if ! sacctmgr -n list cluster >/dev/null 2>&1; then
        [[ -z $shared_dbd ]] ||
            { log "no slurmdbd answers on port $shared_dbd (JOBCAST_SLURM_DBD_PORT): start the cluster that keeps it first"; return 1; }
        log "slurmdbd did not answer; its logs end with:"
        tail -n 15 "$dir/slurmdbd.out" "$dir/slurmdbd.log" >&2 2>/dev/null || true
        return 1
    fi
    [[ -n $(sacctmgr -n list cluster "$cluster" format=cluster 2>/dev/null) ]] ||
        sacctmgr -i add cluster "$cluster" >/dev/null || return 1
}

up() {
    need_root
    install_packages
    if ! alive slurmctld || ! alive slurmd; then
        mkdir -p "$dir"
        start_munge
        write_conf
        if [[ $accounting == 1 ]]; then
            start_accounting || { down; exit 1; }
        fi
        local name
        for name in slurmctld slurmd; do
            alive "$name" && continue
            # NAME.log is Slurm's log; NAME.out also has what precedes it.
            nohup "$name" -D -f "$SLURM_CONF" >>"$dir/$name.out" 2>&1 </dev/null &
            echo $! >"$dir/$name.pid"
        done
        local i ok= state
        for ((i = 1; i <= 60; i++)); do
            sleep 1   # first, so that nohup has exec'd the daemons
            # A daemon that died (a port taken, a bad config) will not come
            # back; and another cluster's controller could answer sinfo.
            { alive slurmctld && alive slurmd; } || break
            # Idle; or busy with jobs the saved state kept running (a
            # controller restarted under them).
            state=$(sinfo -h -n "$node" -o %t 2>/dev/null) || continue
            [[ $state == idle || ($state =~ ^(mix|alloc)$ &&
                -n $(squeue -h -t running,completing -o %i 2>/dev/null)) ]] && { ok=1; break; }
        done
        if [[ -z $ok ]]; then
            log "node $node not up after ${i} s; the logs in $dir end with:"
            tail -n 15 "$dir"/*.out >&2 2>/dev/null || true
            down
            exit 1
        fi
    elif [[ $accounting == 1 ]]; then
        # Up already: its accounting too, if it stopped.
        start_accounting || exit 1
    fi
    log "up: cluster $cluster, $cpus CPUs, $mem MB on node $node, partition debug; for sinfo, squeue, sbatch:"
    echo "export SLURM_CONF=$SLURM_CONF"
}

# stop NAME: SIGTERM, then SIGKILL after 20 s, of the recorded process only.
stop() {
    local i pid
    if alive "$1"; then
        pid=$(cat "$dir/$1.pid")
        kill "$pid"
        for ((i = 0; i < 40; i++)); do alive "$1" || break; sleep 0.5; done
        alive "$1" && { log "$1 ignored SIGTERM; killing"; kill -9 "$pid"; }
    fi
    rm -f "$dir/$1.pid"
}

down() {
    need_root
    # Cancel the jobs first: their slurmstepd processes would outlive slurmd.
    if alive slurmctld && [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
        scancel -p debug || true
        local i
        for ((i = 0; i < 20; i++)); do
            [[ -z $(squeue -h -t running,completing -o %i 2>/dev/null) ]] && break; sleep 0.5
        done
    fi
    stop slurmd
    stop slurmctld
    stop slurmdbd
    stop mariadbd
    stop_munge
    log "down ($dir)"
}

status() {
    local name rc=0
    local pid
    pid=$(cat "$munge_pid" 2>/dev/null) || pid=
    if [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == munged ]]; then
        echo "munged: running (pid $pid), used by $(wc -l <"$munge_users") cluster(s)"
    else
        echo "munged: not started by this script"
    fi
    for name in slurmctld slurmd; do
        if alive "$name"; then echo "$name: running (pid $(cat "$dir/$name.pid"))"
        else echo "$name: stopped"; rc=3; fi
    done
    for name in slurmdbd mariadbd; do
        if alive "$name"; then echo "$name: running (pid $(cat "$dir/$name.pid"))"; fi
    done
    ((rc)) || { sinfo; echo "export SLURM_CONF=$SLURM_CONF"; }
    return $rc
}

case $cmd in
    install) install_packages ;;
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 install | up [DIR] | down [DIR] | status [DIR]" >&2; exit 2 ;;
esac
