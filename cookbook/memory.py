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
* Host: the same DeepSpeed estimators (offloaded states; each rank's fp32 copy of the model while it
  loads; ``additional_buffer_factor`` = 1.5).
* Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models", Section 4.1: ``s*b*h*(34 + 5*a*s/h)`` bytes per layer in 16-bit without checkpointing;
  the ``5*a*s/h`` term (attention scores, softmax, dropout) is not stored by fused attention
  (SDPA / FlashAttention, transformers' default), leaving ``34*s*b*h`` (their "selective
  recomputation" figure). With full checkpointing, ``2*s*b*h`` per layer (the layer input) plus one
  layer's full activations during its recompute. Plus the logits over the vocabulary:
  ``b*s*V*(2 + 4)`` bytes, the 16-bit logits and the fp32 copy that transformers'
  ``ForCausalLMLoss`` (``transformers/loss/loss_utils.py``: ``logits = logits.float()``) makes before
  the cross entropy (whose saved log-softmax output takes the copy's place in backward).
* Buckets: DeepSpeed's ZeRO config defaults (``deepspeed/runtime/zero/config.py``:
  ``reduce_bucket_size`` = ``allgather_bucket_size`` = 5e8, ``stage3_prefetch_bucket_size`` = 5e7,
  ``stage3_max_live_parameters`` = 1e9 elements) or the numbers of a given DeepSpeed config; the
  buffers allocated are read from ``stage_1_and_2.py`` (``setup_buckets``: one reduce bucket, two
  with ``overlap_comm``) and ``stage3.py`` (one reduce bucket per communication dtype). "auto" values
  follow transformers' DeepSpeed integration docs (``reduce_bucket_size = h*h``,
  ``stage3_prefetch_bucket_size = 0.9*h*h``).
* CUDA context: measured on the H200 with lazy module loading (0.68 GiB), :data:`CUDA_CONTEXT_GIB`;
  transformers docs, "Model training anatomy", give 1-2 GB for eagerly loaded kernels.
