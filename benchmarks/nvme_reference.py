"""Issue 18: the ``gpu_bench --suite nvme`` results turned into a reference record, and LLaMA-7B's host RAM with NVMe
offload extrapolated from the measured runs.

    python -m benchmarks.nvme_reference --from-results CALL1/nvme/results.json [CALL2/nvme/results.json ...] \\
        --write data/reference/h200_nvme_runs_DATE.json [--machine OUT/nvme/machine.json] \\
        [--fit-also data/reference/h200_nvme_runs_EARLIER.json ...]

The written file (``{"kind": "nvme_runs", "runs": [...], "bandwidth": {...}, "host_fit": {...}}``) is what
:func:`cookbook.nvme.reference_runs` reads into one row per measured run (notebook 06's "NVMe offload measured on
GPUs" table). Error % = (estimate − measured) / measured × 100, as in ``benchmarks/calibration.py``.

Host-RAM extrapolation (:func:`host_fit`): the cookbook's estimate E(plan) of the host peak (``cookbook.memory.
estimate``, NVMe buffers counted term by term from DeepSpeed's source by ``cookbook.nvme.estimate_nvme``) carries
the parts that do not grow linearly with the parameter count (optimizer swap buffers saturate at ``sub_group_size``,
pinned buffers round up to powers of two); the measured peaks' shortfall or excess over it is fitted as fixed + per
parameter, ``measured − E = a + b·N`` (least squares; ``b = 0`` with one model size), and LLaMA-7B's host need is
``E(7B) + a + b·N(7B)``. The error bar is the range of that and of the estimate scaled by each run's
measured/estimated ratio, ``E(7B) × measured_i / E_i``. A plain straight line ``measured = c + k·N`` through the
points is reported beside it but kept out of the error bar (it carries the saturating swap buffers on to 7B).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

GIB = 2 ** 30
TARGET_HOST_GIB = 64.0  # article 001's desktop (notebook 06's TARGET_HOST_MEMORY_GIB)
#: LLaMA-7B's run for the extrapolation: notebook 06's shape (one 24 GiB GPU, micro batch 2 × accumulation 8 ×
#: seq 1024, bf16, ZeRO-3, optimizer and parameters on NVMe, fp32 states, the cookbook's config, default aio).
TARGET = {"model": "llama-7b", "micro_batch": 2, "grad_accum": 8, "seq_len": 1024}


def _get(d, *keys):
    for k in keys:
        d = (d or {}).get(k) if isinstance(d, dict) else None
    return d


def run_row(rec: dict) -> dict:
    """One tidy row of a suite record (a rung with an ``nvme`` block)."""
    nv = rec.get("nvme") or {}
    rung = rec.get("rung") or {}
    bw = nv.get("bandwidth") or {}

    def gib(x):
        return round(x / GIB, 3) if isinstance(x, (int, float)) else None
    metrics = rec.get("metrics") or []
    return {
        "kind": "nvme_run", "name": rec.get("name"), "model": Path(str(rung.get("model") or "")).name,
        "params": rec.get("num_params"), "aio": nv.get("aio_setting") or rung.get("aio"), "aio_block": nv.get("aio"),
        "offload_param": nv.get("offload_param"), "status": rec.get("status"), "message": rec.get("message"),
        "micro_batch": rung.get("micro_batch"), "grad_accum": rung.get("grad_accum"), "seq_len": rung.get("seq_len"),
        "steps": len(metrics), "step_times_s": [m.get("step_time_s") for m in metrics],
        "s_per_step": nv.get("s_per_step", rec.get("step_time_s")), "tokens_per_s": nv.get("tokens_per_s", rec.get("tokens_per_s")),
        "host_peak_gib": nv.get("host_peak_gib", rec.get("host_peak_gib")), "host_estimate_gib": nv.get("host_estimate_gib"),
        "host_error_pct": nv.get("host_error_pct"),
        **_estimate_now(nv.get("host_estimate_gib"), _get(rec, "estimate", "host_gib", "runtime"),
                        nv.get("host_peak_gib", rec.get("host_peak_gib"))),
        "disk_gib": gib(nv.get("disk_bytes_measured")), "disk_estimate_gib": gib(nv.get("disk_bytes_estimate")),
        "disk_error_pct": nv.get("disk_error_pct"),
        "read_gb_per_step": nv.get("read_gb_per_step_measured"),
        "read_gb_per_step_estimate": (nv.get("read_bytes_per_step_estimate") or 0) / 1e9 or None,
        "write_gb_per_step": nv.get("write_gb_per_step_measured"),
        "write_gb_per_step_estimate": (nv.get("write_bytes_per_step_estimate") or 0) / 1e9 or None,
        "floor_serial_s": nv.get("floor_serial_s"), "achieved_over_floor": nv.get("achieved_over_floor"),
        "bandwidth_read_gb_s": bw.get("read_gb_s"), "bandwidth_write_gb_s": bw.get("write_gb_s"),
        "peak_gpu_allocated_gib": rec.get("peak_gpu_allocated_gib"), "peak_gpu_reserved_gib": rec.get("peak_gpu_reserved_gib"),
    }


def bandwidth_from_results(results: list[dict]) -> dict | None:
    """The disk's bandwidth as this call's ``nvme-tune`` measured it: DeepSpeed's default aio and the best."""
    rec = next((r for r in results if r.get("group") == "nvme_tune"), None)
    if rec is None:
        return None
    t = rec.get("tune") or {}
    m = t.get("measured") or {}
    return {"status": rec.get("status"), "message": rec.get("message"), "default": m.get("deepspeed_default"),
            "best": m.get("best"), "best_aio": t.get("aio"), "best_offload_param": t.get("offload_param"),
            "speedup_vs_default": m.get("speedup_vs_default"), "read_share": rec.get("read_share"),
            "io_size_bytes": t.get("io_size_bytes"), "loops": t.get("loops"), "stopped_early": t.get("stopped_early"),
            "settings": t.get("settings"), "buffers": t.get("buffers"), "method": t.get("method"), "units": t.get("units")}


