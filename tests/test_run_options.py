"""A real run's options: run files and command-line precedence, the learning rate and length a real
model must be given, schedules, the shipped run files, what the console says is real, and the
refusals that replaced silent fallbacks (random weights on a GPU box, a model folder without a
tokenizer, fp16 on the CPU rehearsal). Dry runs only: nothing is launched here."""
import argparse
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from cookbook import checkpoint as ckpt
from cookbook.cli import main
from cookbook.launch import RESOLVED_FILE, launch, load_run_file, _add_launch_arguments
from cookbook.plan import Plan
from cookbook.train import TrainInputError, add_train_arguments, validate_inputs

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_RECORDS = 3000  # data/instructions.jsonl (data/README.md)
INSTRUCTIONS = Path(__file__).resolve().parent.parent / "data" / "instructions.jsonl"


def plan(**kw) -> Plan:
    base = dict(model="tiny-qwen2", num_gpus=2, seq_len=128, micro_batch=4, grad_accum=1, precision="fp32",
                zero_stage=3, gradient_checkpointing=False)
    base.update(kw)
    return Plan(**base)


def train_args(*argv):
    p = argparse.ArgumentParser()
    add_train_arguments(p)
    return p.parse_args(list(argv))


# ---- run files ------------------------------------------------------------------------------

