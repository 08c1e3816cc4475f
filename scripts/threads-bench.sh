#!/usr/bin/env bash
# Generation beside other work (issue 44): the demo model at 64x64 (20 steps) and synthetic SD 1.5 at
# 512x512 (2 steps), each idle and beside a fixed background load (stress-ng --cpu N, N = the cores),
# with the engine's bounded OpenMP/OpenBLAS waits ("after") and with the libraries' defaults, which
# spin ("before": FP8S_DEFAULT_WAITS=off keeps the executable from setting them). The modes are
# alternated A B A B within one run; each cell is the median (min-max) of the runs' generation time
# (the report's denoise + decode, not the model load).
# Usage: scripts/threads-bench.sh [REPEATS] [DIR]   (default 3, /tmp/threads-bench)
#   MODES="before after passive" adds OMP_WAIT_POLICY=passive (sleep at once) as a third mode
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cli=${CLI:-build/engine/fp8studio-cli}
repeats=${1:-3}
dir=${2:-/tmp/threads-bench}
modes=${MODES:-before after}
mkdir -p "$dir"
command -v stress-ng >/dev/null || { echo "threads-bench: needs stress-ng (apt-get install stress-ng)" >&2; exit 2; }
cores=$(nproc)
ref=$PWD/../shared/reference
[ -n "${FP8S_CLIP_VOCAB:-}" ] || [ ! -d "$ref/clip" ] || export FP8S_CLIP_VOCAB=$ref/clip
sd15="$dir/sd15.safetensors"
[ -f "$sd15" ] || "$cli" make-synthetic --arch sd15 --out "$sd15" >/dev/null
unset GOMP_SPINCOUNT OMP_WAIT_POLICY OPENBLAS_THREAD_TIMEOUT OMP_NUM_THREADS FP8S_DEFAULT_WAITS

run() {  # mode model-args... ; prints the generation seconds
  local mode=$1
  shift
  local envs=()
  [ "$mode" = before ] && envs=(FP8S_DEFAULT_WAITS=off)
  [ "$mode" = passive ] && envs=(OMP_WAIT_POLICY=passive)
  env "${envs[@]}" "$cli" generate "$@" --prompt "a small yellow star in the top left corner on a blue background" \
    --seed 7 --outdir "$dir/out" --json --log-level warn |
    python3 -c 'import json,sys; t=json.load(sys.stdin)["timing"]; print("%.3f" % ((sum(t["denoise_ms"]) + t["decode_ms"]) / 1000))'
}

declare -A times
load_pid=
stop_load() { [ -z "$load_pid" ] || { kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true; load_pid=; }; }
trap stop_load EXIT
for model in demo sd15; do
  if [ "$model" = demo ]; then args=(--steps 20 --cfg 5 --sampler euler --schedule normal)
  else args=(--model "$sd15" --steps 2 --width 512 --height 512 --weights fp16); fi
  for load in idle loaded; do
    if [ "$load" = loaded ]; then
      stress-ng --cpu "$cores" --quiet &
      load_pid=$!
      sleep 1
    fi
    for ((i = 0; i < repeats; i++)); do
      for mode in $modes; do
        t=$(run "$mode" "${args[@]}")
        times[$model,$load,$mode]+="$t "
        echo "$model $load $mode: $t s" >&2
      done
    done
    stop_load
  done
done

stats() {  # "t1 t2 ..." -> "median (min-max)" and the median alone on the second line
  python3 -c 'import statistics,sys; v=sorted(map(float,sys.argv[1:])); print("%.2f s (%.2f-%.2f)" % (statistics.median(v), v[0], v[-1])); print(statistics.median(v))' $1
}
echo "| model | waits | idle | beside stress-ng --cpu $cores | loaded / idle |"
echo "|---|---|---|---|---|"
for model in demo sd15; do
  label="demo 64x64, 20 steps"
  [ "$model" = sd15 ] && label="synthetic SD 1.5 512x512, 2 steps"
  for mode in $modes; do
    mapfile -t idle < <(stats "${times[$model,idle,$mode]}")
    mapfile -t loaded < <(stats "${times[$model,loaded,$mode]}")
    ratio=$(python3 -c "print('%.1fx' % (${loaded[1]} / ${idle[1]}))")
    name="libraries' defaults (spin)"
    [ "$mode" = after ] && name="bounded (GOMP_SPINCOUNT=3000, OPENBLAS_THREAD_TIMEOUT=4)"
    [ "$mode" = passive ] && name="OMP_WAIT_POLICY=passive"
    echo "| $label | $name | ${idle[0]} | ${loaded[0]} | $ratio |"
  done
done