def _estimate_now(at_run, runtime_at_run, measured) -> dict:
    """The run's host estimate with today's per-rank runtime term (one GPU rank with NVMe offload:
    :func:`cookbook.memory.host_runtime_gib`) in place
    of the one the run's estimate had, so a fit compares every run and the target on one estimator:
    ``host_estimate_now_gib`` and ``host_error_now_pct`` (empty when the run recorded neither)."""
    from cookbook import memory
    if not isinstance(at_run, (int, float)) or not isinstance(runtime_at_run, (int, float)):
        return {}
    est = at_run - runtime_at_run + memory.host_runtime_gib(cuda=True, nvme=True)
    return {"host_estimate_now_gib": round(est, 3),
            "host_error_now_pct": round(100 * (est - measured) / measured, 1) if measured else None}


def target_estimate_gib(target: dict = TARGET) -> float:
    """The cookbook's host-peak estimate (GiB) for LLaMA-7B's NVMe run of ``target`` (module docstring)."""
    from cookbook.dsconfig import build_config
    from cookbook.memory import estimate
    from cookbook.plan import Plan
    plan = Plan(model=target["model"], num_gpus=1, gpu_memory_gib=24.0, seq_len=target["seq_len"],
                micro_batch=target["micro_batch"], grad_accum=target["grad_accum"], precision="bf16", zero_stage=3,
                offload_optimizer="nvme", offload_param="nvme", gradient_checkpointing=True, nvme_path="/nvme")
    cfg = build_config(plan, "accelerate", lr=2e-5, warmup_steps=1, total_steps=10)
    return float(estimate(plan, device="cuda", ds_config=cfg).host_gib["total"])


