"""The baseline users of the articles actually run: the Hugging Face ``Trainer`` with ``--deepspeed``.

Issue 19 item 3. The LLaMA article launches ``run_finetune.py`` (a ``transformers.Trainer`` script)
with ``--deepspeed ds_config.json``; this script is that, reduced to what a throughput comparison needs:
the same model shape, seed, data (full-length rows in the cookbook's data order), sequence length,
global batch and GPU cap as the cookbook's own runs, and a callback that times every optimizer step.

One rank per process, started by a distributed launcher (the Trainer's DeepSpeed integration needs
the process group)::

    torchrun --standalone --nproc_per_node 1 -m benchmarks.trainer_baseline \\
        --config ds.json --model benchmarks/models/llama-3b --dataset long.jsonl --seq-len 1024 \\
        --micro-batch 2 --grad-accum 8 --max-steps 4 --emulate-gpu-memory-gib 24 --result out.json

``--config`` is a DeepSpeed JSON with explicit values (``benchmarks.stock.resolve`` or
``cookbook.dsconfig.build_config``); the ``TrainingArguments`` are derived from it (learning rate,
AdamW betas/eps/weight decay, warm-up and total steps, clipping, batch shape, precision), because the
Trainer refuses a config whose explicit values differ from its arguments
(``transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig.trainer_config_process``).

Writes ``--result`` (JSON): per-step time (wall clock between consecutive ``on_step_end`` calls, the
GPU synchronised, so it covers data loading, forward, backward and the optimizer step like the
cookbook loop's timer), tokens/s (median over the steps after the first), losses, GPU and host peaks.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

GIB = 2 ** 30


def trainer_args_from_config(cfg: dict, *, output_dir: str, max_steps: int, world: int = 1) -> dict:
    """``TrainingArguments`` keyword values that match the explicit values of DeepSpeed config ``cfg``.

    Raises:
        ValueError: the config's batch keys are inconsistent (train != micro x accum x world).
    """
    micro = int(cfg["train_micro_batch_size_per_gpu"])
    accum = int(cfg.get("gradient_accumulation_steps", 1))
    if int(cfg.get("train_batch_size", micro * accum * world)) != micro * accum * world:
        raise ValueError(f"config: train_batch_size {cfg.get('train_batch_size')} != micro {micro} x accum {accum} "
                         f"x world {world}; correct the batch arithmetic first (benchmarks.stock.resolve does)")
    opt = (cfg.get("optimizer") or {}).get("params", {})
    sched = (cfg.get("scheduler") or {}).get("params", {})
    betas = opt.get("betas", [0.9, 0.999])
    kw = dict(output_dir=output_dir, per_device_train_batch_size=micro, gradient_accumulation_steps=accum,
              max_steps=max_steps, learning_rate=float(opt.get("lr", 2e-5)),
              weight_decay=float(opt.get("weight_decay", 0.0)), adam_beta1=float(betas[0]),
              adam_beta2=float(betas[1]), adam_epsilon=float(opt.get("eps", 1e-8)),
              max_grad_norm=float(cfg.get("gradient_clipping", 1.0)),
              warmup_steps=int(sched.get("warmup_num_steps", 0)),
              bf16=bool((cfg.get("bf16") or {}).get("enabled")), fp16=bool((cfg.get("fp16") or {}).get("enabled")),
              lr_scheduler_type="linear")
    return kw


def _step_timer(tokens_per_step: int, rows: list):
    """A ``transformers.TrainerCallback`` appending one row per optimizer step to ``rows``."""
    from transformers import TrainerCallback

    class StepTimer(_StepTimer, TrainerCallback):
        pass
    return StepTimer(tokens_per_step, rows)


class _StepTimer:
    """The hooks of the step timer: each optimizer step is timed from the end of the previous one
    (the first from ``on_train_begin``)."""

    def __init__(self, tokens_per_step: int, out_rows: list):
        self.tokens_per_step, self.rows, self.t_last = tokens_per_step, out_rows, None

    def _sync(self):
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_train_begin(self, args, state, control, **kw):
        self._sync()
        self.t_last = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        import torch
        self._sync()
        now = time.perf_counter()
        dt = now - self.t_last
        self.t_last = now
        self.rows.append({"step": state.global_step, "step_time_s": round(dt, 4),
                          "tokens_per_s": round(self.tokens_per_step / dt, 2),
                          "peak_gpu_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 3)
                          if torch.cuda.is_available() else None,
                          "peak_gpu_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 3)
                          if torch.cuda.is_available() else None,
                          "host_rss_peak_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 3)})

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs and self.rows:
            self.rows[-1]["loss"] = logs["loss"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="DeepSpeed JSON with explicit values")
    p.add_argument("--model", required=True, help="model folder (config.json; random weights unless weights are there)")
    p.add_argument("--dataset", required=True, help="JSONL of instruction records (benchmarks.gpu_bench.make_long_dataset)")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--emulate-gpu-memory-gib", type=float, default=None, help="cap the GPU (set_per_process_memory_fraction)")
    p.add_argument("--no-gradient-checkpointing", dest="gc", action="store_false")
    p.add_argument("--result", required=True, help="JSON file to write")
    p.add_argument("--output-dir", default=None, help="Trainer output folder (default: beside --result)")
    a = p.parse_args(argv)
    t_start = time.time()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    if cuda:
        torch.cuda.set_device(local_rank)
        if a.emulate_gpu_memory_gib:
            total = torch.cuda.get_device_properties(local_rank).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, a.emulate_gpu_memory_gib * GIB / total), local_rank)
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments
    from cookbook.data import collate, load_records, load_tokenizer, sample_order, tokenize
    from cookbook.models import resolve_model_path

    cfg = json.loads(Path(a.config).read_text())
    out_dir = a.output_dir or str(Path(a.result).with_suffix("")) + "_trainer"
    kw = trainer_args_from_config(cfg, output_dir=out_dir, max_steps=a.max_steps, world=world)
    if not cuda:
        kw.update(bf16=False, fp16=False, use_cpu=True)
    # TrainingArguments first: with a ZeRO-3 config it activates HfDeepSpeedConfig, so the model below
    # is built partitioned under deepspeed.zero.Init, as run_finetune.py-style scripts do
    args = TrainingArguments(**kw, deepspeed=a.config, gradient_checkpointing=a.gc,
                             gradient_checkpointing_kwargs={"use_reentrant": False}, logging_steps=1,
                             save_strategy="no", report_to="none", disable_tqdm=True, seed=a.seed, data_seed=a.seed,
                             dataloader_num_workers=0, remove_unused_columns=False)

    tok = load_tokenizer(None)
    data = tokenize(load_records(a.dataset), tok, a.seq_len)
    B, G = kw["per_device_train_batch_size"], kw["gradient_accumulation_steps"]
    # the cookbook loop's data order (cookbook.data.sample_order), served sequentially
    order = [i for s in range(a.max_steps) for m in range(G) for i in sample_order(len(data), a.seed, s, m, 0, B, G, world)]

    class Ordered(torch.utils.data.Dataset):
        def __len__(self):
            return len(order)

        def __getitem__(self, k):
            i = order[k]
            return {"input_ids": data.input_ids[i], "labels": data.labels[i]}

    def collator(rows):
        return collate([r["input_ids"] for r in rows], [r["labels"] for r in rows], tok.pad_token_id)

    class SequentialTrainer(Trainer):
        def _get_train_sampler(self, *args_, **kw_):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    folder, _ = resolve_model_path(a.model)
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    dtype = torch.bfloat16 if kw["bf16"] else torch.float16 if kw["fp16"] else torch.float32
    torch.manual_seed(a.seed)
    zero3 = (cfg.get("zero_optimization") or {}).get("stage") == 3
    t_model = time.time()
    # same random init as cookbook.train (on the GPU when the whole model lives there, ZeRO-0/1/2)
    with torch.device(f"cuda:{local_rank}" if cuda and not zero3 else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.config.use_cache = False
    t_model = time.time() - t_model
    tokens_per_step = B * G * world * a.seq_len
    rows: list = []
    trainer = SequentialTrainer(model=model, args=args, train_dataset=Ordered(), data_collator=collator,
                                callbacks=[_step_timer(tokens_per_step, rows)])
    t_train = time.time()
    status, message = "ok", ""
    try:
        trainer.train()
    except torch.OutOfMemoryError as exc:
        status, message = "gpu_oom", str(exc).splitlines()[0][:300]
    t_train = time.time() - t_train
    full = all(len(data.input_ids[i]) == a.seq_len for i in order)
    timed = rows[1:] if len(rows) > 1 else rows
    rec = {"status": status if rows or status != "ok" else "no_steps", "message": message,
           "config": a.config, "deepspeed_config": cfg, "training_arguments": {k: v for k, v in kw.items()},
           "micro_batch": B, "grad_accum": G, "world_size": world, "seq_len": a.seq_len,
           "tokens_per_step": tokens_per_step, "rows_full_length": full,
           "steps": rows, "losses": [r.get("loss") for r in rows],
           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed) if rows else None,
           "step_time_s": statistics.median(r["step_time_s"] for r in timed) if rows else None,
           "peak_gpu_allocated_gib": max((r["peak_gpu_allocated_gib"] or 0) for r in rows) if rows and cuda else None,
           "peak_gpu_reserved_gib": max((r["peak_gpu_reserved_gib"] or 0) for r in rows) if rows and cuda else None,
           "host_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
           "model_init_s": round(t_model, 1), "train_s": round(t_train, 1), "wall_s": round(time.time() - t_start, 1),
           "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                        "deepspeed": __import__("deepspeed").__version__}}
    if int(os.environ.get("RANK", 0)) == 0:
        Path(a.result).write_text(json.dumps(rec, indent=1, default=str))
        print(f"[trainer_baseline] {status}: {len(rows)} steps, {rec['tokens_per_s']} tokens/s", flush=True)
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
