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
   ``config_error``, ``failed`` (or ``dry_run``) with a message in plain words.

Accelerate refuses ``mixed_precision`` and ``zero3_save_16bit_model`` among the DeepSpeed
fields of its config file when ``deepspeed_config_file`` is set (``DeepSpeedPlugin.
_deepspeed_config_checks``, accelerate/utils/dataclasses.py): precision and 16-bit saving live in
the DeepSpeed JSON (``bf16``/``fp16``, ``stage3_gather_16bit_weights_on_model_save``). The YAML
still states ``mixed_precision`` at its top level, and the command passes ``--mixed_precision`` and
``--zero3_save_16bit_model`` explicitly, which Accelerate accepts and which keep the three in step.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .plan import DEST_FIELDS, Plan, PlanError, user_message
from .train import ERROR_PREFIX, STEP_PREFIX, TrainInputError, add_train_arguments, validate_inputs

STATUSES = ("ok", "gpu_oom", "host_oom", "hang", "config_error", "failed", "dry_run")
GIB = 2 ** 30

#: Exceptions that follow another rank's failure (peers losing their connection, the launcher's
#: own report); the first *real* traceback is the one that is not one of these.
SECONDARY = re.compile(r"ChildFailedError|SignalException|Connection closed by peer|Connection reset by peer|"
                       r"DistBackendError|ProcessGroupGloo|NCCL communicator was aborted|KeyboardInterrupt|"
                       r"Broken pipe|connection refused|Socket Timeout|recvBytes|SIGTERM", re.I)


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

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def metrics_frame(self):
        import pandas as pd
        return pd.DataFrame(self.metrics)

    def to_frame(self):
        """One row per fact of the result (status, message, duration, throughput, peaks, loss)."""
        import pandas as pd
        s = self.summary or {}
        rows = [("status", self.status), ("message", self.message), ("duration_s", round(self.duration_s, 1)),
                ("world_size", s.get("world_size")), ("steps", s.get("steps")),
                ("first_loss", s.get("first_loss")), ("last_loss", s.get("last_loss")),
                ("tokens_per_s", s.get("tokens_per_s")), ("peak_gpu_allocated_gib", s.get("peak_gpu_allocated_gib")),
                ("peak_gpu_reserved_gib", s.get("peak_gpu_reserved_gib")), ("host_peak_gib", s.get("host_peak_gib")),
                ("run_dir", self.run_dir)]
        rows += [(k, v) for k, v in self.details.items() if k != "traceback"]
        return pd.DataFrame(rows, columns=["field", "value"]).set_index("field")

    def _repr_html_(self) -> str:
        import html
        tb = self.details.get("traceback")
        extra = f"<pre>{html.escape(tb)}</pre>" if tb else ""
        return (f"<b>{html.escape(self.status)}</b>: {html.escape(self.message)}"
                + self.to_frame().to_html() + extra)

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"

    def raise_for_status(self) -> "RunResult":
        if self.status not in ("ok", "dry_run"):
            raise LaunchError(str(self))
        return self


# ----------------------------------------------------------------------------------------------
# run folder and commands

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


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


def on_gpu_machine() -> bool:
    """Whether this machine has an NVIDIA GPU (via NVML; the kernel's process never touches CUDA)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no library: no GPU
        return False


def default_precision() -> str:
    """bf16 on Ampere or newer GPUs (compute capability >= 8.0), fp16 on older GPUs, fp32 on CPU."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return "fp32"
            major, _ = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(0))
            return "bf16" if major >= 8 else "fp16"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        return "fp32"


def extensions_dir() -> Path:
    """Where DeepSpeed's JIT-built ops go: one folder per Python environment.

    torch's default (``~/.cache/torch_extensions/py311_cpu``) is shared by every virtual environment of
    the same Python; two environments with different include paths then rebuild the ops (CPU Adam,
    fused Adam, the shared-memory comm op: minutes each) every time they alternate."""
    import hashlib
    tag = hashlib.sha1(sys.prefix.encode()).hexdigest()[:10]
    return Path.home() / ".cache" / "torch_extensions" / f"cookbook-{tag}"


