"""The per-rank training entry: a full fine-tune with Accelerate + DeepSpeed ZeRO.

Started once per rank by ``accelerate launch -m cookbook.train ...`` (the launch helper,
:mod:`cookbook.launch`, writes the Accelerate and DeepSpeed configs and builds that command; use
``cookbook train`` rather than calling this directly). The DeepSpeed JSON in the run folder is the
single source of truth for batch shape, precision, optimizer (AdamW) and learning-rate schedule.

Before anything else, :func:`validate_inputs` checks every input and fills in what the user left to
the run: the learning rate (required for real models; the tiny test models default to 3e-3), the
number of steps (from ``--num-epochs`` as the HF Trainer counts them), the warm-up; it refuses a model
without weights on a GPU box (``--random-weights`` to do it on purpose) and a model folder without a
tokenizer. :func:`describe_inputs` says what is real, on the launcher's console and in rank 0's log.

Writes into ``--output-dir``:
  * ``metrics.jsonl``: one JSON object per optimizer step (step, loss, lr, grad_norm, tokens_per_s,
    samples_per_s, tflops, mfu, peak GPU allocated/reserved GiB, host RSS GiB, and the shape that ran:
    real tokens, token slots, packing efficiency, real tokens per row mean/max, widest row; ``eval_loss``
    and ``eval_tokens`` at the steps where the eval set was measured);
  * with ``--report-to tensorboard``, the same through Accelerate's tracker in ``tensorboard/``;
  * ``summary.json``: status, world size, first/last loss, throughput, peaks, the rows that ran
    (packing, tokens per row and per micro batch, packing efficiency, the attention path), the
    estimate beside the measurement for that shape, the ZeRO partition of each rank, the DeepSpeed
    config used;
  * ``checkpoints/step-N``: DeepSpeed state for ``--resume`` plus gathered 16-bit weights (only in the
    final one with ``--save-16bit final``), the newest ``--save-total-limit`` kept (see
    :mod:`cookbook.checkpoint`); ``final_model/``: the verified 16-bit model.
Progress goes to stdout on rank 0 as lines ``COOKBOOK_STEP {json}`` (read by the launch helper).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from .hardware import flops_per_token  # noqa: F401 - the formula lives with the hardware facts
from .hardware import quiet_loading_bars
from .plan import OFFLOAD_TARGETS, PRECISIONS, ZERO_STAGES

GIB = 2 ** 30
STEP_PREFIX = "COOKBOOK_STEP "
ERROR_PREFIX = "COOKBOOK_ERROR "

#: Dense bf16 tensor-core peak, TFLOP/s, for MFU (vendor datasheets: NVIDIA H100/H200 SXM 989.4;
#: A100 312; Ada RTX 4090 165.2 with FP32 accumulate (Ada whitepaper, table 2); RTX 3090 71;
#: L40S 362.1; A6000 154.8; L4 121).
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "RTX 4090": 165.2, "RTX 3090": 71.0,
                    "L40S": 362.1, "A6000": 154.8, "L4": 121.0}


class TrainInputError(ValueError):
    """Bad input to the training entry; the message names the option, the value and the fix."""


# the choices and defaults of the run options live in cookbook.options (one place for flags, run files, launch())
from .options import DEFAULT_WARMUP_RATIO, REPORT_TO, SAVE_16BIT, VERIFY_SAVE  # noqa: E402,F401
from .options import default as _default  # noqa: E402


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``cookbook train`` that reach every rank."""
    from .dsconfig import LR_SCHEDULERS
    p.add_argument("--model", default="tiny-qwen2",
                   help="local folder with config.json and weights, a hub id in your Hugging Face cache, or a "
                        "shipped architecture name (random weights: qwen-14b, llama-7b, ...; tiny-qwen2 for rehearsals)")
    p.add_argument("--tokenizer", default=_default("tokenizer"),
                   help="tokenizer folder; 'shipped' for the shipped 2,048-token tokenizer on purpose (default: the "
                        "model folder's own; shipped architectures use the shipped one)")
    p.add_argument("--random-weights", action="store_true",
                   help="train a model that has no weights (a shipped architecture, a config-only folder) from random "
                        "initialisation on a GPU box, on purpose: memory and speed are real, the result is not")
    p.add_argument("--dataset", default=_default("dataset"),
                   help="JSONL/JSON/parquet/csv file, a datasets folder, or a datasets hub id already in the local cache; "
                        "formats: Alpaca, chat messages, ShareGPT, prompt/completion, text (default: shipped chats)")
    p.add_argument("--dataset-split", default=_default("dataset_split"), help="split of a hub id or DatasetDict folder (default: train)")
    p.add_argument("--dataset-fields", default=_default("dataset_fields"),
                   help="your field names, standard=yours, e.g. messages=dialog,role=speaker,content=text,assistant=bot")
    p.add_argument("--chat-template", default=_default("chat_template"),
                   help="Jinja chat template file for chat data (default: the tokenizer's own)")
    pk = p.add_mutually_exclusive_group()
    pk.add_argument("--packing", dest="packing", action="store_true", default=None,
                    help="concatenate examples into rows of exactly --seq-len tokens, per-example position_ids "
                         "(default: on when the model's attention keeps packed examples apart)")
    pk.add_argument("--no-packing", dest="packing", action="store_false",
                    help="one example per row, padded to the longest row of its micro batch")
    from .attention import CHOICES as ATTENTION_CHOICES
    p.add_argument("--attention", choices=ATTENTION_CHOICES, default=_default("attention"),
                   help="attention implementation (transformers' attn_implementation; default auto): auto takes "
                        "flash-attn when installed, else flex for packed rows on a GPU, else sdpa; the console's "
                        "[attention] line says which and why. eager: transformers' plain PyTorch attention")
    p.add_argument("--zero-stage", type=int, choices=ZERO_STAGES, default=3, help="ZeRO stage")
    p.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, default="none", help="optimizer states to cpu/nvme")
    p.add_argument("--offload-param", choices=OFFLOAD_TARGETS, default="none", help="parameters to cpu/nvme (ZeRO-3)")
    p.add_argument("--nvme-path", default=None, help="folder on a fast SSD for NVMe offload")
    p.add_argument("--micro-batch", type=int, default=4, help="sequences per GPU per forward/backward")
    p.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--seq-len", type=int, default=128,
                   help="tokens per row: packed rows hold exactly this many; without packing, examples are cut to it")
    p.add_argument("--lr", type=float, default=_default("lr"),
                   help="peak learning rate (AdamW). Required for real models: full fine-tunes of 7B-14B use "
                        "1e-5 - 2e-5. Default only for the shipped tiny models: 3e-3")
    p.add_argument("--lr-scheduler", choices=LR_SCHEDULERS, default=_default("lr_scheduler"),
                   help="after warm-up: linear decay to 0, cosine to 0, or constant (DeepSpeed WarmupDecayLR / "
                        "WarmupCosineLR / WarmupLR)")
    p.add_argument("--warmup-ratio", type=float, default=_default("warmup_ratio"),
                   help="linear warm-up over ceil(ratio x steps) steps (default 0.05)")
    p.add_argument("--warmup-steps", type=int, default=_default("warmup_steps"), help="warm-up steps; wins over --warmup-ratio")
    p.add_argument("--weight-decay", type=float, default=_default("weight_decay"), help="AdamW weight decay")
    p.add_argument("--max-steps", type=int, default=_default("max_steps"),
                   help="optimizer steps to run; wins over --num-epochs (default for the tiny models: 40)")
    p.add_argument("--num-epochs", type=float, default=_default("num_epochs"),
                   help="passes over the training examples; steps = ceil(epochs x ceil(ceil(examples / (micro batch "
                        "x ranks)) / grad accum)), as the HF Trainer counts them")
    p.add_argument("--eval-fraction", type=float, default=_default("eval_fraction"),
                   help="hold out this fraction of the dataset (seeded) for eval loss (e.g. 0.05)")
    p.add_argument("--eval-dataset", default=_default("eval_dataset"), help="a separate JSONL / datasets folder for eval loss")
    p.add_argument("--eval-steps", type=int, default=_default("eval_steps"),
                   help="eval loss every N steps (and at the last step); default: at the last step only; 0: the same "
                        "(clears a run file's eval-steps; with --eval-fraction 0 and no --eval-dataset: no eval at all)")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="bf16 / fp16 / fp32 (default: bf16 on Ampere+ GPUs, fp16 on older GPUs, fp32 on CPU)")
    p.add_argument("--bf16-states", action="store_true",
                   help="keep master weights, gradients and Adam moments in bf16 (halves host RAM under offload; updates "
                        "below ~0.4%% of a weight are rounded away: docs/benchmarks.md section 13)")
    gc = p.add_mutually_exclusive_group()
    gc.add_argument("--gradient-checkpointing", dest="gradient_checkpointing", action="store_true", default=None,
                    help="recompute activations in backward (less memory, ~1/3 more compute); default on, except "
                         "for the CPU rehearsal of a tiny model")
    gc.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    p.add_argument("--liger", nargs="?", const="on", default="auto", choices=("auto", "on", "off"),
                   help="Liger kernels' fused linear cross-entropy for the loss (llama, qwen2; NVIDIA GPU and "
                        "`pip install liger-kernel`; not ZeRO-3): the full logits are never stored and the memory "
                        "freed buys a larger --micro-batch. auto (default): on where it can run, off elsewhere, "
                        "with the reason on the console; a bare --liger means on (refused where it cannot run)")
    p.add_argument("--output-dir", default="runs/train", help="run folder: metrics, summary, checkpoints, model")
    p.add_argument("--save-steps", type=int, default=_default("save_steps"), help="checkpoint every N steps (0: only at the end)")
    p.add_argument("--save-total-limit", type=int, default=_default("save_total_limit"),
                   help="keep only the newest N complete checkpoints (older ones are deleted after each save)")
    p.add_argument("--save-16bit", choices=SAVE_16BIT, default=_default("save_16bit"),
                   help="gather the 16-bit model into every checkpoint, or only into the final one (intermediate "
                        "checkpoints then hold only the DeepSpeed state for --resume; ~28 GB less per save for 14B)")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in --output-dir")
    p.add_argument("--seed", type=int, default=_default("seed"), help="seed for weights, data order and the eval split")
    p.add_argument("--verify-save", choices=VERIFY_SAVE, default=_default("verify_save"),
                   help="after saving: reload and compare logits (full), check shapes only, or skip")
    p.add_argument("--no-final-save", dest="final_save", action="store_false", help="do not save the model at the end")
    p.add_argument("--report-to", choices=REPORT_TO, default=_default("report_to"),
                   help="also log metrics through Accelerate's tracker (tensorboard: OUTPUT_DIR/tensorboard; needs "
                        "`pip install tensorboard`)")
    p.add_argument("--emulate-gpu-memory-gib", type=float, default=_default("emulate_gpu_memory_gib"),
                   help="cap each rank's GPU memory to emulate a smaller card (e.g. 24 on an H200)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a model's own Python code (off unless asked)")
    p.add_argument("--stop-after-step", type=int, default=None, help=argparse.SUPPRESS)  # tests: simulate a stop
    # where --lr came from when the launch helper passes it on (a run file, a config, the tiny models' default)
    p.add_argument("--lr-source", default=None, help=argparse.SUPPRESS)


