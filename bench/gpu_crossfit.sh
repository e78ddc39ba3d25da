#!/usr/bin/env bash
# One command, <= 10 minutes on one GPU: LoRA on all 30 layers of SmolLM2-135M, every run,
# cross-fitted over 5 instance folds (training.pipeline.gpu_crossfit, configs/gpu-crossfit.yaml).
#   bash bench/gpu_crossfit.sh [DATA] [OUT] [extra args...]     # the full run (CUDA expected)
#   bash bench/gpu_crossfit.sh --dry-run [DATA] [OUT]           # CPU check: 40 runs, 2 folds, 2 layers
# Prints what torch found (CUDA or not), the projected time after each pair (it stops, partial
# report written, exit status 3, when the 600 s budget would be passed) and OUT/report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
dry=()
if [[ "${1:-}" == "--dry-run" ]]; then dry=(--dry-run); shift; fi
data="${1:-../shared/data}"
out="${2:-runs/gpu-crossfit${dry:+-dry}}"
shift $(( $# > 2 ? 2 : $# ))
py="${PYTHON:-python}"
if [[ ${#dry[@]} -eq 0 ]] && ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  echo "gpu_crossfit: no CUDA device found; the full run needs a GPU (use --dry-run on a CPU)" >&2
  exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# On the GPU a cache of its own: bf16-autocast features never mix with a CPU run's fp32 ones.
if [[ ${#dry[@]} -eq 0 ]]; then export FAILFAST_CACHE="${FAILFAST_CACHE:-$out/cache}"; fi
exec "$py" bench/gpu_crossfit.py --data "$data" --out "$out" "${dry[@]}" "$@"