def clear_stale_build_locks(max_age_s: float = 300.0) -> list[str]:
    """Remove JIT-build lock files older than ``max_age_s`` from torch's extensions folder.

    DeepSpeed builds its ops (CPU Adam, the CPU backend's shared-memory comm op) with
    ``torch.utils.cpp_extension.load``, which guards each build folder with an empty ``lock`` file
    (``torch/utils/file_baton.py``) and makes every other process wait until it disappears. A rank
    killed while holding it leaves it behind and every later run then waits forever at startup.
    A build takes well under ``max_age_s``; an older lock is stale. Returns the paths removed.
    """
    roots = {Path(os.environ.get("TORCH_EXTENSIONS_DIR") or extensions_dir()), Path.home() / ".cache" / "torch_extensions"}
    removed = []
    for lock in [l for root in roots if root.is_dir() for l in (*root.glob("*/lock"), *root.glob("*/*/lock"))]:
        try:
            if time.time() - lock.stat().st_mtime > max_age_s:
                lock.unlink()
                removed.append(str(lock))
        except OSError:
            pass
    return removed


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


def classify(run_dir: Path, returncode: int | None, hung: bool, hang_timeout_s: float,
             estimate: dict | None) -> tuple[str, str, dict]:
    """(status, message, details) of a finished launch, from its logs and summary."""
    logs = run_dir / "logs"
    rank_logs = sorted(logs.glob("rank*.log"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    launcher = _tail(logs / "launcher.log")
    texts = {p.stem: _tail(p) for p in rank_logs}
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    host_est = (estimate or {}).get("host_gib", {}).get("total")
    gpu_est = (estimate or {}).get("gpu_gib", {}).get("total")

    if hung:
        return "hang", (f"no progress from rank 0 for {hang_timeout_s:.0f} s: the watchdog stopped the whole process "
                        "group. Common causes: NCCL peer-to-peer on consumer GPUs (try NCCL_P2P_DISABLE=1), a rank "
                        "that died silently, or a slow first step (raise hang_timeout_s)."), {"hang_timeout_s": hang_timeout_s}
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
                   + ". Move to the next ZeRO step (stage 3, then optimizer and parameter offload), lower the "
                     "micro batch or turn on gradient checkpointing.")
            return "gpu_oom", msg, {"rank": rank, "tried_to_allocate_gib": gib, "estimate_gpu_gib": gpu_est,
                                    "traceback": tb}
    killed = re.search(r"rank\s*:\s*(\d+)[^\n]*\n(?:[^\n]*\n){0,2}?[^\n]*exitcode\s*:\s*-9", launcher)
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
        return "ok", (f"{summary['steps']} steps on {ranks}: loss {summary['first_loss']:.3f} → "
                      f"{summary['last_loss']:.3f}, {summary['tokens_per_s']:.0f} tokens/s"), {}
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
           emulate_gpu_memory_gib: float | None) -> tuple[list, dict | None, list[str]]:
    """Lint findings, the estimate, and reasons to refuse the launch."""
    from .lint import lint
    refusals = []
    # mode "deepspeed": cookbook.train hands Accelerate no dataloader, so DeepSpeed gets the config as it
    # stands; a user's config arrives here already resolved (every "auto" filled from the plan). machine:
    # what this machine decides (fp16 without a GPU, NVMe without libaio, this GPU's precision rules)
    findings = lint(ds_config, world_size=plan.world_size, mode="deepspeed", model=str(plan.model), plan=plan,
                    machine=True)
    findings = [f.to_dict() for f in findings]
    est = None
    try:
        from .memory import estimate
        import psutil
        host = plan.host_memory_gib or psutil.virtual_memory().total / GIB
        eplan = plan.replace(host_memory_gib=host,
                             gpu_memory_gib=emulate_gpu_memory_gib or plan.gpu_memory_gib)
        e = estimate(eplan, bf16_states=bf16_states, device="cuda" if on_gpu else "cpu", ds_config=ds_config)
        est = e.to_dict()
        if on_gpu and not e.fits_gpu:
            refusals.append(f"the estimate needs {e.gpu_gib['total']:.1f} GiB per GPU but a GPU has "
                            f"{eplan.gpu_memory_gib:.1f} GiB")
        if e.fits_host is False:
            refusals.append(f"the estimate needs {e.host_gib['total']:.1f} GiB of host RAM per machine but this "
                            f"machine has {host:.1f} GiB")
    except Exception as exc:  # noqa: BLE001 - an estimator problem must not block a launch
        est = {"error": f"{type(exc).__name__}: {exc}"}
    return findings, est, refusals