# --------------------------------------------------------------------------------------------
# input validation, shared with the launch helper (runs before anything is launched)

def tensorboard_available() -> bool:
    """Whether Accelerate's TensorBoard tracker can write (``torch.utils.tensorboard`` needs the
    ``tensorboard`` package; Accelerate falls back to ``tensorboardX``)."""
    import importlib.util
    return any(importlib.util.find_spec(m) is not None for m in ("tensorboard", "tensorboardX"))


def add_launch_arguments(p: argparse.ArgumentParser, *, with_config: bool) -> None:
    """The options of `cookbook train` / `cookbook launch`: the training entry's (:func:`add_train_arguments`)
    plus the launcher's (world size, machines, estimate inputs, watchdog); ``--config`` with ``with_config``."""
    add_train_arguments(p)
    p.add_argument("--num-processes", "--gpus", dest="num_processes", type=int, default=None,
                   help="world size: ranks over all machines (default: this machine's GPUs × --num-machines; "
                        "2 CPU processes in a rehearsal)")
    p.add_argument("--num-machines", type=int, default=1, help="machines (each runs num_processes/num_machines ranks)")
    p.add_argument("--main-process-ip", default=_default("main_process_ip"), help="address of machine 0")
    p.add_argument("--main-process-port", type=int, default=_default("main_process_port"), help="port on machine 0 (default: a free one)")
    p.add_argument("--gpu-memory-gib", type=float, default=24.0, help="GPU memory for the pre-launch estimate")
    p.add_argument("--host-memory-gib", type=float, default=None, help="host RAM for the estimate (default: this machine's)")
    p.add_argument("--force", action="store_true", help="launch even when the estimate says it will not fit")
    p.add_argument("--hang-timeout", type=float, default=_default("hang_timeout"), help="seconds without progress before the watchdog stops the run")
    p.add_argument("--startup-timeout", type=float, default=_default("startup_timeout"), help="the same before the first output (default: max(hang timeout, 600))")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--dry-run", action="store_true", help="check everything, write the run folder and print the command only")
    if with_config:
        p.add_argument("--config", default=None, help="your own DeepSpeed JSON (linted before launch)")


def validate_args(args) -> list[str]:
    """Check the options that need no model or data; returns messages (empty when fine)."""
    from .plan import MIN_SEQ_LEN
    problems = []
    for name in ("micro_batch", "grad_accum", "seq_len"):
        v = getattr(args, name)
        if v is None or v < 1:
            problems.append(f"--{name.replace('_', '-')}={v}: must be 1 or more")
    if args.seq_len is not None and 1 <= args.seq_len < MIN_SEQ_LEN:
        problems.append(f"--seq-len={args.seq_len}: too short to train on: a row of fewer than {MIN_SEQ_LEN} tokens "
                        f"has no room for an instruction and a response; set --seq-len to 64 or more (at least "
                        f"{MIN_SEQ_LEN})")
    if args.max_steps is not None and args.max_steps < 1:
        problems.append(f"--max-steps={args.max_steps}: must be 1 or more (or leave it out and give --num-epochs)")
    epochs = getattr(args, "num_epochs", None)
    if epochs is not None and not (epochs > 0 and math.isfinite(epochs)):
        problems.append(f"--num-epochs={epochs}: must be a positive number such as 3 (fractions allowed: 0.5)")
    if args.lr is not None and not (args.lr > 0 and math.isfinite(args.lr)):
        problems.append(f"--lr={args.lr}: must be a positive number such as 2e-5")
    if args.save_steps is not None and args.save_steps < 0:
        problems.append(f"--save-steps={args.save_steps}: must be 0 (end only) or a positive number of steps")
    if args.warmup_steps is not None and args.warmup_steps < 0:
        problems.append(f"--warmup-steps={args.warmup_steps}: must be 0 or more")
    ratio = getattr(args, "warmup_ratio", DEFAULT_WARMUP_RATIO)
    if ratio is None or not (0 <= ratio < 1):
        problems.append(f"--warmup-ratio={ratio}: a fraction of the steps in [0, 1), e.g. 0.03")
    frac = getattr(args, "eval_fraction", 0.0) or 0.0
    if not (0 <= frac < 1):
        problems.append(f"--eval-fraction={frac}: a fraction of the dataset in [0, 1), e.g. 0.05")
    if frac and getattr(args, "eval_dataset", None):
        problems.append("--eval-fraction and --eval-dataset: give one of them (a held-out fraction of --dataset, or a "
                        "separate eval file)")
    eval_steps = getattr(args, "eval_steps", None)
    if eval_steps == 0:  # 0: no periodic eval (only at the last step, if there is an eval set); clears a run file's value
        args.eval_steps = eval_steps = None
    if eval_steps is not None and eval_steps < 1:
        problems.append(f"--eval-steps={eval_steps}: must be 1 or more, or 0 for none")
    if eval_steps is not None and not frac and not getattr(args, "eval_dataset", None):
        problems.append(f"--eval-steps={eval_steps} (typed or from a run file): there is no eval set; add --eval-fraction "
                        "0.05 or --eval-dataset FILE, or --eval-steps 0 for no eval")
    limit = getattr(args, "save_total_limit", None)
    if limit is not None and limit < 1:
        problems.append(f"--save-total-limit={limit}: must be 1 or more (the newest complete checkpoint is always kept)")
    if getattr(args, "report_to", "none") == "tensorboard" and not tensorboard_available():
        problems.append("--report-to tensorboard: neither tensorboard nor tensorboardX is installed; "
                        "`pip install tensorboard` (or pip install -e '.[tensorboard]'), or leave --report-to out")
    if args.offload_param != "none" and args.zero_stage != 3:
        problems.append(f"--offload-param={args.offload_param} needs --zero-stage 3 (got {args.zero_stage})")
    if args.offload_optimizer != "none" and args.zero_stage == 0:
        problems.append(f"--offload-optimizer={args.offload_optimizer} needs --zero-stage 1, 2 or 3")
    if "nvme" in (args.offload_optimizer, args.offload_param) and not args.nvme_path:
        problems.append("NVMe offload needs --nvme-path pointing at a folder on a fast SSD")
    return problems


def run_fingerprint(args) -> dict:
    """What must match for ``--resume`` to continue the same run."""
    return {"model": str(args.model), "dataset": str(args.dataset or "shipped"), "seq_len": args.seq_len,
            "micro_batch": args.micro_batch, "grad_accum": args.grad_accum, "seed": args.seed,
            "packing": getattr(args, "packing", None), "dataset_split": getattr(args, "dataset_split", None),
            "dataset_fields": getattr(args, "dataset_fields", None),
            "chat_template": getattr(args, "chat_template", None),
            "eval_fraction": getattr(args, "eval_fraction", 0.0) or 0.0}


def check_output_dir(args, world_size: int) -> list[str]:
    """An output folder holding another run's checkpoints is refused unless resuming that run."""
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        return [f"--output-dir={out}: is a file; give a folder (it will be created)"]
    ckpts = out / "checkpoints"
    has_ckpts = ckpts.is_dir() and any(ckpts.glob("step-*"))
    run_file = out / "run.json"
    if not has_ckpts:
        return []
    if not args.resume:
        return [f"--output-dir={out}: holds checkpoints of an earlier run; pass --resume to continue it, "
                "or choose a new --output-dir"]
    if run_file.is_file():
        before = json.loads(run_file.read_text()).get("fingerprint", {})
        now = dict(run_fingerprint(args), world_size=world_size)
        diff = [f"{k}: {before.get(k)!r} -> {now[k]!r}" for k in now if k in before and before[k] != now[k]]
        if diff:
            return [f"--output-dir={out}: its checkpoints belong to a different run ({'; '.join(diff)}); "
                    "resume with the same settings or choose a new --output-dir"]
    return []


def resolve_tokenizer_path(args) -> str | None:
    """The tokenizer folder to load, or None for the shipped tokenizer.

    ``--tokenizer`` wins (``shipped`` names the shipped one); a shipped architecture uses the shipped
    tokenizer; a model folder uses its own.

    Raises:
        TrainInputError: a model folder without tokenizer files and no ``--tokenizer``: another
            tokenizer's ids would index the wrong embedding rows, so this is never a silent fallback.
    """
    if args.tokenizer == "shipped":
        return None
    if args.tokenizer:
        return args.tokenizer
    from .models import TOKENIZER_FILES, has_tokenizer_files, resolve_model_path
    folder, source = resolve_model_path(args.model)
    if source == "shipped":
        return None  # the shipped tokenizer
    if has_tokenizer_files(folder):
        return str(folder)
    raise TrainInputError(
        f"--model={args.model}: {folder} has no tokenizer files ({', '.join(TOKENIZER_FILES)}). Training with a "
        "tokenizer that is not the model's maps text to the wrong embedding rows. Pass --tokenizer FOLDER with the "
        "model's own tokenizer (`hf download` of the model includes it), or --tokenizer shipped to train with the "
        "shipped 2,048-token tokenizer on purpose.")


def describe_tokenizer(args, tok, path: str | None) -> str:
    """Which tokenizer a run uses, in words, with its vocabulary (for the console and the summary)."""
    from .models import TOKENIZER_DIR
    if path is None:
        why = "asked for with --tokenizer shipped" if args.tokenizer == "shipped" else \
            f"{args.model} is a shipped architecture without a tokenizer"
        return f"shipped {len(tok):,}-token tokenizer ({TOKENIZER_DIR}; {why})"
    own = "the model folder's own" if not args.tokenizer else "--tokenizer"
    return f"{path} ({own}), {len(tok):,} tokens"


def split_records(records, n_eval: int, seed: int):
    """(train, eval) records: ``n_eval`` records drawn with ``random.Random(seed)``, the rest for
    training, both in their original order. Works on a ``datasets.Dataset`` (``select``) or a list."""
    import random
    idx = list(range(len(records)))
    random.Random(seed).shuffle(idx)
    held, kept = sorted(idx[:n_eval]), sorted(idx[n_eval:])
    if hasattr(records, "select"):
        return records.select(kept), records.select(held)
    return [records[i] for i in kept], [records[i] for i in held]


