"""benchmarks/levers_report.py: the table and figure of the 2026-12-01/02 levers reference files (kept as written),
and how the notebooks pick lever runs from such files."""
import json

import pytest

from benchmarks import levers_report as lr


def test_a_notebook_gets_the_newest_ok_lever_run_of_each_name(tmp_path):
    """Beside notebook 06, issue 19's lever runs (group levers) appear once per name: the newest file's run that
    ended ok; a newer failed run keeps the older ok one, the failed one stays in reference_results(None)."""
    from cookbook.reference import reference_results
    run = lambda name, status, tps: {"name": name, "status": status, "group": "levers", "tokens_per_s": tps}
    (tmp_path / "a_2026-12-01.json").write_text(json.dumps({"runs": [run("recipe", "ok", 1.0), run("liger", "ok", 2.0),
                                                                      run("zenflow", "failed", None)]}))
    (tmp_path / "b_2026-12-02.json").write_text(json.dumps({"runs": [run("recipe", "ok", 3.0), run("liger", "gpu_oom", None)]}))
    shown = {(r["name"], r["tokens_per_s"], r["_file"]) for r in reference_results("06", tmp_path)}
    assert shown == {("recipe", 3.0, "b_2026-12-02.json"), ("liger", 2.0, "a_2026-12-01.json")}
    assert len(reference_results(None, tmp_path)) == 5


def test_levers_figure_draws_the_named_rows(tmp_path):
    from benchmarks import levers_report as lr
    out = lr.figure(tmp_path / "levers.png")
    assert out.stat().st_size > 10_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every row the figure names is in its reference file, with a measured and a projected tokens/s
    for file, name, _ in lr.FIGURE_ROWS:
        run = next(r for r in json.loads((lr.ROOT / "data" / "reference" / file).read_text())["runs"] if r["name"] == name)
        assert run["tokens_per_s"] > run["projection_rtx4090"]["tokens_per_s"] > 0


def test_table_has_a_row_per_run_with_its_measured_tokens_per_s():
    ref = json.loads((lr.ROOT / "data" / "reference" / "h200_levers_2026-12-02c.json").read_text())
    rows = lr.table(ref).splitlines()[2:]
    assert len(rows) == len(ref["runs"])
    for row, run in zip(rows, ref["runs"]):
        cells = [c.strip() for c in row.split("|")]
        assert cells[1] == run["name"]
        if run.get("tokens_per_s"):
            assert cells[7] == f"{run['tokens_per_s']:,.0f}"
