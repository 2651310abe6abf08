"""Every run recorded in a run-all folder as one Markdown table: tokens/s, MFU, peaks and the estimate beside each.

    python scripts/gpu_runs_table.py docs/gpu/gpu-1x24gib > /tmp/table.md

Reads each ``NN_*/results.json`` (``runs``, written by ``cookbook.results.record``); the error column is
``(estimate − measured) / measured`` as in ``cookbook.memory.compare``; "±15 %" marks each quantity
within the issue-17 bar (yes/no). Nothing is recomputed: the numbers are the runs' own summaries.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _fmt(v, nd=2):
    return "—" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else str(v))


def rows(folder: Path):
    for res in sorted(folder.glob("[0-9][0-9]_*/results.json")):
        r = json.loads(res.read_text())
        for label, run in (r.get("runs") or {}).items():
            ev = {e["quantity"]: e for e in (run.get("estimate_vs_measured") or [])}
            cells = []
            for q in ("GPU allocated (peak)", "GPU reserved (peak)", "host RSS (peak)"):
                e = ev.get(q)
                if e and e.get("measured GiB") is not None:
                    err = e.get("error %")
                    ok = "yes" if err is not None and abs(err) <= 15 else "**no**"
                    cells.append(f"{_fmt(e['estimate GiB'])} / {_fmt(e['measured GiB'])} ({err:+.0f} %, {ok})")
                else:
                    cells.append("—")
            mfu = run.get("mfu")
            yield [res.parent.name, label, run.get("model") or "", run.get("status"),
                   _fmt(run.get("tokens_per_s"), 0), "—" if mfu is None else f"{100 * mfu:.1f} %",
                   _fmt(run.get("step_time_s")), *cells,
                   (run.get("message") or "")[:90] if run.get("status") != "ok" else ""]


def main(argv=None) -> int:
    folder = Path((argv or sys.argv[1:])[0])
    head = ["notebook", "run", "model", "status", "tokens/s", "MFU", "s/step",
            "GPU allocated est / meas GiB", "GPU reserved est / meas GiB", "host peak est / meas GiB", "message"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows(folder):
        print("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
