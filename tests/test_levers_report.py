"""benchmarks/levers_report.py --same-call, --session5 and --session6: the committed records are what the raw device
output says."""
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


def test_notebook06_before_is_the_committed_run_of_its_time():
    """NB06_BEFORE (notebook 06's 2 x 8 unpinned GPU run, the number sessions 5 and 6 compare against) is what its
    commit holds in docs/gpu (skipped outside a git checkout with that history)."""
    import subprocess
    b = lr.NB06_BEFORE
    try:
        text = subprocess.run(["git", "show", f"{b['commit']}:{b['path']}"], cwd=lr.ROOT, capture_output=True,
                              text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here")
    s = json.loads(text)
    assert (s["tokens_per_s"], s["step_time_s"], s["micro_batch"], s["grad_accum"]) == (
        b["tokens_per_s"], b["step_time_s"], b["micro_batch"], b["grad_accum"])
    assert s["deepspeed_config"]["zero_optimization"]["offload_param"]["pin_memory"] is b["pin_memory"] is False


@pytest.fixture(scope="module")
def session6():
    """build_session6() once for the session 6 tests, beside its raw runs by name, session 5's raw runs by name and
    notebook 06's summary.json."""
    raw = {}
    for f in sorted(lr.RAW.glob("h200_levers_session6_*_levers.json")):
        raw.update({r["name"]: r for r in json.loads(f.read_text())["runs"]})
    raw5 = {}
    for f in sorted(lr.RAW.glob("h200_levers_session5_*_levers.json")):
        raw5.update({r["name"]: r for r in json.loads(f.read_text())["runs"]})
    nb = json.loads((lr.NB06_DIR / "summary.json").read_text())
    return lr.build_session6(), raw, raw5, nb


def test_session6_ratios_from_the_raw_runs(session6):
    """Session 6's ratios, recomputed from the raw levers.json files of sessions 5 and 6 and notebook 06's summary."""
    rec, raw, raw5, nb = session6
    t = {n: r["tokens_per_s"] for n, r in raw.items()}
    t5 = {n: r["tokens_per_s"] for n, r in raw5.items()}
    same, across = rec["ratios_same_call"], rec["ratios_across_calls"]
    assert same == {"7b_z3opt_8x2_over_7b_z3opt_2x8 (call 1)": pytest.approx(t["7b-z3opt-8x2"] / t["7b-z3opt-2x8"])}
    pin = across["7b_2x8 pinned (session 5 call 2) over 7b_2x8_nopin (call 1): the cost of pin_memory false"]
    assert pin == pytest.approx(t5["7b-2x8"] / t["7b-2x8-nopin"]) == pytest.approx(3.0, abs=0.05)
    old = next(v for k, v in across.items() if k.startswith("notebook06_16x1 (call 2) over notebook 06's GPU run"))
    assert old == pytest.approx(nb["tokens_per_s"] / 450.595) == pytest.approx(9.28, abs=0.01)
    assert lr.NB06_BEFORE["commit"][:7] in next(k for k in across if k.startswith("notebook06_16x1 (call 2) over notebook"))
    assert across["notebook06_16x1 (call 2) over 7b_16x1 (session 5 call 2): packed shipped chats vs one example per "
                  "row, same shape"] == pytest.approx(nb["tokens_per_s"] / t5["7b-16x1"])
    assert across["7b_16x1 full offload (session 5 call 2) over 7b_z3opt_8x2 (call 1): parameters offloaded vs on the "
                  "GPU"] == pytest.approx(t5["7b-16x1"] / t["7b-z3opt-8x2"])
    assert across["7b_z3opt_8x2 (call 1) optimizer_step over 7b_16x1's (session 5 call 2), medians of the steps after "
                  "the first"] == pytest.approx(_opt_median(raw["7b-z3opt-8x2"]) / _opt_median(raw5["7b-16x1"]))
    assert across["7b_z3opt_2x8 (call 1) over 7b_2x8 (session 5 call 2): parameters on the GPU vs offloaded at 2 x 8"] \
        == pytest.approx(t["7b-z3opt-2x8"] / t5["7b-2x8"])
    assert not any("session 5" in k or "notebook" in k for k in same)   # those compare across calls


def test_session6_rows_7b_count_estimates_and_statuses(session6):
    """The 7B rows (levers runs and notebook 06's) carry LLaMA-7B's parameter count, ZeRO-3's PCIe bytes of their
    offload, a 4090 projection below the H200's tokens/s and their pin_memory; liger-fp32-26 is the 3.4B shape,
    gpu_oom with its message; each estimate_vs_measured is cookbook.memory.compare of the row's plan, and notebook
    06's with its run's bucket sizes is its own summary.json's."""
    from cookbook.memory import compare, estimate
    from cookbook.models import model_spec
    from cookbook.plan import Plan
    from benchmarks.report import pcie_bytes
    rec, raw, _, nb = session6
    n7 = model_spec("llama-7b").num_params
    by = {r["name"]: r for r in rec["runs"]}
    assert {n: r["status"] for n, r in by.items()} == {**{n: r["status"] for n, r in raw.items()},
                                                       "notebook06-16x1": "ok"}
    sevens = [r for r in rec["runs"] if r["name"] != "liger-fp32-26"]
    assert {r["name"] for r in sevens} == {"7b-z3opt-2x8", "7b-z3opt-8x2", "7b-2x8-nopin", "notebook06-16x1"}
    for r in sevens:
        p, G = r["plan"], r["plan"]["grad_accum"]
        assert r["num_params"] == n7 == nb["num_params"] != lr.N_3B
        assert (p["zero_stage"], p["micro_batch"] * G, r["lever"]["bf16_states"]) == (3, 16, True)
        up, down = (4 * n7 * G, 2 * n7 * G) if p["offload_param"] == "cpu" else (2 * n7, 2 * n7 * G)
        assert (r["floor"]["pcie_bytes_up"], r["floor"]["pcie_bytes_down"]) == pcie_bytes(r) == (up, down)
        assert 0 < r["projection_rtx4090"]["tokens_per_s"] < r["tokens_per_s"]
        assert r["group"] == "levers"
    assert by["7b-2x8-nopin"]["pin_memory"] == {"offload_optimizer": False, "offload_param": False}
    assert by["notebook06-16x1"]["pin_memory"] == {"offload_optimizer": True, "offload_param": True}
    n = by["notebook06-16x1"]
    assert (n["tokens_per_s"], n["step_time_s"], n["peak_gpu_reserved_gib"], n["host_peak_gib"]) == (
        nb["tokens_per_s"], nb["step_time_s"], nb["peak_gpu_reserved_gib"], nb["host_peak_gib"])
    assert (n["plan"]["micro_batch"], n["plan"]["grad_accum"], n["plan"]["offload_param"]) == (16, 1, "cpu")
    assert "breakdown_median_ms" not in n and n["rows"]["packing"] is True
    assert by["7b-z3opt-8x2"]["breakdown_median_ms"]["optimizer_step"] == pytest.approx(_opt_median(raw["7b-z3opt-8x2"]))
    lg = by["liger-fp32-26"]
    assert lg["num_params"] == lr.N_3B and lg["status"] == "gpu_oom" and lg["message"] == raw["liger-fp32-26"]["message"]
    assert "floor" not in lg and lg["lever"]["liger"] and not lg["lever"]["bf16_states"]
    assert lg["estimate"]["gpu_total_gib"] == pytest.approx(21.9, abs=0.05)
    for name in ("7b-z3opt-8x2", "notebook06-16x1", "liger-fp32-26"):
        r = by[name]
        e = estimate(Plan(**dict(r["plan"], liger=bool(r["lever"]["liger"]))), bf16_states=bool(r["lever"]["bf16_states"]))
        g = e.gpu_gib
        rows = {x["quantity"]: x for x in r["estimate_vs_measured"]}
        assert rows["GPU reserved (peak)"]["estimate GiB"] == pytest.approx(g["total"] - g["cuda_context"], abs=1e-3)
        assert rows["host RSS (peak)"]["estimate GiB"] == pytest.approx(e.host_gib["total"], abs=1e-3)
        assert rows["GPU reserved (peak)"]["measured GiB"] == pytest.approx(r["peak_gpu_reserved_gib"], abs=1e-3)
        assert r["estimate_vs_measured"] == compare(e, r).to_dict("records")
    assert by["notebook06-16x1"]["estimate_vs_measured_run_config"] == nb["estimate_vs_measured"]
    assert [round(x["error %"], 1) for x in by["7b-z3opt-8x2"]["estimate_vs_measured"]] == [6.0, 0.3, -1.2]


def test_session6_committed_record_equals_a_fresh_build(session6):
    """data/reference/h200_levers_2026-12-02d.json is what build_session6() writes today."""
    rec = session6[0]
    assert json.loads(lr.OUT_SESSION6.read_text()) == json.loads(json.dumps(rec, indent=1, default=str))


def test_levers_figure_draws_the_named_rows(tmp_path):
    from benchmarks import levers_report as lr
    out = lr.figure(tmp_path / "levers.png")
    assert out.stat().st_size > 10_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every row the figure names is in its reference file, with a measured and a projected tokens/s
    for file, name, _ in lr.FIGURE_ROWS:
        run = next(r for r in json.loads((lr.ROOT / "data" / "reference" / file).read_text())["runs"] if r["name"] == name)
        assert run["tokens_per_s"] > run["projection_rtx4090"]["tokens_per_s"] > 0
