"""The hardware: what this machine has, what the GPUs the cookbook targets are, and the limits they set.

* this machine — :func:`on_gpu_machine` / :func:`rehearsal` (an NVIDIA GPU, read through NVML, so
  the caller's process never initialises CUDA), :func:`libaio_present` (what DeepSpeed's NVMe
  offload compiles against), :func:`free_port` (a TCP port for a rendezvous);
* GPUs by name — :func:`gpu_compute_capability` (bf16 needs 8.0 or newer), the RTX 4090's bf16 peak
  and its PCIe 4.0 ×16 link (:data:`RTX4090_BF16_TFLOPS`, :data:`PCIE4_X16_GBPS`);
* the limits — :func:`throughput_ceiling` (compute and PCIe bounds on samples/s, to test a claim),
  :func:`scaled_budget_gib` (the CPU rehearsal's per-rank "device" memory, scaled from a real GPU);
* :func:`hardware_label` — where a run ran, for tables and plot legends;
* :func:`terminal_progress` — whether this process writes to a terminal (live bars) or not (a notebook).

Every other module asks here; this module imports none of them at import time (``models`` and
``train`` only inside the functions that need a model's numbers), so it closes no import circle.

Units: GiB = 2**30 bytes, GB = 10**9 bytes (bandwidths, as vendors state them).
"""
from __future__ import annotations

import contextlib
import ctypes.util
import os
import re
import socket
import sys
from pathlib import Path
from typing import Mapping

GIB = 2 ** 30
GB = 10 ** 9

#: CUDA compute capability by GPU name (lower case, matched as a substring, longest name first).
#: Source: NVIDIA, "CUDA GPUs - Compute Capability", https://developer.nvidia.com/cuda-gpus.
GPU_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "h200": (9, 0), "h100": (9, 0), "gh200": (9, 0), "b200": (10, 0), "b100": (10, 0),
    "rtx 5090": (12, 0), "rtx 5080": (12, 0),
    "rtx 4090": (8, 9), "rtx 4080": (8, 9), "rtx 4070": (8, 9), "rtx 4060": (8, 9), "rtx 6000 ada": (8, 9),
    "l40s": (8, 9), "l40": (8, 9), "l4": (8, 9),
    "a100": (8, 0), "a800": (8, 0), "a30": (8, 0),
    "rtx 3090": (8, 6), "rtx 3080": (8, 6), "rtx 3070": (8, 6), "rtx 3060": (8, 6), "rtx a6000": (8, 6),
    "a6000": (8, 6), "a40": (8, 6), "a10g": (8, 6), "a10": (8, 6),
    "rtx 2080": (7, 5), "rtx 2070": (7, 5), "titan rtx": (7, 5), "t4": (7, 5),
    "v100": (7, 0), "titan v": (7, 0), "p100": (6, 0), "p40": (6, 1), "gtx 1080": (6, 1),
}

#: PCIe 4.0 ×16, one direction, GB/s: 16 GT/s × 16 lanes × 128/130 encoding / 8 bits (PCI-SIG, PCI Express
#: Base Specification 4.0). The RTX 4090 is a PCIe 4.0 ×16 card (NVIDIA RTX 4090 specifications).
PCIE4_X16_GBPS = 31.5

#: Dense bf16 tensor-core peak of an RTX 4090 with FP32 accumulate, TFLOP/s (NVIDIA Ada Lovelace
#: architecture whitepaper, Table 2; also :data:`cookbook.train.PEAK_BF16_TFLOPS`).
RTX4090_BF16_TFLOPS = 165.2

#: How to install libaio, which DeepSpeed's async I/O op (NVMe offload) compiles and links against: the
#: development package per package manager (``deepspeed/ops/op_builder/async_io.py::AsyncIOBuilder.
#: check_for_libaio_pkg`` names the same ones).
LIBAIO_PACKAGES = ("sudo apt-get install libaio-dev  (Debian/Ubuntu) · sudo dnf install libaio-devel  (RHEL/Fedora) · "
                   "sudo pacman -S libaio  (Arch)")


