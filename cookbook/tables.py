"""Tables as a person reads them: no raw ``None``/``NaN``, counts as integers, GPU-only columns labelled
on the CPU rehearsal; and the tables of runs and of batch shapes the notebooks show.

* :func:`tidy_frame` — any pandas DataFrame made ready to show.
* :func:`runs_frame` — launched runs, one row each: status, hardware, loss, throughput, MFU, and each memory
  peak beside its estimate with the error and the ±15 % verdict (:func:`estimate_check`, :func:`run_row`).
* :func:`batch_sweep_frame` — estimates over micro batch × sequence length (:func:`cookbook.memory.batch_sweep`).

Units: GiB = 2**30 bytes; tokens/s and samples/s over the whole world (all ranks).
"""
from __future__ import annotations

from typing import Any, Mapping

from .results import as_record, loss_pair


#: The issue-17 bar: an estimate within this many percent of the measurement, ``|estimate − measured| /
#: measured``, is "within".
ESTIMATE_BAR_PCT = 15.0

#: The quantities checked for every completed run: name in ``estimate_vs_measured`` (:func:`cookbook.memory.
#: compare`), the record's measured key, its estimate key when the run kept no comparison, and the column.
_CHECKED = (("GPU allocated (peak)", "peak_gpu_allocated_gib", "estimate_gpu_allocated_gib", "peak GPU allocated"),
            ("GPU reserved (peak)", "peak_gpu_reserved_gib", "estimate_gpu_gib", "peak GPU reserved"),
            ("host RSS (peak)", "host_peak_gib", "estimate_host_gib", "peak host"))


def estimate_check(run, reference_dir=None) -> list[dict]:
    """Each memory peak of a run beside its estimate, the error and whether it is within ±15 %.

    The estimate is the run's own (``summary.json``'s ``estimate_vs_measured``: the estimator for the batch
    shape that ran, on the basis of each measurement — allocated without the allocator's cache and the CUDA
    context, reserved without the CUDA context, :func:`cookbook.memory.compare`); a record without it falls
    back to the launch's estimate on the same bases (``estimate_gpu_allocated_gib``, ``estimate_gpu_gib``,
    ``estimate_host_gib`` of :func:`~cookbook.results.run_record`). The numbers are the comparison's as stored
    (GiB to 3 decimals, error % to 1), so every table shows the same ones. GPU rows only for a GPU run.

    ``why`` holds a reason for a miss only where the record itself shows one, else None:

    * host: the largest host RSS at the end of a step (``host_rss_steps_max_gib``, rank 0's; used on one
      rank only, where it is the machine's) is within the bar and below the peak — the peak came outside the
      steps' samples (and the run saved and reloaded its 16-bit model after its last step, when it did);
    * GPU reserved: allocated is within the bar — the miss is the allocator's cache, measured reserved −
      allocated beside the estimate's; allocated misses too — both gaps, allocated's and the cache's;
    * any other miss of a GPU run (allocated, host): the same plan's other GPU measurements
      (``data/reference/``, or ``reference_dir``; :func:`_unexplained`) beside this one, else "cause not
      isolated" — never a blank where the bar is missed.

    Args:
        run: a :class:`~cookbook.launch.RunResult` or :func:`~cookbook.results.run_record` dict.
        reference_dir: folder of GPU reference records for the unexplained-miss reason (default
            ``data/reference``).

    Returns:
        one dict per quantity that was measured: ``quantity``, ``measured GiB``, ``estimate GiB``,
        ``error %`` (``100·(estimate − measured)/measured``; positive = the estimate is on the safe side),
        ``within`` (bool, None without an estimate), ``why``. Empty for a run that measured nothing.
    """
    r = as_record(run)
    stored = {e.get("quantity"): e for e in (r.get("estimate_vs_measured") or []) if isinstance(e, Mapping)}
    gpu_run = r.get("estimate_device") == "cuda" or r.get("device") not in (None, "cpu")
    rows = []
    for quantity, meas_key, est_key, _ in _CHECKED:
        if quantity.startswith("GPU") and not gpu_run:
            continue
        e = stored.get(quantity) or {}
        meas = e.get("measured GiB") if e.get("measured GiB") is not None else r.get(meas_key)
        if meas is None:
            continue
        est = e.get("estimate GiB") if e else r.get(est_key)
        err = e.get("error %") if e.get("error %") is not None else (
            round(100.0 * (est - meas) / meas, 1) if est is not None and meas else None)
        rows.append({"quantity": quantity, "measured GiB": float(meas), "estimate GiB": None if est is None else float(est),
                     "error %": err, "within": None if err is None else abs(err) <= ESTIMATE_BAR_PCT, "why": None})
    by = {row["quantity"]: row for row in rows}
    host, alloc, res = by.get("host RSS (peak)"), by.get("GPU allocated (peak)"), by.get("GPU reserved (peak)")
    steps_rss = r.get("host_rss_steps_max_gib")
    if host and host["within"] is False and host["estimate GiB"] and steps_rss and r.get("world_size") == 1 \
            and steps_rss < host["measured GiB"]:
        err = 100.0 * (host["estimate GiB"] - steps_rss) / steps_rss
        if abs(err) <= ESTIMATE_BAR_PCT:
            saved = isinstance(r.get("save_verification"), Mapping)
            host["why"] = (f"during the steps the host RSS was at most {steps_rss:.2f} GiB ({err:+.0f} %, within); the "
                           f"peak {host['measured GiB']:.2f} GiB came outside the steps' samples"
                           + (" — this run saved and reloaded its 16-bit model after its last step" if saved else ""))
    if res and res["within"] is False and alloc and alloc["within"] and res["estimate GiB"] is not None \
            and alloc["estimate GiB"] is not None:
        res["why"] = (f"allocated is within ({alloc['error %']:+.0f} %): the miss is the allocator's cache, "
                      f"reserved − allocated {res['measured GiB'] - alloc['measured GiB']:.2f} GiB measured, "
                      f"{res['estimate GiB'] - alloc['estimate GiB']:.2f} GiB estimated")
    if res and res["within"] is False and not res["why"] and alloc and alloc["within"] is False \
            and res["estimate GiB"] is not None and alloc["estimate GiB"] is not None:
        cache_meas = res["measured GiB"] - alloc["measured GiB"]
        cache_est = res["estimate GiB"] - alloc["estimate GiB"]
        res["why"] = (f"allocated misses too ({alloc['error %']:+.0f} %, "
                      f"{alloc['measured GiB'] - alloc['estimate GiB']:+.2f} GiB), and the allocator's cache "
                      f"(reserved − allocated) was {cache_meas:.2f} GiB measured, {cache_est:.2f} GiB estimated")
    for row, key in ((alloc, "peak_gpu_allocated_gib"), (host, "host_peak_gib")):
        if row and row["within"] is False and not row["why"] and gpu_run and row["estimate GiB"] is not None:
            row["why"] = _unexplained(r, row, key, directory=reference_dir)
    return rows


