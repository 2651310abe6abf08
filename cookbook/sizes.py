"""Sizes the estimators share: bytes per model state and the parameter tensors of a decoder, by architecture.

Used by :mod:`cookbook.memory` (GPU and host RAM) and :mod:`cookbook.nvme` (what NVMe offload puts on the SSD
and moves per step), so that both count the same bytes.
"""
from __future__ import annotations

import math


class EstimateError(ValueError):
    """An estimator input outside its domain; the message names it and the fix."""

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

def _tensor_numels(spec) -> list[int]:
    """Element counts of the model's parameter tensors, in module order (embedding, layers, norm, head).

    Built from the architecture numbers of a LLaMA/Qwen2-style decoder (``transformers``'
    ``modeling_llama.py`` / ``modeling_qwen2.py``): per layer q, k, v, o projections (Qwen2 adds q/k/v
    biases), gate/up/down projections, two RMSNorm weights; embedding, final norm and an untied head.
    Only the *sizes* matter here (they set the power-of-two rounding of pinned host buffers and the
    ZeRO-3 sub-groups), so when the list does not add up to ``spec.num_params`` exactly (another
    architecture, a tied head the spec does not flag), the last tensor absorbs the difference or the
    sizes are scaled to it.
    """
    h, i, V = int(spec.hidden_size), int(spec.intermediate_size), int(spec.vocab_size)
    a, kv = max(int(spec.num_heads), 1), max(int(spec.num_kv_heads or spec.num_heads), 1)
    d = h // a
    bias = getattr(spec, "model_type", "") == "qwen2"
    layer = [h * a * d, h * kv * d, h * kv * d, a * d * h, h * i, h * i, i * h, h, h]
    if bias:
        layer += [a * d, kv * d, kv * d]
    numels = [V * h] + layer * int(spec.num_layers) + [h]
    N = int(spec.num_params)
    untied = sum(numels) + V * h
    if not getattr(spec, "tie_word_embeddings", False) and abs(untied - N) < abs(sum(numels) - N):
        numels.append(V * h)
    diff = N - sum(numels)
    if diff > 0:
        numels.append(diff)
    elif diff < 0:
        scale = N / sum(numels)
        numels = [max(1, int(n * scale)) for n in numels]
    return [n for n in numels if n > 0]

def _layer_numel(spec) -> int:
    """Parameters of one decoder layer (elements), from the architecture (see :func:`_tensor_numels`)."""
    h, i = int(spec.hidden_size), int(spec.intermediate_size)
    a, kv = max(int(spec.num_heads), 1), max(int(spec.num_kv_heads or spec.num_heads), 1)
    d = h // a
    return 2 * h * a * d + 2 * h * kv * d + 3 * h * i + 2 * h

def _pow2(nbytes: float) -> float:
    """Bytes a pinned host allocation of ``nbytes`` really takes: PyTorch's ``CachingHostAllocator``
    rounds every pinned block up to the next power of two (``ATen/core/CachingHostAllocator.h``:
    ``c10::llvm::PowerOf2Ceil(size)``, default ``pinned_max_round_threshold`` unlimited)."""
    if nbytes <= 0:
        return 0.0
    return float(2 ** math.ceil(math.log2(nbytes)))