# --------------------------------------------------------------------------------------------
# this machine

def on_gpu_machine() -> bool:
    """Whether this machine has an NVIDIA GPU (via NVML; the caller's process never touches CUDA)."""
    return gpu_count() > 0


def gpu_count() -> int:
    """NVIDIA GPUs this process may use: :func:`nvml_gpus` (NVML's devices narrowed by ``CUDA_VISIBLE_DEVICES``,
    which NVML itself ignores); 0 without a driver or library. The caller's process never touches CUDA."""
    return len(nvml_gpus())


def default_num_processes(num_machines: int = 1, gpus: int | None = None) -> int:
    """``cookbook train/launch``'s default ``--num-processes``: one rank per visible GPU on each machine
    (``gpus``, default :func:`gpu_count`, × ``num_machines``, as ``accelerate config`` proposes), else 2 CPU
    ranks (the rehearsal)."""
    gpus = gpu_count() if gpus is None else gpus
    return gpus * max(1, num_machines) if gpus else 2


def rehearsal() -> bool:
    """True when this machine has no NVIDIA GPU, so the notebooks run the CPU rehearsal
    (:func:`on_gpu_machine`, through NVML: a notebook kernel never initialises CUDA)."""
    return not on_gpu_machine()


def libaio_present() -> bool:
    """libaio headers and shared library both found (what DeepSpeed's ``AsyncIOBuilder`` compiles
    against); install with :data:`LIBAIO_PACKAGES`."""
    headers = any(os.path.exists(os.path.join(d, "libaio.h")) for d in ("/usr/include", "/usr/local/include"))
    return headers and ctypes.util.find_library("aio") is not None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it: bind to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# GPUs by name

def gpu_compute_capability(name: str) -> tuple[int, int] | None:
    """Compute capability for a GPU name (``"RTX 4090"``, ``"NVIDIA A100-SXM4-80GB"``), or None.

    Source: :data:`GPU_COMPUTE_CAPABILITY` (NVIDIA's CUDA GPUs table).
    """
    norm = re.sub(r"[^a-z0-9]+", " ", str(name).lower()).strip()
    norm_joined = norm.replace(" ", "")
    for key in sorted(GPU_COMPUTE_CAPABILITY, key=len, reverse=True):
        k = key.replace(" ", "")
        if re.search(rf"(^|[^a-z0-9]){re.escape(key)}($|[^a-z0-9])", norm) or (len(k) > 3 and k in norm_joined):
            return GPU_COMPUTE_CAPABILITY[key]
    return None


def hardware_label(result_or_summary=None, *, here: bool = True) -> str:
    """Where a run ran, for labels: ``CPU rehearsal (2 ranks)``, ``2 × NVIDIA H200`` or, for a run capped
    with ``--emulate-gpu-memory-gib``, ``1 × NVIDIA H200 capped at 24 GiB``.

    Takes a :class:`~cookbook.launch.RunResult` or its summary dict. A run that left no summary (it failed
    before the end, e.g. an out-of-memory at start) is labelled from its plan — the world size of the
    launch's estimate (``estimate["plan"]["num_gpus"]``) or of its folder (``run.resolved.yaml``, ``run.json``),
    the device of the estimate (``cuda``/``cpu``), the cap from its folder — and, when ``here`` (the label is made on the
    machine that ran it, as :func:`cookbook.results.run_record` does), the GPU's name from this machine's NVML;
    otherwise the GPU is unnamed (``1 × GPU capped at 24 GiB``).
    """
    s = getattr(result_or_summary, "summary", result_or_summary)
    cap = _run_cap_gib(result_or_summary)
    if isinstance(s, Mapping) and s:
        device = s.get("device") or "cpu"
        world = s.get("world_size")
        if device == "cpu":
            return f"CPU rehearsal ({world} rank{'s' if world != 1 else ''})" if world else "CPU rehearsal"
        cap = s.get("gpu_memory_cap_gib") or cap
        capped = f" capped at {cap:g} GiB" if cap else ""
        return f"{world} × {device}{capped}" if world else f"{device}{capped}"
    capped = f" capped at {cap:g} GiB" if cap else ""
    est = getattr(result_or_summary, "estimate", None)
    est = est if isinstance(est, Mapping) else {}
    plan = est.get("plan") if isinstance(est.get("plan"), Mapping) else {}
    world = plan.get("num_gpus") or _run_options(result_or_summary).get("world_size")
    device = est.get("device")
    on_cpu = (device == "cpu") if device in ("cpu", "cuda") else (rehearsal() if here else None)
    if on_cpu:
        return f"CPU rehearsal ({world} rank{'s' if world != 1 else ''})" if world else "CPU rehearsal"
    names = _this_gpu_names() if here and on_cpu is False else []
    name = names[0] if names and len(set(names)) == 1 else "GPU"
    return f"{world} × {name}{capped}" if world else f"{name}{capped}"