def build_datasets(args, tok) -> tuple:
    """(train examples, train rows, eval examples or None, facts) for ``args``: the records of ``--dataset``
    (any accepted format, ``--dataset-fields``, ``--dataset-split``) minus the ``--eval-fraction`` held out
    (or ``--eval-dataset``). Training examples are tokenized whole and counted as the rows they make
    (:func:`cookbook.data.make_rows`; packed unless ``--no-packing``: the rank decides packing for good
    once it sees the model's attention); eval examples are tokenized one per row, cut to ``--seq-len``.

    Facts: ``records``, ``examples``, ``rows``, ``truncated`` (cut to ``--seq-len``), ``format``,
    ``format_description``, ``longer_than_seq_len``, ``eval_examples``, ``eval_truncated``,
    ``eval_source``, ``dataset_source`` (``--dataset PATH`` or the shipped chats' file), ``loss_on`` (which tokens
    carry the loss, :data:`LOSS_ON`), ``loss_tokens`` and ``tokens`` (:func:`loss_tokens`), and ``data_report``
    (the format and the rows, for the console).

    Raises:
        DataError: the data loader's errors; TrainInputError: an eval split that leaves nothing.
    """
    from .data import load_records, make_rows, tokenize
    fields, split = getattr(args, "dataset_fields", None), getattr(args, "dataset_split", None)
    records = load_records(args.dataset, fields=fields, split=split)
    eval_records, eval_source = None, None
    frac = getattr(args, "eval_fraction", 0.0) or 0.0
    if frac:
        n_eval = max(1, math.ceil(frac * len(records)))
        if n_eval >= len(records):
            raise TrainInputError(f"--eval-fraction={frac}: holds out {n_eval} of {len(records)} records and leaves "
                                  "none to train on; lower it")
        records, eval_records = split_records(records, n_eval, args.seed)
        eval_source = f"{n_eval} records held out of --dataset (--eval-fraction {frac:g}, seed {args.seed})"
    elif getattr(args, "eval_dataset", None):
        eval_records = load_records(args.eval_dataset, fields=fields)
        eval_source = f"--eval-dataset {args.eval_dataset}"
    data = tokenize(records, tok, args.seq_len, packing=True)
    rows = make_rows(data, args.seq_len, packing=getattr(args, "packing", None) is not False, seed=args.seed,
                     pad_id=tok.pad_token_id)
    eval_data = tokenize(eval_records, tok, args.seq_len) if eval_records is not None else None
    trained, tokens = loss_tokens(rows)
    facts = {"records": len(records), "examples": len(data), "rows": len(rows), "truncated": rows.cut,
             "dataset_source": (f"--dataset {args.dataset}" if args.dataset else f"the shipped chats ({records.source})"),
             "loss_on": LOSS_ON.get(records.format, "the labelled tokens"), "loss_tokens": trained, "tokens": tokens,
             "format": records.format, "format_description": records.describe(),
             "longer_than_seq_len": data.num_longer,
             "data_report": f"{records.describe()}; {rows.describe()}",
             "eval_examples": len(eval_data) if eval_data is not None else 0,
             "eval_truncated": eval_data.num_truncated if eval_data is not None else None,
             "eval_source": eval_source}
    return data, rows, eval_data, facts


#: Which tokens carry the loss in each record format (:mod:`cookbook.data`'s table; labels elsewhere are -100).
LOSS_ON = {"messages": "assistant tokens only", "sharegpt": "assistant (gpt) tokens only",
           "alpaca": "response tokens only (output and end-of-sequence)",
           "prompt_completion": "completion tokens only (and end-of-sequence)", "text": "every token"}


def loss_tokens(rows) -> tuple[int, int]:
    """(tokens that carry the loss, real tokens) over the training rows, once each (one epoch).

    A token carries the loss where its label is not -100 (:data:`cookbook.data.IGNORE_INDEX`), from the second
    position of a row on: transformers' causal-LM loss (``ForCausalLMLoss``, loss/loss_utils.py) shifts the labels
    by one, so a row's first label is never predicted. Real tokens are the tokens that are not padding
    (``Rows.real_tokens``)."""
    from .data import IGNORE_INDEX
    trained = sum(sum(1 for t in y[1:] if t != IGNORE_INDEX) for y in rows.labels)
    return trained, sum(rows.real_tokens)


def resolve_hyperparameters(args, num_examples: int, world_size: int) -> dict:
    """Fill ``args.lr``, ``args.max_steps`` and ``args.warmup_steps`` (in place) and say where each came from.

    * ``--lr``: required for real models; the shipped tiny models default to
      :data:`cookbook.models.REHEARSAL_LR` (3e-3), which is 100-300x too high for a 7B-14B model.
      ``lr_source`` says where it came from: ``--lr``, or what the launch helper passed as ``--lr-source``
      (a run file, the DeepSpeed config, the tiny models' default filled into the config's ``"auto"``).
    * ``--max-steps`` wins over ``--num-epochs`` (as in the HF Trainer); epochs become steps with
      :func:`cookbook.dsconfig.total_steps_for_epochs`; the tiny models default to 40 steps.
    * warm-up: ``--warmup-steps`` wins, else ``ceil(max_steps × --warmup-ratio)``
      (:func:`cookbook.dsconfig.warmup_steps_for`).

    Raises:
        TrainInputError: no ``--lr`` or no length (steps/epochs) for a real model.
    """
    from .dsconfig import steps_per_epoch, total_steps_for_epochs, warmup_steps_for
    from .models import REHEARSAL_LR, REHEARSAL_MAX_STEPS, is_rehearsal_model
    rehearsal = is_rehearsal_model(args.model)
    out = {}
    if args.lr is None:
        if not rehearsal:
            raise TrainInputError(
                f"--lr: required for --model {args.model} (there is no default for real models). Full fine-tunes of "
                "7B-14B models typically use 1e-5 - 2e-5 (Stanford Alpaca: 2e-5 for LLaMA-7B; Qwen's finetune.py: "
                "1e-5); the tiny models' 3e-3 would be 100-300x too high.")
        args.lr, out["lr_source"] = REHEARSAL_LR, "the shipped tiny models' default"
    else:
        # the launch helper passes the lr it resolved with its origin (--lr-source); typed here, it is --lr
        out["lr_source"] = getattr(args, "lr_source", None) or "--lr"
    spe = steps_per_epoch(num_examples, args.micro_batch, args.grad_accum, world_size)
    epochs = getattr(args, "num_epochs", None)
    if args.max_steps is None:
        if epochs is not None:
            args.max_steps = total_steps_for_epochs(epochs, num_examples, args.micro_batch, args.grad_accum, world_size)
            out["steps_source"] = f"--num-epochs {epochs:g} × {spe} steps per epoch"
        elif rehearsal:
            args.max_steps, out["steps_source"] = REHEARSAL_MAX_STEPS, "the shipped tiny models' default"
        else:
            raise TrainInputError(
                f"--max-steps / --num-epochs: give one for --model {args.model} (e.g. --num-epochs 3; one epoch of "
                f"{num_examples:,} rows is {spe} optimizer steps at this batch shape)")
    else:
        out["steps_source"] = "--max-steps" + (f" (wins over --num-epochs {epochs:g})" if epochs is not None else "")
    ratio = getattr(args, "warmup_ratio", DEFAULT_WARMUP_RATIO)
    explicit = args.warmup_steps
    args.warmup_steps = warmup_steps_for(args.max_steps, ratio, explicit)
    out["warmup_source"] = "--warmup-steps" if explicit is not None else f"ceil({ratio:g} × {args.max_steps})"
    out.update(lr=args.lr, max_steps=args.max_steps, warmup_steps=args.warmup_steps, steps_per_epoch=spe,
               epochs=round(args.max_steps / spe, 3), lr_scheduler=getattr(args, "lr_scheduler", "linear"))
    return out


def validate_inputs(args, world_size: int, *, gpu_box: bool | None = None, keep_data: bool = False) -> dict:
    """Everything that can be checked before launching: options, model, tokenizer, data, output folder,
    the learning rate and the run's length (filled into ``args``, see :func:`resolve_hyperparameters`).

    Args:
        gpu_box: whether the run is on GPUs (None: whether this machine has an NVIDIA GPU, by NVML).
            On a GPU box a model without weights needs ``--random-weights``.

    Returns facts for the console and the log (:func:`describe_inputs`): model source, tokenizer,
    examples, rows, truncation, the eval split, the schedule; with ``keep_data`` also ``tokenizer``,
    ``data`` (the examples tokenized whole, for :func:`cookbook.data.make_rows`) and ``eval_data``.
    The rows are counted as they will be built with ``--packing`` (on unless ``--no-packing``).

    Raises:
        TrainInputError: naming the option, the value and the fix.
    """
    from .data import DataError, load_tokenizer
    from .models import ModelNotFoundError, describe_source, download_hint, is_rehearsal_model, model_spec
    problems = validate_args(args) + check_output_dir(args, world_size)
    if problems:
        raise TrainInputError("; ".join(problems))
    try:
        spec = model_spec(str(args.model), args.trust_remote_code)
    except ModelNotFoundError as exc:
        raise TrainInputError(str(exc)) from None
    if gpu_box is None:
        from .hardware import on_gpu_machine
        gpu_box = on_gpu_machine()
    if not spec.has_weights and gpu_box and not getattr(args, "random_weights", False) \
            and not is_rehearsal_model(args.model):
        raise TrainInputError(
            f"--model={args.model}: {describe_source(spec)}. On a GPU box that trains a randomly initialised "
            f"{spec.num_params / 1e9:.1f}e9-parameter model: memory and speed are real, the result is not a fine-tune. "
            f"To fine-tune the real model, {download_hint(args.model)} To measure memory and speed on purpose, "
            "add --random-weights.")
    try:
        tok_path = resolve_tokenizer_path(args)
        tok = load_tokenizer(tok_path, args.trust_remote_code, chat_template=getattr(args, "chat_template", None))
        data, rows, eval_data, facts = build_datasets(args, tok)
    except DataError as exc:
        raise TrainInputError(str(exc)) from None
    if len(tok) > spec.vocab_size:
        raise TrainInputError(
            f"--tokenizer: its vocabulary has {len(tok)} tokens but the model's embedding has {spec.vocab_size}; "
            "token ids past the embedding would crash; use the tokenizer that belongs to the model")
    hp = resolve_hyperparameters(args, len(rows), world_size)
    global_batch = args.micro_batch * args.grad_accum * world_size
    facts.update({"tokenizer_vocab": len(tok), "tokenizer": tok_path or "shipped",
                  "tokenizer_source": describe_tokenizer(args, tok, tok_path), "model": str(args.model),
                  "model_source": describe_source(spec), "random_weights": not spec.has_weights,
                  "model_vocab": spec.vocab_size, "num_params": spec.num_params, "global_batch": global_batch,
                  "seq_len": args.seq_len, "hyperparameters": hp, "epochs": hp["epochs"],
                  "small_dataset": small_dataset_note(len(rows), global_batch, micro_batch=args.micro_batch,
                                                      grad_accum=args.grad_accum, world_size=world_size)})
    if keep_data:
        facts.update(tokenizer=tok, data=data, eval_data=eval_data)
    return facts


def small_dataset_note(rows: int, global_batch: int, *, micro_batch: int | None = None,
                       grad_accum: int | None = None, world_size: int | None = None) -> dict | None:
    """The note for a dataset smaller than one global batch (``micro batch × grad accum × world size``
    rows), or None when it is not.

    :func:`cookbook.data.sample_order` fills every optimizer step with a full global batch, wrapping into
    the next epoch's permutation, so each row appears ``global_batch / rows`` times per step (the floor or
    the ceiling of it). The HF Trainer and LLaMA-Factory would instead run steps of fewer rows; either way
    the run goes on, and says so.

    Returns:
        ``{"rows", "global_batch", "repeats_per_step" (global_batch / rows, 2 decimals), "message"}``.
    """
    if rows <= 0 or rows >= global_batch:
        return None
    shape = (f" (--micro-batch {micro_batch} × --grad-accum {grad_accum} × {world_size} rank(s))"
             if None not in (micro_batch, grad_accum, world_size) else " (micro batch × grad accum × world size)")
    lo, hi = global_batch // rows, -(-global_batch // rows)
    times = f"{lo}" if lo == hi else f"{lo}-{hi}"
    message = (f"the data holds {rows:,} row(s), fewer than one global batch of {global_batch:,} rows{shape}: every "
               f"optimizer step repeats each row {times} times ({global_batch} / {rows} = {global_batch / rows:.2f}). "
               "The HF Trainer would run steps of fewer rows instead. For distinct rows in a step, add data or "
               "lower --micro-batch / --grad-accum")
    return {"rows": rows, "global_batch": global_batch, "repeats_per_step": round(global_batch / rows, 2),
            "message": message}


