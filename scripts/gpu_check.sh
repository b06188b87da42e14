#!/bin/bash
# docs/gpu.md as one run on an NVIDIA GPU: every step within a deadline, its output kept under $W, and $W packed
# into $OUT/gpu-check.tgz after each step, so that a run cut short still keeps what it did.
#
#   DEADLINE=480 bash scripts/gpu_check.sh setup doctor timm sweep      (from the repository's root)
#
# Steps, run in the order given:
#   setup   versions of the GPU, driver, CUDA and packages (versions.out). Where a folder .whl exists, its wheels
#           are installed into /tmp/site first (a machine without a registry; the checkout on PYTHONPATH).
#   doctor  vitbench doctor --device gpu --json (doctor.json)
#   timm    timm's own benchmark.py beside vitbench's rows, where $TIMM_BENCHMARK names it (a checkout of
#           huggingface/pytorch-image-models): ViT-B/16 and R50x1, batch 256, AMP bf16 (timm-*.json)
#   resume  copy a store from an earlier run ($RESUME, a folder holding sweep/) so the sweep runs what is missing
#   sweep   vitbench sweep studies/gpu.yaml until the deadline (then the interrupted trial is recorded as such)
# Variables: DEADLINE (s, from the start), W (work folder), OUT, STUDY, DEV/JDEV (torch/JAX device names),
# VIT/RES (timm's model names), TB (timm's batch): the defaults are for the GPU; a CPU dry run of the script sets
# DEV=cpu JDEV=cpu and a CPU copy of the study.
set -u
START=$(date +%s); DEADLINE=${DEADLINE:-460}
W=${W:-/tmp/gpu-check}; mkdir -p "$W" "$W/bin"; OUT=${OUT:-$W/out}; mkdir -p "$OUT"
DEV=${DEV:-cuda}; JDEV=${JDEV:-gpu}; STUDY=${STUDY:-studies/gpu.yaml}
VIT=${VIT:-vit_base_patch16_224}; RES=${RES:-resnetv2_50x1_bit}; TB=${TB:-256}
TIMM_BENCHMARK=${TIMM_BENCHMARK:-}; RESUME=${RESUME:-}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
left() { echo $((DEADLINE - ($(date +%s) - START))); }
pack() { tar czf "$OUT/gpu-check.tgz.part" -C "$W" --exclude=bin --exclude=out . 2>/dev/null \
         && mv "$OUT/gpu-check.tgz.part" "$OUT/gpu-check.tgz"; }
step() {  # step NAME TIMEOUT_S command...: runs within what is left of the deadline, output in $W/NAME.out
  local name=$1 t=$2; shift 2
  local l; l=$(left); [ "$t" -gt $((l - 25)) ] && t=$((l - 25))
  if [ "$t" -lt 15 ]; then echo "SKIP $name (left ${l}s)" | tee -a "$W/steps.tsv"; return; fi
  local t0; t0=$(date +%s)
  echo "=== $name (timeout ${t}s, left ${l}s) $(date -u +%T)"
  timeout -k 10 "$t" "$@" > "$W/$name.out" 2>&1; local rc=$?
  printf '%s\trc=%s\t%ss\n' "$name" "$rc" $(( $(date +%s) - t0 )) | tee -a "$W/steps.tsv"
  tail -n 15 "$W/$name.out"; pack
}
if ! command -v vitbench >/dev/null; then  # a checkout that is not installed: its own command line (guarded:
  # the fork servers import the main script)
  printf '#!/usr/bin/env python3\nfrom vitbench.cli import main\nif __name__ == "__main__":\n    main()\n' \
    > "$W/bin/vitbench"; chmod +x "$W/bin/vitbench"
  export PATH=$W/bin:$PATH PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
for s in "$@"; do case $s in
setup)
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl > "$W/pip.out" 2>&1 || { cat "$W/pip.out"; exit 1; }
    export PYTHONPATH=$PWD:/tmp/site
  fi
  { date -u; uname -a; nproc; free -g | head -2; command -v nvidia-smi >/dev/null && nvidia-smi;
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv 2>&1
    python3 - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for m in ("torch", "torchvision", "timm", "jax", "jaxlib", "flax", "optax", "numpy", "pydantic", "pynvml"):
    try:
        mod = importlib.import_module(m); print(m, getattr(mod, "__version__", "?"), mod.__file__)
    except Exception as e: print(m, "MISSING", type(e).__name__, e)
import torch
print("torch.cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "available",
      torch.cuda.is_available())
if torch.cuda.is_available(): print(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
import jax; print("jax devices", jax.devices())
EOF
    git log -1 --format='vitbench %H %s' 2>/dev/null; vitbench --version 2>&1 | tail -3; } > "$W/versions.out" 2>&1
  cat "$W/versions.out"; pack ;;
doctor) step doctor 150 vitbench doctor --device "$JDEV" --json; cp "$W/doctor.out" "$W/doctor.json" ;;
timm)
  if [ -z "$TIMM_BENCHMARK" ]; then echo "SKIP timm (set TIMM_BENCHMARK to timm's benchmark.py)"; continue; fi
  step timm-vit 60 python3 "$TIMM_BENCHMARK" --device "$DEV" --model "$VIT" -b "$TB" --bench both --amp \
       --amp-dtype bfloat16 --results-file "$W/timm-vit.json" --results-format json
  step timm-r50 60 python3 "$TIMM_BENCHMARK" --device "$DEV" --model "$RES" -b "$TB" --bench both --amp \
       --amp-dtype bfloat16 --channels-last --results-file "$W/timm-r50.json" --results-format json ;;
resume)
  if [ -e "$W/sweep/results.jsonl" ]; then echo "not resumed: $W/sweep already holds a store"
  elif [ -n "$RESUME" ] && [ -d "$RESUME/sweep" ]; then  # into $W, never inside an existing $W/sweep
    cp -a "$RESUME/sweep" "$W/" && echo "resumed $(wc -l < "$W/sweep/results.jsonl") rows"; fi ;;
sweep)
  l=$(left); step sweep $((l - 30)) vitbench sweep "$STUDY" --results "$W/sweep" --allow-failures ;;
*) echo "unknown step $s (setup doctor timm resume sweep)"; exit 2 ;;
esac; done
printf 'total\t%ss\n' $(( $(date +%s) - START )) | tee -a "$W/steps.tsv"; pack; ls -la "$OUT"
