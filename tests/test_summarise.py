"""benchmarks/summarise.py on one real device call (call 4 of 2026-12-04, tests/fixtures/device_call)."""
import json
import tarfile

from benchmarks.summarise import main, summarise


def test_summarise_one_call(tmp_path):
    with tarfile.open("tests/fixtures/device_call/runs.tgz") as t:
        t.extractall(tmp_path / "raw", filter="data")
    steps = [json.loads(x) for x in (tmp_path / "raw/l3b-sdpa-m16/metrics.jsonl").read_text().splitlines()]
    want = sum(r["tokens_per_s"] for r in steps[1:]) / (len(steps) - 1)
    out = summarise("tests/fixtures/device_call", "sample")
    runs = {r["name"]: r for r in out["runs"]}
    assert set(runs) == {"l3b-sdpa-m16", "l3b-flex-liger-m32"} and out["machine"]["deepspeed"] == "0.19.8"
    sdpa, flex = runs["l3b-sdpa-m16"], runs["l3b-flex-liger-m32"]
    assert abs(sdpa["tokens_per_s_after_first"] - want) < 0.1 and sdpa["first_step_s"] == steps[0]["step_time_s"]
    assert sdpa["attention"] == "sdpa" and flex["attention"] == "flex_attention" and flex["liger"] and not sdpa["liger"]
    assert sdpa["command"].startswith("accelerate launch") and "--attention sdpa" in sdpa["command"]
    # the projection keeps the measured fraction of the step floor, so it is below the H200's tokens/s
    assert 0 < sdpa["rtx4090_tokens_per_s"] < sdpa["tokens_per_s_after_first"]


def test_resummarising_a_call_replaces_it(tmp_path):
    ref = tmp_path / "ref.json"
    for _ in range(2):
        main(["tests/fixtures/device_call", "--call", "c4", "--into", str(ref)])
    main(["tests/fixtures/device_call", "--call", "c5", "--into", str(ref)])
    data = json.loads(ref.read_text())
    assert sorted(data["calls"]) == ["c4", "c5"] and len(data["runs"]) == 4
