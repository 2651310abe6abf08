"""Tests for cookbook.dsconfig: the DeepSpeed config builder.

Expected numbers are computed by hand in the test (h², 0.9·h², 10·h; micro × accumulation × world
size), and every preset × target is parsed by DeepSpeed's own ``DeepSpeedConfig`` at its world size.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from cookbook import cli  # noqa: E402
from cookbook.dsconfig import (PRESETS, TARGETS, ConfigError, MISSING, auto_precision, bucket_sizes,  # noqa: E402
                               build_config, diff, preset_plan)
from cookbook.plan import Plan, PlanError  # noqa: E402

QWEN14B_H = 5120  # hidden_size in Qwen-14B's config.json
QWEN14B_LARGEST = 152064 * 5120  # embedding: vocab_size × hidden_size


def _plan(preset, **kw):
    fields = dict(model="qwen-14b", num_gpus=8, micro_batch=1, grad_accum=16, nvme_path="/local_nvme")
    fields.update(kw)
    return preset_plan(preset, **fields)


# ---------------------------------------------------------------- small helpers

def test_bucket_sizes_qwen14b():
    # 5120² = 26214400; 0.9 × 26214400 = 23592960; 10 × 5120 = 51200
    assert bucket_sizes(QWEN14B_H) == {"reduce_bucket_size": 26214400, "stage3_prefetch_bucket_size": 23592960,
                                       "stage3_param_persistence_threshold": 51200}


def test_bucket_sizes_rejects_bad_hidden_size():
    for bad in (0, -1, 5120.0, "5120", True):
        with pytest.raises(ConfigError, match="hidden_size"):
            bucket_sizes(bad)


@pytest.mark.parametrize("cc,expected", [((8, 9), "bf16"), ((8, 0), "bf16"), ((9, 0), "bf16"), ((8, 6), "bf16"),
                                         ((7, 5), "fp16"), ((7, 0), "fp16"), ((6, 1), "fp16"), (None, "bf16")])
def test_auto_precision(cc, expected):
    assert auto_precision(cc) == expected


def test_auto_precision_bad_input():
    with pytest.raises(ConfigError, match="compute_capability"):
        auto_precision("ampere")


def test_preset_plan_fields():
    for name, (stage, opt, param) in PRESETS.items():
        plan = _plan(name)
        assert (plan.zero_stage, plan.offload_optimizer, plan.offload_param) == (stage, opt, param)


def test_preset_plan_errors():
    with pytest.raises(ConfigError, match="unknown"):
        preset_plan("zero4")
    with pytest.raises(ConfigError, match="contradicts"):
        preset_plan("zero2", zero_stage=3)
    with pytest.raises(PlanError, match="nvme_path"):
        preset_plan("zero3-nvme", num_gpus=8)


# ---------------------------------------------------------------- build_config contents

@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("gpus,micro,accum", [(8, 1, 16), (1, 2, 8), (4, 3, 5)])
def test_batch_arithmetic(preset, gpus, micro, accum):
    cfg = build_config(_plan(preset, num_gpus=gpus, micro_batch=micro, grad_accum=accum))
    assert cfg["train_batch_size"] == micro * accum * gpus
    assert cfg["train_micro_batch_size_per_gpu"] == micro
    assert cfg["gradient_accumulation_steps"] == accum


def test_zero3_keys_from_hidden_size():
    zero = build_config(_plan("zero3"))["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["reduce_bucket_size"] == 26214400
    assert zero["stage3_prefetch_bucket_size"] == 23592960
    assert zero["stage3_param_persistence_threshold"] == 51200
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert zero["stage3_max_live_parameters"] == 10**9 and zero["stage3_max_reuse_distance"] == 10**9
    assert "offload_optimizer" not in zero and "offload_param" not in zero


def test_zero2_has_no_stage3_keys():
    zero = build_config(_plan("zero2"))["zero_optimization"]
    assert zero["stage"] == 2 and zero["reduce_bucket_size"] == 26214400
    assert not [k for k in zero if k.startswith("stage3_")]


def test_offload_blocks():
    z = build_config(_plan("zero2-offload"))["zero_optimization"]
    assert z["offload_optimizer"] == {"device": "cpu", "pin_memory": True} and "offload_param" not in z
    z = build_config(_plan("zero3-offload"))["zero_optimization"]
    assert z["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert z["offload_param"] == {"device": "cpu", "pin_memory": True}
    cfg = build_config(_plan("zero3-nvme"))
    assert cfg["zero_optimization"]["offload_optimizer"]["nvme_path"] == "/local_nvme"
    assert cfg["zero_optimization"]["offload_param"]["nvme_path"] == "/local_nvme"
    assert cfg["zero_optimization"]["offload_optimizer"]["buffer_count"] == 4
    assert cfg["aio"]["block_size"] == 1048576 and "aio" not in cfg["zero_optimization"]
    assert "aio" not in build_config(_plan("zero3-offload"))


def test_nvme_param_buffer_holds_largest_partition():
    # 8 ranks: 778567680 / 8 = 97320960 < 1e8 -> DeepSpeed's default 1e8 suffices
    p8 = build_config(_plan("zero3-nvme"))["zero_optimization"]["offload_param"]
    assert p8["buffer_size"] == 10**8
    # 1 rank: the whole embedding (778567680 elements) must fit one buffer
    p1 = build_config(_plan("zero3-nvme", num_gpus=1))["zero_optimization"]["offload_param"]
    assert p1["buffer_size"] == QWEN14B_LARGEST


def test_pin_memory_off_when_host_ram_short():
    from cookbook.memory import estimate
    need_gib = estimate(_plan("zero3-offload", host_memory_gib=1.0)).host_gib["total"]
    short = build_config(_plan("zero3-offload", host_memory_gib=need_gib * 0.9))["zero_optimization"]
    enough = build_config(_plan("zero3-offload", host_memory_gib=need_gib * 1.1))["zero_optimization"]
    assert short["offload_param"]["pin_memory"] is False and short["offload_optimizer"]["pin_memory"] is False
    assert enough["offload_param"]["pin_memory"] is True


def test_pin_memory_kept_when_bf16_states_fit():
    """LLaMA-7B with full offload on a 125.8 GiB machine: fp32 states (153 GiB) are short, bf16 states (101.4 GiB
    estimated, 102.2 measured) fit, so their config keeps pinned buffers (unpinned ran 3.0x slower, §15)."""
    from cookbook.memory import estimate
    plan = Plan(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=125.8, seq_len=1024,
                micro_batch=16, grad_accum=1, precision="bf16", zero_stage=3, offload_optimizer="cpu",
                offload_param="cpu")
    assert estimate(plan).host_gib["total"] > 125.8 > estimate(plan, bf16_states=True).host_gib["total"]
    fp32 = build_config(plan)["zero_optimization"]
    b16 = build_config(plan, bf16_states=True)["zero_optimization"]
    assert fp32["offload_param"]["pin_memory"] is False and fp32["offload_optimizer"]["pin_memory"] is False
    assert b16["offload_param"]["pin_memory"] is True and b16["offload_optimizer"]["pin_memory"] is True


def test_precision_blocks():
    bf = build_config(_plan("zero3", precision="bf16"))
    assert bf["bf16"] == {"enabled": True} and "fp16" not in bf
    fp = build_config(_plan("zero3", precision="fp16"))
    assert fp["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                          "hysteresis": 2, "min_loss_scale": 1}
    assert "bf16" not in fp
    f32 = build_config(_plan("zero3", precision="fp32"))
    assert "bf16" not in f32 and "fp16" not in f32
    states = build_config(_plan("zero3"), bf16_states=True)["bf16"]
    assert states == {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
    with pytest.raises(ConfigError, match="bf16_states"):
        build_config(_plan("zero3", precision="fp16"), bf16_states=True)


def test_optimizer_and_scheduler():
    cfg = build_config(_plan("zero2"), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.99), eps=1e-6,
                       warmup_steps=10, total_steps=100, gradient_clipping=0.5)
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.99], "eps": 1e-6,
                                                             "weight_decay": 0.1}}
    assert cfg["scheduler"]["type"] == "WarmupDecayLR"
    assert cfg["scheduler"]["params"]["total_num_steps"] == 100
    assert cfg["scheduler"]["params"]["warmup_num_steps"] == 10
    assert cfg["scheduler"]["params"]["warmup_max_lr"] == 3e-4 and cfg["scheduler"]["params"]["warmup_min_lr"] == 0
    assert cfg["gradient_clipping"] == 0.5
    const = build_config(_plan("zero2"))["scheduler"]
    assert const["type"] == "WarmupLR" and const["params"]["warmup_num_steps"] >= 1


def test_bad_arguments():
    plan = _plan("zero2")
    for kwargs, field in [({"lr": -1}, "lr"), ({"betas": (0.9, 1.5)}, "betas"), ({"total_steps": 0}, "total_steps"),
                          ({"warmup_steps": -2}, "warmup_steps")]:
        with pytest.raises(ConfigError, match=field):
            build_config(plan, **kwargs)
    with pytest.raises(ConfigError, match="target"):
        build_config(plan, "lightning")


def test_stage0_has_no_offload():
    from cookbook.plan import Plan
    zero = build_config(Plan(model="qwen-14b", num_gpus=2, zero_stage=0))["zero_optimization"]
    assert zero == {"stage": 0}


def test_targets_auto_values():
    for target in ("deepspeed", "accelerate"):
        cfg = build_config(_plan("zero3-offload"), target)
        assert "auto" not in json.dumps(cfg)
    tr = build_config(_plan("zero3-offload"), "trainer")
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "gradient_clipping"):
        assert tr[key] == "auto"
    assert tr["optimizer"]["params"] == {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}
    assert tr["bf16"] == {"enabled": "auto"}
    assert tr["zero_optimization"]["reduce_bucket_size"] == "auto"
    assert tr["zero_optimization"]["stage3_prefetch_bucket_size"] == "auto"


# ---------------------------------------------------------------- DeepSpeed's own parser

class _DataParallelMPU:
    """The model-parallel-unit interface DeepSpeedConfig asks for its data-parallel world size."""

    def __init__(self, world_size):
        self.world_size = world_size

    def get_data_parallel_world_size(self):
        return self.world_size

    def get_data_parallel_rank(self):
        return 0

    def get_model_parallel_world_size(self):
        return 1

    def get_model_parallel_rank(self):
        return 0




@dataclass
class _TrainerArgs:
    """The TrainingArguments fields HfTrainerDeepSpeedConfig.trainer_config_process reads
    (transformers/integrations/deepspeed.py), with an explicit world size."""

    world_size: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    bf16: bool
    fp16: bool
    max_grad_norm: float = 1.0
    learning_rate: float = 2e-5
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    weight_decay: float = 0.0
    save_on_each_node: bool = False
    fp16_full_eval: bool = False
    bf16_full_eval: bool = False
    warmup_steps: int = 5

    def get_warmup_steps(self, num_training_steps):
        return self.warmup_steps


class _ModelWithConfig:
    def __init__(self, hidden_size):
        self.config = type("Cfg", (), {"hidden_size": hidden_size})()


def _fill_like_trainer(cfg, plan):
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
    from cookbook.models import model_spec
    hf = HfTrainerDeepSpeedConfig(json.loads(json.dumps(cfg)))
    args = _TrainerArgs(world_size=plan.world_size, per_device_train_batch_size=plan.micro_batch,
                        gradient_accumulation_steps=plan.grad_accum, bf16=plan.precision == "bf16",
                        fp16=plan.precision == "fp16")
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, _ModelWithConfig(model_spec(plan.model).hidden_size), num_training_steps=100)
    return hf.config


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_deepspeed_parser_accepts(ds_dist, preset, target):
    from deepspeed.runtime.config import DeepSpeedConfig
    for precision in ("bf16", "fp16"):
        plan = _plan(preset, precision=precision)
        cfg = build_config(plan, target, total_steps=100, warmup_steps=5)
        if target == "trainer":
            cfg = _fill_like_trainer(cfg, plan)
            assert "auto" not in json.dumps(cfg)
            assert cfg["zero_optimization"]["reduce_bucket_size"] == 26214400
        parsed = DeepSpeedConfig(cfg, mpu=_DataParallelMPU(plan.world_size))
        assert parsed.world_size == 8
        assert parsed.train_batch_size == 128
        assert parsed.zero_optimization_stage == PRESETS[preset][0]
        assert parsed.bfloat16_config.enabled is (precision == "bf16")
        assert parsed.float16_config.enabled is (precision == "fp16")


def test_deepspeed_parser_rejects_wrong_batch(ds_dist):
    """The parser test can fail: the first article's train_batch_size 16 at world size 8 is refused."""
    from deepspeed.runtime.config import DeepSpeedConfig
    cfg = build_config(_plan("zero3-offload"))
    cfg["train_batch_size"] = 16
    with pytest.raises(AssertionError, match=r"16 != 1 \* 16 \* 8"):
        DeepSpeedConfig(cfg, mpu=_DataParallelMPU(8))


