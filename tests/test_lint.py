"""Tests for cookbook.lint: each rule fires on a small bad config, stays quiet on the generated
presets, and the configs typed out from the three source articles get the right findings."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from cookbook import cli  # noqa: E402
from cookbook.dsconfig import PRESETS, TARGETS, build_config, preset_plan  # noqa: E402
from cookbook.lint import (Finding, LintParseError, LintReport, gpu_compute_capability, known_keys,  # noqa: E402
                           lint, load_config)
from cookbook.plan import Plan  # noqa: E402

SEEDS = Path(__file__).parent / "fixtures" / "seed_configs"
MB1 = {"train_micro_batch_size_per_gpu": 1}


def _find(report, path, severity=None):
    hits = [f for f in report if f.path == path and (severity is None or f.severity == severity)]
    assert hits, f"no finding at {path!r}; got {[(f.severity, f.path) for f in report]}"
    return hits[0]


def _write(tmp_path, text, name="ds.json"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------- rule 1: reading and parsing

@pytest.mark.parametrize("text,cause,line,col", [
    ('{\n  "stage": 3,\n}\n', "trailing comma", 2, 13),
    ("{\n  'stage': 3\n}\n", "single-quoted", 2, 3),
    ('{\n  "pin_memory": True\n}\n', "Python True", 2, 17),
    ('{\n  "x": None\n}\n', "Python None", 2, 8),
    ('{\n  // ZeRO-3\n  "stage": 3\n}\n', "comment", 2, 3),
])
def test_parse_error_names_cause_line_and_column(tmp_path, text, cause, line, col):
    p = _write(tmp_path, text)
    report = lint(p, world_size=1)
    assert not report.readable and report.exit_code == 2
    f = _find(report, "(file)", "error")
    assert cause in f.message and f"{line}:{col}" in f.message
    assert str(p.resolve()) in f.message and "line" in f.message and "column" in f.message
    with pytest.raises(LintParseError):
        load_config(p)


def test_missing_file_names_absolute_path(tmp_path):
    report = lint(tmp_path / "nope.json", world_size=8)
    f = _find(report, "(file)", "error")
    assert "not found" in f.message and str((tmp_path / "nope.json").resolve()) in f.message
    assert report.exit_code == 2 and len(report) == 1


def test_repaired_config_is_still_linted(tmp_path):
    p = _write(tmp_path, '{"train_batch_size": 16, "gradient_accumulation_steps": 16, "fp16": {"enabled": True},}')
    report = lint(p, world_size=8)
    assert report.exit_code == 2
    assert "128" in _find(report, "train_batch_size", "error").fix


def test_non_object_config_cannot_be_used(tmp_path, capsys):
    for bad in (None, [], 3, 2.5):
        report = lint(bad, world_size=8)
        assert report.exit_code == 2 and not report.readable and report[0].path == "(top level)"
    report = lint(_write(tmp_path, "[1, 2]"), world_size=8)
    assert report.exit_code == 2 and "list" in report[0].message and "cannot be used" in report[0].message
    assert cli.main(["lint", str(tmp_path / "ds.json")]) == 2


def test_duplicate_keys(tmp_path):
    p = _write(tmp_path, '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "stage": 3}}')
    _find(lint(p, world_size=1), "zero_optimization.stage", "error")


# ---------------------------------------------------------------- rule 2: batch arithmetic

def test_batch_mismatch_states_correct_value():
    cfg = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}
    f = _find(lint(cfg, world_size=8), "train_batch_size", "error")
    assert "2 × accumulation 4 × world size 8 = 64" in f.message and "64" in f.fix
    assert not lint(dict(cfg, train_batch_size=64), world_size=8).errors


def test_batch_micro_missing_cannot_be_derived():
    f = _find(lint({"train_batch_size": 16, "gradient_accumulation_steps": 16}, world_size=8), "train_batch_size")
    assert "= 0" in f.message and "128" in f.fix


def test_batch_no_size_at_all():
    _find(lint({"gradient_accumulation_steps": 4}, world_size=2), "train_micro_batch_size_per_gpu", "error")
    assert not lint({"gradient_accumulation_steps": 4}, world_size=2, mode="accelerate").errors


def test_batch_without_world_size_warns():
    report = lint({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1})
    assert "world size is unknown" in _find(report, "train_batch_size", "warning").message


def test_batch_micro_from_plan():
    """A valid config whose micro batch DeepSpeed derives is not refused because the plan's differs (issue 31,
    class 1): train_batch_size 32 // world size 8 // accumulation 1 = 4, and 4 × 1 × 8 = 32."""
    plan = Plan(num_gpus=8, micro_batch=16, grad_accum=1)
    report = lint({"train_batch_size": 32, "gradient_accumulation_steps": 1}, plan=plan)
    assert not report.errors
    f = _find(report, "train_micro_batch_size_per_gpu", "warning")
    assert "= 4" in f.message and "is 16" in f.message and "train_batch_size to 128" in f.fix
    # the HF Trainer compares train_batch_size with TrainingArguments (16 × 1 × 8 = 128) and raises
    assert "= 128" in _find(lint({"train_batch_size": 32, "gradient_accumulation_steps": 1}, plan=plan, mode="trainer"),
                            "train_batch_size", "error").message


# DeepSpeed's own batch code is the reference: _set_batch_related_parameters then _batch_assertion, run on an
# object holding the three keys and a world size (the same attributes DeepSpeedConfig sets before calling them)
_BATCH_CASES = [(tb, mb, ga, n) for tb in (None, 1, 16, 64, 100, 128) for mb in (None, 1, 2, 4)
                for ga in (None, 1, 4, 16) for n in (1, 3, 8)]


def _deepspeed_reference(tb, mb, ga, n):
    from types import SimpleNamespace

    from deepspeed.runtime.config import DeepSpeedConfig
    ns = SimpleNamespace(train_batch_size=tb, train_micro_batch_size_per_gpu=mb, gradient_accumulation_steps=ga,
                         world_size=n)
    try:
        DeepSpeedConfig._set_batch_related_parameters(ns)
        DeepSpeedConfig._batch_assertion(ns)
    except AssertionError as exc:
        return ns, str(exc)
    return ns, None


def test_deepspeed_batch_matches_deepspeed_on_every_combination():
    from cookbook.lint import deepspeed_batch
    for tb, mb, ga, n in _BATCH_CASES:
        ns, refusal = _deepspeed_reference(tb, mb, ga, n)
        got = deepspeed_batch(tb, mb, ga, n)
        assert got.refusal == refusal, (tb, mb, ga, n)
        if refusal is None or not refusal.startswith("Either"):
            assert (got.train_batch_size, got.micro_batch, got.grad_accum) == (
                ns.train_batch_size, ns.train_micro_batch_size_per_gpu, ns.gradient_accumulation_steps), (tb, mb, ga, n)


