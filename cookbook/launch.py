"""Launch helper: Accelerate + DeepSpeed runs from a notebook cell, with an honest result.

DeepSpeed on several GPUs cannot run inside a notebook kernel, so :func:`launch`

1. lints the DeepSpeed config (the user's, or one built from the plan) and estimates memory;
   lint errors — and an estimate over the GPU memory or host RAM, unless ``force`` — stop it here
   with status ``config_error``: nothing is launched;
2. writes the run folder: ``accelerate.yaml`` (``distributed_type: DEEPSPEED`` with
   ``deepspeed_config_file``), ``ds_config.json``, and ``command.sh`` (the exact ``accelerate launch``
   command, to copy and paste);
3. runs ``accelerate launch -m cookbook.train ...`` as a subprocess in its own process group (the
   kernel never initialises CUDA; works under papermill), with the environment the environment
   checks recommend (variables the user already set are kept);
4. streams rank 0's progress live (a tqdm bar with loss and tokens/s); every rank writes its whole
   output to ``logs/rank{N}.log``; the launcher's own output goes to ``logs/launcher.log``;
5. a watchdog stops the whole process group when rank 0 prints nothing for ``hang_timeout_s``;
6. returns a :class:`RunResult` whose ``status`` is ``ok``, ``gpu_oom``, ``host_oom``, ``hang``,
   ``config_error``, ``failed``, ``interrupted`` (Ctrl-C), ``stopped`` (``cookbook stop``) (or
   ``dry_run``) with a message in plain words.

Process control (:mod:`cookbook.procs`): the ranks die with the process that called :func:`launch`
whatever kills it, SIGKILL and a Jupyter kernel restart included (the Linux parent-death signal at
every link, plus a parent watch in each rank); ``OUTPUT_DIR/run.lock`` refuses a second live run in
the folder; ``cookbook status DIR`` and ``cookbook stop DIR`` read and stop a live run.

Accelerate refuses ``mixed_precision`` and ``zero3_save_16bit_model`` among the DeepSpeed
fields of its config file when ``deepspeed_config_file`` is set (``DeepSpeedPlugin.
_deepspeed_config_checks``, accelerate/utils/dataclasses.py): precision and 16-bit saving live in
the DeepSpeed JSON (``bf16``/``fp16``, ``stage3_gather_16bit_weights_on_model_save``). The YAML
still states ``mixed_precision`` at its top level, and the command passes ``--mixed_precision`` and
``--zero3_save_16bit_model`` explicitly, which Accelerate accepts and which keep the three in step.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .hardware import cpu_fp16_refusal, cpu_fp16_supported, default_precision, extensions_dir, free_port, on_gpu_machine
from .models import is_rehearsal_model
from .options import DEFAULT_WARMUP_RATIO, Origin, RunOptions, from_args, split_legacy
from .options import default as option_default
from .plan import DEST_FIELDS, Plan, PlanError, user_message
from .train import add_launch_arguments as _add_launch_arguments
from .train import (ERROR_PREFIX, STEP_PREFIX, TrainInputError, add_train_arguments, default_gradient_checkpointing,
                    validate_inputs)

STATUSES = ("ok", "gpu_oom", "host_oom", "hang", "config_error", "failed", "interrupted", "stopped", "dry_run")
GIB = 2 ** 30

#: Exceptions that follow another rank's failure (peers losing their connection, the launcher's
#: own report); the first *real* traceback is the one that is not one of these.
SECONDARY = re.compile(r"ChildFailedError|SignalException|Connection closed by peer|Connection reset by peer|"
                       r"DistBackendError|ProcessGroupGloo|NCCL communicator was aborted|KeyboardInterrupt|"
                       r"Broken pipe|connection refused|Socket Timeout|recvBytes|SIGTERM", re.I)


def _readable(value):
    """A details value as one line for the result card: a dict as ``key=value, ...``, a list item by item."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_readable(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "; ".join(str(_readable(v)) for v in value)
    return value


class LaunchError(RuntimeError):
    """Raised by :meth:`RunResult.raise_for_status` (and by :func:`launch` with ``raise_on_error``)."""


@dataclass(frozen=True)
class RunResult:
    """What happened in a launched run.

    Attributes:
        status: one of :data:`STATUSES`.
        message: what happened, in plain words, with the numbers that matter.
        run_dir: the run folder. command: the exact launch command (one per machine, newline-separated).
        duration_s: wall time of the launch in seconds. returncode: the launcher's exit code (None if not run).
        summary: ``summary.json`` of the run, or None. metrics: rows of ``metrics.jsonl``.
        log_paths: ``launcher`` and ``rank{N}`` -> path. findings: lint findings (dicts).
        estimate: the memory estimate (``MemoryEstimate.to_dict()``) or None.
        details: status specifics: ``rank``, ``tried_to_allocate_gib``, ``traceback``, ``signal``, ...
        world_size: the ranks the plan launched (or would have), known before the run: a run that ended
            before writing its summary (an out-of-memory at start) still has it. None when no plan was read.
    """

    status: str
    message: str
    run_dir: str
    command: str
    duration_s: float = 0.0
    returncode: int | None = None
    summary: dict | None = None
    metrics: list = field(default_factory=list)
    log_paths: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)
    estimate: dict | None = None
    details: dict = field(default_factory=dict)
    world_size: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def metrics_frame(self):
        import pandas as pd
        return pd.DataFrame(self.metrics)

    def to_frame(self):
        """One row per fact of the result (status, message, duration, world size, throughput, peaks, loss).

        The world size comes from the summary, else from the plan (:attr:`world_size`). A measurement the run
        did not make is left out, not shown as None; a run that wrote no summary gets one ``measured`` row
        saying so."""
        import pandas as pd
        s = self.summary or {}
        world = s.get("world_size") if s.get("world_size") is not None else self.world_size
        rows = [("status", self.status), ("message", self.message), ("duration_s", round(self.duration_s, 1))]
        if world is not None:
            rows.append(("world_size", world))
        measured = [(k, s.get(k)) for k in ("steps", "first_loss", "last_loss", "tokens_per_s",
                                            "peak_gpu_allocated_gib", "peak_gpu_reserved_gib", "host_peak_gib")]
        rows += [(k, v) for k, v in measured if v is not None]
        if not self.summary and (self.returncode is not None or self.status in ("hang", "interrupted", "stopped")):
            rows.append(("measured", "nothing: the run ended before it wrote its summary (steps, loss, throughput, "
                                     "peaks); the message says why"))
        rows.append(("run_dir", self.run_dir))
        rows += [(k, _readable(v)) for k, v in self.details.items() if k not in ("traceback", "inputs") and v is not None]
        return pd.DataFrame(rows, columns=["field", "value"]).set_index("field")

    def _repr_html_(self) -> str:
        import html
        tb = self.details.get("traceback")
        extra = f"<pre>{html.escape(tb)}</pre>" if tb else ""
        return (f"<b>{html.escape(self.status)}</b>: {html.escape(self.message)}"
                + self.to_frame().to_html() + extra)

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"

    def __repr__(self) -> str:
        """The status, the wall time, the run folder and the message (wrapped), e.g.
        ``RunResult(status='ok', 41 s, run_dir='runs/06/cpu_offload')`` then ``  3 steps on 1 rank: loss 11.186 →
        11.150, 451 tokens/s …``: what a plain-text view of a notebook shows (the fields stay as they are;
        :meth:`to_frame` lists every fact)."""
        import textwrap
        took = f"{self.duration_s:.1f} s" if self.duration_s < 10 else f"{self.duration_s:.0f} s"
        head = f"RunResult(status={self.status!r}, {took}, run_dir={self.run_dir!r})"
        if not self.message:
            return head
        return head + "\n" + textwrap.fill(self.message, width=110, initial_indent="  ", subsequent_indent="  ")

    def raise_for_status(self) -> "RunResult":
        if self.status not in ("ok", "dry_run"):
            raise LaunchError(str(self))
        return self


# ----------------------------------------------------------------------------------------------
# run folder and commands

def _mixed_precision(ds_config: dict) -> str:
    if (ds_config.get("bf16") or {}).get("enabled") is True:
        return "bf16"
    if (ds_config.get("fp16") or {}).get("enabled") is True:
        return "fp16"
    return "no"


def accelerate_config(ds_config_path: Path, ds_config: dict, *, num_processes: int, num_machines: int = 1,
                      machine_rank: int = 0, main_process_ip: str = "127.0.0.1", main_process_port: int = 29500,
                      zero3_init: bool = True) -> dict:
    """The Accelerate config (``accelerate launch --config_file``) for a DeepSpeed run.

    ``num_processes`` is the total over all machines (Accelerate's convention). With several
    machines the ``standard`` multinode launcher (torchrun on each machine) is used, so no pdsh or
    hostfile is needed.
    """
    zero = ds_config.get("zero_optimization") or {}
    cfg = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "DEEPSPEED",
        "deepspeed_config": {
            "deepspeed_config_file": str(ds_config_path),
            "zero3_init_flag": bool(zero3_init and zero.get("stage") == 3),
        },
        "num_processes": num_processes,
        "num_machines": num_machines,
        "machine_rank": machine_rank,
        "main_process_ip": main_process_ip,
        "main_process_port": main_process_port,
        "mixed_precision": _mixed_precision(ds_config),
        "rdzv_backend": "static",
        "same_network": True,
    }
    if num_machines > 1:
        cfg["deepspeed_config"]["deepspeed_multinode_launcher"] = "standard"
    return cfg


def _yaml_text(cfg: dict, ds_config: dict) -> str:
    import yaml
    zero = ds_config.get("zero_optimization") or {}
    save16 = bool(zero.get("stage3_gather_16bit_weights_on_model_save", False))
    header = ("# Written by the ZeRO cookbook. Precision and 16-bit saving live in the DeepSpeed JSON:\n"
              f"#   mixed_precision: {cfg['mixed_precision']}   (ds_config.json bf16/fp16 blocks)\n"
              f"#   zero3_save_16bit_model: {str(save16).lower()}   (stage3_gather_16bit_weights_on_model_save)\n"
              "# Accelerate rejects these two inside deepspeed_config when deepspeed_config_file is set;\n"
              "# the launch command passes them as --mixed_precision / --zero3_save_16bit_model.\n")
    return header + yaml.safe_dump(cfg, sort_keys=False)


def train_argv(plan: Plan, output_dir: Path, **options) -> list[str]:
    """The ``cookbook.train`` arguments for ``plan`` plus training options (None values left out)."""
    argv = ["--model", str(plan.model), "--zero-stage", str(plan.zero_stage),
            "--offload-optimizer", plan.offload_optimizer, "--offload-param", plan.offload_param,
            "--micro-batch", str(plan.micro_batch), "--grad-accum", str(plan.grad_accum),
            "--seq-len", str(plan.seq_len), "--precision", plan.precision,
            "--gradient-checkpointing" if plan.gradient_checkpointing else "--no-gradient-checkpointing",
            "--output-dir", str(output_dir)]
    if plan.nvme_path:
        argv += ["--nvme-path", plan.nvme_path]
    argv += ["--liger", "on" if plan.liger else "off"]  # decided by the launcher: the ranks do not choose again
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif str(value).startswith("-"):  # a value argparse would take for an option (--lr-source --lr)
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, str(value)]
    return argv


