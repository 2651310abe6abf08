"""The decision policy (issue 31, item 1): exact fp32 states first, bf16 states only when no exact variant fits with
room, "room" = the estimate plus the estimator's measured error band; NVMe sized with DeepSpeed's host-RAM knobs;
ZeRO-1/2's initialisation as DeepSpeed 0.19.8 flattens. Expected values are computed here from estimate() and
the calibration records directly, not by calling the policy again."""
import json
import math
import sys
from pathlib import Path

import pytest

from cookbook import dsconfig
from cookbook.cli import main
from cookbook.memory import (AT_EDGE, CUDA_CONTEXT_GIB, FITS, GIB, NO_FIT, choose_nvme_knobs, decide, error_bands,
                             estimate, flattens_on_gpu, headroom)
from cookbook.models import model_spec
from cookbook.plan import Plan

REPO = Path(__file__).resolve().parent.parent
BANDS = json.loads((REPO / "data" / "estimate_error_bands.json").read_text())["bands"]


def band(q, family):
    return BANDS[q][family]["fraction"]


# ----------------------------------------------------------------------------------------------
# the error bands: from the calibration records, current


def test_error_bands_file_is_current_and_its_worst_point_is_what_it_says():
    sys.path.insert(0, str(REPO))  # benchmarks/ is not an installed package
    from benchmarks.calibration import error_bands as recompute
    assert recompute() == BANDS, "data/estimate_error_bands.json is stale: python -m benchmarks.calibration --write-bands"
    # by hand: the ZeRO-3 + optimizer offload held-out point measured 18.60 GiB reserved; its estimate × (1 + band)
    # gives it back, and no other zero3 point is further off
    cal = json.loads((REPO / "data" / "calibration" / "h200_heldout_2026-12-01.json").read_text())
    point = next(p for p in cal["points"] if p["name"].startswith(BANDS["gpu_reserved"]["zero3"]["point"]))
    from benchmarks.calibration import estimate_point
    _, e = estimate_point(cal, point)
    assert e.gpu_reserved_gib * (1 + band("gpu_reserved", "zero3")) == pytest.approx(
        point["measured"]["peak_gpu_reserved_gib"], abs=5e-4 * e.gpu_reserved_gib)
    assert band("gpu_reserved", "all") == max(v["fraction"] for k, v in BANDS["gpu_reserved"].items())
    assert error_bands()["host_rss"]["zero012"].fraction == band("host_rss", "zero012")


def test_headroom_statuses_from_the_band():
    plan = Plan(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=128.0, seq_len=1024,
                micro_batch=2, grad_accum=8, zero_stage=3, offload_optimizer="cpu", offload_param="none")
    e = estimate(plan, bf16_states=True)
    need = e.gpu_reserved_gib * (1 + band("gpu_reserved", "zero3")) + CUDA_CONTEXT_GIB
    host_need = e.host_gib["total"] * (1 + band("host_rss", "zero3"))
    h = headroom(e)
    assert h.gpu_need_gib == pytest.approx(need, rel=1e-3) and h.host_need_gib == pytest.approx(host_need)
    want = NO_FIT if not e.fits else (FITS if need <= 24 and host_need <= 128 else AT_EDGE)
    assert h.status == e.status == want
    # the same estimate on a card 1 GiB above the band's need: room; between the estimate and the need: at the edge
    roomy = estimate(plan.replace(gpu_memory_gib=math.ceil(need) + 1.0), bf16_states=True)
    assert roomy.status == FITS
    mid = (e.gpu_gib["total"] + need) / 2
    assert estimate(plan.replace(gpu_memory_gib=mid), bf16_states=True).status == AT_EDGE
    assert estimate(plan.replace(gpu_memory_gib=e.gpu_gib["total"] - 0.5), bf16_states=True).status == NO_FIT
    d = e.to_dict()
    assert d["status"] == want and d["headroom"]["gpu_need_gib"] == round(need, 2)


# ----------------------------------------------------------------------------------------------
# the three machines

QWEN14 = dict(model="qwen-14b", num_gpus=8, gpu_memory_gib=24.0, host_memory_gib=256.0, seq_len=1024,
              micro_batch=1, grad_accum=1, precision="bf16")


