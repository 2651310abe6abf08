"""The launch helper: run folder, commands, pre-launch guard, classification of real child deaths,
a 2-machine launch over 127.0.0.1, and the training entry's refusal of bad input."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cookbook.launch import classify, launch, machine_commands, tracebacks
from cookbook.plan import Plan


def plan(**kw) -> Plan:
    base = dict(model="tiny-qwen2", num_gpus=2, seq_len=128, micro_batch=4, grad_accum=1, precision="fp32",
                zero_stage=3, gradient_checkpointing=False)
    base.update(kw)
    return Plan(**base)


def test_dry_run_writes_accelerate_yaml_ds_json_and_command(tmp_path):
    res = launch(plan(zero_stage=3, offload_optimizer="cpu", offload_param="cpu"), tmp_path / "run", dry_run=True,
                 progress=False)
    assert res.status == "dry_run", res.message
    run = Path(res.run_dir)
    cfg = yaml.safe_load((run / "accelerate.yaml").read_text())
    assert cfg["distributed_type"] == "DEEPSPEED"
    assert cfg["deepspeed_config"]["deepspeed_config_file"] == str(run / "ds_config.json")
    assert cfg["deepspeed_config"]["zero3_init_flag"] is True
    assert cfg["num_processes"] == 2 and cfg["num_machines"] == 1 and cfg["machine_rank"] == 0
    assert cfg["main_process_ip"] == "127.0.0.1" and isinstance(cfg["main_process_port"], int)
    assert cfg["mixed_precision"] == "no"
    ds = json.loads((run / "ds_config.json").read_text())
    assert ds["train_batch_size"] == 4 * 1 * 2
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert res.command.startswith("accelerate launch --config_file")
    assert "--zero3_save_16bit_model true" in res.command and "-m cookbook.train" in res.command
    assert (run / "command.sh").read_text().count("accelerate launch") == 1
    assert not (run / "logs").exists()  # nothing ran


def test_cli_dry_run_prints_command(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cookbook.cli", "launch", "--dry-run", "--num-processes", "2",
                          "--output-dir", str(tmp_path / "r"), "--no-progress"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "accelerate launch --config_file" in out.stdout and "dry_run" in out.stdout


def test_config_error_caught_before_launch(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
                               "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 3}}))
    res = launch(plan(), tmp_path / "run", config=str(bad), progress=False)
    assert res.status == "config_error"
    assert "train_batch_size" in res.message and "8" in res.message
    assert not (Path(res.run_dir) / "logs").exists()
    unparsable = tmp_path / "bad.json"
    unparsable.write_text('{"zero_optimization": {"stage": 3, "offload_param": {"pin_memory": True}}}')
    res = launch(plan(), tmp_path / "run2", config=str(unparsable), progress=False)
    assert res.status == "config_error" and "not valid JSON" in res.message and "True" in res.message
    assert any("True" in f["message"] for f in res.findings)


def test_estimate_over_memory_refused_unless_forced(tmp_path):
    # 1 TiB host need on purpose: claim a 1 GiB host
    res = launch(plan(host_memory_gib=0.01), tmp_path / "run", progress=False)
    assert res.status == "config_error" and "host RAM" in res.message and "--force" in res.message
    assert not (Path(res.run_dir) / "logs").exists()
    # a dry run writes the commands for another machine: the numbers become a note, not a refusal
    dry = launch(plan(host_memory_gib=0.01), tmp_path / "run", progress=False, dry_run=True)
    assert dry.status == "dry_run" and "host RAM" in dry.message


def test_user_config_decides_the_run_and_is_linted_as_deepspeed_sees_it(tmp_path):
    cfg = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    res = launch(plan(zero_stage=3), tmp_path / "run", config=str(path), dry_run=True, progress=False)
    assert res.status == "dry_run", res.message
    assert "--zero-stage 2" in res.command and "--offload-optimizer cpu" in res.command
    assert "--micro-batch 2" in res.command and "--grad-accum 8" in res.command and "--precision fp32" in res.command
    # batch sizes left to "auto" are never filled: cookbook.train gives Accelerate no dataloader
    del cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]
    path.write_text(json.dumps(cfg))
    res = launch(plan(), tmp_path / "run2", config=str(path), dry_run=True, progress=False)
    assert res.status == "config_error" and "train_micro_batch_size_per_gpu" in res.message
    path.write_text("[1, 2]")
    res = launch(plan(), tmp_path / "run3", config=str(path), dry_run=True, progress=False)
    assert res.status == "config_error"


def test_nvme_without_libaio_refused_before_launch(tmp_path, monkeypatch):
    import cookbook.env
    monkeypatch.setattr(cookbook.env, "_libaio_present", lambda: False)  # CI installs libaio-dev (.ci/run)
    res = launch(plan(zero_stage=3, offload_optimizer="nvme", offload_param="nvme", nvme_path=str(tmp_path / "nv")),
                 tmp_path / "run", progress=False, force=True)
    assert res.status == "config_error" and "libaio" in res.message
    assert not (tmp_path / "nv").exists()


def test_output_dir_that_is_a_file_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    res = launch(plan(), f, progress=False)
    assert res.status == "config_error" and "is a file" in res.message


@pytest.mark.parametrize("kwargs,field", [
    (dict(max_steps=0), "--max-steps"),
    (dict(lr=-1.0), "--lr"),
    (dict(dataset="/nonexistent/data.jsonl"), "not found"),
    (dict(tokenizer="/nonexistent/tok"), "tokenizer"),
])
def test_bad_training_input_refused_with_named_field(tmp_path, kwargs, field):
    res = launch(plan(), tmp_path / "run", progress=False, **kwargs)
    assert res.status == "config_error"
    assert field in res.message


def test_bad_dataset_records_and_vocabulary_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = launch(plan(), tmp_path / "a", dataset=str(empty), progress=False)
    assert res.status == "config_error" and "empty" in res.message
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    res = launch(plan(), tmp_path / "b", dataset=str(wrong), progress=False)
    assert res.status == "config_error" and "instruction" in res.message
    # a model whose embedding is smaller than the tokenizer's vocabulary
    model_dir = tmp_path / "small-vocab"
    model_dir.mkdir()
    cfg = json.loads((Path(__file__).parent.parent / "data/models/tiny-qwen2/config.json").read_text())
    cfg["vocab_size"] = 1000
    (model_dir / "config.json").write_text(json.dumps(cfg))
    res = launch(plan(model=str(model_dir)), tmp_path / "c", progress=False)
    assert res.status == "config_error" and "vocabulary" in res.message
    res = launch(plan(model="no-such-model"), tmp_path / "d", progress=False)
    assert res.status == "config_error" and "not a shipped name" in res.message


def test_plan_refuses_zero_batch():
    from cookbook.plan import PlanError
    with pytest.raises(PlanError, match="micro_batch=0"):
        plan(micro_batch=0)


@pytest.mark.slow
@pytest.mark.parametrize("fault,status", [("oom@1:2", "gpu_oom"), ("kill@0:2", "host_oom"), ("hang@1:2", "hang"),
                                          ("error@1:2", "failed")])
def test_real_child_deaths_are_classified(tmp_path, fault, status):
    os.environ["COOKBOOK_FAULT"] = fault
    try:
        t0 = time.time()
        res = launch(plan(zero_stage=2), tmp_path / "run", max_steps=6, progress=False, hang_timeout_s=20,
                     verify_save="off")
    finally:
        del os.environ["COOKBOOK_FAULT"]
    assert res.status == status, (res.message, res.details.get("traceback"))
    assert time.time() - t0 < 180
    if status == "gpu_oom":
        assert res.details["rank"] == 1 and res.details["tried_to_allocate_gib"] == pytest.approx(20.0)
    if status == "host_oom":
        assert res.details["rank"] == 0 and "OOM killer" in res.message
    if status == "failed":
        assert "injected failure" in res.message  # the real one, not a peer's broken connection
    if status == "hang":
        assert "watchdog" in res.message


@pytest.mark.slow
def test_cpu_device_budget_reproduces_out_of_memory_under_zero2_not_under_offload(tmp_path):
    # tiny-qwen2 holds 354,880 fp32 parameters: ZeRO-2 keeps all of them (1.4 MB) plus a half share of
    # master weights and Adam states per rank; full offload keeps nothing but gradients on the "device".
    budget = 0.002  # GiB
    oom = launch(plan(zero_stage=2), tmp_path / "z2", max_steps=3, emulate_gpu_memory_gib=budget, progress=False,
                 verify_save="off")
    assert oom.status == "gpu_oom", oom.message
    assert oom.details["tried_to_allocate_gib"] > 0
    fits = launch(plan(zero_stage=3, offload_optimizer="cpu", offload_param="cpu"), tmp_path / "z3o", max_steps=3,
                  emulate_gpu_memory_gib=budget, progress=False, verify_save="off")
    assert fits.ok, fits.message


@pytest.mark.slow
def test_two_machines_over_loopback(tmp_path):
    p = plan(zero_stage=3, num_machines=2)
    res = launch(p, tmp_path / "run", max_steps=4, progress=False, hang_timeout_s=300, verify_save="off")
    assert res.ok, (res.message, res.details)
    assert res.summary["world_size"] == 2
    assert res.command.count("accelerate launch") == 2
    cmds = machine_commands(p, tmp_path / "cmds", main_process_ip="10.0.0.1", main_process_port=29555)
    assert len(cmds) == 2
    for k, c in enumerate(cmds):
        cfg = yaml.safe_load(Path(c.split("--config_file ")[1].split()[0]).read_text())
        assert cfg["machine_rank"] == k and cfg["num_machines"] == 2 and cfg["num_processes"] == 2
        assert cfg["main_process_ip"] == "10.0.0.1" and cfg["main_process_port"] == 29555
        assert cfg["deepspeed_config"]["deepspeed_multinode_launcher"] == "standard"


def test_first_real_traceback_is_picked(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("Traceback (most recent call last):\n  File \"x\", line 1\n"
                                    "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer\n")
    (logs / "rank1.log").write_text("Traceback (most recent call last):\n  File \"y\", line 2\n"
                                    "ValueError: the real cause\n")
    (logs / "launcher.log").write_text("")
    status, message, details = classify(tmp_path, 1, False, 10, None)
    assert status == "failed" and "the real cause" in message and details["log"] == "rank1"
    assert len(tracebacks((logs / "rank1.log").read_text())) == 1
