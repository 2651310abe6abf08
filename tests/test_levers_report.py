"""benchmarks/levers_report.py --same-call: the committed record is what the raw device output says."""
import json

import pytest

from benchmarks import levers_report as lr


def test_same_call_record_ratios_from_the_raw_runs():
    """The loop vs the HF Trainer, recomputed from the raw levers.json of that call (session 4, call 3), and the
    committed data/reference/h200_levers_2026-12-02b.json equal to a fresh build."""
    raw = {r["name"]: r for r in json.loads((lr.RAW / "h200_levers_session4_call3_levers.json").read_text())["runs"]}
    rec = lr.build_same_call()
    same = rec["ratios_same_call"]
    assert same["cookbook_loop_over_trainer_recipe"] == pytest.approx(
        raw["recipe"]["tokens_per_s"] / raw["trainer-recipe"]["tokens_per_s"])
    assert same["cookbook_loop_over_trainer_article"] == pytest.approx(
        raw["recipe"]["tokens_per_s"] / raw["trainer-article"]["tokens_per_s"])
    assert {r["name"]: r["status"] for r in rec["runs"]}["liger"] == "gpu_oom"
    committed = json.loads(lr.OUT_SAME_CALL.read_text())
    assert committed["ratios_same_call"] == pytest.approx(same)
    assert [r["name"] for r in committed["runs"]] == [r["name"] for r in rec["runs"]]


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
