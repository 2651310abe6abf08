"""Every measured number the cookbook quotes (data/evidence.json) matches the reference record it names."""
import json
from pathlib import Path

import pytest

from cookbook import evidence

ROOT = Path(__file__).resolve().parent.parent


def _reference_run(source):
    ref = json.loads((ROOT / source["file"]).read_text())
    hits = [r for r in ref["runs"] if r["call"] == source["call"] and r["name"] == source["run"]]
    assert len(hits) == 1, f"{source} names {len(hits)} reference records"
    return hits[0]


def _measured(run):
    return run.get("tokens_per_s_after_first") or run["tokens_per_s"]


@pytest.mark.parametrize("key", evidence.keys())
def test_each_quoted_number_matches_its_record(key):
    r = evidence.get(key)
    run = _reference_run(r.source)
    assert run["status"] == "ok"
    assert abs(r.value - _measured(run)) <= 0.5, (r.value, _measured(run))
    if r.baseline:
        base = _reference_run(r.baseline["source"])
        assert abs(float(r.baseline["value"]) - _measured(base)) <= 0.5
        same = r.baseline.get("same_call", True)
        assert (base["call"] == run["call"]) == same, "a ratio across calls must say so (same_call: false)"
        if not same:
            assert "another call" in str(r)
    for field in ("micro_batch", "peak_gpu_allocated_gib", "peak_gpu_reserved_gib"):
        if field in r.extra and run.get(field) is not None:
            assert r.extra[field] == pytest.approx(run[field], abs=0.01), field
    if "liger" in r.extra:
        assert r.extra["liger"] == run["liger"]
    if "attention" in r.extra:
        assert run["attention"].startswith(r.extra["attention"])


def test_unknown_key_names_the_known_ones():
    with pytest.raises(evidence.EvidenceError, match="recipe.flex_liger_micro32"):
        evidence.get("recipe.nope")


def test_rendering_carries_conditions_and_source():
    r = evidence.get("recipe.flex_liger_micro32")
    text = str(r)
    assert "9,010 tokens/s" in text and "fp32" in text and "recipe.flex_liger_micro32" in text
    assert r.ratio == pytest.approx(9010.0 / 4384.0)
