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
    assert res.world_size == 2 and res.to_frame().loc["world_size", "value"] == 2  # the plan's, no summary
    assert "measured" not in res.to_frame().index  # nothing was launched: no "ended before its summary" row
    # a dry run writes the commands for another machine: the numbers become a note, not a refusal
    dry = launch(plan(host_memory_gib=0.01), tmp_path / "run", progress=False, dry_run=True)
    assert dry.status == "dry_run" and "host RAM" in dry.message


def test_user_config_decides_what_was_not_stated_and_refuses_what_disagrees(tmp_path):
    cfg = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    # nothing stated: the config decides the ZeRO stage, offload, batch shape (and so the world size, 32 / (2 × 8))
    res = launch(plan(zero_stage=3), tmp_path / "run", config=str(path), dry_run=True, progress=False, stated=())
    assert res.status == "dry_run", res.message
    assert "--zero-stage 2" in res.command and "--offload-optimizer cpu" in res.command
    assert "--micro-batch 2" in res.command and "--grad-accum 8" in res.command and "--precision fp32" in res.command
    assert {r["path"] for r in res.details["filled"] if r["how"] == "kept"} >= {
        "zero_optimization.stage", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}
    # from Python, plan fields set away from their defaults are stated: the config disagrees -> refused, naming both
    res = launch(plan(zero_stage=3), tmp_path / "run1", config=str(path), dry_run=True, progress=False)
    assert res.status == "config_error"
    assert "zero_optimization.stage is 2 in ds.json, but zero_stage=3 was given" in res.message
    assert "train_micro_batch_size_per_gpu is 2 in ds.json, but micro_batch=4" in res.message
    assert not (tmp_path / "run1" / "ds_config.json").exists()
    # batch sizes the config leaves out are filled from the plan (as the Trainer's data loader would)
    del cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]
    cfg["gradient_accumulation_steps"] = 1
    path.write_text(json.dumps(cfg))
    res = launch(plan(), tmp_path / "run2", config=str(path), dry_run=True, progress=False, stated={"micro_batch"})
    assert res.status == "dry_run", res.message
    run = Path(res.run_dir)
    ds = json.loads((run / "ds_config.json").read_text())
    assert ds["train_micro_batch_size_per_gpu"] == 4 and "train_batch_size" not in ds
    assert json.loads((run / "ds_config.original.json").read_text()) == cfg
    path.write_text("[1, 2]")
    res = launch(plan(), tmp_path / "run3", config=str(path), dry_run=True, progress=False)
    assert res.status == "config_error" and "cannot be used" in res.message


TEMPLATES = Path(__file__).parent / "fixtures" / "templates"  # sources: fixtures/templates/SOURCES.md


