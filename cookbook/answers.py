"""The answers the run-all report leads with: for each target machine, the recipe to run, whether it fits
the GPU and the host, and the throughput measured here with its RTX 4090 projection.

* :data:`TARGETS` — the two targets and the notebook that answers each (05: 8 × RTX 4090 + Qwen-14B;
  06: 1 × RTX 4090 + LLaMA-7B).
* :func:`answers_frame` — one row per target from the notebooks' ``results.json``.
* :func:`project_rtx4090` — a GPU run's tokens/s projected to RTX 4090s with the floor model of the GPU
  benchmark (``benchmarks/report.py``): the run's achieved fraction of its serial floor (compute + PCIe +
  CPU Adam) on the machine it ran on, applied to the RTX 4090's floor.
* :func:`collapse_repeated` — a column with the same text in every row becomes one line above the table.

Units: tokens/s over the whole world (all ranks); GiB = 2**30 bytes; GB/s = 10**9 bytes/s.
"""
from __future__ import annotations

from typing import Mapping

#: target -> the notebook whose results answer it.
TARGETS = (("8 × RTX 4090 + Qwen-14B", "05_final_8x4090"), ("1 × RTX 4090 + LLaMA-7B", "06_final_1x4090"))

#: RTX 4090 projection model (stated, not measured; the same as ``benchmarks/report.py``'s): dense bf16
#: tensor rate with fp32 accumulate (NVIDIA Ada whitepaper, table 2: 165.2 TFLOP/s); pinned PCIe 4.0 x16
#: ~24 GB/s each way (shared/notes/device.md); a 16-core desktop CPU's DeepSpeedCPUAdam at 1.5e9 params/s.
RTX4090_MODEL = {"bf16_matmul_tflops": 165.2, "h2d_gb_s": 24.0, "d2h_gb_s": 24.0, "cpu_adam_params_per_s": 1.5e9}


def step_floor(num_params: int, plan: Mapping, ceilings: Mapping) -> float:
    """Serial floor of one optimizer step in seconds (``benchmarks/report.py``'s model): compute
    ``8·N·T/g`` FLOPs per GPU at the bf16 matmul rate (6N forward+backward, Kaplan et al. 2020, plus 2N
    recomputation), plus the PCIe bytes of the offload variant at the pinned bandwidths, plus CPU Adam over
    ``N/g`` parameters when the optimizer is offloaded.

    Args:
        num_params: N. plan: ``num_gpus``, ``micro_batch``, ``grad_accum``, ``seq_len``, ``zero_stage``,
            ``offload_optimizer``, ``offload_param``. ceilings: ``bf16_matmul_tflops``, ``h2d_gb_s``,
            ``d2h_gb_s``, ``cpu_adam_params_per_s``.
    """
    n, g, ga = num_params, max(1, int(plan["num_gpus"])), int(plan["grad_accum"])
    tokens = int(plan["micro_batch"]) * ga * g * int(plan["seq_len"])
    t_compute = 8 * n * tokens / g / (ceilings["bf16_matmul_tflops"] * 1e12)
    if plan["zero_stage"] == 3 and plan["offload_param"] != "none":
        up, down = 4 * n / g * ga, 2 * n / g * ga
    elif plan["zero_stage"] == 3 and plan["offload_optimizer"] != "none":
        up, down = 2 * n / g, 2 * n / g * ga
    elif plan["offload_optimizer"] != "none":
        up, down = 2 * n / g, 2 * n / g
    else:
        up = down = 0.0
    t_pcie = up / (ceilings["h2d_gb_s"] * 1e9) + down / (ceilings["d2h_gb_s"] * 1e9)
    t_adam = n / g / ceilings["cpu_adam_params_per_s"] if plan["offload_optimizer"] != "none" else 0.0
    return t_compute + t_pcie + t_adam


def project_rtx4090(run: Mapping, ceilings: Mapping | None = None) -> float | None:
    """Tokens/s a GPU run would reach on RTX 4090s: measured tokens/s × (floor here / floor on a 4090),
    i.e. the same achieved fraction of the floor (:func:`step_floor`). ``ceilings`` are the measured ones of
    the machine the run ran on (default: the H200 reference's, ``data/reference``). None for a CPU run, a run
    without throughput, or without ceilings."""
    if not run or not run.get("tokens_per_s") or run.get("estimate_device") != "cuda":
        return None
    if ceilings is None:
        from .reference import reference_ceilings
        ceilings = reference_ceilings()
    if not ceilings:
        return None
    plan = {k: run.get(k) for k in ("num_gpus", "micro_batch", "grad_accum", "seq_len", "zero_stage",
                                      "offload_optimizer", "offload_param")}
    plan["num_gpus"] = run.get("world_size")
    if None in plan.values() or not run.get("num_params"):
        return None
    here = step_floor(int(run["num_params"]), plan, ceilings)
    there = step_floor(int(run["num_params"]), plan, RTX4090_MODEL)
    return float(run["tokens_per_s"]) * here / there


def _central(res: Mapping | None) -> Mapping:
    if not res:
        return {}
    c = res.get("central") or {}
    return (res.get("runs") or {}).get(c.get("run")) or {}


def _yes(v) -> str:
    return "unknown" if v is None else ("yes" if v else "no")


#: the target model of each answering notebook (its reference projection must be of this model's size).
TARGET_MODELS = {"05_final_8x4090": "qwen-14b", "06_final_1x4090": "llama-7b"}

#: a GPU reference run stands in for a target's model only within this relative parameter-count gap
#: (|ln(N_ref / N_target)| ≤ 0.1, i.e. about ±10 %): a 3 B run's tokens/s is not a 14 B model's.
SAME_MODEL_LOG_GAP = 0.1


