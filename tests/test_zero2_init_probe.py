"""benchmarks/zero2_init_probe.py (issue 31, class 2) on the CPU: its prediction is cookbook.memory's, computed here
again from the numbers; its flags fail with the flag named; on DeepSpeed's CPU accelerator it runs
``deepspeed.initialize`` for real and reads the branch DeepSpeed took from its own log line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import zero2_init_probe as probe
from cookbook import memory
from cookbook.models import model_spec
from cookbook.plan import Plan

GIB = 2 ** 30
N_7B = 6_738_415_616  # LLaMA-7B's parameters (model_spec("llama-7b").num_params)


def _dry(tmp_path, *flags):
    out = tmp_path / "p.json"
    assert probe.main(["--model", "llama-7b", "--dry", "--host-memory-gib", "125.8", "--out", str(out), *flags]) == 0
    return json.loads(out.read_text())


def test_dry_ballast_predicts_the_cpu_path_for_7b_on_24_gib(tmp_path):
    """A real 24 GiB card: free at the check 24 − 0.7 − 12.55 = 10.75 GiB < the 12.55 GiB flat buffer → CPU path,
    init peak p·N (flat buffer) + p·N (the partition's clone on one rank); the probe says what flattens_on_gpu says, and the JSON is never "ok"."""
    rec = _dry(tmp_path, "--mode", "ballast")
    pr = rec["prediction"]
    assert rec["outcome"] == "dry" and "measured" not in rec
    assert pr["params"] == N_7B == model_spec("llama-7b").num_params and pr["param_bytes"] == 2 * N_7B
    plan = Plan(model="llama-7b", gpu_memory_gib=24, zero_stage=2, offload_optimizer="cpu")
    assert pr["flattens_on_gpu"] is memory.flattens_on_gpu(plan, 2 * N_7B) is False
    assert pr["path"] == "cpu" and pr["gpu_device_gib"] is None
    free = 24 - memory.CUDA_CONTEXT_GIB - 2 * N_7B / GIB
    assert pr["nvml_free_at_check_gib"] == pytest.approx(free) and free < 2 * N_7B / GIB
    # the flat buffer (p·N) and, on the GPU, the clone of the rank's whole partition (one rank: p·N again) —
    # measured: the 7B ballast run took the CPU path and ran out of memory at that clone
    assert pr["init_peak_allocated_gib"] == pytest.approx(4 * N_7B / GIB)      # p·N + p·N / 1
    assert pr["host_init_transient_gib"] == pytest.approx(4 * N_7B / GIB)      # param.cpu_data + the flat CPU buffer
    assert pr["init_fits_card"] is False
    # the cookbook's builder decides pin_memory from the host RAM given (125.8 GiB: too short for 7B pinned)
    assert rec["pin_memory"] is False and rec["ds_config"]["zero_optimization"]["stage"] == 2
    assert pr["estimate"]["verdict"].startswith("ZeRO-2 + opt→cpu")


def test_dry_cap_predicts_the_device_path_and_an_oom(tmp_path):
    """The capped H200: NVML sees 139.8 GiB, so DeepSpeed flattens on the device; 2·p·N = 25.1 GiB > the cap."""
    rec = _dry(tmp_path, "--mode", "cap", "--device-total-gib", "139.8", "--pin", "on")
    pr = rec["prediction"]
    plan = Plan(model="llama-7b", gpu_memory_gib=24, zero_stage=2, offload_optimizer="cpu")
    assert pr["flattens_on_gpu"] is memory.flattens_on_gpu(plan, 2 * N_7B, gpu_device_gib=139.8) is True
    assert pr["path"] == "device" and pr["gpu_device_gib"] == 139.8
    assert pr["nvml_free_at_check_gib"] == pytest.approx(139.8 - memory.CUDA_CONTEXT_GIB - 2 * N_7B / GIB)
    assert pr["init_peak_allocated_gib"] == pytest.approx(4 * N_7B / GIB)      # 2·p·N
    assert pr["init_fits_card"] is False and pr["estimate"]["fits_gpu"] is False
    assert rec["pin_memory"] is True


@pytest.mark.parametrize("pin, expect", [("on", True), ("off", False), ("deepspeed", None)])
def test_pin_choices(pin, expect):
    _, cfg = probe.plan_and_config("tiny-llama", 24, host_memory_gib=None, pin=pin)
    block = cfg["zero_optimization"]["offload_optimizer"]
    assert block["device"] == "cpu" and block.get("pin_memory") is expect and ("pin_memory" in block) == (expect is not None)


@pytest.mark.parametrize("flags, words", [
    (["--mode", "bogus"], ["--mode 'bogus'", "use one of ballast, cap, none"]),
    (["--gpu-memory-gib", "0"], ["--gpu-memory-gib 0", "positive number of GiB"]),
    (["--gpu-memory-gib", "-24"], ["--gpu-memory-gib -24", "positive number of GiB"]),
    (["--pin", "maybe"], ["--pin 'maybe'", "cookbook, on, off, deepspeed"]),
    (["--mode", "cap"], ["--mode cap --dry", "--device-total-gib"]),
    (["--device-total-gib", "16"], ["--device-total-gib 16", "below --gpu-memory-gib 24"]),
    (["--available-memory-gib", "-1"], ["--available-memory-gib -1", "0 or more"]),
])
def test_bad_flags_name_the_flag_the_value_and_the_fix(tmp_path, capsys, flags, words):
    out = tmp_path / "x.json"
    assert probe.main(["--model", "llama-7b", "--dry", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not out.exists()


def test_path_from_deepspeeds_log_lines():
    # the two f-strings of deepspeed 0.19.8 runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer.__init__
    assert probe.path_from_line("Flattening param group 0 on cuda (sufficient memory)") == "device"
    assert probe.path_from_line("Flattening param group 0 on cpu (sufficient memory)") == "device"
    assert probe.path_from_line("Flattening param group 0 on CPU (insufficient memory)") == "cpu"
    assert probe.path_from_line(None) is None


def _cpu_run(tmp_path, *flags):
    out = tmp_path / "run.json"
    from cookbook.hardware import extensions_dir
    # the JIT-built DeepSpeedCPUAdam the training tests build (cookbook.launch sets this folder for every run)
    env = {"TORCH_EXTENSIONS_DIR": str(extensions_dir()), **os.environ, "DS_ACCELERATOR": "cpu",
           "MASTER_PORT": str(29600 + os.getpid() % 300)}
    r = subprocess.run([sys.executable, "-m", "benchmarks.zero2_init_probe", "--model", "tiny-llama", "--mode", "none",
                        "--out", str(out), *flags], capture_output=True, text=True, timeout=240, env=env)
    return r, json.loads(out.read_text())


def test_cpu_accelerator_run_reads_deepspeeds_cpu_branch(tmp_path):
    """deepspeed.initialize for real (tiny-llama, the cookbook's ZeRO-2 + offload config, DeepSpeedCPUAdam) with
    DeepSpeed told 0 bytes are free: it takes its CPU-flattening branch, the probe reads that from the log line,
    and the comparison says the prediction (device path) was wrong for this run."""
    r, rec = _cpu_run(tmp_path, "--available-memory-gib", "0", "--pin", "off")
    assert r.returncode == 0 and rec["outcome"] == "ok", r.stdout[-2000:] + r.stderr[-2000:]
    m, pr = rec["measured"], rec["prediction"]
    assert m["flatten_line"] == "Flattening param group 0 on CPU (insufficient memory)" and m["path"] == "cpu"
    assert m["available_memory_reads_gib"] == [0.0] and "path_inferred" not in m
    assert pr["path"] == "device" and rec["comparison"]["path_as_predicted"] is False
    # DeepSpeed's flat buffer: the parameters, aligned (stage_1_and_2.py: aligned_numel × element_size)
    assert pr["param_bytes"] <= m["flat_buffer_bytes"] < pr["param_bytes"] + 4096
    assert m["host_peak_rss_gib"] > 0.1 and m["initialize_s"] > 0 and rec["pin_memory"] is False
    assert rec["available_memory_source"] == "cpu accelerator" and rec["ballast_bytes"] == 0


@pytest.mark.slow
def test_cpu_accelerator_run_takes_the_device_branch(tmp_path):
    r, rec = _cpu_run(tmp_path)
    assert r.returncode == 0 and rec["outcome"] == "ok", r.stderr[-2000:]
    assert rec["measured"]["path"] == "device" == rec["prediction"]["path"]
    assert rec["comparison"]["path_as_predicted"] is True
    assert rec["measured"]["available_memory_reads_gib"][0] > 0


def test_ballast_refused_without_cuda(tmp_path):
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    r = subprocess.run([sys.executable, "-m", "benchmarks.zero2_init_probe", "--model", "tiny-llama", "--mode", "ballast",
                        "--out", str(tmp_path / "b.json")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "--mode ballast: needs a CUDA GPU" in r.stderr and "--mode none" in r.stderr
    assert not (tmp_path / "b.json").exists()


def test_random_weights_model_is_seeded_and_typed():
    """cookbook.train.random_weights_model, shared by `cookbook train --random-weights` and the probe."""
    import torch
    from cookbook.models import resolve_model_path
    from cookbook.train import random_weights_model
    folder, _ = resolve_model_path("tiny-llama")
    a, b = (random_weights_model(folder, torch.bfloat16, "cpu", seed=3) for _ in range(2))
    c = random_weights_model(folder, torch.bfloat16, "cpu", seed=4)
    pa, pb, pc = (next(m.parameters()) for m in (a, b, c))
    assert pa.dtype == torch.bfloat16 and pa.device.type == "cpu"
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    assert sum(p.numel() for p in a.parameters()) == model_spec("tiny-llama").num_params


def test_zero12_init_peak_on_each_path_and_world_size():
    """DeepSpeed's flat buffer, then the GPU clone of this rank's partition (stage_1_and_2.py): by hand."""
    p = 12.55 * GIB
    assert memory.zero12_init_peak_bytes(p, 1, True) == pytest.approx(2 * p)
    assert memory.zero12_init_peak_bytes(p, 1, False) == pytest.approx(2 * p)
    assert memory.zero12_init_peak_bytes(p, 8, False) == pytest.approx(p + p / 8)   # 14.1 GiB: 7B on 8 × 24 GiB
    assert memory.zero12_init_peak_bytes(p, 8, True) == pytest.approx(2 * p)
    with pytest.raises(ValueError, match="world_size 0"):
        memory.zero12_init_peak_bytes(p, 0, True)


def test_zero2_offload_7b_on_eight_24gib_cards_initialises_in_the_estimate():
    """The class-2 case: ZeRO-2 + optimizer offload of LLaMA-7B across 8 × 24 GiB: NVML's free memory after the
    parameters (24 - 0.7 - 12.55 GiB) is below the flat buffer, so DeepSpeed flattens on the CPU and the init peak is
    p·N·(1 + 1/8), not 2·p·N: the estimate does not rule it out for its initialisation."""
    plan = Plan(model="llama-7b", num_gpus=8, gpu_memory_gib=24, zero_stage=2, offload_optimizer="cpu",
                host_memory_gib=512, micro_batch=1, seq_len=512)
    e = memory.estimate(plan)
    pn = 2 * N_7B
    assert memory.flattens_on_gpu(plan, pn) is False
    assert e.gpu_gib["init_excess"] * GIB <= max(0.0, pn * (1 + 1 / 8) - (e.gpu_gib["total"] - e.gpu_gib["init_excess"]
                                                                   - e.gpu_gib["allocator_overhead"]
                                                                   - e.gpu_gib["cuda_context"]) * GIB) + 1
    assert e.fits_gpu, e.verdict
