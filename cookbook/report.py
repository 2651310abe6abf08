"""Tables and figures shared by the notebooks and the ``cookbook run-all`` report.

The notebooks are thin: they build a plan, call the library and show results. What two notebooks
(or a notebook and the run-all report) both need lives here:

* :class:`Recorder` — writes a notebook's results for the tests and the report into
  ``OUTPUT_DIR/results.json`` (rewritten after every call, so a failed cell leaves what came before)
  and its figures as PNG under ``OUTPUT_DIR/figures/``.
* :func:`run_record`, :func:`runs_frame`, :func:`plot_loss`, :func:`plot_runs` — a launched run
  (:class:`cookbook.launch.RunResult`) as a compact record, a table and figures.
* :func:`batch_sweep` / :func:`plot_batch_sweep` — the estimate over micro batch × sequence length
  (why ZeRO-2 cannot fit Qwen-14B on 24 GiB whatever the batch size).
* :func:`article_memory_table` — the source articles' memory arithmetic beside the correct numbers.
* :func:`throughput_ceiling` — hard upper bounds on throughput (compute and PCIe), to test a claim.
* :func:`scaled_budget_gib` — the CPU rehearsal's "device" budget, scaled from a real GPU.
* :func:`inspect_saved_model` — what a saved 16-bit model holds (and, when small, a reload with a loss).
* :func:`reference_results` / :func:`reference_frame` — results measured on GPUs (``data/reference``),
  tolerating their absence.
* :func:`write_html_report` — the run-all report: every notebook's headline, tables and figures, and a
  table comparing the ZeRO variants (memory, throughput, loss).

Units: GiB = 2**30 bytes, GB = 10**9 bytes (the articles' unit), tokens/s and samples/s over the
whole world (all ranks).
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from .models import DATA_DIR

GIB = 2 ** 30
GB = 10 ** 9

#: Results measured on GPUs by the maintainers (JSON files; see :func:`reference_results`).
REFERENCE_DIR = Path(os.environ.get("COOKBOOK_REFERENCE", DATA_DIR / "reference"))

#: The DeepSpeed configs printed in the three source articles, as found there (some are not valid JSON).
ARTICLE_CONFIG_DIR = DATA_DIR.parent / "tests" / "fixtures" / "seed_configs"

#: Facts recorded on real machines with ``cookbook env --dump-facts`` (RTX 4090 boxes, 2 × H200).
FACTS_DIR = DATA_DIR.parent / "tests" / "fixtures" / "facts"

#: PCIe 4.0 ×16, one direction, GB/s: 16 GT/s × 16 lanes × 128/130 encoding / 8 bits (PCI-SIG, PCI Express
#: Base Specification 4.0). The RTX 4090 is a PCIe 4.0 ×16 card (NVIDIA RTX 4090 specifications).
PCIE4_X16_GBPS = 31.5

#: Dense bf16 tensor-core peak of an RTX 4090 with FP32 accumulate, TFLOP/s (NVIDIA Ada Lovelace
#: architecture whitepaper, Table 2; also :data:`cookbook.train.PEAK_BF16_TFLOPS`).
RTX4090_BF16_TFLOPS = 165.2


class ReportError(ValueError):
    """A report input outside its domain; the message names it and the fix."""


# --------------------------------------------------------------------------------------------
# results.json and figures

def _jsonable(value: Any) -> Any:
    """Plain JSON values: DataFrames become lists of records, dataclasses dicts, paths strings."""
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        return json.loads(value.to_json(orient="records", default_handler=str))
    if hasattr(value, "to_dict") and callable(value.to_dict):
        try:
            return _jsonable(value.to_dict())
        except TypeError:
            pass
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Recorder:
    """Collects one notebook's results into ``OUTPUT_DIR/results.json`` for the tests and the report.

    Every call rewrites the file (atomically), so when a later cell fails, what the earlier ones
    recorded is still there. Figures go to ``OUTPUT_DIR/figures/NAME.png``.

    Args:
        output_dir: the notebook's output folder (created).
        notebook: the notebook's name without ``.ipynb`` (``02_zero2``).
        title: the notebook's title line.
        target: the hardware the notebook targets (``8 × RTX 4090 (24 GiB)``).
        rehearsal: True when this run is the CPU rehearsal (no GPU).
        **fields: more top-level fields to record now.

    The file holds ``notebook``, ``title``, ``target``, ``rehearsal``, ``started``, ``headline``
    (sentences with the numbers that matter), ``figures`` (paths relative to ``output_dir``),
    ``tables`` (name -> list of records), ``runs`` (label -> :func:`run_record`) and whatever the
    notebook adds with :meth:`add`.
    """

    def __init__(self, output_dir: str | os.PathLike, notebook: str, *, title: str = "", target: str = "",
                 rehearsal: bool = True, **fields):
        self.output_dir = Path(output_dir).resolve()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.output_dir / "results.json"
        self.data: dict[str, Any] = {
            "notebook": notebook, "title": title, "target": target, "rehearsal": bool(rehearsal),
            "started": _dt.datetime.now().isoformat(timespec="seconds"),
            "headline": [], "figures": [], "tables": {}, "runs": {},
        }
        self.add(**fields)

    def add(self, **fields) -> dict:
        """Record top-level fields (values made JSON-ready); returns the whole record."""
        for key, value in fields.items():
            self.data[key] = _jsonable(value)
        self.save()
        return self.data

    def headline(self, sentence: str) -> str:
        """Record one sentence for the report's summary of this notebook; returns it (to print)."""
        self.data["headline"].append(str(sentence))
        self.save()
        return sentence

    def table(self, name: str, frame):
        """Record a pandas DataFrame under ``tables[name]``; returns the frame (to display)."""
        self.data["tables"][name] = _jsonable(frame)
        self.save()
        return frame

    def run(self, label: str, result) -> dict:
        """Record a launched run (:class:`~cookbook.launch.RunResult`) under ``runs[label]``; returns the record."""
        rec = run_record(result)
        self.data["runs"][label] = rec
        self.save()
        return rec

    def figure(self, fig, name: str):
        """Save a matplotlib Figure as ``figures/NAME.png``, record it, close it in pyplot; returns the
        figure (display it as the cell's last expression: it shows once)."""
        folder = self.output_dir / "figures"
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        rel = str(path.relative_to(self.output_dir))
        if rel not in self.data["figures"]:
            self.data["figures"].append(rel)
        self.save()
        try:
            import matplotlib.pyplot as plt
            plt.close(fig)
        except Exception:  # noqa: BLE001 - closing is a display nicety
            pass
        return fig

    def save(self) -> Path:
        self.data["updated"] = _dt.datetime.now().isoformat(timespec="seconds")
        _atomic_write(self.path, json.dumps(self.data, indent=1, default=str))
        return self.path


