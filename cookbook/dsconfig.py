"""DeepSpeed config builder: one :class:`~cookbook.plan.Plan` in, one DeepSpeed JSON dict out.

Three targets, because the same run is launched three ways:

* ``deepspeed`` — plain ``deepspeed.initialize(config=...)``: every value explicit.
* ``accelerate`` — ``accelerate launch`` with ``deepspeed_config_file``: every value explicit
  too (Accelerate fills ``"auto"`` only for a few keys; explicit numbers avoid surprises and
  the same file also works with plain DeepSpeed).
* ``trainer`` — the Hugging Face ``Trainer`` (``TrainingArguments(deepspeed=...)``): ``"auto"``
  wherever ``transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig`` fills the value from
  ``TrainingArguments`` and the model config, so the two can never disagree.

A user's own config goes the other way: :func:`resolve_config` fills its ``"auto"`` values from a plan
exactly as the HF Trainer and Accelerate fill them (``cookbook launch --config``, ``cookbook lint --resolve``).

Sources for every key and default:
  * DeepSpeed config reference, https://www.deepspeed.ai/docs/config-json/ and the pydantic
    models in ``deepspeed/runtime/zero/config.py``, ``deepspeed/runtime/zero/offload_config.py``,
    ``deepspeed/runtime/precision_config.py``, ``deepspeed/runtime/swap_tensor/constants.py``.
  * Hugging Face DeepSpeed integration, ``transformers/integrations/deepspeed.py``
    (``HfTrainerDeepSpeedConfig.trainer_config_process`` / ``trainer_config_finalize``) and
    https://huggingface.co/docs/transformers/deepspeed (the ZeRO-2 / ZeRO-3 example configs).
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .plan import Plan, PlanError

#: Targets the builder writes for (see the module docstring).
TARGETS = ("deepspeed", "accelerate", "trainer")

#: Preset name -> (zero_stage, offload_optimizer, offload_param); the cookbook's ZeRO ladder.
PRESETS = {
    "zero2": (2, "none", "none"),
    "zero2-offload": (2, "cpu", "none"),
    "zero3": (3, "none", "none"),
    "zero3-offload-optimizer": (3, "cpu", "none"),
    "zero3-offload": (3, "cpu", "cpu"),
    "zero3-nvme": (3, "nvme", "nvme"),
    "zero2-offload-liger": (2, "cpu", "none"),
}

#: Paths where ``"auto"`` is a value DeepSpeed itself accepts and resolves (not the HF Trainer's / Accelerate's
#: placeholder): ZenFlow's ``select_strategy``, ``select_interval`` and ``update_interval``
#: (``deepspeed/runtime/zenflow/zenflow_config.py``, defaults ``"auto"``; ``runtime/zenflow/engine.py``,
#: ``configure_zenflow``). Left as written; the linter does not ask to fill them.
DEEPSPEED_OWN_AUTO = frozenset(f"zero_optimization.zenflow.{k}" for k in ("select_strategy", "select_interval",
                                                                          "update_interval"))

#: Training-side options a preset carries beside its ZeRO settings (plan fields; DeepSpeed's JSON has no key for
#: them). ``zero2-offload-liger``: the recipe (ZeRO-2 + optimizer CPU offload, fp32 states: exact Adam) with
#: Liger's fused linear cross-entropy (``--liger``, :mod:`cookbook.liger`) and flex attention (``--attention``,
#: :mod:`cookbook.attention`), the fastest exact-Adam recipe measured for a ~3B model on one 24 GiB GPU
#: (:data:`LIGER_RECOMMENDED`: micro batch 24, with room; micro 32 ran faster at the edge of the card,
#: ``recipe.flex_liger_micro32``). :func:`preset_plan` sets them, and ``cookbook config`` prints the ``cookbook
#: launch`` command that applies them: ``cookbook train``/``launch`` choose both by default (``auto``), another
#: training script given only the JSON trains without them.
PRESET_OPTIONS = {"zero2-offload-liger": {"liger": True}}

#: The evidence key of the measured ``zero2-offload-liger`` run (:mod:`cookbook.evidence`, ``data/evidence.json``).
LIGER_RECOMMENDED_EVIDENCE = "recipe.default_micro24"


def _liger_recommended() -> dict:
    from .evidence import get
    r = get(LIGER_RECOMMENDED_EVIDENCE)
    return {"micro_batch": r.extra["micro_batch"], "attention": r.extra["attention"], "seq_len": 1024,
            "gpu_memory_gib": 24, "bf16_states": r.extra["states"] == "bf16", "tokens_per_s": r.value,
            "baseline_tokens_per_s": float(r.baseline["value"]), "ratio": r.ratio,
            "allocated_gib": r.extra["peak_gpu_allocated_gib"], "reserved_gib": r.extra["peak_gpu_reserved_gib"],
            "source": r.cite()}


#: The measured ``zero2-offload-liger`` run as a dict (micro batch, attention, tokens/s, the same-call baseline,
#: memory, source), rendered from :data:`LIGER_RECOMMENDED_EVIDENCE`.
LIGER_RECOMMENDED = _liger_recommended()

#: ``stage3_max_live_parameters`` / ``stage3_max_reuse_distance``: DeepSpeed's defaults (1e9), as in
#: the HF ZeRO-3 example config. Lower them (e.g. 1e8) to save GPU memory at some speed cost.
STAGE3_MAX_LIVE_PARAMETERS = 10**9
STAGE3_MAX_REUSE_DISTANCE = 10**9
#: ``sub_group_size``: DeepSpeed's default (1e9 elements per optimizer sub-group).
SUB_GROUP_SIZE = 10**9

#: fp16 dynamic loss scaling block: DeepSpeed's defaults (``precision_config.DeepSpeedFP16Config``):
#: loss_scale 0 = dynamic; start at 2**16; raise after 1000 clean steps; hysteresis 2; floor 1.
FP16_BLOCK = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
              "hysteresis": 2, "min_loss_scale": 1}

#: Top-level ``aio`` block for NVMe offload: DeepSpeed's defaults (``swap_tensor/constants.py``
#: AIO_FORMAT; https://www.deepspeed.ai/docs/config-json/#asynchronous-io). Tune with
#: ``cookbook nvme-tune PATH -o aio.json`` on the real SSD, then ``build_config(..., aio="aio.json")``.
AIO_BLOCK = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
             "overlap_events": True}

#: NVMe swap buffers. Optimizer: 4 buffers (DeepSpeed's default, ``offload_config.py``).
#: Parameters: at least 5 buffers (default; more when :func:`cookbook.nvme.param_buffers_needed` says DeepSpeed
#: holds more at once) of ``buffer_size`` elements; ``max_in_cpu`` 1e9 (default); ``stage3_max_reuse_distance``
#: :data:`cookbook.nvme.NVME_PARAM_MAX_REUSE_DISTANCE` (0) — see :func:`build_config` (DeepSpeed #3062).
NVME_OPTIMIZER_BUFFER_COUNT = 4
NVME_PARAM_BUFFER_COUNT = 5
NVME_PARAM_MIN_BUFFER_SIZE = 10**8  # DeepSpeed's default buffer_size (elements)
NVME_PARAM_MAX_IN_CPU = 10**9


#: Learning-rate schedules, as the HF Trainer names them (``transformers.get_scheduler``): ``linear``
#: (warm-up, then linear decay to 0 at the last step; DeepSpeed ``WarmupDecayLR``), ``cosine`` (warm-up,
#: then half a cosine to 0; ``WarmupCosineLR``) and ``constant`` (warm-up, then constant; ``WarmupLR``;
#: HF's ``constant_with_warmup``, which is HF's ``constant`` when the warm-up is 0).
LR_SCHEDULERS = ("linear", "cosine", "constant")

#: DeepSpeed scheduler type of each schedule (``deepspeed/runtime/lr_schedules.py``).
DS_SCHEDULER_TYPES = {"linear": "WarmupDecayLR", "cosine": "WarmupCosineLR", "constant": "WarmupLR"}
#: ``cookbook config --lr`` when not typed: 2e-5, Stanford Alpaca's lr for LLaMA-7B full fine-tunes (its
#: README's training command); said on stderr when a config is written with it.
CONFIG_DEFAULT_LR = 2e-5

#: DeepSpeed scheduler type -> the ``--lr-scheduler`` name it runs (the inverse of :data:`DS_SCHEDULER_TYPES`).
SCHEDULER_KINDS = {v: k for k, v in DS_SCHEDULER_TYPES.items()}


def describe_scheduler(block: dict, lr: float | None = None) -> str:
    """One line for the learning-rate schedule a DeepSpeed ``scheduler`` block runs, e.g.
    ``"WarmupLR: constant 2e-05 after 1 warm-up step(s) from 2e-05"``.

    Args:
        block: the config's ``scheduler`` section (``{"type", "params"}``), with any "auto" already filled.
        lr: the optimizer's lr (used where ``WarmupLR`` has no ``warmup_max_lr`` and for ``WarmupCosineLR``'s
            ratios).

    Missing params take DeepSpeed's own defaults (``deepspeed/runtime/lr_schedules.py``: ``WarmupLR``
    warmup_min_lr 0, warmup_max_lr = the optimizer's lr, warmup_num_steps 1000; ``WarmupDecayLR``
    warmup_max_lr 0.001; ``WarmupCosineLR`` warmup_min_ratio 0, cos_min_ratio 0.0001). Other types are
    described by their params. Raises nothing.
    """
    kind = str(block.get("type"))
    p = block.get("params") or {}

    def num(v):
        return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)

    n = p.get("warmup_num_steps", 1000)
    if kind == "WarmupLR":
        lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", lr)
        if lo == hi:
            return f"WarmupLR: constant {num(hi)} at every step (warmup_min_lr = warmup_max_lr; {num(n)} warm-up step(s) change nothing)"
        return f"WarmupLR: constant {num(hi)} after {num(n)} warm-up step(s) from {num(lo)}"
    if kind == "WarmupDecayLR":
        lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", 0.001)
        return (f"WarmupDecayLR: {num(lo)} -> {num(hi)} over {num(n)} warm-up step(s), then linear to {num(lo)} "
                f"at step {num(p.get('total_num_steps'))}")
    if kind == "WarmupCosineLR":
        base = "lr" if lr is None else num(lr)
        return (f"WarmupCosineLR: {num(p.get('warmup_min_ratio', 0.0))} x {base} -> {base} over {num(n)} warm-up "
                f"step(s), then cosine to {num(p.get('cos_min_ratio', 0.0001))} x {base} at step "
                f"{num(p.get('total_num_steps'))}")
    return f"{kind}: " + (", ".join(f"{k}={num(v)}" for k, v in p.items()) or "DeepSpeed's defaults")


class ConfigError(PlanError):
    """A builder argument cannot work; the message names the argument, its value and the fix (templated like
    :class:`~cookbook.plan.PlanError`, so a command names its own flags)."""


def steps_per_epoch(num_examples: int, micro_batch: int, grad_accum: int, world_size: int) -> int:
    """Optimizer steps in one pass over ``num_examples`` training rows, as the HF Trainer counts them:
    each rank's dataloader has ``ceil(N / (micro_batch × world_size))`` micro batches, and an epoch has
    ``ceil(that / grad_accum)`` optimizer steps, at least 1 (``Trainer._inner_training_loop``,
    ``num_update_steps_per_epoch``, transformers 4.5x).

    Raises:
        ConfigError: a count below 1.
    """
    for name, v in (("num_examples", num_examples), ("micro_batch", micro_batch), ("grad_accum", grad_accum),
                    ("world_size", world_size)):
        _check_number(name, v, minimum=1, integer=True)
    per_rank = math.ceil(num_examples / (micro_batch * world_size))
    return max(1, math.ceil(per_rank / grad_accum))


def total_steps_for_epochs(num_epochs: float, num_examples: int, micro_batch: int, grad_accum: int,
                           world_size: int) -> int:
    """Optimizer steps of ``num_epochs`` epochs: ``ceil(num_epochs × steps_per_epoch)`` (the HF
    Trainer's ``max_steps = math.ceil(args.num_train_epochs * num_update_steps_per_epoch)``).

    Raises:
        ConfigError: ``num_epochs`` not a positive number, or a count below 1.
    """
    _check_number("num_epochs", num_epochs, strict=True)
    return max(1, math.ceil(num_epochs * steps_per_epoch(num_examples, micro_batch, grad_accum, world_size)))


def default_warmup_steps(max_steps: int | None) -> int:
    """The launch helper's warm-up when none is given: 5 % of ``max_steps``, at least 1 (1 when the length is not
    known yet)."""
    return max(1, max_steps // 20) if max_steps is not None else 1


def warmup_steps_for(total_steps: int, warmup_ratio: float = 0.0, warmup_steps: int | None = None) -> int:
    """Warm-up steps as the HF Trainer computes them (``TrainingArguments.get_warmup_steps``): an explicit
    ``warmup_steps`` wins; else ``ceil(total_steps × warmup_ratio)``.

    Raises:
        ConfigError: a ratio outside [0, 1) or negative steps.
    """
    if warmup_steps is not None:
        _check_number("warmup_steps", warmup_steps, integer=True)
        return int(warmup_steps)
    _check_number("warmup_ratio", warmup_ratio)
    if warmup_ratio >= 1:
        raise ConfigError(f"warmup_ratio={warmup_ratio!r}: a fraction of the steps in [0, 1), e.g. 0.03")
    return math.ceil(total_steps * warmup_ratio)


def target_hyperparameters(plan: Plan, *, lr: float, num_epochs: float, num_rows: int,
                           lr_scheduler: str = "cosine", warmup_ratio: float = 0.03) -> dict:
    """The schedule of a real fine-tune of ``plan`` as :func:`build_config` keyword arguments: ``lr``,
    ``lr_scheduler``, ``warmup_steps`` and ``total_steps`` for ``num_epochs`` epochs over ``num_rows``
    training rows at the plan's global batch (:func:`total_steps_for_epochs`, :func:`warmup_steps_for`).

    ``num_rows`` is what the trainer iterates over: with packing (the default) the examples packed into
    rows of ``plan.seq_len`` tokens, fewer than the examples; :func:`cookbook.launch.planned_rows` counts
    them with the trainer's own code, so the steps here are the ones ``cookbook train`` runs.

    For the notebooks' "target" configs, so that they carry a real run's numbers, never the rehearsal's.
    Typical full fine-tunes of 7B-14B models: lr 1e-5 - 2e-5, 2-3 epochs, cosine, 3% warm-up (Stanford
    Alpaca, LLaMA-7B: lr 2e-5, 3 epochs, cosine, warmup_ratio 0.03; Qwen's finetune.py for full-parameter
    runs: lr 1e-5).

    Raises:
        ConfigError: an argument out of range.
    """
    if lr_scheduler not in LR_SCHEDULERS:
        raise ConfigError(f"lr_scheduler={lr_scheduler!r}: use one of {', '.join(LR_SCHEDULERS)}")
    _check_number("lr", lr, strict=True)
    total = total_steps_for_epochs(num_epochs, num_rows, plan.micro_batch, plan.grad_accum, plan.world_size)
    return {"lr": lr, "lr_scheduler": lr_scheduler, "warmup_steps": warmup_steps_for(total, warmup_ratio),
            "total_steps": total}


# ----------------------------------------------------------------------------------------------
# small pure helpers
# ----------------------------------------------------------------------------------------------

def bucket_sizes(hidden_size: int) -> dict:
    """ZeRO bucket sizes derived from the model's hidden size ``h``, as the HF integration does.

    Returns ``{"reduce_bucket_size": h*h, "stage3_prefetch_bucket_size": int(0.9*h*h),
    "stage3_param_persistence_threshold": 10*h}`` (all in elements, not bytes).
    For Qwen-14B (h = 5120): 26214400, 23592960, 51200.

    Source: ``transformers/integrations/deepspeed.py``, ``HfTrainerDeepSpeedConfig.
    trainer_config_finalize`` (the values it writes for ``"auto"``); also Accelerate's
    ``Accelerator._prepare_deepspeed``.

    Raises:
        ConfigError: ``hidden_size`` is not a positive integer.
    """
    if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
        raise ConfigError(f"hidden_size={hidden_size!r}: must be a positive integer (the model config's hidden_size)")
    h = hidden_size
    return {
        "reduce_bucket_size": h * h,
        "stage3_prefetch_bucket_size": int(0.9 * h * h),
        "stage3_param_persistence_threshold": 10 * h,
    }


def auto_precision(compute_capability: tuple[int, int] | None) -> str:
    """``"bf16"`` when the GPU computes in bfloat16 natively, else ``"fp16"`` (with loss scaling).

    Args:
        compute_capability: CUDA compute capability ``(major, minor)``, e.g. ``(8, 9)`` for an
            RTX 4090; ``None`` for a CPU run (PyTorch's CPU backend supports bf16) -> ``"bf16"``.

    bf16 needs compute capability >= 8.0 (Ampere A100/RTX 30xx, Ada RTX 40xx, Hopper H100/H200);
    source: NVIDIA CUDA C Programming Guide, "Arithmetic Instructions" (bf16 from sm_80), and
    ``torch.cuda.is_bf16_supported``.

    Raises:
        ConfigError: ``compute_capability`` is not a pair of integers.
    """
    if compute_capability is None:
        return "bf16"
    try:
        major, minor = compute_capability
        cc = (int(major), int(minor))
    except (TypeError, ValueError):
        raise ConfigError(f"compute_capability={compute_capability!r}: give (major, minor), e.g. (8, 9) "
                          "for an RTX 4090, or None for CPU") from None
    return "bf16" if cc >= (8, 0) else "fp16"


def preset_plan(preset: str, **plan_fields) -> Plan:
    """A :class:`Plan` for one of :data:`PRESETS`, with the other plan fields given.

    Example: ``preset_plan("zero3-offload", model="qwen-14b", num_gpus=8, micro_batch=1, grad_accum=16)``.
    A preset's training-side options (:data:`PRESET_OPTIONS`, e.g. ``liger=True`` for ``zero2-offload-liger``)
    are set on the plan like its ZeRO fields, and contradicting them is an error.

    Raises:
        ConfigError: unknown preset, or a ZeRO/offload field that contradicts the preset.
        PlanError: another field out of its domain (e.g. ``zero3-nvme`` without ``nvme_path``).
    """
    if preset not in PRESETS:
        raise ConfigError(f"preset={preset!r}: unknown; use one of {', '.join(PRESETS)}")
    stage, opt, param = PRESETS[preset]
    fixed = {"zero_stage": stage, "offload_optimizer": opt, "offload_param": param, **PRESET_OPTIONS.get(preset, {})}
    for key, value in fixed.items():
        if key in plan_fields and plan_fields[key] != value:
            raise ConfigError(f"{key}={plan_fields[key]!r} contradicts preset {preset!r} ({key}={value!r}); "
                              f"drop {key} or pick another preset")
    plan_fields.update(fixed)
    if "nvme" in (opt, param) and not plan_fields.get("nvme_path"):
        raise PlanError.about("{preset} offloads to NVMe but {nvme_path.name} is not set: set it to a folder on a "
                              "fast local NVMe SSD", preset=preset, nvme_path=None)
    return Plan(**plan_fields)


def host_memory_needed_gib(plan: Plan) -> float | None:
    """Host RAM per machine (GiB) DeepSpeed estimates for the model states of ``plan``.

    Uses DeepSpeed's own estimators, ``estimate_zero2_model_states_mem_needs`` (stages 1-2) and
    ``estimate_zero3_model_states_mem_needs`` (stage 3) from ``deepspeed/runtime/zero/
    stage_1_and_2.py`` / ``stage3.py``, with their default ``additional_buffer_factor`` 1.5. NVMe
    offload counts as no CPU offload (the states live on the SSD). Returns ``None`` for stage 0.
    """
    if plan.zero_stage == 0:
        return None
    from .models import model_spec
    spec = model_spec(plan.model)
    per_node = plan.num_gpus // plan.num_machines
    if plan.zero_stage == 3:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        cpu, _gpu, _ = estimate_zero3_model_states_mem_needs(
            spec.num_params, spec.largest_layer_params, num_gpus_per_node=per_node, num_nodes=plan.num_machines,
            cpu_offload=plan.offload_optimizer == "cpu", cpu_offload_params=plan.offload_param == "cpu",
            zero_init=True)
    else:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        cpu, _gpu = estimate_zero2_model_states_mem_needs(
            spec.num_params, num_gpus_per_node=per_node, num_nodes=plan.num_machines,
            cpu_offload=plan.offload_optimizer == "cpu")
    return cpu / 2**30


#: What ``pin_memory: false`` costs: the evidence record ``pin_memory.off`` (:mod:`cookbook.evidence`; LLaMA-7B,
#: ZeRO-3 full offload, one GPU capped at 24 GiB), as the dict the messages read.
def _pin_memory_off_cost() -> dict:
    from .evidence import get
    r = get("pin_memory.off")
    return {"pinned_tokens_per_s": float(r.baseline["value"]), "unpinned_tokens_per_s": r.value, "source": r.cite()}


PIN_MEMORY_OFF_COST = _pin_memory_off_cost()


def host_memory_short(plan: Plan, *, bf16_states: bool = False) -> bool:
    """True when the plan's ``host_memory_gib`` is known and below the cookbook's host-RAM estimate of the run with
    pinned buffers (:func:`cookbook.memory.estimate` with ``bf16_states``: its pinned power-of-two rounding and
    staging included; within ±15 % of the measured host peak on the GPU runs, e.g. LLaMA-7B with full offload and
    bf16 states: 101.4 GiB estimated, 102.2 measured). When the model is unknown to the estimator, DeepSpeed's own
    estimate with its 1.5× buffer factor (:func:`host_memory_needed_gib`) decides.

    Pinned (page-locked) host memory cannot be swapped out, so with short RAM ``pin_memory: true``
    turns a slow run into a killed one (DeepSpeed docs, ``offload_optimizer.pin_memory``). Turning it off is not
    free: :data:`PIN_MEMORY_OFF_COST` (source: evidence ``pin_memory.off``), so only a real shortage turns it off.
    (DeepSpeed's fp32-states estimate, which decided before, also for bf16 states, had LLaMA-7B on a 125.8 GiB
    machine run unpinned although its 102 GiB fit.)
    """
    if plan.host_memory_gib is None or plan.offload_optimizer == "none" and plan.offload_param == "none":
        return False
    try:
        from .memory import estimate
        need = estimate(plan, bf16_states=bf16_states and plan.precision == "bf16").host_gib["total"]
    except Exception:  # noqa: BLE001 — a model the estimator cannot size: DeepSpeed's estimate decides
        need = host_memory_needed_gib(plan)
    return need is not None and need > plan.host_memory_gib


def pin_memory_note(plan: Plan, *, bf16_states: bool = False) -> str | None:
    """Why a config for ``plan`` gets ``pin_memory: false`` (:func:`host_memory_short` decided it), with the numbers
    of that check: the typed host RAM, the host need with pinned buffers (:func:`cookbook.memory.estimate`, GiB, its
    power-of-two rounding of pinned blocks included) and without them, and the measured cost
    (:data:`PIN_MEMORY_OFF_COST`). None when the config keeps ``pin_memory: true`` (or nothing is offloaded)."""
    if not host_memory_short(plan, bf16_states=bf16_states):
        return None
    c = PIN_MEMORY_OFF_COST
    slower = c["pinned_tokens_per_s"] / c["unpinned_tokens_per_s"]
    try:
        from .memory import estimate
        host = estimate(plan, bf16_states=bf16_states and plan.precision == "bf16").host_gib
        need, unpinned = host["total"], host["total"] - host.get("pinned_rounding", 0.0)
        how = (f"the cookbook's host estimate for {plan.label} on {plan.num_gpus} GPU(s) is {need:.1f} GiB with pinned "
               f"buffers (power-of-two rounding of pinned blocks {host.get('pinned_rounding', 0.0):.1f} GiB included), "
               f"{unpinned:.1f} GiB unpinned")
        fits = (f"; unpinned it fits" if unpinned <= plan.host_memory_gib else
                f"; even unpinned it does not fit: `cookbook estimate ... --sweep` finds a variant that does")
    except Exception:  # noqa: BLE001 - a model the estimator cannot size: DeepSpeed's estimate decided
        need = host_memory_needed_gib(plan)
        how = f"DeepSpeed's estimate of the model states (additional_buffer_factor 1.5) is {need:.1f} GiB"
        fits = ""
    return (f"[pin_memory] false in zero_optimization.offload_* because --host-memory-gib {plan.host_memory_gib:g} is "
            f"below what the run needs with pinned buffers: {how}{fits}. Pinned (page-locked) memory cannot be swapped "
            f"out, so a pinned run that does not fit is killed rather than slowed. It costs speed: measured "
            f"{slower:.1f}x slower end to end with the optimizer and the parameters offloaded "
            f"({c['pinned_tokens_per_s']:,.0f} -> {c['unpinned_tokens_per_s']:,.0f} tokens/s; PIN_MEMORY_OFF_COST, "
            f"{c['source']}); with {need:.0f} GiB of RAM or more the config keeps pin_memory true")


# ----------------------------------------------------------------------------------------------
# the builder
# ----------------------------------------------------------------------------------------------

def _check_number(name: str, value, *, minimum: float = 0.0, strict: bool = False, integer: bool = False):
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if integer:
        ok = ok and isinstance(value, int)
    if ok:
        ok = value > minimum if strict else value >= minimum
    if not ok:
        kind = "an integer" if integer else "a number"
        rel = ">" if strict else ">="
        raise ConfigError.about(f"{{{name}}}: must be {kind} {rel} {minimum}", **{name: value})


def check_bf16_states(plan: Plan, bf16_states: bool) -> None:
    """Refuse bf16 states (``bf16.bf16_master_weights_and_grads`` + ``bf16_optimizer_states``) where the run cannot
    have them: without bf16 precision, with ZeRO stage 0 (DeepSpeed keeps bf16 master weights only in its ZeRO
    optimizers), with the optimizer on NVMe (DeepSpeed 0.19.8's swapper, below). Raises :class:`ConfigError`
    naming both fields (rendered as the caller's flags by :func:`cookbook.plan.user_message`)."""
    if not bf16_states:
        return
    if plan.precision != "bf16":
        raise ConfigError.about("{bf16_states} with {precision}: bf16 optimizer states need bf16 precision; drop "
                                "{bf16_states.name} or set {precision.name} to bf16",
                                bf16_states=True, precision=plan.precision)
    if plan.zero_stage == 0:
        raise ConfigError.about("{bf16_states} with {zero_stage}: DeepSpeed supports bf16 master weights only with "
                                "ZeRO stage 1, 2 or 3; raise {zero_stage.name} or drop {bf16_states.name}",
                                bf16_states=True, zero_stage=plan.zero_stage)
    if plan.offload_optimizer == "nvme":
        # DeepSpeed 0.19.8: stage3._configure_tensor_swapping builds the optimizer swapper with
        # dtype=master_weights_and_grads_dtype (bf16) and swap_tensor/utils.py SwapBufferManager.allocate
        # asserts dtype == self.dtype at the first swap -> "AssertionError" at start (seen on an H200)
        raise ConfigError.about("{bf16_states} with {offload_optimizer}: DeepSpeed 0.19.8 stops at start with an "
                                "AssertionError in runtime/swap_tensor/utils.py (assert dtype == self.dtype): its NVMe "
                                "optimizer swapper cannot hold bf16 master weights and optimizer states; drop "
                                "{bf16_states.name} (fp32 states on NVMe), or keep the bf16 states and offload the "
                                "optimizer to the CPU instead of NVMe", bf16_states=True, offload_optimizer="nvme")


def build_config(plan: Plan, target: str = "deepspeed", *, lr: float = 2e-5, weight_decay: float = 0.0,
                 betas=(0.9, 0.95), eps: float = 1e-8, warmup_steps: int = 0, total_steps: int | None = None,
                 gradient_clipping: float = 1.0, bf16_states: bool = False,
                 steps_per_print: int = 10**9, lr_scheduler: str | None = None, aio=None) -> dict:
    """The DeepSpeed config (a JSON-ready dict) for ``plan``, for one launch ``target``.

    Args:
        plan: the run (ZeRO stage, offload targets, batch shape, precision, model).
        target: ``deepspeed`` or ``accelerate`` (explicit values) or ``trainer`` (``"auto"`` where
            the HF Trainer fills the value from ``TrainingArguments`` / the model config).
        lr: peak learning rate (AdamW ``lr`` and the scheduler's ``warmup_max_lr``).
        weight_decay, betas, eps: AdamW hyper-parameters (decoupled weight decay, Loshchilov &
            Hutter 2019).
        warmup_steps: optimizer steps of linear warm-up from 0 to ``lr``. DeepSpeed >= 0.19.6 rejects
            ``warmup_num_steps`` <= 0, so 0 is written as 1; and its schedulers warm up over at least
            2 steps (``lr_schedules.WarmupLR``). With ``total_steps=None`` and ``warmup_steps=0`` the
            schedule is constant (``warmup_min_lr = warmup_max_lr = lr``).
        total_steps: optimizer steps of the run (``total_num_steps`` of the decaying schedules).
        lr_scheduler: ``linear``, ``cosine`` or ``constant`` (:data:`LR_SCHEDULERS`); None: ``linear``
            when ``total_steps`` is given, else ``constant``. The DeepSpeed block (the training entry
            hands it to DeepSpeed through Accelerate's ``DummyScheduler``), with ``W`` warm-up steps
            (at least 2 in DeepSpeed), ``T`` total steps and ``i`` the scheduler's step count (0 after the
            first optimizer step; the first step itself runs at the minimum):

            * ``linear``: ``WarmupDecayLR``, lr·i/W while i < W, then lr·(T − i)/(T − W);
            * ``cosine``: ``WarmupCosineLR`` (ratios of the optimizer's lr), lr·i/W while i < W, then
              lr·(1 + cos(π·min(1, (i − W + 1)/(T − W))))/2, down to 0 (``cos_min_ratio`` 0, as HF's
              ``get_cosine_schedule_with_warmup``; DeepSpeed's default would stop at 1e-4);
            * ``constant``: ``WarmupLR``, lr·i/W while i < W, then lr.

            Without warm-up (``warmup_steps=0``) ``constant`` and ``cosine`` start at lr (minimum =
            maximum); ``linear`` keeps DeepSpeed's 2-step ramp (0, lr/2), because its decay is
            ``min + (max − min)·γ`` and a minimum of lr would never decay. This is the HF Trainer's
            schedule shifted by one step (DeepSpeed steps its scheduler after the optimizer and starts
            from the minimum); the HF Trainer hands the same DeepSpeed blocks over when the config has a
            ``scheduler`` section. ``trainer`` target: ``WarmupDecayLR``/``WarmupLR`` with "auto", and
            no block for ``cosine`` (the Trainer then uses its own ``lr_scheduler_type``).
        gradient_clipping: max global gradient L2 norm (0 disables).
        bf16_states: with bf16 precision and ZeRO 1-3, keep master weights, gradients and optimizer
            states in bf16 (``bf16.bf16_master_weights_and_grads`` and ``bf16.bf16_optimizer_states``,
            DeepSpeed >= 0.18, ``precision_config.DeepSpeedBF16Config``): 16 -> 6 bytes per
            parameter of optimizer-side state, at some accuracy risk.
        steps_per_print: DeepSpeed's own progress print interval (default: effectively never; the
            cookbook logs its own metrics).
        aio: tuned NVMe settings for a plan with an NVMe target: the JSON file ``cookbook nvme-tune``
            writes (or its dict, a bare ``aio`` block, or a facts file holding ``nvme_tuned``); see
            :func:`cookbook.nvme.load_aio_config`. Its ``aio`` block replaces DeepSpeed's defaults and its
            ``offload_param`` ``buffer_count``/``buffer_size`` replace the builder's (``buffer_size`` never
            below the largest parameter partition). None: DeepSpeed's default ``aio`` block.

    Batch arithmetic: ``train_batch_size = micro_batch × grad_accum × world size`` (DeepSpeed
    ``runtime/config.py::_batch_assertion``).

    Raises:
        ConfigError: unknown target or an argument out of range (names it and the fix).
        cookbook.models.ModelNotFoundError: ``plan.model`` cannot be resolved (hidden size needed).
    """
    if not isinstance(plan, Plan):
        raise ConfigError(f"plan={plan!r}: pass a cookbook.plan.Plan (e.g. preset_plan('zero3', ...))")
    if target not in TARGETS:
        raise ConfigError(f"target={target!r}: use one of {', '.join(TARGETS)}")
    _check_number("lr", lr, strict=True)
    _check_number("weight_decay", weight_decay)
    _check_number("eps", eps, strict=True)
    _check_number("gradient_clipping", gradient_clipping)
    _check_number("warmup_steps", warmup_steps, integer=True)
    _check_number("steps_per_print", steps_per_print, minimum=1, integer=True)
    if total_steps is not None:
        _check_number("total_steps", total_steps, minimum=1, integer=True)
    if lr_scheduler is None:
        lr_scheduler = "linear" if total_steps is not None else "constant"
    if lr_scheduler not in LR_SCHEDULERS:
        raise ConfigError(f"lr_scheduler={lr_scheduler!r}: use one of {', '.join(LR_SCHEDULERS)}")
    if lr_scheduler != "constant" and total_steps is None and target != "trainer":
        raise ConfigError(f"lr_scheduler={lr_scheduler!r} decays to 0 at the last step: give total_steps "
                          "(the run's optimizer steps), or use lr_scheduler='constant'")
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise ConfigError(f"betas={betas!r}: give two numbers in [0, 1), e.g. (0.9, 0.95)") from None
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ConfigError(f"betas={betas!r}: both must lie in [0, 1), e.g. (0.9, 0.95)")
    check_bf16_states(plan, bf16_states)
    tuned = None
    if aio is not None:
        if "nvme" not in (plan.offload_optimizer, plan.offload_param):
            raise ConfigError(f"aio={aio!r}: tuned aio settings apply only to NVMe offload; drop --aio-config or use "
                              "the zero3-nvme preset")
        from .nvme import NvmeError, load_aio_config
        try:
            tuned = load_aio_config(aio)
        except NvmeError as exc:
            raise ConfigError(str(exc)) from None

    from .models import model_spec
    spec = model_spec(plan.model)
    auto = target == "trainer"

    def val(value):
        return "auto" if auto else value

    cfg: dict[str, Any] = {
        # the three batch numbers; DeepSpeed asserts train = micro × accum × world size
        "train_batch_size": val(plan.global_batch),
        "train_micro_batch_size_per_gpu": val(plan.micro_batch),
        "gradient_accumulation_steps": val(plan.grad_accum),
        "gradient_clipping": val(gradient_clipping),
        "steps_per_print": steps_per_print,
        "wall_clock_breakdown": False,
    }

    # precision
    if plan.precision == "bf16":
        bf16: dict[str, Any] = {"enabled": val(True)}
        if bf16_states:
            bf16["bf16_master_weights_and_grads"] = True
            bf16["bf16_optimizer_states"] = True
        cfg["bf16"] = bf16
    elif plan.precision == "fp16":
        cfg["fp16"] = dict(FP16_BLOCK, enabled=val(True))

    # optimizer: DeepSpeed builds it (FusedAdam on GPU, DeepSpeedCPUAdam when offloaded)
    cfg["optimizer"] = {"type": "AdamW", "params": {
        "lr": val(lr), "betas": val([b1, b2]), "eps": val(eps), "weight_decay": val(weight_decay)}}

    warmup = max(1, warmup_steps)
    if auto:
        if lr_scheduler == "linear":
            cfg["scheduler"] = {"type": "WarmupDecayLR", "params": {
                "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                "total_num_steps": "auto", "warmup_type": "linear"}}
        elif lr_scheduler == "constant":
            cfg["scheduler"] = {"type": "WarmupLR", "params": {
                "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                "warmup_type": "linear"}}
        # cosine: no block; the Trainer builds its own from TrainingArguments.lr_scheduler_type
    elif lr_scheduler == "linear":
        cfg["scheduler"] = {"type": "WarmupDecayLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": lr, "warmup_num_steps": warmup,
            "total_num_steps": total_steps, "warmup_type": "linear"}}
    elif lr_scheduler == "cosine":
        cfg["scheduler"] = {"type": "WarmupCosineLR", "params": {
            "total_num_steps": total_steps, "warmup_min_ratio": 0.0 if warmup_steps > 0 else 1.0,
            "warmup_num_steps": warmup, "cos_min_ratio": 0.0, "warmup_type": "linear"}}
    else:
        cfg["scheduler"] = {"type": "WarmupLR", "params": {
            "warmup_min_lr": 0 if warmup_steps > 0 else lr, "warmup_max_lr": lr,
            "warmup_num_steps": warmup, "warmup_type": "linear"}}

    # ZeRO
    zero: dict[str, Any] = {"stage": plan.zero_stage}
    if plan.zero_stage > 0:
        buckets = bucket_sizes(spec.hidden_size)
        knobs = _nvme_knobs(plan, spec, bf16_states)
        pin = knobs["pin_memory"] if knobs else not host_memory_short(plan, bf16_states=bf16_states)
        if plan.offload_optimizer != "none":
            block: dict[str, Any] = {"device": plan.offload_optimizer, "pin_memory": pin}
            if plan.offload_optimizer == "nvme":
                block.update(nvme_path=plan.nvme_path, buffer_count=NVME_OPTIMIZER_BUFFER_COUNT, fast_init=False)
            zero["offload_optimizer"] = block
        if plan.offload_param != "none":
            block = {"device": plan.offload_param, "pin_memory": pin}
            if plan.offload_param == "nvme":
                # a swap buffer holds one rank's partition of the largest parameter tensor
                # (partitioned_param_swapper.get_buffer asserts numel <= buffer_size)
                need = -(-spec.largest_layer_params // plan.world_size)
                tuned_param = (tuned or {}).get("offload_param") or {}
                block.update(nvme_path=plan.nvme_path,
                             buffer_count=tuned_param.get("buffer_count", NVME_PARAM_BUFFER_COUNT),
                             buffer_size=max(tuned_param.get("buffer_size", NVME_PARAM_MIN_BUFFER_SIZE), need),
                             max_in_cpu=knobs["max_in_cpu"] if knobs else NVME_PARAM_MAX_IN_CPU)
                # buffer_count: at least what DeepSpeed holds at once (set below, once the stage-3 knobs exist)
            zero["offload_param"] = block
        zero["overlap_comm"] = True
        zero["contiguous_gradients"] = True
        zero["reduce_bucket_size"] = val(buckets["reduce_bucket_size"])
        if plan.zero_stage < 3:
            zero["allgather_partitions"] = True
            # same size as the reduce bucket, as in the HF ZeRO-2 example (both 2e8 there); ZeRO-2 all-gathers
            # the updated fp16/bf16 partitions in buckets of this many elements
            zero["allgather_bucket_size"] = buckets["reduce_bucket_size"]
            zero["reduce_scatter"] = True
        else:
            zero["sub_group_size"] = knobs["sub_group_size"] if knobs else SUB_GROUP_SIZE
            zero["stage3_prefetch_bucket_size"] = val(buckets["stage3_prefetch_bucket_size"])
            zero["stage3_param_persistence_threshold"] = val(buckets["stage3_param_persistence_threshold"])
            zero["stage3_max_live_parameters"] = STAGE3_MAX_LIVE_PARAMETERS
            zero["stage3_max_reuse_distance"] = STAGE3_MAX_REUSE_DISTANCE
            zero["stage3_gather_16bit_weights_on_model_save"] = True
    cfg["zero_optimization"] = zero
    if "nvme" in (plan.offload_optimizer, plan.offload_param):
        cfg["aio"] = dict(tuned["aio"]) if tuned else dict(AIO_BLOCK)
    if plan.zero_stage == 3 and plan.offload_param == "nvme":
        _bound_nvme_param_cache(plan, cfg, spec)
    return cfg


def _nvme_knobs(plan: Plan, spec, bf16_states: bool) -> dict | None:
    """NVMe offload (ZeRO-3): DeepSpeed's host-RAM knobs sized for the plan's host RAM —
    :func:`cookbook.memory.choose_nvme_knobs` (``sub_group_size``, ``offload_param.max_in_cpu``, ``pin_memory``;
    DeepSpeed's defaults when they fit with room or the host RAM is not given), the same settings the estimate and
    the decision count. None for other plans."""
    if plan.zero_stage != 3 or "nvme" not in (plan.offload_optimizer, plan.offload_param):
        return None
    from .memory import choose_nvme_knobs
    return dict(choose_nvme_knobs(plan, spec=spec, bf16_states=bf16_states).knobs)


def nvme_knobs_note(plan: Plan, *, bf16_states: bool = False) -> str | None:
    """``[nvme] ...``: the host-RAM knobs an NVMe config was written with and why (``cookbook config`` prints it);
    None for other plans."""
    if plan.zero_stage != 3 or "nvme" not in (plan.offload_optimizer, plan.offload_param):
        return None
    from .memory import _knob_words, choose_nvme_knobs
    from .models import model_spec
    k = choose_nvme_knobs(plan, spec=model_spec(plan.model), bf16_states=bf16_states)
    return f"[nvme] host-RAM knobs: {_knob_words(k.knobs)} ({k.why})"


def _bound_nvme_param_cache(plan: Plan, cfg: dict, spec) -> None:
    """Parameters on NVMe: set ``stage3_max_reuse_distance`` 0 and ``offload_param.buffer_count`` to at least
    what DeepSpeed 0.19.8 holds at once, so that a swap-in never finds the buffers all taken.

    The failure (DeepSpeed issue #3062, https://github.com/deepspeedai/DeepSpeed/issues/3062, open): a
    parameter on the SSD is swapped into one of ``buffer_count`` pinned buffers
    (``runtime/swap_tensor/partitioned_param_swapper.py:310``, ``swap_in`` asserts "Not enough buffers 0 for
    swapping 1") and gives it back only when partitioned again (``runtime/zero/partition_parameters.py:1809``).
    The coordinator does not partition a parameter whose next use lies within ``stage3_max_reuse_distance``
    elements (``runtime/zero/partitioned_param_coordinator.py:634-665``, ``__params_to_release``); with the
    default 1e9 every parameter of a small model, and the last ~1e9/3 elements of a large one, is kept from
    its forward use to its backward use, each holding a buffer: on the H200 a 1.1B LLaMA with the default 5
    buffers died in step 2 with all 5 held by "available" parameters, and the CPU reproduction
    (``tests/test_nvme_buffers.py``) dies the same way.

    Fix, as reproduced: ``stage3_max_reuse_distance`` 0 (nothing is kept between uses; the reproduction runs with
    4 buffers) and ``buffer_count`` = max(5 or the tuned count, :func:`cookbook.nvme.param_buffers_needed`):
    transformers' ZeRO-3 weight init gathers a whole attention block (q, k, v, o: 4 swap-ins at once).
    Cost: host RAM none beyond ``buffer_count × buffer_size × 2`` bytes of locked bf16 buffers (5 × 1e8 × 2 B
    = 0.93 GiB for DeepSpeed's default size; unchanged for LLaMA/Qwen2, whose need is 4); NVMe reads: every
    parameter on the SSD is read again in backward (2 reads per micro-step instead of 1 for those that the
    1e9 distance kept gathered; :func:`cookbook.nvme.estimate_nvme` counts it); GPU memory: less (no
    parameter stays gathered from forward to backward)."""
    from .nvme import NVME_PARAM_MAX_REUSE_DISTANCE, estimate_nvme
    zero = cfg["zero_optimization"]
    zero["stage3_max_reuse_distance"] = NVME_PARAM_MAX_REUSE_DISTANCE
    block = zero["offload_param"]
    est = estimate_nvme(plan, spec=spec, ds_config=cfg, device="cpu")
    block["buffer_count"] = max(int(block["buffer_count"]), int(est.settings["param_buffers_needed"]))


# ----------------------------------------------------------------------------------------------
# "auto": filled from the plan, as the HF Trainer and Accelerate fill it
# ----------------------------------------------------------------------------------------------

#: The ``TrainingArguments`` fields whose defaults the HF Trainer writes into ``"auto"`` when the
#: user sets nothing (``HfTrainerDeepSpeedConfig.trainer_config_process``).
TRAINER_DEFAULT_FIELDS = ("max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay")


@functools.lru_cache(maxsize=1)
def trainer_defaults() -> dict:
    """The defaults of ``transformers.TrainingArguments`` for :data:`TRAINER_DEFAULT_FIELDS`, read
    off the installed transformers (``max_grad_norm`` 1.0, ``adam_beta1`` 0.9, ``adam_beta2`` 0.999,
    ``adam_epsilon`` 1e-8, ``weight_decay`` 0.0 in transformers 5.x)."""
    import dataclasses

    from transformers import TrainingArguments
    return {f.name: f.default for f in dataclasses.fields(TrainingArguments) if f.name in TRAINER_DEFAULT_FIELDS}


@dataclass(frozen=True)
class Filled:
    """One row of the fill table: config ``path``, the ``value`` written, ``source`` (where it came from, in
    the user's words) and ``how``: ``auto`` (the config said "auto"), ``added`` (the config did not have
    the key) or ``kept`` (the config's own value decided an option the user had not typed)."""

    path: str
    value: Any
    source: str
    how: str


@dataclass(frozen=True)
class Problem:
    """A value that cannot be resolved: config ``path``, ``message`` (naming both sides) and ``fix``."""

    path: str
    message: str
    fix: str


@dataclass(frozen=True)
class Resolution:
    """A user's DeepSpeed config resolved for a plan (:func:`resolve_config`).

    Attributes:
        config: the resolved config (no ``"auto"`` left when ``ok``); what DeepSpeed receives.
        original: the config as given. plan: the run, after the config's own values (ZeRO stage,
        offload, batch shape, precision) replaced the options the user had not typed.
        rows: the fill table (:class:`Filled`). problems: :class:`Problem` s; none when ``ok``.
        config_name: how the config is named in messages (its file name).
    """

    config: dict
    original: dict
    plan: Plan | None
    rows: tuple
    problems: tuple
    config_name: str = "the config"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_frame(self):
        """A pandas DataFrame with columns path, value, from."""
        import pandas as pd
        return pd.DataFrame([(r.path, json.dumps(r.value), r.source) for r in self.rows],
                            columns=["path", "value", "from"])

    def _repr_html_(self) -> str:
        if not self.rows:
            return f"<p>{self.config_name}: nothing to fill</p>"
        return f"<p>{self.config_name}, filled for this run:</p>" + self.to_frame().to_html(index=False)

    def __str__(self) -> str:
        if not self.rows:
            return f"{self.config_name}: nothing to fill"
        rows = [(r.path, json.dumps(r.value), r.source) for r in self.rows]
        w0 = max(len("path"), *(len(r[0]) for r in rows))
        w1 = max(len("value"), *(len(r[1]) for r in rows))
        lines = [f"{self.config_name}, filled for this run:", f"  {'path':<{w0}}  {'value':<{w1}}  from"]
        lines += [f"  {p:<{w0}}  {v:<{w1}}  {s}" for p, v, s in rows]
        return "\n".join(lines)


def _node(cfg: dict, path: str, create: bool = False):
    """(parent dict, last key) of a dotted path, or (None, key) when a parent is missing."""
    *parents, key = path.split(".")
    node = cfg
    for part in parents:
        nxt = node.get(part) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            if not create or not isinstance(node, dict):
                return None, key
            nxt = node[part] = {}
        node = nxt
    return node, key


def _value(cfg: dict, path: str, default=None):
    parent, key = _node(cfg, path)
    return parent.get(key, default) if parent is not None else default


def _fixed_int(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() and v >= 1


def resolve_config(config: dict, plan: Plan, *, stated=None, names: dict | None = None, lr: float = 3e-3,
                   max_steps: int = 40, warmup_steps: int | None = None, weight_decay: float | None = None,
                   max_grad_norm: float | None = None, betas=None, eps: float | None = None,
                   save_16bit_model: bool = True, config_name: str = "the config") -> Resolution:
    """Fill every ``"auto"`` of a user's DeepSpeed config from ``plan`` and the training options, the
    way the HF Trainer and Accelerate fill it, and let the config's own values decide what the user did
    not type.

    What is filled, and from where (sources):

    * HF Trainer, ``transformers/integrations/deepspeed.py``, ``HfTrainerDeepSpeedConfig.
      trainer_config_process``: ``train_micro_batch_size_per_gpu`` (micro batch), ``gradient_accumulation_steps``,
      ``train_batch_size`` (world size × micro batch × accumulation), ``gradient_clipping`` (``max_grad_norm``),
      ``optimizer.params.lr`` / ``betas`` (``[adam_beta1, adam_beta2]``) / ``eps`` (``adam_epsilon``) /
      ``weight_decay``, ``scheduler.params.warmup_min_lr`` (0) and ``warmup_max_lr`` (the learning rate),
      ``fp16.enabled`` / ``bf16.enabled`` (the precision). ``trainer_config_finalize``:
      ``zero_optimization.reduce_bucket_size`` = h², ``stage3_prefetch_bucket_size`` = int(0.9·h²),
      ``stage3_param_persistence_threshold`` = 10·h (h: the model config's ``hidden_size``),
      ``scheduler.params.total_num_steps`` (the run's optimizer steps) and ``warmup_num_steps``
      (max(1, warm-up steps)). Values the Trainer takes from ``TrainingArguments`` that the cookbook has no
      option for use ``TrainingArguments``' defaults (:func:`trainer_defaults`).
    * Accelerate, ``accelerate/utils/dataclasses.py`` ``DeepSpeedPlugin.__post_init__``
      (``plugin_to_config_mapping``): ``zero_optimization.stage``, ``offload_optimizer.device`` /
      ``offload_param.device`` and their ``nvme_path``, ``stage3_gather_16bit_weights_on_model_save``
      (``zero3_save_16bit_model``: the cookbook saves the final model, so true); ``accelerator.py``
      ``_prepare_deepspeed`` fills the three hidden-size keys at every ZeRO stage (the Trainer only under
      ZeRO-3) and ``set_mixed_precision`` adds the ``bf16``/``fp16`` block a config lacks.

    Keys the cookbook's training entry needs and the config lacks are added from the plan: the micro batch
    and accumulation (Accelerate adds ``gradient_accumulation_steps``; the Trainer's data loader sets the micro
    batch), ``zero_optimization``, the precision block, an offload block the user typed, and a
    ``WarmupDecayLR`` scheduler (the Trainer's default ``lr_scheduler_type="linear"``; the transformers DeepSpeed
    docs name WarmupDecayLR its DeepSpeed equivalent). When ``train_batch_size`` is a number, an untyped micro
    batch or accumulation is derived from it as DeepSpeed does (``runtime/config.py
    _set_batch_related_parameters``), and so is an untyped world size when all three are numbers.

    A value the config fixes (not "auto") that disagrees with an option the user typed is a :class:`Problem`
    naming both — the Trainer's own rule (``fill_match`` collects "mismatches" and raises), with the user's
    flags. A value the config fixes for an option the user did *not* type wins, and shows in the table as
    ``kept``. Blocks the Trainer keeps (``"fp16": {"enabled": true}`` on a bf16-capable GPU) stay as written.

    Args:
        config: the user's DeepSpeed config (not modified).
        plan: the run as built from the options (typed and defaults).
        stated: the plan fields and options the user typed (``micro_batch``, ``num_gpus``, ``lr``, ``max_steps``,
            ``warmup_steps``, ...); default: none (every option a default the config may override).
        names: how to name each field/option in the table and messages (``{"micro_batch": "--micro-batch"}``);
            default: the Python names.
        lr, max_steps, warmup_steps, weight_decay, max_grad_norm, betas, eps: the training options (None:
            ``warmup_steps`` → 5% of ``max_steps`` as in ``cookbook train``; the others →
            ``TrainingArguments``' defaults).
        save_16bit_model: Accelerate's ``zero3_save_16bit_model`` for the ``"auto"`` of
            ``stage3_gather_16bit_weights_on_model_save``.
        config_name: the config's name in messages (its file name).

    Returns:
        :class:`Resolution`; never raises on a bad config (problems are listed).
    """
    import copy

    stated = set(stated or ())
    names = dict(names or {})
    cfg = copy.deepcopy(config)
    rows: list[Filled] = []
    problems: list[Problem] = []
    cname = config_name
    tdef = trainer_defaults()
    warm = warmup_steps if warmup_steps is not None else default_warmup_steps(max_steps)
    unknown = {"lr": lr is None, "max_steps": max_steps is None}  # a real model's lr/length not given

    def label(key: str) -> str:
        return names.get(key, key)

    def opt(key: str, value) -> str:
        """Where ``value`` of plan field/option ``key`` came from: the typed option, the config key that
        set it (:func:`take` records it in ``origin``, also when it equals the default), else the default."""
        lab = label(key)
        text = f"{lab} {_j(value)}" if lab.startswith("-") else f"{lab}={value!r}"
        if key in stated:
            return text
        if key in origin and fields.get(key) == value:
            return f"{origin[key]} {_j(cfg_written.get(key, value))} in {cname}"
        return text + " (default)"

    def add(path, value, source, how):
        rows.append(Filled(path, value, source, how))

    def disagree(path, cfg_value, key, opt_value, matching=None):
        lab = label(key)
        problems.append(Problem(
            path, f"{path} is {_j(cfg_value)} in {cname}, but {opt(key, opt_value)} was given: the two disagree",
            f"drop {lab} (the config decides), or set {path} to \"auto\" (filled from {lab}) or to "
            f"{_j(opt_value if matching is None else matching)}"))

    def is_auto(path):
        return _value(cfg, path) == "auto"

    # batch numbers that are neither "auto" nor positive integers cannot be resolved (the linter names the fix)
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if key in cfg and cfg[key] != "auto" and not _fixed_int(cfg[key]):
            problems.append(Problem(key, f"{key} is {json.dumps(cfg[key])} in {cname}: neither a positive integer "
                                    "nor \"auto\"", f"write a positive integer for {key}, or \"auto\""))
    for key in ("zero_optimization", "optimizer", "scheduler", "bf16", "fp16"):
        if key in cfg and not isinstance(cfg[key], dict):
            problems.append(Problem(key, f"{key} is {json.dumps(cfg[key])} in {cname}, not an object",
                                    f"write {key} as an object ({{...}}) or delete it"))
    if problems:
        return Resolution(cfg, config, None, (), tuple(problems), cname)

    # ---- A. the plan fields the config fixes ----------------------------------------------------
    fields = plan.to_dict()
    origin: dict[str, str] = {}  # plan field -> config path that decided it (for messages)
    cfg_written: dict[str, object] = {}  # plan field -> the value as the config writes it (bf16.enabled: true)
    zero = cfg.get("zero_optimization")
    zero = zero if isinstance(zero, dict) else None

    def take(field, path, value, cfg_value=None, matching=None):
        """The config fixes plan ``field`` to ``value`` (written ``cfg_value`` at ``path``)."""
        cfg_value = value if cfg_value is None else cfg_value
        if field in origin and fields[field] == value:
            return
        if value == getattr(plan, field):
            if field not in stated:  # the config set it (to the default's value): messages credit the config
                origin[field], cfg_written[field] = path, cfg_value
            return
        if field in stated:
            disagree(path, cfg_value, field, getattr(plan, field), matching)
            return
        over = opt(field, getattr(plan, field))
        fields[field] = value
        origin[field], cfg_written[field] = path, cfg_value
        add(path, cfg_value, f"{cname} (over {over})", "kept")

    if zero is not None:
        st = zero.get("stage")
        if isinstance(st, int) and not isinstance(st, bool) and 0 <= st <= 3:
            take("zero_stage", "zero_optimization.stage", st)
        for part in ("offload_optimizer", "offload_param"):
            block = zero.get(part)
            if isinstance(block, dict):
                dev = block.get("device")
                if dev in ("none", "cpu", "nvme"):
                    take(part, f"zero_optimization.{part}.device", dev)
                if dev == "nvme" and isinstance(block.get("nvme_path"), str) and block["nvme_path"] != "auto":
                    take("nvme_path", f"zero_optimization.{part}.nvme_path", block["nvme_path"])
    for key, field in (("train_micro_batch_size_per_gpu", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        if _fixed_int(cfg.get(key)):
            take(field, key, int(cfg[key]))
    # the learning rate, when the optimizer block fixes it (the scheduler's peak follows it)
    cfg_lr = _value(cfg, "optimizer.params.lr")
    if isinstance(cfg_lr, (int, float)) and not isinstance(cfg_lr, bool) and cfg_lr != lr:
        if "lr" in stated:
            disagree("optimizer.params.lr", cfg_lr, "lr", lr)
        else:
            add("optimizer.params.lr", cfg_lr, f"{cname} (over {opt('lr', lr)})", "kept")
            lr = cfg_lr
    # precision: a block enabled true fixes it; a block enabled false rules that precision out
    blocks = {p: cfg.get(p, cfg.get("bfloat16") if p == "bf16" else None) for p in ("bf16", "fp16")}
    enabled = {p: (b.get("enabled") if isinstance(b, dict) else None) for p, b in blocks.items()}
    if enabled["bf16"] is True:
        take("precision", "bf16.enabled", "bf16", True, False)
    elif enabled["fp16"] is True:
        take("precision", "fp16.enabled", "fp16", True, False)
    elif plan.precision in ("bf16", "fp16") and enabled[plan.precision] is False:
        if "precision" in stated:
            disagree(f"{plan.precision}.enabled", False, "precision", plan.precision, True)
        else:
            other = "fp16" if plan.precision == "bf16" else "bf16"
            take("precision", f"{plan.precision}.enabled", other if enabled[other] == "auto" else "fp32", False)
    # the world size, when the config states all three batch numbers
    tb, mb, ga = (cfg.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                       "gradient_accumulation_steps"))
    if all(_fixed_int(v) for v in (tb, mb, ga)) and int(tb) % (int(mb) * int(ga)) == 0:
        world = int(tb) // (int(mb) * int(ga))
        if world != plan.num_gpus:
            if "num_gpus" in stated:
                problems.append(Problem(
                    "train_batch_size", f"train_batch_size {_j(tb)} in {cname} = micro batch {mb} × accumulation {ga} × "
                    f"world size {world}, but {opt('num_gpus', plan.num_gpus)} was given",
                    f"set train_batch_size to \"auto\" (or {int(mb) * int(ga) * plan.num_gpus}), or give "
                    f"{label('num_gpus')} {world}"))
            else:
                fields["num_gpus"] = world
                if fields.get("num_machines", 1) > 1 and world % fields["num_machines"]:
                    fields["num_machines"] = 1
                add("(world size)", world, f"train_batch_size {_j(tb)} / (micro batch {mb} × accumulation {ga}) in "
                    f"{cname} (over {opt('num_gpus', plan.num_gpus)})", "kept")
    try:
        eff = Plan(**fields)
    except PlanError as exc:
        if problems:  # a consequence of a disagreement already reported
            return Resolution(cfg, config, None, tuple(rows), tuple(problems), cname)
        shown = {f: (f"{origin[f]}={{}} in {cname}", origin[f]) if f in origin else label(f) for f in exc.fields}
        path = next((origin[f] for f in exc.fields if f in origin), "(config)")
        problems.append(Problem(path, exc.render(shown), "make the config and the options agree"))
        return Resolution(cfg, config, None, tuple(rows), tuple(problems), cname)
    if problems:
        return Resolution(cfg, config, eff, tuple(rows), tuple(problems), cname)

    # ---- B. keys the config lacks ---------------------------------------------------------------
    world = eff.num_gpus
    if "zero_optimization" not in cfg:
        cfg["zero_optimization"] = {"stage": eff.zero_stage}
        add("zero_optimization.stage", eff.zero_stage, f"{opt('zero_stage', eff.zero_stage)}; the config has no "
            "zero_optimization (Accelerate requires it)", "added")
    zero = cfg["zero_optimization"]
    if "stage" not in zero:
        zero["stage"] = eff.zero_stage
        add("zero_optimization.stage", eff.zero_stage, opt("zero_stage", eff.zero_stage), "added")
    for part in ("offload_optimizer", "offload_param"):
        target = getattr(eff, part)
        block = zero.get(part)
        if target != "none" and (not isinstance(block, dict) or "device" not in block):
            zero[part] = dict(block) if isinstance(block, dict) else {}
            zero[part]["device"] = target
            add(f"zero_optimization.{part}.device", target, opt(part, target), "added")
            if target == "nvme":
                zero[part]["nvme_path"] = eff.nvme_path
                add(f"zero_optimization.{part}.nvme_path", eff.nvme_path, opt("nvme_path", eff.nvme_path), "added")
    tb = cfg.get("train_batch_size")
    tb_fixed = _fixed_int(tb)
    if "train_micro_batch_size_per_gpu" not in cfg or is_auto("train_micro_batch_size_per_gpu"):
        g = cfg["gradient_accumulation_steps"] if _fixed_int(cfg.get("gradient_accumulation_steps")) else eff.grad_accum
        how = "auto" if is_auto("train_micro_batch_size_per_gpu") else "added"
        if tb_fixed and "micro_batch" not in stated and int(tb) % (int(g) * world) == 0 and int(tb) // (int(g) * world) >= 1:
            m = int(tb) // (int(g) * world)
            cfg["train_micro_batch_size_per_gpu"] = m
            add("train_micro_batch_size_per_gpu", m, f"train_batch_size {_j(tb)} / (accumulation {g} × world size "
                f"{world}), as DeepSpeed derives it", how)
            eff = eff.replace(micro_batch=m)
        else:
            cfg["train_micro_batch_size_per_gpu"] = eff.micro_batch
            add("train_micro_batch_size_per_gpu", eff.micro_batch, opt("micro_batch", eff.micro_batch), how)
    if "gradient_accumulation_steps" not in cfg or is_auto("gradient_accumulation_steps"):
        m = cfg["train_micro_batch_size_per_gpu"]
        how = "auto" if is_auto("gradient_accumulation_steps") else "added"
        if tb_fixed and "grad_accum" not in stated and int(tb) % (int(m) * world) == 0 and int(tb) // (int(m) * world) >= 1:
            g = int(tb) // (int(m) * world)
            cfg["gradient_accumulation_steps"] = g
            add("gradient_accumulation_steps", g, f"train_batch_size {_j(tb)} / (micro batch {m} × world size "
                f"{world}), as DeepSpeed derives it", how)
            eff = eff.replace(grad_accum=g)
        else:
            cfg["gradient_accumulation_steps"] = eff.grad_accum
            add("gradient_accumulation_steps", eff.grad_accum, opt("grad_accum", eff.grad_accum), how)
    have_block = "bf16" in cfg or "bfloat16" in cfg if eff.precision == "bf16" else eff.precision in cfg
    if eff.precision != "fp32" and not have_block:
        block = {"enabled": True} if eff.precision == "bf16" else dict(FP16_BLOCK)
        cfg[eff.precision] = block
        add(f"{eff.precision}.enabled", True, f"{opt('precision', eff.precision)}; Accelerate's set_mixed_precision "
            "adds the block a config lacks", "added")
    if "scheduler" not in cfg and any(unknown.values()):
        problems.append(Problem("scheduler", "the config has no scheduler and the run's "
                                + " and ".join(label(k) for k, v in unknown.items() if v) + " was not given",
                                "give " + " and ".join(label(k) for k, v in unknown.items() if v)))
    elif "scheduler" not in cfg:
        cfg["scheduler"] = {"type": "WarmupDecayLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": lr, "warmup_num_steps": max(1, warm), "total_num_steps": max_steps,
            "warmup_type": "linear"}}
        add("scheduler", "WarmupDecayLR", f"the HF Trainer's default schedule (linear warm-up over "
            f"{opt('warmup_steps', warm)}, linear decay to 0 at {opt('max_steps', max_steps)}, peak "
            f"{opt('lr', lr)}); the config has none", "added")

    # ---- C. "auto", as the Trainer and Accelerate fill it ---------------------------------------
    mb, ga = int(cfg["train_micro_batch_size_per_gpu"]), int(cfg["gradient_accumulation_steps"])
    trainer = "the HF Trainer's"
    b1 = betas[0] if betas is not None else tdef["adam_beta1"]
    b2 = betas[1] if betas is not None else tdef["adam_beta2"]

    def from_opt(key, value, default_field=None):
        if value is not None:
            return value, opt(key, value)
        return tdef[default_field], f"TrainingArguments.{default_field} default (the cookbook has no option for it)"

    clip, clip_src = from_opt("max_grad_norm", max_grad_norm, "max_grad_norm")
    wd, wd_src = from_opt("weight_decay", weight_decay, "weight_decay")
    ep, ep_src = from_opt("eps", eps, "adam_epsilon")
    fills = [
        ("train_batch_size", mb * ga * world, f"micro batch {mb} × accumulation {ga} × world size {world} "
                                              f"({opt('num_gpus', world)})"),
        ("gradient_clipping", clip, clip_src),
        ("optimizer.params.lr", lr, opt("lr", lr)),
        ("optimizer.params.betas", [b1, b2], opt("betas", [b1, b2]) if betas is not None else
         "TrainingArguments.adam_beta1/adam_beta2 defaults (the cookbook has no option for them)"),
        ("optimizer.params.eps", ep, ep_src),
        ("optimizer.params.weight_decay", wd, wd_src),
        ("scheduler.params.warmup_min_lr", 0, f"0 ({trainer} value; not a TrainingArguments option)"),
        ("scheduler.params.warmup_max_lr", lr, opt("lr", lr)),
        ("scheduler.params.total_num_steps", max_steps, opt("max_steps", max_steps)),
        ("scheduler.params.warmup_num_steps", max(1, warm),
         opt("warmup_steps", warm) if warmup_steps is not None else
         f"5% of {opt('max_steps', max_steps)} = {warm} (cookbook train's --warmup-steps default)"
         + (", raised to 1 (DeepSpeed >= 0.19.6 rejects 0)" if warm < 1 else "")),
        ("fp16.enabled", eff.precision == "fp16", opt("precision", eff.precision)),
        ("bf16.enabled", eff.precision == "bf16", opt("precision", eff.precision)),
        ("bfloat16.enabled", eff.precision == "bf16", opt("precision", eff.precision)),
        ("zero_optimization.stage", eff.zero_stage, opt("zero_stage", eff.zero_stage)),
        ("zero_optimization.offload_optimizer.device", eff.offload_optimizer, opt("offload_optimizer", eff.offload_optimizer)),
        ("zero_optimization.offload_param.device", eff.offload_param, opt("offload_param", eff.offload_param)),
        ("zero_optimization.offload_optimizer.nvme_path", eff.nvme_path, opt("nvme_path", eff.nvme_path)),
        ("zero_optimization.offload_param.nvme_path", eff.nvme_path, opt("nvme_path", eff.nvme_path)),
        ("zero_optimization.stage3_gather_16bit_weights_on_model_save", bool(save_16bit_model),
         "Accelerate's zero3_save_16bit_model: cookbook launch passes --zero3_save_16bit_model "
         f"{str(bool(save_16bit_model)).lower()} (the run saves the final model with save_pretrained)"),
    ]
    hidden_paths = ("zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
                    "zero_optimization.stage3_param_persistence_threshold")
    if any(is_auto(p) for p in hidden_paths):
        try:
            from .models import model_spec
            spec = model_spec(str(eff.model))
            h = spec.hidden_size
            b = bucket_sizes(h)
            m = opt("model", eff.model)
            fills += [(hidden_paths[0], b["reduce_bucket_size"], f"hidden_size² = {h}² ({m})"),
                      (hidden_paths[1], b["stage3_prefetch_bucket_size"], f"int(0.9 · hidden_size²) = int(0.9 · {h}²) ({m})"),
                      (hidden_paths[2], b["stage3_param_persistence_threshold"], f"10 · hidden_size = 10 · {h} ({m})")]
        except Exception as exc:  # noqa: BLE001 - the model cannot be read: say which keys need it
            problems.append(Problem(
                hidden_paths[0], f"the hidden-size keys are \"auto\" but the model's hidden size is unknown ({exc})",
                f"give {label('model')} a shipped name, folder or config.json, or write numbers for "
                + ", ".join(p.split('.')[-1] for p in hidden_paths if is_auto(p))))
    if eff.nvme_path is None:
        fills = [f for f in fills if not f[0].endswith(".nvme_path")]
    needs = {"optimizer.params.lr": "lr", "scheduler.params.warmup_max_lr": "lr",
             "scheduler.params.total_num_steps": "max_steps"}
    for path, value, source in fills:
        if is_auto(path) and unknown.get(needs.get(path, "")):
            problems.append(Problem(path, f"\"auto\" needs {label(needs[path])}, which was not given (a real model has "
                                    "no default learning rate or length)",
                                    f"give {label(needs[path])} (full fine-tunes of 7B-14B use lr 1e-5 - 2e-5)"
                                    if needs[path] == "lr" else f"give {label(needs[path])} or --num-epochs"))
            continue
        if is_auto(path):
            parent, key = _node(cfg, path)
            parent[key] = value
            add(path, value, source, "auto")

    # ---- D. explicit values against typed options (the Trainer's fill_match "mismatches") --------
    for path, key, value in (("scheduler.params.warmup_max_lr", "lr", lr),
                             ("scheduler.params.total_num_steps", "max_steps", max_steps),
                             ("scheduler.params.warmup_num_steps", "warmup_steps", max(1, warm)),
                             ("optimizer.params.weight_decay", "weight_decay", weight_decay),
                             ("gradient_clipping", "max_grad_norm", max_grad_norm)):
        if key not in stated or value is None or path in {r.path for r in rows if r.how != "kept"}:
            continue
        have = _value(config, path)
        if isinstance(have, (int, float)) and not isinstance(have, bool) and float(have) != float(value):
            disagree(path, have, key, value)
    tb = cfg.get("train_batch_size")
    if _fixed_int(tb) and int(tb) != mb * ga * world:
        problems.append(Problem(
            "train_batch_size", f"train_batch_size {_j(tb)} in {cname}, but micro batch {mb} × accumulation {ga} × "
            f"world size {world} = {mb * ga * world} ({', '.join(_batch_sources(opt, mb, ga, world))})",
            f"set train_batch_size to \"auto\" (or {mb * ga * world}), or change the micro batch, accumulation or "
            f"{label('num_gpus')} so that they multiply to {_j(tb)}"))

    # ---- E. what nobody fills -------------------------------------------------------------------
    told = {p.path for p in problems}
    left = [p for p, v in _walk_leaves(cfg) if v == "auto" and p not in told and p not in DEEPSPEED_OWN_AUTO]
    for path in left:
        problems.append(Problem(path, f"{path} is \"auto\", which neither the HF Trainer nor Accelerate fills, so "
                                "cookbook launch cannot either", f"write a value for {path}"))
    try:
        eff = plan_from_ds_config(cfg, base=eff) if not problems else eff
    except (PlanError, ValueError, TypeError) as exc:
        problems.append(Problem("(config)", str(exc), "make the config's ZeRO, batch and precision values consistent"))
    return Resolution(cfg, config, eff, tuple(rows), tuple(problems), cname)


def _batch_sources(opt, mb, ga, world) -> list[str]:
    """The source of each factor of the batch, in words: the typed option, the config key that set it, or the
    option's default (``opt`` credits a config key recorded in ``origin``)."""
    return [opt("micro_batch", mb), opt("grad_accum", ga), opt("num_gpus", world)]


def _walk_leaves(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, node


def _j(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


# ----------------------------------------------------------------------------------------------
# diff
# ----------------------------------------------------------------------------------------------

class _Missing:
    """Marks a key absent on one side of a diff."""

    def __repr__(self) -> str:
        return "(absent)"

    __str__ = __repr__


#: The ``before``/``after`` value of a key that one config does not have.
MISSING = _Missing()


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for key, value in d.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: d} if prefix else {}


@dataclass(frozen=True)
class DiffRow:
    """One changed leaf: dotted JSON ``path``, value ``before`` and ``after`` (or :data:`MISSING`)."""

    path: str
    before: Any
    after: Any


@dataclass(frozen=True)
class ConfigDiff:
    """The change between two DeepSpeed configs, as rows (path, before, after), sorted by path."""

    rows: tuple[DiffRow, ...]

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]

    def as_dict(self) -> dict[str, tuple[Any, Any]]:
        """``{path: (before, after)}``."""
        return {r.path: (r.before, r.after) for r in self.rows}

    def to_frame(self):
        """A pandas DataFrame with columns path, before, after (absent shown as ``(absent)``)."""
        import pandas as pd

        def show(v):
            return str(v) if v is MISSING else json.dumps(v)
        return pd.DataFrame([(r.path, show(r.before), show(r.after)) for r in self.rows],
                            columns=["path", "before", "after"])

    def _repr_html_(self) -> str:
        if not self.rows:
            return "<p>(no differences)</p>"
        return self.to_frame().to_html(index=False)

    def __str__(self) -> str:
        if not self.rows:
            return "(no differences)"
        return self.to_frame().to_string(index=False)

    #: Rows :meth:`__repr__` lists before it says how many more there are.
    REPR_ROWS = 12

    def __repr__(self) -> str:
        """How many keys differ, then one ``path: before → after`` line per row (the first :attr:`REPR_ROWS`;
        long values shortened): what a plain-text view of a notebook shows (:meth:`to_frame` has them all)."""
        import textwrap
        if not self.rows:
            return "ConfigDiff: no differences"

        def show(v):
            return textwrap.shorten(str(v) if v is MISSING else json.dumps(v), 60, placeholder=" …")
        lines = [f"ConfigDiff: {len(self.rows)} key(s) differ"]
        lines += [f"  {r.path}: {show(r.before)} → {show(r.after)}" for r in self.rows[:self.REPR_ROWS]]
        if len(self.rows) > self.REPR_ROWS:
            lines.append(f"  … and {len(self.rows) - self.REPR_ROWS} more (.to_frame() lists every row)")
        return "\n".join(lines)


def diff(a: dict, b: dict) -> ConfigDiff:
    """What changes from config ``a`` to config ``b``: one row per differing leaf.

    Nested dicts are compared key by key (paths like ``zero_optimization.offload_param.device``);
    lists and scalars are compared as whole values. A key present on one side only has
    :data:`MISSING` on the other.

    Raises:
        ConfigError: ``a`` or ``b`` is not a dict.
    """
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, dict):
            raise ConfigError(f"{name} is a {type(value).__name__}: diff takes two config dicts")
    fa, fb = _flatten(a), _flatten(b)
    rows = []
    for path in sorted(set(fa) | set(fb)):
        before, after = fa.get(path, MISSING), fb.get(path, MISSING)
        if before is MISSING or after is MISSING or before != after or type(before) is not type(after):
            rows.append(DiffRow(path, before, after))
    return ConfigDiff(tuple(rows))


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

@contextlib.contextmanager
def stdout_to_stderr():
    """Send file descriptor 1 to stderr for a while: DeepSpeed's logger prints to stdout on import,
    which would corrupt JSON that a CLI prints there (``cookbook config > ds.json``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _run(args) -> int:
    with stdout_to_stderr():
        result = _build_for_cli(args)
    if isinstance(result, int):
        return result
    plan, cfg = result
    text = json.dumps(cfg, indent=2) + "\n"
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            print(f"error: -o {args.output}: cannot be written ({exc.strerror}); create the folder first or pick "
                  "another path", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    batch = (f"train_batch_size {plan.global_batch} = micro {plan.micro_batch} × accum {plan.grad_accum} × "
             f"world {plan.world_size}") if args.target != "trainer" else "batch sizes 'auto' (Trainer fills them)"
    where = f" -> {args.output}" if args.output else ""
    states = ", bf16 states" if args.bf16_states else ""
    print(f"{args.preset}: {plan.label}, {plan.precision}{states}, {plan.model}, {batch}, target {args.target}{where}",
          file=sys.stderr)
    if args.bf16_states:
        from .memory import BF16_STATES_NOTE
        print(BF16_STATES_NOTE, file=sys.stderr)
    knobs_note = nvme_knobs_note(plan, bf16_states=args.bf16_states)
    if knobs_note:
        print(knobs_note, file=sys.stderr)
    zero = cfg.get("zero_optimization") or {}
    if (any((zero.get(k) or {}).get("pin_memory") is False for k in ("offload_optimizer", "offload_param"))
            and "pin_memory" not in (knobs_note or "")):
        print(pin_memory_note(plan, bf16_states=args.bf16_states)
              or "[pin_memory] false in zero_optimization.offload_*", file=sys.stderr)
    sched = cfg.get("scheduler")
    if isinstance(sched, dict) and args.target != "trainer":  # the schedule the file runs, and where its lr came from
        lr = cfg["optimizer"]["params"]["lr"]
        origin = ("--lr" if args.lr is not None else
                  f"the default of `cookbook config` (not typed; pass --lr for your model)")
        print(f"[schedule] {describe_scheduler(sched, lr)}; lr {lr:g} from {origin}", file=sys.stderr)
    if plan.liger:
        print(preset_launch_note(plan, args.output or "ds_config.json", bf16_states=args.bf16_states,
                                 target=args.target), file=sys.stderr)
    return 0


def preset_launch_note(plan: Plan, path: str, *, bf16_states: bool = False, target: str = "accelerate") -> str:
    """What a preset with training-side options (:data:`PRESET_OPTIONS`) needs beside its JSON, in words, with
    the ``cookbook launch`` command that applies them (``--liger``). DeepSpeed's JSON has no key for them."""
    import shlex
    cmd = ["cookbook", "launch", "--config", str(path), "--liger", "--attention", LIGER_RECOMMENDED["attention"],
           "--model", str(plan.model),
           "--num-processes", str(plan.num_gpus), "--zero-stage", str(plan.zero_stage),
           "--offload-optimizer", plan.offload_optimizer, "--micro-batch", str(plan.micro_batch),
           "--grad-accum", str(plan.grad_accum), "--seq-len", str(plan.seq_len), "--precision", plan.precision]
    if bf16_states:
        cmd.append("--bf16-states")
    text = ("liger: Liger's fused linear cross-entropy and flex attention are training-side options, not DeepSpeed "
            "keys: `cookbook train`/`launch` turn both on by default where they can run (--liger auto, --attention "
            "auto: an NVIDIA GPU with liger-kernel, packed rows), but another training script given only this JSON "
            "trains WITHOUT them (and micro batch sizes sized for them may not fit). The command, with both stated "
            "(NVIDIA GPU, `pip install liger-kernel`):\n  " + shlex.join(cmd))
    from .memory import LIGER_HEADROOM_GIB
    m = LIGER_RECOMMENDED
    try:
        from .memory import estimate
        est = estimate(plan.replace(liger=True), bf16_states=bf16_states)
        left = plan.gpu_memory_gib - est.gpu_gib["total"]
        if left < LIGER_HEADROOM_GIB:
            text += (f"\n  WARNING: --micro-batch {plan.micro_batch} with --liger leaves {left:.1f} GiB below the "
                     f"{plan.gpu_memory_gib:g} GiB card in the estimate ({est.gpu_gib['total']:.1f} GiB at seq "
                     f"{plan.seq_len}); with sdpa, runs with less than {LIGER_HEADROOM_GIB:g} GiB left ran out of "
                     f"memory; with flex attention micro batch {m['micro_batch']} of the measured run below fit "
                     f"({m['allocated_gib']:g} GiB allocated, {m['reserved_gib']:g} reserved): at the edge, lower "
                     "--micro-batch for room")
    except Exception:  # noqa: BLE001 — a model the estimator cannot size: the measured line below still applies
        pass
    text += (f"\n  measured ({m['source']}): a 3.4B LLaMA on one {m['gpu_memory_gib']} GiB GPU at seq {m['seq_len']}, fp32 "
             f"states, packed rows, micro batch {m['micro_batch']} with --liger --attention {m['attention']} ran "
             f"{m['tokens_per_s']:,.0f} tokens/s, {m['ratio']:.2f}x the sdpa recipe at micro batch 16 in the same call "
             f"({m['allocated_gib']:g} GiB allocated, {m['reserved_gib']:g} reserved): for another model or card, "
             "`cookbook estimate ... --liger` and keep its estimate below the card")
    if target == "trainer":
        text += ("\n  (HF Trainer: TrainingArguments(use_liger_kernel=True, liger_kernel_config={\"rope\": False, "
                 "\"cross_entropy\": False, \"fused_linear_cross_entropy\": True, \"rms_norm\": False, "
                 "\"swiglu\": False}))")
    return text


def _build_for_cli(args):
    from .models import ModelNotFoundError
    fields = {"num_gpus": args.gpus, "micro_batch": args.micro_batch, "grad_accum": args.grad_accum}
    if args.model:
        fields["model"] = args.model
    for name in ("precision", "nvme_path", "host_memory_gib", "seq_len"):
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    if args.gpu and not args.precision:
        from .hardware import gpu_compute_capability
        cc = gpu_compute_capability(args.gpu)
        if cc is None:
            print(f"error: --gpu {args.gpu!r}: unknown GPU; pass --precision bf16 (compute capability >= 8.0) "
                  "or fp16", file=sys.stderr)
            return 2
        fields["precision"] = auto_precision(cc)
    try:
        plan = preset_plan(args.preset, **fields)
        cfg = build_config(plan, args.target, lr=CONFIG_DEFAULT_LR if args.lr is None else args.lr, warmup_steps=args.warmup_steps,
                           total_steps=args.total_steps, bf16_states=args.bf16_states,
                           lr_scheduler=args.lr_scheduler, aio=getattr(args, "aio_config", None))
    except (ConfigError, PlanError, ModelNotFoundError) as exc:
        from .plan import user_message
        preset = (f"preset {args.preset}", f"the preset (not {args.preset})")
        names = {"preset": "preset {}", "zero_stage": preset, "offload_optimizer": preset,
                 "offload_param": preset}
        print(f"error: {user_message(exc, args, names)}", file=sys.stderr)
        return 2
    return plan, cfg


def register(subparsers) -> None:
    """Add ``cookbook config PRESET --gpus N --micro-batch B --grad-accum G ...``."""
    p = subparsers.add_parser(
        "config", help="write a DeepSpeed config for a ZeRO preset",
        description="Print (or write with -o) a DeepSpeed config for a ZeRO preset; summary on stderr.")
    p.add_argument("preset", choices=list(PRESETS), help="ZeRO stage and offload targets")
    p.add_argument("--gpus", type=int, required=True, help="world size (GPUs over all machines)")
    p.add_argument("--micro-batch", type=int, required=True, help="sequences per GPU per forward/backward")
    p.add_argument("--grad-accum", type=int, required=True, help="gradient accumulation steps")
    p.add_argument("--model", default=None, help="shipped name (qwen-14b, llama-7b, ...), folder or cached hub id "
                                                 "(default: tiny-qwen2); sets the bucket sizes from its hidden size")
    p.add_argument("--target", choices=TARGETS, default="deepspeed",
                   help="deepspeed.initialize, accelerate launch, or the HF Trainer ('auto' values)")
    p.add_argument("-o", "--output", default=None, help="write the JSON here instead of stdout")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default=None,
                   help="default: from --gpu, else bf16 (Ampere/Ada/Hopper); fp16 for older GPUs")
    p.add_argument("--gpu", default=None,
                   help="GPU name (e.g. 'RTX 4090', 'V100'): picks bf16 or fp16 when --precision is not given")
    p.add_argument("--nvme-path", default=None, help="folder on a local NVMe SSD (zero3-nvme)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per row of the run (default: the plan's 128); the DeepSpeed JSON does not depend on it, "
                        "the printed launch command and zero2-offload-liger's memory check do")
    p.add_argument("--host-memory-gib", type=float, default=None,
                   help="host RAM per machine in GiB; pin_memory is turned off when it is short")
    p.add_argument("--lr", type=float, default=None,
                   help=f"peak learning rate (default {CONFIG_DEFAULT_LR:g}, said when written)")
    p.add_argument("--warmup-steps", type=int, default=0, help="linear warm-up steps")
    p.add_argument("--total-steps", type=int, default=None, help="optimizer steps of the run (needed by linear/cosine)")
    p.add_argument("--lr-scheduler", choices=LR_SCHEDULERS, default=None,
                   help="linear (WarmupDecayLR), cosine (WarmupCosineLR) or constant (WarmupLR); "
                        "default: linear with --total-steps, else constant")
    p.add_argument("--bf16-states", action="store_true",
                   help="bf16 master weights and optimizer states (DeepSpeed >= 0.18; halves host RAM, small updates "
                        "rounded away: docs/benchmarks.md section 13)")
    p.add_argument("--aio-config", default=None, metavar="FILE",
                   help="tuned NVMe settings from `cookbook nvme-tune PATH -o FILE` (zero3-nvme)")
    p.set_defaults(func=_run)




# ----------------------------------------------------------------------------------------------
# a plan read off a config

def _load_config(config: dict | str | os.PathLike) -> dict:
    if isinstance(config, dict):
        return config
    p = Path(config)
    try:
        return json.loads(p.read_text())
    except OSError as exc:
        raise PlanError(f"--config {str(p)!r}: cannot read it ({exc.strerror or exc}); give a DeepSpeed JSON file") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"--config {str(p)!r}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def plan_from_ds_config(config: dict | str | os.PathLike, *, model: str | None = None, world_size: int | None = None,
                        base: Plan | None = None, **overrides) -> Plan:
    """A :class:`Plan` from a DeepSpeed config (``zero_optimization.stage``, ``offload_optimizer.device``,
    ``offload_param.device``, their ``nvme_path``, ``train_micro_batch_size_per_gpu``,
    ``gradient_accumulation_steps``, ``bf16``/``fp16``), a model name and a world size.
    ``"auto"`` values (filled in by Accelerate) keep the value of ``base`` (or the :class:`Plan`
    defaults). Precedence: ``overrides`` > config > ``base``; ``model``/``world_size`` > ``base``.

    Raises:
        PlanError: unreadable config, or values no plan can hold.
    """
    cfg = _load_config(config)
    zero = cfg.get("zero_optimization") or {}
    fields: dict = base.to_dict() if base is not None else {}
    if model is not None:
        fields["model"] = model
    if world_size is not None:
        fields["num_gpus"] = world_size
    if "model" not in fields:
        raise PlanError("a DeepSpeed config does not name the model: give --model NAME with --config")

    def given(v):
        return v is not None and v != "auto"

    if given(zero.get("stage")):
        fields["zero_stage"] = int(zero["stage"])
    for key, name in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_param")):
        section = zero.get(key) or {}
        device = section.get("device")
        if given(device):
            fields[name] = str(device)
        if device == "nvme" and section.get("nvme_path"):
            fields["nvme_path"] = section["nvme_path"]
    if given(cfg.get("train_micro_batch_size_per_gpu")):
        fields["micro_batch"] = int(cfg["train_micro_batch_size_per_gpu"])
    if given(cfg.get("gradient_accumulation_steps")):
        fields["grad_accum"] = int(cfg["gradient_accumulation_steps"])
    fields.update(_derived_batch(cfg, fields.get("num_gpus", 1)))
    if (cfg.get("bf16") or {}).get("enabled") is True:
        fields["precision"] = "bf16"
    elif (cfg.get("fp16") or {}).get("enabled") is True:
        fields["precision"] = "fp16"
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return Plan(**fields)


@dataclass(frozen=True)
class BatchArithmetic:
    """What DeepSpeed makes of the three batch keys of a config, for one data-parallel world size.

    Mirrors ``deepspeed/runtime/config.py`` (0.19.8) ``DeepSpeedConfig._set_batch_related_parameters`` (the
    missing keys derived from the given ones, with floor division) then ``_batch_assertion`` (each of the three
    > 0, then ``train_batch_size == micro × accumulation × world size``), which ``_configure_train_batch_size``
    runs at ``deepspeed.initialize``. Counts are sequences (micro batch: per GPU per forward/backward).

    Attributes:
        train_batch_size, micro_batch, grad_accum: the values after DeepSpeed's derivation (None: the config
            names neither ``train_batch_size`` nor ``train_micro_batch_size_per_gpu``).
        world_size: the data-parallel world size used.
        derived: ``(key, how)`` for each key DeepSpeed filled, ``how`` its formula with the numbers
            (micro batch: ``"train_batch_size 128 // world size 8 // gradient_accumulation_steps 4 = 4"``).
        refusal: DeepSpeed's assertion message when it refuses the config (its wording and numbers), else None.
        refused_key: the key that message is about.
    """

    train_batch_size: int | None
    micro_batch: int | None
    grad_accum: int | None
    world_size: int
    derived: tuple = ()
    refusal: str | None = None
    refused_key: str | None = None

    @property
    def ok(self) -> bool:
        return self.refusal is None

    def how(self, key: str) -> str | None:
        """The formula DeepSpeed derived ``key`` by, or None when the config gave it."""
        return dict(self.derived).get(key)


def deepspeed_batch(train_batch_size: int | None, micro_batch: int | None, grad_accum: int | None,
                    world_size: int) -> BatchArithmetic:
    """DeepSpeed's batch arithmetic on the three config values (None: the key is missing); pure, never raises.

    The cases are ``DeepSpeedConfig._set_batch_related_parameters`` (``deepspeed/runtime/config.py``), in its order:
    all three given: kept; ``train_batch_size`` + micro: accumulation = train // micro // world size; ``train_batch_size``
    + accumulation: micro = train // world size // accumulation; micro + accumulation: train = micro × accumulation ×
    world size; ``train_batch_size`` alone: accumulation 1, micro = train // world size; micro alone: accumulation 1,
    train = micro × world size; neither train nor micro: DeepSpeed asserts 'Either train_batch_size or
    train_micro_batch_size_per_gpu needs to be provided'. Then ``_batch_assertion``: each > 0 (in the order train,
    micro, accumulation), and ``train == micro × accumulation × world size``; the refusal is its message.
    """
    tb, mb, ga, n = train_batch_size, micro_batch, grad_accum, world_size
    derived = []
    if tb is not None and mb is not None and ga is not None:
        pass
    elif tb is not None and mb is not None:
        ga = tb // mb // n
        derived.append(("gradient_accumulation_steps",
                        f"train_batch_size {tb} // train_micro_batch_size_per_gpu {mb} // world size {n} = {ga}"))
    elif tb is not None and ga is not None:
        mb = tb // n // ga
        derived.append(("train_micro_batch_size_per_gpu",
                        f"train_batch_size {tb} // world size {n} // gradient_accumulation_steps {ga} = {mb}"))
    elif mb is not None and ga is not None:
        tb = mb * ga * n
        derived.append(("train_batch_size", f"train_micro_batch_size_per_gpu {mb} × gradient_accumulation_steps "
                        f"{ga} × world size {n} = {tb}"))
    elif tb is not None:
        ga, mb = 1, tb // n
        derived += [("gradient_accumulation_steps", "1 (neither it nor train_micro_batch_size_per_gpu is given)"),
                    ("train_micro_batch_size_per_gpu", f"train_batch_size {tb} // world size {n} = {mb}")]
    elif mb is not None:
        tb, ga = mb * n, 1
        derived += [("train_batch_size", f"train_micro_batch_size_per_gpu {mb} × world size {n} = {tb}"),
                    ("gradient_accumulation_steps", "1 (neither it nor train_batch_size is given)")]
    else:
        return BatchArithmetic(None, None, ga, n, (), "Either train_batch_size or train_micro_batch_size_per_gpu "
                               "needs to be provided", "train_micro_batch_size_per_gpu")
    out = functools.partial(BatchArithmetic, tb, mb, ga, n, tuple(derived))
    if not tb > 0:
        return out(f"Train batch size: {tb} has to be greater than 0", "train_batch_size")
    if not mb > 0:
        return out(f"Micro batch size per gpu: {mb} has to be greater than 0", "train_micro_batch_size_per_gpu")
    if not ga > 0:
        return out(f"Gradient accumulation steps: {ga} has to be greater than 0", "gradient_accumulation_steps")
    if tb != mb * ga * n:
        return out("Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
                   f"gradient_acc_step * world_size {tb} != {mb} * {ga} * {n}", "train_batch_size")
    return out()


#: Plan fields for the config's batch keys, and how a message names them when nobody passed ``names``.
def _derived_batch(cfg: dict, world_size: int) -> dict:
    """Plan fields (``micro_batch``, ``grad_accum``) DeepSpeed derives for the batch keys a config leaves out
    (absent, not ``"auto"``) from its ``train_batch_size`` (:func:`deepspeed_batch`, which mirrors
    ``DeepSpeedConfig._set_batch_related_parameters``); empty when nothing is derived or DeepSpeed would refuse
    the numbers (the linter names that)."""
    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    vals = [cfg.get(k) for k in keys]
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0) for v in vals):
        return {}  # "auto" (the reader fills it) or a bad value (lint rule 9)
    if vals[0] is None or None not in vals[1:]:
        return {}
    ds = deepspeed_batch(*vals, world_size)
    return {"micro_batch": ds.micro_batch, "grad_accum": ds.grad_accum} if ds.ok else {}


def config_plan_fields(config) -> set[str]:
    """The :class:`Plan` fields a DeepSpeed config decides (what :func:`plan_from_ds_config` takes from it, not from
    its ``base``): a message that calls a plan value "the default" must leave these out — they are the user's."""
    cfg = _load_config(config)
    zero = cfg.get("zero_optimization") if isinstance(cfg.get("zero_optimization"), dict) else {}
    out = set()
    if zero.get("stage") not in (None, "auto"):
        out.add("zero_stage")
    for key in ("offload_optimizer", "offload_param"):
        if (zero.get(key) or {}).get("device") not in (None, "auto"):
            out.add(key)
    for key, field in (("train_micro_batch_size_per_gpu", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        if cfg.get(key) not in (None, "auto"):
            out.add(field)
    if cfg.get("train_batch_size") not in (None, "auto"):  # DeepSpeed derives the missing ones from it
        out.update({"micro_batch", "grad_accum"})
    if (cfg.get("bf16") or {}).get("enabled") is True or (cfg.get("fp16") or {}).get("enabled") is True:
        out.add("precision")
    return out


def config_world_size(cfg) -> tuple[int, str] | None:
    """(world size, how) when a config states one: ``train_batch_size / (micro batch × accumulation)``
    with all three numbers (DeepSpeed's ``train_batch_size = micro × accumulation × world size``)."""
    if not isinstance(cfg, dict):
        return None
    tb, mb, ga = (cfg.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                       "gradient_accumulation_steps"))
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (tb, mb, ga)) and tb % (mb * ga) == 0:
        return tb // (mb * ga), f"train_batch_size {tb} / (train_micro_batch_size_per_gpu {mb} × " \
                                f"gradient_accumulation_steps {ga})"
    return None


__all__ = ["check_bf16_states", "LIGER_RECOMMENDED", "LIGER_RECOMMENDED_EVIDENCE", "PRESETS", "PRESET_OPTIONS", "preset_launch_note", "TARGETS", "ConfigError", "ConfigDiff", "DiffRow", "Filled", "MISSING", "Problem",
           "Resolution", "auto_precision", "config_world_size", "plan_from_ds_config", "resolve_config", "trainer_defaults", "LR_SCHEDULERS", "steps_per_epoch",
           "total_steps_for_epochs", "warmup_steps_for", "target_hyperparameters",
           "bucket_sizes", "build_config", "diff", "host_memory_needed_gib", "host_memory_short", "PIN_MEMORY_OFF_COST",
           "pin_memory_note", "preset_plan",
           "register", "stdout_to_stderr"]
