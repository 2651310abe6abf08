"""Issue 18: the nvme suite's results.json -> data/reference record (benchmarks/nvme_reference.py), and
cookbook.nvme.reference_runs reading it as one tidy row per measured run. Hand-made records, hand-computed values."""
import json

import pytest

from benchmarks import nvme_reference as nr
from cookbook.nvme import REFERENCE_COLUMNS, reference_lines, reference_runs

GIB = 2 ** 30


def _rung(name, model, params, aio, host, host_est, disk, disk_est, step, status="ok"):
    return {"name": name, "group": "nvme", "status": status, "message": "finished" if status == "ok" else "stopped",
            "num_params": params, "rung": {"model": f"benchmarks/models/{model}", "aio": aio, "micro_batch": 4,
                                           "grad_accum": 1, "seq_len": 1024},
            "metrics": [{"step_time_s": 2 * step if step else None}, {"step_time_s": step}, {"step_time_s": step}],
            "host_peak_gib": host, "peak_gpu_allocated_gib": 3.0, "peak_gpu_reserved_gib": 4.0,
            "nvme": {"aio_setting": aio, "aio": {"queue_depth": 8}, "s_per_step": step, "tokens_per_s": 4096 / step if step else None,
                     "host_peak_gib": host, "host_estimate_gib": host_est,
                     "host_error_pct": round(100 * (host_est - host) / host, 1),
                     "disk_bytes_measured": disk, "disk_bytes_estimate": disk_est, "disk_error_pct": 0.0,
                     "floor_serial_s": step / 2 if step else None, "achieved_over_floor": 0.5,
                     "bandwidth": {"read_gb_s": 1.46, "write_gb_s": 1.28}}}


@pytest.fixture
def results():
    tune = {"name": "nvme-tune", "group": "nvme_tune", "status": "ok", "read_share": 0.6,
            "tune": {"aio": {"block_size": 1048576, "queue_depth": 32, "intra_op_parallelism": 4,
                             "single_submit": False, "overlap_events": True},
                     "offload_param": {"buffer_count": 2, "buffer_size": 100000000},
                     "measured": {"best": {"read_gb_s": 1.47, "write_gb_s": 1.98},
                                  "deepspeed_default": {"read_gb_s": 1.46, "write_gb_s": 1.28},
                                  "speedup_vs_default": {"read": 1.007, "write": 1.547}}}}
    return {"suite_started": 1796083200.0, "on_gpu": True, "results": [
        tune,
        _rung("nvme-134m-default", "llama-134m", 100_000_000, "default", 6.0, 5.0, 2 * GIB, 2 * GIB, 2.0),
        _rung("nvme-1b-default", "llama-1b", 1_100_000_000, "default", 30.0, 27.0, 18 * GIB, 18.4 * GIB, 40.0),
        _rung("nvme-3b-tuned", "llama-3b", 3_400_000_000, "tuned", 31.0, 40.0, 20 * GIB, 57 * GIB, None,
              status="timeout")]}


def test_host_fit_by_hand(results):
    """measured − E over (0.1 B, 6 − 5) and (1.1 B, 30 − 27): b = 2 GiB per billion, a = 0.8 GiB; 7B (N = 6.738415616 B,
    E = 45 GiB): 45 + 0.8 + 2 × 6.738415616 = 59.28; ratios 45 × 6/5 = 54.0 and 45 × 30/27 = 50.0; the timed-out run
    is left out."""
    runs = [nr.run_row(r) for r in results["results"][1:]]
    fit = nr.host_fit(runs, target_params=6_738_415_616, target_estimate=45.0)
    assert fit["status"] == "ok" and len(fit["points"]) == 2
    assert fit["fixed_gib"] == pytest.approx(0.8) and fit["per_billion_gib"] == pytest.approx(2.0)
    assert fit["central_gib"] == pytest.approx(59.28, abs=0.005)
    assert (fit["low_gib"], fit["high_gib"]) == (pytest.approx(50.0), pytest.approx(59.28, abs=0.005))
    # the plain line through (0.1, 6) and (1.1, 30): c = 3.6, k = 24 -> 165.32 GiB, reported, not in the bar
    assert fit["plain_line"]["gib_7b"] == pytest.approx(3.6 + 24 * 6.738415616, abs=0.005)
    assert "fits 64" in fit["verdict"]
    assert nr.host_fit(runs[2:], target_params=1, target_estimate=1.0)["status"] == "no_points"


