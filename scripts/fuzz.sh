#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each for SECONDS
# (default 30) from a copy of its seed corpus. A crash, hang (>10 s per input) or out-of-memory (>2 GB) input
# lands in build-fuzz/artifacts/TARGET/ and makes the script fail; copy it to
# tests/fuzz/regressions/TARGET/ when fixed so the replay test keeps it fixed.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_safetensors fuzz_fp8_metadata fuzz_png_parameters fuzz_prompt fuzz_lora_keys fuzz_cli_numbers fuzz_image_ops fuzz_ldm_config)
if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: clang++ is missing; run ./scripts/install-deps.sh" >&2
  exit 1
fi
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" > /dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"
status=0
for t in "${targets[@]}"; do
  work="build-fuzz/corpus/$t"
  mkdir -p "$work" "build-fuzz/artifacts/$t"
  cp -n tests/fuzz/corpus/"$t"/* "$work"/ 2> /dev/null || true
  # the text parsers get inputs long enough to show quadratic work (issue 54: 128 KB of prompt took
  # 4-7 s, 1 MB over 120 s); -timeout is the limit per input
  max_len=131072
  case "$t" in fuzz_prompt | fuzz_safetensors) max_len=1048576 ;; esac
  echo "== $t: ${seconds} s"
  if ! ./build-fuzz/"$t" "$work" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len="$max_len" -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t/" \
      > "build-fuzz/$t.log" 2>&1; then
    status=1
    echo "$t: FAILED — see build-fuzz/$t.log and build-fuzz/artifacts/$t/"
  fi
  grep -E "DONE|stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY" "build-fuzz/$t.log" | sed "s/^/  /" || true
done
exit $status