def describe_inputs(facts: dict) -> list[str]:
    """What a run really trains, one console line per fact: model source (random weights or not),
    tokenizer and vocabulary, examples, truncation, the data loader's report (packing), the eval split
    and the schedule."""
    hp = facts.get("hyperparameters") or {}
    lines = [f"[model] {facts['model']}: {facts['num_params']:,} parameters; {facts['model_source']}",
             f"[tokenizer] {facts['tokenizer_source']}; the model's embedding has {facts['model_vocab']:,} rows"]
    data = (f"[data] {facts['examples']:,} training examples"
            + (f" of {facts['records']:,} records" if facts.get("records") not in (None, facts["examples"]) else "")
            + (f" from {facts['dataset_source']}" if facts.get("dataset_source") else "")
            + (f"; the loss is on {facts['loss_on']}: {facts['loss_tokens']:,} of {facts['tokens']:,} tokens "
               f"({100 * facts['loss_tokens'] / facts['tokens']:.1f}%)" if facts.get("tokens") else "")
            + (f"; {facts['truncated']:,} longer than --seq-len {facts['seq_len']} cut to it (packing off)"
               if facts.get("truncated") else ""))
    lines.append(data)
    if facts.get("data_report"):
        lines.append(f"[data] {facts['data_report']}")
    if facts.get("small_dataset"):
        lines.append(f"[data] NOTE: {facts['small_dataset']['message']}")
    if facts.get("eval_source"):
        lines.append(f"[eval] {facts['eval_examples']:,} eval examples: {facts['eval_source']}")
    if hp:
        # with a DeepSpeed config's own scheduler block, that block is what runs (DummyScheduler): say it
        shape = (f"{hp['scheduler']} ({hp.get('scheduler_source') or 'the DeepSpeed config: scheduler'}, which "
                 "DeepSpeed runs)" if hp.get("scheduler") else
                 f"{hp['lr_scheduler']} after {hp['warmup_steps']} warm-up step(s) ({hp['warmup_source']})")
        lines.append(f"[schedule] lr {hp['lr']:g} ({hp['lr_source']}), {shape}; {hp['max_steps']} optimizer steps "
                     f"({hp['steps_source']}) = {hp['epochs']:g} epoch(s) at a global batch of {facts['global_batch']} rows")
    return lines


# --------------------------------------------------------------------------------------------
# measurements

def host_rss_gib() -> float:
    import psutil
    return psutil.Process().memory_info().rss / GIB


def host_peak_rss_gib() -> float:
    """Peak resident set size of this process (``getrusage`` ru_maxrss, KiB on Linux), GiB, plus the memory that
    only its live child processes hold now (psutil's USS: pages not shared with another process) — ZenFlow's
    overlapped optimizer step runs in such a child (DeepSpeed ``runtime/zenflow/zenflow_utils.py``,
    ``start_optimizer_process``) and holds Adam m, v there; the tensors it shares with the rank are counted once,
    in the rank's RSS."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    import psutil
    children = 0
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        kids = []
    for child in kids:
        try:
            children += child.memory_full_info().uss
        except psutil.Error:   # gone, or not ours to read: nothing to count
            pass
    return (own + children) / GIB


def proc_io_bytes() -> list[int] | None:
    """[read_bytes, write_bytes] this process (all its threads) has moved to/from storage so far, from Linux's
    ``/proc/self/io`` (block-layer accounting: O_DIRECT/libaio I/O included, page-cache hits not); None
    where unavailable."""
    try:
        fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
        return [int(fields["read_bytes"]), int(fields["write_bytes"])]
    except (OSError, KeyError, ValueError):
        return None


def peak_tflops(device_name: str | None) -> float | None:
    if not device_name:
        return None
    for key, value in PEAK_BF16_TFLOPS.items():
        if key.lower() in device_name.lower():
            return value
    return None


def zero_partition_numel(engine) -> dict:
    """This rank's share of the partitioned state: proof that ZeRO really partitions.

    ZeRO-3: the elements of every parameter this rank holds (``param.ds_tensor``,
    deepspeed/runtime/zero/partition_parameters.py). ZeRO-1/2: the elements of this rank's fp32
    master partition (``single_partition_of_fp32_groups``, deepspeed/runtime/zero/stage_1_and_2.py).
    """
    model = engine.module
    if any(hasattr(p, "ds_tensor") for p in model.parameters()):
        return {"kind": "zero3 parameter partition (ds_tensor)",
                "numel": int(sum(p.ds_tensor.numel() for p in model.parameters() if hasattr(p, "ds_tensor"))),
                "full_numel": int(sum(p.ds_numel for p in model.parameters() if hasattr(p, "ds_numel")))}
    opt = getattr(engine, "optimizer", None)
    groups = getattr(opt, "single_partition_of_fp32_groups", None)
    if groups:
        return {"kind": "zero1/2 fp32 master-weight partition", "numel": int(sum(t.numel() for t in groups)),
                "full_numel": int(sum(p.numel() for p in model.parameters()))}
    return {"kind": "not partitioned", "numel": int(sum(p.numel() for p in model.parameters())),
            "full_numel": int(sum(p.numel() for p in model.parameters()))}


# --------------------------------------------------------------------------------------------

def _print_rank0(accelerator, *msg) -> None:
    if accelerator.is_main_process:
        print(*msg, flush=True)


def device_state_bytes(engine, ds_config: dict) -> dict:
    """Bytes of model states this rank keeps on its compute device (not offloaded), by kind.

    Parameters and optimizer states are counted from the tensors DeepSpeed actually holds:
    ``ds_tensor`` partitions under ZeRO-3 (else the full parameters), the fp32 master partition
    (``single_partition_of_fp32_groups`` / ``fp32_partitioned_groups_flat``) and the wrapped
    optimizer's state (Adam m and v). Gradients are counted from the parameter count: full under
    ZeRO-0/1, this rank's 1/world share under ZeRO-2/3 (ZeRO paper, Rajbhandari et al. 2020, §5).
    Offloaded states (``offload_optimizer``/``offload_param`` device cpu/nvme) count as zero.
    Used for the CPU rehearsal's device budget, where "GPU" and host are the same memory.
    """
    import torch
    zero = ds_config.get("zero_optimization") or {}
    stage = int(zero.get("stage", 0))
    off_opt = (zero.get("offload_optimizer") or {}).get("device", "none") not in ("none", None)
    off_param = (zero.get("offload_param") or {}).get("device", "none") not in ("none", None)
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    params = list(engine.module.parameters())
    if any(hasattr(p, "ds_tensor") for p in params):
        param_bytes = sum(p.ds_tensor.numel() * p.ds_tensor.element_size() for p in params if hasattr(p, "ds_tensor"))
        numel = sum(p.ds_numel for p in params if hasattr(p, "ds_numel"))
    else:
        param_bytes = sum(p.numel() * p.element_size() for p in params)
        numel = sum(p.numel() for p in params)
    elem = params[0].element_size() if params else 4
    grad_bytes = numel * elem / (world if stage >= 2 else 1)
    opt, seen, opt_bytes = engine.optimizer, set(), 0

    def add(t):
        nonlocal opt_bytes
        if isinstance(t, torch.Tensor) and t.data_ptr() not in seen and t.numel():
            seen.add(t.data_ptr())
            opt_bytes += t.numel() * t.element_size()
    for name in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
        for t in getattr(opt, name, None) or []:
            add(t)
    inner = getattr(opt, "optimizer", opt)
    for state in getattr(inner, "state", {}).values():
        for t in state.values():
            add(t)
    return {"params": 0 if off_param else param_bytes, "grads": grad_bytes,
            "optimizer": 0 if off_opt else opt_bytes}


def check_device_budget(engine, ds_config: dict, budget_gib: float) -> dict:
    """CPU rehearsal of a GPU's memory: raise ``torch.OutOfMemoryError`` when this rank's device-resident
    model states (:func:`device_state_bytes`) exceed ``budget_gib`` — as the GPU's allocator would."""
    import torch
    held = device_state_bytes(engine, ds_config)
    total = sum(held.values())
    if total > budget_gib * GIB:
        raise torch.OutOfMemoryError(
            f"CPU rehearsal of a {budget_gib:.4g} GiB device: model states need {total / GIB:.4f} GiB on this rank "
            f"(parameters {held['params'] / GIB:.4f}, gradients {held['grads'] / GIB:.4f}, optimizer "
            f"{held['optimizer'] / GIB:.4f}). Tried to allocate {(total - budget_gib * GIB) / GIB:.4f} GiB "
            f"beyond the budget of {budget_gib:.4g} GiB.")
    return {k: v / GIB for k, v in held.items()}


def _inject_fault(step: int, rank: int) -> None:
    """Test hook: ``COOKBOOK_FAULT=kind@rank:step`` makes one rank die the way real runs die —
    ``kill`` (SIGKILL, as the kernel's OOM killer does), ``oom`` (a raised torch.OutOfMemoryError),
    ``hang`` (stops making progress), ``error`` (a plain exception)."""
    spec = os.environ.get("COOKBOOK_FAULT")
    if not spec:
        return
    kind, _, where = spec.partition("@")
    f_rank, _, f_step = where.partition(":")
    if int(f_rank or 0) != rank or int(f_step or 1) != step:
        return
    import signal
    import torch
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "oom":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity "
                                     "of 24.00 GiB of which 1.25 GiB is free. (injected by COOKBOOK_FAULT)")
    elif kind == "hang":
        while True:
            time.sleep(3600)
    elif kind == "error":
        raise RuntimeError("injected failure (COOKBOOK_FAULT)")


