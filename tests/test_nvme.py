"""NVMe offload: the bandwidth probe, the aio tuner, the aio block DeepSpeed parses, the NVMe estimate against
hand-computed values, and (when DeepSpeed's async I/O op works here) a 2-rank CPU rehearsal whose swap files
are weighed against the estimate."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from cookbook import nvme
from cookbook.dsconfig import ConfigError, build_config, preset_plan
from cookbook.memory import estimate
from cookbook.models import model_spec
from cookbook.plan import Plan
from test_dsconfig import _DataParallelMPU

REPO = Path(__file__).resolve().parent.parent
MIB = 2 ** 20

#: A LLaMA-architecture model just large enough that DeepSpeed swaps something on 2 ranks: its embedding and
#: head partitions are exactly 1 MiB of bf16 (DeepSpeed swaps tensors of >= 1 MiB, swap_tensor/utils.py).
SWAP_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
              "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
              "vocab_size": 8192, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "bfloat16",
              "use_cache": False}


@pytest.fixture(scope="module")
def swap_llama(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("swap-llama")
    (d / "config.json").write_text(json.dumps(SWAP_LLAMA))
    return str(d)


# ---------------------------------------------------------------- constants and the aio block

def test_constants_are_deepspeeds():
    from deepspeed.runtime.swap_tensor import constants as c
    from deepspeed.runtime.swap_tensor.utils import AIO_ALIGNED_BYTES, MIN_AIO_BYTES
    from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                        DeepSpeedZeroOffloadParamConfig)
    assert nvme.AIO_DEFAULTS == {"block_size": c.AIO_BLOCK_SIZE_DEFAULT, "queue_depth": c.AIO_QUEUE_DEPTH_DEFAULT,
                                 "intra_op_parallelism": c.AIO_INTRA_OP_PARALLELISM_DEFAULT,
                                 "single_submit": c.AIO_SINGLE_SUBMIT_DEFAULT,
                                 "overlap_events": c.AIO_OVERLAP_EVENTS_DEFAULT}
    assert (nvme.MIN_AIO_BYTES, nvme.AIO_ALIGNED_BYTES) == (MIN_AIO_BYTES, AIO_ALIGNED_BYTES)
    par, opt = DeepSpeedZeroOffloadParamConfig(), DeepSpeedZeroOffloadOptimizerConfig()
    assert nvme.DS_OFFLOAD_DEFAULTS == {"optimizer_buffer_count": opt.buffer_count,
                                        "param_buffer_count": par.buffer_count,
                                        "param_buffer_size": par.buffer_size, "max_in_cpu": par.max_in_cpu}


@pytest.mark.parametrize("block, words", [
    ({"num_threads": 8}, ["num_threads", "intra_op_parallelism"]),       # ds_nvme_tune 0.19.8's key
    ({"single_submit": "false"}, ["single_submit", "JSON boolean"]),     # ... and its string booleans
    ({"block_size": 1000}, ["block_size", "512"]),
    ({"queue_depth": 0}, ["queue_depth", "positive"]),
    ([1, 2], ["JSON object"]),
])
def test_validate_aio_refuses_what_deepspeed_would_ignore(block, words):
    with pytest.raises(nvme.NvmeError) as exc:
        nvme.validate_aio(block)
    for w in words:
        assert w in str(exc.value)


def _parse(cfg, world):
    from deepspeed.runtime.config import DeepSpeedConfig
    return DeepSpeedConfig(cfg, mpu=_DataParallelMPU(world))


def test_tuned_aio_block_reaches_deepspeeds_parser(ds_dist, tmp_path):
    tuned = {"aio": {"block_size": 8 * MIB, "queue_depth": 32, "intra_op_parallelism": 4, "single_submit": True,
                     "overlap_events": False}, "offload_param": {"buffer_count": 3, "buffer_size": 1000}}
    f = tmp_path / "aio.json"
    f.write_text(json.dumps(tuned))
    plan = preset_plan("zero3-nvme", model="llama-7b", num_gpus=2, micro_batch=1, grad_accum=1, nvme_path="/nv")
    cfg = build_config(plan, aio=str(f))
    assert cfg["aio"] == tuned["aio"]
    par = cfg["zero_optimization"]["offload_param"]
    # buffer_count from the tuner, raised to what DeepSpeed holds at once (transformers' ZeRO-3 init swaps in
    # an attention block's q, k, v, o together: 4); buffer_size never below the largest partition (131,072,000 / 2)
    assert par["buffer_count"] == 4 and par["buffer_size"] == 65_536_000
    parsed = _parse(cfg, 2)
    assert parsed.aio_config == dict(tuned["aio"], use_gds=False)
    assert parsed.zero_config.offload_param.buffer_count == 4
    # without a tuned block: DeepSpeed's defaults, which its parser reads back unchanged
    assert _parse(build_config(plan), 2).aio_config == dict(nvme.AIO_DEFAULTS, use_gds=False)


def test_aio_config_errors_name_the_flag(tmp_path):
    plan = preset_plan("zero3-nvme", model="llama-7b", num_gpus=2, micro_batch=1, grad_accum=1, nvme_path="/nv")
    with pytest.raises(ConfigError, match="--aio-config .*cannot be read"):
        build_config(plan, aio=str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"aio": {"num_threads": 8}}))
    with pytest.raises(ConfigError, match="num_threads"):
        build_config(plan, aio=str(bad))
    with pytest.raises(ConfigError, match="only to NVMe offload"):
        build_config(preset_plan("zero3-offload", model="llama-7b", num_gpus=2, micro_batch=1, grad_accum=1),
                     aio={"block_size": MIB})


def test_sweep_settings_accept_ds_nvme_tune_names():
    s = nvme.sweep_settings({"block_size": ["1M", "8M"], "io_parallel": [1, 2], "sequential_requests": [True]})
    assert s[0] == nvme.AIO_DEFAULTS  # DeepSpeed's defaults are always measured, first
    assert [(x["block_size"], x["intra_op_parallelism"]) for x in s[1:]] == [(MIB, 1), (MIB, 2), (8 * MIB, 1),
                                                                              (8 * MIB, 2)]
    assert all(x["overlap_events"] is False for x in s[1:])  # sequential_requests = not overlap_events
    with pytest.raises(nvme.NvmeError, match="unknown key 'depth'"):
        nvme.sweep_settings({"depth": [1]})


# ---------------------------------------------------------------- bandwidth probe

def test_plain_probe_is_bounded_records_and_cleans_up(tmp_path):
    r = nvme.measure_bandwidth(tmp_path, size_mib=8, time_limit_s=20, method="plain")
    assert r["method"] in ("o_direct", "fsync") and r["bytes"] == 8 * MIB
    assert r["read_gb_s"] > 0 and r["write_gb_s"] > 0
    assert sorted(os.listdir(tmp_path)) == [nvme.BANDWIDTH_RECORD]  # the probe's own files are gone
    rec = nvme.recorded_bandwidth(tmp_path)
    assert rec["read_gb_s"] == r["read_gb_s"] and rec["matches_aio"] is False


def test_probe_errors_name_the_folder(tmp_path):
    with pytest.raises(nvme.NvmeError, match="mkdir -p"):
        nvme.measure_bandwidth(tmp_path / "nope")
    with pytest.raises(nvme.NvmeError, match="size_mib"):
        nvme.measure_bandwidth(tmp_path, size_mib=0)


# ---------------------------------------------------------------- DeepSpeed's async I/O op

@pytest.fixture(scope="module")
def aio_op():
    """DeepSpeed's async I/O op, built once (minutes on a cold machine) where the cookbook's ranks load it."""
    ok, why = nvme.async_io_available()
    if not ok:
        pytest.skip(f"DeepSpeed's async I/O op cannot be built here: {why}")
    ok, why = nvme.prepare_async_io()
    if not ok:
        pytest.skip(why)
    return True


def test_deepspeed_aio_probe(aio_op, tmp_path):
    r = nvme.measure_bandwidth(tmp_path, size_mib=12, time_limit_s=30, method="deepspeed_aio")
    assert r["method"] == "deepspeed_aio" and r["aio"] == nvme.AIO_DEFAULTS
    assert r["read_gb_s"] > 0 and r["write_gb_s"] > 0
    assert sorted(os.listdir(tmp_path)) == [nvme.BANDWIDTH_RECORD]
    assert nvme.recorded_bandwidth(tmp_path, nvme.AIO_DEFAULTS)["matches_aio"] is True


def test_tuner_writes_a_block_deepspeed_accepts(aio_op, ds_dist, tmp_path, capsys):
    from cookbook.cli import main
    nv = tmp_path / "nv"
    nv.mkdir()
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"block_size": ["1M"], "queue_depth": [8, 32], "intra_op_parallelism": [1, 2]}))
    out = tmp_path / "aio.json"
    rc = main(["nvme-tune", str(nv), "-o", str(out), "--io-size-mib", "4", "--time-limit-s", "30", "--loops", "1",
               "--sweep-config", str(sweep), "--buffer-counts", "2,3", "--buffer-sizes", str(2 ** 20),
               "--max-locked-mib", "16"])
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert len(res["settings"]) == 4 and res["settings"][0]["aio"] == nvme.AIO_DEFAULTS
    ran = [s for s in res["settings"] if s["status"] == "ok"]
    best = min(ran, key=lambda s: 0.5 / s["read_gb_s"] + 0.5 / s["write_gb_s"])  # --read-share 0.5
    assert res["aio"] == best["aio"]
    assert res["offload_param"]["buffer_count"] in (2, 3) and res["offload_param"]["buffer_size"] == 2 ** 20
    assert sorted(os.listdir(nv)) == [nvme.BANDWIDTH_RECORD]  # every test file deleted
    # the config builder takes the file, and DeepSpeed's parser reads the block back as written
    plan = preset_plan("zero3-nvme", model="tiny-llama", num_gpus=1, micro_batch=1, grad_accum=1, nvme_path=str(nv))
    cfg = build_config(plan, aio=str(out))
    assert _parse(cfg, 1).aio_config == dict(res["aio"], use_gds=False)
    assert cfg["zero_optimization"]["offload_param"]["buffer_count"] == res["offload_param"]["buffer_count"]


def test_tuner_refuses_a_missing_folder(tmp_path, capsys):
    from cookbook.cli import main
    assert main(["nvme-tune", str(tmp_path / "none")]) == 2
    assert "mkdir -p" in capsys.readouterr().err


# ---------------------------------------------------------------- the estimate, by hand

def test_nvme_estimate_tiny_model_by_hand(swap_llama):
    """SWAP_LLAMA on 2 ranks, bf16, fp32 states, ZeRO-3 optimizer + parameters on NVMe, DeepSpeed's defaults
    except max_in_cpu 0 (so that the parameters reach the SSD, as a 7B's do), grad accumulation 2."""
    plan = Plan(model=swap_llama, num_gpus=2, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                nvme_path="/nv", grad_accum=2, precision="bf16")
    cfg = build_config(plan)
    cfg["zero_optimization"]["offload_param"]["max_in_cpu"] = 0
    est = nvme.estimate_nvme(plan, ds_config=cfg, device="cpu")  # the CPU rehearsal: no power-of-two rounding
    # parameters: embedding and head 8192×128 = 1,048,576 each; per layer q, k, v, o 128×128, gate/up/down
    # 128×352, two norms of 128; a final norm: N = 2,499,200; per rank P = 1,249,600 (every tensor splits evenly)
    assert model_spec(swap_llama).num_params == 2_499_200
    P = 1_249_600
    emb_part = 524_288  # 1 MiB of bf16, 2 MiB of fp32: the only tensors >= 1 MiB
    # one optimizer sub-group (P < sub_group_size 1e9), swapped (P × 4 B >= 1 MiB); sizes rounded up to
    # 1024 B = 256 fp32 elements: 1,249,792
    sg = math.ceil(P / 256) * 256
    assert sg == 1_249_792
    assert est.disk_per_rank == {"master": 4 * sg, "adam_m": 4 * sg, "adam_v": 4 * sg,
                                 "grads": 2 * 4 * emb_part, "params_16bit": 2 * 2 * emb_part}
    assert est.disk_bytes == 2 * (12 * sg + 8 * emb_part + 4 * emb_part) == 42_577_920
    # host: 4 optimizer buffers of the sub-group (fp32), 5 parameter buffers of buffer_size 1e8 (> 524,288)
    # elements in bf16, staging of the sub-group's full tensors in bf16, small partitions kept in CPU
    # (all but the embedding, head, and the five persistent norms of 128 <= 10 × 128 elements), the bf16
    # gradient buffer; no flat parameter buffer (max_in_cpu 0)
    small = P - 2 * emb_part - 5 * 64  # partitions of q, k, v, o, gate, up, down (the norms are persistent)
    h = est.host_per_rank
    assert h["optimizer_swap_buffers"] == 4 * sg * 4
    assert h["param_swap_buffers"] == 5 * (math.ceil(10 ** 8 / 512) * 512) * 2  # 1024 B alignment of each buffer
    # staging: Σ of FULL tensor sizes of the sub-group (DeepSpeed sizes it with ds_numel), each rounded up to
    # 512 bf16 elements: 2 × 1,048,576 + 2 × (4 × 16,384 + 3 × 45,056) + 5 norms of 128 -> 512 each
    assert h["param_swap_out_staging"] == 2 * (2 * 1_048_576 + 2 * (4 * 16_384 + 3 * 45_056) + 5 * 512)
    assert h["param_flat_cpu_buffer"] == 0 and h["unswapped_optimizer_states"] == 0
    assert h["params_kept_in_cpu"] == 2 * small
    assert h["grad_flat_buffer"] == 2 * P
    assert est.transient_per_rank == 2 * 4 * P
    # on a GPU run PyTorch's pinned blocks are rounded up to powers of two; DeepSpeed's mlock'ed buffers are not
    gpu = nvme.estimate_nvme(plan, ds_config=cfg).host_per_rank
    assert gpu["grad_flat_buffer"] == 2 ** 22 and gpu["params_kept_in_cpu"] == 2 * (4 * 16_384 + 3 * 65_536)
    assert gpu["optimizer_swap_buffers"] == h["optimizer_swap_buffers"]
    # traffic per optimizer step: parameters read twice per micro-step (2 micro-steps): the builder's
    # stage3_max_reuse_distance 0 (DeepSpeed #3062) keeps nothing gathered from forward to backward
    assert cfg["zero_optimization"]["stage3_max_reuse_distance"] == 0
    assert est.read_per_step_per_rank == {"params_16bit": 2 * 2 * 2 * 2 * emb_part, "optimizer_states": 12 * sg,
                                          "grads": 8 * emb_part}
    assert est.write_per_step_per_rank == {"grads": 8 * emb_part, "optimizer_states": 12 * sg,
                                           "params_16bit": 4 * emb_part}
    # with DeepSpeed's 1e9 the whole model (2.5e6 elements) lies within the distance: read once per micro-step
    kept = dict(cfg, zero_optimization=dict(cfg["zero_optimization"], stage3_max_reuse_distance=10 ** 9))
    assert nvme.estimate_nvme(plan, ds_config=kept, device="cpu").read_per_step_per_rank["params_16bit"] == \
        2 * 2 * 2 * emb_part
    f = est.floor(2.0, 1.0)
    read, write = 2 * (16 * emb_part + 12 * sg + 8 * emb_part), 2 * (12 * emb_part + 12 * sg)
    assert f["floor_serial_s"] == pytest.approx(read / 2e9 + write / 1e9)
    assert est.endurance(600)["write_tb_per_1000_steps"] == pytest.approx(write * 1000 / 1e12)
    # with DeepSpeed's max_in_cpu (1e9 > P) the parameters stay in CPU for good: nothing of them on the SSD
    est_default = nvme.estimate_nvme(plan, ds_config=build_config(plan), device="cpu")
    assert est_default.disk_per_rank["params_16bit"] == 0
    assert est_default.host_per_rank["param_flat_cpu_buffer"] == 2 * P


def test_nvme_estimate_7b_one_gpu():
    """LLaMA-7B on one GPU: 18 B/param on the SSD (fp32 master, m, v, gradients + bf16 parameters), the
    optimizer swap buffers hold 4 sub-groups of ~1e9 fp32 elements."""
    plan = Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                nvme_path="/nv", grad_accum=8, micro_batch=2, seq_len=1024, host_memory_gib=64)
    est = nvme.estimate_nvme(plan)
    N = 6_738_415_616
    assert est.disk_bytes == pytest.approx(18 * N, rel=1e-3)
    assert est.write_bytes_per_step == pytest.approx(18 * N, rel=1e-3)  # every step rewrites all of it
    # parameters: 8 micro-steps × (forward + backward) × 2 B, less those reused within 1e9 elements (the last
    # ~1/3e9 under checkpointing: kept gathered from forward to backward)
    rd = est.read_per_step_per_rank
    assert 8 * 2 * 2 * N * 0.9 <= rd["params_16bit"] <= 8 * 2 * 2 * N
    assert rd["optimizer_states"] + rd["grads"] == pytest.approx(16 * N, rel=1e-3)
    assert 4 * 4 * 1e9 <= est.host_per_rank["optimizer_swap_buffers"] <= 4 * 4 * 1.05e9
    assert est.host_per_rank["grad_flat_buffer"] == 2 ** 34  # 2N bytes, pinned: rounded up to 16 GiB
    m = estimate(plan)
    assert m.nvme_gib == pytest.approx(est.disk_bytes / 2 ** 30)
    assert m.host_gib["nvme_buffers"] == pytest.approx(est.host_bytes / 2 ** 30)
    assert m.fits_host  # the NVMe road fits 64 GiB; CPU offload does not
    assert not estimate(plan.replace(offload_optimizer="cpu", offload_param="cpu")).fits_host
    assert m.nvme["endurance"]["write_tb_per_1000_steps"] == pytest.approx(18 * N * 1000 / 1e12, rel=1e-3)


