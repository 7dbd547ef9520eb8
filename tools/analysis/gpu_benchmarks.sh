#!/usr/bin/env bash
# Every GPU benchmark of BENCHMARKS.md in one go, results written under OUT_DIR:
#   1. token-mixer sweep (tools/analysis/benchmark_mixers.py): all mixers and references at the
#      four B3 stage widths, grids 32..512, fp32 and autocast fp16 / bf16 (spectral work stays in
#      fp32 islands), fwd+bwd time and peak memory          -> mixers_cuda.{csv,md,*.png}
#   2. whole B3 segmentors at a 1024x1024 crop (tools/analysis/benchmark_model.py), every
#      configs/segformer_*_b3_cityscapes.py: training step (fwd+bwd+AdamW) and inference,
#      AmpOptimWrapper fp16 (the configs' setting) and bf16  -> models_cuda_{fp16,bf16}.{csv,md}
#   3. memory of one training step at 1024x1024, batch 1, every B3 config, fp32 and fp16
#      (tools/analysis/step_memory.py: peak, activations saved for backward, card sizes it
#      fits; BENCHMARKS.md has the CPU figures to confirm or refute) -> step_memory.{csv,md}
#   4. fp16 training check of every B3 config (tools/analysis/gpu_check_b3.py): losses finite,
#      loss scale stable, the injected-overflow loss-scale check -> gpu_check/gpu_check_b3.*
#   plus env.txt (nvidia-smi, versions) and summary.txt (exit status and seconds of each part).
# Sized for < 13 minutes on one H100/H200-class GPU; each part also has a hard time limit so the
# script always ends (a part that hits it is marked "timeout" in summary.txt and its files are
# missing). Parts run even if an earlier one fails.
#
# Usage: tools/analysis/gpu_benchmarks.sh OUT_DIR [--dry-run]
#   --dry-run: the same commands on the CPU in their --quick form (seconds), to check the script.
# Environment: PYTHON (default: .venv/bin/python if present, else python).
set -uo pipefail

usage() { echo "usage: $0 OUT_DIR [--dry-run]" >&2; exit 64; }
[[ $# -ge 1 && $# -le 2 ]] || usage
OUT=$1
DRY_RUN=0
if [[ $# -eq 2 ]]; then
  [[ $2 == --dry-run ]] || usage
  DRY_RUN=1
fi
[[ $OUT != -* ]] || usage

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x $ROOT/.venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python; fi
fi
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1

if [[ $DRY_RUN -eq 1 ]]; then
  MIXERS=(--device cpu --quick --dtypes fp32 bf16 --mixers afno esa)
  MODEL=(--device cpu --quick --configs configs/segformer_afno_b3_cityscapes.py)
  PRECISIONS=(fp32)
  MEMORY=(--device cpu --quick --configs configs/segformer_afno_b3_cityscapes.py)
  CHECK=(--dry-run --configs configs/segformer_afno_b3_cityscapes.py)
  LIMIT_MIXERS=120 LIMIT_MODEL=120 LIMIT_MEMORY=120 LIMIT_CHECK=120
else
  # 2 warm-up + 7 timed rounds; points predicted over 0.25 s per call (1 s at each stage's own
  # 1024-crop grid) are skipped (full attention at the largest grids).
  MIXERS=(--device cuda --dtypes fp32 fp16 bf16 --grids 32 64 128 256 512 --warmup 2
          --repeats 7 --max-call-s 0.25
          --mixers afno afno25 afno-composed gfn gfn-composed fnet fno esa sa axial)
  MODEL=(--device cuda --crop 1024 --batch 2 --warmup 2 --iters 5 --infer-iters 5)
  PRECISIONS=(fp16 bf16)
  MEMORY=(--device cuda)
  CHECK=()
  # Hard limits (each plus 10 s to write partial results): 200 + 2 x 110 + 150 + 180 s + 30 s
  # = 13 min.
  LIMIT_MIXERS=200 LIMIT_MODEL=110 LIMIT_MEMORY=150 LIMIT_CHECK=180
fi

{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  "$PYTHON" -c 'import torch, mmseg, mmengine; print("torch", torch.__version__, "cuda", torch.version.cuda, "mmseg", mmseg.__version__, "mmengine", mmengine.__version__)'
  git -C "$ROOT" rev-parse HEAD 2>/dev/null || true
} > "$OUT/env.txt" 2>&1

: > "$OUT/summary.txt"
run_part() {  # name, time limit (s), command...
  local name=$1 limit=$2 start status
  shift 2
  start=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/summary.txt"
  timeout --signal=INT --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  status=$?
  [[ $status -eq 124 || $status -eq 130 ]] && status="timeout after ${limit}s"
  echo "   status: $status, $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
}

run_part mixers "$LIMIT_MIXERS" "$PYTHON" tools/analysis/benchmark_mixers.py "${MIXERS[@]}" --out "$OUT"
for precision in "${PRECISIONS[@]}"; do
  run_part "models_$precision" "$LIMIT_MODEL" "$PYTHON" tools/analysis/benchmark_model.py \
    "${MODEL[@]}" --precision "$precision" --tag "_$precision" --out "$OUT"
done
run_part step_memory "$LIMIT_MEMORY" "$PYTHON" tools/analysis/step_memory.py "${MEMORY[@]}" \
  --precisions fp32 fp16 --out "$OUT"
run_part gpu_check "$LIMIT_CHECK" "$PYTHON" tools/analysis/gpu_check_b3.py "${CHECK[@]}" \
  --out "$OUT/gpu_check"
echo "results in $OUT:"
ls "$OUT"