@pytest.mark.parametrize("cfg,world", [
    # LLaMA-Factory / DeepSpeed-examples style: the global batch and accumulation, no micro batch
    ({"train_batch_size": 64, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
      "zero_optimization": {"stage": 2, "overlap_comm": True}}, 8),
    ({"train_batch_size": 256, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 3}}, 16),
    ({"train_batch_size": 16, "zero_optimization": {"stage": 2}}, 8),  # accumulation 1, micro 16 // 8 = 2
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}, 4),
])
def test_valid_batch_configs_are_accepted_as_deepspeed_accepts_them(cfg, world):
    """Issue 31, class 1: DeepSpeed derives the missing key and accepts these (checked with its own code);
    the linter must not call them refused, whatever plan defaults stand beside them."""
    assert _deepspeed_reference(cfg.get("train_batch_size"), cfg.get("train_micro_batch_size_per_gpu"),
                                cfg.get("gradient_accumulation_steps"), world)[1] is None
    for plan in (None, Plan(num_gpus=world, micro_batch=1, grad_accum=1)):
        report = lint(cfg, world_size=world, mode="deepspeed", plan=plan, stated=set())
        assert not report.errors, str(report)


def test_cli_deepspeed_mode_derives_the_micro_batch(tmp_path, capsys):
    """--seq-len/--model make a plan with the default micro batch 1; a config with train_batch_size 128 and
    accumulation 4 on 8 GPUs is micro batch 4 to DeepSpeed (128 // 8 // 4), not a refusal."""
    cfg = _write(tmp_path, json.dumps({"train_batch_size": 128, "gradient_accumulation_steps": 4,
                                       "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    code = cli.main(["lint", str(cfg), "--mode", "deepspeed", "--world-size", "8", "--seq-len", "2048"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "refuses" not in out and "the plan has 1" not in out
    assert "train_batch_size 128 // world size 8 // gradient_accumulation_steps 4 = 4" in out
    assert "(here 4 per GPU)" in out  # the memory note speaks of DeepSpeed's micro batch too
    # a typed micro batch that differs from DeepSpeed's is named, with the numbers for it
    assert cli.main(["lint", str(cfg), "--mode", "deepspeed", "--world-size", "8", "--micro-batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "--micro-batch is 2" in out and "train_batch_size to 64" in out


@pytest.mark.parametrize("cfg,world,path,quote", [
    # floor division: micro 100 // 8 = 12, and 12 × 1 × 8 = 96
    ({"train_batch_size": 100}, 8, "train_batch_size", "100 != 12 * 1 * 8"),
    # accumulation 48 // 4 // 8 = 1, and 4 × 1 × 8 = 32
    ({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 4}, 8, "train_batch_size", "48 != 4 * 1 * 8"),
    # accumulation 16 // 4 // 8 = 0
    ({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4}, 8, "train_batch_size",
     "Gradient accumulation steps: 0 has to be greater than 0"),
    ({"gradient_accumulation_steps": 4}, 2, "train_micro_batch_size_per_gpu",
     "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"),
])
def test_refused_batch_configs_quote_deepspeed(cfg, world, path, quote):
    ref = _deepspeed_reference(cfg.get("train_batch_size"), cfg.get("train_micro_batch_size_per_gpu"),
                               cfg.get("gradient_accumulation_steps"), world)[1]
    assert ref is not None and quote in ref  # DeepSpeed itself refuses it with these words
    f = _find(lint(cfg, world_size=world, mode="deepspeed"), path, "error")
    assert quote in f.message and "_set_batch_related_parameters" in f.message
    for key in cfg:  # the fix speaks of the keys the user wrote
        assert key in f.fix or key in f.message


def test_refused_batch_fix_is_accepted_by_deepspeed():
    """The fix's numbers are a config DeepSpeed accepts: train_batch_size 48 with micro 4 on 8 GPUs -> 32."""
    f = _find(lint({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 4}, world_size=8), "train_batch_size")
    import re
    fixed = int(re.search(r"set train_batch_size to (\d+)", f.fix).group(1))
    assert fixed == 32 and _deepspeed_reference(fixed, 4, None, 8)[1] is None


# ---------------------------------------------------------------- rule 3: "auto"

AUTO_CFG = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
            "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}


def test_auto_in_deepspeed_mode_lists_every_path():
    f = _find(lint(AUTO_CFG, world_size=8, model="qwen-14b"), "(config)", "error")
    for path in ("train_micro_batch_size_per_gpu", "train_batch_size", "optimizer.params.lr",
                 "optimizer.params.betas", "zero_optimization.reduce_bucket_size"):
        assert path in f.message
    assert "26214400" in f.fix


def test_auto_in_accelerate_mode_filled_and_left():
    report = lint(AUTO_CFG, world_size=8, mode="accelerate")
    left = [f for f in report.errors if "auto" in f.message]
    assert len(left) == 1 and left[0].path == "optimizer.params.betas"
    filled = " ".join(f.message for f in report.warnings)
    assert "zero_optimization.reduce_bucket_size from hidden_size²" in filled
    assert "train_micro_batch_size_per_gpu from the train DataLoader" in filled
    assert "optimizer.params.lr only with accelerate.utils.DummyOptim" in filled


def test_auto_in_trainer_mode_is_fine():
    cfg = dict(AUTO_CFG, zero_optimization={"stage": 3, "reduce_bucket_size": "auto",
                                            "stage3_gather_16bit_weights_on_model_save": True})
    assert not [f for f in lint(cfg, world_size=8, mode="trainer") if "auto" in f.message]
    cfg["scheduler"] = {"type": "WarmupLR", "params": {"warmup_type": "auto"}}
    _find(lint(cfg, world_size=8, mode="trainer"), "scheduler.params.warmup_type", "error")


# ---------------------------------------------------------------- rule 4: unknown / misplaced keys

def test_known_keys_come_from_deepspeed():
    keys = known_keys()
    assert {"zero_optimization", "bf16", "fp16", "aio", "train_batch_size", "gradient_clipping"} <= keys[""]
    assert {"stage3_prefetch_bucket_size", "prefetch_bucket_size", "offload_param"} <= keys["zero_optimization"]
    assert {"block_size", "queue_depth"} <= keys["aio"]
    assert "partition_activations" in keys["activation_checkpointing"]


def test_misspelled_top_level_key():
    f = _find(lint(dict(MB1, zero_optimisation={"stage": 3}), world_size=1), "zero_optimisation", "error")
    assert "silently ignores" in f.message and "zero_optimization" in f.fix


def test_aio_inside_zero_optimization():
    cfg = dict(MB1, zero_optimization={"stage": 3, "aio": {"block_size": 1048576}})
    f = _find(lint(cfg, world_size=1, will_save_hf_model=False), "zero_optimization.aio", "error")
    assert "top level" in f.fix


def test_misplaced_and_misspelled_nested_keys():
    cfg = dict(MB1, stage3_max_live_parameters=10**9,
               zero_optimization={"stage": 2, "reduce_bucket": 5, "offload_optimizer": {"device": "cpu", "pinmemory": True}})
    report = lint(cfg, world_size=1)
    assert "zero_optimization" in _find(report, "stage3_max_live_parameters", "error").fix
    assert "reduce_bucket_size" in _find(report, "zero_optimization.reduce_bucket", "error").fix
    assert "pin_memory" in _find(report, "zero_optimization.offload_optimizer.pinmemory", "error").fix


def test_unknown_key_without_a_guess_is_a_warning():
    f = _find(lint(dict(MB1, my_custom_note="hi"), world_size=1), "my_custom_note", "warning")
    assert "ignores" in f.message


# ---------------------------------------------------------------- rule 5: precision

def test_fp16_on_bf16_gpu_warns_with_bf16_block():
    cfg = dict(MB1, fp16={"enabled": True})
    f = _find(lint(cfg, world_size=1, gpu="NVIDIA GeForce RTX 4090"), "fp16", "warning")
    assert '"bf16": {"enabled": true}' in f.fix
    # a V100 has no bf16: no bf16 advice, only what dynamic loss scaling does (rule 5, issue 31 class 5)
    assert [f.path for f in lint(cfg, world_size=1, gpu="Tesla V100-SXM2-32GB")] == ["fp16"]
    assert "bf16" not in lint(cfg, world_size=1, gpu="Tesla V100-SXM2-32GB")[0].fix
    assert gpu_compute_capability("NVIDIA GeForce RTX 4090") == (8, 9)
    assert gpu_compute_capability("NVIDIA A100-SXM4-80GB") == (8, 0)
    assert gpu_compute_capability("Tesla T4") == (7, 5)


def test_fp16_keys_under_bf16_are_errors():
    f = _find(lint(dict(MB1, bf16={"enabled": True, "loss_scale": 0}), world_size=1), "bf16.loss_scale", "error")
    assert "rejects" in f.message
    assert not lint(dict(MB1, bf16={"enabled": True}), world_size=1)


# ---------------------------------------------------------------- rule 6: activation_checkpointing

def test_activation_checkpointing_with_hf_model():
    cfg = dict(MB1, activation_checkpointing={"partition_activations": True})
    f = _find(lint(cfg, world_size=1, model="tiny-llama"), "activation_checkpointing", "warning")
    assert "model.gradient_checkpointing_enable()" in f.fix
    assert not lint(cfg, world_size=1, will_save_hf_model=False)


# ---------------------------------------------------------------- rule 7: offload

def test_offload_param_below_stage3():
    cfg = dict(MB1, zero_optimization={"stage": 2, "offload_param": {"device": "cpu"}})
    assert "stage 3" in _find(lint(cfg, world_size=1), "zero_optimization.offload_param", "error").message


def test_nvme_without_path():
    cfg = dict(MB1, zero_optimization={"stage": 3, "stage3_gather_16bit_weights_on_model_save": True,
                                       "offload_optimizer": {"device": "nvme"}})
    _find(lint(cfg, world_size=1), "zero_optimization.offload_optimizer.nvme_path", "error")


def test_nvme_param_buffer_too_small():
    cfg = dict(MB1, zero_optimization={"stage": 3, "stage3_gather_16bit_weights_on_model_save": True,
                                       "offload_param": {"device": "nvme", "nvme_path": "/n", "buffer_size": 10**8}})
    # Qwen-14B's embedding: 152064 × 5120 = 778567680 elements on one rank
    f = _find(lint(cfg, world_size=1, model="qwen-14b"), "zero_optimization.offload_param.buffer_size", "error")
    assert "778567680" in f.fix
    assert not lint(cfg, world_size=8, model="qwen-14b")  # 97320960 per rank fits 1e8


def test_pin_memory_with_short_host_ram():
    plan = preset_plan("zero3-offload", model="qwen-14b", num_gpus=8, host_memory_gib=64)
    cfg = build_config(plan.replace(host_memory_gib=None))  # pin_memory true
    f = _find(lint(cfg, plan=plan), "zero_optimization", "warning")
    assert "pin_memory" in f.message and "64 GiB" in f.message
    assert not lint(cfg, plan=plan.replace(host_memory_gib=2048))


# ---------------------------------------------------------------- rule 8: saving under ZeRO-3

def test_zero3_without_gather_on_save():
    cfg = dict(MB1, zero_optimization={"stage": 3})
    f = _find(lint(cfg, world_size=1), "zero_optimization.stage3_gather_16bit_weights_on_model_save", "warning")
    assert "empty placeholder" in f.message
    assert not lint(cfg, world_size=1, will_save_hf_model=False)
    acc = dict(MB1, zero_optimization={"stage": 3, "stage3_gather_16bit_weights_on_model_save": "auto"})
    assert "defaults to false" in _find(lint(acc, world_size=1, mode="accelerate"),
                                        "zero_optimization.stage3_gather_16bit_weights_on_model_save").message


# ---------------------------------------------------------------- rule 9: types and ranges

def test_wrong_types_and_ranges():
    cfg = {"train_micro_batch_size_per_gpu": "1", "gradient_clipping": -1,
           "zero_optimization": {"stage": 4, "reduce_bucket_size": "5e8", "allgather_bucket_size": -5,
                                 "overlap_comm": "true"}}
    report = lint(cfg, world_size=1)
    assert "unquoted" in _find(report, "train_micro_batch_size_per_gpu", "error").fix
    _find(report, "gradient_clipping", "error")
    assert "stages 0, 1, 2 and 3" in _find(report, "zero_optimization.stage", "error").message
    _find(report, "zero_optimization.reduce_bucket_size", "error")
    assert "DeepSpeed rejects" in _find(report, "zero_optimization.allgather_bucket_size", "error").message
    _find(report, "zero_optimization.overlap_comm", "error")


def test_section_of_wrong_type():
    report = lint(dict(MB1, fp16=True, zero_optimization={"stage": 2, "offload_optimizer": "cpu"}), world_size=1)
    _find(report, "fp16", "error")
    _find(report, "zero_optimization.offload_optimizer", "error")


# ---------------------------------------------------------------- rule 5: fp16 loss scaling without bf16

def _deepspeed_overflows_to_exit(monkeypatch, fp16_block):
    """Overflowing steps until DeepSpeed's own DynamicLossScaler raises, built from the config as the engine builds
    it (DeepSpeedFP16Config.dynamic_loss_scale_args); only its rank-0 logging test is replaced (no process group)."""
    from types import SimpleNamespace

    from deepspeed.runtime.fp16 import loss_scaler
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config
    monkeypatch.setattr(loss_scaler, "dist", SimpleNamespace(get_rank=lambda: 0))
    scaler = loss_scaler.DynamicLossScaler(**DeepSpeedFP16Config(**fp16_block).dynamic_loss_scale_args())
    for step in range(1, 200):
        try:
            scaler.update_scale(True)
        except Exception as exc:  # noqa: BLE001 - DeepSpeed raises a bare Exception
            assert str(exc) == "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
            return step
    return None


@pytest.mark.parametrize("block", [
    {"enabled": True},  # DeepSpeed's defaults: 2^16, hysteresis 2, floor 1
    {"enabled": True, "loss_scale": 0, "loss_scale_window": 100},  # the articles' block
    {"enabled": True, "initial_scale_power": 12, "hysteresis": 4, "min_loss_scale": 1},
    {"enabled": True, "initial_scale_power": 16, "hysteresis": 1, "min_loss_scale": 128},
    {"enabled": True, "initial_scale_power": 0, "hysteresis": 2},
])
def test_overflows_to_exit_is_deepspeeds(monkeypatch, block):
    from cookbook.lint import loss_scaling
    assert loss_scaling(block)["overflows_to_exit"] == _deepspeed_overflows_to_exit(monkeypatch, block)


@pytest.mark.parametrize("gpu", ["Tesla V100-SXM2-32GB", "Tesla T4", "NVIDIA GeForce RTX 2080 Ti"])
def test_fp16_without_bf16_warns_of_the_loss_scale_exit(gpu):
    """Issue 31, class 5: a LLaMA-Factory-style ZeRO-2 fp16 config on a card without bf16."""
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8, "gradient_clipping": 1.0,
           "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                    "hysteresis": 2, "min_loss_scale": 1},
           "zero_optimization": {"stage": 2, "overlap_comm": True}}
    f = _find(lint(cfg, world_size=2, gpu=gpu), "fp16", "warning")
    assert "cannot decrease scale anymore" in f.message and "loss_scaler.py" in f.message
    assert "after 18 overflowing steps" in f.message  # 1 hysteresis step, 16 halvings 2^16 -> 1, 1 at the floor
    for fix in ("warm the lr up", "lower the lr", "initial_scale_power 12", "hysteresis 4", "loss_scale_window 500",
                "min_loss_scale", "fp32"):
        assert fix in f.fix
    assert "gradient_clipping" not in f.fix  # the config clips already
    assert not lint(cfg, world_size=2, gpu=gpu).errors


def test_fp16_loss_scale_warning_only_without_bf16():
    cfg = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}}
    on_a100 = [f for f in lint(cfg, world_size=1, gpu="A100") if "cannot decrease" in f.message]
    assert on_a100 == [] and _find(lint(cfg, world_size=1, gpu="A100"), "fp16", "warning")  # the bf16 advice instead
    bf16 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}
    assert not [f for f in lint(bf16, world_size=1, gpu="RTX 4090") if "loss scale" in f.message]
    # "auto" filled from --precision fp16 by the HF Trainer on a T4 warns too, and names where it came from
    auto = {"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": "auto"}}
    f = _find(lint(auto, world_size=1, gpu="T4", mode="trainer", precision="fp16"), "fp16", "warning")
    assert "--precision fp16" in f.message and "cannot decrease" in f.message and "gradient_clipping" in f.fix


