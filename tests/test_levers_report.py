"""benchmarks/levers_report.py --same-call and --session5: the committed records are what the raw device output says."""
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


@pytest.fixture(scope="module")
def session5():
    """build_session5() once for the session 5 tests, beside its raw runs by name."""
    raw = {}
    for f in sorted(lr.RAW.glob("h200_levers_session5_*_levers.json")):
        raw.update({r["name"]: r for r in json.loads(f.read_text())["runs"]})
    return lr.build_session5(), raw


def _opt_median(r):
    """optimizer_step median over the steps after the first, from a raw record's breakdown."""
    import statistics
    return statistics.median([b["optimizer_step"] for b in r["breakdown"] if "optimizer_step" in b][1:])


def test_session5_ratios_from_the_raw_runs(session5):
    """Session 5's ratios, recomputed from the raw levers.json files (and §14's rounded numbers)."""
    rec, raw = session5
    t = {n: r["tokens_per_s"] for n, r in raw.items()}
    same, across = rec["ratios_same_call"], rec["ratios_across_calls"]
    assert same["liger_fp32_24_over_recipe_fp32 (call 1)"] == pytest.approx(t["liger-fp32-24"] / t["recipe-fp32"])
    assert same["liger_fp32_24_over_recipe_fp32 (call 1)"] == pytest.approx(8117 / 6169, rel=1e-3)
    assert same["zenflow_fp32_seq_over_recipe_fp32 (call 1)"] == pytest.approx(t["zenflow-fp32-seq"] / t["recipe-fp32"])
    assert same["recipe_fp32_over_trainer_article (call 1)"] == pytest.approx(t["recipe-fp32"] / t["trainer-article"])
    assert same["liger_fp32_24_over_trainer_article (call 1)"] == pytest.approx(4.77, abs=0.005)
    assert same["7b_16x1_over_7b_2x8 (call 2)"] == pytest.approx(t["7b-16x1"] / t["7b-2x8"])
    assert across["7b_8x2 (call 3) over 7b_2x8 (call 2)"] == pytest.approx(t["7b-8x2"] / t["7b-2x8"])
    assert across["7b_16x1_bind (call 3) optimizer_step over 7b_16x1's (call 2), medians of the steps after the first"] \
        == pytest.approx(_opt_median(raw["7b-16x1-bind"]) / _opt_median(raw["7b-16x1"]))
    assert across["liger_fp32_24 (call 1) over issue 19's 8,283 bf16-states baseline (issue text)"] == pytest.approx(
        t["liger-fp32-24"] / 8283)
    assert not any("7b_8x2" in k or "bind" in k for k in same)     # those compare across calls


def test_session5_rows_7b_count_projection_and_statuses(session5):
    """The 7B rows carry LLaMA-7B's parameter count and ZeRO-3's parameter traffic, and a 4090 projection below the
    H200's tokens/s; statuses as recorded (the gpu_oom rows with their messages); the binding row keeps env/cores."""
    from cookbook.models import model_spec
    from benchmarks.report import pcie_bytes
    rec, raw = session5
    n7 = model_spec("llama-7b").num_params
    by = {r["name"]: r for r in rec["runs"]}
    assert {n: r["status"] for n, r in by.items()} == {n: r["status"] for n, r in raw.items()}
    sevens = [r for r in rec["runs"] if r["name"].startswith("7b-")]
    assert {r["name"] for r in sevens} == {"7b-2x8", "7b-8x2", "7b-16x1", "7b-16x1-bind"}
    for r in sevens:
        p = r["plan"]
        assert r["num_params"] == n7 != lr.N_3B
        assert (p["zero_stage"], p["offload_param"], p["micro_batch"] * p["grad_accum"]) == (3, "cpu", 16)
        assert (r["floor"]["pcie_bytes_up"], r["floor"]["pcie_bytes_down"]) == pcie_bytes(r) == (
            4 * n7 * p["grad_accum"], 2 * n7 * p["grad_accum"])
        assert 0 < r["projection_rtx4090"]["tokens_per_s"] < r["tokens_per_s"]
        assert r["breakdown_median_ms"]["optimizer_step"] == pytest.approx(_opt_median(raw[r["name"]]))
    for r in rec["runs"]:
        if not r["name"].startswith("7b-"):
            assert r["num_params"] == lr.N_3B
        if r["status"] == "ok":
            assert 0 < r["projection_rtx4090"]["tokens_per_s"] < r["tokens_per_s"]
    for n in ("liger-fp32-28", "zenflow-liger-fp32-24"):
        assert by[n]["status"] == "gpu_oom" and by[n]["message"] == raw[n]["message"] and "floor" not in by[n]
    assert by["7b-16x1-bind"]["cores"] == list(range(1, 16))
    assert by["7b-16x1-bind"]["env"]["OMP_PROC_BIND"] == "close"
    # §14's 7B table: fwd / bwd / optimizer_step per step, medians over all steps
    assert [round(by["7b-16x1"]["breakdown_median_ms_all_steps"][k]) for k in
            ("fwd_microstep", "bwd_microstep", "optimizer_step")] == [552, 1527, 1693]


def test_session5_committed_record_equals_a_fresh_build(session5):
    """data/reference/h200_levers_2026-12-02c.json is what build_session5() writes today."""
    rec, _ = session5
    assert json.loads(lr.OUT_SESSION5.read_text()) == json.loads(json.dumps(rec, indent=1, default=str))