def load_results(output_dir: str | os.PathLike) -> dict | None:
    """``OUTPUT_DIR/results.json`` as a dict, or None when the notebook wrote none."""
    path = Path(output_dir) / "results.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


# --------------------------------------------------------------------------------------------
# hardware of this run

def rehearsal() -> bool:
    """True when this machine has no NVIDIA GPU, so the notebooks run the CPU rehearsal.

    Uses NVML (:func:`cookbook.launch.on_gpu_machine`), so the notebook kernel never initialises CUDA.
    """
    from .launch import on_gpu_machine
    return not on_gpu_machine()


def hardware_label(result_or_summary=None) -> str:
    """Where a run ran, for labels: ``CPU rehearsal (2 ranks)`` or ``2 × NVIDIA H200``.

    Takes a :class:`~cookbook.launch.RunResult` or its summary dict; a run that left no summary
    (it failed before the end) is labelled from this machine (:func:`rehearsal`).
    """
    s = getattr(result_or_summary, "summary", result_or_summary)
    if not isinstance(s, Mapping) or not s:
        return "CPU rehearsal" if rehearsal() else "GPU"
    device = s.get("device") or "cpu"
    world = s.get("world_size")
    if device == "cpu":
        return f"CPU rehearsal ({world} rank{'s' if world != 1 else ''})" if world else "CPU rehearsal"
    return f"{world} × {device}" if world else str(device)


def scaled_budget_gib(gpu_memory_gib: float, model: str, target_model: str) -> float:
    """The CPU rehearsal's per-rank "device" budget: a real GPU's memory scaled by parameter count.

    ``budget = gpu_memory_gib × N(model) / N(target_model)``: the tiny model gets the same memory per
    parameter as ``target_model`` has on a ``gpu_memory_gib`` card (24 GiB / 14.17e9 parameters =
    1.82 bytes per parameter for Qwen-14B on an RTX 4090), so a ZeRO variant that holds more than that
    per parameter on the device runs out on both.

    Raises:
        ReportError: ``gpu_memory_gib`` not positive.
        cookbook.models.ModelNotFoundError: a model cannot be found.
    """
    from .models import model_spec
    if not (isinstance(gpu_memory_gib, (int, float)) and gpu_memory_gib > 0):
        raise ReportError(f"gpu_memory_gib={gpu_memory_gib!r}: give the real GPU's memory in GiB (24 for an RTX 4090)")
    return float(gpu_memory_gib) * model_spec(model).num_params / model_spec(target_model).num_params


# --------------------------------------------------------------------------------------------
# runs

_SUMMARY_KEYS = ("world_size", "device", "steps", "first_loss", "last_loss", "first5_mean_loss", "last5_mean_loss",
                 "tokens_per_s", "samples_per_s", "step_time_s", "tflops", "mfu", "peak_gpu_allocated_gib",
                 "peak_gpu_reserved_gib", "host_peak_gib", "model", "num_params", "zero_stage", "offload_optimizer",
                 "offload_param", "precision", "micro_batch", "grad_accum", "seq_len", "global_batch")


def run_record(result) -> dict:
    """A launched run as a compact JSON-ready dict (what ``results.json`` keeps of it).

    Args:
        result: a :class:`cookbook.launch.RunResult` (or a dict with its fields).

    Returns:
        ``status``, ``ok``, ``message``, ``command``, ``run_dir``, ``duration_s``, the summary's numbers
        (:data:`_SUMMARY_KEYS`: loss, throughput, peaks, batch shape), ``loss_fell`` (mean of the last
        5 losses below the first 5), ``losses`` (per step), ``hardware`` (:func:`hardware_label`),
        ``estimate_gpu_gib`` / ``estimate_host_gib`` (the launch's estimate), ``estimate_vs_measured``,
        ``save_verification``, and ``details`` without the full traceback (its last lines kept).
    """
    get = (lambda k, d=None: result.get(k, d)) if isinstance(result, Mapping) else (
        lambda k, d=None: getattr(result, k, d))
    summary = get("summary") or {}
    metrics = get("metrics") or []
    est = get("estimate") or {}
    details = dict(get("details") or {})
    tb = details.pop("traceback", None)
    if tb:
        details["traceback_tail"] = "\n".join(str(tb).strip().splitlines()[-6:])
    rec = {"status": get("status"), "ok": get("status") == "ok", "message": get("message"),
           "command": get("command"), "run_dir": get("run_dir"), "duration_s": round(float(get("duration_s") or 0), 1),
           "returncode": get("returncode"), "hardware": hardware_label(summary or None)}
    for key in _SUMMARY_KEYS:
        rec[key] = summary.get(key)
    f5, l5 = summary.get("first5_mean_loss"), summary.get("last5_mean_loss")
    rec["loss_fell"] = bool(f5 is not None and l5 is not None and l5 < f5)
    rec["losses"] = [m.get("loss") for m in metrics]
    rec["estimate_gpu_gib"] = (est.get("gpu_gib") or {}).get("total") if isinstance(est, Mapping) else None
    rec["estimate_host_gib"] = (est.get("host_gib") or {}).get("total") if isinstance(est, Mapping) else None
    rec["estimate_device"] = est.get("device") if isinstance(est, Mapping) else None
    rec["estimate_vs_measured"] = summary.get("estimate_vs_measured")
    rec["save_verification"] = summary.get("save_verification")
    rec["details"] = _jsonable(details)
    return _jsonable(rec)


def _as_record(run) -> dict:
    if isinstance(run, Mapping) and "status" in run and "losses" in run:
        return dict(run)
    return run_record(run)


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
        r = _as_record(run)
        rows.append({
            "run": label, "status": r.get("status"), "hardware": r.get("hardware"),
            "world size": r.get("world_size"), "steps": r.get("steps"),
            "loss first 5": _round(r.get("first5_mean_loss"), 3), "loss last 5": _round(r.get("last5_mean_loss"), 3),
            "tokens/s": _round(r.get("tokens_per_s"), 1), "samples/s": _round(r.get("samples_per_s"), 2),
            "step s": _round(r.get("step_time_s"), 3),
            "peak GPU reserved GiB": _round(r.get("peak_gpu_reserved_gib"), 2),
            "peak host GiB": _round(r.get("host_peak_gib"), 2),
            "estimate GPU GiB": _round(r.get("estimate_gpu_gib"), 2) if r.get("estimate_device") == "cuda" else None,
            "estimate host GiB": _round(r.get("estimate_host_gib"), 2),
            "duration s": r.get("duration_s"),
        })
    return tidy_frame(pd.DataFrame(rows).set_index("run")) if rows else pd.DataFrame()


