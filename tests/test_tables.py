"""The runs tables (cookbook.tables.estimate_check / runs_frame), the records behind them (cookbook.results:
loss_pair, run_record, complete_record, machine_record), the report's header (cookbook.report.machine_line)
and scripts/gpu_runs_table.py: hand-made records, every expected number worked out here by hand."""
from __future__ import annotations

import importlib.util
import json
from importlib import metadata
from pathlib import Path

import pytest

from cookbook import hardware, report, results, tables

ROOT = Path(__file__).resolve().parent.parent


def gpu_record(**over):
    """A completed GPU run as results.json keeps it: one rank, capped at 24 GiB, 4 steps; the comparison is
    the run's own (summary.json's estimate_vs_measured)."""
    rec = {"status": "ok", "hardware": "1 × NVIDIA H200 capped at 24 GiB", "world_size": 1, "steps": 4,
           "device": "NVIDIA H200", "estimate_device": "cuda", "losses": [12.5, 12.3, 12.3, 12.4],
           "first_loss": 12.5, "last_loss": 12.4, "first5_mean_loss": 12.375, "last5_mean_loss": 12.375,
           "tokens_per_s": 432.85, "step_time_s": 4.7314, "mfu": 0.00477, "duration_s": 188.0,
           "peak_gpu_allocated_gib": 6.4419, "peak_gpu_reserved_gib": 7.5098, "host_peak_gib": 39.6437,
           "estimate_gpu_gib": 5.699, "estimate_gpu_allocated_gib": 5.379, "estimate_host_gib": 32.99,
           "host_rss_steps_max_gib": 33.985, "save_verification": {"ok": True},
           "estimate_vs_measured": [
               {"quantity": "GPU allocated (peak)", "estimate GiB": 5.379, "measured GiB": 6.442, "error %": -16.5},
               {"quantity": "GPU reserved (peak)", "estimate GiB": 5.699, "measured GiB": 7.51, "error %": -24.1},
               {"quantity": "host RSS (peak)", "estimate GiB": 32.99, "measured GiB": 39.644, "error %": -16.8}]}
    rec.update(over)
    return rec


def test_estimate_check_verdicts_and_the_records_own_reason():
    checks = {c["quantity"]: c for c in tables.estimate_check(gpu_record())}
    assert [c["within"] for c in checks.values()] == [False, False, False]      # -16.5, -24.1, -16.8: all past 15
    assert checks["GPU reserved (peak)"]["estimate GiB"] == 5.699                 # the reserved basis, no context
    # allocated misses too: 6.442 - 5.379 = +1.06 GiB; the cache 7.51 - 6.442 = 1.07 measured, 5.699 - 5.379 = 0.32
    assert checks["GPU reserved (peak)"]["why"] == ("allocated misses too (-16 %, +1.06 GiB), and the allocator's cache "
                                                   "(reserved − allocated) was 1.07 GiB measured, 0.32 GiB estimated")
    # allocated: no record explains it and data/reference has no run of this (model-less) plan
    assert checks["GPU allocated (peak)"]["why"] == ("the estimate is 1.06 GiB below the measurement; the record does "
                                                    "not show which term differs (cause not isolated)")
    # host: the steps held at most 33.985 GiB; (32.99 - 33.985) / 33.985 = -2.93 %, within; the peak came later
    why = checks["host RSS (peak)"]["why"]
    assert why.startswith("during the steps the host RSS was at most 33.98 GiB (-3 %, within); the peak 39.64 GiB")
    assert why.endswith("this run saved and reloaded its 16-bit model after its last step")
    # two ranks: rank 0's step RSS is not the machine's, so no reason; without the save, none named
    # (39.644 - 32.99 = 6.65 GiB): the miss is said, its cause not claimed
    unexplained = "the estimate is 6.65 GiB below the measurement; the record does not show which term differs"
    two = {c["quantity"]: c for c in tables.estimate_check(gpu_record(world_size=2))}
    assert two["host RSS (peak)"]["why"].startswith(unexplained) and two["host RSS (peak)"]["within"] is False
    unsaved = {c["quantity"]: c for c in tables.estimate_check(gpu_record(save_verification=None))}
    assert "saved" not in unsaved["host RSS (peak)"]["why"]
    # steps far from the estimate too (40 GiB: (32.99 - 40)/40 = -17.5 %): no reason, the miss says "no"
    far = {c["quantity"]: c for c in tables.estimate_check(gpu_record(host_rss_steps_max_gib=39.0))}
    assert far["host RSS (peak)"]["why"].startswith(unexplained)