def test_fp16_static_loss_scale_on_v100():
    f = _find(lint({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True, "loss_scale": 1024}},
                   world_size=1, gpu="V100"), "fp16", "warning")
    assert "static" in f.message and '"loss_scale": 0' in f.fix


def test_cli_fp16_on_v100(tmp_path, capsys):
    cfg = _write(tmp_path, json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                                       "fp16": {"enabled": True}, "zero_optimization": {"stage": 3}}))
    assert cli.main(["lint", str(cfg), "--mode", "deepspeed", "--world-size", "4", "--gpu", "V100"]) == 0
    out = capsys.readouterr().out
    assert "Current loss scale already at minimum" in out and "V100 (compute capability 7.0" in out


# ---------------------------------------------------------------- quiet on the generated presets

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_generated_presets_are_clean(preset, target):
    for precision, gpu in (("bf16", "RTX 4090"), ("fp16", "V100")):
        plan = preset_plan(preset, model="qwen-14b", num_gpus=8, micro_batch=1, grad_accum=16,
                           nvme_path="/local_nvme", precision=precision, host_memory_gib=1024)
        report = lint(build_config(plan, target), mode=target, gpu=gpu, model="qwen-14b", plan=plan)
        # fp16 on a V100 (no bf16): the one finding is what dynamic loss scaling does when a run diverges
        # (the trainer target writes fp16.enabled "auto": the Trainer fills it, so no precision to warn about here)
        expected = [("warning", "fp16")] if precision == "fp16" and target != "trainer" else []
        assert [(f.severity, f.path) for f in report] == expected, str(report)
        assert all("cannot decrease scale anymore" in f.message for f in report)


