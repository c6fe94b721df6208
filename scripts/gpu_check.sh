#!/usr/bin/env bash
# On a CUDA machine whose python already has torch, triton and transformers: the GPU tests (Triton kernels, models on
# the GPU, parity) and the GPU benchmarks, run from the source tree (the compiled CPU extension is not needed there).
#   bash scripts/gpu_check.sh [tests|kernels|rerank|graphs|profile|encode|scale|passages|all]   (default: all)
# Logs go to $OUT (the device tool's output folder) or runs/gpu/. The throughput benchmark reads its texts and
# tokenizer from GPU_TEXTS / GPU_TOKENIZER when the collections are not on that machine
# (`python benchmarks/encode_throughput.py --docs 2000 --dump-texts texts.json` writes them where they are).
# `scale` and `passages` read the models from GPU_MODELS (`scripts/gpu_pack.py unpack` makes it) and the passages'
# candidates from GPU_PAIRS (`python benchmarks/passages.py --queries 43 --dump-pairs pairs.json.gz` writes them).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOG="${OUT:-runs/gpu}"
mkdir -p "$LOG"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
what="${1:-all}"
status=0
step() { echo "== $1"; shift; "$@" || status=1; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__)"

if [[ $what == all || $what == tests ]]; then
  step tests python -m pytest -q -ra -p no:cacheprovider tests/test_gpu.py tests/test_tite_parity.py \
    tests/test_sparse_ce_parity.py 2>&1 | tee "$LOG/pytest.log"
fi
if [[ $what == all || $what == kernels ]]; then
  for dtype in bfloat16 float32; do
    step "window attention $dtype" python benchmarks/window_attention.py --device cuda --dtype "$dtype" \
      --lengths 512 1024 4096 16384 --windows 1 4 16 64 --batch 16 --eager-max-gib 8 --min-seconds 0.3 2>&1 \
      | grep -v USDT | tee "$LOG/window_attention_$dtype.md"
  done
fi
if [[ $what == all || $what == rerank ]]; then
  for baseline in sdpa eager; do
    step "rerank vs $baseline" python benchmarks/rerank_efficiency.py --device cuda --dtype bfloat16 \
      --passage-batch 64 --document-batch 16 --repeats 20 --document-repeats 10 --baseline-attention "$baseline" 2>&1 \
      | tee "$LOG/rerank_efficiency_$baseline.md"
  done
fi
if [[ $what == all || $what == graphs ]]; then
  step "rerank, CUDA graphs" python benchmarks/rerank_efficiency.py --device cuda --dtype bfloat16 --passage-batch 64 \
    --document-batch 16 --repeats 20 --document-repeats 10 --cuda-graphs 2>&1 | grep -v USDT \
    | tee "$LOG/rerank_graphs.md"
fi
if [[ $what == all || $what == profile ]]; then
  step profile python benchmarks/profile_models.py --device cuda --dtype bfloat16 ${GPU_TEXTS:+--texts "$GPU_TEXTS"} \
    ${GPU_TOKENIZER:+--tokenizer "$GPU_TOKENIZER"} 2>&1 | grep -v USDT > "$LOG/profile.md"
fi
if [[ $what == all || $what == encode ]]; then
  for width in 384 768; do
    step "encode $width" python benchmarks/encode_throughput.py --device cuda --dtype bfloat16 --width "$width" \
      --docs 2000 --queries 2000 --batch-size "${GPU_BATCH:-512}" --rounds 5 ${GPU_TEXTS:+--texts "$GPU_TEXTS"} \
      ${GPU_TOKENIZER:+--tokenizer "$GPU_TOKENIZER"} 2>&1 | tee "$LOG/encode_throughput_$width.md"
  done
fi
if [[ $what == all || $what == scale ]]; then
  step "scale, dense part" python benchmarks/scale_gpu.py --sizes 10000 100000 1000000 8841823 \
    ${GPU_MODELS:+--minilm "$GPU_MODELS/minilm" --splade "$GPU_MODELS/splade"} --out "$LOG/scale_gpu.json" 2>&1 \
    | tee "$LOG/scale_gpu.log"
fi
if [[ $what == all || $what == passages ]]; then
  for batch in 32 256; do
    step "passages, batch $batch" python benchmarks/passages.py --device cuda --rounds 5 --batch-size "$batch" \
      --systems ce,ce-bf16,mono,mono-bf16,sparse4,sparse4-bf16,celi ${GPU_PAIRS:+--pairs "$GPU_PAIRS"} \
      ${GPU_MODELS:+--folder "$GPU_MODELS/probe"} 2>&1 | grep -v "Loading weights" | tee "$LOG/passages_$batch.log"
  done
fi
exit $status
