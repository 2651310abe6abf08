"""Turn the raw output of :mod:`benchmarks.levers` (two device calls on 2026-12-01) into reference files.

    python -m benchmarks.levers_report      # reads data/reference/raw/h200_levers_call*_levers.json
    python -m benchmarks.levers_report --baselines   # 2026-12-02: the HF Trainer baselines (raw: *_session3_*)
    python -m benchmarks.levers_report --same-call   # 2026-12-02 (later): loop vs Trainer in one call (*_session4_*)
    python -m benchmarks.levers_report --session5    # 2026-12-02 session 5: exact-Adam levers, LLaMA-7B (*_session5_*)
    python -m benchmarks.levers_report --figure      # docs/levers_h200.png from the session 5 and 6 reference files
    python -m benchmarks.levers_report --session6    # 2026-12-02 session 6: 7B variants, pin_memory, nb 06 (*_session6_*)

Writes ``data/reference/h200_levers_2026-12-01.json`` (issue 19: every run with its DeepSpeed config,
command, tokens/s, s/step, peaks, DeepSpeed's wall-clock breakdown, floor and RTX 4090 projection; the
Liger memory probe; CPU Adam under thread settings; what did not run and why) and
``data/reference/h200_nvme_2026-12-01.json`` (issue 18: the disk probe), and prints a Markdown table.

Floors and the RTX 4090 projection use the model of ``docs/benchmarks.md`` section 5
(:func:`benchmarks.report.floor`, :data:`benchmarks.report.RTX4090`) with the ceilings measured in
call 1 (call 2 measured none: same machine kind, stated in the file).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks.report import RTX4090, RTX4090_CEILINGS, floor, floor_and_projection

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "data" / "reference" / "raw"
OUT = ROOT / "data" / "reference" / "h200_levers_2026-12-01.json"
OUT_NVME = ROOT / "data" / "reference" / "h200_nvme_2026-12-01.json"
N_3B = 3_426_473_600   # benchmarks/models/llama-3b

COMMANDS = {
    "call1": "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
             ".whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0 "
             "PYTHONUNBUFFERED=1; (libaio from Debian's libaio1/libaio-dev .debs: dpkg -x, libaio.h -> /usr/local/include, "
             "libaio.so* -> /usr/local/lib, ldconfig); python3 -m benchmarks.levers --out $OUT --deadline-s 506",
    "call2": "(same install); python3 -m benchmarks.levers --out $OUT --plan call2 --phases '' "
             "--probe-json data/reference/raw/h200_levers_call1_probe.json --deadline-s 351",
}


#: The first sentences of every 2026-12-02 session record's ``projection_note`` (the model of docs/benchmarks.md §5).
PROJECTION_NOTE_HEAD = ("RTX 4090 projection: the 4090's serial floor (rtx4090_model: 165.2 TFLOP/s bf16, PCIe 4.0 "
                        f"x16 at {RTX4090['h2d_gb_s']:.0f} GB/s each way, CPU Adam {RTX4090['cpu_adam_params_per_s']:.1e} "
                        "params/s) over the achieved/serial-floor fraction measured on the H200: it assumes the same "
                        "fraction on the 4090. ")


def _row(r: dict, call: str, ceil: dict, num_params: int = N_3B) -> dict:
    """One run of a raw levers.json as a reference row; ``num_params`` is the model's parameter count (the floor
    and projection's N: the 3.4B shape unless said)."""
    keep = ("name", "status", "message", "tokens_per_s", "tokens_per_s_mean", "step_time_s", "tokens_per_step",
            "peak_gpu_allocated_gib", "peak_gpu_reserved_gib", "host_peak_gib", "step_times_s", "losses",
            "command", "deepspeed_config", "config_changes", "env", "cores", "duration_s", "wall_s", "breakdown")
    row = {k: r.get(k) for k in keep}
    v = r.get("variant") or {}
    row["call"] = call
    row["num_params"] = num_params  # the 3.4B shape (benchmarks/models/llama-3b) unless the caller says otherwise
    row["group"] = "levers"  # cookbook.reference.REFERENCE_SELECTION: shown beside notebooks 04 and 06's runs
    row["lever"] = {k: v.get(k) for k in ("micro_batch", "bf16_states", "zenflow", "zenflow_native", "liger", "bind")}
    row["note"] = v.get("note")
    row["plan"] = r.get("plan")
    # steady-state breakdown: median over the steps after the first of each timer DeepSpeed printed
    bd = r.get("breakdown") or []
    micro = [b for b in bd if "fwd_microstep" in b][1:]
    opt = [b for b in bd if "optimizer_step" in b][1:]
    if micro:
        row["breakdown_median_ms"] = _medians(micro, ("fwd_microstep", "bwd_microstep", "step_microstep"))
        # ZeRO-3 prints no optimizer_gradients timer: only the keys a run printed
        row["breakdown_median_ms"].update(_medians(opt, ("optimizer_gradients", "optimizer_step")))
    if r.get("status") == "ok" and r.get("step_time_s") and r.get("plan"):
        row["floor"], row["projection_rtx4090"] = floor_and_projection(
            {"num_params": num_params, "plan": r["plan"]}, ceil, r["step_time_s"],
            "same achieved/floor as measured on the H200 (docs/benchmarks.md §5)")
    return row


def _medians(entries: list[dict], keys: tuple[str, ...]) -> dict:
    """Median of each key over the breakdown entries that have it (keys no entry has are left out)."""
    return {k: statistics.median(b[k] for b in entries if k in b) for k in keys if any(k in b for b in entries)}


def call1_ceilings(c1: dict) -> tuple[dict, dict]:
    """(ceilings, versions) of 2026-12-01's call 1: pinned copies and bf16 matmul (``benchmarks.ceilings``) and the
    CPU Adam rate with the default thread setting, the floors' inputs (:func:`benchmarks.report.floor`)."""
    ceil = dict(c1["ceilings"])
    adam = c1["cpu_adam_settings"]["default"]
    ceil["cpu_adam_params_per_s"] = adam["cpu_adam_params_per_s"]
    ceil["cpu_adam_threads"] = adam["cpu_adam_threads"]
    return ceil, ceil.pop("versions", None) or {}


