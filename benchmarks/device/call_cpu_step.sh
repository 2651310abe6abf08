#!/usr/bin/env bash
# Issue 32 item 3: the serial CPU part of a ZeRO-2 + offload_optimizer step (DeepSpeedCPUAdam over the fp32
# partition, fp32 -> bf16 cast into pinned staging, H2D copy) on one H200's host, vs chunked overlapped variants
# (cast + copy of chunk i under Adam of chunk i+1; or fp32 H2D + GPU cast), bit-identity checked, STREAM probe.
#   bash benchmarks/device/call_cpu_step.sh            (carry: [".whl", ".debs"])
# Env: PARAMS (default 3.4e9, the open_llama-3b shape), CHUNKS (default 1,2,4,8,16), LIMIT (s, default 240),
#      CAST_THREADS (cast worker threads, default threads // 4). 22 B/param of host memory: 75 GB at 3.4e9.
# The JSON is rewritten after each phase, so a run stopped by LIMIT keeps what it measured.
set -u
. benchmarks/device/setup.sh >/dev/null
echo "setup took ${SECONDS} s"; nproc; free -g | head -2
extra=(); [ -n "${CAST_THREADS:-}" ] && extra=(--cast-threads "$CAST_THREADS")
timeout -k 15 "${LIMIT:-240}" python3 -m benchmarks.cpu_step --params "${PARAMS:-3.4e9}" --chunks "${CHUNKS:-1,2,4,8,16}" \
  --threads "$(nproc)" --device cuda --out "$OUT/cpu_step.json" "${extra[@]}" > "$OUT/cpu_step.log" 2>&1
echo "cpu_step rc=$? wall=${SECONDS}s"
grep -v "^\[" "$OUT/cpu_step.log" | grep -E '"(adam_s|cast_s|h2d_s|total_s|adam_gbs|triad_best_gbs|all_identical|variant|hidden_s|serial_over_this)"' | head -60
tail -5 "$OUT/cpu_step.log"
ls -la "$OUT"