def test_reference_runs_reads_the_converted_record(results, tmp_path, monkeypatch):
    monkeypatch.setattr(nr, "target_estimate_gib", lambda target=nr.TARGET: 45.0)
    rec = nr.convert(results, date="2026-12-02")
    (tmp_path / "h200_nvme_runs_2026-12-02.json").write_text(json.dumps(rec))
    (tmp_path / "h200_nvme_2026-12-01.json").write_text(json.dumps({  # a disk probe (benchmarks/nvme_bench.py)
        "best": "bs1M-qd32-p4", "settings": [
            {"name": "deepspeed-default", "block_size": 1048576, "queue_depth": 8, "single_submit": False,
             "overlap_events": True, "intra_op_parallelism": 1, "write_gb_s": 1.28, "read_gb_s": 1.46},
            {"name": "bs1M-qd32-p4", "block_size": 1048576, "queue_depth": 32, "single_submit": False,
             "overlap_events": True, "intra_op_parallelism": 4, "write_gb_s": 1.98, "read_gb_s": 1.47}]}))
    df = reference_runs(tmp_path)
    assert list(df.columns) == REFERENCE_COLUMNS
    assert list(df["kind"]) == ["disk probe", "aio tune", "NVMe run", "NVMe run", "NVMe run", "7B host extrapolation"]
    probe = df.iloc[0]
    assert (probe["read GB/s"], probe["write GB/s"]) == (1.46, 1.28) and "1.98" in probe["note"]
    tune = df.iloc[1]
    assert (tune["read GB/s"], tune["write GB/s"]) == (1.46, 1.28) and '"queue_depth": 32' in tune["note"]
    one_b = df[df["model"] == "llama-1b"].iloc[0]
    assert one_b["params"] == 1_100_000_000 and one_b["aio"] == "default" and one_b["status"] == "ok"
    assert one_b["s/step"] == 40.0 and one_b["tokens/s"] == pytest.approx(102.4)
    assert one_b["host peak GiB"] == 30.0 and one_b["host estimate GiB"] == 27.0 and one_b["host error %"] == -10.0
    assert one_b["disk GiB"] == 18.0 and one_b["disk estimate GiB"] == pytest.approx(18.4)
    assert one_b["achieved/floor"] == 0.5
    stopped = df[df["model"] == "llama-3b"].iloc[0]
    assert stopped["status"] == "timeout" and stopped["note"] == "stopped"
    seven = df.iloc[-1]
    assert seven["model"] == "llama-7b" and seven["host peak GiB"] == pytest.approx(59.28, abs=0.005)
    assert rec["bandwidth"]["speedup_vs_default"]["write"] == 1.547
    (tmp_path / "x_nvme_other.json").write_text("[1, 2]")
    assert reference_runs(tmp_path)["kind"].iloc[-1] == "not understood"


# ----------------------------------------------------------------------------------------------
# notebook 06's "NVMe offload measured on GPUs": one tidy row per run, the bandwidth as short lines

def _record(date, runs, free=14.2682):
    return {"kind": "nvme_runs", "date": date, "machine": {"disk_free_gib": free},
            "bandwidth": {"default": {"read_gb_s": 0.937, "write_gb_s": 2.1578},
                          "best": {"read_gb_s": 1.1202, "write_gb_s": 2.1688},
                          "best_aio": {"block_size": 1048576, "queue_depth": 32, "intra_op_parallelism": 4,
                                       "single_submit": False, "overlap_events": True}},
            "runs": runs}


def _run(model, aio, status, message, **measured):
    return {"model": model, "params": 1_100_048_384, "aio": aio, "status": status, "message": message, **measured}


