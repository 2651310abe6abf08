"""Turn one device call's raw output into reference records (issue 30, item 5).

A device call (e.g. ``benchmarks/device/call_attention.sh``) leaves ``machine.json`` and ``runs.tgz`` (one
folder per run: ``summary.json``, ``metrics.jsonl``, ``command.sh``, ``rc.json``). This reads them and writes
one record per run — tokens/s (mean of the steps after the first, which holds compilation and JIT), the first
step's seconds, loss, GPU and host memory, the attention used, the exact launch command — with the RTX 4090
projection of :func:`cookbook.answers.project_rtx4090` (the same achieved fraction of the step-time floor)::

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


def run_record(folder: Path, call: str) -> dict:
    """One run folder → its record. A run without ``summary.json`` is recorded with its return code, never "ok"."""
    from cookbook.answers import project_rtx4090
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
               liger="--liger" in (command[0] if command else ""), steps=s["steps"],
               first_step_s=steps[0]["step_time_s"] if steps else None,
               tokens_per_s_after_first=round(statistics.mean(later), 1) if later else None,
               tokens_per_s=s["tokens_per_s"], step_time_s=s["step_time_s"], mfu=s.get("mfu"),
               first_loss=s["first_loss"], last_loss=s["last_loss"],
               peak_gpu_allocated_gib=round(s["peak_gpu_allocated_gib"], 2),
               peak_gpu_reserved_gib=round(s["peak_gpu_reserved_gib"], 2), gpu_memory_cap_gib=s.get("gpu_memory_cap_gib"),
               host_peak_gib=round(s["host_peak_gib"], 1), command=command[0] if command else None)
    proj = project_rtx4090({**rec, "world_size": s["world_size"], "estimate_device": "cuda",
                            "tokens_per_s": rec["tokens_per_s_after_first"] or rec["tokens_per_s"]})
    rec["rtx4090_tokens_per_s"] = round(proj) if proj else None
    return rec


def summarise(call_dir: str | Path, call: str) -> dict:
    """A device call's folder (``machine.json`` + ``runs.tgz``) → ``{"machine": ..., "runs": [...]}``."""
    call_dir = Path(call_dir)
    machine = json.loads((call_dir / "machine.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(call_dir / "runs.tgz") as t:
            t.extractall(tmp, filter="data")
        runs = [run_record(d, call) for d in sorted(Path(tmp).iterdir()) if d.is_dir()]
    gpu = str(machine.get("gpu", "")).split(",")[0] or None
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