def stated_fields(plan: Plan, *, lr: float = 3e-3, max_steps: int = 40, warmup_steps: int | None = None) -> set[str]:
    """The plan fields and training options a Python caller of :func:`launch` evidently set: those that differ
    from the defaults of :class:`Plan` and of :func:`launch`. (A value set equal to its default cannot be told
    apart; pass ``launch(stated=...)`` to be exact.)"""
    import inspect
    base = Plan()
    out = {k for k, v in plan.to_dict().items() if v != getattr(base, k)}
    defaults = inspect.signature(launch).parameters
    out |= {k for k, v in (("lr", lr), ("max_steps", max_steps), ("warmup_steps", warmup_steps))
            if v != defaults[k].default}
    return out


def launch(plan: Plan, output_dir: str | os.PathLike, *, config: dict | str | os.PathLike | None = None,
           max_steps: int = 40, lr: float = 3e-3, warmup_steps: int | None = None, save_steps: int = 0,
           resume: bool = False, dataset: str | None = None, tokenizer: str | None = None, seed: int = 1234,
           bf16_states: bool = False, emulate_gpu_memory_gib: float | None = None, verify_save: str = "full",
           final_save: bool = True, force: bool = False, dry_run: bool = False, hang_timeout_s: float = 900.0,
           env: dict | None = None, progress: bool = True, raise_on_error: bool = False,
           startup_timeout_s: float | None = None, extra_args: tuple = (), main_process_ip: str = "127.0.0.1", main_process_port: int | None = None,
           trust_remote_code: bool = False, stated=None, names: dict | None = None) -> RunResult:
    """Launch ``plan`` with Accelerate + DeepSpeed in a subprocess and say what happened.

    Args:
        plan: the run (model, world size ``num_gpus``, ZeRO stage, offload, batch shape, precision).
            ``plan.num_machines > 1`` runs every machine's command on this host (a rehearsal of a
            multi-machine launch over 127.0.0.1); on real machines use :func:`machine_commands`.
        output_dir: the run folder (configs, logs, metrics, summary, checkpoints, final model).
        config: the user's DeepSpeed config (dict or JSON path); None builds one with
            :func:`cookbook.dsconfig.build_config` (target ``accelerate``). Its ``"auto"`` values are filled
            from the plan and the training options as the HF Trainer / Accelerate fill them
            (:func:`cookbook.dsconfig.resolve_config`; the fill table is printed and kept in
            ``details["filled"]``), its own values decide the ZeRO stage, offload, batch shape and
            precision the caller did not state, and a value that disagrees with a stated one is a
            ``config_error`` naming both. The run folder keeps ``ds_config.original.json`` (as given) beside
            ``ds_config.json`` (resolved: what DeepSpeed reads) and ``ds_config.filled.json`` (the table).
            Then the resolved config is linted like any other.
        max_steps, lr, warmup_steps, save_steps, resume, dataset, tokenizer, seed, bf16_states,
            verify_save, final_save: passed to the training entry (see ``cookbook train --help``).
        emulate_gpu_memory_gib: cap each rank's GPU memory (``torch.cuda.set_per_process_memory_fraction``)
            so a larger GPU behaves like a smaller card; on a CPU-only machine, the budget for the
            model states each rank holds on its "device" (see :mod:`cookbook.train`).
        force: launch even when the estimate says it will not fit (lint errors always stop it).
        dry_run: write the run folder and return the command without running it.
        hang_timeout_s: seconds without any output from rank 0 before the watchdog stops the run.
        startup_timeout_s: the same limit before rank 0's first training step (imports, JIT op builds,
            model initialisation); default ``max(hang_timeout_s, 600)``: a 7B model takes minutes.
        env: extra environment variables for the ranks (they win over recommendations).
        progress: show a tqdm bar of steps with loss and tokens/s.
        raise_on_error: raise :class:`LaunchError` unless the status is ``ok``/``dry_run``.
        stated: the plan fields and options (``lr``, ``max_steps``, ``warmup_steps``) the caller set on purpose,
            which a config value may not override; default: :func:`stated_fields` (those that differ from the
            defaults of :class:`Plan` and of this function). ``cookbook launch`` passes the options typed.
        names: how messages name each field (``cookbook launch`` passes its flags); default: the Python names.

    Returns:
        :class:`RunResult`. Nothing raises into the notebook unless ``raise_on_error``.
    """
    t_start = time.time()
    run_dir = Path(output_dir).resolve()
    on_gpu = on_gpu_machine()
    opts = dict(max_steps=max_steps, lr=lr, warmup_steps=warmup_steps, save_steps=save_steps, resume=resume,
                dataset=dataset, tokenizer=tokenizer, seed=seed, bf16_states=bf16_states,
                emulate_gpu_memory_gib=emulate_gpu_memory_gib, verify_save=verify_save,
                no_final_save=not final_save, trust_remote_code=trust_remote_code)

    resolution = None

    def result(status, message, **kw) -> RunResult:
        if resolution is not None and resolution.rows:
            kw["details"] = dict(kw.get("details") or {}, filled=[
                {"path": r.path, "value": r.value, "from": r.source, "how": r.how} for r in resolution.rows])
        r = RunResult(status=status, message=message, run_dir=str(run_dir), duration_s=time.time() - t_start, **kw)
        if raise_on_error:
            r.raise_for_status()
        return r

    # 1. the user's config: every "auto" filled from the plan as the HF Trainer / Accelerate fill it; its own
    #    values decide what the user did not state, and disagree with what they did (an error naming both)
    ds_config = resolution = None
    if config is not None:
        from .lint import lint
        if stated is None:
            stated = stated_fields(plan, lr=lr, max_steps=max_steps, warmup_steps=warmup_steps)
        report = lint(config if isinstance(config, dict) else str(config), mode="launch", plan=plan, stated=stated,
                      names=names, lr=lr, max_steps=max_steps, warmup_steps=warmup_steps,
                      will_save_hf_model=final_save)
        name = Path(config).name if not isinstance(config, dict) else "config"
        if not report.readable:
            return result("config_error", f"{name}: cannot be used: "
                          + "; ".join(f"{f.message} Fix: {f.fix}" for f in report if f.severity == "error"),
                          command="", findings=[f.to_dict() for f in report])
        resolution = report.resolved
        if not resolution.ok:
            return result("config_error", f"{name} cannot be filled for this run; nothing was launched:\n- "
                          + "\n- ".join(f"{p.path}: {p.message} Fix: {p.fix}" for p in resolution.problems),
                          command="", findings=[f.to_dict() for f in report])
        if resolution.rows:
            print(str(resolution), flush=True)
        ds_config, plan = resolution.config, resolution.plan
        kept_lr = next((r.value for r in resolution.rows if r.path == "optimizer.params.lr" and r.how == "kept"), None)
        if kept_lr is not None:  # the config's learning rate decides the run: say so to the training entry too
            opts["lr"] = kept_lr
    targs = train_argv(plan, run_dir, **opts) + list(extra_args)

    # 2. the training inputs (options, model, tokenizer, data, output folder), before anything else
    try:
        parsed = argparse.ArgumentParser()
        add_train_arguments(parsed)
        validate_inputs(parsed.parse_args(targs), plan.world_size)
    except TrainInputError as exc:
        return result("config_error", str(exc), command="")
    except SystemExit:
        return result("config_error", f"invalid training options: {shlex.join(targs)}", command="")

    # the config built from the plan when the user gave none
    if ds_config is None:
        from .dsconfig import ConfigError, build_config
        warm = warmup_steps if warmup_steps is not None else max(1, max_steps // 20)
        try:
            ds_config = build_config(plan, "accelerate", lr=lr, warmup_steps=warm, total_steps=max_steps,
                                     bf16_states=bf16_states)
        except ConfigError as exc:
            return result("config_error", str(exc), command="")

    # 3. pre-launch guard: lint errors and the estimate
    findings, est, refusals = _guard(plan, ds_config, on_gpu=on_gpu,
                                     bf16_states=bf16_states, emulate_gpu_memory_gib=emulate_gpu_memory_gib)
    lint_errors = [f for f in findings if f["severity"] == "error"]

    folder = prepare_run(plan, ds_config, run_dir, targs, main_process_ip=main_process_ip,
                         main_process_port=main_process_port)
    command = folder.command_text
    if resolution is not None:  # the user's file beside the resolved ds_config.json that DeepSpeed reads
        (run_dir / "ds_config.original.json").write_text(json.dumps(resolution.original, indent=2) + "\n")
        fill = {"filled": [{"path": r.path, "value": r.value, "from": r.source, "how": r.how} for r in resolution.rows]}
        (run_dir / "ds_config.filled.json").write_text(json.dumps(fill, indent=2) + "\n")
    if lint_errors:
        return result("config_error", "the DeepSpeed config has errors; nothing was launched:\n- "
                      + "\n- ".join(f"{f['path']}: {f['message']} Fix: {f['fix']}" for f in lint_errors),
                      command=command, findings=findings, estimate=est)
    if refusals and not force and not dry_run:
        return result("config_error", "the estimate says this will not fit, so nothing was launched ("
                      + "; ".join(refusals) + "). Pick a variant that fits (`cookbook estimate --sweep`) or pass "
                      "--force (force=True from Python) to try anyway.", command=command, findings=findings, estimate=est)
    if dry_run:
        note = (" Note, for this machine: " + "; ".join(refusals)) if refusals else ""
        return result("dry_run", "run folder written; the command was not run." + note, command=command,
                      findings=findings, estimate=est)

    # 4. run
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("*.log"):
        old.unlink()
    child, added = child_env(plan, env, log_dir=log_dir)
    stale = clear_stale_build_locks()
    startup = startup_timeout_s if startup_timeout_s is not None else max(hang_timeout_s, 600.0)
    returncode, hung = _run_and_watch(folder.commands, child, log_dir, hang_timeout_s, progress, max_steps, startup)
    status, message, details = classify(run_dir, returncode, hung, hang_timeout_s, est)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    metrics_path = run_dir / "metrics.jsonl"
    metrics = [json.loads(l) for l in metrics_path.read_text().splitlines() if l.strip()] if metrics_path.is_file() else []
    logs = {"launcher": str(log_dir / "launcher.log")}
    logs.update({p.stem: str(p) for p in sorted(log_dir.glob("rank*.log"))})
    details = dict(details, env_added=added)
    if stale:
        details["stale_build_locks_removed"] = stale
    return result(status, message, command=command, returncode=returncode, summary=summary, metrics=metrics,
                  log_paths=logs, findings=findings, estimate=est, details=details)


def _run_and_watch(commands, env, log_dir: Path, hang_timeout_s: float, progress: bool,
                   max_steps: int, startup_timeout_s: float) -> tuple[int | None, bool]:
    """Run the launcher(s) in new process groups; stream rank 0's steps; stop everything on a hang."""
    bar = None
    if progress:
        from tqdm.std import tqdm  # text, not a widget: the executed notebook keeps the final line
        bar = tqdm(total=max_steps, desc="training", unit="step", file=sys.stderr, mininterval=1.0)
    launcher_log = open(log_dir / "launcher.log", "ab")
    # run with this interpreter (the displayed command says `accelerate launch`, the same entry point)
    commands = [[sys.executable, "-m", "accelerate.commands.launch", *c[2:]] if c[:2] == ["accelerate", "launch"]
                else c for c in commands]
    procs = [subprocess.Popen(c, env=env, stdout=launcher_log, stderr=subprocess.STDOUT, start_new_session=True)
             for c in commands]
    rank0 = log_dir / "rank0.log"
    offset, last_activity, hung, buffer, stepped = 0, time.time(), False, "", False
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(0.5)
            if rank0.is_file():
                size = rank0.stat().st_size
                if size > offset:
                    with open(rank0, "rb") as f:
                        f.seek(offset)
                        chunk = f.read(size - offset).decode("utf-8", "replace")
                    offset = size
                    last_activity = time.time()
                    buffer += chunk
                    *lines, buffer = buffer.split("\n")
                    for line in lines:
                        if line.startswith(STEP_PREFIX):
                            stepped = True
                        if line.startswith(STEP_PREFIX) and bar is not None:
                            row = json.loads(line[len(STEP_PREFIX):])
                            bar.n = row["step"]
                            bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s']:.0f}")
                            bar.refresh()
            # before the first step, initialisation (model build, JIT op builds, process groups) may
            # take minutes in silence; after it, a silent rank 0 means a hang
            limit = hang_timeout_s if stepped else startup_timeout_s
            if time.time() - last_activity > limit:
                hung = True
                _stop(procs)
                break
        # one rank failing makes the others wait in a collective until torchrun kills them; a
        # launcher of several machines may leave the others waiting for the failed one
        if not hung and any(p.returncode not in (0, None) for p in procs):
            _stop(procs, grace_s=30)
    except KeyboardInterrupt:
        _stop(procs)
        raise
    finally:
        if bar is not None:
            bar.close()
        launcher_log.close()
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0), hung


