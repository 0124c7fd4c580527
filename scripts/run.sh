#!/usr/bin/env bash
# jobcast's main job on the embedded default: `jobcast demo` runs the
# streaming service on librdkafka's in-process mock cluster (no broker to
# install) with RocksDB in a data directory, replays the bundled Google 2011
# excerpt into it, and prints a live and a final summary. Extra arguments go
# to `jobcast demo` (try --help); while it runs, the HTTP API and /metrics
# answer on http://127.0.0.1:8080.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

# The same build as scripts/test.sh, so the two share every artifact.
cargo build --release --locked --workspace --all-targets
exec "$CARGO_TARGET_DIR/release/jobcast" demo "$@"