def test_deepspeed_parser_accepts_bf16_states(ds_dist):
    from deepspeed.runtime.config import DeepSpeedConfig
    for preset in ("zero2", "zero3", "zero3-offload"):
        parsed = DeepSpeedConfig(build_config(_plan(preset), bf16_states=True), mpu=_DataParallelMPU(8))
        assert parsed.bfloat16_config.bf16_master_weights_and_grads is True
        assert parsed.bfloat16_config.bf16_optimizer_states is True


# ---------------------------------------------------------------- diff

def test_diff_zero2_to_zero3_to_offload():
    z2, z3, off = (build_config(_plan(p)) for p in ("zero2", "zero3", "zero3-offload"))
    d = diff(z2, z3).as_dict()
    assert d["zero_optimization.stage"] == (2, 3)
    assert d["zero_optimization.stage3_prefetch_bucket_size"] == (MISSING, 23592960)
    assert d["zero_optimization.allgather_partitions"] == (True, MISSING)
    assert "zero_optimization.reduce_bucket_size" not in d and "train_batch_size" not in d
    d2 = diff(z3, off)
    assert [r.path for r in d2] == ["zero_optimization.offload_optimizer.device",
                                    "zero_optimization.offload_optimizer.pin_memory",
                                    "zero_optimization.offload_param.device",
                                    "zero_optimization.offload_param.pin_memory"]
    assert d2[0].before is MISSING and d2[0].after == "cpu"
    frame = d2.to_frame()
    assert list(frame.columns) == ["path", "before", "after"] and len(frame) == 4
    assert "offload_param.device" in d2._repr_html_()
    assert len(diff(z3, z3)) == 0