def test_template_filled_in_the_run_folder_beside_the_original(tmp_path, capsys):
    src = TEMPLATES / "llamafactory_ds_z3_offload_config.json"
    res = launch(plan(micro_batch=2), tmp_path / "run", config=str(src), dry_run=True, progress=False,
                 max_steps=10, stated={"micro_batch", "num_gpus", "max_steps"})
    assert res.status == "dry_run", res.message
    printed = capsys.readouterr().out
    assert "filled for this run" in printed and "hidden_size² = 64²" in printed
    run = Path(res.run_dir)
    assert json.loads((run / "ds_config.original.json").read_text()) == json.loads(src.read_text())
    ds = json.loads((run / "ds_config.json").read_text())
    # tiny-qwen2: h = 64; micro 2 × accumulation 1 × 2 ranks; 10 steps, warm-up 5% -> max(1, 0) = 1
    assert ds["train_batch_size"] == 4 and ds["gradient_clipping"] == 1.0
    assert ds["zero_optimization"]["reduce_bucket_size"] == 64 * 64
    assert ds["zero_optimization"]["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64) == 3686
    assert ds["zero_optimization"]["stage3_param_persistence_threshold"] == 640
    assert ds["scheduler"]["params"] == {"warmup_min_lr": 0, "warmup_max_lr": 3e-3, "warmup_num_steps": 1,
                                         "total_num_steps": 10, "warmup_type": "linear"}
    filled = json.loads((run / "ds_config.filled.json").read_text())["filled"]
    assert {r["path"] for r in filled if r["how"] == "auto"} == {
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
        "fp16.enabled", "bf16.enabled", "zero_optimization.reduce_bucket_size",
        "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold"}
    cfg = yaml.safe_load((run / "accelerate.yaml").read_text())
    assert cfg["deepspeed_config"]["deepspeed_config_file"] == str(run / "ds_config.json")


def test_cli_conflict_names_the_flag_and_the_key(tmp_path):
    src = TEMPLATES / "accelerate_zero_stage3_offload_config.json"
    out = subprocess.run([sys.executable, "-m", "cookbook.cli", "launch", "--config", str(src), "--grad-accum", "4",
                          "--dry-run", "--output-dir", str(tmp_path / "r"), "--no-progress"],
                         capture_output=True, text=True)
    assert out.returncode == 2, out.stdout + out.stderr
    assert ("gradient_accumulation_steps is 1 in accelerate_zero_stage3_offload_config.json, but --grad-accum 4 "
            "was given") in out.stdout
    assert 'set gradient_accumulation_steps to "auto"' in out.stdout and "grad_accum" not in out.stdout
    out = subprocess.run([sys.executable, "-m", "cookbook.cli", "launch", "--num-processes", "0", "--dry-run",
                          "--output-dir", str(tmp_path / "r")], capture_output=True, text=True)
    assert out.returncode == 2 and "--num-processes 0" in out.stderr and "num_gpus" not in out.stderr


def test_fp16_on_a_cpu_rehearsal_refused_before_launch(tmp_path):
    from cookbook.launch import on_gpu_machine
    from cookbook.lint import cpu_fp16_supported
    if on_gpu_machine() or cpu_fp16_supported():
        pytest.skip("this machine computes in fp16")
    res = launch(plan(micro_batch=2), tmp_path / "run", config=str(TEMPLATES / "accelerate_zero_stage3_offload_config.json"),
                 progress=False, stated={"micro_batch"})
    assert res.status == "config_error" and "Type fp16 is not supported on your device" in res.message
    assert 'fp16.enabled to "auto"' in res.message
    assert not (Path(res.run_dir) / "logs").exists()


def test_nvme_with_bf16_states_refused_before_launch(tmp_path):
    nv = str(tmp_path / "nv")
    p = plan(zero_stage=3, offload_optimizer="nvme", offload_param="nvme", nvme_path=nv, precision="bf16")
    res = launch(p, tmp_path / "run", bf16_states=True, progress=False, force=True)
    assert res.status == "config_error" and "assert dtype == self.dtype" in res.message
    assert "--bf16-states" not in res.message and "bf16_states" in res.message  # Python's words from Python
    cfg = {"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True, "bf16_master_weights_and_grads": True,
                                                          "bf16_optimizer_states": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": nv}}}
    res = launch(p, tmp_path / "run2", config=cfg, progress=False, force=True, stated=())
    assert res.status == "config_error" and "assert dtype == self.dtype" in res.message
    assert not (tmp_path / "run2" / "logs").exists() and not (tmp_path / "nv").exists()


@pytest.mark.parametrize("name", ["llamafactory_ds_z2_config.json", "transformers_docs_zero3_nvme.json",
                                  "accelerate_zero_stage2_config.json"])
def test_lint_and_launch_agree(tmp_path, name, capsys):
    from cookbook import cli
    src = str(TEMPLATES / name)
    code = cli.main(["lint", src])
    capsys.readouterr()
    res = launch(plan(), tmp_path / "run", config=src, dry_run=True, progress=False, stated=())
    assert (code == 0) == (res.status == "dry_run"), (code, res.status, res.message)


def test_nvme_without_libaio_refused_before_launch(tmp_path, monkeypatch):
    import cookbook.hardware
    monkeypatch.setattr(cookbook.hardware, "libaio_present", lambda: False)  # CI installs libaio-dev (.ci/run)
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
    (dict(dataset_fields="messages=dialog"), "--dataset-fields maps messages=dialog"),
    (dict(chat_template="/nonexistent/t.jinja"), "--chat-template"),
    (dict(dataset="nobody/not-cached"), "never downloads"),
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
    res = launch(plan(model=str(model_dir)), tmp_path / "c", progress=False, tokenizer="shipped", lr=1e-3,
                 max_steps=3)
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
        assert "--zero-stage 3" in res.message and res.world_size == 2  # the advice is the plan's (ZeRO-2, 2 ranks)
    if status == "host_oom":
        assert res.details["rank"] == 0 and "OOM killer" in res.message
    if status == "failed":
        assert "injected failure" in res.message  # the real one, not a peer's broken connection
    if status == "hang":
        assert "watchdog" in res.message


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


def _check_ran_as_resolved(res, run_dir: Path):
    assert res.ok, (res.message, res.details.get("traceback"))
    assert res.summary["steps"] == 3 and res.summary["world_size"] == 2
    got = res.summary["deepspeed_config"]  # the config the ranks' DeepSpeed engine was built with
    assert "auto" not in json.dumps(got)
    # tiny-qwen2 (h = 64) on 2 ranks, micro batch 2, accumulation 1: computed by hand
    assert (got["train_micro_batch_size_per_gpu"], got["gradient_accumulation_steps"]) == (2, 1)
    assert got.get("train_batch_size", 4) == 4  # the docs' example has none: DeepSpeed computes 2 × 1 × 2
    z = got["zero_optimization"]
    assert (z["stage"], z["reduce_bucket_size"], z["stage3_prefetch_bucket_size"], z["stage3_param_persistence_threshold"]) \
        == (3, 4096, 3686, 640)
    assert z["offload_optimizer"]["device"] == "cpu" and z["offload_param"]["device"] == "cpu"
    assert got["scheduler"]["params"]["total_num_steps"] == 3
    assert json.loads((run_dir / "ds_config.json").read_text())["zero_optimization"] == z


# One template run from Python, one from the CLI (Accelerate's, below): LLaMA-Factory's ZeRO-3 offload template
# resolves to the same zero_optimization block value by value and passes DeepSpeed's parser
# (tests/test_dsconfig.py::test_templates_resolve_value_by_value, ::test_resolved_templates_pass_deepspeeds_parser),
# so a third real run would prove nothing the two here do not.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformers_docs_zero3.json"])
def test_zero3_offload_templates_run_for_real(tmp_path, name):
    res = launch(plan(micro_batch=2), tmp_path / "run", config=str(TEMPLATES / name), max_steps=3, progress=False,
                 verify_save="off", hang_timeout_s=300, stated={"micro_batch", "num_gpus", "max_steps"})
    _check_ran_as_resolved(res, tmp_path / "run")


@pytest.mark.slow
def test_accelerate_zero3_offload_template_runs_from_the_cli(tmp_path):
    """Accelerate's template as a user pastes it into `cookbook launch --config`. On a CPU without fp16 the one
    change is the one the refusal asks for (fp16.enabled "auto", filled from the precision)."""
    from cookbook.launch import on_gpu_machine
    from cookbook.lint import cpu_fp16_supported
    src = TEMPLATES / "accelerate_zero_stage3_offload_config.json"
    if not (on_gpu_machine() or cpu_fp16_supported()):
        cfg = json.loads(src.read_text())
        cfg["fp16"]["enabled"] = "auto"
        src = tmp_path / src.name
        src.write_text(json.dumps(cfg, indent=4))
    out = subprocess.run([sys.executable, "-m", "cookbook.cli", "launch", "--config", str(src), "--micro-batch", "2",
                          "--max-steps", "3", "--seq-len", "128", "--verify-save", "off", "--no-progress",
                          "--hang-timeout", "300", "--output-dir", str(tmp_path / "run"), "--json"],
                         capture_output=True, text=True)
    res = json.loads(out.stdout)
    assert out.returncode == 0, (res["message"], out.stderr[-3000:])
    assert "filled for this run" in out.stderr and "--micro-batch 2" in out.stderr  # the table (stderr under --json)
    rows = {r["path"]: r for r in res["details"]["filled"]}
    assert rows["optimizer.params.lr"]["value"] == 3e-3 and "--lr 0.003 (default)" in rows["optimizer.params.lr"]["from"]
    assert rows["zero_optimization.stage3_gather_16bit_weights_on_model_save"]["value"] is True

    class R:  # the JSON result read back as the fields _check_ran_as_resolved uses
        ok = res["status"] == "ok"
        message, details, summary = res["message"], res["details"], res["summary"]
    _check_ran_as_resolved(R, tmp_path / "run")


def test_progress_outside_a_terminal_is_a_few_lines_not_redrawn_bars(tmp_path, capfd):
    """A notebook cell (papermill) or a pipe keeps every tqdm redraw: there the launch prints a plain line
    every tenth of the run; a terminal keeps the one-line bar (cookbook.hardware.terminal_progress)."""
    from cookbook import hardware
    from cookbook.launch import _run_and_watch
    from cookbook.train import STEP_PREFIX
    logs = tmp_path / "logs"
    logs.mkdir()
    steps = 40
    script = ("import json, time\n"
              f"with open({str(logs / 'rank0.log')!r}, 'a') as f:\n"
              f"    for s in range(1, {steps + 1}):\n"
              f"        f.write({STEP_PREFIX!r} + json.dumps({{'step': s, 'loss': 5.0 - s / 100, 'tokens_per_s': 100.0}}) + '\\n')\n"
              "        f.flush(); time.sleep(0.03)\n"
              "time.sleep(1.5)\n")  # a real rank logs on after its last step (save, summary)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    assert not hardware.terminal_progress(sys.stderr)  # pytest captures: not a terminal
    code, hung, ended = _run_and_watch([[sys.executable, "-c", script]], env, logs, 60, True, steps, 60)
    err = capfd.readouterr().err
    assert code == 0 and not hung and ended is None
    assert "\r" not in err and "it/s" not in err and "step/s" not in err  # no tqdm redraws
    lines = [l for l in err.splitlines() if l.startswith("training:")]
    assert lines[0] == f"training: {steps} steps; a line every 4 step(s) (not a terminal: no live bar)"
    assert lines[1:] == [f"training: step {s}/{steps}, loss {5.0 - s / 100:.3f}, tok_s 100" for s in range(4, 41, 4)]


def test_datasets_bars_stay_out_of_a_notebook(tmp_path, capfd):
    from cookbook.data import load_records
    path = tmp_path / "d.csv"
    path.write_text("instruction,input,output\nSay a,,a\nSay b,,b\n")
    assert len(load_records(path)) == 2
    assert "Generating train split" not in capfd.readouterr().err
    import datasets
    assert not datasets.are_progress_bars_disabled()  # the caller's setting is restored


def test_transformers_loading_bar_stays_out_of_a_notebook(tmp_path, capfd):
    """from_pretrained's "Loading weights" tqdm bar (transformers 5) is kept as text by papermill: off outside a
    terminal, on in one, transformers' own setting restored after and its warnings still shown."""
    import io
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    from cookbook import hardware
    from cookbook.models import DATA_DIR
    folder = tmp_path / "tiny"
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(DATA_DIR / "models" / "tiny-llama")).save_pretrained(folder)
    capfd.readouterr()
    assert hf_logging.is_progress_bar_enabled()
    AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    assert "Loading weights" in capfd.readouterr().err  # the bar this guards against (the test can fail)
    import logging
    seen = io.StringIO()  # transformers' own handler keeps the stream of whichever test created it: our own
    handler = logging.StreamHandler(seen)
    hf_logging.get_logger("transformers").addHandler(handler)
    try:
        with hardware.quiet_loading_bars() as quiet:  # pytest captures stderr: not a terminal
            assert quiet and not hf_logging.is_progress_bar_enabled()
            AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
            hf_logging.get_logger("transformers").warning("still warned")
    finally:
        hf_logging.get_logger("transformers").removeHandler(handler)
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "still warned" in seen.getvalue()
    assert hf_logging.is_progress_bar_enabled()  # restored

    class Tty(io.StringIO):
        def isatty(self):
            return True
    with hardware.quiet_loading_bars(Tty()) as quiet:  # a terminal keeps the bar
        assert not quiet and hf_logging.is_progress_bar_enabled()


def test_python_caller_plan_is_not_called_a_rehearsal_default(tmp_path, capsys):
    """A Plan built in Python (a notebook) chose its shape on purpose: no "[plan] note: ... are the defaults"
    (the note is for the command line, where launch knows what was typed)."""
    from cookbook.launch import launch
    from cookbook.plan import Plan
    plan = Plan(model="llama-7b", num_gpus=1, seq_len=512, micro_batch=1, grad_accum=4, zero_stage=3,
                offload_optimizer="cpu", offload_param="cpu")
    res = launch(plan, tmp_path / "run", dry_run=True, random_weights=True, lr=1e-5, max_steps=2, force=True)
    assert res.status == "dry_run"
    assert "[plan] note" not in capsys.readouterr().out
    # with a config too (notebook 05 on the H200 printed the note: values equal to the defaults were taken
    # for defaults because, with a config, launch infers what was stated from values that differ from them)
    from cookbook.dsconfig import build_config
    res = launch(plan, tmp_path / "run2", config=build_config(plan, lr=1e-5), dry_run=True, random_weights=True, lr=1e-5,
                 max_steps=2, force=True)
    assert res.status == "dry_run", res.message
    assert "[plan] note" not in capsys.readouterr().out


def test_bf16_states_on_a_real_model_prints_the_measured_cost(tmp_path, capsys):
    """--bf16-states on a real-size model: the console says what bf16 master weights cost, with the measured
    numbers of data/reference/h200_quality_2026-12-02.json (its last-20 means, read here from that file); without
    it, or on a rehearsal model (where nothing is a fine-tune), no such note."""
    from cookbook.memory import BF16_STATES_COST
    ref = json.loads((Path(__file__).resolve().parent.parent / "data" / "reference" /
                      "h200_quality_2026-12-02.json").read_text())["last20_mean_loss"]
    assert f"loss {ref['bf16_states']:.2f} vs {ref['exact_adam']:.2f}" in BF16_STATES_COST
    assert f"+{100 * (ref['bf16_states'] / ref['exact_adam'] - 1):.0f}%" in BF16_STATES_COST
    p7 = Plan(model="llama-7b", num_gpus=1, seq_len=512, micro_batch=1, grad_accum=4, zero_stage=3,
              offload_optimizer="cpu", offload_param="cpu", precision="bf16")
    for kw, run, expect in ((dict(bf16_states=True), "a", True), (dict(bf16_states=False), "b", False)):
        res = launch(p7, tmp_path / run, dry_run=True, random_weights=True, lr=1e-5, max_steps=2, force=True, **kw)
        assert res.status == "dry_run", res.message
        out = capsys.readouterr().out
        assert ("[precision] note: --bf16-states: " + BF16_STATES_COST in out) is expect, out[-2000:]
    res = launch(plan(precision="bf16", zero_stage=2, offload_optimizer="cpu"), tmp_path / "c", dry_run=True,
                 bf16_states=True, progress=False)
    assert res.status == "dry_run", res.message
    assert "--bf16-states: bf16 master weights" not in capsys.readouterr().out


def test_more_ranks_than_gpus_is_refused_before_launch(tmp_path, monkeypatch):
    """On a 1-GPU box, 2 ranks would die in torch.cuda.set_device ("invalid device ordinal", seen on the H200
    on 2026-12-01): launch refuses first, naming --num-processes, the GPUs here and the fix. The GPU count is
    NVML's (patched here: this machine has none); nothing of DeepSpeed is involved before the refusal."""
    from cookbook import hardware
    from cookbook import launch as L
    from cookbook.plan import Plan
    monkeypatch.setattr(L, "on_gpu_machine", lambda: True)
    monkeypatch.setattr(hardware, "gpu_count", lambda: 1)
    res = L.launch(Plan(model="tiny-llama", num_gpus=2, seq_len=64, micro_batch=2, precision="fp32"),
                   tmp_path / "run", max_steps=2, lr=3e-3)
    assert res.status == "config_error"
    assert "--num-processes 2: this machine has 1 GPU(s)" in res.message and "--num-processes 1" in res.message
    assert hardware.default_num_processes(num_machines=2) == 2   # 1 GPU × 2 machines
    monkeypatch.setattr(hardware, "gpu_count", lambda: 0)
    assert hardware.default_num_processes() == 2                 # no GPU: the 2-rank CPU rehearsal


def test_default_world_size_note_keeps_json_stdout_clean(tmp_path):
    """Without --num-processes the CLI says which world size it chose; under --json that note goes to stderr so
    stdout stays one JSON document (a caller's json.loads(stdout) broke on it once)."""
    out = subprocess.run([sys.executable, "-m", "cookbook.cli", "train", "--model", "tiny-llama", "--max-steps", "2",
                          "--dry-run", "--json", "--output-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    res = json.loads(out.stdout)
    assert res["status"] == "dry_run", res
    assert "[plan] world size 2 (default: 2 CPU ranks, the rehearsal" in out.stderr


# ----------------------------------------------------------------------------------------------
# the out-of-memory message: advice true for the run (issue 17), built without DeepSpeed

def _oom_logs(tmp_path, text="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.73 GiB. GPU 0 has a "
                             "total capacity of 24.00 GiB of which 1.25 GiB is free."):
    logs = tmp_path / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "rank0.log").write_text("Traceback (most recent call last):\n  File \"x\", line 1\n" + text + "\n")
    (logs / "launcher.log").write_text("")
    return tmp_path


def _oom_message(tmp_path, on_gpu=True, **kw):
    p = Plan(model="qwen2-14b-share8", seq_len=512, **{"num_gpus": 1, "micro_batch": 1, "grad_accum": 4, **kw})
    status, message, details = classify(_oom_logs(tmp_path), 1, False, 10, {"gpu_gib": {"total": 32.8}}, p, on_gpu)
    assert status == "gpu_oom" and details["tried_to_allocate_gib"] == pytest.approx(3.73)
    assert message.startswith("rank 0 ran out of GPU memory trying to allocate 3.73 GiB; the estimate was 32.8 GiB")
    return message


def test_oom_advice_for_zero3_is_offload_not_the_next_stage(tmp_path):
    msg = _oom_message(tmp_path, zero_stage=3)  # 03 on one GPU: ZeRO-3, micro batch 1, checkpointing on
    assert "--zero-stage" not in msg and "stage 3" not in msg
    assert msg.index("--offload-optimizer cpu") < msg.index("--offload-param cpu")  # optimizer first
    assert "--micro-batch is already 1" in msg and "--gradient-checkpointing is already on" in msg
    assert "--micro-batch 0" not in msg and "lower the micro batch" not in msg.lower()
    msg = _oom_message(tmp_path, zero_stage=3, offload_optimizer="cpu")
    assert "--offload-param cpu" in msg and "next: --offload-optimizer" not in msg
    msg = _oom_message(tmp_path, zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    assert "next:" not in msg and "ladder is at its end" in msg


def test_oom_advice_for_zero2_names_the_next_stage_and_the_batch_levers_left(tmp_path):
    # 8 ranks, micro batch 4, no checkpointing: every lever is open; the global batch 4 × 2 is kept at 2 × 4
    msg = _oom_message(tmp_path, zero_stage=2, num_gpus=8, micro_batch=4, grad_accum=2, gradient_checkpointing=False)
    assert "--zero-stage 3" in msg and msg.index("--zero-stage 3") < msg.index("--offload-optimizer cpu") \
        < msg.index("--offload-param cpu")
    assert "--micro-batch 2 with --grad-accum 4" in msg
    assert "--gradient-checkpointing (" in msg and "already" not in msg
    # an odd micro batch goes to 1, accumulation × 3 keeps the global batch
    assert "--micro-batch 1 with --grad-accum 6" in _oom_message(tmp_path, zero_stage=2, num_gpus=8, micro_batch=3,
                                                                 grad_accum=2)


def test_oom_advice_on_one_rank_says_a_stage_alone_barely_helps(tmp_path):
    msg = _oom_message(tmp_path, zero_stage=2)  # 02 on one GPU
    assert "One rank" in msg and "Next ZeRO step" not in msg
    assert msg.index("--offload-optimizer cpu") < msg.index("--zero-stage 3 with --offload-param cpu")
    assert "the batch levers are used up" in msg


def test_oom_advice_in_the_cpu_rehearsal_does_not_offer_batch_levers(tmp_path):
    # the rehearsal's device budget counts model states only (cookbook.train.check_device_budget)
    msg = _oom_message(tmp_path, on_gpu=False, zero_stage=2, num_gpus=2, micro_batch=4)
    assert "--zero-stage 3" in msg and "--micro-batch 2" not in msg and "counts model states only" in msg


def test_result_card_of_an_oom_shows_the_planned_world_size_and_no_none(tmp_path):
    from cookbook.launch import RunResult
    r = RunResult(status="gpu_oom", message="rank 0 ran out of GPU memory", run_dir=str(tmp_path), command="x",
                  returncode=1, summary=None, details={"rank": 0, "tried_to_allocate_gib": 0.13, "signal": None,
                                                       "env_added": {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "16"}},
                  world_size=8)
    frame = r.to_frame()
    assert frame.loc["world_size", "value"] == 8
    assert frame.loc["env_added", "value"] == "HF_HUB_OFFLINE=1, OMP_NUM_THREADS=16"  # a line, not a dict
    assert "steps" not in frame.index and "tokens_per_s" not in frame.index and "signal" not in frame.index
    assert frame.loc["measured", "value"].startswith("nothing: the run ended before it wrote its summary")
    html = r._repr_html_()
    assert "None" not in html and "nan" not in html.lower()
    # a measured summary wins over the plan, and its numbers are shown
    ok = RunResult(status="ok", message="3 steps", run_dir=str(tmp_path), command="x", returncode=0,
                   summary={"world_size": 2, "steps": 3, "first_loss": 12.4, "last_loss": 12.3}, world_size=8)
    f = ok.to_frame()
    assert f.loc["world_size", "value"] == 2 and f.loc["steps", "value"] == 3 and "measured" not in f.index


def test_a_compiling_op_is_start_up_progress_and_a_hang_names_its_limit(tmp_path):
    """A cold DeepSpeed op build (torch's cpp_extension holds a `lock` file in the op's folder and writes its
    objects there) can outlast the start-up limit on a loaded machine: the watchdog counts the build folder's
    writes as progress (a fresh user's notebook 06 NVMe run was killed mid-compile of async_io). Without a
    build, the same silence is a hang whose message names the limit that ran out and the phase."""
    from cookbook.launch import _run_and_watch, classify
    logs = tmp_path / "logs"
    logs.mkdir()
    ext = tmp_path / "ext"
    op = ext / "async_io"
    op.mkdir(parents=True)
    (op / "lock").write_text("")
    # the "rank": silent for 4 s while it "compiles" (writes an object every 0.3 s), then one step and exit
    script = ("import time, pathlib\n"
              f"op = pathlib.Path({str(op)!r})\n"
              "for i in range(13):\n"
              "    (op / f'obj{i}.o').write_text('x'); time.sleep(0.3)\n"
              "(op / 'lock').unlink()\n"
              f"open({str(logs / 'rank0.log')!r}, 'a').write('done\\n')\n")
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(ext))
    start = time.time()
    code, hung, ended = _run_and_watch([[sys.executable, "-c", script]], env, logs, 60, False, 1, 1.5)
    assert code == 0 and not hung and ended is None and time.time() - start > 3.5   # 4 s > the 1.5 s limit
    # the same silence without a build: a hang before the first step, after the 1.5 s start-up limit
    code, hung, ended = _run_and_watch([[sys.executable, "-c", "import time; time.sleep(30)"]], env, logs, 60,
                                       False, 1, 1.5)
    assert hung == {"limit_s": 1.5, "phase": "startup"}
    status, message, details = classify(tmp_path, code, hung, 60, None, on_gpu=False)
    assert status == "hang" and details == {"hang_timeout_s": 1.5, "phase": "startup"}
    assert message.startswith("no output from rank 0 for 2 s before its first training step")
    assert "--startup-timeout" in message and "NCCL" not in message                  # no GPU: no NCCL advice


def test_pinned_openmp_threads_with_cpu_adam_warn_before_launch_and_do_not_refuse(tmp_path, monkeypatch, capsys):
    """OMP_PROC_BIND in the env the ranks inherit (os.environ, or launch(env=...)) with the optimizer on the CPU: one
    `[env] warning:` line, env.cpu_adam_binding_warning's text (docs/benchmarks.md §14), and the run still goes on."""
    from cookbook.env import cpu_adam_binding_warning
    for name in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"):
        monkeypatch.delenv(name, raising=False)
    offload = plan(zero_stage=2, offload_optimizer="cpu")
    monkeypatch.setenv("OMP_PROC_BIND", "close")
    res = launch(offload, tmp_path / "a", dry_run=True, progress=False)
    assert res.status == "dry_run", res.message
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("[env] warning:")]
    assert lines == [cpu_adam_binding_warning({"OMP_PROC_BIND": "close"}, offload)]
    assert "OMP_PROC_BIND=close" in lines[0] and "10.7× slower" in lines[0] and "unset OMP_PROC_BIND" in lines[0]
    # no optimizer offload: no line; OMP_PROC_BIND=false with places given through launch(env=...): no line either
    res = launch(plan(zero_stage=2), tmp_path / "b", dry_run=True, progress=False)
    assert res.status == "dry_run" and "[env] warning" not in capsys.readouterr().out
    monkeypatch.setenv("OMP_PROC_BIND", "false")
    res = launch(offload, tmp_path / "c", dry_run=True, progress=False, env={"OMP_PLACES": "cores"})
    assert res.status == "dry_run" and "[env] warning" not in capsys.readouterr().out
    # the places given to the ranks through launch(env=...) count, as the ranks inherit them
    monkeypatch.delenv("OMP_PROC_BIND")
    res = launch(offload, tmp_path / "d", dry_run=True, progress=False, env={"OMP_PLACES": "cores"})
    assert res.status == "dry_run" and "[env] warning: omp_binding: OMP_PLACES=cores" in capsys.readouterr().out


def test_ok_line_says_resumed_from_step(tmp_path):
    """Issue 31 item 4: a resumed run says "resumed from step N" on the console's outcome line."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "launcher.log").write_text("")
    summary = {"status": "ok", "world_size": 2, "steps": 12, "first_loss": 7.1, "last_loss": 6.2, "tokens_per_s": 900.0,
               "seq_len": 128, "packing": False, "resumed_from": str(tmp_path / "checkpoints" / "step-00000006")}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    status, message, _ = classify(tmp_path, 0, False, 10, None)
    assert status == "ok" and message == "resumed from step 6; 12 steps on 2 ranks: loss 7.100 → 6.200, 900 tokens/s"
    (tmp_path / "summary.json").write_text(json.dumps({**summary, "resumed_from": None}))
    assert classify(tmp_path, 0, False, 10, None)[1].startswith("12 steps on 2 ranks")


def test_values_from_the_users_config_are_not_called_defaults(tmp_path, capsys):
    """`cookbook launch --config` with micro 4 × accumulation 8 in the file: only what neither the command line nor
    the config set (--seq-len) is called the default (issue 31 item 4)."""
    from cookbook import cli
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8, "train_batch_size": 32,
           "bf16": {"enabled": False}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                            "offload_param": {"device": "cpu"}}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    rc = cli.main(["launch", "--config", str(path), "--model", "llama-7b", "--random-weights", "--lr", "1e-5",
                   "--max-steps", "2", "--num-processes", "1", "--dry-run", "--force",
                   "--output-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert rc == 0, out
    note = next(line for line in out.splitlines() if line.startswith("[plan] note"))
    assert "--seq-len 128 is the default" in note   # cookbook train/launch's --seq-len default (train.py)
    assert "--micro-batch" not in note and "--grad-accum" not in note