# ---------------------------------------------------------------- the articles' configs

def test_seed_000_qwen14b_offload():
    report = lint(SEEDS / "000_qwen14b_zero3_offload.json", world_size=8, gpu="RTX 4090", model="qwen-14b")
    tb = _find(report, "train_batch_size", "error")
    assert "train_batch_size 16 // world size 8 // gradient_accumulation_steps 16 = 0" in tb.message
    assert "'Micro batch size per gpu: 0 has to be greater than 0'" in tb.message and "train_batch_size to 128" in tb.fix
    _find(report, "fp16", "warning")
    _find(report, "zero_optimization.stage3_gather_16bit_weights_on_model_save", "warning")
    assert report.exit_code == 1 and len(report.errors) == 1
    # with the article's launch command (per_device_train_batch_size 1) as the plan
    plan = Plan(model="qwen-14b", num_gpus=8, micro_batch=1, grad_accum=16, zero_stage=3,
                offload_optimizer="cpu", offload_param="cpu", host_memory_gib=256)
    report = lint(SEEDS / "000_qwen14b_zero3_offload.json", plan=plan)
    assert "train_batch_size to 128" in _find(report, "train_batch_size", "error").fix
    assert "pin_memory" in _find(report, "zero_optimization", "warning").message


def test_seed_001_offload_example_does_not_parse():
    report = lint(SEEDS / "001_llama7b_offload_example.json", world_size=1)
    f = _find(report, "(file)", "error")
    assert "Python True at 7:21" in f.message and "Python True at 11:21" in f.message
    assert "comment" in f.message
    assert report.exit_code == 2


def test_seed_001_llama_config():
    report = lint(SEEDS / "001_llama7b_ds_config.json", world_size=1, gpu="RTX 4090", model="llama-7b")
    tb = _find(report, "train_batch_size", "error")
    assert "train_batch_size to 8" in tb.fix  # micro 1 × accumulation 8 × 1 GPU
    plan = Plan(model="llama-7b", num_gpus=1, micro_batch=2, grad_accum=8)
    assert "train_batch_size to 16" in _find(lint(SEEDS / "001_llama7b_ds_config.json", plan=plan),
                                             "train_batch_size").fix
    _find(report, "activation_checkpointing", "warning")
    _find(report, "fp16", "warning")
    _find(report, "zero_optimization.offload_optimizer.buffer_count", "warning")
    _find(report, "zero_optimization.offload_param.buffer_size", "warning")
    _find(report, "zero_optimization.stage3_gather_16bit_weights_on_model_save", "warning")