def test_diff_type_change_and_bad_input():
    assert diff({"a": 1}, {"a": 1.0}).as_dict() == {"a": (1, 1.0)}
    with pytest.raises(ConfigError):
        diff({"a": 1}, [1])


# ---------------------------------------------------------------- CLI

def test_cli_config_writes_file(tmp_path, capsys):
    out = tmp_path / "ds.json"
    rc = cli.main(["config", "zero3-offload", "--gpus", "8", "--micro-batch", "1", "--grad-accum", "16",
                   "--model", "qwen-14b", "-o", str(out)])
    assert rc == 0
    written = json.loads(out.read_text())
    assert written == build_config(_plan("zero3-offload"))
    err = capsys.readouterr().err
    assert "train_batch_size 128" in err


def test_cli_config_stdout_and_errors(capsys):
    rc = cli.main(["config", "zero2", "--gpus", "2", "--micro-batch", "2", "--grad-accum", "3", "--target", "trainer"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["train_batch_size"] == "auto"
    rc = cli.main(["config", "zero3-nvme", "--gpus", "2", "--micro-batch", "1", "--grad-accum", "1"])
    assert rc == 2
    assert "--nvme-path" in capsys.readouterr().err


def test_cli_config_precision_from_gpu(capsys):
    assert cli.main(["config", "zero2", "--gpus", "1", "--micro-batch", "1", "--grad-accum", "1", "--gpu", "V100"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["fp16"]["enabled"] is True and "bf16" not in cfg
    assert cli.main(["config", "zero2", "--gpus", "1", "--micro-batch", "1", "--grad-accum", "1",
                     "--gpu", "RTX 4090"]) == 0
    assert json.loads(capsys.readouterr().out)["bf16"] == {"enabled": True}


# ---------------------------------------------------------------- "auto" filled from the plan: the real templates

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"  # sources: fixtures/templates/SOURCES.md
H = QWEN14B_H
RUN_OPTIONS = dict(lr=2e-5, max_steps=1000, warmup_steps=30)
TYPED = {"model", "num_gpus", "micro_batch", "lr", "max_steps", "warmup_steps"}


def _template(name):
    return json.loads((TEMPLATES / name).read_text())


def _resolve(name, **plan_fields):
    """Resolve a template for Qwen-14B on 8 GPUs, micro batch 2, as a user would type it."""
    from cookbook.dsconfig import resolve_config
    from cookbook.plan import Plan
    fields = dict(model="qwen-14b", num_gpus=8, micro_batch=2, grad_accum=1, precision="bf16", zero_stage=3)
    typed = set(TYPED)
    for key, value in plan_fields.items():
        fields[key] = value
        typed.add(key)
    return resolve_config(_template(name), Plan(**fields), stated=typed, config_name=name, **RUN_OPTIONS)


def _trainer_fill(cfg, plan, num_training_steps=1000):
    """The HF Trainer's own fill (HfTrainerDeepSpeedConfig) of a template, for the same run."""
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
    hf = HfTrainerDeepSpeedConfig(json.loads(json.dumps(cfg)))
    args = _TrainerArgs(world_size=plan.world_size, per_device_train_batch_size=plan.micro_batch,
                        gradient_accumulation_steps=plan.grad_accum, bf16=plan.precision == "bf16",
                        fp16=plan.precision == "fp16", learning_rate=RUN_OPTIONS["lr"],
                        warmup_steps=RUN_OPTIONS["warmup_steps"])
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, _ModelWithConfig(H), num_training_steps=num_training_steps)
    return hf.config


def _leaves(d, prefix=""):
    out = {}
    for k, v in d.items():
        p = f"{prefix}.{k}" if prefix else k
        out.update(_leaves(v, p) if isinstance(v, dict) else {p: v})
    return out


# hand-computed for Qwen-14B (h = 5120), 8 GPUs, micro batch 2: h² = 26214400, int(0.9·h²) = 23592960, 10·h = 51200
ACCELERATE_EXPECTED = {  # fp16 and accumulation 1 are fixed by Accelerate's templates
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 2 * 1 * 8,
    "gradient_clipping": 1.0, "optimizer.params.lr": 2e-5, "optimizer.params.weight_decay": 0.0,
    "scheduler.params.warmup_min_lr": 0, "scheduler.params.warmup_max_lr": 2e-5,
    "scheduler.params.warmup_num_steps": 30, "scheduler.params.total_num_steps": 1000, "fp16.enabled": True,
    "zero_optimization.reduce_bucket_size": H * H}
ACCELERATE_Z3 = {"zero_optimization.stage3_prefetch_bucket_size": 23592960,
                 "zero_optimization.stage3_param_persistence_threshold": 10 * H,
                 "zero_optimization.stage3_gather_16bit_weights_on_model_save": True}
LLAMAFACTORY_EXPECTED = {  # batch, clipping and precision "auto"; no optimizer/scheduler block
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "train_batch_size": 2 * 4 * 8,
    "gradient_clipping": 1.0, "fp16.enabled": False, "bf16.enabled": True,
    "scheduler.type": "WarmupDecayLR", "scheduler.params.warmup_min_lr": 0, "scheduler.params.warmup_max_lr": 2e-5,
    "scheduler.params.warmup_num_steps": 30, "scheduler.params.total_num_steps": 1000}
LLAMAFACTORY_Z3 = {"zero_optimization.reduce_bucket_size": H * H,
                   "zero_optimization.stage3_prefetch_bucket_size": 23592960,
                   "zero_optimization.stage3_param_persistence_threshold": 10 * H}

TEMPLATE_CASES = {
    # name: (extra typed plan fields, expected resolved values, expected plan (stage, offload opt, offload param, precision))
    "accelerate_zero_stage2_config.json": ({}, dict(ACCELERATE_EXPECTED, **{
        "zero_optimization.allgather_bucket_size": 2e8, "optimizer.params.torch_adam": True}), (2, "none", "none", "fp16")),
    "accelerate_zero_stage3_config.json": ({}, dict(ACCELERATE_EXPECTED, **ACCELERATE_Z3), (3, "none", "none", "fp16")),
    "accelerate_zero_stage3_offload_config.json": ({}, dict(ACCELERATE_EXPECTED, **ACCELERATE_Z3, **{
        "zero_optimization.offload_optimizer.device": "cpu", "zero_optimization.offload_param.device": "cpu"}),
        (3, "cpu", "cpu", "fp16")),
    "llamafactory_ds_z2_config.json": ({"grad_accum": 4, "precision": "bf16"}, dict(LLAMAFACTORY_EXPECTED, **{
        "zero_optimization.reduce_bucket_size": 5e8}), (2, "none", "none", "bf16")),
    "llamafactory_ds_z3_config.json": ({"grad_accum": 4, "precision": "bf16"}, dict(LLAMAFACTORY_EXPECTED,
                                                                                    **LLAMAFACTORY_Z3), (3, "none", "none", "bf16")),
    "llamafactory_ds_z3_offload_config.json": ({"grad_accum": 4, "precision": "bf16"}, dict(
        LLAMAFACTORY_EXPECTED, **LLAMAFACTORY_Z3, **{"zero_optimization.offload_optimizer.device": "cpu",
                                                       "zero_optimization.offload_param.device": "cpu"}),
        (3, "cpu", "cpu", "bf16")),
    "transformers_docs_zero3.json": ({"grad_accum": 4, "precision": "bf16"}, dict(
        {k: v for k, v in LLAMAFACTORY_EXPECTED.items() if k not in ("train_batch_size", "fp16.enabled",
                                                                      "gradient_clipping")},
        **LLAMAFACTORY_Z3, **{"zero_optimization.offload_optimizer.device": "cpu"}), (3, "cpu", "cpu", "bf16")),
}


@pytest.mark.parametrize("name", sorted(TEMPLATE_CASES))
def test_templates_resolve_value_by_value(name):
    typed, expected, (stage, opt, param, precision) = TEMPLATE_CASES[name]
    res = _resolve(name, **typed)
    assert res.ok, res.problems
    got = _leaves(res.config)
    for path, want in expected.items():
        assert got[path] == want and type(got[path]) is type(want), (path, got.get(path), want)
    assert "auto" not in json.dumps(res.config)
    assert (res.plan.zero_stage, res.plan.offload_optimizer, res.plan.offload_param, res.plan.precision) == \
        (stage, opt, param, precision)
    assert (res.plan.micro_batch, res.plan.world_size) == (2, 8)
    # every "auto" of the template has a row saying where its value came from, and the original is untouched
    autos = {p for p, v in _leaves(_template(name)).items() if v == "auto"}
    assert autos == {r.path for r in res.rows if r.how == "auto"}
    assert res.original == _template(name)
    assert all(r.source for r in res.rows)


@pytest.mark.parametrize("name", sorted(TEMPLATE_CASES))
def test_templates_resolve_as_the_hf_trainer_fills_them(name):
    """Key by key, what we fill equals what transformers' HfTrainerDeepSpeedConfig fills for the same run."""
    typed, _, _ = TEMPLATE_CASES[name]
    res = _resolve(name, **typed)
    trainer = _leaves(_trainer_fill(_template(name), res.plan))
    ours = _leaves(res.config)
    filled_by_trainer = [p for p, v in _leaves(_template(name)).items() if v == "auto" and trainer[p] != "auto"]
    assert filled_by_trainer
    for path in filled_by_trainer:
        assert ours[path] == trainer[path], (path, ours[path], trainer[path])


@pytest.mark.parametrize("name", sorted(TEMPLATE_CASES))
def test_resolved_templates_pass_deepspeeds_parser(ds_dist, name):
    from deepspeed.runtime.config import DeepSpeedConfig
    typed, _, (stage, opt, param, precision) = TEMPLATE_CASES[name]
    res = _resolve(name, **typed)
    parsed = DeepSpeedConfig(res.config, mpu=_DataParallelMPU(8))
    ga = res.plan.grad_accum
    assert parsed.world_size == 8
    assert (parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (2, ga)
    assert parsed.train_batch_size == 2 * ga * 8
    assert parsed.zero_optimization_stage == stage
    assert parsed.bfloat16_config.enabled is (precision == "bf16")
    assert parsed.float16_config.enabled is (precision == "fp16")
    off = parsed.zero_config.offload_optimizer
    assert (str(getattr(off.device, "value", off.device)) if off else "none") == opt


def test_config_value_against_typed_option_is_an_error_naming_both():
    # Accelerate's template fixes gradient_accumulation_steps 1 and fp16; the user typed other values
    res = _resolve("accelerate_zero_stage3_offload_config.json", grad_accum=4, precision="bf16")
    assert not res.ok
    msgs = {p.path: p for p in res.problems}
    ga = msgs["gradient_accumulation_steps"]
    assert "is 1 in accelerate_zero_stage3_offload_config.json" in ga.message and "grad_accum=4" in ga.message
    assert '"auto"' in ga.fix and "4" in ga.fix
    fp = msgs["fp16.enabled"]
    assert "precision='bf16'" in fp.message and "to false" in fp.fix
    # with the command's flags as names
    from cookbook.dsconfig import resolve_config
    from cookbook.plan import Plan
    res = resolve_config({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}},
                         Plan(micro_batch=4), stated={"micro_batch"}, names={"micro_batch": "--micro-batch"},
                         config_name="ds.json")
    assert res.problems[0].message == ("train_micro_batch_size_per_gpu is 2 in ds.json, but --micro-batch 4 was "
                                       "given: the two disagree")
    assert res.problems[0].fix.startswith("drop --micro-batch (the config decides)")


def test_config_values_win_over_options_not_typed():
    from cookbook.dsconfig import resolve_config
    from cookbook.plan import Plan
    cfg = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
    res = resolve_config(cfg, Plan(model="qwen-14b", micro_batch=4, zero_stage=3), names={"num_gpus": "--num-processes"})
    assert res.ok, res.problems
    # world size stated by the config: 64 / (2 × 4) = 8
    assert (res.plan.world_size, res.plan.micro_batch, res.plan.grad_accum, res.plan.zero_stage) == (8, 2, 4, 2)
    kept = {r.path: r for r in res.rows if r.how == "kept"}
    assert "(world size)" in kept and "--num-processes 1 (default)" in kept["(world size)"].source
    assert kept["zero_optimization.stage"].value == 2
    # the scheduler the config lacked peaks at the config's own learning rate, not the default option's
    assert res.config["scheduler"]["params"]["warmup_max_lr"] == 1e-5 and kept["optimizer.params.lr"].value == 1e-5
    # the HF Trainer's mismatch rule for an explicit value against a typed option
    res = resolve_config(cfg, Plan(model="qwen-14b", num_gpus=8), stated={"lr"}, lr=3e-4)
    assert [p.path for p in res.problems] == ["optimizer.params.lr"]


def test_a_config_value_equal_to_the_default_is_credited_to_the_config():
    """The config sets train_micro_batch_size_per_gpu 4, the value of the untyped --micro-batch default: a message
    about the batch credits the config's key, not "--micro-batch 4 (default)"."""
    from cookbook.dsconfig import resolve_config
    from cookbook.plan import Plan
    plan = Plan(micro_batch=4, grad_accum=1, num_gpus=2)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3, "train_batch_size": 100,
           "zero_optimization": {"stage": 3}}
    names = {"micro_batch": "--micro-batch", "grad_accum": "--grad-accum", "num_gpus": "--world-size"}
    res = resolve_config(cfg, plan, names=names, config_name="ds.json")
    (tb,) = [p for p in res.problems if p.path == "train_batch_size"]
    assert f"= {4 * 3 * 2} (" in tb.message
    assert "train_micro_batch_size_per_gpu 4 in ds.json" in tb.message and "--micro-batch 4 (default)" not in tb.message
    assert "gradient_accumulation_steps 3 in ds.json" in tb.message and "--world-size 2 (default)" in tb.message
    # typed, the flag is credited (without "(default)")
    res = resolve_config(cfg, plan, stated={"micro_batch"}, names=names, config_name="ds.json")
    (tb,) = [p for p in res.problems if p.path == "train_batch_size"]
    assert "(--micro-batch 4, gradient_accumulation_steps 3 in ds.json, --world-size 2 (default))" in tb.message
    # an "auto" nvme_path filled from the other block's path credits that block, not "--nvme-path ... (default)"
    cfg = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nv"},
                                 "offload_param": {"device": "nvme", "nvme_path": "auto"}}}
    res = resolve_config(cfg, Plan(zero_stage=3, offload_optimizer="nvme", offload_param="nvme", nvme_path="/nv"),
                         names={"nvme_path": "--nvme-path"}, config_name="ds.json")
    row = {r.path: r for r in res.rows}["zero_optimization.offload_param.nvme_path"]
    assert row.value == "/nv" and row.source == "zero_optimization.offload_optimizer.nvme_path /nv in ds.json"


