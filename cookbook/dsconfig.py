"""DeepSpeed config builder: one :class:`~cookbook.plan.Plan` in, one DeepSpeed JSON dict out.

Three targets, because the same run is launched three ways:

* ``deepspeed`` — plain ``deepspeed.initialize(config=...)``: every value explicit.
* ``accelerate`` — ``accelerate launch`` with ``deepspeed_config_file``: every value explicit
  too (Accelerate fills ``"auto"`` only for a few keys; explicit numbers avoid surprises and
  the same file also works with plain DeepSpeed).
* ``trainer`` — the Hugging Face ``Trainer`` (``TrainingArguments(deepspeed=...)``): ``"auto"``
  wherever ``transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig`` fills the value from
  ``TrainingArguments`` and the model config, so the two can never disagree.

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
import json
import math
import os
import sys
from dataclasses import dataclass
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
}

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
#: Parameters: 5 buffers (default) of ``buffer_size`` elements; ``max_in_cpu`` 1e9 (default).
NVME_OPTIMIZER_BUFFER_COUNT = 4
NVME_PARAM_BUFFER_COUNT = 5
NVME_PARAM_MIN_BUFFER_SIZE = 10**8  # DeepSpeed's default buffer_size (elements)
NVME_PARAM_MAX_IN_CPU = 10**9


class ConfigError(ValueError):
    """A builder argument cannot work; the message names the argument, its value and the fix."""


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

    Raises:
        ConfigError: unknown preset, or a ZeRO/offload field that contradicts the preset.
        PlanError: another field out of its domain (e.g. ``zero3-nvme`` without ``nvme_path``).
    """
    if preset not in PRESETS:
        raise ConfigError(f"preset={preset!r}: unknown; use one of {', '.join(PRESETS)}")
    stage, opt, param = PRESETS[preset]
    fixed = {"zero_stage": stage, "offload_optimizer": opt, "offload_param": param}
    for key, value in fixed.items():
        if key in plan_fields and plan_fields[key] != value:
            raise ConfigError(f"{key}={plan_fields[key]!r} contradicts preset {preset!r} ({key}={value!r}); "
                              f"drop {key} or pick another preset")
    plan_fields.update(fixed)
    if "nvme" in (opt, param) and not plan_fields.get("nvme_path"):
        raise PlanError(f"preset {preset!r} offloads to NVMe but nvme_path is not set: pass nvme_path "
                        "(CLI: --nvme-path) a folder on a fast local NVMe SSD")
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


def host_memory_short(plan: Plan) -> bool:
    """True when the plan's ``host_memory_gib`` is known and below :func:`host_memory_needed_gib`.

    Pinned (page-locked) host memory cannot be swapped out, so with short RAM ``pin_memory: true``
    turns a slow run into a killed one (DeepSpeed docs, ``offload_optimizer.pin_memory``).
    """
    if plan.host_memory_gib is None or plan.offload_optimizer == "none" and plan.offload_param == "none":
        return False
    need = host_memory_needed_gib(plan)
    return need is not None and need > plan.host_memory_gib


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
        raise ConfigError(f"{name}={value!r}: must be {kind} {rel} {minimum}")