def test_reference_run_table_rows_causes_and_bandwidth_lines(tmp_path):
    from cookbook.nvme import RUN_TABLE_COLUMNS, reference_lines, reference_run_table
    ok = _run("m-small", "default", "ok", "4 steps", s_per_step=3.0954, tokens_per_s=1323.26, host_peak_gib=6.6618,
              host_estimate_gib=5.6288, host_error_pct=-15.5, disk_gib=2.248, disk_estimate_gib=1.998,
              achieved_over_floor=1.0610)
    buffers = _run("m-big", "default", "failed", "rank0: AssertionError: Not enough buffers 0 for swapping 1",
                   disk_estimate_gib=18.44)
    full = _run("m-big", "tuned", "failed", "rank0: OSError: [Errno 28] No space left on device",
                disk_gib=15.81, disk_estimate_gib=18.44)
    (tmp_path / "a_nvme_runs_2026-12-01.json").write_text(json.dumps(_record("2026-12-01", [ok, buffers, full])))
    frame = reference_runs(tmp_path)
    table = reference_run_table(frame)
    assert list(table.columns) == RUN_TABLE_COLUMNS and len(table) == 3  # runs only: no bandwidth row
    first = table.iloc[0]
    assert (first["model"], first["aio"], first["status"]) == ("m-small", "default", "ok")
    assert (first["s/step"], first["tokens/s"], first["host peak GiB"], first["host estimate GiB"]) == \
        (3.1, 1323.0, 6.66, 5.63)
    assert (first["disk GiB"], first["disk estimate GiB"], first["achieved/floor"]) == (2.25, 2.0, 1.06)
    assert first["parameters (B)"] == 1.1 and first["stopped with"] == ""
    assert first["estimate basis"] == "as run, before the runtime term"  # no host_estimate_now_gib in that record
    from cookbook.nvme import _estimate_basis
    assert _estimate_basis({"host_estimate_gib": 33.62, "host_estimate_now_gib": 33.623}) == "held out"
    assert _estimate_basis({"host_estimate_gib": 32.62, "host_estimate_now_gib": 33.623}) == "re-based, fitted on"
    assert _estimate_basis({}) is None
    stop = table.iloc[1]["stopped with"]
    assert stop.startswith("rank0: AssertionError: Not enough buffers 0 for swapping 1 — DeepSpeed #3062")
    assert "build_config" in stop and "not re-run since" in stop
    assert table.iloc[1]["s/step"] == "—" and table.iloc[1]["tokens/s"] == "—"  # nothing measured, no NaN shown
    disk = table.iloc[2]["stopped with"]  # 18.44 estimated against the record's 14.2682 GiB free
    assert "No space left on device" in disk and "18.4 GiB of swap files estimated, 14.3 GiB free" in disk
    assert not any(str(v) in ("nan", "None") for v in table.to_numpy().ravel())
    assert list(frame["cause (short)"].dropna()) == ["DeepSpeed #3062; fixed since in build_config, not re-run",
                                                      "disk full; launch now refuses it before the start, not re-run"]
    # the bandwidth: default vs tuned, ratios by hand: 1.1202 / 0.937 = 1.196, 2.1688 / 2.1578 = 1.005
    (line,) = reference_lines(frame)
    assert line == ("a_nvme_runs_2026-12-01.json — cookbook nvme-tune: DeepSpeed's default aio read 0.94 / write "
                    "2.16 GB/s; tuned (block 1 MiB, queue depth 32, 4 thread(s)) read 1.12 / write 2.17 GB/s "
                    "(1.20× / 1.01×)")
    # a later record with a finished run of the same model and aio: that stop says where it ran since; the
    # tuned run's stop is still "not re-run" (a default-aio run is not a re-run of it)
    later = _run("m-big", "default", "ok", "4 steps", s_per_step=20.0, tokens_per_s=204.8)
    (tmp_path / "b_nvme_runs_2026-12-05.json").write_text(json.dumps(_record("2026-12-05", [later])))
    frame = reference_runs(tmp_path)
    assert list(frame["cause (short)"].dropna()) == [
        "DeepSpeed #3062; fixed since in build_config, ran since: b_nvme_runs_2026-12-05.json, ok",
        "disk full; launch now refuses it before the start, not re-run"]
    # a run that never started (not_run) gets the same pointer once one ran
    skipped = _run("m-big", "tuned", "not_run", "not run, 64 s left before the suite's deadline")
    done = _run("m-big", "tuned", "ok", "3 steps", s_per_step=21.0)
    (tmp_path / "c_nvme_runs_2026-12-06.json").write_text(json.dumps(_record("2026-12-06", [skipped])))
    (tmp_path / "d_nvme_runs_2026-12-07.json").write_text(json.dumps(_record("2026-12-07", [done])))
    frame = reference_runs(tmp_path)
    row = frame[(frame["file"] == "c_nvme_runs_2026-12-06.json") & (frame["kind"] == "NVMe run")].iloc[0]
    assert row["cause (short)"] == "ran since: d_nvme_runs_2026-12-07.json, ok"


