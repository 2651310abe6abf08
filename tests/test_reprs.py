"""What a plain-text view of an executed notebook shows for a cell that ends with a cookbook object (GitHub's
renderer, papermill's text, ``nbconvert --to markdown``): IPython's text/plain, the object's ``__repr__``. Short,
the key numbers, no raw None; the dataclass fields and equality unchanged."""
from __future__ import annotations

import dataclasses

from IPython.core.formatters import PlainTextFormatter

from cookbook import dsconfig, env, lint, memory
from cookbook.launch import RunResult
from cookbook.plan import Plan

TEXT = PlainTextFormatter()  # what the kernel puts under text/plain


def test_run_result_shows_status_time_folder_and_message_not_its_fields(tmp_path):
    message = ("rank 0 ran out of GPU memory trying to allocate 6.60 GiB; the estimate was 38.0 GiB per GPU. "
               "next: --offload-optimizer cpu (the optimizer states to host RAM)")
    r = RunResult(status="gpu_oom", message=message, run_dir=str(tmp_path / "run"), command="accelerate launch …",
                  duration_s=41.26, returncode=1, summary=None, details={"rank": 0, "traceback": "x" * 5000},
                  estimate={"gpu_gib": {"total": 38.0}}, world_size=None)
    text = TEXT(r)
    lines = text.splitlines()
    assert lines[0] == f"RunResult(status='gpu_oom', 41 s, run_dir={str(tmp_path / 'run')!r})"
    assert " ".join(line.strip() for line in lines[1:]) == message  # the message, wrapped, every word kept
    assert all(len(line) <= 112 for line in lines[1:])
    assert "None" not in text and "traceback" not in text and len(text) < 400
    assert TEXT([r]).startswith("[RunResult(status='gpu_oom'")  # inside a list too
    fast = dataclasses.replace(r, status="ok", message="3 steps on 1 rank: loss 11.186 → 11.150", duration_s=2.04)
    assert TEXT(fast).splitlines() == [f"RunResult(status='ok', 2.0 s, run_dir={str(tmp_path / 'run')!r})",
                                       "  3 steps on 1 rank: loss 11.186 → 11.150"]
    # fields and equality are the dataclass's
    assert r == RunResult(**{f.name: getattr(r, f.name) for f in dataclasses.fields(RunResult)}) and r != fast


def test_memory_estimate_and_sweep_are_their_verdict_lines():
    plan = Plan(model="qwen-14b", num_gpus=8, gpu_memory_gib=24.0, host_memory_gib=None, zero_stage=2)
    e = memory.estimate(plan)
    text = TEXT(e)
    assert text.startswith(f"MemoryEstimate(qwen-14b, 8 GPU(s), {e.params:,} parameters: ZeRO-2: GPU ")
    assert f"GPU {e.gpu_gib['total']:.1f}/24 GiB DOES NOT FIT" in text  # 86 GiB of model states and more > 24
    assert e.gpu_gib["total"] > 24 and "host RAM unknown" in text and "None" not in text
    assert "\n" not in text and len(text) < 200
    variants = memory.sweep(plan)
    lines = TEXT(variants).splitlines()
    assert lines[0] == f"SweepResult: {len(variants)} variant(s) of qwen-14b on 8 GPU(s)"
    assert [l.split(":")[0].strip() for l in lines[1:]] == [v.plan.label for v in variants]
    fits = [l for l in lines[1:] if " fits;" in l]
    assert len(fits) == sum(1 for v in variants if v.fits_gpu) >= 1
    assert "None" not in "\n".join(lines) and TEXT(memory.SweepResult(())) == "SweepResult: no variants"
    assert e == dataclasses.replace(e)  # equality unchanged


def test_env_report_is_one_line_with_the_checks_that_did_not_pass():
    checks = (env.Check("python", "ok", "3.12.3", "runs"), env.Check("rtx40_p2p", "fail", "4 × RTX 4090", "P2P", "x"),
              env.Check("host_memory", "warn", "64 GiB", "little headroom"))
    r = env.EnvReport(checks=checks, facts={"secret": None}, recommended_env={},
                      plan=Plan(model="llama-7b", num_gpus=1, zero_stage=3, offload_optimizer="cpu"))
    assert TEXT(r) == ("EnvReport(FAIL: 1 check(s) failed, 1 warning(s): 3 checks; fail: rtx40_p2p; warn: host_memory; "
                       "plan: llama-7b, 1 GPU(s), ZeRO-3 + opt→cpu)")
    assert TEXT(env.EnvReport(checks=checks[:1], facts={}, recommended_env={})) == "EnvReport(OK: 1 checks)"


def test_config_diff_lists_each_change_and_says_how_many_more():
    before = {"bf16": {"enabled": False}, "fp16": {"enabled": True}, "optimizer": {"type": "AdamW"}}
    after = {"bf16": {"enabled": True}, "optimizer": {"type": "AdamW"}, "stage3": list(range(100))}
    text = TEXT(dsconfig.diff(before, after))
    lines = text.splitlines()
    assert lines[:3] == ["ConfigDiff: 3 key(s) differ", "  bf16.enabled: false → true", "  fp16.enabled: true → (absent)"]
    assert lines[3].startswith("  stage3: (absent) → [0, 1, 2") and lines[3].endswith(" …") and len(lines[3]) < 90
    big = dsconfig.diff({}, {f"k{i:02d}": i for i in range(20)})
    lines = TEXT(big).splitlines()
    assert len(lines) == 1 + dsconfig.ConfigDiff.REPR_ROWS + 1 and lines[-1].startswith("  … and 8 more")
    assert TEXT(dsconfig.diff({}, {})) == "ConfigDiff: no differences"
    assert big == dsconfig.diff({}, {f"k{i:02d}": i for i in range(20)})


def test_lint_report_counts_and_one_short_line_per_finding(tmp_path):
    long = "train_batch_size=2 with gradient_accumulation_steps=8 on world size 1: DeepSpeed refuses it " * 3
    found = [lint.Finding("warning", "fp16", "fp16 on RTX 4090", "use bf16"),
             lint.Finding("error", "train_batch_size", long, "set 8")]
    r = lint.LintReport(found, source=str(tmp_path / "ds_config.json"))
    lines = TEXT(r).splitlines()
    assert lines[0] == "LintReport of ds_config.json: 1 error(s), 1 warning(s)"
    assert lines[1].startswith("  error   train_batch_size: train_batch_size=2") and lines[1].endswith(" …")
    assert len(lines[1]) <= 130 and lines[2] == "  warning fp16: fp16 on RTX 4090" and len(lines) == 3
    assert TEXT(lint.LintReport([])) == "LintReport: no problems found"
    assert list(r) == [found[1], found[0]]  # still the list of findings, errors first
