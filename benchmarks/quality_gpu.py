"""Quality cost of the offload levers on the GPU: the 3.4B recipe's loss over 150 optimizer steps (issue 19 item 4).

The CPU proxy (:mod:`benchmarks.quality_cpu`, tiny-llama) showed the optimizers' numerics; this is the recipe
itself: the 3.4B LLaMA shape (``benchmarks/models/llama-3b``, random weights from seed 1234), ZeRO-2 + optimizer
offload on one GPU capped at 24 GiB, the shipped chats packed into 1024-token rows (same rows, same order: the
cookbook's sampler is a pure function of the seed and the step), lr 2e-5 with 5 % warm-up and linear decay, bf16,
gradient checkpointing, micro batch 8 × accumulation 1 (8 × 1024 tokens a step: 150 steps fit one 10-minute device
call, ~2–3 s a step). Only the optimizer's arithmetic differs:

* ``exact_adam``  — fp32 master weights and Adam states (DeepSpeedCPUAdam): the reference;
* ``bf16_states`` — the recipe's ``--bf16-states`` (half the host RAM);
* ``liger``       — bf16 states + Liger's fused linear cross-entropy (the same loss, chunked: a check that the
  curve matches ``bf16_states``).

One variant per device call (``--variant``), each writing its own record; ``--merge`` puts them side by side::

    bash benchmarks/device/call_quality.sh exact_adam 570      # on the GPU machine, one call per variant
    python -m benchmarks.quality_gpu --merge OUT1/quality/exact_adam.json OUT2/quality/bf16_states.json \\
        --out data/reference/h200_quality_DATE.json --figure docs/quality_h200.png
    DS_ACCELERATOR=cpu python -m benchmarks.quality_gpu --variant bf16_states --rehearsal --out /tmp/q   # CPU

``--rehearsal``: tiny-llama, 128-token rows, 10 steps, lr 3e-3, no GPU cap (the path, not the numbers).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA3B = str(ROOT / "benchmarks" / "models" / "llama-3b")
VARIANTS = {"exact_adam": dict(bf16_states=False, liger=False),
            "bf16_states": dict(bf16_states=True, liger=False),
            "liger": dict(bf16_states=True, liger=True)}
#: The GPU run's shape (module docstring) and the CPU rehearsal's.
GPU = dict(model=LLAMA3B, seq_len=1024, micro_batch=8, steps=150, lr=2e-5, cap_gib=24.0)
REHEARSAL = dict(model="tiny-llama", seq_len=128, micro_batch=8, steps=10, lr=3e-3, cap_gib=None)


def run_variant(name: str, out: Path, work: Path, *, rehearsal: bool = False, hang_timeout_s: float = 600.0) -> dict:
    """Train variant ``name`` (:data:`VARIANTS`) and write ``out/<name>.json``: its per-step losses, status,
    timing, peaks, DeepSpeed config and command. Raises ValueError for an unknown variant."""
    if name not in VARIANTS:
        raise ValueError(f"--variant {name!r}: use one of {', '.join(VARIANTS)}")
    from cookbook import launch as L
    from cookbook.dsconfig import build_config
    from cookbook.plan import Plan
    shape, kw = (REHEARSAL if rehearsal else GPU), VARIANTS[name]
    plan = Plan(model=shape["model"], num_gpus=1, gpu_memory_gib=24.0, seq_len=shape["seq_len"],
                micro_batch=shape["micro_batch"], grad_accum=1, precision="bf16", zero_stage=2,
                offload_optimizer="cpu", gradient_checkpointing=True, liger=kw["liger"])
    steps, lr = shape["steps"], shape["lr"]
    cfg = build_config(plan, "accelerate", lr=lr, warmup_steps=max(1, steps // 20), total_steps=steps,
                       bf16_states=kw["bf16_states"])
    t0 = time.time()
    res = L.launch(plan, work / name, config=cfg, max_steps=steps, lr=lr, warmup_steps=max(1, steps // 20),
                   seed=1234, bf16_states=kw["bf16_states"], emulate_gpu_memory_gib=shape["cap_gib"],
                   verify_save="off", final_save=False, force=True, hang_timeout_s=hang_timeout_s, progress=False,
                   random_weights=not rehearsal, tokenizer=None if rehearsal else "shipped", packing=True,
                   liger=kw["liger"])
    s = res.summary or {}
    rec = {"variant": name, **kw, "status": res.status, "message": res.message,
           "duration_s": round(time.time() - t0, 1), "plan": plan.to_dict(), "steps_asked": steps, "lr": lr,
           "schedule": f"linear, {max(1, steps // 20)} warm-up step(s)", "seed": 1234,
           "losses": [m.get("loss") for m in res.metrics or []],
           "step_times_s": [m.get("step_time_s") for m in res.metrics or []],
           "tokens_per_s": s.get("tokens_per_s"), "peak_gpu_allocated_gib": s.get("peak_gpu_allocated_gib"),
           "peak_gpu_reserved_gib": s.get("peak_gpu_reserved_gib"), "host_peak_gib": s.get("host_peak_gib"),
           "attention": (s.get("attention") or {}).get("how"), "rows": s.get("rows"),
           "zero_optimization": cfg["zero_optimization"], "command": res.command, "rehearsal": rehearsal}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(rec, indent=1, default=str) + "\n")
    return rec


def merge(paths: list[Path], *, k: int = 20, machine: Path | None = None,
          commands: list[str] | None = None) -> dict:
    """The variants' records side by side: curves, last-k means, gaps against ``exact_adam`` and where the
    curves part (:func:`benchmarks.quality_cpu.compare`). ``machine``: the device call's ``machine.json``
    (benchmarks/device/setup.sh), kept as the record's machine and versions; ``commands``: ``VARIANT=COMMAND``,
    the device command each record came from. Raises ValueError naming a file that is not a variant record, a
    variant given twice, or a malformed ``--command``."""
    from benchmarks.quality_cpu import compare
    runs, files = {}, {}
    for p in paths:
        try:
            r = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--merge {p}: cannot be read as JSON ({exc})") from None
        if not isinstance(r, dict) or r.get("variant") not in VARIANTS or not isinstance(r.get("losses"), list):
            raise ValueError(f"--merge {p}: not a record of `benchmarks.quality_gpu --variant` (no variant/losses)")
        if r["variant"] in runs:
            raise ValueError(f"--merge {p}: variant {r['variant']} given twice")
        runs[r["variant"]] = r
        files[r["variant"]] = p
    if k < 1:
        raise ValueError(f"--last {k}: the final mean needs at least 1 step (default 20)")
    if "exact_adam" not in runs:
        raise ValueError(f"--merge: no exact_adam record among {', '.join(runs)} — the gaps are measured against it")
    curves = {}
    for n, r in runs.items():
        c = [x for x in r["losses"] if isinstance(x, (int, float))]
        if len(c) < k:
            raise ValueError(f"--merge {files[n]}: {n} has {len(c)} numeric losses, fewer than --last {k} "
                             f"(status {r.get('status')}: {r.get('message')}); lower --last or re-run it")
        curves[n] = c
    tail, gaps = compare(curves, k=k)
    cmds = {}
    for c in commands or []:
        name, sep, cmd = c.partition("=")
        if not sep or name not in runs or not cmd.strip():
            raise ValueError(f"--command {c!r}: write VARIANT=COMMAND with VARIANT one of {', '.join(runs)}")
        cmds[name] = cmd.strip()
    mach = None
    if machine is not None:
        try:
            mach = json.loads(Path(machine).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--machine {machine}: cannot be read as JSON ({exc})") from None
        if not isinstance(mach, dict):
            raise ValueError(f"--machine {machine}: not a machine.json (a JSON object of gpu, versions, ...), "
                             f"got a {type(mach).__name__}; give the device call's machine.json")
    return {"kind": "quality_curves", "machine": mach, "device_commands": cmds, "speed": _speed(runs),
            "files": {n: str(f) for n, f in files.items()},
            "what": "issue 19 item 4 on the GPU: the 3.4B recipe's loss per optimizer step, exact Adam (fp32 states) "
                    "vs bf16 states (vs Liger), same init, rows, order, lr and schedule (benchmarks/quality_gpu.py)",
            "curves": curves, f"last{k}_mean_loss": tail, "last_step_loss": {n: c[-1] for n, c in curves.items()},
            "gaps_vs_exact_adam": gaps,
            "runs": {n: {k2: v for k2, v in r.items() if k2 != "losses"} for n, r in runs.items()},
            "bar": f"issue 19: a loss gap at step 150 of <= 2 % against exact Adam; measured as the mean of the last "
                   f"{k} steps (one step's loss swings with its rows: last_step_loss has the step itself)"}


def _speed(runs: dict) -> dict:
    """Per variant: median s/step after the first step, tokens/s, the floor and the RTX 4090 projection, by the
    model of docs/benchmarks.md section 5 (:func:`benchmarks.report.floor`) with 2026-12-01 call 1's ceilings
    (:func:`benchmarks.levers_report.call1_ceilings`; none were measured in the quality calls). Rehearsal records
    and records without step times get none."""
    import statistics
    from benchmarks.levers_report import N_3B, RAW, call1_ceilings
    from benchmarks.report import floor_and_projection
    ceil, _ = call1_ceilings(json.loads((RAW / "h200_levers_call1_levers.json").read_text()))
    out = {}
    for n, r in runs.items():
        st = [x for x in (r.get("step_times_s") or [])[1:] if isinstance(x, (int, float))]
        if r.get("rehearsal") or not st or not r.get("plan"):
            continue
        step = statistics.median(st)
        f, proj = floor_and_projection({"num_params": N_3B, "plan": r["plan"]}, ceil, step,
                                       "same achieved/floor as measured on the H200 (docs/benchmarks.md section 5)")
        out[n] = {"step_time_s_median": step, "tokens_per_s": f["tokens_per_step"] / step, "floor": f,
                  "projection_rtx4090_tokens_per_s": proj["tokens_per_s"], "projection_assumes": proj["assumes"]}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", default=None, help=f"one of {', '.join(VARIANTS)}")
    p.add_argument("--out", default=None, help="--variant: folder for <variant>.json; --merge: the record file")
    p.add_argument("--work", default="/tmp/cookbook_quality_gpu", help="run folders")
    p.add_argument("--rehearsal", action="store_true", help="tiny-llama, 10 steps: the path on a CPU")
    p.add_argument("--hang-timeout-s", type=float, default=600.0)
    p.add_argument("--merge", nargs="+", default=None, help="variant records to put side by side")
    p.add_argument("--figure", default=None, help="--merge: a PNG of the curves")
    p.add_argument("--last", type=int, default=20, help="--merge: steps in the final mean (default 20)")
    p.add_argument("--machine", default=None, help="--merge: the device call's machine.json (versions)")
    p.add_argument("--command", action="append", default=None, metavar="VARIANT=COMMAND",
                   help="--merge: the device command a variant's record came from (repeatable)")
    a = p.parse_args(argv)
    if bool(a.variant) == bool(a.merge):
        p.error("give --variant NAME (one run) or --merge FILE... (side by side), one of the two")
    if not a.out:
        p.error("--out is needed (a folder for --variant, a JSON file for --merge)")
    out = Path(a.out)
    if a.variant and out.exists() and not out.is_dir():
        p.error(f"--out {out}: a file; --variant writes <variant>.json into a folder")
    if a.merge and (out.is_dir() or not out.parent.is_dir()):
        p.error(f"--out {out}: --merge writes one JSON file; give a file path in an existing folder")
    if a.variant and not a.rehearsal:
        import torch
        if not torch.cuda.is_available():
            p.error(f"--variant {a.variant}: no CUDA GPU here; the 3.4B run needs one (add --rehearsal for the "
                    "CPU path with tiny-llama)")
    try:
        if a.variant:
            rec = run_variant(a.variant, Path(a.out), Path(a.work), rehearsal=a.rehearsal,
                              hang_timeout_s=a.hang_timeout_s)
            print(f"{a.variant}: {rec['status']} — {rec['message']}")
            return 0 if rec["status"] in ("ok", "ok_partial") else 1
        rec = merge([Path(x) for x in a.merge], k=a.last, machine=a.machine and Path(a.machine),
                    commands=a.command)
    except ValueError as exc:
        p.error(str(exc))
    Path(a.out).write_text(json.dumps(rec, indent=1, default=str) + "\n")
    if a.figure:
        from benchmarks.quality_cpu import plot
        plot(rec["curves"], Path(a.figure), "3.4B LLaMA shape, random init, 1 H200 capped at 24 GiB, ZeRO-2 + optimizer offload, "
                                            "packed chats, lr 2e-5")
    print(json.dumps({k: v for k, v in rec.items() if k not in ("curves", "runs")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