def planned_rows(plan, **options) -> dict:
    """The training rows ``cookbook train`` of ``plan`` would train on, counted by the trainer's own code
    path: the plan's options (:func:`train_argv`) plus ``options`` (``dataset=``, ``seed=``,
    ``eval_fraction=``, ``tokenizer=``, ``packing=False``, ...) parsed by the trainer's parser
    (:func:`cookbook.train.add_train_arguments`, so every default is the trainer's), the tokenizer resolved
    as :func:`cookbook.train.validate_inputs` resolves it, and the rows built by
    :func:`cookbook.train.build_datasets`: packed into rows of exactly ``plan.seq_len`` tokens unless
    ``packing=False``. It is the count :func:`cookbook.train.resolve_hyperparameters` turns ``--num-epochs``
    into optimizer steps with, i.e. what ``cookbook train --dry-run`` prints as "N optimizer steps
    (--num-epochs E × S steps per epoch)"; the records or examples would overcount a packed run (the
    shipped 1,500 chats make 977 rows of 512 tokens).

    Returns:
        ``{"rows", "examples", "records", "seq_len" (tokens per row), "packing", "data_report" (the
        trainer's console line), "words"}``; ``words`` says what the count is, e.g. "977 packed rows of 512
        tokens (the 1,500 training examples of the shipped chats, packed as `cookbook train` packs them)".

    Raises:
        TrainInputError: an option the trainer refuses, a tokenizer or data it cannot load.
    """
    from .data import DataError, load_tokenizer
    from .train import build_datasets, resolve_tokenizer_path
    packing = options.pop("packing", None)
    argv = train_argv(plan, Path("runs") / "planned-rows", **options)  # the folder is only parsed, never made
    if packing is not None:
        argv.append("--packing" if packing else "--no-packing")
    parser = argparse.ArgumentParser(prog="planned_rows", exit_on_error=False)
    add_train_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        raise TrainInputError(f"invalid training options {argv}: {exc}") from None
    tok_path = resolve_tokenizer_path(args)
    try:
        tok = load_tokenizer(tok_path, args.trust_remote_code, chat_template=args.chat_template)
        _, rows, _, facts = build_datasets(args, tok)
    except DataError as exc:
        raise TrainInputError(str(exc)) from None
    source = f"--dataset {args.dataset}" if args.dataset else "the shipped chats"
    what = (f"{len(rows):,} packed rows of {args.seq_len} tokens (the {facts['examples']:,} training examples of "
            f"{source}, packed as `cookbook train` packs them)" if rows.packing else
            f"{len(rows):,} rows of one example each, cut to {args.seq_len} tokens ({source}, --no-packing)")
    return {"rows": len(rows), "examples": facts["examples"], "records": facts["records"], "seq_len": args.seq_len,
            "packing": rows.packing, "data_report": facts["data_report"], "words": what}


@dataclass(frozen=True)
class RunFolder:
    """Files written for a launch: the Accelerate YAML per machine, the DeepSpeed JSON, the commands."""

    run_dir: Path
    ds_config_path: Path
    accelerate_configs: tuple
    commands: tuple  # one argv list per machine

    @property
    def command_text(self) -> str:
        return "\n".join(shlex.join(c) for c in self.commands)


