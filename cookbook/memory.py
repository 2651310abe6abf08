"""Memory estimator: per-GPU and host-RAM breakdown of a planned ZeRO run, with verdicts.

``estimate(plan)`` answers, in well under a second and without a GPU, whether a :class:`~cookbook.plan.Plan`
fits on each GPU and in the host RAM of each machine, component by component, and why.

Units: every number is GiB (2**30 bytes) unless a name says otherwise. ``N`` below is the model's
parameter count, ``L`` its largest single module's parameter count (:class:`~cookbook.models.ModelSpec`),
``g`` the world size (GPUs over all machines), ``r`` ranks per machine, ``n`` machines.

Sources of the formulas (each function repeats the one it uses):

* Model states (16-bit parameters and gradients, fp32 master weights, Adam m and v, fp32 gradient
  partition): Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
  Models", Section 3 / Figure 1 (2 + 2 + 12 bytes per parameter for mixed-precision Adam), as counted
  by DeepSpeed's own estimators ``estimate_zero2_model_states_mem_needs``
  (``deepspeed/runtime/zero/stage_1_and_2.py``) and ``estimate_zero3_model_states_mem_needs``
  (``deepspeed/runtime/zero/stage3.py``), which additionally keep a 4-byte fp32 gradient partition
  (18 bytes per parameter besides the replicated 16-bit parameters) and, for stage 3, 4 bytes per
  parameter of the largest layer (its gathered 16-bit parameters and gradients). Our model-states
  subtotals equal DeepSpeed's numbers exactly (the tests call those functions).
  Host model states as DeepSpeed's estimators count them (offloaded states, or each rank's fp32 copy
  while it loads, times ``additional_buffer_factor`` = 1.5) are kept as
  :attr:`MemoryEstimate.host_model_states_gib`: a number people quote, not the peak.
* Peaks (``gpu_gib["total"]``, ``host_gib["total"]``): what DeepSpeed 0.19 and PyTorch really allocate,
  read from their source and checked against the measured calibration (details in :func:`estimate`):
  ZeRO-1/2 flatten the 16-bit parameters on the device when its free memory allows (initialisation peak
  2·p·N; the freed per-tensor blocks stay cached), else on the CPU (peak p·N; :func:`flattens_on_gpu`); offload keeps pinned staging buffers, and PyTorch's host caching
  allocator rounds every pinned block up to a power of two. Where the 1.5× buffer factor comes from:
  it is the default of the ``additional_buffer_factor`` argument of ``estimate_zero2/3_model_states_mem_needs``,
  documented only as "estimation factor (defaults to 1.5)" and applied to the whole cpu_mem (no
  buffer in ``stage_1_and_2.py``/``stage3.py`` is sized from it); the measured host peaks were 0.99-1.04× the sum of the real buffers and
  1.30-1.63× the bare states, so the peak uses the buffers, not the factor. The fp32 load copy is not
  in the ZeRO-3 peak either: the model is built under ``zero.Init`` in the training dtype, partitioned.
* Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models", Section 4.1: ``s*b*h*(34 + 5*a*s/h)`` bytes per layer in 16-bit without checkpointing;
  the ``5*a*s/h`` term (attention scores, softmax, dropout) is not stored by fused attention
  (SDPA / FlashAttention, transformers' default), leaving ``34*s*b*h`` (their "selective
  recomputation" figure). With full checkpointing, ``2*s*b*h`` per layer (the layer input) plus one
  layer's full activations during its recompute. The loss phase: ``12*b*s*V`` bytes, three fp32
  logit-sized tensors in the backward of transformers' ``ForCausalLMLoss``
  (``transformers/loss/loss_utils.py``: ``logits.float()``, then ``cross_entropy``); with
  checkpointing the loss phase and a layer's recompute do not overlap (see :func:`activation_bytes`).
* Buckets: DeepSpeed's ZeRO config defaults (``deepspeed/runtime/zero/config.py``:
  ``reduce_bucket_size`` = ``allgather_bucket_size`` = 5e8, ``stage3_prefetch_bucket_size`` = 5e7,
  ``stage3_max_live_parameters`` = 1e9 elements) or the numbers of a given DeepSpeed config; the
  buffers allocated are read from ``stage_1_and_2.py`` (``setup_buckets``: one reduce bucket, two
  with ``overlap_comm``) and ``stage3.py`` (one reduce bucket per communication dtype). "auto" values
  follow transformers' DeepSpeed integration docs (``reduce_bucket_size = h*h``,
  ``stage3_prefetch_bucket_size = 0.9*h*h``).
* CUDA context: measured on the H200 with lazy module loading (0.68 GiB), :data:`CUDA_CONTEXT_GIB`;
  transformers docs, "Model training anatomy", give 1-2 GB for eagerly loaded kernels.
* Allocator cache (reserved − allocated) and runtime baselines: the stale parameter blocks above plus
  fractions fitted to the measured calibrations in ``data/calibration/*.json`` (see
  :data:`FRAGMENTATION`, :data:`FETCH_FRAGMENTATION_LAYERS`, :data:`RUNTIME_BASELINE_GIB`,
  :data:`CUDA_HOST_RUNTIME_GIB`, :data:`NVME_HOST_RUNTIME_GIB`).

Accuracy against the H200 calibration measurements (``data/calibration/h200_24gib.json``,
``h200x2_2026-11-30.json``; the cookbook's runs estimated with their own DeepSpeed config from
``data/reference/h200x2_2026-11-30.json``): GPU reserved within ±12% on every uncapped rung (stock
configs included); on the three runs whose reserved peak reads the 24 GiB cap the estimate is 22.0-22.9
GiB (≥ 0.85 × cap and still "fits"); host peak within −4% … +0% on every rung; GPU allocated within
±15% except four rungs at +15 … +20% (see tests/test_memory.py for the per-point assertions).
"""
from __future__ import annotations

import functools
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .sizes import EstimateError, _bytes_per_state, _layer_numel, _pow2, _tensor_numels  # noqa: F401
from .plan import VARIANTS, Plan, PlanError

GIB = 2 ** 30

#: DeepSpeed's ``additional_buffer_factor`` default in its model-states estimators (host side).
ADDITIONAL_BUFFER_FACTOR = 1.5

#: DeepSpeed ZeRO config defaults, in elements (``deepspeed/runtime/zero/config.py``,
#: ``offload_config.py``); tests check them against ``DeepSpeedZeroConfig()``.
DS_DEFAULTS = {
    "reduce_bucket_size": 500_000_000,
    "allgather_bucket_size": 500_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "sub_group_size": 1_000_000_000,
    "offload_param_buffer_count": 5,
    "offload_param_buffer_size": 100_000_000,
    "offload_optimizer_buffer_count": 4,
}

#: CUDA context + kernels per GPU, GiB; outside PyTorch's allocated/reserved counters (nvidia-smi sees it).
#: Measured on the H200 (``data/calibration/cuda_runtime.json``): 0.68 GiB with CUDA's default lazy module
#: loading after GEMM, SDPA and cross-entropy kernels ran; 1.73 GiB with ``CUDA_MODULE_LOADING=EAGER``
#: (transformers docs, "Model training anatomy", quote 1-2 GB for eagerly loaded kernels).
CUDA_CONTEXT_GIB = 0.7

#: Caching-allocator fragmentation, as a fraction of the activations: reserved ≈ allocated (training
#: phase) + FRAGMENTATION × activations (+ the stale 16-bit parameter blocks of ZeRO-0/1/2, see
#: :func:`estimate`), by ZeRO stage and parameter offload. The freed blocks of one phase's transient
#: tensors (checkpoints, the loss phase's fp32 logit-sized tensors, a layer's recompute) stay cached
#: and the next phase's tensors of other sizes cannot reuse them all; with parameter offload every
#: layer's parameters are fetched into fresh blocks twice per micro-step between those activations,
#: which splits the cache further. No first-principles model of PyTorch's caching allocator is
#: attempted: the fractions are fitted to the measured calibration (``data/calibration/h200_24gib.json``
#: and ``h200x2_2026-11-30.json``: H200 capped at 24 GiB, torch 2.11, DeepSpeed 0.19.8),
#: where reserved/allocated was 1.41-1.57 for ZeRO-2 + optimizer offload (mostly the stale parameter
#: blocks), 1.19 for ZeRO-3 + optimizer offload and 1.33-1.74 for ZeRO-3 + parameter offload; every
#: uncapped reserved peak is then within ±15% (test_memory.py::test_calibration_points).
FRAGMENTATION = {"zero012": 0.10, "zero3": 0.35, "zero3_param_offload": 0.50}

#: Fragmentation from gathering parameters (ZeRO-3 with parameter offload or more than one rank), in
#: decoder layers' worth of 16-bit parameters: each layer is fetched into fresh device blocks twice
#: per micro-step (forward; recompute + backward) while the prefetched next one arrives. Fitted with
#: :data:`FRAGMENTATION` on the same calibration, plus the three stock-config rungs of
#: ``data/reference/h200x2_2026-11-30.json`` (micro batch 2, where this term dominates): 2.25 layers.
FETCH_FRAGMENTATION_LAYERS = 2.25

#: Host RSS of one training rank before model states, GiB: Python + torch + transformers + deepspeed
#: imported, a tiny model, DeepSpeed engine and gloo process group. Measured on the CPU rehearsal
#: (``data/calibration/cpu_rehearsal.json``: 0.53 GiB peak per rank, tiny-qwen2, 2 ranks, ZeRO-2).
RUNTIME_BASELINE_GIB = 0.55

#: The same on a CPU rank (the CPU rehearsal), GiB: 0.46 GiB peak per rank measured with the pinned set of
#: ``constraints.txt`` (transformers 5.17; ``tests/test_memory.py::test_cpu_run_host_rss_against_estimate``, tiny-qwen2,
#: 2 ranks, ZeRO-2) against the 0.53 above with later transformers: the import footprint moves with the library
#: versions, so the middle. GPU ranks keep :data:`RUNTIME_BASELINE_GIB`, the value their calibration was fitted with.
CPU_RUNTIME_BASELINE_GIB = 0.49

#: Extra host RSS of a rank that initialises CUDA (driver, cuBLAS/cuDNN host code), GiB. Measured on the
#: H200 (``data/calibration/cuda_runtime.json``): 0.94 GiB RSS after CUDA kernels ran vs 0.28-0.30 GiB for
#: the same imports on a CPU-only torch; eager module loading would take ~5 GiB.
CUDA_HOST_RUNTIME_GIB = 0.65

#: Extra host RSS of a GPU rank with NVMe offload beyond every counted NVMe term (swap buffers, staging, flat
#: buffers: :func:`cookbook.nvme.estimate_nvme`), GiB. Measured on the H200 (one rank, fp32 states, default
#: aio): the host RSS during the steps minus the estimate without its first-step transient was 1.04 GiB
#: (llama-134m, ``data/reference/h200_nvme_runs_2026-12-01.json``), 1.03 and 1.01 GiB (llama-134m, two later
#: device calls, the second ``data/reference/h200_nvme_runs_2026-12-01b.json``; the first is told in
#: docs/benchmarks.md) and 1.01 GiB (llama-1b, 8× the parameters, same record):
#: a constant, not a per-parameter term. Not attributed to one DeepSpeed allocation (the async I/O op's handles
#: and threads are the candidates); fitted on those four runs, so the NVMe host check of those runs is not a
#: held-out test of it. Held out since (``data/reference/h200_nvme_runs_2026-12-02.json``, estimated with the term
#: in): llama-1b default and tuned aio −0.1 % and −0.0 %, llama-3b (3.1× the largest fitted model) +0.1 %.
#: Not applied to CPU ranks (not measured there).
NVME_HOST_RUNTIME_GIB = 1.0


def host_runtime_gib(*, cuda: bool, nvme: bool) -> float:
    """Host RSS of one rank beyond its tensors, GiB: :data:`CPU_RUNTIME_BASELINE_GIB` on a CPU rank; on a GPU rank
    :data:`RUNTIME_BASELINE_GIB`, plus
    :data:`CUDA_HOST_RUNTIME_GIB` on a GPU rank, plus :data:`NVME_HOST_RUNTIME_GIB` on a GPU rank with NVMe
    offload (the estimate's ``host_gib["runtime"]`` per rank)."""
    if not cuda:
        return CPU_RUNTIME_BASELINE_GIB
    return RUNTIME_BASELINE_GIB + CUDA_HOST_RUNTIME_GIB + (NVME_HOST_RUNTIME_GIB if nvme else 0.0)

def zenflow_overlap_step(ds_config: Mapping | None) -> bool:
    """True when ``ds_config`` asks for ZenFlow's overlapped optimizer step
    (``zero_optimization.zenflow.overlap_step: true``; DeepSpeed's ``ZenFlowConfig`` defaults it to false,
    ``runtime/zenflow/zenflow_config.py``), which runs the CPU Adam in a separate process with its own
    buffers (:func:`estimate`'s ``host_gib["zenflow"]``)."""
    zero = (ds_config or {}).get("zero_optimization") if isinstance(ds_config, Mapping) else None
    zf = zero.get("zenflow") if isinstance(zero, Mapping) else None
    return isinstance(zf, Mapping) and zf.get("overlap_step") is True


def _fragmentation_key(stage: int, offload_param: str) -> str:
    """Key of :data:`FRAGMENTATION` for a ZeRO stage and parameter-offload target."""
    if stage < 3:
        return "zero012"
    return "zero3" if offload_param == "none" else "zero3_param_offload"


_CALIBRATION_DIR = Path(__file__).resolve().parent.parent / "data" / "calibration"

#: Display names of the components, in stacking order.
GPU_COMPONENTS = {
    "params_16bit": "16-bit parameters",
    "grads_16bit": "16-bit gradients",
    "master_fp32": "master weights (fp32)",
    "adam_states": "Adam m and v",
    "grads_fp32": "optimizer gradient partition (fp32)",
    "largest_layer": "largest layer, gathered (ZeRO-3)",
    "activations": "activations (checkpoints + loss or layer recompute)",
    "grad_staging": "16-bit gradients kept between micro-steps (offload)",
    "comm_buckets": "communication buckets",
    "prefetch_buffers": "prefetch / live parameters (ZeRO-3)",
    "init_excess": "initialisation peak beyond training (flat copy + clone)",
    "allocator_overhead": "allocator cache (stale blocks + fragmentation)",
    "cuda_context": "CUDA context",
}
HOST_COMPONENTS = {
    "params_16bit": "offloaded 16-bit parameters",
    "master_fp32": "offloaded master weights (fp32)",
    "adam_states": "offloaded Adam m and v",
    "grads_fp32": "offloaded optimizer gradients (fp32)",
    "pinned_staging": "DeepSpeed's pinned staging buffers",
    "pinned_rounding": "pinned buffers rounded up to powers of two",
    "nvme_buffers": "NVMe offload: swap buffers, staging, flat buffers (DeepSpeed)",
    "nvme_transient": "NVMe offload: first step's unpinned Adam m, v of one sub-group",
    "zenflow": "ZenFlow overlap_step: buffers + process",
    "model_load": "model load beyond training (16-bit copy per rank)",
    "ranks_on_cpu": "rank tensors (CPU rehearsal)",
    "runtime": "runtime per rank (Python, torch, DeepSpeed)",
}
#: Keys keep the mixed-precision names; with ``bf16_states`` the "(fp32)" rows hold bf16 tensors
#: and the labels say so (see :func:`_labels`).
#: Model-state components (the part DeepSpeed's estimators count).
MODEL_STATE_KEYS = ("params_16bit", "grads_16bit", "master_fp32", "adam_states", "grads_fp32", "largest_layer")


def _labels(names: Mapping[str, str], bf16_states: bool) -> dict[str, str]:
    """Display names; "(fp32)" becomes "(bf16)" for the states that ``bf16_states`` keeps in bf16."""
    return {k: (v.replace("(fp32)", "(bf16)") if bf16_states else v) for k, v in names.items()}


# --------------------------------------------------------------------------------------------
# result objects