def test_unfillable_auto_and_missing_model():
    from cookbook.dsconfig import resolve_config
    from cookbook.plan import Plan
    cfg = {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_type": "auto"}}}
    res = resolve_config(cfg, Plan(model="no-such-model"), names={"model": "--model"})
    paths = {p.path: p for p in res.problems}
    assert "neither the HF Trainer nor Accelerate fills" in paths["scheduler.params.warmup_type"].message
    assert "--model" in paths["zero_optimization.reduce_bucket_size"].fix


def test_nvme_with_bf16_states_refused_by_the_builder():
    with pytest.raises(ConfigError, match=r"assert dtype == self.dtype"):
        build_config(_plan("zero3-nvme"), bf16_states=True)
    build_config(_plan("zero3-offload"), bf16_states=True)  # CPU offload keeps bf16 states


def test_refusals_name_the_flags_typed(capsys):
    assert cli.main(["config", "zero3", "--gpus", "0", "--micro-batch", "1", "--grad-accum", "1"]) == 2
    err = capsys.readouterr().err
    assert "--gpus 0" in err and "num_gpus" not in err
    assert cli.main(["config", "zero3", "--gpus", "2", "--micro-batch", "1", "--grad-accum", "1", "--bf16-states",
                     "--precision", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "--bf16-states with --precision fp16" in err and "bf16_states" not in err
    assert cli.main(["config", "zero3-nvme", "--gpus", "2", "--micro-batch", "1", "--grad-accum", "1"]) == 2
    assert "--nvme-path is not set" in capsys.readouterr().err
    assert cli.main(["config", "zero3", "--gpus", "2", "--micro-batch", "1", "--grad-accum", "1", "--lr", "-1"]) == 2
    assert "--lr -1.0: must be a number > 0.0" in capsys.readouterr().err


def test_stock_benchmark_configs_are_filled_by_resolve_config():
    """benchmarks/stock.py fills the stock configs' "auto" with cookbook.dsconfig.resolve_config (the rules
    `cookbook launch` applies), each change with its source; the comparison's own changes stay."""
    from benchmarks import stock
    from cookbook.plan import Plan

    def autos(d, path=""):
        for k, v in d.items():
            p = f"{path}.{k}" if path else k
            if isinstance(v, dict):
                yield from autos(v, p)
            elif v == "auto":
                yield p
    plan = Plan(model="llama-7b", num_gpus=1, seq_len=1024, micro_batch=2, grad_accum=8, precision="bf16",
                zero_stage=3, offload_optimizer="cpu", offload_param="cpu", gradient_checkpointing=True)
    h = 4096  # LLaMA-7B's hidden size (Touvron et al. 2023, table 2)
    for name in stock.STOCK:
        cfg, changes = stock.resolve(name, plan, lr=2e-5, max_steps=5)
        assert not list(autos(cfg)), name
        z = cfg["zero_optimization"]
        assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) \
            == (16, 2, 8)
        assert cfg["bf16"] == {"enabled": True} and "fp16" not in cfg and cfg["gradient_clipping"] == 1.0
        assert cfg["optimizer"]["params"]["lr"] == 2e-5 and cfg["scheduler"]["type"] == "WarmupDecayLR"
        assert cfg["scheduler"]["params"]["total_num_steps"] == 5 and "activation_checkpointing" not in cfg
        filled = {c.split(":")[0]: c for c in changes}
        for path in autos(stock.STOCK[name]):
            if path.startswith(("scheduler.", "fp16.", "bf16.")):
                continue  # replaced by the comparison's own scheduler / precision block
            assert path in filled and "(" in filled[path], (name, path, changes)
        if "reduce_bucket_size" in filled.get("zero_optimization.reduce_bucket_size", ""):
            assert z["reduce_bucket_size"] == h * h and z["stage3_prefetch_bucket_size"] == int(0.9 * h * h)
            assert z["stage3_param_persistence_threshold"] == 10 * h
            assert f"hidden_size² = {h}²" in filled["zero_optimization.reduce_bucket_size"]


def test_describe_scheduler_says_what_each_block_runs():
    from cookbook.dsconfig import describe_scheduler
    flat = {"type": "WarmupLR", "params": {"warmup_min_lr": 2e-5, "warmup_max_lr": 2e-5, "warmup_num_steps": 1}}
    assert describe_scheduler(flat).startswith("WarmupLR: constant 2e-05 at every step")
    warm = {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_num_steps": 3}}
    assert describe_scheduler(warm, 1e-5) == "WarmupLR: constant 1e-05 after 3 warm-up step(s) from 0"
    decay = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-3, "warmup_num_steps": 2,
                                                 "total_num_steps": 40}}
    assert describe_scheduler(decay) == "WarmupDecayLR: 0 -> 0.003 over 2 warm-up step(s), then linear to 0 at step 40"
    assert describe_scheduler({"type": "OneCycle", "params": {"cycle_min_lr": 1e-6}}) == "OneCycle: cycle_min_lr=1e-06"


# ---------------------------------------------------------------- issue 31: nothing chosen silently
def test_config_says_why_it_writes_pin_memory_false(capsys):
    """`cookbook config` with short host RAM writes pin_memory false and says why, with the host check's numbers."""
    from cookbook import cli
    from cookbook.dsconfig import PIN_MEMORY_OFF_COST, preset_plan
    from cookbook.memory import estimate
    args = ["config", "zero3-offload", "--gpus", "1", "--micro-batch", "1", "--grad-accum", "8", "--model", "llama-7b"]
    assert cli.main(args + ["--host-memory-gib", "64"]) == 0
    cap = capsys.readouterr()
    cfg = json.loads(cap.out)
    assert cfg["zero_optimization"]["offload_optimizer"]["pin_memory"] is False
    need = estimate(preset_plan("zero3-offload", model="llama-7b", num_gpus=1, micro_batch=1, grad_accum=8,
                                host_memory_gib=64)).host_gib["total"]
    note = [line for line in cap.err.splitlines() if line.startswith("[pin_memory]")]
    assert len(note) == 1 and "--host-memory-gib 64" in note[0] and f"{need:.1f} GiB with pinned buffers" in note[0]
    slower = PIN_MEMORY_OFF_COST["pinned_tokens_per_s"] / PIN_MEMORY_OFF_COST["unpinned_tokens_per_s"]
    assert f"{slower:.1f}x slower" in note[0] and "PIN_MEMORY_OFF_COST" in note[0]
    # enough RAM: pinned, and nothing said
    assert cli.main(args + ["--host-memory-gib", f"{need + 8:.0f}"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["zero_optimization"]["offload_optimizer"]["pin_memory"] is True
    assert "[pin_memory]" not in cap.err


def test_plan_from_config_derives_the_micro_batch_as_deepspeed():
    """A config with train_batch_size and accumulation only: DeepSpeed's micro batch (128 // 8 // 4 = 4), not the
    Plan default 1, is what env and estimate see (issue 31, class 1)."""
    from cookbook.dsconfig import config_plan_fields, plan_from_ds_config
    cfg = {"train_batch_size": 128, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}
    plan = plan_from_ds_config(cfg, model="llama-7b", world_size=8)
    assert (plan.micro_batch, plan.grad_accum) == (4, 4)
    only_tb = plan_from_ds_config({"train_batch_size": 16}, model="llama-7b", world_size=8)
    assert (only_tb.micro_batch, only_tb.grad_accum) == (2, 1)
    auto = plan_from_ds_config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"},
                               model="llama-7b", world_size=8, base=Plan(model="llama-7b", micro_batch=3))
    assert auto.micro_batch == 3  # "auto": the reader fills it, the base stands
    assert config_plan_fields(cfg) == {"zero_stage", "micro_batch", "grad_accum"}
    assert config_plan_fields({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": True}}) == {"precision"}