def _round(v, n):
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
    """
    import pandas as pd
    if not isinstance(frame, pd.DataFrame):
        raise ReportError(f"tidy_frame got {type(frame).__name__}: give a pandas DataFrame")
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


def _new_figure(*, nrows: int = 1, ncols: int = 1, figsize=(7, 4)):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize)
    return fig, axes


def plot_host_ram(estimates):
    """Host-RAM breakdown per variant (:func:`cookbook.memory.plot_breakdown` with ``where="host"``), wide
    enough for the two-line variant labels under each bar. Returns the matplotlib Figure."""
    from . import memory
    fig = memory.plot_breakdown(estimates, where="host")
    fig.set_size_inches(9, 4.5)
    fig.tight_layout()
    return fig


def plot_loss(runs: Mapping[str, Any], ax=None, *, title: str = "training loss"):
    """Loss per optimizer step of one or more runs (runs without steps are listed in the legend as such).

    Args:
        runs: label -> :class:`~cookbook.launch.RunResult`, :func:`run_record` dict, or a list of losses.
        ax: a matplotlib Axes (default: a new figure).

    Returns:
        the matplotlib Figure.
    """
    if ax is None:
        fig, ax = _new_figure()
    else:
        fig = ax.figure
    for label, run in runs.items():
        losses = list(run) if isinstance(run, (list, tuple)) else _as_record(run).get("losses") or []
        losses = [x for x in losses if x is not None]
        if losses:
            ax.plot(range(1, len(losses) + 1), losses, marker=".", label=label)
        else:
            status = run.get("status") if isinstance(run, Mapping) else getattr(run, "status", "no steps")
            ax.plot([], [], label=f"{label}: {status}, no steps")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (mean over ranks)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_runs(runs: Mapping[str, Any], *, title: str = ""):
    """Two panels per run: memory (estimate beside measured peak) and throughput (tokens/s).

    Memory is the GPU peak (``max_memory_reserved``) on GPU runs, the host RSS peak (all ranks of the
    machine) on the CPU rehearsal; the estimate is the one for the same quantity.

    Returns:
        the matplotlib Figure.
    """
    fig, (ax_m, ax_t) = _new_figure(ncols=2, figsize=(max(11.0, 2.4 * len(runs)), 4.5))
    labels, est, meas, tput, unit = [], [], [], [], set()
    for label, run in runs.items():
        r = _as_record(run)
        labels.append(label.replace(" + ", "\n+ "))
        on_gpu = r.get("estimate_device") == "cuda" or (r.get("device") not in (None, "cpu"))
        if on_gpu:
            unit.add("GPU GiB per rank (reserved)")
            est.append(r.get("estimate_gpu_gib") or 0.0)
            meas.append(r.get("peak_gpu_reserved_gib") or 0.0)
        else:
            unit.add("host GiB (all ranks)")
            est.append(r.get("estimate_host_gib") or 0.0)
            meas.append(r.get("host_peak_gib") or 0.0)
        tput.append(r.get("tokens_per_s") or 0.0)
    x = list(range(len(labels)))
    for ax in (ax_m, ax_t):
        ax.set_xlim(-0.75, len(labels) - 0.25)
    ax_m.bar([i - 0.2 for i in x], est, width=0.4, label="estimate", color="#9ecae1")
    ax_m.bar([i + 0.2 for i in x], meas, width=0.4, label="measured peak", color="#3182bd")
    ax_m.set_xticks(x)
    ax_m.set_xticklabels(labels, fontsize=8)
    ax_m.set_ylabel(" / ".join(sorted(unit)) or "GiB")
    ax_m.set_title("memory: estimate beside measurement")
    ax_m.legend(fontsize=8)
    ax_t.bar(x, tput, color="#31a354")
    ax_t.set_xticks(x)
    ax_t.set_xticklabels(labels, fontsize=8)
    ax_t.set_ylabel("tokens/s (all ranks, median step)")
    ax_t.set_title("throughput")
    for i, v in zip(x, tput):
        ax_t.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# the estimate over batch shapes

def batch_sweep(plan, micro_batches: Iterable[int] = (1, 2, 4, 8), seq_lens: Iterable[int] = (256, 512, 1024),
                **estimate_kwargs) -> list:
    """Estimate ``plan`` at every micro batch × sequence length (the articles' "we lowered the batch
    size from 8 to 1 and the sequence length from 1024 to 256").

    Returns:
        a list of :class:`cookbook.memory.MemoryEstimate`, micro batch outer, sequence length inner.
    """
    from .memory import estimate
    return [estimate(plan.replace(micro_batch=b, seq_len=s), **estimate_kwargs)
            for b in micro_batches for s in seq_lens]


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


def plot_batch_sweep(estimates, ax=None):
    """Stacked per-GPU breakdown for each batch shape (``cookbook.memory.plot_breakdown``), labelled
    by micro batch × sequence length, with the GPU's memory as a dashed line.

    Returns:
        the matplotlib Figure.
    """
    from .memory import plot_breakdown
    ests = list(estimates)
    fig = plot_breakdown(ests, ax=ax)
    ax = fig.axes[0]
    ax.set_xticks(list(range(len(ests))))
    ax.set_xticklabels([f"{e.plan.micro_batch}×{e.plan.seq_len}" for e in ests], fontsize=8)
    ax.set_xlabel("micro batch × sequence length")
    p = ests[0].plan
    ax.set_title(f"{p.label}, {p.model} on {p.num_gpus} × {p.gpu_memory_gib:g} GiB: every batch shape")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# the articles' arithmetic

#: Memory arithmetic as printed in the source articles (``/shared/seeds``), per model: component ->
#: (bytes per parameter the article uses, GB the article states), with the article and section.
ARTICLE_MEMORY_CLAIMS = {
    "qwen-14b": {
        "source": "article 002 (Ubuntu 22.04 / Qwen-14B on 8×RTX 4090), section 4.2 '内存占用分析'",
        "params_b": 14.0,
        "items": {"params_16bit": (2, 28.0), "grads_16bit": (2, 28.0), "master_fp32": (None, None),
                  "adam_states": (8, 112.0), "grads_fp32": (None, None), "activations": (None, 50.0)},
        "total": 218.0,
        "other": ["article 000, section 1: 'parameters + optimizer + gradients + intermediates ≈ 112 GB', "
                  "and 8 × 24 GB = 192 GB 'should be enough'"],
    },
    "llama-7b": {
        "source": "article 001 (LLaMA 7B on one RTX 4090), section 1.1 '显存困境的本质分析'",
        "params_b": 7.0,
        "items": {"params_16bit": (2, 14.0), "grads_16bit": (2, 14.0), "master_fp32": (4, 28.0),
                  "adam_states": (8, 56.0), "grads_fp32": (None, None), "activations": (None, 2.0)},
        "total": 86.0,
        "other": ["the article's own items add up to 114 GB, not the 86 GB it states"],
    },
}

_ARTICLE_ROWS = {
    "params_16bit": ("16-bit parameters", 2, "ZeRO paper §3: 2 bytes per parameter"),
    "grads_16bit": ("16-bit gradients", 2, "ZeRO paper §3: 2 bytes per parameter"),
    "master_fp32": ("fp32 master weights", 4, "ZeRO paper §3: mixed-precision Adam keeps an fp32 copy (4 bytes)"),
    "adam_states": ("Adam m and v (fp32)", 8, "ZeRO paper §3: momentum + variance, 4 + 4 bytes"),
    "grads_fp32": ("fp32 gradient partition", 4,
                   "DeepSpeed estimate_zero2/3_model_states_mem_needs count 4 more bytes (fp32 gradients)"),
}


def article_memory_table(plan, *, bf16_states: bool = False):
    """The article's memory arithmetic beside the correct numbers for ``plan.model``.

    Correct bytes per parameter: ZeRO paper (Rajbhandari et al. 2020, §3): 2 + 2 + 4 + 8 for
    mixed-precision Adam, plus DeepSpeed's 4-byte fp32 gradient partition (its own estimators,
    ``deepspeed/runtime/zero/stage_1_and_2.py`` / ``stage3.py``); N is the exact parameter count
    of the architecture (:func:`cookbook.models.model_spec`); activations from
    :func:`cookbook.memory.estimate` for ``plan`` (per GPU, the plan's micro batch and sequence length).

    Args:
        plan: a :class:`cookbook.plan.Plan` whose model has article claims (``qwen-14b``, ``llama-7b``).

    Returns:
        DataFrame with columns component, ``article B/param``, ``article GB``, ``correct B/param``,
        ``correct GB``, ``correct GiB``, source; the last rows are the totals and, for the sharded
        plan, the per-GPU numbers under the plan's ZeRO stage.

    Raises:
        ReportError: no article claims for the model.
    """
    import pandas as pd
    from .memory import estimate
    from .models import model_spec
    claims = ARTICLE_MEMORY_CLAIMS.get(str(plan.model))
    if claims is None:
        raise ReportError(f"plan.model={plan.model!r}: the articles give memory arithmetic only for "
                          f"{', '.join(ARTICLE_MEMORY_CLAIMS)}")
    n = model_spec(plan.model).num_params
    est = estimate(plan, bf16_states=bf16_states)
    rows = []
    total_article_items = 0.0
    total_correct = 0.0
    for key, (label, bpp, source) in _ARTICLE_ROWS.items():
        a_bpp, a_gb = claims["items"].get(key, (None, None))
        total_article_items += a_gb or 0.0
        total_correct += bpp * n
        rows.append({"component": label, "article B/param": a_bpp, "article GB": a_gb if a_gb is not None else "omitted",
                     "correct B/param": bpp, "correct GB": round(bpp * n / GB, 1), "correct GiB": round(bpp * n / GIB, 1),
                     "source": source})
    act = est.gpu_gib.get("activations", 0.0)
    a_act = claims["items"].get("activations", (None, None))[1]
    total_article_items += a_act or 0.0
    rows.append({"component": f"activations (micro batch {plan.micro_batch} × {plan.seq_len} tokens, "
                              f"{'with' if plan.gradient_checkpointing else 'without'} checkpointing, per GPU)",
                 "article B/param": None, "article GB": a_act, "correct B/param": None,
                 "correct GB": round(act * GIB / GB, 1), "correct GiB": round(act, 2),
                 "source": "Korthikanti et al. 2022 §4.1 + logits (cookbook.memory.activation_bytes)"})
    rows.append({"component": "TOTAL model states (all GPUs together)", "article B/param": None,
                 "article GB": f"{claims['total']:g} stated ({total_article_items:g} from its items)",
                 "correct B/param": 20, "correct GB": round(total_correct / GB, 1),
                 "correct GiB": round(total_correct / GIB, 1), "source": "sum of the rows above"})
    rows.append({"component": f"per GPU under {plan.label} on {plan.num_gpus} GPU(s) (model states)",
                 "article B/param": None, "article GB": "not computed", "correct B/param": None,
                 "correct GB": round(est.gpu_model_states_gib * GIB / GB, 1),
                 "correct GiB": round(est.gpu_model_states_gib, 1),
                 "source": "cookbook.memory.estimate (= DeepSpeed's estimators)"})
    rows.append({"component": f"per GPU under {plan.label}, everything (the verdict)", "article B/param": None,
                 "article GB": "not computed", "correct B/param": None,
                 "correct GB": round(est.gpu_gib['total'] * GIB / GB, 1), "correct GiB": round(est.gpu_gib["total"], 1),
                 "source": "cookbook.memory.estimate: " + (est.reasons[0] if est.reasons else "")})
    frame = pd.DataFrame(rows)
    frame.attrs["source"] = claims["source"]
    frame.attrs["other"] = list(claims.get("other", []))
    return frame


def article_config(name: str) -> dict:
    """A DeepSpeed config printed in an article, by file stem (``002_qwen14b_zero2``), parsed as JSON.

    Raises:
        ReportError: unknown name (lists the available ones) or the article's text is not valid JSON
            (lint it with :func:`cookbook.lint.lint` to see why).
    """
    path = ARTICLE_CONFIG_DIR / f"{name}.json"
    if not path.is_file():
        have = sorted(p.stem for p in ARTICLE_CONFIG_DIR.glob("*.json"))
        raise ReportError(f"article config {name!r} not found in {ARTICLE_CONFIG_DIR}; available: {', '.join(have)}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReportError(f"article config {name!r} is not valid JSON ({exc}); run cookbook.lint.lint on "
                          f"{path} to see each problem and its fix") from None


def article_config_path(name: str) -> Path:
    """Path of an article's config (see :func:`article_config`); may not be valid JSON."""
    return ARTICLE_CONFIG_DIR / f"{name}.json"


# --------------------------------------------------------------------------------------------
# throughput bounds

def throughput_ceiling(plan, *, peak_tflops: float = RTX4090_BF16_TFLOPS, pcie_gbps: float = PCIE4_X16_GBPS) -> dict:
    """Hard upper bounds on training throughput for ``plan`` (samples/s over the world).

    * compute: every GPU at 100 % of ``peak_tflops`` doing the model's FLOPs per token
      (:func:`cookbook.train.flops_per_token`: 6·N for forward + backward, Kaplan et al. 2020,
      plus attention; with gradient checkpointing one more forward, 2·N, Chen et al. 2016);
    * PCIe, with parameter offload (ZeRO-Infinity, Rajbhandari et al. 2021, §5): the 16-bit
      parameters cross host→GPU at least twice per micro batch (forward, and backward with its
      recompute), ``2·2·N`` bytes per GPU at ``pcie_gbps`` (theoretical one-direction bandwidth;
      each GPU has its own link). The optimizer step on the CPU (CPU Adam over all N parameters) is
      not counted, so the real number is lower still.

    Returns:
        ``{"compute_samples_per_s", "pcie_samples_per_s" (None without parameter offload),
        "ceiling_samples_per_s", "flops_per_token", "pcie_bytes_per_micro_batch"}``.
    """
    from .models import model_spec
    from .train import flops_per_token
    spec = model_spec(plan.model)
    fpt = flops_per_token(spec.num_params, spec.num_layers, spec.hidden_size, plan.seq_len)
    if plan.gradient_checkpointing:
        fpt *= 4 / 3  # one more forward (2 of the 6 FLOPs per parameter and token)
    compute = plan.num_gpus * peak_tflops * 1e12 / (fpt * plan.seq_len)
    pcie = None
    traffic = None
    if plan.offload_param != "none":
        traffic = 2 * 2 * spec.num_params  # bytes host->GPU per micro batch per GPU
        pcie = plan.num_gpus * plan.micro_batch * pcie_gbps * GB / traffic
    ceiling = min(x for x in (compute, pcie) if x is not None)
    return {"compute_samples_per_s": compute, "pcie_samples_per_s": pcie, "ceiling_samples_per_s": ceiling,
            "flops_per_token": fpt, "pcie_bytes_per_micro_batch": traffic}


# --------------------------------------------------------------------------------------------
# saved models

def inspect_saved_model(folder: str | os.PathLike, *, full_load_max_params: float = 2e9,
                        eval_examples: int = 8, seq_len: int = 128) -> dict:
    """What a saved 16-bit model folder holds, read back from disk, and (when small) a real reload.

    Reads the safetensors headers (names, shapes, dtypes; no tensor data), so it is cheap for any
    size. When the model has at most ``full_load_max_params`` parameters it is also loaded with
    ``transformers.AutoModelForCausalLM.from_pretrained`` and its loss computed on the first
    ``eval_examples`` shipped examples (truncated to ``seq_len`` tokens) with the saved tokenizer.

    Returns:
        ``{"folder", "files", "tensors", "params", "bytes", "dtypes", "empty_tensors", "reloaded",
        "reload_loss", "reload_params"}`` (reload fields None when not loaded).

    Raises:
        ReportError: the folder has no safetensors weights.
    """
    from safetensors import safe_open
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ReportError(f"{folder}: no *.safetensors files; was the run saved (final_save=True) and did it finish?")
    tensors, params, dtypes, empty = 0, 0, set(), []
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():
                sl = st.get_slice(name)
                shape = sl.get_shape()
                numel = math.prod(shape)
                tensors += 1
                params += numel
                dtypes.add(str(sl.get_dtype()))
                if numel == 0:
                    empty.append(name)
    out = {"folder": str(folder), "files": [f.name for f in files], "tensors": tensors, "params": params,
           "bytes": sum(f.stat().st_size for f in files), "dtypes": sorted(dtypes), "empty_tensors": empty,
           "reloaded": False, "reload_loss": None, "reload_params": None}
    if params <= full_load_max_params:
        import torch
        from transformers import AutoModelForCausalLM
        from .data import collate, load_records, load_tokenizer, tokenize
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        model.eval()
        tok = load_tokenizer(folder if (folder / "tokenizer_config.json").is_file() else None)
        records = load_records(None).select(range(eval_examples))
        data = tokenize(records, tok, seq_len)
        batch = collate(data.input_ids, data.labels, tok.pad_token_id)
        with torch.no_grad():
            loss = float(model(**batch).loss)
        out.update(reloaded=True, reload_loss=loss,
                   reload_params=sum(p.numel() for p in model.parameters()),
                   reload_dtype=str(next(model.parameters()).dtype))
    return out


# --------------------------------------------------------------------------------------------
# reference results measured on GPUs

#: Which GPU measurements each notebook shows, for records without a ``notebook`` field: the
#: benchmark groups of ``data/reference`` (``group``) and the ZeRO variants (``label``) that retell
#: that notebook's step. ``None`` means any. (``issue10``: Qwen2.5-3B on 2 ranks, the per-rank model
#: states of Qwen-14B on 8; ``ladder_*``: the ZeRO ladder on a 3B model; ``llama7b_1rank``, ``stock``,
#: ``bf16_states``: LLaMA-class runs on one GPU.)
REFERENCE_SELECTION = {
    "01": ({"issue10"}, None),
    "02": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-2", "ZeRO-2 + opt→cpu")),
    "03": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-3",)),
    "04": ({"issue10", "ladder_1rank", "ladder_2rank"}, ("ZeRO-3 + opt→cpu", "ZeRO-3 + opt→cpu + param→cpu")),
    "05": ({"issue10", "ladder_2rank"}, None),
    "06": ({"llama7b_1rank", "bf16_states", "stock", "ladder_1rank"}, None),
}


def _records_of(data) -> list[dict]:
    """The run records in one reference file: a list, or a dict with ``rungs``/``runs``/``results``
    (its other keys shared by every record, under ``_common``), or a dict that is itself one record."""
    if isinstance(data, list):
        return [dict(r) for r in data if isinstance(r, Mapping)]
    if not isinstance(data, Mapping):
        return []
    for key in ("rungs", "runs", "results"):
        if isinstance(data.get(key), list):
            common = {k: v for k, v in data.items() if k not in ("rungs", "runs", "results")}
            return [dict(r, _common=common) for r in data[key] if isinstance(r, Mapping)]
    return [dict(data)] if "status" in data or "summary" in data else []


def _selected(record: Mapping, prefix: str | None, filename: str) -> bool:
    if prefix is None:
        return True
    nb = str(record.get("notebook") or "")
    if nb:
        return nb.startswith(prefix)
    if filename[:2].isdigit():
        return filename.startswith(prefix)
    groups, labels = REFERENCE_SELECTION.get(prefix, (set(), None))
    if record.get("group") not in groups:
        return False
    return labels is None or _variant(record) in labels


def reference_results(notebook: str | None = None, directory: str | os.PathLike | None = None) -> list[dict]:
    """Results measured on GPUs, from ``data/reference/*.json``; an empty list when there are none.

    Each file holds a list of run records, a dict with a ``rungs``/``runs``/``results`` list (its
    other keys — machine, versions, … — are shared by every record and kept under ``_common``), or
    one record. A record is kept for ``notebook`` (``"02"`` or ``"02_zero2"``) when its ``notebook``
    field starts with the number, else when the file name does, else by :data:`REFERENCE_SELECTION`;
    ``notebook=None`` keeps all. Every record gets ``_file``. Files that are not run records (loss
    curves, raw logs) are ignored; unreadable files too, except that with ``notebook=None`` each one
    appears as a record with ``_error`` saying why.
    """
    folder = Path(directory) if directory else REFERENCE_DIR
    if not folder.is_dir():
        return []
    prefix = None if notebook is None else str(notebook).split("_")[0]
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            if prefix is None:
                out.append({"_file": path.name, "_error": f"{type(exc).__name__}: {exc}"})
            continue
        for r in _records_of(data):
            r["_file"] = path.name
            if _selected(r, prefix, path.name):
                out.append(r)
    return out


def reference_notes(directory: str | os.PathLike | None = None) -> list[str]:
    """What each reference file says about itself: its ``what`` line and each ``not_run`` entry
    (what could not be measured, and why), prefixed with the file name; [] when there are none."""
    folder = Path(directory) if directory else REFERENCE_DIR
    notes = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, Mapping) and _records_of(data):
            if data.get("what"):
                notes.append(f"{path.name}: {data['what']}")
            notes += [f"{path.name}: not run: {n}" for n in data.get("not_run") or []]
    return notes