def test_seed_001_bf16_block():
    report = lint(SEEDS / "001_llama7b_bf16.json", world_size=1, mode="accelerate")
    f = _find(report, "bf16", "error")
    assert "loss_scale" in f.message and "initial_scale_power" in f.message
    assert len(report.errors) == 1


def test_seed_001_nvme_block():
    report = lint(SEEDS / "001_llama7b_nvme.json", world_size=1, mode="accelerate")
    assert not report.errors  # nvme_path given; the block itself is well-formed
    _find(report, "zero_optimization.stage3_gather_16bit_weights_on_model_save", "warning")


def test_seed_002_zero2():
    # train_batch_size 32 and accumulation 1 on 8 GPUs: DeepSpeed derives micro batch 4 and accepts the config;
    # the run's micro batch 16 differs, so the fix is train_batch_size 16 × 1 × 8 = 128
    plan = Plan(model="qwen-14b", num_gpus=8, micro_batch=16, grad_accum=1)
    report = lint(SEEDS / "002_qwen14b_zero2.json", plan=plan, gpu="RTX 4090")
    assert not report.errors
    f = _find(report, "train_micro_batch_size_per_gpu", "warning")
    assert "train_batch_size 32 // world size 8 // gradient_accumulation_steps 1 = 4" in f.message
    assert "128" in f.fix
    _find(report, "fp16", "warning")
    tb = _find(lint(SEEDS / "002_qwen14b_zero2.json", plan=plan, mode="trainer"), "train_batch_size", "error")
    assert "16 × gradient_accumulation_steps 1 = 128" in tb.message


def test_seed_002_zero3_autos():
    path = SEEDS / "002_qwen14b_zero3.json"
    ds = lint(path, world_size=8, model="qwen-14b")
    auto = _find(ds, "(config)", "error")
    assert "zero_optimization.stage3_param_persistence_threshold" in auto.message and "51200" in auto.fix
    trainer = lint(path, world_size=8, mode="trainer")
    assert not trainer.errors and not trainer.warnings
    acc = lint(path, world_size=8, mode="accelerate")
    assert not acc.errors and "Accelerate fills" in acc.warnings[0].message


def test_seed_002_offload():
    report = lint(SEEDS / "002_qwen14b_zero3_offload.json", world_size=8, mode="trainer")
    assert not report.errors
    _find(report, "zero_optimization.stage3_gather_16bit_weights_on_model_save", "warning")


# ---------------------------------------------------------------- report and CLI

