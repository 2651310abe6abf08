"""Issue 19 item 4: benchmarks/quality_gpu.py's merge of per-variant loss records (hand-made, hand-computed)."""
import json

import pytest

from benchmarks import quality_gpu as qg


def _rec(tmp_path, name, losses):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"variant": name, "losses": losses, "status": "ok", "message": "m"}))
    return p


def test_merge_gaps_by_hand_and_refusals(tmp_path):
    """exact 10 → 1 (last-2 mean 1.5), bf16 the same + 0.5 from step 6 (last-2 mean 2.0: +0.5, +33.3 %); the
    10-step means first differ by > 2 % in the window ending at step 10 (steps 1-10: 5.5 vs 5.75 = 4.5 %) -> step 1."""
    exact = [10.0 - i for i in range(10)]
    bf16 = [x + (0.5 if i >= 5 else 0.0) for i, x in enumerate(exact)]
    rec = qg.merge([_rec(tmp_path, "exact_adam", exact), _rec(tmp_path, "bf16_states", bf16)], k=2)
    assert rec["last2_mean_loss"] == {"exact_adam": 1.5, "bf16_states": 2.0}
    gap = rec["gaps_vs_exact_adam"]["bf16_states"]
    assert gap["last2_mean_minus_exact"] == pytest.approx(0.5) and gap["last2_relative_gap"] == pytest.approx(1 / 3)
    assert gap["first_step_10step_means_differ_by_2pct"] == 1
    assert gap["first_step_losses_differ_by_2pct"] == 6   # steps 1-5 equal; step 6: 5.5 vs 5.0
    with pytest.raises(ValueError, match="no exact_adam record"):
        qg.merge([_rec(tmp_path, "bf16_states", bf16)], k=2)
    with pytest.raises(ValueError, match="fewer than --last 20"):
        qg.merge([_rec(tmp_path, "exact_adam", exact)], k=20)
    with pytest.raises(ValueError, match="given twice"):
        qg.merge([_rec(tmp_path, "exact_adam", exact), _rec(tmp_path, "exact_adam", exact)], k=2)
    (tmp_path / "x.json").write_text("[1]")
    with pytest.raises(ValueError, match="not a record"):
        qg.merge([tmp_path / "x.json"], k=2)


def test_merge_keeps_machine_commands_and_speed_and_refuses_a_bad_command(tmp_path):
    """--machine and --command travel into the record; a variant with a plan and step times gets its speed:
    median s/step after the first (2.0, 3.0, 4.0, 2.5 -> 2.75 s), tokens/s = 8 x 1024 / 2.75."""
    exact = [10.0 - i for i in range(10)]
    p = tmp_path / "exact_adam.json"
    plan = {"model": "llama-3b", "num_gpus": 1, "seq_len": 1024, "micro_batch": 8, "grad_accum": 1,
            "precision": "bf16", "zero_stage": 2, "offload_optimizer": "cpu", "offload_param": "none",
            "gradient_checkpointing": True}
    p.write_text(json.dumps({"variant": "exact_adam", "losses": exact, "status": "ok", "plan": plan,
                             "step_times_s": [9.0, 2.0, 3.0, 4.0, 2.5]}))
    m = tmp_path / "machine.json"
    m.write_text(json.dumps({"gpu": "X", "deepspeed": "0.19.8"}))
    rec = qg.merge([p], k=2, machine=m, commands=["exact_adam=bash call.sh exact_adam 575"])
    assert rec["machine"] == {"gpu": "X", "deepspeed": "0.19.8"}
    assert rec["device_commands"] == {"exact_adam": "bash call.sh exact_adam 575"}
    sp = rec["speed"]["exact_adam"]
    assert sp["step_time_s_median"] == 2.75 and sp["tokens_per_s"] == pytest.approx(8192 / 2.75)
    with pytest.raises(ValueError, match="VARIANT=COMMAND"):
        qg.merge([p], k=2, commands=["bf16_states=x"])
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="--machine"):
        qg.merge([p], k=2, machine=tmp_path / "bad.json")


def test_quality_frame_shows_the_shipped_gpu_record_and_is_empty_without_one(tmp_path):
    """Notebook 06's table: one row per variant of the newest quality_curves file; the gap % recomputed from the
    raw per-step losses; a folder without such a record (another kind of file in it) gives an empty table."""
    import statistics
    from cookbook.reference import quality_frame
    df = quality_frame()
    assert list(df["variant"]) == ["exact adam", "bf16 states"]
    ref = json.loads((qg.ROOT / "data" / "reference" / "h200_quality_2026-12-02.json").read_text())
    mean = {n: statistics.fmean(json.loads((qg.ROOT / f).read_text())["losses"][-20:]) for n, f in ref["files"].items()}
    assert float(df.loc[1, "gap %"]) == pytest.approx(100 * (mean["bf16_states"] / mean["exact_adam"] - 1), abs=0.05)
    assert df.loc[0, "hardware"] == "NVIDIA H200 capped at 24 GiB" and df.loc[0, "lr"] == "2e-05"
    (tmp_path / "runs.json").write_text(json.dumps({"kind": "levers", "runs": []}))
    assert quality_frame(tmp_path).empty


def test_quality_line_states_the_shipped_gap_and_is_none_without_a_record(tmp_path):
    """The sentence notebook 06 puts in its headline (and the run-all report): both last-20 means and the gap,
    recomputed here from the record's curves."""
    import statistics
    from cookbook.reference import quality_line
    ref = json.loads((qg.ROOT / "data" / "reference" / "h200_quality_2026-12-02.json").read_text())
    a, b = (statistics.fmean(ref["curves"][n][-20:]) for n in ("exact_adam", "bf16_states"))
    line = quality_line()
    assert f"bf16 states {b:.3f} vs exact Adam {a:.3f} ({100 * (b / a - 1):+.1f} %)" in line
    assert "losses > 2 % apart from step 6" in line and "h200_quality_2026-12-02.json" in line
    assert quality_line(tmp_path) is None
