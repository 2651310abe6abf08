"""``--liger`` (Liger's fused linear cross-entropy), the ``zero2-offload-liger`` preset, and the linter's ZenFlow rules.

The GPU run itself is not possible here: Liger's kernels are Triton kernels for CUDA and this suite runs on a CPU
(torch's CPU build brings no Triton). What is tested on the CPU: the option reaches the plan, the rank's command
and the run file; ``cookbook train --liger`` refuses before any rank starts, with one message and no traceback;
the estimator's loss-phase bytes against the rule read from liger-kernel's source, computed here by hand; the
preset's config parsed by DeepSpeed's own ``DeepSpeedConfig``; the linter's rules on hand-made configs, and
DeepSpeed's own ZenFlow config model on the config the linter passes. The measured GPU run is
``data/reference/h200_levers_2026-12-01.json`` (docs/benchmarks.md section 10).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from cookbook import cli  # noqa: E402
from cookbook.dsconfig import ConfigError, build_config, preset_plan  # noqa: E402
from cookbook.lint import lint  # noqa: E402
from cookbook.plan import Plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LLAMA3B = str(ROOT / "benchmarks" / "models" / "llama-3b")
GIB = 2 ** 30
# benchmarks/models/llama-3b/config.json
H, V, LAYERS = 3200, 32000, 26


def _recipe(micro_batch: int, liger: bool) -> Plan:
    """The measured recipe: 3.4B LLaMA shape, one rank capped at 24 GiB, ZeRO-2 + optimizer offload, seq 1024."""
    return Plan(model=LLAMA3B, num_gpus=1, gpu_memory_gib=24.0, seq_len=1024, micro_batch=micro_batch,
                precision="bf16", zero_stage=2, offload_optimizer="cpu", gradient_checkpointing=True, liger=liger)


# ---------------------------------------------------------------- the estimator's loss-phase term

def _chunk_by_hand(bt: int, h: int, v: int) -> int:
    # liger_kernel/ops/fused_linear_cross_entropy.py (0.8.5): inc_factor = cdiv(V, H);
    # chunk_size = min(next_power_of_2(cdiv(BT, inc_factor)), BT)
    inc = math.ceil(v / h)
    return min(2 ** math.ceil(math.log2(math.ceil(bt / inc))), bt)


def test_chunk_size_rule():
    from cookbook.memory import liger_chunk_size
    assert _chunk_by_hand(32 * 1024, H, V) == 4096  # inc 10, ceil(32768/10) = 3277 -> 4096
    for bt, h, v in ((32 * 1024, H, V), (16 * 1024, H, V), (4096 * 4, 4096, 32000), (7, 64, 1000), (1, 8, 8)):
        assert liger_chunk_size(bt, h, v) == _chunk_by_hand(bt, h, v)
    # liger's own comment: BT = 4096*4, V = 32000, H = 4096 gives chunk_size 2048
    assert liger_chunk_size(4096 * 4, 4096, 32000) == 2048


def test_flce_bytes_by_hand():
    from cookbook.memory import liger_flce_bytes
    from cookbook.models import model_spec
    spec = model_spec(LLAMA3B)
    assert (spec.hidden_size, spec.vocab_size, spec.num_layers) == (H, V, LAYERS)
    bt = 32 * 1024
    got = liger_flce_bytes(spec, _recipe(32, True))
    # bf16: grad_input BT*H*2, lm_head gradient V*H*2, fp32 per-token losses BT*4, one bf16 chunk of logits
    hand = bt * H * 2 + V * H * 2 + bt * 4 + 4096 * V * 2
    assert got["total"] == hand
    assert got["fp32_accumulation"] == 0
    fp32 = liger_flce_bytes(spec, _recipe(32, True).replace(precision="fp32"))
    assert fp32["total"] == bt * H * 4 + V * H * 4 + bt * 4 + 4096 * V * 4 + V * H * 4


def test_micro_batch_32_fits_with_liger_not_without():
    """The arithmetic behind the measured run: 16 fits without Liger, 32 only with it (24 GiB cap)."""
    from cookbook.memory import FRAGMENTATION, activation_bytes, estimate
    from cookbook.models import model_spec
    spec = model_spec(LLAMA3B)
    s, b = 1024, 32
    checkpoints = LAYERS * 2 * s * b * H          # one bf16 layer input per decoder layer
    one_layer = 34 * s * b * H                    # Korthikanti et al. 2022, the recompute of one layer
    stock_loss = 12 * b * s * V                   # three fp32 logit-sized tensors
    liger_loss = b * s * H * 2 + V * H * 2 + b * s * 4 + 4096 * V * 2
    stock_act = checkpoints + max(one_layer, stock_loss)
    liger_act = checkpoints + max(one_layer, liger_loss)
    assert activation_bytes(spec, _recipe(32, False))["total"] == stock_act
    assert activation_bytes(spec, _recipe(32, True))["total"] == liger_act
    stock = estimate(_recipe(32, False), bf16_states=True)
    with_liger = estimate(_recipe(32, True), bf16_states=True)
    # everything else is the same: the difference is the activations plus their allocator-cache share
    saved = (stock_act - liger_act) * (1 + FRAGMENTATION["zero012"]) / GIB
    assert stock.gpu_gib["total"] - with_liger.gpu_gib["total"] == pytest.approx(saved, rel=1e-9)
    assert not stock.fits_gpu and with_liger.fits_gpu
    assert estimate(_recipe(16, False), bf16_states=True).fits_gpu  # the recipe as shipped
    assert any("--liger" in r for r in with_liger.reasons)


def test_estimate_cli_takes_liger(capsys):
    args = ["estimate", LLAMA3B, "--gpus", "1", "--zero-stage", "2", "--offload-optimizer", "cpu", "--micro-batch",
            "32", "--seq-len", "1024", "--bf16-states", "--json"]
    assert cli.main(args + ["--liger"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert cli.main(args) == 0
    off = json.loads(capsys.readouterr().out)
    assert on["fits_gpu"] is True and off["fits_gpu"] is False


# ---------------------------------------------------------------- the preset

def test_preset_sets_liger_and_refuses_without():
    plan = preset_plan("zero2-offload-liger", model=LLAMA3B, num_gpus=1, micro_batch=32, grad_accum=1)
    assert plan.liger and (plan.zero_stage, plan.offload_optimizer, plan.offload_param) == (2, "cpu", "none")
    assert "Liger" in plan.label
    with pytest.raises(ConfigError, match="liger=False contradicts preset 'zero2-offload-liger'"):
        preset_plan("zero2-offload-liger", model=LLAMA3B, liger=False)
    assert not preset_plan("zero2-offload", model=LLAMA3B).liger




class _MPU:
    def __init__(self, world_size):
        self.world_size = world_size

    def get_data_parallel_world_size(self):
        return self.world_size


@pytest.mark.parametrize("target", ("deepspeed", "accelerate"))
def test_preset_config_parses_in_deepspeed(ds_dist, target):
    from deepspeed.runtime.config import DeepSpeedConfig
    plan = preset_plan("zero2-offload-liger", model=LLAMA3B, num_gpus=1, micro_batch=32, grad_accum=1)
    cfg = build_config(plan, target, bf16_states=True, total_steps=100, warmup_steps=5)
    parsed = DeepSpeedConfig(cfg, mpu=_MPU(1))
    assert parsed.zero_optimization_stage == 2 and parsed.train_batch_size == 32
    assert parsed.zero_config.offload_optimizer.device == "cpu"
    assert parsed.bfloat16_config.bf16_master_weights_and_grads is True
    # the JSON is the recipe's: DeepSpeed has no Liger key
    same = build_config(plan.replace(liger=False), target, bf16_states=True, total_steps=100, warmup_steps=5)
    assert cfg == same and "liger" not in json.dumps(cfg).lower()
    assert list(lint(cfg, plan=plan, mode=target)) == []


def test_config_cli_says_the_lever_is_not_in_the_json(capsys, tmp_path):
    out = tmp_path / "ds.json"
    assert cli.main(["config", "zero2-offload-liger", "--gpus", "1", "--micro-batch", "24", "--grad-accum", "1",
                     "--model", LLAMA3B, "--bf16-states", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "WITHOUT them" in err
    assert f"cookbook launch --config {out} --liger --attention flex" in err and "--micro-batch 24" in err
    assert "by default where they can run" in err  # cookbook train/launch: --liger auto
    assert "--bf16-states" in err
    # the measured line is the evidence record's, with its same-call baseline
    from cookbook import evidence
    r = evidence.get("recipe.default_micro24")
    assert r.extra["micro_batch"] == 24 and r.baseline["source"]["call"] == r.source["call"]  # one call
    assert f"{r.value:,.0f} tokens/s, {r.ratio:.2f}x" in err and r.key in err
    assert json.loads(out.read_text())["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


# ---------------------------------------------------------------- the option on the CPU

def test_liger_reaches_the_rank_command_and_run_file(tmp_path):
    import argparse
    from cookbook.launch import load_run_file, train_argv
    from cookbook.train import add_launch_arguments, add_train_arguments
    argv = train_argv(_recipe(32, True), tmp_path)
    # the launcher decided: the ranks get on or off, never auto (they must not choose again)
    assert argv[argv.index("--liger") + 1] == "on"
    off = train_argv(_recipe(32, False), tmp_path)
    assert off[off.index("--liger") + 1] == "off"
    p = argparse.ArgumentParser()
    add_train_arguments(p)
    assert p.parse_args(argv).liger == "on" and p.parse_args(off).liger == "off"
    assert p.parse_args(["--liger"]).liger == "on" and p.parse_args([]).liger == "auto"  # bare --liger: on
    p = argparse.ArgumentParser(prog="cookbook train")
    add_launch_arguments(p, with_config=False)
    run = tmp_path / "run.yaml"
    # YAML's true/false (and on/off, which YAML 1.1 reads as booleans) and the word auto
    for text, want in (("true", "on"), ("false", "off"), ("on", "on"), ("off", "off"), ("auto", "auto")):
        run.write_text(f"liger: {text}\nmicro-batch: 32\n")
        assert load_run_file(run, p)["liger"] == want, text
    run.write_text("liger: sometimes\n")
    from cookbook.launch import RunFileError
    with pytest.raises(RunFileError, match="'sometimes' is not one of auto, on, off"):
        load_run_file(run, p)


def test_liger_auto_is_on_exactly_where_it_can_run():
    from cookbook import liger
    on, why = liger.resolve("auto", model_type="llama", zero_stage=2, on_gpu=True, is_installed=True)
    assert on and why.startswith("auto: on") and "--liger off" in why
    assert liger.resolve("auto", model_type="qwen2", zero_stage=0, on_gpu=True, is_installed=True)[0]
    for kw, reason in ((dict(model_type="llama", zero_stage=2, on_gpu=False, is_installed=True), "no NVIDIA GPU"),
                       (dict(model_type="gpt2", zero_stage=2, on_gpu=True, is_installed=True), "'gpt2'"),
                       (dict(model_type="llama", zero_stage=3, on_gpu=True, is_installed=True), "ZeRO-3"),
                       (dict(model_type="llama", zero_stage=2, on_gpu=True, is_installed=False), "not installed")):
        on, why = liger.resolve("auto", **kw)
        assert not on and why.startswith("auto: off") and reason in why, (kw, why)
        # auto is off exactly where problems() would refuse an explicit --liger on
        assert liger.problems(model_type=kw["model_type"], zero_stage=kw["zero_stage"], on_gpu=kw["on_gpu"],
                              check_install=False) or not kw["is_installed"]
    # explicit values are returned as asked (the caller refuses an impossible "on"); the Python API's bools map
    assert liger.resolve("on", model_type="gpt2", zero_stage=3, on_gpu=False) == (True, "--liger on")
    assert liger.resolve(False, model_type="llama", zero_stage=2, on_gpu=True) == (False, "--liger off")
    with pytest.raises(liger.LigerError, match="--liger 'yes': use one of auto, on, off"):
        liger.resolve("yes", model_type="llama", zero_stage=2, on_gpu=True)


def test_problems_named():
    from cookbook import liger
    assert liger.problems(model_type="llama", zero_stage=2, on_gpu=True, check_install=False) == []
    assert liger.problems(model_type="qwen2", zero_stage=1, on_gpu=True, check_install=False) == []
    (cpu,) = liger.problems(model_type="llama", zero_stage=2, on_gpu=False)
    assert cpu.startswith("--liger:") and "no NVIDIA GPU" in cpu and "does not exist on the CPU rehearsal" in cpu
    (arch,) = liger.problems(model_type="gpt2", zero_stage=2, on_gpu=True, check_install=False)
    assert "'gpt2'" in arch and "llama, qwen2" in arch
    (z3,) = liger.problems(model_type="llama", zero_stage=3, on_gpu=True, check_install=False)
    assert "--zero-stage 3" in z3 and "--zero-stage 2" in z3
    if not liger.installed():  # this CPU environment: liger-kernel is an optional extra
        (missing,) = liger.problems(model_type="llama", zero_stage=2, on_gpu=True)
        assert "liger-kernel is not installed" in missing and "pip install liger-kernel" in missing
        with pytest.raises(liger.LigerError, match="pip install liger-kernel"):
            liger.apply_liger("llama")
    with pytest.raises(liger.LigerError, match="'mistral'"):
        liger.apply_liger("mistral")


def test_train_liger_refused_on_cpu(tmp_path):
    """``cookbook train --liger`` on a CPU-only machine: one message naming --liger, exit 2, no rank started."""
    from cookbook.hardware import on_gpu_machine
    if on_gpu_machine():
        pytest.skip("this machine has an NVIDIA GPU: the CPU refusal does not apply")
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DS_ACCELERATOR="cpu")
    res = subprocess.run([sys.executable, "-m", "cookbook.cli", "train", "--liger", "--zero-stage", "2",
                          "--max-steps", "2", "--output-dir", str(out)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    text = res.stdout + res.stderr
    assert res.returncode == 2, text
    assert "config_error: --liger: Liger's kernels are Triton kernels for CUDA GPUs" in text
    assert "nothing was launched" in text and "Traceback" not in text
    assert not (out / "logs").exists()


def test_launch_without_liger_says_liger_would_fit():
    """A config sized for the lever, launched without it, is refused with the way out named."""
    from cookbook.launch import _guard
    plan = _recipe(32, False).replace(host_memory_gib=125.0)
    cfg = build_config(plan, "accelerate", bf16_states=True)
    _, est, refusals = _guard(plan, cfg, on_gpu=True, bf16_states=True, emulate_gpu_memory_gib=None)
    assert len(refusals) == 1 and "with --liger" in refusals[0] and "and fits" in refusals[0]
    _, est, refusals = _guard(plan.replace(liger=True), cfg, on_gpu=True, bf16_states=True,
                              emulate_gpu_memory_gib=None)
    assert refusals == []


# ---------------------------------------------------------------- linter: --liger and ZenFlow

def test_lint_liger_with_zero3():
    plan = Plan(model="tiny-llama", num_gpus=2, micro_batch=2, zero_stage=3, liger=True)
    report = lint(build_config(plan), plan=plan)
    (f,) = [f for f in report if "--liger" in f.message]
    assert f.severity == "error" and f.path == "zero_optimization.stage" and "stage to 2" in f.fix
    ok = plan.replace(zero_stage=2)
    assert [f for f in lint(build_config(ok), plan=ok) if "liger" in f.message.lower()] == []


def test_lint_liger_other_architecture(tmp_path):
    folder = tmp_path / "tiny-gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                                    "vocab_size": 1000, "n_positions": 128}))
    plan = Plan(model=str(folder), num_gpus=1, micro_batch=2, zero_stage=2, liger=True)
    report = lint(build_config(plan), plan=plan)
    (f,) = [f for f in report if f.path == "(model)" and "--liger" in f.message]
    assert "'gpt2'" in f.message and f.fix == "drop --liger for this model"


def _zero2_offload(**bf16):
    plan = preset_plan("zero2-offload", model="tiny-llama", num_gpus=2, micro_batch=2, grad_accum=1)
    cfg = build_config(plan, bf16_states=bool(bf16))
    return plan, cfg


ZENFLOW = {"topk_ratio": 0.1, "select_strategy": "auto", "select_interval": "auto", "update_interval": 4,
           "overlap_step": True}


@pytest.mark.parametrize("mode", ("deepspeed", "accelerate", "launch"))
def test_zenflow_good_config_is_clean_and_parses(mode):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    plan, cfg = _zero2_offload()
    cfg["zero_optimization"]["zenflow"] = dict(ZENFLOW)
    assert list(lint(cfg, plan=plan, mode=mode)) == []   # ZenFlow's own "auto" is DeepSpeed's value, not a placeholder
    zc = DeepSpeedZeroConfig(**cfg["zero_optimization"])
    assert zc.zenflow.update_interval == 4 and zc.zenflow.select_strategy == "auto"


def _one(report, path):
    hits = [f for f in report if f.path == path]
    assert len(hits) == 1, str(list(report))
    return hits[0]


def test_zenflow_without_offload():
    plan = preset_plan("zero2", model="tiny-llama", num_gpus=2, micro_batch=2, grad_accum=1)
    cfg = build_config(plan)
    cfg["zero_optimization"]["zenflow"] = dict(ZENFLOW)
    f = _one(lint(cfg, plan=plan), "zero_optimization.offload_optimizer.device")
    assert f.severity == "error" and "offload_optimizer missing" in f.message and '"device": "cpu"' in f.fix
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "none"}
    f = _one(lint(cfg, plan=plan), "zero_optimization.offload_optimizer.device")
    assert "device 'none'" in f.message


def test_zenflow_stage_0():
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": 1,
           "zero_optimization": {"stage": 0, "zenflow": dict(ZENFLOW)}}
    report = lint(cfg, world_size=1)
    f = _one(report, "zero_optimization.zenflow")
    assert f.severity == "error" and "stage 0" in f.message and "stage to 2" in f.fix


def test_zenflow_with_bf16_states_refused_as_measured():
    plan, cfg = _zero2_offload(bf16_states=True)
    cfg["zero_optimization"]["zenflow"] = dict(ZENFLOW)
    f = _one(lint(cfg, plan=plan), "bf16.bf16_master_weights_and_grads")
    assert f.severity == "error" and "Master weights feature requires ZeRO-2 Offload with DeepSpeedCPUAdam" in f.message
    assert "to false" in f.fix
    # the same bf16 states without ZenFlow: the recipe, no finding
    del cfg["zero_optimization"]["zenflow"]
    assert list(lint(cfg, plan=plan)) == []


def test_zenflow_offload_needs_overlap_comm():
    plan, cfg = _zero2_offload()
    cfg["zero_optimization"]["zenflow"] = dict(ZENFLOW, offload=True)
    cfg["zero_optimization"]["overlap_comm"] = False
    f = _one(lint(cfg, plan=plan), "zero_optimization.zenflow.offload")
    assert f.severity == "error" and "overlap_comm" in f.fix


def test_lint_cli_liger(tmp_path, capsys):
    cfg = tmp_path / "z3.json"
    plan = Plan(model="tiny-llama", num_gpus=2, micro_batch=1, zero_stage=3)
    cfg.write_text(json.dumps(build_config(plan)))
    base = ["lint", str(cfg), "--model", "tiny-llama", "--world-size", "2", "--micro-batch", "1", "--grad-accum", "1"]
    assert cli.main(base + ["--liger"]) == 1
    assert "zero_optimization.stage 3 with --liger" in capsys.readouterr().out
    assert cli.main(base) == 0


def test_sweep_and_decision_never_offer_liger_under_zero3():
    """Liger's fused loss cannot run under ZeRO-3 (Liger-Kernel #1048): a plan with --liger keeps it on the ZeRO-0/1/2
    variants of the sweep and the decision and drops it, with its smaller logits, on the ZeRO-3 ones."""
    from cookbook import memory
    plan = Plan(model=LLAMA3B, num_gpus=1, gpu_memory_gib=24, host_memory_gib=128, seq_len=1024, micro_batch=24,
                grad_accum=1, precision="bf16", zero_stage=2, offload_optimizer="cpu", liger=True)
    rows = memory.sweep(plan).estimates
    assert {e.plan.liger for e in rows if e.plan.zero_stage == 3} == {False}
    assert {e.plan.liger for e in rows if e.plan.zero_stage < 3} == {True}
    z3 = next(e for e in rows if (e.plan.zero_stage, e.plan.offload_optimizer, e.plan.offload_param) == (3, "cpu", "none"))
    assert z3.gpu_gib == memory.estimate(z3.plan.replace(liger=False)).gpu_gib  # the stock loss's logits
    d = memory.decide(plan)
    assert all(not e.plan.liger for e in d.candidates if e.plan.zero_stage == 3)
    assert d.recommended.plan.zero_stage == 2 and d.recommended.plan.liger
