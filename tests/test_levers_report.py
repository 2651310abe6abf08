"""How the notebooks pick lever runs from levers reference files (cookbook.reference, hand-made files).

The table and figure that benchmarks/levers_report.py rebuilds from the archived 2026-12-01/02 levers records are
not tested here (issue 30, item 9: archive rebuilds go; the records are kept as written)."""
import json


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
