#!/usr/bin/env bash
# Peak resident memory of the streaming service holding many live tasks:
# generates a canonical JSON-lines trace of JOBS jobs x TASKS tasks, every task
# submitted and scheduled and none finished (no job ends), replays it through
# `jobcast demo` (`serve` on the embedded mock Kafka cluster) and reports the
# process's peak RSS (`/usr/bin/time -v`) and RSS per live task. A benchmark,
# not a test: it is not part of scripts/test.sh; figures go in
# docs/performance.md.
#
# Usage: scripts/bench-memory.sh [JOBS [TASKS [PARTITIONS]]]
#        (defaults 1000 jobs x 1000 tasks = 1M live tasks, 64 partitions)
# Environment:
#   JOBCAST    the jobcast binary (default: $CARGO_TARGET_DIR/release/jobcast,
#              else /root/.cache/jobcast/target/release/jobcast)
#   BENCH_DIR  where the generated trace goes (default ~/.cache/jobcast/bench);
#              a trace of the same shape is reused
#   ENDED      1: the control run. Each job is killed (`job_ended`) right after
#              its last task is scheduled, so the same events pass through the
#              mock cluster while at most one job is live; the difference of
#              the two peaks is what the live tasks cost
#   WINDOW     the demo's --window, events the replay may run ahead of the
#              service (default 20000: the demo's 5000 holds it to ~6,000 ev/s)
set -euo pipefail

JOBS="${1:-1000}"
TASKS="${2:-1000}"
PARTITIONS="${3:-64}"
WINDOW="${WINDOW:-20000}"
ENDED="${ENDED:-0}"
JOBCAST="${JOBCAST:-${CARGO_TARGET_DIR:-/root/.cache/jobcast/target}/release/jobcast}"
BENCH_DIR="${BENCH_DIR:-$HOME/.cache/jobcast/bench}"
if [[ "$ENDED" == 1 ]]; then
  TRACE="$BENCH_DIR/ended-${JOBS}x${TASKS}.jsonl"
else
  TRACE="$BENCH_DIR/live-${JOBS}x${TASKS}.jsonl"
fi

[[ -x "$JOBCAST" ]] || { echo "bench-memory: no jobcast binary at $JOBCAST (build it, or set JOBCAST)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "bench-memory: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
mkdir -p "$BENCH_DIR"

if [[ ! -s "$TRACE" ]]; then
  echo "bench-memory: writing $TRACE" >&2
  # Job j is submitted at (j + 1) x 1000 s; its tasks are submitted with it
  # and scheduled 1 ms apart on 10,000 machines, so the file is in event time
  # order and, unless ENDED=1, every task is still running at the end.
  python3 - "$JOBS" "$TASKS" "$ENDED" > "$TRACE.tmp" <<'PY'
import sys

jobs, tasks, ended = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
out = sys.stdout
for j in range(jobs):
    job_id = 1_000_000 + j
    t0 = (j + 1) * 1_000_000_000
    out.write(
        f'{{"v":1,"type":"job_submitted","time_us":{t0},"job_id":{job_id},'
        f'"user":"user-{j % 50}","job_name":"job-{j % 200}","logical_name":"logical-{j % 200}",'
        f'"scheduling_class":{j % 4},"priority":{j % 12},"cpu_request":0.0625,'
        f'"mem_request":0.03,"num_tasks":{tasks}}}\n'
    )
    out.writelines(
        f'{{"v":1,"type":"task","time_us":{t0},"job_id":{job_id},"task_index":{i},"kind":"submit"}}\n'
        for i in range(tasks)
    )
    out.writelines(
        f'{{"v":1,"type":"task","time_us":{t0 + 1000 * (i + 1)},"job_id":{job_id},'
        f'"task_index":{i},"kind":"schedule","machine_id":{(j * tasks + i) % 10_000}}}\n'
        for i in range(tasks)
    )
    if ended:
        out.write(
            f'{{"v":1,"type":"job_ended","time_us":{t0 + 1000 * (tasks + 1)},'
            f'"job_id":{job_id},"outcome":"kill"}}\n'
        )
PY
  mv "$TRACE.tmp" "$TRACE"
fi

LIVE=$((ENDED == 1 ? 0 : JOBS * TASKS))
echo "bench-memory: $(uptime)" >&2
echo "bench-memory: $JOBS jobs x $TASKS tasks, $LIVE live at the end, $(wc -l < "$TRACE") events, $PARTITIONS partitions, window $WINDOW" >&2
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
/usr/bin/time -v "$JOBCAST" demo --trace "$TRACE" --format jsonl --partitions "$PARTITIONS" \
  --window "$WINDOW" --http 127.0.0.1:0 2> "$LOG" | tail -n 20
# A short run may end before its first progress line.
grep -E 'ev/s' "$LOG" | tail -n 1 || true
grep -E 'Elapsed \(wall|Maximum resident' "$LOG"
PEAK_KB="$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$LOG")"
[[ -n "$PEAK_KB" ]] || { echo "bench-memory: no peak RSS in the time output:" >&2; cat "$LOG" >&2; exit 1; }
awk -v kb="$PEAK_KB" -v live="$LIVE" 'BEGIN {
  printf "peak RSS %.0f MiB (%.2f GiB) with %d live tasks at the end", kb / 1024, kb / 1048576, live
  if (live > 0) printf ": %.0f bytes per live task", kb * 1024 / live
  printf "\n" }'