def build() -> tuple[dict, dict]:
    c1 = json.loads((RAW / "h200_levers_call1_levers.json").read_text())
    c2 = json.loads((RAW / "h200_levers_call2_levers.json").read_text())
    ceil, versions = call1_ceilings(c1)
    adam = c1["cpu_adam_settings"]["default"]
    rows = [_row(r, "call1", ceil) for r in c1["runs"]] + [_row(r, "call2", ceil) for r in c2["runs"]]
    by = {r["name"]: r for r in rows}

    def ratio(a, b, key="tokens_per_s"):
        x, y = (by.get(a) or {}).get(key), (by.get(b) or {}).get(key)
        return x / y if x and y and by[a]["status"] in ("ok", "timeout") and by[b]["status"] == "ok" else None
    probe = c1["liger_probe"]
    pk = {(r["liger"], r["micro_batch"]): r["peak_above_params_gib"] for r in probe["rows"] if r.get("status") == "ok"}
    base = by["recipe"]["peak_gpu_allocated_gib"]
    predicted = {f"{'liger' if lg else 'no_liger'}_{mb}": base + pk[(lg, mb)] - pk[(False, 16)] for (lg, mb) in pk}
    ref = {
        "what": "issue 19 levers on the cookbook recipe (3.4B LLaMA shape, ZeRO-2 + optimizer offload, one H200 capped "
                "at 24 GiB), issue 18 disk probe; two device calls on 2026-12-01",
        "date": "2026-12-01",
        "machine": {"kind": "nvidia-h200", "gpu": "1 x NVIDIA H200 (139.8 GiB), capped at 24 GiB per process "
                    "(torch.cuda.set_per_process_memory_fraction)", "cpu": "16 cores (Intel Xeon, KVM; 1 thread per "
                    "core, 1 NUMA node)", "host_memory_gib": versions.get("host_memory_gib"),
                    "disk": (c1.get("disk") or {}).get("facts")},
        "versions": dict(versions, triton="3.6.0", liger_kernel="0.8.5"),
        "commands": COMMANDS,
        "setup": {"model": "benchmarks/models/llama-3b (3,426,473,600 parameters, random weights initialised on "
                  "the GPU with seed 1234: the cookbook's ZeRO-0/1/2 path; no saved weights needed)",
                  "data": "benchmarks.gpu_bench.make_long_dataset: 128 records, every row truncated to exactly 1024 "
                          "tokens", "precision": "bf16, gradient checkpointing, lr 2e-5, warm-up 1 step",
                  "tokens_per_s": "median over the steps after the first (tokens_per_s_mean: total tokens / total "
                                  "time of those steps)",
                  "wall_clock_breakdown": "on in every cookbook run (DeepSpeed timers synchronise the GPU a few times "
                                          "a step; the recipe still ran 8,047 tokens/s vs 8,122-8,283 measured "
                                          "without it)"},
        "ceilings": ceil,
        "ceilings_note": "call 1: pinned 1 GiB copies and 8192^3 bf16 matmul (benchmarks.ceilings), CPU Adam over 2e8 "
                         "fp32 parameters with 16 threads; call 2 measured none (same machine kind)",
        "rtx4090_model": RTX4090,
        "runs": rows,
        "liger_probe": {"how": "one forward+backward of the 3.4B model on the uncapped GPU, bf16, gradient "
                               "checkpointing, no ZeRO, every gradient dropped as soon as it is accumulated (as "
                               "ZeRO-2's offload buckets move them out); peak allocated above the parameters",
                        "rows": probe["rows"], "params_gib": probe["params_gib"],
                        "predicted_recipe_allocated_gib": predicted,
                        "prediction": "recipe's measured 15.43 GiB at micro 16 + (probe peak at m - probe peak "
                                      "without Liger at 16); Liger at 32 predicted 17.65, measured 17.74",
                        "liger_saves_gib": {mb: pk[(False, mb)] - pk[(True, mb)] for mb in (16, 24, 32)
                                            if (False, mb) in pk and (True, mb) in pk}},
        "micro_batch_choice": {**c1.get("micro_choice", {}), **c2.get("micro_choice", {})},
        "cpu_adam_settings": {k: {kk: v.get(kk) for kk in ("cpu_adam_params_per_s", "cpu_adam_threads",
                                                             "omp_num_threads", "omp_proc_bind", "omp_places",
                                                             "affinity")}
                              for k, v in c1["cpu_adam_settings"].items()},
        "cpu_settings": c1["cpu_settings"],
        "ratios_same_call": {
            "liger_mb32_over_recipe_mb16 (call 1)": ratio("liger", "recipe"),
            "liger_mb32_plus_omp_bind_over_liger_mb32 (call 1)": ratio("combo", "liger"),
            "cpu_adam_omp_bind_over_default (call 1, micro-benchmark)":
                c1["cpu_adam_settings"]["omp-bind"]["cpu_adam_params_per_s"] / adam["cpu_adam_params_per_s"],
            "cpu_adam_ds_bind_over_default (call 1, micro-benchmark)":
                c1["cpu_adam_settings"]["ds-bind"]["cpu_adam_params_per_s"] / adam["cpu_adam_params_per_s"],
        },
        "ratios_across_calls": {
            "liger_mb28_fp32_states (call 2) over recipe_bf16_states (call 1)": ratio("combo-fp32", "recipe"),
            "liger_mb28_fp32_states (call 2) over recipe_fp32_states 5,924 (docs/benchmarks.md, 2026-11-30)":
                by["combo-fp32"]["tokens_per_s"] / 5924.0 if by.get("combo-fp32", {}).get("tokens_per_s") else None,
            "zenflow_fp32 steps 2-3 (call 2, no CPU update yet; run then killed by host OOM) over recipe (call 1)":
                (by["zenflow-fp32"]["tokens_per_s"] / by["recipe"]["tokens_per_s"])
                if by.get("zenflow-fp32", {}).get("tokens_per_s") else None,
        },
        "findings": [
            "ZenFlow cannot run the recipe as shipped: with bf16 master weights (bf16_states) DeepSpeed 0.19.8 stops at "
            "start (stage_1_and_2.py _enforce_cpu_offload: 'Master weights feature requires ZeRO-2 Offload with "
            "DeepSpeedCPUAdam', an exact type check that ZenFlowCPUAdam fails).",
            "ZenFlow with fp32 states ran its first 3 steps (steps 2-3: 1.25 s, 13,100 tokens/s, GPU 19.2 GiB "
            "allocated = +3.8 GiB for the top-10% selective optimizer) and was killed by the kernel's OOM killer at "
            "step 4, its first update boundary, when the overlapped optimizer process starts (rank RSS 63.7 GiB "
            "before it; 125 GiB host). Steps 2-3 carry no CPU update, so 13,100 is an upper bound, not ZenFlow's "
            "steady state.",
            "Through the cookbook loop ZenFlow's update_interval is ignored: Accelerate's DeepSpeedEngineWrapper.backward "
            "calls engine.set_gradient_accumulation_boundary(True) every step (benchmarks/lever_train.py patches "
            "that for the 'native' runs). Product change needed for ZenFlow: the loop must leave boundaries to "
            "DeepSpeed.",
            "The cookbook's linter refuses ZenFlow's own 'auto' values (select_strategy/select_interval) as if they "
            "were the HF Trainer's placeholder; the runs omit those keys (DeepSpeed's default is 'auto').",
            "Liger fused linear cross-entropy: same fwd+bwd time as the stock loss (probe: 1.05 vs 1.06 s at 16, "
            "2.08 vs 2.08 s at 32), 3.3 / 4.9 / 6.6 GiB less GPU memory at micro 16 / 24 / 32 (0.2 GiB per 1024-token "
            "sequence). Micro batch 32 fits the 24 GiB cap with Liger (17.7 GiB allocated); without Liger the "
            "prediction is 24.2 GiB at 32 (over the cap), 22.0 at 28, 19.8 at 24.",
            "Liger at micro 32 (bf16 states): 10,841 tokens/s = 1.35x the recipe at 16 in the same call, 3.02 s/step "
            "for 2x the tokens: the CPU step (~0.9 s) and the PCIe trips are paid once per 32 sequences. Part of "
            "that gain needs no Liger: micro 24 without Liger is predicted to fit; not measured (estimate from "
            "the breakdown: ~2.6 s/step, ~9,500 tokens/s, so Liger's own share is ~1.14x).",
            "OpenMP thread binding (OMP_PROC_BIND=close, OMP_PLACES=cores) made DeepSpeedCPUAdam 6% faster alone but "
            "the training run 2.9x slower (optimizer_step 5.3 s vs 0.75 s, optimizer_gradients 1.5 s vs 0.14 s): "
            "libgomp binds the rank's main thread to core 0, and every thread it starts after that (the CPU "
            "optimizer's, the gradient copies') inherits that one core. DeepSpeed's --bind_cores_to_rank for one rank "
            "on this VM is all 16 cores with OMP_NUM_THREADS=16, i.e. the cookbook's default: a no-op here; its "
            "reported 1.16x comes from several ranks per host and SMT siblings, which this machine lacks.",
            "offload_optimizer.ratio (partial optimizer offload) is ZeRO-3 only in DeepSpeed 0.19.8 "
            "(offload_config.py: 'Only valid with ZeRO Stage 3'): it does not apply to the ZeRO-2 recipe; not run.",
        ],
        "not_run": c1["not_run"] + c2["not_run"] + [
            {"name": "zenflow (bf16 states)", "why": "DeepSpeed refuses ZenFlow with bf16 master weights (see findings)"},
            {"name": "zenflow-fp32 steady state", "why": "host OOM at the first update boundary (125 GiB host)"},
            {"name": "ZenFlow combined with Liger", "why": "ZenFlow never completed a run; combo ran without it"},
            {"name": "offload_optimizer.ratio", "why": "ZeRO-3 only in DeepSpeed 0.19.8"},
            {"name": "HF Trainer baselines (issue 19 item 3)", "why": "cut by the device time: the levers ran first; "
             "benchmarks/trainer_baseline.py is rehearsed on the CPU (both configs) but not run on the GPU"},
        ],
        "combo_choice": {"call1": c1.get("combo_choice"), "call2": c2.get("combo_choice")},
    }
    nvme = {"what": "issue 18: sequential write/read bandwidth of the one-GPU H200 machine's disk through "
                    "DeepSpeed's async I/O op (benchmarks/nvme_bench.py, the ds_io aio_handle path), default vs other "
                    "aio settings; measured in call 1 of 2026-12-01",
            "date": "2026-12-01", "machine": ref["machine"], "versions": ref["versions"],
            "command": "python -m benchmarks.nvme_bench --folder /tmp/nvme_probe --io-gib 1 --loops 1 --deadline-s 25",
            **c1["disk"],
            "caveats": ["one timed 1 GiB file per setting after one warm-up (noisy); two settings were cut by the "
                        "sweep's 25 s limit", "the disk is a virtual disk (/dev/vda, ext4, ROTA=1 as reported), "
                        "not a local NVMe SSD"],
            "not_run": ["ZeRO-3 NVMe-offload run of benchmarks/models/llama-1b (TinyLlama-1.1B shape), default vs "
                        "tuned aio: cut by the device time"]}
    return ref, nvme


