"""Real 2-rank CPU runs of the training entry through the launch helper (DeepSpeed CPU accelerator,
gloo): every ZeRO variant on tiny-qwen2, save/reload, resume, kill -9, corrupted checkpoints."""
import json
import math
import os
import shutil
from pathlib import Path

import pytest

from cookbook.launch import launch
from cookbook.plan import Plan

METRIC_FIELDS = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "tflops", "mfu",
                 "peak_gpu_allocated_gib", "peak_gpu_reserved_gib", "host_rss_gib", "real_tokens", "token_slots",
                 "packing_efficiency", "row_tokens_mean", "row_tokens_max", "row_width_max"}
SUMMARY_FIELDS = {"status", "world_size", "steps", "first_loss", "last_loss", "tokens_per_s", "peak_gpu_gib",
                  "host_peak_gib", "deepspeed_config", "zero_partition", "estimate", "estimate_vs_measured",
                  "packing", "attention", "row_tokens_mean", "row_tokens_max", "tokens_per_micro_batch_mean",
                  "tokens_per_micro_batch_max", "packing_efficiency", "estimate_shape"}
#: Loss must fall by this fraction from the mean of the first 5 steps to the mean of the last 5 (40 steps,
#: lr 3e-3, tiny-qwen2 from random weights). Today's default before packing (the Alpaca set, ~30-token rows):
#: ~27%; the issue asks >= 20% for the defaults, and the same for the packed chat rows (128-token rows of the
#: shipped chats, loss on assistant turns): measured 31% here (first-5 mean 7.55 -> last-5 mean 5.18).
LOSS_DROP = 0.20


def plan(**kw) -> Plan:
    base = dict(model="tiny-qwen2", num_gpus=2, seq_len=128, micro_batch=4, grad_accum=1, precision="fp32",
                zero_stage=3, gradient_checkpointing=False)
    base.update(kw)
    return Plan(**base)


@pytest.mark.slow
@pytest.mark.parametrize("stage,opt,param", [(2, "none", "none"), (3, "none", "none"), (3, "cpu", "cpu")],
                         ids=["zero2", "zero3", "zero3-offload"])
def test_each_zero_variant_trains_on_two_real_ranks(tmp_path, stage, opt, param):
    res = launch(plan(zero_stage=stage, offload_optimizer=opt, offload_param=param), tmp_path / "run",
                 max_steps=40, progress=False, hang_timeout_s=300, verify_save="full")
    assert res.status == "ok", res.message + str(res.details)
    s = res.summary
    assert SUMMARY_FIELDS <= set(s)
    assert s["world_size"] == 2 and s["steps"] == 40
    # ZeRO really partitions: each rank holds half of the partitioned state
    part = s["zero_partition"]
    assert len(part["per_rank_numel"]) == 2
    assert sum(part["per_rank_numel"]) >= part["full_numel"] - 2 * 64  # padding aside, shares cover the model
    assert max(part["per_rank_numel"]) < 0.55 * part["full_numel"]
    assert 1 - s["last5_mean_loss"] / s["first5_mean_loss"] >= LOSS_DROP
    assert len(res.metrics) == 40 and METRIC_FIELDS <= set(res.metrics[0])
    # the default: the shipped chats, packed into rows of exactly --seq-len tokens, attention within examples
    assert s["format"] == "messages" and s["packing"] is True and s["attention"]["within_examples"]
    assert s["row_width_max"] == 128 and s["row_tokens_max"] == 128 and s["row_tokens_mean"] >= 127
    assert s["packing_efficiency"] >= 0.99 and s["tokens_per_micro_batch_max"] == 4 * 128
    assert s["row_note"] is None and s["estimate_shape"]["seq_len"] == 128
    assert all(r["token_slots"] == 2 * 4 * 128 for r in res.metrics)
    assert all(math.isfinite(r["loss"]) for r in res.metrics)
    assert s["peak_gpu_gib"] is None and s["host_peak_gib"] > 0.1
    assert s["deepspeed_config"]["zero_optimization"]["stage"] == stage
    # the saved model was reloaded and its logits compared with the live engine's
    v = s["save_verification"]
    assert v["ok"] and v["empty_tensors"] == [] and v["logits_match"]
    # estimate beside measurement: host RSS of the CPU rehearsal within 35% of the estimate
    host_row = next(r for r in s["estimate_vs_measured"] if r["quantity"].startswith("host"))
    assert abs(host_row["error %"]) <= 35


