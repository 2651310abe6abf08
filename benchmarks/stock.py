"""The stock DeepSpeed configs the cookbook's recipe is compared with, resolved for one plan.

Each stock config is kept as the values its source ships (ZeRO block, precision blocks, batch keys);
:func:`resolve` turns it into a config the cookbook launcher can run for a given plan, changing only
what must change and listing every change:

* ``"auto"`` values are filled by :func:`cookbook.dsconfig.resolve_config`, the way the Hugging Face
  Trainer fills them (``transformers/integrations/deepspeed.py``, ``HfTrainerDeepSpeedConfig.
  trainer_config_process`` / ``trainer_config_finalize``): batch keys from the plan, ``gradient_clipping``
  1.0, ``reduce_bucket_size`` = h*h, ``stage3_prefetch_bucket_size`` = 0.9*h*h,
  ``stage3_param_persistence_threshold`` = 10*h (h = hidden size), optimizer values from the run's
  learning rate. Batch keys a config fixes are set to the plan's, and a config without
  ``gradient_clipping`` clips at 1.0 too, so that every run of a comparison has the same shape.
* Scheduler: a missing or ``"auto"`` scheduler becomes the cookbook's WarmupDecayLR (linear warm-up)
  over the run's steps, as in the cookbook's own runs.
* Precision: every run in one comparison uses the plan's precision (bf16 on the H200), so a stock
  config's ``fp16`` block is replaced by ``bf16`` (Accelerate's template and the LLaMA article hard-code
  fp16; LLaMA-Factory's ``"auto"`` picks bf16 when the run is bf16).
* Optimizer: a config without an ``optimizer`` block (LLaMA-Factory's) gets the cookbook's AdamW block,
  so DeepSpeed builds ``DeepSpeedCPUAdam`` as it does for the others (the Trainer would hand DeepSpeed a
  torch AdamW, which is slower on the host; this choice favours the stock config).
* Blocks that do nothing for Hugging Face models (the article's ``activation_checkpointing``) are
  dropped; gradient checkpointing is on in every run through the model
  (``gradient_checkpointing_enable``), as in the cookbook's recipe.
"""
from __future__ import annotations

import copy

#: LLaMA-Factory ``examples/deepspeed/ds_z3_offload_config.json`` (github.com/hiyouga/LLaMA-Factory),
#: the values that shape a run (comms/monitor blocks omitted: logging only).
LLAMA_FACTORY_Z3_OFFLOAD = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": False,
        "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": True},
}

#: Accelerate ``examples/deepspeed_config_templates/zero_stage3_offload_config.json``
#: (github.com/huggingface/accelerate).
ACCELERATE_Z3_OFFLOAD = {
    "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                      "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": True,
        "contiguous_gradients": True, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto", "sub_group_size": 1e9, "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": "auto"},
    "gradient_accumulation_steps": 1, "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
}

#: The LLaMA-7B-on-one-RTX-4090 article's config (shared/seeds/001, its ``ds_config.json``), with its
#: batch arithmetic corrected: it states train_batch_size 2 with accumulation 8 on one GPU, which
#: DeepSpeed rejects (2 != micro × 8 × 1); the corrected reading is micro batch 2 × accumulation 8.
LLAMA_ARTICLE_Z3_OFFLOAD = {
    "train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": 5e-5, "weight_decay": 0.01}},
    "fp16": {"enabled": True, "loss_scale_window": 100},
    "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True, "buffer_count": 4},
        "offload_param": {"device": "cpu", "pin_memory": True, "buffer_size": 1e8},
        "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 1e6},
    "activation_checkpointing": {"partition_activations": True, "cpu_checkpointing": True,
                                 "contiguous_memory_optimization": True},
}

STOCK = {"llama-factory": LLAMA_FACTORY_Z3_OFFLOAD, "accelerate": ACCELERATE_Z3_OFFLOAD,
         "llama-article": LLAMA_ARTICLE_Z3_OFFLOAD}


