"""The ``cookbook run-all`` report: one HTML page that leads with the answers (per target: the recipe,
whether it fits GPU and host, the throughput measured here and its RTX 4090 projection;
:mod:`cookbook.answers`), then every notebook's status and central run, the GPU evidence, the CPU
rehearsal's runs (said to be what they are), and each notebook's headline numbers, tables and figures.

It reads what each notebook recorded (:func:`cookbook.results.load_results`); :func:`write_html_report`
writes the page, :func:`variants_frame` and :func:`same_math` are its comparisons.

Units: GiB = 2**30 bytes; tokens/s over the whole world (all ranks).
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import os
from pathlib import Path
from typing import Iterable, Mapping

from .answers import answers_frame, collapse_repeated
from .figures import plot_loss, plot_runs
from .memory import rehearsal_memory_note
from .reference import reference_frame, reference_notes
from .results import load_results
from .tables import MISSING, rounded, tidy_frame


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
                "memory estimate GiB": rounded(r.get("estimate_gpu_gib") if gpu else r.get("estimate_host_gib"), 2),
                "memory measured GiB": rounded(r.get("peak_gpu_reserved_gib") if gpu else r.get("host_peak_gib"), 2),
                "memory of": "GPU (per rank)" if gpu else "host (all ranks)",
                "tokens/s": rounded(r.get("tokens_per_s"), 1),
                "loss first 5": rounded(r.get("first5_mean_loss"), 3), "loss last 5": rounded(r.get("last5_mean_loss"), 3),
            })
    return tidy_frame(pd.DataFrame(rows))


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
    # the answers first
    by_name = {e["name"]: res for e, res in zip(entries, results)}
    answers = answers_frame(by_name)
    parts.append("<h2>The answers</h2><p>For each target: the recipe to run, whether it fits the GPU and the host "
                 "(the estimate for the target machine), what the notebook's central run measured here, and the "
                 "throughput projected to RTX 4090s. On the CPU rehearsal the measured numbers are tiny models on "
                 "CPU ranks, and the projection comes from the GPU reference run of the target's model (data/reference), "
                 "when there is one. A target whose notebook was not run in this run-all says <i>not run here</i> "
                 "and names the notebook that answers it.</p>"
                 + answers.to_html(index=False, na_rep=MISSING))
    # overview
    rows = []
    for e, res in zip(entries, results):
        err = e.get("error") or {}
        central = e.get("central") or (res or {}).get("central") or {}
        problem = ""
        if err and err.get("cell") is None and "expected" in err:
            problem = f"central run {err.get('run')!r}: {err.get('evalue')}"
        elif err:
            problem = f"cell {err.get('cell')}: {err.get('ename')}: {err.get('evalue')}"
        rows.append({"notebook": e["name"], "status": e.get("status"),
                     "central run": (f"{central.get('run')}: {central.get('status')} (expected {central.get('expected')})"
                                     if central else ""),
                     "hardware": ("CPU rehearsal" if res.get("rehearsal") else "GPU") if res else "",
                     "target": (res or {}).get("target", ""), "duration s": rounded(e.get("duration_s"), 1),
                     "run-all": f"earlier ({e['earlier_run']})" if e.get("earlier_run") else "this one",
                     "problem": problem})
    parts.append("<h2>Notebooks</h2><p>Status <code>unexpected</code>: every cell ran, but the run the notebook's "
                 "story rests on did not end as the notebook expected (or none was recorded).</p>"
                 + tidy_frame(pd.DataFrame(rows)).to_html(index=False, escape=True, na_rep=MISSING))
    # GPU evidence first: runs on GPUs here, then the reference measurements
    vf = variants_frame([r for r in results if r])
    gpu_rows = vf[~vf["hardware"].astype(str).str.startswith("CPU rehearsal")] if len(vf) else vf
    cpu_rows = vf[vf["hardware"].astype(str).str.startswith("CPU rehearsal")] if len(vf) else vf
    if len(gpu_rows):
        parts.append("<h2>ZeRO variants side by side — measured here on GPUs</h2><p>Every run the notebooks launched on this machine's GPUs: "
                     "memory (estimate beside the measured peak per rank), throughput (median step), loss.</p>"
                     + gpu_rows.to_html(index=False, na_rep=MISSING))
    ref = reference_frame()
    if len(ref):
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in reference_notes())
        parts.append("<h2>Measured on GPUs (data/reference)</h2>" + (f"<ul>{notes}</ul>" if notes else "")
                     + ref.to_html(index=False, na_rep=MISSING))
    if len(cpu_rows):
        parts.append("<h2>ZeRO variants side by side — the CPU rehearsal's runs (tiny models on CPU ranks: not GPU "
                     "numbers)</h2><p>The same "
                     "notebooks with tiny models of the same architectures: they check that every recipe runs end to "
                     "end. Memory is the host RSS of all ranks; throughput is a CPU's.</p>"
                     + cpu_rows.to_html(index=False, na_rep=MISSING))
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
    # each notebook
    for e, res in zip(entries, results):
        name = e["name"]
        cls = "ok" if e.get("status") == "ok" else "fail"
        parts.append(f"<section><h2>{html.escape(name)} — <span class='{cls}'>{html.escape(str(e.get('status')))}</span></h2>")
        if e.get("executed"):
            rel = os.path.relpath(e["executed"], out)
            parts.append(f"<p>Executed notebook: <a href='{html.escape(rel)}'>{html.escape(rel)}</a></p>")
        err = e.get("error")
        if err and err.get("cell") is None and "expected" in err:
            parts.append(f"<pre class='fail'>central run {html.escape(repr(err.get('run')))} did not end as expected: "
                         f"{html.escape(str(err.get('evalue')))}</pre>")
        elif err:
            parts.append(f"<pre class='fail'>failed in cell {err.get('cell')} (In [{err.get('exec_count')}]): "
                         f"{html.escape(str(err.get('ename')))}: {html.escape(str(err.get('evalue')))}</pre>")
        if not res:
            parts.append("<p>No results recorded: the notebook stopped before its last cell (<code>results.record</code>); "
                         "the executed notebook holds the traceback.</p></section>")
            continue
        if res.get("title"):
            parts.append(f"<p><b>{html.escape(res['title'])}</b><br>Targets: {html.escape(res.get('target', ''))}; "
                         f"this run: {'CPU rehearsal' if res.get('rehearsal') else 'GPU'}.</p>")
        if res.get("headline"):
            parts.append("<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in res["headline"]) + "</ul>")
        for tname, records in (res.get("tables") or {}).items():
            if records:
                frame, lines = collapse_repeated(tidy_frame(pd.DataFrame(records), rehearsal=bool(res.get("rehearsal"))))
                parts.append(f"<h3>{html.escape(tname)}</h3>"
                             + "".join(f"<p>{html.escape(line)}</p>" for line in lines)
                             + frame.to_html(index=False, na_rep=MISSING))
        for fig in res.get("figures") or []:
            fpath = Path(e["output_dir"]) / fig
            if fpath.is_file():
                parts.append(_img_tag(fpath if embed_images else Path(os.path.relpath(fpath, out)), embed_images))
        parts.append("</section>")
    parts.append("</body></html>")
    report.write_text("\n".join(parts))
    return report


__all__ = ["same_math", "variants_frame", "write_html_report"]
