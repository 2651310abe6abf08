"""The per-rank training entry: a full fine-tune with Accelerate + DeepSpeed ZeRO.

Started once per rank by ``accelerate launch -m cookbook.train ...`` (the launch helper,
:mod:`cookbook.launch`, writes the Accelerate and DeepSpeed configs and builds that command; use
``cookbook train`` rather than calling this directly). The DeepSpeed JSON in the run folder is the
single source of truth for batch shape, precision, optimizer (AdamW) and learning-rate schedule.

Writes into ``--output-dir``:
  * ``metrics.jsonl``: one JSON object per optimizer step (step, loss, lr, grad_norm, tokens_per_s,
    samples_per_s, tflops, mfu, peak GPU allocated/reserved GiB, host RSS GiB);
  * ``summary.json``: status, world size, first/last loss, throughput, peaks, the estimate beside
    the measurement, the ZeRO partition of each rank, the DeepSpeed config used;
  * ``checkpoints/step-N``: DeepSpeed state for ``--resume`` plus gathered 16-bit weights
    (see :mod:`cookbook.checkpoint`); ``final_model/``: the verified 16-bit model.
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


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``cookbook train`` that reach every rank."""
    p.add_argument("--model", default="tiny-qwen2",
                   help="shipped name (random weights), local folder with weights, or cached hub id")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model's own, else the shipped one)")
    p.add_argument("--dataset", default=None, help="JSONL of {instruction,input,output} or a datasets folder (default: shipped)")
    p.add_argument("--zero-stage", type=int, choices=ZERO_STAGES, default=3, help="ZeRO stage")
    p.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, default="none", help="optimizer states to cpu/nvme")
    p.add_argument("--offload-param", choices=OFFLOAD_TARGETS, default="none", help="parameters to cpu/nvme (ZeRO-3)")
    p.add_argument("--nvme-path", default=None, help="folder on a fast SSD for NVMe offload")
    p.add_argument("--micro-batch", type=int, default=4, help="sequences per GPU per forward/backward")
    p.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--seq-len", type=int, default=128, help="truncate examples to this many tokens")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW; 3e-3 suits the tiny models)")
    p.add_argument("--warmup-steps", type=int, default=None, help="linear warm-up steps (default: 5%% of max steps)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay")
    p.add_argument("--max-steps", type=int, default=40, help="optimizer steps to run")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="bf16 / fp16 / fp32 (default: bf16 on Ampere+ GPUs, fp16 on older GPUs, fp32 on CPU)")
    p.add_argument("--bf16-states", action="store_true",
                   help="keep master weights, gradients and Adam moments in bf16 (halves host RAM under offload)")
    gc = p.add_mutually_exclusive_group()
    gc.add_argument("--gradient-checkpointing", dest="gradient_checkpointing", action="store_true", default=None,
                    help="recompute activations in backward (less memory, ~1/3 more compute); default on for GPUs")
    gc.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    p.add_argument("--output-dir", default="runs/train", help="run folder: metrics, summary, checkpoints, model")
    p.add_argument("--save-steps", type=int, default=0, help="checkpoint every N steps (0: only at the end)")
    p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in --output-dir")
    p.add_argument("--seed", type=int, default=1234, help="seed for weights and data order")
    p.add_argument("--verify-save", choices=("full", "shapes", "off"), default="full",
                   help="after saving: reload and compare logits (full), check shapes only, or skip")
    p.add_argument("--no-final-save", dest="final_save", action="store_false", help="do not save the model at the end")
    p.add_argument("--emulate-gpu-memory-gib", type=float, default=None,
                   help="cap each rank's GPU memory to emulate a smaller card (e.g. 24 on an H200)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a model's own Python code (off unless asked)")
    p.add_argument("--stop-after-step", type=int, default=None, help=argparse.SUPPRESS)  # tests: simulate a stop


# --------------------------------------------------------------------------------------------
# input validation, shared with the launch helper (runs before anything is launched)

