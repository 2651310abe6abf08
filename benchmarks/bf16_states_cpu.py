"""Quality cost of bf16 model states, on the CPU: the same run with fp32 and with bf16 master
weights, gradients and Adam states (DeepSpeed 0.19 ``bf16.bf16_master_weights_and_grads`` +
``bf16.bf16_optimizer_states``), same data, seed and initial weights; loss curves side by side.

    DS_ACCELERATOR=cpu python -m benchmarks.bf16_states_cpu --out data/reference/cpu_bf16_states_loss.json

Both runs use bf16 compute (``precision=bf16``) and ZeRO-2 with the optimizer offloaded to the CPU
(the cookbook's 1 x 24 GB recipe), so the only difference is where the optimizer's precision lives.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def run(out: Path, work: Path, *, model: str = "tiny-llama", steps: int = 150, lr: float = 3e-3,
        world: int = 2) -> dict:
    """Launch the fp32-states and bf16-states runs; return the record written to ``out``."""
    from cookbook.launch import launch
    from cookbook.plan import Plan
    plan = Plan(model=model, num_gpus=world, seq_len=128, micro_batch=4, grad_accum=2, precision="bf16",
                zero_stage=2, offload_optimizer="cpu", gradient_checkpointing=False)
    curves = {}
    runs = {}
    for name, bf16_states in (("fp32_states", False), ("bf16_states", True)):
        t0 = time.time()
        res = launch(plan, work / name, max_steps=steps, lr=lr, seed=1234, bf16_states=bf16_states,
                     verify_save="off", final_save=False, force=True, progress=False)
        if not res.ok:
            raise RuntimeError(f"{name}: {res.status}: {res.message}")
        curves[name] = [m["loss"] for m in res.metrics]
        runs[name] = {"status": res.status, "duration_s": round(time.time() - t0, 1), "command": res.command,
                      "host_peak_gib": (res.summary or {}).get("host_peak_gib")}
    k = 20
    tail = {n: statistics.fmean(c[-k:]) for n, c in curves.items()}
    record = {
        "what": "loss per optimizer step, fp32 vs bf16 model states, same data/seed/initial weights",
        "plan": plan.to_dict(), "steps": steps, "lr": lr, "device": "cpu (DS_ACCELERATOR=cpu)",
        "curves": curves, "runs": runs, f"last{k}_mean_loss": tail,
        "bf16_minus_fp32_last_mean": tail["bf16_states"] - tail["fp32_states"],
        "max_abs_step_diff": max(abs(a - b) for a, b in zip(curves["fp32_states"], curves["bf16_states"])),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="data/reference/cpu_bf16_states_loss.json")
    p.add_argument("--work", default="/tmp/cookbook_bf16_states")
    p.add_argument("--steps", type=int, default=150)
    a = p.parse_args(argv)
    rec = run(Path(a.out), Path(a.work), steps=a.steps)
    print(json.dumps({k: v for k, v in rec.items() if k != "curves"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
