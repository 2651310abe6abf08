"""The three source articles' claims — their memory arithmetic and the DeepSpeed configs they print — beside
the correct numbers.

* :data:`ARTICLE_MEMORY_CLAIMS` / :func:`article_memory_table` — each article's bytes per parameter
  and GB as printed, beside the ZeRO paper's and DeepSpeed's numbers for the same model.
* :func:`article_config` / :func:`article_config_path` — the configs as printed
  (``tests/fixtures/seed_configs``; some are not valid JSON — lint them with :func:`cookbook.lint.lint`).

The articles' throughput claim is tested against :func:`cookbook.hardware.throughput_ceiling`.
Units: GiB = 2**30 bytes, GB = 10**9 bytes (the articles' unit).
"""
from __future__ import annotations

import json
from pathlib import Path

from .models import DATA_DIR

GIB = 2 ** 30
GB = 10 ** 9

#: The DeepSpeed configs printed in the three source articles, as found there (some are not valid JSON).
ARTICLE_CONFIG_DIR = DATA_DIR.parent / "tests" / "fixtures" / "seed_configs"


#: Memory arithmetic as printed in the source articles (``/shared/seeds``), per model: component ->
#: (bytes per parameter the article uses, GB the article states), with the article and section.
ARTICLE_MEMORY_CLAIMS = {
    "qwen-14b": {
        "source": "article 002 (Ubuntu 22.04 / Qwen-14B on 8×RTX 4090), section 4.2 '内存占用分析'",
        "params_b": 14.0,
        "items": {"params_16bit": (2, 28.0), "grads_16bit": (2, 28.0), "master_fp32": (None, None),
                  "adam_states": (8, 112.0), "grads_fp32": (None, None), "activations": (None, 50.0)},
        "total": 218.0,
        "other": ["article 000, section 1: 'parameters + optimizer + gradients + intermediates ≈ 112 GB', "
                  "and 8 × 24 GB = 192 GB 'should be enough'"],
    },
    "llama-7b": {
        "source": "article 001 (LLaMA 7B on one RTX 4090), section 1.1 '显存困境的本质分析'",
        "params_b": 7.0,
        "items": {"params_16bit": (2, 14.0), "grads_16bit": (2, 14.0), "master_fp32": (4, 28.0),
                  "adam_states": (8, 56.0), "grads_fp32": (None, None), "activations": (None, 2.0)},
        "total": 86.0,
        "other": ["the article's own items add up to 114 GB, not the 86 GB it states"],
    },
}

_ARTICLE_ROWS = {
    "params_16bit": ("16-bit parameters", 2, "ZeRO paper §3: 2 bytes per parameter"),
    "grads_16bit": ("16-bit gradients", 2, "ZeRO paper §3: 2 bytes per parameter"),
    "master_fp32": ("fp32 master weights", 4, "ZeRO paper §3: mixed-precision Adam keeps an fp32 copy (4 bytes)"),
    "adam_states": ("Adam m and v (fp32)", 8, "ZeRO paper §3: momentum + variance, 4 + 4 bytes"),
    "grads_fp32": ("fp32 gradient partition", 4,
                   "DeepSpeed estimate_zero2/3_model_states_mem_needs count 4 more bytes (fp32 gradients)"),
}


