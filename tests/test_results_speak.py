"""The results notebooks 02-06 display carry their own words, tables and records (issue 30 item 4): the NVMe road,
the offload choice with its batch shape, the NVMe run option, the story's setup (06); the target's schedule and
verdict, the one-GPU stand-in, the host RAM of offload, the run (02-05). Expected values are computed here from the
architecture (LLaMA-7B: 6,738,415,616 parameters, Qwen-14B: 14,167,290,880) and the datasheet disk, not copied from
output."""
from __future__ import annotations

import pytest

from cookbook import nvme_road, offload, story
from cookbook.plan import Plan

N_LLAMA7B = 6_738_415_616
GIB = 2 ** 30
DESKTOP = dict(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=64.0, seq_len=1024, micro_batch=2,
               grad_accum=8, precision="bf16", zero_stage=3, offload_optimizer="cpu", offload_param="cpu")


@pytest.fixture(scope="module")
def road():
    fast = ("a 3/2 GB/s disk", {"read_gb_s": 3.0, "write_gb_s": 2.0, "method": "test"})
    return nvme_road.road(Plan(**DESKTOP), disks=[nvme_road.consumer_disk(), fast, ("unmeasured disk", {}), None])


def test_the_road_puts_18_bytes_per_parameter_on_the_ssd_and_fits_64_gib(road):
    assert road.plan.offload_optimizer == road.plan.offload_param == "nvme"
    assert road.disk_gib == pytest.approx(18 * N_LLAMA7B / GIB, rel=1e-3)
    rec = road.to_record()
    assert rec["fits_host"] is True and 40 < rec["host_peak_gib"] < 64
    assert rec["disk_gib"] == road.disk_gib and rec["plan"] == "ZeRO-3 + opt→nvme + param→nvme"
    # the floor on each measured disk: read / read bandwidth + write / write bandwidth, one decimal
    for row, (r, w) in zip(rec["floors"], [(7.0, 6.5), (3.0, 2.0)]):
        want = rec["read_gb_per_step"] / r + rec["write_gb_per_step"] / w
        assert row["SSD-only floor s/step"] == pytest.approx(want, abs=0.06)
    assert len(rec["floors"]) == 2  # the unmeasured disk is named, not floored; None dropped
    assert rec["bandwidth_here"]["read_gb_s"] == 3.0
    assert rec["write_tb_per_1000_steps"] == pytest.approx(rec["write_gb_per_step"], rel=1e-9)  # GB/step × 1000 / 1000
    assert rec["steps_to_tbw"] == pytest.approx(1200e12 / (rec["write_gb_per_step"] * 1e9))


def test_the_road_prints_its_numbers_and_tabulates_its_states(road):
    text = str(road)
    first = text.splitlines()[0]
    assert f"{road.disk_gib:.1f} GiB on the SSD" in first and "(fits 64 GiB)" in first
    assert f"at least {road.floors['SSD-only floor s/step'].iloc[0]:.1f} s per step" in first
    assert "unmeasured disk: no bandwidth measured" in text and "Endurance:" in text
    assert first == road.headline == road.to_record()["headline"]
    table = road.table
    ssd = table[table["where"] == "SSD"]
    assert ssd["GiB"].sum() == pytest.approx(road.disk_gib, abs=0.05)
    assert set(ssd["what"]) >= {"master weights", "Adam m", "Adam v", "gradients"}


def test_the_offload_choice_for_the_desktop_is_nvme_with_a_larger_micro_batch():
    run = offload.choose(Plan(**DESKTOP, nvme_path="/x"), "the desktop", nvme_ok=True, nvme_free_gib=None,
                         nvme_path="/nvme-here")
    assert run.fits and run.label == "ZeRO-3 + opt→nvme + param→nvme" and run.plan.nvme_path == "/nvme-here"
    assert run.larger is not None and run.larger.plan.micro_batch * run.larger.plan.grad_accum == 16
    rec = run.to_record()
    assert rec["kind"] == "NVMe offload" and rec["larger_micro_batch"] == run.larger.plan.micro_batch
    assert rec["machine"] == "the desktop" and rec["shape"].startswith("faster at the same global batch")
    text = str(run)
    assert text.startswith("the desktop: NVMe offload — ") and text.splitlines()[-1].strip() == rec["shape"]
    assert "alternative:" in text and "; " in run.headline and "\n" not in run.headline
    table = run.table
    assert list(table["kind"]) == ["fp32 states", "bf16 states", "NVMe offload"]
    assert table.loc[table["chosen"], "kind"].tolist() == ["NVMe offload"]
    assert table.set_index("kind").loc["fp32 states", "host GiB"] > 64


def test_without_a_larger_micro_batch_the_shape_line_says_why():
    one = offload.choose(Plan(**dict(DESKTOP, host_memory_gib=512.0, micro_batch=16, grad_accum=1)), "big box",
                         nvme_ok=False, nvme_free_gib=None)
    assert one.label == "ZeRO-3 + opt→cpu + param→cpu" and one.larger is None
    assert one.shape_line == "micro batch 16 × accumulation 1: the whole global batch in one micro batch already"