def test_run_file_values_and_command_line_precedence(tmp_path, capsys):
    run = tmp_path / "run.yaml"
    run.write_text("lr: 1e-4\nmax-steps: 7\nmicro_batch: 2\nno-final-save: true\nlr_scheduler: cosine\n"
                   "warmup-steps: 2\ngradient-checkpointing: false\n")
    out = tmp_path / "out"
    rc = main(["launch", str(run), "--dry-run", "--max-steps", "5", "--output-dir", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr()
    resolved = yaml.safe_load((out / RESOLVED_FILE).read_text())
    assert resolved["lr"] == 1e-4                      # from the file ("1e-4" is a string to YAML 1.1)
    assert resolved["max-steps"] == 5                  # the command line wins
    assert resolved["micro-batch"] == 2 and resolved["final-save"] is False
    assert resolved["lr-scheduler"] == "cosine" and resolved["warmup-steps"] == 2
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["optimizer"]["params"]["lr"] == 1e-4
    assert ds["scheduler"] == {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 5, "warmup_min_ratio": 0.0, "warmup_num_steps": 2, "cos_min_ratio": 0.0,
        "warmup_type": "linear"}}
    # the resolved file is itself a run file: it loads with `cookbook train`'s options and gives the same run
    p = argparse.ArgumentParser(prog="cookbook train")
    _add_launch_arguments(p, with_config=False)
    again = load_run_file(out / RESOLVED_FILE, p)
    assert again["max_steps"] == 5 and again["lr"] == 1e-4 and again["final_save"] is False
    out2 = tmp_path / "out2"
    assert main(["train", str(out / RESOLVED_FILE), "--dry-run", "--output-dir", str(out2), "--no-progress"]) == 0
    assert json.loads((out2 / "ds_config.json").read_text())["scheduler"] == ds["scheduler"]


@pytest.mark.parametrize("text,message", [
    ("learning_rate: 1e-5\n", "unknown key 'learning_rate' (did you mean 'lr'?)"),
    ("learnig_rate: 1e-5\n", "unknown key 'learnig_rate' (did you mean 'lr'?)"),   # a typo of another tool's name
    ("max-step: 3\n", "unknown key 'max-step' (did you mean 'max-steps'?)"),
    ("zero-stage: 5\n", "zero-stage: 5 is not one of 0, 1, 2, 3"),
    ("micro-batch: two\n", "micro-batch: 'two' is not an integer"),
    ("bf16-states: maybe\n", "bf16-states: 'maybe' is not true or false"),
    ("- lr\n", "must be a mapping"),
])
def test_run_file_errors_name_the_key(tmp_path, capsys, text, message):
    run = tmp_path / "bad.yaml"
    run.write_text(text)
    assert main(["train", str(run), "--dry-run", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(run) in err
    assert not (tmp_path / "o").exists()


def _steps(records, eval_fraction, micro_batch, grad_accum, world, epochs):
    """The HF Trainer's count, written out here: ceil(epochs × ceil(ceil(N / (B × W)) / G))."""
    n = records - math.ceil(eval_fraction * records)
    return math.ceil(epochs * math.ceil(math.ceil(n / (micro_batch * world)) / grad_accum))


@pytest.mark.parametrize("name,shipped", [("qwen14b-8x4090.yaml", "qwen-14b"), ("llama7b-1x4090.yaml", "llama-7b")])
def test_shipped_run_files_dry_run(tmp_path, capsys, monkeypatch, name, shipped):
    monkeypatch.chdir(ROOT)  # the files name data/instructions.jsonl relative to the project
    path = ROOT / "notebooks" / name
    text = path.read_text()
    spec = yaml.safe_load(text)
    # every field is commented with its trade-off
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            assert "#" in line, f"{name}: uncommented field: {line}"
    # as shipped, the model is a folder the user downloads: the error says how
    rc = main(["launch", str(path), "--dry-run", "--output-dir", str(tmp_path / "missing"), "--no-progress"])
    assert rc == 2
    assert "hf download" in capsys.readouterr().err  # the error, on stderr before any note
    # with the shipped architecture in its place the whole recipe checks out
    out = tmp_path / "run"
    # (one example per row, so the step count below is computed from the record count alone)
    rc = main(["launch", str(path), "--dry-run", "--model", shipped, "--no-packing", "--output-dir", str(out),
               "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    ds = json.loads((out / "ds_config.json").read_text())
    total = _steps(SHIPPED_RECORDS, spec["eval-fraction"], spec["micro-batch"], spec["grad-accum"],
                   spec["num-processes"], spec["num-epochs"])
    assert ds["scheduler"]["type"] == "WarmupCosineLR"
    assert ds["scheduler"]["params"]["total_num_steps"] == total
    assert ds["scheduler"]["params"]["warmup_num_steps"] == math.ceil(spec["warmup-ratio"] * total)
    assert ds["optimizer"]["params"]["lr"] == spec["lr"] and 1e-5 <= spec["lr"] <= 2e-5
    assert ds["train_batch_size"] == spec["micro-batch"] * spec["grad-accum"] * spec["num-processes"]
    assert ds["zero_optimization"]["stage"] == spec["zero-stage"]
    assert spec["save-steps"] == total // spec["num-epochs"]  # one checkpoint per epoch, as the comments say
    resolved = yaml.safe_load((out / RESOLVED_FILE).read_text())
    assert resolved["model"] == shipped and resolved["max-steps"] == total and resolved["gradient-checkpointing"]
    assert "RANDOM WEIGHTS" in printed and "[schedule] lr" in printed


# ---- hyper-parameters of real runs ---------------------------------------------------------------

def test_real_model_needs_lr_and_length(tmp_path):
    res = launch(plan(model="llama-7b", seq_len=256), tmp_path / "a", dry_run=True, progress=False, quiet=True)
    assert res.status == "config_error" and "--lr: required" in res.message and "1e-5" in res.message
    res = launch(plan(model="llama-7b", seq_len=256), tmp_path / "b", lr=2e-5, dry_run=True, progress=False,
                 quiet=True)
    assert res.status == "config_error" and "--num-epochs" in res.message
    # the tiny models keep their rehearsal defaults
    res = launch(plan(), tmp_path / "c", dry_run=True, progress=False, quiet=True)
    assert res.status == "dry_run"
    ds = json.loads((Path(res.run_dir) / "ds_config.json").read_text())
    assert ds["optimizer"]["params"]["lr"] == 3e-3 and ds["scheduler"]["params"]["total_num_steps"] == 40


def test_epochs_become_steps_and_max_steps_wins(tmp_path):
    res = launch(plan(micro_batch=4, grad_accum=3), tmp_path / "a", num_epochs=2, dry_run=True, progress=False,
                 quiet=True, eval_fraction=0.1, warmup_ratio=0.1, dataset=str(INSTRUCTIONS), packing=False)
    assert res.status == "dry_run", res.message
    total = _steps(SHIPPED_RECORDS, 0.1, 4, 3, 2, 2)  # ceil(2 × ceil(ceil(2700 / 8) / 3)) = 226
    assert total == 226
    hp = res.details["inputs"]["hyperparameters"]
    assert hp["max_steps"] == total and hp["warmup_steps"] == math.ceil(0.1 * total)
    assert res.details["inputs"]["examples"] == 2700 and res.details["inputs"]["eval_examples"] == 300
    res = launch(plan(), tmp_path / "b", num_epochs=2, max_steps=9, dry_run=True, progress=False, quiet=True)
    assert res.details["inputs"]["hyperparameters"]["max_steps"] == 9


def _rank_lr_source(run_dir: Path) -> str:
    """What the rank itself records as summary.hyperparameters.lr_source: its own resolve_hyperparameters
    on the training arguments of the launch command (command.sh)."""
    import shlex
    from cookbook.train import resolve_hyperparameters
    argv = shlex.split((run_dir / "command.sh").read_text().strip().splitlines()[-1])
    args = train_args(*argv[argv.index("cookbook.train") + 1:])
    return resolve_hyperparameters(args, 1000, 2)["lr_source"]


def test_lr_source_is_where_the_lr_came_from_not_the_flag_launch_passes(tmp_path, capsys):
    # the tiny models' default, filled by the launch helper (the rank sees --lr 0.003 on its command line)
    res = launch(plan(), tmp_path / "a", dry_run=True, progress=False, quiet=True)
    assert res.details["inputs"]["hyperparameters"]["lr_source"] == "the shipped tiny models' default"
    assert _rank_lr_source(Path(res.run_dir)) == "the shipped tiny models' default"
    # typed on the command line
    assert main(["train", "--dry-run", "--lr", "1e-3", "--output-dir", str(tmp_path / "b"), "--no-progress"]) == 0
    assert _rank_lr_source(tmp_path / "b") == "--lr"
    # from a run file (the command line did not type it)
    run = tmp_path / "run.yaml"
    run.write_text("lr: 1e-4\nmax-steps: 7\n")
    assert main(["train", str(run), "--dry-run", "--output-dir", str(tmp_path / "c"), "--no-progress"]) == 0
    assert _rank_lr_source(tmp_path / "c") == f"run file {run}"
    # the resolved run file does not carry the source as an option
    assert "lr-source" not in (tmp_path / "c" / RESOLVED_FILE).read_text()
    # from the DeepSpeed config's own number, and filled into its "auto"
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                               "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 2e-4}}}))
    res = launch(plan(), tmp_path / "d", config=str(cfg), dry_run=True, progress=False, quiet=True, stated=())
    assert res.status == "dry_run", res.message
    assert _rank_lr_source(Path(res.run_dir)) == "ds.json: optimizer.params.lr"
    cfg.write_text(cfg.read_text().replace("0.0002", '"auto"'))
    res = launch(plan(), tmp_path / "e", config=str(cfg), dry_run=True, progress=False, quiet=True, stated=())
    assert res.status == "dry_run", res.message
    assert _rank_lr_source(Path(res.run_dir)) == \
        "the shipped tiny models' default, filled into ds.json's \"auto\" optimizer.params.lr"
    # a Python caller's lr=
    res = launch(plan(), tmp_path / "f", lr=1e-3, dry_run=True, progress=False, quiet=True)
    assert _rank_lr_source(Path(res.run_dir)) == "launch(lr=...)"


def test_schedule_blocks_and_step_arithmetic():
    from cookbook.dsconfig import (ConfigError, build_config, steps_per_epoch, target_hyperparameters,
                                   warmup_steps_for)
    p = plan()
    lin = build_config(p, "accelerate", lr=1e-5, warmup_steps=3, total_steps=30, lr_scheduler="linear")["scheduler"]
    assert lin == {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-5,
                                                        "warmup_num_steps": 3, "total_num_steps": 30,
                                                        "warmup_type": "linear"}}
    const = build_config(p, "accelerate", lr=1e-5, warmup_steps=0, total_steps=30, lr_scheduler="constant")
    assert const["scheduler"]["type"] == "WarmupLR" and const["scheduler"]["params"]["warmup_min_lr"] == 1e-5
    cos = build_config(p, "accelerate", lr=1e-5, warmup_steps=0, total_steps=30, lr_scheduler="cosine")
    assert cos["scheduler"]["params"]["warmup_min_ratio"] == 1.0  # no warm-up: starts at lr
    assert "scheduler" not in build_config(p, "trainer", lr_scheduler="cosine")  # the Trainer's own cosine
    with pytest.raises(ConfigError, match="total_steps"):
        build_config(p, "accelerate", lr_scheduler="cosine")
    assert steps_per_epoch(1000, 4, 1, 2) == 125 and steps_per_epoch(1000, 1, 16, 8) == 8
    assert steps_per_epoch(5, 4, 4, 8) == 1
    assert warmup_steps_for(69, 0.03) == 3 and warmup_steps_for(69, 0.03, warmup_steps=7) == 7
    t = target_hyperparameters(Plan(model="qwen-14b", num_gpus=8, micro_batch=1, grad_accum=16), lr=1e-5,
                               num_epochs=3, num_rows=3000)
    assert t == {"lr": 1e-5, "lr_scheduler": "cosine", "warmup_steps": 3, "total_steps": 72}


def test_notebook_target_schedule_counts_the_packed_rows_the_dry_run_trains_on(tmp_path):
    """Notebooks 02-05 print the target's schedule from train.planned_rows + dsconfig.target_hyperparameters;
    `cookbook train --dry-run` of the same run (its own process and code path, packing on by default) must
    plan the same steps. Qwen-14B on 8 GPUs, micro batch 1 × 16, 512 tokens, 3 epochs of the shipped chats."""
    import os
    import subprocess
    import sys

    from cookbook.data import load_records, load_tokenizer, tokenize
    from cookbook.dsconfig import target_hyperparameters, total_steps_for_epochs
    from cookbook.launch import planned_rows
    target = Plan(model="qwen-14b", num_gpus=8, seq_len=512, micro_batch=1, grad_accum=16)
    rows = planned_rows(target)
    mine = target_hyperparameters(target, lr=1e-5, num_epochs=3, num_rows=rows["rows"])
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "cookbook.cli", "train", "--model", "qwen-14b", "--num-processes", "8",
                          "--seq-len", "512", "--micro-batch", "1", "--grad-accum", "16", "--num-epochs", "3",
                          "--lr", "1e-5", "--output-dir", str(tmp_path / "dry"), "--dry-run", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    dry = json.loads(out.stdout)
    assert dry["status"] == "dry_run"
    inputs = dry["details"]["inputs"]
    assert rows["rows"] == inputs["rows"] and rows["examples"] == inputs["examples"] == len(load_records())
    assert mine["total_steps"] == inputs["hyperparameters"]["max_steps"]
    # independently: packed rows hold exactly 512 tokens each (the last padded; no row of the shipped chats is
    # without a trained token), so the rows are the tokens of the examples, tokenized whole, over 512
    tokens = sum(len(x) for x in tokenize(load_records(), load_tokenizer(), 512, packing=True).input_ids)
    assert rows["rows"] == math.ceil(tokens / 512) == 977
    # 977 rows / (1 × 8 ranks) = 123 micro batches per rank / 16 = 8 steps per epoch, × 3 epochs
    assert mine["total_steps"] == 3 * math.ceil(math.ceil(977 / 8) / 16) == 24
    assert total_steps_for_epochs(3, len(load_records()), 1, 16, 8) == 36  # what counting examples said
    assert rows["packing"] and "977 packed rows of 512 tokens" in rows["words"]
    assert planned_rows(target, packing=False)["rows"] == len(load_records())  # one example per row


# ---- what is real: console lines and refusals ------------------------------------------------------

def test_console_says_model_source_tokenizer_and_data(tmp_path, capsys):
    res = launch(plan(), tmp_path / "run", dry_run=True, progress=False, eval_fraction=0.05)
    assert res.status == "dry_run"
    out = capsys.readouterr().out
    assert "[model] tiny-qwen2: 354,880 parameters; shipped architecture" in out and "RANDOM WEIGHTS" in out
    assert "[tokenizer] shipped 2,048-token tokenizer" in out
    n = sum(1 for l in (ROOT / "data" / "chats.jsonl").read_text().splitlines() if l.strip())  # shipped chats
    held = math.ceil(0.05 * n)
    assert f"[data] {n - held:,} training examples of" not in out  # records == examples: said once
    # packed: nothing cut, and no "0 truncated"; the file and the tokens that carry the loss are named
    assert re.search(rf"\[data\] {n - held:,} training examples from the shipped chats \({re.escape(str(ROOT / 'data' / 'chats.jsonl'))}\); "
                     r"the loss is on assistant tokens only: [\d,]+ of [\d,]+ tokens \([\d.]+%\)\n", out)
    assert "truncated" not in out and "example(s) longer than --seq-len 128 were split into pieces of at most 128" in out
    assert "packing on" in out and "rows of exactly 128 tokens" in out
    assert f"{held} records held out of --dataset" in out
    assert "[schedule] lr 0.003" in out


def test_dataset_smaller_than_one_global_batch_is_said_not_silent(tmp_path, capsys):
    rows = [{"instruction": f"Say {w}.", "input": "", "output": w} for w in ("one", "two", "three")]
    data = tmp_path / "three.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # 3 rows, global batch 4 × 1 × 2 = 8: each step holds every row 2 or 3 times
    res = launch(plan(), tmp_path / "run", dry_run=True, progress=False, dataset=str(data), packing=False)
    assert res.status == "dry_run", res.message
    note = res.details["inputs"]["small_dataset"]
    assert {k: note[k] for k in ("rows", "global_batch", "repeats_per_step")} == \
        {"rows": 3, "global_batch": 8, "repeats_per_step": round(8 / 3, 2)}
    out = capsys.readouterr().out
    assert "[data] NOTE: the data holds 3 row(s), fewer than one global batch of 8 rows" in out
    assert "repeats each row 2-3 times (8 / 3 = 2.67)" in out
    # a dataset of at least one global batch gets no note
    res = launch(plan(), tmp_path / "run2", dry_run=True, progress=False, quiet=True)
    assert res.details["inputs"]["small_dataset"] is None


def test_random_weights_on_a_gpu_box_need_the_flag():
    with pytest.raises(TrainInputError) as exc:
        validate_inputs(train_args("--model", "llama-7b", "--lr", "2e-5", "--max-steps", "3", "--output-dir",
                                   "/nonexistent/x"), 1, gpu_box=True)
    msg = str(exc.value)
    assert "RANDOM WEIGHTS" in msg and "--random-weights" in msg
    assert "hf download meta-llama/Llama-2-7b-hf" in msg
    facts = validate_inputs(train_args("--model", "llama-7b", "--lr", "2e-5", "--max-steps", "3", "--random-weights",
                                       "--output-dir", "/nonexistent/x"), 1, gpu_box=True)
    assert facts["random_weights"] is True
    # the tiny test models and CPU rehearsals need no flag
    validate_inputs(train_args("--output-dir", "/nonexistent/x"), 2, gpu_box=True)
    validate_inputs(train_args("--model", "llama-7b", "--lr", "2e-5", "--max-steps", "3", "--output-dir",
                               "/nonexistent/x"), 1, gpu_box=False)


def test_model_folder_without_tokenizer_is_refused_not_replaced(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT / "data/models/tiny-qwen2/config.json").read_text())
    res = launch(plan(model=str(folder)), tmp_path / "a", dry_run=True, progress=False, quiet=True)
    assert res.status == "config_error" and "no tokenizer files" in res.message and "--tokenizer" in res.message
    res = launch(plan(model=str(folder)), tmp_path / "b", tokenizer="shipped", lr=1e-3, max_steps=3, dry_run=True,
                 progress=False)
    assert res.status == "dry_run", res.message
    assert "asked for with --tokenizer shipped" in res.details["inputs"]["tokenizer_source"]
    assert "config.json but no weights file" in res.details["inputs"]["model_source"]


def test_model_not_found_names_hf_download_and_qwen1_needs():
    from cookbook.models import ModelNotFoundError, resolve_model_path
    with pytest.raises(ModelNotFoundError) as exc:
        resolve_model_path("Qwen/Qwen-14B")
    msg = str(exc.value)
    assert "hf download Qwen/Qwen-14B --local-dir ./models/Qwen-14B" in msg
    assert "--trust-remote-code" in msg and "tiktoken" in msg and "own tokenizer" in msg
    with pytest.raises(ModelNotFoundError, match="hf download Qwen/Qwen2.5-7B --local-dir ./models/Qwen2.5-7B"):
        resolve_model_path("Qwen/Qwen2.5-7B")


def test_fp16_on_the_cpu_rehearsal_refused_before_launch(tmp_path):
    import torch
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        pytest.skip("this CPU trains fp16 (oneDNN fp16): DeepSpeed's CPU accelerator accepts it")
    res = launch(plan(precision="fp16"), tmp_path / "run", progress=False, quiet=True)
    # from Python: the argument's name; what DeepSpeed's CPU accelerator supports; the fix
    assert res.status == "config_error" and res.message.startswith("precision='fp16': this machine has no NVIDIA GPU")
    assert "trains in fp32 and bf16" in res.message and "--precision" not in res.message
    assert res.message.endswith("Fix: use precision='bf16' or precision='fp32' here (fp16 is for NVIDIA GPUs older "
                                "than Ampere)")
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_fp16_on_the_cpu_rehearsal_names_the_flag_typed(tmp_path, capsys):
    """cookbook train/launch --precision fp16 on a machine without a GPU (and a CPU without oneDNN fp16): the refusal
    names --precision fp16 and the fix in flags, also in a dry run (which used to end on the DeepSpeed-JSON
    "fp16.enabled" lint finding) and when the option fills a user config's "auto" fp16 block."""
    import torch
    from cookbook.launch import on_gpu_machine
    if on_gpu_machine() or torch.ops.mkldnn._is_mkldnn_fp16_supported():
        pytest.skip("this machine trains fp16")
    fix = "Fix: use --precision bf16 or --precision fp32 here"
    for command, extra in (("train", []), ("train", ["--dry-run"]), ("launch", ["--dry-run"])):
        out = tmp_path / f"{command}{len(extra)}"
        assert main([command, "--precision", "fp16", "--max-steps", "1", "--output-dir", str(out), "--no-progress",
                     "--json", *extra]) == 2
        res = json.loads(capsys.readouterr().out)
        assert res["status"] == "config_error" and res["message"].startswith("--precision fp16: this machine has no NVIDIA GPU")
        assert "fp32 and bf16" in res["message"] and fix in res["message"] and "fp16.enabled" not in res["message"]
        assert not out.exists()
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 2}, "fp16": {"enabled": "auto"}}))
    assert main(["launch", "--config", str(cfg), "--precision", "fp16", "--max-steps", "1", "--output-dir",
                 str(tmp_path / "c"), "--no-progress", "--json"]) == 2
    res = json.loads(capsys.readouterr().out)
    assert "fp16.enabled: --precision fp16 (filled into fp16.enabled): this machine has no NVIDIA GPU" in res["message"]
    assert fix in res["message"] and 'set fp16.enabled to "auto"' not in res["message"]
    # the linter, reading the config as cookbook launch does
    assert main(["lint", str(cfg), "--precision", "fp16"]) == 1
    text = capsys.readouterr().out
    assert "--precision fp16 (filled into fp16.enabled)" in text and "use --precision bf16 or --precision fp32" in text
    # a dry run of a real model on this CPU plans a GPU run elsewhere: this CPU's lack of fp16 is no refusal
    assert main(["train", "--precision", "fp16", "--model", "llama-7b", "--lr", "1e-5", "--max-steps", "2", "--dry-run",
                 "--output-dir", str(tmp_path / "gpu"), "--no-progress", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["status"] == "dry_run" and "fp16" not in res["message"]


def test_seq_len_under_the_minimum_names_the_flag(tmp_path, capsys):
    """cookbook train --seq-len 1 names --seq-len (not the internal seq_len field), before anything is written;
    the training entry itself (python -m cookbook.train) says the same."""
    assert main(["train", "--seq-len", "1", "--dry-run", "--output-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--seq-len 1: too short to train on" in err and "set --seq-len to 64 or more" in err and "seq_len" not in err
    assert not (tmp_path / "run").exists()
    from cookbook.train import validate_args
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    problems = validate_args(parser.parse_args(["--seq-len", "1", "--output-dir", str(tmp_path / "t")]))
    assert any(p.startswith("--seq-len=1: too short to train on") for p in problems), problems
    assert not validate_args(parser.parse_args(["--seq-len", "8", "--output-dir", str(tmp_path / "t")]))


def test_gradient_checkpointing_default_follows_the_plan(tmp_path, capsys):
    assert main(["train", "--dry-run", "--model", "llama-7b", "--lr", "2e-5", "--max-steps", "3", "--num-processes",
                 "1", "--seq-len", "256", "--output-dir", str(tmp_path / "a"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "gradient checkpointing on (default: a run of llama-7b" in out and " --gradient-checkpointing " in out
    assert "[precision] bf16 (default: llama-7b is a real model" in out
    assert main(["train", "--dry-run", "--output-dir", str(tmp_path / "b"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "gradient checkpointing off (default: the CPU rehearsal" in out and "--no-gradient-checkpointing" in out


def test_report_to_tensorboard_refused_cleanly_when_not_installed(tmp_path, monkeypatch):
    import cookbook.train as train
    monkeypatch.setattr(train, "tensorboard_available", lambda: False)
    res = launch(plan(), tmp_path / "run", report_to="tensorboard", progress=False, quiet=True)
    assert res.status == "config_error" and "pip install tensorboard" in res.message


# ---- checkpoint rotation -----------------------------------------------------------------------------

def _fake_checkpoint(root: Path, step: int) -> None:
    tmp = ckpt.tmp_dir(root, step)
    (tmp / "deepspeed").mkdir(parents=True)
    (tmp / "deepspeed" / "state.pt").write_bytes(b"x" * step)
    ckpt.atomic_write_text(tmp / "trainer_state.json", json.dumps({"step": step}))
    ckpt.finalize(root, step)


def test_rotation_keeps_the_newest_complete_checkpoints(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (2, 4, 6, 8):
        _fake_checkpoint(root, step)
    (root / "step-00000010").mkdir()  # newer, but incomplete (no COMPLETE marker): not counted, not deleted
    assert ckpt.rotate(root, 2) == ["step-00000002", "step-00000004"]
    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000006", "step-00000008", "step-00000010"]
    assert ckpt.find_resumable(root)[0].name == "step-00000008"
    assert (root / "latest").read_text().strip() == "step-00000008"
    assert ckpt.rotate(root, 1) == ["step-00000006"]  # the newest complete one always stays
    assert not list(root.glob(".del-*"))
    with pytest.raises(ValueError, match="keep=0"):
        ckpt.rotate(root, 0)


def test_to_fp32_refusals_name_the_argument_the_value_and_what_to_give(tmp_path, capsys):
    """`cookbook to-fp32 PATH OUT` for a path that is not a complete checkpoint: each case said as it is (not
    "no COMPLETE marker" for a folder that does not exist), on stderr, exit 2; nothing written to OUT."""
    hint = "give a checkpoint folder written by cookbook train (OUTPUT_DIR/checkpoints/step-NNNNNNNN)"
    missing, out = tmp_path / "nonexistent", tmp_path / "out"
    assert main(["to-fp32", str(missing), str(out)]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint '{missing}': the folder does not exist; {hint}" in err and "COMPLETE" not in err
    (tmp_path / "a-file").write_text("x")
    assert main(["to-fp32", str(tmp_path / "a-file"), str(out)]) == 2
    assert "a file, not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["to-fp32", str(tmp_path / "empty"), str(out)]) == 2
    assert "not a cookbook checkpoint" in capsys.readouterr().err
    run = tmp_path / "run"
    (run / "checkpoints" / "step-00000004" / "deepspeed").mkdir(parents=True)  # a save that never finished
    assert main(["to-fp32", str(run / "checkpoints" / "step-00000004"), str(out)]) == 2
    assert "step-00000004: no COMPLETE marker (the save did not finish)" in capsys.readouterr().err
    assert main(["to-fp32", str(run), str(out)]) == 2
    assert f"a run folder without a complete checkpoint under {run / 'checkpoints'}" in capsys.readouterr().err
    assert not out.exists()
    # Python callers get the same words, raised
    with pytest.raises(FileNotFoundError, match="the folder does not exist"):
        ckpt.to_fp32(missing, out)
    _fake_checkpoint(run / "checkpoints", 2)
    assert ckpt.checkpoint_problem(run) is None and ckpt.checkpoint_problem(run / "checkpoints" / "step-00000002") is None


def test_config_scheduler_block_is_the_schedule_described(tmp_path, capsys):
    """A config's own scheduler block is what DeepSpeed runs: the console, run.resolved.yaml and the train
    command say that block (a constant WarmupLR here, from `cookbook config` without --total-steps), and a
    typed --lr-scheduler that names another schedule is refused, naming both."""
    cfg = tmp_path / "ds2.json"
    assert main(["config", "zero3-offload", "--gpus", "2", "--micro-batch", "2", "--grad-accum", "1",
                 "--model", "tiny-qwen2", "-o", str(cfg)]) == 0
    err = capsys.readouterr().err
    sched = json.loads(cfg.read_text())["scheduler"]
    assert sched["type"] == "WarmupLR" and sched["params"]["warmup_min_lr"] == sched["params"]["warmup_max_lr"] == 2e-5
    assert "lr 2e-05 from the default of `cookbook config`" in err  # the untyped lr is said where it is written
    out = tmp_path / "run"
    assert main(["launch", "--config", str(cfg), "--model", "tiny-qwen2", "--num-processes", "2", "--max-steps", "4",
                 "--dry-run", "--output-dir", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    line = next(l for l in printed.splitlines() if l.startswith("[schedule] lr"))
    assert "WarmupLR: constant 2e-05" in line and "linear" not in line, line
    assert "--lr-scheduler constant" in (out / "command.sh").read_text()  # what train.py's summary records
    resolved = (out / RESOLVED_FILE).read_text()
    assert "lr-scheduler: constant" in resolved and "WarmupLR: constant 2e-05" in resolved
    rc = main(["launch", "--config", str(cfg), "--model", "tiny-qwen2", "--num-processes", "2", "--max-steps", "4",
               "--lr-scheduler", "linear", "--dry-run", "--output-dir", str(tmp_path / "bad"), "--no-progress"])
    both = capsys.readouterr()
    assert rc != 0
    assert "--lr-scheduler linear" in both.out + both.err and "WarmupLR" in both.out + both.err


def test_cli_unknown_model_is_the_first_thing_said():
    """`cookbook train --model nonexistent` said "[precision] bf16 (default: nonexistent is a real model ...)" and
    a checkpointing note before the error; the error comes first now, naming --model and the fix."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "cookbook.cli", "train", "--model", "nonexistent", "--dry-run",
                          "--num-processes", "1"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "error: --model nonexistent:" in out.stderr and "hf download" in out.stderr
    assert "[precision]" not in out.stdout and "[model]" not in out.stdout


def test_run_file_eval_steps_cleared_with_eval_steps_0(tmp_path, capsys, monkeypatch):
    """The LLaMA run file sets eval-steps 60: --eval-fraction 0 alone is refused with the way out named, and
    --eval-steps 0 clears it (no eval set: no eval at all)."""
    monkeypatch.chdir(ROOT)
    path = ROOT / "notebooks" / "llama7b-1x4090.yaml"
    rc = main(["launch", str(path), "--dry-run", "--model", "llama-7b", "--eval-fraction", "0",
               "--output-dir", str(tmp_path / "a"), "--no-progress"])
    captured = capsys.readouterr()
    err = captured.out + captured.err
    assert rc == 2 and "--eval-steps=60 (typed or from a run file): there is no eval set" in err
    assert "--eval-steps 0 for no eval" in err
    rc = main(["launch", str(path), "--dry-run", "--model", "llama-7b", "--eval-fraction", "0", "--eval-steps", "0",
               "--output-dir", str(tmp_path / "b"), "--no-progress"])
    capsys.readouterr()
    assert rc == 0
    assert yaml.safe_load((tmp_path / "b" / RESOLVED_FILE).read_text())["eval-steps"] is None
