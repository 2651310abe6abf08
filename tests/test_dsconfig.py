"""Tests for cookbook.dsconfig: the DeepSpeed config builder.

Expected numbers are computed by hand in the test (h², 0.9·h², 10·h; micro × accumulation × world
size), and every preset × target is parsed by DeepSpeed's own ``DeepSpeedConfig`` at its world size.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from cookbook import cli  # noqa: E402
from cookbook.dsconfig import (PRESETS, TARGETS, ConfigError, MISSING, auto_precision, bucket_sizes,  # noqa: E402
                               build_config, diff, preset_plan)
from cookbook.plan import PlanError  # noqa: E402

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
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from cookbook.models import model_spec
    spec = model_spec("qwen-14b")
    cpu, _, _ = estimate_zero3_model_states_mem_needs(spec.num_params, spec.largest_layer_params, 8, 1,
                                                      cpu_offload=True, cpu_offload_params=True, zero_init=True)
    need_gib = cpu / 2**30
    short = build_config(_plan("zero3-offload", host_memory_gib=need_gib * 0.9))["zero_optimization"]
    enough = build_config(_plan("zero3-offload", host_memory_gib=need_gib * 1.1))["zero_optimization"]
    assert short["offload_param"]["pin_memory"] is False and short["offload_optimizer"]["pin_memory"] is False
    assert enough["offload_param"]["pin_memory"] is True


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


@pytest.fixture(scope="module")
def ds_dist(tmp_path_factory):
    """A 1-process gloo group: DeepSpeedConfig reads the mpu's world size only once deepspeed.comm is up."""
    import torch.distributed as tdist
    import deepspeed
    created = False
    if not tdist.is_initialized():
        store = tdist.FileStore(str(tmp_path_factory.mktemp("dist") / "store"), 1)
        tdist.init_process_group("gloo", store=store, rank=0, world_size=1)
        created = True
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update({k: os.environ.get(k) or v for k, v in env.items()})
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
    if created:
        tdist.destroy_process_group()


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
