"""Tables as a person reads them: no raw ``None``/``NaN``, counts as integers, GPU-only columns labelled
on the CPU rehearsal; and the tables of runs and of batch shapes the notebooks show.

* :func:`tidy_frame` — any pandas DataFrame made ready to show.
* :func:`runs_frame` — launched runs, one row each: status, hardware, loss, throughput, peaks, estimate.
* :func:`batch_sweep_frame` — estimates over micro batch × sequence length (:func:`cookbook.memory.batch_sweep`).

Units: GiB = 2**30 bytes; tokens/s and samples/s over the whole world (all ranks).
"""
from __future__ import annotations

from typing import Any, Mapping

from .results import as_record


def runs_frame(runs: Mapping[str, Any]):
    """One row per run: status, hardware, world size, steps, loss (first 5 → last 5 mean), throughput,
    measured peaks and the estimate.

    Args:
        runs: label -> :class:`~cookbook.launch.RunResult` or :func:`run_record` dict.

    Returns:
        a pandas DataFrame indexed by ``run``.
    """
    import pandas as pd
    rows = []
    for label, run in runs.items():
        r = as_record(run)
        rows.append({
            "run": label, "status": r.get("status"), "hardware": r.get("hardware"),
            "world size": r.get("world_size"), "steps": r.get("steps"),
            "loss first 5": rounded(r.get("first5_mean_loss"), 3), "loss last 5": rounded(r.get("last5_mean_loss"), 3),
            "tokens/s": rounded(r.get("tokens_per_s"), 1), "samples/s": rounded(r.get("samples_per_s"), 2),
            "step s": rounded(r.get("step_time_s"), 3),
            "MFU %": rounded(100 * r["mfu"], 2) if r.get("mfu") is not None else None,
            "peak GPU allocated GiB": rounded(r.get("peak_gpu_allocated_gib"), 2),
            "peak GPU reserved GiB": rounded(r.get("peak_gpu_reserved_gib"), 2),
            "peak host GiB": rounded(r.get("host_peak_gib"), 2),
            "estimate GPU reserved GiB": (rounded(r.get("estimate_gpu_gib"), 2)
                                          if r.get("estimate_device") == "cuda" else None),
            "estimate host GiB": rounded(r.get("estimate_host_gib"), 2),
            "duration s": r.get("duration_s"),
        })
    return tidy_frame(pd.DataFrame(rows).set_index("run")) if rows else pd.DataFrame()


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


__all__ = ["CPU_NA", "INTEGER_COLUMNS", "MISSING", "batch_sweep_frame", "rounded", "runs_frame", "tidy_frame"]
