"""Issue 32 item 3: benchmarks/cpu_step.py on the CPU at a small size. The chunked steps must equal the serial one
bit for bit, and the JSON's derived numbers (GB/s, ratios, medians) must follow from its own raw timings, recomputed
here independently."""
import glob
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import cpu_step as cs

ROOT = Path(__file__).resolve().parents[1]
N = 2_000_000


def _cpu_adam_cached() -> bool:
    """DeepSpeedCPUAdam is used only when its JIT build is already cached (a cold build takes minutes)."""
    base = os.environ.get("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/torch_extensions"))
    return bool(glob.glob(os.path.join(base, "*", "cpu_adam", "cpu_adam.so")))


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu_step") / "cpu_step.json"
    adam = "torch"  # DeepSpeedCPUAdam itself is the device run's (a cold JIT build here takes minutes)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DS_ACCELERATOR": "cpu"}
    r = subprocess.run([sys.executable, "-m", "benchmarks.cpu_step", "--params", str(N), "--chunks", "1,3,8",
                        "--threads", "2", "--device", "cpu", "--adam", adam, "--reps", "2", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())


def test_chunked_is_bit_identical_to_serial(record):
    assert set(record["variants"]) == {"chunked_cpu_cast_1", "chunked_cpu_cast_3", "chunked_cpu_cast_8"}
    for name, v in record["variants"].items():
        assert v["fp32_params_identical"] is True and v["bf16_copy_identical"] is True, name
        assert v["chunks"] == len(cs.chunk_bounds(N, v["chunks_requested"])) == v["chunks_requested"]
        assert len(v["steps"]) == record["warmup"] + record["reps"]
    assert record["all_identical"] is True


def test_json_numbers_follow_from_raw_timings(record):
    ser = record["serial"]
    timed = ser["steps"][record["warmup"]:]
    for key in ("adam_s", "cast_s", "total_s"):
        assert ser[key] == pytest.approx(statistics.median(s[key] for s in timed), rel=1e-12)
    for s in ser["steps"]:                           # the whole serial step contains its parts
        assert s["total_s"] >= s["adam_s"] + s["cast_s"] - 1e-6
    bw = record["bandwidth"]
    assert bw["adam_gbs"] == pytest.approx(28 * N / ser["adam_s"] / 1e9, rel=1e-9)
    assert bw["cast_gbs"] == pytest.approx(6 * N / ser["cast_s"] / 1e9, rel=1e-9)
    assert bw["h2d_gbs"] is None and ser.get("h2d_s") is None             # --device cpu: no copy
    assert bw["adam_fraction_of_triad"] == pytest.approx(bw["adam_gbs"] / record["stream"]["triad_best_gbs"])
    st = record["stream"]
    assert st["best_gbs"] == max(st["copy_best_gbs"], st["triad_best_gbs"], st["read_best_gbs"])
    assert bw["probe_below_adam"] == (bw["adam_gbs"] > st["best_gbs"])
    b = record["bounds_s"]
    assert b["serial_sum"] == pytest.approx(ser["adam_s"] + ser["cast_s"])
    assert b["ideal_overlap"] == pytest.approx(max(ser["adam_s"], ser["cast_s"]))
    for v in record["variants"].values():
        assert v["serial_over_this"] == pytest.approx(ser["total_s"] / v["total_s"])
        assert v["total_s"] == pytest.approx(statistics.median(s["total_s"] for s in v["steps"][record["warmup"]:]))
    m = record["machine"]
    assert m["cpu_cores"] == os.cpu_count() and m["threads"] == 2 and "torch" in m and "deepspeed" in m


def test_chunk_bounds_cover_exactly_on_aligned_starts():
    for n, k in ((N, 1), (N, 3), (N, 16), (10_000, 8), (1, 4), (cs.ALIGN * 5, 5)):
        bounds = cs.chunk_bounds(n, k)
        assert bounds[0][0] == 0 and bounds[-1][1] == n and 1 <= len(bounds) <= k
        assert all(a % cs.ALIGN == 0 and a < b for a, b in bounds)
        assert all(b0 == a1 for (_, b0), (a1, _) in zip(bounds, bounds[1:]))
    assert len(cs.chunk_bounds(10_000, 8)) == 3                  # 10k elements hold only 3 aligned chunks
    with pytest.raises(ValueError):
        cs.chunk_bounds(0, 4)


def test_identity_check_catches_one_flipped_bit():
    import torch
    b = cs.Bench(100_000, "cpu", "torch", cast_threads=1)
    b.run_serial(2)
    ref_p, ref_dst = b.p.clone(), b.dst.clone()
    b.reset()
    b.run_chunked_cpu_cast(2, 4)
    assert b.same_as(ref_p, ref_dst) == {"fp32_params_identical": True, "bf16_copy_identical": True}
    b.p.view(torch.int32)[12345] ^= 1                            # one ulp in one fp32 param
    assert b.same_as(ref_p, ref_dst)["fp32_params_identical"] is False
    b.reset()
    b.run_chunked_cpu_cast(1, 4)                                 # one step fewer: a different result
    assert b.same_as(ref_p, ref_dst) == {"fp32_params_identical": False, "bf16_copy_identical": False}


@pytest.mark.parametrize("argv, flag", [
    (["--params", "0"], "--params '0'"), (["--params=-3e9"], "--params '-3e9'"), (["--params", "lots"], "--params"),
    (["--chunks", "1,0,4"], "--chunks '1,0,4'"), (["--chunks", "a"], "--chunks"),
    (["--device", "tpu"], "--device 'tpu'"), (["--threads", "0"], "--threads 0"),
    (["--params", "1e15", "--device", "cpu"], "lower --params"),
])
def test_bad_input_names_flag_value_and_fix(argv, flag, capsys):
    assert cs.main(argv + ["--adam", "torch"]) == 2
    err = capsys.readouterr().err
    assert flag in err and ("use" in err or "e.g." in err or "give" in err or "lower" in err or "must" in err)