def test_report_outputs():
    report = lint({"train_batch_size": 3, "train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}},
                  world_size=2, gpu="RTX 4090")
    assert isinstance(report, LintReport) and all(isinstance(f, Finding) for f in report)
    js = report.to_json()
    assert set(js) == {"errors", "warnings"} and set(js["errors"][0]) == {"path", "message", "fix"}
    assert list(report.to_frame().columns) == ["severity", "path", "message", "fix"]
    assert "<table" in report._repr_html_() and "train_batch_size" in str(report)


def test_cli_exit_codes(tmp_path, capsys):
    good = _write(tmp_path, json.dumps(build_config(preset_plan("zero2", num_gpus=2))), "good.json")
    assert cli.main(["lint", str(good), "--world-size", "2"]) == 0
    assert cli.main(["lint", str(good), "--world-size", "3"]) == 1
    capsys.readouterr()
    assert cli.main(["lint", str(good), "--world-size", "3", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    # the default mode is cookbook launch's: the config states world size 2, the typed --world-size 3 disagrees
    assert out["errors"][0]["path"] == "train_batch_size" and "--world-size 3" in out["errors"][0]["message"]
    assert cli.main(["lint", str(good), "--world-size", "3", "--mode", "deepspeed", "--json"]) == 1
    assert "= 3" in json.loads(capsys.readouterr().out)["errors"][0]["message"]
    assert cli.main(["lint", str(SEEDS / "001_llama7b_offload_example.json"), "--world-size", "1"]) == 2
    assert cli.main(["lint", str(tmp_path / "missing.json"), "--world-size", "1"]) == 2
    assert "not found" in capsys.readouterr().out
    # a missing file without --world-size/--model: the error alone, not notes about defaults nothing was checked with
    assert cli.main(["lint", str(tmp_path / "missing.json")]) == 2
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("missing.json: error") or out.splitlines()[0].startswith(str(tmp_path))
    assert "world size" not in out and "model: not given" not in out


def test_a_mistyped_flag_value_gets_a_short_error(capsys):
    """argparse's error without the whole usage block: the line that names the flag, the value and the choices."""
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--zero-stage", "4"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == ("cookbook train: error: argument --zero-stage: invalid choice: 4 "
                                   "(choose from 0, 1, 2, 3)")
    assert "usage:" not in err and "cookbook train --help" in err and len(err.splitlines()) == 2
    # a misspelled flag: the command's own parser answers, with the nearest flag it knows
    with pytest.raises(SystemExit):
        cli.main(["estimate", "qwen-14b", "--zero_stage", "3"])
    err = capsys.readouterr().err
    assert err.startswith("cookbook estimate: error: unrecognized arguments: --zero_stage (did you mean --zero-stage?)")
    assert "`cookbook estimate --help`" in err


def test_config_disagrees_with_plan():
    plan = Plan(num_gpus=2, micro_batch=1, grad_accum=4)
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}
    assert "TrainingArguments" in _find(lint(cfg, plan=plan, mode="trainer"), "train_micro_batch_size_per_gpu",
                                        "error").message
    _find(lint(cfg, plan=plan), "train_micro_batch_size_per_gpu", "warning")


# ---------------------------------------------------------------- rule: NVMe offload with bf16 states

def test_nvme_with_bf16_states_is_an_error_before_launch():
    plan = preset_plan("zero3-offload", model="qwen-14b", num_gpus=8, nvme_path="/local_nvme")
    cfg = build_config(plan, bf16_states=True)  # CPU offload + bf16 states: fine
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": "/local_nvme"}
    f = _find(lint(cfg, plan=plan), "bf16.bf16_optimizer_states", "error")
    assert "assert dtype == self.dtype" in f.message and "swap_tensor/utils.py" in f.message
    assert "false" in f.fix and '"cpu"' in f.fix
    cfg["bf16"] = {"enabled": True, "bf16_master_weights_and_grads": True}
    _find(lint(cfg, plan=plan), "bf16.bf16_master_weights_and_grads", "error")
    cfg["bf16"] = {"enabled": True}
    assert not lint(cfg, plan=plan).errors
    # quiet on the presets with bf16 states where DeepSpeed supports them
    for preset in ("zero2", "zero2-offload", "zero3", "zero3-offload"):
        p = preset_plan(preset, model="qwen-14b", num_gpus=8, host_memory_gib=2048)
        assert not lint(build_config(p, bf16_states=True), plan=p, model="qwen-14b").errors


# ---------------------------------------------------------------- rule: bucket sizes far below h²

def test_bucket_far_below_h_squared_warns_with_value_and_cost():
    # the LLaMA article's reduce_bucket_size 1e6 for LLaMA-7B (h = 4096: h² = 16777216)
    report = lint(SEEDS / "001_llama7b_ds_config.json", world_size=1, model="llama-7b")
    f = _find(report, "zero_optimization.reduce_bucket_size", "warning")
    assert "1,000,000" in f.message and "16,777,216" in f.message
    from cookbook.models import model_spec
    n = model_spec("llama-7b").num_params
    assert f"{-(-n // 10**6):,} collectives" in f.message and f"{-(-n // 4096 ** 2):,}" in f.message
    assert "16777216" in f.fix
    cfg = dict(MB1, zero_optimization={"stage": 2, "allgather_bucket_size": 5 * 10**5, "reduce_bucket_size": 4096 ** 2})
    _find(lint(cfg, world_size=1, model="llama-7b", will_save_hf_model=False), "zero_optimization.allgather_bucket_size",
          "warning")
    # a tenth of h² or more is not "far below"; no model, no rule
    cfg["zero_optimization"]["allgather_bucket_size"] = 4096 ** 2 // 10 + 1
    assert not lint(cfg, world_size=1, model="llama-7b", will_save_hf_model=False)
    assert not [f for f in lint(SEEDS / "001_llama7b_ds_config.json", world_size=1) if "h² rule" in f.message]


# ---------------------------------------------------------------- rule: optimizer / scheduler params

def test_unknown_optimizer_and_scheduler_params_with_did_you_mean():
    cfg = dict(MB1, optimizer={"type": "AdamW", "params": {"lr": 1e-5, "beta": [0.9, 0.95], "weight_decays": 0.1}},
               scheduler={"type": "WarmupDecayLR", "params": {"total_num_step": 100, "warmup_num_steps": 10}})
    report = lint(cfg, world_size=1)
    f = _find(report, "optimizer.params.beta", "error")
    assert "FusedAdam" in f.message and "'betas'" in f.fix
    assert "'weight_decay'" in _find(report, "optimizer.params.weight_decays", "error").fix
    assert "'total_num_steps'" in _find(report, "scheduler.params.total_num_step", "error").fix
    # offloaded: DeepSpeed builds DeepSpeedCPUAdam, whose own flag is passed by the engine
    cfg = dict(MB1, zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}},
               optimizer={"type": "AdamW", "params": {"adamw_mode": True, "fp32_optimizer_states": False}})
    f = _find(lint(cfg, world_size=1), "optimizer.params.adamw_mode", "error")
    assert "DeepSpeedCPUAdam" in f.message and "'adam_w_mode'" in f.fix
    # torch optimizers and schedulers by name; unknown types
    ok = dict(MB1, optimizer={"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}},
              scheduler={"type": "StepLR", "params": {"step_size": 10}})
    assert not lint(ok, world_size=1).errors
    bad = dict(MB1, optimizer={"type": "AdamWW", "params": {}}, scheduler={"type": "WarmupDecay", "params": {}})
    report = lint(bad, world_size=1)
    assert "'AdamW'" in _find(report, "optimizer.type", "error").fix
    assert "'WarmupDecayLR'" in _find(report, "scheduler.type", "error").fix
    assert "gradient_clipping" in _find(lint(dict(MB1, optimizer={"type": "Adam", "params": {"max_grad_norm": 1}}),
                                             world_size=1), "optimizer.params.max_grad_norm", "error").fix


def test_param_keys_come_from_the_signatures():
    import inspect
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from cookbook.lint import optimizer_param_keys, scheduler_param_keys
    assert optimizer_param_keys("AdamW")[0] >= set(inspect.signature(FusedAdam).parameters) - {"params"}
    assert optimizer_param_keys("AdamW", cpu_optimizer=True)[0] >= \
        set(inspect.signature(DeepSpeedCPUAdam).parameters) - {"model_params", "adamw_mode"}
    assert "foreach" in optimizer_param_keys("AdamW", torch_adam=True)[0]
    assert optimizer_param_keys("RMSprop")[0] == set(inspect.signature(torch.optim.RMSprop).parameters) - {"params"}
    assert scheduler_param_keys("WarmupLR")[0] == {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                                   "warmup_type", "last_batch_iteration"}


TEMPLATES = Path(__file__).parent / "fixtures" / "templates"


@pytest.mark.parametrize("name", sorted(p.name for p in TEMPLATES.glob("*.json")))
def test_new_rules_quiet_on_the_real_templates(name):
    report = lint(TEMPLATES / name, world_size=8, mode="trainer", model="qwen-14b", plan=Plan(model="qwen-14b", num_gpus=8))
    new = [f for f in report if f.path.startswith(("optimizer.", "scheduler.", "bf16.bf16_"))
           or "h² rule" in f.message]
    assert not new, str(report)


# ---------------------------------------------------------------- "auto": fixes speak of the keys they name

def test_unfilled_auto_fix_names_the_values_of_those_keys():
    report = lint(AUTO_CFG, world_size=8, mode="accelerate")
    f = [x for x in report.errors if "auto" in x.message][0]
    assert f.path == "optimizer.params.betas" and "[0.9, 0.999]" in f.fix and "bucket" not in f.fix
    cfg = dict(AUTO_CFG, optimizer={"type": "AdamW", "params": {"betas": "auto", "eps": "auto"}})
    f = _find(lint(cfg, world_size=8, mode="accelerate", model="qwen-14b"), "(config)", "error")
    assert "optimizer.params.eps: 1e-08" in f.fix and "bucket" not in f.fix and "26214400" not in f.fix


# ---------------------------------------------------------------- lint does what cookbook launch does

def test_default_mode_resolves_like_launch_and_writes_resolved(tmp_path, capsys):
    src = TEMPLATES / "llamafactory_ds_z3_offload_config.json"
    out = tmp_path / "resolved.json"
    # a real model has no default learning rate or length (as in cookbook launch): without them, an error naming both
    assert cli.main(["lint", str(src), "--model", "qwen-14b", "--world-size", "8", "--micro-batch", "2",
                     "--grad-accum", "4", "--precision", "bf16"]) == 1
    assert "--lr" in capsys.readouterr().out
    assert cli.main(["lint", str(src), "--model", "qwen-14b", "--world-size", "8", "--micro-batch", "2",
                     "--grad-accum", "4", "--precision", "bf16", "--lr", "1e-5", "--max-steps", "100",
                     "--resolve", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "filled for this run" in text and "--micro-batch 2" in text and "hidden_size² = 5120²" in text
    resolved = json.loads(out.read_text())
    assert resolved["train_batch_size"] == 64 and resolved["zero_optimization"]["reduce_bucket_size"] == 26214400
    assert resolved["bf16"]["enabled"] is True and resolved["fp16"]["enabled"] is False
    # --resolve without -o: the JSON is stdout, the table goes to stderr
    assert cli.main(["lint", str(src), "--world-size", "2", "--resolve", "--gpu", "A100"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["train_micro_batch_size_per_gpu"] == 4 and "filled for this run" in cap.err
    # a conflict is an error naming both, and nothing is written
    acc = TEMPLATES / "accelerate_zero_stage3_offload_config.json"
    bad = tmp_path / "bad.json"
    assert cli.main(["lint", str(acc), "--grad-accum", "4", "--gpu", "H100", "--resolve", "-o", str(bad)]) == 1
    text = capsys.readouterr().out
    assert "gradient_accumulation_steps is 1 in accelerate_zero_stage3_offload_config.json, but --grad-accum 4" in text
    assert not bad.exists()
    assert cli.main(["lint", str(acc), "--mode", "trainer", "--resolve"]) == 2


def test_world_size_defaults_from_the_config_and_says_so(tmp_path, capsys):
    cfg = _write(tmp_path, json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                                       "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}))
    assert cli.main(["lint", str(cfg), "--gpu", "A100"]) == 0
    out = capsys.readouterr().out
    assert "world size 8: from the config, train_batch_size 32 / (train_micro_batch_size_per_gpu 2 × " \
           "gradient_accumulation_steps 2)" in out
    assert cli.main(["lint", str(TEMPLATES / "llamafactory_ds_z2_config.json"), "--gpu", "A100"]) == 0
    assert "cookbook launch's default --num-processes" in capsys.readouterr().out


def test_lint_errors_name_the_flags(tmp_path, capsys):
    cfg = _write(tmp_path, json.dumps({"zero_optimization": {"stage": 3}}))
    assert cli.main(["lint", str(cfg), "--micro-batch", "0"]) == 2
    err = capsys.readouterr().err
    assert "--micro-batch 0" in err and "micro_batch" not in err
    assert cli.main(["lint", str(cfg), "--num-processes", "0"]) == 2
    assert "--num-processes 0" in capsys.readouterr().err
    stage2 = _write(tmp_path, json.dumps({"zero_optimization": {"stage": 2}}), "z2.json")
    assert cli.main(["lint", str(stage2), "--offload-param", "cpu", "--gpu", "A100"]) == 1
    out = capsys.readouterr().out
    assert "--offload-param cpu with zero_optimization.stage=2 in z2.json" in out


def test_fp16_block_the_trainer_keeps_stays_with_the_warning(tmp_path, capsys):
    acc = TEMPLATES / "accelerate_zero_stage3_offload_config.json"
    out = tmp_path / "r.json"
    assert cli.main(["lint", str(acc), "--gpu", "H100", "--json", "--resolve", "-o", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not report["errors"] and [w for w in report["warnings"] if w["path"] == "fp16"]
    assert {"path": "fp16.enabled", "value": True, "from": "accelerate_zero_stage3_offload_config.json (over "
            "--precision bf16 (default))"} in report["filled"]
    assert json.loads(out.read_text())["fp16"] == json.loads(acc.read_text())["fp16"]


def test_unknown_zenflow_keys_are_caught_like_deepspeed_does():
    """zero_optimization.zenflow is DeepSpeed's ZenFlowConfig (extra keys forbidden): an unknown key there
    fails DeepSpeedZeroConfig, so the linter names it (with a guess for a misspelling)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    zenflow = {"topk_ratio": 0.01, "bogus_key": 1, "update_intervl": 4}
    with pytest.raises(Exception, match="bogus_key"):  # what DeepSpeed itself does with it
        DeepSpeedZeroConfig(stage=2, offload_optimizer={"device": "cpu"}, zenflow=zenflow)
    cfg = dict(MB1, zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                       "zenflow": zenflow})
    report = lint(cfg, world_size=1)
    bogus = _find(report, "zero_optimization.zenflow.bogus_key", "error")
    assert "unknown key 'bogus_key'" in bogus.message and "rejects" in bogus.message
    typo = _find(report, "zero_optimization.zenflow.update_intervl", "error")
    assert "did you mean 'update_interval'" in typo.fix
    assert "topk_ratio" in known_keys()["zero_optimization.zenflow"]
    ok = dict(cfg, zero_optimization=dict(cfg["zero_optimization"], zenflow={"topk_ratio": 0.01}))
    assert not [f for f in lint(ok, world_size=1) if f.path.startswith("zero_optimization.zenflow.")]


def test_resolve_without_model_says_it_filled_for_the_rehearsal(tmp_path, capsys):
    """A template resolved without --model gets the tiny rehearsal model's lr (3e-3) and buckets: the console
    says so and names --model (a fresh user wrote such a file and read only 'no problems found')."""
    from cookbook import cli
    src = tmp_path / "auto.json"
    src.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                               "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
                               "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}))
    assert cli.main(["lint", str(src), "--world-size", "2", "--resolve", "-o", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr()
    text = err.out + err.err
    assert "model: not given" in text and "tiny-qwen2" in text and "--model NAME" in text
    assert json.loads((tmp_path / "r.json").read_text())["optimizer"]["params"]["lr"] == 3e-3
    assert cli.main(["lint", str(src), "--world-size", "2", "--model", "llama-7b", "--lr", "1e-5", "--max-steps",
                     "10", "--resolve", "-o", str(tmp_path / "r2.json")]) == 0
    assert "model: not given" not in "".join(capsys.readouterr())


def test_lint_seq_len_sizes_the_suggested_fixes(tmp_path, capsys):
    """The fixes' GPU numbers are for the rows of the run: at seq 1024, LLaMA-7B with the parameters on the GPU at
    micro batch 16 (28 GiB) is no fix; at the default 128-token rows it is one (16.3 GiB)."""
    from cookbook import cli
    from cookbook.memory import estimate
    cfg = tmp_path / "z3.json"
    assert cli.main(["config", "zero3-offload", "--gpus", "1", "--micro-batch", "16", "--grad-accum", "1", "--model",
                     "llama-7b", "-o", str(cfg)]) == 0
    capsys.readouterr()
    opt_only = "--offload-param none --micro-batch 16"
    base = ["lint", str(cfg), "--world-size", "1", "--model", "llama-7b", "--host-memory-gib", "128",
            "--micro-batch", "16", "--grad-accum", "1"]
    cli.main(base + ["--seq-len", "1024"])
    long_rows = capsys.readouterr().out
    cli.main(base)
    short_rows = capsys.readouterr().out
    plan = Plan(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=128, micro_batch=16, grad_accum=1,
                zero_stage=3, offload_optimizer="cpu", offload_param="none", precision="bf16")
    assert not estimate(plan.replace(seq_len=1024)).fits_gpu and estimate(plan.replace(seq_len=128)).fits_gpu
    assert "pin_memory" in long_rows and opt_only not in long_rows
    assert opt_only in short_rows


def test_bf16_states_flags_without_bf16_or_master_weights():
    """bf16 optimizer states without bf16 master weights: DeepSpeed's own config asserts (checked here with its
    parser); bf16 master weights with bf16 training off: a warning (DeepSpeed does not tie the two)."""
    from deepspeed.runtime.config import DeepSpeedConfig
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2}}
    states_only = dict(base, bf16={"enabled": True, "bf16_optimizer_states": True})
    with pytest.raises(AssertionError, match="bf16_optimizer_states requires bf16_master_weights_and_grads"):
        DeepSpeedConfig(states_only)
    f = _find(lint(states_only, world_size=1, mode="deepspeed"), "bf16.bf16_optimizer_states", "error")
    assert "bf16_master_weights_and_grads to true" in f.fix
    off = dict(base, bf16={"enabled": False, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True})
    w = _find(lint(off, world_size=1, mode="deepspeed"), "bf16.enabled", "warning")
    assert "bf16.enabled false" in w.message and "set bf16.enabled to true" in w.fix
    good = dict(base, bf16={"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True})
    assert not [x for x in lint(good, world_size=1, mode="deepspeed") if x.path.startswith("bf16.")]


def test_trainer_mode_reads_precision_for_auto_fp16():
    """Issue 31 class 3: the HF Trainer fills fp16.enabled "auto" from --fp16, so `--mode trainer --precision fp16`
    on an Ampere card gets the fp16 warning the other modes give; bf16 or an unknown precision does not."""
    from cookbook.lint import lint
    cfg = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}
    def fp16_warnings(**kw):
        return [f for f in lint(cfg, world_size=2, mode="trainer", gpu="A100", **kw) if f.path == "fp16"]
    w = fp16_warnings(precision="fp16")
    assert len(w) == 1 and "compute capability 8.0" in w[0].message and "--precision bf16" in w[0].fix
    assert fp16_warnings(precision="bf16") == [] and fp16_warnings() == []
    # a card without bf16 (T4, 7.5): no bf16 advice
    t4 = [f for f in lint(cfg, world_size=2, mode="trainer", gpu="T4", precision="fp16") if f.path == "fp16"]
    assert len(t4) == 1 and "bf16" not in t4[0].fix and "cannot decrease scale anymore" in t4[0].message  # class 5


def test_lint_without_model_says_memory_was_not_checked(tmp_path):
    """Issue 31 class 4: a large micro batch is not "no problems found" alone: the console says memory was not
    checked and how to check it; with --model the note goes."""
    import subprocess
    import sys
    cfg = tmp_path / "big.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 64, "gradient_accumulation_steps": 1,
                               "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    run = lambda *a: subprocess.run([sys.executable, "-m", "cookbook.cli", "lint", str(cfg), "--mode", "deepspeed",  # noqa: E731
                                     "--world-size", "8", *a], capture_output=True, text=True, timeout=300).stdout
    out = run("--gpu", "RTX 4090")
    assert "memory: not checked — no --model given" in out and "(here 64 per GPU)" in out and "--model NAME" in out
    assert "memory: not checked" not in run("--model", "tiny-llama")


# ---------------------------------------------------------------- rule 14: activations and logits against the card

LINT_FIXTURES = Path(__file__).parent / "fixtures" / "lint"
GIB = 2 ** 30


def _llama7b_activation_gib(micro, seq, *, liger=False):
    """LLaMA-7B (hidden 4096, 32 layers, vocabulary 32000), bf16, gradient checkpointing, counted by hand:
    checkpoints 2·s·b·h per layer, one layer's recompute 34·s·b·h, the loss phase 12·b·s·V (Korthikanti et al.
    2022; transformers' fp32 cross-entropy), peak = checkpoints + the larger of the last two, + 0.7 GiB context."""
    h, layers, v = 4096, 32, 32000
    ckpt = layers * 2 * seq * micro * h
    per_layer = 34 * seq * micro * h
    logits = 12 * micro * seq * v
    return (ckpt + max(per_layer, logits)) / GIB + 0.7


def test_lint_memory_with_model_names_the_micro_batch_the_gib_and_the_fix():
    """Issue 31 class 4, second half: our own config (LLaMA-7B, ZeRO-3 full offload, train_batch_size 256 with
    accumulation 8 on one GPU, so DeepSpeed derives micro batch 32) at seq 2048 on a 24 GiB card."""
    cfg = LINT_FIXTURES / "llama7b_micro32_24gib.json"
    need = _llama7b_activation_gib(32, 2048)
    assert 40.0 < need < 40.3   # 16 GiB checkpoints + 23.4 GiB logits + 0.7
    rep = lint(cfg, world_size=1, mode="deepspeed", model="llama-7b", gpu_memory_gib=24, seq_len=2048)
    f = _find(rep, "train_micro_batch_size_per_gpu", "error")
    assert "train_micro_batch_size_per_gpu=32" in f.message and "DeepSpeed derives it" in f.message
    assert f"{need:.1f} GiB" in f.message and "24 GiB card" in f.message
    # the fix keeps the global batch 256: the largest divisor of 32 under half the card is 8 (16 needs 20.4 GiB)
    assert _llama7b_activation_gib(16, 2048) > 12 >= _llama7b_activation_gib(8, 2048)
    assert ("train_micro_batch_size_per_gpu to 8 and gradient_accumulation_steps to 32" in f.fix
            and f"{_llama7b_activation_gib(8, 2048):.1f} GiB" in f.fix)
    assert "Liger" in f.fix and "not this config's stage 3" in f.fix and "gradient checkpointing" in f.fix
    # at micro 8 the same config passes the check; on an 80 GiB card micro 32 is a warning (over half), not an error
    small = dict(json.loads(cfg.read_text()), gradient_accumulation_steps=32)
    assert not [x for x in lint(small, world_size=1, mode="deepspeed", model="llama-7b", gpu_memory_gib=24,
                                seq_len=2048) if x.path == "train_micro_batch_size_per_gpu" and "GiB" in x.message]
    big = lint(cfg, world_size=1, mode="deepspeed", model="llama-7b", gpu_memory_gib=80, seq_len=2048)
    warned = [x for x in big if x.path == "train_micro_batch_size_per_gpu" and "GiB per GPU" in x.message]
    assert [x.severity for x in warned] == ["warning"] and "40.1 GiB" in warned[0].message
    # no card: no check; a bad card: a caller error
    assert not [x for x in lint(cfg, world_size=1, mode="deepspeed", model="llama-7b", seq_len=2048)
                if "GiB per GPU" in x.message]
    with pytest.raises(ValueError, match="gpu_memory_gib=0"):
        lint(cfg, world_size=1, mode="deepspeed", model="llama-7b", gpu_memory_gib=0)


def test_lint_memory_cli_flag_and_bad_value(capsys):
    cfg = str(LINT_FIXTURES / "llama7b_micro32_24gib.json")
    base = ["lint", cfg, "--mode", "deepspeed", "--world-size", "1", "--model", "llama-7b", "--seq-len", "2048"]
    assert cli.main(base + ["--gpu-memory-gib", "24"]) == 1
    assert "needs 40.1 GiB per GPU for activations and logits" in capsys.readouterr().out
    assert cli.main(base + ["--gpu-memory-gib", "-3"]) == 2
    assert "--gpu-memory-gib -3: give one card's memory in GiB" in capsys.readouterr().err
    assert cli.main(base) == 0
    assert "not checked against a card — give --gpu-memory-gib" in capsys.readouterr().out
