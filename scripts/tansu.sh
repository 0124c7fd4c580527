#!/usr/bin/env bash
# A real Kafka-compatible broker for the end-to-end tests: tansu 0.6.0
# (Apache-2.0, written in Rust). Sourced by test.sh: builds it once (about
# 6 minutes on 2 cores) and exports JOBCAST_TEST_TANSU, the binary the
# tests start their own brokers from (in-memory storage, on loopback).
set -euo pipefail

TANSU_VERSION=0.6.0
TANSU_ROOT="${TANSU_ROOT:-$HOME/.cache/jobcast/tansu}"
TANSU_TARGET_DIR="${TANSU_TARGET_DIR:-$HOME/.cache/jobcast/tansu-target}"

if ! "$TANSU_ROOT/bin/tansu" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    echo "tansu: building $TANSU_VERSION into $TANSU_ROOT (once)" >&2
    # Its own target directory, so it never disturbs jobcast's build.
    # Unoptimised: it compiles in 6 minutes instead of 13 on 2 cores, and
    # the tests' load costs it about 2 minutes more in all (docs/performance.md,
    # "Build").
    CARGO_TARGET_DIR="$TANSU_TARGET_DIR" CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
        cargo install tansu --locked --version "$TANSU_VERSION" --features dynostore \
        --root "$TANSU_ROOT" --quiet
fi
export JOBCAST_TEST_TANSU="$TANSU_ROOT/bin/tansu"
