"""Every run recorded in a run-all folder as one Markdown table: tokens/s, MFU, peaks and the estimate beside each.

    python scripts/gpu_runs_table.py docs/gpu/gpu-1x24gib > /tmp/table.md

Reads each ``NN_*/results.json`` (``runs``, written by ``cookbook.results.record``), completes older records
from their run folders (``cookbook.results.complete_record``: world size, GPU cap, host RSS during the steps)
and checks each peak with ``cookbook.tables.estimate_check`` — the one place the notebooks' runs tables and the
report check it too: the error column is ``(estimate − measured) / measured`` as in ``cookbook.memory.compare``;
"±15 %" marks each quantity within the issue-17 bar (yes/no), and "why" gives the record's own reason for a
miss where it shows one. Nothing is recomputed: the numbers are the runs' own summaries.
"""
from __future__ import annotations

import sys
from pathlib import Path

from cookbook.results import complete_record, load_results
from cookbook.tables import CHECKED_QUANTITIES, estimate_check, miss_reasons

HEAD = ["notebook", "run", "model", "status", "tokens/s", "MFU", "s/step",
        "GPU allocated est / meas GiB", "GPU reserved est / meas GiB", "host peak est / meas GiB", "message", "why"]


def _fmt(v, nd=2):
    return "—" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else str(v))


def _cell(check: dict | None) -> str:
    if not check or check.get("estimate GiB") is None or check.get("error %") is None:
        return "—"
    ok = "yes" if check["within"] else "**no**"
    return f"{_fmt(check['estimate GiB'])} / {_fmt(check['measured GiB'])} ({check['error %']:+.0f} %, {ok})"


def rows(folder: Path):
    """One list of cells per run recorded under ``folder`` (``NN_*/results.json``), in :data:`HEAD`'s order."""
    for res_dir in sorted(p.parent for p in folder.glob("[0-9][0-9]_*/results.json")):
        r = load_results(res_dir) or {}
        for label, rec in (r.get("runs") or {}).items():
            run = complete_record(rec, res_dir)
            checks = {c["quantity"]: c for c in estimate_check(run)}
            mfu = run.get("mfu")
            why = miss_reasons(checks)
            yield [res_dir.name, label, run.get("model") or "", run.get("status"),
                   _fmt(run.get("tokens_per_s"), 0), "—" if mfu is None else f"{100 * mfu:.1f} %",
                   _fmt(run.get("step_time_s")), *(_cell(checks.get(q)) for q in CHECKED_QUANTITIES),
                   (run.get("message") or "")[:90] if run.get("status") != "ok" else "", why]


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python scripts/gpu_runs_table.py RUN_ALL_FOLDER  (e.g. docs/gpu/gpu-1x24gib)", file=sys.stderr)
        return 2
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "---|" * len(HEAD))
    for row in rows(Path(args[0])):
        print("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