def answers_frame(results: Mapping[str, Mapping | None]):
    """One row per target (:data:`TARGETS`): ``target``, ``recipe``, ``fits GPU``, ``fits host``,
    ``measured here`` (the central run's status, tokens/s and hardware), ``RTX 4090 projection tokens/s``
    and ``note`` (what the numbers are: a GPU run, or the CPU rehearsal with the reference's projection).

    A target whose notebook is not among ``results`` (not run in this run-all) says ``not run here`` and
    names the notebook that produces it; one whose notebook recorded nothing says so. Neither borrows a
    number. The CPU rehearsal's row shows the GPU reference run's projection (:mod:`cookbook.reference`)
    only when that run's model has the target model's size (:data:`SAME_MODEL_LOG_GAP`).

    Args:
        results: notebook name -> its ``results.json`` (None when it ran but wrote none); a notebook
            absent from the mapping was not run.
    """
    import math
    import pandas as pd
    from .reference import reference_projection
    rows = []
    for target, name in TARGETS:
        if name not in results or not results[name]:
            ran = name in results
            why = (f"no results recorded: {name} stopped before its last cell (see its executed notebook)" if ran
                   else f"not run here: notebooks/{name}.ipynb produces it (cookbook run-all --only {name[:2]})")
            rows.append({"target": target, "recipe": "—", "fits GPU": "unknown", "fits host": "unknown",
                         "measured here": "no results recorded" if ran else "not run here",
                         "RTX 4090 projection tokens/s": float("nan"), "note": why, "notebook": name})
            continue
        res = results[name]
        run = _central(res)
        if name.startswith("05"):
            te = res.get("target_estimate") or {}
            recipe, fits_gpu, fits_host = te.get("verdict"), te.get("fits_gpu"), te.get("fits_host")
        else:
            d = res.get("desktop_choice") or {}
            recipe = (f"{d.get('label')} with {d.get('kind')} (64 GiB RAM: {d.get('reason')})" if d.get("kind")
                      else res.get("verdict"))
            fits_gpu, fits_host = (True, True) if d.get("kind") else (None, d.get("fits"))
        rehearsal = bool(res.get("rehearsal"))
        tps = run.get("tokens_per_s")
        label = (res.get("central") or {}).get("run")
        world = run.get("world_size")
        what = ", ".join(str(x) for x in (label, run.get("model")) if x)
        measured = (f"{run.get('status')}: {tps:,.0f} tokens/s"
                    + (f" ({world} rank{'s' if world != 1 else ''})" if world else "")
                    + (f" — {what}" if what else "") + f" on {run.get('hardware')}" if tps else
                    f"{run.get('status') or 'no run recorded'}" + (f" on {run.get('hardware')}" if run.get("hardware") else ""))
        recipe_label = ((res.get("desktop_choice") or {}).get("label") if not name.startswith("05") else
                        (res.get("target_estimate") or {}).get("label"))
        proj = project_rtx4090(run)
        if rehearsal or proj is None:
            from .models import model_spec
            proj = None
            model = TARGET_MODELS[name]
            n_target = model_spec(model).num_params
            ref = reference_projection(name, n_target)
            note = ("CPU rehearsal: tiny model, not a 4090 number" if rehearsal else "no projection for this run")
            if ref and ref.get("num_params") and abs(math.log(ref["num_params"] / n_target)) <= SAME_MODEL_LOG_GAP:
                proj = ref["tokens_per_s"]
                note += (f"; projection from the H200 reference run {ref['name']} ({ref['label']}, "
                         f"{(ref['num_params'] or 0) / 1e9:.1f} B parameters)")
            elif ref:
                note += (f"; no GPU reference run of {model}'s size ({n_target / 1e9:.1f} B parameters): the "
                         f"closest, {ref['name']} ({(ref['num_params'] or 0) / 1e9:.1f} B), is another model — "
                         f"run {name} on GPUs for a projection")
        else:
            note = ("GPU run; projection per GPU: the same fraction of the step-time floor on a 4090, for one rank "
                    "(no traffic between GPUs counted) (benchmarks/report.py)")
            if label and recipe_label and label != recipe_label:
                note += f"; measured: the variant this machine runs ({label}), not the recipe ({recipe_label})"
        rows.append({"target": target, "recipe": recipe or "—", "fits GPU": _yes(fits_gpu),
                     "fits host": _yes(fits_host), "measured here": measured,
                     "RTX 4090 projection tokens/s": float("nan") if proj is None else round(proj, 0), "note": note,
                     "notebook": name})
    return pd.DataFrame(rows)


def collapse_repeated(frame, *, min_rows: int = 3, min_chars: int = 25):
    """A table without the text columns that say the same thing on every row, and those things as lines.

    Args:
        frame: a pandas DataFrame. min_rows: only tables with at least this many rows. min_chars: only
            text at least this long (short repeated values such as ``ok`` stay in the table).

    Returns:
        ``(frame, lines)``: ``lines`` as ``"column: value"``.
    """
    if len(frame) < min_rows:
        return frame, []
    lines, drop = [], []
    for col in frame.columns:
        values = list(frame[col])
        first = values[0]
        if isinstance(first, str) and len(first) >= min_chars and all(v == first for v in values):
            lines.append(f"{col} (every row): {first}")
            drop.append(col)
    return frame.drop(columns=drop), lines


__all__ = ["RTX4090_MODEL", "SAME_MODEL_LOG_GAP", "TARGETS", "TARGET_MODELS", "answers_frame", "collapse_repeated", "project_rtx4090", "step_floor"]