def prepare_run(plan: Plan, ds_config: dict, run_dir: str | os.PathLike, train_args: list[str], *,
                main_process_ip: str = "127.0.0.1", main_process_port: int | None = None) -> RunFolder:
    """Write ``ds_config.json``, ``accelerate.yaml`` (``accelerate.machine{K}.yaml`` per machine when
    ``plan.num_machines > 1``) and ``command.sh`` into ``run_dir``; return the commands."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    ds_path = run_dir / "ds_config.json"
    ds_path.write_text(json.dumps(ds_config, indent=2) + "\n")
    port = main_process_port or free_port()
    save16 = bool((ds_config.get("zero_optimization") or {}).get("stage3_gather_16bit_weights_on_model_save", False))
    yamls, commands = [], []
    for k in range(plan.num_machines):
        cfg = accelerate_config(ds_path, ds_config, num_processes=plan.num_gpus, num_machines=plan.num_machines,
                                machine_rank=k, main_process_ip=main_process_ip, main_process_port=port)
        name = "accelerate.yaml" if plan.num_machines == 1 else f"accelerate.machine{k}.yaml"
        (run_dir / name).write_text(_yaml_text(cfg, ds_config))
        yamls.append(run_dir / name)
        commands.append(["accelerate", "launch", "--config_file", str(run_dir / name),
                         "--mixed_precision", cfg["mixed_precision"],
                         "--zero3_save_16bit_model", str(save16).lower(),
                         "-m", "cookbook.train", *train_args])
    folder = RunFolder(run_dir, ds_path, tuple(yamls), tuple(commands))
    script = ["#!/usr/bin/env bash", "# The launch command(s) of this run; one line per machine.", ""]
    script += [shlex.join(c) + ("   # on machine %d" % k if plan.num_machines > 1 else "")
               for k, c in enumerate(commands)]
    (run_dir / "command.sh").write_text("\n".join(script) + "\n")
    return folder


def machine_commands(plan: Plan, run_dir, *, main_process_ip: str, main_process_port: int = 29500,
                     config: dict | None = None, **train_options) -> list[str]:
    """The launch command for each of ``plan.num_machines`` machines (run machine K's on machine K).

    The run folder (and the dataset) must be at the same path on every machine (a shared file
    system, or copied). Returns shell command strings.
    """
    from .dsconfig import build_config
    ds = config if isinstance(config, dict) else build_config(plan, "accelerate")
    folder = prepare_run(plan, ds, run_dir, train_argv(plan, Path(run_dir).resolve(), **train_options),
                         main_process_ip=main_process_ip, main_process_port=main_process_port)
    return [shlex.join(c) for c in folder.commands]


# ----------------------------------------------------------------------------------------------
# environment of the child processes

def child_env(plan: Plan, extra: dict | None = None, *, log_dir: Path) -> tuple[dict, dict]:
    """(environment for the launcher, the variables the cookbook added).

    Adds what :func:`cookbook.env.recommended_env` recommends for this machine (``DS_ACCELERATOR=cpu``
    and thread counts on a CPU-only machine; ``NCCL_P2P_DISABLE``/``NCCL_IB_DISABLE`` on RTX 40xx
    boxes with old drivers), :func:`gpu_build_env` on GPU machines, ``HF_HUB_OFFLINE=1`` (never
    download) and the log folder. Variables already set by the user are kept as they are.
    """
    from .env import gather_facts, recommended_env
    env = dict(os.environ)
    added = {}
    try:
        rec = recommended_env(gather_facts(probe=False), plan)
    except Exception:  # noqa: BLE001 - facts are advisory; a CPU box without NVML still launches
        rec = {}
    rec.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
                "PYTHONWARNINGS": "ignore::FutureWarning"})
    rec.update({k: v for k, v in gpu_build_env(plan).items() if k not in rec})
    for key, value in {**rec, **(extra or {})}.items():
        if key in os.environ and key not in (extra or {}):
            continue
        env[key] = str(value)
        added[key] = str(value)
    if "TORCH_EXTENSIONS_DIR" not in os.environ:
        env["TORCH_EXTENSIONS_DIR"] = added["TORCH_EXTENSIONS_DIR"] = str(extensions_dir())
    env["COOKBOOK_LOG_DIR"] = str(log_dir)
    # the project must be importable by the ranks even when not installed
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env, added


def gpu_build_env(plan: Plan) -> dict:
    """On a GPU machine: ``OMP_NUM_THREADS`` = physical cores ÷ ranks per machine (torchrun, and so
    ``accelerate launch``, sets 1 otherwise, which makes DeepSpeedCPUAdam single-threaded — measured
    on the H200 box, docs/benchmarks.md) and ``TORCH_CUDA_ARCH_LIST`` from the GPUs' compute capability
    (DeepSpeed 0.19.8's JIT build of fused Adam fails on torch 2.11 without it: "invalid literal for
    int() ... '0a'", deepspeed/ops/op_builder/builder.py ``compute_capability_args``)."""
    try:
        import psutil
        import pynvml
        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
            caps = sorted({"%d.%d" % pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(i))
                           for i in range(n)})
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVIDIA driver: nothing to add
        return {}
    if not n:
        return {}
    per_machine = max(1, plan.num_gpus // plan.num_machines)
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    return {"OMP_NUM_THREADS": str(max(1, cores // per_machine)), "TORCH_CUDA_ARCH_LIST": ";".join(caps)}


def precision_refusal(precision: str, on_gpu: bool, *, name: str | None = "--precision") -> str | None:
    """Why this machine cannot train in ``precision`` (None when it can), by DeepSpeed's own rules.

    * no NVIDIA GPU (the CPU rehearsal) and ``fp16``: DeepSpeed's CPU accelerator supports fp16 only
      where oneDNN computes it (``CPU_Accelerator.is_fp16_supported`` in
      ``deepspeed/accelerator/cpu_accelerator.py`` = ``torch.ops.mkldnn._is_mkldnn_fp16_supported()``,
      CPUs with AVX-512 FP16 / AMX-FP16);
    * a GPU below compute capability 8.0 and ``bf16`` (``torch.cuda.is_bf16_supported``).

    ``name``: how the precision is named, a flag (``--precision``, the command line) or a Python name
    (``precision``: ``launch(plan)``), see :func:`cookbook.hardware.cpu_fp16_refusal`.
    """
    if not on_gpu and precision == "fp16":
        if cpu_fp16_supported():  # the same test as the linter's machine rule (cookbook.hardware)
            return None
        why, fix = cpu_fp16_refusal(name)
        return f"{why}. Fix: {fix}"
    if on_gpu and precision == "bf16":
        try:
            import pynvml
            pynvml.nvmlInit()
            try:
                caps = [pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(i))
                        for i in range(pynvml.nvmlDeviceGetCount())]
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - unknown: let DeepSpeed decide
            return None
        if caps and min(caps) < (8, 0):
            name = name or "precision"
            shown, fp16 = (f"{name} bf16", f"{name} fp16") if name.startswith("-") else (f"{name}='bf16'", f"{name}='fp16'")
            return (f"{shown}: this GPU has compute capability {min(caps)[0]}.{min(caps)[1]}; bf16 needs 8.0 "
                    f"or newer (Ampere, Ada, Hopper). Use {fp16} (with loss scaling) on this GPU")
    return None


def liger_refusal(plan: Plan, *, on_gpu: bool, dry_run: bool = False) -> str | None:
    """Why ``--liger`` (``plan.liger``) cannot run, before any rank starts (None: it can, or it is off).

    No NVIDIA GPU here, liger-kernel missing, an architecture other than llama/qwen2, or ZeRO-3 (see
    :func:`cookbook.liger.problems`). A dry run of a real model on a machine without a GPU plans a GPU run
    elsewhere: only the architecture and the stage are checked then (the GPU machine needs liger-kernel)."""
    if not plan.liger:
        return None
    from . import liger
    try:
        from .models import model_spec
        model_type = model_spec(str(plan.model)).model_type
    except Exception:  # noqa: BLE001 - a missing model is reported by the input checks, naming --model
        model_type = None
    elsewhere = dry_run and not on_gpu and not is_rehearsal_model(plan.model)
    found = liger.problems(model_type=model_type, zero_stage=plan.zero_stage, on_gpu=on_gpu or elsewhere,
                           check_install=not elsewhere)
    return "; ".join(found) or None


def clear_stale_build_locks(max_age_s: float = 300.0) -> list[str]:
    """Remove JIT-build lock files older than ``max_age_s`` from torch's extensions folder.

    DeepSpeed builds its ops (CPU Adam, the CPU backend's shared-memory comm op) with
    ``torch.utils.cpp_extension.load``, which guards each build folder with an empty ``lock`` file
    (``torch/utils/file_baton.py``) and makes every other process wait until it disappears. A rank
    killed while holding it leaves it behind and every later run then waits forever at startup.
    A lock is stale when nothing in its build folder changed for ``max_age_s`` and no compiler runs on
    this machine (a slow 2-core build can take longer than ``max_age_s`` but keeps writing objects).
    Returns the paths removed.
    """
    roots = {Path(os.environ.get("TORCH_EXTENSIONS_DIR") or extensions_dir()), Path.home() / ".cache" / "torch_extensions"}
    removed = []
    for lock in [l for root in roots if root.is_dir() for l in (*root.glob("*/lock"), *root.glob("*/*/lock"))]:
        try:
            # the newest file in the build folder (ninja's objects and logs) says whether a build is alive:
            # a slow machine may build past max_age_s, but it keeps writing
            newest = max([lock.stat().st_mtime] + [f.stat().st_mtime for f in lock.parent.iterdir()])
            if time.time() - newest > max_age_s and not _compiler_running():
                lock.unlink()
                removed.append(str(lock))
        except OSError:
            pass
    return removed


def _compiler_running() -> bool:
    """Whether a compiler or ninja runs on this machine (a JIT build in progress, perhaps another run's)."""
    import psutil
    for proc in psutil.process_iter(["name"]):
        if (proc.info.get("name") or "") in ("ninja", "cc1plus", "nvcc", "c++", "g++", "cicc"):
            return True
    return False


# ----------------------------------------------------------------------------------------------
# classification of a finished run

def _tail(path: Path, limit: int = 2_000_000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def tracebacks(text: str) -> list[str]:
    """Python tracebacks in a log, each from ``Traceback`` to its exception line."""
    lines = [re.sub(r"^\[rank\d+\]:\s?", "", l) for l in text.splitlines()]
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("Traceback (most recent call last)"):
            j = i + 1
            while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j].strip()
                                      or lines[j].startswith(("During handling", "The above exception"))):
                j += 1
            out.append("\n".join(lines[i:j + 1]).strip())
            i = j + 1
        else:
            i += 1
    return out


def _exception_line(tb: str) -> str:
    return tb.strip().splitlines()[-1] if tb.strip() else ""


def oom_advice(plan: Plan | None, *, on_gpu: bool = True) -> str:
    """What to change after a GPU out-of-memory, true for ``plan`` (the run as launched), naming the flags.

    The ZeRO ladder from where the run stands (``--zero-stage`` below 3: the next stage, then
    ``--offload-optimizer cpu``, then ``--offload-param cpu``; ZeRO-3: the offload it does not use yet,
    optimizer states first; both offloaded: the ladder's end), then the activation levers it has left:
    a smaller ``--micro-batch`` (with a larger ``--grad-accum`` keeping the global batch) only when the
    micro batch is above 1, ``--gradient-checkpointing`` only when it is off. A lever already used up is
    said to be so, not advised. ``plan`` None (no plan known): the levers in general. ``on_gpu`` False (the
    CPU rehearsal, whose device budget counts model states only: :func:`cookbook.train.check_device_budget`):
    the batch levers are said not to change that budget.
    """
    if plan is None:
        return ("Lower the GPU memory per rank: a higher --zero-stage, --offload-optimizer cpu, --offload-param cpu, "
                "a smaller --micro-batch or --gradient-checkpointing.")
    stage, opt, par = plan.zero_stage, plan.offload_optimizer, plan.offload_param
    offloads = (["--offload-optimizer cpu"] if opt == "none" else []) + (["--offload-param cpu"] if par == "none" else [])
    if stage < 3 and plan.world_size == 1:
        ladder = ("One rank: ZeRO partitions across ranks, so here a higher --zero-stage alone saves at most the "
                  "16-bit gradients (2 bytes per parameter); next: "
                  + ("--offload-optimizer cpu (the optimizer states to host RAM), then " if opt == "none" else "")
                  + "--zero-stage 3 with --offload-param cpu (the 16-bit parameters too)")
    elif stage < 3:
        nxt = "2 (partitions the gradients too), then 3 (the 16-bit parameters too)" if stage < 2 else \
            "3 (partitions the 16-bit parameters too: ZeRO-2 keeps a full copy on every rank)"
        ladder = f"Next ZeRO step: --zero-stage {nxt}" + ("; after that " + ", then ".join(offloads) if offloads else "")
    elif opt == "none":
        ladder = ("Already ZeRO-3; next: --offload-optimizer cpu (the fp32 master weights, Adam states and fp32 "
                  "gradients to host RAM)" + (", then --offload-param cpu (the 16-bit parameters too)" if par == "none" else ""))
    elif par == "none":
        ladder = (f"Already ZeRO-3 with --offload-optimizer {opt}; next: --offload-param cpu (the 16-bit parameters "
                  "to host RAM too)")
    else:
        ladder = (f"ZeRO's ladder is at its end (ZeRO-3, --offload-optimizer {opt}, --offload-param {par}): what "
                  "stays on the GPU is the gathered layers, the buckets and the activations; lower "
                  "stage3_prefetch_bucket_size / stage3_max_live_parameters in the DeepSpeed config, a shorter "
                  "--seq-len, or a GPU with more memory")
    if not on_gpu:
        return (ladder + ". The CPU rehearsal's device budget counts model states only, so --micro-batch and "
                "--gradient-checkpointing do not change it.")
    levers, used = [], []
    mb, ga = plan.micro_batch, plan.grad_accum
    if mb > 1:
        new_mb = mb // 2 if mb % 2 == 0 else 1
        levers.append(f"--micro-batch {new_mb} with --grad-accum {ga * mb // new_mb} (the same global batch, "
                      "fewer activations)")
    else:
        used.append("--micro-batch is already 1")
    if not plan.gradient_checkpointing:
        levers.append("--gradient-checkpointing (recompute activations in backward: far less activation memory, "
                      "about 1/3 more compute)")
    else:
        used.append("--gradient-checkpointing is already on")
    text = ladder + "."
    if levers:
        text += " For the activations: " + "; ".join(levers) + "."
    if used:
        text += " " + " and ".join(used) + (": the batch levers are used up." if not levers else ".")
    return text


def classify(run_dir: Path, returncode: int | None, hung: bool, hang_timeout_s: float,
             estimate: dict | None, plan: Plan | None = None, on_gpu: bool | None = None) -> tuple[str, str, dict]:
    """(status, message, details) of a finished launch, from its logs and summary; ``plan`` (the run as
    launched) makes an out-of-memory's advice true for it (:func:`oom_advice`); ``on_gpu`` None: a GPU run
    unless the rank's error is the CPU rehearsal's device budget."""
    logs = run_dir / "logs"
    rank_logs = sorted(logs.glob("rank*.log"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    launcher = _tail(logs / "launcher.log")
    texts = {p.stem: _tail(p) for p in rank_logs}
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    host_est = (estimate or {}).get("host_gib", {}).get("total")
    gpu_est = (estimate or {}).get("gpu_gib", {}).get("total")

    if hung:
        # which limit ran out: the start-up one before the first step (imports, op builds, model init), the
        # hang one after it (`_run_and_watch` says; a bare True is the hang limit)
        limit = hung.get("limit_s", hang_timeout_s) if isinstance(hung, dict) else hang_timeout_s
        phase = hung.get("phase", "steps") if isinstance(hung, dict) else "steps"
        gpu_ranks = bool(on_gpu if on_gpu is not None else summary is None or summary.get("device") not in (None, "cpu")) \
            and (plan is None or plan.num_gpus * max(1, plan.num_machines) > 1)
        causes = (["NCCL peer-to-peer on consumer GPUs (try NCCL_P2P_DISABLE=1)"] if gpu_ranks else []) + (
            ["a rank that died silently", "a slow first step (raise --hang-timeout / hang_timeout_s)"] if phase == "steps"
            else ["a start-up slower than the limit: model initialisation or loading, a DeepSpeed op build that "
                  "stopped writing (raise --startup-timeout / startup_timeout_s)", "a rank that died silently"])
        when = "after its last logged step" if phase == "steps" else "before its first training step"
        return "hang", (f"no output from rank 0 for {limit:.0f} s {when}: the watchdog stopped the whole process "
                        f"group. Likely causes: {'; '.join(causes)}."), {"hang_timeout_s": limit, "phase": phase}
    for name, text in texts.items():
        if ERROR_PREFIX in text:
            msg = text.split(ERROR_PREFIX, 1)[1].splitlines()[0]
            return "config_error", msg, {"rank": int(re.sub(r"\D", "", name) or 0)}
    for name, text in texts.items():
        m = re.search(r"(torch\.OutOfMemoryError|CUDA out of memory|OutOfMemoryError)", text)
        if m:
            alloc = re.search(r"[Tt]ried to allocate ([\d.]+) (GiB|MiB|KiB)", text)
            gib = None
            if alloc:
                gib = float(alloc.group(1)) / {"GiB": 1, "MiB": 1024, "KiB": 1024 ** 2}[alloc.group(2)]
            rank = int(re.sub(r"\D", "", name) or 0)
            tb = next((t for t in tracebacks(text) if "OutOfMemoryError" in t or "out of memory" in t), "")
            size = (f"{gib:.2f} GiB" if gib >= 0.1 else f"{gib * 1024:.2f} MiB") if gib is not None else None
            msg = (f"rank {rank} ran out of GPU memory" + (f" trying to allocate {size}" if size else "")
                   + (f"; the estimate was {gpu_est:.1f} GiB per GPU" if gpu_est else "")
                   + ". " + oom_advice(plan, on_gpu=("CPU rehearsal of a" not in text) if on_gpu is None else on_gpu))
            return "gpu_oom", msg, {"rank": rank, "tried_to_allocate_gib": gib, "estimate_gpu_gib": gpu_est,
                                    "traceback": tb}
    killed = re.search(r"rank\s*:\s*(\d+)[^\n]*\n(?:[^\n]*\n){0,2}?[^\n]*exitcode\s*:\s*-9", launcher)
    if returncode in (-9, 137) and not killed and not re.search(r"exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)", launcher):
        return "failed", ("the launcher (accelerate launch) itself was killed by signal 9 (SIGKILL): by hand (`kill -9`) "
                          "or by the kernel's OOM killer (`dmesg | grep -i oom`); its ranks ended with it (parent-death "
                          "signal, cookbook.procs)"), {"signal": 9}
    if killed or re.search(r"exitcode\s*:\s*-9|Signal 9 \(SIGKILL\)", launcher) or returncode in (-9, 137):
        rank = int(killed.group(1)) if killed else None
        msg = (f"rank {rank if rank is not None else '?'} was killed by signal 9 (SIGKILL). That is almost always the "
               "kernel's OOM killer (out of host RAM)"
               + (f" (the host estimate for this plan is {host_est:.1f} GiB per machine)" if host_est else "")
               + ". Check `dmesg | grep -i oom`; use bf16 optimizer states, NVMe offload, fewer ranks per machine, "
                 "or more RAM. Swap does not help: pinned memory cannot be swapped.")
        return "host_oom", msg, {"rank": rank, "signal": 9, "estimate_host_gib": host_est}
    if returncode == 0 and summary and summary.get("status") == "ok":
        ranks = f"{summary['world_size']} rank" + ("s" if summary["world_size"] != 1 else "")
        note = f" ({summary['row_note']})" if summary.get("row_note") else (
            f" (packed rows of {summary['seq_len']} tokens)" if summary.get("packing") else "")
        resumed = re.search(r"step-(\d+)$", str(summary.get("resumed_from") or "").rstrip("/"))
        resumed = f"resumed from step {int(resumed.group(1))}; " if resumed else ""
        return "ok", (f"{resumed}{summary['steps']} steps on {ranks}: loss {summary['first_loss']:.3f} → "
                      f"{summary['last_loss']:.3f}, {summary['tokens_per_s']:.0f} tokens/s{note}"), {}
    # the first real traceback, not the secondary ones (peers losing their connection, the launcher)
    for name, text in list(texts.items()) + [("launcher", launcher)]:
        for tb in tracebacks(text):
            if not SECONDARY.search(_exception_line(tb)):
                return "failed", f"{name}: {_exception_line(tb)}", {"traceback": tb, "log": name}
    if summary and summary.get("status") != "ok":
        return "failed", f"the run ended with status {summary.get('status')!r}", {}
    last = "\n".join(launcher.strip().splitlines()[-15:])
    return "failed", f"the launcher exited with code {returncode}", {"traceback": last}


# ----------------------------------------------------------------------------------------------

def _guard(plan: Plan, ds_config: dict, *, on_gpu: bool, bf16_states: bool,
           emulate_gpu_memory_gib: float | None, elsewhere: bool = False,
           packed_with_mask: bool = False, filled=None, names: dict | None = None) -> tuple[list, dict | None, list[str]]:
    """Lint findings, the estimate, and reasons to refuse the launch.

    ``elsewhere``: a dry run on a machine without a GPU for a GPU run (a real model): the estimate is
    the GPU run's (device ``cuda``, the plan's host RAM, not this machine's), and what this machine
    lacks (libaio, a GPU for its precision rules) is a warning, not an error. ``filled``, ``names``: the
    config paths the run's options filled into a user's config and how to name the options (see
    :func:`cookbook.lint.lint`)."""
    from .lint import lint
    refusals = []
    # mode "deepspeed": cookbook.train hands Accelerate no dataloader, so DeepSpeed gets the config as it
    # stands; a user's config arrives here already resolved (every "auto" filled from the plan). machine:
    # what this machine decides (fp16 without a GPU, NVMe without libaio, this GPU's precision rules)
    findings = lint(ds_config, world_size=plan.world_size, mode="deepspeed", model=str(plan.model), plan=plan,
                    machine=not elsewhere, filled=filled, names=names)
    findings = [f.to_dict() for f in findings]
    if "nvme" in (plan.offload_optimizer, plan.offload_param):
        from .hardware import LIBAIO_PACKAGES, libaio_present
        if elsewhere and not libaio_present():  # DeepSpeed's async_io op needs it; the run would fail minutes in
            findings.append({"severity": "warning" if elsewhere else "error", "path": "zero_optimization.offload_*.device",
                             "message": "NVMe offload needs libaio (DeepSpeed's async_io op) and it is not installed"
                                        + (" here; the machine that runs this needs it" if elsewhere else ""),
                             "fix": LIBAIO_PACKAGES})
    est = None
    try:
        from .memory import estimate
        import psutil
        gpu_run = on_gpu or elsewhere
        host = plan.host_memory_gib or (None if elsewhere else psutil.virtual_memory().total / GIB)
        eplan = plan.replace(host_memory_gib=host,
                             gpu_memory_gib=emulate_gpu_memory_gib or plan.gpu_memory_gib)
        # a per-process cap on a larger GPU: DeepSpeed's ZeRO-1/2 flattening check sees the whole device (NVML)
        device_gib = None
        if emulate_gpu_memory_gib and on_gpu:
            from .hardware import nvml_gpus
            device_gib = next((g.get("memory_gib") for g in nvml_gpus()), None)
        e = estimate(eplan, bf16_states=bf16_states, device="cuda" if gpu_run else "cpu", ds_config=ds_config,
                     eager_attention=gpu_run and packed_with_mask, gpu_device_gib=device_gib)
        est = e.to_dict()
        if gpu_run and not e.fits_gpu:
            line = f"the estimate needs {e.gpu_gib['total']:.1f} GiB per GPU but a GPU has {eplan.gpu_memory_gib:.1f} GiB"
            from . import liger
            if not plan.liger and plan.zero_stage < 3:
                from .models import model_spec
                if model_spec(str(plan.model)).model_type in liger.ARCHITECTURES:
                    with_liger = estimate(eplan.replace(liger=True), bf16_states=bf16_states, device="cuda",
                                          ds_config=ds_config, eager_attention=packed_with_mask)
                    if with_liger.fits_gpu:  # e.g. a zero2-offload-liger config launched without --liger
                        line += (f" (with --liger, Liger's fused linear cross-entropy, it needs "
                                 f"{with_liger.gpu_gib['total']:.1f} GiB and fits)")
            refusals.append(line)
        if e.fits_host is False:
            refusals.append(f"the estimate needs {e.host_gib['total']:.1f} GiB of host RAM per machine but "
                            + (f"the plan gives {host:.1f} GiB" if elsewhere else f"this machine has {host:.1f} GiB"))
    except Exception as exc:  # noqa: BLE001 - an estimator problem must not block a launch
        est = {"error": f"{type(exc).__name__}: {exc}"}
    return findings, est, refusals


def packed_with_mask(packing: bool | None, attention: str = "sdpa", zero_stage: int | None = None) -> bool:
    """Whether packed rows will reach the attention of a GPU run as a dense block-diagonal mask (transformers'
    sdpa/eager path, which stores ``b·a·s²`` scores per layer: see :func:`cookbook.train.masked_attention`)
    rather than flash-attention's varlen path or FlexAttention's BlockMask: packing not turned off and
    ``attention`` (``--attention``) resolving to sdpa or eager (:func:`cookbook.attention.choose`)."""
    from .attention import AttentionError, choose
    if packing is False:
        return False
    try:
        impl, _ = choose(attention, on_gpu=True, packing=packing, zero_stage=zero_stage)
    except AttentionError:
        return True
    return impl in ("sdpa", "eager")


def stated_fields(plan: Plan, *, lr: float = 3e-3, max_steps: int = 40, warmup_steps: int | None = None) -> set[str]:
    """The plan fields and training options a Python caller of :func:`launch` evidently set: those that differ
    from the defaults of :class:`Plan` and of :class:`cookbook.options.Schedule`. (A value set equal to its
    default cannot be told apart; pass ``Origin(stated=...)`` to be exact.)"""
    base = Plan()
    out = {k for k, v in plan.to_dict().items() if v != getattr(base, k)}
    out |= {k for k, v in (("lr", lr), ("max_steps", max_steps), ("warmup_steps", warmup_steps))
            if v != option_default(k)}
    return out


def train_options(options: RunOptions) -> dict:
    """The ``cookbook.train`` options of ``options`` by argparse destination, as :func:`train_argv` writes them
    (None and False left out there): the ranks' command line. The order is the command's order."""
    s, v, d, m, r = options.schedule, options.saving, options.data, options.model, options.rehearsal
    fields = d.dataset_fields
    return dict(max_steps=s.max_steps, num_epochs=s.num_epochs, lr=s.lr, lr_scheduler=s.lr_scheduler,
                warmup_ratio=DEFAULT_WARMUP_RATIO if s.warmup_ratio is None else s.warmup_ratio,
                warmup_steps=s.warmup_steps, weight_decay=s.weight_decay or None, save_steps=v.save_steps,
                save_total_limit=v.save_total_limit, save_16bit=v.save_16bit, resume=v.resume, dataset=d.dataset,
                eval_fraction=d.eval_fraction or None, eval_dataset=d.eval_dataset, eval_steps=d.eval_steps,
                tokenizer=d.tokenizer, random_weights=r.random_weights, seed=s.seed, bf16_states=m.bf16_states,
                emulate_gpu_memory_gib=r.emulate_gpu_memory_gib, verify_save=v.verify_save,
                no_final_save=not v.final_save, report_to=v.report_to, trust_remote_code=m.trust_remote_code,
                packing=d.packing is True, no_packing=d.packing is False, dataset_split=d.dataset_split,
                dataset_fields=(",".join(f"{k}={x}" for k, x in fields.items()) if isinstance(fields, dict) else fields),
                chat_template=d.chat_template, attention=None if m.attention == "auto" else m.attention)


class _Refused(Exception):
    """A step of :class:`_Launch` ended the launch early; ``result`` is what :func:`launch` returns."""

    def __init__(self, result: RunResult):
        super().__init__(result.message)
        self.result = result


def launch(plan: Plan, output_dir: str | os.PathLike, options: RunOptions | None = None, *,
           config: dict | str | os.PathLike | None = None, dry_run: bool = False, progress: bool = True,
           quiet: bool = False, raise_on_error: bool = False, origin: Origin | None = None, **legacy) -> RunResult:
    """Launch ``plan`` with Accelerate + DeepSpeed in a subprocess, run as ``options`` say, and say what happened.

    Args:
        plan: the run (model, world size ``num_gpus``, ZeRO stage, offload, batch shape, precision).
            ``plan.num_machines > 1`` runs every machine's command on this host (a rehearsal of a
            multi-machine launch over 127.0.0.1); on real machines use :func:`machine_commands`.
        output_dir: the run folder (configs, logs, metrics, summary, checkpoints, final model).
        options: how the run is run (:class:`cookbook.options.RunOptions`: schedule, saving, data, model,
            watchdog, rehearsal, launcher; each field's unit, default and flag are in
            :data:`cookbook.options.FIELDS`); None: every default. In short: ``lr`` is required for a real model
            (None: the tiny models' 3e-3); ``max_steps`` wins over ``num_epochs`` (None for both: 40 steps, tiny
            models only); ``emulate_gpu_memory_gib`` caps each rank's GPU memory
            (``torch.cuda.set_per_process_memory_fraction``; on CPU ranks the model-state budget, see
            :mod:`cookbook.train`); ``force`` launches although the estimate says it will not fit (lint errors
            always stop it); ``hang_timeout_s`` and ``startup_timeout_s`` (default ``max(hang_timeout_s, 600)``)
            are the watchdog's limits; ``packing`` None packs when the model's attention keeps packed examples
            apart; ``attention`` is passed to the ranks as transformers' ``attn_implementation``.
        config: the user's DeepSpeed config (dict or JSON path); None builds one with
            :func:`cookbook.dsconfig.build_config` (target ``accelerate``). Its ``"auto"`` values are filled
            from the plan and the options as the HF Trainer / Accelerate fill them
            (:func:`cookbook.dsconfig.resolve_config`; the fill table is printed and kept in
            ``details["filled"]``), its own values decide the ZeRO stage, offload, batch shape, precision, lr,
            length and scheduler the caller did not state, and a value that disagrees with a stated one is a
            ``config_error`` naming both. The run folder keeps ``ds_config.original.json`` (as given) beside
            ``ds_config.json`` (resolved: what DeepSpeed reads) and ``ds_config.filled.json`` (the table).
            Then the resolved config is linted like any other.
        dry_run: write the run folder and return the command without running it.
        progress: live progress of the steps with loss and tokens/s: a tqdm bar on a terminal; in a notebook
            (papermill included) or a pipe, a plain line every tenth of the run (no redrawn bars in the output).
        quiet: do not print what the run trains (model source, tokenizer, examples, schedule) before it starts.
        raise_on_error: raise :class:`LaunchError` unless the status is ``ok``/``dry_run``.
        origin: where the values came from (:class:`cookbook.options.Origin`: what the caller stated, how to
            name fields, the run file, where lr came from); ``cookbook train``/``launch`` pass theirs.
        legacy: the flat keywords of the earlier signature (``max_steps=5``, ``hang_timeout_s=300``,
            ``stated=...``, ``liger=True``), mapped onto ``options``/``origin``/the plan
            (:func:`cookbook.options.split_legacy`); they win over ``options``. An unknown keyword raises
            :class:`cookbook.options.OptionsError` naming the closest valid one.

    Liger (``plan.liger``, :mod:`cookbook.liger`) is refused (status ``config_error``) without an NVIDIA GPU,
    without liger-kernel, for an architecture other than llama/qwen2 and with ZeRO-3; a dry run of a real model
    planned on a machine without a GPU gets those as notes.

    Process control (:mod:`cookbook.procs`): the run holds ``output_dir/run.lock`` while it runs (a
    second live run there is refused with status ``config_error``; a stale lock is taken over with a
    note on stderr) and is registered to this process: its launcher and ranks die with the thread that
    called :func:`launch` — a killed or restarted notebook kernel included (Linux parent-death signal).
    A ``KeyboardInterrupt`` (interrupting the kernel, Ctrl-C) stops the ranks and returns status
    ``interrupted``; ``cookbook stop`` returns ``stopped``; both messages name the step reached and
    the checkpoint ``resume=True`` continues from.

    Writes ``run.resolved.yaml`` into the run folder: every option of the run with its final value
    (the learning rate and step count resolved), loadable with ``cookbook train run.resolved.yaml``.

    Returns:
        :class:`RunResult`. Nothing raises into the notebook unless ``raise_on_error`` (or for an unknown keyword).
    """
    flat, origin_kw, plan_kw = split_legacy(legacy)
    options = (options or RunOptions()).replace(**flat) if flat else (options or RunOptions())
    origin = dataclasses.replace(origin or Origin(), **origin_kw) if origin_kw else (origin or Origin())
    if "liger" in plan_kw and plan_kw["liger"] is not None and isinstance(plan, Plan) and bool(plan_kw["liger"]) != plan.liger:
        plan = plan.replace(liger=bool(plan_kw["liger"]))
    steps = _Launch(plan, output_dir, options, origin, config=config, dry_run=dry_run, progress=progress,
                    quiet=quiet, raise_on_error=raise_on_error)
    try:
        return steps.run()
    except _Refused as stop:
        return stop.result


class _Launch:
    """The steps of one :func:`launch`, in order (:meth:`run`): check the inputs, read the user's config,
    check the device, check the training inputs, say what will run, build the config, guard (lint and
    estimate), write the run folder, decide (refuse, dry run or go), start and watch the ranks, collect the
    outcome. A step that ends the launch raises :class:`_Refused` with the result; the state the steps share
    (the plan, the resolved lr / steps / warm-up, the config, the findings) lives on the instance."""

    def __init__(self, plan: Plan, output_dir, options: RunOptions, origin: Origin, *, config, dry_run: bool,
                 progress: bool, quiet: bool, raise_on_error: bool):
        self.t_start = time.time()
        self.plan, self.options, self.config = plan, options, config
        self.dry_run, self.progress, self.quiet, self.raise_on_error = dry_run, progress, quiet, raise_on_error
        self.run_dir = Path(output_dir).resolve()
        self.on_gpu = on_gpu_machine()
        s = options.schedule
        self.lr, self.max_steps, self.warmup_steps, self.lr_scheduler = s.lr, s.max_steps, s.warmup_steps, s.lr_scheduler
        self.names, self.stated, self.run_file, self.lr_source = origin.names, origin.stated, origin.run_file, origin.lr_source
        self.auto = frozenset(origin.auto or ())
        self.opts = train_options(options)
        self.resolution = self.ds_config = self.config_scheduler = self.lr_auto = None
        self.name = "config" if config is None or isinstance(config, dict) else Path(config).name
        self.caller_typed = self.stated  # what the caller said it typed (the CLI); None: a Python caller
        self.given_plan = plan  # both config passes compare with the plan as given (the second must not see the first's)

    # ---- the result -----------------------------------------------------------------------------

    def result(self, status: str, message: str, **kw) -> RunResult:
        """The :class:`RunResult` of this launch (with the config's fill table in ``details["filled"]``)."""
        if self.resolution is not None and self.resolution.rows:
            kw["details"] = dict(kw.get("details") or {}, filled=[
                {"path": r.path, "value": r.value, "from": r.source, "how": r.how} for r in self.resolution.rows])
        kw.setdefault("world_size", self.plan.world_size if isinstance(self.plan, Plan) else None)
        r = RunResult(status=status, message=message, run_dir=str(self.run_dir),
                      duration_s=time.time() - self.t_start, **kw)
        if self.raise_on_error:
            r.raise_for_status()
        return r

    def refuse(self, message: str, **kw):
        """End the launch with status ``config_error`` (no command unless ``command=`` is given)."""
        kw.setdefault("command", "")
        raise _Refused(self.result("config_error", message, **kw))

    def run(self) -> RunResult:
        self.check_inputs()
        self.read_user_config()
        self.check_device()
        self.check_training_inputs()
        if not self.quiet:
            self.say_what_runs()
        self.warn_environment()
        self.build_config()
        self.guard()
        self.write_run_dir()
        self.decide()
        return self.collect(*self.start_and_watch())

    # ---- 0. the folder and the states -----------------------------------------------------------

    def check_inputs(self) -> None:
        """One live run per folder (refused before anything is written into it); bf16 states the run
        cannot have, before any data is read."""
        from .procs import busy_message
        busy = busy_message(self.run_dir)
        if busy:
            self.refuse(busy)
        if self.config is None and isinstance(self.plan, Plan):
            from .dsconfig import ConfigError, check_bf16_states
            try:
                check_bf16_states(self.plan, self.options.model.bf16_states)
            except ConfigError as exc:
                self.refuse(user_message(exc, names=self.names))
        if self.lr is not None and not self.lr_source:
            self.lr_source = (self.names or {}).get("lr") or "launch(lr=...)"
        if self.config is not None and self.stated is None:
            self.stated = stated_fields(self.plan, lr=self.lr, max_steps=self.max_steps, warmup_steps=self.warmup_steps)

    # ---- 1. the user's config -------------------------------------------------------------------

    def resolve(self, lr, max_steps, warmup_steps):
        """Lint and fill the user's config for the plan as given; (report, problem message or None)."""
        from .lint import lint
        config, name = self.config, self.name
        report = lint(config if isinstance(config, dict) else str(config), mode="launch", plan=self.given_plan,
                      stated=self.stated, names=self.names, lr=lr, max_steps=max_steps, warmup_steps=warmup_steps,
                      will_save_hf_model=self.options.saving.final_save)
        if not report.readable:
            return report, f"{name}: cannot be used: " + "; ".join(
                f"{f.message} Fix: {f.fix}" for f in report if f.severity == "error")
        if not report.resolved.ok:
            return report, (f"{name} cannot be filled for this run; nothing was launched:\n- " + "\n- ".join(
                f"{p.path}: {p.message} Fix: {p.fix}" for p in report.resolved.problems))
        return report, None

    def read_user_config(self) -> None:
        """The first pass over the user's config: every "auto" filled from the plan as the HF Trainer /
        Accelerate fill it; its own values decide what the user did not state (plan fields, lr, length,
        scheduler) and disagree with what they did. Placeholders stand where lr and length are not known
        yet; the second pass (:meth:`check_training_inputs`) fills with the real values."""
        if self.config is None:
            self.opts["lr_source"] = self.lr_source
            return
        report, problem = self.resolve(0.0 if self.lr is None else self.lr,
                                       1 if self.max_steps is None else self.max_steps, self.warmup_steps)
        if problem:
            self.refuse(problem, findings=[f.to_dict() for f in report])
        self.plan = report.resolved.plan
        given = report.resolved.original
        cfg_lr = ((given.get("optimizer") or {}).get("params") or {}).get("lr")
        cfg_steps = ((given.get("scheduler") or {}).get("params") or {}).get("total_num_steps")
        if self.lr is None and isinstance(cfg_lr, (int, float)) and not isinstance(cfg_lr, bool) and cfg_lr > 0:
            self.lr = self.opts["lr"] = float(cfg_lr)  # the config's own learning rate decides what was not typed
            self.lr_source = f"{self.name}: optimizer.params.lr"
        self.lr_auto = cfg_lr == "auto"
        self.read_config_scheduler(given.get("scheduler"))
        if self.max_steps is None and self.options.schedule.num_epochs is None and isinstance(cfg_steps, int) \
                and cfg_steps > 0:
            self.max_steps = self.opts["max_steps"] = cfg_steps
        self.opts["lr_source"] = self.lr_source

    def read_config_scheduler(self, sched) -> None:
        """DeepSpeed runs the config's own scheduler (train.py hands it to ``DummyScheduler``): the run's
        schedule is that block, so a typed ``--lr-scheduler`` that names another one is a contradiction."""
        if not (isinstance(sched, dict) and sched.get("type")):
            return
        from .dsconfig import DS_SCHEDULER_TYPES, SCHEDULER_KINDS
        kind, lr_scheduler, name = SCHEDULER_KINDS.get(sched["type"]), self.lr_scheduler, self.name
        typed = ("lr_scheduler" in self.stated) if self.stated is not None else lr_scheduler != "linear"
        if typed and kind != lr_scheduler:
            flag = (self.names or {}).get("lr_scheduler") or "--lr-scheduler"
            self.refuse(
                f"{flag} {lr_scheduler} contradicts {name}: scheduler.type {sched['type']}"
                + (f" (that is {kind})" if kind else "") + ", and DeepSpeed runs the config's scheduler. Fix: drop "
                f"{flag} to run {sched['type']}, or remove the \"scheduler\" block from {name} (or set its type "
                f"to {DS_SCHEDULER_TYPES.get(lr_scheduler, lr_scheduler)}) to run {lr_scheduler}")
        self.config_scheduler = sched["type"]
        if kind:
            self.lr_scheduler = self.opts["lr_scheduler"] = kind

    # ---- 2. the device: precision, Liger, attention ----------------------------------------------

    def check_device(self) -> None:
        """Precision the device cannot run, named as the caller typed it (a user's config is checked by the
        linter's machine rules instead); Liger's refusal; the attention kernel. A dry run on a machine without
        a GPU that plans a real model's GPU run elsewhere is not refused for this machine's CPU; fp16 on this
        CPU is refused in a dry run too (it cannot run here)."""
        plan, on_gpu, dry_run = self.plan, self.on_gpu, self.dry_run
        self.elsewhere = dry_run and not on_gpu and not is_rehearsal_model(plan.model)
        self.refused = (precision_refusal(plan.precision, on_gpu, name=(self.names or {}).get("precision", "precision"))
                        if self.config is None and not self.elsewhere else None)
        if self.refused and (not dry_run or not on_gpu):
            self.refuse(self.refused)
        if "liger" in self.auto:  # --liger auto: on where it can run, decided on the stage the config gave
            self.plan = plan = self.resolve_liger(plan)
        self.liger_refused = liger_refusal(plan, on_gpu=on_gpu, dry_run=dry_run)
        if self.liger_refused and not dry_run:
            self.refuse(self.liger_refused + "; nothing was launched")
        from .attention import AttentionError, choose as choose_attention
        try:
            impl, why = choose_attention(self.options.model.attention, on_gpu=on_gpu or self.elsewhere,
                                         packing=self.options.data.packing, zero_stage=plan.zero_stage)
        except AttentionError as exc:
            self.refuse(f"{exc}; nothing was launched")
        print(f"[attention] {impl} ({why})")
        if on_gpu:  # the ranks run what was decided here (they do not choose again)
            from .attention import IMPLEMENTATIONS
            self.opts["attention"] = next(k for k, v in IMPLEMENTATIONS.items() if v == impl)

    def resolve_liger(self, plan: Plan) -> Plan:
        """``--liger auto`` (:func:`cookbook.liger.resolve`) for this plan, printed as ``[liger] auto: on/off (why)``.
        A dry run planned for a GPU machine elsewhere assumes that machine has liger-kernel (its run checks)."""
        from . import liger
        from .models import model_spec
        try:
            model_type = model_spec(str(plan.model)).model_type
        except Exception:  # noqa: BLE001 - a missing model is reported by the input checks, naming --model
            model_type = None
        on, why = liger.resolve("auto", model_type=model_type, zero_stage=plan.zero_stage,
                                on_gpu=self.on_gpu or self.elsewhere, is_installed=True if self.elsewhere else None)
        print(f"[liger] {why}", flush=True)
        return plan.replace(liger=on) if on != plan.liger else plan

    # ---- 3. the training inputs -----------------------------------------------------------------

    def train_args(self) -> list[str]:
        return train_argv(self.plan, self.run_dir, **self.opts) + list(self.options.launcher.extra_args)

    def check_training_inputs(self) -> None:
        """Options, model, tokenizer, data and output folder, checked by the trainer's own parser and
        :func:`cookbook.train.validate_inputs`; the lr and the run's length resolved (epochs -> steps, warm-up
        ratio -> steps); then the user's config filled with them (its second pass)."""
        targs = self.train_args()
        try:
            parser = argparse.ArgumentParser()
            add_train_arguments(parser)
            self.parsed = parser.parse_args(targs)
            self.facts = validate_inputs(self.parsed, self.plan.world_size, gpu_box=self.on_gpu)
        except TrainInputError as exc:
            self.refuse(str(exc))
        except SystemExit:
            self.refuse(f"invalid training options: {shlex.join(targs)}")
        self.max_steps, self.lr, self.warmup_steps = self.parsed.max_steps, self.parsed.lr, self.parsed.warmup_steps
        hp = self.facts["hyperparameters"]
        if self.lr_auto:
            hp["lr_source"] = f"{hp['lr_source']}, filled into {self.name}'s \"auto\" optimizer.params.lr"
        self.opts.update(max_steps=self.max_steps, lr=self.lr, warmup_steps=self.warmup_steps, lr_source=hp["lr_source"])
        self.targs = self.train_args()
        if self.config is not None:
            self.fill_user_config(hp)

    def fill_user_config(self, hp: dict) -> None:
        """The second pass over the user's config, with the resolved lr, steps and warm-up; its fill table is
        printed (``cookbook launch --json`` sends it to stderr)."""
        report, problem = self.resolve(self.lr, self.max_steps, self.warmup_steps)
        if problem:
            self.refuse(problem, findings=[f.to_dict() for f in report])
        self.resolution = report.resolved
        if self.resolution.rows:
            print(str(self.resolution), flush=True)
        self.ds_config = self.resolution.config
        if self.config_scheduler and isinstance(self.ds_config.get("scheduler"), dict):
            from .dsconfig import SCHEDULER_KINDS, describe_scheduler
            opt_lr = ((self.ds_config.get("optimizer") or {}).get("params") or {}).get("lr")
            hp["scheduler"] = describe_scheduler(self.ds_config["scheduler"],
                                                 opt_lr if isinstance(opt_lr, (int, float)) else self.lr)
            hp["scheduler_source"] = f"{self.name}: scheduler"
            hp["lr_scheduler"] = self.lr_scheduler if SCHEDULER_KINDS.get(self.config_scheduler) else self.config_scheduler

    # ---- 4. what will run -----------------------------------------------------------------------

    def say_what_runs(self) -> None:
        """The console lines before the launch: model, tokenizer, data, schedule, and notes on defaults."""
        from .train import describe_inputs
        plan, on_gpu = self.plan, self.on_gpu
        for line in describe_inputs(self.facts):
            print(line, flush=True)
        for flag, every in (("--save-steps", self.options.saving.save_steps), ("--eval-steps", self.options.data.eval_steps)):
            if every and every > self.max_steps:
                print(f"[schedule] note: {flag} {every} is more than the run's {self.max_steps} steps: nothing is "
                      f"{'saved' if flag == '--save-steps' else 'evaluated'} before the last step", flush=True)
        if not is_rehearsal_model(plan.model) and self.caller_typed is not None:
            # only where the command line says what was typed: a Python caller built its Plan on purpose
            from .dsconfig import config_plan_fields
            from_config = config_plan_fields(self.config) if self.config is not None else set()
            kept = [f"{flag} {getattr(plan, f)}" for f, flag in (("seq_len", "--seq-len"), ("micro_batch", "--micro-batch"),
                                                                ("grad_accum", "--grad-accum"))
                    if f not in self.caller_typed and f not in from_config]
            if kept:
                verb = "is the default" if len(kept) == 1 else "are the defaults"
                print(f"[plan] note: {', '.join(kept)} {verb} (sized for the CPU rehearsal), not chosen for "
                      f"{plan.model}; `cookbook estimate ... --sweep` finds a batch shape that fits", flush=True)
        if plan.gradient_checkpointing != default_gradient_checkpointing(plan.model, on_gpu):
            print(f"[model] gradient checkpointing {'on' if plan.gradient_checkpointing else 'off'}, as the plan says "
                  f"(the default for {plan.model} {'here' if on_gpu else 'on CPU ranks'} would be "
                  f"{'off' if plan.gradient_checkpointing else 'on'})", flush=True)
        if self.refused:
            print(f"[precision] note: {self.refused}", flush=True)
        if self.options.model.bf16_states and not is_rehearsal_model(plan.model):
            from .memory import BF16_STATES_NOTE
            print(BF16_STATES_NOTE, flush=True)
        if self.liger_refused:
            print(f"[liger] note: {self.liger_refused}", flush=True)
        elif plan.liger and "liger" not in self.auto:  # auto said it already (resolve_liger)
            print("[liger] Liger fused linear cross-entropy: the loss without the full logits tensor "
                  "(--liger; the DeepSpeed config has no key for it)", flush=True)

    def warn_environment(self) -> None:
        """Warnings printed even when quiet (under ``--json`` they go to stderr), never refusals: pinned
        OpenMP threads that slow DeepSpeed's CPU Adam (:func:`cookbook.env.cpu_adam_binding_warning`), and
        16-bit checkpoints that will fill the disk (:func:`save_16bit_disk_warning`)."""
        from .env import cpu_adam_binding_warning
        binding = cpu_adam_binding_warning({**os.environ, **(self.options.launcher.env or {})}, self.plan)
        if binding:
            print(binding, flush=True)
        disk = save_16bit_disk_warning(self.plan, self.options, self.max_steps, self.run_dir,
                                       num_params=self.facts.get("num_params"))
        if disk:
            print(disk, flush=True)

    # ---- 5. the config, the guard, the run folder -------------------------------------------------

    def build_config(self) -> None:
        """The DeepSpeed config built from the plan when the user gave none."""
        if self.ds_config is not None:
            return
        from .dsconfig import ConfigError, build_config
        s = self.options.schedule
        try:
            self.ds_config = build_config(self.plan, "accelerate", lr=self.lr, warmup_steps=self.warmup_steps,
                                          total_steps=self.max_steps, bf16_states=self.options.model.bf16_states,
                                          lr_scheduler=self.lr_scheduler, weight_decay=s.weight_decay)
        except ConfigError as exc:
            self.refuse(user_message(exc, names=self.names))

    def guard(self) -> None:
        """More ranks than GPUs here (each extra rank would die in ``cuda.set_device``); lint findings and the
        estimate (:func:`_guard`)."""
        plan = self.plan
        if self.on_gpu and not self.elsewhere:
            from .hardware import default_num_processes, gpu_count
            per_machine, gpus = plan.num_gpus // max(1, plan.num_machines), gpu_count()
            if per_machine > gpus:
                self.refuse(f"--num-processes {plan.num_gpus}"
                            + (f" over {plan.num_machines} machines ({per_machine} per machine)" if plan.num_machines > 1 else "")
                            + f": this machine has {gpus} GPU(s) visible, one rank per GPU. Fix: --num-processes "
                            f"{default_num_processes(plan.num_machines, gpus=gpus)} (or leave it out: the default is this "
                            "machine's GPUs), or make more GPUs visible (CUDA_VISIBLE_DEVICES)")
        # the config paths the options filled (the machine rules then name the option: --precision fp16)
        filled = {r.path for r in self.resolution.rows if r.how != "kept"} if self.resolution is not None else None
        d = self.options.data
        self.findings, self.est, self.refusals = _guard(
            plan, self.ds_config, on_gpu=self.on_gpu, bf16_states=self.options.model.bf16_states,
            emulate_gpu_memory_gib=self.options.rehearsal.emulate_gpu_memory_gib, elsewhere=self.elsewhere,
            packed_with_mask=packed_with_mask(d.packing, self.options.model.attention, self.plan.zero_stage), filled=filled, names=self.names)

    def write_run_dir(self) -> None:
        """``ds_config.json``, ``accelerate.yaml``, ``command.sh``, ``run.resolved.yaml`` and, for a user's
        config, ``ds_config.original.json`` and ``ds_config.filled.json``."""
        launcher, watchdog = self.options.launcher, self.options.watchdog
        self.folder = prepare_run(self.plan, self.ds_config, self.run_dir, self.targs,
                                  main_process_ip=launcher.main_process_ip, main_process_port=launcher.main_process_port)
        write_resolved_options(self.run_dir / RESOLVED_FILE, self.plan, self.parsed, run_file=self.run_file,
                               config=self.config, scheduler=self.facts["hyperparameters"].get("scheduler"),
                               launch_options={"force": launcher.force, "hang_timeout": watchdog.hang_timeout_s,
                                               "startup_timeout": watchdog.startup_timeout_s,
                                               "main_process_ip": launcher.main_process_ip,
                                               "main_process_port": launcher.main_process_port})
        self.command = self.folder.command_text
        if self.resolution is not None:  # the user's file beside the resolved ds_config.json that DeepSpeed reads
            (self.run_dir / "ds_config.original.json").write_text(json.dumps(self.resolution.original, indent=2) + "\n")
            fill = {"filled": [{"path": r.path, "value": r.value, "from": r.source, "how": r.how}
                               for r in self.resolution.rows]}
            (self.run_dir / "ds_config.filled.json").write_text(json.dumps(fill, indent=2) + "\n")

    # ---- 6. refuse, dry run or go -----------------------------------------------------------------

    def decide(self) -> None:
        """Lint errors, NVMe swap files that do not fit on this machine (:func:`cookbook.nvme.nvme_disk_refusal`)
        and an estimate that does not fit (unless ``force``) end the launch; a dry run ends here with its notes."""
        known = dict(command=self.command, findings=self.findings, estimate=self.est, details={"inputs": self.facts})
        lint_errors = [f for f in self.findings if f["severity"] == "error"]
        if lint_errors:
            self.refuse("the DeepSpeed config has errors; nothing was launched:\n- "
                        + "\n- ".join(f"{f['path']}: {f['message']} Fix: {f['fix']}" for f in lint_errors), **known)
        if not self.elsewhere:
            from .nvme import nvme_disk_refusal
            disk_refusal = nvme_disk_refusal(self.plan, self.ds_config)
            if disk_refusal and not self.dry_run:
                self.refuse("not enough disk space for NVMe offload, so nothing was launched: " + disk_refusal, **known)
            if disk_refusal:
                self.refusals.append(disk_refusal)
        if self.refusals and not self.options.launcher.force and not self.dry_run:
            self.refuse("the estimate says this will not fit, so nothing was launched (" + "; ".join(self.refusals)
                        + "). Pick a variant that fits (`cookbook estimate --sweep`) or pass --force (force=True from "
                        "Python) to try anyway.", **known)
        if self.dry_run:
            raise _Refused(self.result("dry_run", "run folder written; the command was not run." + self.dry_run_note(),
                                       **known))

    def dry_run_note(self) -> str:
        """What a dry run would have refused or noted, and for a GPU run planned elsewhere, its estimate."""
        notes = self.refusals + [n for n in (self.refused, self.liger_refused) if n]
        note = (" Note, for " + ("the planned GPU run" if self.elsewhere else "this machine") + ": "
                + "; ".join(notes)) if notes else ""
        est = self.est
        if self.elsewhere and est and "gpu_gib" in est:
            note += (f" The estimate for the GPU run: {est['gpu_gib']['total']:.1f} GiB per GPU (with this config's "
                     "bucket sizes; `cookbook estimate` assumes DeepSpeed's defaults, so it may say more), "
                     f"{est['host_gib']['total']:.1f} GiB of host RAM per machine"
                     + ("" if self.plan.host_memory_gib else " (give --host-memory-gib to check it)") + ".")
        return note

    # ---- 7. run and collect -----------------------------------------------------------------------

    def start_and_watch(self) -> tuple:
        """Run the ranks holding the folder's lock (:class:`cookbook.procs.RunLock`); (exit code, hung,
        ended by, the environment added, stale build locks removed)."""
        from .procs import RunBusyError, RunLock, RUN_ID_ENV
        try:
            lock = RunLock.acquire(self.run_dir, launch_command=self.command)
        except RunBusyError as exc:
            self.refuse(str(exc), command=self.command, findings=self.findings, estimate=self.est)
        if lock.note:
            print(lock.note, file=sys.stderr, flush=True)
        watchdog = self.options.watchdog
        try:
            log_dir = self.run_dir / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            for old in log_dir.glob("*.log"):
                old.unlink()
            child, added = child_env(self.plan, self.options.launcher.env, log_dir=log_dir)
            child[RUN_ID_ENV] = lock.run_id
            stale = clear_stale_build_locks()
            startup = (watchdog.startup_timeout_s if watchdog.startup_timeout_s is not None
                       else max(watchdog.hang_timeout_s, 600.0))
            returncode, hung, ended_by = _run_and_watch(self.folder.commands, child, log_dir, watchdog.hang_timeout_s,
                                                        self.progress, self.max_steps, startup, lock=lock)
        finally:
            lock.release()
        return returncode, hung, ended_by, added, stale

    def collect(self, returncode, hung, ended_by, added, stale) -> RunResult:
        """The outcome: the status and message (:func:`classify`, or how Ctrl-C / ``cookbook stop`` ended it),
        ``summary.json``, ``metrics.jsonl`` and the logs."""
        run_dir, log_dir = self.run_dir, self.run_dir / "logs"
        if ended_by:
            status, message, details = ended_by, _ended_message(run_dir, ended_by), {}
        else:
            status, message, details = classify(run_dir, returncode, hung, self.options.watchdog.hang_timeout_s,
                                                self.est, self.plan, self.on_gpu)
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        metrics_path = run_dir / "metrics.jsonl"
        metrics = ([json.loads(l) for l in metrics_path.read_text().splitlines() if l.strip()]
                   if metrics_path.is_file() else [])
        logs = {"launcher": str(log_dir / "launcher.log")}
        logs.update({p.stem: str(p) for p in sorted(log_dir.glob("rank*.log"))})
        details = dict(details, env_added=added, inputs=self.facts)
        if stale:
            details["stale_build_locks_removed"] = stale
        return self.result(status, message, command=self.command, returncode=returncode, summary=summary,
                           metrics=metrics, log_paths=logs, findings=self.findings, estimate=self.est, details=details)


#: A model of this many parameters or more is "7B+" for :func:`save_16bit_disk_warning`: LLaMA-7B has 6.74e9
#: (Touvron et al., 2023, Table 2), so the cut sits just below it.
LARGE_MODEL_PARAMS = 6.5e9


def save_16bit_saves(max_steps: int, save_steps: int, *, final_save: bool, verify_save: str) -> int:
    """How many copies of the 16-bit weights a ``--save-16bit every`` run writes and keeps when nothing rotates:
    one per intermediate checkpoint (steps ``save_steps, 2·save_steps, ... < max_steps``: ``(max_steps - 1) //
    save_steps``, as ``cookbook.train._train`` saves them), one in the final checkpoint (``final_save``), and
    ``final_model/`` copied from it after a verified save (``verify_save`` not ``off``)."""
    intermediate = (max_steps - 1) // save_steps if save_steps and max_steps else 0
    return intermediate + (1 if final_save else 0) + (1 if final_save and verify_save != "off" else 0)


def save_16bit_disk_warning(plan: Plan, options: RunOptions, max_steps: int | None, run_dir: Path, *,
                            num_params: int | None) -> str | None:
    """The warning for a run of a 7B+ model (:data:`LARGE_MODEL_PARAMS`) that gathers the 16-bit model into every
    checkpoint (``--save-16bit every``, ``--save-steps`` > 0) and keeps them all (no ``--save-total-limit``): the
    disk its weights take — ``num_params`` × 2 bytes (bf16/fp16; 4 for fp32, the dtype ``save_pretrained`` writes)
    × :func:`save_16bit_saves`, in GiB — against the free disk of the run folder's file system
    (``shutil.disk_usage`` of its nearest existing folder). None when the run is not such a run. The DeepSpeed
    states of each checkpoint come on top (``cookbook estimate`` sizes them)."""
    import shutil
    saving = options.saving
    if (saving.save_16bit != "every" or not saving.save_steps or saving.save_total_limit or not max_steps
            or not num_params or num_params < LARGE_MODEL_PARAMS):
        return None
    saves = save_16bit_saves(max_steps, saving.save_steps, final_save=saving.final_save, verify_save=saving.verify_save)
    per_param = 4 if plan.precision == "fp32" else 2
    per_save = num_params * per_param / GIB
    folder = Path(run_dir)
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    free = shutil.disk_usage(folder).free / GIB
    dtype = "fp32" if per_param == 4 else "16-bit"
    return (f"[checkpoint] warning: --save-16bit every with --save-steps {saving.save_steps} and no --save-total-limit "
            f"keeps {saves} copies of the {dtype} weights of this {num_params / 1e9:.1f}e9-parameter model: {saves} × "
            f"{per_save:.1f} GiB = {saves * per_save:.1f} GiB, plus the DeepSpeed states of each checkpoint; the disk "
            f"of {folder} has {free:.1f} GiB free. Fix: --save-total-limit 2 (keep the newest two), or --save-16bit "
            "final (intermediate checkpoints hold only the DeepSpeed state for --resume)")


def _ended_message(run_dir: Path, ended_by: str) -> str:
    """The one line for a run ended by Ctrl-C or `cookbook stop`: the step reached and where
    ``--resume`` continues (metrics.jsonl is rewritten by rank 0 at the start of every launch)."""
    from .procs import metrics_rows, resume_hint
    rows = metrics_rows(run_dir)
    trained = STEP_PREFIX in _tail(run_dir / "logs" / "rank0.log")  # this launch's log: it trained a step
    where = f"at step {rows[-1]['step']}" if rows and trained else "before its first step"
    how = "interrupted" if ended_by == "interrupted" else "stopped by `cookbook stop`"
    return f"{how} {where}; {resume_hint(run_dir)}"


class _Progress:
    """Rank 0's steps shown live: on a terminal one tqdm line redrawn in place (steps, loss, tokens/s); elsewhere —
    a notebook cell, papermill's executions, a pipe (:func:`cookbook.hardware.terminal_progress`) — every redraw
    would stay in the output, so a plain line every tenth of the run (at most ~11 lines). Nothing when off."""

    def __init__(self, progress: bool, max_steps: int):
        from .hardware import terminal_progress
        self.bar, self.every, self.max_steps = None, None, max_steps
        if progress and terminal_progress(sys.stderr):
            from tqdm.std import tqdm
            self.bar = tqdm(total=max_steps, desc="training", unit="step", file=sys.stderr, mininterval=1.0)
        elif progress:
            self.every = max(1, math.ceil(max_steps / 10))
            print(f"training: {max_steps} steps; a line every {self.every} step(s) (not a terminal: no live bar)",
                  file=sys.stderr, flush=True)

    def show(self, line: str) -> None:
        """Show one ``COOKBOOK_STEP {json}`` line of rank 0."""
        if self.bar is None and not self.every:
            return
        row = json.loads(line[len(STEP_PREFIX):])
        post = dict(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s']:.0f}")
        if row.get("eval_loss") is not None:
            post["eval_loss"] = f"{row['eval_loss']:.3f}"
        if self.bar is not None:
            self.bar.n = row["step"]
            self.bar.set_postfix(**post)
            self.bar.refresh()
        elif row["step"] % self.every == 0 or row["step"] == self.max_steps:
            print(f"training: step {row['step']}/{self.max_steps}, " + ", ".join(f"{k} {v}" for k, v in post.items()),
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Rank0Log:
    """The lines rank 0 has added to its log since the last read (a partial last line waits for its end)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.buffer = path, 0, ""

    def new_lines(self) -> list[str] | None:
        """The complete new lines, or None when the log has not grown (no activity)."""
        if not self.path.is_file():
            return None
        size = self.path.stat().st_size
        if size <= self.offset:
            return None
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset).decode("utf-8", "replace")
        self.offset = size
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split("\n")
        return lines


def _building_ops_activity(env: dict, limit: float) -> float | None:
    """Seconds since the latest write into a DeepSpeed op's build folder when that is within ``limit``, else None:
    a cold async_io or CPU Adam build on a loaded machine takes longer than the startup limit, and is progress
    (:func:`cookbook.procs.building_ops`)."""
    from .procs import building_ops
    ext = env.get("TORCH_EXTENSIONS_DIR") or str(extensions_dir())
    writes = [b["last_write_s"] for b in building_ops(ext)]
    return min(writes) if writes and min(writes) < limit else None


def _start_launchers(commands, env, launcher_log, lock, procs: list) -> None:
    """Start each launcher in its own process group with this interpreter (the displayed command says
    ``accelerate launch``, the same entry point), appending it to ``procs`` as it starts (a later one failing to
    start leaves the earlier ones to be stopped); register them with ``lock`` (``cookbook status`` and ``stop``)."""
    from .procs import child_command, register_live
    commands = [[sys.executable, "-m", "accelerate.commands.launch", *c[2:]] if c[:2] == ["accelerate", "launch"]
                else c for c in commands]
    for c in commands:
        procs.append(subprocess.Popen(child_command(c), env=env, stdout=launcher_log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    if lock is not None:
        register_live(lock.run_id, procs)
        # where the ranks JIT-build DeepSpeed's ops: `cookbook status` says when a build is under way
        lock.update(launcher_pids=[p.pid for p in procs],
                    torch_extensions_dir=env.get("TORCH_EXTENSIONS_DIR") or str(extensions_dir()))


def _run_and_watch(commands, env, log_dir: Path, hang_timeout_s: float, progress: bool,
                   max_steps: int, startup_timeout_s: float, lock=None) -> tuple[int | None, bool, str | None]:
    """Run the launcher(s) in new process groups, each dying with this thread (parent-death signal,
    :mod:`cookbook.procs`); stream rank 0's steps (:class:`_Progress`); keep ``lock``'s heartbeat; stop everything
    on a hang or Ctrl-C. Returns (exit code, hung, ``interrupted``/``stopped``/None).

    Before the first step, initialisation (model build, JIT op builds, process groups) may take minutes in
    silence: the limit is ``startup_timeout_s``, and a DeepSpeed op still compiling counts as activity; after
    it, rank 0 silent for ``hang_timeout_s`` is a hang."""
    from .procs import kill_run, unregister_live
    shown = _Progress(progress, max_steps)
    launcher_log = open(log_dir / "launcher.log", "ab")
    rank0 = _Rank0Log(log_dir / "rank0.log")
    last_activity, hung, stepped, ended_by = time.time(), False, False, None
    procs = []
    try:
        _start_launchers(commands, env, launcher_log, lock, procs)
        while any(p.poll() is None for p in procs):
            time.sleep(0.5)
            if lock is not None:
                lock.beat()
                if lock.stop_requested():  # `cookbook stop`: it signals the launchers too
                    ended_by = "stopped"
                    _stop(procs)
                    break
            lines = rank0.new_lines()
            if lines is not None:
                last_activity = time.time()
            for line in lines or ():
                if line.startswith(STEP_PREFIX):
                    stepped = True
                    shown.show(line)
            limit = hang_timeout_s if stepped else startup_timeout_s
            if time.time() - last_activity > limit and not stepped:
                building = _building_ops_activity(env, limit)
                if building is not None:
                    last_activity = max(last_activity, time.time() - building)
            if time.time() - last_activity > limit:
                hung = {"limit_s": limit, "phase": "steps" if stepped else "startup"}
                _stop(procs)
                break
        # one rank failing makes the others wait in a collective until torchrun kills them; a
        # launcher of several machines may leave the others waiting for the failed one
        if not hung and any(p.returncode not in (0, None) for p in procs):
            _stop(procs, grace_s=30)
    except KeyboardInterrupt:  # Ctrl-C (the CLI also turns SIGTERM/SIGHUP into this): stop, report, no traceback
        ended_by = "interrupted"
        _stop(procs)
    finally:
        shown.close()
        launcher_log.close()
        if lock is not None:  # the sweep: nothing of this run outlives it
            kill_run(lock.run_id)
            unregister_live(lock.run_id)
    codes = [p.wait() for p in procs]
    if ended_by is None and lock is not None and lock.stop_requested():  # the launchers ended before we saw it
        ended_by = "stopped"
    return next((c for c in codes if c != 0), 0), hung, ended_by


def _stop(procs, grace_s: float = 10.0) -> None:
    """SIGTERM each process group, then SIGKILL what is left after ``grace_s`` (a second Ctrl-C: at once)."""
    from .procs import stop_popens
    stop_popens(procs, grace_s)


# ----------------------------------------------------------------------------------------------
# CLI: cookbook train / cookbook launch

#: The resolved options of a run, written into its folder (loadable as a run file).
RESOLVED_FILE = "run.resolved.yaml"

#: Options that shape the command's output, not the run: never read from or written to a run file.
_NOT_IN_RUN_FILE = {"help", "json", "dry_run", "progress", "run_file", "func", "stop_after_step", "lr_source"}

#: Names users bring from the HF Trainer, LLaMA-Factory and axolotl, for the did-you-mean of an unknown key.
FOREIGN_KEYS = {"learning_rate": "lr", "num_train_epochs": "num-epochs", "per_device_train_batch_size": "micro-batch",
                "micro_batch_size": "micro-batch", "gradient_accumulation_steps": "grad-accum",
                "cutoff_len": "seq-len", "max_seq_length": "seq-len", "sequence_len": "seq-len",
                "lr_scheduler_type": "lr-scheduler", "model_name_or_path": "model", "base_model": "model",
                "deepspeed": "config", "val_size": "eval-fraction", "val_set_size": "eval-fraction",
                "num_epochs": "num-epochs", "bf16": "precision", "fp16": "precision",
                "gradient_checkpointing": "gradient-checkpointing", "datasets": "dataset", "tokenizer_name": "tokenizer"}


class RunFileError(ValueError):
    """A run file that cannot be used; the message names the file, the key and the fix."""


def _run_file_actions(parser: argparse.ArgumentParser) -> dict:
    """Key of a run file -> (action, via_option): every long flag name and every destination, with
    dashes or underscores."""
    keys = {}
    for a in parser._actions:
        if a.dest in _NOT_IN_RUN_FILE or a.dest is argparse.SUPPRESS:
            continue
        for name in (a.dest, a.dest.replace("_", "-")):
            keys.setdefault(name, (a, False))
        for opt in a.option_strings:
            if opt.startswith("--"):
                for name in (opt[2:], opt[2:].replace("-", "_")):
                    keys[name] = (a, True)
    return keys


def _convert(path: str, key: str, value, action, via_option: bool):
    """A run-file value converted and checked as argparse would check the flag."""
    where = f"{path}: {key}"
    if isinstance(value, bool) and action.choices is not None and {"on", "off"} <= set(action.choices):
        return "on" if value else "off"  # `liger: true` for --liger {auto,on,off}
    if action.nargs == 0:  # store_true / store_false
        if not isinstance(value, bool):
            raise RunFileError(f"{where}: {value!r} is not true or false")
        return (action.const if value else not action.const) if via_option else value
    if value is None:
        return None
    if isinstance(value, (list, dict)) or (isinstance(value, bool) and action.type in (int, float)):
        raise RunFileError(f"{where}: {value!r} is not a single value")
    if action.type is not None:
        try:
            if action.type is int and isinstance(value, float) and value.is_integer():
                value = int(value)
            value = action.type(value) if action.type is not int or not isinstance(value, str) else int(value, 10)
        except (TypeError, ValueError):
            kind = {int: "an integer", float: "a number"}.get(action.type, "a value")
            raise RunFileError(f"{where}: {value!r} is not {kind}") from None
    elif not isinstance(value, str):
        value = str(value)
    if action.choices is not None and value not in action.choices:
        raise RunFileError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


def load_run_file(path: str | os.PathLike, parser: argparse.ArgumentParser) -> dict:
    """The options in a YAML run file, by argparse destination, converted and checked like flags.

    Keys are the long flag names of ``parser`` with dashes or underscores (``lr``, ``num-epochs``,
    ``save_total_limit``, ``no-final-save: true`` or ``final-save: false``). Relative paths in values
    are taken from the current folder, as on the command line.

    Raises:
        RunFileError: unreadable file, not a mapping, an unknown key (with a did-you-mean) or a bad value.
    """
    import difflib
    import yaml
    p = Path(path)
    if not p.is_file():
        raise RunFileError(f"run file {path}: not found ({p.resolve()})")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise RunFileError(f"run file {path}: not valid YAML ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RunFileError(f"run file {path}: must be a mapping of option: value, got a {type(data).__name__}")
    keys = _run_file_actions(parser)
    longs = sorted({k for k in keys if "_" not in k})
    out = {}
    for key, value in data.items():
        key = str(key)
        name = key[2:] if key.startswith("--") else key
        if name not in keys and name == "config":
            raise RunFileError(f"run file {path}: key 'config' (your own DeepSpeed JSON) is an option of "
                               "`cookbook launch`; run the file with `cookbook launch`, or drop the key to let "
                               "`cookbook train` build the config")
        if name not in keys:
            guess = FOREIGN_KEYS.get(name) or FOREIGN_KEYS.get(name.replace("-", "_"))
            if not guess:  # a typo of another tool's name (learnig_rate): the option it stands for
                near = difflib.get_close_matches(name.replace("-", "_"), list(FOREIGN_KEYS), n=1, cutoff=0.8)
                guess = FOREIGN_KEYS[near[0]] if near else None
            guess = [guess] if guess else difflib.get_close_matches(name.replace("_", "-"), longs, n=1, cutoff=0.6)
            hint = f" (did you mean '{guess[0]}'?)" if guess else ""
            raise RunFileError(f"run file {path}: unknown key '{key}'{hint}. Keys are the long option names of "
                               f"`cookbook {parser.prog.split()[-1]} --help`, with dashes or underscores")
        action, via_option = keys[name]
        out[action.dest] = _convert(str(path), key, value, action, via_option)
    return out


def write_resolved_options(path: Path, plan: Plan, parsed, *, run_file: str | None = None, config=None,
                           launch_options: dict | None = None, scheduler: str | None = None) -> Path:
    """Write every option of a run, resolved (lr, steps, warm-up filled in), as a run file.

    ``scheduler``: the description of the DeepSpeed config's own ``scheduler`` block (what runs, see
    :func:`cookbook.dsconfig.describe_scheduler`); it is written in the header, and ``lr-scheduler`` is left
    out where it cannot name that block."""
    import yaml
    from .dsconfig import SCHEDULER_KINDS
    values: dict = {}
    for dest, value in vars(parsed).items():
        if dest in _NOT_IN_RUN_FILE or (dest == "packing" and value is None):  # None: the default decides
            continue
        if dest == "lr_scheduler" and scheduler and SCHEDULER_KINDS.get(scheduler.split(":")[0]) != value:
            continue
        values[dest.replace("_", "-")] = value
    values.update({"num-processes": plan.num_gpus, "num-machines": plan.num_machines,
                   "gpu-memory-gib": plan.gpu_memory_gib, "host-memory-gib": plan.host_memory_gib})
    for k, v in (launch_options or {}).items():
        values[k.replace("_", "-")] = v
    command = "cookbook train"
    if config is not None:
        values["config"] = str(config) if not isinstance(config, dict) else None
        command = "cookbook launch"
    header = ["# Every option of this run, resolved: the learning rate, the steps (from --num-epochs) and the",
              "# warm-up (from --warmup-ratio) are filled in. Run it again with:",
              f"#   {command} {path}   (add --resume to continue it, or give another --output-dir)",
              f"# Options from: {'the run file ' + str(run_file) + ' and the command line' if run_file else 'the command line / launch()'}."]
    if isinstance(config, dict):
        header.append("# The DeepSpeed config was a dict passed from Python: it is ds_config.json in this folder.")
    if scheduler:
        header.append(f"# Learning-rate schedule: the DeepSpeed config's scheduler block, which DeepSpeed runs: {scheduler}")
    text = "\n".join(header) + "\n" + yaml.safe_dump(values, sort_keys=False, allow_unicode=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _explicit_dests(argv: list[str], with_config: bool) -> set:
    """Destinations given explicitly on the command line (they win over a run file)."""
    p = argparse.ArgumentParser(add_help=False)
    _add_launch_arguments(p, with_config=with_config)
    p.add_argument("run_file", nargs="?")
    for a in p._actions:
        a.default = argparse.SUPPRESS
    ns, _ = p.parse_known_args(argv)
    return set(vars(ns))


def _interrupt_on_termination() -> None:
    """In the CLI, SIGTERM and SIGHUP (a closed terminal) stop the run as Ctrl-C does; a signal already
    ignored (``nohup`` ignores SIGHUP) stays ignored."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, handler)


def _cli_interruptible(args) -> int:
    """``cookbook train``/``launch``: a Ctrl-C anywhere ends in one line, never a traceback."""
    _interrupt_on_termination()
    try:
        return _cli(args)
    except KeyboardInterrupt:
        print(f"interrupted; `cookbook status {args.output_dir}` shows the step reached and the checkpoint "
              "`--resume` continues from", file=sys.stderr, flush=True)
        return 130


def _merge_run_file(args, with_config: bool) -> bool:
    """Set the run file's options on ``args`` where the command line did not give them (typed flags win);
    what the file sets counts as typed (``args._typed``). False (after printing the error) for a bad file."""
    probe = argparse.ArgumentParser(prog=f"cookbook {args.command}" if getattr(args, "command", None) else "cookbook")
    _add_launch_arguments(probe, with_config=with_config)
    try:
        from_file = load_run_file(args.run_file, probe)
    except RunFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    argv = getattr(args, "_argv", None)
    explicit = _explicit_dests(argv[1:], with_config) if argv is not None else set()
    for dest, value in from_file.items():
        if dest not in explicit:
            setattr(args, dest, value)
    # what the run file sets was chosen by the user, as much as a typed flag
    args._typed = set(getattr(args, "_typed", None) or ()) | set(from_file)
    if "lr" in from_file and "lr" not in explicit:
        args._lr_source = f"run file {args.run_file}"
    return True


def _default_world_size(args, on_gpu: bool) -> None:
    """``--num-processes`` left out: this machine's GPUs on each machine, or 2 CPU ranks for a rehearsal (said on
    the console; under ``--json`` on stderr, so stdout stays one JSON document)."""
    from .hardware import default_num_processes, gpu_count
    gpus = gpu_count() if on_gpu else 0
    args.num_processes = default_num_processes(args.num_machines, gpus=gpus)
    if not getattr(args, "quiet", False):
        print(f"[plan] world size {args.num_processes} (default: "
              + (f"this machine's {gpus} GPU(s)" + (f" × {args.num_machines} machines" if args.num_machines > 1 else "")
                 if gpus else "2 CPU ranks, the rehearsal") + "; --num-processes to choose)",
              file=sys.stderr if getattr(args, "json", False) else sys.stdout, flush=True)


def _plan_from_args(args, on_gpu: bool) -> tuple[Plan, list[str]]:
    """The :class:`Plan` of the flags, with the defaults chosen for precision and gradient checkpointing and the
    console notes that say so (printed by the caller once the plan is known to be valid).

    Raises:
        PlanError: a plan field out of range."""
    rehearsal = is_rehearsal_model(args.model)
    precision = args.precision or (default_precision() if on_gpu or rehearsal else "bf16")
    gc = args.gradient_checkpointing
    if gc is None:
        gc = default_gradient_checkpointing(args.model, on_gpu)
    notes = []
    if not args.json:
        if args.precision is None:
            notes.append(f"[precision] {precision} (default: " + (
                "this machine's GPU" if on_gpu else "the CPU rehearsal of a tiny model" if rehearsal else
                f"{args.model} is a real model, planned for a GPU box; bf16 needs Ampere or newer") + ")")
        if args.gradient_checkpointing is None:
            notes.append(f"[model] gradient checkpointing {'on' if gc else 'off'} (default: " + (
                "the CPU rehearsal of a tiny model gains nothing from recomputation; --gradient-checkpointing to "
                "turn it on" if not gc else f"a run of {args.model} {'on this GPU box' if on_gpu else 'is planned for GPUs'}: "
                "~1/3 more compute, far less activation memory; --no-gradient-checkpointing to turn it off") + ")")
    plan = Plan(model=args.model, num_gpus=args.num_processes, gpu_memory_gib=args.gpu_memory_gib,
                host_memory_gib=args.host_memory_gib, seq_len=args.seq_len, micro_batch=args.micro_batch,
                grad_accum=args.grad_accum, precision=precision, zero_stage=args.zero_stage,
                offload_optimizer=args.offload_optimizer, offload_param=args.offload_param,
                gradient_checkpointing=gc, nvme_path=args.nvme_path, num_machines=args.num_machines,
                liger=_liger_flag(getattr(args, "liger", "auto")))
    return plan, notes


def _liger_flag(value) -> bool:
    """The plan's ``liger`` for a ``--liger`` value before ``auto`` is decided (:meth:`_Launch.resolve_liger`):
    ``on``/True (a run file's ``liger: true``) is on; ``off``, False and ``auto`` are off until then."""
    return value is True or value == "on"


def _print_result(res: RunResult, args) -> int:
    """The result on the console (or as one JSON document with ``--json``); the exit code."""
    if res.status in ("interrupted", "stopped") and not args.json:
        print(res.message, file=sys.stderr, flush=True)  # one line: "interrupted at step N; --resume ..."
        return 130 if res.status == "interrupted" else 143
    if args.json:
        print(json.dumps({"status": res.status, "message": res.message, "run_dir": res.run_dir,
                          "command": res.command, "duration_s": res.duration_s, "summary": res.summary,
                          "details": {k: v for k, v in res.details.items()}}, indent=1, default=str))
    else:
        for f in res.findings:  # what the linter warns about but does not refuse (e.g. fp16 kept on a bf16 GPU)
            if f.get("severity") == "warning":
                print(f"warning: {f['path']}: {f['message']} Fix: {f['fix']}")
        if res.command:
            print("command:\n" + res.command)
        print(f"{res.status}: {res.message}")
        if res.details.get("traceback") and res.status == "failed":
            print(res.details["traceback"], file=sys.stderr)
        if res.log_paths:
            print("logs: " + ", ".join(f"{k}={v}" for k, v in res.log_paths.items()))
    return {"ok": 0, "dry_run": 0, "config_error": 2, "interrupted": 130, "stopped": 143}.get(res.status, 1)


def _cli(args) -> int:
    """``cookbook train`` / ``cookbook launch``: the run file merged under the flags, the plan and the run options
    (:func:`cookbook.options.from_args`) built from them, :func:`launch`, the result printed."""
    with_config = hasattr(args, "config")
    if getattr(args, "run_file", None) and not _merge_run_file(args, with_config):
        return 2
    on_gpu = on_gpu_machine()
    if args.num_processes is None:
        _default_world_size(args, on_gpu)
    try:
        plan, notes = _plan_from_args(args, on_gpu)
    except PlanError as exc:
        print(f"error: {user_message(exc, args)}", file=sys.stderr)
        return 2
    from .models import ModelNotFoundError, resolve_model_path
    try:  # a model that cannot be found is the error, before any note about its defaults (--json: the result says it)
        if not args.json:
            resolve_model_path(args.model)
    except ModelNotFoundError as exc:
        print(f"error: --model {args.model}: {exc}", file=sys.stderr)
        return 2
    for line in notes:  # the defaults chosen, once the plan is known to be valid (not before its error)
        print(line, flush=True)
    # the options typed (a config value may override only a default) and the flags to name them by
    stated = {DEST_FIELDS.get(d, d) for d in (getattr(args, "_typed", None) or {})}
    origin = Origin(stated=stated, names=getattr(args, "_names", None), run_file=getattr(args, "run_file", None),
                    lr_source=getattr(args, "_lr_source", None) or ("--lr" if args.lr is not None else None),
                    auto={"liger"} if getattr(args, "liger", "auto") in ("auto", None) else ())
    import contextlib
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        res = launch(plan, args.output_dir, from_args(args), config=getattr(args, "config", None),
                     dry_run=getattr(args, "dry_run", False), progress=args.progress, quiet=args.json, origin=origin)
    return _print_result(res, args)


def register(subparsers) -> None:
    run_file_help = ("a YAML run file: every option as `long-option-name: value` (dashes or underscores); "
                     "options given on the command line win; unknown keys are an error")
    train = subparsers.add_parser(
        "train", help="fine-tune with Accelerate + DeepSpeed ZeRO (config built from the options or a run file)",
        description="Fine-tune a model with Accelerate + DeepSpeed ZeRO; the DeepSpeed config is built from the "
                    "options. `cookbook train RUN.yaml` reads every option from a run file (examples: "
                    "notebooks/qwen14b-8x4090.yaml, notebooks/llama7b-1x4090.yaml). Without options: a CPU rehearsal "
                    "of tiny-qwen2 on 2 ranks. A real model needs --lr and --num-epochs or --max-steps.")
    train.add_argument("run_file", nargs="?", default=None, help=run_file_help)
    _add_launch_arguments(train, with_config=False)
    train.set_defaults(func=_cli_interruptible)
    lp = subparsers.add_parser("launch", help="like train, with your own DeepSpeed config (--config) or --dry-run",
                               description="Launch a run with your own DeepSpeed config (linted first), or write the "
                                           "run folder and print the command (--dry-run). Reads a run file like train.")
    lp.add_argument("run_file", nargs="?", default=None, help=run_file_help)
    _add_launch_arguments(lp, with_config=True)
    lp.set_defaults(func=_cli_interruptible)
