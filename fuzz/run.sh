#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 300), with the committed corpus as its
# seed; new inputs that reach new code are added to fuzz/corpus/TARGET/ (commit those
# worth keeping: `cargo test -p bridge` replays them). Needs cargo-fuzz
# (`cargo install cargo-fuzz`) and a C++ compiler; runs on stable Rust without sanitizers.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-300}
for target in http_head authority allowlist event_record socks5_request client_hello; do
    echo "== $target, ${seconds}s"
    cargo fuzz run --sanitizer none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -max_len=70000 -print_final_stats=1 2>&1 \
        | grep -E '^(#|stat::|==|INFO: (Running|Loaded|seed))|panicked|SUMMARY' | tail -n 12
done
