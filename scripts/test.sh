#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the build needs,
# builds everything in the release profile (the project's only profile),
# builds the tansu broker the end-to-end tests start, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBCAST_SETUP_TESTS=1 source scripts/setup.sh

# Build every target once, with the same feature resolution as the tests,
# so that the tests reuse these artifacts (the binary included).
cargo build --release --locked --workspace --all-targets
source scripts/tansu.sh
# The tests on the real Slurm cluster (ignored by default) mostly wait on
# Slurm: they run beside the suite, their output after it. Either failing
# fails the script, once both have ended (the Slurm tests stop the cluster
# they started).
slurm_log=$(mktemp)
cargo test --release --locked --workspace --test slurm -- --ignored >"$slurm_log" 2>&1 &
slurm_pid=$!
suite=0
cargo test --release --locked --workspace || suite=$?
slurm=0
wait "$slurm_pid" || slurm=$?
cat "$slurm_log"
rm -f "$slurm_log"
if ((suite || slurm)); then
    echo "test.sh: the suite exited with $suite, the Slurm tests with $slurm" >&2
    exit 1
fi
# The tests over the shared public traces (../shared/data), ignored by
# default since they need data beside the repository.
if [ -d ../shared/data ]; then
    cargo test --release --locked --workspace \
        --test formats --test evaluate --test risk --test risk_fit \
        --test gce_real --test google2011_real --test dag_names -- --ignored
else
    echo "test.sh: ../shared/data is absent: the tests over the shared traces (10, marked ignored) did not run" >&2
fi
# The long crash-safety run: a million events, 20 SIGKILLs (minutes).
cargo test --release --locked --workspace --test crash -- --ignored
