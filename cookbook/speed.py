"""Predicted speed of a ZeRO variant: tokens/s, seconds per optimizer step and the time of the run asked.

One stated model (:data:`MODEL_NAME` version :data:`MODEL_VERSION`), pure functions, no printing:

* :func:`gpu_spec` / :func:`known_gpus` — cards by name (``data/hardware/gpus.json``, datasheet values);
* :class:`Machine` — a card, how many CPU cores each machine has, the NVMe disk's bandwidth;
* :func:`step_terms` — every term of one optimizer step, in seconds;
* :func:`predict` — a :class:`Prediction` for a :class:`cookbook.memory.MemoryEstimate` (or a plan) on a machine.

The model, per rank (all ranks run in lockstep; ``g`` ranks on ``m`` machines, ``N`` parameters, micro batch
``b``, sequence ``s``, accumulation ``M``):

1. **GPU compute** per micro step: ``b·s`` tokens × FLOPs per token / (peak dense bf16 × achieved fraction).
   FLOPs per token: ``6·N`` forward + backward (Kaplan et al. 2020, "Scaling laws", §2.1), ``8·N`` with
   gradient checkpointing (one more forward, Chen et al. 2016), plus attention's ``12·L·h·s`` (PaLM, Chowdhery
   et al. 2022, appendix B; ``16·L·h·s`` with the recomputed forward). The achieved fraction depends on the
   attention kernel the run gets (:func:`attention_class`) and is fitted on the H200 runs
   (``data/calibration/speed/speed_model.json``, ``constants.gpu_fraction``); it is assumed the same on other cards.
   Liger's fused linear cross-entropy multiplies the compute by ``constants.liger_compute_factor``, measured (not
   fitted) from the forward+backward probe of ``data/reference/h200_levers_2026-12-01.json`` (``liger_probe``):
   the same time as transformers' loss at equal micro batch; its gain is the larger micro batch it lets fit.
2. **PCIe** bytes per rank at the card's link (``gt_s × lanes × 128/130 / 8`` GB/s, PCI-SIG) × the pinned-copy
   fraction measured on the H200 (54.8 of 63.0 GB/s). What crosses (DeepSpeed 0.19.8):
   ZeRO-1/2 with the optimizer offloaded: the 16-bit gradient partition down every micro step
   (``runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.copy_grads_in_partition`` /
   ``async_accumulate_grad_in_cpu_via_gpu``) and the updated 16-bit partition up once a step (``step``:
   ``bit16_partitions[...].data.copy_(fp32_partition)``), 2 bytes a parameter each, ``N/g`` parameters;
   ZeRO-3 with the optimizer offloaded: the same two (``runtime/zero/stage3.py``, ``partition_grads`` →
   ``fp32_partitioned_groups_flat`` on the CPU; ``_optimizer_step`` then the 16-bit copy back);
   ZeRO-3 with the parameters offloaded: the 16-bit partition up twice a micro step (the forward's and the
   backward's fetch, ``runtime/zero/partitioned_param_coordinator.py``, ``fetch_sub_module``; the
   checkpointed forward is recomputed inside the backward's fetch) and no copy back (the CPU partition is
   updated in place). ZeRO-3's per-submodule copies run at a fitted fraction of the link
   (``constants.zero3_transfer_fraction``): they are many small copies, not one bulk copy.
3. **Across ranks** (``g > 1``), ring collectives: ``(w−1)/w × bytes`` per rank per collective (Patarasuk &
   Yuan 2009) at the card's peer-to-peer bandwidth (NVLink), or, on cards without peer-to-peer (GeForce),
   through host memory: each byte crosses the PCIe link down and up, half the link. ZeRO-1/2: a
   reduce-scatter of the 16-bit gradients every micro step and an all-gather of the updated 16-bit weights
   every step (``stage_1_and_2.py``: ``average_tensor``, ``all_gather_dp_groups``); ZeRO-3: two all-gathers of
   the weights (forward, backward) and a reduce-scatter of the gradients every micro step (``stage3.py``).
4. **CPU Adam** (``deepspeed/ops/adam/cpu_adam.py``, DeepSpeedCPUAdam) over each rank's ``N/g`` parameters
   at a fitted rate per CPU core (``constants.cpu_adam_params_per_s_per_core``, fp32 or bf16 states), the
   machine's cores shared by its ranks. Without optimizer offload, GPU Adam is bounded by the card's memory
   bandwidth (28 bytes read and written per parameter, fp32 states; not calibrated: no such run here).
5. **NVMe**: the bytes :mod:`cookbook.nvme` counts per optimizer step (read and written, per machine) at
   the disk's read and write bandwidth; reads and writes overlap by a fitted fraction (``constants.nvme_overlap``).
6. **Overlap rules** (DeepSpeed 0.19.8): in the forward and backward the transfers and collectives of a micro
   step run on side streams beside the compute (``overlap_comm``, ZeRO-3's prefetch), so a micro step takes
   ``max(c, x) + (1 − o)·min(c, x)`` with ``o`` fitted (``constants.overlap``). The optimizer phase is serial
   after the last backward: CPU Adam, then the 16-bit copy up, then (ZeRO-1/2) the all-gather; NVMe after
   that. ``DeepSpeedZeroOptimizer.step`` runs CPU Adam on the main thread after backward (no overlap with
   the next forward in 0.19.8 unless ZenFlow or SuperOffload is configured, which this model does not cover).

Units: seconds, tokens/s over the whole world (all ranks), GB/s = 1e9 bytes/s, GiB = 2**30 bytes.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

MODEL_NAME = "cookbook.speed"
MODEL_VERSION = 1

_DATA = Path(__file__).resolve().parent.parent / "data"
GPUS_FILE = _DATA / "hardware" / "gpus.json"
CONSTANTS_FILE = _DATA / "calibration" / "speed" / "speed_model.json"
GB = 1e9

#: attention kernels a run can get (``--attention``): sdpa on unpacked rows, sdpa on packed rows (a
#: block-diagonal 4D mask: PyTorch's SDPA leaves its flash kernel), FlexAttention (document mask as blocks).
ATTENTIONS = ("sdpa", "sdpa_masked", "flex")


class UnknownGpuError(ValueError):
    """A GPU name not in ``data/hardware/gpus.json``; the message lists the known names."""


class SpeedModelError(ValueError):
    """The speed model cannot be evaluated (missing calibration, a bad argument); the message says the fix."""


@dataclass(frozen=True)
class GpuSpec:
    """One card (``data/hardware/gpus.json``). Units: TFLOP/s, GiB, GB/s; ``interconnect_gb_s`` one direction."""

    name: str
    peak_bf16_tflops: float
    memory_gib: float
    memory_bandwidth_gb_s: float
    pcie_gt_s: int
    pcie_lanes: int
    p2p: bool
    interconnect_gb_s: float | None
    source: str
    aliases: tuple[str, ...] = ()

    @property
    def pcie_link_gb_s(self) -> float:
        """One-direction PCIe rate, GB/s: ``gt_s × lanes × 128/130 / 8`` (PCI-SIG base specifications 3.0–5.0)."""
        return self.pcie_gt_s * self.pcie_lanes * 128 / 130 / 8


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", str(name).lower().replace("nvidia", "").replace("geforce", ""))


@lru_cache(maxsize=4)
def _load_gpus(path: str) -> tuple[GpuSpec, ...]:
    data = json.loads(Path(path).read_text())
    fields = GpuSpec.__dataclass_fields__
    return tuple(GpuSpec(**{k: (tuple(v) if k == "aliases" else v) for k, v in g.items() if k in fields})
                 for g in data["gpus"])


def known_gpus(path: str | os.PathLike = GPUS_FILE) -> tuple[str, ...]:
    """The card names :func:`gpu_spec` knows, as ``data/hardware/gpus.json`` spells them."""
    return tuple(g.name for g in _load_gpus(str(path)))


def gpu_spec(name: str, path: str | os.PathLike = GPUS_FILE) -> GpuSpec:
    """The card called ``name``: case, spaces, dashes, "NVIDIA"/"GeForce" ignored (``"RTX 4090"``, ``"rtx4090"``,
    ``"4090"``, ``"NVIDIA H200"``), matched against each card's name and aliases.

    Raises:
        UnknownGpuError: no such card; the message lists the known ones.
    """
    want = _norm(name)
    for g in _load_gpus(str(path)):
        if want and want in {_norm(g.name), *(_norm(a) for a in g.aliases)}:
            return g
    raise UnknownGpuError(f"unknown GPU {name!r}; known: {', '.join(known_gpus(path))} "
                          f"(add a card with its datasheet values to {Path(path).name})")


@dataclass(frozen=True)
class Machine:
    """What a prediction is for: ``gpu`` (a :class:`GpuSpec`), ``cpu_cores`` per machine (the cores CPU Adam's
    threads share), the NVMe disk's sequential ``nvme_read_gb_s`` / ``nvme_write_gb_s`` (GB/s; default: the
    consumer PCIe 4.0 SSD of :data:`cookbook.nvme.CONSUMER_PCIE4_SSD`, datasheet values)."""

    gpu: GpuSpec
    cpu_cores: int
    nvme_read_gb_s: float | None = None
    nvme_write_gb_s: float | None = None

    def __post_init__(self):
        if isinstance(self.cpu_cores, bool) or not isinstance(self.cpu_cores, int) or self.cpu_cores < 1:
            raise SpeedModelError(f"cpu_cores={self.cpu_cores!r}: give the CPU cores of one machine, 1 or more")

    @property
    def label(self) -> str:
        return f"{self.gpu.name}, {self.cpu_cores} CPU cores per machine"


@lru_cache(maxsize=4)
def _load_constants(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpeedModelError(f"{path}: cannot read the speed model's constants ({exc}); rebuild it with "
                              "python -m benchmarks.speed_fit") from exc
    return data["constants"]


def constants(path: str | os.PathLike = CONSTANTS_FILE) -> dict:
    """The fitted constants (``data/calibration/speed/speed_model.json`` ``constants``, written by
    ``benchmarks/speed_fit.py``): ``gpu_fraction`` per attention class, ``cpu_adam_params_per_s_per_core``
    (``fp32``/``bf16``), ``zero3_transfer_fraction``, ``overlap``, ``nvme_overlap``, ``pcie_pinned_fraction``."""
    return _load_constants(str(path))


def attention_class(head_dim: int, attention: str = "sdpa") -> str:
    """Which fitted GPU fraction a run gets: ``sdpa_flash`` (full rows, head dim a multiple of 8 and at most 256:
    the flash kernel's condition, ``torch/backends/cuda`` ``can_use_flash_attention``) or ``sdpa_no_flash`` (e.g.
    head dim 100 of the 3.4B LLaMA shape); ``sdpa_masked`` (packed rows through sdpa: the 4D mask keeps PyTorch's
    SDPA off its flash kernel) and ``flex`` (FlexAttention), each with ``_flash_head`` appended where the head dim
    meets the flash condition (there sdpa's masked kernels are fast too, and flex gains nothing).

    Raises:
        SpeedModelError: ``attention`` not in :data:`ATTENTIONS`.
    """
    if attention not in ATTENTIONS:
        raise SpeedModelError(f"attention={attention!r}: use one of {', '.join(ATTENTIONS)}")
    flash_head = head_dim % 8 == 0 and head_dim <= 256
    if attention != "sdpa":
        # where sdpa has fast kernels for the head dim, masked sdpa and flex get their own fitted fraction:
        # measured on LLaMA-7B (head dim 128) flex was 0.96× packed sdpa, on the head-dim-100 3.4B shape 1.38×
        # (data/reference/h200_attention.json)
        return attention + ("_flash_head" if flash_head else "")
    return "sdpa_flash" if flash_head else "sdpa_no_flash"


def fetched_modules(num_layers: int) -> int:
    """Submodules ZeRO-3 fetches in one pass: each decoder layer's 7 linear layers and 2 norms, plus the
    embedding, the final norm and the output layer (``partitioned_param_coordinator.fetch_sub_module`` gathers
    per module that owns parameters)."""
    return 9 * num_layers + 3


def flops_per_token(num_params: int, num_layers: int, hidden: int, seq_len: int, *, checkpointing: bool) -> float:
    """Training FLOPs per token: :func:`cookbook.hardware.flops_per_token` (``6·N + 12·L·h·s``, PaLM appendix B);
    with gradient checkpointing one more forward, 4/3 of it: ``8·N + 16·L·h·s`` (Chen et al. 2016)."""
    from .hardware import flops_per_token as model_flops
    return model_flops(num_params, num_layers, hidden, seq_len) * (4.0 / 3.0 if checkpointing else 1.0)


@dataclass(frozen=True)
class Workload:
    """The numbers of one variant the model needs (built by :func:`workload` from an estimate or a plan).

    ``params`` N; ``num_layers``, ``hidden``, ``head_dim``; ``world`` ranks on ``machines``; ``micro_batch``,
    ``grad_accum``, ``seq_len``; ``zero_stage``; ``offload_optimizer``/``offload_param`` (``none``/``cpu``/``nvme``);
    ``bf16_states``; ``checkpointing``; ``attention`` (:data:`ATTENTIONS`); ``liger`` (Liger's fused linear
    cross-entropy: the compute × ``constants.liger_compute_factor``); ``nvme_read_gb``/``nvme_write_gb``
    per optimizer step and machine (:mod:`cookbook.nvme`'s count; 0 without NVMe)."""

    params: int
    num_layers: int
    hidden: int
    head_dim: int
    world: int
    machines: int
    micro_batch: int
    grad_accum: int
    seq_len: int
    zero_stage: int
    offload_optimizer: str
    offload_param: str
    bf16_states: bool = False
    checkpointing: bool = True
    attention: str = "sdpa"
    liger: bool = False
    nvme_read_gb: float = 0.0
    nvme_write_gb: float = 0.0

    @property
    def tokens_per_step(self) -> int:
        return self.world * self.micro_batch * self.grad_accum * self.seq_len


def step_terms(w: Workload, machine: Machine, c: Mapping | None = None) -> dict[str, float]:
    """Every term of one optimizer step in seconds (see the module docstring for each formula and its source).

    Returns:
        ``compute_s`` (all micro steps), ``pcie_fwd_bwd_s`` (transfers during the micro steps, all of them),
        ``comm_fwd_bwd_s`` (collectives during the micro steps), ``fwd_bwd_s`` (the micro steps with the overlap
        rule), ``cpu_adam_s`` / ``gpu_adam_s``, ``pcie_step_s`` (the 16-bit copy up), ``comm_step_s`` (ZeRO-1/2's
        all-gather), ``nvme_s``, ``step_s`` (the sum of ``fwd_bwd_s`` and the serial optimizer phase) and the
        bandwidths used (``pcie_gb_s``, ``interconnect_gb_s``, GB/s).

    Raises:
        SpeedModelError: an NVMe variant without the disk's bandwidth, or a constant missing.
    """
    c = constants() if c is None else c
    g, n = w.world, w.params
    part = n / g                                   # parameters of one rank's partition
    pcie = machine.gpu.pcie_link_gb_s * c["pcie_pinned_fraction"] * GB
    if g > 1 and machine.gpu.p2p and machine.gpu.interconnect_gb_s:
        inter = machine.gpu.interconnect_gb_s * GB
    elif g > 1 and machine.gpu.p2p:
        inter = pcie                               # peer-to-peer over the PCIe switch
    else:
        inter = pcie / 2                           # through host memory: down and up the same link
    if g > 1 and w.machines > 1:
        inter = min(inter, c.get("inter_node_gb_s", 12.5) * GB)
    frac = c["gpu_fraction"][attention_class(w.head_dim, w.attention)]
    tokens_micro = w.micro_batch * w.seq_len
    fpt = flops_per_token(n, w.num_layers, w.hidden, w.seq_len, checkpointing=w.checkpointing)
    c_micro = tokens_micro * fpt / (machine.gpu.peak_bf16_tflops * 1e12 * frac)
    if w.liger:
        c_micro *= c.get("liger_compute_factor", 1.0)

    opt_off, par_off = w.offload_optimizer != "none", w.offload_param != "none" and w.zero_stage == 3
    z3_rate = pcie * c["zero3_transfer_fraction"]
    x_micro_pcie = 0.0
    if w.zero_stage == 3:
        if par_off:
            x_micro_pcie += 2 * (2 * part) / z3_rate          # forward + backward fetch of the 16-bit partition
        if par_off or g > 1:                                   # one fetch per submodule per pass, each with a latency
            x_micro_pcie += 2 * fetched_modules(w.num_layers) * c["zero3_fetch_latency_s"]
        if opt_off:                                            # 16-bit gradient partition down, per submodule
            x_micro_pcie += 2 * part / z3_rate + fetched_modules(w.num_layers) * c["zero3_fetch_latency_s"]
    elif opt_off and w.zero_stage in (1, 2):
        x_micro_pcie += 2 * part / pcie                        # bucketed gradient copy down
    ring = (g - 1) / g
    if g > 1:
        x_micro_comm = (3 if w.zero_stage == 3 else 1) * ring * 2 * n / inter
        comm_step = ring * 2 * n / inter if w.zero_stage in (1, 2) else 0.0
        if w.zero_stage == 0:
            x_micro_comm = 2 * ring * 2 * n / inter            # all-reduce = reduce-scatter + all-gather
    else:
        x_micro_comm = comm_step = 0.0
    x_micro = x_micro_pcie + x_micro_comm
    o = c["overlap"]
    micro = max(c_micro, x_micro) + (1 - o) * min(c_micro, x_micro)

    ranks_per_machine = max(1, g // max(1, w.machines))
    cores_per_rank = machine.cpu_cores / ranks_per_machine
    if opt_off:
        rate = c["cpu_adam_params_per_s_per_core"]["bf16" if w.bf16_states else "fp32"] * cores_per_rank
        cpu_adam, gpu_adam = part / rate, 0.0
    else:
        cpu_adam = 0.0
        gpu_adam = part * (14 if w.bf16_states else 28) / (machine.gpu.memory_bandwidth_gb_s * GB)
    pcie_step = 0.0
    if opt_off and not par_off:
        # ZeRO-1/2: fp32 → pinned 16-bit buffer on the CPU, then a non-blocking copy up (stage_1_and_2.py, step:
        # param_buffer_of_bit16_for_cpu_offload_groups). ZeRO-3: a blocking fp32 CPU → 16-bit GPU copy_
        # (stage3.py, _reassign_or_swap_out_partitioned_parameters): PyTorch converts on the CPU into a pageable
        # temporary and copies from it (aten/src/ATen/native/cuda/Copy.cu, copy_kernel_cuda), at a fitted rate.
        rate_up = c["zero3_copy_back_gb_s"] * GB if w.zero_stage == 3 else pcie
        pcie_step = 2 * part / rate_up
    nvme = 0.0
    if w.nvme_read_gb or w.nvme_write_gb:
        if not (machine.nvme_read_gb_s and machine.nvme_write_gb_s):
            raise SpeedModelError("an NVMe variant needs the disk's read and write bandwidth: set "
                                  "nvme_read_gb_s and nvme_write_gb_s on the Machine")
        r, wr = w.nvme_read_gb / machine.nvme_read_gb_s, w.nvme_write_gb / machine.nvme_write_gb_s
        nvme = max(r, wr) + (1 - c["nvme_overlap"]) * min(r, wr)
    fwd_bwd = w.grad_accum * micro
    step = fwd_bwd + cpu_adam + gpu_adam + pcie_step + comm_step + nvme
    return {"compute_s": w.grad_accum * c_micro, "pcie_fwd_bwd_s": w.grad_accum * x_micro_pcie,
            "comm_fwd_bwd_s": w.grad_accum * x_micro_comm, "fwd_bwd_s": fwd_bwd, "cpu_adam_s": cpu_adam,
            "gpu_adam_s": gpu_adam, "pcie_step_s": pcie_step, "comm_step_s": comm_step, "nvme_s": nvme,
            "step_s": step, "pcie_gb_s": pcie / GB, "interconnect_gb_s": inter / GB if g > 1 else None,
            "gpu_fraction": frac, "flops_per_token": fpt}


def workload(e, *, bf16_states: bool | None = None, attention: str = "sdpa", spec=None) -> Workload:
    """A :class:`Workload` from a :class:`cookbook.memory.MemoryEstimate` (its plan, ``bf16_states`` and NVMe
    bytes per step) or a :class:`cookbook.plan.Plan` (then ``bf16_states`` as given; not for NVMe variants).

    Raises:
        SpeedModelError: a Plan that offloads to NVMe (its NVMe bytes come from :func:`cookbook.memory.estimate`).
    """
    from .plan import Plan
    if isinstance(e, Plan):
        plan = e
        if "nvme" in (plan.offload_optimizer, plan.offload_param):
            raise SpeedModelError(f"{plan.label}: an NVMe variant's bytes per step come from its estimate: pass "
                                  "cookbook.memory.estimate(plan) instead of the Plan")
        e = None
    else:
        plan = e.plan
    if bf16_states is None:
        bf16_states = bool(getattr(e, "bf16_states", False))
    if spec is None:
        from .models import model_spec
        spec = model_spec(plan.model)
    nv = (getattr(e, "nvme", None) or {}) if e is not None else {}
    return Workload(params=int(spec.num_params), num_layers=spec.num_layers, hidden=spec.hidden_size,
                    head_dim=spec.hidden_size // spec.num_heads, world=plan.num_gpus, machines=plan.num_machines,
                    micro_batch=plan.micro_batch, grad_accum=plan.grad_accum, seq_len=plan.seq_len,
                    zero_stage=plan.zero_stage, offload_optimizer=plan.offload_optimizer,
                    offload_param=plan.offload_param, bf16_states=bool(bf16_states),
                    checkpointing=plan.gradient_checkpointing, attention=attention, liger=bool(plan.liger),
                    nvme_read_gb=float(nv.get("read_gb_per_step_total") or 0.0),
                    nvme_write_gb=float(nv.get("write_gb_per_step_total") or 0.0))


@dataclass(frozen=True)
class Prediction:
    """A predicted speed: ``tokens_per_s`` (world), ``step_s`` (one optimizer step), ``run_s`` (the run asked:
    ``steps`` × ``step_s``; None when no length was given), ``terms`` (:func:`step_terms`), ``machine`` (label),
    ``conditions`` (what the number assumes, for people)."""

    tokens_per_s: float
    step_s: float
    terms: Mapping[str, Any]
    machine: str
    conditions: tuple[str, ...]
    steps: int | None = None
    run_s: float | None = None
    tokens_per_step: int = 0
    attention: str = "sdpa"

    @property
    def bound(self) -> str:
        """The largest term of the step: ``compute``, ``PCIe``, ``communication``, ``CPU Adam``, ``NVMe``."""
        t = self.terms
        parts = {"compute": t["compute_s"], "PCIe": t["pcie_fwd_bwd_s"] + t["pcie_step_s"],
                 "communication": t["comm_fwd_bwd_s"] + t["comm_step_s"], "CPU Adam": t["cpu_adam_s"],
                 "NVMe": t["nvme_s"]}
        return max(parts, key=parts.get)

    def to_dict(self) -> dict:
        """The ``predicted`` field of ``cookbook estimate --json``."""
        return {"model": MODEL_NAME, "version": MODEL_VERSION, "machine": self.machine,
                "tokens_per_s": round(self.tokens_per_s, 1), "step_s": round(self.step_s, 4),
                "run_s": None if self.run_s is None else round(self.run_s, 1), "steps": self.steps,
                "tokens_per_step": self.tokens_per_step, "attention": self.attention, "bound": self.bound,
                "terms": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.terms.items()},
                "conditions": list(self.conditions)}

    def __str__(self) -> str:
        run = f", run {format_duration(self.run_s)} ({self.steps:,} steps)" if self.run_s is not None else ""
        return (f"predicted on {self.machine}: {self.tokens_per_s:,.0f} tokens/s, {self.step_s:.2f} s a step{run} "
                f"({self.bound}-bound; {MODEL_NAME} v{MODEL_VERSION})")


def format_duration(seconds: float) -> str:
    """``5 h 12 min``, ``12 min``, ``45 s``."""
    s = float(seconds)
    if s >= 3600:
        return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"
    return f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


def predict(e, machine: Machine, *, bf16_states: bool | None = None, attention: str = "sdpa",
            steps: int | None = None, epochs: float | None = None, dataset_tokens: int | None = None,
            spec=None, consts: Mapping | None = None) -> Prediction:
    """Predicted tokens/s, seconds per optimizer step and run time of the variant ``e`` (a
    :class:`cookbook.memory.MemoryEstimate` or a :class:`cookbook.plan.Plan`) on ``machine``.

    Args:
        steps: optimizer steps of the run; or ``epochs`` over ``dataset_tokens`` (tokens of the packed
            dataset), giving ``ceil(epochs × dataset_tokens / tokens per step)`` steps.
        attention: the kernel the run gets (:data:`ATTENTIONS`; default sdpa on full rows).

    Raises:
        SpeedModelError: bad ``steps``/``epochs``/``dataset_tokens``, an NVMe variant without disk bandwidth.
    """
    import math
    w = workload(e, bf16_states=bf16_states, attention=attention, spec=spec)
    if w.offload_optimizer == "nvme" or w.offload_param == "nvme":
        if machine.nvme_read_gb_s is None or machine.nvme_write_gb_s is None:
            from .nvme import CONSUMER_PCIE4_SSD as ssd
            machine = Machine(machine.gpu, machine.cpu_cores, machine.nvme_read_gb_s or ssd["read_gb_s"],
                              machine.nvme_write_gb_s or ssd["write_gb_s"])
    terms = step_terms(w, machine, consts)
    if steps is None and epochs is not None:
        if not (isinstance(dataset_tokens, int) and dataset_tokens > 0) or not epochs > 0:
            raise SpeedModelError(f"epochs={epochs!r} needs dataset_tokens (a positive token count; got "
                                  f"{dataset_tokens!r}) and positive epochs")
        steps = math.ceil(epochs * dataset_tokens / w.tokens_per_step)
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise SpeedModelError(f"steps={steps!r}: give a positive number of optimizer steps")
    cond = [f"{w.world} × {machine.gpu.name} ({machine.gpu.peak_bf16_tflops:g} TFLOP/s dense bf16, PCIe "
            f"{terms['pcie_gb_s']:.1f} GB/s pinned each way), {machine.cpu_cores} CPU cores per machine",
            f"GPU at {terms['gpu_fraction']:.0%} of peak (fitted on one H200 for attention class "
            f"{attention_class(w.head_dim, w.attention)}; assumed the same on this card)",
            f"{'bf16' if w.bf16_states else 'fp32'} states; CPU Adam serial after backward (DeepSpeed 0.19.8)"]
    if w.world > 1:
        cond.append(f"collectives at {terms['interconnect_gb_s']:.1f} GB/s "
                    + ("(NVLink)" if machine.gpu.p2p and machine.gpu.interconnect_gb_s else
                       "(PCIe peer-to-peer)" if machine.gpu.p2p else "(no peer-to-peer: through host memory)"))
    if terms["nvme_s"]:
        cond.append(f"NVMe at {machine.nvme_read_gb_s:g}/{machine.nvme_write_gb_s:g} GB/s read/write")
    return Prediction(tokens_per_s=w.tokens_per_step / terms["step_s"], step_s=terms["step_s"], terms=terms,
                      machine=f"{w.world} × {machine.gpu.name}, {machine.cpu_cores} CPU cores per machine",
                      conditions=tuple(cond), steps=steps,
                      run_s=None if steps is None else steps * terms["step_s"], tokens_per_step=w.tokens_per_step,
                      attention=w.attention)


def this_machine_cores() -> int:
    """CPU cores this process may use (``os.sched_getaffinity``, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


__all__ = ["ATTENTIONS", "CONSTANTS_FILE", "GPUS_FILE", "GpuSpec", "MODEL_NAME", "MODEL_VERSION", "Machine",
           "Prediction", "SpeedModelError", "UnknownGpuError", "Workload", "attention_class", "constants",
           "flops_per_token", "format_duration", "gpu_spec", "known_gpus", "predict", "step_terms",
           "this_machine_cores", "workload"]