def test_shipped_3062_stop_is_fixed_in_build_config():
    """The shipped record's 1.1B run stopped with DeepSpeed #3062: its config then (stage3_max_reuse_distance 1e9,
    DeepSpeed's default, with the run's recorded offload_param block) is flagged by the linter; the one
    build_config writes now for the same rung is not — what "fixed since in build_config" says."""
    import copy
    from pathlib import Path

    from cookbook.dsconfig import build_config
    from cookbook.lint import lint
    from cookbook.plan import Plan
    root = Path(__file__).resolve().parent.parent
    rec = json.loads((root / "data" / "reference" / "h200_nvme_runs_2026-12-01.json").read_text())
    run = next(r for r in rec["runs"] if "Not enough buffers" in str(r.get("message")))
    model = str(root / "benchmarks" / "models" / run["model"])
    plan = Plan(model=model, num_gpus=1, gpu_memory_gib=24, zero_stage=3, offload_optimizer="nvme",
                offload_param="nvme", nvme_path="/tmp/nvme", micro_batch=run["micro_batch"],
                grad_accum=run["grad_accum"], seq_len=run["seq_len"], precision="bf16")
    new = build_config(plan, "accelerate", lr=1e-5, warmup_steps=1, total_steps=4)
    old = copy.deepcopy(new)
    old["zero_optimization"]["stage3_max_reuse_distance"] = 10 ** 9
    old["zero_optimization"]["offload_param"].update(run["offload_param"])
    assert new["zero_optimization"]["stage3_max_reuse_distance"] == 0

    def flagged(cfg):
        return [f for f in lint(cfg, world_size=1, mode="accelerate", model=model, plan=plan)
                if f.path == "zero_optimization.offload_param.buffer_count"]
    assert flagged(old) and "#3062" in flagged(old)[0].message and not flagged(new)
    cause = reference_runs()
    cause = cause[cause["note"].astype(str).str.contains("Not enough buffers")]["cause"].iloc[0]
    assert "#3062" in cause and "build_config" in cause


def test_check_run_shows_units_and_error(tmp_path):
    """The notebook's own NVMe run beside the estimate: MiB below 1 GiB, error % = (estimate − measured) / measured."""
    from cookbook.nvme import check_run, estimate_nvme
    from cookbook.plan import Plan
    plan = Plan(model="tiny-llama", num_gpus=1, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                nvme_path=str(tmp_path), micro_batch=1, grad_accum=1, seq_len=32, precision="bf16")
    est = estimate_nvme(plan, device="cpu")
    (tmp_path / "zero_stage_3").mkdir()
    (tmp_path / "zero_stage_3" / "a.swp").write_bytes(b"\0" * 4 * 2 ** 20)  # 4 MiB of swap files
    summary = {"nvme_io": {"measured_disk_io": {"read_gb_per_step": est.read_bytes_per_step / 1e9 * 1.1,
                                                "write_gb_per_step": None}}}
    table = check_run(plan, None, summary, device="cpu").set_index("quantity")
    disk = table.loc["SSD bytes (swap files)"]
    assert est.disk_bytes < GIB and disk["unit"] == "MiB" and disk["measured"] == 4.0
    assert disk["estimate"] == round(est.disk_bytes / 2 ** 20, 3)
    assert disk["error %"] == round(100 * (est.disk_bytes - 4 * 2 ** 20) / (4 * 2 ** 20), 1)
    read = table.loc["bytes read per optimizer step (/proc/self/io)"]
    assert read["error %"] == pytest.approx(round(100 * (1 / 1.1 - 1), 1))
    written = table.loc["bytes written per optimizer step (/proc/self/io)"]
    assert written["measured"] == "—" and written["error %"] == "—"  # not measured: said, not NaN


