"""The answers the run-all report leads with: for each target machine, the recipe to run, whether it fits
the GPU and the host, and the throughput measured here with its RTX 4090 projection.

* :data:`TARGETS` — the two targets and the notebook that answers each (05: 8 × RTX 4090 + Qwen-14B;
  06: 1 × RTX 4090 + LLaMA-7B).
* :func:`answers_frame` — one row per target from the notebooks' ``results.json``; :func:`answers_table` the
  same with short cells and the long notes apart, numbered (what the report shows), and no CPU rehearsal number.
* :data:`RUN_THIS` — per target, the command to run (README's "What to run") and where its evidence is.
* :func:`project_rtx4090` — a GPU run's tokens/s projected to RTX 4090s with the floor model of the GPU
  benchmark (``benchmarks/report.py``): the run's achieved fraction of its serial floor (compute + PCIe +
  CPU Adam) on the machine it ran on, applied to the RTX 4090's floor.
* :func:`collapse_repeated` — a column with the same text in every row becomes one line above the table.
* :func:`host_ram_note` — the 8 × RTX 4090 recipe's host-RAM verdict on the RAM it assumes and on notebook 00's
  recorded 8 × RTX 4090 box (:data:`RECORDED_8X4090_FACTS`), computed with :mod:`cookbook.memory`.
* :func:`nvme_measured_note` — what NVMe offload (the 1 × RTX 4090 recipe) has measured, for which model.
* :func:`batch_shape_note` — a GPU reference run of the target model beside a run or recipe of another batch
  shape: why their tokens/s differ (parameter offload moves the weights once per micro batch).

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


def project_rtx4090(run: Mapping, ceilings: Mapping | None = None, *, cpu_cores: int = 16) -> float | None:
    """Tokens/s a GPU run's variant would reach on RTX 4090s.

    Without ``ceilings``: the speed model's prediction (:func:`cookbook.speed.predict`) for the run's own plan
    (model, world size, batch shape, ZeRO stage, offload, states) on RTX 4090s with ``cpu_cores`` per machine —
    the same model every option of ``cookbook estimate`` gets, with its ZeRO-3 collectives through host memory.
    With ``ceilings`` (the measured ones of the machine the run ran on): the older floor ratio, measured tokens/s ×
    (floor there / floor on a 4090) of :func:`step_floor`, kept for the benchmark records that were written with it.
    None for a CPU run, a run without throughput, or one whose plan is incomplete."""
    if not run or not run.get("tokens_per_s") or run.get("estimate_device") != "cuda":
        return None
    plan = {k: run.get(k) for k in ("num_gpus", "micro_batch", "grad_accum", "seq_len", "zero_stage",
                                      "offload_optimizer", "offload_param")}
    plan["num_gpus"] = run.get("world_size")
    if None in plan.values() or not run.get("num_params"):
        return None
    if ceilings is None:
        if not run.get("model"):
            return None
        from .models import ModelNotFoundError
        from .plan import Plan, PlanError
        from .speed import Machine, SpeedModelError, gpu_spec, predict
        try:
            p = Plan(model=run["model"], **plan, gpu_memory_gib=24.0)
            if "nvme" in (p.offload_optimizer, p.offload_param):
                from .memory import estimate
                p = estimate(p, bf16_states=bool(run.get("bf16_states")))
            return predict(p, Machine(gpu_spec("RTX 4090"), cpu_cores),
                           bf16_states=bool(run.get("bf16_states"))).tokens_per_s
        except (ModelNotFoundError, PlanError, SpeedModelError, OSError):
            return None
    here = step_floor(int(run["num_params"]), plan, ceilings)
    there = step_floor(int(run["num_params"]), plan, RTX4090_MODEL)
    return float(run["tokens_per_s"]) * here / there


#: Notebook 00's recorded 8 × RTX 4090 machine (``cookbook env --dump-facts``, in
#: :data:`cookbook.reference.FACTS_DIR`): the second host-RAM verdict of the 8 × RTX 4090 row.
RECORDED_8X4090_FACTS = "host256_8xrtx4090.json"


def host_ram_note(target_estimate: Mapping, facts_file: str = RECORDED_8X4090_FACTS) -> tuple[str, str] | None:
    """The host-RAM verdicts of the 8 × RTX 4090 recipe: on the RAM its estimate assumes (notebook 05's
    ``TARGET_HOST_MEMORY_GIB``) and on the recorded machine ``facts_file`` (its ``host_memory_gib``), both by
    :func:`cookbook.memory.estimate` on the estimate's own plan and states; for a machine it does not fit, what
    :func:`cookbook.memory.decide` recommends there.

    Returns:
        ``(fits_host, sentence)``: ``fits_host`` like ``"yes at 512 GiB; no at 256 GiB"``; None when the estimate
        has no plan or the facts file (or its host RAM) is missing.
    """
    from .memory import decide, estimate
    from .plan import Plan
    from .reference import FACTS_DIR
    plan_fields = target_estimate.get("plan") if isinstance(target_estimate, Mapping) else None
    path = FACTS_DIR / facts_file
    if not isinstance(plan_fields, Mapping) or not path.is_file():
        return None
    from .env import FactsError, load_facts
    try:
        recorded = load_facts(path).get("host_memory_gib")
    except FactsError:
        return None
    if not isinstance(recorded, (int, float)):
        return None
    plan = Plan(**{k: v for k, v in plan_fields.items() if k in Plan.__dataclass_fields__})
    b16 = bool(target_estimate.get("bf16_states"))
    assumed = plan.host_memory_gib
    here = estimate(plan.replace(host_memory_gib=float(recorded)), bf16_states=b16)
    states = " with bf16 states" if b16 else ""
    fits_there = bool(here.fits_host)
    sentence = (f"host RAM assumed: {assumed:g} GiB (notebook 05's TARGET_HOST_MEMORY_GIB); on notebook 00's recorded "
                f"8 × RTX 4090 box ({recorded:g} GiB, {facts_file}) {plan.label}{states} needs "
                f"{here.host_gib['total']:.1f} GiB: {'fits' if fits_there else 'does not fit'}")
    if not fits_there:
        d = decide(plan.replace(host_memory_gib=float(recorded)))
        r, x = d.recommended, d.exact_alternative
        exact = (f"; best exact alternative: {x.plan.label}, host {x.host_gib['total']:.1f} GiB, {x.status}"
                 if d.lossy and x is not None else "")
        sentence += (f"; what the cookbook's policy picks there (exact fp32 states first, with room for the "
                     f"estimator's measured error): {r.plan.label}"
                     f"{' with bf16 states (--bf16-states; LOSSY)' if r.bf16_states else ' with fp32 states'}"
                     f", host {r.host_gib['total']:.1f}/{recorded:g} GiB, {r.status}{exact}" if r is not None else
                     "; nothing fits there (cookbook estimate --sweep names the smallest change)")
    verdict = (f"{'yes' if assumed is None or target_estimate.get('fits_host') else 'no'}"
               f"{f' at {assumed:g} GiB' if assumed is not None else ''}; {'yes' if fits_there else 'no'} at "
               f"{recorded:g} GiB")
    return verdict, sentence


def nvme_measured_note(res: Mapping, frame=None) -> str:
    """What NVMe offload has measured, for the 1 × RTX 4090 row whose recipe it is: this notebook's own NVMe run
    (``nvme_status``/``nvme_skipped_reason`` in notebook 06's results, which model it trained) and the GPU runs
    of ``data/reference/*nvme*.json`` (:func:`cookbook.nvme.reference_runs`, or ``frame``): per run its model,
    aio setting and outcome — a stop with its known cause (:data:`cookbook.nvme.KNOWN_STOPS`) — and whether
    LLaMA-7B itself ever ran with NVMe offload on a GPU."""
    import pandas as pd
    from .nvme import reference_runs
    df = reference_runs() if frame is None else frame
    runs = df[df["kind"] == "NVMe run"] if len(df) else df
    parts = []
    nvme_label = next((k for k in (res.get("runs") or {}) if "nvme" in k), None)
    own = (res.get("runs") or {}).get(nvme_label) if nvme_label else None
    status = res.get("nvme_status")
    if own and own.get("status") == "ok":
        parts.append(f"this notebook's NVMe run: ok, {own.get('model')} on {own.get('hardware')}")
    elif status == "skipped" or res.get("nvme_skipped_reason"):
        parts.append(f"this notebook's NVMe run: skipped ({res.get('nvme_skipped_reason') or 'no reason recorded'})")
    elif status:
        parts.append(f"this notebook's NVMe run: {status}" + (f" ({own.get('message')})" if own else ""))
    seen = []
    # one outcome per model and aio setting: the latest finished run, else the latest stop, else "not run";
    # an earlier stop that a later run superseded is named beside it (rows are in record order)
    latest = {}
    for _, r in runs.iterrows():
        key = (r["model"], r["aio"])
        rank = {"ok": 2, "not_run": 0}.get(r["status"], 1)
        if key not in latest or rank >= latest[key][0]:
            earlier = latest.get(key, (0, None, []))[2] + ([latest[key][1]] if key in latest and latest[key][0] == 1
                                                           else [])
            latest[key] = (rank, r, earlier)
    for rank, r, earlier in latest.values():
        what = f"{r['model']} ({r['aio']} aio)"
        if r["status"] == "ok":
            tps = r.get("tokens/s")
            before = "; ".join(f"{e['file']}: {e['status']}, "
                               + next((str(v) for v in (e.get("cause (short)"), e.get("note")) if isinstance(v, str) and v),
                                      "no message")
                               for e in earlier)
            seen.append(f"{what} ok, {r['s/step']:.2f} s/step" + (f", {tps:,.0f} tokens/s" if isinstance(tps, (int, float))
                                                                   and not pd.isna(tps) else "")
                        + (f" ({r['file']}; an earlier run stopped — {before})" if before else ""))
        else:
            short = r.get("cause (short)")
            seen.append(f"{what} {r['status']}: {r.get('note') or 'no message'}"
                        + (f" ({short})" if isinstance(short, str) and short else ""))
    if seen:
        files = ", ".join(sorted(set(runs["file"])))
        ran_7b = bool(((runs["model"] == "llama-7b") & (runs["status"] == "ok")).any())
        parts.append(f"NVMe offload on GPUs ({files}): " + "; ".join(seen)
                     + ("" if ran_7b else " — LLaMA-7B itself has not run with NVMe offload on a GPU"))
    else:
        parts.append("NVMe offload has not been measured on a GPU (no data/reference/*nvme*.json)")
    return "; ".join(parts)


def _shape(record: Mapping) -> tuple | None:
    plan = record.get("plan") if isinstance(record.get("plan"), Mapping) else record
    shape = tuple(plan.get(k) for k in ("micro_batch", "grad_accum", "seq_len"))
    return shape if all(isinstance(x, int) for x in shape) else None


def batch_shape_note(name: str, n_target: int, *, run: Mapping | None = None, recipe: Mapping | None = None,
                     records=None, ceilings: Mapping | None = None) -> str:
    """:func:`batch_shape_notes` joined with ``; `` ("" when there is nothing to say)."""
    return "; ".join(batch_shape_notes(name, n_target, run=run, recipe=recipe, records=records, ceilings=ceilings))


def batch_shape_notes(name: str, n_target: int, *, run: Mapping | None = None, recipe: Mapping | None = None,
                      records=None, ceilings: Mapping | None = None) -> list[str]:
    """Where a completed GPU reference run of the target model (``data/reference``,
    :func:`cookbook.reference.reference_results` of notebook ``name``, ``n_target`` parameters) has another batch
    shape than ``run`` (a GPU run measured here, of the same ZeRO variant) or ``recipe`` (the recipe's plan fields
    ``micro_batch``, ``grad_accum``, ``seq_len``): both shapes, the rows per optimizer step, and the step-time
    floors of :func:`step_floor` on the measured ceilings (``ceilings``, default the reference's) for the
    reference's variant — with parameter offload every micro batch moves the 16-bit weights over PCIe, so the
    same rows in more, smaller micro batches take longer. With ``run``: both measured step times and their
    achieved fractions of the floor (a gap the shape does not explain is said). With ``recipe``: the reference's
    RTX 4090 projection at the recipe's shape (same achieved fraction of the 4090 floor, :func:`project_rtx4090`'s
    model). One sentence per reference run; none when there is nothing to say."""
    from .reference import reference_ceilings, reference_results
    recs = records if records is not None else reference_results(name)
    ceilings = ceilings if ceilings is not None else reference_ceilings()
    mine = _shape(run) if run else (_shape(recipe) if recipe else None)
    if not mine or not ceilings:
        return []
    keys = ("micro_batch", "grad_accum", "seq_len")
    variant_keys = ("zero_stage", "offload_optimizer", "offload_param")
    out = []
    for r in recs:
        plan = r.get("plan") if isinstance(r.get("plan"), Mapping) else {}
        theirs = _shape(r)
        if (r.get("num_params") != n_target or not str(r.get("status", "")).startswith("ok")
                or not r.get("tokens_per_s") or theirs in (None, mine)):
            continue
        variant = {k: plan.get(k) for k in variant_keys}
        if None in variant.values() or (run and any(run.get(k) != v for k, v in variant.items())):
            continue
        ref_plan = {"num_gpus": plan.get("num_gpus") or 1, **dict(zip(keys, theirs)), **variant}
        mine_plan = dict(ref_plan, **dict(zip(keys, mine)))
        f_theirs, f_mine = step_floor(n_target, ref_plan, ceilings), step_floor(n_target, mine_plan, ceilings)
        rows_t, rows_m = theirs[0] * theirs[1], mine[0] * mine[1]
        who = "this run" if run else "the recipe"
        proj = (r.get("projection_rtx4090") or {}).get("tokens_per_s")
        what = ", ".join(x for x in (r.get("label"), "bf16 states" if r.get("bf16_states") else None) if x)
        text = (f"the GPU reference run {r.get('name')} ({r.get('_file')}; {what + ': ' if what else ''}"
                f"{r['tokens_per_s']:,.0f} tokens/s"
                + (f", RTX 4090 projection {proj:,.0f}" if proj else "")
                + f") used micro batch {theirs[0]} × accumulation {theirs[1]} × {theirs[2]} tokens, {who} "
                f"{mine[0]} × {mine[1]} × {mine[2]}"
                + (f": the same {rows_m} rows per optimizer step" if rows_m == rows_t else
                   f" ({rows_t} vs {rows_m} rows per optimizer step)")
                + (f", but parameter offload moves the 16-bit weights over PCIe once per micro batch, {mine[1]} "
                   f"times a step instead of {theirs[1]}" if variant["offload_param"] != "none" else "")
                + f"; step-time floor (compute + PCIe + CPU Adam on the H200's measured ceilings) {f_mine:.1f} s vs "
                f"{f_theirs:.1f} s")
        if run and run.get("step_time_s") and r.get("step_time_s"):
            a_m, a_t = f_mine / run["step_time_s"], f_theirs / r["step_time_s"]
            text += (f"; measured {run['step_time_s']:.1f} s vs {r['step_time_s']:.1f} s a step ({a_m:.2f} vs "
                     f"{a_t:.2f} of the floor)")
            if abs(a_m - a_t) > 0.15:
                common = r.get("_common") or {}
                machine = common.get("machine") if isinstance(common.get("machine"), Mapping) else {}
                other = [f"{common['date']}" if common.get("date") else None,
                         ", ".join(str(x) for x in (machine.get("gpus"), f"{machine['host_memory_gib']:.0f} GiB RAM"
                                                    if isinstance(machine.get("host_memory_gib"), (int, float)) else None)
                                   if x) or None,
                         f"data: {common['data']}" if common.get("data") else None]
                other = [x for x in other if x]
                text += (": the batch shape explains only part of the gap; the reference is another call"
                         + (f" ({'; '.join(other)})" if other else ""))
        elif not run and proj:
            t_theirs = step_floor(n_target, ref_plan, RTX4090_MODEL)
            t_mine = step_floor(n_target, mine_plan, RTX4090_MODEL)
            at_mine = proj * (t_theirs / t_mine) * (rows_m * mine[2]) / (rows_t * theirs[2])
            text += f"; at the recipe's shape the same fraction of the RTX 4090 floor gives ~{at_mine:,.0f} tokens/s"
        out.append(text)
    return out


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
    import pandas as pd
    return pd.DataFrame([row for row, _ in _answer_rows(results)])


def _answer_rows(results: Mapping[str, Mapping | None]) -> list[tuple[dict, dict]]:
    """:func:`answers_frame`'s rows, each with the pieces :func:`answers_table` makes its short cells of:
    ``recipe`` (the recipe alone), ``recipe_why`` (its reason and alternatives), ``rehearsal``, ``run`` (the
    central run's record), ``label``, ``states``, ``shape`` (the run's batch shape as text) and ``notes`` (the
    note's sentences, one a note)."""
    import math
    from .reference import reference_projection
    rows = []
    for target, name in TARGETS:
        if name not in results or not results[name]:
            ran = name in results
            why = (f"no results recorded: {name} stopped before its last cell (see its executed notebook)" if ran
                   else f"not run here: notebooks/{name}.ipynb produces it (cookbook run-all --only {name[:2]})")
            rows.append(({"target": target, "recipe": "—", "fits GPU": "unknown", "fits host": "unknown",
                          "measured here": "no results recorded" if ran else "not run here",
                          "RTX 4090 projection tokens/s": float("nan"), "note": why, "notebook": name},
                         {"recipe": "—", "recipe_why": [], "rehearsal": False, "run": {}, "label": None,
                          "states": "", "shape": "", "notes": [why], "ran": ran}))
            continue
        res = results[name]
        run = _central(res)
        extra = []  # what the row's numbers assume or leave out, after the note
        host_cell = None
        if name.startswith("05"):
            te = res.get("target_estimate") or {}
            recipe, fits_gpu, fits_host = te.get("verdict"), te.get("fits_gpu"), te.get("fits_host")
            short, why_recipe = recipe, []
            host = host_ram_note(te)
            if host:
                host_cell, sentence = host
                extra.append(sentence)
        else:
            d = res.get("desktop_choice") or {}
            short = f"{d.get('label')} with {d.get('kind')}" if d.get("kind") else res.get("verdict")
            why_recipe = [str(d.get("reason")).rstrip(".")] if d.get("kind") else []
            recipe = f"{short} ({why_recipe[0]})" if why_recipe else short
            if d.get("alternatives"):
                recipe += "; alternatives: " + "; ".join(d["alternatives"])
                why_recipe.append("alternatives: " + "; ".join(d["alternatives"]))
            fits_gpu, fits_host = (True, True) if d.get("kind") else (None, d.get("fits"))
            if d.get("kind") == "NVMe offload":
                extra.append(nvme_measured_note(res))
                consumer = ((res.get("nvme_road") or {}).get("floors") or [{}])[0]
                if consumer.get("SSD-only floor s/step"):
                    disk = str(consumer.get("disk") or "the SSD").split(" (")[0]
                    extra.append(f"the recipe on a {disk} ({consumer.get('read GB/s'):g}/{consumer.get('write GB/s'):g} "
                                 f"GB/s): at least {consumer['SSD-only floor s/step']:.1f} s a step, at most "
                                 f"{consumer.get('tokens/s at most', float('nan')):,.0f} tokens/s (the SSD alone; "
                                 "notebook 06 §9) — the projection column is not the NVMe recipe's")
        rehearsal = bool(res.get("rehearsal"))
        tps = run.get("tokens_per_s")
        label = (res.get("central") or {}).get("run")
        world = run.get("world_size")
        states = " with bf16 states" if (name.startswith("06") and (res.get("this_machine_choice") or {}).get(
            "bf16_states") and label == (res.get("this_machine_choice") or {}).get("label")) else ""
        what = ", ".join(str(x) for x in (f"{label}{states}" if label else None, run.get("model")) if x)
        shape = _shape(run)
        shape_text = f", micro batch {shape[0]} × accumulation {shape[1]} × {shape[2]} tokens" if shape else ""
        measured = (f"{run.get('status')}: {tps:,.0f} tokens/s"
                    + (f" ({world} rank{'s' if world != 1 else ''})" if world else "")
                    + (f" — {what}" if what else "") + shape_text + f" on {run.get('hardware')}" if tps else
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
            said = ["CPU rehearsal: tiny model, not a 4090 number" if rehearsal else "no projection for this run"]
            if ref and ref.get("num_params") and abs(math.log(ref["num_params"] / n_target)) <= SAME_MODEL_LOG_GAP:
                proj = ref["tokens_per_s"]
                said.append(f"projection from the H200 reference run {ref['name']} ({ref['label']}, "
                            f"{(ref['num_params'] or 0) / 1e9:.1f} B parameters)")
            elif ref:
                said.append(f"no GPU reference run of {model}'s size ({n_target / 1e9:.1f} B parameters): the "
                            f"closest, {ref['name']} ({(ref['num_params'] or 0) / 1e9:.1f} B), is another model — "
                            f"run {name} on GPUs for a projection")
        else:
            said = ["GPU run; projection: the speed model (cookbook.speed) for this run's variant on RTX 4090s, "
                    "16 CPU cores, ZeRO-3 collectives through host memory (docs/speed.md)"]
            if label and recipe_label and label != recipe_label:
                said.append(f"measured: the variant this machine runs ({label}{states}), not the recipe ({recipe_label})")
        from .models import model_spec
        n_target = model_spec(TARGET_MODELS[name]).num_params
        gpu_run = run if (not rehearsal and run.get("estimate_device") == "cuda" and run.get("num_params") == n_target) else None
        recipe_fields = (res.get("desktop_choice") or {}).get("plan") if name.startswith("06") else \
            (res.get("target_estimate") or {}).get("plan")
        extra.extend(batch_shape_notes(name, n_target, run=gpu_run, recipe=None if gpu_run else (recipe_fields or None)))
        # the projection column belongs to the recipe on this row: 06's when this machine measured another variant,
        # 05's when the measured run is one rank's share of the target (then the recipe's own 8 GPUs, with the
        # ZeRO-3 collectives between them, not the share run's per-GPU speed)
        chosen = res.get("desktop_choice") if name.startswith("06") else res.get("target_estimate")
        other = (label != recipe_label if name.startswith("06") else not rehearsal and (
            run.get("world_size") != (recipe_fields or {}).get("num_gpus")
            or run.get("model") != (recipe_fields or {}).get("model")))
        recipe_proj = (_recipe_projection(recipe_fields, bf16_states=bool((chosen or {}).get("bf16_states")))
                       if recipe_fields and other else None)
        if recipe_proj is not None:
            if proj is not None:
                extra.append(f"the measured run's own variant ({label}, {run.get('model')} on {world} rank"
                             f"{'s' if world != 1 else ''}) projects {proj:,.0f} tokens/s on as many RTX 4090s")
            proj = recipe_proj
            said.insert(0, f"projection: the speed model for the recipe{f' ({recipe_label})' if recipe_label else ''} on "
                           f"{recipe_fields.get('num_gpus')} × RTX 4090 with 16 CPU cores, ZeRO-3 collectives through "
                           "host memory (cookbook.speed, docs/speed.md)")
        notes = [n for n in [*said, *extra] if n]
        note = "; ".join(notes)
        rows.append(({"target": target, "recipe": recipe or "—", "fits GPU": _yes(fits_gpu),
                      "fits host": host_cell or _yes(fits_host), "measured here": measured,
                      "RTX 4090 projection tokens/s": float("nan") if proj is None else round(proj, 0), "note": note,
                      "notebook": name},
                     {"recipe": short or "—", "recipe_why": why_recipe, "rehearsal": rehearsal, "run": run,
                      "label": label, "states": states, "shape": shape_text.lstrip(", "), "notes": notes,
                      "ran": True}))
    return rows


#: The longest text a cell of :func:`answers_table` holds; what is longer goes to its notes.
CELL_MAX = 200


def _short(text: str, more: list[str], what: str, limit: int = CELL_MAX) -> str:
    """``text`` when it fits ``limit``; else its head up to the last ``; `` or `` (`` that fits, the rest appended
    to ``more`` as ``"what, continued: …"``."""
    if len(text) <= limit:
        return text
    room = text[:limit - 12]
    cut = max(room.rfind("; "), room.rfind(" ("))
    cut = cut if cut > 0 else len(room)
    more.append(f"{what}, continued: {text[cut:].lstrip('; ')}")
    return text[:cut] + " …"


def rehearsal_cell(name: str) -> str:
    """What the answers say of a CPU rehearsal's central run in place of its numbers (a tiny model's tokens/s
    on CPU ranks is no answer for an RTX 4090): where its measurements are."""
    return f"CPU rehearsal (tiny model): see notebook {name[:2]}"


def answers_table(results: Mapping[str, Mapping | None]):
    """:func:`answers_frame` as the report shows it: short cells (a verdict, the numbers with their units, at most
    :data:`CELL_MAX` characters) and the long notes apart, numbered.

    Columns: ``target``, ``recipe``, ``fits GPU``, ``fits host``, ``measured here`` (a GPU run: status, tokens/s,
    variant and hardware; the CPU rehearsal: :func:`rehearsal_cell`, no tiny-model number), ``RTX 4090 projection
    tokens/s`` and ``notes`` (the numbers of this row's notes, ``"1–4"``).

    Returns:
        ``(frame, notes)``: ``notes`` the list the ``notes`` column numbers (from 1).
    """
    import pandas as pd
    rows, notes = [], []
    for row, got in _answer_rows(results):
        more = list(got["recipe_why"])
        recipe = _short(got["recipe"], more, "recipe")
        run, name = got["run"], row["notebook"]
        tps, world = run.get("tokens_per_s"), run.get("world_size")
        if not got["ran"] or not run and not got["rehearsal"]:
            measured = row["measured here"]
        elif got["rehearsal"]:
            measured = rehearsal_cell(name)
        else:
            variant = f"{got['label']}{got['states']}" if got["label"] else None
            measured = (f"{run.get('status')}: {tps:,.0f} tokens/s" if tps else str(run.get("status") or "no run recorded"))
            measured += "".join(f", {x}" for x in (variant,) if x) + (f" on {run['hardware']}" if run.get("hardware") else "")
            detail = [str(x) for x in (run.get("model"), got["shape"],
                                       f"{world} rank{'s' if world != 1 else ''}" if world else None) if x]
            if detail:
                more.append("measured here: " + ", ".join(detail))
            measured = _short(measured, more, "measured here")
        fits_host = _short(str(row["fits host"]), more, "fits host")
        mine = [*more, *got["notes"]]
        first = len(notes) + 1
        notes.extend(mine)
        refs = "" if not mine else (str(first) if len(mine) == 1 else f"{first}–{len(notes)}")
        rows.append({"target": row["target"], "recipe": recipe, "fits GPU": row["fits GPU"], "fits host": fits_host,
                     "measured here": measured, "RTX 4090 projection tokens/s": row["RTX 4090 projection tokens/s"],
                     "notes": refs, "notebook": name})
    return pd.DataFrame(rows), notes


#: What to run, per target: the same commands as README's "What to run" table (tests/test_runall.py checks
#: README holds each), and where the evidence is. ``notebooks``: the notebooks whose report sections hold it.
RUN_THIS = (
    {"target": "8 × RTX 4090 + Qwen-14B", "notebooks": ("05_final_8x4090",),
     "run": "cookbook train notebooks/qwen14b-8x4090.yaml",
     "ask": 'cookbook estimate qwen-14b --gpus 8 --gpu-memory-gib 24 --host-memory-gib 256 --seq-len 512 '
            '--grad-accum 16 --sweep --gpu "RTX 4090" --cpu-cores 16',
     "evidence": "docs/gpu/ (the notebooks executed on one H200 capped at 24 GiB)"},
    {"target": "1 × RTX 4090 + LLaMA-7B", "notebooks": ("06_final_1x4090",),
     "run": "cookbook train notebooks/llama7b-1x4090.yaml",
     "ask": 'cookbook estimate llama-7b --gpus 1 --gpu-memory-gib 24 --host-memory-gib 64 --seq-len 1024 '
            '--micro-batch 8 --grad-accum 2 --sweep --gpu "RTX 4090" --cpu-cores 16',
     "evidence": "docs/gpu/attention.md (the recipe's speed, LLaMA-7B)"},
    {"target": "your own model and data", "notebooks": ("02_zero2", "03_zero3", "04_zero3_offload"),
     "run": "cookbook train --model ./your-model --dataset your.jsonl --lr 1e-5 --num-epochs 1",
     "ask": 'cookbook estimate ./your-model --gpus N --gpu-memory-gib 24 --host-memory-gib R --seq-len L --sweep '
            '--gpu "RTX 4090" --cpu-cores 16',
     "evidence": "docs/speed.md (the speed model); --dry-run first"},
)


def _recipe_projection(plan_fields: Mapping, *, bf16_states: bool) -> float | None:
    """The speed model's tokens/s (:func:`cookbook.speed.predict`) for a recipe's plan (a ``Plan.to_dict()``) on
    RTX 4090s with 16 CPU cores; None when the plan cannot be rebuilt or estimated."""
    from .memory import EstimateError, estimate
    from .models import ModelNotFoundError
    from .plan import Plan, PlanError
    from .speed import Machine, SpeedModelError, gpu_spec, predict
    try:
        fields = {k: v for k, v in plan_fields.items() if k in Plan.__dataclass_fields__}
        if "nvme" in (fields.get("offload_optimizer"), fields.get("offload_param")) and not fields.get("nvme_path"):
            fields["nvme_path"] = "/local_nvme"   # the estimate needs a folder; the bytes per step do not depend on it
        e = estimate(Plan(**fields), bf16_states=bf16_states)
        return predict(e, Machine(gpu_spec("RTX 4090"), 16)).tokens_per_s
    except (EstimateError, ModelNotFoundError, PlanError, SpeedModelError, TypeError, ValueError):
        return None


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


__all__ = ["CELL_MAX", "RECORDED_8X4090_FACTS", "RTX4090_MODEL", "RUN_THIS", "SAME_MODEL_LOG_GAP", "TARGETS",
           "TARGET_MODELS", "answers_frame", "answers_table", "batch_shape_note", "batch_shape_notes", "collapse_repeated", "host_ram_note",
           "nvme_measured_note", "project_rtx4090", "rehearsal_cell", "step_floor"]
