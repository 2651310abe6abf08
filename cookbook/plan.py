"""One description of a planned run, shared by every part of the cookbook.

A :class:`Plan` is what the user intends to run: which model, on how many GPUs of
how much memory, with which ZeRO stage, offload targets, batch shape and precision.
The estimator (:mod:`cookbook.memory`), the config builder and linter
(:mod:`cookbook.dsconfig`, :mod:`cookbook.lint`), the environment checks
(:mod:`cookbook.env`) and the launch helper (:mod:`cookbook.launch`) all take it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

ZERO_STAGES = (0, 1, 2, 3)
OFFLOAD_TARGETS = ("none", "cpu", "nvme")
PRECISIONS = ("bf16", "fp16", "fp32")


class PlanError(ValueError):
    """A plan field holds a value that cannot work; the message names field, value and fix."""


@dataclass(frozen=True)
class Plan:
    """A planned ZeRO fine-tune.

    Fields (units in the names or comments):
        model: shipped name (``qwen-14b``), local folder / ``config.json`` path, or hub id
            present in the local cache.
        num_gpus: data-parallel world size (ranks; on the CPU rehearsal, CPU processes).
        gpu_memory_gib: memory of one GPU in GiB (2**30 bytes); 24 for an RTX 4090.
        host_memory_gib: host RAM of the machine in GiB, or None when unknown.
        seq_len: tokens per sequence after truncation.
        micro_batch: sequences per GPU per forward/backward (``train_micro_batch_size_per_gpu``).
        grad_accum: gradient accumulation steps per optimizer step.
        precision: ``bf16``, ``fp16`` (with dynamic loss scaling) or ``fp32``.
        zero_stage: 0, 1, 2 or 3.
        offload_optimizer / offload_param: ``none``, ``cpu`` or ``nvme``.
        gradient_checkpointing: recompute activations in backward (HF
            ``model.gradient_checkpointing_enable()``).
        nvme_path: folder for NVMe offload; required when an offload target is ``nvme``.
        num_machines: machines the world is spread over (``num_gpus`` is the total).

    Raises:
        PlanError: on construction, for any field outside its domain.
    """

    model: str = "tiny-qwen2"
    num_gpus: int = 1
    gpu_memory_gib: float = 24.0
    host_memory_gib: float | None = None
    seq_len: int = 512
    micro_batch: int = 1
    grad_accum: int = 1
    precision: str = "bf16"
    zero_stage: int = 2
    offload_optimizer: str = "none"
    offload_param: str = "none"
    gradient_checkpointing: bool = True
    nvme_path: str | None = None
    num_machines: int = 1

    def __post_init__(self) -> None:
        for name in ("num_gpus", "seq_len", "micro_batch", "grad_accum", "num_machines"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError(f"{name}={value!r}: must be a positive integer; set {name} to 1 or more")
        if not (isinstance(self.gpu_memory_gib, (int, float)) and self.gpu_memory_gib > 0):
            raise PlanError(f"gpu_memory_gib={self.gpu_memory_gib!r}: must be a positive number of GiB (24 for an RTX 4090)")
        if self.host_memory_gib is not None and not (isinstance(self.host_memory_gib, (int, float)) and self.host_memory_gib > 0):
            raise PlanError(f"host_memory_gib={self.host_memory_gib!r}: must be a positive number of GiB or None for unknown")
        if self.zero_stage not in ZERO_STAGES:
            raise PlanError(f"zero_stage={self.zero_stage!r}: ZeRO has stages 0, 1, 2, 3; pick one of them")
        if self.precision not in PRECISIONS:
            raise PlanError(f"precision={self.precision!r}: use one of {', '.join(PRECISIONS)}")
        for name in ("offload_optimizer", "offload_param"):
            value = getattr(self, name)
            if value not in OFFLOAD_TARGETS:
                raise PlanError(f"{name}={value!r}: use one of {', '.join(OFFLOAD_TARGETS)}")
        if self.offload_param != "none" and self.zero_stage != 3:
            raise PlanError(
                f"offload_param={self.offload_param!r} with zero_stage={self.zero_stage}: parameter offload "
                "exists only in ZeRO stage 3; set zero_stage=3 or offload_param='none'")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise PlanError(
                f"offload_optimizer={self.offload_optimizer!r} with zero_stage=0: optimizer offload needs "
                "ZeRO stage 1, 2 or 3; raise zero_stage")
        if "nvme" in (self.offload_optimizer, self.offload_param) and not self.nvme_path:
            raise PlanError("nvme_path=None with an NVMe offload target: set nvme_path to a folder on a fast local SSD")
        if self.num_gpus % self.num_machines:
            raise PlanError(
                f"num_gpus={self.num_gpus} is not divisible by num_machines={self.num_machines}: "
                "num_gpus is the total world size; give the same number of ranks to every machine")

    @property
    def world_size(self) -> int:
        """Data-parallel world size (all ranks on all machines)."""
        return self.num_gpus

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: micro batch × accumulation × world size."""
        return self.micro_batch * self.grad_accum * self.num_gpus

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step at full sequence length."""
        return self.global_batch * self.seq_len

    def replace(self, **changes) -> "Plan":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        """Short name of the ZeRO variant, e.g. ``ZeRO-3 + opt→cpu + param→cpu``."""
        parts = [f"ZeRO-{self.zero_stage}"]
        if self.offload_optimizer != "none":
            parts.append(f"opt→{self.offload_optimizer}")
        if self.offload_param != "none":
            parts.append(f"param→{self.offload_param}")
        return " + ".join(parts)


#: The ZeRO variants the cookbook walks through, as (zero_stage, offload_optimizer, offload_param).
VARIANTS = (
    (2, "none", "none"),
    (2, "cpu", "none"),
    (3, "none", "none"),
    (3, "cpu", "none"),
    (3, "cpu", "cpu"),
    (3, "nvme", "nvme"),
)


def add_plan_arguments(parser, *, model_required: bool = False, positional_model: bool = False) -> None:
    """Add the options that describe a plan to an argparse parser (shared by estimate, env, train)."""
    if positional_model:
        parser.add_argument("model", help="shipped name (qwen-14b, llama-7b, ...), local folder/config.json, or cached hub id")
    else:
        parser.add_argument("--model", required=model_required, default=None if not model_required else None,
                            help="shipped name (tiny-qwen2, qwen-14b, llama-7b, ...), local folder/config.json, or cached hub id")
    parser.add_argument("--gpus", "--num-processes", dest="num_gpus", type=int, default=None,
                        help="world size: GPUs (or CPU ranks in a rehearsal) over all machines")
    parser.add_argument("--gpu-memory-gib", type=float, default=24.0, help="memory of one GPU in GiB (24 for an RTX 4090)")
    parser.add_argument("--host-memory-gib", type=float, default=None, help="host RAM in GiB (default: unknown / this machine)")
    parser.add_argument("--zero-stage", type=int, choices=ZERO_STAGES, default=None, help="ZeRO stage")
    parser.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, default="none", help="where optimizer states live")
    parser.add_argument("--offload-param", choices=OFFLOAD_TARGETS, default="none", help="where parameters live (ZeRO-3 only)")
    parser.add_argument("--micro-batch", type=int, default=None, help="sequences per GPU per forward/backward")
    parser.add_argument("--grad-accum", type=int, default=None, help="gradient accumulation steps")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sequence")
    parser.add_argument("--precision", choices=PRECISIONS, default=None, help="bf16 (Ampere and newer), fp16, fp32")
    gc = parser.add_mutually_exclusive_group()
    gc.add_argument("--gradient-checkpointing", dest="gradient_checkpointing", action="store_true", default=None,
                    help="recompute activations in backward (saves activation memory, costs ~1/3 more compute)")
    gc.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    parser.add_argument("--nvme-path", default=None, help="folder on a fast SSD for NVMe offload")


def plan_from_args(args, **defaults) -> Plan:
    """Build a :class:`Plan` from :func:`add_plan_arguments` options; ``defaults`` fill unset ones.

    Raises:
        PlanError: a value outside its domain (message names the option).
    """
    fields = {}
    for name in ("model", "num_gpus", "gpu_memory_gib", "host_memory_gib", "zero_stage", "offload_optimizer",
                 "offload_param", "micro_batch", "grad_accum", "seq_len", "precision", "gradient_checkpointing",
                 "nvme_path"):
        value = getattr(args, name, None)
        if value is None:
            value = defaults.get(name)
        if value is not None:
            fields[name] = value
    return Plan(**fields)