def test_zero2_nvme_is_cpu_offload_in_deepspeed():
    plan = Plan(model="llama-7b", num_gpus=1, zero_stage=2, offload_optimizer="nvme", nvme_path="/nv")
    e = estimate(plan)
    assert e.nvme_gib == 0 and e.nvme is None
    assert e.host_gib["total"] == pytest.approx(estimate(plan.replace(offload_optimizer="cpu")).host_gib["total"])
    assert any("does not swap to NVMe" in r for r in e.reasons)


def test_estimate_cli_shows_nvme(capsys):
    from cookbook.cli import main
    assert main(["estimate", "llama-7b", "--gpus", "1", "--zero-stage", "3", "--offload-optimizer", "nvme",
                 "--offload-param", "nvme", "--nvme-path", "/nv"]) == 0
    out = capsys.readouterr().out
    assert "GiB on the SSD" in out and "per optimizer step" in out and "TB per 1,000 steps" in out


# ---------------------------------------------------------------- a real 2-rank CPU rehearsal

@pytest.mark.slow
def test_two_rank_cpu_rehearsal_with_nvme_offload(aio_op, swap_llama, tmp_path):
    """ZeRO-3, optimizer and parameters on NVMe, 2 CPU ranks, 3 steps of 2 micro-steps: the run finishes with a
    finite loss, DeepSpeed's swap files weigh what the estimate says, the storage traffic the ranks did per step
    (/proc/self/io) is the estimate's, and the summary carries the disk-only floor on the measured bandwidth."""
    from cookbook.launch import launch
    nv = tmp_path / "nvme"
    nv.mkdir()
    bw = nvme.measure_bandwidth(nv, size_mib=8, time_limit_s=20, method="deepspeed_aio")
    plan = Plan(model=swap_llama, num_gpus=2, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                nvme_path=str(nv), micro_batch=2, grad_accum=2, seq_len=32, precision="bf16",
                gradient_checkpointing=False)
    cfg = build_config(plan, "accelerate", lr=1e-3, warmup_steps=1, total_steps=3)
    zero = cfg["zero_optimization"]
    zero["offload_param"]["max_in_cpu"] = 0  # the parameters reach the SSD, as a 7B's do (its partition > 1e9)
    zero["offload_param"]["buffer_size"] = 2 ** 20  # >= the largest partition; locks 10 MiB per rank, not 1 GB
    # DeepSpeed 0.19.8 queues the same parameter twice for NVMe prefetch when its forward and backward uses both
    # fall in the prefetch window (partitioned_param_coordinator.__prefetch_nvme_param_partitions has no
    # de-duplication; "param 20 already assigned swap buffer id 3"); a tiny model always hits it
    zero["stage3_prefetch_bucket_size"] = 0
    res = launch(plan, tmp_path / "run", config=cfg, max_steps=3, lr=1e-3, warmup_steps=1, final_save=False,
                 tokenizer="shipped",  # a config-only test model: the shipped tokenizer, on purpose
                 hang_timeout_s=600)
    assert res.status == "ok", res.message
    assert math.isfinite(res.summary["last_loss"])
    on_disk = sum(f.stat().st_size for f in (nv / "zero_stage_3").rglob("*.swp"))
    est = nvme.estimate_nvme(plan, ds_config=cfg, device="cpu")
    assert on_disk == est.disk_bytes == 42_577_920
    io = res.summary["nvme_io"]
    m = io["measured_disk_io"]  # the ranks' own block-layer counters, steps 2-3
    assert m["read_gb_per_step"] * 1e9 == pytest.approx(est.read_bytes_per_step, rel=0.01)
    assert m["write_gb_per_step"] * 1e9 == pytest.approx(est.write_bytes_per_step, rel=0.01)
    assert io["bandwidth"]["read_gb_s"] == bw["read_gb_s"] and io["bandwidth"]["matches_aio"]
    assert io["achieved_over_floor_serial"] == pytest.approx(
        io["floor_measured_disk"]["floor_serial_s"] / res.summary["step_time_s"])