def _same_plan(r: Mapping) -> dict:
    """The fields that make two runs the same plan for a memory peak (batch shape aside)."""
    cmd = str(r.get("command") or "")
    bf16 = r.get("bf16_states")
    return {"model": r.get("model"), "zero_stage": r.get("zero_stage"), "offload_optimizer": r.get("offload_optimizer"),
            "offload_param": r.get("offload_param"), "seq_len": r.get("seq_len"),
            "bf16_states": bool(bf16) if bf16 is not None else "--bf16-states" in cmd}


def _unexplained(r: Mapping, row: Mapping, key: str, directory=None) -> str:
    """The ``why`` of a GPU run's miss that the record does not explain: the same plan's other measurements on
    GPUs (:func:`cookbook.results.reference_files`: same model, ZeRO stage,
    offload, sequence length and state precision, any batch shape) beside this one, else "cause not isolated"."""
    from .results import records_in, reference_files
    # an unreadable file is cookbook.reference's to report
    refs = [dict(x, _file=name) for name, data, error in reference_files(directory) if not error
            for x in records_in(data)]
    want = _same_plan(r)
    others = []
    for ref in refs:
        plan = ref.get("plan") if isinstance(ref.get("plan"), Mapping) else ref
        meas = ref.get(key)
        if not isinstance(meas, (int, float)) or not str(ref.get("status", "")).startswith("ok"):
            continue
        got = {"model": plan.get("model"), "zero_stage": plan.get("zero_stage"),
               "offload_optimizer": plan.get("offload_optimizer"), "offload_param": plan.get("offload_param"),
               "seq_len": plan.get("seq_len"), "bf16_states": bool(ref.get("bf16_states"))}
        same_run = ((plan.get("micro_batch"), plan.get("grad_accum")) == (r.get("micro_batch"), r.get("grad_accum"))
                    and abs(float(meas) - row["measured GiB"]) <= 0.01)
        if got == want and not same_run:
            others.append(f"{float(meas):.2f} GiB at micro batch {plan.get('micro_batch')} × {plan.get('grad_accum')} "
                          f"({ref.get('_file')})")
    side = "above" if row["error %"] > 0 else "below"
    gap = abs(row["estimate GiB"] - row["measured GiB"])
    if others:
        return (f"the estimate is {gap:.2f} GiB {side} this run's {row['measured GiB']:.2f} GiB at micro batch "
                f"{r.get('micro_batch')} × {r.get('grad_accum')}; the same plan measured " + "; ".join(others[:3])
                + " — the runs differ by more than the bar, and what differs between them is not isolated")
    return (f"the estimate is {gap:.2f} GiB {side} the measurement; the record does not show which term differs "
            "(cause not isolated)")