@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU and per-machine host memory of a plan, with verdicts.

    Attributes:
        params: total parameters ``N`` of the model (exact, from the architecture).
        plan: the plan estimated.
        gpu_gib: per-GPU components in GiB (keys of :data:`GPU_COMPONENTS`) plus ``"total"``. On a
            CPU rehearsal (``device="cpu"``) all zeros: the ranks' tensors are counted in ``host_gib``.
        host_gib: per-machine host RAM components in GiB (keys of :data:`HOST_COMPONENTS`) plus
            ``"total"``.
        fits_gpu: ``gpu_gib["total"] <= plan.gpu_memory_gib``.
        fits_host: ``host_gib["total"] <= plan.host_memory_gib``; None when host memory is unknown.
        reasons: one sentence per verdict and per notable fact, for people.
        largest_layer_params: ``L``, DeepSpeed's ``largest_layer_params``.
        bf16_states: master weights, gradients and Adam states kept in bf16 (DeepSpeed
            ``bf16.bf16_master_weights_and_grads`` + ``bf16.bf16_optimizer_states``).
        device: ``cuda`` or ``cpu`` (CPU rehearsal: every rank's memory is host RAM).
        nvme_gib: per-machine NVMe space for states offloaded to NVMe.
        ds_gpu_model_states_gib: per-GPU model states as DeepSpeed's ``estimate_zero*_model_states_mem_needs``
            count them (gpu_mem), GiB.
        ds_host_model_states_gib: host model states per machine as DeepSpeed's estimators count them
            (cpu_mem, with ``additional_buffer_factor`` 1.5), GiB. Not the host peak: see ``host_gib``.
        nvme: for ZeRO-3 plans with an NVMe target, :meth:`cookbook.nvme.NvmeEstimate.to_dict`: SSD GiB
            per state, NVMe host-RAM terms, GB read/written per optimizer step, disk-only step-time
            floors, SSD write volume; None otherwise.
    """

    params: int
    plan: Plan
    gpu_gib: Mapping[str, float]
    host_gib: Mapping[str, float]
    fits_gpu: bool
    fits_host: bool | None
    reasons: tuple[str, ...] = ()
    largest_layer_params: int = 0
    bf16_states: bool = False
    device: str = "cuda"
    nvme_gib: float = 0.0
    ds_gpu_model_states_gib: float = 0.0
    ds_host_model_states_gib: float = 0.0
    nvme: Mapping[str, Any] | None = None

    # -- derived quantities ------------------------------------------------------------------
    @property
    def notes(self) -> tuple[str, ...]:
        """Alias of :attr:`reasons`."""
        return self.reasons

    @property
    def gpu_model_states_gib(self) -> float:
        """Per-GPU model states (what DeepSpeed's ``estimate_zero*_model_states_mem_needs`` call gpu_mem)."""
        return sum(self.gpu_gib.get(k, 0.0) for k in MODEL_STATE_KEYS)

    @property
    def host_model_states_gib(self) -> float:
        """Host model states per machine as DeepSpeed's estimators say (cpu_mem, with the 1.5× buffer
        factor). A planning number people quote; the measured peak is ``host_gib["total"]``."""
        return self.ds_host_model_states_gib

    @property
    def host_model_states_no_factor_gib(self) -> float:
        """DeepSpeed's host model states per machine before its 1.5× buffer factor."""
        return self.ds_host_model_states_gib / ADDITIONAL_BUFFER_FACTOR

    @property
    def gpu_allocated_gib(self) -> float:
        """Predicted peak of ``torch.cuda.max_memory_allocated()`` (tensors only), GiB."""
        return self.gpu_gib["total"] - self.gpu_gib.get("allocator_overhead", 0.0) - self.gpu_gib.get("cuda_context", 0.0)

    @property
    def gpu_reserved_gib(self) -> float:
        """Predicted peak of ``torch.cuda.max_memory_reserved()`` (tensors + allocator cache), GiB."""
        return self.gpu_gib["total"] - self.gpu_gib.get("cuda_context", 0.0)

    @property
    def verdict(self) -> str:
        """One line: the variant and both verdicts, e.g. ``ZeRO-3 + opt→cpu: GPU 9.1/24 GiB fits; host 330 GiB (unknown RAM)``."""
        p = self.plan
        if self.device == "cpu":
            gpu = "CPU rehearsal (no GPU)"
        else:
            gpu = f"GPU {self.gpu_gib['total']:.1f}/{p.gpu_memory_gib:g} GiB {'fits' if self.fits_gpu else 'DOES NOT FIT'}"
        if self.fits_host is None:
            host = f"host {self.host_gib['total']:.1f} GiB per machine (host RAM unknown)"
        else:
            host = (f"host {self.host_gib['total']:.1f}/{p.host_memory_gib:g} GiB "
                    f"{'fits' if self.fits_host else 'DOES NOT FIT'}")
        return f"{p.label}{' (bf16 states)' if self.bf16_states else ''}: {gpu}; {host}"

    @property
    def fits(self) -> bool:
        """Both verdicts hold (an unknown host counts as fitting). The estimate alone: :attr:`status` adds the
        estimator's measured error."""
        return bool(self.fits_gpu) and self.fits_host is not False

    @property
    def headroom(self) -> "Headroom":
        """The estimate with its measured error band added (:func:`headroom`)."""
        return headroom(self)

    @property
    def status(self) -> str:
        """``fits`` (room with the measured error band added), ``at the edge`` or ``does not fit``
        (:func:`headroom`)."""
        return headroom(self).status

    # -- rendering ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The ``--json`` shape: ``{"params", "gpu_gib": {...,"total"}, "host_gib": {...,"total"},
        "fits_gpu", "fits_host", ...}`` plus ``"plan"`` and the explanations."""
        return {
            "params": int(self.params),
            "largest_layer_params": int(self.largest_layer_params),
            "gpu_gib": {k: round(v, 4) for k, v in self.gpu_gib.items()},
            "host_gib": {k: round(v, 4) for k, v in self.host_gib.items()},
            "gpu_model_states_gib": round(self.gpu_model_states_gib, 4),
            "host_model_states_gib": round(self.host_model_states_gib, 4),
            "nvme_gib": round(self.nvme_gib, 4),
            "nvme": self.nvme,
            "fits_gpu": bool(self.fits_gpu),
            "fits_host": self.fits_host,
            "bf16_states": self.bf16_states,
            "device": self.device,
            "verdict": self.verdict,
            "status": self.status,
            "headroom": self.headroom.to_dict(),
            "reasons": list(self.reasons),
            "plan": self.plan.to_dict(),
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def to_frame(self):
        """A pandas DataFrame: one row per component, columns ``where``, ``component``, ``GiB``."""
        import pandas as pd
        rows = []
        for where, comp, names in (("GPU", self.gpu_gib, _labels(GPU_COMPONENTS, self.bf16_states)),
                                   ("host", self.host_gib, _labels(HOST_COMPONENTS, self.bf16_states))):
            if where == "GPU" and self.device == "cpu":
                continue
            for key, value in comp.items():
                if key == "total" or value == 0:
                    continue
                rows.append({"where": where, "component": names.get(key, key), "GiB": round(value, 3)})
            rows.append({"where": where, "component": "total", "GiB": round(comp["total"], 3)})
        return pd.DataFrame(rows, columns=["where", "component", "GiB"])

    def _repr_html_(self) -> str:
        reasons = "".join(f"<li>{html.escape(r)}</li>" for r in self.reasons)
        return (f"<p><b>{html.escape(self.verdict)}</b> — {self.params:,} parameters</p>"
                f"{self.to_frame().to_html(index=False)}<ul>{reasons}</ul>")

    def __str__(self) -> str:
        lines = [self.verdict, f"  parameters: {self.params:,}"]
        frame = self.to_frame()
        for _, row in frame.iterrows():
            lines.append(f"  {row['where']:<5} {row['component']:<52} {row['GiB']:>9.2f} GiB")
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """One line: model, GPU count and :attr:`verdict` (GPU and host totals in GiB against the plan's), e.g.
        ``MemoryEstimate(qwen-14b, 8 GPU(s), 14,167,290,880 parameters: ZeRO-2: GPU 38.0/24 GiB DOES NOT FIT;
        …)``; ``print()`` it (:meth:`__str__`) for every component."""
        p = self.plan
        return (f"MemoryEstimate({p.model or 'no model'}, {p.num_gpus} GPU(s), {self.params:,} parameters: "
                f"{self.verdict})")


@dataclass(frozen=True)
class SweepResult:
    """Estimates of one plan over several ZeRO variants (see :func:`sweep`)."""

    estimates: tuple[MemoryEstimate, ...]

    def __iter__(self):
        return iter(self.estimates)

    def __len__(self) -> int:
        return len(self.estimates)

    def __getitem__(self, i) -> MemoryEstimate:
        return self.estimates[i]

    def to_frame(self):
        """One row per variant: variant, GPU total, model states, activations, host total, verdicts."""
        import pandas as pd
        rows = []
        for e in self.estimates:
            rows.append({
                "variant": e.plan.label,
                "GPU GiB": round(e.gpu_gib["total"], 2),
                "GPU model states GiB": round(e.gpu_model_states_gib, 2),
                "activations GiB": round(e.gpu_gib.get("activations", 0.0), 2),
                "host GiB": round(e.host_gib["total"], 2),
                "host states ×1.5 GiB": round(e.host_model_states_gib, 2),
                "fits GPU": e.fits_gpu,
                "fits host": e.fits_host,
                "status": e.status,
                "why": e.reasons[0] if e.reasons else "",
            })
        return pd.DataFrame(rows)

    def to_dict(self) -> list[dict]:
        return [e.to_dict() for e in self.estimates]

    def _repr_html_(self) -> str:
        return self.to_frame().to_html(index=False)

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)

    def __repr__(self) -> str:
        """A header (how many variants, of which model on how many GPUs) and one :attr:`MemoryEstimate.verdict`
        line per variant: what a plain-text view of a notebook shows (:meth:`to_frame` has every column)."""
        if not self.estimates:
            return "SweepResult: no variants"
        shapes = list(dict.fromkeys(f"{e.plan.model or 'no model'} on {e.plan.num_gpus} GPU(s)"
                                    for e in self.estimates))
        head = f"SweepResult: {len(self.estimates)} variant(s) of {', '.join(shapes)}"
        return "\n".join([head] + [f"  {e.verdict}" for e in self.estimates])


# --------------------------------------------------------------------------------------------
# formulas

def activation_bytes(spec, plan: Plan, *, eager_attention: bool = False) -> dict[str, float]:
    """Activation memory of one rank at its peak, in bytes.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
    Section 4.1, Eq. 1): ``s*b*h*(34 + 5*a*s/h)`` bytes per transformer layer in 16-bit without
    checkpointing. The ``5*a*s/h`` term (attention scores/softmax/dropout) is only stored by eager
    attention (``eager_attention=True``); SDPA/FlashAttention (transformers' default) does not store it.
    Full checkpointing (HF ``gradient_checkpointing_enable``, one checkpoint per decoder layer):
    ``2*s*b*h`` per layer (its 16-bit input) + one layer's full activations during its recompute.

    Loss phase ("logits"): ``12*b*s*V`` bytes. transformers' ``ForCausalLMLoss``
    (``transformers/loss/loss_utils.py``) upcasts the logits (``logits.float()``) and calls
    ``cross_entropy`` = ``log_softmax`` + ``nll_loss``; in backward three fp32 tensors of that shape
    live at once: the saved log-softmax output, ``nll_loss``'s gradient and ``log_softmax``'s input
    gradient (the 16-bit logits are gone once the training loop keeps only ``.loss``; in forward,
    16-bit logits + fp32 copy + log-softmax output = 10 bytes). Measured: the 3.43e9 model at
    16 × 1024 tokens, vocabulary 32000, peaked at 15.4 GiB allocated = 6.4 GiB parameters + 2.5 GiB
    checkpoints + 6.5 GiB, i.e. 13.3 bytes per logit (``data/calibration/h200x2_2026-11-30.json``).

    With checkpointing the loss phase and a layer's recompute do not overlap (the loss backward ends
    before the first recompute), so the peak holds the checkpoints plus the larger of the two;
    without checkpointing every layer's activations are still alive at the loss. fp32 training
    doubles the per-layer terms; the loss phase is fp32 either way.

    With ``plan.liger`` (Liger's fused linear cross-entropy, ``--liger``) the loss phase is
    :func:`liger_flce_bytes` instead: no logit-sized tensor, one chunk of logits at a time.

    Returns:
        ``{"layers": bytes, "logits": bytes, "total": bytes}`` (``layers`` = checkpoints + one layer
        with checkpointing, all layers without; ``logits`` = the loss phase; ``total`` = the peak of the
        two phases as above).
    """
    s, b, h = plan.seq_len, plan.micro_batch, spec.hidden_size
    a = max(spec.num_heads, 1)
    scale = 2 if plan.precision == "fp32" else 1
    per_layer = s * b * h * (34 + (5 * a * s / h if eager_attention else 0)) * scale
    logits = liger_flce_bytes(spec, plan)["total"] if getattr(plan, "liger", False) else 12.0 * b * s * spec.vocab_size
    if plan.gradient_checkpointing:
        checkpoints = spec.num_layers * 2 * s * b * h * scale
        layers = checkpoints + per_layer
        total = checkpoints + max(per_layer, logits)
    else:
        layers = spec.num_layers * per_layer
        total = layers + logits
    return {"layers": float(layers), "logits": float(logits), "total": float(total)}


#: What the estimate misses with ``--liger`` at large micro batches (source: evidence ``liger.fp32_micro24``,
#: ``liger.fp32_micro26``, ``liger.fp32_micro28``; 3.4B LLaMA shape, ZeRO-2 + optimizer offload, fp32 states, one
#: H200 capped at 24 GiB): micro batch 24 ran and 26 and 28 ran out of GPU memory where the estimate left room.
#: The peak moves from the loss phase to the backward once the logits are gone, which this estimate does not model.
#: Headroom (GiB) the estimate must leave below the card with ``--liger``: between the measured runs that fit
#: (micro batch 24: 2.7 GiB left in the estimate) and those that ran out of memory (26: 2.1, 28: 1.5), 3.4B LLaMA
#: shape on a 24 GiB cap (:data:`LIGER_MEASURED_GAP`). Fitted on these three runs; not a held-out check.
LIGER_HEADROOM_GIB = 2.5
#: The evidence keys of the three ``--liger`` runs behind :data:`LIGER_HEADROOM_GIB` (:mod:`cookbook.evidence`).
LIGER_HEADROOM_EVIDENCE = ("liger.fp32_micro24", "liger.fp32_micro26", "liger.fp32_micro28")


def _liger_measured_gap() -> str:
    from .evidence import get
    ran, *oom = (get(k) for k in LIGER_HEADROOM_EVIDENCE)
    x = lambda r: f"{r.extra['micro_batch']}, {r.extra['estimate_gpu_total_gib']:.1f} GiB"  # noqa: E731
    return ("Measured with --liger the peak is above this estimate (3.4B, 24 GiB card, estimate totals with the CUDA "
            f"context): micro batch {x(ran)}, ran ({ran.value:.1f} GiB reserved); {x(oom[0])}, and {x(oom[1])}, ran "
            f"out of memory: with --liger keep the estimate ≥ {LIGER_HEADROOM_GIB:g} GiB below the card "
            f"({ran.cite()}, {', '.join(f'`{r.key}`' for r in oom)})")


LIGER_MEASURED_GAP = _liger_measured_gap()


def liger_chunk_size(tokens: int, hidden_size: int, vocab_size: int) -> int:
    """Rows of logits Liger's fused linear cross-entropy computes at once (liger-kernel 0.8.5,
    ``liger_kernel/ops/fused_linear_cross_entropy.py``, ``fused_linear_cross_entropy_forward`` with its default
    ``chunk_mem_const`` 1): ``inc_factor = ceil(V / H)``, ``chunk = min(next_power_of_2(ceil(BT / inc_factor)),
    BT)``, so that one chunk of logits holds about as many elements as the ``BT × H`` hidden states.

    Args:
        tokens: ``BT``, tokens in the micro batch (micro batch × sequence length).
        hidden_size: ``H``. vocab_size: ``V``.
    """
    inc = -(-vocab_size // hidden_size)
    rows = -(-tokens // inc)
    return min(1 << (rows - 1).bit_length(), tokens)


def liger_flce_bytes(spec, plan: Plan) -> dict[str, float]:
    """GPU bytes of the loss phase with Liger's fused linear cross-entropy (``--liger``), per rank.

    Read from liger-kernel 0.8.5 ``liger_kernel/ops/fused_linear_cross_entropy.py``
    (``fused_linear_cross_entropy_forward``), which computes the loss *and* both gradients in the forward,
    chunk by chunk, and keeps them for backward. With ``BT = b·s`` tokens (the labels are padded, not the
    hidden states cut: ``transformers/model/loss_utils.py``, ``LigerForCausalLMLoss``), ``H`` the hidden
    size, ``V`` the vocabulary, ``p`` bytes per element of the training dtype (2 for bf16/fp16, 4 for fp32):

    * ``grad_input``: ``BT·H·p`` (``torch.zeros_like(_input)``);
    * ``grad_weight``: ``V·H·p`` (``torch.zeros_like(weight)``, the lm_head gradient in the parameter dtype
      when ``accum_dtype`` is None, transformers' call);
    * ``loss_1d``: ``BT·4`` (fp32 per-token losses);
    * ``logits_chunk``: ``chunk·V·p`` with ``chunk`` from :func:`liger_chunk_size` (one chunk alive at a
      time: the kernel writes the gradient into the logits in place, and the chunk is deleted before the next);
    * ``fp32_accumulation``: ``V·H·4`` in fp32 training only, the temporary of liger's fallback accumulation
      (``grad_weight += torch.mm(...).float()``: its bf16/fp16 path on compute capability >= 8 adds in place).

    Measured beside it (``data/reference/h200_levers_2026-12-01.json``, ``liger_probe``): the 3.4B model at
    16/24/32 × 1024 tokens peaked 3.3/4.9/6.6 GiB lower with FLCE than with transformers' loss.

    Returns:
        the five terms above and ``"total"`` (bytes); ``"chunk"`` is the chunk's rows.
    """
    bt, h, v = plan.seq_len * plan.micro_batch, spec.hidden_size, spec.vocab_size
    p = 4 if plan.precision == "fp32" else 2
    chunk = liger_chunk_size(bt, h, v)
    out = {"grad_input": float(bt * h * p), "grad_weight": float(v * h * p), "loss_1d": float(bt * 4),
           "logits_chunk": float(chunk * v * p), "fp32_accumulation": float(v * h * 4 if p == 4 else 0)}
    out["total"] = sum(out.values())
    out["chunk"] = float(chunk)
    return out


def _zero_settings(spec, ds_config: Mapping | None) -> dict[str, float]:
    """Bucket sizes (elements) from a DeepSpeed config, else DeepSpeed's defaults (:data:`DS_DEFAULTS`).

    ``"auto"`` values follow transformers' DeepSpeed integration (docs, "ZeRO-3 config":
    ``reduce_bucket_size = h*h``, ``stage3_prefetch_bucket_size = 0.9*h*h``).
    """
    out = dict(DS_DEFAULTS)
    out["overlap_comm"] = None
    if not ds_config:
        return out
    zero = ds_config.get("zero_optimization", ds_config) or {}
    h = spec.hidden_size
    auto = {"reduce_bucket_size": h * h, "stage3_prefetch_bucket_size": int(0.9 * h * h),
            "allgather_bucket_size": DS_DEFAULTS["allgather_bucket_size"]}
    for key in ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                "stage3_max_live_parameters", "sub_group_size"):
        value = zero.get(key)
        if value is None:
            continue
        if value == "auto":
            value = auto.get(key, DS_DEFAULTS[key])
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise EstimateError(f"ds_config zero_optimization.{key}={value!r}: must be a non-negative number of "
                                "elements or 'auto'")
        out[key] = int(value)
    if "overlap_comm" in zero:
        out["overlap_comm"] = bool(zero["overlap_comm"])
    for sub, prefix in (("offload_param", "offload_param_"), ("offload_optimizer", "offload_optimizer_")):
        block = zero.get(sub) or {}
        for key in ("buffer_count", "buffer_size"):
            if isinstance(block.get(key), (int, float)) and f"{prefix}{key}" in out:
                out[f"{prefix}{key}"] = int(block[key])
    return out


def _sub_groups(part_numels: list[int], sub_group_size: int) -> list[int]:
    """ZeRO-3 optimizer sub-group sizes (elements), as ``stage3.py`` ``_create_fp16_sub_groups`` cuts
    them: parameters are added in order until a group reaches ``sub_group_size``."""
    total = sum(part_numels)
    if not sub_group_size or sub_group_size >= total:
        return [total]
    groups, cur = [], 0
    for n in part_numels:
        cur += n
        if cur >= sub_group_size:
            groups.append(cur)
            cur = 0
    if cur:
        groups.append(cur)
    return groups


def flattens_on_gpu(plan: Plan, param_bytes: float, *, gpu_device_gib: float | None = None) -> bool:
    """Whether DeepSpeed 0.19.8's ZeRO-1/2 optimizer flattens the 16-bit parameters on the GPU (True) or on the CPU.

    Read from ``runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.__init__`` (the loop over
    ``optimizer.param_groups``, "Flattening param group {i} on ..."): after ``empty_cache()`` it compares
    ``accelerator.available_memory()`` — on CUDA the device's free memory as NVML reports it
    (``accelerator/cuda_accelerator.py``, ``available_memory``: ``nvmlDeviceGetMemoryInfo(...).free``) — with the
    bytes of the flat buffer (``aligned_numel × element_size``). Enough: ``flatten_dense_tensors_aligned`` on the
    device while every per-tensor parameter still exists (peak 2·p·N). Not enough: each parameter is first copied
    to the CPU (``param.cpu_data = param.data.cpu()``, ``param.data = torch.empty(1)``), ``empty_cache()`` gives
    their blocks back, the flat buffer is built on the CPU and moved to the device (peak p·N so far; then the
    partition's clone, :func:`zero12_init_peak_bytes`).

    Model: at the check the GPU holds the CUDA context (:data:`CUDA_CONTEXT_GIB`) and the 16-bit parameters
    (``engine.py`` ``_configure_distributed_model``: ``module.to(device)`` before the optimizer is built), nothing
    else; NVML's free memory is the device's memory minus both. On a GPU capped per process
    (``torch.cuda.set_per_process_memory_fraction``, the H200 standing in for a 24 GiB card) NVML sees the whole
    device, so DeepSpeed flattens on the GPU and the cap's 2·p·N decides: pass ``gpu_device_gib``. Measured on one
    H200 (``benchmarks/zero2_init_probe.py``, ``data/reference/h200_zero2_init.json``): with the device filled
    down to a 24 GiB card's NVML view (ballast) LLaMA-7B took the CPU path and the 3.4B shape the GPU path, as
    predicted; NVML read 0.45 GiB less free memory than this model (that device's CUDA context is larger).

    Args:
        plan: its ``gpu_memory_gib`` is the card, unless ``gpu_device_gib`` is given.
        param_bytes: p·N, bytes of the 16-bit parameters on one rank (ZeRO-1/2 keep them all).
        gpu_device_gib: GiB of the physical device when ``plan.gpu_memory_gib`` is a per-process cap; None: the card.
    """
    device = plan.gpu_memory_gib if gpu_device_gib is None else gpu_device_gib
    free = device * GIB - CUDA_CONTEXT_GIB * GIB - param_bytes
    return free >= param_bytes


def zero12_init_peak_bytes(param_bytes: float, world_size: int, flat_on_gpu: bool) -> float:
    """Bytes of GPU memory at the peak of DeepSpeed 0.19.8's ZeRO-0/1/2 optimizer initialisation, on one rank.

    ``runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.__init__``: (1) the flat 16-bit buffer —
    built on the GPU beside the per-tensor parameters (2·p·N, :func:`flattens_on_gpu` True) or on the CPU and
    moved to the GPU after the parameters were freed (p·N); then (2) the fp32 master partition,
    ``parallel_partitioned_bit16_groups[i][partition_id].detach().clone().to(device=self.device, dtype=...)``: the
    clone of this rank's 16-bit partition (p·N / W for W ranks) is made **on the GPU** before it moves to the
    CPU (optimizer offload) or becomes fp32. Peak: max(2·p·N, p·N + p·N/W) on the GPU path, p·N·(1 + 1/W) on
    the CPU path. On one rank both are 2·p·N: ZeRO-2 + optimizer offload of LLaMA-7B (12.55 GiB of bf16
    parameters) cannot initialise on one 24 GiB card whichever path DeepSpeed takes; on 8 ranks the CPU path
    peaks at 14.1 GiB. Measured (``data/reference/h200_zero2_init.json``, one H200 filled down to 24 GiB):
    LLaMA-7B flattened on the CPU and ran out of memory allocating the 12.55 GiB clone with the flat buffer
    resident; the 3.4B shape peaked at 12.81 GiB allocated against 12.76 GiB from this formula.

    Args:
        param_bytes: p·N, bytes of the 16-bit parameters (ZeRO-0/1/2 keep them all on every rank).
        world_size: data-parallel ranks W (ZeRO-0: pass 1).
        flat_on_gpu: :func:`flattens_on_gpu`'s answer.

    Raises:
        ValueError: ``world_size`` below 1.
    """
    if world_size < 1:
        raise ValueError(f"world_size {world_size}: must be at least 1")
    after = param_bytes * (1 + 1 / world_size)
    return max(2 * param_bytes, after) if flat_on_gpu else after


def estimate(plan: Plan, *, bf16_states: bool = False, spec=None, device: str = "cuda",
             ds_config: Mapping | None = None, eager_attention: bool = False,
             nvme_knobs: Mapping | None = None, gpu_device_gib: float | None = None) -> MemoryEstimate:
    """Per-GPU and per-machine host memory of ``plan``, component by component, with verdicts.

    Args:
        plan: the planned run (model, world size, GPU/host memory, ZeRO stage, offload, batch shape).
        bf16_states: keep master weights, gradients and Adam states in bf16 (DeepSpeed 0.19
            ``bf16.bf16_master_weights_and_grads`` + ``bf16.bf16_optimizer_states``); needs bf16.
        spec: a :class:`~cookbook.models.ModelSpec`; default ``model_spec(plan.model)`` (cached).
        device: ``"cuda"`` (a GPU run) or ``"cpu"`` (the CPU rehearsal: every rank's tensors live in
            host RAM, no CUDA context, no pinned memory, no GPU verdict beyond "fits").
        ds_config: a DeepSpeed config dict whose bucket sizes to use (default DeepSpeed's defaults).
        eager_attention: count the attention-score activations (eager attention instead of SDPA).
        nvme_knobs: NVMe host-RAM settings (``sub_group_size``, ``max_in_cpu``, ``pin_memory``) to estimate with;
            None: those :func:`choose_nvme_knobs` picks for this machine — what :func:`cookbook.dsconfig.build_config`
            writes — unless ``ds_config`` is given (its own settings then count).
        gpu_device_gib: GiB of the physical GPU when ``plan.gpu_memory_gib`` is a per-process cap (an H200 capped
            at 24 GiB); decides where ZeRO-1/2 flatten the 16-bit parameters (:func:`flattens_on_gpu`).

    Model states per GPU (bytes; ``g`` world size, ``p``/``m``/``a``/``f`` bytes per parameter of 16-bit
    weights and gradients, master weights, Adam states, fp32-gradient partition — 2/4/8/4 in mixed
    precision; ZeRO paper Section 3 and DeepSpeed's estimators in stage_1_and_2.py / stage3.py):

    ========  ==================================  ===========================================
    stage     on GPU                               offloaded (host, per machine of r ranks)
    ========  ==================================  ===========================================
    0         p·N + p·N + m·N + a·N + f·N          —
    1         p·N + p·N + (m+a+f)·N/g              (m+a+f)·N / n   with optimizer offload
    2         p·N + (p+m+a+f)·N/g                  (m+a+f)·N / n   with optimizer offload
    3         (p+m+a+f)·N/g + 4·L                  p·N/n with parameter offload
    ========  ==================================  ===========================================

    These are exactly DeepSpeed's estimator numbers (:attr:`MemoryEstimate.gpu_model_states_gib`,
    :attr:`MemoryEstimate.host_model_states_gib`, the latter with its ``additional_buffer_factor``
    1.5 and each rank's fp32 load copy). The *peaks* (``gpu_gib["total"]``, ``host_gib["total"]``)
    add what the run really allocates; each term names its source:

    GPU, allocated (``torch.cuda.max_memory_allocated``) = max(initialisation, training):

    * initialisation, ZeRO-1/2: ``2·p·N`` when DeepSpeed flattens the 16-bit parameters into one buffer
      *on the device* while the per-tensor parameters still exist ("Flattening param group on cuda
      (sufficient memory)"), ``p·N`` when it flattens on the CPU because the device's free memory is below
      p·N (:func:`flattens_on_gpu`, with the lines of ``stage_1_and_2.py`` it reads). So the flattening
      alone never rules ZeRO-1/2 out on a real card: it takes the CPU path when 2·p·N does not fit (then
      the host holds 2·p·N per rank for a moment: ``param.cpu_data`` and the flat CPU buffer). Measured on
      the capped H200, which always takes the device path: 12.8 GiB allocated = 2·p·N for the 3.43e9
      model on 1 and on 2 ranks; the 6.74e9 model's ZeRO-2 OOM "tried to allocate 12.55 GiB" = p·N.
      ZeRO-0 (no ZeRO optimizer) is kept at ``2·p·N``.
    * training: model states + activations (:func:`activation_bytes`: checkpoints + the larger of
      the loss phase and one layer's recompute) + buckets + ZeRO-3 prefetch/live parameters + with
      optimizer offload and gradient accumulation, this rank's 16-bit gradients, which stay on the
      GPU between micro-steps (``async_accumulate_grad_in_cpu_via_gpu`` keeps ``param.grad``).

    GPU, reserved (``max_memory_reserved``) = max(initialisation, training × (1 + f) + stale):
    ``stale`` = p·N for ZeRO-0/1/2 flattened on the device, the per-tensor parameter blocks freed by the
    flattening above, which stay in PyTorch's cache (no ``empty_cache`` follows; on the CPU path
    ``empty_cache()`` runs after the parameters leave the device, so nothing stale); ``f`` = :data:`FRAGMENTATION`
    (fitted to the measured calibration, see there).

    Host peak, per machine = runtime per rank + max(model load, training): training holds the
    offloaded states at their real sizes plus DeepSpeed's pinned staging buffers, each pinned buffer
    rounded up to a power of two by PyTorch's host allocator (:func:`_pow2`). Per rank, ``P = N/g``:

    * ZeRO-1/2 + optimizer offload (``stage_1_and_2.py``): pinned master weights ``m·P``, pinned fp32
      gradient partition ``f·P``, pinned 16-bit parameter buffer ``p·P``
      (``param_buffer_of_bit16_for_cpu_offload_groups``), pinned largest-parameter gradient buffer,
      unpinned Adam m, v ``a·P`` (``DeepSpeedCPUAdam``: ``zeros_like``); with gradient accumulation
      and fp32 master weights, one pinned 16-bit buffer per parameter (``accumulated_grads_in_cpu``).
    * ZeRO-3 + optimizer offload (``stage3.py``): unpinned master weights and Adam m, v, one pinned
      gradient buffer per optimizer sub-group (``sub_group_size``), the pinned flat 16-bit gradient
      buffer ``grad_partitions_flat_buffer`` (gradient accumulation dtype = the model's);
      with parameter offload also the pinned flat 16-bit parameter buffer and the per-parameter pinned
      partitions made by ``zero.Init`` (freed into the pinned cache after defragmentation).
    * ZenFlow with ``overlap_step`` (``zero_optimization.zenflow.overlap_step: true`` in ``ds_config``, DeepSpeed
      0.19.8 ``runtime/zenflow/zenflow_utils.py`` ``start_optimizer_process`` / ``zenflow_optimizer_process`` and
      ``zenflow_stage_1_and_2.py`` ``ZenFlowZeroOptimizerParallel.initialize_optimizer_states``; ZeRO-3:
      ``engine_stage3.py``): a second fp32 gradient buffer ``f·P`` (``overlap_grad`` is ``[buffer, buffer.clone()]``),
      a stale copy of the master weights ``m·P`` (``stale_param``), and the optimizer process's double-buffered Adam
      m, v (``exp_avg0/1``, ``exp_avg_sq0/1``: ``a·P`` more than DeepSpeedCPUAdam's), plus that process's runtime
      (:data:`RUNTIME_BASELINE_GIB`; it runs with the accelerator disabled): 16 more bytes per parameter with fp32
      states. Without ``overlap_step`` ZenFlow steps in-process on the usual offloaded states (no host term). The
      selective optimizer's GPU states of the top-k columns are not counted.
    * model load (ZeRO-0/1/2 with a checkpoint): ``p·N`` per rank, the weights read on the CPU in the
      training dtype before DeepSpeed moves them. Under ``zero.Init`` (ZeRO-3) weights are built
      partitioned, so no full copy exists; DeepSpeed's estimator counts a 4-byte copy and a 1.5
      factor there, which :attr:`~MemoryEstimate.host_model_states_gib` keeps but the peak does not.

    Returns:
        a :class:`MemoryEstimate`.

    Raises:
        EstimateError: ``device`` not cpu/cuda, or bf16_states with a non-bf16 precision.
        cookbook.models.ModelNotFoundError: the model cannot be found locally.
    """
    if device not in ("cuda", "cpu"):
        raise EstimateError(f"device={device!r}: use 'cuda' for a GPU run or 'cpu' for the CPU rehearsal")
    if not isinstance(plan, Plan):
        raise EstimateError(f"plan={plan!r}: pass a cookbook.plan.Plan (Plan(model='qwen-14b', num_gpus=8, ...))")
    if spec is None:
        from .models import model_spec
        spec = model_spec(plan.model)
    B = _bytes_per_state(plan.precision, bf16_states)
    N, L = int(spec.num_params), int(spec.largest_layer_params)
    g, n = plan.num_gpus, plan.num_machines
    r = g // n
    stage = plan.zero_stage
    opt_off, par_off = plan.offload_optimizer, plan.offload_param
    if stage < 3 and opt_off == "nvme":
        # ZeRO-1/2 never swap: device nvme takes the CPU-offload path (stage_1_and_2.py: cpu_offload =
        # device != none; swapping exists only in stage3.py::_configure_tensor_swapping)
        opt_off = "cpu"
    zs = _zero_settings(spec, ds_config)
    flat_on_gpu = stage == 0 or (stage < 3 and flattens_on_gpu(plan, B["param"] * N, gpu_device_gib=gpu_device_gib))
    overlap = zs["overlap_comm"] if zs["overlap_comm"] is not None else stage == 3  # DeepSpeed default
    cuda = device == "cuda"
    reasons: list[str] = []

    # ---- model states on the GPU (bytes) -----------------------------------------------------
    opt_bytes = {"master_fp32": B["master"], "adam_states": B["adam"], "grads_fp32": B["grad_fp32"]}
    gpu: dict[str, float] = dict.fromkeys(GPU_COMPONENTS, 0.0)
    host: dict[str, float] = dict.fromkeys(HOST_COMPONENTS, 0.0)
    opt_div = 1 if stage == 0 else g
    mixed = plan.precision != "fp32"
    if stage < 3:
        gpu["params_16bit"] = B["param"] * N
        # stage 2 partitions the 16-bit gradients; with optimizer offload DeepSpeed's estimator keeps
        # only the 16-bit parameters on the GPU (gradients go to host; see grad_staging)
        gpu["grads_16bit"] = 0.0 if (stage == 2 and opt_off != "none") else B["grad"] * N / (g if stage == 2 else 1)
    else:
        gpu["largest_layer"] = 4 * L  # gathered 16-bit params + grads of the largest layer (stage3.py)
        if par_off == "none":
            gpu["params_16bit"] = B["param"] * N / g
        if not mixed and opt_off == "none":
            gpu["grads_16bit"] = B["grad"] * N / g  # mixed precision: DeepSpeed counts the fp32 partition only
    if opt_off == "none":
        for k, v in opt_bytes.items():
            gpu[k] += v * N / opt_div
    ds_gpu_states = sum(gpu[k] for k in MODEL_STATE_KEYS)

    # ---- activations, staging, buckets ---------------------------------------------------------
    act = activation_bytes(spec, plan, eager_attention=eager_attention)
    gpu["activations"] = act["total"]
    if stage in (1, 2) and opt_off != "none" and plan.grad_accum > 1:
        # between micro-steps DeepSpeed keeps this rank's 16-bit gradients on the GPU and adds the
        # CPU-accumulated sum back into them (stage_1_and_2.py, async_accumulate_grad_in_cpu_via_gpu:
        # param.grad is cleared only at the accumulation boundary, async_inplace_copy_grad_to_fp32_...)
        gpu["grad_staging"] = B["grad"] * N / g
    if stage > 0:
        cbytes = 2 if mixed else 4
        nbuf = 2 if (overlap and stage < 3) else 1
        gpu["comm_buckets"] = nbuf * min(zs["reduce_bucket_size"], N) * cbytes
        if stage < 3 and g > 1:
            gpu["comm_buckets"] += min(zs["allgather_bucket_size"], N) * cbytes
        if stage == 3 and (g > 1 or par_off != "none"):
            # gathered parameters: the prefetch bucket + up to stage3_max_live_parameters (stage3.py,
            # partitioned_param_coordinator.py). On one rank without parameter offload the partition
            # is the whole tensor and nothing is gathered (measured: 0.1 GiB beyond the other terms,
            # ladder-z3-offopt in data/calibration/h200x2_2026-11-30.json).
            gpu["prefetch_buffers"] = (min(zs["stage3_prefetch_bucket_size"], N)
                                       + min(zs["stage3_max_live_parameters"], N)) * cbytes
    train = sum(gpu.values())
    tensors = train
    if cuda:
        # initialisation peak of ZeRO-0/1/2: the flat 16-bit buffer, then the GPU clone of this rank's partition
        # (zero12_init_peak_bytes; stage_1_and_2.py)
        init = zero12_init_peak_bytes(B["param"] * N, 1 if stage == 0 else g, flat_on_gpu) if stage < 3 else 0.0
        stale = B["param"] * N if (stage < 3 and flat_on_gpu) else 0.0
        gpu["init_excess"] = max(0.0, init - train)
        frag = FRAGMENTATION[_fragmentation_key(stage, par_off)] * gpu["activations"]
        if stage == 3 and (g > 1 or par_off != "none"):
            frag += FETCH_FRAGMENTATION_LAYERS * B["param"] * _layer_numel(spec)
        reserved = max(init, train + frag + stale)
        gpu["allocator_overhead"] = reserved - max(init, train)
        gpu["cuda_context"] = CUDA_CONTEXT_GIB * GIB

    # ---- host, per machine (bytes) ------------------------------------------------------------
    P = N / g  # this rank's partition (elements)
    mw = B["master"] or B["param"]      # fp32 training: the "master" copy is the fp32 parameter itself
    gw = B["grad_fp32"] or B["grad"]
    pin = _pow2 if cuda else float       # no pinned memory (and no rounding) on the CPU accelerator
    numels = _tensor_numels(spec)
    nvme = 0.0
    states = 0.0     # offloaded states at their exact sizes, per rank
    staging = 0.0    # DeepSpeed's pinned staging buffers beyond the states, per rank (exact sizes)
    pinned_exact = 0.0
    pinned_real = 0.0

    def pinned(nbytes: float, *, state: bool) -> None:
        nonlocal states, staging, pinned_exact, pinned_real
        if state:
            states += nbytes
        else:
            staging += nbytes
        pinned_exact += nbytes
        pinned_real += pin(nbytes)

    if opt_off == "cpu":
        host["adam_states"] = B["adam"] * P * r            # unpinned (DeepSpeedCPUAdam zeros_like)
        states += B["adam"] * P
        if stage < 3:
            pinned(mw * P, state=True)                      # single_partition_of_fp32_groups (pinned)
            pinned(gw * P, state=True)                      # its .grad (pinned)
            pinned(B["param"] * P, state=False)             # param_buffer_of_bit16_for_cpu_offload_groups
            pinned(B["param"] * max(numels), state=False)   # temp_grad_buffer_for_cpu_offload
            if plan.grad_accum > 1 and B["master"] == 4:
                for k in numels:                            # accumulated_grads_in_cpu, one per parameter
                    pinned(B["param"] * k / g, state=False)
        else:
            states += mw * P                                # fp32_partitioned_groups_flat (unpinned)
            for sg in _sub_groups([math.ceil(k / g) for k in numels], zs["sub_group_size"]):
                pinned(gw * sg, state=True)                 # per-sub-group gradient buffer (pinned)
            pinned(B["param"] * P, state=False)             # grad_partitions_flat_buffer (pinned)
        host["master_fp32"] = mw * P * r
        host["grads_fp32"] = gw * P * r
    if par_off == "cpu":
        pinned(B["param"] * P, state=True)                  # param_groups_fp16_flat_cpu_memory (pinned)
        for k in numels:                                    # zero.Init partitions, cached after defrag
            pinned(B["param"] * math.ceil(k / g), state=False)
        host["params_16bit"] = B["param"] * P * r
    nvme_est = None
    if "nvme" in (opt_off, par_off):
        # NVMe offload: DeepSpeed's swap buffers, staging and flat buffers, term by term (cookbook/nvme.py)
        from .nvme import estimate_nvme
        if nvme_knobs is None and ds_config is None and stage == 3:
            nvme_knobs = choose_nvme_knobs(plan, spec=spec, bf16_states=bf16_states, device=device).knobs
        nvme_est = estimate_nvme(plan.replace(offload_optimizer=opt_off), spec=spec, ds_config=ds_config,
                                 bf16_states=bf16_states, device=device, knobs=nvme_knobs)
        nvme = nvme_est.disk_bytes
        host["nvme_buffers"] = nvme_est.host_bytes
        host["nvme_transient"] = nvme_est.transient_per_rank * r
    if opt_off == "cpu" and zenflow_overlap_step(ds_config):
        host["zenflow"] = (gw + mw + B["adam"]) * P * r + RUNTIME_BASELINE_GIB * GIB * r
    host["pinned_staging"] = staging * r
    host["pinned_rounding"] = (pinned_real - pinned_exact) * r
    training_host = ((states + staging) * r + host["pinned_rounding"] + host["nvme_buffers"] + host["nvme_transient"]
                     + host.get("zenflow", 0.0))
    if device == "cpu":
        host["ranks_on_cpu"] = tensors * r
        training_host += tensors * r
        gpu = dict.fromkeys(gpu, 0.0)
    load = B["param"] * N * r if (stage < 3 and getattr(spec, "has_weights", True)) else 0.0
    if cuda and stage in (1, 2) and not flat_on_gpu:
        load = 2 * B["param"] * N * r  # CPU flattening: every param.cpu_data and the flat CPU buffer at once
    host["model_load"] = max(0.0, load - training_host)
    host["runtime"] = host_runtime_gib(cuda=cuda, nvme=nvme_est is not None) * GIB * r

    # DeepSpeed's own host estimate: offloaded states or each rank's fp32 copy at load, × 1.5
    ds_offloaded = sum(opt_bytes.values()) * N / n if opt_off == "cpu" else 0.0
    if opt_off == "cpu" and not mixed:
        ds_offloaded += B["grad"] * N / n
    if par_off == "cpu":
        ds_offloaded += B["param"] * N / n
    ds_load = (4 * N if stage < 3 else (4 * L if (opt_off == "none" and par_off == "none") else 0)) * r
    ds_host_no_factor = max(ds_offloaded, ds_load)

    gpu_gib = {k: v / GIB for k, v in gpu.items()}
    host_gib = {k: v / GIB for k, v in host.items()}
    gpu_gib["total"] = sum(gpu_gib.values())
    host_gib["total"] = sum(host_gib.values())
    fits_gpu = gpu_gib["total"] <= plan.gpu_memory_gib
    fits_host = None if plan.host_memory_gib is None else host_gib["total"] <= plan.host_memory_gib

    # ---- reasons --------------------------------------------------------------------------------
    if cuda:
        big_key = max(MODEL_STATE_KEYS, key=lambda k: gpu_gib[k])
        init_gib = init / GIB
        # the batch-independent floor: everything but activations, with allocator cache and context
        fixed = max(init_gib, (train - gpu["activations"]) / GIB + stale / GIB) + CUDA_CONTEXT_GIB
        if not fits_gpu:
            if gpu_gib[big_key] > plan.gpu_memory_gib:
                reasons.append(f"GPU: the {GPU_COMPONENTS[big_key]} alone are {gpu_gib[big_key]:.1f} GiB per GPU "
                               f"> {plan.gpu_memory_gib:g} GiB, whatever the batch size")
            elif fixed > plan.gpu_memory_gib:
                what = (("the flat copy DeepSpeed makes of the 16-bit parameters at initialisation (on the device: "
                         "gpu_device_gib says its free memory allows it)" if flat_on_gpu else
                         "the 16-bit parameters at initialisation (DeepSpeed flattens them on the CPU, moves the flat "
                         "buffer to the GPU, then clones this rank's partition there: "
                         f"{(1 + 1 / max(1, plan.num_gpus if stage else 1)):g} × the parameters; "
                         "more GPUs make the clone smaller)")
                        if init_gib + CUDA_CONTEXT_GIB > plan.gpu_memory_gib else
                        "model states, buckets, gradient staging and allocator cache")
                reasons.append(f"GPU: {what} need {fixed:.1f} GiB per GPU > {plan.gpu_memory_gib:g} GiB before any "
                               "activation, whatever the batch size")
            else:
                levers = ([f"--micro-batch {plan.micro_batch}"] if plan.micro_batch > 1 else []) + [f"--seq-len {plan.seq_len}"]
                reasons.append(f"GPU: {gpu_gib['total']:.1f} GiB > {plan.gpu_memory_gib:g} GiB; activations are "
                               f"{gpu_gib['activations']:.1f} GiB: lower " + " or ".join(levers)
                               + ("" if plan.gradient_checkpointing else " or turn on --gradient-checkpointing"))
        else:
            reasons.append(f"GPU: {gpu_gib['total']:.1f} GiB of {plan.gpu_memory_gib:g} GiB "
                           f"({plan.gpu_memory_gib - gpu_gib['total']:.1f} GiB left); largest part: "
                           f"{GPU_COMPONENTS[max(gpu_gib, key=lambda k: gpu_gib[k] if k != 'total' else -1)]}")
    # the terms that make the total, largest first, zeros left out (an NVMe plan's are its swap buffers)
    parts = [("offloaded states", (states * r) / GIB), ("DeepSpeed's pinned staging", host_gib["pinned_staging"]),
             ("ZenFlow's overlapped step: 2nd fp32 gradient buffer, stale weights, its process's own Adam m, v "
              "and runtime", host_gib.get("zenflow", 0.0)),
             ("power-of-two rounding of pinned buffers", host_gib["pinned_rounding"]),
             ("NVMe swap buffers, staging and flat buffers", host_gib.get("nvme_buffers", 0.0)),
             ("NVMe transient buffers", host_gib.get("nvme_transient", 0.0))]
    parts = [f"{name} {v:.1f} GiB" for name, v in sorted(parts, key=lambda p: -p[1]) if v >= 0.05]
    ds_gib = (ds_host_no_factor / GIB, ADDITIONAL_BUFFER_FACTOR * ds_host_no_factor / GIB)
    if ds_host_no_factor <= 0:
        ds_line = "DeepSpeed's estimator counts no host model states for this variant"
    elif plan.offload_optimizer == "none" and plan.offload_param == "none":  # its cpu_mem without offload: each rank's fp32 copy at load
        ds_line = (f"DeepSpeed's estimator (cpu_mem: every rank's fp32 copy while loading) says {ds_gib[0]:.1f} GiB, "
                   f"{ds_gib[1]:.1f} GiB with its 1.5× buffer factor — a loading bound, not this variant's training "
                   "peak, which the estimate above counts (calibrated on measured host peaks, docs/benchmarks.md §6)")
    else:
        ds_line = (f"DeepSpeed's estimator says {ds_gib[0]:.1f} GiB of model states, {ds_gib[1]:.1f} GiB with its "
                   "1.5× buffer factor")
    over = f" > {plan.host_memory_gib:g} GiB" if fits_host is False else ""
    reasons.append(f"host{' does not fit' if fits_host is False else ''}: {host_gib['total']:.1f} GiB{over} per "
                   "machine at peak" + (f" ({', '.join(parts)})" if parts else "") + f"; {ds_line}")
    nvme_dict = None
    if nvme_est is not None:
        from .nvme import recorded_bandwidth
        bw = recorded_bandwidth(plan.nvme_path, (ds_config or {}).get("aio"))
        reasons.extend(nvme_est.lines(bw))
        nvme_dict = nvme_est.to_dict(bw)
    elif plan.offload_optimizer == "nvme":
        reasons.append(f"ZeRO-{stage} does not swap to NVMe: with offload_optimizer.device nvme DeepSpeed takes its "
                       "CPU-offload path (stage_1_and_2.py) and the states above stay in host RAM; NVMe needs ZeRO-3")
    if not mixed:
        reasons.append("fp32 training: the '16-bit' parameter and gradient rows hold fp32 tensors (4 bytes each)")
    if bf16_states:
        reasons.append("bf16 states: master weights, gradients and Adam m, v in bf16 (half the host RAM; "
                       f"updates below ~0.4% of a weight rounded away: +{BF16_STATES_LOSS_INCREASE_PCT:.0f}% loss "
                       "measured from random initialisation over 150 steps, evidence bf16_states.loss_gap)")
    if plan.liger:
        reasons.append(f"Liger fused linear cross-entropy (--liger): the loss phase holds {act['logits'] / GIB:.2f} "
                       f"GiB instead of {12.0 * plan.micro_batch * plan.seq_len * spec.vocab_size / GIB:.2f} GiB of "
                       "fp32 logits (needs an NVIDIA GPU and liger-kernel). " + LIGER_MEASURED_GAP)
        left = plan.gpu_memory_gib - gpu_gib["total"]
        if fits_gpu and left < LIGER_HEADROOM_GIB:
            reasons.append(f"WARNING (--liger): only {left:.1f} GiB left below the card, less than the "
                           f"{LIGER_HEADROOM_GIB:g} GiB the measured sdpa runs that fit kept: expect out of memory "
                           "with sdpa; lower --micro-batch. With flex attention (--attention flex; auto on a GPU with "
                           "packed rows) the 3.4B recipe's micro batch 32 fit at 0.4 GiB left in this estimate "
                           "(evidence recipe.flex_liger_micro32): at the edge, not beyond it")

    return MemoryEstimate(params=N, plan=plan, gpu_gib=gpu_gib, host_gib=host_gib, fits_gpu=bool(fits_gpu),
                          fits_host=fits_host, reasons=tuple(reasons), largest_layer_params=L,
                          bf16_states=bool(bf16_states), device=device, nvme_gib=nvme / GIB, nvme=nvme_dict,
                          ds_gpu_model_states_gib=ds_gpu_states / GIB, ds_host_model_states_gib=(
                              ADDITIONAL_BUFFER_FACTOR * ds_host_no_factor / GIB))


# --------------------------------------------------------------------------------------------
# headroom: the estimate plus its measured error band

#: Where the estimator's measured error bands live: written by ``python -m benchmarks.calibration --write-bands``
#: from the calibration records (``data/calibration/*.json``, fitting and held-out sets together).
ERROR_BANDS_FILE = Path(__file__).resolve().parent.parent / "data" / "estimate_error_bands.json"

#: The three statuses of a variant (:func:`headroom`).
FITS, AT_EDGE, NO_FIT = "fits", "at the edge", "does not fit"


@dataclass(frozen=True)
class ErrorBand:
    """How far the estimate of one quantity fell below a measurement, at worst.

    Attributes:
        quantity: ``gpu_reserved`` (``torch.cuda.max_memory_reserved``) or ``host_rss`` (peak RSS of a machine's ranks).
        fraction: max over the calibration points of ``(measured − estimate) / estimate``, at least 0: the margin
            an estimate needs so that every measured run of the records would have fitted (a reserved peak read at
            the GPU cap counts with the cap, a lower bound of the real peak).
        point: the calibration point that sets it; ``set``: its set (``fit`` or ``held_out``); ``points``: how
            many points were compared.
    """

    quantity: str
    fraction: float
    point: str = ""
    set: str = ""
    points: int = 0

    def __str__(self) -> str:
        return f"+{100 * self.fraction:.0f} % (worst of {self.points} measured runs: {self.point}, {self.set.replace('_', '-')})"


@functools.lru_cache(maxsize=4)
def error_bands(path: str | None = None) -> dict[str, dict[str, ErrorBand]]:
    """The estimator's measured error bands, ``{quantity: {family: ErrorBand}}``, from :data:`ERROR_BANDS_FILE` (or
    ``path``). Quantities ``gpu_reserved``, ``host_rss``; families the estimator's fragmentation keys
    (:func:`_fragmentation_key`: ``zero012``, ``zero3``, ``zero3_param_offload``) and ``all`` (every point).

    Raises:
        EstimateError: the file is missing or lacks a quantity (regenerate it with
            ``python -m benchmarks.calibration --write-bands``).
    """
    f = Path(path) if path else ERROR_BANDS_FILE
    try:
        data = json.loads(f.read_text())["bands"]
        return {q: {fam: ErrorBand(quantity=q, **{k: v[k] for k in ("fraction", "point", "set", "points")})
                    for fam, v in data[q].items()} for q in ("gpu_reserved", "host_rss")}
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise EstimateError(f"error bands {f}: {exc!r}; regenerate with `python -m benchmarks.calibration "
                            "--write-bands`") from None


def error_band(quantity: str, plan: Plan, bands=None) -> ErrorBand:
    """The band of ``quantity`` for ``plan``'s variant family (:func:`_fragmentation_key` of its ZeRO stage and
    parameter offload), else the band over every point (``all``)."""
    b = (bands or error_bands())[quantity]
    return b.get(_fragmentation_key(plan.zero_stage, plan.offload_param)) or b["all"]


@dataclass(frozen=True)
class Headroom:
    """A variant's status once the estimator's measured error is added (:func:`headroom`).

    Attributes:
        status: :data:`FITS` (estimate + band fits GPU and host), :data:`AT_EDGE` (the estimate fits, estimate +
            band does not), :data:`NO_FIT` (the estimate itself does not fit).
        gpu_need_gib: GPU reserved × (1 + GPU band) + CUDA context, GiB per GPU (None on the CPU rehearsal).
        host_need_gib: host peak × (1 + host band), GiB per machine.
        why: one sentence: which quantity is at the edge or over, with the band and the point that sets it.
    """

    status: str
    gpu_need_gib: float | None
    host_need_gib: float
    why: str

    def to_dict(self) -> dict:
        return {"status": self.status, "gpu_need_gib": None if self.gpu_need_gib is None else round(self.gpu_need_gib, 2),
                "host_need_gib": round(self.host_need_gib, 2), "why": self.why}


def headroom(e: "MemoryEstimate", bands: Mapping[str, ErrorBand] | None = None) -> Headroom:
    """The status of estimate ``e`` with the estimator's measured error band per quantity, for its variant family
    (:func:`error_band`: the worst measured under-estimate of runs of the same ZeRO stage and parameter offload).

    GPU: ``reserved × (1 + band_gpu) + CUDA context <= gpu_memory_gib`` (the band is measured on the reserved peak,
    which the context is not part of); host: ``host peak × (1 + band_host) <= host_memory_gib`` (an unknown host
    RAM counts as room, and ``why`` says so). Estimate within the card but estimate + band not: :data:`AT_EDGE`.
    Units: GiB (2**30 bytes) throughout.

    Raises:
        EstimateError: the error bands file is missing or malformed (:func:`error_bands`).
    """
    p = e.plan
    gpu_band, host_band = error_band("gpu_reserved", p, bands), error_band("host_rss", p, bands)
    gpu_need = None if e.device == "cpu" else e.gpu_reserved_gib * (1 + gpu_band.fraction) + e.gpu_gib.get("cuda_context", 0.0)
    host_need = e.host_gib["total"] * (1 + host_band.fraction)
    if not e.fits:
        over = ([f"GPU {e.gpu_gib['total']:.1f} > {p.gpu_memory_gib:g} GiB"] if not e.fits_gpu else []) + \
            ([f"host {e.host_gib['total']:.1f} > {p.host_memory_gib:g} GiB"] if e.fits_host is False else [])
        return Headroom(NO_FIT, gpu_need, host_need, "the estimate does not fit: " + ", ".join(over))
    edge = []
    if gpu_need is not None and gpu_need > p.gpu_memory_gib:
        edge.append(f"GPU {e.gpu_gib['total']:.1f} GiB, {gpu_need:.1f} with the estimator's measured error on GPU "
                    f"reserved {gpu_band} > {p.gpu_memory_gib:g} GiB")
    if p.host_memory_gib is not None and host_need > p.host_memory_gib:
        edge.append(f"host {e.host_gib['total']:.1f} GiB, {host_need:.1f} with the measured error on host RSS "
                    f"{host_band} > {p.host_memory_gib:g} GiB")
    if edge:
        return Headroom(AT_EDGE, gpu_need, host_need, "at the edge: " + "; ".join(edge))
    room = ([f"GPU {gpu_need:.1f} of {p.gpu_memory_gib:g} GiB"] if gpu_need is not None else []) + \
        [f"host {host_need:.1f} of {p.host_memory_gib:g} GiB" if p.host_memory_gib is not None
         else f"host {host_need:.1f} GiB (host RAM not given)"]
    return Headroom(FITS, gpu_need, host_need, "room with the measured error added: " + ", ".join(room))


# --------------------------------------------------------------------------------------------
# NVMe offload: DeepSpeed's host-RAM knobs sized for the machine

#: ``sub_group_size`` values tried for NVMe offload, DeepSpeed's default (``runtime/zero/config.py``, 1e9) first.
NVME_SUB_GROUP_SIZES = (10 ** 9, 5 * 10 ** 8, 2 * 10 ** 8, 10 ** 8)


@dataclass(frozen=True)
class NvmeKnobs:
    """NVMe host-RAM settings for one plan (:func:`choose_nvme_knobs`).

    Attributes:
        knobs: ``{"sub_group_size", "max_in_cpu", "pin_memory"}`` (DeepSpeed's names; :func:`cookbook.dsconfig.build_config`
            writes them into ``zero_optimization`` and its offload blocks).
        host_gib: the estimated host peak per machine with them, GiB.
        tried: ``(knobs, host_gib)`` for each setting tried, in order.
        why: one sentence: why these (DeepSpeed's defaults, or which fit the host RAM).
    """

    knobs: Mapping[str, Any]
    host_gib: float
    tried: tuple = ()
    why: str = ""


def _nvme_default_knobs() -> dict:
    return {"sub_group_size": DS_DEFAULTS["sub_group_size"], "max_in_cpu": 10 ** 9, "pin_memory": True}


def choose_nvme_knobs(plan: Plan, *, spec=None, bf16_states: bool = False, device: str = "cuda") -> NvmeKnobs:
    """DeepSpeed's host-RAM knobs for NVMe offload on ``plan``'s machine: its defaults when they fit the host RAM with
    the estimator's measured error band (:func:`headroom`) or the host RAM is not given; otherwise the first setting,
    in this order, that does: ``sub_group_size`` lowered through :data:`NVME_SUB_GROUP_SIZES`, then also
    ``offload_param.max_in_cpu`` 0, then also ``pin_memory`` false; none fits: the one with the least host RAM.

    What each knob holds, read from DeepSpeed 0.19.8 (every term in :func:`cookbook.nvme.estimate_nvme`):

    * ``sub_group_size`` (``runtime/zero/stage3.py``, ``_create_fp16_sub_groups``: parameters in order until a
      group reaches it): the optimizer swapper's pinned buffers are ``offload_optimizer.buffer_count`` × the
      largest sub-group in fp32 (``swap_tensor/optimizer_utils.py``, ``OptimizerSwapper.__init__``:
      ``SwapBufferManager(num_elems=largest_numel, count=buffer_count)``), the 16-bit swap-out staging holds the
      largest sub-group's parameters, and the first step creates Adam m, v of one sub-group unpinned. All three
      scale with it; the SSD bytes do not. (Below ~1e8 the parameter tensors set the group sizes and the RAM stops
      falling: Qwen-14B on 8 ranks 105.1 GiB at 1e8, 106.1 at 5e7.)
    * ``offload_optimizer.buffer_count`` is left at DeepSpeed's 4: ``swap_tensor/partitioned_optimizer_swapper.py``
      (``swap_in_optimizer_state``) takes ``num_tensors() + 1`` buffers at once — master weights, Adam m, v and the
      gradients — so fewer cannot run.
    * ``offload_param.max_in_cpu`` (``stage3.py``, ``_create_param_groups_fp16_flat_cpu_memory``): a pinned 16-bit
      buffer of min(partition, max_in_cpu) elements per rank; 0 drops it (those sub-groups then go to the SSD).
    * ``pin_memory`` (both offload blocks): the flat buffers become pageable (no power-of-two rounding of PyTorch's
      pinned allocator; the aio swap buffers stay locked); measured 3.0× slower with CPU offload
      (``cookbook.dsconfig.PIN_MEMORY_OFF_COST``), hence last.

    Returns:
        :class:`NvmeKnobs`.

    Raises:
        EstimateError / ModelNotFoundError: as :func:`estimate`.
    """
    default = _nvme_default_knobs()
    tried = []

    def host_of(knobs):
        e = estimate(plan, bf16_states=bf16_states, spec=spec, device=device, nvme_knobs=knobs)
        tried.append((dict(knobs), e.host_gib["total"]))
        return e

    first = host_of(default)
    if plan.host_memory_gib is None:
        return NvmeKnobs(default, first.host_gib["total"], tuple(tried),
                         "DeepSpeed's defaults (host RAM not given: nothing to size them against)")
    if headroom(first).status == FITS or plan.zero_stage < 3:
        return NvmeKnobs(default, first.host_gib["total"], tuple(tried), "DeepSpeed's defaults fit the host RAM")
    ladder = [dict(default, sub_group_size=s) for s in NVME_SUB_GROUP_SIZES[1:]]
    ladder += [dict(default, sub_group_size=s, max_in_cpu=0) for s in NVME_SUB_GROUP_SIZES]
    ladder += [dict(default, sub_group_size=s, max_in_cpu=0, pin_memory=False) for s in NVME_SUB_GROUP_SIZES]
    if plan.offload_param != "nvme":  # max_in_cpu is a parameter-offload knob
        ladder = [k for k in ladder if k["max_in_cpu"] == default["max_in_cpu"]] + \
            [dict(k, max_in_cpu=default["max_in_cpu"]) for k in ladder if not k["pin_memory"]]
    for knobs in ladder:
        e = host_of(knobs)
        if headroom(e).status == FITS:
            return NvmeKnobs(knobs, e.host_gib["total"], tuple(tried),
                             f"DeepSpeed's defaults need {first.host_gib['total']:.1f} GiB of host RAM here; "
                             f"{_knob_words(knobs)} needs {e.host_gib['total']:.1f} GiB, room on "
                             f"{plan.host_memory_gib:g} GiB")
    knobs, host = min(tried, key=lambda t: t[1])
    return NvmeKnobs(knobs, host, tuple(tried), f"no setting tried leaves room on {plan.host_memory_gib:g} GiB; "
                     f"{_knob_words(knobs)} needs the least host RAM, {host:.1f} GiB")


def _knob_words(knobs: Mapping[str, Any]) -> str:
    """``sub_group_size 1e8, max_in_cpu 0, pin_memory false`` (only what differs from DeepSpeed's defaults)."""
    d = _nvme_default_knobs()
    parts = [f"{k} {_sci(v) if not isinstance(v, bool) else str(v).lower()}" for k, v in knobs.items() if v != d[k]]
    return ", ".join(parts) or "DeepSpeed's defaults"


def _sci(n: int) -> str:
    """1e8, 5e8, 0."""
    if not n:
        return "0"
    m, e = f"{n:.0e}".split("e")
    return f"{m}e{int(e)}"


def estimate_host_rss_cpu_run(plan: Plan, *, bf16_states: bool = False) -> float:
    """Predicted peak host RSS (GiB, sum over the machine's ranks) of a CPU-rehearsal run of ``plan``.

    Same as ``estimate(plan, device="cpu").host_gib["total"]``: each rank's tensors in host RAM plus
    offloaded states plus :data:`CPU_RUNTIME_BASELINE_GIB` per rank (measured calibration).
    """
    return estimate(plan, bf16_states=bf16_states, device="cpu").host_gib["total"]


#: The columns of ``cookbook estimate --sweep``'s table that need a word (printed under it).
SWEEP_LEGEND = ("GiB per GPU and per machine (host); host states ×1.5: DeepSpeed's own estimator's host model states "
                "with its 1.5× buffer factor (estimate_zero3_model_states_mem_needs_all_cold), for comparison; status "
                "adds the estimator's measured error (README \"How the cookbook decides\").")


def sweep(plan: Plan, variants: Iterable[tuple[int, str, str]] = VARIANTS, *, bf16_states: bool = False,
          spec=None, device: str = "cuda") -> SweepResult:
    """Estimate ``plan`` under each ZeRO variant ``(zero_stage, offload_optimizer, offload_param)``.

    Variants with NVMe get ``nvme_path="/local_nvme"`` when the plan has none (a label only), and DeepSpeed's
    host-RAM knobs sized for the plan's host RAM (:func:`choose_nvme_knobs`, what ``cookbook config`` writes). Each
    estimate carries its :attr:`MemoryEstimate.status` (the ``status`` column of ``to_frame()``).

    Returns:
        a :class:`SweepResult` (``to_frame()``: one row per variant with both verdicts).
    """
    out = []
    for stage, opt, par in variants:
        try:
            variant = plan.replace(**_variant_changes(plan, (stage, opt, par)))
        except PlanError as exc:
            raise EstimateError(f"variant {(stage, opt, par)}: {exc}") from None
        out.append(estimate(variant, bf16_states=bf16_states, spec=spec, device=device))
    return SweepResult(tuple(out))


# --------------------------------------------------------------------------------------------
# a decision: the recommended variant for a machine, or the smallest change that would fit

#: Cost of bf16 optimizer states, in words. Source: evidence ``bf16_states.loss_gap`` (docs/benchmarks.md
#: section 13): 3.4B LLaMA shape, 150 steps at lr 2e-5, last-20 mean loss with bf16 states vs fp32 states;
#: bf16's 8-bit mantissa resolves ~0.4 % (2**-8) of a weight, and an Adam update at lr 2e-5 is ~0.1 % of a
#: 0.02-sized weight. Both runs started from random initialisation, so the measured gap is that of 150 steps from
#: random weights, not of a fine-tune from a pretrained checkpoint (the CPU rehearsal's tiny model at lr 3e-3,
#: ``data/reference/cpu_bf16_states_loss.json``, showed +4 % over 150 steps: the cost depends on the
#: update-to-weight ratio).
BF16_STATES_EVIDENCE = "bf16_states.loss_gap"


def _bf16_states_gap() -> tuple[float, float, str]:
    """(bf16-states loss, fp32-states loss, its cite) of :data:`BF16_STATES_EVIDENCE`."""
    from .evidence import get
    r = get(BF16_STATES_EVIDENCE)
    return r.value, float(r.baseline["value"]), r.cite()


_B16_LOSS, _F32_LOSS, _B16_CITE = _bf16_states_gap()
#: The measured loss increase of bf16 states, in percent (:data:`BF16_STATES_EVIDENCE`).
BF16_STATES_LOSS_INCREASE_PCT = 100 * (_B16_LOSS / _F32_LOSS - 1)
BF16_STATES_COST = ("bf16 master weights and Adam states: updates smaller than ~0.4% of a weight are rounded away "
                    f"(measured once, on a 3.4B LLaMA shape from random initialisation, 150 steps at lr 2e-5: loss "
                    f"{_B16_LOSS:.2f} vs {_F32_LOSS:.2f} with fp32 states, mean of steps 131-150, "
                    f"+{BF16_STATES_LOSS_INCREASE_PCT:.0f}%; a fine-tune of pretrained weights was not measured; "
                    f"{_B16_CITE})")


#: What ``train``, ``launch`` and ``config`` print when ``--bf16-states`` is given (:data:`BF16_STATES_COST`).
BF16_STATES_NOTE = (f"[precision] note: --bf16-states: {BF16_STATES_COST}. Keep it only where fp32 states do not fit "
                    "host RAM (`cookbook estimate ... --sweep` says which fit); NVMe offload keeps fp32 states")


def variant_cost(e: MemoryEstimate, short: bool = False) -> str:
    """What a variant costs in speed or accuracy, in words (for the decision and the suggestions)."""
    p = e.plan
    if short:
        parts = [("optimizer on the CPU" if p.offload_optimizer == "cpu" else ""),
                 ("parameters over PCIe every pass" if p.offload_param == "cpu" else ""),
                 (f"{e.nvme_gib:.0f} GiB on NVMe, SSD-bound" if "nvme" in (p.offload_optimizer, p.offload_param) else ""),
                 ("lossy updates (bf16 states)" if e.bf16_states else "")]
        return ", ".join(x for x in parts if x) or "no offload"
    parts = []
    if p.zero_stage == 3 and p.offload_param == "none":
        parts.append("parameters all-gathered in every forward and backward (more communication than ZeRO-2)")
    if p.offload_optimizer == "cpu":
        parts.append("the optimizer step runs on the CPU (DeepSpeedCPUAdam) and gradients and weights cross PCIe "
                     "every step")
    if p.offload_param == "cpu":
        parts.append("the 16-bit parameters cross PCIe in every forward and backward")
    if "nvme" in (p.offload_optimizer, p.offload_param):
        parts.append(f"{e.nvme_gib:.0f} GiB of states on an NVMe SSD per machine, read and written every step "
                     "(SSD-bound; needs libaio and --nvme-path)")
    if e.bf16_states:
        parts.append(BF16_STATES_COST)
    return "; ".join(parts) if parts else "no offload: the fastest variant"


def variant_flags(e: MemoryEstimate) -> str:
    """The ``cookbook train`` options of a variant."""
    p = e.plan
    flags = f"--zero-stage {p.zero_stage} --offload-optimizer {p.offload_optimizer} --offload-param {p.offload_param}"
    if "nvme" in (p.offload_optimizer, p.offload_param):
        flags += f" --nvme-path {p.nvme_path}"
    if e.bf16_states:
        flags += " --bf16-states"
    if p.liger:
        flags += " --liger"
    if p.micro_batch != 1 or p.grad_accum != 1:
        flags += f" --micro-batch {p.micro_batch} --grad-accum {p.grad_accum}"
    return flags


#: The decision's ladder of variants, each moving more over PCIe or to the SSD than the one before:
#: :data:`~cookbook.plan.VARIANTS`. With bf16 states NVMe is left out: DeepSpeed 0.19.8 stops at start with NVMe
#: offload and bf16 optimizer states (``swap_tensor/utils.py``: ``assert dtype == self.dtype``; seen on the H200).
def _ladder(bf16_states: bool):
    return [v for v in VARIANTS if not (bf16_states and ("nvme" in v or v[0] == 0))]


def _variant_estimate(plan: Plan, variant, b16: bool, *, spec, device) -> MemoryEstimate:
    """``plan`` at one ZeRO variant; NVMe variants with the host-RAM knobs :func:`choose_nvme_knobs` sizes for the
    machine (``estimate`` picks them when no DeepSpeed config is given), which ``cookbook config`` writes."""
    return estimate(plan.replace(**_variant_changes(plan, variant)), bf16_states=b16, spec=spec, device=device)


def _variant_changes(plan: Plan, variant) -> dict:
    """The plan fields of one ZeRO variant ``(zero_stage, offload_optimizer, offload_param)``: NVMe variants get
    ``nvme_path="/local_nvme"`` when the plan has none (a label only); ZeRO-3 variants drop ``liger``, since Liger's
    fused loss cannot run there (:mod:`cookbook.liger`, Liger-Kernel #1048) and ``--liger auto`` turns it off."""
    stage, opt, par = variant
    changes = {"zero_stage": stage, "offload_optimizer": opt, "offload_param": par}
    if stage == 3 and getattr(plan, "liger", False):
        changes["liger"] = False
    if "nvme" in (opt, par) and not plan.nvme_path:
        changes["nvme_path"] = "/local_nvme"
    return changes


def _candidates(plan: Plan, *, bf16_states: bool | None, device: str, spec=None,
                nvme: bool = True) -> list[MemoryEstimate]:
    """Every variant considered, in ladder order: the exact ladder (fp32 master weights and Adam states, NVMe
    included), then the bf16-states ladder. ``bf16_states`` True: bf16 states only; False: fp32 only; None: both
    (bf16 needs precision bf16). The policy's ranking is :func:`_policy_rank`."""
    blocks = ([False] if bf16_states is not True else []) + \
        ([True] if bf16_states is not False and plan.precision == "bf16" else [])
    return [_variant_estimate(plan, v, b16, spec=spec, device=device) for b16 in blocks for v in _ladder(b16)
            if nvme or "nvme" not in v]


def _policy_rank(e: MemoryEstimate) -> int | None:
    """The policy's tier of an estimate, smaller first; None: never recommended.

    0 exact states with room (estimate + measured error band fits, :func:`headroom`); 1 bf16 states with room
    (lossy: only when no exact variant has room); 2 exact at the edge; 3 bf16 at the edge; None: does not fit."""
    tier = {FITS: 0, AT_EDGE: 2}.get(e.status)
    return None if tier is None else tier + (1 if e.bf16_states else 0)


def _ranked(cands) -> list[MemoryEstimate]:
    """The candidates that can be recommended, by tier, ladder order within a tier."""
    return [e for _, _, e in sorted((_policy_rank(e), i, e) for i, e in enumerate(cands) if _policy_rank(e) is not None)]


@dataclass(frozen=True)
class Decision:
    """The variant to run on a machine, the policy's reasons, or why nothing fits and the smallest changes that would.

    The policy (:func:`decide`): exact fp32 master weights and Adam states first; bf16 states only when no exact
    variant fits with room, labelled lossy with the best exact alternative beside it; a variant "fits" when its
    estimate plus the estimator's measured error band fits (:func:`headroom`), else it is "at the edge" and never
    recommended over one with room.

    Attributes:
        plan: the machine and batch shape asked about.
        recommended: the first estimate in the policy's order, or None.
        fitting: every estimate with room (status ``fits``), in the policy's order.
        candidates: every estimate considered (ladder order), each with its :attr:`MemoryEstimate.status`.
        changes: when nothing fits, ``(change, estimate)`` pairs that would fit, smallest first.
        larger_micro: the recommended variant at the largest micro batch that still fits with room at the same
            global batch (:func:`larger_micro_batch`), or None.
        exact_other_shape: when the recommendation has bf16 states, the first exact variant with room at another
            micro batch × accumulation of the same global batch, or None.
        at_edge: the estimates at the edge (estimate fits, estimate + band does not), policy order.
        exact_alternative: when the recommendation is lossy (bf16 states) or at the edge, the best exact variant
            that is not it — :attr:`exact_other_shape`, else the first exact one at the edge, else the exact one
            closest to fitting — as a :class:`MemoryEstimate`, so that a speed model can predict its time beside
            the recommendation (``to_dict(predict=...)``); None when the recommendation is exact with room.
        reasons: why the recommended variant, in words (the policy's steps that decided it).
    """

    plan: Plan
    recommended: MemoryEstimate | None
    fitting: tuple
    candidates: tuple
    changes: tuple = ()
    larger_micro: MemoryEstimate | None = None
    exact_other_shape: MemoryEstimate | None = None
    at_edge: tuple = ()
    exact_alternative: MemoryEstimate | None = None
    reasons: tuple = ()

    @property
    def fits(self) -> bool:
        return self.recommended is not None

    @property
    def lossy(self) -> bool:
        """The recommendation keeps bf16 master weights and Adam states (:data:`BF16_STATES_COST`)."""
        return self.recommended is not None and self.recommended.bf16_states

    def _machine(self) -> str:
        p = self.plan
        host = f"{p.host_memory_gib:g} GiB host RAM" if p.host_memory_gib is not None else "host RAM not given"
        return (f"{p.model} on {p.num_gpus} × {p.gpu_memory_gib:g} GiB GPU(s), {host}, micro batch {p.micro_batch} × "
                f"{p.seq_len} tokens × accumulation {p.grad_accum}")

    def lines(self) -> list[str]:
        """The decision in words, one line per fact."""
        out = [f"decision for {self._machine()}:",
               "  every variant, with the estimator's measured error added (fits / at the edge / does not fit):"]
        for c in self.candidates:
            mark = "→" if c is self.recommended else " "
            host = f"{c.host_gib['total']:.1f}" + (f"/{c.plan.host_memory_gib:g}" if c.plan.host_memory_gib else "")
            out.append(f"  {mark} {c.plan.label}{' (bf16 states, lossy)' if c.bf16_states else ''}: {c.status} — "
                       f"GPU {c.gpu_gib['total']:.1f}/{c.plan.gpu_memory_gib:g} GiB, host {host} GiB")
        if self.recommended is not None:
            e = self.recommended
            tag = " — LOSSY" if e.bf16_states else ""
            tag += " — AT THE EDGE" if e.status == AT_EDGE else ""
            out.append(f"  recommended{tag}: {e.verdict}")
            out.append(f"    status: {e.status} ({e.headroom.why})")
            out.extend(f"    why: {r}" for r in self.reasons)
            out.append(f"    cost: {variant_cost(e)}")
            out.append(f"    options: {variant_flags(e)}")
            knobs = nvme_knobs_line(e)
            if knobs:
                out.append(f"    {knobs}")
            if e.fits_host is None:
                out.append(f"    host RAM was not given: this variant needs {e.host_gib['total']:.1f} GiB per machine "
                           "(--host-memory-gib to check)")
            x = self.exact_alternative
            if x is not None:
                label = "best exact alternative" if x.status != NO_FIT else \
                    "no exact variant fits; the closest (it does NOT fit)"
                out.append(f"    {label}: {_shape_words(x)}{x.verdict} — status {x.status}; "
                           f"options: {variant_flags(x)}; cost: {variant_cost(x)}")
            if self.larger_micro is not None:
                out.append("    " + larger_micro_line(e, self.larger_micro))
            elif e.plan.micro_batch * e.plan.grad_accum == 1:
                out.append("    batch: 1 sequence per GPU and step (--micro-batch 1 --grad-accum 1, the defaults): give "
                           "your run's --micro-batch and --grad-accum — at the same global batch the largest micro batch "
                           "that fits is the fast shape, and the estimate names it")
            for other in [f for f in self.fitting if f is not e][:3]:
                out.append(f"  also fits: {other.verdict} — {variant_cost(other)}")
        else:
            out.append("  NOTHING FITS: no ZeRO variant, with fp32 or bf16 states or NVMe offload, fits this machine.")
            if self.changes:
                out.append("  the smallest change that would fit, then others:")
                for change, e in self.changes:
                    out.append(f"    - {change}: {e.verdict}")
            else:
                out.append("  no single change tried (micro batch, gradient checkpointing, bf16, host RAM, GPU memory) "
                           "fits: more GPUs are needed")
        return out

    def table(self):
        """One row per variant considered: variant, states, GPU and host GiB, status, and which is recommended."""
        import pandas as pd
        rows = [{"variant": e.plan.label, "states": "bf16 (lossy)" if e.bf16_states else "fp32 (exact)",
                 "GPU GiB": round(e.gpu_gib["total"], 1), "host GiB": round(e.host_gib["total"], 1),
                 "status": e.status, "recommended": e is self.recommended} for e in self.candidates]
        return pd.DataFrame(rows)

    def to_dict(self, predict=None) -> dict:
        """The ``--json`` shape. ``predict``: an optional callable ``MemoryEstimate -> dict`` (a speed model's
        prediction: ``tokens_per_s``, ``step_s``, ...); when given, the recommended variant, the exact alternative and
        every variant carry its result as ``"predicted"``."""
        def one(e):
            if e is None:
                return None
            d = dict(e.to_dict(), cost=variant_cost(e), options=variant_flags(e))
            if predict is not None:
                d["predicted"] = predict(e)
            return d

        def row(e):
            d = {"variant": e.plan.label, "bf16_states": e.bf16_states, "status": e.status, "verdict": e.verdict,
                 "options": variant_flags(e), "headroom": e.headroom.to_dict(), "recommended": e is self.recommended}
            if e.nvme:
                d["nvme_knobs"] = {k: e.nvme["settings"].get(k) for k in ("sub_group_size", "max_in_cpu")
                                   if k in (e.nvme.get("settings") or {})}
            if predict is not None:
                d["predicted"] = predict(e)
            return d
        def larger(e):   # a variant row with the batch shape it stands for
            return None if e is None else dict(row(e), micro_batch=e.plan.micro_batch, grad_accum=e.plan.grad_accum,
                                               gpu_gib=round(e.gpu_gib["total"], 2))
        return {"fits": self.fits, "lossy": self.lossy, "recommended": one(self.recommended),
                "larger_micro_batch": larger(self.larger_micro),
                "why": list(self.reasons), "exact_alternative": one(self.exact_alternative),
                "variants": [row(e) for e in self.candidates],
                "fitting": [e.verdict for e in self.fitting], "at_edge": [e.verdict for e in self.at_edge],
                "changes": [{"change": c, "verdict": e.verdict, "options": variant_flags(e)} for c, e in self.changes]}

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _shape_words(e: MemoryEstimate) -> str:
    return f"at --micro-batch {e.plan.micro_batch} --grad-accum {e.plan.grad_accum}: "


def nvme_knobs_line(e: MemoryEstimate) -> str | None:
    """For an NVMe estimate: the host-RAM knobs it was sized with and that ``cookbook config`` / ``train`` write."""
    s = (e.nvme or {}).get("settings") or {}
    if not s or "sub_group_size" not in s:
        return None
    pin = s.get("pin_memory")
    host = e.plan.host_memory_gib
    where = (f"cookbook config / train write them given --host-memory-gib {host:g}" if host is not None else
             "DeepSpeed's defaults: give --host-memory-gib to size them")
    return (f"NVMe host-RAM knobs ({where}): sub_group_size "
            f"{_sci(int(s['sub_group_size']))}, offload_optimizer.buffer_count {s.get('optimizer_buffer_count')}, "
            f"offload_param.max_in_cpu {_sci(int(s.get('max_in_cpu', 0)))}"
            + ("" if pin is None else f", pin_memory {str(bool(pin)).lower()}"))


def _policy_reasons(rec: MemoryEstimate, cands, exact_alt: MemoryEstimate | None) -> tuple[str, ...]:
    """The policy's reasons for ``rec`` (see :class:`Decision`)."""
    out = []
    before = cands[:cands.index(rec)] if rec in cands else []
    passed = [c for c in before if not c.bf16_states] if not rec.bf16_states else [c for c in cands if not c.bf16_states]
    skipped = [c for c in passed if c.status != FITS]
    if not rec.bf16_states and rec.status == FITS:
        out.append("exact fp32 master weights and Adam states, with room for the estimator's measured error")
    elif rec.bf16_states:
        out.append(f"LOSSY: no variant with exact fp32 states fits this machine with room; {BF16_STATES_COST}")
    else:
        out.append("no variant fits with room for the estimator's measured error: this is the first at the edge "
                   "(expect out of memory if the estimate is as far off as its worst measured point)")
    shown = [c for c in skipped if c.status == AT_EDGE][:2] + [c for c in skipped if c.status == NO_FIT][-2:]
    for c in shown:
        out.append(f"not {c.plan.label}{' (bf16 states)' if c.bf16_states else ''}: {c.status} — {c.headroom.why}")
    return tuple(out)


def decide(plan: Plan, *, bf16_states: bool | None = None, device: str = "cuda", spec=None,
           nvme: bool = True) -> Decision:
    """The ZeRO variant to run ``plan``'s model and batch shape on ``plan``'s machine (GPU count and
    memory, host RAM), with the policy's reasons, or the smallest changes that would make one fit.

    The policy, in order (:func:`_policy_rank`):

    1. exact fp32 master weights and Adam states with room — the ladder of :data:`~cookbook.plan.VARIANTS`
       (ZeRO-2, + optimizer offload, ZeRO-3, + optimizer offload, + parameter offload, NVMe offload; each moves
       more over PCIe or to the SSD), NVMe with DeepSpeed's host-RAM knobs sized for the machine
       (:func:`choose_nvme_knobs`);
    2. bf16 master weights and Adam states with room, labelled lossy (:data:`BF16_STATES_COST`), with the best exact
       alternative beside it (:attr:`Decision.exact_alternative`);
    3. exact, then bf16, at the edge: the estimate fits but not with the estimator's measured error band
       (:func:`headroom`) — never recommended over a variant with room.

    "Room" is the estimate plus its measured error band per quantity (GPU reserved, host RSS;
    :func:`error_bands`). ``bf16_states`` True/False restricts to one kind of states; None considers both (bf16 needs
    ``plan.precision == "bf16"``). An unknown host RAM counts as room (and is said). ``nvme`` False leaves NVMe offload
    out (no NVMe SSD, or DeepSpeed's async_io op unusable on this machine).

    When nothing fits, the changes tried, smallest first: a smaller micro batch (a divisor of micro batch ×
    accumulation, the accumulation raised to keep the global batch exactly), gradient checkpointing on, precision
    bf16 with bf16 states, more host RAM (the least any GPU-fitting variant needs), more GPU memory.

    Raises:
        EstimateError / ModelNotFoundError: as :func:`estimate`.
    """
    if spec is None:
        from .models import model_spec
        spec = model_spec(plan.model)
    cands = _candidates(plan, bf16_states=bf16_states, device=device, spec=spec, nvme=nvme)
    ranked = _ranked(cands)
    if ranked:
        rec = ranked[0]
        fitting = tuple(e for e in ranked if e.status == FITS)
        edge = tuple(e for e in ranked if e.status == AT_EDGE)
        other_shape = alt = None
        if rec.bf16_states and bf16_states is None:
            for shaped in _same_global_batch(plan, skip=plan.micro_batch):
                other_shape = next((e for e in _candidates(shaped, bf16_states=False, device=device, spec=spec,
                                                           nvme=nvme) if e.status == FITS), None)
                if other_shape is not None:
                    break
        if rec.bf16_states or rec.status != FITS:
            exact = [e for e in cands if not e.bf16_states and e is not rec]
            alt = other_shape or next((e for e in exact if e.status == AT_EDGE), None) or (
                min(exact, key=lambda e: max(e.gpu_gib["total"] / e.plan.gpu_memory_gib,
                                             e.host_gib["total"] / (e.plan.host_memory_gib or float("inf"))))
                if exact else None)
        return Decision(plan, rec, fitting, tuple(cands), larger_micro=larger_micro_batch(rec, spec=spec, device=device),
                        exact_other_shape=other_shape, at_edge=edge, exact_alternative=alt,
                        reasons=_policy_reasons(rec, cands, alt))

    def first_fit(p: Plan, b16=bf16_states):
        r = _ranked(_candidates(p, bf16_states=b16, device=device, spec=spec, nvme=nvme))
        return r[0] if r else None

    changes = []
    global_batch = plan.micro_batch * plan.grad_accum
    for mb in [m for m in range(plan.micro_batch - 1, 0, -1) if global_batch % m == 0]:
        ga = global_batch // mb
        e = first_fit(plan.replace(micro_batch=mb, grad_accum=ga))
        if e is not None:
            changes.append((f"micro batch {mb} with gradient accumulation {ga} (the same {global_batch} sequences per "
                            "rank and optimizer step; less activation memory)", e))
            break
    if not plan.gradient_checkpointing:
        e = first_fit(plan.replace(gradient_checkpointing=True))
        if e is not None:
            changes.append(("gradient checkpointing on (--gradient-checkpointing: ~1/3 more compute)", e))
    if plan.precision != "bf16" or bf16_states is False:
        e = first_fit(plan.replace(precision="bf16"), b16=True)
        if e is not None:
            changes.append(("precision bf16 with bf16 states (--precision bf16 --bf16-states; Ampere or newer)", e))
    gpu_ok = [e for e in cands if e.fits_gpu]
    if gpu_ok and plan.host_memory_gib is not None:
        least = min(gpu_ok, key=lambda e: e.host_gib["total"])
        need = math.ceil(least.headroom.host_need_gib)
        changes.append((f"more host RAM: {need} GiB per machine (have {plan.host_memory_gib:g}; the estimate "
                        f"{least.host_gib['total']:.1f} GiB plus its measured error)",
                        estimate(least.plan.replace(host_memory_gib=float(need)), bf16_states=least.bf16_states,
                                 spec=spec, device=device)))
    if not gpu_ok:
        least = min(cands, key=lambda e: e.gpu_gib["total"])
        need = math.ceil(least.headroom.gpu_need_gib or least.gpu_gib["total"])
        host = max(plan.host_memory_gib or 0, math.ceil(least.host_gib["total"])) if plan.host_memory_gib else None
        # the estimate at a larger card can itself be larger (ZeRO-1/2 flattens on the GPU when the device has room:
        # flattens_on_gpu), so raise the card until its own estimate fits; offer nothing that still does not fit
        for _ in range(6):
            e = estimate(least.plan.replace(gpu_memory_gib=float(need), host_memory_gib=host),
                         bf16_states=least.bf16_states, spec=spec, device=device)
            if e.fits_gpu and e.status != NO_FIT:
                changes.append((f"GPUs with {need} GiB (have {plan.gpu_memory_gib:g})"
                                + (f" and {host} GiB host RAM" if host and host != plan.host_memory_gib else ""), e))
                break
            need = max(need + 1, math.ceil(e.headroom.gpu_need_gib or e.gpu_gib["total"]))
            if not e.fits_host and host is not None:
                host = max(host, math.ceil(e.headroom.host_need_gib or e.host_gib["total"]))
    return Decision(plan, None, (), tuple(cands), tuple(changes))


#: Measured gain of fewer, larger micro batches at the same global batch (16 sequences of 1024 tokens per
#: optimizer step), LLaMA-7B on one H200 capped at 24 GiB, ZeRO-3 with optimizer and parameters on the CPU, bf16
#: states: tokens/s at micro batch × accumulation 2 × 8, 8 × 2 and 16 × 1 (source: evidence
#: ``larger_micro.full_offload_16x1``, ``larger_micro.full_offload_8x2``; the narrative in docs/benchmarks.md §14).
def _larger_micro_measured() -> dict:
    from .evidence import get
    r16, r8 = get("larger_micro.full_offload_16x1"), get("larger_micro.full_offload_8x2")
    return {"model": "llama-7b", "variant": "ZeRO-3 + opt→cpu + param→cpu (bf16 states)",
            "tokens_per_s": {"2x8": round(float(r16.baseline["value"])), "8x2": round(r8.value),
                             "16x1": round(r16.value)},
            "source": r16.cite()}


LARGER_MICRO_MEASURED = _larger_micro_measured()


#: The same for ZeRO-3 + optimizer offload with the parameters on the GPU (LLaMA-7B, same machine, 2 × 8 against
#: 8 × 2 in one device call each). bf16 states: evidence ``larger_micro.z3opt_bf16_8x2``. fp32 states (host 123 of
#: 126 GiB, the CPU side sets the pace) 729 → 776 tokens/s: no reference record holds these two runs yet (they are
#: told in docs/benchmarks.md §15 only), so they stay here until one does.
def _larger_micro_measured_opt() -> dict:
    from .evidence import get
    r = get("larger_micro.z3opt_bf16_8x2")
    return {"bf16": {"2x8": round(float(r.baseline["value"])), "8x2": round(r.value)},
            "fp32": {"2x8": 729.0, "8x2": 776.0}, "source": r.cite(), "fp32_source": "docs/benchmarks.md §15"}


LARGER_MICRO_MEASURED_OPT = _larger_micro_measured_opt()


def _same_global_batch(plan: Plan, *, above: int = 0, skip: int | None = None):
    """``plan`` at every micro batch × accumulation of its global batch (micro batch × accumulation kept exactly),
    the largest micro batch first, micro batches > ``above`` and != ``skip``."""
    total = plan.micro_batch * plan.grad_accum
    for mb in range(total, above, -1):
        if total % mb == 0 and mb != skip:
            yield plan.replace(micro_batch=mb, grad_accum=total // mb)


def larger_micro_batch(e: MemoryEstimate, *, spec=None, device: str = "cuda") -> MemoryEstimate | None:
    """The variant of estimate ``e`` at the largest micro batch that still fits with room (status ``fits``: the
    estimate plus its measured error band, :func:`headroom`; GPU and host), the global batch kept exactly: micro batch × accumulation unchanged, the micro batch a divisor of it above ``e``'s.

    Why it matters: with ZeRO-3 and offloaded parameters every micro batch moves all 16-bit parameters over PCIe
    for its forward and its backward, and with any optimizer offload under ZeRO-3 its 16-bit gradients go to the
    CPU after each micro batch (the traffic model of ``docs/benchmarks.md`` §5, ``benchmarks/report.py``
    ``pcie_bytes``); fewer micro batches move less. Measured: :data:`LARGER_MICRO_MEASURED` (3.14× at 16 × 1 vs
    2 × 8). The fit is :func:`estimate`'s (within +4 % of the reserved peak measured at 16 × 1 there: 19.0
    estimated vs 18.2 GiB).

    Returns:
        the :class:`MemoryEstimate` of the larger micro batch, or None when none above ``e.plan.micro_batch`` fits
        (or ``e`` itself does not fit).

    Raises:
        EstimateError / ModelNotFoundError: as :func:`estimate`.
    """
    if not e.fits:
        return None
    # the same margin as the decision: a larger micro batch is suggested only with room for the measured error
    # (status fits, :func:`headroom`), never one at the edge
    for shaped in _same_global_batch(e.plan, above=e.plan.micro_batch):
        bigger = estimate(shaped, bf16_states=e.bf16_states, spec=spec, device=device)
        if bigger.status == FITS:
            return bigger
    return None


def larger_micro_line(e: MemoryEstimate, bigger: MemoryEstimate) -> str:
    """One sentence for :func:`larger_micro_batch`'s answer: the options, its GPU need, and why it is faster for
    ``e``'s variant (with the measured ratio and its source)."""
    p, q = e.plan, bigger.plan
    if p.zero_stage == 3 and p.offload_param != "none":
        m = LARGER_MICRO_MEASURED["tokens_per_s"]
        why = (f"each micro batch moves every 16-bit parameter over PCIe for its forward and backward, so "
               f"{p.grad_accum} micro batches per step become {q.grad_accum}"
               + ("" if p.offload_param == "cpu" else " (from the SSD: each micro batch reads the weights again)")
               + f"; measured on LLaMA-7B with the parameters in host RAM: 16 × 1 ran "
               f"{m['16x1'] / m['2x8']:.2f}× the tokens/s of 2 × 8 ({LARGER_MICRO_MEASURED['source']})")
    elif p.zero_stage == 3 and p.offload_optimizer != "none":
        m = LARGER_MICRO_MEASURED_OPT["bf16" if e.bf16_states else "fp32"]
        why = (f"each micro batch sends its 16-bit gradients to the CPU (2 bytes per parameter), so {p.grad_accum} "
               f"trips per step become {q.grad_accum}; measured on LLaMA-7B with this variant and "
               f"{'bf16' if e.bf16_states else 'fp32'} states: 8 × 2 ran {m['8x2'] / m['2x8']:.2f}× the tokens/s of "
               f"2 × 8" + ("" if e.bf16_states else " (fp32 states filled the host: the CPU side set the pace)")
               + f" ({LARGER_MICRO_MEASURED_OPT['source' if e.bf16_states else 'fp32_source']})")
    else:
        why = "fewer, larger micro batches keep the GPU busier (not measured at this variant)"
    return (f"faster at the same global batch: --micro-batch {q.micro_batch} --grad-accum {q.grad_accum} fits "
            f"(GPU {bigger.gpu_gib['total']:.1f}/{q.gpu_memory_gib:g} GiB, against {e.gpu_gib['total']:.1f} at "
            f"{p.micro_batch} × {p.grad_accum}): {why}")


def fixes_that_fit(plan: Plan, *, exclude: MemoryEstimate | None = None, device: str = "cuda",
                   limit: int = 3) -> list[str]:
    """Fixes for a plan that does not fit, each one a variant the estimator says fits ``plan``'s machine
    (:func:`decide`, in its policy's order: exact states first, those with room before those at the edge), with its
    options, its host and GPU need, its status and its cost; when none fits, the smallest changes that would. For ``cookbook env`` and ``cookbook lint``: they suggest nothing else."""
    d = decide(plan, device=device)
    same = (lambda e: exclude is not None and e.plan.label == exclude.plan.label
            and e.bf16_states == exclude.bf16_states)
    if d.fits:
        return [f"{e.plan.label}{' with bf16 states' if e.bf16_states else ''} ({variant_flags(e)}): host "
                f"{e.host_gib['total']:.0f} GiB, GPU {e.gpu_gib['total']:.1f} GiB, {e.status}; cost: "
                f"{variant_cost(e, short=True)}"
                for e in (d.fitting + d.at_edge) if not same(e)][:limit]
    return [f"nothing fits {plan.host_memory_gib:g} GiB of host RAM and {plan.gpu_memory_gib:g} GiB GPUs; the smallest "
            f"change: {change} ({e.verdict})" for change, e in d.changes[:1]] or \
        ["nothing fits this machine, whatever the ZeRO variant: more GPUs are needed"]


# --------------------------------------------------------------------------------------------
# estimate beside measurement

def compare(estimate: MemoryEstimate | Mapping, measured: Mapping[str, Any]):
    """Estimate next to measurement, as a pandas DataFrame.

    Args:
        estimate: a :class:`MemoryEstimate` or its ``to_dict()``.
        measured: ``peak_gpu_allocated_gib`` (``torch.cuda.max_memory_allocated``),
            ``peak_gpu_reserved_gib`` (``max_memory_reserved``), ``host_peak_gib`` (peak RSS summed over
            the machine's ranks); any may be None or missing (CPU runs have no GPU numbers).

    Returns:
        DataFrame with rows ``GPU allocated (peak)``, ``GPU reserved (peak)``, ``host RSS (peak)`` and
        columns ``quantity``, ``estimate GiB``, ``measured GiB``, ``error %`` (``100·(estimate −
        measured)/measured``; positive = the estimate is conservative).
    """
    import pandas as pd
    if isinstance(estimate, MemoryEstimate):
        gpu, host, device = dict(estimate.gpu_gib), dict(estimate.host_gib), estimate.device
    elif isinstance(estimate, Mapping) and "gpu_gib" in estimate and "host_gib" in estimate:
        gpu, host, device = dict(estimate["gpu_gib"]), dict(estimate["host_gib"]), estimate.get("device", "cuda")
    else:
        raise EstimateError(f"estimate={type(estimate).__name__}: pass a MemoryEstimate or its to_dict()")
    alloc = gpu["total"] - gpu.get("allocator_overhead", 0.0) - gpu.get("cuda_context", 0.0)
    reserved = gpu["total"] - gpu.get("cuda_context", 0.0)
    rows = []
    for name, est, key in (("GPU allocated (peak)", alloc if device == "cuda" else None, "peak_gpu_allocated_gib"),
                           ("GPU reserved (peak)", reserved if device == "cuda" else None, "peak_gpu_reserved_gib"),
                           ("host RSS (peak)", host["total"], "host_peak_gib")):
        meas = measured.get(key)
        err = None if (est is None or not meas) else round(100.0 * (est - meas) / meas, 1)
        rows.append({"quantity": name, "estimate GiB": None if est is None else round(est, 3),
                     "measured GiB": None if meas is None else round(float(meas), 3), "error %": err})
    return pd.DataFrame(rows, columns=["quantity", "estimate GiB", "measured GiB", "error %"])


def load_calibration(path: str | Path | None = None) -> list[dict]:
    """Measured points from ``data/calibration/*.json`` (or one file): a list of dicts with ``plan``
    (Plan fields), ``spec`` (ModelSpec-like numbers when the model is not shipped), ``bf16_states``,
    ``device`` and ``measured`` (the :func:`compare` keys), plus ``source``."""
    files = [Path(path)] if path else sorted(_CALIBRATION_DIR.glob("*.json"))
    points = []
    for f in files:
        data = json.loads(Path(f).read_text())
        for p in data["points"]:
            points.append(dict(p, file=str(f)))
    return points


# --------------------------------------------------------------------------------------------
# figures

def plot_breakdown(estimates, ax=None, *, where: str = "gpu"):
    """Stacked bars of the breakdown per variant, with the GPU's (or host's) memory as a line.

    Args:
        estimates: a :class:`SweepResult` or a list of :class:`MemoryEstimate`.
        ax: a matplotlib Axes to draw on (default: a new figure).
        where: ``"gpu"`` (per-GPU components, line at ``plan.gpu_memory_gib``) or ``"host"``.

    Returns:
        the matplotlib Figure (closed in pyplot when made here, so a notebook shows it once).
    """
    import matplotlib.pyplot as plt
    ests = list(estimates)
    if not ests:
        raise EstimateError("estimates=[]: pass at least one MemoryEstimate (e.g. sweep(plan))")
    if where not in ("gpu", "host"):
        raise EstimateError(f"where={where!r}: use 'gpu' or 'host'")
    names = _labels(GPU_COMPONENTS if where == "gpu" else HOST_COMPONENTS, ests[0].bf16_states)
    made_here = ax is None
    if made_here:
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(ests)), 4.5))
    else:
        fig = ax.figure
    labels = [e.plan.label.replace(" + ", "\n+ ") for e in ests]
    x = range(len(ests))
    bottom = [0.0] * len(ests)
    cmap = plt.get_cmap("tab20")
    for i, (key, label) in enumerate(names.items()):
        vals = [(e.gpu_gib if where == "gpu" else e.host_gib).get(key, 0.0) for e in ests]
        if not any(vals):
            continue
        ax.bar(x, vals, bottom=bottom, label=label, color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    limit = ests[0].plan.gpu_memory_gib if where == "gpu" else ests[0].plan.host_memory_gib
    if limit:
        ax.axhline(limit, color="black", linestyle="--", linewidth=1.2,
                   label=f"{'GPU' if where == 'gpu' else 'host'} memory {limit:g} GiB")
    for xi, e, top in zip(x, ests, bottom):
        ok = e.fits_gpu if where == "gpu" else e.fits_host
        mark = "fits" if ok else ("?" if ok is None else "no")
        ax.text(xi, top, f"{top:.1f}\n{mark}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("GiB per GPU" if where == "gpu" else "GiB per machine")
    p = ests[0].plan
    ax.set_title(f"{p.model}: {p.num_gpus} × {p.gpu_memory_gib:g} GiB, micro batch {p.micro_batch} × {p.seq_len} tokens")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_ylim(0, max(max(bottom), limit or 0) * 1.18)
    fig.tight_layout()
    if made_here:  # closed in pyplot: a notebook cell ending with it shows it once; savefig still works
        plt.close(fig)
    return fig


def calculator(model: str = "qwen-14b", **plan_fields):
    """An ipywidgets calculator: model, GPUs, GPU memory, host memory, stage, offload, micro batch,
    sequence length, checkpointing; redraws the breakdown chart and the verdicts on every change.

    The chart is an ``ipywidgets.Image`` (PNG) and the verdicts an ``ipywidgets.HTML``: plain widget
    state, no ``Output`` widget, so executing the notebook headless (papermill, nbclient) sends the
    kernel nothing back (nbclient's Output-widget mimic writes to the kernel's shell channel while it
    waits for the cell's reply, which can hang: jupyter/nbclient#312).

    Args:
        model: the model to start with (a shipped name, a local folder or a cached hub id).
        **plan_fields: the other :class:`~cookbook.plan.Plan` fields to start with (``num_gpus=8``, ...).

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); ``.controls`` holds the input widgets by
        name, ``.chart`` the Image, ``.verdicts`` the HTML, and ``.result`` the latest :class:`SweepResult`
        (None while the inputs are invalid).

    Raises:
        cookbook.plan.PlanError: ``plan_fields`` do not make a valid plan.
    """
    import io

    import ipywidgets as w
    from .models import shipped_models

    base = Plan(model=model, **plan_fields)
    options = shipped_models()
    if model not in options:
        options = [model, *options]
    style = {"description_width": "initial"}

    def size(px: int):
        return w.Layout(width=f"{px}px")

    ctl = {
        "model": w.Combobox(value=model, options=options, description="model", ensure_option=False, style=style,
                            layout=size(230)),
        "num_gpus": w.IntSlider(value=base.num_gpus, min=1, max=64, description="GPUs", style=style, layout=size(300)),
        "gpu_memory_gib": w.FloatText(value=base.gpu_memory_gib, description="GiB per GPU", style=style,
                                      layout=size(160)),
        "host_memory_gib": w.FloatText(value=base.host_memory_gib or 0.0, description="host RAM GiB (0: unknown)",
                                       style=style, layout=size(250)),
        "variant": w.Dropdown(options=[("all variants", None)] + [(Plan(zero_stage=s, offload_optimizer=o, offload_param=p,
                              nvme_path="/nvme").label, (s, o, p)) for s, o, p in VARIANTS], value=None,
                              description="ZeRO", style=style, layout=size(300)),
        "micro_batch": w.IntSlider(value=base.micro_batch, min=1, max=64, description="micro batch", style=style,
                                   layout=size(300)),
        "seq_len": w.Dropdown(options=[256, 512, 1024, 2048, 4096, 8192], value=base.seq_len if base.seq_len in
                              (256, 512, 1024, 2048, 4096, 8192) else 512, description="seq len", style=style,
                              layout=size(160)),
        "gradient_checkpointing": w.Checkbox(value=base.gradient_checkpointing, description="gradient checkpointing",
                                             style=style),
        "bf16_states": w.Checkbox(value=False, description="bf16 states", style=style),
    }
    chart = w.Image(format="png", layout=w.Layout(max_width="100%"))
    verdicts = w.HTML()

    def redraw(*_):
        try:
            plan = base.replace(model=ctl["model"].value, num_gpus=ctl["num_gpus"].value,
                                gpu_memory_gib=ctl["gpu_memory_gib"].value or base.gpu_memory_gib,
                                host_memory_gib=ctl["host_memory_gib"].value or None,
                                micro_batch=ctl["micro_batch"].value, seq_len=ctl["seq_len"].value,
                                gradient_checkpointing=ctl["gradient_checkpointing"].value)
            variants = VARIANTS if ctl["variant"].value is None else [ctl["variant"].value]
            result = sweep(plan, variants, bf16_states=ctl["bf16_states"].value)
        except Exception as exc:  # noqa: BLE001 - shown to the user, widget keeps working
            box.result = None
            verdicts.value = f"<pre>error: {html.escape(str(exc))}</pre>"
            return
        box.result = result
        fig = plot_breakdown(result)
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=90, bbox_inches="tight")
        chart.value = png.getvalue()
        lines = []
        for e in result:
            lines.append(html.escape(e.verdict))
            lines += ["    " + html.escape(r) for r in e.reasons]
        verdicts.value = "<pre style='white-space:pre-wrap'>" + "\n".join(lines) + "</pre>"

    box = w.VBox([w.HBox([ctl["model"], ctl["num_gpus"], ctl["gpu_memory_gib"], ctl["host_memory_gib"]]),
                  w.HBox([ctl["variant"], ctl["micro_batch"], ctl["seq_len"]]),
                  w.HBox([ctl["gradient_checkpointing"], ctl["bf16_states"]]), chart, verdicts])
    box.controls = ctl  # the input widgets, by plan field name
    box.chart, box.verdicts = chart, verdicts
    box.result = None   # the latest SweepResult
    for c in ctl.values():
        c.observe(redraw, names="value")
    redraw()
    return box


# --------------------------------------------------------------------------------------------
# more than one plan: batch shapes, the first variant that fits; the CPU rehearsal's memory

def batch_sweep(plan, micro_batches: Iterable[int] = (1, 2, 4, 8), seq_lens: Iterable[int] = (256, 512, 1024),
                **estimate_kwargs) -> list:
    """Estimate ``plan`` at every micro batch × sequence length (the articles' "we lowered the batch
    size from 8 to 1 and the sequence length from 1024 to 256").

    Returns:
        a list of :class:`cookbook.memory.MemoryEstimate`, micro batch outer, sequence length inner.
    """
    return [estimate(plan.replace(micro_batch=b, seq_len=s), **estimate_kwargs)
            for b in micro_batches for s in seq_lens]


def choose_variant(plan, *, bf16_states: bool = False, variants=None):
    """The first ZeRO variant, in the cookbook's ladder order (:data:`cookbook.plan.VARIANTS`: ZeRO-2,
    ZeRO-2 + optimizer offload, ZeRO-3, ZeRO-3 + optimizer offload, + parameter offload, NVMe; each
    slower than the one before), that fits both the GPU and the host RAM of ``plan``.

    Returns:
        ``(chosen, sweep)``: the chosen :class:`cookbook.memory.MemoryEstimate` (None when nothing
        fits) and the :class:`cookbook.memory.SweepResult` over all variants. An unknown host RAM
        (``plan.host_memory_gib`` None) counts as fitting.
    """
    result = sweep(plan, variants or VARIANTS, bf16_states=bf16_states)
    chosen = next((e for e in result if e.fits), None)
    return chosen, result


#: The model-state components that ZeRO partitions (16-bit parameters and gradients, fp32 master weights and
#: gradients, Adam moments): :data:`MODEL_STATE_KEYS` without DeepSpeed's gathered largest layer.
PARTITIONED_STATE_KEYS = tuple(k for k in MODEL_STATE_KEYS if k != "largest_layer")

#: One rank's share of Qwen-14B on 8 ranks under ZeRO-3, as a model of its own (data/models/qwen2-14b-share8).
SHARE_MODEL = "qwen2-14b-share8"


def rank_model_states_gib(plan: Plan, *, bf16_states: bool = False, spec=None) -> float:
    """The model states one rank holds for ``plan``, wherever they live, in GiB: the GPU's share
    (:data:`PARTITIONED_STATE_KEYS` of ``gpu_gib``) plus the rank's part of the offloaded states (the same keys
    of ``host_gib`` over the ranks on the machine). The gathered-layer and prefetch buffers, activations
    and the runtime are not model states and are left out.

    Used to size a model whose states on ONE rank equal a larger model's per-rank states on many ranks
    (:data:`SHARE_MODEL`: ``rank_model_states_gib(Plan("qwen2-14b-share8", num_gpus=1, zero_stage=3))``
    ≈ ``rank_model_states_gib(Plan("qwen-14b", num_gpus=8, zero_stage=3))``, within 0.01 %).

    Raises:
        EstimateError / ModelNotFoundError: as :func:`estimate`.
    """
    e = estimate(plan, bf16_states=bf16_states, spec=spec, device="cuda")
    ranks_per_machine = max(1, plan.num_gpus)
    gpu = sum(float(e.gpu_gib.get(k, 0.0)) for k in PARTITIONED_STATE_KEYS)
    host = sum(float(e.host_gib.get(k, 0.0)) for k in PARTITIONED_STATE_KEYS) / ranks_per_machine
    return gpu + host


def share_ratio(share_model: str = SHARE_MODEL, target_model: str = "qwen-14b", *, world_size: int = 8,
                share_ranks: int = 1, zero_stage: int = 3, offload_optimizer: str = "none",
                offload_param: str = "none") -> dict:
    """How closely ``share_model`` on ``share_ranks`` ranks stands in for ``target_model`` on ``world_size`` ranks
    (``qwen2-14b-share4`` on 2 ranks, ``qwen2-14b-share2`` on 4 stand in for Qwen-14B on 8 too):
    ``{"share_gib", "target_gib", "ratio" (share / target), "share_params", "target_params",
    "params_ratio", "sentence"}`` (model states per rank, :func:`rank_model_states_gib`, GiB).

    Raises:
        EstimateError / ModelNotFoundError: as :func:`estimate`.
    """
    from .models import model_spec
    common = dict(gpu_memory_gib=24.0, seq_len=512, micro_batch=1, grad_accum=1, precision="bf16",
                  zero_stage=zero_stage, offload_optimizer=offload_optimizer, offload_param=offload_param)
    share = rank_model_states_gib(Plan(model=share_model, num_gpus=share_ranks, **common))
    target = rank_model_states_gib(Plan(model=target_model, num_gpus=world_size, **common))
    ns, nt = model_spec(share_model).num_params, model_spec(target_model).num_params
    label = Plan(model=share_model, num_gpus=share_ranks, **common).label
    where = "ONE rank" if share_ranks == 1 else f"each of {share_ranks} ranks"
    return {"share_gib": share, "target_gib": target, "ratio": share / target, "share_params": ns,
            "target_params": nt, "params_ratio": ns / nt,
            "sentence": (f"{share_model} ({ns:,} parameters = {ns / nt:.4f} × {target_model}'s {nt:,}) on {where} "
                         f"holds {share:.2f} GiB of model states under {label}; {target_model} on {world_size} ranks "
                         f"holds {target:.2f} GiB per rank (ratio {share / target:.4f}). Activations and the gathered "
                         "layer are the share's own, smaller.")}


@dataclass(frozen=True)
class OffloadChoice:
    """The offload run one GPU can do on a machine, chosen in :func:`choose_offload_run`'s order.

    Attributes:
        plan: the plan to launch (``nvme`` offload when that is the choice), or None when nothing fits.
        bf16_states: launch with ``--bf16-states``.
        kind: ``fp32 states``, ``bf16 states``, ``NVMe offload`` or None.
        reason: one sentence: why this one (the estimates that decided it, GiB with one decimal).
        estimates: kind -> :class:`MemoryEstimate` for the three tried.
        alternatives: whenever fp32 states in host RAM do not fit: what else would run — more host RAM,
            NVMe offload (its disk need, and why not here when it cannot run here), exact Adam with the
            parameters on the GPU where that fits at the same global batch, LoRA (when no full fine-tune of the
            model fits this machine's host RAM) — with the same GiB figures as ``reason``.
        nvme_disk_gib: GiB of swap files NVMe offload writes (:func:`cookbook.nvme.estimate_nvme`).
        nvme_disk_needed_gib: free GiB the NVMe folder must have for them, with the margin ``launch`` asks for
            (:func:`cookbook.nvme.nvme_disk_needed`).
        nvme_free_gib: free GiB at the NVMe path as given (None: not checked).
    """

    plan: Plan | None
    bf16_states: bool
    kind: str | None
    reason: str
    estimates: Mapping[str, "MemoryEstimate"]
    alternatives: tuple[str, ...] = ()
    nvme_disk_gib: float | None = None
    nvme_disk_needed_gib: float | None = None
    nvme_free_gib: float | None = None

    @property
    def fits(self) -> bool:
        return self.plan is not None

    def lines(self, machine: str) -> list[str]:
        """What to show: ``"{machine}: {kind} — {reason}"`` (``"{machine}: {reason}"`` when nothing fits) and one
        ``"  alternative: …"`` line each."""
        return [f"{machine}: {self.kind} — {self.reason}" if self.kind else f"{machine}: {self.reason}",
                *(f"  alternative: {a}" for a in self.alternatives)]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "fits": self.fits, "bf16_states": self.bf16_states, "reason": self.reason,
                "label": self.plan.label if self.plan else None, "alternatives": list(self.alternatives),
                "host_gib": {k: e.host_gib["total"] for k, e in self.estimates.items()},
                "gpu_gib": {k: e.gpu_gib["total"] for k, e in self.estimates.items()},
                "nvme_disk_gib": self.nvme_disk_gib, "nvme_disk_needed_gib": self.nvme_disk_needed_gib,
                "nvme_free_gib": self.nvme_free_gib,
                "plan": {k: getattr(self.plan, k) for k in ("model", "num_gpus", "gpu_memory_gib", "host_memory_gib",
                                                            "seq_len", "micro_batch", "grad_accum", "zero_stage",
                                                            "offload_optimizer", "offload_param")}
                if self.plan else None}


def choose_offload_run(plan: Plan, *, nvme_ok: bool, nvme_free_gib: float | None, device: str = "cuda",
                       spec=None) -> OffloadChoice:
    """Pick the full fine-tune one GPU can run on this machine, ZeRO-3 with everything offloaded, by the policy of
    :func:`decide`: exact fp32 states in host RAM if they fit with room (estimate plus measured error band,
    :func:`headroom`), else exact fp32 states with NVMe offload where DeepSpeed's async I/O works (``nvme_ok``) and
    the disk has the space (the swap files plus the margin ``launch`` refuses without,
    :func:`cookbook.nvme.nvme_disk_needed`; host-RAM knobs sized by :func:`choose_nvme_knobs`), else bf16 states
    (half the host RAM; lossy, :data:`BF16_STATES_COST`); then the same order at the edge (said in ``reason``).

    Every figure in ``reason`` and ``alternatives`` is the same estimate rounded once (one decimal of GiB; of MiB
    below 0.1 GiB, as for the rehearsal's tiny models), so the sentences agree with each other.

    Args:
        plan: the machine and run (``host_memory_gib`` this machine's RAM; its ZeRO variant is replaced
            by ZeRO-3 + optimizer and parameter offload).
        nvme_ok: DeepSpeed's ``async_io`` op is usable here (:func:`cookbook.env.check`'s ``ds_ops``).
        nvme_free_gib: free space at the NVMe path, GiB (None: unknown, counted as enough).
        device: ``cuda``, or ``cpu`` for the CPU rehearsal (every rank's memory is host RAM).

    Returns:
        :class:`OffloadChoice`; its ``alternatives`` name more host RAM, NVMe (with its disk need) and LoRA
        honestly whenever fp32 states do not fit host RAM.

    Raises:
        EstimateError / ModelNotFoundError: as :func:`estimate`.
    """
    from .nvme import nvme_disk_needed
    base = plan.replace(zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    nvme = base.replace(offload_optimizer="nvme", offload_param="nvme", nvme_path=plan.nvme_path or "/local_nvme")
    est = {"fp32 states": estimate(base, spec=spec, device=device),
           "bf16 states": estimate(base, bf16_states=True, spec=spec, device=device),
           "NVMe offload": estimate(nvme, bf16_states=False, spec=spec, device=device)}
    f32, b16, nv = est["fp32 states"], est["bf16 states"], est["NVMe offload"]
    g = lambda x: f"{x:.1f} GiB" if x >= 0.1 or x <= 0 else f"{x * 1024:.1f} MiB"  # noqa: E731 - the one rounding
    have = g(plan.host_memory_gib) if plan.host_memory_gib is not None else "unknown"
    disk = nv.nvme_gib
    disk_need = nvme_disk_needed(disk * GIB) / GIB
    free = "" if nvme_free_gib is None else f", {g(nvme_free_gib)} free at the NVMe path"
    need = (f"host RAM {have}; needed: fp32 states {g(f32.host_gib['total'])}, bf16 states "
            f"{g(b16.host_gib['total'])}, NVMe offload {g(nv.host_gib['total'])} of RAM + {g(disk)} on the SSD "
            f"({g(disk_need)} needed with the margin{free})")
    extra = dict(nvme_disk_gib=disk, nvme_disk_needed_gib=disk_need, nvme_free_gib=nvme_free_gib)
    nvme_room = nvme_free_gib is None or disk_need <= nvme_free_gib
    why_not_nvme = ("DeepSpeed's async_io op is not usable here (libaio)" if not nvme_ok else
                    f"{g(disk_need)} needed on the SSD, {g(nvme_free_gib)} free" if not nvme_room else
                    f"its {g(nv.host_gib['total'])} of RAM do not fit" if nv.fits_host is False else
                    "it does not fit the GPU" if not nv.fits_gpu else None)
    nvme_alt = (f"NVMe offload (fp32 states on the SSD): {g(disk)} of swap files on a fast SSD "
                f"({g(disk_need)} needed with the margin) and {g(nv.host_gib['total'])} of RAM"
                + (f"; not here: {why_not_nvme}" if why_not_nvme else "; possible here") + "; SSD-bound: slower")
    fp32_ram = f"more host RAM: {g(f32.host_gib['total'])} for fp32 states (exact Adam updates; have {have})"
    weights = 2 * f32.params / GIB
    lora = (f"LoRA instead of a full fine-tune: only the adapters get gradients and Adam states; the frozen "
            f"16-bit weights ({g(weights)}) must fit (PEFT; not a full fine-tune, not what this cookbook trains)")
    nvme_here = nvme_ok and nvme_room
    # the policy (decide): exact states first — fp32 in host RAM, then fp32 on the SSD — then bf16 states (lossy);
    # those with room for the measured error before those at the edge (headroom)
    order = [("fp32 states", f32, True), ("NVMe offload", nv, nvme_here), ("bf16 states", b16, True)]
    pick = next(((k, e) for want in (FITS, AT_EDGE) for k, e, ok in order if ok and e.status == want), None)
    edge = "" if pick is None or pick[1].status == FITS else f" AT THE EDGE ({pick[1].headroom.why})"
    if pick is not None and pick[0] == "fp32 states":
        return OffloadChoice(base, False, "fp32 states", f"fp32 states fit{edge}: {need}.", est, (), **extra)
    more_ram = (f"more host RAM: {g(f32.host_gib['total'])} for fp32 states, {g(b16.host_gib['total'])} with "
                f"--bf16-states (have {have}), plus room for the estimator's measured error")
    if pick is not None and pick[0] == "NVMe offload":
        return OffloadChoice(nvme, False, "NVMe offload", f"fp32 states do not fit host RAM with room; NVMe offload "
                             f"keeps them exact on the SSD{edge}: {need}.", est, (more_ram, lora), **extra)
    if pick is not None:
        alts = [fp32_ram, nvme_alt]
        # exact Adam with the parameters left on the GPU, at a shape of the same global batch that fits with room
        for shaped in _same_global_batch(base.replace(offload_param="none")):
            opt = estimate(shaped, spec=spec, device=device)
            if opt.status == FITS:
                mb, ga = shaped.micro_batch, shaped.grad_accum
                nb06 = _notebook06_full_offload()
                alts.append(f"exact Adam with the parameters on the GPU: ZeRO-3 + optimizer offload, fp32 states, "
                            f"{g(opt.host_gib['total'])} of RAM, GPU {g(opt.gpu_gib['total'])} at micro batch {mb} × "
                            f"{ga} (--offload-param none --micro-batch {mb} --grad-accum {ga}); slower when it fills "
                            f"the host ({'measured on LLaMA-7B, not this model: ' if base.model != 'llama-7b' else ''}"
                            f"LLaMA-7B on 125.8 GiB: {LARGER_MICRO_MEASURED_OPT['fp32']['8x2']:,.0f} tokens/s "
                            f"at 8 × 2 ({LARGER_MICRO_MEASURED_OPT['fp32_source']}) against "
                            f"{nb06.value:,.0f} with bf16 states and full offload at 16 × 1, {nb06.cite()})")
                break
        return OffloadChoice(base, True, "bf16 states", f"LOSSY: no exact variant fits with room (fp32 states in host "
                             f"RAM{'' if nvme_here else ' or on the SSD'}); bf16 states do{edge}: {need}.", est,
                             tuple(alts), **extra)
    return OffloadChoice(None, False, None, f"no full fine-tune fits this machine: {need}; NVMe offload not "
                         f"possible here: {why_not_nvme}.",
                         est, (more_ram, nvme_alt, lora), **extra)


def _notebook06_full_offload():
    """Notebook 06's own LLaMA-7B run (bf16 states, full offload, 16 × 1): evidence ``full_offload.notebook06_16x1``."""
    from .evidence import get
    return get("full_offload.notebook06_16x1")


def rehearsal_memory_note(num_params: int | None = None) -> str:
    """One sentence saying why the CPU rehearsal's measured memory is nearly the same for every ZeRO variant.

    In the rehearsal the measured peak is the host RSS of all ranks, dominated by the Python/torch/DeepSpeed
    runtime (:data:`cookbook.memory.CPU_RUNTIME_BASELINE_GIB` per rank, measured on the rehearsal), while the
    model states of the tiny model are megabytes: 16 bytes per parameter with mixed-precision Adam (2 + 2
    for 16-bit parameters and gradients, 4 + 4 + 4 for fp32 master weights and Adam m, v; ZeRO paper,
    Rajbhandari et al. 2020, §3.1).

    Args:
        num_params: the rehearsal model's parameter count, to state its model states in MiB; None omits it.
    """
    states = (f" (16 B/param × {int(num_params):,} parameters = {16 * int(num_params) / 2**20:.1f} MiB)"
              if isinstance(num_params, (int, float)) and num_params > 0 else "")
    return (f"Why the CPU rehearsal's measured memory hardly differs between ZeRO variants: it is the host RSS of "
            f"all ranks, and the Python/torch/DeepSpeed runtime (~{CPU_RUNTIME_BASELINE_GIB:g} GiB per rank, measured) "
            f"dominates it, while the tiny model's states are megabytes{states}; the variants differ only at real "
            f"model sizes — see the estimates, and the GPU measurements in data/reference/ (each labelled with its "
            f"hardware) where they exist.")


# --------------------------------------------------------------------------------------------
# CLI

def _speed_machine(args):
    """``--gpu`` / ``--cpu-cores`` → a :class:`cookbook.speed.Machine`, and how the card was chosen. Default card:
    this machine's GPU when ``data/hardware/gpus.json`` knows it, else the RTX 4090 (the cookbook's target)."""
    from .hardware import nvml_gpus
    from .speed import Machine, UnknownGpuError, gpu_spec, this_machine_cores
    name, how = args.gpu, "--gpu"
    if name is None:
        here = [g["name"] for g in nvml_gpus()]
        try:
            name, how = (here[0], "this machine's GPU") if here else ("RTX 4090", "default: no GPU here")
            gpu = gpu_spec(name)
        except UnknownGpuError:
            name, how = "RTX 4090", f"default: this machine's {here[0]} is not in data/hardware/gpus.json"
    gpu = gpu_spec(name)
    cores = args.cpu_cores if args.cpu_cores is not None else this_machine_cores()
    return Machine(gpu, cores), (how if args.cpu_cores is not None else
                                 f"{how}; CPU cores: this machine's {cores} — give --cpu-cores with your training "
                                 "box's cores: the CPU Adam step scales with them")


#: ``cookbook estimate --attention`` (transformers' ``attn_implementation``, :func:`cookbook.attention.choose`) →
#: the speed model's kernel (:data:`cookbook.speed.ATTENTIONS`). cookbook train packs rows by default, so sdpa is the
#: masked kind; flash-attention 2 and eager were not measured: predicted as sdpa on full rows (assumed).
SPEED_ATTENTION = {"flex_attention": "flex", "sdpa": "sdpa_masked", "flash_attention_2": "sdpa", "eager": "sdpa"}


def _estimate_attention(args) -> tuple[str, str | None]:
    """``--attention`` → (the speed model's kernel, transformers' implementation or None). Not given: sdpa on full
    rows, the speed model's reference (what the estimate assumed before the flag). ``auto``: what cookbook train's
    ``auto`` picks for packed rows on a GPU with FlexAttention (flex; sdpa on the CPU rehearsal)."""
    from .attention import choose
    req = getattr(args, "attention", None)
    if req is None:
        return "sdpa", None
    impl, _ = choose(req, on_gpu=not args.cpu_rehearsal, packing=None, flash=req == "flash", flex=True)
    return SPEED_ATTENTION[impl], impl


def _predict(e, machine, args):
    """The speed model's :class:`cookbook.speed.Prediction` for estimate ``e`` as ``cookbook estimate``'s flags ask
    (``--max-steps``/``--num-epochs``/``--dataset-tokens``, ``--attention``)."""
    from .speed import predict
    return predict(e, machine, steps=args.max_steps, epochs=args.num_epochs, dataset_tokens=args.dataset_tokens,
                   attention=_estimate_attention(args)[0])


def _predicted(e, machine, args) -> dict:
    return _predict(e, machine, args).to_dict()


def larger_micro_speed_line(bigger: MemoryEstimate, rec, machine, args) -> str:
    """The predicted speed of :func:`larger_micro_batch`'s suggestion beside the recommended variant's ``rec`` (a
    :class:`cookbook.speed.Prediction`): the same variant and global batch, the larger micro batch, kept with the
    policy's margin (status ``fits``)."""
    p = _predict(bigger, machine, args)
    q = bigger.plan
    ratio = p.tokens_per_s / rec.tokens_per_s
    return (f"larger micro batch: --micro-batch {q.micro_batch} --grad-accum {q.grad_accum} (same variant and global batch, "
            f"{bigger.status} with the measured error: GPU {bigger.headroom.gpu_need_gib:.1f}/{q.gpu_memory_gib:g} GiB): "
            f"{p.tokens_per_s:,.0f} tokens/s, {p.step_s:.2f} s a step, {ratio:.2f}× the recommended "
            f"({p.bound}-bound)")


def _speed_flag_error(args) -> str | None:
    """The first bad speed flag of ``cookbook estimate`` (``--cpu-cores``, ``--max-steps``, ``--num-epochs``,
    ``--dataset-tokens``) in words with its fix, or None."""
    if args.cpu_cores is not None and args.cpu_cores < 1:
        return (f"--cpu-cores {args.cpu_cores}: must be a positive number of CPU cores; give the cores of one "
                "machine, e.g. --cpu-cores 16 (default: this machine's)")
    if args.max_steps is not None and args.max_steps < 1:
        return f"--max-steps {args.max_steps}: must be 1 or more optimizer steps"
    if args.num_epochs is not None and (not args.num_epochs > 0 or not args.dataset_tokens):
        return (f"--num-epochs {args.num_epochs:g} needs --dataset-tokens N (the tokens of your packed dataset, "
                "positive) and epochs above 0; or give --max-steps")
    if args.dataset_tokens is not None and args.dataset_tokens < 1:
        return f"--dataset-tokens {args.dataset_tokens}: must be a positive number of tokens"
    return None


def _run_cli(args) -> int:
    import sys
    from .models import ModelNotFoundError
    from .plan import plan_from_args
    from .speed import SpeedModelError, UnknownGpuError
    from .attention import AttentionError
    from .liger import LigerError, resolve as resolve_liger
    try:
        impl = _estimate_attention(args)[1]
        choice = getattr(args, "liger", None)
        if isinstance(choice, str):   # --liger {auto,on,off}: a planned run, liger-kernel assumed installable there
            from .models import model_spec
            mt = getattr(model_spec(args.model or args.model_option), "model_type", None) if choice == "auto" else None
            # a sweep decides per variant (ZeRO-3 variants drop it: sweep), one plan by its own stage
            stage = None if getattr(args, "sweep", False) else args.zero_stage
            args.liger = resolve_liger(choice, model_type=mt, zero_stage=stage, on_gpu=not args.cpu_rehearsal,
                                       is_installed=True)[0]
    except (AttentionError, LigerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - an unknown model is reported below, by plan_from_args / estimate
        args.liger = False
    bad_speed_flag = _speed_flag_error(args)
    if bad_speed_flag:
        print(f"error: {bad_speed_flag}", file=sys.stderr)
        return 2
    try:
        machine, how = _speed_machine(args)
    except UnknownGpuError as exc:
        known = str(exc).split("known: ", 1)[-1]
        print(f"error: --gpu {args.gpu!r}: unknown GPU; known: {known}; e.g. --gpu \"RTX 4090\"", file=sys.stderr)
        return 2
    try:
        plan = plan_from_args(args)
        device = "cpu" if args.cpu_rehearsal else "cuda"
        if args.gpu is not None and abs(machine.gpu.memory_gib - plan.gpu_memory_gib) > 1.0:
            # --gpu names the card the speed is predicted for; the memory checked is --gpu-memory-gib's
            print(f"note: --gpu {args.gpu!r} has {machine.gpu.memory_gib:g} GiB, but the memory checked is "
                  f"--gpu-memory-gib {plan.gpu_memory_gib:g}; pass --gpu-memory-gib {machine.gpu.memory_gib:g} to "
                  "check the card's own", file=sys.stderr)
        if args.bf16_states and plan.precision != "bf16":   # the typed flags, not sizes.py's Python names
            print(f"error: --bf16-states with --precision {plan.precision}: bf16 optimizer states need bf16 precision; "
                  "drop --bf16-states or set --precision to bf16", file=sys.stderr)
            return 2
        speed = device == "cuda"
        where = f"speed predicted for {plan.num_gpus} × {machine.gpu.name}, {machine.cpu_cores} CPU cores ({how})"
        if args.sweep:
            result = sweep(plan, bf16_states=args.bf16_states, device=device)
            decision = decide(plan, bf16_states=True if args.bf16_states else None, device=device)
            preds = [_predicted(e, machine, args) if speed else None for e in result]
            if args.json:
                variants = [dict(d, predicted=p) for d, p in zip(result.to_dict(), preds)]
                dec = decision.to_dict()
                if speed and decision.recommended is not None:
                    dec["recommended"]["predicted"] = _predicted(decision.recommended, machine, args)
                if speed and decision.larger_micro is not None:
                    dec["larger_micro_batch"]["predicted"] = _predicted(decision.larger_micro, machine, args)
                print(json.dumps({"variants": variants, "decision": dec}, indent=1))
            else:
                frame = result.to_frame()
                if speed:  # a speed only where the variant can run (fits or at the edge)
                    runs = [e.status != NO_FIT for e in result]
                    frame.insert(frame.columns.get_loc("fits GPU"), "tokens/s (predicted)",
                                 [round(p["tokens_per_s"]) if ok else "—" for p, ok in zip(preds, runs)])
                    frame.insert(frame.columns.get_loc("fits GPU"), "s/step",
                                 [round(p["step_s"], 2) if ok else "—" for p, ok in zip(preds, runs)])
                print(frame.to_string(index=False))
                print(SWEEP_LEGEND + (" tokens/s and s/step: the speed model's prediction (below), shown only for "
                                      "variants that fit or are at the edge." if speed else ""))
                print()
                print(str(decision))
                if speed and decision.recommended is not None:
                    print()
                    print(where)
                    if decision.recommended is not None:
                        rec = _predict(decision.recommended, machine, args)
                        print("  recommended: " + str(rec))
                        print("    assumes: " + "; ".join(rec.conditions))
                        if decision.larger_micro is not None:
                            print("  " + larger_micro_speed_line(decision.larger_micro, rec, machine, args))
                    others = [e for e in (*decision.fitting, *decision.at_edge) if e is not decision.recommended]
                    for e in others:   # the price of exactness in time: each other option with room, or at the edge
                        p = _predict(e, machine, args)
                        tag = " (bf16 states, lossy)" if e.bf16_states else ""
                        print(f"  {e.plan.label}{tag}, {e.status}: {p.tokens_per_s:,.0f} tokens/s, "
                              f"{p.step_s:.2f} s a step")
            return 0 if decision.fits else 1
        est = estimate(plan, bf16_states=args.bf16_states, device=device, eager_attention=impl == "eager")
        pred = _predicted(est, machine, args) if speed else None
    except (ModelNotFoundError, EstimateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SpeedModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(dict(est.to_dict(), predicted=pred), indent=1))
    else:
        print(str(est))
        if pred is not None:
            print(f"  {where}")
            print("  " + str(_predict(est, machine, args)))
    return 0


def register(subparsers) -> None:
    """Add ``cookbook estimate MODEL --gpus N --gpu-memory-gib G --zero-stage S ... [--json] [--sweep]``."""
    from .plan import add_plan_arguments
    p = subparsers.add_parser(
        "estimate", help="per-GPU and host memory of a ZeRO plan, with verdicts",
        description="Estimate per-GPU and host memory for a ZeRO fine-tune (model states, activations, "
                    "buffers, overhead) and say whether it fits. No GPU needed.")
    add_plan_arguments(p, positional_model=True, liger_choices=True)
    from .attention import CHOICES as ATTENTION_CHOICES
    p.add_argument("--attention", choices=ATTENTION_CHOICES, default=None,
                   help="the attention cookbook train will use (its --attention): sdpa (packed rows: masked), flex, "
                        "flash, eager (counts the attention scores' memory), auto (flex on a GPU, as cookbook train "
                        "picks for packed rows); the speed model's fraction follows it (docs/speed.md). Default: sdpa "
                        "on full rows, the model's reference")
    p.add_argument("--bf16-states", action="store_true",
                   help="bf16 master weights, gradients and Adam states (halves host RAM; small updates rounded away, loss "
                        f"+{BF16_STATES_LOSS_INCREASE_PCT:.0f}%% measured at lr 2e-5)")
    p.add_argument("--cpu-rehearsal", action="store_true",
                   help="estimate a CPU rehearsal run (every rank's memory is host RAM)")
    p.add_argument("--sweep", action="store_true",
                   help="a table over every ZeRO stage/offload variant, then the recommended one for this machine "
                        "(bf16 states and NVMe included) or the smallest change that would fit; exit 1 when nothing fits")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--gpu", default=None, metavar="NAME",
                   help="the card the speed is predicted for: RTX 4090, RTX 3090, A100, H100, H200, L40S, ... "
                        "(default: this machine's GPU, else RTX 4090)")
    p.add_argument("--cpu-cores", type=int, default=None, metavar="N",
                   help="CPU cores of one machine, shared by its ranks' CPU Adam (default: this machine's)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N", help="optimizer steps of the run (for its time)")
    p.add_argument("--num-epochs", type=float, default=None, metavar="E",
                   help="epochs of the run over --dataset-tokens (for its time)")
    p.add_argument("--dataset-tokens", type=int, default=None, metavar="N", help="tokens of the packed dataset")
    p.set_defaults(func=_run_cli)


__all__ = ["zero12_init_peak_bytes", "AT_EDGE", "ERROR_BANDS_FILE", "ErrorBand", "FITS", "Headroom", "NO_FIT", "NVME_SUB_GROUP_SIZES", "NvmeKnobs",
           "choose_nvme_knobs", "error_band", "error_bands", "flattens_on_gpu", "headroom", "nvme_knobs_line",
           "LARGER_MICRO_MEASURED_OPT", "LIGER_HEADROOM_GIB", "LIGER_MEASURED_GAP", "LARGER_MICRO_MEASURED", "larger_micro_batch", "larger_micro_line", "larger_micro_speed_line", "liger_chunk_size", "liger_flce_bytes", "OffloadChoice", "choose_offload_run", "MODEL_STATE_KEYS", "PARTITIONED_STATE_KEYS", "SHARE_MODEL", "rank_model_states_gib", "share_ratio", "BF16_STATES_COST", "BF16_STATES_NOTE", "Decision", "decide", "fixes_that_fit", "variant_cost", "variant_flags", "ADDITIONAL_BUFFER_FACTOR", "batch_sweep", "choose_variant", "rehearsal_memory_note", "CUDA_CONTEXT_GIB", "DS_DEFAULTS", "EstimateError", "FETCH_FRAGMENTATION_LAYERS", "FRAGMENTATION",
           "MemoryEstimate", "RUNTIME_BASELINE_GIB", "CPU_RUNTIME_BASELINE_GIB", "host_runtime_gib", "SweepResult", "activation_bytes", "calculator", "compare",
           "estimate", "estimate_host_rss_cpu_run", "load_calibration", "plot_breakdown", "register", "sweep"]
