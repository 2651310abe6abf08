#!/usr/bin/env bash
# Issue 19: the product's `--liger` path on a GPU (tiny-llama, ZeRO-2 + optimizer offload, the recipe's shape),
# with and without --liger, same seed and data: both must train; their first losses must agree (FLCE is exact).
#   bash benchmarks/device/call_liger_check.sh DEADLINE_S
set -u
DEADLINE=$1
. benchmarks/device/setup.sh
A="--model tiny-llama --zero-stage 2 --offload-optimizer cpu --micro-batch 8 --seq-len 256 --max-steps 4 --lr 3e-3
   --seed 1234 --no-final-save --emulate-gpu-memory-gib 24"
for v in liger plain; do
  extra=""; [ $v = liger ] && extra="--liger"
  LEFT=$(( DEADLINE - SECONDS )); [ $LEFT -lt 20 ] && { echo "$v: not run, ${LEFT} s left"; continue; }
  timeout -k 10 $LEFT python3 -m cookbook.cli train $A $extra --output-dir /tmp/liger_$v > "$OUT/$v.log" 2>&1
  echo "$v rc=$?"; tail -3 "$OUT/$v.log"
  mkdir -p "$OUT/$v" && cp /tmp/liger_$v/{summary.json,metrics.jsonl,command.sh} "$OUT/$v/" 2>/dev/null
done