def _this_gpu_names() -> list[str]:
    """Names of this machine's visible GPUs through NVML (empty without a driver); never initialises CUDA."""
    return [g["name"] for g in nvml_gpus()]


def nvml_gpus() -> list[dict]:
    """This machine's GPUs as NVML sees them: ``name`` and ``memory_gib`` (total, GiB) of each, narrowed by
    ``CUDA_VISIBLE_DEVICES`` when it lists indices; empty without a driver or library. Never initialises CUDA."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library: no GPU
        return []
    gpus = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            n = pynvml.nvmlDeviceGetName(h)
            gpus.append({"name": n.decode() if isinstance(n, bytes) else str(n),
                         "memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(h).total / GIB, 1)})
    except Exception:  # noqa: BLE001
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d.strip() for d in visible.split(",") if d.strip()]
        if all(d.lstrip("-").isdigit() for d in ids):  # indices (UUIDs are kept as NVML lists them)
            keep = []
            for d in ids:
                if int(d) < 0:
                    break
                keep.append(int(d))
            gpus = [gpus[i] for i in keep if i < len(gpus)]
        else:  # UUIDs or names: as many GPUs as listed (their order is NVML's)
            gpus = gpus[:len(ids)]
    return gpus


def _run_options(result) -> dict:
    """What a result's run folder says was launched: ``world_size``, ``emulate_gpu_memory_gib``, ``model`` and
    the batch shape, from ``run.resolved.yaml`` (written by the launch before the run starts, so also for an
    out-of-memory at model load) and ``run.json`` (written by the run; its ``fingerprint``/``args``). Empty
    when the folder holds neither."""
    run_dir = getattr(result, "run_dir", None)
    if not run_dir:
        return {}
    import json
    out: dict = {}
    try:
        import yaml
        data = yaml.safe_load((Path(run_dir) / "run.resolved.yaml").read_text())
    except Exception:  # noqa: BLE001 - no file, no yaml, not yaml: nothing from it
        data = None
    if isinstance(data, dict):
        out.update({str(k).replace("-", "_"): v for k, v in data.items()})
        if data.get("num-processes"):
            out["world_size"] = data["num-processes"]
    try:
        run = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        run = None
    if isinstance(run, dict):
        out.update({k: v for k, v in (run.get("args") or {}).items() if v is not None})
        if (run.get("fingerprint") or {}).get("world_size"):
            out["world_size"] = run["fingerprint"]["world_size"]
    return out


def _run_cap_gib(result) -> float | None:
    """``--emulate-gpu-memory-gib`` of a run, from its summary or, for a run that left none (an
    out-of-memory at start), from its folder (:func:`_run_options`); None when uncapped or unknown."""
    s = getattr(result, "summary", result)
    if isinstance(s, Mapping) and s.get("gpu_memory_cap_gib"):
        return float(s["gpu_memory_cap_gib"])
    cap = _run_options(result).get("emulate_gpu_memory_gib")
    return float(cap) if cap else None


# --------------------------------------------------------------------------------------------
# the limits they set

def scaled_budget_gib(gpu_memory_gib: float, model: str, target_model: str) -> float:
    """The CPU rehearsal's per-rank "device" budget: a real GPU's memory scaled by parameter count.

    ``budget = gpu_memory_gib × N(model) / N(target_model)``: the tiny model gets the same memory per
    parameter as ``target_model`` has on a ``gpu_memory_gib`` card (24 GiB / 14.17e9 parameters =
    1.82 bytes per parameter for Qwen-14B on an RTX 4090), so a ZeRO variant that holds more than that
    per parameter on the device runs out on both.

    Raises:
        ValueError: ``gpu_memory_gib`` not positive.
        cookbook.models.ModelNotFoundError: a model cannot be found.
    """
    from .models import model_spec
    if not (isinstance(gpu_memory_gib, (int, float)) and gpu_memory_gib > 0):
        raise ValueError(f"gpu_memory_gib={gpu_memory_gib!r}: give the real GPU's memory in GiB (24 for an RTX 4090)")
    return float(gpu_memory_gib) * model_spec(model).num_params / model_spec(target_model).num_params


def throughput_ceiling(plan, *, peak_tflops: float = RTX4090_BF16_TFLOPS, pcie_gbps: float = PCIE4_X16_GBPS) -> dict:
    """Hard upper bounds on training throughput for ``plan`` (samples/s over the world).

    * compute: every GPU at 100 % of ``peak_tflops`` doing the model's FLOPs per token
      (:func:`cookbook.train.flops_per_token`: 6·N for forward + backward, Kaplan et al. 2020,
      plus attention; with gradient checkpointing one more forward, 2·N, Chen et al. 2016);
    * PCIe, with parameter offload (ZeRO-Infinity, Rajbhandari et al. 2021, §5): the 16-bit
      parameters cross host→GPU at least twice per micro batch (forward, and backward with its
      recompute), ``2·2·N`` bytes per GPU at ``pcie_gbps`` (theoretical one-direction bandwidth;
      each GPU has its own link). The optimizer step on the CPU (CPU Adam over all N parameters) is
      not counted, so the real number is lower still.

    Returns:
        ``{"compute_samples_per_s", "pcie_samples_per_s" (None without parameter offload),
        "ceiling_samples_per_s", "flops_per_token", "pcie_bytes_per_micro_batch"}``.
    """
    from .models import model_spec
    spec = model_spec(plan.model)
    fpt = flops_per_token(spec.num_params, spec.num_layers, spec.hidden_size, plan.seq_len)
    if plan.gradient_checkpointing:
        fpt *= 4 / 3  # one more forward (2 of the 6 FLOPs per parameter and token)
    compute = plan.num_gpus * peak_tflops * 1e12 / (fpt * plan.seq_len)
    pcie = None
    traffic = None
    if plan.offload_param != "none":
        traffic = 2 * 2 * spec.num_params  # bytes host->GPU per micro batch per GPU
        pcie = plan.num_gpus * plan.micro_batch * pcie_gbps * GB / traffic
    ceiling = min(x for x in (compute, pcie) if x is not None)
    return {"compute_samples_per_s": compute, "pcie_samples_per_s": pcie, "ceiling_samples_per_s": ceiling,
            "flops_per_token": fpt, "pcie_bytes_per_micro_batch": traffic}


def terminal_progress(stream=None) -> bool:
    """Whether live progress bars (tqdm's carriage-return redraws) suit ``stream`` (default ``sys.stderr``):
    only a terminal (``isatty()``). In a notebook kernel — papermill's executions included — or a pipe,
    every redraw would be kept as text in the cell's output or the log, so callers print a few plain
    lines instead (:func:`cookbook.launch.launch`) or switch the library's bars off (``datasets``)."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextlib.contextmanager
def quiet_loading_bars(stream=None):
    """Inside the block, transformers' own progress bars (``from_pretrained``'s "Loading weights: 0%|…") are
    off unless ``stream`` (default ``sys.stderr``) is a terminal (:func:`terminal_progress`): in a notebook
    kernel or a rank's log file every redraw would be kept as text (papermill keeps a widget's text too).
    Only the bars: transformers' warnings and logging are untouched. The caller's setting is restored after;
    yields True when the bars were switched off here."""
    from transformers.utils import logging as hf_logging
    quiet = not terminal_progress(stream) and hf_logging.is_progress_bar_enabled()
    if quiet:
        hf_logging.disable_progress_bar()
    try:
        yield quiet
    finally:
        if quiet:
            hf_logging.enable_progress_bar()


__all__ = ["GPU_COMPUTE_CAPABILITY", "LIBAIO_PACKAGES", "PCIE4_X16_GBPS", "RTX4090_BF16_TFLOPS", "free_port",
           "gpu_compute_capability", "hardware_label", "libaio_present", "nvml_gpus", "on_gpu_machine", "quiet_loading_bars",
           "rehearsal", "scaled_budget_gib", "terminal_progress", "throughput_ceiling"]


def flops_per_token(num_params: int, num_layers: int, hidden: int, seq_len: int) -> float:
    """Model FLOPs per trained token, forward + backward, without recomputation:
    6·N + 12·L·h·s (Chowdhery et al. 2022, PaLM, appendix B; the MFU definition)."""
    return 6.0 * num_params + 12.0 * num_layers * hidden * seq_len


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


def cpu_fp16_refusal(name: str | None = "--precision", *, filled_into: str | None = None) -> tuple[str, str]:
    """Why fp16 cannot train on this machine (no NVIDIA GPU, a CPU without oneDNN fp16), and the fix, naming the
    precision as its user typed it: ``name`` a flag (``--precision``: ``--precision fp16``) or a Python name
    (``precision``: ``precision='fp16'``). What DeepSpeed's CPU accelerator supports is from
    ``deepspeed/accelerator/cpu_accelerator.py`` (0.19.8): ``is_bf16_supported()`` returns True, and
    ``is_fp16_supported()`` is ``torch.ops.mkldnn._is_mkldnn_fp16_supported()``; ``supported_dtypes()`` is fp32
    and bf16, plus fp16 only then. The engine's ``_do_sanity_check`` raises "Type fp16 is not supported on your
    device" otherwise. ``filled_into``: the config key the option filled (said after the option). Returns
    ``(why, fix)``."""
    name = name or "precision"
    flag = name.startswith("-")
    shown, bf16, fp32 = ((f"{name} fp16", f"{name} bf16", f"{name} fp32") if flag else
                         (f"{name}='fp16'", f"{name}='bf16'", f"{name}='fp32'"))
    if filled_into:
        shown += f" (filled into {filled_into})"
    why = (f"{shown}: this machine has no NVIDIA GPU, so the run is a CPU rehearsal on DeepSpeed's CPU accelerator, "
           "which trains in fp32 and bf16 (CPU_Accelerator.is_bf16_supported() is always True) but in fp16 only on a "
           "CPU where oneDNN computes fp16 (is_fp16_supported(): torch.ops.mkldnn._is_mkldnn_fp16_supported(), "
           "AVX512-FP16/AMX-FP16), and this CPU does not: DeepSpeed would stop with 'Type fp16 is not supported on "
           "your device'")
    fix = f"use {bf16} or {fp32} here (fp16 is for NVIDIA GPUs older than Ampere)"
    return why, fix


def cpu_fp16_supported() -> bool:
    """Whether DeepSpeed's CPU accelerator computes in fp16 on this CPU (``deepspeed/accelerator/
    cpu_accelerator.py`` ``is_fp16_supported``: ``torch.ops.mkldnn._is_mkldnn_fp16_supported()``, true on
    CPUs with AVX512-FP16/AMX-FP16). Without it ``engine._do_sanity_check`` raises "Type fp16 is not
    supported on your device"."""
    try:
        import torch
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except Exception:  # noqa: BLE001
        return False
