#!/usr/bin/env bash
# Issue 18 item 3: NVMe offload on one H200 capped at 24 GiB (ZeRO-3, optimizer + parameters on NVMe, fp32 states),
# DeepSpeed's default aio block vs this call's `cookbook nvme-tune`, on the packed shipped chats.
#   bash benchmarks/device/call_nvme.sh DEADLINE_S          e.g.  520
# Runs `benchmarks.gpu_bench --suite nvme` (tune -> llama-134m -> llama-1b default -> llama-1b tuned -> llama-3b if
# time remains) into $OUT/nvme; no rung starts that cannot end before DEADLINE_S (counted from this script's start).
# Then: python -m benchmarks.nvme_reference --from-results $OUT/nvme/results.json --write data/reference/h200_nvme_runs_DATE.json
set -u
DEADLINE=$1; shift
. benchmarks/device/setup.sh
LEFT=$(( DEADLINE - SECONDS ))
echo "setup took ${SECONDS} s; suite deadline ${LEFT} s"
df -h /tmp | tail -1
timeout -k 30 "$LEFT" python3 -m benchmarks.gpu_bench --suite nvme --out "$OUT/nvme" --work /tmp/cookbook_bench \
  --deadline-s "$(( LEFT - 10 ))" "$@"
echo "gpu_bench rc=$?"
rm -rf /tmp/cookbook_nvme/zero_stage_3
cp "$OUT/machine.json" "$OUT/nvme/" 2>/dev/null
ls -la "$OUT/nvme"
