"""The levers reference files of 2026-12-01/02 (``data/reference/h200_levers_*.json``): their table and figure.

Those files were written by per-round builders from ``data/reference/raw/``; the builders are gone (issue 30, item
5) and the files are kept as written, read by the product and the docs. New device calls are turned into reference
records by the one summariser, :mod:`benchmarks.summarise`. What stays here::

    python -m benchmarks.levers_report --figure                                   # docs/levers_h200.png
    python -m benchmarks.levers_report --table data/reference/h200_levers_2026-12-02c.json   # a Markdown table
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "data" / "reference" / "raw"
N_3B = 3_426_473_600   # benchmarks/models/llama-3b


def _medians(entries: list[dict], keys: tuple[str, ...]) -> dict:
    """Median of each key over the breakdown entries that have it (keys no entry has are left out)."""
    return {k: statistics.median(b[k] for b in entries if k in b) for k in keys if any(k in b for b in entries)}


def call1_ceilings(c1: dict) -> tuple[dict, dict]:
    """(ceilings, versions) of 2026-12-01's call 1: pinned copies and bf16 matmul (``benchmarks.ceilings``) and the
    CPU Adam rate with the default thread setting, the floors' inputs (:func:`benchmarks.report.floor`)."""
    ceil = dict(c1["ceilings"])
    adam = c1["cpu_adam_settings"]["default"]
    ceil["cpu_adam_params_per_s"] = adam["cpu_adam_params_per_s"]
    ceil["cpu_adam_threads"] = adam["cpu_adam_threads"]
    return ceil, ceil.pop("versions", None) or {}


def table(ref: dict) -> str:
    out = ["| run | call | micro | states | levers | status | tokens/s | s/step | GPU alloc / reserved GiB | host GiB "
           "| fwd / bwd / step ms | achieved/floor | 4090 proj. tokens/s |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def f(x, d=0):
        return "—" if x is None else f"{x:,.{d}f}"
    for r in ref["runs"]:
        lv = r["lever"]
        levers = ", ".join(x for x in (("zenflow" + ("" if lv.get("zenflow_native") else "/accel")) if lv.get("zenflow")
                                       else "", "liger" if lv.get("liger") else "", lv.get("bind") or "") if x) or "—"
        bd = r.get("breakdown_median_ms") or {}
        micro = (r.get("plan") or {}).get("micro_batch") or lv.get("micro_batch")
        out.append(f"| {r['name']} | {r['call']} | {micro} | {'bf16' if lv.get('bf16_states') else 'fp32'} | {levers} | "
                   f"{r['status']} | {f(r.get('tokens_per_s'))} | {f(r.get('step_time_s'), 2)} | "
                   f"{f(r.get('peak_gpu_allocated_gib'), 1)} / {f(r.get('peak_gpu_reserved_gib'), 1)} | "
                   f"{f(r.get('host_peak_gib'), 1)} | {f(bd.get('fwd_microstep'))} / {f(bd.get('bwd_microstep'))} / "
                   f"{f(bd.get('step_microstep'))} | "
                   f"{f((r.get('floor') or {}).get('achieved_over_floor_serial') and 100 * r['floor']['achieved_over_floor_serial'])}% | "
                   f"{f((r.get('projection_rtx4090') or {}).get('tokens_per_s'))} |")
    return "\n".join(out)


FIG_LEVERS = ROOT / "docs" / "levers_h200.png"
#: The rows of :func:`figure`, (reference file, run name, label): the article's road, the recipe, the levers that
#: won, and notebook 06's run before and after (sessions 5 and 6 of 2026-12-02).
FIGURE_ROWS = (
    ("h200_levers_2026-12-02c.json", "trainer-article", "3.4B: HF Trainer +\nLLaMA article config"),
    ("h200_levers_2026-12-02c.json", "recipe-fp32", "3.4B: recipe\n(ZeRO-2 + opt offload)"),
    ("h200_levers_2026-12-02c.json", "liger-fp32-24", "3.4B: recipe +\nLiger, micro 24"),
    ("h200_levers_2026-12-02d.json", "7b-2x8-nopin", "7B: 2 x 8,\nunpinned (old nb 06)"),
    ("h200_levers_2026-12-02c.json", "7b-2x8", "7B: 2 x 8,\npinned"),
    ("h200_levers_2026-12-02c.json", "7b-16x1", "7B: 16 x 1,\npinned"),
    ("h200_levers_2026-12-02d.json", "notebook06-16x1", "7B: notebook 06\nnow (packed)"),
)


def figure(path: Path = FIG_LEVERS) -> Path:
    """Bar chart of :data:`FIGURE_ROWS`: tokens/s measured on the H200 capped at 24 GiB (fp32 states for the 3.4B
    rows, bf16 states for the 7B rows) beside each row's RTX 4090 projection (``projection_rtx4090``:
    :func:`benchmarks.report.floor_and_projection`, the model of ``docs/benchmarks.md`` §5). Reads the committed
    reference files; raises KeyError if a named run is missing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    refs = {}
    rows = []
    for file, name, label in FIGURE_ROWS:
        ref = refs.setdefault(file, json.loads((ROOT / "data" / "reference" / file).read_text()))
        r = next(x for x in ref["runs"] if x["name"] == name)
        rows.append((label, r["tokens_per_s"], (r.get("projection_rtx4090") or {}).get("tokens_per_s") or 0.0))
    fig, ax = plt.subplots(figsize=(11, 4.2))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r[1] for r in rows], 0.4, label="measured: 1 x H200 capped at 24 GiB")
    ax.bar([i + 0.2 for i in x], [r[2] for r in rows], 0.4, label="RTX 4090 projection (docs/benchmarks.md §5)")
    for i, r in enumerate(rows):
        ax.text(i - 0.2, r[1], f"{r[1]:,.0f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + 0.2, r[2], f"{r[2]:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), [r[0] for r in rows], fontsize=8)
    ax.set_ylabel("tokens/s (16-24 x 1024 tokens per step)")
    ax.set_title("Issue 19 on 2026-12-02: 3.4B with exact Adam (fp32 states); LLaMA-7B on one rank (bf16 states)",
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="The table or figure of the 2026-12-01/02 levers reference files.")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--figure", action="store_true", help=f"draw docs/{FIG_LEVERS.name} from the reference files")
    g.add_argument("--table", metavar="FILE", help="print a levers reference file's runs as a Markdown table")
    a = p.parse_args(argv)
    if a.figure:
        print(figure())
    else:
        print(table(json.loads(Path(a.table).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
