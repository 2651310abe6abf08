"""Figures of launched runs and of memory estimates: loss per step, memory (estimate beside measured
peak) and throughput, the per-GPU breakdown over batch shapes, the host RAM per ZeRO variant.

Each function returns a matplotlib Figure; figures made here are closed in pyplot before they are
returned, so a notebook cell that ends with one shows it once (and ``fig.savefig`` still works).

Units: GiB = 2**30 bytes; tokens/s over the whole world (all ranks).
"""
from __future__ import annotations

from typing import Any, Mapping

from .results import as_record


def _new_figure(*, nrows: int = 1, ncols: int = 1, figsize=(7, 4)):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize)
    return fig, axes


def _done(fig, made_here: bool = True):
    """Close ``fig`` in pyplot when this module made it (a notebook then shows the returned figure once,
    not once more when the cell ends); a figure drawn on the caller's Axes is the caller's."""
    if made_here:
        import matplotlib.pyplot as plt
        plt.close(fig)
    return fig


def plot_host_ram(estimates):
    """Host-RAM breakdown per variant (:func:`cookbook.memory.plot_breakdown` with ``where="host"``), wide
    enough for the two-line variant labels under each bar. Returns the matplotlib Figure."""
    from . import memory
    fig = memory.plot_breakdown(estimates, where="host")
    fig.set_size_inches(9, 4.5)
    fig.tight_layout()
    return _done(fig)


def plot_loss(runs: Mapping[str, Any], ax=None, *, title: str = "training loss"):
    """Loss per optimizer step of one or more runs (runs without steps are listed in the legend as such).

    Args:
        runs: label -> :class:`~cookbook.launch.RunResult`, :func:`run_record` dict, or a list of losses.
        ax: a matplotlib Axes (default: a new figure).

    Returns:
        the matplotlib Figure.
    """
    made_here = ax is None
    if made_here:
        fig, ax = _new_figure()
    else:
        fig = ax.figure
    for label, run in runs.items():
        losses = list(run) if isinstance(run, (list, tuple)) else as_record(run).get("losses") or []
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
    return _done(fig, made_here)


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
        r = as_record(run)
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
    return _done(fig)


def plot_batch_sweep(estimates, ax=None):
    """Stacked per-GPU breakdown for each batch shape (``cookbook.memory.plot_breakdown``), labelled
    by micro batch × sequence length, with the GPU's memory as a dashed line.

    Returns:
        the matplotlib Figure.
    """
    from .memory import plot_breakdown
    ests = list(estimates)
    made_here = ax is None
    fig = plot_breakdown(ests, ax=ax)
    ax = fig.axes[0] if made_here else ax
    ax.set_xticks(list(range(len(ests))))
    ax.set_xticklabels([f"{e.plan.micro_batch}×{e.plan.seq_len}" for e in ests], fontsize=8)
    ax.set_xlabel("micro batch × sequence length")
    p = ests[0].plan
    ax.set_title(f"{p.label}, {p.model} on {p.num_gpus} × {p.gpu_memory_gib:g} GiB: every batch shape")
    fig.tight_layout()
    return _done(fig, made_here)


__all__ = ["plot_batch_sweep", "plot_host_ram", "plot_loss", "plot_runs"]
