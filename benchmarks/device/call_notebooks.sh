#!/usr/bin/env bash
# Issue 17: the notebooks on one H200 capped at 24 GiB, with notebooks/params/gpu-1x24gib.yaml.
#   bash benchmarks/device/call_notebooks.sh DEADLINE_S NB...      e.g.  520 00 01 02 03 04 05
# Executes into /tmp/gpu-1x24gib (seeded with docs/gpu/gpu-1x24gib when present, so `--only` keeps the earlier
# notebooks in run-all.json and the report), then packs everything but weights and checkpoints (< 15 MB a
# file) into $OUT/gpu-1x24gib.tar.gz.
set -u
DEADLINE=$1; shift
. benchmarks/device/setup.sh
W=/tmp/gpu-1x24gib
mkdir -p $W
# -n: a warm machine keeps an earlier call's newer outputs in $W; the committed copies only fill what is missing
[ -d docs/gpu/gpu-1x24gib ] && cp -rn docs/gpu/gpu-1x24gib/. $W/
timeout -k 20 "$DEADLINE" python3 -m cookbook.cli run-all --params notebooks/params/gpu-1x24gib.yaml \
  --only "$@" --output-dir $W --cell-timeout 480
echo "run-all rc=$?"
(cd $W && find . -type f -size -15M ! -name '*.safetensors' ! -name '*.pt' ! -name '*.bin' ! -path '*/checkpoint*/*' \
   -print0 | tar --null -T - -czf "$OUT/gpu-1x24gib.tar.gz")
# free the disk for a later call on the same warm machine (notebook 05's checkpoints and 16-bit model: ~50 GiB;
# a following NVMe call found 14.3 GiB free and refused its 1.1B run)
find $W -type d -name checkpoints -prune -exec rm -rf {} + ; find $W \( -name '*.safetensors' -o -name '*.pt' -o -name '*.bin' \) -delete
df -h /tmp | tail -1
ls -la "$OUT"