def _pick(record: Mapping, *keys):
    for key in keys:
        for where in (record, record.get("summary") or {}, record.get("measured") or {}, record.get("plan") or {},
                      record.get("_common") or {}):
            if isinstance(where, Mapping) and where.get(key) is not None:
                return where[key]
    return None


def _variant(record: Mapping) -> str | None:
    variant = _pick(record, "variant", "label", "preset")
    if variant is None and _pick(record, "zero_stage") is not None:
        variant = f"ZeRO-{_pick(record, 'zero_stage')}"
        for k, short in (("offload_optimizer", "opt"), ("offload_param", "param")):
            v = _pick(record, k)
            if v and v != "none":
                variant += f" + {short}→{v}"
    return variant


def _hardware(record: Mapping) -> str:
    """``2 × NVIDIA H200 capped at 24 GiB`` from a record's own fields or its file's machine/versions."""
    common = record.get("_common") or {}
    hw = _pick(record, "hardware", "gpu", "gpu_name", "device")
    if isinstance(hw, Mapping):
        hw = hw.get("name")
    versions = common.get("versions") or {}
    if not hw and versions.get("gpus"):
        hw = versions["gpus"][0]
    if not hw and isinstance(common.get("machine"), Mapping):
        hw = common["machine"].get("gpus")
    world = _pick(record, "world_size", "num_gpus")
    cap = _pick(record, "emulate_gpu_memory_gib", "gpu_memory_cap_gib")
    total = versions.get("gpu_memory_gib")
    if cap is None and isinstance(total, (int, float)):
        planned = (record.get("plan") or {}).get("gpu_memory_gib")
        cap = planned if isinstance(planned, (int, float)) and planned < total - 1 else None
    text = f"{world} × {hw}" if (hw and world and " x " not in str(hw)) else (hw or "GPU (unlabelled)")
    return f"{text} capped at {cap:g} GiB" if isinstance(cap, (int, float)) else str(text)


