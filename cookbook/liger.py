"""``--liger {auto,on,off}``: Liger kernels' fused linear cross-entropy (FLCE) in the training entry.

``auto`` (the default of ``cookbook train``/``launch``) turns it on where it can run and off elsewhere, with the
reason on the console (:func:`resolve`); ``on`` (or a bare ``--liger``) asks for it and is refused where it cannot
run; ``off`` keeps transformers' own loss.

What it does: before the model is built, :func:`apply_liger` calls liger-kernel's own
``apply_liger_kernel_to_<arch>(rope=False, cross_entropy=False, fused_linear_cross_entropy=True,
rms_norm=False, swiglu=False)`` (``liger_kernel/transformers/monkey_patch.py``, liger-kernel 0.8.x), which
replaces ``LlamaForCausalLM.forward`` / ``Qwen2ForCausalLM.forward``: in training, with labels, the loss is
computed chunk by chunk from the last hidden states and ``lm_head.weight``
(``liger_kernel/ops/fused_linear_cross_entropy.py``) and the ``[micro batch, seq, vocab]`` logits are never
stored. Only this kernel: the other Liger kernels (RoPE, RMSNorm, SwiGLU) are off, as in the measurement.

Measured (:mod:`cookbook.evidence`, key ``recipe.flex_liger_micro32``; the narrative in ``docs/gpu/attention.md``):
the cookbook's exact-Adam recipe (3.4B LLaMA shape, ZeRO-2 + optimizer offload, fp32 states, one GPU capped at 24 GiB,
packed rows) with FLCE and flex attention fits micro batch 32 and runs 2.06× the sdpa recipe at micro batch 16 in
the same device call. Same forward+backward
time at equal batch (1.05 vs 1.06 s at micro 16). The loss is the exact cross-entropy;
the numbers differ from the stock loss only by the order of the chunked reduction (fp32 inside the kernel).

Where it does not apply (each refused before any rank starts, naming ``--liger``):

* no NVIDIA GPU: Liger's kernels are Triton kernels for CUDA; the CPU rehearsal has no such option;
* liger-kernel not installed (an optional extra: ``pip install liger-kernel`` or ``pip install -e '.[liger]'``);
* an architecture other than :data:`ARCHITECTURES` (the ones the cookbook ships);
* ZeRO stage 3: the patched forward reads ``lm_head.weight`` without calling ``lm_head``, so ZeRO-3's gather
  hook never runs and the kernel sees an empty partition (linkedin/Liger-Kernel issue #1048, "The size of
  tensor a (0) must match the size of tensor b (4096)"; huggingface/trl #3368 and #5891 for the same cause).
"""
from __future__ import annotations

import importlib.util

#: model_type (``config.json``) -> liger-kernel's function for it (``liger_kernel.transformers.monkey_patch``).
ARCHITECTURES = {"llama": "apply_liger_kernel_to_llama", "qwen2": "apply_liger_kernel_to_qwen2"}

#: The keyword arguments given to that function: fused linear cross-entropy only (benchmarks/lever_train.py).
KERNELS = {"rope": False, "cross_entropy": False, "fused_linear_cross_entropy": True, "rms_norm": False,
           "swiglu": False}

INSTALL_FIX = "pip install liger-kernel (or pip install -e '.[liger]'; it needs a CUDA build of torch and Triton)"


#: ``--liger`` values: ``auto`` (on where it can run: :func:`resolve`), ``on``, ``off``.
CHOICES = ("auto", "on", "off")


class LigerError(ValueError):
    """``--liger`` cannot work for this run; the message names ``--liger``, what is wrong and the fix."""


def installed() -> bool:
    """Whether the ``liger_kernel`` package can be imported (found, not imported: importing it needs Triton)."""
    return importlib.util.find_spec("liger_kernel") is not None