def article_memory_table(plan, *, bf16_states: bool = False):
    """The article's memory arithmetic beside the correct numbers for ``plan.model``.

    Correct bytes per parameter: ZeRO paper (Rajbhandari et al. 2020, §3): 2 + 2 + 4 + 8 for
    mixed-precision Adam, plus DeepSpeed's 4-byte fp32 gradient partition (its own estimators,
    ``deepspeed/runtime/zero/stage_1_and_2.py`` / ``stage3.py``); N is the exact parameter count
    of the architecture (:func:`cookbook.models.model_spec`); activations from
    :func:`cookbook.memory.estimate` for ``plan`` (per GPU, the plan's micro batch and sequence length).

    Args:
        plan: a :class:`cookbook.plan.Plan` whose model has article claims (``qwen-14b``, ``llama-7b``).

    Returns:
        DataFrame with columns component, ``article B/param``, ``article GB``, ``correct B/param``,
        ``correct GB``, ``correct GiB``, source; the last rows are the totals and, for the sharded
        plan, the per-GPU numbers under the plan's ZeRO stage.

    Raises:
        ValueError: no article claims for the model.
    """
    import pandas as pd
    from .memory import estimate
    from .models import model_spec
    claims = ARTICLE_MEMORY_CLAIMS.get(str(plan.model))
    if claims is None:
        raise ValueError(f"plan.model={plan.model!r}: the articles give memory arithmetic only for "
                          f"{', '.join(ARTICLE_MEMORY_CLAIMS)}")
    n = model_spec(plan.model).num_params
    est = estimate(plan, bf16_states=bf16_states)
    rows = []
    total_article_items = 0.0
    total_correct = 0.0
    for key, (label, bpp, source) in _ARTICLE_ROWS.items():
        a_bpp, a_gb = claims["items"].get(key, (None, None))
        total_article_items += a_gb or 0.0
        total_correct += bpp * n
        rows.append({"component": label, "article B/param": a_bpp, "article GB": a_gb if a_gb is not None else "omitted",
                     "correct B/param": bpp, "correct GB": round(bpp * n / GB, 1), "correct GiB": round(bpp * n / GIB, 1),
                     "source": source})
    act = est.gpu_gib.get("activations", 0.0)
    a_act = claims["items"].get("activations", (None, None))[1]
    total_article_items += a_act or 0.0
    rows.append({"component": f"activations (micro batch {plan.micro_batch} × {plan.seq_len} tokens, "
                              f"{'with' if plan.gradient_checkpointing else 'without'} checkpointing, per GPU)",
                 "article B/param": None, "article GB": a_act, "correct B/param": None,
                 "correct GB": round(act * GIB / GB, 1), "correct GiB": round(act, 2),
                 "source": "Korthikanti et al. 2022 §4.1 + logits (cookbook.memory.activation_bytes)"})
    rows.append({"component": "TOTAL model states (all GPUs together)", "article B/param": None,
                 "article GB": f"{claims['total']:g} stated ({total_article_items:g} from its items)",
                 "correct B/param": 20, "correct GB": round(total_correct / GB, 1),
                 "correct GiB": round(total_correct / GIB, 1), "source": "sum of the rows above"})
    rows.append({"component": f"per GPU under {plan.label} on {plan.num_gpus} GPU(s) (model states)",
                 "article B/param": None, "article GB": "not computed", "correct B/param": None,
                 "correct GB": round(est.gpu_model_states_gib * GIB / GB, 1),
                 "correct GiB": round(est.gpu_model_states_gib, 1),
                 "source": "cookbook.memory.estimate (= DeepSpeed's estimators)"})
    rows.append({"component": f"per GPU under {plan.label}, everything (the verdict)", "article B/param": None,
                 "article GB": "not computed", "correct B/param": None,
                 "correct GB": round(est.gpu_gib['total'] * GIB / GB, 1), "correct GiB": round(est.gpu_gib["total"], 1),
                 "source": "cookbook.memory.estimate: " + (est.reasons[0] if est.reasons else "")})
    frame = pd.DataFrame(rows)
    frame.attrs["source"] = claims["source"]
    frame.attrs["other"] = list(claims.get("other", []))
    return frame


def article_config(name: str) -> dict:
    """A DeepSpeed config printed in an article, by file stem (``002_qwen14b_zero2``), parsed as JSON.

    Raises:
        FileNotFoundError: unknown name (lists the available ones).
        ValueError: the article's text is not valid JSON (lint it with :func:`cookbook.lint.lint` to see why).
    """
    path = ARTICLE_CONFIG_DIR / f"{name}.json"
    if not path.is_file():
        have = sorted(p.stem for p in ARTICLE_CONFIG_DIR.glob("*.json"))
        raise FileNotFoundError(f"article config {name!r} not found in {ARTICLE_CONFIG_DIR}; available: {', '.join(have)}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"article config {name!r} is not valid JSON ({exc}); run cookbook.lint.lint on "
                          f"{path} to see each problem and its fix") from None


def article_config_path(name: str) -> Path:
    """Path of an article's config (see :func:`article_config`); may not be valid JSON."""
    return ARTICLE_CONFIG_DIR / f"{name}.json"


__all__ = ["ARTICLE_CONFIG_DIR", "ARTICLE_MEMORY_CLAIMS", "article_config", "article_config_path",
           "article_memory_table"]
