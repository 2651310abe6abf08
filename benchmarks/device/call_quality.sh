#!/usr/bin/env bash
# Issue 19 item 4 on one H200 capped at 24 GiB: one variant of the 3.4B recipe's 150-step loss curve per call
# (benchmarks/quality_gpu.py: exact_adam, bf16_states or liger), into $OUT/quality/<variant>.json.
#   bash benchmarks/device/call_quality.sh VARIANT DEADLINE_S      e.g.  exact_adam 570
# Then, with each call's file copied to data/reference/raw/: python -m benchmarks.quality_gpu --merge ... \
#   --out data/reference/h200_quality_DATE.json --figure docs/quality_h200.png
set -u
VARIANT=$1; DEADLINE=$2
. benchmarks/device/setup.sh
LEFT=$(( DEADLINE - SECONDS - 10 ))
echo "setup took ${SECONDS} s; ${LEFT} s for $VARIANT"
timeout -k 20 "$LEFT" python3 -m benchmarks.quality_gpu --variant "$VARIANT" --out "$OUT/quality" \
  --work /tmp/cookbook_quality_gpu --hang-timeout-s 300 > "$OUT/quality_$VARIANT.log" 2>&1
echo "quality_gpu rc=$?"; tail -3 "$OUT/quality_$VARIANT.log"
mkdir -p "$OUT/quality/run" && cp /tmp/cookbook_quality_gpu/$VARIANT/{summary.json,metrics.jsonl,command.sh,ds_config.json} \
  "$OUT/quality/run/" 2>/dev/null
cp "$OUT/machine.json" "$OUT/quality/" 2>/dev/null
