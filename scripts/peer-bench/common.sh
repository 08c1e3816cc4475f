# What the transformer peer benchmarks (flux_run.sh, zimage_run.sh, flux2_run.sh) share; sourced,
# with NAME (for messages) and the defaults rounds, depth, single and cli set before:
# - the arguments --rounds, --depth, --single-depth and --cli;
# - the peer's Python (.venv-cuda, else .venv-peer, made and filled from PyPI when missing): $venv;
# - the run's folder: $work (PEER_DIR, else a new temporary folder).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --single-depth) single=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    *) echo "$NAME peer-bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
venv=.venv-cuda
[ -x "$venv/bin/python" ] || venv=.venv-peer
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import torch, diffusers, safetensors' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch diffusers safetensors
work=${PEER_DIR:-$(mktemp -d)}
mkdir -p "$work"