* Allocator overhead and runtime baselines: measured calibrations in ``data/calibration/*.json``
  (see :data:`ALLOCATOR_OVERHEAD`, :data:`RUNTIME_BASELINE_GIB`, :data:`CUDA_HOST_RUNTIME_GIB`).
"""
from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

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

#: Caching-allocator headroom as a fraction of the peak allocated bytes (``reserved ≈ allocated × 1.25``).
#: Calibrated on the H200-at-24-GiB runs in ``data/calibration/h200_24gib.json``: unpressured
#: reserved/allocated ratios were 1.33-1.57 (that includes cache the allocator gives back under
#: pressure), while a run at 15.4 GiB allocated completed inside a 24 GiB cap, so the need is below
#: 1.56 × allocated. 0.25 keeps every calibration verdict right.
ALLOCATOR_OVERHEAD = 0.25

#: Host RSS of one training rank before model states, GiB: Python + torch + transformers + deepspeed
#: imported, a tiny model, DeepSpeed engine and gloo process group. Measured on the CPU rehearsal
#: (``data/calibration/cpu_rehearsal.json``: 0.53 GiB peak per rank, tiny-qwen2, 2 ranks, ZeRO-2).
RUNTIME_BASELINE_GIB = 0.55

#: Extra host RSS of a rank that initialises CUDA (driver, cuBLAS/cuDNN host code), GiB. Measured on the
#: H200 (``data/calibration/cuda_runtime.json``): 0.94 GiB RSS after CUDA kernels ran vs 0.28-0.30 GiB for
#: the same imports on a CPU-only torch; eager module loading would take ~5 GiB.
CUDA_HOST_RUNTIME_GIB = 0.65

_CALIBRATION_DIR = Path(__file__).resolve().parent.parent / "data" / "calibration"

#: Display names of the components, in stacking order.
GPU_COMPONENTS = {
    "params_16bit": "16-bit parameters",
    "grads_16bit": "16-bit gradients",
    "master_fp32": "master weights (fp32)",
    "adam_states": "Adam m and v",
    "grads_fp32": "optimizer gradient partition (fp32)",
    "largest_layer": "largest layer, gathered (ZeRO-3)",
    "activations": "activations (incl. logits)",
    "grad_staging": "gradient staging for offload (beyond activations)",
    "comm_buckets": "communication buckets",
    "prefetch_buffers": "prefetch / live parameters (ZeRO-3)",
    "allocator_overhead": "allocator overhead",
    "cuda_context": "CUDA context",
}
HOST_COMPONENTS = {
    "params_16bit": "offloaded 16-bit parameters",
    "master_fp32": "offloaded master weights (fp32)",
    "adam_states": "offloaded Adam m and v",
    "grads_fp32": "offloaded optimizer gradients (fp32)",
    "model_load": "fp32 model copy per rank at load (beyond states)",
    "buffer_factor": "DeepSpeed buffer factor (×1.5 − 1)",
    "pinned_buffers": "NVMe swap buffers (pinned)",
    "ranks_on_cpu": "rank tensors (CPU rehearsal)",
    "runtime": "runtime per rank (Python, torch, DeepSpeed)",
}
#: Keys keep the mixed-precision names; with ``bf16_states`` the "(fp32)" rows hold bf16 tensors
#: and the labels say so (see :func:`_labels`).
#: Model-state components (the part DeepSpeed's estimators count).
MODEL_STATE_KEYS = ("params_16bit", "grads_16bit", "master_fp32", "adam_states", "grads_fp32", "largest_layer")
HOST_MODEL_STATE_KEYS = ("params_16bit", "master_fp32", "adam_states", "grads_fp32", "model_load", "buffer_factor")


class EstimateError(ValueError):
    """An estimator input outside its domain; the message names it and the fix."""


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
        """Host model states per machine with the buffer factor (DeepSpeed's cpu_mem)."""
        return sum(self.host_gib.get(k, 0.0) for k in HOST_MODEL_STATE_KEYS)

    @property
    def host_model_states_no_factor_gib(self) -> float:
        """Host model states per machine before DeepSpeed's 1.5× buffer factor."""
        return self.host_model_states_gib - self.host_gib.get("buffer_factor", 0.0)

    @property
    def gpu_allocated_gib(self) -> float:
        """Predicted peak of ``torch.cuda.max_memory_allocated()`` (tensors only), GiB."""
        return self.gpu_gib["total"] - self.gpu_gib.get("allocator_overhead", 0.0) - self.gpu_gib.get("cuda_context", 0.0)

    @property
    def gpu_reserved_gib(self) -> float:
        """Predicted need in ``torch.cuda.max_memory_reserved()`` terms (tensors + allocator overhead), GiB."""
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
        """Both verdicts hold (an unknown host counts as fitting)."""
        return bool(self.fits_gpu) and self.fits_host is not False

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
            "fits_gpu": bool(self.fits_gpu),
            "fits_host": self.fits_host,
            "bf16_states": self.bf16_states,
            "device": self.device,
            "verdict": self.verdict,
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
                "why": e.reasons[0] if e.reasons else "",
            })
        return pd.DataFrame(rows)

    def to_dict(self) -> list[dict]:
        return [e.to_dict() for e in self.estimates]

    def _repr_html_(self) -> str:
        return self.to_frame().to_html(index=False)

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)


# --------------------------------------------------------------------------------------------
# formulas

def _bytes_per_state(precision: str, bf16_states: bool) -> dict[str, int]:
    """Bytes per parameter of each model state.

    Mixed precision (bf16/fp16) with Adam: ZeRO paper Section 3 — 2 (16-bit parameters) + 2 (16-bit
    gradients) + 4 (fp32 master) + 8 (Adam m, v in fp32); DeepSpeed also keeps a 4-byte fp32 gradient
    partition (``single_partition_of_fp32_groups[i].grad``, stage_1_and_2.py; comment in
    ``estimate_zero2_model_states_mem_needs``). fp32 training: 4 + 4 + 8, no master copy, gradients
    already fp32. ``bf16_states``: master weights, fp32-gradient partition and Adam m, v in bf16
    (DeepSpeed ``bf16_master_weights_and_grads`` / ``bf16_optimizer_states``): 2 + 2 + 4.
    """
    if precision == "fp32":
        if bf16_states:
            raise EstimateError("bf16_states=True with precision='fp32': bf16 optimizer states need "
                                "precision='bf16'; set precision='bf16' or bf16_states=False")
        return {"param": 4, "grad": 4, "master": 0, "adam": 8, "grad_fp32": 0}
    if bf16_states:
        if precision != "bf16":
            raise EstimateError(f"bf16_states=True with precision={precision!r}: DeepSpeed's bf16 master weights "
                                "and optimizer states need precision='bf16'")
        return {"param": 2, "grad": 2, "master": 2, "adam": 4, "grad_fp32": 2}
    return {"param": 2, "grad": 2, "master": 4, "adam": 8, "grad_fp32": 4}


def activation_bytes(spec, plan: Plan, *, eager_attention: bool = False) -> dict[str, float]:
    """Activation memory of one rank at its peak, in bytes.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
    Section 4.1, Eq. 1): ``s*b*h*(34 + 5*a*s/h)`` bytes per transformer layer in 16-bit without
    checkpointing. The ``5*a*s/h`` term (attention scores/softmax/dropout) is only stored by eager
    attention (``eager_attention=True``); SDPA/FlashAttention (transformers' default) does not store it.
    Full checkpointing (HF ``gradient_checkpointing_enable``, one checkpoint per decoder layer):
    ``2*s*b*h`` per layer (its 16-bit input) + one layer's full activations during its recompute.
    Logits: ``b*s*V*(2 + 4)`` — 16-bit logits + the fp32 copy from ``logits.float()`` in transformers'
    ``ForCausalLMLoss`` (``transformers/loss/loss_utils.py``). fp32 training doubles every term.

    Returns:
        ``{"layers": bytes, "logits": bytes, "total": bytes}``.
    """
    s, b, h = plan.seq_len, plan.micro_batch, spec.hidden_size
    a = max(spec.num_heads, 1)
    scale = 2 if plan.precision == "fp32" else 1
    per_layer = s * b * h * (34 + (5 * a * s / h if eager_attention else 0)) * scale
    if plan.gradient_checkpointing:
        layers = spec.num_layers * 2 * s * b * h * scale + per_layer
    else:
        layers = spec.num_layers * per_layer
    logits = b * s * spec.vocab_size * ((4 if plan.precision == "fp32" else 2) + 4)
    return {"layers": float(layers), "logits": float(logits), "total": float(layers + logits)}


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


def estimate(plan: Plan, *, bf16_states: bool = False, spec=None, device: str = "cuda",
             ds_config: Mapping | None = None, eager_attention: bool = False) -> MemoryEstimate:
    """Per-GPU and per-machine host memory of ``plan``, component by component, with verdicts.

    Args:
        plan: the planned run (model, world size, GPU/host memory, ZeRO stage, offload, batch shape).
        bf16_states: keep master weights, gradients and Adam states in bf16 (DeepSpeed 0.19
            ``bf16.bf16_master_weights_and_grads`` + ``bf16.bf16_optimizer_states``); needs bf16.
        spec: a :class:`~cookbook.models.ModelSpec`; default ``model_spec(plan.model)`` (cached).
        device: ``"cuda"`` (a GPU run) or ``"cpu"`` (the CPU rehearsal: every rank's tensors live in
            host RAM, no CUDA context, no GPU verdict beyond "fits").
        ds_config: a DeepSpeed config dict whose bucket sizes to use (default DeepSpeed's defaults).
        eager_attention: count the attention-score activations (eager attention instead of SDPA).

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

    Host model states follow DeepSpeed's estimators: offloaded states, or each rank's fp32 copy
    while it loads the model (4·N·r for stages 0-2, 4·L·r for stage 3 with ``zero.Init``), whichever
    is larger, times ``additional_buffer_factor`` 1.5. Everything else (activations, buckets,
    overhead, runtime) is documented on the module and the constants.

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
    zs = _zero_settings(spec, ds_config)
    overlap = zs["overlap_comm"] if zs["overlap_comm"] is not None else stage == 3  # DeepSpeed default
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
        # only the 16-bit parameters on the GPU (the gradient partition moves to host, see grad_staging)
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

    # ---- activations, staging, buckets ---------------------------------------------------------
    act = activation_bytes(spec, plan, eager_attention=eager_attention)
    gpu["activations"] = act["total"]
    if stage == 2 and opt_off != "none":
        # 16-bit gradients of this rank's partition wait on the GPU until the copy to host at the
        # accumulation boundary (stage_1_and_2.py, copy_grads_in_partition / async_inplace_copy_grad_
        # to_fp32_buffer_from_gpu), and at initialisation the flat 16-bit buffer is built beside the
        # parameters (the measured 6.74e9 ZeRO-2 OOM "tried to allocate 12.55 GiB" = 2·N). This phase
        # does not overlap the activation peak, so only its excess over the activations is added.
        staging = B["grad"] * N / g
        gpu["grad_staging"] = max(0.0, staging - act["total"])
    if stage > 0:
        cbytes = 2 if plan.precision != "fp32" else 4
        nbuf = 2 if (overlap and stage < 3) else 1
        gpu["comm_buckets"] = nbuf * min(zs["reduce_bucket_size"], N) * cbytes
        if stage < 3 and g > 1:
            gpu["comm_buckets"] += min(zs["allgather_bucket_size"], N) * cbytes
        if stage == 3:
            gpu["prefetch_buffers"] = (min(zs["stage3_prefetch_bucket_size"], N)
                                       + min(zs["stage3_max_live_parameters"], N)) * cbytes
    tensors = sum(gpu.values())
    if device == "cuda":
        gpu["allocator_overhead"] = ALLOCATOR_OVERHEAD * tensors
        gpu["cuda_context"] = CUDA_CONTEXT_GIB * GIB

    # ---- host, per machine (bytes) ------------------------------------------------------------
    nvme = 0.0
    if opt_off == "cpu":
        for k, v in opt_bytes.items():
            host[k] = v * N / n
        if not mixed:  # fp32: the gradient partition offloaded is the working gradient itself
            host["grads_fp32"] = B["grad"] * N / n
    elif opt_off == "nvme":
        nvme += sum(opt_bytes.values()) * N / n
    if par_off == "cpu":
        host["params_16bit"] = B["param"] * N / n
    elif par_off == "nvme":
        nvme += B["param"] * N / n
    offloaded = sum(host.values())
    load_fp32 = (4 * N if stage < 3 else (4 * L if (opt_off == "none" and par_off == "none") else 0)) * r
    host["model_load"] = max(0.0, load_fp32 - offloaded)
    host["buffer_factor"] = (ADDITIONAL_BUFFER_FACTOR - 1) * (offloaded + host["model_load"])
    if opt_off == "nvme":
        # optimizer swap buffers: buffer_count × one sub-group's fp32 state (offload_config.py defaults)
        sub = min(zs["sub_group_size"], math.ceil(N / g))
        host["pinned_buffers"] += zs["offload_optimizer_buffer_count"] * sub * 4 * r
    if par_off == "nvme":
        host["pinned_buffers"] += zs["offload_param_buffer_count"] * max(zs["offload_param_buffer_size"],
                                                                          math.ceil(L / g)) * B["param"] * r
    host["runtime"] = (RUNTIME_BASELINE_GIB + (CUDA_HOST_RUNTIME_GIB if device == "cuda" else 0.0)) * GIB * r
    if device == "cpu":
        host["ranks_on_cpu"] = tensors * r
        gpu = dict.fromkeys(gpu, 0.0)

    gpu_gib = {k: v / GIB for k, v in gpu.items()}
    host_gib = {k: v / GIB for k, v in host.items()}
    gpu_gib["total"] = sum(gpu_gib.values())
    host_gib["total"] = sum(host_gib.values())
    fits_gpu = gpu_gib["total"] <= plan.gpu_memory_gib
    fits_host = None if plan.host_memory_gib is None else host_gib["total"] <= plan.host_memory_gib

    # ---- reasons --------------------------------------------------------------------------------
    if device == "cuda":
        staging_full = (B["grad"] * N / g / GIB) if (stage == 2 and opt_off != "none") else 0.0
        # the batch-independent floor: everything but activations, with the staging phase in full
        fixed = ((tensors / GIB - gpu_gib["activations"] - gpu_gib["grad_staging"] + staging_full)
                 * (1 + ALLOCATOR_OVERHEAD) + CUDA_CONTEXT_GIB)
        big_key = max(MODEL_STATE_KEYS, key=lambda k: gpu_gib[k])
        if not fits_gpu:
            if gpu_gib[big_key] > plan.gpu_memory_gib:
                reasons.append(f"GPU: the {GPU_COMPONENTS[big_key]} alone are {gpu_gib[big_key]:.1f} GiB per GPU "
                               f"> {plan.gpu_memory_gib:g} GiB, whatever the batch size")
            elif fixed > plan.gpu_memory_gib:
                reasons.append(f"GPU: model states, buckets{', gradient staging' if staging_full else ''} and overhead "
                               f"need {fixed:.1f} GiB per GPU > {plan.gpu_memory_gib:g} GiB before any activation, "
                               "whatever the batch size")
            else:
                reasons.append(f"GPU: {gpu_gib['total']:.1f} GiB > {plan.gpu_memory_gib:g} GiB; activations are "
                               f"{gpu_gib['activations']:.1f} GiB: lower micro_batch/seq_len or turn on gradient "
                               "checkpointing")
        else:
            reasons.append(f"GPU: {gpu_gib['total']:.1f} GiB of {plan.gpu_memory_gib:g} GiB "
                           f"({plan.gpu_memory_gib - gpu_gib['total']:.1f} GiB left); largest part: "
                           f"{GPU_COMPONENTS[max(gpu_gib, key=lambda k: gpu_gib[k] if k != 'total' else -1)]}")
    states = host_gib["params_16bit"] + host_gib["master_fp32"] + host_gib["adam_states"] + host_gib["grads_fp32"]
    host_line = (f"host: {host_gib['total']:.1f} GiB per machine (model states {states + host_gib['model_load']:.1f} GiB "
                 f"before DeepSpeed's 1.5× buffer factor, {host_gib['total'] - host_gib['runtime'] - host_gib['pinned_buffers'] - host_gib['ranks_on_cpu']:.1f} GiB with it)")
    if fits_host is False:
        reasons.append(host_line.replace("host:", "host does not fit:", 1) + f" > {plan.host_memory_gib:g} GiB")
    else:
        reasons.append(host_line)
    if nvme:
        reasons.append(f"NVMe: {nvme / GIB:.1f} GiB of offloaded states per machine on {plan.nvme_path}")
    if not mixed:
        reasons.append("fp32 training: the '16-bit' parameter and gradient rows hold fp32 tensors (4 bytes each)")
    if bf16_states:
        reasons.append("bf16 states: master weights, gradients and Adam m, v in bf16 (half the host RAM; "
                       "less precise updates)")

    return MemoryEstimate(params=N, plan=plan, gpu_gib=gpu_gib, host_gib=host_gib, fits_gpu=bool(fits_gpu),
                          fits_host=fits_host, reasons=tuple(reasons), largest_layer_params=L,
                          bf16_states=bool(bf16_states), device=device, nvme_gib=nvme / GIB)


def estimate_host_rss_cpu_run(plan: Plan, *, bf16_states: bool = False) -> float:
    """Predicted peak host RSS (GiB, sum over the machine's ranks) of a CPU-rehearsal run of ``plan``.

    Same as ``estimate(plan, device="cpu").host_gib["total"]``: each rank's tensors in host RAM plus
    offloaded states plus :data:`RUNTIME_BASELINE_GIB` per rank (measured calibration).
    """
    return estimate(plan, bf16_states=bf16_states, device="cpu").host_gib["total"]


def sweep(plan: Plan, variants: Iterable[tuple[int, str, str]] = VARIANTS, *, bf16_states: bool = False,
          spec=None, device: str = "cuda") -> SweepResult:
    """Estimate ``plan`` under each ZeRO variant ``(zero_stage, offload_optimizer, offload_param)``.

    Variants with NVMe get ``nvme_path="/local_nvme"`` when the plan has none (a label only).

    Returns:
        a :class:`SweepResult` (``to_frame()``: one row per variant with both verdicts).
    """
    out = []
    for stage, opt, par in variants:
        changes = {"zero_stage": stage, "offload_optimizer": opt, "offload_param": par}
        if "nvme" in (opt, par) and not plan.nvme_path:
            changes["nvme_path"] = "/local_nvme"
        try:
            variant = plan.replace(**changes)
        except PlanError as exc:
            raise EstimateError(f"variant {(stage, opt, par)}: {exc}") from None
        out.append(estimate(variant, bf16_states=bf16_states, spec=spec, device=device))
    return SweepResult(tuple(out))


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
        the matplotlib Figure.
    """
    import matplotlib.pyplot as plt
    ests = list(estimates)
    if not ests:
        raise EstimateError("estimates=[]: pass at least one MemoryEstimate (e.g. sweep(plan))")
    if where not in ("gpu", "host"):
        raise EstimateError(f"where={where!r}: use 'gpu' or 'host'")
    names = _labels(GPU_COMPONENTS if where == "gpu" else HOST_COMPONENTS, ests[0].bf16_states)
    if ax is None:
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
    return fig


def calculator(model: str = "qwen-14b", **plan_fields):
    """An ipywidgets calculator: model, GPUs, GPU memory, host memory, stage, offload, micro batch,
    sequence length, checkpointing; redraws the breakdown chart and the verdicts on every change.

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); ``.controls`` holds the input widgets by
        name and ``.result`` the latest :class:`SweepResult`.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from .models import shipped_models

    base = Plan(model=model, **plan_fields)
    options = shipped_models()
    if model not in options:
        options = [model, *options]
    ctl = {
        "model": w.Combobox(value=model, options=options, description="model", ensure_option=False),
        "num_gpus": w.IntSlider(value=base.num_gpus, min=1, max=64, description="GPUs"),
        "gpu_memory_gib": w.FloatText(value=base.gpu_memory_gib, description="GPU GiB"),
        "host_memory_gib": w.FloatText(value=base.host_memory_gib or 0.0, description="host GiB (0=?)"),
        "variant": w.Dropdown(options=[("all variants", None)] + [(Plan(zero_stage=s, offload_optimizer=o, offload_param=p,
                              nvme_path="/nvme").label, (s, o, p)) for s, o, p in VARIANTS], value=None,
                              description="ZeRO"),
        "micro_batch": w.IntSlider(value=base.micro_batch, min=1, max=64, description="micro batch"),
        "seq_len": w.Dropdown(options=[256, 512, 1024, 2048, 4096, 8192], value=base.seq_len if base.seq_len in
                              (256, 512, 1024, 2048, 4096, 8192) else 512, description="seq len"),
        "gradient_checkpointing": w.Checkbox(value=base.gradient_checkpointing, description="gradient checkpointing"),
        "bf16_states": w.Checkbox(value=False, description="bf16 states"),
    }
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            try:
                plan = base.replace(model=ctl["model"].value, num_gpus=ctl["num_gpus"].value,
                                    gpu_memory_gib=ctl["gpu_memory_gib"].value or base.gpu_memory_gib,
                                    host_memory_gib=ctl["host_memory_gib"].value or None,
                                    micro_batch=ctl["micro_batch"].value, seq_len=ctl["seq_len"].value,
                                    gradient_checkpointing=ctl["gradient_checkpointing"].value)
                variants = VARIANTS if ctl["variant"].value is None else [ctl["variant"].value]
                result = sweep(plan, variants, bf16_states=ctl["bf16_states"].value)
            except Exception as exc:  # noqa: BLE001 - shown to the user, widget keeps working
                print(f"error: {exc}")
                return
            box.result = result
            fig = plot_breakdown(result)
            from IPython.display import display
            display(fig)
            plt.close(fig)
            for e in result:
                print(e.verdict)
                for r in e.reasons:
                    print("   ", r)

    box = w.VBox([w.HBox([ctl["model"], ctl["num_gpus"], ctl["gpu_memory_gib"], ctl["host_memory_gib"]]),
                  w.HBox([ctl["variant"], ctl["micro_batch"], ctl["seq_len"]]),
                  w.HBox([ctl["gradient_checkpointing"], ctl["bf16_states"]]), out])
    box.controls = ctl  # the input widgets, by plan field name
    box.result = None   # the latest SweepResult
    for c in ctl.values():
        c.observe(redraw, names="value")
    redraw()
    return box


# --------------------------------------------------------------------------------------------
# CLI

def _run_cli(args) -> int:
    import sys
    from .models import ModelNotFoundError
    from .plan import plan_from_args
    try:
        plan = plan_from_args(args)
        device = "cpu" if args.cpu_rehearsal else "cuda"
        if args.sweep:
            result = sweep(plan, bf16_states=args.bf16_states, device=device)
            if args.json:
                print(json.dumps(result.to_dict(), indent=1))
            else:
                print(str(result))
            return 0
        est = estimate(plan, bf16_states=args.bf16_states, device=device)
    except (ModelNotFoundError, EstimateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(est.to_dict(), indent=1) if args.json else str(est))
    return 0


def register(subparsers) -> None:
    """Add ``cookbook estimate MODEL --gpus N --gpu-memory-gib G --zero-stage S ... [--json] [--sweep]``."""
    from .plan import add_plan_arguments
    p = subparsers.add_parser(
        "estimate", help="per-GPU and host memory of a ZeRO plan, with verdicts",
        description="Estimate per-GPU and host memory for a ZeRO fine-tune (model states, activations, "
                    "buffers, overhead) and say whether it fits. No GPU needed.")
    add_plan_arguments(p, positional_model=True)
    p.add_argument("--bf16-states", action="store_true",
                   help="bf16 master weights, gradients and Adam states (halves host RAM; less precise)")
    p.add_argument("--cpu-rehearsal", action="store_true",
                   help="estimate a CPU rehearsal run (every rank's memory is host RAM)")
    p.add_argument("--sweep", action="store_true", help="a table over every ZeRO stage/offload variant")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_run_cli)


__all__ = ["ADDITIONAL_BUFFER_FACTOR", "ALLOCATOR_OVERHEAD", "CUDA_CONTEXT_GIB", "DS_DEFAULTS", "EstimateError",
           "MemoryEstimate", "RUNTIME_BASELINE_GIB", "SweepResult", "activation_bytes", "calculator", "compare",
           "estimate", "estimate_host_rss_cpu_run", "load_calibration", "plot_breakdown", "register", "sweep"]