def problems(*, model_type: str | None, zero_stage: int | None, on_gpu: bool, check_install: bool = True,
             flag: str = "--liger") -> list[str]:
    """Why ``--liger`` cannot run here, one sentence each (empty when it can).

    Args:
        model_type: the model's ``config.model_type`` (None: unknown, not checked).
        zero_stage: the run's ZeRO stage (None: not checked).
        on_gpu: this machine (or the one the run is planned for) has an NVIDIA GPU.
        check_install: also check that liger-kernel is installed here.
        flag: how the option is named in the messages.
    """
    out = []
    if not on_gpu:
        out.append(f"{flag}: Liger's kernels are Triton kernels for CUDA GPUs and this machine has no NVIDIA GPU; "
                   "the option does not exist on the CPU rehearsal. Drop " + flag + " here and use it on the GPU "
                   "machine")
    if model_type is not None and model_type not in ARCHITECTURES:
        out.append(f"{flag}: model type {model_type!r} is not one the cookbook applies Liger to (it applies "
                   f"fused linear cross-entropy to {', '.join(sorted(ARCHITECTURES))}); drop {flag} for this model")
    if zero_stage == 3:
        out.append(f"{flag} with --zero-stage 3: Liger's fused loss reads lm_head.weight without calling lm_head, so "
                   "ZeRO-3 never gathers it and the kernel gets an empty partition (Liger-Kernel issue #1048); use "
                   f"--zero-stage 2 (the measured recipe: ZeRO-2 + --offload-optimizer cpu) or drop {flag}")
    if check_install and on_gpu and not installed():
        out.append(f"{flag}: liger-kernel is not installed; {INSTALL_FIX}")
    return out


def resolve(choice: str | bool | None, *, model_type: str | None, zero_stage: int | None, on_gpu: bool,
            is_installed: bool | None = None) -> tuple[bool, str]:
    """Whether a run uses Liger's fused linear cross-entropy, and the console's reason.

    Args:
        choice: the ``--liger`` value (:data:`CHOICES`; True/False and None, from a run file or the Python API,
            mean ``on``/``off``/``auto``).
        model_type, zero_stage, on_gpu: as for :func:`problems`.
        is_installed: whether liger-kernel is installed (None: look, :func:`installed`).

    Returns:
        ``(on, why)``. ``auto`` is on exactly when :func:`problems` finds nothing: an NVIDIA GPU, liger-kernel
        installed, a llama/qwen2 model and ZeRO stage 0–2. It stays off for ZeRO-3 (Liger-Kernel issue #1048), so
        the choice never changes what a run can do, only how much of the card the loss takes: the logits are
        never stored (the memory estimate counts one chunk of them, :func:`cookbook.memory.liger_flce_bytes`).
        Explicit ``on`` is returned as asked; the caller refuses it with :func:`problems` where it cannot run.

    Raises:
        LigerError: a value outside :data:`CHOICES`, naming ``--liger``.
    """
    if choice is None or choice is True or choice is False:
        choice = {None: "auto", True: "on", False: "off"}[choice]
    if choice not in CHOICES:
        raise LigerError(f"--liger {choice!r}: use one of {', '.join(CHOICES)} (auto: on where it can run)")
    if choice != "auto":
        return choice == "on", f"--liger {choice}"
    if not on_gpu:
        return False, "auto: off (no NVIDIA GPU: Liger's kernels are Triton kernels for CUDA)"
    if model_type is not None and model_type not in ARCHITECTURES:
        return False, f"auto: off (model type {model_type!r}: the cookbook applies it to {', '.join(sorted(ARCHITECTURES))})"
    if zero_stage == 3:
        return False, "auto: off (ZeRO-3 never gathers lm_head.weight for Liger's fused loss: Liger-Kernel #1048)"
    if not (installed() if is_installed is None else is_installed):
        return False, f"auto: off (liger-kernel is not installed; {INSTALL_FIX})"
    return True, ("auto: on (fused linear cross-entropy: the loss without the full logits tensor, so a larger "
                  "micro batch fits; --liger off for transformers' own loss)")


def apply_liger(model_type: str) -> str:
    """Patch transformers' ``<Arch>ForCausalLM.forward`` with Liger's fused linear cross-entropy forward.

    Runs before the model is built: it patches the class, and liger's own ``_apply_liger_kernel`` docstring says
    the patch must come before model initialisation.

    Returns:
        what was applied, for the log.

    Raises:
        LigerError: unsupported ``model_type``, or liger-kernel missing / not importable (no Triton).
    """
    name = ARCHITECTURES.get(model_type)
    if name is None:
        raise LigerError(problems(model_type=model_type, zero_stage=None, on_gpu=True, check_install=False)[0])
    try:
        from liger_kernel.transformers import monkey_patch
    except ImportError as exc:
        raise LigerError(f"--liger: liger-kernel cannot be imported ({type(exc).__name__}: {exc}); {INSTALL_FIX}") \
            from None
    getattr(monkey_patch, name)(**KERNELS)
    return f"Liger fused linear cross-entropy ({name}, other Liger kernels off): the logits are never stored"