def table(ref: dict) -> str:
    out = ["| run | call | micro | states | levers | status | tokens/s | s/step | GPU alloc / reserved GiB | host GiB "
           "| fwd / bwd / step ms | achieved/floor | 4090 proj. tokens/s |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def f(x, d=0):
        return "—" if x is None else f"{x:,.{d}f}"
    for r in ref["runs"]:
        lv = r["lever"]
        levers = ", ".join(x for x in (("zenflow" + ("" if lv.get("zenflow_native") else "/accel")) if lv.get("zenflow")
                                       else "", "liger" if lv.get("liger") else "", lv.get("bind") or "") if x) or "—"
        bd = r.get("breakdown_median_ms") or {}
        micro = (r.get("plan") or {}).get("micro_batch") or lv.get("micro_batch")
        out.append(f"| {r['name']} | {r['call']} | {micro} | {'bf16' if lv.get('bf16_states') else 'fp32'} | {levers} | "
                   f"{r['status']} | {f(r.get('tokens_per_s'))} | {f(r.get('step_time_s'), 2)} | "
                   f"{f(r.get('peak_gpu_allocated_gib'), 1)} / {f(r.get('peak_gpu_reserved_gib'), 1)} | "
                   f"{f(r.get('host_peak_gib'), 1)} | {f(bd.get('fwd_microstep'))} / {f(bd.get('bwd_microstep'))} / "
                   f"{f(bd.get('step_microstep'))} | "
                   f"{f((r.get('floor') or {}).get('achieved_over_floor_serial') and 100 * r['floor']['achieved_over_floor_serial'])}% | "
                   f"{f((r.get('projection_rtx4090') or {}).get('tokens_per_s'))} |")
    return "\n".join(out)


OUT_BASELINES = ROOT / "data" / "reference" / "h200_levers_2026-12-02.json"
BASELINE_COMMANDS = {
    "call3": "bash benchmarks/device/setup.sh (the carried wheels, liger_kernel 0.8.5 among them); python3 -m "
             "benchmarks.levers --out $OUT/levers --deadline-s 460 --only recipe,trainer-article,trainer-recipe,liger "
             "--phases '' --probe-json data/reference/raw/h200_levers_call1_probe.json; then bash "
             "benchmarks/device/call_liger_check.sh 309",
    "call5": "(same setup, same warm machine 3 minutes later); python3 -m benchmarks.levers --out $OUT/levers "
             "--deadline-s 145 --only recipe --phases '' --probe-json data/reference/raw/h200_levers_call1_probe.json",
}


def _liger_check(path: Path) -> dict:
    """The two runs of ``call_liger_check.sh`` from its log: ``{"liger": {...}, "plain": {...}}`` (the ``ok:`` line
    of each ``cookbook train``: steps, first → last loss, tokens/s)."""
    import re
    out, cur = {}, None
    for line in path.read_text().splitlines():
        if line.startswith(("liger rc=", "plain rc=")):
            cur = line.split()[0]
            out[cur] = {"rc": int(line.split("=")[1])}
        m = re.match(r"ok: (\d+) steps on 1 rank: loss ([\d.]+) → ([\d.]+), (\d+) tokens/s", line)
        if m and cur:
            out[cur].update(steps=int(m[1]), first_loss=float(m[2]), last_loss=float(m[3]), tokens_per_s=int(m[4]))
    return out


def _header(machine_file: str, what: str, commands: dict) -> dict:
    """The keys every 2026-12-02 levers record starts with: kind, what, date, machine and versions (from the
    device call's ``machine.json`` in data/reference/raw), commands."""
    machine = json.loads((RAW / machine_file).read_text())
    return {"kind": "levers", "what": what, "date": "2026-12-02", "machine": {"kind": "nvidia-h200", **machine},
            "versions": {k: machine.get(k) for k in ("python", "torch", "cuda", "transformers", "accelerate",
                                                     "deepspeed")} | {"liger_kernel": "0.8.5", "datasets": "5.2.0"},
            "commands": commands}


#: The 3.4B model and the long records every 2026-12-02 levers run trained.
SETUP_MODEL_DATA = {"model": "benchmarks/models/llama-3b (3,426,473,600 parameters, random weights)",
                    "data": "benchmarks.gpu_bench.make_long_dataset: 128 records of > 1024 tokens each (seed 0)"}


def build_baselines() -> dict:
    """Issue 19 item 3 on 2026-12-02 (calls 3 and 5 of that session, one warm H200): the HF Trainer with the LLaMA
    article's config and with the recipe's, beside the cookbook's loop (the reference file's ``findings`` say which
    rows compare). Floors and projections with 2026-12-01 call 1's ceilings (none measured that day)."""
    c3 = json.loads((RAW / "h200_levers_session3_call3_levers.json").read_text())
    c5 = json.loads((RAW / "h200_levers_session3_call5_levers.json").read_text())
    ceil, _ = call1_ceilings(json.loads((RAW / "h200_levers_call1_levers.json").read_text()))
    rows = [_row(r, "call3", ceil) for r in c3["runs"] if r["status"] == "ok"]
    rows += [dict(_row(r, "call5", ceil), name="recipe-packed") for r in c5["runs"] if r["name"] == "recipe"]
    by = {r["name"]: r for r in rows}
    ta, tr, rp = (by[k]["tokens_per_s"] for k in ("trainer-article", "trainer-recipe", "recipe-packed"))
    old = {r["name"]: r for r in json.loads(OUT.read_text())["runs"]}
    recipe_full_rows = old["recipe"]["tokens_per_s"]   # 2026-12-01 call 1: the cookbook loop, one example per row
    return {
        **_header("h200_levers_session3_call3_machine.json",
                  "issue 19 item 3: the HF Trainer (benchmarks/trainer_baseline.py) with the LLaMA article's DeepSpeed "
                  "config and with the cookbook recipe's, beside the cookbook's own loop; 3.4B LLaMA shape, one H200 "
                  "capped at 24 GiB, 16 x 1024 tokens per step, bf16, gradient checkpointing", BASELINE_COMMANDS),
        "setup": {**SETUP_MODEL_DATA,
                  "rows": {"trainer-*": "one example per row, cut to exactly 1024 tokens (the Trainer's tokenize)",
                           "recipe-packed": "the cookbook's default: every example split into pieces of <= 1024 "
                                            "tokens, the pieces packed into 202 rows of 1024 (packing efficiency "
                                            "99.86 %), block-diagonal causal masks on sdpa"},
                  "tokens_per_s": "median over the steps after the first"},
        "ceilings": ceil,
        "ceilings_note": "from 2026-12-01 call 1 (data/reference/h200_levers_2026-12-01.json): none measured on 2026-12-02",
        "rtx4090_model": RTX4090,
        "runs": rows,
        "ratios_same_call": {"trainer_recipe_over_trainer_article (call 3)": tr / ta},
        "ratios_across_calls": {
            "cookbook_recipe_packed (call 5) over trainer_article (call 3), same warm machine": rp / ta,
            "cookbook_recipe_packed (call 5) over trainer_recipe (call 3): packed, masked rows vs one example per row":
                rp / tr,
            "cookbook_recipe one example per row (2026-12-01 call 1, 8,047) over trainer_recipe (2026-12-02 call 3)":
                recipe_full_rows / tr,
            # 2,037 and 8,470 tokens/s: issue 19's text (the same two Trainer runs, 2026-12-01, an earlier session's
            # device call whose output is not in data/reference)
            "trainer_article today over issue 19's 2,037 (2026-12-01, issue text)": ta / 2037.0,
            "trainer_recipe today over issue 19's 8,470 (2026-12-01, issue text)": tr / 8470.0,
        },
        "liger_check": {"how": "bash benchmarks/device/call_liger_check.sh: cookbook train tiny-llama, ZeRO-2 + "
                               "optimizer offload, micro 8, seq 256, 4 steps, seed 1234, with and without --liger",
                        **_liger_check(RAW / "h200_liger_check_session3_call3.log")},
        "findings": [
            f"The article's config under the HF Trainer: {ta:,.0f} tokens/s; the recipe's config under the same Trainer: "
            f"{tr:,.0f} ({tr / ta:.2f}x, same call): the config alone is the gain the articles' readers miss.",
            f"The cookbook's loop on its default rows (long examples split and packed, masked attention): {rp:,.0f} "
            f"tokens/s = {rp / tr:.2f}x the Trainer on the recipe's config with one example per row cut to 1024 "
            "(call 5 vs call 3, the same warm machine). Not the loop: the rows differ. Packed rows with example "
            "boundaries inside take sdpa's memory-efficient kernel with a block-diagonal mask (issue 13 measured "
            "0.66x for the same cause); the allocated peak is 18.3 GiB vs 15.4. The cut rows train 131,072 of the "
            "file's 206,550 tokens per epoch; the packed rows all of them.",
            f"The loop against the Trainer on the same rows (one example per row) was not measured in one call: the "
            f"cookbook's runs of call 3 stopped at start (levers.py launched a config-only model folder without "
            f"random_weights / tokenizer, refused by the cookbook's guards; fixed in benchmarks/levers.py, which also "
            f"passes packing=False now). Across days: 8,047 (2026-12-01) / {tr:,.0f} = {recipe_full_rows / tr:.3f}.",
            "Liger check (tiny-llama on the GPU): both runs trained 4 steps with identical losses (7.651 -> 7.522): "
            "the product's --liger path works and its loss is exact; on this 354,624-parameter model the fused "
            "kernel is slower (31,464 vs 36,842 tokens/s): its gain is the memory of a large vocabulary's logits.",
        ],
        "not_run": [
            {"name": "recipe / liger through the cookbook loop in call 3",
             "why": "config_error at start: the levers driver did not say random_weights / tokenizer (fixed)"},
            {"name": "the cookbook loop with packing off in the same call as the Trainer",
             "why": "device time (30 minutes, spent on issue 18's NVMe runs and these)",
             "ran_since": "h200_levers_2026-12-02b.json (a later session the same day: 1.065x the Trainer)"},
            {"name": "3.4B 150-step quality curves on the GPU", "why": "device time",
             "ran_since": "h200_quality_2026-12-02.json (exact Adam vs bf16 states)"},
        ],
    }


OUT_SAME_CALL = ROOT / "data" / "reference" / "h200_levers_2026-12-02b.json"
SAME_CALL_COMMAND = ("bash benchmarks/device/setup.sh; python3 -m benchmarks.levers --out $OUT/levers --deadline-s 540 "
                     "--only recipe,trainer-recipe,trainer-article,liger --phases '' "
                     "--probe-json data/reference/raw/h200_levers_call1_probe.json")


def build_same_call() -> dict:
    """Issue 19 item 3's same-call check (2026-12-02, session 4, call 3, a freshly started H200): the cookbook's
    loop (one example per row, ``packing=False``) and the HF Trainer on the recipe's config and on the LLaMA
    article's, and Liger at the micro batch its probe chose. Floors and projections with 2026-12-01 call 1's
    ceilings (none measured that day). Raises KeyError if a run the findings compare is missing from the raw file."""
    raw = json.loads((RAW / "h200_levers_session4_call3_levers.json").read_text())
    ceil, _ = call1_ceilings(json.loads((RAW / "h200_levers_call1_levers.json").read_text()))
    rows = [_row(r, "call3", ceil) for r in raw["runs"]]
    by = {r["name"]: r for r in rows if r["status"] == "ok"}
    loop, tr, ta = (by[k]["tokens_per_s"] for k in ("recipe", "trainer-recipe", "trainer-article"))
    liger = next(r for r in rows if r["name"] == "liger")
    liger_before = next(r for r in json.loads(OUT.read_text())["runs"] if r["name"] == "liger")
    return {
        **_header("h200_levers_session4_call3_machine.json",
                  "issue 19 item 3 in one device call: the cookbook's loop and the HF Trainer (benchmarks/"
                  "trainer_baseline.py) on the same rows and the recipe's DeepSpeed config, the Trainer with the LLaMA "
                  "article's config, and Liger; 3.4B LLaMA shape, one H200 capped at 24 GiB, 16 x 1024 tokens per "
                  "step, bf16, gradient checkpointing, bf16 states (the recipe's config as measured since 2026-12-01)",
                  {"call3": SAME_CALL_COMMAND}),
        "setup": {**SETUP_MODEL_DATA,
                  "rows": "every run: one example per row, cut to exactly 1024 tokens (the cookbook with "
                          "packing=False, the Trainer's tokenize)",
                  "tokens_per_s": "median over the steps after the first"},
        "ceilings": ceil,
        "ceilings_note": "from 2026-12-01 call 1 (data/reference/h200_levers_2026-12-01.json): none measured on 2026-12-02",
        "rtx4090_model": RTX4090,
        "runs": rows,
        "ratios_same_call": {"cookbook_loop_over_trainer_recipe": loop / tr,
                             "cookbook_loop_over_trainer_article": loop / ta,
                             "trainer_recipe_over_trainer_article": tr / ta},
        "ratios_across_calls": {
            "liger micro 32 (2026-12-01 call 1) over today's cookbook loop": liger_before["tokens_per_s"] / loop},
        "findings": [
            f"The cookbook's loop on the recipe's config: {loop:,.0f} tokens/s; the HF Trainer on the same config and "
            f"rows: {tr:,.0f}: the loop runs {loop / tr:.3f}x the Trainer (same call): it adds no cost (issue 19: "
            f"within 2 %). Its step is {by['recipe']['step_time_s']:.2f} s vs the Trainer's "
            f"{by['trainer-recipe']['step_time_s']:.2f} s.",
            f"The recipe over the HF Trainer running the LLaMA article's config: {loop / ta:.2f}x through the "
            f"cookbook's loop, {tr / ta:.2f}x under the same Trainer (same call; issue 19's bar: 6x once the levers "
            f"land).",
            f"Liger at micro batch 32 (the probe's choice) ran out of GPU memory at start this time "
            f"({liger['message'][:90]}...); on 2026-12-01 the same run fit (23.5 GiB reserved, "
            f"{liger_before['tokens_per_s']:,.0f} tokens/s): micro 32 sits at the 24 GiB edge, not a safe default.",
        ],
        "not_run": [{"name": "liger at micro batch 24 (a margin below the 24 GiB edge)",
                     "why": "device time: this session's 30 minutes went to the two 150-step quality curves and this call"}],
    }


OUT_SESSION5 = ROOT / "data" / "reference" / "h200_levers_2026-12-02c.json"
#: Session 5's raw levers.json files per device call, in the order they ran (their ``started`` stamps).
SESSION5_RAW = {"call1": ("h200_levers_session5_call1_levers.json",),
                "call2": ("h200_levers_session5_call2_7b_levers.json", "h200_levers_session5_call2_liger28_levers.json"),
                "call3": ("h200_levers_session5_call3_zenflow_liger_levers.json",
                          "h200_levers_session5_call3_7b_levers.json")}
#: Issue 19's recipe baseline with bf16 states, 8,283 tokens/s: issue 19's text (the 2026-12-01 record quotes it only
#: in setup.wall_clock_breakdown, "8,122-8,283 measured without it"; no run of data/reference holds it).
ISSUE19_BF16_BASELINE = 8283.0
#: Notebook 06's own GPU run (docs/gpu, LLaMA-7B): its results file, run name and run folder (re-executed in session 6:
#: 16 x 1 with pinned buffers, build_session6's notebook06-16x1).
NB06_RESULTS = ROOT / "docs" / "gpu" / "gpu-1x24gib" / "06_final_1x4090" / "results.json"
NB06_RUN = "ZeRO-3 + opt→cpu + param→cpu"
NB06_DIR = NB06_RESULTS.parent / "cpu_offload"
#: Notebook 06's GPU run before session 6 (2026-12-01, 2 x 8, pin_memory false, packed shipped chats), the number
#: session 5 compared against: the files of docs/gpu were re-executed since, so it is pinned here with its source
#: (tests/test_levers_report.py checks it against ``git show`` where the history is there).
NB06_BEFORE = {"tokens_per_s": 450.595, "step_time_s": 36.3666, "micro_batch": 2, "grad_accum": 8,
               "pin_memory": False, "commit": "a8674736e194e5b6fca00ca19b5819185bbd4ba3",
               "path": "docs/gpu/gpu-1x24gib/06_final_1x4090/cpu_offload/summary.json"}


def _session5_commands(raws: dict) -> dict:
    """The device commands of session 5 (docs/benchmarks.md §14), each ``--deadline-s`` read from its raw record
    (``raws``: file name -> the loaded raw levers.json)."""
    dl = {f: raws[f]["deadline_s"] for fs in SESSION5_RAW.values() for f in fs}
    setup = ". benchmarks/device/setup.sh (carry: .whl, .debs); "
    lev = "python3 -m benchmarks.levers"
    c1, (c2a, c2b), (c3a, c3b) = SESSION5_RAW["call1"][0], SESSION5_RAW["call2"], SESSION5_RAW["call3"]
    return {
        "call1": f"{setup}{lev} --out $OUT/levers --deadline-s {dl[c1]:.0f} --plan call3 --phases ''",
        "call2": f"{setup}{lev} --out $OUT/levers7b --work /tmp/lev7b --deadline-s {dl[c2a]:.0f} --plan call4 --only "
                 f"7b-2x8,7b-16x1,7b-16x1-bind --phases ''; then {lev} --deadline-s {dl[c2b]:.0f} --plan call3 --only "
                 "liger-fp32-28 --phases ''",
        "call3": f"{setup}{lev} --deadline-s {dl[c3a]:.0f} --plan call3 --only zenflow-liger-fp32-24 --phases ''; then "
                 f"{lev} --work /tmp/lev7b --deadline-s {dl[c3b]:.0f} --plan call4 --only 7b-16x1-bind,7b-8x2 "
                 "--phases ''",
    }


def _n_7b(r: dict) -> int:
    """LLaMA-7B's parameter count from the cookbook (``model_spec("llama-7b")``), checked against the count the run
    recorded (``details.inputs.num_params``) where it has one."""
    from cookbook.models import model_spec
    n = model_spec("llama-7b").num_params
    rec = ((r.get("details") or {}).get("inputs") or {}).get("num_params")
    if rec is not None and rec != n:
        raise ValueError(f"{r['name']}: the run recorded {rec:,} parameters, the cookbook's llama-7b has {n:,}")
    return n


def _lever_row(r: dict, call: str, ceil: dict, raw_file: str) -> dict:
    """:func:`_row` of one run of a 2026-12-02 raw levers.json (sessions 5 and 6): the ``7b-*`` runs with LLaMA-7B's
    parameter count, the others with the 3.4B shape's; where DeepSpeed printed its timers, what one printed entry
    covers (``breakdown_per``) and the medians with the first step included; the raw file's name."""
    row = _row(r, call, ceil, _n_7b(r) if r["name"].startswith("7b-") else N_3B)
    g = (r.get("plan") or {}).get("grad_accum") or 1
    if row.get("breakdown_median_ms"):
        row["breakdown_per"] = (f"optimizer step: DeepSpeed's micro timers summed over its {g} micro "
                                f"step(s), printed once per step")
        row["breakdown_median_ms_all_steps"] = _medians(
            [b for b in r["breakdown"] if "fwd_microstep" in b],
            ("fwd_microstep", "bwd_microstep", "step_microstep")) | _medians(
            [b for b in r["breakdown"] if "optimizer_step" in b], ("optimizer_gradients", "optimizer_step"))
    row["raw_file"] = raw_file
    return row


def build_session5() -> dict:
    """Issue 19, session 5 (2026-12-02; three device calls on one H200 capped at 24 GiB): the exact-Adam (fp32
    states) recipe beside ZenFlow without overlap_step, Liger at micro 24/28, both, and the HF Trainer with the LLaMA
    article's config (call 1, one call); LLaMA-7B on one rank, ZeRO-3 with optimizer and parameters on the CPU, at
    2 x 8, 8 x 2, 16 x 1 and 16 x 1 with DeepSpeed's core binding (calls 2 and 3). docs/benchmarks.md §14 is the
    account. Floors and projections with 2026-12-01 call 1's ceilings (none measured that day); the 7B rows with
    LLaMA-7B's parameter count. Raises KeyError if a run the findings compare is missing from the raw files."""
    ceil, _ = call1_ceilings(json.loads((RAW / "h200_levers_call1_levers.json").read_text()))
    raws = {f: json.loads((RAW / f).read_text()) for fs in SESSION5_RAW.values() for f in fs}
    rows = []
    for call, files in SESSION5_RAW.items():
        for f in files:
            rows += [_lever_row(r, call, ceil, f) for r in raws[f]["runs"]]
    by = {r["name"]: r for r in rows}
    ok = {n: r for n, r in by.items() if r["status"] == "ok"}
    tps = {n: r["tokens_per_s"] for n, r in ok.items()}
    opt = {n: (r.get("breakdown_median_ms") or {}).get("optimizer_step") for n, r in ok.items()}
    opt_all = {n: (r.get("breakdown_median_ms_all_steps") or {}).get("optimizer_step") for n, r in ok.items()}
    rf, zf, lg, ta = (tps[k] for k in ("recipe-fp32", "zenflow-fp32-seq", "liger-fp32-24", "trainer-article"))
    b2, b8, b16, bb = (tps[k] for k in ("7b-2x8", "7b-8x2", "7b-16x1", "7b-16x1-bind"))
    proj = {n: r["projection_rtx4090"]["tokens_per_s"] for n, r in ok.items()}
    old = {r["name"]: r for r in json.loads(OUT.read_text())["runs"]}
    liger_check = json.loads(OUT_BASELINES.read_text())["liger_check"]
    nb06 = NB06_BEFORE["tokens_per_s"]  # the 2 x 8 run of its time (docs/gpu has been re-executed since)
    m1 = json.loads((RAW / "h200_levers_session5_call1_machine.json").read_text())
    m3 = json.loads((RAW / "h200_levers_session5_call3_machine.json").read_text())
    same_machine = {k: v for k, v in m1.items() if k != "disk_free_gib"} == \
        {k: v for k, v in m3.items() if k != "disk_free_gib"}
    # the 4090 floor's terms for the 7B rows (benchmarks.report.floor under RTX4090_CEILINGS): which one sets the step
    t4090 = {n: floor({"num_params": ok[n]["num_params"], "plan": ok[n]["plan"]}, RTX4090_CEILINGS)
             for n in ("7b-2x8", "7b-8x2", "7b-16x1")}
    terms = "; ".join(f"{n}: compute {t['t_compute_s']:.1f} s, PCIe {t['t_pcie_s']:.1f} s, CPU Adam "
                      f"{t['t_cpu_adam_s']:.1f} s" for n, t in t4090.items())
    pcie_top = [n for n, t in t4090.items() if t["t_pcie_s"] >= max(t["t_compute_s"], t["t_cpu_adam_s"])]
    pcie_not = [n for n in t4090 if n not in pcie_top]
    cookbook3 = [ok[n] for n in ("recipe-fp32", "zenflow-fp32-seq", "liger-fp32-24")]
    zf_cfg = by["zenflow-fp32-seq"]["deepspeed_config"]["zero_optimization"]["zenflow"]
    zl, l28 = by["zenflow-liger-fp32-24"], by["liger-fp32-28"]
    fb = {n: ok[n]["breakdown_median_ms"]["fwd_microstep"] + ok[n]["breakdown_median_ms"]["bwd_microstep"]
          for n in ("7b-2x8", "7b-16x1")}
    g2 = ok["7b-2x8"]["plan"]["grad_accum"]
    bind = ok["7b-16x1-bind"]
    host7b = max(ok[n]["host_peak_gib"] for n in ("7b-2x8", "7b-8x2", "7b-16x1"))
    return {
        **_header("h200_levers_session5_call1_machine.json",
                  "issue 19, session 5: the exact-Adam (fp32 states) recipe's levers in one call (ZenFlow without "
                  "overlap_step, Liger at micro 24 and 28, both, the HF Trainer with the LLaMA article's config; 3.4B "
                  "LLaMA shape, ZeRO-2 + optimizer offload) and LLaMA-7B itself on one rank (ZeRO-3, optimizer and "
                  "parameters on the CPU, bf16 states; micro batch x accumulation at 16 sequences per step, and "
                  "DeepSpeed's core binding); one H200 capped at 24 GiB, seq 1024, bf16, gradient checkpointing",
                  _session5_commands(raws)),
        "machine_note": "machine from call 1's machine.json; call 3's is the same except disk_free_gib"
                        if same_machine else "call 1's and call 3's machine.json differ: see the raw files",
        "calls": {call: {"raw": list(files), "started": [raws[f]["started"] for f in files],
                         "deadline_s": [raws[f]["deadline_s"] for f in files]} for call, files in SESSION5_RAW.items()},
        "setup": {**SETUP_MODEL_DATA,
                  "model_7b": f"llama-7b, the cookbook's shipped architecture (data/models/llama-7b, "
                              f"{ok['7b-16x1']['num_params']:,} parameters: cookbook.models.model_spec, the same in "
                              "each 7B record), random weights",
                  "rows": "every run: one example per row, cut to exactly 1024 tokens (the cookbook with packing=False, "
                          "the Trainer's tokenize)",
                  "states": "3.4B cookbook rows: fp32 states (exact Adam); trainer-article: the article's config (fp32 "
                            "states); 7B rows: bf16 states (bf16_master_weights_and_grads, bf16_optimizer_states)",
                  "tokens_per_s": "median over the steps after the first",
                  "breakdown_median_ms": "DeepSpeed's wall-clock timers (ms), median over the steps after the first "
                                         "(as tokens_per_s). Under Accelerate engine.step() runs at the accumulation "
                                         "boundary only and the timers reset when printed, so each printed "
                                         "fwd_microstep / bwd_microstep is the sum over the step's micro steps: per "
                                         "optimizer step (= per micro step where grad_accum is 1; the 7B rows at "
                                         "2 x 8 and 8 x 2 sum 8 and 2); see each row's breakdown_per",
                  "breakdown_median_ms_all_steps": "the same medians with the first step included: the values of "
                                                   "docs/benchmarks.md §14's LLaMA-7B table (its 3.4B table's "
                                                   "optimizer_step uses the steps after the first)"},
        "ceilings": ceil,
        "ceilings_note": "from 2026-12-01 call 1 (data/reference/h200_levers_2026-12-01.json): none measured on 2026-12-02",
        "rtx4090_model": RTX4090,
        "projection_note": PROJECTION_NOTE_HEAD + "The 7B rows' floor carries ZeRO-3's parameter-offload traffic, 4N*G "
                           "bytes up and 2N*G down per step (benchmarks.report.pcie_bytes), so the 4090's PCIe 4.0 x16 "
                           f"term grows with the accumulation: {terms}. It is the largest term at "
                           f"{', '.join(pcie_top) or 'no row'}; at {', '.join(pcie_not) or 'no row'} compute and CPU Adam "
                           "are larger. "
                           f"The 7B rows also assume the host RAM they used here ({host7b:.1f} GiB with bf16 states) and "
                           "the floor's CPU Adam rate is fp32 DeepSpeedCPUAdam's (2026-12-01 call 1).",
        "runs": rows,
        "ratios_same_call": {
            "liger_fp32_24_over_recipe_fp32 (call 1)": lg / rf,
            "zenflow_fp32_seq_over_recipe_fp32 (call 1)": zf / rf,
            "recipe_fp32_over_trainer_article (call 1)": rf / ta,
            "liger_fp32_24_over_trainer_article (call 1)": lg / ta,
            "zenflow_fp32_seq_optimizer_step_over_recipe_fp32s (call 1, breakdown medians)":
                opt["zenflow-fp32-seq"] / opt["recipe-fp32"],
            "7b_16x1_over_7b_2x8 (call 2)": b16 / b2,
        },
        "ratios_across_calls": {
            "7b_16x1_bind (call 3) optimizer_step over 7b_16x1's (call 2), medians of the steps after the first":
                opt["7b-16x1-bind"] / opt["7b-16x1"],
            "7b_16x1_bind (call 3) optimizer_step over 7b_16x1's (call 2), medians of all steps (docs §14)":
                opt_all["7b-16x1-bind"] / opt_all["7b-16x1"],
            "7b_16x1_bind (call 3) over 7b_16x1 (call 2)": bb / b16,
            "7b_16x1_bind (call 3) over 7b_2x8 (call 2)": bb / b2,
            "7b_8x2 (call 3) over 7b_2x8 (call 2)": b8 / b2,
            "liger_fp32_24 (call 1) over issue 19's 8,283 bf16-states baseline (issue text)":
                lg / ISSUE19_BF16_BASELINE,
        },
        "findings": [
            f"Issue 19's bar of 6x the HF Trainer with the LLaMA article's config is missed: in the same call (call 1, "
            f"Trainer + article {ta:,.0f} tokens/s) recipe-fp32 (exact Adam) runs {rf / ta:.2f}x and Liger at micro 24 "
            f"{lg / ta:.2f}x, {100 * (1 - lg / ta / 6):.0f} % short of 6x: 6x is {6 * ta:,.0f} tokens/s, "
            f"{6 * ta / lg:.2f}x Liger micro 24's {lg:,.0f}.",
            f"Issue 19's bar of >= 1.6x the recipe is missed: Liger at micro 24 runs {lg / rf:.2f}x recipe-fp32 in the "
            f"same call (1.6x: {1.6 * rf:,.0f} tokens/s), and {lg / ISSUE19_BF16_BASELINE:.2f}x issue 19's 8,283 "
            "tokens/s baseline with bf16 states: the same speed with exact Adam, without bf16 states' quality cost "
            "(+148 % last-20 loss, h200_quality_2026-12-02.json). What stands in the way is the CPU Adam term, not "
            f"overlapped: optimizer_step {min(opt[r['name']] for r in cookbook3) / 1000:.2f}-"
            f"{max(opt[r['name']] for r in cookbook3) / 1000:.2f} s of a {min(r['step_time_s'] for r in cookbook3):.2f}-"
            f"{max(r['step_time_s'] for r in cookbook3):.2f} s step (recipe-fp32, zenflow-fp32-seq, liger-fp32-24) runs "
            "after the backward while the GPU waits.",
            f"ZenFlow without overlap_step gains {100 * (zf / rf - 1):.0f} % ({zf:,.0f} vs {rf:,.0f} tokens/s, same call): "
            f"its CPU update still runs in the step; the selective update every {zf_cfg['update_interval']} steps "
            f"lowers optimizer_step by {100 * (1 - opt['zenflow-fp32-seq'] / opt['recipe-fp32']):.0f} % only "
            f"({opt['zenflow-fp32-seq']:,.0f} vs {opt['recipe-fp32']:,.0f} ms), and its GPU-side top-k states take "
            f"{ok['zenflow-fp32-seq']['peak_gpu_allocated_gib'] - ok['recipe-fp32']['peak_gpu_allocated_gib']:.1f} GiB "
            f"({ok['zenflow-fp32-seq']['peak_gpu_allocated_gib']:.1f} vs {ok['recipe-fp32']['peak_gpu_allocated_gib']:.1f} "
            "GiB allocated), which blocks a larger micro batch: with Liger at micro 24 (call 3) it ran out of GPU "
            f"memory after {len(zl['step_times_s'])} steps (tried {zl['message'].split('allocate ')[1].split(';')[0]}). "
            f"With overlap_step it ran {old['zenflow-fp32']['tokens_per_s']:,.0f} tokens/s before the host OOM of "
            "2026-12-01 and needs +16 B/parameter of host RAM (docs/benchmarks.md §13).",
            f"Liger's largest micro batch under the 24 GiB cap with fp32 states is 24 "
            f"({ok['liger-fp32-24']['peak_gpu_allocated_gib']:.1f} / {ok['liger-fp32-24']['peak_gpu_reserved_gib']:.1f} "
            f"GiB allocated / reserved); micro 28 (call 2) ran out of GPU memory after {len(l28['step_times_s'])} step "
            f"(tried {l28['message'].split('allocate ')[1].split(';')[0]} at {l28['peak_gpu_allocated_gib']:.1f} GiB "
            "allocated). Liger's loss is the exact cross-entropy: quality-neutral (2026-12-02 liger_check, tiny-llama on "
            f"the GPU: {liger_check['liger']['first_loss']} -> {liger_check['liger']['last_loss']} with it, "
            f"{liger_check['plain']['first_loss']} -> {liger_check['plain']['last_loss']} without).",
            f"LLaMA-7B on one rank capped at 24 GiB (ZeRO-3, optimizer and parameters on the CPU, bf16 states, 16 "
            f"sequences of 1024 per step): 16 x 1 runs {b16:,.0f} tokens/s = {b16 / b2:.2f}x notebook 06's 2 x 8 "
            f"({b2:,.0f}; same call, call 2) at {ok['7b-16x1']['peak_gpu_reserved_gib']:.1f} GiB reserved; 8 x 2 "
            f"{b8:,.0f} = {b8 / b2:.2f}x (call 3 vs call 2). ZeRO-3 with offloaded parameters moves every parameter "
            f"over PCIe for each micro batch's forward and backward: fwd + bwd {fb['7b-2x8']:,.0f} ms per step at "
            f"2 x 8 vs {fb['7b-16x1']:,.0f} at 16 x 1, {(fb['7b-2x8'] - fb['7b-16x1']) / (g2 - 1) / 1000:.1f} s per "
            "extra micro batch.",
            f"Core binding is harmful here: DeepSpeed's layout (cores {bind['cores'][0]}-{bind['cores'][-1]}, "
            f"OMP_NUM_THREADS {bind['env']['OMP_NUM_THREADS']}, OMP_PROC_BIND {bind['env']['OMP_PROC_BIND']}, "
            f"OMP_PLACES {bind['env']['OMP_PLACES']}; call 3) made the CPU Adam step "
            f"{opt['7b-16x1-bind'] / opt['7b-16x1']:.1f}x slower than 7b-16x1 without it (optimizer_step "
            f"{opt['7b-16x1-bind'] / 1000:.1f} s vs {opt['7b-16x1'] / 1000:.1f} s, steps after the first; "
            f"{opt_all['7b-16x1-bind'] / opt_all['7b-16x1']:.1f}x with the first step, as §14 reads it) and the run "
            f"{bb / b16:.2f}x as fast (call 3 vs call 2). Do not pin OpenMP threads for a rank that also runs the CPU "
            "optimizer.",
            "Liger does not apply at ZeRO-3 (refused, cookbook/liger.py); ZenFlow needs fp32 states with DeepSpeed "
            f"0.19.8 (refused with bf16 master weights), which for LLaMA-7B do not fit this {m1['host_memory_gib']:.1f} "
            "GiB host.",
            f"Notebook 06's own GPU run (docs/gpu, 2 x 8) measured {nb06:,.0f} tokens/s, {b2 / nb06:.1f}x below 7b-2x8: "
            "its config has pin_memory false and packs the shipped short examples; which of the two costs what is not "
            "measured (not_run).",
            f"RTX 4090 projection of the recommended rows (a model, projection_note): Liger micro 24 "
            f"{proj['liger-fp32-24']:,.0f} tokens/s (recipe-fp32 {proj['recipe-fp32']:,.0f}, Trainer + article "
            f"{proj['trainer-article']:,.0f}: {proj['liger-fp32-24'] / proj['trainer-article']:.2f}x there); LLaMA-7B "
            f"16 x 1 {proj['7b-16x1']:,.0f} (2 x 8 {proj['7b-2x8']:,.0f}: {proj['7b-16x1'] / proj['7b-2x8']:.2f}x), with "
            f"the host RAM of this machine ({host7b:.1f} GiB used).",
        ],
        "not_run": [
            *[dict(n, ran_since=next(c for c, fs in SESSION5_RAW.items() for f in fs if c != "call1"
                                     and any(r["name"] == n["name"] for r in raws[f]["runs"])))
              for n in raws[SESSION5_RAW["call1"][0]]["not_run"]],
            {"name": "7b-16x1-bind in call 2", "why": "stopped at its wall-clock limit (149 s, the end of the call: "
             "h200_levers_session5_call2_7b_driver.log) before it recorded; no record", "ran_since": "call3"},
            {"name": "Liger at micro 26 (between 24, which fits, and 28, out of GPU memory)",
             "why": "device time (this session's 30 minutes: these three calls)",
             "ran_since": "h200_levers_2026-12-02d.json (session 6: out of GPU memory)"},
            {"name": "notebook 06's GPU run split into pin_memory and packing",
             "why": f"device time: its {nb06:,.0f} tokens/s vs 7b-2x8's {b2:,.0f} was not split between "
                    "pin_memory false and packed short examples in this session",
             "ran_since": "h200_levers_2026-12-02d.json (session 6: pin_memory false is the whole gap, 3.0x)"},
            {"name": "ZenFlow and Liger 150-step loss curves (3.4B)",
             "why": "device time; Liger computes the exact loss (2026-12-02 liger_check: identical losses with and "
                    "without it) and ZenFlow without overlap_step showed no speed gain worth a curve (1.02x)"},
        ],
    }


OUT_SESSION6 = ROOT / "data" / "reference" / "h200_levers_2026-12-02d.json"
#: Session 6's raw levers.json per device call (call 2 also executed notebook 06: NB06_DIR).
SESSION6_RAW = {"call1": "h200_levers_session6_call1_levers.json", "call2": "h200_levers_session6_call2_levers.json"}
#: call_notebooks.sh's deadline in call 2 (its first argument; the notebook's run records none).
SESSION6_NOTEBOOK_DEADLINE_S = 400
#: Session 6's call 3 (a later call, not a source of this record): the run file notebooks/llama7b-1x4090.yaml as shipped.
RUNFILE_CALL3 = RAW / "h200_runfile_session6_call3"
#: The rows whose memory estimate is recorded beside the measurement (``estimate_vs_measured``).
SESSION6_ESTIMATED = ("7b-z3opt-2x8", "7b-z3opt-8x2", "notebook06-16x1", "liger-fp32-26")


def _session6_commands(raws: dict) -> dict:
    """The device commands of session 6, each ``--deadline-s`` read from its raw record (``raws``: call -> the
    loaded raw levers.json)."""
    dl = {c: raws[c]["deadline_s"] for c in SESSION6_RAW}
    setup, lev = ". benchmarks/device/setup.sh; ", "python3 -m benchmarks.levers --out $OUT/levers"
    return {"call1": f"{setup}{lev} --work /tmp/lev5 --deadline-s {dl['call1']:.0f} --plan call5 --phases ''",
            "call2": f"{setup}{lev} --work /tmp/lev6 --deadline-s {dl['call2']:.0f} --plan call5 --only liger-fp32-26 "
                     f"--phases ''; bash benchmarks/device/call_notebooks.sh {SESSION6_NOTEBOOK_DEADLINE_S} 06"}


def _pin_memory(cfg: dict | None) -> dict:
    """``pin_memory`` of each offload block of a DeepSpeed config (``{}`` without offload)."""
    z = (cfg or {}).get("zero_optimization") or {}
    return {k: z[k].get("pin_memory") for k in ("offload_optimizer", "offload_param") if isinstance(z.get(k), dict)}


def _estimate_vs_measured(plan: dict, measured: dict, *, bf16_states: bool, ds_config: dict | None = None):
    """(estimate, estimate-vs-measured rows) of a run: :func:`cookbook.memory.estimate` of ``Plan(**plan)`` (DeepSpeed's
    default bucket sizes unless ``ds_config``) beside the measured peaks, through :func:`cookbook.memory.compare`
    (GPU allocated = total − allocator overhead − CUDA context, reserved = total − CUDA context, host = host total;
    error % = 100·(estimate − measured)/measured)."""
    from cookbook.memory import compare, estimate
    from cookbook.plan import Plan
    e = estimate(Plan(**plan), bf16_states=bf16_states, ds_config=ds_config)
    est = {"gpu_total_gib": e.gpu_gib["total"], "cuda_context_gib": e.gpu_gib.get("cuda_context", 0.0),
           "allocator_overhead_gib": e.gpu_gib.get("allocator_overhead", 0.0), "gpu_reserved_gib": e.gpu_reserved_gib,
           "gpu_allocated_gib": e.gpu_allocated_gib, "host_total_gib": e.host_gib["total"], "fits_gpu": e.fits_gpu}
    rows = [{k: (None if v is None or v != v else float(v)) if k != "quantity" else v for k, v in row.items()}
            for row in compare(e, measured).to_dict("records")]
    return est, rows


def _notebook06_run() -> dict:
    """Notebook 06's run of session 6 (call 2, ``docs/gpu/gpu-1x24gib/06_final_1x4090/cpu_offload``: summary.json,
    metrics.jsonl, ds_config.json, command.sh, run.json) in a raw levers run's keys, for :func:`_row`. Its
    tokens/s and s/step are the summary's (median over the steps after the first, as the levers runs'). Raises
    ValueError if the summary's plan is not the one run.json's arguments describe."""
    s = json.loads((NB06_DIR / "summary.json").read_text())
    args = json.loads((NB06_DIR / "run.json").read_text())["args"]
    res = json.loads(NB06_RESULTS.read_text())["runs"][NB06_RUN]
    metrics = [json.loads(x) for x in (NB06_DIR / "metrics.jsonl").read_text().splitlines() if x.strip()]
    plan = s["estimate"]["plan"]
    keys = ("model", "seq_len", "micro_batch", "grad_accum", "precision", "zero_stage", "offload_optimizer",
            "offload_param", "gradient_checkpointing", "liger")
    if {k: plan[k] for k in keys} != {k: args[k] for k in keys} or plan["gpu_memory_gib"] != args["emulate_gpu_memory_gib"]:
        raise ValueError(f"{NB06_DIR}: summary.json's plan {plan} is not run.json's arguments")
    after = metrics[1:]
    return {"name": "notebook06-16x1", "status": s["status"], "message": res["message"],
            "tokens_per_s": s["tokens_per_s"], "step_time_s": s["step_time_s"],
            "tokens_per_s_mean": sum(m["real_tokens"] for m in after) / sum(m["step_time_s"] for m in after),
            "tokens_per_step": plan["micro_batch"] * plan["grad_accum"] * plan["num_gpus"] * plan["seq_len"],
            **{k: s[k] for k in ("peak_gpu_allocated_gib", "peak_gpu_reserved_gib", "host_peak_gib")},
            "step_times_s": [m["step_time_s"] for m in metrics], "losses": [m["loss"] for m in metrics],
            "command": next(x for x in (NB06_DIR / "command.sh").read_text().splitlines() if x.startswith("accelerate")),
            "deepspeed_config": json.loads((NB06_DIR / "ds_config.json").read_text()), "config_changes": [],
            "duration_s": res.get("duration_s"), "breakdown": [], "plan": plan,
            "details": {"inputs": {"num_params": s["num_params"]}},
            "variant": {"micro_batch": args["micro_batch"], "bf16_states": args["bf16_states"], "zenflow": None,
                        "zenflow_native": False, "liger": args["liger"], "bind": None,
                        "note": "notebook 06 itself (cookbook run-all with notebooks/params/gpu-1x24gib.yaml): "
                                "LLaMA-7B, ZeRO-3 with optimizer and parameters on the CPU, bf16 states, 16 x 1, "
                                "packed rows of the shipped chats; its own config (no wall-clock timers)"},
            "_summary": s}


def build_session6() -> dict:
    """Issue 19, session 6 (2026-12-02; two device calls on one H200 capped at 24 GiB): LLaMA-7B with ZeRO-3 +
    optimizer offload and the parameters on the GPU (``notebooks/llama7b-1x4090.yaml``'s variant, bf16 states) at
    2 x 8 and 8 x 2, notebook 06's 2 x 8 full offload with ``pin_memory: false`` (call 1); Liger at micro 26 with fp32
    states and notebook 06 itself at 16 x 1 (call 2). Compared with session 5's rows
    (:data:`OUT_SESSION5`) and notebook 06's run of 2026-12-01 (:data:`NB06_BEFORE`). Floors and projections with
    2026-12-01 call 1's ceilings; the 7B rows with LLaMA-7B's parameter count. Raises KeyError if a run the findings
    compare is missing."""
    from cookbook.dsconfig import host_memory_needed_gib, host_memory_short
    from cookbook.memory import estimate
    from cookbook.plan import Plan
    ceil, _ = call1_ceilings(json.loads((RAW / "h200_levers_call1_levers.json").read_text()))
    raws = {c: json.loads((RAW / f).read_text()) for c, f in SESSION6_RAW.items()}
    rows = [_lever_row(r, c, ceil, SESSION6_RAW[c]) for c, raw in raws.items() for r in raw["runs"]]
    nb_run = _notebook06_run()
    nb_summary = nb_run.pop("_summary")
    nb = _row(nb_run, "call2", ceil, _n_7b(nb_run))
    nb["raw_file"] = f"{NB06_DIR.relative_to(ROOT)}/ (summary.json, metrics.jsonl, ds_config.json, command.sh, run.json)"
    nb["params_file"] = "notebooks/params/gpu-1x24gib.yaml (06_final_1x4090)"
    nb["rows"] = nb_summary["rows"]
    rows.append(nb)
    raw_by = {r["name"]: r for raw in raws.values() for r in raw["runs"]}
    for row in rows:
        row["pin_memory"] = _pin_memory(row.get("deepspeed_config"))
        if row["name"] in SESSION6_ESTIMATED:
            lv, plan = row["lever"], dict(row["plan"], liger=bool(row["lever"].get("liger")))
            measured = {k: row.get(k) for k in ("peak_gpu_allocated_gib", "peak_gpu_reserved_gib", "host_peak_gib")}
            row["estimate"], row["estimate_vs_measured"] = _estimate_vs_measured(
                plan, measured, bf16_states=bool(lv.get("bf16_states")))
            row["estimate"]["how"] = (f"cookbook.memory.estimate(Plan(**plan{', liger=True' if plan['liger'] else ''}),"
                                      f" bf16_states={bool(lv.get('bf16_states'))}): DeepSpeed's default bucket sizes, "
                                      "as the planner (cookbook estimate) sizes the run; compared by "
                                      "cookbook.memory.compare (positive error: the estimate is conservative)")
            if row["status"] != "ok":
                row["estimate"]["measured_until"] = "the out-of-memory error (peaks of the steps before it)"
            _, row["estimate_vs_measured_run_config"] = _estimate_vs_measured(
                plan, measured, bf16_states=bool(lv.get("bf16_states")), ds_config=row["deepspeed_config"])
    by = {r["name"]: r for r in rows}
    ok = {n: r for n, r in by.items() if r["status"] == "ok"}
    tps = {n: r["tokens_per_s"] for n, r in ok.items()}
    bd = {n: r.get("breakdown_median_ms") or {} for n, r in ok.items()}
    proj = {n: r["projection_rtx4090"]["tokens_per_s"] for n, r in ok.items()}
    s5 = {r["name"]: r for r in json.loads(OUT_SESSION5.read_text())["runs"]}
    s5bd = {n: r.get("breakdown_median_ms") or {} for n, r in s5.items()}
    z2, z8, npin, n16 = (tps[k] for k in ("7b-z3opt-2x8", "7b-z3opt-8x2", "7b-2x8-nopin", "notebook06-16x1"))
    p2, f16, f8 = (s5[k]["tokens_per_s"] for k in ("7b-2x8", "7b-16x1", "7b-8x2"))
    before = NB06_BEFORE["tokens_per_s"]
    m1 = json.loads((RAW / "h200_levers_session6_call1_machine.json").read_text())
    m2 = json.loads((RAW / "h200_levers_session6_call2_machine.json").read_text())
    same_machine = {k: v for k, v in m1.items() if k != "disk_free_gib"} == \
        {k: v for k, v in m2.items() if k != "disk_free_gib"}
    host = m1["host_memory_gib"]

    def fb(b):
        return b["fwd_microstep"] + b["bwd_microstep"]
    # pin_memory: the host check before and after the fix, for notebook 06's plan on this host
    pin_plan = Plan(**dict(ok["7b-2x8-nopin"]["plan"], host_memory_gib=host))
    ds_need = host_memory_needed_gib(pin_plan)
    ck_need = estimate(pin_plan, bf16_states=True).host_gib["total"]
    short_now = host_memory_short(pin_plan, bf16_states=True)
    # the run file's variant: 16 x 1 with the parameters on the GPU, and fp32 states (its default) at 8 x 2
    z16 = estimate(Plan(**dict(ok["7b-z3opt-8x2"]["plan"], micro_batch=16, grad_accum=1)), bf16_states=True)
    z8_fp32_host = estimate(Plan(**ok["7b-z3opt-8x2"]["plan"]), bf16_states=False).host_gib["total"]
    l26, l24, l28 = by["liger-fp32-26"], s5["liger-fp32-24"], s5["liger-fp32-28"]
    l26_recorded = raw_by["liger-fp32-26"]["details"]["estimate_gpu_gib"]
    ev = {n: {e["quantity"]: e for e in by[n]["estimate_vs_measured"]} for n in SESSION6_ESTIMATED}
    evr = {n: {e["quantity"]: e for e in by[n]["estimate_vs_measured_run_config"]} for n in SESSION6_ESTIMATED}

    def evs(n, rc=False):
        e = (evr if rc else ev)[n]
        return " / ".join(f"{e[q]['estimate GiB']:.1f} vs {e[q]['measured GiB']:.1f} ({e[q]['error %']:+.1f} %)"
                          for q in ("GPU allocated (peak)", "GPU reserved (peak)", "host RSS (peak)"))
    sevens = [n for n in ok if ok[n]["num_params"] != N_3B]
    t4090 = {n: floor({"num_params": ok[n]["num_params"], "plan": ok[n]["plan"]}, RTX4090_CEILINGS) for n in sevens}
    terms = "; ".join(f"{n}: compute {t['t_compute_s']:.1f} s, PCIe {t['t_pcie_s']:.1f} s, CPU Adam "
                      f"{t['t_cpu_adam_s']:.1f} s" for n, t in t4090.items())
    pcie_top = [n for n, t in t4090.items() if t["t_pcie_s"] >= max(t["t_compute_s"], t["t_cpu_adam_s"])]
    pcie_not = [n for n in t4090 if n not in pcie_top]
    host7b = max(ok[n]["host_peak_gib"] for n in sevens)
    a, b = ok["7b-z3opt-8x2"], s5["7b-16x1"]
    gap = a["step_time_s"] - b["step_time_s"]
    d_opt = bd["7b-z3opt-8x2"]["optimizer_step"] - s5bd["7b-16x1"]["optimizer_step"]
    d_fb = fb(bd["7b-z3opt-8x2"]) - fb(s5bd["7b-16x1"])
    src = f"git {NB06_BEFORE['commit'][:7]}:{NB06_BEFORE['path']}"
    return {
        **_header("h200_levers_session6_call1_machine.json",
                  "issue 19, session 6: what the product recommends, measured on one H200 capped at 24 GiB: LLaMA-7B "
                  "with ZeRO-3 + optimizer offload and the parameters on the GPU (notebooks/llama7b-1x4090.yaml's "
                  "variant, bf16 states) at 2 x 8 and 8 x 2; notebook 06's 2 x 8 full offload with pin_memory false; "
                  "Liger at micro 26 with fp32 states (3.4B LLaMA shape, ZeRO-2 + optimizer offload); notebook 06 "
                  "itself re-executed at 16 x 1 with pinned buffers; seq 1024, bf16, gradient checkpointing",
                  _session6_commands(raws)),
        "machine_note": "machine from call 1's machine.json; call 2's is the same except disk_free_gib"
                        if same_machine else "call 1's and call 2's machine.json differ: see the raw files",
        "calls": {c: {"raw": [f], "started": [raws[c]["started"]], "deadline_s": [raws[c]["deadline_s"]]}
                  | ({"notebook": f"{NB06_DIR.relative_to(ROOT)} (benchmarks/device/call_notebooks.sh "
                                  f"{SESSION6_NOTEBOOK_DEADLINE_S} 06, notebooks/params/gpu-1x24gib.yaml)"}
                     if c == "call2" else {})
                  for c, f in SESSION6_RAW.items()},
        "setup": {**SETUP_MODEL_DATA,
                  "model_7b": f"llama-7b, the cookbook's shipped architecture (data/models/llama-7b, "
                              f"{ok['7b-z3opt-8x2']['num_params']:,} parameters: cookbook.models.model_spec, the same "
                              "in each 7B record and notebook 06's summary), random weights",
                  "data_notebook06": f"notebook06-16x1: the shipped chats ({nb['rows']['examples']:,} examples), "
                                     "notebooks/params/gpu-1x24gib.yaml",
                  "rows": {"levers runs": "one example per row, cut to exactly 1024 tokens (the cookbook with "
                                          "packing=False)",
                           "notebook06-16x1": f"the cookbook's default: the examples packed into "
                                              f"{nb['rows']['rows']} rows of <= 1024 tokens (packing efficiency "
                                              f"{100 * nb['rows']['packing_efficiency']:.2f} %, "
                                              f"{nb['rows']['split_examples']} examples split), block-diagonal "
                                              "causal masks on sdpa"},
                  "states": "7B rows: bf16 states (bf16_master_weights_and_grads, bf16_optimizer_states); "
                            "liger-fp32-26: fp32 states (exact Adam)",
                  "tokens_per_s": "median over the steps after the first",
                  "breakdown_median_ms": "DeepSpeed's wall-clock timers (ms), median over the steps after the first, "
                                         "each printed fwd_microstep / bwd_microstep the sum over the step's micro "
                                         "steps (per optimizer step; see each row's breakdown_per and "
                                         "h200_levers_2026-12-02c.json's setup); notebook06-16x1 ran its own config "
                                         "with wall_clock_breakdown false: no breakdown",
                  "breakdown_median_ms_all_steps": "the same medians with the first step included",
                  "estimate_vs_measured": "rows " + ", ".join(SESSION6_ESTIMATED) + ": cookbook.memory.estimate of "
                                          "the row's plan (DeepSpeed's default bucket sizes, as the planner sizes "
                                          "it) beside the measured peaks through cookbook.memory.compare; "
                                          "estimate_vs_measured_run_config: the same with the run's DeepSpeed "
                                          "config's bucket sizes (as the run's own summary.json compares)"},
        "ceilings": ceil,
        "ceilings_note": "from 2026-12-01 call 1 (data/reference/h200_levers_2026-12-01.json): none measured on 2026-12-02",
        "rtx4090_model": RTX4090,
        "projection_note": PROJECTION_NOTE_HEAD + "The floor's PCIe bytes per step (benchmarks.report.pcie_bytes): ZeRO-3 "
                           "with the parameters offloaded 4N*G up and 2N*G down, with the parameters on the GPU 2N up and "
                           f"2N*G down, so the term grows with the accumulation: {terms}. It is the largest term at "
                           f"{', '.join(pcie_top) or 'no row'}; at {', '.join(pcie_not) or 'no row'} compute or CPU Adam "
                           "is larger. The floor does not know pin_memory: 7b-2x8-nopin has 7b-2x8's floor and a lower "
                           f"achieved fraction. The 7B rows also assume the host RAM they used here (up to {host7b:.1f} "
                           "GiB with bf16 states) and the floor's CPU Adam rate is fp32 DeepSpeedCPUAdam's (2026-12-01 "
                           "call 1).",
        "runs": rows,
        "ratios_same_call": {
            "7b_z3opt_8x2_over_7b_z3opt_2x8 (call 1)": z8 / z2,
        },
        "ratios_across_calls": {
            "7b_2x8 pinned (session 5 call 2) over 7b_2x8_nopin (call 1): the cost of pin_memory false": p2 / npin,
            f"notebook06_16x1 (call 2) over notebook 06's GPU run of 2026-12-01, {before:,.0f} (2 x 8, pin_memory "
            f"false; {src})": n16 / before,
            "notebook06_16x1 (call 2) over 7b_16x1 (session 5 call 2): packed shipped chats vs one example per row, "
            "same shape": n16 / f16,
            f"7b_2x8_nopin (call 1) over notebook 06's {before:,.0f} ({src}): one example per row vs packed shipped "
            "chats, same shape, both unpinned": npin / before,
            "7b_16x1 full offload (session 5 call 2) over 7b_z3opt_8x2 (call 1): parameters offloaded vs on the GPU":
                f16 / z8,
            "7b_z3opt_8x2 (call 1) optimizer_step over 7b_16x1's (session 5 call 2), medians of the steps after the "
            "first": bd["7b-z3opt-8x2"]["optimizer_step"] / s5bd["7b-16x1"]["optimizer_step"],
            "7b_z3opt_8x2 (call 1) fwd+bwd over 7b_16x1's (session 5 call 2), medians of the steps after the first":
                fb(bd["7b-z3opt-8x2"]) / fb(s5bd["7b-16x1"]),
            "7b_z3opt_2x8 (call 1) over 7b_2x8 (session 5 call 2): parameters on the GPU vs offloaded at 2 x 8":
                z2 / p2,
            "7b_z3opt_8x2 (call 1) over 7b_8x2 (session 5 call 3): parameters on the GPU vs offloaded at 8 x 2":
                z8 / f8,
        },
        "findings": [
            f"pin_memory false costs {p2 / npin:.2f}x on LLaMA-7B with full offload (ZeRO-3, bf16 states, 2 x 8, one "
            f"example per row): 7b-2x8 pinned {p2:,.0f} tokens/s (session 5 call 2) vs 7b-2x8-nopin {npin:,.0f} "
            f"(call 1). The time is in the backward: bwd_microstep {bd['7b-2x8-nopin']['bwd_microstep']:,.0f} vs "
            f"{s5bd['7b-2x8']['bwd_microstep']:,.0f} ms per step (fwd {bd['7b-2x8-nopin']['fwd_microstep']:,.0f} vs "
            f"{s5bd['7b-2x8']['fwd_microstep']:,.0f}, optimizer_step {bd['7b-2x8-nopin']['optimizer_step']:,.0f} vs "
            f"{s5bd['7b-2x8']['optimizer_step']:,.0f}); the host peak is {ok['7b-2x8-nopin']['host_peak_gib']:.1f} vs "
            f"{s5['7b-2x8']['host_peak_gib']:.1f} GiB pinned. Notebook 06's config of 2026-12-01 had pin_memory false "
            f"because the cookbook's host check used DeepSpeed's estimate with fp32 states ({ds_need:.1f} GiB with its "
            f"1.5x buffer factor, cookbook.dsconfig.host_memory_needed_gib) against this {host:.1f} GiB host, where "
            f"the cookbook's own estimate with bf16 states is {ck_need:.1f} GiB. Fixed: cookbook.dsconfig."
            f"host_memory_short takes bf16_states and the cookbook's estimate; for this plan on this host it now says "
            f"{'short' if short_now else 'not short'}, and notebook06-16x1's config has pin_memory "
            + ", ".join(f"{str(v).lower()} ({k})" for k, v in nb["pin_memory"].items()) + ".",
            f"Liger at micro 26 (fp32 states, call 2) ran out of GPU memory after {len(l26['step_times_s'])} step "
            f"(tried {l26['message'].split('allocate ')[1].split(';')[0]} at {l26['peak_gpu_allocated_gib']:.1f} / "
            f"{l26['peak_gpu_reserved_gib']:.1f} GiB allocated / reserved): micro 24 stays the largest measured that "
            f"fits (liger-fp32-24, {l24['tokens_per_s']:,.0f} tokens/s, {l24['peak_gpu_allocated_gib']:.1f} / "
            f"{l24['peak_gpu_reserved_gib']:.1f} GiB, session 5 call 1; micro 28 {l28['status']}, session 5 call 2). "
            f"The cookbook estimates {l26['estimate']['gpu_total_gib']:.1f} GiB of 24 for micro 26 with Liger "
            f"(allocated / reserved / host: {evs('liger-fp32-26')} measured up to the error): the estimator "
            "under-counts Liger runs (cookbook.memory.LIGER_MEASURED_GAP). The run's own message quotes "
            f"{l26_recorded:.1f} GiB: the estimate of its plan, which says liger false (benchmarks.levers turns Liger "
            "on through LEVER_LIGER, not --liger).",
            f"The run file's variant (ZeRO-3 + optimizer offload, parameters on the GPU; bf16 states here): 8 x 2 runs "
            f"{z8:,.0f} tokens/s = {z8 / z2:.2f}x its 2 x 8 ({z2:,.0f}, same call), {a['step_time_s']:.2f} vs "
            f"{ok['7b-z3opt-2x8']['step_time_s']:.2f} s/step (8 x 2's steps: "
            f"{', '.join(f'{t:.2f}' for t in a['step_times_s'])} s; mean {a['tokens_per_s_mean']:,.0f} tokens/s). "
            f"fwd+bwd {fb(bd['7b-z3opt-8x2']):,.0f} vs {fb(bd['7b-z3opt-2x8']):,.0f} ms per step, optimizer_step "
            f"{bd['7b-z3opt-8x2']['optimizer_step']:,.0f} vs {bd['7b-z3opt-2x8']['optimizer_step']:,.0f}. "
            f"Estimate vs measured at 8 x 2 (allocated / reserved / host GiB): {evs('7b-z3opt-8x2')}; with the run's "
            f"bucket sizes {evs('7b-z3opt-8x2', True)}. 16 x 1 does not fit this way: "
            f"{z16.gpu_gib['total']:.1f} GiB estimated of 24.",
            f"With LLaMA-7B on this machine the parameters offloaded beat the parameters on the GPU: 7b-16x1 (full "
            f"offload, session 5 call 2) {f16:,.0f} tokens/s = {f16 / z8:.2f}x 7b-z3opt-8x2 ({z8:,.0f}, call 1), "
            f"{b['step_time_s']:.2f} vs {a['step_time_s']:.2f} s/step. Of the {gap:.2f} s longer step, optimizer_step "
            f"accounts for {d_opt / 1000:.2f} s ({bd['7b-z3opt-8x2']['optimizer_step']:,.0f} vs "
            f"{s5bd['7b-16x1']['optimizer_step']:,.0f} ms, "
            f"{bd['7b-z3opt-8x2']['optimizer_step'] / s5bd['7b-16x1']['optimizer_step']:.2f}x) "
            f"and fwd+bwd for {d_fb / 1000:.2f} s ({fb(bd['7b-z3opt-8x2']):,.0f} vs {fb(s5bd['7b-16x1']):,.0f} ms: two "
            f"micro batches vs one). The floor model gives the two the same serial floor "
            f"({a['floor']['floor_serial_s']:.2f} vs {b['floor']['floor_serial_s']:.2f} s: "
            f"{(a['floor']['pcie_bytes_up'] + a['floor']['pcie_bytes_down']) / 1e9:.1f} vs "
            f"{(b['floor']['pcie_bytes_up'] + b['floor']['pcie_bytes_down']) / 1e9:.1f} GB over PCIe per step); "
            f"achieved/floor {100 * a['floor']['achieved_over_floor_serial']:.0f} % vs "
            f"{100 * b['floor']['achieved_over_floor_serial']:.0f} %. At the same shape: 2 x 8 {z2 / p2:.2f}x 7b-2x8 "
            f"(pinned, session 5 call 2), 8 x 2 {z8 / f8:.2f}x 7b-8x2 (session 5 call 3). optimizer_step is longer "
            f"with the parameters on the GPU at each shape measured: "
            + ", ".join(f"{bd[z]['optimizer_step']:,.0f} vs {s5bd[o]['optimizer_step']:,.0f} ms at {sh}"
                        for z, o, sh in (("7b-z3opt-2x8", "7b-2x8", "2 x 8"), ("7b-z3opt-8x2", "7b-8x2", "8 x 2")))
            + "; fwd+bwd " + ", ".join(f"{fb(bd[z]):,.0f} vs {fb(s5bd[o]):,.0f} ms at {sh}"
                                        for z, o, sh in (("7b-z3opt-2x8", "7b-2x8", "2 x 8"),
                                                         ("7b-z3opt-8x2", "7b-8x2", "8 x 2")))
            + f". Host {a['host_peak_gib']:.1f} vs {b['host_peak_gib']:.1f} GiB.",
            f"Notebook 06's own run now (call 2, notebooks/params/gpu-1x24gib.yaml: 16 x 1, pinned, packed shipped "
            f"chats): {n16:,.0f} tokens/s, {ok['notebook06-16x1']['step_time_s']:.2f} s/step, "
            f"{ok['notebook06-16x1']['peak_gpu_allocated_gib']:.1f} / "
            f"{ok['notebook06-16x1']['peak_gpu_reserved_gib']:.1f} GiB allocated / reserved, host {ok['notebook06-16x1']['host_peak_gib']:.1f} GiB: {n16 / before:.2f}x its "
            f"{before:,.0f} of 2026-12-01 (2 x 8, pin_memory false; {src}). The two levers measured apart multiply to "
            f"{p2 / npin * s5['7b-16x1']['tokens_per_s'] / p2:.2f}x (pinned over unpinned {p2 / npin:.2f}x, session 6 "
            f"vs 5; 16 x 1 over 2 x 8 {f16 / p2:.2f}x, session 5). Packed chats vs one example per row at the same "
            f"shape: {n16 / f16:.3f}x 7b-16x1 ({f16:,.0f}) pinned at 16 x 1, {before / npin:.3f}x 7b-2x8-nopin "
            f"({npin:,.0f}) unpinned at 2 x 8; the notebook runs without DeepSpeed's timers (the levers rows have "
            "them on), so its breakdown is not measured. Estimate vs measured (allocated / reserved / host GiB): "
            f"{evs('notebook06-16x1')}; with its run's bucket sizes (its summary.json) {evs('notebook06-16x1', True)}.",
            "RTX 4090 projection of every ok row (a model, projection_note): "
            + ", ".join(f"{n} {proj[n]:,.0f} tokens/s" for n in ok)
            + f"; the 7B rows with the host RAM they used here (up to {host7b:.1f} GiB).",
        ],
        "not_run": [
            *[dict(n, ran_since=next((c for c, raw in raws.items() if c != "call1"
                                      and any(r["name"] == n["name"] for r in raw["runs"])), None))
              for n in raws["call1"]["not_run"]],
            {"name": "ZenFlow and Liger 150-step loss curves (3.4B)",
             "why": "device time; Liger computes the exact loss (2026-12-02 liger_check: identical losses with and "
                    "without it)"},
            {"name": "7b-z3opt-8x2 with fp32 states (the run file's default, bf16-states: false)",
             "why": f"device time: not in this record's two calls. The cookbook estimates {z8_fp32_host:.1f} GiB of "
                    f"host RAM for it on this {host:.1f} GiB machine (bf16 states: {a['estimate']['host_total_gib']:.1f} "
                    f"estimated, {a['host_peak_gib']:.1f} measured)",
             **({"ran_since": f"session 6 call 3, {RUNFILE_CALL3.relative_to(ROOT)}/ (the run file as shipped: fp32 "
                              "states, packed shipped chats; 8 x 2 as a console tail, 2 x 8 with its run folder); "
                              "not a row of this record"} if RUNFILE_CALL3.is_dir() else {})},
            {"name": "notebook 06 with DeepSpeed's wall-clock timers",
             "why": "the notebook runs its own config (wall_clock_breakdown false): notebook06-16x1 has no fwd / bwd / "
                    "optimizer_step split against 7b-16x1"},
        ],
    }


FIG_LEVERS = ROOT / "docs" / "levers_h200.png"
#: The rows of :func:`figure`, (reference file, run name, label): the article's road, the recipe, the levers that
#: won, and notebook 06's run before and after (sessions 5 and 6 of 2026-12-02).
FIGURE_ROWS = (
    ("h200_levers_2026-12-02c.json", "trainer-article", "3.4B: HF Trainer +\nLLaMA article config"),
    ("h200_levers_2026-12-02c.json", "recipe-fp32", "3.4B: recipe\n(ZeRO-2 + opt offload)"),
    ("h200_levers_2026-12-02c.json", "liger-fp32-24", "3.4B: recipe +\nLiger, micro 24"),
    ("h200_levers_2026-12-02d.json", "7b-2x8-nopin", "7B: 2 x 8,\nunpinned (old nb 06)"),
    ("h200_levers_2026-12-02c.json", "7b-2x8", "7B: 2 x 8,\npinned"),
    ("h200_levers_2026-12-02c.json", "7b-16x1", "7B: 16 x 1,\npinned"),
    ("h200_levers_2026-12-02d.json", "notebook06-16x1", "7B: notebook 06\nnow (packed)"),
)


def figure(path: Path = FIG_LEVERS) -> Path:
    """Bar chart of :data:`FIGURE_ROWS`: tokens/s measured on the H200 capped at 24 GiB (fp32 states for the 3.4B
    rows, bf16 states for the 7B rows) beside each row's RTX 4090 projection (``projection_rtx4090``:
    :func:`benchmarks.report.floor_and_projection`, the model of ``docs/benchmarks.md`` §5). Reads the committed
    reference files; raises KeyError if a named run is missing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    refs = {}
    rows = []
    for file, name, label in FIGURE_ROWS:
        ref = refs.setdefault(file, json.loads((ROOT / "data" / "reference" / file).read_text()))
        r = next(x for x in ref["runs"] if x["name"] == name)
        rows.append((label, r["tokens_per_s"], (r.get("projection_rtx4090") or {}).get("tokens_per_s") or 0.0))
    fig, ax = plt.subplots(figsize=(11, 4.2))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r[1] for r in rows], 0.4, label="measured: 1 x H200 capped at 24 GiB")
    ax.bar([i + 0.2 for i in x], [r[2] for r in rows], 0.4, label="RTX 4090 projection (docs/benchmarks.md §5)")
    for i, r in enumerate(rows):
        ax.text(i - 0.2, r[1], f"{r[1]:,.0f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + 0.2, r[2], f"{r[2]:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), [r[0] for r in rows], fontsize=8)
    ax.set_ylabel("tokens/s (16-24 x 1024 tokens per step)")
    ax.set_title("Issue 19 on 2026-12-02: 3.4B with exact Adam (fp32 states); LLaMA-7B on one rank (bf16 states)",
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="Rebuild one levers reference file from data/reference/raw/ (module "
                                            "docstring); with no option the 2026-12-01 files.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--baselines", action="store_true", help=f"write {OUT_BASELINES.name} (the HF Trainer baselines)")
    g.add_argument("--same-call", action="store_true", help=f"write {OUT_SAME_CALL.name} (the loop vs the Trainer)")
    g.add_argument("--session5", action="store_true",
                   help=f"write {OUT_SESSION5.name} (session 5: exact-Adam levers, LLaMA-7B on one rank)")
    g.add_argument("--session6", action="store_true",
                   help=f"write {OUT_SESSION6.name} (session 6: LLaMA-7B variants, pin_memory, Liger 26, notebook 06)")
    g.add_argument("--figure", action="store_true", help=f"draw docs/{FIG_LEVERS.name} from the reference files")
    a = p.parse_args(argv)
    if a.figure:
        print(figure())
        return 0
    builders = {"session6": (build_session6, OUT_SESSION6), "session5": (build_session5, OUT_SESSION5),
                "same_call": (build_same_call, OUT_SAME_CALL), "baselines": (build_baselines, OUT_BASELINES)}
    chosen = next((k for k in builders if getattr(a, k)), None)
    if chosen:
        builder, out = builders[chosen]
        ref = builder()
        out.write_text(json.dumps(ref, indent=1, default=str) + "\n")
    else:
        ref, nvme = build()
        OUT.write_text(json.dumps(ref, indent=1, default=str))
        OUT_NVME.write_text(json.dumps(nvme, indent=1, default=str))
    print(table(ref))
    print(json.dumps({"same call": ref["ratios_same_call"], "across calls": ref["ratios_across_calls"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