def test_an_unexplained_miss_names_the_same_plans_other_gpu_measurements(tmp_path):
    """LLaMA-7B, ZeRO-3 + full CPU offload, bf16 states: 80.99 GiB measured at 2 × 8 vs 101.35 estimated; a
    reference record of the same plan at 8 × 2 measured 102.24 GiB (data/reference/h200x2_2026-11-30.json's rung)."""
    plan = {"model": "llama-7b", "zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu", "seq_len": 1024}
    rung = {"name": "r", "status": "ok", "plan": dict(plan, micro_batch=8, grad_accum=2), "bf16_states": True,
            "host_peak_gib": 102.2351}
    other = dict(rung, plan=dict(plan, seq_len=512), host_peak_gib=50.0)              # another plan: not named
    fp32 = dict(rung, bf16_states=False, host_peak_gib=150.0)                           # fp32 states: not named
    (tmp_path / "ref.json").write_text(json.dumps({"rungs": [rung, other, fp32]}))
    rec = gpu_record(**plan, micro_batch=2, grad_accum=8, command="accelerate launch ... --bf16-states",
                     estimate_vs_measured=[
                         {"quantity": "GPU allocated (peak)", "estimate GiB": 3.643, "measured GiB": 3.795, "error %": -4.0},
                         {"quantity": "GPU reserved (peak)", "estimate GiB": 5.107, "measured GiB": 5.377, "error %": -5.0},
                         {"quantity": "host RSS (peak)", "estimate GiB": 101.354, "measured GiB": 80.989,
                          "error %": 25.1}])
    checks = {c["quantity"]: c for c in tables.estimate_check(rec, reference_dir=tmp_path)}
    # 101.354 - 80.989 = 20.365 → 20.36 (round half to even at 2 places of 20.365 is 20.36 or 20.37: f"{:.2f}")
    assert checks["host RSS (peak)"]["why"] == (
        f"the estimate is {101.354 - 80.989:.2f} GiB above this run's 80.99 GiB at micro batch 2 × 8; the same plan "
        "measured 102.24 GiB at micro batch 8 × 2 (ref.json) — the runs differ by more than the bar, and what "
        "differs between them is not isolated")
    assert checks["GPU allocated (peak)"]["why"] is None                                # within: no reason
    # the run itself in the reference folder (same batch, same number) is not "another measurement"
    (tmp_path / "ref.json").write_text(json.dumps({"rungs": [dict(rung, plan=dict(plan, micro_batch=2, grad_accum=8),
                                                                  host_peak_gib=80.989)]}))
    alone = {c["quantity"]: c for c in tables.estimate_check(rec, reference_dir=tmp_path)}
    assert alone["host RSS (peak)"]["why"].endswith("(cause not isolated)")


