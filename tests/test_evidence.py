"""Every measured number the cookbook quotes (data/evidence.json) matches the reference record it names, and the
product code holds no measurement history (dates, raw-file paths) in its strings."""
import ast
import json
import re
from pathlib import Path

import pytest

from cookbook import evidence

ROOT = Path(__file__).resolve().parent.parent


def _reference(source):
    """The run (a dict) or the number the source names in its reference file."""
    ref = json.loads((ROOT / source["file"]).read_text())
    if "path" in source:
        for part in source["path"].split("."):
            ref = ref[part]
        return ref
    runs = ref[source.get("list", "runs")]
    hits = [r for r in runs if r.get("call") == source.get("call", r.get("call")) and r["name"] == source["run"]]
    assert len(hits) == 1, f"{source} names {len(hits)} reference records"
    return hits[0]


def _measured(run, field=None):
    if not isinstance(run, dict):
        return float(run)
    if field:
        return run[field]
    return run.get("tokens_per_s_after_first") or run["tokens_per_s"]


def _same_call(a, b):
    """Two sources of one device call: the same file and the same named call (a source without a call is not)."""
    return a["file"] == b["file"] and a.get("call") is not None and a.get("call") == b.get("call")


@pytest.mark.parametrize("key", evidence.keys())
def test_each_quoted_number_matches_its_record(key):
    r = evidence.get(key)
    run = _reference(r.source)
    field = r.extra.get("field")
    if isinstance(run, dict):
        assert run["status"] == r.extra.get("status", "ok")
    assert r.value == pytest.approx(_measured(run, field), abs=0.5 if r.value >= 100 else 0.005), (r.value, run)
    if r.baseline:
        base = _reference(r.baseline["source"])
        bv = float(r.baseline["value"])
        assert bv == pytest.approx(_measured(base, field), abs=0.5 if bv >= 100 else 0.005)
        same = r.baseline.get("same_call", True)
        assert _same_call(r.source, r.baseline["source"]) == same, "a ratio across calls must say so (same_call: false)"
        if not same:
            assert "another call" in str(r)
    if not isinstance(run, dict):
        return
    for name in ("micro_batch", "grad_accum", "peak_gpu_allocated_gib", "peak_gpu_reserved_gib"):
        have = run.get(name, (run.get("plan") or {}).get(name))
        if name in r.extra and have is not None:
            assert r.extra[name] == pytest.approx(have, abs=0.01), name
    if "estimate_gpu_total_gib" in r.extra and (run.get("estimate") or {}).get("gpu_total_gib") is not None:
        assert r.extra["estimate_gpu_total_gib"] == pytest.approx(run["estimate"]["gpu_total_gib"], abs=0.05)
    if "liger" in r.extra:
        assert r.extra["liger"] == run["liger"]
    if "attention" in r.extra:
        assert run["attention"].startswith(r.extra["attention"])
    if "states" in r.extra:
        states = (run.get("lever") or {}).get("bf16_states", run.get("bf16_states"))
        if states is not None:
            assert (r.extra["states"] == "bf16") == states, "states"


def test_unknown_key_names_the_known_ones():
    with pytest.raises(evidence.EvidenceError, match="recipe.flex_liger_micro32"):
        evidence.get("recipe.nope")


def test_rendering_carries_conditions_and_source():
    r = evidence.get("recipe.flex_liger_micro32")
    text = str(r)
    assert "9,010 tokens/s" in text and "fp32" in text and "recipe.flex_liger_micro32" in text
    assert r.ratio == pytest.approx(9010.0 / 4384.0)
    small = str(evidence.get("bf16_states.loss_gap"))
    assert small.startswith("4.82 loss") and "(1.94, measured in another call)" in small


def _docstring_nodes(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


#: Measurement history the product's strings must not hold: dates, and paths into the raw archive (a message
#: cites an evidence key, :meth:`cookbook.evidence.Evidence.cite`; the dated narrative is docs/benchmarks.md).
_HISTORY = re.compile(r"20\d\d-\d\d-\d\d|data/reference/raw|\braw/h200_")


def test_product_strings_hold_no_dates_or_raw_paths():
    found = []
    for path in sorted((ROOT / "cookbook").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if _HISTORY.search(node.value):
                    found.append(f"{path.name}:{node.lineno}: {node.value[:80]!r}")
    assert not found, "\n".join(found)
