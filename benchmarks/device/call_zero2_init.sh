#!/usr/bin/env bash
# Issue 31, class 2: where DeepSpeed ZeRO-2 flattens the 16-bit parameters at initialisation on a 24 GiB card, and
# what it costs (benchmarks/zero2_init_probe.py). One H200, one process per spec, ZeRO-2 + optimizer offload to the
# CPU as the cookbook builds it, bf16, random weights; deepspeed.initialize only (no step).
#   LIMIT=300 bash benchmarks/device/call_zero2_init.sh "name:model:mode[:--flag,...]" ...
# mode: ballast (a real card's NVML view: the device filled down to 24 GiB), cap (set_per_process_memory_fraction,
# as `cookbook train --emulate-gpu-memory-gib`) or none. Flags: more probe flags, comma-separated, e.g.
#   "7b_unpinned:llama-7b:ballast:--pin=off"   "7b_b16:llama-7b:ballast:--bf16-states"
# Default specs: 7b_ballast, 7b_cap, 3b_ballast. GIB (default 24): the card. Each spec runs under
# `timeout ${LIMIT:-300}`; JSON to $OUT/<name>.json (outcome "killed" with the exit status when it was
# stopped before it finished), console to $OUT/<name>.log. DeepSpeedCPUAdam is JIT-built once first (~45 s).
set -u
SPECS=("$@")
[ ${#SPECS[@]} -eq 0 ] && SPECS=("7b_ballast:llama-7b:ballast" "7b_cap:llama-7b:cap" \
                                 "3b_ballast:benchmarks/models/llama-3b:ballast")
. benchmarks/device/setup.sh >/dev/null
t0=$(date +%s)
timeout 240 python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()" \
  > "$OUT/cpu_adam_build.log" 2>&1 || { echo "cpu_adam build failed"; tail -5 "$OUT/cpu_adam_build.log"; }
echo "cpu_adam build $(( $(date +%s) - t0 ))s"
for spec in "${SPECS[@]}"; do
  IFS=: read -r name model mode more <<< "$spec"
  extra=(); [ -n "${more:-}" ] && { IFS=, read -ra extra <<< "$more"; }
  t0=$(date +%s)
  timeout -k 15 "${LIMIT:-300}" python3 -m benchmarks.zero2_init_probe --model "$model" --mode "$mode" \
    --gpu-memory-gib "${GIB:-24}" "${extra[@]}" --out "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  rc=$?
  python3 - "$OUT/$name.json" "$rc" "$(( $(date +%s) - t0 ))" <<'PY'
import json, os, sys
path, rc, wall = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
log = path[:-5] + ".log"
tail = open(log, errors="replace").read()[-2000:] if os.path.exists(log) else ""
rec = json.load(open(path)) if os.path.exists(path) else {"outcome": "not started", "message": tail}
if rec.get("outcome") == "started":
    rec.update(outcome="killed", message=tail)  # timeout (124/137) or the host's OOM killer: never "ok"
rec.update(rc=rc, call_wall_s=wall)
json.dump(rec, open(path, "w"), indent=1, default=str)
m, p = rec.get("measured", {}), rec.get("prediction", {})
print(f"{os.path.basename(path)[:-5]} rc={rc} wall={wall}s outcome={rec['outcome']} path={m.get('path')} "
      f"(predicted {p.get('path')}) read_free={(m.get('available_memory_reads_gib') or [None])[0]} "
      f"max_alloc={m.get('max_allocated_gib')} (predicted init {p.get('init_peak_allocated_gib')}) "
      f"host_peak={m.get('host_peak_rss_gib')} {(rec.get('message') or '')[:160]}")
PY
done
ls -la "$OUT"