def _stop(procs, grace_s: float = 10.0) -> None:
    """SIGTERM each process group, then SIGKILL what is left after ``grace_s``."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ----------------------------------------------------------------------------------------------
# CLI: cookbook train / cookbook launch

def _add_launch_arguments(p: argparse.ArgumentParser, *, with_config: bool) -> None:
    add_train_arguments(p)
    p.add_argument("--num-processes", "--gpus", dest="num_processes", type=int, default=2,
                   help="world size: ranks over all machines (GPUs, or CPU processes in a rehearsal)")
    p.add_argument("--num-machines", type=int, default=1, help="machines (each runs num_processes/num_machines ranks)")
    p.add_argument("--main-process-ip", default="127.0.0.1", help="address of machine 0")
    p.add_argument("--main-process-port", type=int, default=None, help="port on machine 0 (default: a free one)")
    p.add_argument("--gpu-memory-gib", type=float, default=24.0, help="GPU memory for the pre-launch estimate")
    p.add_argument("--host-memory-gib", type=float, default=None, help="host RAM for the estimate (default: this machine's)")
    p.add_argument("--force", action="store_true", help="launch even when the estimate says it will not fit")
    p.add_argument("--hang-timeout", type=float, default=900.0, help="seconds without progress before the watchdog stops the run")
    p.add_argument("--startup-timeout", type=float, default=None, help="the same before the first output (default: max(hang timeout, 600))")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    if with_config:
        p.add_argument("--config", default=None, help="your own DeepSpeed JSON (linted before launch)")
        p.add_argument("--dry-run", action="store_true", help="write the run folder and print the command only")


def _cli(args) -> int:
    precision = args.precision or default_precision()
    try:
        gc = args.gradient_checkpointing if args.gradient_checkpointing is not None else on_gpu_machine()
        plan = Plan(model=args.model, num_gpus=args.num_processes, gpu_memory_gib=args.gpu_memory_gib,
                    host_memory_gib=args.host_memory_gib, seq_len=args.seq_len, micro_batch=args.micro_batch,
                    grad_accum=args.grad_accum, precision=precision, zero_stage=args.zero_stage,
                    offload_optimizer=args.offload_optimizer, offload_param=args.offload_param,
                    gradient_checkpointing=gc, nvme_path=args.nvme_path, num_machines=args.num_machines)
    except PlanError as exc:
        print(f"error: {user_message(exc, args)}", file=sys.stderr)
        return 2
    # the options typed (a config value may override only a default) and the flags to name them by
    stated = {DEST_FIELDS.get(d, d) for d in (getattr(args, "_typed", None) or {})}
    import contextlib
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        res = launch(plan, args.output_dir, config=getattr(args, "config", None), max_steps=args.max_steps, lr=args.lr,
                     warmup_steps=args.warmup_steps, save_steps=args.save_steps, resume=args.resume,
                     dataset=args.dataset, tokenizer=args.tokenizer, seed=args.seed, bf16_states=args.bf16_states,
                     emulate_gpu_memory_gib=args.emulate_gpu_memory_gib, verify_save=args.verify_save,
                     final_save=args.final_save, force=args.force, dry_run=getattr(args, "dry_run", False),
                     hang_timeout_s=args.hang_timeout, startup_timeout_s=args.startup_timeout, progress=args.progress, main_process_ip=args.main_process_ip,
                     main_process_port=args.main_process_port, trust_remote_code=args.trust_remote_code,
                     stated=stated, names=getattr(args, "_names", None))
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
    return {"ok": 0, "dry_run": 0, "config_error": 2}.get(res.status, 1)


def register(subparsers) -> None:
    train = subparsers.add_parser("train", help="fine-tune with Accelerate + DeepSpeed ZeRO (config built from the options)",
                                  description="Fine-tune a model with Accelerate + DeepSpeed ZeRO; the DeepSpeed config "
                                              "is built from the options. Defaults: a CPU rehearsal of tiny-qwen2 on 2 ranks.")
    _add_launch_arguments(train, with_config=False)
    train.set_defaults(func=_cli)
    lp = subparsers.add_parser("launch", help="like train, with your own DeepSpeed config (--config) or --dry-run",
                               description="Launch a run with your own DeepSpeed config (linted first), or write the "
                                           "run folder and print the command (--dry-run).")
    _add_launch_arguments(lp, with_config=True)
    lp.set_defaults(func=_cli)