def test_the_nvme_option_says_why_it_skips():
    cpu = Plan(**DESKTOP)
    nv = cpu.replace(offload_optimizer="nvme", offload_param="nvme", nvme_path="/tmp")
    chosen = offload.nvme_option(nv, {"c": 1}, nv, {"c": 2}, try_nvme=True, async_io_ok=True, async_io_why="")
    assert chosen.kind == "chosen" and chosen.config == {"c": 1} and not chosen.runs
    no_aio = offload.nvme_option(cpu, {}, nv, {}, try_nvme=True, async_io_ok=False, async_io_why="no libaio")
    assert str(no_aio) == "NVMe run skipped: no libaio"
    assert no_aio.to_record() == {"nvme_status": "skipped", "nvme_skipped_reason": "no libaio"}
    off = offload.nvme_option(cpu, {}, nv, {}, try_nvme=False, async_io_ok=False, async_io_why="no libaio")
    assert off.reason == "TRY_NVME is False; it could not run here anyway: no libaio"
    assert off.check(None) is None


def test_the_setup_names_the_target_and_this_machines_run():
    target = Plan(**DESKTOP)
    run = Plan(model="tiny-llama", num_gpus=1, gpu_memory_gib=24.0, seq_len=128, micro_batch=4, grad_accum=1,
               zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    s = story.setup(target, run, max_steps=40, rehearsal=True)
    assert (s.device, s.warmup_steps, s.hang_timeout_s) == ("cpu", 2, 300.0)
    g = story.setup(target, run, max_steps=10, rehearsal=False)
    assert (g.device, g.warmup_steps, g.hang_timeout_s) == ("cuda", 1, 900.0)
    target_line, run_line = str(s).splitlines()
    assert target_line.startswith("target: llama-7b on 1 × 24 GiB, 64 GiB host RAM, micro batch 2 × 1024 tokens × 8")
    assert run_line.startswith("run:    tiny-llama on 1 rank(s) (CPU rehearsal), micro batch 4 × 128 tokens × 1")


# ----------------------------------------------------------------------------------------------
# notebooks 02-05: the schedule, the verdict, the stand-in, the host RAM, the run (issue 30 item 4)

N_QWEN14B = 14_167_290_880
N_SHARE8 = 1_770_747_904  # qwen2-14b-share8: 1/8 of Qwen-14B
QWEN = dict(model="qwen-14b", num_gpus=8, gpu_memory_gib=24.0, host_memory_gib=512.0, seq_len=512, micro_batch=1,
            grad_accum=16, precision="bf16")
Z2 = dict(zero_stage=2, offload_optimizer="none", offload_param="none")
REHEARSAL_RUN = dict(model="tiny-qwen2", num_gpus=2, gpu_memory_gib=24.0, seq_len=128, micro_batch=4, grad_accum=1,
                     precision="bf16")


def test_the_schedule_is_the_target_config_numbers():
    sched = story.schedule(Plan(**QWEN, **Z2), lr=1e-5, epochs=3.0)
    # 3 epochs of the 977 packed rows at 1 × 16 × 8 rows a step (tests/test_notebooks.py: TARGET_STEPS)
    assert sched.hyperparameters == {"lr": 1e-5, "lr_scheduler": "cosine", "warmup_steps": 1, "total_steps": 24}
    assert sched.rows["rows"] == 977
    assert str(sched).startswith("target schedule: lr 1e-05, cosine, warm-up 1, 24 steps: 3 epochs at 128 rows")


def test_the_verdict_says_fits_or_not_and_records_the_estimate():
    from cookbook import memory
    e = memory.estimate(Plan(**QWEN, **Z2))
    v = story.verdict(e)
    assert str(v).startswith("ZeRO-2 for qwen-14b on 8 × 24 GiB with 512 GiB host RAM: DOES NOT FIT — GPU: ")
    rec = v.to_record()
    assert rec["verdict"] == str(v) and rec["fits_target"] is False and rec["fits_target_gpu"] is False
    assert rec["target_estimate"]["plan"]["zero_stage"] == 2
    assert v.plan_line.startswith("Plan for qwen-14b on 8 × 24 GiB with 512 GiB RAM: ")


@pytest.mark.parametrize("run, model, whose", [
    (REHEARSAL_RUN, "qwen2-14b-share8", "CPU rehearsal's"),
    (dict(REHEARSAL_RUN, model="qwen2-14b-share8", num_gpus=1, seq_len=512, micro_batch=1, grad_accum=16),
     "qwen2-14b-share8", "this run's model")])
def test_the_stand_in_equals_the_share_under_zero3_only(run, model, whose):
    from cookbook import memory, stand_in
    target = Plan(**QWEN, **Z2)
    s = stand_in.choose(target, Plan(**run, **Z2), memory.estimate(target))
    rec = s.to_record()
    assert rec["model"] == model and rec["ranks"] == 1 and whose in s.sentence
    assert rec["zero3_target_gib"] == pytest.approx(18 * N_QWEN14B / 8 / GIB, rel=1e-4)
    assert rec["zero3_share_gib"] == pytest.approx(18 * N_SHARE8 / GIB, rel=1e-4)
    assert rec["zero2_target_gib"] == pytest.approx((2 + 18 / 8) * N_QWEN14B / GIB, rel=1e-4)
    assert rec["zero2_share_gib"] == pytest.approx(20 * N_SHARE8 / GIB, rel=1e-4)
    assert f"{rec['zero2_target_gpu_gib']:.1f} GiB" in rec["sentence"] and "ZeRO-3 model states only" in str(s)
    assert len(s.lines()) == 4


def test_no_stand_in_when_the_run_is_the_target():
    from cookbook import memory, stand_in
    target = Plan(**QWEN, **Z2)
    s = stand_in.choose(target, target, memory.estimate(target))
    assert s.to_record() == {"model": None, "sentence": "this run is the target itself (qwen-14b on 8 ranks): no stand-in"}


def test_host_ram_of_cpu_offload_is_below_the_articles_520_gb():
    h = offload.host_ram(Plan(**QWEN, zero_stage=3, offload_optimizer="cpu", offload_param="cpu"))
    need = h.to_record()["host_need_gib"]
    assert 300 < need["ZeRO-3 + opt→cpu + param→cpu"] < 520 / 1.073741824
    assert need["ZeRO-3 + opt→cpu"] < need["ZeRO-3 + opt→cpu + param→cpu"]
    assert set(h.to_record()["host_need_bf16_states_gib"]) == {"ZeRO-3 + opt→cpu", "ZeRO-3 + opt→cpu + param→cpu"}
    assert f"{need['ZeRO-3 + opt→cpu + param→cpu']:.0f} GiB at peak" in str(h)


def test_the_run_takes_the_targets_variant_and_the_policys_pick_says_what_to_change():
    target = Plan(**QWEN, zero_stage=3, offload_optimizer="nvme", offload_param="nvme", nvme_path="/local_nvme")
    run = story.with_variant(Plan(**REHEARSAL_RUN), target, nvme_path="/tmp/here")
    assert (run.zero_stage, run.offload_optimizer, run.offload_param, run.nvme_path) == (3, "nvme", "nvme", "/tmp/here")
    assert story.with_variant(Plan(**REHEARSAL_RUN), Plan(**QWEN, **Z2), nvme_path="/tmp/here").nvme_path is None
    from cookbook import memory
    chosen, ladder = story.recommended(Plan(**QWEN))
    d = memory.decide(Plan(**QWEN), bf16_states=False)
    assert chosen.plan.label == d.recommended.plan.label == "ZeRO-3 + opt→cpu" and chosen.status == memory.FITS
    assert len(ladder.estimates) == len(memory.VARIANTS) and not any(e.bf16_states for e in ladder)
    with pytest.raises(ValueError, match="no ZeRO variant fits .* set BF16_STATES = True"):
        story.recommended(Plan(**dict(QWEN, host_memory_gib=64.0)))


def _story_run(status, message, *, rehearsal, summary=None):
    from cookbook.launch import RunResult
    target, run = Plan(**QWEN, **Z2), Plan(**REHEARSAL_RUN, **Z2)
    setup = story.setup(target, run, max_steps=25, rehearsal=rehearsal)
    result = RunResult(status=status, message=message, run_dir="/nowhere", command="accelerate launch ...",
                       summary=summary, world_size=2)
    return story.StoryRun(setup, result, config={}, label=target.label)


def test_a_run_says_what_happened_and_what_it_adds_to_the_verdict():
    part = {"kind": "zero1/2", "full_numel": 10, "per_rank_numel": [5, 5]}
    ok = _story_run("ok", "25 steps on 2 ranks", rehearsal=True, summary={"zero_partition": part, "device": "cpu",
                                                                              "world_size": 2})
    assert str(ok) == "ZeRO-2 run (CPU rehearsal (2 ranks)): ok — 25 steps on 2 ranks"
    assert ok.to_record() == {"run_status": "ok", "zero_partition": part} and ok.runs == {"ZeRO-2": ok.result}
    assert "ran the same code path as a GPU run" in ok.basis() and "ended ok" in ok.basis()
    gpu_ok = _story_run("ok", "25 steps", rehearsal=False)
    assert "measured its memory and throughput beside the estimate" in gpu_ok.basis()
    failed = _story_run("failed", "rank0: boom", rehearsal=False)
    assert "ended failed: rank0: boom; the target's numbers are the estimate's." in failed.basis()
    assert failed.to_record()["zero_partition"] is None and failed.saved_model() is None
    assert failed.recipe(None).endswith("GPU run (tiny-qwen2, 2 rank(s)) failed, no loss recorded, 16-bit model not saved")