def test_reserved_miss_with_allocated_within_names_the_allocator_cache():
    rec = gpu_record(estimate_vs_measured=[
        {"quantity": "GPU allocated (peak)", "estimate GiB": 3.951, "measured GiB": 4.445, "error %": -11.1},
        {"quantity": "GPU reserved (peak)", "estimate GiB": 4.626, "measured GiB": 6.744, "error %": -31.4},
        {"quantity": "host RSS (peak)", "estimate GiB": 41.74, "measured GiB": 42.757, "error %": -2.4}])
    checks = {c["quantity"]: c for c in tables.estimate_check(rec)}
    assert [c["within"] for c in checks.values()] == [True, False, True]
    # reserved - allocated: 6.744 - 4.445 = 2.299 measured, 4.626 - 3.951 = 0.675 estimated
    assert checks["GPU reserved (peak)"]["why"] == ("allocated is within (-11 %): the miss is the allocator's cache, "
                                                   "reserved − allocated 2.30 GiB measured, 0.68 GiB estimated")
    row = tables.run_row("r", rec)
    assert row["peak GPU reserved GiB (estimate, error, ±15 %)"] == "6.74 (est 4.63, -31 %, no)"
    assert row["peak GPU allocated GiB (estimate, error, ±15 %)"] == "4.45 (est 3.95, -11 %, within)"
    assert row["why not within ±15 %"].startswith("GPU reserved: allocated is within")
    assert row["MFU %"] == 0.48 and row["tokens/s"] == 432.9                      # 100 · 0.00477; 432.85 → 1 place


def test_runs_frame_without_a_stored_comparison_uses_the_launch_estimate_on_each_basis():
    """run_record of a launch result: reserved basis = total − CUDA context, allocated = also − allocator cache."""
    result = {"status": "ok", "message": "m", "run_dir": "", "command": "c", "duration_s": 10.0,
              "summary": {"world_size": 1, "device": "NVIDIA H200", "gpu_memory_cap_gib": 24.0, "steps": 12,
                          "first5_mean_loss": 9.0, "last5_mean_loss": 7.0, "peak_gpu_allocated_gib": 4.0,
                          "peak_gpu_reserved_gib": 5.0, "host_peak_gib": 20.0, "mfu": 0.01, "tokens_per_s": 100.0},
              "metrics": [{"loss": 9.0 - i * 0.2, "host_rss_gib": 18.0 + i / 10} for i in range(12)],
              "estimate": {"gpu_gib": {"total": 6.2, "cuda_context": 0.7, "allocator_overhead": 0.5},
                           "host_gib": {"total": 25.0}, "device": "cuda"}}
    rec = results.run_record(result)
    assert rec["estimate_gpu_gib"] == pytest.approx(5.5) and rec["estimate_gpu_allocated_gib"] == pytest.approx(5.0)
    assert rec["host_rss_steps_max_gib"] == pytest.approx(19.1) and rec["hardware"] == "1 × NVIDIA H200 capped at 24 GiB"
    assert rec["loss_fell"]                                                   # 12 steps: 5-step means 9.0 → 7.0
    frame = tables.runs_frame({"run": rec})
    # allocated (5.0 - 4.0)/4.0 = +25 %; reserved (5.5 - 5.0)/5.0 = +10 %; host (25 - 20)/20 = +25 %
    assert frame.loc["run", "peak GPU allocated GiB (estimate, error, ±15 %)"] == "4.00 (est 5.00, +25 %, no)"
    assert frame.loc["run", "peak GPU reserved GiB (estimate, error, ±15 %)"] == "5.00 (est 5.50, +10 %, within)"
    assert frame.loc["run", "peak host GiB (estimate, error, ±15 %)"] == "20.00 (est 25.00, +25 %, no)"
    assert frame.loc["run", "loss"] == "9.000 → 7.000 (5-step means)" and frame.loc["run", "MFU %"] == 1.0
    # misses without a recorded reason are said to be unexplained (4.0 - 5.0 = 1.00 GiB; 25 - 20 = 5.00 GiB)
    assert frame.loc["run", "why not within ±15 %"] == (
        "GPU allocated: the estimate is 1.00 GiB above the measurement; the record does not show which term differs "
        "(cause not isolated); host RSS: the estimate is 5.00 GiB above the measurement; the record does not show "
        "which term differs (cause not isolated)")