def _mean(values, first: bool):
    """Mean of the first (last) 5 losses; for runs under 10 steps the first (last) loss itself, so a
    short run's two columns do not average the same steps."""
    vals = [v for v in (values or []) if isinstance(v, (int, float))]
    k = 5 if len(vals) >= 10 else 1
    part = vals[:k] if first else vals[-k:]
    return round(sum(part) / len(part), 3) if part else None


def reference_frame(notebook: str | None = None, directory: str | os.PathLike | None = None):
    """:func:`reference_results` as a table labelled with the hardware each result came from
    (columns: hardware, run, model, world size, status, loss first/last (means of the first/last 5
    steps), tokens/s, projected RTX 4090 tokens/s where the benchmark gives one, peak GPU GiB, peak
    host GiB, file); an empty DataFrame when there are none."""
    import pandas as pd
    rows = []
    for r in reference_results(notebook, directory):
        if "_error" in r:
            continue
        model = _pick(r, "model")
        losses = r.get("losses")
        projection = r.get("projection_rtx4090") or {}
        rows.append({"hardware": _hardware(r), "run": _variant(r), "name": r.get("name"),
                     "model": Path(str(model)).name if model else None,
                     "world size": _pick(r, "world_size", "num_gpus"), "status": _pick(r, "status"),
                     "loss first": _pick(r, "first5_mean_loss") or _mean(losses, True),
                     "loss last": _pick(r, "last5_mean_loss") or _mean(losses, False),
                     "tokens/s": _pick(r, "tokens_per_s"),
                     "RTX 4090 projection tokens/s": _round(projection.get("tokens_per_s"), 1),
                     "peak GPU GiB": _round(_pick(r, "peak_gpu_reserved_gib", "peak_gpu_gib", "peak_gpu_allocated_gib"), 2),
                     "peak host GiB": _round(_pick(r, "host_peak_gib"), 2), "file": r["_file"]})
    return tidy_frame(pd.DataFrame(rows), rehearsal=False)


