#!/usr/bin/env bash
# Installs what building and testing jobcast needs on a fresh Debian
# machine. Idempotent: installs only what is missing. Sourced by run.sh and
# test.sh; safe to run on its own.
set -euo pipefail

# libclang for bindgen (RocksDB's bindings), a C/C++ toolchain and make for
# the bundled native libraries, pkg-config and zlib for librdkafka.
packages=(libclang-dev libssl-dev clang g++ make pkg-config zlib1g-dev)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: cargo not found (install Rust 1.95+)" >&2; exit 1; }

# One target directory outside the clone, reused across clones and runs.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/jobcast/target}"
mkdir -p "$CARGO_TARGET_DIR"
