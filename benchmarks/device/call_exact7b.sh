#!/usr/bin/env bash
# Issue 32 (done-when: exact-Adam LLaMA-7B on one 24 GiB rank faster than 776 tokens/s) and issue 31 (DeepSpeed's
# host-RAM knobs): the shipped run file's variant — ZeRO-3 + optimizer offload, parameters on the GPU, fp32 master
# weights and Adam states (exact), 8 x 2 — with the config the cookbook writes (sub_group_size 1e9) against the same
# config with sub_group_size 1e8, one H200 capped at 24 GiB, random LLaMA-7B weights, packed shipped chats, sdpa.
# vmstat every 5 s shows the host's memory pressure (free, swap in/out) during each run.
#   bash benchmarks/device/call_exact7b.sh LIMIT_S
set -u
LIMIT=${1:-250}
. benchmarks/device/setup.sh >/dev/null
common=(--model llama-7b --tokenizer shipped --random-weights --dataset data/chats.jsonl --packing --seq-len 1024
  --zero-stage 3 --offload-optimizer cpu --offload-param none --micro-batch 8 --grad-accum 2 --precision bf16
  --gradient-checkpointing --max-steps 4 --lr 1e-5 --num-processes 1 --eval-fraction 0 --eval-steps 0 --save-steps 0
  --no-final-save --verify-save off --emulate-gpu-memory-gib 24 --attention sdpa --force)
python3 -m cookbook.cli launch "${common[@]}" --dry-run --output-dir /tmp/dry > /tmp/dry.console 2>&1 || tail -5 /tmp/dry.console
python3 - <<'PY'
import json
c = json.load(open("/tmp/dry/ds_config.json"))
c["zero_optimization"]["sub_group_size"] = 100_000_000
json.dump(c, open("/tmp/sg1e8.json", "w"), indent=1)
PY
for name in 7b-exact-sg1e9 7b-exact-sg1e8; do
  cfg=(); [ "$name" = 7b-exact-sg1e8 ] && cfg=(--config /tmp/sg1e8.json)
  vmstat -S m 5 > /tmp/$name.vmstat & vm=$!
  t0=$(date +%s)
  timeout -k 20 "$LIMIT" python3 -m cookbook.cli launch "${common[@]}" "${cfg[@]}" --output-dir /tmp/$name > /tmp/$name.console 2>&1
  rc=$?; kill $vm
  echo "$name rc=$rc wall=$(( $(date +%s) - t0 ))s"; grep -E "tokens/s|host_oom|Error" /tmp/$name.console | tail -3
  mkdir -p $OUT/$name && cp /tmp/$name.console /tmp/$name.vmstat $OUT/$name/
  (cd /tmp/$name && cp summary.json metrics.jsonl ds_config.json command.sh $OUT/$name/ 2>/dev/null; cp logs/*rank0* $OUT/$name/ 2>/dev/null)
  echo "{\"name\": \"$name\", \"rc\": $rc, \"wall_s\": $(( $(date +%s) - t0 ))}" > $OUT/$name/rc.json
done
cd $OUT && tar czf runs.tgz --exclude=runs.tgz */ && rm -rf */ ; ls -la $OUT