def _redirect_output_to_rank_log() -> None:
    """Under the launch helper (``COOKBOOK_LOG_DIR`` set) every rank writes all its output, C-level
    included, to ``logs/rank{RANK}.log``."""
    folder, rank = os.environ.get("COOKBOOK_LOG_DIR"), os.environ.get("RANK")
    if not folder or rank is None:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(folder) / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _exit_on_sigterm() -> None:
    """Turn SIGTERM (sent by torchrun when a peer fails or the launcher stops, by the launch helper's
    watchdog, and by the kernel when the launcher dies: :func:`cookbook.procs.guard_rank`) and SIGINT
    into ``SystemExit``, so ``finally`` blocks run — notably the release of torch's JIT-build lock file
    (``torch/utils/file_baton.py``), which a killed rank would otherwise leave behind, blocking
    every later run at startup — and the rank leaves without a KeyboardInterrupt traceback."""
    import signal

    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: list[str] | None = None) -> int:
    from .procs import guard_rank
    _redirect_output_to_rank_log()
    _exit_on_sigterm()
    guard_rank()  # this rank dies with its launcher (parent-death signal + parent watch)
    parser = argparse.ArgumentParser(prog="python -m cookbook.train", description=__doc__.splitlines()[0])
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return _train(args)
    except TrainInputError as exc:
        print(f"{ERROR_PREFIX}{exc}", file=sys.stderr, flush=True)
        code = 2
    except SystemExit as exc:  # SIGTERM (see _exit_on_sigterm)
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - report, then leave without the process-group teardown
        import traceback
        traceback.print_exc()
        code = 1
    # A rank that failed must not wait in the distributed teardown (gloo/NCCL destructors and
    # atexit hooks block on peers that are still inside a collective): leave at once so the
    # launcher sees the exit and stops the others.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _train(args) -> int:
    """One rank's run, in the shape of torchtune's recipes (recipes/full_finetune_single_device.py: setup, then
    the training loop of steps, evals and saves, then the end): :class:`_Recipe`."""
    recipe = _Recipe(args)
    recipe.setup()
    recipe.train()
    recipe.finish()
    return 0