def resolve(name: str, plan, *, lr: float, max_steps: int, warmup_steps: int = 1) -> tuple[dict, list[str]]:
    """(runnable DeepSpeed config, list of changes made) for stock config ``name`` and ``plan``.

    The comparison's own changes (the plan's batch keys and precision, the run's learning rate, the
    cookbook's AdamW block where the config has none, its WarmupDecayLR where the scheduler is missing or
    ``"auto"``, gradient clipping at 1.0 where the config has none, no ``activation_checkpointing``) are
    made first; every ``"auto"`` left is then filled by
    :func:`cookbook.dsconfig.resolve_config`, the HF Trainer's / Accelerate's rules that ``cookbook launch``
    applies to a user's config.

    Raises:
        KeyError: ``name`` is not one of :data:`STOCK`.
        ValueError: the config cannot be filled for ``plan`` (resolve_config's problems, named).
    """
    from cookbook.dsconfig import build_config, resolve_config
    if name not in STOCK:
        raise KeyError(f"stock config {name!r}: use one of {', '.join(STOCK)}")
    cfg = copy.deepcopy(STOCK[name])
    changes: list[str] = []
    ours = build_config(plan, "accelerate", lr=lr, warmup_steps=warmup_steps, total_steps=max_steps)

    # the comparison's changes: every run of it has the plan's batch shape and precision and the same lr
    batch = {"train_batch_size": plan.global_batch, "train_micro_batch_size_per_gpu": plan.micro_batch,
             "gradient_accumulation_steps": plan.grad_accum}
    for key, value in batch.items():
        if cfg.get(key, "auto") != "auto" and cfg[key] != value:
            changes.append(f"{key}: {cfg[key]!r} -> {value}")
            cfg[key] = value
    had = [k for k in ("fp16", "bf16") if cfg.get(k, {}).get("enabled") not in (False, None)]
    cfg.pop("fp16", None)
    cfg.pop("bf16", None)
    if plan.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif plan.precision == "fp16":
        cfg["fp16"] = dict(STOCK[name].get("fp16") or {}, enabled=True)
    changes.append(f"precision blocks {had} -> {plan.precision}")
    if "optimizer" not in cfg:
        cfg["optimizer"] = copy.deepcopy(ours["optimizer"])
        changes.append("optimizer: none (Trainer's torch AdamW) -> the cookbook's AdamW block (DeepSpeedCPUAdam)")
    else:
        params = cfg["optimizer"]["params"]
        if params.get("lr", "auto") != "auto" and params["lr"] != lr:
            changes.append(f"optimizer.params.lr: {params['lr']} -> {lr} (same lr in every run)")
            params["lr"] = lr
    if "scheduler" not in cfg or any(v == "auto" for v in cfg["scheduler"].get("params", {}).values()):
        cfg["scheduler"] = copy.deepcopy(ours["scheduler"])
        changes.append("scheduler: -> the cookbook's WarmupDecayLR over the run's steps")
    if "gradient_clipping" not in cfg:  # the Trainer adds none; every run of the comparison clips at 1.0
        cfg["gradient_clipping"] = 1.0
        changes.append("gradient_clipping: none -> 1.0 (as in every run of the comparison)")
    if "activation_checkpointing" in cfg:
        cfg.pop("activation_checkpointing")
        changes.append("activation_checkpointing: dropped (DeepSpeed's block does nothing for HF models; "
                       "gradient checkpointing is on through the model)")

    # every "auto" left, as the HF Trainer / Accelerate fill it (the plan's fields and the options are typed)
    res = resolve_config(cfg, plan, stated=set(plan.to_dict()) | {"lr", "max_steps", "warmup_steps"}, lr=lr,
                         max_steps=max_steps, warmup_steps=warmup_steps, config_name=name)
    if not res.ok:
        raise ValueError(f"stock config {name!r} cannot be filled for this plan: "
                         + "; ".join(f"{p.path}: {p.message}" for p in res.problems))
    cfg = res.config
    changes += [f"{r.path}: {'auto' if r.how == 'auto' else r.how} -> {r.value} ({r.source})" for r in res.rows]
    cfg["steps_per_print"] = 10 ** 9
    return cfg, changes