#: The quantities :func:`estimate_check` reports, in table order.
CHECKED_QUANTITIES = tuple(q for q, *_ in _CHECKED)

#: The header of the column of reasons for a miss (:func:`miss_reasons`).
WHY_COLUMN = f"why not within ±{ESTIMATE_BAR_PCT:g} %"


def miss_reasons(checks) -> str:
    """The reasons :func:`estimate_check` found for misses, one cell: ``host: …; GPU reserved: …`` (empty
    when none)."""
    rows = checks.values() if isinstance(checks, Mapping) else checks
    return "; ".join(f"{c['quantity'].split(' (')[0]}: {c['why']}" for c in rows if c.get("why"))


def without_empty_why(frame):
    """``frame`` without the :data:`WHY_COLUMN` when no row has a reason in it (a column of blanks says nothing)."""
    if len(frame) and WHY_COLUMN in frame.columns and not any(frame[WHY_COLUMN]):
        return frame.drop(columns=WHY_COLUMN)
    return frame


def check_cell(row: Mapping | None) -> str | None:
    """One :func:`estimate_check` row as a table cell: ``6.74 (est 4.63, -31 %, no)``; ``within``/``no`` is
    the ±15 % bar. None for no row (a quantity not measured)."""
    if not row:
        return None
    if row.get("estimate GiB") is None:
        return f"{row['measured GiB']:.2f} (no estimate)"
    return (f"{row['measured GiB']:.2f} (est {row['estimate GiB']:.2f}, {row['error %']:+.0f} %, "
            f"{'within' if row['within'] else 'no'})")


def run_row(label: str, run) -> dict:
    """One run as a table row (what :func:`runs_frame` shows): ``run``, ``status``, ``hardware``, ``world
    size``, ``steps``, ``loss`` (:func:`~cookbook.results.loss_pair`: ``first → last`` step under 10 steps,
    else the first and last 5-step means; the basis in brackets), ``tokens/s``, ``step s``, ``MFU %``, each
    memory peak as :func:`check_cell` (measured, the estimate, the error and the ±15 % verdict:
    :func:`estimate_check`), ``why not within ±15 %`` (the record's reasons, else empty) and ``duration s``."""
    r = as_record(run)
    pair = loss_pair(r)
    checks = {row["quantity"]: row for row in estimate_check(r)}
    row = {"run": label, "status": r.get("status"), "hardware": r.get("hardware"),
           "world size": r.get("world_size"), "steps": r.get("steps"),
           "loss": (f"{pair['first']:.3f} → {pair['last']:.3f} ({pair['basis']})" if pair else None),
           "tokens/s": rounded(r.get("tokens_per_s"), 1), "step s": rounded(r.get("step_time_s"), 3),
           "MFU %": rounded(100 * r["mfu"], 2) if r.get("mfu") is not None else None}
    for quantity, _, _, column in _CHECKED:
        row[f"{column} GiB (estimate, error, ±{ESTIMATE_BAR_PCT:g} %)"] = check_cell(checks.get(quantity))
    row[WHY_COLUMN] = miss_reasons(checks)
    row["duration s"] = r.get("duration_s")
    return row


def runs_frame(runs: Mapping[str, Any]):
    """One row per run (:func:`run_row`): status, hardware, world size, steps, loss, tokens/s, step time, MFU,
    and each memory peak with its estimate, error and ±15 % verdict. The ``why`` column is left out when no
    run has a reason; on the CPU rehearsal the GPU columns are labelled n/a (:func:`tidy_frame`).

    Args:
        runs: label -> :class:`~cookbook.launch.RunResult` or :func:`run_record` dict.

    Returns:
        a pandas DataFrame indexed by ``run``.
    """
    import pandas as pd
    rows = [run_row(label, run) for label, run in runs.items()]
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows).set_index("run")
    return tidy_frame(without_empty_why(frame))


def rounded(v, n: int):
    """``round(float(v), n)``, and None for None (a missing number stays missing)."""
    return None if v is None else round(float(v), n)


#: Shown in a table cell whose value is missing (never a raw ``None``/``NaN``/``<NA>``).
MISSING = "—"

#: Columns that hold whole numbers (counts), shown without a decimal point even when pandas upcast them
#: to float because some rows lack a value.
INTEGER_COLUMNS = frozenset({"world size", "steps", "step", "micro batch", "seq len", "grad accum",
                             "gradient accumulation steps", "global batch", "returncode", "num_gpus",
                             "world_size", "micro_batch", "grad_accum", "seq_len", "ZeRO stage", "zero_stage"})

