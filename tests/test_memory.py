"""Tests of the memory estimator (cookbook/memory.py).

Values are computed independently: by hand for a tiny model, by DeepSpeed's own estimator functions
(``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs``), and against
measured peaks in ``data/calibration/*.json``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cookbook import memory
from cookbook.memory import GIB, EstimateError, compare, estimate, estimate_host_rss_cpu_run, sweep
from cookbook.models import ModelSpec, model_spec
from cookbook.plan import VARIANTS, Plan

REPO = Path(__file__).resolve().parent.parent

#: Tolerances against measurement (estimate − measured) / measured, stated once here.
GPU_RESERVED_TOLERANCE = 0.15   # peak torch.cuda.max_memory_reserved (uncapped points; the target)
HOST_RSS_TOLERANCE = 0.15       # peak host RSS summed over the machine's ranks (the target)
#: The CPU rehearsal's host RSS is almost all Python/torch/DeepSpeed runtime (the tiny model's states are
#: ~5 MiB), and that runtime differs between environments: on the same machine, 1.06 GiB (2 ranks) in one
#: virtual environment and 0.95 GiB in a fresh one built from README's command (+21.7% error). Stated: ±25%.
CPU_REHEARSAL_HOST_TOLERANCE = 0.25
#: Allocated is not the issue's target (reserved is what must fit). The estimate is within ±15% on all
#: but four points; the worst is +20% (3.43e9 ZeRO-3 full offload, micro batch 2, DeepSpeed's default
#: 5e8-element reduce bucket, measured 3.6 GiB — given to one decimal in h200_24gib.json — against 4.32
#: GiB estimated: the 0.93 GiB reduce bucket that stage3.py allocates does not show in that plain-script
#: measurement, while the cookbook's runs with small buckets agree within 1-3%).
GPU_ALLOCATED_TOLERANCE = 0.21
#: A reserved peak within this of the cap means the caching allocator grew to the cap (the runs used
#: torch.cuda.set_per_process_memory_fraction): a censored point, "measured ≥ cap".
CAP_SLACK_GIB = 0.05


# ------------------------------------------------------------------------------------------
# hand-computed tiny model

def test_tiny_model_by_hand():
    # tiny-qwen2: N = 354,880 parameters, largest module 2048 × 64 = 131,072 (embedding / lm_head),
    # h = 64, 2 layers, 4 heads, vocabulary 2048; shipped without weights (random init, no load copy).
    N = 354_880
    plan = Plan(model="tiny-qwen2", num_gpus=2, zero_stage=2, micro_batch=2, seq_len=512,
                gradient_checkpointing=True)
    e = estimate(plan)
    assert e.params == N and e.largest_layer_params == 131_072
    b = {k: v * GIB for k, v in e.gpu_gib.items()}
    assert b["params_16bit"] == pytest.approx(709_760)      # 2 B × N, replicated in stage 2
    assert b["grads_16bit"] == pytest.approx(354_880)       # 2 B × N / 2 ranks
    assert b["master_fp32"] == pytest.approx(709_760)       # 4 B × N / 2
    assert b["adam_states"] == pytest.approx(1_419_520)     # 8 B × N / 2
    assert b["grads_fp32"] == pytest.approx(709_760)        # 4 B × N / 2
    assert b["largest_layer"] == 0
    # activations: checkpoints 2 layers × 2 B × s·b·h = 2 × 2 × 512 × 2 × 64 = 262,144, plus the larger of
    #   one layer's recompute 34 × 512 × 2 × 64 = 2,228,224 and the loss phase 12 × 512 × 2 × 2048 = 25,165,824
    assert b["activations"] == pytest.approx(262_144 + 25_165_824)
    # one reduce bucket (overlap_comm off by default in stage 2) and one all-gather bucket, each
    # min(5e8, N) elements × 2 B
    assert b["comm_buckets"] == pytest.approx(2 * 709_760)
    train = (709_760 + 354_880 + 709_760 + 1_419_520 + 709_760 + 262_144 + 25_165_824 + 2 * 709_760)
    assert e.gpu_allocated_gib * GIB == pytest.approx(train)  # > the 2·2·N initialisation peak
    assert b["init_excess"] == 0
    # reserved: + 0.10 × activations (fragmentation, ZeRO-0/1/2) + the stale per-tensor 16-bit
    # parameter blocks left by DeepSpeed's flattening (2 B × N)
    assert b["allocator_overhead"] == pytest.approx(0.10 * (262_144 + 25_165_824) + 709_760)
    assert e.gpu_gib["cuda_context"] == pytest.approx(0.7)  # measured on the H200, lazy loading
    assert e.gpu_gib["total"] * GIB == pytest.approx(train + b["allocator_overhead"] + 0.7 * GIB)
    # host: no offload, no checkpoint to load: the two ranks' runtimes only
    assert e.host_gib["runtime"] == pytest.approx(2 * (memory.RUNTIME_BASELINE_GIB + memory.CUDA_HOST_RUNTIME_GIB))
    assert e.host_gib["total"] == pytest.approx(e.host_gib["runtime"])
    # DeepSpeed's estimator still counts each rank's fp32 copy at load × 1.5
    assert e.host_model_states_gib * GIB == pytest.approx(1.5 * 4 * N * 2)
    assert e.fits_gpu is True and e.fits_host is None


def test_zero2_offload_host_by_hand():
    # LLaMA-7B, 1 GPU, ZeRO-2 + optimizer offload, no accumulation (stage_1_and_2.py): pinned fp32 master
    # 4N, pinned fp32 gradient partition 4N, pinned bf16 parameter buffer 2N, pinned gradient buffer of
    # the largest tensor (embedding 32000 × 4096 × 2 B), each rounded up to a power of two by PyTorch's
    # CachingHostAllocator; unpinned Adam m, v 8N; one rank's runtime.
    N = 6_738_415_616
    assert 2 ** 34 < 4 * N <= 2 ** 35 and 2 ** 33 < 2 * N <= 2 ** 34 and 2 ** 27 < 32000 * 4096 * 2 <= 2 ** 28
    e = estimate(Plan(model="llama-7b", num_gpus=1, zero_stage=2, offload_optimizer="cpu", grad_accum=1))
    pinned = 2 * 2 ** 35 + 2 ** 34 + 2 ** 28
    runtime = (memory.RUNTIME_BASELINE_GIB + memory.CUDA_HOST_RUNTIME_GIB) * GIB
    assert e.host_gib["total"] * GIB == pytest.approx(pinned + 8 * N + runtime)
    assert e.host_gib["pinned_rounding"] * GIB == pytest.approx(pinned - (10 * N + 32000 * 4096 * 2))
    # with accumulation and fp32 master weights: one pinned bf16 buffer per parameter tensor on top
    acc = estimate(Plan(model="llama-7b", num_gpus=1, zero_stage=2, offload_optimizer="cpu", grad_accum=8))
    assert acc.host_gib["total"] > e.host_gib["total"] + 2 * N / GIB
    # the initialisation peak: on a capped H200 (NVML sees the whole device) DeepSpeed flattens on the GPU, the flat
    # 16-bit copy beside the parameters, 2 × 2N, which exceeds 24 GiB; on a real 24 GiB card NVML's free memory is
    # below 2N, so it flattens on the CPU (stage_1_and_2.py; issue 31 class 2): the flat buffer 2N on the GPU, then
    # the GPU clone of the rank's partition — on one rank the whole 2N again (measured: the 7B run on an H200 filled
    # down to 24 GiB took the CPU path and ran out of memory at that clone); the host holds param.cpu_data + the flat
    # CPU buffer (4N) for a moment, below the training host peak here
    capped = estimate(Plan(model="llama-7b", num_gpus=1, zero_stage=2, offload_optimizer="cpu", grad_accum=1),
                      gpu_device_gib=140.4)
    assert capped.gpu_allocated_gib * GIB >= 4 * N and capped.fits_gpu is False
    assert e.gpu_allocated_gib * GIB >= 4 * N and e.fits_gpu is False
    # on 8 ranks: 2N + 2N/8 at initialisation, below the training peak's states + activations + buffers
    e8 = estimate(Plan(model="llama-7b", num_gpus=8, zero_stage=2, offload_optimizer="cpu", grad_accum=1))
    assert e8.gpu_gib["init_excess"] * GIB == pytest.approx(max(0.0, 2 * N * (1 + 1 / 8) - sum(
        v for k, v in e8.gpu_gib.items() if k not in ("init_excess", "allocator_overhead", "cuda_context", "total"))
        * GIB), rel=1e-6, abs=1)


def test_zenflow_overlap_step_host_term_by_hand():
    """ZenFlow's overlapped step (DeepSpeed 0.19.8 runtime/zenflow/zenflow_utils.py, zenflow_stage_1_and_2.py):
    per parameter a 2nd fp32 gradient buffer (4 B), a stale fp32 master copy (4 B) and the optimizer process's
    second Adam m, v (8 B), plus that process's runtime: LLaMA-7B on one rank, ZeRO-2 + optimizer offload,
    16 N bytes + 0.55 GiB more than the same config without ZenFlow; without overlap_step nothing more. The run it
    explains: the 3.4B recipe with fp32 states and overlap_step was killed by the OOM killer on a 125.8 GiB host
    (data/reference/h200_levers_2026-12-01.json, zenflow-fp32)."""
    N = 6_738_415_616
    plan = Plan(model="llama-7b", num_gpus=1, zero_stage=2, offload_optimizer="cpu", grad_accum=1)
    zf = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                "zenflow": {"topk_ratio": 0.1, "update_interval": 4, "overlap_step": True}}}
    base = estimate(plan, ds_config={"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    with_zf = estimate(plan, ds_config=zf)
    assert (with_zf.host_gib["total"] - base.host_gib["total"]) * GIB == pytest.approx(
        16 * N + memory.RUNTIME_BASELINE_GIB * GIB)
    zf["zero_optimization"]["zenflow"]["overlap_step"] = False
    assert estimate(plan, ds_config=zf).host_gib["total"] == pytest.approx(base.host_gib["total"])
    assert memory.zenflow_overlap_step(None) is False and memory.zenflow_overlap_step({"zero_optimization": 1}) is False


def test_activation_formula_without_checkpointing_and_eager_attention():
    spec = model_spec("tiny-llama")
    plan = Plan(model="tiny-llama", micro_batch=1, seq_len=256, gradient_checkpointing=False)
    # Korthikanti et al.: s·b·h·(34 + 5·a·s/h) per layer = 256 × 64 × (34 + 5 × 4 × 256 / 64) = 256 × 64 × 114
    act = memory.activation_bytes(spec, plan, eager_attention=True)
    assert act["layers"] == pytest.approx(2 * 256 * 64 * 114)
    assert act["logits"] == pytest.approx(256 * 2048 * 12)  # three fp32 logit-sized tensors in the loss backward
    assert act["total"] == pytest.approx(2 * 256 * 64 * 114 + 256 * 2048 * 12)  # all layers alive at the loss
    assert memory.activation_bytes(spec, plan)["layers"] == pytest.approx(2 * 256 * 64 * 34)


def test_bf16_states_halve_host_states():
    plan = Plan(model="llama-7b", zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    full, half = estimate(plan), estimate(plan, bf16_states=True)
    N = full.params
    assert full.host_model_states_no_factor_gib * GIB == pytest.approx(18 * N)
    assert half.host_model_states_no_factor_gib * GIB == pytest.approx(10 * N)  # 2 + 2 + 2 + 4
    assert half.host_gib["total"] < 0.7 * full.host_gib["total"]  # the measured peak: 102 GiB (bf16) for 7B
    with pytest.raises(EstimateError, match="bf16_states"):
        estimate(plan.replace(precision="fp16"), bf16_states=True)


# ------------------------------------------------------------------------------------------
# agreement with DeepSpeed's estimators

@pytest.mark.parametrize("model", ["qwen-14b", "llama-7b", "tiny-qwen2"])
@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_model_states_equal_deepspeed_estimators(model, gpus):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    spec = model_spec(model)
    N, L = spec.num_params, spec.largest_layer_params
    base = Plan(model=model, num_gpus=gpus)
    for offload in (False, True):
        e = estimate(base.replace(zero_stage=2, offload_optimizer="cpu" if offload else "none"))
        cpu, gpu = estimate_zero2_model_states_mem_needs(N, num_gpus_per_node=gpus, cpu_offload=offload)
        assert e.gpu_model_states_gib * GIB == pytest.approx(gpu, rel=1e-9, abs=1)
        assert e.host_model_states_gib * GIB == pytest.approx(cpu, rel=1e-9)
    for opt, par in (("none", "none"), ("cpu", "none"), ("cpu", "cpu")):
        e = estimate(base.replace(zero_stage=3, offload_optimizer=opt, offload_param=par))
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            N, L, num_gpus_per_node=gpus, cpu_offload=opt == "cpu", cpu_offload_params=par == "cpu", zero_init=True)
        assert e.gpu_model_states_gib * GIB == pytest.approx(gpu, rel=1e-9, abs=1)
        assert e.host_model_states_gib * GIB == pytest.approx(cpu, rel=1e-9)


def test_defaults_equal_deepspeed_config_defaults():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig, DeepSpeedZeroOffloadParamConfig
    z = DeepSpeedZeroConfig()
    d = memory.DS_DEFAULTS
    assert d["reduce_bucket_size"] == z.reduce_bucket_size
    assert d["allgather_bucket_size"] == z.allgather_bucket_size
    assert d["stage3_prefetch_bucket_size"] == z.prefetch_bucket_size
    assert d["stage3_max_live_parameters"] == z.max_live_parameters
    assert d["sub_group_size"] == z.sub_group_size
    assert d["offload_param_buffer_count"] == DeepSpeedZeroOffloadParamConfig().buffer_count
    assert d["offload_param_buffer_size"] == DeepSpeedZeroOffloadParamConfig().buffer_size
    assert d["offload_optimizer_buffer_count"] == DeepSpeedZeroOffloadOptimizerConfig().buffer_count
    assert DeepSpeedZeroConfig(stage=3).overlap_comm is True and DeepSpeedZeroConfig(stage=2).overlap_comm is False


def test_ds_config_bucket_sizes_are_read():
    plan = Plan(model="qwen-14b", num_gpus=8, zero_stage=3, offload_optimizer="cpu")
    cfg = {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                 "stage3_max_live_parameters": 10**8, "overlap_comm": True}}
    e = estimate(plan, ds_config=cfg)
    h = 5120
    assert e.gpu_gib["comm_buckets"] * GIB == pytest.approx(h * h * 2)
    assert e.gpu_gib["prefetch_buffers"] * GIB == pytest.approx((int(0.9 * h * h) + 10**8) * 2)
    with pytest.raises(EstimateError, match="reduce_bucket_size"):
        estimate(plan, ds_config={"zero_optimization": {"reduce_bucket_size": "big"}})


# ------------------------------------------------------------------------------------------
# the known answers of the issue

def test_parameter_counts():
    assert model_spec("qwen-14b").num_params == 14_167_290_880
    assert model_spec("llama-7b").num_params == 6_738_415_616


def test_qwen14b_zero2_does_not_fit_whatever_the_batch():
    for micro in (1, 8):
        e = estimate(Plan(model="qwen-14b", num_gpus=8, gpu_memory_gib=24, zero_stage=2, micro_batch=micro))
        assert e.gpu_gib["params_16bit"] == pytest.approx(26.39, abs=0.01)
        assert e.fits_gpu is False
        assert "16-bit parameters alone are 26.4 GiB" in e.reasons[0] and "whatever the batch size" in e.reasons[0]


def test_qwen14b_zero3_no_offload_does_not_fit():
    e = estimate(Plan(model="qwen-14b", num_gpus=8, zero_stage=3))
    assert e.gpu_model_states_gib == pytest.approx(32.6, abs=0.05)
    assert e.fits_gpu is False


def test_qwen14b_zero3_cpu_optimizer_offload():
    e = estimate(Plan(model="qwen-14b", num_gpus=8, zero_stage=3, offload_optimizer="cpu", host_memory_gib=256))
    assert e.gpu_model_states_gib == pytest.approx(6.2, abs=0.05)
    assert e.fits_gpu is True
    assert e.host_model_states_no_factor_gib == pytest.approx(211, abs=0.5)
    assert e.host_model_states_gib == pytest.approx(317, abs=0.5)
    assert e.fits_host is False  # 256 GiB of RAM is not enough
    assert estimate(e.plan.replace(host_memory_gib=512)).fits_host is True


def test_llama7b_one_gpu_full_offload():
    e = estimate(Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                      host_memory_gib=64))
    assert e.fits_gpu is True
    assert e.host_model_states_no_factor_gib == pytest.approx(113, abs=0.5)
    assert e.host_model_states_gib == pytest.approx(169, abs=0.5)
    assert e.fits_host is False  # the LLaMA article's 48/64 GB host cannot hold it
    assert "does not fit" in e.reasons[-1]


# ------------------------------------------------------------------------------------------
# calibration: estimate beside measurement

def _reference_configs() -> dict[str, dict]:
    """DeepSpeed config of each cookbook run in data/reference/*.json, by rung name (the calibration points of
    those runs carry no config; their bucket sizes are the cookbook's, not DeepSpeed's defaults)."""
    out = {}
    for f in sorted((REPO / "data" / "reference").glob("*.json")):
        for rung in json.loads(f.read_text()).get("rungs", []):
            if "deepspeed_config" in rung:
                out[rung["name"]] = rung["deepspeed_config"]
    return out


REFERENCE_CONFIGS = _reference_configs()


def _calibration_cases(which: str):
    """Points of one set: ``fit`` (the estimator's fitted terms were chosen to match them) or ``held_out``
    (measured after the fit at shapes no fitting point has; the estimator's honest accuracy)."""
    cases = []
    for f in sorted((REPO / "data" / "calibration").glob("*.json")):
        data = json.loads(f.read_text())
        for p in data["points"]:
            assert p.get("set") in ("fit", "held_out"), f"{f.name}: {p['name']} has no set"
            if p["set"] == which:
                cases.append(pytest.param(data, p, id=p["name"]))
    return cases


def _spec(data, name):
    if name in data:
        return ModelSpec(name=name, path="", source="calibration", has_weights=False, tie_word_embeddings=False,
                         model_type=data[name].get("model_type", "llama"),
                         **{k: v for k, v in data[name].items() if k != "model_type"})
    return model_spec(name)


def _check_against_measurement(e, m, plan):
    """Assert the estimate against one measured point; returns the comparison table."""
    table = compare(e, m).set_index("quantity")
    if m.get("peak_gpu_allocated_gib"):
        err = table.loc["GPU allocated (peak)", "error %"] / 100
        assert abs(err) <= GPU_ALLOCATED_TOLERANCE, table
    reserved = m.get("peak_gpu_reserved_gib")
    if reserved and reserved >= plan.gpu_memory_gib - CAP_SLACK_GIB:
        # censored: the allocator grew to the cap, the uncapped peak is ≥ the cap. Within ±15% of any value
        # ≥ cap needs ≥ 0.85 × cap; and the run completed, so the estimate must still say it fits.
        assert e.gpu_reserved_gib >= (1 - GPU_RESERVED_TOLERANCE) * plan.gpu_memory_gib, table
        assert e.fits_gpu, e.verdict
    elif reserved:
        err = table.loc["GPU reserved (peak)", "error %"] / 100
        assert abs(err) <= GPU_RESERVED_TOLERANCE, table
    if m.get("host_peak_gib"):
        err = table.loc["host RSS (peak)", "error %"] / 100
        assert abs(err) <= HOST_RSS_TOLERANCE, table
    return table


@pytest.mark.parametrize("data,point", _calibration_cases("fit"))
def test_calibration_points(data, point):
    _check_point(data, point)


#: held-out points the estimator misses today, and why (strict: the test fails once the estimate holds)
KNOWN_MISSES = {
    "ho-llama3b-z3-offopt-s2048-b4": "ZeRO-3 + optimizer offload at sequence 2048: the estimate is ~30% low on GPU "
                                     "reserved (measured 18.6 GiB), the shape issue 13 reported 33% low; the ZeRO-3 "
                                     "terms were fitted at sequence 1024 only",
}


def _held_out_cases():
    out = []
    for case in _calibration_cases("held_out"):
        name = case.values[1]["name"].split(":")[0]
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[name])] if name in KNOWN_MISSES else []
        out.append(pytest.param(*case.values, id=case.id, marks=marks))
    return out


@pytest.mark.parametrize("data,point", _held_out_cases())
def test_held_out_calibration_points(data, point):
    # the same ±15% on points the estimator was not fitted to (data/calibration/h200_heldout_*.json)
    _check_point(data, point)


def test_accuracy_report_keeps_the_sets_apart():
    sys.path.insert(0, str(REPO))  # benchmarks/ is not an installed package
    from benchmarks.calibration import accuracy, summary
    df = accuracy()
    fit = [p for c in _calibration_cases("fit") for p in [c.values[1]]]
    held = [p for c in _calibration_cases("held_out") for p in [c.values[1]]]
    assert set(df.loc[df["set"] == "fit", "point"]) == {p["name"] for p in fit}
    assert set(df.loc[df["set"] == "held_out", "point"]) == {p["name"] for p in held}
    # one error recomputed by hand: (estimate − measured) / measured of the LLaMA-7B full-offload host peak
    row = df[(df["point"] == "6.74e9 ZeRO-3 opt+param->cpu 8x2 bf16 states") & (df["quantity"] == "host RSS (peak)")]
    est = row["estimate GiB"].item()
    assert row["error %"].item() == pytest.approx(100 * (est - 102.2) / 102.2, abs=0.05)
    s = summary(df).set_index(["set", "quantity"])
    assert s.loc[("fit", "host RSS (peak)"), "points"] == sum(1 for p in fit if p["measured"].get("host_peak_gib"))


def _check_point(data, point):
    plan = Plan(**point["plan"])
    # the run's own config when the point carries it, else the reference rung's, else None: DeepSpeed's
    # defaults (plain-script runs)
    cfg = point.get("deepspeed_config") or REFERENCE_CONFIGS.get(point["name"].split(":")[0])
    # gpu_device_gib: the capped H200's whole memory, which DeepSpeed's ZeRO-1/2 flattening check sees (NVML)
    e = estimate(plan, bf16_states=point["bf16_states"], spec=_spec(data, point["spec"]), device=point["device"],
                 ds_config=cfg, eager_attention=bool(point.get("masked_attention")),
                 gpu_device_gib=data.get("gpu_device_gib"))
    if point["ran"]:
        assert e.fits_gpu and e.fits_host is not False, e.verdict
    else:
        assert (e.fits_gpu if point["failure"] == "gpu" else e.fits_host) is False, e.verdict
    _check_against_measurement(e, point["measured"], plan)


def test_reference_rungs_with_their_own_configs():
    # every measured rung of the H200 benchmark, including the stock configs (LLaMA-Factory, Accelerate, the
    # LLaMA article) that are not calibration points, estimated with the DeepSpeed config each run used
    ref = json.loads((REPO / "data" / "reference" / "h200x2_2026-11-30.json").read_text())
    cal = json.loads((REPO / "data" / "calibration" / "h200x2_2026-11-30.json").read_text())
    specs = {cal[k]["num_params"]: k for k in ("spec_llama_3b", "spec_qwen2_5_3b")}
    measured = [r for r in ref["rungs"] if r.get("peak_gpu_reserved_gib")]
    assert len(measured) >= 11
    for r in measured:
        spec = _spec(cal, specs[r["num_params"]]) if r["num_params"] in specs else model_spec("llama-7b")
        plan = Plan(**dict(r["plan"], model=spec.name))
        e = estimate(plan, bf16_states=r["bf16_states"], spec=spec, ds_config=r["deepspeed_config"])
        _check_against_measurement(e, {k: r[k] for k in ("peak_gpu_allocated_gib", "peak_gpu_reserved_gib",
                                                          "host_peak_gib")}, plan)


def test_compare_table():
    e = estimate(Plan(model="tiny-qwen2", num_gpus=2), device="cpu")
    t = compare(e, {"peak_gpu_allocated_gib": None, "host_peak_gib": 1.0})
    assert list(t.columns) == ["quantity", "estimate GiB", "measured GiB", "error %"]
    assert list(t["quantity"]) == ["GPU allocated (peak)", "GPU reserved (peak)", "host RSS (peak)"]
    host = t.set_index("quantity").loc["host RSS (peak)"]
    assert host["estimate GiB"] == pytest.approx(e.host_gib["total"], abs=1e-3)
    assert host["error %"] == pytest.approx(round(100 * (e.host_gib["total"] - 1.0), 1))
    # dict form (as recorded in a run summary) gives the same table
    assert compare(e.to_dict(), {"host_peak_gib": 1.0}).equals(compare(e, {"host_peak_gib": 1.0}))
    g = compare(estimate(Plan(model="tiny-qwen2")), {"peak_gpu_allocated_gib": 0.5}).set_index("quantity")
    assert g.loc["GPU allocated (peak)", "measured GiB"] == 0.5


def test_cpu_rehearsal_estimate():
    plan = Plan(model="tiny-qwen2", num_gpus=2, micro_batch=2, seq_len=512)
    e = estimate(plan, device="cpu")
    assert e.gpu_gib["total"] == 0 and e.host_gib["ranks_on_cpu"] > 0
    assert e.host_gib["runtime"] == pytest.approx(2 * memory.CPU_RUNTIME_BASELINE_GIB)
    assert estimate_host_rss_cpu_run(plan) == pytest.approx(e.host_gib["total"])


# ------------------------------------------------------------------------------------------
# API shape, rendering, CLI, figures

def test_to_dict_json_shape_and_frame():
    e = estimate(Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="cpu", offload_param="cpu"))
    d = json.loads(e.to_json())
    assert isinstance(d["params"], int) and d["params"] == 6_738_415_616
    assert isinstance(d["gpu_gib"]["total"], float) and isinstance(d["host_gib"]["total"], float)
    assert isinstance(d["fits_gpu"], bool) and d["fits_host"] is None
    assert d["plan"]["model"] == "llama-7b"
    assert sum(v for k, v in d["gpu_gib"].items() if k != "total") == pytest.approx(d["gpu_gib"]["total"], abs=1e-3)
    frame = e.to_frame()
    assert set(frame["where"]) == {"GPU", "host"} and "<table" in e._repr_html_()
    assert "ZeRO-3 + opt→cpu + param→cpu" in e.verdict


def test_sweep_rows_and_verdicts():
    result = sweep(Plan(model="qwen-14b", num_gpus=8, host_memory_gib=512))
    frame = result.to_frame()
    assert len(frame) == len(VARIANTS)
    fits = dict(zip(frame["variant"], frame["fits GPU"]))
    assert fits["ZeRO-2"] is False and fits["ZeRO-3"] is False and fits["ZeRO-3 + opt→cpu"] is True
    assert "<table" in result._repr_html_()


def test_fast_after_spec_is_cached():
    plan = Plan(model="qwen-14b", num_gpus=8, zero_stage=3)
    estimate(plan)
    t = time.perf_counter()
    sweep(plan)
    assert time.perf_counter() - t < 1.0


def test_bad_input_errors():
    with pytest.raises(EstimateError, match="device="):
        estimate(Plan(), device="tpu")
    with pytest.raises(EstimateError, match="plan="):
        estimate({"model": "tiny-qwen2"})
    with pytest.raises(EstimateError, match="estimate="):
        compare(42, {})


def test_cli_json(capsys):
    from cookbook.cli import main
    rc = main(["estimate", "qwen-14b", "--gpus", "8", "--gpu-memory-gib", "24", "--zero-stage", "3",
               "--offload-optimizer", "cpu", "--micro-batch", "1", "--seq-len", "1024", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["params"] == 14_167_290_880 and d["fits_gpu"] is True and d["fits_host"] is None
    assert d["host_model_states_gib"] == pytest.approx(316.66, abs=0.01)


def test_cli_sweep_and_errors(capsys):
    from cookbook.cli import main
    assert main(["estimate", "llama-7b", "--gpus", "1", "--sweep", "--host-memory-gib", "125"]) == 0
    out = capsys.readouterr().out
    assert "ZeRO-3 + opt→cpu + param→cpu" in out and "fits GPU" in out
    assert main(["estimate", "no-such-model", "--gpus", "1"]) == 2
    assert "no-such-model" in capsys.readouterr().err
    assert main(["estimate", "tiny-qwen2", "--zero-stage", "2", "--offload-param", "cpu"]) == 2


def test_seq_len_under_the_minimum_names_the_flag_on_the_cli_and_the_argument_in_python(capsys):
    """--seq-len 1 is refused (a 1-token row has no next token to predict), in the words of whoever typed it."""
    from cookbook.cli import main
    from cookbook.plan import MIN_SEQ_LEN, PlanError
    assert MIN_SEQ_LEN == 8
    assert main(["estimate", "tiny-qwen2", "--seq-len", "1"]) == 2
    err = capsys.readouterr().err
    assert "--seq-len 1: too short to train on" in err and "set --seq-len to 64 or more (at least 8)" in err
    assert "seq_len" not in err
    with pytest.raises(PlanError, match=r"^seq_len=1: too short to train on.*set seq_len to 64 or more") as exc:
        estimate(Plan(seq_len=1))
    assert "--seq-len" not in str(exc.value)
    with pytest.raises(PlanError, match="seq_len=7"):
        Plan(seq_len=7)
    assert Plan(seq_len=8).seq_len == 8  # the minimum itself is a plan
    assert main(["estimate", "tiny-qwen2", "--seq-len", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] > 0


def test_plot_and_calculator():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    result = sweep(Plan(model="llama-7b", host_memory_gib=125))
    fig = memory.plot_breakdown(result)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert any(line.get_ydata()[0] == 24 for line in ax.get_lines())  # the GPU memory line
    assert len(ax.get_xticklabels()) == len(VARIANTS)
    host_fig = memory.plot_breakdown(list(result), where="host")
    assert isinstance(host_fig, Figure)
    widget = memory.calculator("qwen-14b", num_gpus=8)
    import ipywidgets
    assert isinstance(widget, ipywidgets.VBox)
    assert len(widget.result) == len(VARIANTS) and widget.result[0].plan.num_gpus == 8
    assert widget.chart.value[:8] == b"\x89PNG\r\n\x1a\n" and all(e.verdict in widget.verdicts.value for e in widget.result)
    chart = widget.chart.value
    widget.controls["variant"].value = (3, "cpu", "none")  # the user picks one variant: redrawn
    assert len(widget.result) == 1 and widget.result[0].fits_gpu is True
    widget.controls["num_gpus"].value = 1
    assert widget.result[0].plan.num_gpus == 1 and widget.result[0].fits_gpu is False
    assert widget.verdicts.value.count("ZeRO-") == 1 and "ZeRO-3 + opt→cpu: GPU" in widget.verdicts.value
    assert "DOES NOT FIT" in widget.verdicts.value and widget.chart.value != chart
    widget.controls["gpu_memory_gib"].value = -1.0  # an invalid plan: said in the widget, which keeps working
    assert widget.result is None and "error: " in widget.verdicts.value and "gpu_memory_gib" in widget.verdicts.value
    widget.controls["gpu_memory_gib"].value = 80.0
    assert widget.result[0].fits_gpu is True


# ------------------------------------------------------------------------------------------
# a real CPU run (slow): host RSS of a 2-rank tiny-model DeepSpeed run against the estimate

RUN_SCRIPT = r'''
import os, resource, socket, sys
import torch.multiprocessing as mp
def worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", DS_ACCELERATOR="cpu")
    import torch, deepspeed
    from transformers import AutoConfig, AutoModelForCausalLM
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1]))
    m.gradient_checkpointing_enable()
    eng, *_ = deepspeed.initialize(model=m, config=cfg, model_parameters=m.parameters())
    x = torch.randint(0, m.config.vocab_size, (2, 512))
    for _ in range(2):
        loss = eng(input_ids=x, labels=x).loss; eng.backward(loss); eng.step()
    open(f"{out}/rank{rank}", "w").write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30))
if __name__ == "__main__":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = str(s.getsockname()[1]); s.close()
    mp.spawn(worker, args=(port, sys.argv[2]), nprocs=2)
'''


@pytest.mark.slow
def test_cpu_run_host_rss_against_estimate(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    subprocess.run([sys.executable, str(script), str(REPO / "data/models/tiny-qwen2"), str(tmp_path)], check=True,
                   env=env, timeout=900, capture_output=True)
    measured = sum(float((tmp_path / f"rank{r}").read_text()) for r in range(2))
    plan = Plan(model="tiny-qwen2", num_gpus=2, micro_batch=2, seq_len=512, zero_stage=2)
    table = compare(estimate(plan, device="cpu"), {"host_peak_gib": measured}).set_index("quantity")
    assert abs(table.loc["host RSS (peak)", "error %"]) <= 100 * CPU_REHEARSAL_HOST_TOLERANCE, table


def test_share_model_holds_qwen14b_per_rank_states_on_8_ranks():
    """qwen2-14b-share8 on ONE rank holds the model states one of Qwen-14B's 8 ranks holds under ZeRO-3
    (with and without offload), within 0.05 %: 1/8 of the parameters, 18 bytes each with bf16 (16-bit
    parameters 2, fp32 master 4, Adam 8, fp32 gradient partition 4)."""
    from cookbook.models import model_spec
    n_share, n_target = model_spec("qwen2-14b-share8").num_params, model_spec("qwen-14b").num_params
    assert n_share == 1_770_747_904 and abs(n_share * 8 / n_target - 1) < 1e-4
    for opt, par in (("none", "none"), ("cpu", "none"), ("cpu", "cpu")):
        r = memory.share_ratio(offload_optimizer=opt, offload_param=par)
        assert r["target_gib"] == pytest.approx(18 * n_target / 8 / 2**30, rel=1e-6)
        assert r["share_gib"] == pytest.approx(18 * n_share / 2**30, rel=1e-6)
        assert abs(r["ratio"] - 1) < 5e-4
    for model, ranks in (("qwen2-14b-share4", 2), ("qwen2-14b-share2", 4)):
        assert abs(memory.share_ratio(model, share_ranks=ranks)["ratio"] - 1) < 5e-4


def test_choose_offload_run_follows_host_ram_and_nvme():
    plan = Plan(model="llama-7b", num_gpus=1, gpu_memory_gib=24, host_memory_gib=64, seq_len=1024, micro_batch=2,
                grad_accum=8, precision="bf16", zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    f32 = memory.estimate(plan).host_gib["total"]
    b16 = memory.estimate(plan, bf16_states=True).host_gib["total"]
    assert b16 < f32
    pick = lambda host, **kw: memory.choose_offload_run(plan.replace(host_memory_gib=host), **kw)
    # fp32 states need room for the estimator's measured host error (issue 31): 1 GiB above the estimate is at the
    # edge, so bf16 states (with room) are picked there, lossy; the estimate plus its band + 1 GiB: fp32 states
    band = json.loads((REPO / "data" / "estimate_error_bands.json").read_text())["bands"]["host_rss"]
    room = f32 * (1 + band["zero3_param_offload"]["fraction"]) + 1
    assert pick(room, nvme_ok=False, nvme_free_gib=0).kind == "fp32 states"
    edge = pick(f32 + 1, nvme_ok=False, nvme_free_gib=0)
    assert edge.kind == "bf16 states" and edge.reason.startswith("LOSSY")
    c = pick((f32 + b16) / 2, nvme_ok=False, nvme_free_gib=0)
    assert c.kind == "bf16 states" and c.bf16_states and c.plan.offload_param == "cpu"
    c = pick(b16 - 1, nvme_ok=True, nvme_free_gib=None)
    assert c.kind == "NVMe offload" and c.plan.offload_optimizer == "nvme"
    c = pick(b16 - 1, nvme_ok=False, nvme_free_gib=None)
    assert c.plan is None and "async_io" in c.reason
    assert [a.split(":")[0].split(" instead")[0].split(" (")[0] for a in c.alternatives] == ["more host RAM", "NVMe offload",
                                                                                           "LoRA"]
    c = pick(b16 - 1, nvme_ok=True, nvme_free_gib=1.0)
    assert c.plan is None and "on the SSD" in c.reason


def test_activation_advice_names_only_levers_left():
    """The over-budget reason offers only what the plan has not used: micro batch 1 and checkpointing on leave
    seq_len alone; micro batch 2 without checkpointing offers all three (LLaMA-7B, ZeRO-3 full offload, seq 32768:
    34.5 GiB against 24)."""
    base = dict(model="llama-7b", num_gpus=1, gpu_memory_gib=24, seq_len=32768, zero_stage=3,
                offload_optimizer="cpu", offload_param="cpu", precision="bf16")
    tight = estimate(Plan(micro_batch=1, gradient_checkpointing=True, **base)).reasons[0]
    assert tight.endswith("lower --seq-len 32768"), tight
    loose = estimate(Plan(micro_batch=2, gradient_checkpointing=False, **base)).reasons[0]
    assert "lower --micro-batch 2 or --seq-len 32768 or turn on --gradient-checkpointing" in loose, loose


def test_estimate_takes_the_model_as_train_spells_it():
    """`cookbook estimate --model llama-7b` (train's spelling) is the same plan as `cookbook estimate llama-7b`;
    both at once, or neither, is an error naming the fix (argparse printed "unrecognized arguments: --model")."""
    import subprocess
    import sys
    cmd = [sys.executable, "-m", "cookbook.cli", "estimate", "--gpus", "1", "--zero-stage", "3",
           "--offload-optimizer", "cpu", "--json"]
    a = subprocess.run(cmd + ["llama-7b"], capture_output=True, text=True)
    b = subprocess.run(cmd + ["--model", "llama-7b"], capture_output=True, text=True)
    assert a.returncode == b.returncode == 0, b.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout)
    both = subprocess.run(cmd + ["llama-7b", "--model", "qwen-14b"], capture_output=True, text=True)
    assert both.returncode == 2 and "given twice" in both.stderr and "--model 'qwen-14b'" in both.stderr
    none = subprocess.run(cmd, capture_output=True, text=True)
    assert none.returncode == 2 and "no model given" in none.stderr and "--model llama-7b" in none.stderr


def test_host_peak_counts_a_live_child_process_once():
    """cookbook.train.host_peak_rss_gib adds what a live child holds alone (ZenFlow's optimizer process keeps Adam
    m, v there): a child that fills 256 MiB of its own raises the figure by about that much (USS, not RSS: the
    interpreter pages it shares with this process are not counted twice)."""
    import subprocess
    import sys
    import time

    from cookbook.train import host_peak_rss_gib
    before = host_peak_rss_gib()
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(256 * 2**20); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        grown = host_peak_rss_gib() - before
    finally:
        child.kill()
        child.wait()
    assert 0.24 < grown < 0.35, grown