def test_loss_pair_first_and_last_step_under_ten_steps():
    short = {"losses": [12.47, 12.29, 12.32, 12.42], "steps": 4, "first5_mean_loss": 12.375, "last5_mean_loss": 12.375}
    assert results.loss_pair(short) == {"first": 12.47, "last": 12.42, "steps": 4, "basis": "step 1 → step 4"}
    ten = {"losses": [float(v) for v in range(10, 0, -1)], "steps": 10}       # means of 10..6 and 5..1
    assert results.loss_pair(ten) == {"first": 8.0, "last": 3.0, "steps": 10, "basis": "5-step means"}
    assert results.loss_pair({"losses": [], "steps": 0}) is None
    # the record's loss_fell follows the same pair: 4 steps 12.47 → 12.42 fell (the equal means would say not)
    rec = results.run_record({"status": "ok", "summary": {"steps": 4, "first_loss": 12.47, "last_loss": 12.42,
                                                          "first5_mean_loss": 12.375, "last5_mean_loss": 12.375},
                              "metrics": [{"loss": v} for v in short["losses"]]})
    assert rec["loss_fell"] is True


def test_oom_run_keeps_its_planned_world_size_and_the_cap(tmp_path, monkeypatch):
    run_dir = tmp_path / "02_zero2" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "run.resolved.yaml").write_text("model: qwen2-14b-share8\nemulate-gpu-memory-gib: 24.0\nnum-processes: 1\n")
    oom = {"status": "gpu_oom", "message": "rank 0 ran out of GPU memory", "run_dir": str(run_dir), "summary": None,
           "metrics": [], "estimate": {"gpu_gib": {"total": 38.7, "cuda_context": 0.7}, "host_gib": {"total": 1.2},
                                       "device": "cuda", "plan": {"num_gpus": 1, "model": "qwen2-14b-share8",
                                                                  "micro_batch": 1, "seq_len": 512}}}
    monkeypatch.setattr(hardware, "nvml_gpus", lambda: [{"name": "NVIDIA H200", "memory_gib": 139.8}])
    rec = results.run_record(oom)
    assert rec["hardware"] == "1 × NVIDIA H200 capped at 24 GiB" and rec["world_size"] == 1
    assert rec["model"] == "qwen2-14b-share8" and rec["shape_from"] == "plan" and rec["gpu_memory_cap_gib"] == 24.0
    assert rec["estimate_gpu_gib"] == pytest.approx(38.0)                    # 38.7 less the 0.7 GiB context
    row = tables.runs_frame({"ZeRO-2": rec}).loc["ZeRO-2"]
    assert row["world size"] == 1 and row["peak GPU reserved GiB (estimate, error, ±15 %)"] == "—"
    # an older record of it, moved: completed from the copied folder, the GPU unnamed (not this machine's)
    old = {"status": "gpu_oom", "hardware": "GPU", "world_size": None, "run_dir": "/gone/02_zero2/run",
           "estimate_device": "cuda", "losses": []}
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "host_rss_gib": 3.5}\n{"step": 2, "host_rss_gib": 3.25}\n')
    done = results.complete_record(old, tmp_path / "02_zero2")
    assert done["hardware"] == "1 × GPU capped at 24 GiB" and done["world_size"] == 1
    assert done["model"] == "qwen2-14b-share8" and done["host_rss_steps_max_gib"] == 3.5
    assert old["hardware"] == "GPU"                                           # the record itself is not modified
    assert results.complete_record(old, tmp_path / "elsewhere") == old        # no folder: as it is