def build_config(plan: Plan, target: str = "deepspeed", *, lr: float = 2e-5, weight_decay: float = 0.0,
                 betas=(0.9, 0.95), eps: float = 1e-8, warmup_steps: int = 0, total_steps: int | None = None,
                 gradient_clipping: float = 1.0, bf16_states: bool = False,
                 steps_per_print: int = 10**9, aio=None) -> dict:
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
        total_steps: optimizer steps of the run; given -> ``WarmupDecayLR`` (linear decay to 0 at
            ``total_steps``), ``None`` -> ``WarmupLR`` (constant after warm-up).
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
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise ConfigError(f"betas={betas!r}: give two numbers in [0, 1), e.g. (0.9, 0.95)") from None
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ConfigError(f"betas={betas!r}: both must lie in [0, 1), e.g. (0.9, 0.95)")
    if bf16_states and plan.precision != "bf16":
        raise ConfigError(f"bf16_states=True with precision={plan.precision!r}: bf16 optimizer states need "
                          "precision='bf16'; set bf16_states=False or use bf16")
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
    if bf16_states and plan.zero_stage == 0:
        raise ConfigError("bf16_states=True with zero_stage=0: DeepSpeed supports bf16 master weights only "
                          "with ZeRO stage 1, 2 or 3; raise zero_stage or set bf16_states=False")

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
        cfg["scheduler"] = {"type": "WarmupDecayLR", "params": {
            "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
            "total_num_steps": "auto", "warmup_type": "linear"}}
    elif total_steps is not None:
        cfg["scheduler"] = {"type": "WarmupDecayLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": lr, "warmup_num_steps": warmup,
            "total_num_steps": total_steps, "warmup_type": "linear"}}
    else:
        cfg["scheduler"] = {"type": "WarmupLR", "params": {
            "warmup_min_lr": 0 if warmup_steps > 0 else lr, "warmup_max_lr": lr,
            "warmup_num_steps": warmup, "warmup_type": "linear"}}

    # ZeRO
    zero: dict[str, Any] = {"stage": plan.zero_stage}
    if plan.zero_stage > 0:
        buckets = bucket_sizes(spec.hidden_size)
        pin = not host_memory_short(plan)
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
                             max_in_cpu=NVME_PARAM_MAX_IN_CPU)
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
            zero["sub_group_size"] = SUB_GROUP_SIZE
            zero["stage3_prefetch_bucket_size"] = val(buckets["stage3_prefetch_bucket_size"])
            zero["stage3_param_persistence_threshold"] = val(buckets["stage3_param_persistence_threshold"])
            zero["stage3_max_live_parameters"] = STAGE3_MAX_LIVE_PARAMETERS
            zero["stage3_max_reuse_distance"] = STAGE3_MAX_REUSE_DISTANCE
            zero["stage3_gather_16bit_weights_on_model_save"] = True
    cfg["zero_optimization"] = zero
    if "nvme" in (plan.offload_optimizer, plan.offload_param):
        cfg["aio"] = dict(tuned["aio"]) if tuned else dict(AIO_BLOCK)
    return cfg


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
    print(f"{args.preset}: {plan.label}, {plan.precision}, {plan.model}, {batch}, target {args.target}{where}",
          file=sys.stderr)
    return 0


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
        from .lint import gpu_compute_capability
        cc = gpu_compute_capability(args.gpu)
        if cc is None:
            print(f"error: --gpu {args.gpu!r}: unknown GPU; pass --precision bf16 (compute capability >= 8.0) "
                  "or fp16", file=sys.stderr)
            return 2
        fields["precision"] = auto_precision(cc)
    try:
        plan = preset_plan(args.preset, **fields)
        cfg = build_config(plan, args.target, lr=args.lr, warmup_steps=args.warmup_steps,
                           total_steps=args.total_steps, bf16_states=args.bf16_states,
                           aio=getattr(args, "aio_config", None))
    except (ConfigError, PlanError, ModelNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
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
    p.add_argument("--host-memory-gib", type=float, default=None,
                   help="host RAM per machine in GiB; pin_memory is turned off when it is short")
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=0, help="linear warm-up steps")
    p.add_argument("--total-steps", type=int, default=None, help="optimizer steps (WarmupDecayLR); default WarmupLR")
    p.add_argument("--bf16-states", action="store_true",
                   help="bf16 master weights and optimizer states (DeepSpeed >= 0.18)")
    p.add_argument("--aio-config", default=None, metavar="FILE",
                   help="tuned NVMe settings from `cookbook nvme-tune PATH -o FILE` (zero3-nvme)")
    p.set_defaults(func=_run)


__all__ = ["PRESETS", "TARGETS", "ConfigError", "ConfigDiff", "DiffRow", "MISSING", "auto_precision",
           "bucket_sizes", "build_config", "diff", "host_memory_needed_gib", "host_memory_short", "preset_plan",
           "register", "stdout_to_stderr"]