def test_8x24_256gib_qwen14b_is_exact_nvme_with_a_lowered_sub_group_size(capsys):
    nvme = Plan(**QWEN14, zero_stage=3, offload_optimizer="nvme", offload_param="nvme", nvme_path="/nvme")
    spec = model_spec("qwen-14b")
    # independently: with DeepSpeed's default knobs (sub_group_size 1e9) NVMe needs more than the machine
    default = estimate(nvme, nvme_knobs={"sub_group_size": 10 ** 9, "max_in_cpu": 10 ** 9, "pin_memory": True})
    assert default.host_gib["total"] > 256
    # the largest sub_group_size of the ladder whose estimate + band fits: 5e8 here (1e8: 105 GiB, also fits)
    hb = band("host_rss", "zero3_param_offload")
    by_size = {s: estimate(nvme, nvme_knobs={"sub_group_size": s, "max_in_cpu": 10 ** 9, "pin_memory": True})
               for s in (5 * 10 ** 8, 2 * 10 ** 8, 10 ** 8)}
    # the 105 GiB at 1e8 is with pin_memory false (no power-of-two rounding of the flat buffers); pinned 111.8
    unpinned = estimate(nvme, nvme_knobs={"sub_group_size": 10 ** 8, "max_in_cpu": 10 ** 9, "pin_memory": False})
    assert unpinned.host_gib["total"] == pytest.approx(105.1, abs=0.1)
    assert by_size[10 ** 8].host_gib["total"] == pytest.approx(111.8, abs=0.1)
    want = max(s for s, e in by_size.items() if e.host_gib["total"] * (1 + hb) <= 256)
    assert want < 10 ** 9
    d = decide(Plan(**QWEN14))
    r = d.recommended
    assert not r.bf16_states and not d.lossy and r.status == FITS
    assert (r.plan.offload_optimizer, r.plan.offload_param) == ("nvme", "nvme")
    assert r.nvme["settings"]["sub_group_size"] == want
    assert r.host_gib["total"] == pytest.approx(by_size[want].host_gib["total"])
    # bf16 states fit too, but are not recommended while an exact variant has room
    assert any(e.bf16_states and e.status == FITS for e in d.candidates)
    # the config builder writes those knobs, and the estimate of the written config is the decision's
    cfg = dsconfig.build_config(nvme)
    assert cfg["zero_optimization"]["sub_group_size"] == want
    assert cfg["zero_optimization"]["offload_optimizer"]["pin_memory"] is True
    assert estimate(nvme, ds_config=cfg).host_gib["total"] == pytest.approx(r.host_gib["total"])
    assert choose_nvme_knobs(nvme, spec=spec).knobs["sub_group_size"] == want
    # the CLI: status per variant, the recommended one and why, the knobs
    args = ["estimate", "qwen-14b", "--gpus", "8", "--gpu-memory-gib", "24", "--host-memory-gib", "256", "--seq-len",
            "1024", "--sweep"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "recommended: ZeRO-3 + opt→nvme + param→nvme" in out and "status: fits" in out
    assert f"sub_group_size {want // 10 ** 8}e8" in out and "why: exact fp32 master weights" in out
    assert main(args + ["--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    rows = j["decision"]["variants"]
    assert {r["status"] for r in rows} <= {FITS, AT_EDGE, NO_FIT}
    assert [r["variant"] for r in rows if r["recommended"]] == ["ZeRO-3 + opt→nvme + param→nvme"]
    assert j["decision"]["lossy"] is False and j["decision"]["why"]
    assert all("status" in v for v in j["variants"])  # the sweep's own table carries it too


def test_1x24_128gib_qwen25_7b_not_recommended_at_0_9_gib_left():
    """main (8fc8958) recommended ZeRO-3 + opt→cpu with bf16 states at 23.1/24 GiB for the run file's 2 × 8: its
    estimate + the measured band of ZeRO-3 runs does not fit the card, so it is at the edge and not recommended."""
    plan = Plan(model="qwen2.5-7b", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=128.0, seq_len=1024,
                micro_batch=2, grad_accum=8, precision="bf16")
    old = estimate(plan.replace(zero_stage=3, offload_optimizer="cpu", offload_param="none"), bf16_states=True)
    assert old.fits and 24 - old.gpu_gib["total"] < 1.0
    assert old.gpu_reserved_gib * (1 + band("gpu_reserved", "zero3")) + CUDA_CONTEXT_GIB > 24
    d = decide(plan)
    r = d.recommended
    assert r.status == FITS and r.headroom.gpu_need_gib <= 24 and r.headroom.host_need_gib <= 128
    assert not (r.plan.label == old.plan.label and r.bf16_states)
    assert any(e.plan.label == old.plan.label and e.bf16_states for e in d.at_edge)
    assert not r.bf16_states  # an exact variant has room (NVMe)
    # the larger micro batch keeps the same margin: the largest divisor shape whose estimate + band fits, by hand
    shapes = [estimate(r.plan.replace(micro_batch=m, grad_accum=16 // m)) for m in (16, 8, 4)]
    want = next(e for e in shapes if e.status == FITS and
                e.gpu_reserved_gib * (1 + band("gpu_reserved", "zero3_param_offload")) + CUDA_CONTEXT_GIB <= 24)
    assert d.larger_micro is not None and d.larger_micro.plan.micro_batch == want.plan.micro_batch
    assert all(e.status != FITS for e in shapes if e.plan.micro_batch > want.plan.micro_batch)


def test_1x24_64gib_llama7b_gets_an_answer_to_act_on():
    plan = Plan(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=64.0, seq_len=1024,
                micro_batch=2, grad_accum=8, precision="bf16")
    d = decide(plan)
    r = d.recommended
    assert r is not None and r.status == FITS and not r.bf16_states
    # independently: nothing in host RAM fits 64 GiB (CPU offload of 7B: > 64), NVMe does
    assert estimate(plan.replace(zero_stage=3, offload_optimizer="cpu", offload_param="cpu"),
                    bf16_states=True).host_gib["total"] > 64
    assert r.plan.offload_param == "nvme" and r.host_gib["total"] * (1 + band("host_rss", "zero3_param_offload")) <= 64
    text = str(d)
    assert "--offload-optimizer nvme --offload-param nvme --nvme-path" in text and "NVMe host-RAM knobs" in text


def test_bf16_states_only_when_no_exact_variant_fits_labelled_lossy_with_the_exact_alternative():
    """8 × 40 GiB, 32 GiB of host RAM: no offload fits the host, exact ZeRO-3 does not fit the card; bf16 states do."""
    plan = Plan(model="qwen-14b", num_gpus=8, gpu_memory_gib=40.0, host_memory_gib=32.0, seq_len=512, micro_batch=1,
                grad_accum=1, precision="bf16")
    z3 = dict(zero_stage=3, offload_optimizer="none", offload_param="none")
    exact, b16 = estimate(plan.replace(**z3)), estimate(plan.replace(**z3), bf16_states=True)
    assert exact.status != FITS and b16.status == FITS  # the premise, from the estimates
    d = decide(plan)
    assert d.lossy and d.recommended.bf16_states and d.recommended.plan.label == "ZeRO-3"
    assert "LOSSY" in d.reasons[0] and "random initialisation, 150 steps" in d.reasons[0]
    x = d.exact_alternative
    assert x is not None and not x.bf16_states
    j = d.to_dict(predict=lambda e: {"tokens_per_s": None, "step_s": None, "label": e.plan.label})
    assert j["lossy"] and j["exact_alternative"]["predicted"]["label"] == x.plan.label  # the speed model's hook
    assert "LOSSY" in str(d) and "best exact alternative" in str(d)


# ----------------------------------------------------------------------------------------------
# class 2: ZeRO-1/2 at initialisation, as DeepSpeed 0.19.8 flattens


def test_zero2_init_flattens_on_the_cpu_when_the_card_is_short_and_on_a_capped_h200_on_the_gpu():
    n = model_spec("llama-7b").num_params
    pN = 2 * n                                        # bf16 parameters, bytes
    plan = Plan(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=256.0, seq_len=1024,
                micro_batch=1, grad_accum=1, precision="bf16", zero_stage=2, offload_optimizer="cpu")
    # stage_1_and_2.py: flat buffer on the device only if NVML's free memory (card − context − parameters) >= p·N
    assert (24 - CUDA_CONTEXT_GIB) * GIB - pN < pN and not flattens_on_gpu(plan, pN)
    assert flattens_on_gpu(plan, pN, gpu_device_gib=140.4)
    real = estimate(plan)
    capped = estimate(plan, gpu_device_gib=140.4)
    # capped H200: 2·p·N at init (the measured OOM "tried to allocate 12.55 GiB" = p·N beside p·N)
    assert capped.gpu_reserved_gib >= 2 * pN / GIB and not capped.fits_gpu
    # a real 24 GiB card: the flat buffer p·N, then the GPU clone of the rank's partition (p·N on one rank): 2·p·N,
    # whichever path — measured (data/reference/h200_zero2_init.json): the 7B run on an H200 filled down to 24 GiB
    # took the CPU path and ran out of memory allocating that 12.55 GiB clone
    assert real.gpu_allocated_gib >= 2 * pN / GIB and not real.fits_gpu
    # on 2 ranks (each clones half): p·N·1.5 at init, and the card holds it — ZeRO-2 + optimizer offload of
    # LLaMA-7B at micro 1 across 24 GiB cards, as users run it
    two = estimate(plan.replace(num_gpus=2))
    assert not flattens_on_gpu(plan.replace(num_gpus=2), pN)
    assert two.gpu_gib["init_excess"] * GIB <= 1.5 * pN and two.fits_gpu, two.verdict
    assert not any("whatever the batch size" in r for r in two.reasons)
    # the host holds every param.cpu_data and the flat CPU buffer for a moment: 2·p·N beyond the runtime
    assert real.host_gib["total"] >= 2 * pN / GIB


def test_an_exact_alternative_that_does_not_fit_is_not_called_the_best():
    """LLaMA-7B, 1 × 24 GiB, 125.8 GiB host, 16 × 1 (notebook 06 on the H200): when no exact variant fits, the
    closest one shown beside the lossy pick says it does not fit."""
    from cookbook.memory import NO_FIT
    plan = Plan(model="llama-7b", num_gpus=1, gpu_memory_gib=24, host_memory_gib=125.8, seq_len=1024,
                micro_batch=16, grad_accum=1)
    d = decide(plan, nvme=False)
    x = d.exact_alternative
    assert d.recommended.bf16_states and x is not None and x.status == NO_FIT   # the premise
    assert "the closest (it does NOT fit)" in str(d) and "best exact alternative" not in str(d)
