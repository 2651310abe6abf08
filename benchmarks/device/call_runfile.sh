#!/usr/bin/env bash
# Issue 19: the shipped run file notebooks/llama7b-1x4090.yaml as a user runs it (fp32 states, ZeRO-3 + optimizer
# offload, parameters on the GPU), random weights of LLaMA-7B, the shipped chats packed into 1024-token rows, at the
# run file's 8 x 2 and at article 001's 2 x 8 (same call). One H200 capped at 24 GiB.
#   bash benchmarks/device/call_runfile.sh DEADLINE_PER_RUN_S
set -u
LIMIT=${1:-250}
. benchmarks/device/setup.sh >/dev/null
for shape in "8 2" "2 8"; do
  set -- $shape
  name=runfile-${1}x${2}
  timeout -k 20 "$LIMIT" python3 -m cookbook.cli train notebooks/llama7b-1x4090.yaml --model llama-7b --random-weights \
    --dataset data/chats.jsonl --packing --max-steps 4 --eval-fraction 0 --eval-steps 0 --save-steps 0 --no-final-save \
    --verify-save off --emulate-gpu-memory-gib 24 --micro-batch "$1" --grad-accum "$2" --output-dir /tmp/$name \
    > /tmp/$name.console 2>&1
  echo "$name rc=$?"; tail -3 /tmp/$name.console
  mkdir -p $OUT/$name && cp /tmp/$name.console $OUT/$name/console.log
  (cd /tmp/$name && cp -r summary.json metrics.jsonl ds_config.json command.sh run.json run.resolved.yaml logs $OUT/$name/ 2>/dev/null)
done
ls -R $OUT | head -40
