"""Turn one device call's raw output into reference records (issue 30, item 5).

A device call (e.g. ``benchmarks/device/call_attention.sh``) leaves ``machine.json`` and ``runs.tgz`` (one
folder per run: ``summary.json``, ``metrics.jsonl``, ``command.sh``, ``rc.json``). This reads them and writes
one record per run — tokens/s (mean of the steps after the first, which holds compilation and JIT), the first
step's seconds, loss, GPU and host memory, the attention used, the exact launch command — with the RTX 4090
projection of :func:`project_rtx4090` (measured × the speed model's 4090 / H200 ratio for the run's variant)::

    python -m benchmarks.summarise /work/.device/1 --call "attention call 1" --into data/reference/h200_attention.json

Records are keyed by ``call`` + run name; re-summarising a call replaces its records in place (newest wins).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tarfile
import tempfile
from pathlib import Path


def _liger_in(command: str) -> bool:
    """Whether an ``accelerate launch`` line ran Liger: ``--liger on``, or a bare ``--liger`` (before ``--liger
    {auto,on,off}``); ``--liger off`` did not. (A newer summary.json says it: ``liger``.)"""
    words = command.split()
    return any(w == "--liger" and (i + 1 == len(words) or words[i + 1] not in ("off", "auto"))
               for i, w in enumerate(words))


def project_rtx4090(rec: dict, *, packed: bool, cores: int = 16) -> float | None:
    """The RTX 4090 projection of a measured H200 run: measured tokens/s × (the speed model's tokens/s for the
    run's variant on a 4090) / (its tokens/s on the H200 it ran on), both with ``cores`` CPU cores
    (:func:`cookbook.speed.predict`, ``docs/speed.md``). The ratio keeps what the measurement holds that the model
    does not (Liger, the data); the model supplies what differs between the cards (compute, PCIe). None when
    the run has no throughput or its plan cannot be rebuilt."""
    from cookbook.models import ModelNotFoundError
    from cookbook.plan import Plan, PlanError
    from cookbook.speed import Machine, SpeedModelError, gpu_spec, predict
    if not rec.get("tokens_per_s"):
        return None
    attention = "flex" if rec.get("attention") in ("flex", "flex_attention") else "sdpa_masked" if packed else "sdpa"
    try:
        plan = Plan(model=rec["model"], num_gpus=rec["world_size"], gpu_memory_gib=24.0, seq_len=rec["seq_len"],
                    micro_batch=rec["micro_batch"], grad_accum=rec["grad_accum"], zero_stage=rec["zero_stage"],
                    offload_optimizer=rec["offload_optimizer"], offload_param=rec["offload_param"])
        kw = dict(bf16_states=rec.get("states") == "bf16", attention=attention)
        there = predict(plan, Machine(gpu_spec("RTX 4090"), cores), **kw).tokens_per_s
        here = predict(plan, Machine(gpu_spec("H200"), cores), **kw).tokens_per_s
    except (ModelNotFoundError, PlanError, SpeedModelError, OSError, KeyError, TypeError):
        return None
    return float(rec["tokens_per_s"]) * there / here


def run_record(folder: Path, call: str) -> dict:
    """One run folder → its record. A run without ``summary.json`` is recorded with its return code, never "ok"."""
    rc = json.loads((folder / "rc.json").read_text()) if (folder / "rc.json").exists() else {}
    rec = {"call": call, "name": folder.name, "rc": rc.get("rc"), "wall_s": rc.get("wall_s")}
    summary = folder / "summary.json"
    if not summary.exists():
        return {**rec, "status": "no summary (the run did not finish)"}
    s = json.loads(summary.read_text())
    steps = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    later = [r["tokens_per_s"] for r in steps[1:] if r.get("tokens_per_s")]
    command = [ln for ln in (folder / "command.sh").read_text().splitlines() if ln.startswith("accelerate ")]
    rec.update(status=s["status"], world_size=s["world_size"], model=s["model"], num_params=s["num_params"], micro_batch=s["micro_batch"],
               grad_accum=s["grad_accum"], seq_len=s["seq_len"], zero_stage=s["zero_stage"],
               offload_optimizer=s["offload_optimizer"], offload_param=s["offload_param"],
               precision=s["precision"], attention=(s.get("attention") or {}).get("implementation"),
               liger=s["liger"] if "liger" in s else _liger_in(command[0] if command else ""), steps=s["steps"],
               first_step_s=steps[0]["step_time_s"] if steps else None,
               tokens_per_s_after_first=round(statistics.mean(later), 1) if later else None,
               tokens_per_s=s["tokens_per_s"], step_time_s=s["step_time_s"], mfu=s.get("mfu"),
               first_loss=s["first_loss"], last_loss=s["last_loss"],
               peak_gpu_allocated_gib=round(s["peak_gpu_allocated_gib"], 2),
               peak_gpu_reserved_gib=round(s["peak_gpu_reserved_gib"], 2), gpu_memory_cap_gib=s.get("gpu_memory_cap_gib"),
               host_peak_gib=round(s["host_peak_gib"], 1), command=command[0] if command else None)
    rec["states"] = "bf16" if "--bf16-states" in (rec["command"] or "") else "fp32"
    proj = project_rtx4090({**rec, "tokens_per_s": rec["tokens_per_s_after_first"] or rec["tokens_per_s"]},
                           packed="--packing" in (rec["command"] or ""))
    rec["rtx4090_tokens_per_s"] = round(proj) if proj else None
    return rec


def levers_record(r: dict, call: str) -> dict:
    """One record of :mod:`benchmarks.levers`' ``levers.json`` (cookbook runs and the HF Trainer baselines) →
    the same fields as :func:`run_record`. tokens/s there is the median of the steps after the first."""
    plan, v = r.get("plan") or {}, r.get("variant") or {}
    losses = [x for x in (r.get("losses") or []) if x is not None]
    command = r.get("command") or ""
    command = next((ln for ln in command.splitlines() if ln.startswith(("accelerate ", "OMP_", "python"))), command)
    rec = {"call": call, "name": r["name"], "rc": 0 if r.get("status") == "ok" else None, "wall_s": r.get("wall_s"),
           "status": r.get("status"), "runner": "HF Trainer" if v.get("kind") == "trainer" else "cookbook",
           "world_size": plan.get("num_gpus", 1) * plan.get("num_machines", 1), "model": plan.get("model"),
           "micro_batch": plan.get("micro_batch"), "grad_accum": plan.get("grad_accum"), "seq_len": plan.get("seq_len"),
           "zero_stage": plan.get("zero_stage"), "offload_optimizer": plan.get("offload_optimizer"),
           "offload_param": plan.get("offload_param"), "precision": plan.get("precision"),
           "states": "bf16" if v.get("bf16_states") else "fp32", "attention": v.get("attention"),
           "liger": bool(v.get("liger") or v.get("native_liger")), "rows": "one example per row (unpacked)",
           "steps": len(r.get("step_times_s") or []), "tokens_per_s": r.get("tokens_per_s"),
           "step_time_s": r.get("step_time_s"), "first_loss": losses[0] if losses else None,
           "last_loss": losses[-1] if losses else None,
           "peak_gpu_reserved_gib": round(r["peak_gpu_reserved_gib"], 2) if r.get("peak_gpu_reserved_gib") else None,
           "host_peak_gib": round(r["host_peak_gib"], 1) if r.get("host_peak_gib") else None, "command": command}
    proj = project_rtx4090(rec, packed=False)
    rec["rtx4090_tokens_per_s"] = round(proj) if proj else None
    return rec


def summarise(call_dir: str | Path, call: str) -> dict:
    """A device call's folder → ``{"machine": ..., "runs": [...]}``: ``machine.json`` beside ``runs.tgz`` (the
    ``benchmarks/device/call_*.sh`` scripts) or beside ``levers/levers.json`` (:mod:`benchmarks.levers`)."""
    call_dir = Path(call_dir)
    machine = json.loads((call_dir / "machine.json").read_text())
    gpu = str(machine.get("gpu", "")).split(",")[0] or None
    if (call_dir / "levers" / "levers.json").exists():
        lev = json.loads((call_dir / "levers" / "levers.json").read_text())
        return {"machine": machine, "runs": [{**levers_record(r, call), "gpu": gpu} for r in lev["runs"]]}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(call_dir / "runs.tgz") as t:
            t.extractall(tmp, filter="data")
        runs = [run_record(d, call) for d in sorted(Path(tmp).iterdir()) if d.is_dir()]
    return {"machine": machine, "runs": [{**r, "gpu": gpu} for r in runs]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("call_dir", help="the folder a device call's files came back to")
    p.add_argument("--call", required=True, help="a label for the call (records are keyed by it)")
    p.add_argument("--into", required=True, help="the reference file to update")
    p.add_argument("--command", default="", help="the device command that made the call, recorded with it")
    p.add_argument("--what", default="", help="what the file measures (one line, kept at its top)")
    a = p.parse_args(argv)
    new = summarise(a.call_dir, a.call)
    path = Path(a.into)
    ref = json.loads(path.read_text()) if path.exists() else {"what": a.what, "calls": {}, "runs": []}
    ref["what"] = a.what or ref.get("what", "")
    ref["machine"] = new["machine"]  # the newest call's; each call keeps its own under "calls"
    ref["calls"][a.call] = {"machine": new["machine"], "command": a.command}
    ref["runs"] = [r for r in ref["runs"] if r["call"] != a.call] + new["runs"]
    path.write_text(json.dumps(ref, indent=1) + "\n")
    for r in new["runs"]:
        print(f"{r['name']:22} {r.get('status')}: {r.get('tokens_per_s_after_first')} tokens/s "
              f"(4090 projection {r.get('rtx4090_tokens_per_s')}), loss {r.get('first_loss')} -> {r.get('last_loss')}, "
              f"GPU reserved {r.get('peak_gpu_reserved_gib')} GiB, first step {r.get('first_step_s')} s")


if __name__ == "__main__":
    main()