def beside_reference(runs: Mapping[str, Any], notebook: str, directory: str | os.PathLike | None = None):
    """This notebook's runs and the GPU measurements for the same notebook in one table, each row
    labelled with the hardware it came from (columns: hardware, run, status, world size, loss first,
    loss last, tokens/s, peak GPU GiB, peak host GiB, source).

    Args:
        runs: label -> :class:`~cookbook.launch.RunResult` or :func:`run_record` dict (this run).
        notebook: ``"02"`` or ``"02_zero2"`` (see :func:`reference_results`).
    """
    import pandas as pd
    rows = []
    for label, run in runs.items():
        r = _as_record(run)
        rows.append({"hardware": r.get("hardware"), "run": label, "status": r.get("status"),
                     "world size": r.get("world_size"), "loss first": _round(r.get("first5_mean_loss"), 3),
                     "loss last": _round(r.get("last5_mean_loss"), 3), "tokens/s": _round(r.get("tokens_per_s"), 1),
                     "peak GPU GiB": _round(r.get("peak_gpu_reserved_gib"), 2),
                     "peak host GiB": _round(r.get("host_peak_gib"), 2), "source": "this run"})
    ref = reference_frame(notebook, directory)
    for _, r in ref.iterrows():
        rows.append({"hardware": r["hardware"], "run": f"{r['run']} ({r['model']})", "status": r["status"],
                     "world size": r["world size"],
                     "loss first": r["loss first"], "loss last": r["loss last"], "tokens/s": r["tokens/s"],
                     "peak GPU GiB": r["peak GPU GiB"], "peak host GiB": r["peak host GiB"],
                     "source": f"data/reference/{r['file']}"})
    return tidy_frame(pd.DataFrame(rows), rehearsal=False)


# --------------------------------------------------------------------------------------------
# the run-all report

