"""One real 2-rank CPU run (DeepSpeed CPU accelerator, gloo) with a real run's options: an eval set with
eval loss every N steps, checkpoint rotation, intermediate checkpoints without the 16-bit export, a
cosine schedule with warm-up, and metrics through Accelerate's TensorBoard tracker."""
import json
import math
from pathlib import Path

import pytest

from cookbook.launch import launch
from cookbook.plan import Plan

pytestmark = pytest.mark.slow


def test_eval_loss_rotation_16bit_final_cosine_and_tensorboard(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    from cookbook.data import IGNORE_INDEX, collate, load_records, load_tokenizer, tokenize
    from cookbook.train import tensorboard_available

    # a separate eval file: the first 10 shipped Alpaca records
    from cookbook.models import INSTRUCTIONS_PATH
    records = load_records(INSTRUCTIONS_PATH)
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps({k: records[i][k] for k in ("instruction", "input", "output")}) + "\n"
                                 for i in range(10)))
    plan = Plan(model="tiny-qwen2", num_gpus=2, seq_len=128, micro_batch=4, grad_accum=1, precision="fp32",
                zero_stage=2, gradient_checkpointing=False)
    lr, steps, warmup = 3e-3, 6, 2
    tb = tensorboard_available()
    res = launch(plan, tmp_path / "run", max_steps=steps, lr=lr, lr_scheduler="cosine", warmup_steps=warmup,
                 eval_dataset=str(eval_file), eval_steps=3, save_steps=2, save_total_limit=2, save_16bit="final",
                 report_to="tensorboard" if tb else "none", progress=False, hang_timeout_s=300, verify_save="shapes")
    assert res.ok, (res.message, res.details.get("traceback"))
    rows = {r["step"]: r for r in res.metrics}

    # eval loss at steps 3 and 6 only, into metrics.jsonl and the summary
    assert [s for s, r in rows.items() if "eval_loss" in r] == [3, 6]
    assert res.summary["eval_losses"] == [[3, rows[3]["eval_loss"]], [6, rows[6]["eval_loss"]]]
    assert res.summary["eval_loss"] == rows[6]["eval_loss"] and res.summary["eval_examples"] == 10
    # independently: the saved final model's token-weighted loss over the eval file (fp32 run, same weights)
    model = AutoModelForCausalLM.from_pretrained(Path(res.run_dir) / "final_model")
    tok = load_tokenizer()
    data = tokenize(load_records(str(eval_file)), tok, 128)
    total = tokens = 0.0
    with torch.no_grad():
        for i in range(len(data)):
            batch = collate([data.input_ids[i]], [data.labels[i]], tok.pad_token_id)
            n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
            total += float(model(**batch).loss) * n
            tokens += n
    assert rows[6]["eval_tokens"] == tokens
    assert rows[6]["eval_loss"] == pytest.approx(total / tokens, rel=1e-4)

    # rotation: checkpoints at 2, 4, 6 with --save-total-limit 2 leave 4 and 6; only the final one has 16-bit weights
    ckpts = Path(res.run_dir) / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step-*")) == ["step-00000004", "step-00000006"]
    assert not (ckpts / "step-00000004" / "hf").exists() and (ckpts / "step-00000004" / "config" / "config.json").is_file()
    assert (ckpts / "step-00000006" / "hf" / "model.safetensors").is_file()
    assert "removed step-00000002 (--save-total-limit 2)" in Path(res.log_paths["rank0"]).read_text()

    # DeepSpeed's WarmupCosineLR as its source defines it; the logged lr is the one after step s (i = s - 1)
    def cosine(i):
        if i < warmup:
            return lr * i / warmup
        return lr * (1 + math.cos(math.pi * min(1.0, (i - warmup + 1) / (steps - warmup)))) / 2
    for s, r in rows.items():
        assert r["lr"] == pytest.approx(cosine(s - 1), abs=1e-12), s

    # TensorBoard: an event file with the scalars (tensorboardX comes with the test extra)
    if tb:
        events = list((Path(res.run_dir) / "tensorboard").rglob("events.out.tfevents.*"))
        blob = b"".join(e.read_bytes() for e in events)
        assert events and b"eval_loss" in blob and b"tokens_per_s" in blob