def test_env_records_the_disk_bandwidth(tmp_path, capsys):
    """`cookbook env --nvme-path DIR` times the folder and writes it into the facts; the check shows the floor."""
    from cookbook.cli import main
    from cookbook.env import check, load_facts
    nv = tmp_path / "nv"
    nv.mkdir()
    facts_file = tmp_path / "facts.json"
    main(["env", "--model", "llama-7b", "--gpus", "1", "--zero-stage", "3", "--offload-optimizer", "nvme",
          "--offload-param", "nvme", "--nvme-path", str(nv), "--nvme-probe-mib", "8", "--dump-facts", str(facts_file),
          "--no-allreduce"])
    facts = load_facts(facts_file)
    bw = facts["nvme_bandwidth"]
    assert bw["read_gb_s"] > 0 and bw["write_gb_s"] > 0 and bw["path"] == str(nv.resolve())
    assert bw["method"] in ("deepspeed_aio", "o_direct", "fsync")
    assert sorted(os.listdir(nv)) == [nvme.BANDWIDTH_RECORD]
    plan = Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="nvme", offload_param="nvme",
                nvme_path=str(nv))
    c = check(plan, facts)["nvme_bandwidth"]
    est = nvme.estimate_nvme(plan)
    floor = est.read_bytes_per_step / (bw["read_gb_s"] * 1e9) + est.write_bytes_per_step / (bw["write_gb_s"] * 1e9)
    assert c.status == "ok" and f"at least {floor:.1f} s per step" in c.reason