def variants_frame(results: Iterable[Mapping]):
    """The ZeRO variants side by side, from the notebooks' ``results.json``: one row per recorded run
    (notebook, run, hardware, status, memory estimate and measurement, throughput, loss)."""
    import pandas as pd
    rows = []
    for res in results:
        if not res:
            continue
        for label, r in (res.get("runs") or {}).items():
            gpu = r.get("estimate_device") == "cuda"
            rows.append({
                "notebook": res.get("notebook"), "run": label, "hardware": r.get("hardware") or "",
                "status": r.get("status"), "world size": r.get("world_size"),
                "memory estimate GiB": _round(r.get("estimate_gpu_gib") if gpu else r.get("estimate_host_gib"), 2),
                "memory measured GiB": _round(r.get("peak_gpu_reserved_gib") if gpu else r.get("host_peak_gib"), 2),
                "memory of": "GPU (per rank)" if gpu else "host (all ranks)",
                "tokens/s": _round(r.get("tokens_per_s"), 1),
                "loss first 5": _round(r.get("first5_mean_loss"), 3), "loss last 5": _round(r.get("last5_mean_loss"), 3),
            })
    return tidy_frame(pd.DataFrame(rows))


def rehearsal_memory_note(num_params: int | None = None) -> str:
    """One sentence saying why the CPU rehearsal's measured memory is nearly the same for every ZeRO variant.

    In the rehearsal the measured peak is the host RSS of all ranks, dominated by the Python/torch/DeepSpeed
    runtime (:data:`cookbook.memory.RUNTIME_BASELINE_GIB` per rank, measured on the rehearsal), while the
    model states of the tiny model are megabytes: 16 bytes per parameter with mixed-precision Adam (2 + 2
    for 16-bit parameters and gradients, 4 + 4 + 4 for fp32 master weights and Adam m, v; ZeRO paper,
    Rajbhandari et al. 2020, §3.1).

    Args:
        num_params: the rehearsal model's parameter count, to state its model states in MiB; None omits it.
    """
    from .memory import RUNTIME_BASELINE_GIB
    states = (f" (16 B/param × {int(num_params):,} parameters = {16 * int(num_params) / 2**20:.1f} MiB)"
              if isinstance(num_params, (int, float)) and num_params > 0 else "")
    return (f"Why the CPU rehearsal's measured memory hardly differs between ZeRO variants: it is the host RSS of "
            f"all ranks, and the Python/torch/DeepSpeed runtime (~{RUNTIME_BASELINE_GIB:g} GiB per rank, measured) "
            f"dominates it, while the tiny model's states are megabytes{states}; the variants differ only at real "
            f"model sizes — see the estimates, and the GPU measurements in data/reference/ (each labelled with its "
            f"hardware) where they exist.")


def same_math(runs: Mapping[str, Mapping]) -> list[str]:
    """Sentences comparing the loss curves of runs that differ only in ZeRO variant (same model, world
    size, batch shape, precision and steps): ZeRO changes where the states live, not the arithmetic,
    so their losses should agree step by step up to reduction order.

    Args:
        runs: label -> :func:`run_record` dict.
    """
    groups: dict[tuple, list[str]] = {}
    for label, r in runs.items():
        key = tuple(r.get(k) for k in ("model", "world_size", "micro_batch", "grad_accum", "seq_len", "precision", "steps"))
        if r.get("losses") and None not in key:
            groups.setdefault(key, []).append(label)
    out = []
    for key, labels in groups.items():
        variants = {(runs[l].get("zero_stage"), runs[l].get("offload_optimizer"), runs[l].get("offload_param")) for l in labels}
        if len(variants) < 2:
            continue
        curves = [runs[l]["losses"] for l in labels]
        diff = max(abs(a - b) for c in curves[1:] for a, b in zip(curves[0], c))
        last5 = [sum(c[-5:]) / len(c[-5:]) for c in curves]
        out.append(f"{', '.join(labels)} ({key[0]}, {key[1]} ranks, {key[6]} steps): ZeRO changes where the states "
                   f"live, not the arithmetic — the loss curves differ by at most {diff:.3g} at any step (bf16 "
                   f"rounding, reduction order) and their last-5-step means lie within {max(last5) - min(last5):.3g}.")
    return out


def _img_tag(path: Path, embed: bool) -> str:
    if embed:
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<img src="data:image/png;base64,{data}" style="max-width:100%">'
    return f'<img src="{html.escape(str(path))}" style="max-width:100%">'


_CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.6em 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.ok{color:#2e7d32}.fail{color:#c62828}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:12px}section{border-top:1px solid #ddd;margin-top:1.5em}"""


def write_html_report(output_dir: str | os.PathLike, entries: list[Mapping], *, path: str | os.PathLike | None = None,
                      embed_images: bool = True, title: str = "The ZeRO cookbook — run-all report") -> Path:
    """Write the run-all report (one HTML file) into ``output_dir``.

    Args:
        output_dir: the run-all output folder (each notebook's folder and executed copy inside).
        entries: one per notebook, in order: ``name`` (``02_zero2``), ``status`` (``ok``/``failed``/
            ``skipped``), ``duration_s``, ``executed`` (path of the executed notebook), ``output_dir``
            (the notebook's folder, holding ``results.json`` and ``figures/``), optional ``error``
            (``{"cell", "exec_count", "ename", "evalue"}``) and ``parameters``.
        path: the report's path (default ``output_dir/report.html``).
        embed_images: embed the PNG figures (one portable file) instead of linking them.

    Returns:
        the report's path.
    """
    import pandas as pd
    out = Path(output_dir).resolve()
    report = Path(path) if path else out / "report.html"
    results = [load_results(e["output_dir"]) if e.get("output_dir") else None for e in entries]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>Written {_dt.datetime.now().isoformat(timespec='seconds')} into <code>{html.escape(str(out))}</code>.</p>"]
    # overview
    rows = []
    for e, res in zip(entries, results):
        err = e.get("error") or {}
        rows.append({"notebook": e["name"], "status": e.get("status"),
                     "hardware": ("CPU rehearsal" if res.get("rehearsal") else "GPU") if res else "",
                     "target": (res or {}).get("target", ""), "duration s": _round(e.get("duration_s"), 1),
                     "failed cell": (f"cell {err.get('cell')}: {err.get('ename')}: {err.get('evalue')}" if err else "")})
    parts.append("<h2>Notebooks</h2>" + pd.DataFrame(rows).to_html(index=False, escape=True))
    # the ZeRO variants side by side
    vf = variants_frame([r for r in results if r])
    if len(vf):
        parts.append("<h2>ZeRO variants side by side</h2><p>Every run the notebooks launched: memory (estimate beside "
                     "the measured peak: GPU per rank on GPUs, host RSS of all ranks on the CPU rehearsal), "
                     "throughput (median step) and loss (mean of the first and last 5 steps).</p>"
                     + vf.to_html(index=False, na_rep=MISSING))
        cpu = [r for res in results if res and res.get("rehearsal") for r in (res.get("runs") or {}).values()]
        if cpu:
            sizes = [r.get("num_params") for r in cpu if isinstance(r.get("num_params"), (int, float))]
            parts.append(f"<p>{html.escape(rehearsal_memory_note(max(sizes) if sizes else None))}</p>")
    runs = {f"{res['notebook'][:2]} {label}": r for res in results if res
            for label, r in (res.get("runs") or {}).items() if r.get("status") == "ok"}
    for sentence in same_math(runs):
        parts.append(f"<p>{html.escape(sentence)}</p>")
    if runs:
        figdir = out / "report_figures"
        figdir.mkdir(exist_ok=True)
        import matplotlib.pyplot as plt
        for name, fig in (("loss", plot_loss(runs, title="every completed run: loss per step")),
                          ("memory_throughput", plot_runs(runs, title="every completed run"))):
            fig.savefig(figdir / f"{name}.png", dpi=110, bbox_inches="tight")
            plt.close(fig)
            parts.append(_img_tag(figdir / f"{name}.png" if embed_images else Path("report_figures") / f"{name}.png",
                                  embed_images))
    ref = reference_frame()
    if len(ref):
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in reference_notes())
        parts.append("<h2>Measured on GPUs (data/reference)</h2>" + (f"<ul>{notes}</ul>" if notes else "")
                     + ref.to_html(index=False, na_rep=MISSING))
    # each notebook
    for e, res in zip(entries, results):
        name = e["name"]
        cls = "ok" if e.get("status") == "ok" else "fail"
        parts.append(f"<section><h2>{html.escape(name)} — <span class='{cls}'>{html.escape(str(e.get('status')))}</span></h2>")
        if e.get("executed"):
            rel = os.path.relpath(e["executed"], out)
            parts.append(f"<p>Executed notebook: <a href='{html.escape(rel)}'>{html.escape(rel)}</a></p>")
        err = e.get("error")
        if err:
            parts.append(f"<pre class='fail'>failed in cell {err.get('cell')} (In [{err.get('exec_count')}]): "
                         f"{html.escape(str(err.get('ename')))}: {html.escape(str(err.get('evalue')))}</pre>")
        if not res:
            parts.append("<p>No results recorded.</p></section>")
            continue
        if res.get("title"):
            parts.append(f"<p><b>{html.escape(res['title'])}</b><br>Targets: {html.escape(res.get('target', ''))}; "
                         f"this run: {'CPU rehearsal' if res.get('rehearsal') else 'GPU'}.</p>")
        if res.get("headline"):
            parts.append("<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in res["headline"]) + "</ul>")
        for tname, records in (res.get("tables") or {}).items():
            if records:
                parts.append(f"<h3>{html.escape(tname)}</h3>" + tidy_frame(pd.DataFrame(records), rehearsal=bool(res.get("rehearsal"))).to_html(index=False, na_rep=MISSING))
        for fig in res.get("figures") or []:
            fpath = Path(e["output_dir"]) / fig
            if fpath.is_file():
                parts.append(_img_tag(fpath if embed_images else Path(os.path.relpath(fpath, out)), embed_images))
        parts.append("</section>")
    parts.append("</body></html>")
    report.write_text("\n".join(parts))
    return report


__all__ = ["ARTICLE_MEMORY_CLAIMS", "choose_variant", "PCIE4_X16_GBPS", "RTX4090_BF16_TFLOPS", "Recorder", "ReportError",
           "FACTS_DIR", "article_config", "article_config_path", "beside_reference", "check_recorded", "article_memory_table", "batch_sweep", "batch_sweep_frame",
           "hardware_label", "inspect_saved_model", "rehearsal_memory_note", "tidy_frame", "load_results", "plot_batch_sweep", "plot_loss", "plot_runs",
           "reference_frame", "reference_notes", "reference_results", "rehearsal", "run_record", "runs_frame", "same_math", "scaled_budget_gib",
           "throughput_ceiling", "variants_frame", "write_html_report"]


# --------------------------------------------------------------------------------------------
# environment rules on recorded machines

def check_recorded(plan, files: Mapping[str, str]):
    """Run :func:`cookbook.env.check` on facts recorded on other machines.

    Args:
        plan: the planned run; its ``num_gpus`` is replaced by each machine's GPU count.
        files: label -> facts file name in :data:`FACTS_DIR` (or a path).

    Returns:
        ``(frame, records)``: a DataFrame with one row per machine (driver, the ``rtx40_p2p`` verdict,
        the host-RAM verdict for the plan, the recommended environment) and label -> dict with the
        verdicts and the environment block to paste.
    """
    import pandas as pd
    from . import env
    rows, records = [], {}
    for label, name in files.items():
        path = Path(name) if Path(name).is_file() else FACTS_DIR / name
        facts = env.load_facts(path)
        world = len(facts.get("gpus") or []) or plan.num_gpus
        r = env.check(plan.replace(num_gpus=world), facts)
        records[label] = {"file": path.name, "ok": r.ok, "verdict": r.verdict, "rtx40_p2p": r["rtx40_p2p"].status,
                          "host_memory": r["host_memory"].status, "recommended_env": dict(r.recommended_env),
                          "env_block": r.env_block()}
        rows.append({"machine": label, "driver": facts.get("driver_version"), "rtx40_p2p": r["rtx40_p2p"].status,
                     "host RAM for the plan": r["host_memory"].value, "host_memory": r["host_memory"].status,
                     "recommended env": " ".join(f"{k}={v}" for k, v in r.recommended_env.items()) or "(nothing)"})
    return pd.DataFrame(rows), records


# --------------------------------------------------------------------------------------------
# choosing a variant

def choose_variant(plan, *, bf16_states: bool = False, variants=None):
    """The first ZeRO variant, in the cookbook's ladder order (:data:`cookbook.plan.VARIANTS`: ZeRO-2,
    ZeRO-2 + optimizer offload, ZeRO-3, ZeRO-3 + optimizer offload, + parameter offload, NVMe; each
    slower than the one before), that fits both the GPU and the host RAM of ``plan``.

    Returns:
        ``(chosen, sweep)``: the chosen :class:`cookbook.memory.MemoryEstimate` (None when nothing
        fits) and the :class:`cookbook.memory.SweepResult` over all variants. An unknown host RAM
        (``plan.host_memory_gib`` None) counts as fitting.
    """
    from .memory import sweep
    from .plan import VARIANTS
    result = sweep(plan, variants or VARIANTS, bf16_states=bf16_states)
    chosen = next((e for e in result if e.fits), None)
    return chosen, result