@pytest.mark.slow
def test_saved_model_reloads_with_from_pretrained_and_matches_logits(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    from cookbook.data import collate, load_records, load_tokenizer, tokenize

    # the Alpaca set without packing: rows are single examples, shorter than --seq-len, and every number says so
    from cookbook.models import INSTRUCTIONS_PATH
    res = launch(plan(zero_stage=3), tmp_path / "run", max_steps=6, progress=False, hang_timeout_s=300,
                 dataset=str(INSTRUCTIONS_PATH), packing=False)
    assert res.ok, res.message
    s = res.summary
    assert s["format"] == "alpaca" and s["packing"] is False and s["packing_reason"] == "--no-packing"
    assert s["row_tokens_mean"] < 60 and s["row_width_max"] < 128 and s["row_note"].startswith("rows held")
    assert f"of --seq-len 128" in res.message  # beside the tokens/s in the result message
    assert s["estimate_shape"]["seq_len"] == s["row_width_max"]  # the estimate is for the rows that ran
    assert all(r["real_tokens"] < r["token_slots"] <= 2 * 4 * r["row_width_max"] for r in res.metrics)
    final = Path(res.run_dir) / "final_model"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert all(p.numel() > 0 for p in model.parameters())
    # independent check: the saved weights differ from a fresh random init of the same seed (they trained)
    tok = load_tokenizer()
    data = tokenize(load_records(INSTRUCTIONS_PATH), tok, 128)
    batch = collate(data.input_ids[:2], data.labels[:2], tok.pad_token_id)
    with torch.no_grad():
        loss_trained = model(**batch).loss.item()
    assert loss_trained < res.summary["first_loss"]
    v = res.summary["save_verification"]
    assert v["max_abs_logit_diff"] <= 1e-3
    # DeepSpeed's zero_to_fp32 gives the same weights (this run trained in fp32)
    from cookbook.checkpoint import fp32_conversion_host_gib, to_fp32
    fp32 = AutoModelForCausalLM.from_pretrained(to_fp32(res.run_dir, tmp_path / "fp32"))
    for a, b in zip(fp32.parameters(), model.parameters()):
        assert torch.equal(a, b)
    assert fp32_conversion_host_gib(6_738_415_616) == pytest.approx(50.2, abs=0.1)


def _losses(run_dir) -> dict:
    return {r["step"]: r["loss"] for r in map(json.loads, (Path(run_dir) / "metrics.jsonl").read_text().splitlines())}


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_continues_like_uninterrupted(tmp_path):
    p = plan(zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    ref = launch(p, tmp_path / "ref", max_steps=12, save_steps=3, progress=False, hang_timeout_s=300,
                 verify_save="off")
    assert ref.ok, ref.message
    os.environ["COOKBOOK_FAULT"] = "kill@1:8"  # rank 1 dies by SIGKILL at step 8, after checkpoints 3 and 6
    try:
        killed = launch(p, tmp_path / "run", max_steps=12, save_steps=3, progress=False, hang_timeout_s=300,
                        verify_save="off")
    finally:
        del os.environ["COOKBOOK_FAULT"]
    assert killed.status == "host_oom" and killed.details["rank"] == 1, killed.message
    assert "signal 9" in killed.message
    # a plain restart without --resume is refused: the folder holds this run's checkpoints
    again = launch(p, tmp_path / "run", max_steps=12, save_steps=3, progress=False)
    assert again.status == "config_error" and "--resume" in again.message
    resumed = launch(p, tmp_path / "run", max_steps=12, save_steps=3, resume=True, progress=False,
                     hang_timeout_s=300, verify_save="off")
    assert resumed.ok, resumed.message
    assert resumed.summary["resumed_from"].endswith("step-00000006")
    assert resumed.message.startswith("resumed from step 6; "), resumed.message
    a, b = _losses(ref.run_dir), _losses(resumed.run_dir)
    assert sorted(b) == list(range(1, 13))
    for step in range(1, 13):
        assert b[step] == pytest.approx(a[step], abs=1e-4), step
    lr_ref = [r["lr"] for r in ref.metrics]
    lr_res = [r["lr"] for r in resumed.metrics]
    assert lr_res == pytest.approx(lr_ref, rel=1e-6)


@pytest.mark.slow
def test_corrupt_newest_checkpoint_is_skipped_and_previous_used(tmp_path):
    p = plan(zero_stage=2)
    first = launch(p, tmp_path / "run", max_steps=6, save_steps=2, progress=False, verify_save="off",
                   final_save=False)
    assert first.ok, first.message
    ckpts = Path(first.run_dir) / "checkpoints"
    assert sorted(x.name for x in ckpts.glob("step-*")) == ["step-00000002", "step-00000004"]
    # a crash mid-save leaves a temporary folder; a truncated file spoils the newest complete one
    (ckpts / ".tmp-step-00000006").mkdir()
    victim = max((ckpts / "step-00000004" / "deepspeed").rglob("*optim_states.pt"), key=lambda f: f.stat().st_size)
    victim.write_bytes(victim.read_bytes()[:100])
    res = launch(p, tmp_path / "run", max_steps=6, save_steps=2, resume=True, progress=False, verify_save="off",
                 final_save=False)
    assert res.ok, res.message
    assert res.summary["resumed_from"].endswith("step-00000002")
    log = Path(res.log_paths["rank0"]).read_text()
    assert "skipping step-00000004" in log and "skipping .tmp-step-00000006" in log


def test_summary_values_are_strict_json():
    """(Not slow: no run.) summary.json never holds Infinity/NaN (a copied config's steps_per_print inf, a NaN loss): strict parsers
    (jq, JavaScript's JSON.parse) reject them."""
    import json
    from cookbook.train import _finite
    out = json.dumps(_finite({"steps_per_print": float("inf"), "losses": [1.5, float("nan")], "n": 3, "s": "x"}))
    assert json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c))) == \
        {"steps_per_print": None, "losses": [1.5, None], "n": 3, "s": "x"}
