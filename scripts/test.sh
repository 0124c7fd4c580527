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
# Every test, the ignored ones too (the crash run; the shared traces'
# tests), under cargo-nextest: each in a process of its own, those of all
# binaries side by side (.config/nextest.toml), since most of them wait.
# The tests over the shared public traces need ../shared/data beside the
# repository; without it they are left out, and said to be.
if [ -d ../shared/data ]; then
    cargo nextest run --release --locked --workspace --run-ignored all
else
    echo "test.sh: ../shared/data is absent: the tests over the shared traces (marked ignored) will not run" >&2
    cargo nextest run --release --locked --workspace
    cargo nextest run --release --locked --workspace --run-ignored only -E 'binary(crash)'
fi
# Doc-tests, which nextest does not run.
cargo test --release --locked --workspace --doc
