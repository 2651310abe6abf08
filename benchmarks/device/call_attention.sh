#!/usr/bin/env bash
# Issue 32: attention for packed rows through the whole recipe. One H200 capped at 24 GiB (--emulate-gpu-memory-gib 24),
# ZeRO-2 + optimizer offload to the CPU, fp32 Adam states (exact), bf16, gradient checkpointing, random weights,
# the shipped chats packed into 1024-token rows, 8 steps per run; the runs of one call are compared with each other.
#   ATTN_CHECK="benchmarks/models/llama-1b 4 1024" bash benchmarks/device/call_attention.sh "name:model:micro:attention:LIMIT_S[:liger[:EXTRA]]" ...
# EXTRA: more `cookbook train` flags, comma-separated, after the defaults (a later flag wins), e.g.
#   "7b:llama-7b:16:flex:280::--zero-stage=3,--offload-param=cpu,--bf16-states"; STEPS (default 8): steps per run.
# ATTN_CHECK (optional) first runs benchmarks/attention_check.py (per-token loss sdpa vs flex, flex compile time).
# Each run is stopped after LIMIT_S; PYTHONFAULTHANDLER + SIGABRT then print where every rank's threads were.
set -u
SPECS=("$@")
. benchmarks/device/setup.sh >/dev/null
if [ -n "${ATTN_CHECK:-}" ]; then
  IFS=, read -ra checks <<< "$ATTN_CHECK"
  for c in "${checks[@]}"; do
    set -- $c; timeout 150 python3 -m benchmarks.attention_check $c > "$OUT/check_${1##*/}_${2}x${3}.json" 2>/tmp/check.err \
      || tail -5 /tmp/check.err; cat "$OUT/check_${1##*/}_${2}x${3}.json" | grep -E "loss_diff|fwd_bwd" -A1 | head -20
  done
  set --
fi
export PYTHONFAULTHANDLER=1 TORCH_LOGS=recompiles
for spec in "${SPECS[@]}"; do
  IFS=: read -r name model micro attn LIMIT liger more <<< "$spec"
  extra=(); [ -n "${liger:-}" ] && extra=(--liger)
  [ -n "${more:-}" ] && { IFS=, read -ra more_flags <<< "$more"; extra+=("${more_flags[@]}"); }
  t0=$(date +%s)
  ( sleep "$LIMIT"; pkill -ABRT -f "cookbook.train" ; sleep 15; pkill -KILL -f "cookbook" ) & watch=$!
  python3 -m cookbook.cli train --model "$model" --tokenizer shipped --random-weights --dataset data/chats.jsonl \
    --packing --seq-len 1024 --zero-stage 2 --offload-optimizer cpu --micro-batch "$micro" --grad-accum 1 \
    --precision bf16 --gradient-checkpointing --max-steps ${STEPS:-8} --lr 1e-5 --num-processes 1 --eval-fraction 0 \
    --eval-steps 0 --save-steps 0 --no-final-save --verify-save off --emulate-gpu-memory-gib 24 \
    --attention "$attn" "${extra[@]}" --output-dir /tmp/$name > /tmp/$name.console 2>&1
  rc=$?; kill $watch 2>/dev/null
  echo "$name rc=$rc wall=$(( $(date +%s) - t0 ))s"; grep -E "^\[attention\]|tokens/s|Error|error" /tmp/$name.console | tail -4
  mkdir -p $OUT/$name && cp /tmp/$name.console $OUT/$name/console.log
  (cd /tmp/$name && cp summary.json metrics.jsonl ds_config.json command.sh $OUT/$name/ 2>/dev/null; \
   cp logs/*rank0* $OUT/$name/ 2>/dev/null)
  echo "{\"name\": \"$name\", \"rc\": $rc, \"wall_s\": $(( $(date +%s) - t0 ))}" > $OUT/$name/rc.json
done
cd $OUT && tar czf runs.tgz --exclude=runs.tgz */ && rm -rf */ ; ls -la $OUT