#: Words that mark a column only a GPU can fill (GPU memory peaks, TFLOPS, MFU): empty on the CPU rehearsal.
_GPU_ONLY_MARKS = ("gpu", "tflops", "mfu")

#: Appended to the header of a GPU-only column that the CPU rehearsal leaves empty.
CPU_NA = " — n/a (CPU)"


def _missing(v) -> bool:
    if v is None:
        return True
    try:
        import pandas as pd
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def tidy_frame(frame, *, rehearsal: bool | None = None):
    """A table ready to show: no raw ``None``/``NaN``, counts as integers, GPU-only columns labelled.

    * Columns in :data:`INTEGER_COLUMNS` show whole numbers as ``2``, not ``2.0`` (pandas upcasts an
      integer column with a missing value to float).
    * A column only a GPU fills (name containing ``GPU``, ``tflops`` or ``mfu``) that is empty in every
      row, on a CPU rehearsal, gets ``— n/a (CPU)`` appended to its header once and blank cells.
    * Every other missing cell shows :data:`MISSING` (``—``).

    Args:
        frame: a pandas DataFrame (not modified).
        rehearsal: True when the rows come from the CPU rehearsal; None infers it from a ``hardware``
            column (every value starting with ``CPU rehearsal``), else False.

    Returns:
        a new DataFrame (object columns where a cell was filled); the index is kept.

    Raises:
        TypeError: ``frame`` is not a DataFrame.
    """
    import pandas as pd
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"tidy_frame got {type(frame).__name__}: give a pandas DataFrame")
    out = frame.copy()
    if rehearsal is None:
        hw = out["hardware"] if "hardware" in out.columns else None
        rehearsal = bool(hw is not None and len(hw) and all(str(h).startswith("CPU rehearsal") for h in hw))
    renames = {}
    for col in list(out.columns):
        values = list(out[col])
        empty = all(_missing(v) for v in values)
        name = str(col)
        if empty and len(values) and rehearsal and any(m in name.lower() for m in _GPU_ONLY_MARKS):
            out[col] = [""] * len(values)
            renames[col] = name + CPU_NA
            continue
        whole = name in INTEGER_COLUMNS and all(
            _missing(v) or (isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer())
            for v in values)
        if whole:
            out[col] = pd.Series([MISSING if _missing(v) else int(v) for v in values], index=out.index, dtype=object)
        elif any(_missing(v) for v in values):
            out[col] = pd.Series([MISSING if _missing(v) else v for v in values], index=out.index, dtype=object)
    return out.rename(columns=renames)


def partition_line(run) -> str:
    """The per-rank share of the partitioned state a run recorded (``summary.json``'s ``zero_partition``, counted
    from DeepSpeed's own tensors by the training entry), as one line: ``ZeRO partition (kind): per-rank elements
    a, b of N (x % at most on one rank; 1/world = y %)``; a run that ended before its summary says so.

    Args:
        run: a :class:`~cookbook.launch.RunResult` (its ``summary`` and ``status``).
    """
    partition = (getattr(run, "summary", None) or {}).get("zero_partition")
    if not partition:
        return (f"ZeRO partition: not recorded — the run ended {getattr(run, 'status', None)} before it wrote its "
                "summary, where the per-rank partition is kept")
    shares = partition["per_rank_numel"]
    return (f"ZeRO partition ({partition['kind']}): per-rank elements {', '.join(f'{n:,}' for n in shares)} of "
            f"{partition['full_numel']:,} ({max(shares) / partition['full_numel']:.1%} at most on one rank; "
            f"1/{len(shares)} = {1 / len(shares):.1%})")


def batch_sweep_frame(estimates):
    """One row per batch shape: micro batch, sequence length, per-GPU model states, activations,
    total, the GPU memory, whether it fits, and the estimator's first reason."""
    import pandas as pd
    rows = []
    for e in estimates:
        rows.append({"micro batch": e.plan.micro_batch, "seq len": e.plan.seq_len,
                     "model states GiB": round(e.gpu_model_states_gib, 2),
                     "activations GiB": round(e.gpu_gib.get("activations", 0.0), 2),
                     "total GiB": round(e.gpu_gib["total"], 2), "GPU GiB": e.plan.gpu_memory_gib,
                     "fits": e.fits_gpu, "why": e.reasons[0] if e.reasons else ""})
    return pd.DataFrame(rows)


__all__ = ["CHECKED_QUANTITIES", "CPU_NA", "ESTIMATE_BAR_PCT", "WHY_COLUMN", "miss_reasons", "partition_line", "without_empty_why", "INTEGER_COLUMNS", "MISSING", "batch_sweep_frame", "check_cell", "estimate_check",
           "rounded", "run_row", "runs_frame", "tidy_frame"]