def test_two_calls_default_vs_tuned_and_the_held_out_band(results, tmp_path, monkeypatch):
    """Two calls in one record: the same-call default-vs-tuned ratio (default 40 s/step, tuned 32: 1.25×; later
    steps 40, 40 and 30, 34: spread (34 − 30)/32 = 12.5 %), and a run estimated with today's runtime term already in
    (held out) takes the as-run ratios out of the band."""
    monkeypatch.setattr(nr, "target_estimate_gib", lambda target=nr.TARGET: 45.0)
    call2 = {"suite_started": 1796090000.0, "on_gpu": True, "results": [
        _rung("nvme-1b-default", "llama-1b", 1_100_000_000, "default", 30.0, 30.0, 18 * GIB, 18 * GIB, 40.0),
        dict(_rung("nvme-1b-tuned", "llama-1b", 1_100_000_000, "tuned", 30.0, 30.0, 18 * GIB, 18 * GIB, 32.0),
             metrics=[{"step_time_s": 50.0}, {"step_time_s": 30.0}, {"step_time_s": 34.0}])]}
    rec = nr.convert([results, call2], source=["c1/results.json", "c2/results.json"], date="2026-12-02")
    assert [c["runs"] for c in rec["calls"]] == [["nvme-134m-default", "nvme-1b-default", "nvme-3b-tuned"],
                                                 ["nvme-1b-default", "nvme-1b-tuned"]]
    (cmp,) = rec["aio_comparison"]  # call 1 has no tuned llama-1b: only call 2 compares
    assert cmp["source"] == "c2/results.json" and cmp["speedup"] == pytest.approx(1.25)
    assert cmp["spread_pct"] == pytest.approx(12.5)
    fit = rec["host_fit"]
    assert fit["held_out_runs"] == []  # the hand-made rungs carry no runtime term: nothing is held out
    # notebook 06's lines: the tune of the call that had one, named by its call; the default-vs-tuned line
    (tmp_path / "x_nvme_runs_2026-12-02.json").write_text(json.dumps(rec))
    lines = reference_lines(reference_runs(tmp_path))
    assert lines[0].startswith("x_nvme_runs_2026-12-02.json — cookbook nvme-tune in call 1 (nvme-134m-default, "
                               "nvme-1b-default, nvme-3b-tuned): DeepSpeed's default aio read 1.46 / write 1.28 GB/s")
    assert "llama-1b: tuned aio 32.00 s/step vs DeepSpeed's default 40.00 in the same call (1.25×" in lines[1]
    (tmp_path / "x_nvme_runs_2026-12-02.json").unlink()
    # with a term recorded: as-run estimate 29.0 GiB, today's 30.0 -> ratio_as_run kept out once one run is held out
    rows = [dict(nr.run_row(r), source="c2") for r in call2["results"]]
    rows[0].update(host_estimate_gib=29.0, host_estimate_now_gib=30.0)
    rows[1].update(host_estimate_gib=30.0, host_estimate_now_gib=30.0)
    fit = nr.host_fit(rows, target_params=6_738_415_616, target_estimate=45.0)
    assert fit["held_out_runs"] == ["nvme-1b-tuned"]
    assert fit["predictions"]["ratio_as_run:nvme-1b-default"] == pytest.approx(45 * 30 / 29, abs=0.005)
    assert (fit["low_gib"], fit["high_gib"]) == (pytest.approx(45.0), pytest.approx(45.0))
    # the CLI: two results files and an earlier record for the fit; a --fit-also that is not a record is refused
    for i, d in enumerate((results, call2)):
        (tmp_path / f"r{i}.json").write_text(json.dumps(d))
    (tmp_path / "old.json").write_text(json.dumps({"runs": [rows[0]]}))
    out = tmp_path / "h200_nvme_runs_x.json"
    assert nr.main(["--from-results", str(tmp_path / "r0.json"), str(tmp_path / "r1.json"), "--write", str(out),
                    "--fit-also", str(tmp_path / "old.json")]) == 0
    written = json.loads(out.read_text())
    assert len(written["runs"]) == 5 and len(written["host_fit"]["points"]) == 5  # 4 ok runs + the earlier one
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(SystemExit):
        nr.main(["--from-results", str(tmp_path / "r0.json"), "--fit-also", str(tmp_path / "bad.json")])


def test_cli_refuses_what_is_not_a_results_file(results, tmp_path, capsys):
    """A reference record passed as results (the easy mix-up with --fit-also), a list, a file given twice, a
    typed --machine that is missing, a --write folder that does not exist: each a one-line error naming the flag."""
    good = tmp_path / "results.json"
    good.write_text(json.dumps(results))
    (tmp_path / "record.json").write_text(json.dumps({"kind": "nvme_runs", "runs": []}))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "other.json").write_text(json.dumps({"results": [{"name": "recipe"}]}))
    cases = [(["--from-results", str(tmp_path / "record.json")], "pass it to --fit-also"),
             (["--from-results", str(tmp_path / "list.json")], "not a `gpu_bench --suite nvme` results.json"),
             (["--from-results", str(tmp_path / "other.json")], "no NVMe rung in its results (names: recipe)"),
             (["--from-results", str(good), str(good)], "a file is given twice"),
             (["--from-results", str(good), "--machine", str(tmp_path / "nope.json")], "--machine"),
             (["--from-results", str(good), "--write", str(tmp_path / "no" / "x.json")], "does not exist")]
    for argv, says in cases:
        with pytest.raises(SystemExit) as e:
            nr.main(argv)
        assert e.value.code == 2
        assert says in capsys.readouterr().err
