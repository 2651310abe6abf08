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
    with pytest.raises(ValueError, match="no exact_adam record"):
        qg.merge([_rec(tmp_path, "bf16_states", bf16)], k=2)
    with pytest.raises(ValueError, match="fewer than --last 20"):
        qg.merge([_rec(tmp_path, "exact_adam", exact)], k=20)
    with pytest.raises(ValueError, match="given twice"):
        qg.merge([_rec(tmp_path, "exact_adam", exact), _rec(tmp_path, "exact_adam", exact)], k=2)
    (tmp_path / "x.json").write_text("[1]")
    with pytest.raises(ValueError, match="not a record"):
        qg.merge([tmp_path / "x.json"], k=2)