def validate_args(args) -> list[str]:
    """Check the options that need no model or data; returns messages (empty when fine)."""
    problems = []
    for name in ("micro_batch", "grad_accum", "max_steps", "seq_len"):
        v = getattr(args, name)
        if v is None or v < 1:
            problems.append(f"--{name.replace('_', '-')}={v}: must be 1 or more")
    if args.lr is None or not (args.lr > 0 and math.isfinite(args.lr)):
        problems.append(f"--lr={args.lr}: must be a positive number such as 2e-5")
    if args.save_steps is not None and args.save_steps < 0:
        problems.append(f"--save-steps={args.save_steps}: must be 0 (end only) or a positive number of steps")
    if args.warmup_steps is not None and args.warmup_steps < 0:
        problems.append(f"--warmup-steps={args.warmup_steps}: must be 0 or more")
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
            "micro_batch": args.micro_batch, "grad_accum": args.grad_accum, "seed": args.seed}


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
    if args.tokenizer:
        return args.tokenizer
    from .models import resolve_model_path
    folder, source = resolve_model_path(args.model)
    if source != "shipped" and any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer.model")):
        return str(folder)
    return None  # the shipped tokenizer


def validate_inputs(args, world_size: int) -> dict:
    """Everything that can be checked before launching: options, model, tokenizer, data, output folder.

    Returns facts for the log (examples, truncated count, vocabulary sizes).

    Raises:
        TrainInputError: naming the option, the value and the fix.
    """
    from .data import DataError, load_records, load_tokenizer, tokenize
    from .models import ModelNotFoundError, model_spec
    problems = validate_args(args) + check_output_dir(args, world_size)
    if problems:
        raise TrainInputError("; ".join(problems))
    try:
        spec = model_spec(str(args.model), args.trust_remote_code)
    except ModelNotFoundError as exc:
        raise TrainInputError(str(exc)) from None
    try:
        tok = load_tokenizer(resolve_tokenizer_path(args), args.trust_remote_code)
        records = load_records(args.dataset)
        data = tokenize(records, tok, args.seq_len)
    except DataError as exc:
        raise TrainInputError(str(exc)) from None
    if len(tok) > spec.vocab_size:
        raise TrainInputError(
            f"--tokenizer: its vocabulary has {len(tok)} tokens but the model's embedding has {spec.vocab_size}; "
            "token ids past the embedding would crash; use the tokenizer that belongs to the model")
    global_batch = args.micro_batch * args.grad_accum * world_size
    return {"examples": len(data), "truncated": data.num_truncated, "tokenizer_vocab": len(tok),
            "model_vocab": spec.vocab_size, "num_params": spec.num_params, "global_batch": global_batch,
            "epochs": round(args.max_steps * global_batch / len(data), 2)}


# --------------------------------------------------------------------------------------------
# measurements

def host_rss_gib() -> float:
    import psutil
    return psutil.Process().memory_info().rss / GIB


