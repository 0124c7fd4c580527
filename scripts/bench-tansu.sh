#!/usr/bin/env bash
# `jobcast bench` against a real broker process: starts a fresh tansu 0.6.0
# (in-memory storage, loopback, a free port), runs `jobcast bench ARGS…
# --brokers 127.0.0.1:PORT`, and stops the broker. A fresh broker for every
# run: tansu's memory storage keeps what earlier runs wrote, and its
# latencies grow with it (docs/performance.md). A benchmark, not a test.
#
# Usage: scripts/bench-tansu.sh pipeline|latency [jobcast bench options]
#   e.g. scripts/bench-tansu.sh pipeline --generate-jobs 5000 --seed 1 \
#          --partitions 8 --write-property batch.num.messages=1
#        scripts/bench-tansu.sh latency --generate-jobs 2000 --seed 1 \
#          --rates 1000,10000,20000 --partitions 8 -X fetch.wait.max.ms=1 \
#          --write-property linger.ms=0
# Environment:
#   JOBCAST  the jobcast binary (default: $CARGO_TARGET_DIR/release/jobcast,
#            else /root/.cache/jobcast/target/release/jobcast)
set -euo pipefail

[[ $# -ge 1 ]] || { sed -n '2,15p' "$0" >&2; exit 2; }
JOBCAST="${JOBCAST:-${CARGO_TARGET_DIR:-/root/.cache/jobcast/target}/release/jobcast}"
[[ -x "$JOBCAST" ]] || { echo "bench-tansu: no jobcast binary at $JOBCAST (build it, or set JOBCAST)" >&2; exit 1; }

# Builds tansu once, optimised (what a benchmark measures is the broker a
# user would run), and exports JOBCAST_TEST_TANSU.
TANSU_OPT_LEVEL=3 source "$(dirname "$0")/tansu.sh"

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
LOG="$(mktemp -t bench-tansu.XXXXXX.log)"
"$JOBCAST_TEST_TANSU" broker --storage-engine memory://tansu/ \
    --listener-url "tcp://127.0.0.1:$PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$PORT" >"$LOG" 2>&1 &
BROKER=$!
trap 'kill "$BROKER" 2>/dev/null; wait "$BROKER" 2>/dev/null || true' EXIT

for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        break
    fi
    kill -0 "$BROKER" 2>/dev/null || { echo "bench-tansu: tansu exited (log: $LOG)" >&2; exit 1; }
    sleep 0.1
done
echo "bench-tansu: tansu $TANSU_VERSION on 127.0.0.1:$PORT (log: $LOG)" >&2
"$JOBCAST" bench "$@" --brokers "127.0.0.1:$PORT"
