"""One description of how a run is run (cookbook.options.RunOptions): the flags of `cookbook train`/`launch`,
the run-file keys and `launch(plan, run_dir, options)` map onto it one to one; the old flat keywords still
work and an unknown one is refused with the closest name; the [data] line names the file and the tokens that
carry the loss; a 7B run that keeps every 16-bit checkpoint is warned of the disk it takes. Dry runs only."""
import argparse
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from cookbook import options as ro
from cookbook.launch import (RESOLVED_FILE, _NOT_IN_RUN_FILE, launch, load_run_file, save_16bit_disk_warning,
                             save_16bit_saves)
from cookbook.plan import DEST_FIELDS, Plan
from cookbook.train import add_launch_arguments

GIB = 2 ** 30
LLAMA_7B_PARAMS = 6_738_415_616  # LLaMA-7B (the shipped llama-7b config; Touvron et al. 2023 round it to 6.7B)


def plan(**kw) -> Plan:
    base = dict(model="tiny-qwen2", num_gpus=2, seq_len=128, micro_batch=4, grad_accum=1, precision="fp32",
                zero_stage=3, gradient_checkpointing=False)
    base.update(kw)
    return Plan(**base)


def parser(with_config=True):
    p = argparse.ArgumentParser(prog="cookbook launch")
    add_launch_arguments(p, with_config=with_config)
    return p


def test_every_flag_is_a_plan_field_a_run_option_or_an_output_control():
    p = parser()
    plan_fields = {f.name for f in dataclasses.fields(Plan)}
    option_dests = {f.dest: f for f in ro.FIELDS if f.flag}
    controls = _NOT_IN_RUN_FILE | {"config", "output_dir"}  # launch(plan, output_dir, options, config=...)
    seen = set()
    for a in p._actions:
        if a.dest in ("help",):
            continue
        kinds = [DEST_FIELDS.get(a.dest, a.dest) in plan_fields, a.dest in option_dests, a.dest in controls]
        assert sum(kinds) == 1, (a.dest, kinds)
        if a.dest in option_dests:
            f = option_dests[a.dest]
            if a.option_strings == ["--no-packing"]:  # the negation of --packing (same dest, default None)
                assert p.parse_args([]).packing is None is f.default
                continue
            assert f.flag in a.option_strings, (f.flag, a.option_strings)
            assert a.default == f.default, (a.dest, a.default, f.default)  # --no-final-save: default True
            seen.add(a.dest)
    assert seen == set(option_dests)  # and every run option with a flag is a flag
    # Python-only options are exactly these two
    assert [f.name for f in ro.FIELDS if f.flag is None] == ["env", "extra_args"]


def test_flags_and_run_file_keys_map_onto_the_same_options(tmp_path):
    p = parser(with_config=False)
    args = p.parse_args(["--max-steps", "7", "--lr", "2e-5", "--hang-timeout", "60", "--no-final-save",
                         "--no-packing", "--save-16bit", "final", "--emulate-gpu-memory-gib", "24", "--force"])
    o = ro.from_args(args)
    assert (o.schedule.max_steps, o.schedule.lr, o.watchdog.hang_timeout_s) == (7, 2e-5, 60.0)
    assert o.saving.final_save is False and o.data.packing is False and o.saving.save_16bit == "final"
    assert o.rehearsal.emulate_gpu_memory_gib == 24.0 and o.launcher.force is True
    assert o.schedule.seed == 1234 and o.watchdog.startup_timeout_s is None  # defaults
    run = tmp_path / "run.yaml"
    run.write_text("max-steps: 7\nlr: 2.0e-5\nhang_timeout: 60\nno-final-save: true\npacking: false\n"
                   "save-16bit: final\nemulate-gpu-memory-gib: 24\nforce: true\n")
    from_file = load_run_file(run, p)
    ns = p.parse_args([])
    for k, v in from_file.items():
        setattr(ns, k, v)
    assert ro.from_args(ns) == o
    # flat names, as the old keywords and run-file keys spell them
    assert ro.from_flat({"max-steps": 7, "lr": 2e-5, "hang_timeout": 60.0, "no_final_save": True, "packing": False,
                         "save_16bit": "final", "emulate_gpu_memory_gib": 24.0, "force": True}) == o