def test_completed_run_moved_gets_its_cap_in_the_label(tmp_path):
    run_dir = tmp_path / "05_final_8x4090" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"fingerprint": {"world_size": 1},
                                                  "args": {"emulate_gpu_memory_gib": 24.0}}))
    (run_dir / "summary.json").write_text(json.dumps({"device": "NVIDIA H200", "world_size": 1}))
    done = results.complete_record(gpu_record(hardware="1 × NVIDIA H200", run_dir="/tmp/x/05_final_8x4090/run",
                                              host_rss_steps_max_gib=None), tmp_path / "05_final_8x4090")
    assert done["hardware"] == "1 × NVIDIA H200 capped at 24 GiB" and done["gpu_memory_cap_gib"] == 24.0


def test_record_keeps_the_machine_and_the_runs_table_label(tmp_path):
    frame = tables.runs_frame({"ZeRO-3": gpu_record()})
    path = results.record(tmp_path / "nb", "05_final_8x4090", rehearsal=False, runs={"ZeRO-3": gpu_record()},
                          tables={"memory and throughput": frame})
    data = json.loads(path.read_text())
    m = data["machine"]
    for name in ("torch", "transformers", "accelerate", "deepspeed"):
        try:
            assert m[name] == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert m[name] is None
    assert m["cpu_cores"] and m["host_memory_gib"] > 0 and m["date"] == data["recorded"][:10]
    (row,) = data["tables"]["memory and throughput"]
    assert row["run"] == "ZeRO-3" and row["loss"] == "12.500 → 12.400 (step 1 → step 4)"


def test_record_refuses_a_field_that_would_replace_its_own_keys(tmp_path):
    """Notebook 00 once passed recorded=<its dict of recorded machines>, which replaced record()'s timestamp."""
    import datetime as dt
    with pytest.raises(ValueError, match=r"field\(s\) recorded would overwrite .*recorded_details= instead of recorded="):
        results.record(tmp_path / "nb", "00_environment", rehearsal=True, recorded={"a box": {}})
    with pytest.raises(ValueError, match=r"field\(s\) machine, recorded would overwrite"):
        results.record(tmp_path / "nb", "00_environment", rehearsal=True, machine="x", recorded=1)
    assert not (tmp_path / "nb").exists()  # nothing written
    before = dt.datetime.now().replace(microsecond=0)
    data = json.loads(results.record(tmp_path / "nb", "00_environment", rehearsal=True,
                                     recorded_machines={"a box": {"rtx40_p2p": "fail"}}).read_text())
    assert dt.datetime.fromisoformat(data["recorded"]) >= before  # the timestamp is kept
    assert data["recorded_machines"] == {"a box": {"rtx40_p2p": "fail"}}


def test_machine_line_names_gpu_cap_host_and_versions():
    machine = {"gpus": [{"name": "NVIDIA H200", "memory_gib": 139.8}], "host_memory_gib": 125.8, "cpu_cores": 16,
               "python": "3.12.3", "torch": "2.11.0+cu130", "transformers": "5.17.0", "accelerate": "1.15.0",
               "deepspeed": "0.19.8", "date": "2026-12-01"}
    runs = {"a": dict(gpu_record(), gpu_memory_cap_gib=24.0), "b": {"status": "gpu_oom", "estimate_device": "cuda",
                                                                   "gpu_memory_cap_gib": 24.0}}
    line = report.machine_line([{"recorded": "2026-12-01T11:00:31", "machine": machine, "runs": runs},
                                {"recorded": {"a notebook's own field": 1}, "runs": {}}])
    assert line.startswith("<b>Machine</b>: 1 × NVIDIA H200 (139.8 GiB), every GPU run capped at 24 GiB per rank")
    assert "; 125.8 GiB host RAM; 16 CPU cores. <b>Date</b>: 2026-12-01. " in line
    assert line.endswith("<b>Versions</b>: Python 3.12.3, torch 2.11.0+cu130, transformers 5.17.0, "
                         "accelerate 1.15.0, DeepSpeed 0.19.8.")
    old = report.machine_line([{"recorded": "2026-12-01T11:00:31", "runs": {"a": gpu_record(gpu_memory_cap_gib=24.0)}}])
    assert old.startswith("<b>Machine</b>: NVIDIA H200, every GPU run capped at 24 GiB") and "host RAM not recorded" in old
    assert "torch, transformers, accelerate, DeepSpeed not recorded" in old