def _line(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def host_fit(runs: list[dict], *, target_params: int | None = None, target_estimate: float | None = None,
             target_gib: float = TARGET_HOST_GIB) -> dict:
    """LLaMA-7B's host need with NVMe offload, extrapolated from runs with a measured host peak (module docstring).

    Args:
        runs: rows of :func:`run_row` (status ok, ``params``, ``host_peak_gib``, ``host_estimate_gib``).
        target_params, target_estimate: N and E(GiB) of the target (default LLaMA-7B, :data:`TARGET`).
        target_gib: the host RAM to compare with (64 GiB).

    Returns:
        ``{"status", "model", "points", "central_gib", "low_gib", "high_gib", "fixed_gib", "per_billion_gib",
        "predictions", "verdict", ...}``; status ``"no_points"`` without a usable run.
    """
    pts = [r for r in runs if r.get("status") == "ok" and r.get("params") and r.get("host_peak_gib")
           and r.get("host_estimate_gib")]
    out = {"model": "measured − E = a + b·N (E: cookbook.memory.estimate host peak of each run's plan; least "
                    "squares over the runs); error bar: range of that and E(7B) × each run's measured/E; with E as the run "
                    "had it too (ratio_as_run) only while no run is held out from cookbook.memory.NVME_HOST_RUNTIME_GIB's "
                    "fit (held_out_runs: estimated with the term already in)", "target": dict(TARGET), "target_gib": target_gib,
           "points": [{k: r.get(k) for k in ("name", "params", "aio", "host_peak_gib", "host_estimate_gib",
                                              "host_estimate_now_gib", "source")} for r in pts]}
    if not pts:
        return dict(out, status="no_points", verdict="no measured NVMe run with a host peak: nothing to extrapolate")
    if target_params is None:
        from cookbook.models import model_spec
        target_params = model_spec(TARGET["model"]).num_params
    if target_estimate is None:
        target_estimate = target_estimate_gib()
    xs = [r["params"] / 1e9 for r in pts]
    meas = [r["host_peak_gib"] for r in pts]
    # the target's estimate is today's: each run's estimate with today's runtime term where it recorded it
    est = [r.get("host_estimate_now_gib") or r["host_estimate_gib"] for r in pts]
    n7 = target_params / 1e9
    a, b = _line(xs, [m - e for m, e in zip(meas, est)])
    central = target_estimate + a + b * n7
    preds = {"residual_fit": central}
    names = [r["name"] for r in pts]
    for r, m, e in zip(pts, meas, est):
        label = r["name"] if names.count(r["name"]) == 1 else f"{r['name']} ({Path(str(r.get('source') or '?')).stem})"
        preds[f"ratio:{label}"] = target_estimate * m / e
        if r.get("host_estimate_now_gib") and r.get("host_estimate_gib") and \
                abs(r["host_estimate_now_gib"] - r["host_estimate_gib"]) > 0.01:
            # the estimate as the run had it, before today's runtime term (fitted on runs like these): the band
            # keeps what the ratios said before it (not a held-out check)
            preds[f"ratio_as_run:{label}"] = target_estimate * m / r["host_estimate_gib"]
    sizes = len(set(xs))
    plain = None
    if sizes >= 2:
        c, k = _line(xs, meas)
        plain = {"fixed_gib": round(c, 3), "per_billion_gib": round(k, 3), "gib_7b": round(c + k * n7, 2),
                 "why_not_in_the_error_bar": "not a model of DeepSpeed's buffers: the optimizer swap buffers grow "
                 "with the largest sub-group only up to sub_group_size (1e9 elements), so a line through models below "
                 "and above that size carries the growth below it on to 7B"}
    # held out: runs whose estimate already carried today's runtime term (made after it was fitted). With any,
    # the band is the held-out check's; the ratios of the estimate as earlier runs had it are kept beside it.
    held_out = [r["name"] for r in pts if r.get("host_estimate_now_gib") and r.get("host_estimate_gib")
                and abs(r["host_estimate_now_gib"] - r["host_estimate_gib"]) <= 0.01]
    before = {k: v for k, v in preds.items() if k.startswith("ratio_as_run:")}
    band = {k: v for k, v in preds.items() if not (held_out and k in before)}
    lo, hi = min(band.values()), max(band.values())
    verdict = ("fits" if hi <= target_gib else "does not fit" if lo > target_gib else "uncertain: the range straddles")
    return dict(out, status="ok", target_params=target_params, target_estimate_gib=round(target_estimate, 2),
                fixed_gib=round(a, 3), per_billion_gib=round(b, 3), model_sizes=sizes,
                predictions={k: round(v, 2) for k, v in preds.items()}, plain_line=plain,
                held_out_runs=held_out, band_from=sorted(band), central_gib=round(central, 2),
                low_gib=round(lo, 2), high_gib=round(hi, 2),
                verdict=f"LLaMA-7B with NVMe offload needs ~{central:.1f} GiB of host RAM ({lo:.1f}–{hi:.1f}): "
                        f"{verdict} {target_gib:g} GiB" + ("" if sizes >= 2 else " (one model size measured: b = 0)"))


def aio_comparison(runs: list[dict]) -> list[dict]:
    """Default vs tuned aio at the model level, only where one call (one ``source``) ran both for one model:
    ``{"model", "source", "default_s_per_step", "tuned_s_per_step", "speedup", "default_step_times_s",
    "tuned_step_times_s", "spread_pct"}``; ``speedup`` = default s/step ÷ tuned s/step (> 1: tuned faster),
    ``spread_pct`` = the largest (max − min) / median of the later steps within either run, so a speedup
    smaller than it is not told apart from the step-to-step noise."""
    out = []
    for src in dict.fromkeys(r.get("source") for r in runs):
        ok = [r for r in runs if r.get("source") == src and r.get("status") == "ok" and r.get("s_per_step")]
        for model in dict.fromkeys(r["model"] for r in ok):
            d = next((r for r in ok if r["model"] == model and r.get("aio") == "default"), None)
            t = next((r for r in ok if r["model"] == model and r.get("aio") == "tuned"), None)
            if not (d and t):
                continue

            def spread(r):
                later = [x for x in (r.get("step_times_s") or [])[1:] if isinstance(x, (int, float))]
                return 100 * (max(later) - min(later)) / r["s_per_step"] if len(later) >= 2 else None
            sp = [x for x in (spread(d), spread(t)) if x is not None]
            out.append({"model": model, "source": src, "default_s_per_step": d["s_per_step"],
                        "tuned_s_per_step": t["s_per_step"], "speedup": round(d["s_per_step"] / t["s_per_step"], 3),
                        "default_step_times_s": d.get("step_times_s"), "tuned_step_times_s": t.get("step_times_s"),
                        "spread_pct": round(max(sp), 1) if sp else None, "tuned_aio": t.get("aio_block")})
    return out


def convert(data: dict | list, *, machine: dict | None = None, date: str | None = None, source: str = "",
            fit_also: list[dict] | None = None) -> dict:
    """``gpu_bench --suite nvme`` results.json (parsed; a list of them for several calls, with ``source`` a list
    of their paths) -> the reference record (module docstring). ``fit_also``: runs rows of earlier reference
    records, added to the host-RAM extrapolation's points only (not to ``runs``)."""
    calls = data if isinstance(data, list) else [data]
    sources = source if isinstance(source, list) else [source] * len(calls)
    runs, by_call = [], []
    for d, src in zip(calls, sources):
        results = d.get("results") or []
        rows = [dict(run_row(r), source=src) for r in results
                if isinstance(r.get("nvme"), dict) or (r.get("rung") or {}).get("aio")]
        runs += rows
        by_call.append({"source": src, "bandwidth": bandwidth_from_results(results),
                        "runs": [r["name"] for r in rows]})
    seen = {(r.get("name"), r.get("source")) for r in runs}
    extra = [r for r in (fit_also or []) if (r.get("name"), r.get("source")) not in seen]
    return {
        "kind": "nvme_runs",
        "what": "issue 18 item 3: ZeRO-3 with optimizer and parameters on NVMe (fp32 states), DeepSpeed's default aio "
                "vs this call's `cookbook nvme-tune`, packed shipped chats, one H200 capped at 24 GiB "
                "(benchmarks/gpu_bench.py --suite nvme)",
        "date": date or time.strftime("%Y-%m-%d", time.localtime(calls[0].get("suite_started") or time.time())),
        "source": sources[0] if len(sources) == 1 else sources, "on_gpu": calls[0].get("on_gpu"), "machine": machine,
        "bandwidth": by_call[0]["bandwidth"], "calls": by_call, "runs": runs,
        "aio_comparison": aio_comparison(runs),
        "host_fit": host_fit(runs + extra),
        "units": "GiB = 2^30 bytes; GB = 1e9 bytes; error % = (estimate − measured) / measured × 100",
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from-results", required=True, nargs="+",
                   help="results.json of `gpu_bench --suite nvme` (several: one per device call, in order)")
    p.add_argument("--write", default=None, help="write the record here (default: print it)")
    p.add_argument("--machine", default=None, help="machine.json of the device call (default: beside the first results.json)")
    p.add_argument("--date", default=None, help="date of the measurement (default: the first suite's start)")
    p.add_argument("--fit-also", nargs="*", default=[],
                   help="earlier reference records (data/reference/h200_nvme_runs_*.json) whose runs join the 7B "
                        "host extrapolation's points (not this record's runs)")
    a = p.parse_args(argv)

    def read(flag: str, path: Path):
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            p.error(f"{flag} {path}: cannot be read as JSON ({exc})")
    calls = []
    if len(set(map(str, a.from_results))) != len(a.from_results):
        p.error(f"--from-results {' '.join(a.from_results)}: a file is given twice (its runs would count twice)")
    for src in map(Path, a.from_results):
        data = read("--from-results", src)
        if not (isinstance(data, dict) and isinstance(data.get("results"), list)
                and all(isinstance(r, dict) for r in data["results"])):
            hint = (" — it is a reference record: pass it to --fit-also" if isinstance(data, dict)
                    and data.get("kind") == "nvme_runs" else "")
            p.error(f"--from-results {src}: not a `gpu_bench --suite nvme` results.json (needs a 'results' list of "
                    f"records){hint}")
        if not any(isinstance(r.get("nvme"), dict) or (r.get("rung") or {}).get("aio") for r in data["results"]):
            p.error(f"--from-results {src}: no NVMe rung in its results (names: "
                    f"{', '.join(str(r.get('name')) for r in data['results']) or 'none'}); give the results.json "
                    "of a `gpu_bench --suite nvme` call")
        calls.append(data)
    extra = []
    for f in map(Path, a.fit_also):
        old = read("--fit-also", f)
        if not isinstance(old, dict) or not isinstance(old.get("runs"), list):
            p.error(f"--fit-also {f}: not an NVMe runs record (no 'runs' list); pass a file this script wrote")
        extra += [dict(r, source=r.get("source") or str(f)) for r in old["runs"] if isinstance(r, dict)]
    first = Path(a.from_results[0])
    mpath = Path(a.machine) if a.machine else first.with_name("machine.json")
    if a.machine and not mpath.is_file():
        p.error(f"--machine {mpath}: not found (the device call's machine.json; leave the flag out to read the one "
                "beside the first results.json)")
    machine = read("--machine", mpath) if mpath.is_file() else None
    if a.write and not Path(a.write).parent.is_dir():
        p.error(f"--write {a.write}: the folder {Path(a.write).parent} does not exist; create it or pick another path")
    rec = convert(calls, machine=machine, date=a.date, source=list(a.from_results), fit_also=extra)
    text = json.dumps(rec, indent=1, default=str) + "\n"
    if a.write:
        Path(a.write).write_text(text)
    else:
        sys.stdout.write(text)
    from cookbook.nvme import reference_runs
    import pandas as pd
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(reference_runs(Path(a.write).parent, Path(a.write).name) if a.write else "", file=sys.stderr)
    for c in rec["aio_comparison"]:
        print(f"{c['model']}: default {c['default_s_per_step']:.2f} s/step, tuned {c['tuned_s_per_step']:.2f} "
              f"(x{c['speedup']:.3f}; later steps spread up to {c['spread_pct']} %)", file=sys.stderr)
    print(rec["host_fit"].get("verdict"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
