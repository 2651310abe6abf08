"""The results notebook 06 displays carry their own words, tables and records (issue 30 item 4): the NVMe road,
the offload choice with its batch shape, the NVMe run option, the story's setup. Expected values are computed
here from the architecture (LLaMA-7B: 6,738,415,616 parameters) and the datasheet disk, not copied from output."""
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