def test_report_shows_the_check_and_rebuilds_an_old_runs_table(tmp_path):
    nb = tmp_path / "05_final_8x4090"
    nb.mkdir()
    old_table = [{"status": "ok", "hardware": "1 × NVIDIA H200", "world size": 1, "steps": 4, "loss first 5": 12.375,
                  "loss last 5": 12.375, "tokens/s": 432.9, "estimate GPU GiB": 6.4, "duration s": 188.0}]
    (nb / "results.json").write_text(json.dumps({"notebook": "05_final_8x4090", "rehearsal": False,
                                                 "recorded": "2026-12-01T11:10:13", "runs": {"ZeRO-3 + opt→cpu": gpu_record()},
                                                 "tables": {"memory and throughput": old_table}}))
    page = report.write_html_report(tmp_path, [{"name": "05_final_8x4090", "status": "ok", "duration_s": 1.0,
                                                "output_dir": str(nb)}], embed_images=False)
    text = page.read_text()
    assert text.count("7.51 (est 5.70, -24 %, no)") == 2          # the GPU section and the rebuilt table
    assert "12.375" not in text and text.count("12.500 → 12.400 (step 1 → step 4)") == 2
    assert "<td>6.4</td>" not in text and "during the steps the host RSS was at most 33.98 GiB" in text
    assert "<b>Date</b>: 2026-12-01" in text


def test_gpu_runs_table_script_prints_the_library_check(tmp_path, capsys):
    nb = tmp_path / "04_zero3_offload"
    nb.mkdir()
    rec = gpu_record(estimate_vs_measured=[
        {"quantity": "GPU allocated (peak)", "estimate GiB": 3.951, "measured GiB": 4.445, "error %": -11.1},
        {"quantity": "GPU reserved (peak)", "estimate GiB": 4.626, "measured GiB": 6.744, "error %": -31.4},
        {"quantity": "host RSS (peak)", "estimate GiB": 41.74, "measured GiB": 42.744, "error %": -2.3}],
        model="qwen2-14b-share8", mfu=0.00525, tokens_per_s=476.16, step_time_s=4.3011)
    (nb / "results.json").write_text(json.dumps({"notebook": "04_zero3_offload", "runs": {"ZeRO-3": rec}}))
    spec = importlib.util.spec_from_file_location("gpu_runs_table", ROOT / "scripts" / "gpu_runs_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("| 04_zero3_offload | ZeRO-3 | qwen2-14b-share8 | ok | 476 | 0.5 % | 4.30 | "
                               "3.95 / 4.45 (-11 %, yes) | 4.63 / 6.74 (-31 %, **no**) | 41.74 / 42.74 (-2 %, yes) |")
    assert mod.main([str(tmp_path / "none")]) == 2


def test_partition_line_reads_the_recorded_shares_and_says_when_none():
    """ZeRO-3 on 2 ranks of 354,880 elements split 177,440 + 177,440 (the tiny model's run in
    docs/benchmarks): 50.0 % at most on one rank; a run without a summary says it recorded none."""
    from types import SimpleNamespace
    from cookbook.tables import partition_line
    run = SimpleNamespace(status="ok", summary={"zero_partition": {"kind": "zero3 params", "per_rank_numel": [177440, 177440],
                                                                   "full_numel": 354880}})
    assert partition_line(run) == ("ZeRO partition (zero3 params): per-rank elements 177,440, 177,440 of 354,880 "
                                   "(50.0% at most on one rank; 1/2 = 50.0%)")
    assert partition_line(SimpleNamespace(status="gpu_oom", summary=None)).startswith(
        "ZeRO partition: not recorded — the run ended gpu_oom")