def test_nvme_host_runtime_term_only_for_gpu_ranks_with_nvme():
    """memory.NVME_HOST_RUNTIME_GIB (1.0 GiB, measured on the H200: RSS during the steps of four NVMe runs sat
    1.01-1.04 GiB above the estimate's other terms) is added to a GPU rank's runtime with NVMe offload only."""
    from cookbook import memory
    from cookbook.plan import Plan
    base = dict(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, seq_len=1024, micro_batch=2, grad_accum=8,
                precision="bf16", zero_stage=3)
    nvme = Plan(**base, offload_optimizer="nvme", offload_param="nvme", nvme_path="/nvme")
    cpu = Plan(**base, offload_optimizer="cpu", offload_param="cpu")
    run_nvme = memory.estimate(nvme, device="cuda").host_gib["runtime"]        # GiB
    run_cpu = memory.estimate(cpu, device="cuda").host_gib["runtime"]
    assert abs(run_cpu - (0.55 + 0.65)) < 1e-9                    # RUNTIME_BASELINE + CUDA_HOST_RUNTIME
    assert abs(run_nvme - (0.55 + 0.65 + 1.0)) < 1e-9             # + NVME_HOST_RUNTIME
    assert abs(memory.estimate(nvme, device="cpu").host_gib["runtime"] - memory.CPU_RUNTIME_BASELINE_GIB) < 1e-9   # a CPU rank: its own baseline, neither