class _Recipe:
    """The steps of one rank's run. :meth:`setup`: the device, Accelerate + DeepSpeed, the model, the rows,
    the engine, a resume. :meth:`train`: :meth:`step` per optimizer step, eval (:func:`evaluate`) and
    :meth:`save` when due. :meth:`finish`: the final save, its verification, the summary."""

    def __init__(self, args):
        self.args = args

    # ---- setup -----------------------------------------------------------------------------------

    def setup(self) -> None:
        self.setup_device()
        self.setup_accelerator()
        self.setup_model()
        self.setup_rows()
        self.setup_engine()
        self.resume()

    def setup_device(self) -> None:
        """Offline hub, this rank's GPU and, with ``--emulate-gpu-memory-gib``, its memory cap
        (``torch.cuda.set_per_process_memory_fraction``, before anything is allocated on the GPU)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        args = self.args
        self.cuda = torch.cuda.is_available()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if self.cuda:
            torch.cuda.set_device(self.local_rank)
            if args.emulate_gpu_memory_gib:
                total = torch.cuda.get_device_properties(self.local_rank).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, args.emulate_gpu_memory_gib * GIB / total),
                                                           self.local_rank)

    def setup_accelerator(self) -> None:
        """The inputs validated (before Accelerate enables ZeRO-3 init, which would hook the meta-device model
        count too); the Accelerator with its DeepSpeed plugin; the world size checked; the config's scheduler."""
        import torch.distributed as dist
        from accelerate import Accelerator
        from accelerate.utils import InitProcessGroupKwargs, set_seed
        args = self.args
        expected = int(os.environ.get("WORLD_SIZE", "1"))
        self.facts = facts = validate_inputs(args, expected, gpu_box=self.cuda, keep_data=True)
        self.tok, self.tokenized, self.eval_data = facts.pop("tokenizer"), facts.pop("data"), facts.pop("eval_data")
        # On a CPU-only machine Accelerate finds no backend for the device and each rank would run alone
        # (num_processes reads 1): ask for gloo explicitly so the world is real.
        handlers = [] if self.cuda else [InitProcessGroupKwargs(backend="gloo")]
        tracking = {} if args.report_to == "none" else {"log_with": args.report_to, "project_dir": str(args.output_dir)}
        self.accelerator = Accelerator(kwargs_handlers=handlers, **tracking)
        self.world = world = self.accelerator.num_processes
        if world != expected or (dist.is_initialized() and dist.get_world_size() != expected):
            raise TrainInputError(f"world size: the launcher started {expected} ranks but Accelerate sees {world}; "
                                  "the ranks would train independently. Launch with `cookbook train`/`cookbook launch`")
        plugin = self.accelerator.state.deepspeed_plugin
        if plugin is None:
            raise TrainInputError("no DeepSpeed config reached this rank; launch with `cookbook train` "
                                  "(it writes the Accelerate config with distributed_type: DEEPSPEED)")
        self.ds_config = ds_config = plugin.deepspeed_config
        if isinstance(ds_config.get("scheduler"), dict):  # what runs (DummyScheduler below), for the summary
            from .dsconfig import SCHEDULER_KINDS, describe_scheduler
            hp, sched = facts["hyperparameters"], ds_config["scheduler"]
            opt_lr = ((ds_config.get("optimizer") or {}).get("params") or {}).get("lr")
            hp.update(scheduler=describe_scheduler(sched, opt_lr if isinstance(opt_lr, (int, float)) else args.lr),
                      scheduler_source="ds_config.json: scheduler")
            hp["lr_scheduler"] = args.lr_scheduler = SCHEDULER_KINDS.get(sched.get("type")) or str(sched.get("type"))
        self.out = Path(args.output_dir)
        set_seed(args.seed)

    def setup_model(self) -> None:
        """Liger's patch (before the model is built), the precision, the attention kernel, the model (its weights
        or a random initialisation), gradient checkpointing."""
        import torch
        from .models import model_spec
        args, accelerator, ds_config = self.args, self.accelerator, self.ds_config
        self.spec = spec = model_spec(str(args.model), args.trust_remote_code)
        from . import liger
        stage = (ds_config.get("zero_optimization") or {}).get("stage", 0)
        try:
            use_liger, why = liger.resolve(getattr(args, "liger", "auto"), model_type=spec.model_type,
                                           zero_stage=stage, on_gpu=self.cuda)
        except liger.LigerError as exc:
            raise TrainInputError(str(exc)) from None
        self.liger = use_liger
        if not use_liger and why.startswith("auto"):
            _print_rank0(accelerator, f"[liger] {why}")
        if use_liger:
            found = liger.problems(model_type=spec.model_type, zero_stage=stage, on_gpu=self.cuda)
            if found:
                raise TrainInputError("; ".join(found))
            try:
                _print_rank0(accelerator, f"[liger] {liger.apply_liger(spec.model_type)}")
            except liger.LigerError as exc:
                raise TrainInputError(str(exc)) from None
        self.precision = ("bf16" if ds_config.get("bf16", {}).get("enabled") else
                          "fp16" if ds_config.get("fp16", {}).get("enabled") else "fp32")
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.precision]
        _print_rank0(accelerator, "[model] trust_remote_code=True: the model's own Python code runs (asked for with "
                     "--trust-remote-code)" if args.trust_remote_code else "[model] trust_remote_code=False: only "
                     "transformers' own modelling code runs")
        from .attention import AttentionError, choose
        try:
            attn_impl, attn_why = choose(getattr(args, "attention", "auto"), on_gpu=self.cuda, packing=args.packing,
                                         zero_stage=(ds_config.get("zero_optimization") or {}).get("stage"))
        except AttentionError as exc:
            raise TrainInputError(str(exc)) from None
        _print_rank0(accelerator, f"[attention] {attn_impl} ({attn_why})")
        self.model, origin = self.build_model(attn_impl)
        _print_rank0(accelerator, f"[model] {args.model}: {spec.num_params:,} parameters, {origin}, {self.precision}")
        self.gradient_checkpointing = (args.gradient_checkpointing if args.gradient_checkpointing is not None else
                                       default_gradient_checkpointing(args.model, self.cuda))
        _print_rank0(accelerator, f"[model] gradient checkpointing {'on' if self.gradient_checkpointing else 'off'}")
        if self.gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.config.use_cache = False

    def build_model(self, attn_impl: str):
        """(the model, where its weights came from): its weights (safetensors, or ``torch.load`` with
        ``weights_only=True``), or a random initialisation of the architecture."""
        from transformers import AutoModelForCausalLM
        from .models import resolve_model_path
        args = self.args
        folder, _ = resolve_model_path(args.model)
        if self.spec.has_weights:
            with quiet_loading_bars():  # the rank's stderr is its log file: no "Loading weights" redraws there
                model = AutoModelForCausalLM.from_pretrained(folder, dtype=self.dtype, use_safetensors=None,
                                                             attn_implementation=attn_impl,
                                                             trust_remote_code=args.trust_remote_code,
                                                             local_files_only=True)
            safe = any((folder / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json"))
            return model, f"weights from {folder} ({'safetensors' if safe else 'torch.load with weights_only=True'})"
        zero3 = (self.ds_config.get("zero_optimization") or {}).get("stage") == 3
        # Random init on the GPU when the whole model lives there anyway (ZeRO-0/1/2): initialising
        # 3.4e9 parameters on the CPU took ~3 minutes on the H200 box. ZeRO-3 builds under zero.Init.
        model = random_weights_model(folder, self.dtype, self.accelerator.device if self.cuda and not zero3 else "cpu",
                                     seed=args.seed, attn_impl=attn_impl, trust_remote_code=args.trust_remote_code)
        return model, "random weights (architecture only)"

    def setup_rows(self) -> None:
        """Packed rows, or one example per row: packing decided for good once the model's attention is known
        (:func:`cookbook.data.packing_attention`); what the rows hold and how attention treats them, said."""
        from .data import make_rows, packed_attention_cost_note, packing_attention
        args, accelerator, facts = self.args, self.accelerator, self.facts
        attention = packing_attention(self.model)
        if args.packing is None:
            packing = attention["within_examples"]
            why = ("default: the attention keeps packed examples apart" if packing else
                   "default off: the attention would let packed examples see each other; --packing packs anyway")
        else:
            packing = bool(args.packing)
            why = "--packing" if packing else "--no-packing"
        self.data = data = make_rows(self.tokenized, args.seq_len, packing=packing, seed=args.seed,
                                     pad_id=self.tok.pad_token_id)
        self.packing, self.packing_reason = packing, why
        self.flatten = packing and attention["flatten"]
        facts.update(rows=len(data), truncated=data.cut,
                     epochs=round(args.max_steps * facts["global_batch"] / len(data), 2))
        trained, tokens = loss_tokens(data)
        _print_rank0(accelerator, f"[data] {args.dataset or 'shipped data/chats.jsonl'}: {facts['examples']:,} examples, "
                     f"{facts['format_description']}; {data.describe()} ({why}); the loss is on "
                     f"{facts.get('loss_on', 'the labelled tokens')}: {trained:,} of {tokens:,} tokens")
        _print_rank0(accelerator, f"[data] global batch {facts['global_batch']} rows of {args.seq_len} token slots, "
                     f"{facts['epochs']} epochs over {args.max_steps} steps")
        facts["small_dataset"] = small_dataset_note(len(data), facts["global_batch"], micro_batch=args.micro_batch,
                                                    grad_accum=args.grad_accum, world_size=self.world)
        if facts["small_dataset"]:
            _print_rank0(accelerator, f"[data] NOTE: {facts['small_dataset']['message']}")
        _print_rank0(accelerator, "[attention] " + (attention["how"] if packing else
                     f"{attention['implementation']}: no packing, one example per row; padding is masked by attention_mask"))
        if packing and not attention["within_examples"]:
            _print_rank0(accelerator, "[attention] WARNING: packed examples attend to the earlier examples of their row "
                         "(position_ids restart per example, but the mask does not separate them)")
        cost = packed_attention_cost_note(attention, packing=packing, on_gpu=accelerator.device.type == "cuda")
        if cost:
            attention = dict(attention, cost_note=cost)
            _print_rank0(accelerator, f"[attention] note: {cost}")
        self.attention = attention

    def setup_engine(self) -> None:
        """The DeepSpeed engine (``accelerator.prepare``; the config's optimizer and scheduler through
        ``DummyOptim``/``DummyScheduler``), the CPU device budget, each rank's ZeRO partition."""
        import torch
        import torch.distributed as dist
        from accelerate.utils import DummyOptim, DummyScheduler
        args, accelerator, ds_config, model = self.args, self.accelerator, self.ds_config, self.model
        optimizer = (DummyOptim(model.parameters()) if "optimizer" in ds_config else
                     torch.optim.AdamW(model.parameters(), lr=args.lr))
        scheduler = DummyScheduler(optimizer) if "scheduler" in ds_config else None
        if scheduler is not None:
            self.engine, self.optimizer, self.scheduler = accelerator.prepare(model, optimizer, scheduler)
        else:
            self.engine, self.optimizer = accelerator.prepare(model, optimizer)
        self.device_budget = None
        if not self.cuda and args.emulate_gpu_memory_gib:
            self.device_budget = check_device_budget(self.engine, ds_config, args.emulate_gpu_memory_gib)
            _print_rank0(accelerator, f"[budget] device-resident model states per rank: "
                         + ", ".join(f"{k} {v:.4f} GiB" for k, v in self.device_budget.items())
                         + f" (budget {args.emulate_gpu_memory_gib:.4g} GiB)")
        self.part = part = zero_partition_numel(self.engine)
        self.shares = [None] * self.world
        dist.all_gather_object(self.shares, part["numel"])
        stage = ds_config["zero_optimization"].get("stage", 0) if "zero_optimization" in ds_config else 0
        _print_rank0(accelerator, f"[zero] stage {stage}, world size {self.world}: {part['kind']} per rank "
                     f"{self.shares} of {part['full_numel']:,}")

    def resume(self) -> None:
        """With ``--resume``, the newest complete checkpoint loaded; ``run.json`` written and ``metrics.jsonl``
        cut back to the checkpoint's step (rows past it will be redone)."""
        from . import checkpoint as ckpt
        args, accelerator, out = self.args, self.accelerator, self.out
        self.ckpt_root = ckpt_root = out / "checkpoints"
        self.start_step, self.resumed_from = 0, None
        if args.resume:
            found, messages = ckpt.find_resumable(ckpt_root)
            for m in messages:
                _print_rank0(accelerator, f"[resume] {m}")
            if found is None:
                _print_rank0(accelerator, f"[resume] no complete checkpoint in {ckpt_root}: starting from step 0")
            else:
                accelerator.load_state(str(found / "deepspeed"))
                self.start_step = ckpt.checkpoint_step(found)
                self.resumed_from = str(found)
                _print_rank0(accelerator, f"[resume] continuing from {found.name} (step {self.start_step})")
        if accelerator.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
            ckpt.atomic_write_text(out / "run.json", json.dumps(
                {"fingerprint": dict(run_fingerprint(args), world_size=self.world), "args": vars(args)}, indent=1,
                default=str))
            metrics_path = out / "metrics.jsonl"
            kept = []
            if args.resume and metrics_path.is_file():
                kept = [l for l in metrics_path.read_text().splitlines()
                        if l.strip() and json.loads(l)["step"] <= self.start_step]
            ckpt.atomic_write_text(metrics_path, "".join(l + "\n" for l in kept))
        accelerator.wait_for_everyone()

    # ---- the training loop -----------------------------------------------------------------------

    def train(self) -> None:
        """Optimizer steps from the resumed step to ``--max-steps`` (or ``--stop-after-step``): each step's row
        (with eval loss when due) into ``metrics.jsonl``, the tracker and rank 0's ``COOKBOOK_STEP`` line; a
        checkpoint every ``--save-steps`` before the last step."""
        import torch
        args, accelerator = self.args, self.accelerator
        self.engine.train()
        self.rows = []
        if args.report_to != "none":
            accelerator.init_trackers(args.report_to, config=tracker_config(args, self.facts))
            _print_rank0(accelerator, f"[report] metrics also go to {args.report_to} in {self.out / args.report_to}")
        self.device_name = torch.cuda.get_device_name(self.local_rank) if self.cuda else None
        self.peak = peak_tflops(self.device_name)
        self.last_step, self.io_first = self.start_step, None
        for step in range(self.start_step, args.max_steps):
            row = self.step(step)
            if self.due_for_eval(step + 1):
                ev = evaluate(accelerator, self.engine, self.eval_data, self.tok.pad_token_id, args.micro_batch)
                row.update(ev)
                _print_rank0(accelerator, f"[eval] step {step + 1}: eval loss {ev['eval_loss']:.4f} over "
                             f"{len(self.eval_data)} examples ({ev['eval_tokens']} tokens)")
            self.record(step, row)
            if self.device_budget is not None and step == self.start_step:  # Adam states may appear at the first step
                self.device_budget = check_device_budget(self.engine, self.ds_config, args.emulate_gpu_memory_gib)
            if args.save_steps and self.last_step % args.save_steps == 0 and self.last_step < args.max_steps:
                self.save(self.last_step, final=False)
            if args.stop_after_step and self.last_step >= args.stop_after_step:
                break

    def due_for_eval(self, step: int) -> bool:
        args = self.args
        return self.eval_data is not None and (step == args.max_steps or bool(args.eval_steps and step % args.eval_steps == 0))

    def record(self, step: int, row: dict) -> None:
        """The step's row to the tracker, ``metrics.jsonl`` and rank 0's ``COOKBOOK_STEP`` line (the launcher's
        progress reads it)."""
        args, accelerator = self.args, self.accelerator
        self.rows.append(row)
        if args.report_to != "none":
            accelerator.log({k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}, step=step + 1)
        if step == self.start_step:
            self.io_first = proc_io_bytes()  # storage I/O after the first step: steady-state traffic is measured from here
        if accelerator.is_main_process:
            with open(self.out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(STEP_PREFIX + json.dumps(dict(row, max_steps=args.max_steps)), flush=True)
        self.last_step = step + 1

    def step(self, step: int) -> dict:
        """One optimizer step (``--grad-accum`` micro batches of ``--micro-batch`` rows per rank, in the order of
        :func:`cookbook.data.sample_order`) and its row: loss, lr, grad norm, tokens/s, MFU, peaks, row widths."""
        import torch
        import torch.distributed as dist
        from .data import sample_order
        args, accelerator, engine, data = self.args, self.accelerator, self.engine, self.data
        device, G, B, world = accelerator.device, args.grad_accum, args.micro_batch, self.world
        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses, tokens, slots, row_max, width_max, mb_max = [], 0, 0, 0, 0, 0
        _inject_fault(step + 1, accelerator.process_index)
        for micro in range(G):
            idx = sample_order(len(data), args.seed, step, micro, accelerator.process_index, B, G, world)
            batch = data.batch(idx, self.tok.pad_token_id, flatten=self.flatten)
            batch = {k: v.to(device) for k, v in batch.items()}
            with accelerator.accumulate(engine):
                loss = engine(**batch).loss
                accelerator.backward(loss)
            losses.append(loss.detach().float())
            real = [data.real_tokens[i] for i in idx]
            tokens += sum(real)
            slots += batch["input_ids"].numel()
            row_max, mb_max = max(row_max, max(real)), max(mb_max, sum(real))
            width_max = max(width_max, batch["input_ids"].numel() // len(idx))
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        stats = torch.stack([torch.stack(losses).mean(), torch.tensor(float(tokens), device=losses[0].device),
                             torch.tensor(float(slots), device=losses[0].device)])
        stats = accelerator.reduce(stats.to(device), reduction="sum")
        maxes = torch.tensor([float(row_max), float(width_max), float(mb_max)], device=device)
        if dist.is_initialized():
            dist.all_reduce(maxes, op=dist.ReduceOp.MAX)
        return self.step_row(step, dt, float(stats[0]) / world, float(stats[1]), float(stats[2]), maxes)

    def step_row(self, step: int, dt: float, loss_mean: float, global_tokens: float, global_slots: float,
                 maxes) -> dict:
        """The metrics row of a step from its wall time ``dt`` (s) and its reduced sums. MFU for the rows that ran:
        the attention term of 6N + 12·L·h·s with s = the mean row width computed (:func:`flops_per_token`)."""
        import torch
        args, engine, spec, cuda = self.args, self.engine, self.spec, self.cuda
        rows_run = args.micro_batch * args.grad_accum * self.world
        grad_norm = engine.get_global_grad_norm()
        grad_norm = float(grad_norm) if grad_norm is not None else None
        lr = engine.get_lr()[0] if hasattr(engine, "get_lr") else args.lr
        tps = global_tokens / dt
        flops_tok = flops_per_token(spec.num_params, spec.num_layers, spec.hidden_size, global_slots / rows_run)
        tflops = tps * flops_tok / self.world / 1e12
        return {"step": step + 1, "loss": round(loss_mean, 6), "lr": lr, "grad_norm": grad_norm,
                "tokens_per_s": round(tps, 2), "samples_per_s": round(rows_run / dt, 3),
                "step_time_s": round(dt, 4), "tflops": round(tflops, 4) if cuda else None,
                "mfu": round(tflops / self.peak, 5) if (cuda and self.peak) else None,
                "peak_gpu_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 3) if cuda else None,
                "peak_gpu_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 3) if cuda else None,
                "host_rss_gib": round(host_rss_gib(), 3),
                "real_tokens": int(global_tokens), "token_slots": int(global_slots),
                "packing_efficiency": round(global_tokens / global_slots, 5) if global_slots else None,
                "row_tokens_mean": round(global_tokens / rows_run, 2), "row_tokens_max": int(maxes[0]),
                "row_width_max": int(maxes[1]), "micro_batch_tokens_max": int(maxes[2])}

    def save(self, step: int, final: bool) -> None:
        """A checkpoint of ``step``: the DeepSpeed state (for ``--resume``) and, for the final one or with
        ``--save-16bit every``, the gathered 16-bit model (under ZeRO-3 a collective: every rank takes the same
        branch); written to a temporary folder and renamed when complete; older ones rotated out by
        ``--save-total-limit``."""
        from . import checkpoint as ckpt
        args, accelerator, engine, tok, ckpt_root = self.args, self.accelerator, self.engine, self.tok, self.ckpt_root
        tmp = ckpt.tmp_dir(ckpt_root, step)
        accelerator.save_state(str(tmp / "deepspeed"))
        gather = final or args.save_16bit == "every"
        state_dict = accelerator.get_state_dict(engine) if gather else None
        if accelerator.is_main_process:
            if gather:
                accelerator.unwrap_model(engine).save_pretrained(tmp / "hf", state_dict=state_dict,
                                                                 safe_serialization=True)
                tok.save_pretrained(tmp / "hf")
            else:  # config and tokenizer only (for to-fp32); the weights are in the DeepSpeed state
                accelerator.unwrap_model(engine).config.save_pretrained(tmp / ckpt.CONFIG_DIR)
                tok.save_pretrained(tmp / ckpt.CONFIG_DIR)
            ckpt.atomic_write_text(tmp / "trainer_state.json", json.dumps({"step": step, "seed": args.seed}))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            folder = ckpt.finalize(ckpt_root, step)
            print(f"[checkpoint] step {step} saved to {folder}"
                  + ("" if gather else " (DeepSpeed state only: --save-16bit final)"), flush=True)
            if args.save_total_limit:
                for name in ckpt.rotate(ckpt_root, args.save_total_limit):
                    print(f"[checkpoint] removed {name} (--save-total-limit {args.save_total_limit})", flush=True)
        accelerator.wait_for_everyone()

    # ---- the end ---------------------------------------------------------------------------------

    def finish(self) -> None:
        """The final save and its verification (``final_model/`` copied from the verified checkpoint), each rank's
        peaks gathered, ``summary.json`` written, the process group torn down."""
        import torch
        import torch.distributed as dist
        args, accelerator, out, cuda = self.args, self.accelerator, self.out, self.cuda
        io_span = [self.io_first, proc_io_bytes(), self.last_step - self.start_step - 1]
        finished = self.last_step >= args.max_steps
        if finished and args.final_save:
            self.save(self.last_step, final=True)
        verification = self.verify_final() if finished and args.final_save and args.verify_save != "off" else None
        host_peaks = [None] * self.world
        dist.all_gather_object(host_peaks, {"host": socket_name(), "peak": host_peak_rss_gib(), "io": io_span,
                                            "gpu_alloc": torch.cuda.max_memory_allocated() / GIB if cuda else None,
                                            "gpu_reserved": torch.cuda.max_memory_reserved() / GIB if cuda else None})
        if accelerator.is_main_process:
            all_rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
            self.facts.update(packing=self.packing, packing_reason=self.packing_reason, attention=self.attention,
                              liger=self.liger,
                              rows_stats=self.data.stats())
            write_summary(out, args, all_rows, self.world, self.ds_config, self.shares, self.part, host_peaks,
                          self.facts, self.spec, self.gradient_checkpointing, self.precision, finished,
                          self.resumed_from, verification, self.device_name)
        accelerator.wait_for_everyone()
        accelerator.end_training()
        if dist.is_initialized():
            dist.destroy_process_group()

    def verify_final(self) -> dict:
        """The final checkpoint's 16-bit model reloaded and compared (:func:`verify_saved_model`); on rank 0,
        ``final_model/`` replaced by a copy of it (through a temporary folder and a rename)."""
        from . import checkpoint as ckpt
        args, accelerator, out = self.args, self.accelerator, self.out
        hf = self.ckpt_root / ckpt.step_name(self.last_step) / "hf"
        verification = verify_saved_model(accelerator, self.engine, hf, self.data, self.tok, self.dtype,
                                          full=args.verify_save == "full", flatten=self.flatten)
        if accelerator.is_main_process:
            import shutil
            final_model = out / "final_model"
            tmp_final = out / ".tmp-final_model"
            shutil.rmtree(tmp_final, ignore_errors=True)
            shutil.copytree(hf, tmp_final)
            shutil.rmtree(final_model, ignore_errors=True)
            os.rename(tmp_final, final_model)
        return verification


def random_weights_model(folder, dtype, device, *, seed: int = 0, attn_impl: str | None = None,
                         trust_remote_code: bool = False):
    """The architecture of the model folder ``folder`` (its ``config.json``) with a random initialisation
    (``torch.manual_seed(seed)``), built directly on ``device`` in ``dtype`` (``AutoModelForCausalLM.from_config``
    under ``torch.device``): what ``cookbook train --random-weights`` trains, and what
    ``benchmarks/zero2_init_probe.py`` hands to DeepSpeed. ``attn_impl`` None: transformers' default.

    Raises:
        OSError: no ``config.json`` in ``folder`` (transformers' ``AutoConfig.from_pretrained``, local files only).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code, local_files_only=True)
    torch.manual_seed(seed)
    kw = {} if attn_impl is None else {"attn_implementation": attn_impl}
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code, **kw)


def default_gradient_checkpointing(model: str, on_gpu: bool) -> bool:
    """The default of ``--gradient-checkpointing``: on for every run but the CPU rehearsal of a shipped
    tiny model. A real model's plan is a GPU run wherever it is prepared (a dry run on a laptop for the
    GPU box included), and without checkpointing a 7B-14B model's activations are many GiB per GPU
    (Korthikanti et al. 2022, :func:`cookbook.memory.activation_bytes`); the tiny model on CPU ranks
    gains nothing from recomputation."""
    from .models import is_rehearsal_model
    return bool(on_gpu or not is_rehearsal_model(model))


def evaluate(accelerator, engine, eval_data, pad_id: int, micro_batch: int) -> dict:
    """Eval loss over all of ``eval_data``: the token-weighted mean cross-entropy of the response tokens,
    i.e. sum over batches of (mean loss × label tokens) / label tokens, summed over ranks.

    Batches of ``micro_batch`` examples are dealt round-robin to the ranks; a rank without a batch in the
    last round runs a dummy forward with weight 0, because every forward of a ZeRO-3 engine is a
    collective (parameter all-gathers). Collective: every rank calls it. Returns ``eval_loss``,
    ``eval_tokens``.
    """
    import torch
    from .data import IGNORE_INDEX, collate
    world, rank = accelerator.num_processes, accelerator.process_index
    n = len(eval_data)
    batches = [list(range(i, min(i + micro_batch, n))) for i in range(0, n, micro_batch)]
    total = torch.zeros(2, dtype=torch.float64)
    engine.eval()
    with torch.no_grad():
        for r in range(math.ceil(len(batches) / world)):
            j = r * world + rank
            idx = batches[j] if j < len(batches) else batches[0]
            batch = collate([eval_data.input_ids[i] for i in idx], [eval_data.labels[i] for i in idx], pad_id)
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            loss = engine(**batch).loss
            if j < len(batches):
                ntok = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
                total += torch.tensor([float(loss) * ntok, ntok], dtype=torch.float64)
    engine.train()
    total = accelerator.reduce(total.to(accelerator.device), reduction="sum").cpu()
    return {"eval_loss": round(float(total[0] / total[1]), 6), "eval_tokens": int(total[1])}


def tracker_config(args, facts: dict) -> dict:
    """The run's options for the tracker's hyper-parameter record (TensorBoard's hparams accept only
    numbers, strings and booleans)."""
    out = {}
    for k, v in vars(args).items():
        if v is None:
            continue
        out[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    out["examples"] = facts.get("examples")
    return out


def socket_name() -> str:
    import socket
    return socket.gethostname()


def verify_saved_model(accelerator, engine, folder: Path, data, tok, dtype, full: bool = True,
                       flatten: bool = False) -> dict:
    """Reload the saved 16-bit model and prove it is the trained one.

    Checks every tensor has its full shape (an empty placeholder — a model saved under ZeRO-3
    without gathering — has zero elements) and, when ``full``, compares the logits of the reloaded
    model with the live engine's on a fixed batch (the first 2 training rows, packed or not, as trained).
    Collective: every rank must call it. Returns the record stored in the summary.
    """
    import torch
    from transformers import AutoModelForCausalLM

    batch = data.batch(list(range(min(2, len(data)))), tok.pad_token_id, flatten=flatten)
    batch.pop("labels")
    live = None
    if full:
        engine.eval()
        with torch.no_grad():
            live = engine(**{k: v.to(accelerator.device) for k, v in batch.items()}).logits.float().cpu()
        engine.train()
    record = None
    if accelerator.is_main_process:
        # Load as a plain model: with ZeRO-3 init active, from_pretrained would partition it across
        # ranks (a collective the other ranks are not in).
        from .models import _zero3_init_suspended
        with _zero3_init_suspended(), quiet_loading_bars():
            reloaded = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
        shapes = {n: tuple(p.shape) for n, p in reloaded.state_dict().items()}
        empty = [n for n, s in shapes.items() if math.prod(s) == 0]
        expected = accelerator.unwrap_model(engine)
        expected_shapes = {n: tuple(getattr(p, "ds_shape", p.shape)) for n, p in expected.named_parameters()}
        mismatched = [n for n, s in expected_shapes.items() if n in shapes and shapes[n] != s]
        size = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))
        record = {"folder": str(folder), "tensors": len(shapes), "empty_tensors": empty, "shape_mismatches": mismatched,
                  "weights_bytes": size, "ok": not empty and not mismatched}
        if full:
            with torch.no_grad():
                again = reloaded(**batch).logits.float()
            diff = float((again - live).abs().max())
            scale = float(live.abs().max()) or 1.0
            tol = 1e-3 if dtype == torch.float32 else 5e-2
            record.update({"max_abs_logit_diff": diff, "relative_diff": diff / scale, "tolerance": tol,
                           "logits_match": diff / scale <= tol})
            record["ok"] = record["ok"] and record["logits_match"]
        status = "verified" if record["ok"] else "FAILED verification"
        print(f"[save] {status}: {len(shapes)} tensors, {size / 2**20:.1f} MiB, "
              f"{'max |Δlogit| %.3g' % record['max_abs_logit_diff'] if full else 'shapes only'}", flush=True)
    accelerator.wait_for_everyone()
    return record



def _finite(value):
    """``value`` with every non-finite float (DeepSpeed's ``steps_per_print: inf`` in a copied config, a NaN loss)
    replaced by None, so ``summary.json`` is strict JSON (``jq``, JavaScript) — never ``Infinity``/``NaN``."""
    import math
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value

def write_summary(out: Path, args, rows, world, ds_config, shares, part, host_peaks, facts, spec,
                  gradient_checkpointing, precision, finished, resumed_from, verification, device_name) -> dict:
    """Write ``summary.json`` (rank 0). Throughput is the median over steps after the first (warm-up).
    ``small_dataset``: :func:`small_dataset_note` when the rows are fewer than one global batch, else None."""
    from .checkpoint import atomic_write_text
    losses = [r["loss"] for r in rows]
    evals = [[r["step"], r["eval_loss"]] for r in rows if r.get("eval_loss") is not None]
    timed = rows[1:] if len(rows) > 1 else rows
    k = min(5, len(losses))
    peaks_by_host: dict[str, float] = {}
    for h in host_peaks:
        peaks_by_host[h["host"]] = peaks_by_host.get(h["host"], 0.0) + h["peak"]
    gpu_alloc = [h["gpu_alloc"] for h in host_peaks if h["gpu_alloc"] is not None]
    gpu_res = [h["gpu_reserved"] for h in host_peaks if h["gpu_reserved"] is not None]
    measured = {"peak_gpu_allocated_gib": max(gpu_alloc) if gpu_alloc else None,
                "peak_gpu_reserved_gib": max(gpu_res) if gpu_res else None,
                "host_peak_gib": max(peaks_by_host.values())}
    zero = ds_config.get("zero_optimization", {})
    shape = shape_that_ran(rows, args, world)
    summary = {
        "status": "ok" if finished and (verification is None or verification.get("ok")) else
                  ("stopped" if not finished else "save_verification_failed"),
        "world_size": world, "steps": rows[-1]["step"] if rows else 0, "max_steps": args.max_steps,
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "first5_mean_loss": statistics.fmean(losses[:k]) if losses else None,
        "last5_mean_loss": statistics.fmean(losses[-k:]) if losses else None,
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed) if rows else None,
        "samples_per_s": statistics.median(r["samples_per_s"] for r in timed) if rows else None,
        "step_time_s": statistics.median(r["step_time_s"] for r in timed) if rows else None,
        "tflops": statistics.median(r["tflops"] for r in timed) if rows and rows[-1]["tflops"] is not None else None,
        "mfu": statistics.median(r["mfu"] for r in timed) if rows and rows[-1]["mfu"] is not None else None,
        "peak_gpu_gib": measured["peak_gpu_reserved_gib"],
        **measured,
        "host_peak_gib_per_rank": [round(h["peak"], 3) for h in host_peaks],
        "device": device_name or "cpu",
        "gpu_memory_cap_gib": (args.emulate_gpu_memory_gib or None) if device_name else None,
        "model": str(args.model), "num_params": spec.num_params, "dataset": str(args.dataset or "shipped"),
        "seq_len": args.seq_len, "examples": facts["examples"], "truncated_examples": facts["truncated"],
        "format": facts.get("format"), "packing": facts.get("packing"), "packing_reason": facts.get("packing_reason"),
        "attention": facts.get("attention"), "liger": bool(facts.get("liger")), "rows": facts.get("rows_stats"),
        **shape,
        "micro_batch": args.micro_batch, "grad_accum": args.grad_accum, "global_batch": facts["global_batch"],
        "small_dataset": facts.get("small_dataset"),
        "zero_stage": zero.get("stage", 0),
        "offload_optimizer": zero.get("offload_optimizer", {}).get("device", "none") if zero else "none",
        "offload_param": zero.get("offload_param", {}).get("device", "none") if zero else "none",
        "precision": precision, "gradient_checkpointing": gradient_checkpointing,
        "zero_partition": {"kind": part["kind"], "per_rank_numel": shares, "full_numel": part["full_numel"]},
        "resumed_from": resumed_from, "save_verification": verification,
        "lr": args.lr, "lr_scheduler": getattr(args, "lr_scheduler", None), "warmup_steps": args.warmup_steps,
        "num_epochs": getattr(args, "num_epochs", None), "epochs": facts.get("epochs"),
        "hyperparameters": facts.get("hyperparameters"),
        "model_source": facts.get("model_source"), "random_weights": facts.get("random_weights"),
        "tokenizer": facts.get("tokenizer_source"), "tokenizer_vocab": facts.get("tokenizer_vocab"),
        "eval_examples": facts.get("eval_examples"), "eval_source": facts.get("eval_source"),
        "eval_loss": evals[-1][1] if evals else None, "eval_losses": evals,
        "save_total_limit": getattr(args, "save_total_limit", None), "save_16bit": getattr(args, "save_16bit", None),
        "deepspeed_config": ds_config,
    }
    summary.update(estimate_beside_measurement(args, world, ds_config, precision, gradient_checkpointing, measured,
                                               device_name is None, shape=shape,
                                               masked_attention=masked_attention(facts)))
    if "nvme" in (summary["offload_optimizer"], summary["offload_param"]):
        summary["nvme_io"] = nvme_io_summary(args, world, ds_config, precision, gradient_checkpointing,
                                             summary["step_time_s"], device_name is None, host_peaks)
    atomic_write_text(out / "summary.json", json.dumps(_finite(summary), indent=1, default=str))
    return summary


def shape_that_ran(rows: list, args, world: int) -> dict:
    """The batch shape that actually ran, from the per-step metrics.

    ``row_tokens_mean``/``row_tokens_max``: real (not padding) tokens per row; ``row_width_max``: the
    widest row tensor (``seq_len`` when packed, the longest row of a micro batch otherwise);
    ``tokens_per_micro_batch_mean``/``_max``: real tokens per micro batch per rank;
    ``packing_efficiency``: real tokens / token slots over the whole run; ``row_note``: a sentence
    when rows were shorter than ``--seq-len`` (every throughput number is for those rows), else None.
    """
    have = [r for r in rows if r.get("real_tokens") is not None]
    if not have:
        return {"row_tokens_mean": None, "row_tokens_max": None, "row_width_max": None,
                "tokens_per_micro_batch_mean": None, "tokens_per_micro_batch_max": None,
                "packing_efficiency": None, "row_note": None}
    real = sum(r["real_tokens"] for r in have)
    slots = sum(r["token_slots"] for r in have)
    rows_run = len(have) * args.micro_batch * args.grad_accum * world
    mean = real / rows_run
    out = {"row_tokens_mean": round(mean, 2), "row_tokens_max": max(r["row_tokens_max"] for r in have),
           "row_width_max": max(r["row_width_max"] for r in have),
           "tokens_per_micro_batch_mean": round(real / (len(have) * args.grad_accum * world), 1),
           "tokens_per_micro_batch_max": max(r["micro_batch_tokens_max"] for r in have),
           "packing_efficiency": round(real / slots, 5) if slots else None, "row_note": None}
    if mean < 0.99 * args.seq_len:
        out["row_note"] = (f"rows held {mean:.0f} real tokens on average (longest {out['row_tokens_max']}) of --seq-len "
                           f"{args.seq_len}: tokens/s, MFU and memory are for these rows, not {args.seq_len}-token rows")
    return out


def masked_attention(facts: dict) -> bool:
    """Whether the run's attention went through a mask that the kernel materialises per head: packed rows on
    transformers' sdpa/eager path (a block-diagonal 4D mask built from ``position_ids``), as opposed to
    flash-attention's varlen path (``flatten``). With the mask, PyTorch's SDPA leaves its flash kernel, allocates
    ``b·a·s²`` bytes per layer (a 2.00 GiB allocation at b=4, a=32, s=4096 ended a run out of memory on one H200:
    ``data/reference/h200_calib_2026-12-01.json``) and runs slower (source: evidence ``sdpa.packed_mask``)."""
    att = facts.get("attention") or {}
    return bool(facts.get("packing")) and att.get("dense_mask", not att.get("flatten"))


def estimate_beside_measurement(args, world, ds_config, precision, gradient_checkpointing, measured, on_cpu,
                                shape: dict | None = None, masked_attention: bool = False) -> dict:
    """The memory estimator's prediction for this run (with the run's own DeepSpeed config, so its
    bucket sizes count) next to what was measured — for the batch shape that ran: micro batch ×
    the widest row tensor that ran (``shape['row_width_max']``; ``--seq-len`` when packed), which is
    what sets the activation peak. ``estimate_shape`` says which shape was estimated and why."""
    zero = ds_config.get("zero_optimization") or {}
    width = (shape or {}).get("row_width_max") or args.seq_len
    basis = {"micro_batch": args.micro_batch, "seq_len": width,
             "basis": (f"rows of {width} tokens, as run (packed rows of --seq-len)" if width == args.seq_len else
                       f"the widest row that ran ({width} tokens; --seq-len {args.seq_len} was asked for, rows were "
                       f"shorter: mean {(shape or {}).get('row_tokens_mean')} real tokens)")}
    try:
        from .memory import compare, estimate
        from .plan import Plan
    except ImportError:
        return {"estimate": None, "estimate_vs_measured": None}
    try:
        plan = Plan(model=str(args.model), num_gpus=world, gpu_memory_gib=args.emulate_gpu_memory_gib or 24.0,
                    seq_len=width, micro_batch=args.micro_batch, grad_accum=args.grad_accum,
                    precision=precision, zero_stage=zero.get("stage", 0) if zero else 0,
                    offload_optimizer=args.offload_optimizer, offload_param=args.offload_param,
                    gradient_checkpointing=bool(gradient_checkpointing), nvme_path=args.nvme_path)
        # the masked path stores the attention scores like eager attention (Korthikanti et al.'s 5·a·s/h term)
        kwargs = {"bf16_states": bool(args.bf16_states), "ds_config": ds_config,
                  "eager_attention": bool(masked_attention) and not on_cpu}
        if masked_attention and not on_cpu:
            basis["attention"] = "packed rows through a block-diagonal mask: attention scores counted (b·a·s² per layer)"
        if on_cpu:
            kwargs["device"] = "cpu"
        try:
            est = estimate(plan, **kwargs)
        except TypeError:
            kwargs.pop("device", None)
            est = estimate(plan, **kwargs)
        table = compare(est, measured)
        return {"estimate": est.to_dict(), "estimate_vs_measured": json.loads(table.to_json(orient="records")),
                "estimate_shape": basis}
    except Exception as exc:  # noqa: BLE001 - the summary must still be written
        return {"estimate": None, "estimate_vs_measured": None, "estimate_shape": basis,
                "estimate_error": f"{type(exc).__name__}: {exc}"}


def nvme_io_summary(args, world, ds_config, precision, gradient_checkpointing, step_time_s, on_cpu,
                    host_peaks=()) -> dict:
    """SSD traffic per step, the disk-only step-time floor on the bandwidth measured in the NVMe folder and
    achieved/floor (:func:`cookbook.nvme.run_io_summary`), and the storage traffic the ranks really did
    per step after the first (``/proc/self/io`` of every rank, summed per machine as the estimate is;
    intermediate checkpoints and logs included); ``{"error": ...}`` when it cannot be computed."""
    try:
        from .nvme import run_io_summary
        from .plan import Plan
        zero = ds_config.get("zero_optimization") or {}
        plan = Plan(model=str(args.model), num_gpus=world, seq_len=args.seq_len, micro_batch=args.micro_batch,
                    grad_accum=args.grad_accum, precision=precision, zero_stage=zero.get("stage", 0),
                    offload_optimizer=args.offload_optimizer, offload_param=args.offload_param,
                    gradient_checkpointing=bool(gradient_checkpointing), nvme_path=args.nvme_path)
        out = run_io_summary(plan, ds_config, step_time_s, bf16_states=bool(args.bf16_states),
                             device="cpu" if on_cpu else "cuda")
        spans = [h.get("io") for h in host_peaks if h]
        by_host: dict[str, list[float]] = {}
        if spans and all(sp and sp[0] and sp[1] and sp[2] > 0 for sp in spans):
            for h, (first, last, n) in zip(host_peaks, spans):
                acc = by_host.setdefault(h["host"], [0.0, 0.0])
                acc[0] += (last[0] - first[0]) / n
                acc[1] += (last[1] - first[1]) / n
            read, write = max(v[0] for v in by_host.values()), max(v[1] for v in by_host.values())
            est_r, est_w = out["read_bytes_per_step"], out["write_bytes_per_step"]
            out["measured_disk_io"] = {
                "read_gb_per_step": read / 1e9, "write_gb_per_step": write / 1e9, "steps": spans[0][2],
                "estimate_read_error_pct": round(100 * (est_r - read) / read, 1) if read else None,
                "estimate_write_error_pct": round(100 * (est_w - write) / write, 1) if write else None,
                "source": "/proc/self/io read_bytes/write_bytes of every rank, steps after the first, per machine"}
        return out
    except Exception as exc:  # noqa: BLE001 - the summary must still be written
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    sys.exit(main())
