"""The ``cookbook run-all`` report: one HTML page that leads with what to run per target
(:func:`run_this_html`: README's commands and where the evidence is) and the answers (:func:`answers_html`: per
target the recipe, whether it fits GPU and host, the throughput measured here and its RTX 4090 projection, in short
cells with numbered notes; the CPU rehearsal's tiny-model numbers are kept out of it; :mod:`cookbook.answers`), then every notebook's status and central run, the GPU evidence, the CPU
rehearsal's runs (said to be what they are), and each notebook's headline numbers, tables and figures. The
figures are PNG files beside the report, linked, not embedded: the page stays small.

It reads what each notebook recorded (:func:`cookbook.results.load_results`); :func:`write_html_report`
writes the page (headed by :func:`machine_line`: machine, date, versions), :func:`variants_frame` and
:func:`same_math` are its comparisons.

Units: GiB = 2**30 bytes; tokens/s over the whole world (all ranks).
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import os
from pathlib import Path
from typing import Iterable, Mapping

from .answers import RUN_THIS, answers_table, collapse_repeated
from .figures import plot_loss, plot_runs
from .memory import rehearsal_memory_note
from .reference import reference_frame, reference_notes
from .results import complete_record, load_results, loss_pair
from .tables import MISSING, estimate_check, rounded, run_row, runs_frame, tidy_frame, without_empty_why


def variants_frame(results: Iterable[Mapping], *, rehearsal: bool | None = None):
    """The ZeRO variants side by side, from the notebooks' ``results.json``: one row per recorded run —
    notebook, then :func:`cookbook.tables.run_row` (hardware, status, world size, loss, tokens/s, MFU, each
    memory peak beside its estimate with the error and the ±15 % verdict, the record's reason for a miss).

    Args:
        results: ``results.json`` dicts (None skipped).
        rehearsal: passed to :func:`~cookbook.tables.tidy_frame` (True labels the empty GPU columns n/a).
    """
    import pandas as pd
    rows = []
    for res in results:
        if not res:
            continue
        for label, r in (res.get("runs") or {}).items():
            rows.append({"notebook": res.get("notebook"), **run_row(label, r)})
    frame = pd.DataFrame(rows)
    return tidy_frame(without_empty_why(frame), rehearsal=rehearsal)


def machine_line(results: Iterable[Mapping | None]) -> str:
    """The report's header sentence (HTML): the machine (GPUs, their cap, host RAM, CPU cores), the date and
    the versions (Python, torch, transformers, accelerate, DeepSpeed), from the notebooks' ``machine`` records
    (:func:`cookbook.results.machine_record`, the last one) and their runs (device, ``gpu_memory_cap_gib``).
    What no record holds is said to be not recorded, never guessed.
    """
    results = [r for r in results if r]
    if not results:
        return "<b>Machine</b>: nothing recorded."
    machines = [r["machine"] for r in results if isinstance(r.get("machine"), Mapping)]
    m = machines[-1] if machines else {}
    runs = [run for r in results for run in (r.get("runs") or {}).values()]
    gpu_runs = [run for run in runs if run.get("estimate_device") == "cuda" or run.get("device") not in (None, "cpu")]
    if m.get("gpus"):
        names = [g.get("name") for g in m["gpus"]]
        memory = {g.get("name"): g.get("memory_gib") for g in m["gpus"]}
        gpu = ", ".join(f"{names.count(n)} × {n} ({memory[n]} GiB)" for n in dict.fromkeys(names))
    elif gpu_runs:
        gpu = ", ".join(sorted({run["device"] for run in gpu_runs if run.get("device") not in (None, "cpu")})) \
            or "GPU (name not recorded)"
    else:
        gpu = "no GPU (the CPU rehearsal)" if all(r.get("rehearsal") for r in results) else "GPU (not recorded)"
    machine = html.escape(gpu)
    caps = [run.get("gpu_memory_cap_gib") for run in gpu_runs]
    known = sorted({c for c in caps if c})
    if known:
        how = "every GPU run" if all(caps) and len(known) == 1 else f"{sum(1 for c in caps if c)} of {len(caps)} GPU runs"
        machine += (f", {how} capped at {' / '.join(f'{c:g}' for c in known)} GiB per rank "
                    "(<code>--emulate-gpu-memory-gib</code>: allocations past the cap raise a real out-of-memory)")
    machine += "; " + html.escape(f"{m['host_memory_gib']} GiB host RAM" if m.get("host_memory_gib")
                                  else "host RAM not recorded")
    if m.get("cpu_cores"):
        machine += f"; {m['cpu_cores']} CPU cores"
    # "recorded" is record()'s timestamp; in a results.json written before record() refused fields of its own
    # keys' names (results.RECORD_KEYS), notebook 00's dict of recorded machines had replaced it
    stamps = [r.get("recorded") if isinstance(r.get("recorded"), str) else (r.get("machine") or {}).get("date")
              for r in results]
    dates = sorted({str(d)[:10] for d in stamps if isinstance(d, str) and d})
    date = (dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}") if dates else (m.get("date") or "not recorded")
    names = (("Python", "python"), ("torch", "torch"), ("transformers", "transformers"), ("accelerate", "accelerate"),
             ("DeepSpeed", "deepspeed"))
    versions = ", ".join(f"{label} {m[key]}" for label, key in names if m.get(key))
    missing = [label for label, key in names if not m.get(key)]
    if missing:
        versions += ("; " if versions else "") + ", ".join(missing) + " not recorded" + (
            "" if machines else " (these results.json predate the notebooks' machine record)")
    return f"<b>Machine</b>: {machine}. <b>Date</b>: {html.escape(date)}. <b>Versions</b>: {html.escape(versions)}."


def _checked_estimates(rec: Mapping) -> dict:
    """A record whose ``estimate_gpu_gib`` / ``estimate_host_gib`` are the ones :func:`cookbook.tables.
    estimate_check` compares (the run's own, reserved basis), so the report's memory figure shows the same
    estimate as its tables (an older record's ``estimate_gpu_gib`` still counted the CUDA context)."""
    out = dict(rec)
    for c in estimate_check(rec):
        if c["estimate GiB"] is not None and c["quantity"] == "GPU reserved (peak)":
            out["estimate_gpu_gib"] = c["estimate GiB"]
        elif c["estimate GiB"] is not None and c["quantity"] == "host RSS (peak)":
            out["estimate_host_gib"] = c["estimate GiB"]
    return out


#: The columns every runs table (:func:`cookbook.tables.runs_frame`) has had, old and new.
_RUNS_TABLE_COLUMNS = frozenset({"status", "hardware", "world size", "steps", "tokens/s", "duration s"})


def _is_runs_table(records: list, runs: Mapping) -> bool:
    """Whether a recorded table is the notebook's runs table (one row per run, in order, with the runs
    table's columns), so the report can show it as :func:`cookbook.tables.runs_frame` makes it now."""
    if not runs or len(records) != len(runs) or not all(isinstance(r, Mapping) for r in records):
        return False
    if not all(_RUNS_TABLE_COLUMNS <= set(r) for r in records):
        return False
    return [r.get("status") for r in records] == [r.get("status") for r in runs.values()]


def _hardware_of(res: Mapping | None) -> str:
    """What a notebook ran on, for the Notebooks table: its runs' hardware labels, else the machine record."""
    if not res:
        return ""
    labels = list(dict.fromkeys(str(r.get("hardware")) for r in (res.get("runs") or {}).values() if r.get("hardware")))
    if labels:
        return ", ".join(labels)
    m = res.get("machine") or {}
    if m.get("gpus"):
        names = [g.get("name") for g in m["gpus"]]
        return ", ".join(f"{names.count(n)} × {n}" for n in dict.fromkeys(names))
    return "CPU rehearsal" if res.get("rehearsal") else "GPU"


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
        pairs = [loss_pair(runs[l]) for l in labels]
        lasts = [p["last"] for p in pairs if p]
        what = ("last-5-step means" if pairs and pairs[0] and pairs[0]["basis"] == "5-step means"
                else "last-step losses")
        out.append(f"{', '.join(labels)} ({key[0]}, {key[1]} rank{'s' if key[1] != 1 else ''}, {key[6]} steps): ZeRO changes where the states "
                   f"live, not the arithmetic — the loss curves differ by at most {diff:.3g} at any step (bf16 "
                   f"rounding, reduction order) and their {what} lie within {max(lasts) - min(lasts):.3g}.")
    return out


def _anchor(name: str) -> str:
    """The id of a notebook's section in the report (``nb-05``)."""
    return f"nb-{name[:2]}"


def run_this_html(executed: Mapping[str, str | None], out: Path) -> str:
    """The report's first lines: per target of :data:`cookbook.answers.RUN_THIS`, the command to run (with the
    ``cookbook estimate`` whose ``options:`` line goes with it) and where its evidence is — the notebooks' sections
    below and their executed copies when they ran here (``executed``: notebook name -> executed path), else the
    command that runs them."""
    lines = []
    for t in RUN_THIS:
        where = []
        for name in t["notebooks"]:
            if name in executed:
                rel = os.path.relpath(executed[name], out) if executed[name] else None
                where.append(f"<a href='#{_anchor(name)}'>notebook {name[:2]}</a>"
                             + (f" (<a href='{html.escape(rel)}'>executed</a>)" if rel else ""))
            else:
                where.append(f"notebook {name[:2]} (not run here: <code>cookbook run-all --only {name[:2]}</code>)")
        lines.append(f"<li><b>{html.escape(t['target'])}</b>: <code>{html.escape(t['run'])}</code> plus the "
                     f"<code>options:</code> line of <code>{html.escape(t['ask'])}</code>. Evidence: "
                     f"{', '.join(where)}; {html.escape(t['evidence'])}.</li>")
    return ("<h2>Run this</h2><p>The same commands as README's <i>What to run</i>: ask first, then run what the "
            "answer prints.</p><ul>" + "".join(lines) + "</ul>")


def answers_html(frame, notes: list[str], *, rehearsal: bool) -> str:
    """The answers table (:func:`cookbook.answers.answers_table`: short cells) and its numbered notes below it,
    each row's ``notes`` cell linking them."""
    def cell(col, v):
        if col == "RTX 4090 projection tokens/s":  # whole tokens/s, not 1257.0
            return MISSING if v != v else f"{v:,.0f}"
        text = html.escape(str(v)) if v == v and v is not None else MISSING
        if col == "notes" and v:
            text = f"<a href='#note-{str(v).partition('–')[0]}'>{html.escape(str(v))}</a>"
        elif col == "measured here" and str(v).startswith("CPU rehearsal"):
            name = next((n for n in frame["notebook"] if str(v).endswith(n[:2])), None)
            text = text.replace(f"notebook {name[:2]}", f"<a href='#{_anchor(name)}'>notebook {name[:2]}</a>") if name \
                else text
        return text
    cols = [c for c in frame.columns if c != "notebook"]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{cell(c, r[c])}</td>" for c in cols) + "</tr>" for _, r in frame.iterrows())
    listed = "".join(f"<li id='note-{i}'>{html.escape(n)}</li>" for i, n in enumerate(notes, 1))
    what = ("On the CPU rehearsal the notebooks train tiny models on CPU ranks: their tokens/s answer nothing about "
            "an RTX 4090, so they stay in <a href='#rehearsal'>their own section</a> and the notebooks' sections below; "
            "the projection then comes from the GPU reference run of the target's model (data/reference), when there "
            "is one. " if rehearsal else "")
    return ("<h2>The answers</h2><p>For each target: the recipe, whether it fits the GPU and the host (the estimate "
            "for the target machine), what the notebook's central run measured here and the throughput projected to "
            f"RTX 4090s. {what}A target whose notebook was not run here says <i>not run here</i>.</p>"
            f"<table class='answers'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<ol class='notes'>{listed}</ol>")


def _img_tag(path: Path, embed: bool) -> str:
    if embed:
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<img src="data:image/png;base64,{data}" style="max-width:100%">'
    return f'<img src="{html.escape(str(path))}" style="max-width:100%">'


_CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.6em 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.ok{color:#2e7d32}.fail{color:#c62828}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:12px}ol.notes{font-size:12px;color:#444}section{border-top:1px solid #ddd;margin-top:1.5em}"""


def write_html_report(output_dir: str | os.PathLike, entries: list[Mapping], *, path: str | os.PathLike | None = None,
                      embed_images: bool = False, title: str = "The ZeRO cookbook — run-all report") -> Path:
    """Write the run-all report (one HTML file) into ``output_dir``.

    Args:
        output_dir: the run-all output folder (each notebook's folder and executed copy inside).
        entries: one per notebook, in order: ``name`` (``02_zero2``), ``status`` (``ok``/``failed``/
            ``skipped``), ``duration_s``, ``executed`` (path of the executed notebook), ``output_dir``
            (the notebook's folder, holding ``results.json`` and ``figures/``), optional ``error``
            (``{"cell", "exec_count", "ename", "evalue"}``) and ``parameters``.
        path: the report's path (default ``output_dir/report.html``).
        embed_images: embed the PNG figures as base64 (one portable file, ~1.5 MB for the seven notebooks) instead
            of linking them; by default each ``<img>`` links its PNG by a path relative to the report (the
            notebooks' ``NAME/figures/*.png`` that :func:`cookbook.results.record` wrote, and ``report_figures/``).

    Returns:
        the report's path.
    """
    import pandas as pd
    out = Path(output_dir).resolve()
    report = Path(path) if path else out / "report.html"
    results = [load_results(e["output_dir"]) if e.get("output_dir") else None for e in entries]
    for e, res in zip(entries, results):  # older or moved records: completed from their run folders
        if res and res.get("runs"):
            res["runs"] = {label: complete_record(r, e["output_dir"]) for label, r in res["runs"].items()}
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>{machine_line(results)}</p>"]
    # what to run, then the answers
    by_name = {e["name"]: res for e, res in zip(entries, results)}
    executed = {e["name"]: e.get("executed") for e in entries}
    parts.append(run_this_html(executed, out))
    answers, notes = answers_table(by_name)
    parts.append(answers_html(answers, notes, rehearsal=any(r.get("rehearsal") for r in results if r)))
    parts.append(f"<p>Written {_dt.datetime.now().isoformat(timespec='seconds')} into "
                 f"<code>{html.escape(str(out))}</code>.</p>")
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
                     "hardware": _hardware_of(res),
                     "target": (res or {}).get("target", ""), "duration s": rounded(e.get("duration_s"), 1),
                     "run-all": f"earlier ({e['earlier_run']})" if e.get("earlier_run") else "this one",
                     "problem": problem})
    parts.append("<h2>Notebooks</h2><p>Status <code>unexpected</code>: every cell ran, but the run the notebook's "
                 "story rests on did not end as the notebook expected (or none was recorded).</p>"
                 + tidy_frame(pd.DataFrame(rows)).to_html(index=False, escape=True, na_rep=MISSING))
    # GPU evidence first: runs on GPUs here, then the reference measurements
    gpu_res = [dict(r, runs={k: v for k, v in (r.get("runs") or {}).items()
                             if not str(v.get("hardware") or "").startswith("CPU rehearsal")}) for r in results if r]
    cpu_res = [dict(r, runs={k: v for k, v in (r.get("runs") or {}).items()
                             if str(v.get("hardware") or "").startswith("CPU rehearsal")}) for r in results if r]
    gpu_rows, cpu_rows = variants_frame(gpu_res, rehearsal=False), variants_frame(cpu_res, rehearsal=True)
    bar = ("each memory peak per rank as measured (estimate, error = (estimate − measured)/measured, and whether "
           "it is within ±15 %); the estimate is the run's own for the shape that ran, on the basis of each "
           "measurement (allocated without the allocator's cache, reserved without the CUDA context)")
    if len(gpu_rows):
        parts.append("<h2>ZeRO variants side by side — measured here on GPUs</h2><p>Every run the notebooks launched "
                     f"on this machine's GPUs: throughput (median step), MFU, {bar}; loss as first → last step under "
                     "10 steps, else the first and last 5-step means. A miss gives the reason where the run's record "
                     "shows one.</p>" + gpu_rows.to_html(index=False, na_rep=MISSING))
    ref = reference_frame()
    if len(ref):
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in reference_notes())
        parts.append("<h2>Measured on GPUs (data/reference)</h2>" + (f"<ul>{notes}</ul>" if notes else "")
                     + ref.to_html(index=False, na_rep=MISSING))
    if len(cpu_rows):
        parts.append("<h2 id='rehearsal'>ZeRO variants side by side — the CPU rehearsal's runs (tiny models on CPU ranks: not GPU "
                     "numbers)</h2><p>The same "
                     "notebooks with tiny models of the same architectures: they check that every recipe runs end to "
                     "end. Memory is the host RSS of all ranks; throughput is a CPU's; GPU columns are n/a.</p>"
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
                          ("memory_throughput", plot_runs({k: _checked_estimates(r) for k, r in runs.items()},
                                                          title="every completed run"))):
            fig.savefig(figdir / f"{name}.png", dpi=110, bbox_inches="tight")
            plt.close(fig)
            parts.append(_img_tag(figdir / f"{name}.png" if embed_images else Path("report_figures") / f"{name}.png",
                                  embed_images))
    # each notebook
    for e, res in zip(entries, results):
        name = e["name"]
        cls = "ok" if e.get("status") == "ok" else "fail"
        parts.append(f"<section id='{_anchor(name)}'><h2>{html.escape(name)} — <span class='{cls}'>{html.escape(str(e.get('status')))}</span></h2>")
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
                         f"this run: {html.escape(_hardware_of(res))}.</p>")
        if res.get("headline"):
            parts.append("<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in res["headline"]) + "</ul>")
        for tname, records in (res.get("tables") or {}).items():
            if records and _is_runs_table(records, res.get("runs") or {}):
                # a runs table (tables.runs_frame) as an older cookbook recorded it: rebuilt from the runs' records
                rebuilt = runs_frame(res["runs"]).reset_index()
                parts.append(f"<h3>{html.escape(tname)}</h3>" + rebuilt.to_html(index=False, na_rep=MISSING))
            elif records:
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


__all__ = ["answers_html", "machine_line", "run_this_html", "same_math", "variants_frame", "write_html_report"]
