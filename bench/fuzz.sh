#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ for N minutes each:
#   bench/fuzz.sh [MINUTES] [TARGET...]      (default: 2 minutes, every target)
# Installs cargo-fuzz (pinned) if missing. Works on the stable toolchain: RUSTC_BOOTSTRAP=1
# lets cargo-fuzz pass its -Z flags, and `--sanitizer none` skips AddressSanitizer (which needs
# a nightly standard library); libFuzzer's coverage guidance, crash and leak-free timeout and
# RSS-limit detection still apply. A crash leaves its input in fuzz/artifacts/<target>/.
set -euo pipefail

CARGO_FUZZ_VERSION=0.13.2
minutes="${1:-2}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

python="${PYTHON:-python3}"
# The core links libpython (pyo3): the fuzz binaries need its directory at run time.
libdir="$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYO3_PYTHON="${PYO3_PYTHON:-$(command -v "$python")}"
export RUSTC_BOOTSTRAP=1

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(request_decoder batch_validator)
fi
for target in "${targets[@]}"; do
    if [ -z "$(ls -A "fuzz/corpus/$target" 2>/dev/null)" ]; then
        "$python" fuzz/seeds.py fuzz/corpus
    fi
    echo "== $target: $minutes minute(s)" >&2
    cargo fuzz run --sanitizer none "$target" -- \
        -max_total_time=$((minutes * 60)) -rss_limit_mb=2048 -max_len=1048576 -timeout=10 \
        -print_final_stats=1
done
