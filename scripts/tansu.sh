#!/usr/bin/env bash
# A real Kafka-compatible broker for the end-to-end tests: tansu 0.6.0
# (Apache-2.0, written in Rust). Sourced by test.sh: builds it once and
# exports JOBCAST_TEST_TANSU, the binary the tests start their own brokers
# from (in-memory storage, on loopback).
#
# The tests need a broker, not a fast one: unoptimised (TANSU_OPT_LEVEL=0,
# the default) it builds in 6 minutes on 2 cores instead of 13, and the
# tests' load costs it about 2 minutes more. Benchmarks (bench-tansu.sh)
# ask for TANSU_OPT_LEVEL=3. Each level is installed once, beside the other.
set -euo pipefail

TANSU_VERSION=0.6.0
TANSU_OPT_LEVEL="${TANSU_OPT_LEVEL:-0}"
TANSU_ROOT="${TANSU_ROOT:-$HOME/.cache/jobcast/tansu-opt$TANSU_OPT_LEVEL}"
TANSU_TARGET_DIR="${TANSU_TARGET_DIR:-$HOME/.cache/jobcast/tansu-target}"

if ! "$TANSU_ROOT/bin/tansu" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    echo "tansu: building $TANSU_VERSION (opt-level $TANSU_OPT_LEVEL) into $TANSU_ROOT (once)" >&2
    # Its own target directory, so it never disturbs jobcast's build.
    CARGO_TARGET_DIR="$TANSU_TARGET_DIR" CARGO_PROFILE_RELEASE_OPT_LEVEL="$TANSU_OPT_LEVEL" \
        cargo install tansu --locked --version "$TANSU_VERSION" --features dynostore \
        --root "$TANSU_ROOT" --quiet
fi
export JOBCAST_TEST_TANSU="$TANSU_ROOT/bin/tansu"
