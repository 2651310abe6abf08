"""Which attention implementation a run uses (``--attention``), and why.

transformers picks the kernel from ``attn_implementation`` (``modeling_utils.PreTrainedModel``); the
cookbook maps its ``--attention`` choices onto those names and, for ``auto``, applies one rule:

* ``flash`` when the ``flash_attn`` package is installed and the run is on an NVIDIA GPU: its varlen kernels
  read the example boundaries from ``position_ids`` (the cookbook flattens each micro batch for them);
* else ``flex`` for packed rows on an NVIDIA GPU: transformers builds a document ``BlockMask`` from the
  per-example ``position_ids`` (``masking_utils.flex_attention_mask``), so the kernel skips the blocks
  between examples instead of reading a dense ``b·s²`` mask (docs/benchmarks.md, "Attention on packed
  rows", has the measured forward + backward ratios against packed ``sdpa``);
* else ``sdpa`` (transformers' default): on the CPU, where FlexAttention has no backward
  (``torch.nn.attention.flex_attention._validate_device``), and for unpacked rows, where sdpa reaches
  PyTorch's flash kernel for head dims it supports.
"""
from __future__ import annotations

import importlib.util

#: ``--attention`` choice → transformers' ``attn_implementation``
IMPLEMENTATIONS = {"sdpa": "sdpa", "flex": "flex_attention", "flash": "flash_attention_2", "eager": "eager"}
CHOICES = ("auto", *IMPLEMENTATIONS)


class AttentionError(ValueError):
    """``--attention`` cannot run here (its message names the flag, the value and the fix)."""


def flash_attn_installed() -> bool:
    """Whether the ``flash_attn`` package (flash-attention 2) can be imported."""
    return importlib.util.find_spec("flash_attn") is not None


def flex_available() -> bool:
    """Whether this torch has FlexAttention (``torch.nn.attention.flex_attention``, torch ≥ 2.5)."""
    try:
        return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None
    except ModuleNotFoundError:
        return False


#: Why ``auto`` keeps sdpa under ZeRO-3 (sources: the evidence records ``attention.zero3_llama7b_flex`` and the
#: exact-Adam LLaMA-7B run of ``docs/gpu/attention.md``, calls 6–7).
ZERO3_SDPA_WHY = ("auto: ZeRO-3 — flex measured 0.96x sdpa on LLaMA-7B with its parameters offloaded, and its "
                  "compile workers' host RAM tipped the exact-Adam 7B run into a host OOM; --attention flex to try it")


def choose(requested: str = "auto", *, on_gpu: bool, packing: bool | None,
           flash: bool | None = None, flex: bool | None = None, zero_stage: int | None = None) -> tuple[str, str]:
    """The ``attn_implementation`` for a run and the reason, as the console prints it.

    Args:
        requested: the ``--attention`` value (:data:`CHOICES`).
        on_gpu: the ranks train on an NVIDIA GPU (CUDA).
        packing: ``--packing`` (True), ``--no-packing`` (False) or the default (None: packed where the attention
            keeps examples apart, which every implementation above does for transformers' own models).
        flash, flex: whether flash-attn / FlexAttention are available (None: look).
        zero_stage: the run's ZeRO stage (None: unknown). ``auto`` keeps sdpa at stage 3, where flex was no lever
            (:data:`ZERO3_SDPA_WHY`); at stages 0–2 it measured 1.38× (head dim 100) and 1.11× (head dim 128) on packed
            rows (``docs/gpu/attention.md``).

    Returns:
        ``(attn_implementation, why)``.

    Raises:
        AttentionError: an unknown value; ``flash`` without flash-attn or without a GPU; ``flex`` in a CPU run
            (FlexAttention has no backward on the CPU).
    """
    flash = flash_attn_installed() if flash is None else flash
    flex = flex_available() if flex is None else flex
    if requested not in CHOICES:
        raise AttentionError(f"--attention {requested!r}: use one of {', '.join(CHOICES)}")
    if requested == "flash" and not (flash and on_gpu):
        raise AttentionError("--attention flash: " + ("flash-attention needs an NVIDIA GPU; use --attention "
                             "sdpa or auto on the CPU" if not on_gpu else "flash-attn is not installed; use "
                             "--attention auto, or `pip install flash-attn` (a CUDA build of torch is needed)"))
    if requested == "flex" and not (flex and on_gpu):
        raise AttentionError("--attention flex: " + ("this torch has no FlexAttention (torch >= 2.5); use "
                             "--attention sdpa" if on_gpu else "FlexAttention has no backward on the CPU "
                             "(torch.nn.attention.flex_attention); use --attention sdpa or auto here"))
    if requested != "auto":
        return IMPLEMENTATIONS[requested], f"--attention {requested}"
    if on_gpu and flash:
        return "flash_attention_2", "auto: flash-attn is installed (varlen kernels, example boundaries from position_ids)"
    if on_gpu and flex and packing is not False and zero_stage == 3:
        return "sdpa", ZERO3_SDPA_WHY
    if on_gpu and flex and packing is not False:
        return "flex_attention", ("auto: packed rows on a GPU — FlexAttention's document BlockMask skips the blocks "
                                  "between examples instead of a dense mask; --attention sdpa for PyTorch's default")
    why = ("no GPU (FlexAttention has no backward on the CPU)" if not on_gpu else
           "rows are not packed (sdpa reaches PyTorch's flash kernel)" if packing is False else
           "this torch has no FlexAttention")
    return "sdpa", f"auto: {why}"