def host_peak_rss_gib() -> float:
    """Peak resident set size of this process (``getrusage`` ru_maxrss, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


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


def flops_per_token(num_params: int, num_layers: int, hidden: int, seq_len: int) -> float:
    """Model FLOPs per trained token, forward + backward, without recomputation:
    6·N + 12·L·h·s (Chowdhery et al. 2022, PaLM, appendix B; the MFU definition)."""
    return 6.0 * num_params + 12.0 * num_layers * hidden * seq_len


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
    """Turn SIGTERM (sent by torchrun when a peer fails, and by the launch helper's watchdog) into
    ``SystemExit``, so ``finally`` blocks run — notably the release of torch's JIT-build lock file
    (``torch/utils/file_baton.py``), which a killed rank would otherwise leave behind, blocking
    every later run at startup."""
    import signal

    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    _redirect_output_to_rank_log()
    _exit_on_sigterm()
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


def _train(args) -> int:  # noqa: C901 - one readable recipe, top to bottom
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
        if args.emulate_gpu_memory_gib:  # before anything is allocated on the GPU
            total = torch.cuda.get_device_properties(local_rank).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, args.emulate_gpu_memory_gib * GIB / total), local_rank)

    from accelerate import Accelerator
    from accelerate.utils import DummyOptim, DummyScheduler, InitProcessGroupKwargs, set_seed
    from transformers import AutoConfig, AutoModelForCausalLM

    from . import checkpoint as ckpt
    from .data import collate, load_records, load_tokenizer, sample_order, tokenize
    from .models import model_spec, resolve_model_path

    # Before Accelerate enables ZeRO-3 init (which would hook the meta-device model count too).
    expected = int(os.environ.get("WORLD_SIZE", "1"))
    facts = validate_inputs(args, expected)

    # On a CPU-only machine Accelerate finds no backend for the device and each rank would run alone
    # (num_processes reads 1): ask for gloo explicitly so the world is real.
    handlers = [] if cuda else [InitProcessGroupKwargs(backend="gloo")]
    accelerator = Accelerator(kwargs_handlers=handlers)
    world = accelerator.num_processes
    if world != expected or (dist.is_initialized() and dist.get_world_size() != expected):
        raise TrainInputError(f"world size: the launcher started {expected} ranks but Accelerate sees {world}; "
                              "the ranks would train independently. Launch with `cookbook train`/`cookbook launch`")
    plugin = accelerator.state.deepspeed_plugin
    if plugin is None:
        raise TrainInputError("no DeepSpeed config reached this rank; launch with `cookbook train` "
                              "(it writes the Accelerate config with distributed_type: DEEPSPEED)")
    ds_config = plugin.deepspeed_config
    out = Path(args.output_dir)
    set_seed(args.seed)

    # ---- data -------------------------------------------------------------------------------
    tok = load_tokenizer(resolve_tokenizer_path(args), args.trust_remote_code)
    data = tokenize(load_records(args.dataset), tok, args.seq_len)
    _print_rank0(accelerator, f"[data] {len(data)} examples, truncated to --seq-len {args.seq_len}: "
                 f"{data.num_truncated} example(s) were longer and got cut; global batch {facts['global_batch']} "
                 f"sequences, {facts['epochs']} epochs over {args.max_steps} steps")

    # ---- model ------------------------------------------------------------------------------
    spec = model_spec(str(args.model), args.trust_remote_code)
    folder, _ = resolve_model_path(args.model)
    precision = "bf16" if ds_config.get("bf16", {}).get("enabled") else "fp16" if ds_config.get("fp16", {}).get("enabled") else "fp32"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
    _print_rank0(accelerator, "[model] trust_remote_code=True: the model's own Python code runs (asked for with "
                 "--trust-remote-code)" if args.trust_remote_code else "[model] trust_remote_code=False: only "
                 "transformers' own modelling code runs")
    if spec.has_weights:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, use_safetensors=None,
                                                     trust_remote_code=args.trust_remote_code, local_files_only=True)
        safe = any((folder / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json"))
        origin = f"weights from {folder} ({'safetensors' if safe else 'torch.load with weights_only=True'})"
    else:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=args.trust_remote_code, local_files_only=True)
        torch.manual_seed(args.seed)
        zero3 = (ds_config.get("zero_optimization") or {}).get("stage") == 3
        # Random init on the GPU when the whole model lives there anyway (ZeRO-0/1/2): initialising
        # 3.4e9 parameters on the CPU took ~3 minutes on the H200 box. ZeRO-3 builds under zero.Init.
        with torch.device(accelerator.device if cuda and not zero3 else "cpu"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=args.trust_remote_code)
        origin = "random weights (architecture only)"
    _print_rank0(accelerator, f"[model] {args.model}: {spec.num_params:,} parameters, {origin}, {precision}")
    gradient_checkpointing = args.gradient_checkpointing if args.gradient_checkpointing is not None else cuda
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False

    optimizer = DummyOptim(model.parameters()) if "optimizer" in ds_config else torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = DummyScheduler(optimizer) if "scheduler" in ds_config else None
    if scheduler is not None:
        engine, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    else:
        engine, optimizer = accelerator.prepare(model, optimizer)

    device_budget = None
    if not cuda and args.emulate_gpu_memory_gib:
        device_budget = check_device_budget(engine, ds_config, args.emulate_gpu_memory_gib)
        _print_rank0(accelerator, f"[budget] device-resident model states per rank: "
                     + ", ".join(f"{k} {v:.4f} GiB" for k, v in device_budget.items())
                     + f" (budget {args.emulate_gpu_memory_gib:.4g} GiB)")
    part = zero_partition_numel(engine)
    shares = [None] * world
    dist.all_gather_object(shares, part["numel"])
    _print_rank0(accelerator, f"[zero] stage {ds_config['zero_optimization'].get('stage', 0) if 'zero_optimization' in ds_config else 0}, "
                 f"world size {world}: {part['kind']} per rank {shares} of {part['full_numel']:,}")

    # ---- resume -----------------------------------------------------------------------------
    ckpt_root = out / "checkpoints"
    start_step = 0
    resumed_from = None
    if args.resume:
        found, messages = ckpt.find_resumable(ckpt_root)
        for m in messages:
            _print_rank0(accelerator, f"[resume] {m}")
        if found is None:
            _print_rank0(accelerator, f"[resume] no complete checkpoint in {ckpt_root}: starting from step 0")
        else:
            accelerator.load_state(str(found / "deepspeed"))
            start_step = ckpt.checkpoint_step(found)
            resumed_from = str(found)
            _print_rank0(accelerator, f"[resume] continuing from {found.name} (step {start_step})")
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.atomic_write_text(out / "run.json", json.dumps(
            {"fingerprint": dict(run_fingerprint(args), world_size=world), "args": vars(args)}, indent=1, default=str))
        metrics_path = out / "metrics.jsonl"
        kept = []
        if args.resume and metrics_path.is_file():  # drop rows past the checkpoint: they will be redone
            kept = [l for l in metrics_path.read_text().splitlines() if l.strip() and json.loads(l)["step"] <= start_step]
        ckpt.atomic_write_text(metrics_path, "".join(l + "\n" for l in kept))
    accelerator.wait_for_everyone()

    # ---- train ------------------------------------------------------------------------------
    device = accelerator.device
    G, B = args.grad_accum, args.micro_batch
    flops_tok = flops_per_token(spec.num_params, spec.num_layers, spec.hidden_size, args.seq_len)
    device_name = torch.cuda.get_device_name(local_rank) if cuda else None
    peak = peak_tflops(device_name)
    engine.train()
    rows = []

    def save(step: int) -> None:
        tmp = ckpt.tmp_dir(ckpt_root, step)
        accelerator.save_state(str(tmp / "deepspeed"))
        state_dict = accelerator.get_state_dict(engine)  # gathers 16-bit weights under ZeRO-3 (collective)
        if accelerator.is_main_process:
            accelerator.unwrap_model(engine).save_pretrained(tmp / "hf", state_dict=state_dict, safe_serialization=True)
            tok.save_pretrained(tmp / "hf")
            ckpt.atomic_write_text(tmp / "trainer_state.json", json.dumps({"step": step, "seed": args.seed}))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            final = ckpt.finalize(ckpt_root, step)
            print(f"[checkpoint] step {step} saved to {final}", flush=True)
        accelerator.wait_for_everyone()

    last_step = start_step
    io_first = None
    for step in range(start_step, args.max_steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses, tokens = [], 0
        _inject_fault(step + 1, accelerator.process_index)
        for micro in range(G):
            idx = sample_order(len(data), args.seed, step, micro, accelerator.process_index, B, G, world)
            batch = collate([data.input_ids[i] for i in idx], [data.labels[i] for i in idx], tok.pad_token_id)
            batch = {k: v.to(device) for k, v in batch.items()}
            with accelerator.accumulate(engine):
                loss = engine(**batch).loss
                accelerator.backward(loss)
            losses.append(loss.detach().float())
            tokens += int(batch["attention_mask"].sum())
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        stats = torch.stack([torch.stack(losses).mean(), torch.tensor(float(tokens), device=losses[0].device)])
        stats = accelerator.reduce(stats.to(device), reduction="sum")
        loss_mean = float(stats[0]) / world
        global_tokens = float(stats[1])
        grad_norm = engine.get_global_grad_norm()
        grad_norm = float(grad_norm) if grad_norm is not None else None
        lr = engine.get_lr()[0] if hasattr(engine, "get_lr") else args.lr
        tps = global_tokens / dt
        tflops = tps * flops_tok / world / 1e12
        row = {"step": step + 1, "loss": round(loss_mean, 6), "lr": lr, "grad_norm": grad_norm,
               "tokens_per_s": round(tps, 2), "samples_per_s": round(B * G * world / dt, 3),
               "step_time_s": round(dt, 4), "tflops": round(tflops, 4) if cuda else None,
               "mfu": round(tflops / peak, 5) if (cuda and peak) else None,
               "peak_gpu_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 3) if cuda else None,
               "peak_gpu_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 3) if cuda else None,
               "host_rss_gib": round(host_rss_gib(), 3)}
        rows.append(row)
        if step == start_step:
            io_first = proc_io_bytes()  # storage I/O after the first step: steady-state traffic is measured from here
        if accelerator.is_main_process:
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(STEP_PREFIX + json.dumps(dict(row, max_steps=args.max_steps)), flush=True)
        last_step = step + 1
        if device_budget is not None and step == start_step:  # Adam states may appear at the first step
            device_budget = check_device_budget(engine, ds_config, args.emulate_gpu_memory_gib)
        if args.save_steps and last_step % args.save_steps == 0 and last_step < args.max_steps:
            save(last_step)
        if args.stop_after_step and last_step >= args.stop_after_step:
            break

    io_span = [io_first, proc_io_bytes(), last_step - start_step - 1]
    finished = last_step >= args.max_steps
    if finished and args.final_save:
        save(last_step)

    # ---- verify the saved model --------------------------------------------------------------
    verification = None
    if finished and args.final_save and args.verify_save != "off":
        verification = verify_saved_model(accelerator, engine, ckpt_root / ckpt.step_name(last_step) / "hf",
                                          data, tok, dtype, full=args.verify_save == "full")
        if accelerator.is_main_process:
            import shutil
            final_model = out / "final_model"
            tmp_final = out / ".tmp-final_model"
            shutil.rmtree(tmp_final, ignore_errors=True)
            shutil.copytree(ckpt_root / ckpt.step_name(last_step) / "hf", tmp_final)
            shutil.rmtree(final_model, ignore_errors=True)
            os.rename(tmp_final, final_model)

    # ---- summary ----------------------------------------------------------------------------
    host_peaks = [None] * world
    dist.all_gather_object(host_peaks, {"host": socket_name(), "peak": host_peak_rss_gib(), "io": io_span,
                                        "gpu_alloc": torch.cuda.max_memory_allocated() / GIB if cuda else None,
                                        "gpu_reserved": torch.cuda.max_memory_reserved() / GIB if cuda else None})
    if accelerator.is_main_process:
        all_rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
        write_summary(out, args, all_rows, world, ds_config, shares, part, host_peaks, facts, spec,
                      gradient_checkpointing, precision, finished, resumed_from, verification, device_name)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def socket_name() -> str:
    import socket
    return socket.gethostname()


def verify_saved_model(accelerator, engine, folder: Path, data, tok, dtype, full: bool = True) -> dict:
    """Reload the saved 16-bit model and prove it is the trained one.

    Checks every tensor has its full shape (an empty placeholder — a model saved under ZeRO-3
    without gathering — has zero elements) and, when ``full``, compares the logits of the reloaded
    model with the live engine's on a fixed batch (the first 2 training examples).
    Collective: every rank must call it. Returns the record stored in the summary.
    """
    import torch
    from transformers import AutoModelForCausalLM
    from .data import collate

    batch = collate(data.input_ids[:2], data.labels[:2], tok.pad_token_id)
    live = None
    if full:
        engine.eval()
        with torch.no_grad():
            live = engine(input_ids=batch["input_ids"].to(accelerator.device),
                          attention_mask=batch["attention_mask"].to(accelerator.device)).logits.float().cpu()
        engine.train()
    record = None
    if accelerator.is_main_process:
        # Load as a plain model: with ZeRO-3 init active, from_pretrained would partition it across
        # ranks (a collective the other ranks are not in).
        from .models import _zero3_init_suspended
        with _zero3_init_suspended():
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
                again = reloaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
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


def write_summary(out: Path, args, rows, world, ds_config, shares, part, host_peaks, facts, spec,
                  gradient_checkpointing, precision, finished, resumed_from, verification, device_name) -> dict:
    """Write ``summary.json`` (rank 0). Throughput is the median over steps after the first (warm-up)."""
    from .checkpoint import atomic_write_text
    losses = [r["loss"] for r in rows]
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
        "model": str(args.model), "num_params": spec.num_params, "dataset": str(args.dataset or "shipped"),
        "seq_len": args.seq_len, "examples": facts["examples"], "truncated_examples": facts["truncated"],
        "micro_batch": args.micro_batch, "grad_accum": args.grad_accum, "global_batch": facts["global_batch"],
        "zero_stage": zero.get("stage", 0),
        "offload_optimizer": zero.get("offload_optimizer", {}).get("device", "none") if zero else "none",
        "offload_param": zero.get("offload_param", {}).get("device", "none") if zero else "none",
        "precision": precision, "gradient_checkpointing": gradient_checkpointing,
        "zero_partition": {"kind": part["kind"], "per_rank_numel": shares, "full_numel": part["full_numel"]},
        "resumed_from": resumed_from, "save_verification": verification,
        "deepspeed_config": ds_config,
    }
    summary.update(estimate_beside_measurement(args, world, ds_config, precision, gradient_checkpointing, measured,
                                               device_name is None))
    if "nvme" in (summary["offload_optimizer"], summary["offload_param"]):
        summary["nvme_io"] = nvme_io_summary(args, world, ds_config, precision, gradient_checkpointing,
                                             summary["step_time_s"], device_name is None, host_peaks)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=str))
    return summary


def estimate_beside_measurement(args, world, ds_config, precision, gradient_checkpointing, measured, on_cpu) -> dict:
    """The memory estimator's prediction for this run (with the run's own DeepSpeed config, so its
    bucket sizes count) next to what was measured."""
    zero = ds_config.get("zero_optimization") or {}
    try:
        from .memory import compare, estimate
        from .plan import Plan
    except ImportError:
        return {"estimate": None, "estimate_vs_measured": None}
    try:
        plan = Plan(model=str(args.model), num_gpus=world, gpu_memory_gib=args.emulate_gpu_memory_gib or 24.0,
                    seq_len=args.seq_len, micro_batch=args.micro_batch, grad_accum=args.grad_accum,
                    precision=precision, zero_stage=zero.get("stage", 0) if zero else 0,
                    offload_optimizer=args.offload_optimizer, offload_param=args.offload_param,
                    gradient_checkpointing=bool(gradient_checkpointing), nvme_path=args.nvme_path)
        kwargs = {"bf16_states": bool(args.bf16_states), "ds_config": ds_config}
        if on_cpu:
            kwargs["device"] = "cpu"
        try:
            est = estimate(plan, **kwargs)
        except TypeError:
            kwargs.pop("device", None)
            est = estimate(plan, **kwargs)
        table = compare(est, measured)
        return {"estimate": est.to_dict(), "estimate_vs_measured": json.loads(table.to_json(orient="records"))}
    except Exception as exc:  # noqa: BLE001 - the summary must still be written
        return {"estimate": None, "estimate_vs_measured": None, "estimate_error": f"{type(exc).__name__}: {exc}"}


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
