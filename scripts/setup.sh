#!/usr/bin/env bash
# Installs what building and testing jobcast needs on a fresh Debian
# machine. Idempotent: installs only what is missing. Sourced by run.sh and
# test.sh; safe to run on its own. With JOBCAST_SETUP_TESTS=1 (test.sh sets
# it) it also installs the validators the deployment tests run.
set -euo pipefail

# libclang for bindgen (RocksDB's bindings), a C/C++ toolchain and make for
# the bundled native libraries, pkg-config and zlib for librdkafka.
packages=(libclang-dev libssl-dev clang g++ make pkg-config zlib1g-dev)
testing=${JOBCAST_SETUP_TESTS:-0}
# Validators of deploy/ (tests/tests/deploy.rs): promtool, docker-compose
# (`config` needs no engine), systemd-analyze, and a Python venv; openssl
# and curl for the HTTPS test (tests/tests/security.rs); procps (kill,
# pgrep) for the tests that signal the processes they started.
[[ $testing == 1 ]] && packages+=(prometheus docker-compose systemd python3-venv openssl curl procps)

sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: cargo not found (install Rust 1.95+)" >&2; exit 1; }

# cargo-nextest, the test runner of scripts/test.sh (machines of this kind
# have it; elsewhere it is built once, a few minutes).
if [[ $testing == 1 ]] && ! cargo nextest --version >/dev/null 2>&1; then
    echo "setup: installing cargo-nextest" >&2
    cargo install cargo-nextest --locked --version 0.9.143 --quiet
fi

# Slurm and munge for the real-scheduler tests (tests/tests/slurm.rs), which
# start a throwaway cluster of their own, with slurmdbd and MariaDB for those
# that read its accounting (`sacct`); installing starts no service.
if [[ $testing == 1 ]]; then
    "${sudo_cmd[@]}" env JOBCAST_SLURM_ACCOUNTING=1 bash "$(dirname "${BASH_SOURCE[0]}")/slurm.sh" install
fi

# Kubernetes schema validators, outside the clone and reused across runs:
# kubernetes-validate (PyPI; bundles the Kubernetes API schemas) and the
# Prometheus Operator's ServiceMonitor schema (npm). Versions pinned.
export JOBCAST_VALIDATORS="${JOBCAST_VALIDATORS:-$HOME/.cache/jobcast/validators}"
if [[ $testing == 1 && ! -x $JOBCAST_VALIDATORS/venv/bin/kubernetes-validate ]]; then
    echo "setup: installing kubernetes-validate into $JOBCAST_VALIDATORS/venv" >&2
    python3 -m venv "$JOBCAST_VALIDATORS/venv"
    "$JOBCAST_VALIDATORS/venv/bin/pip" install -q kubernetes-validate==1.37.0
fi
if [[ $testing == 1 && ! -d $JOBCAST_VALIDATORS/npm/node_modules/@kubernetes-models/prometheus-operator ]]; then
    command -v npm >/dev/null || { echo "setup: npm not found (install Node.js 20+)" >&2; exit 1; }
    echo "setup: installing @kubernetes-models/prometheus-operator into $JOBCAST_VALIDATORS/npm" >&2
    mkdir -p "$JOBCAST_VALIDATORS/npm"
    npm install --prefix "$JOBCAST_VALIDATORS/npm" --no-audit --no-fund --silent \
        @kubernetes-models/prometheus-operator@6.0.0
fi

# One target directory outside the clone, reused across clones and runs.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/jobcast/target}"
mkdir -p "$CARGO_TARGET_DIR"