def test_options_are_frozen_and_replace_by_flat_name():
    o = ro.RunOptions(schedule=ro.Schedule(lr=1e-5, num_epochs=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.schedule.lr = 1.0
    o2 = o.replace(save_steps=50, hang_timeout_s=30)
    assert (o2.schedule.lr, o2.schedule.num_epochs, o2.saving.save_steps, o2.watchdog.hang_timeout_s) == \
        (1e-5, 3, 50, 30)
    assert o.saving.save_steps == 0  # the original is unchanged


@pytest.mark.parametrize("name,guess", [("max_step", "max_steps"), ("save-total-limt", "save_total_limit"),
                                        ("hang_timout_s", "hang_timeout_s")])
def test_unknown_option_names_the_closest(name, guess):
    with pytest.raises(ro.OptionsError, match=rf"unknown option '{name}' \(did you mean '{guess}'\?\)"):
        ro.from_flat({name: 1})


def test_launch_unknown_keyword_is_refused_with_the_closest(tmp_path):
    with pytest.raises(ro.OptionsError, match=r"launch\(\) got an unexpected keyword argument 'verify_saves' "
                                              r"\(did you mean 'verify_save'\?\)"):
        launch(plan(), tmp_path / "x", verify_saves="off")
    assert not (tmp_path / "x").exists()  # refused before anything was written


def test_options_and_old_keywords_write_the_same_run_folder(tmp_path):
    kw = dict(max_steps=6, lr=1e-3, warmup_steps=1, save_steps=3, save_total_limit=1, save_16bit="final",
              verify_save="shapes", final_save=False, seed=7, hang_timeout_s=120.0, eval_fraction=0.05)
    old = launch(plan(), tmp_path / "old", dry_run=True, progress=False, quiet=True, **kw)
    opts = ro.RunOptions(schedule=ro.Schedule(max_steps=6, lr=1e-3, warmup_steps=1, seed=7),
                         saving=ro.Saving(save_steps=3, save_total_limit=1, save_16bit="final", verify_save="shapes",
                                          final_save=False),
                         data=ro.Data(eval_fraction=0.05), watchdog=ro.Watchdog(hang_timeout_s=120.0))
    new = launch(plan(), tmp_path / "new", opts, dry_run=True, progress=False, quiet=True)
    assert old.status == new.status == "dry_run", (old.message, new.message)
    for name in ("command.sh", RESOLVED_FILE, "ds_config.json"):
        a = (tmp_path / "old" / name).read_text().replace(str(tmp_path / "old"), "DIR")
        b = (tmp_path / "new" / name).read_text().replace(str(tmp_path / "new"), "DIR")
        a, b = (re.sub(r"--main_process_port', '\d+|main_process_port: \d+|port \d+", "PORT", x) for x in (a, b))
        assert a == b, name
    cmd = (tmp_path / "new" / "command.sh").read_text()
    for flag in ("--max-steps 6", "--save-steps 3", "--save-total-limit 1", "--save-16bit final",
                 "--verify-save shapes", "--no-final-save", "--seed 7", "--eval-fraction 0.05"):
        assert flag in cmd, flag


def test_data_line_names_the_file_and_the_tokens_that_carry_the_loss(tmp_path, capsys):
    from cookbook.data import load_tokenizer
    recs = [{"prompt": "Q: two plus two?", "completion": " four"}, {"prompt": "Q: the sky?", "completion": " blue"},
            {"prompt": "Say hi.", "completion": " hi there"}]
    f = tmp_path / "pc.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = launch(plan(), tmp_path / "run", dry_run=True, progress=False, dataset=str(f), packing=False)
    assert res.status == "dry_run", res.message
    # independently: one row per example; the completion and its end-of-sequence carry the loss, the prompt
    # (with a BOS where the tokenizer has one) does not; the first token of a row is never a target
    tok = load_tokenizer()
    bos = 1 if tok.bos_token_id is not None else 0
    trained = sum(len(tok(r["completion"], add_special_tokens=False)["input_ids"]) + 1 for r in recs)
    total = trained + sum(len(tok(r["prompt"], add_special_tokens=False)["input_ids"]) + bos for r in recs)
    out = capsys.readouterr().out
    assert (f"[data] 3 training examples from --dataset {f}; the loss is on completion tokens only (and "
            f"end-of-sequence): {trained} of {total} tokens ({100 * trained / total:.1f}%)\n") in out
    assert (res.details["inputs"]["loss_tokens"], res.details["inputs"]["tokens"]) == (trained, total)


def test_text_data_trains_every_token_but_each_rows_first(tmp_path, capsys):
    from cookbook.data import load_tokenizer
    texts = ["the cat sat on the mat", "a b c d e f g"]
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    res = launch(plan(), tmp_path / "run", dry_run=True, progress=False, quiet=True, dataset=str(f), packing=False)
    tok = load_tokenizer()
    bos = 1 if tok.bos_token_id is not None else 0
    total = sum(len(tok(t, add_special_tokens=False)["input_ids"]) + 1 + bos for t in texts)
    inputs = res.details["inputs"]
    assert (inputs["loss_on"], inputs["loss_tokens"], inputs["tokens"]) == ("every token", total - 2, total)


def test_16bit_saves_counted_as_train_writes_them():
    # --save-steps 10 over 100 steps: checkpoints at 10..90 (not 100: the final save is that one), the final
    # checkpoint, and final_model/ copied from it after a verified save
    assert save_16bit_saves(100, 10, final_save=True, verify_save="full") == 9 + 1 + 1
    assert save_16bit_saves(101, 10, final_save=True, verify_save="off") == 10 + 1
    assert save_16bit_saves(100, 10, final_save=False, verify_save="full") == 9
    assert save_16bit_saves(5, 10, final_save=True, verify_save="shapes") == 2


def test_7b_run_keeping_every_16bit_checkpoint_warns_with_the_disk_it_takes(tmp_path, capsys):
    p = Plan(model="llama-7b", num_gpus=8, seq_len=512, micro_batch=1, grad_accum=16, precision="bf16",
             zero_stage=3, gradient_checkpointing=True)
    res = launch(p, tmp_path / "run", dry_run=True, progress=False, quiet=True, lr=1e-5, max_steps=100,
                 save_steps=10)
    assert res.status == "dry_run", res.message
    out = capsys.readouterr().out
    per_save = LLAMA_7B_PARAMS * 2 / GIB  # bf16 weights
    assert (f"[checkpoint] warning: --save-16bit every with --save-steps 10 and no --save-total-limit keeps 11 "
            f"copies of the 16-bit weights of this 6.7e9-parameter model: 11 × {per_save:.1f} GiB = "
            f"{11 * per_save:.1f} GiB") in out
    free = float(re.search(r"has ([\d.]+) GiB free", out).group(1))
    assert abs(free - shutil.disk_usage(tmp_path).free / GIB) < 1.0
    assert "Fix: --save-total-limit 2" in out
    # a limit, --save-16bit final, no intermediate saves or a tiny model: no warning
    for kw in (dict(save_total_limit=2), dict(save_16bit="final"), dict(save_steps=0)):
        opts = ro.from_flat(dict(dict(save_steps=10, lr=1e-5), **kw))
        assert save_16bit_disk_warning(p, opts, 100, tmp_path, num_params=LLAMA_7B_PARAMS) is None, kw
    assert save_16bit_disk_warning(p, ro.from_flat(save_steps=10), 100, tmp_path, num_params=354_880) is None
