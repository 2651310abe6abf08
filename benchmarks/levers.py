"""Issue 19's levers on the recipe, the HF Trainer baselines, issue 18's disk probe: one device call.

Everything runs on one GPU capped at 24 GiB (``emulate_gpu_memory_gib``), bf16, gradient
checkpointing, seq 1024 with full-length rows (``benchmarks.gpu_bench.make_long_dataset``), the 3.4B
LLaMA shape (``benchmarks/models/llama-3b``), one rank. The recipe = ZeRO-2 + optimizer offload to the
CPU, micro batch 16 x accumulation 1 (16 x 1024 tokens per step), bf16 optimizer states. Phases:

1. setup, in parallel: DeepSpeed's CPU Adam and async I/O ops JIT-built; the Liger memory probe
   (one forward/backward of the model without ZeRO at several micro batches, with and without Liger's
   fused linear cross-entropy: the GPU memory the logits cost);
2. the disk probe (:mod:`benchmarks.nvme_bench`, DeepSpeed's aio handle, default vs other settings);
3. ceilings (:mod:`benchmarks.ceilings`: pinned PCIe copies, bf16 matmul) and CPU Adam under thread
   settings (OMP threads, OpenMP thread binding, DeepSpeed's ``--bind_cores_to_rank`` layout);
4. the runs, in priority order, each a child process with a wall-clock limit, skipped when the call's
   deadline would cut it: the recipe; ZenFlow; Liger at the largest micro batch the probe says fits;
   the HF Trainer with the LLaMA article's config; ...; each through ``cookbook.launch.launch``
   (``accelerate launch``), with DeepSpeed's ``wall_clock_breakdown`` on.

Writes into ``--out``: ``levers.json`` (rewritten after every phase and run), ``driver.log``,
``runs.tar.gz`` (each run's summary, metrics, DeepSpeed config, command, log tails)::

    python -m benchmarks.levers --out $OUT --deadline-s 525                  # on the GPU machine
    DS_ACCELERATOR=cpu python -m benchmarks.levers --out /tmp/lev --rehearsal  # the driver on a CPU
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "benchmarks" / "models"
LLAMA3B = str(MODELS / "llama-3b")
GIB = 2 ** 30

#: ZenFlow as DeepSpeed's core-binding study runs it (blogs/zenflow-corebinding, ``zf_config.json``):
#: top 10% of gradient columns updated on the GPU every step, the rest on the CPU every 4 steps,
#: overlapped with the GPU (``overlap_step``), half the rank's cores kept for PyTorch.
#: select_strategy / select_interval are left to DeepSpeed's default ("auto", ``zenflow_config.py``): the
#: cookbook's linter reads any "auto" as the HF Trainer's placeholder and refuses the config.
ZENFLOW = {"topk_ratio": 0.1, "update_interval": 4, "full_warm_up_rounds": 0, "overlap_step": True,
           "pt_reserved_cores_perc": 0.5}
#: Largest predicted allocated peak (GiB) under the 24 GiB cap when choosing a micro batch: the
#: recipe's reserved already reaches the cap at 15.4 GiB allocated (docs/benchmarks.md), so ~3.5 GiB
#: are left for the caching allocator's fragmentation.
FIT_GIB = 20.5


@dataclasses.dataclass
class Variant:
    """One run. ``kind`` cookbook: ``cookbook.launch.launch`` (via :mod:`benchmarks.lever_train` when a
    code-level lever is on); trainer: :mod:`benchmarks.trainer_baseline` under torchrun."""

    name: str
    kind: str = "cookbook"
    micro_batch: int | str = 16          # "liger": the largest the probe predicts fits with Liger
    grad_accum: int = 1
    zero_stage: int = 2
    offload_optimizer: str = "cpu"
    offload_param: str = "none"
    bf16_states: bool = True
    stock: str | None = None             # a benchmarks.stock config instead of the cookbook's
    zenflow: dict | None = None
    zenflow_native: bool = False
    liger: bool = False
    bind: str | None = None              # a CPU setting of the micro-benchmark ("best": its winner)
    max_steps: int = 6
    timeout_s: float = 120.0
    expect_s: float = 80.0               # typical wall time here (start-up dominates)
    model: str = LLAMA3B
    seq_len: int = 1024
    nvme: bool = False
    env: dict = dataclasses.field(default_factory=dict)
    pin_memory: bool | None = None       # None: the cookbook's config decides; else both offload blocks set to it
    attention: str = "auto"              # cookbook --attention (issue 32): auto / sdpa / flex
    native_liger: bool = False           # the cookbook's own --liger (cookbook/liger.py), not the lever wrapper
    note: str = ""


def trainer_article() -> Variant:
    """The baseline every GPU plan carries: the HF Trainer with the LLaMA article's config (batch arithmetic
    corrected, bf16)."""
    return Variant("trainer-article", kind="trainer", zero_stage=3, offload_param="cpu", micro_batch=2, grad_accum=8,
                   bf16_states=False, stock="llama-article", max_steps=3, timeout_s=200, expect_s=115,
                   note="HF Trainer + the LLaMA article's config (batch arithmetic corrected, bf16)")


def gpu_plan() -> list[Variant]:
    """The runs of the GPU call, most important first (later ones are skipped when time runs out)."""
    zf = dict(ZENFLOW)
    return [
        Variant("recipe", note="baseline: ZeRO-2 + optimizer offload, 16 x 1, bf16 states"),
        Variant("zenflow", zenflow=zf, zenflow_native=True, max_steps=9, expect_s=90,
                note="ZenFlow with DeepSpeed deciding update boundaries (update_interval 4 honoured)"),
        Variant("liger", liger=True, micro_batch="liger", expect_s=85,
                note="Liger fused linear cross-entropy at the largest micro batch the probe says fits"),
        Variant("combo", zenflow=zf, zenflow_native=True, liger=True, micro_batch="combo", bind="best",
                max_steps=9, expect_s=95, note="the winners together"),
        trainer_article(),
        Variant("zenflow-accelerate", zenflow=zf, max_steps=7, expect_s=85,
                note="ZenFlow through the cookbook loop as it is: Accelerate marks every step a boundary"),
        Variant("trainer-recipe", kind="trainer", max_steps=5, expect_s=80,
                note="HF Trainer + the cookbook recipe's config"),
        Variant("bind", bind="best", note="the recipe with the best CPU binding of the micro-benchmark"),
        Variant("nvme-1b-default", model=str(MODELS / "llama-1b"), zero_stage=3, offload_optimizer="nvme",
                offload_param="nvme", bf16_states=False, nvme=True, max_steps=3, timeout_s=200, expect_s=180,
                note="issue 18: 1.1B LLaMA shape, ZeRO-3, optimizer + parameters on NVMe, fp32 states, default aio"),
    ]


def call2_plan() -> list[Variant]:
    """The second call: ZenFlow with fp32 states (DeepSpeed 0.19.8 refuses ZenFlow with bf16 master
    weights: ``stage_1_and_2.py::_enforce_cpu_offload`` accepts only the exact type DeepSpeedCPUAdam, and
    ZenFlow builds ZenFlowCPUAdam), then ZenFlow + Liger, the Trainer baseline, the fp32-states recipe."""
    zf = dict(ZENFLOW)
    return [
        Variant("zenflow-fp32", zenflow=zf, zenflow_native=True, bf16_states=False, max_steps=9, timeout_s=150,
                expect_s=110, note="ZenFlow (update_interval 4 honoured), fp32 states; first run: CPU Adam JIT inside"),
        Variant("combo-fp32", zenflow=zf, zenflow_native=True, liger=True, micro_batch="combo", bf16_states=False,
                max_steps=9, expect_s=95, note="ZenFlow + Liger at the largest micro batch predicted to fit, fp32 states"),
        trainer_article(),
        Variant("recipe-fp32", bf16_states=False, note="the recipe with fp32 states: ZenFlow's exact-Adam baseline"),
        # overlap_step off: ZenFlow steps in-process on ZeRO-Offload's usual states (67 GiB for the 3.4B, fp32);
        # with it the optimizer process's own buffers add 16 B/parameter (cookbook.memory.estimate: 118.6 GiB,
        # killed on the 125.8 GiB H200). Run it as `--plan call2 --only recipe-fp32,zenflow-fp32-seq`.
        Variant("zenflow-fp32-seq", zenflow=dict(zf, overlap_step=False), zenflow_native=True, bf16_states=False,
                max_steps=9, timeout_s=150, expect_s=110,
                note="ZenFlow without overlap_step (unimportant columns every 4 steps, in-process), fp32 states"),
    ]


def call3_plan() -> list[Variant]:
    """Session 5, first call: the quality-neutral (fp32-states) recipe against its levers in one call. Liger at
    micro 24 and 28 (micro 32 ran out of GPU memory at start on 2026-12-02, at the 24 GiB edge), ZenFlow
    without overlap_step (in-process: fits the 125.8 GiB host), the two together, and the Trainer + article
    baseline for the same-call ratio. Run as ``--plan call3 --phases ''``."""
    zf_seq = dict(ZENFLOW, overlap_step=False)
    return [
        Variant("recipe-fp32", bf16_states=False, note="the recipe with fp32 states (exact Adam): the baseline"),
        Variant("zenflow-fp32-seq", zenflow=zf_seq, zenflow_native=True, bf16_states=False, max_steps=9,
                timeout_s=150, expect_s=110,
                note="ZenFlow without overlap_step (unimportant columns every 4 steps, in-process), fp32 states"),
        Variant("liger-fp32-24", liger=True, micro_batch=24, bf16_states=False, expect_s=90,
                note="Liger fused linear cross-entropy at micro batch 24, fp32 states"),
        trainer_article(),
        Variant("zenflow-liger-fp32-24", zenflow=zf_seq, zenflow_native=True, liger=True, micro_batch=24,
                bf16_states=False, max_steps=9, timeout_s=150, expect_s=110,
                note="ZenFlow without overlap_step + Liger at micro batch 24, fp32 states"),
        Variant("liger-fp32-28", liger=True, micro_batch=28, bf16_states=False, expect_s=90,
                note="Liger fused linear cross-entropy at micro batch 28, fp32 states"),
    ]


def call4_plan() -> list[Variant]:
    """Issue 19 item 5: LLaMA-7B itself on one rank capped at 24 GiB, ZeRO-3 with optimizer and parameters on
    the CPU, bf16 states (fp32 states need 153 GiB of host RAM, over the 125.8 GiB machine), seq 1024, 16
    sequences per optimizer step. Levers that apply: the micro batch / accumulation split (ZeRO-3 moves every
    parameter over PCIe once per micro batch's forward and backward) and CPU binding. Not applicable: Liger
    (refused at ZeRO stage 3, ``cookbook/liger.py``), ZenFlow (DeepSpeed 0.19.8 refuses it with bf16 master
    weights, and fp32 states do not fit). Run as ``--plan call4 --phases ''``."""
    S = dict(model="llama-7b", zero_stage=3, offload_param="cpu", bf16_states=True)
    return [
        Variant("7b-2x8", micro_batch=2, grad_accum=8, max_steps=3, timeout_s=240, expect_s=170, **S,
                note="notebook 06's shape: micro batch 2 x accumulation 8"),
        Variant("7b-16x1", micro_batch=16, grad_accum=1, max_steps=4, timeout_s=200, expect_s=110, **S,
                note="the same 16 sequences per step as one micro batch"),
        Variant("7b-8x2", micro_batch=8, grad_accum=2, max_steps=4, timeout_s=200, expect_s=110, **S,
                note="micro batch 8 x accumulation 2"),
        Variant("7b-16x1-bind", micro_batch=16, grad_accum=1, bind="ds-bind", max_steps=4, timeout_s=200,
                expect_s=110, **S, note="micro 16 with DeepSpeed's core-binding layout"),
    ]


def call5_plan() -> list[Variant]:
    """Session 6: what the product now recommends, measured. LLaMA-7B with ZeRO-3 + optimizer offload and the
    parameters on the GPU (``notebooks/llama7b-1x4090.yaml``'s variant; bf16 states: fp32 states need 120.5 GiB
    of the 125.8 GiB host) at 2 x 8 against 8 x 2, the largest micro batch ``memory.larger_micro_batch`` says
    fits; notebook 06's shape with ``pin_memory: false`` (its config on a 64 GiB plan) against call 4's pinned
    7b-2x8; Liger at micro 26 between the measured 24 (fits) and 28 (out of memory). Run as
    ``--plan call5 --phases ''``."""
    S = dict(model="llama-7b", zero_stage=3, bf16_states=True)
    return [
        Variant("7b-z3opt-2x8", micro_batch=2, grad_accum=8, max_steps=3, timeout_s=200, expect_s=130, **S,
                note="ZeRO-3 + optimizer offload, parameters on the GPU: the run file's 2 x 8"),
        Variant("7b-z3opt-8x2", micro_batch=8, grad_accum=2, max_steps=4, timeout_s=170, expect_s=110, **S,
                note="the same at 8 x 2, the largest micro batch the estimator fits (21.3 of 24 GiB)"),
        Variant("7b-2x8-nopin", micro_batch=2, grad_accum=8, max_steps=3, timeout_s=220, expect_s=170,
                offload_param="cpu", pin_memory=False, **S,
                note="notebook 06's shape and offload with pin_memory false (its config on the 64 GiB plan)"),
        Variant("liger-fp32-26", liger=True, micro_batch=26, bf16_states=False, expect_s=90,
                note="Liger fused linear cross-entropy at micro batch 26, fp32 states"),
    ]


def call6_plan() -> list[Variant]:
    """Issue 32: the exact-Adam recipe before and after issue 32 against the HF Trainer running the LLaMA article's
    config, in one call, on the same full-length rows (one example per row, unpacked). Before: sdpa, micro 16.
    After: flex attention + the cookbook's ``--liger`` at micro 32 (23.5 GiB reserved on packed chats, 2.05x in one
    call, docs/gpu/attention.md). fp32 states (exact Adam) in both. Run as ``--plan call6 --phases ''``."""
    return [
        Variant("recipe-fp32-sdpa-16", bf16_states=False, attention="sdpa", max_steps=8, timeout_s=200, expect_s=120,
                note="the exact-Adam recipe before issue 32: sdpa, micro 16 (this run also JIT-builds CPU Adam)"),
        Variant("recipe-fp32-flex-liger-32", bf16_states=False, attention="flex", native_liger=True, micro_batch=32,
                max_steps=8, timeout_s=170, expect_s=100,
                note="the exact-Adam recipe after issue 32: flex attention + --liger, micro 32"),
        trainer_article(),
    ]


def rehearsal_plan() -> list[Variant]:
    """The same shapes on the CPU with tiny-llama (DS_ACCELERATOR=cpu, fp32, no Liger: Triton needs a GPU)."""
    T = dict(model="tiny-llama", seq_len=128, bf16_states=False, timeout_s=300, expect_s=60)
    zf = dict(ZENFLOW)
    return [
        Variant("recipe", max_steps=4, **T),
        Variant("zenflow", zenflow=zf, zenflow_native=True, max_steps=6, **T),
        Variant("trainer-article", kind="trainer", zero_stage=3, offload_param="cpu", micro_batch=2, grad_accum=2,
                stock="llama-article", max_steps=2, **T),
        Variant("zenflow-accelerate", zenflow=zf, max_steps=4, **T),
        Variant("combo", zenflow=zf, zenflow_native=True, micro_batch="combo", bind="best", max_steps=6, **T),
        Variant("trainer-recipe", kind="trainer", micro_batch=4, max_steps=3, **T),
        Variant("bind", bind="best", max_steps=3, **T),
    ]


# ----------------------------------------------------------------------------------------------
# configs

def make_plan(v: Variant, precision: str, nvme_path: str | None = None):
    from cookbook.plan import Plan
    return Plan(model=v.model, num_gpus=1, gpu_memory_gib=24.0, seq_len=v.seq_len, micro_batch=int(v.micro_batch),
                grad_accum=v.grad_accum, precision=precision, zero_stage=v.zero_stage,
                offload_optimizer=v.offload_optimizer, offload_param=v.offload_param, gradient_checkpointing=True,
                nvme_path=nvme_path)


def make_config(v: Variant, plan, *, lr: float = 2e-5, aio: dict | None = None) -> tuple[dict, list[str]]:
    """(DeepSpeed config, changes from the cookbook's/stock config) for variant ``v``."""
    bf16_states = v.bf16_states and plan.precision == "bf16"
    changes: list[str] = []
    if v.stock:
        from benchmarks.stock import resolve
        cfg, changes = resolve(v.stock, plan, lr=lr, max_steps=v.max_steps)
    else:
        from cookbook.dsconfig import build_config
        cfg = build_config(plan, "accelerate", lr=lr, warmup_steps=1, total_steps=v.max_steps, bf16_states=bf16_states)
    if v.kind == "cookbook":
        cfg["wall_clock_breakdown"] = True
        changes.append("wall_clock_breakdown: true (DeepSpeed's per-step timers in the rank log)")
    if v.zenflow:
        cfg["zero_optimization"]["zenflow"] = dict(v.zenflow)
        changes.append(f"zero_optimization.zenflow: {v.zenflow}")
    if aio:
        cfg["aio"] = dict(aio)
        changes.append(f"aio: {aio}")
    if v.pin_memory is not None:
        for key in ("offload_optimizer", "offload_param"):
            block = cfg["zero_optimization"].get(key)
            if isinstance(block, dict) and block.get("device", "none") != "none":
                block["pin_memory"] = v.pin_memory
                changes.append(f"zero_optimization.{key}.pin_memory: {str(v.pin_memory).lower()}")
    return cfg, changes


# ----------------------------------------------------------------------------------------------
# child: one cookbook run

BREAKDOWN = re.compile(r"time \(ms\) \|(.*)$")


def parse_breakdown(text: str) -> list[dict]:
    """DeepSpeed's ``wall_clock_breakdown`` lines (``time (ms) | name: value | ...``) as dicts."""
    rows = []
    for line in text.splitlines():
        m = BREAKDOWN.search(line)
        if m:
            row = {}
            for part in m.group(1).split("|"):
                if ":" in part:
                    k, val = part.rsplit(":", 1)
                    try:
                        row[k.strip()] = float(val)
                    except ValueError:
                        pass
            if row:
                rows.append(row)
    return rows


def run_cookbook(v: Variant, run_dir: Path, dataset: Path, on_gpu: bool, aio: dict | None, nvme_dir: str | None) -> dict:
    from cookbook import launch as L
    precision = "bf16" if on_gpu else "fp32"
    plan = make_plan(v, precision, nvme_path=nvme_dir if v.nvme else None)
    cfg, changes = make_config(v, plan, aio=aio)
    env = {"TORCH_CUDA_ARCH_LIST": "9.0", "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))}
    env.update(v.env)
    if v.liger:
        env["LEVER_LIGER"] = "1"
    if v.zenflow_native:
        env["LEVER_ZENFLOW_NATIVE"] = "1"
    if v.liger or v.zenflow_native:   # same accelerate command, the lever wrapper as the entry module
        from benchmarks.lever_train import as_entry
        as_entry().__enter__()  # for the rest of this child process (one run per process)
    t0 = time.time()
    res = L.launch(plan, run_dir, config=cfg, max_steps=v.max_steps, lr=2e-5, warmup_steps=1, dataset=str(dataset),
                   seed=1234, bf16_states=v.bf16_states and precision == "bf16",
                   emulate_gpu_memory_gib=24.0 if on_gpu else None, verify_save="off", final_save=False, force=True,
                   hang_timeout_s=v.timeout_s, env=env, progress=False, random_weights=True,
                   tokenizer="shipped",  # config-only model folders: the shipped tokenizer, as gpu_bench
                   # one example per row, cut to seq_len: the rows benchmarks/trainer_baseline.py trains (the
                   # cookbook's default splits and packs these long examples: block-diagonal masks, sdpa's slower
                   # kernel; measured on 2026-12-02 at 0.71x, data/reference/h200_levers_2026-12-02.json)
                   packing=False, attention=v.attention, liger=True if v.native_liger else None)
    s = res.summary or {}
    rows = res.metrics or []
    rank0 = run_dir / "logs" / "rank0.log"
    text = rank0.read_text(errors="replace") if rank0.is_file() else ""
    return record(v, plan, cfg, changes, env, res.status, res.message, rows, s, res.command, time.time() - t0,
                  breakdown=parse_breakdown(text), details={k: v_ for k, v_ in (res.details or {}).items()
                                                            if k != "traceback"},
                  traceback_tail=((res.details or {}).get("traceback") or "")[-2500:],
                  levers_line=next((l for l in text.splitlines() if l.startswith("[levers]")), None))


def record(v: Variant, plan, cfg, changes, env, status, message, rows, summary, command, duration, **extra) -> dict:
    timed = rows[1:] if len(rows) > 1 else rows
    tok = [r["tokens_per_s"] for r in timed if r.get("tokens_per_s")]
    st = [r["step_time_s"] for r in timed if r.get("step_time_s")]
    tokens_per_step = plan.micro_batch * plan.grad_accum * plan.world_size * plan.seq_len
    rec = {"name": v.name, "variant": dataclasses.asdict(v), "plan": plan.to_dict(), "status": status,
           "message": message, "duration_s": round(duration, 1), "command": command,
           "tokens_per_step": tokens_per_step,
           "tokens_per_s": summary.get("tokens_per_s") or (statistics.median(tok) if tok else None),
           "step_time_s": summary.get("step_time_s") or (statistics.median(st) if st else None),
           # mean over the timed steps: what a ZenFlow cycle (a CPU update every few steps) averages to
           "tokens_per_s_mean": (tokens_per_step * len(st) / sum(st)) if st else None,
           "step_times_s": [r.get("step_time_s") for r in rows], "losses": [r.get("loss") for r in rows],
           "peak_gpu_allocated_gib": summary.get("peak_gpu_allocated_gib") or
           (max(r["peak_gpu_allocated_gib"] for r in rows) if rows and rows[0].get("peak_gpu_allocated_gib") is not None else None),
           "peak_gpu_reserved_gib": summary.get("peak_gpu_reserved_gib") or
           (max(r["peak_gpu_reserved_gib"] for r in rows) if rows and rows[0].get("peak_gpu_reserved_gib") is not None else None),
           "host_peak_gib": summary.get("host_peak_gib") or (max(r.get("host_rss_gib") or 0 for r in rows) if rows else None),
           "metrics": rows, "deepspeed_config": cfg, "config_changes": changes, "env": env}
    rec.update(extra)
    return rec


def _child(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--variant", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--on-gpu", action="store_true")
    p.add_argument("--aio", default=None)
    p.add_argument("--nvme-dir", default=None)
    a = p.parse_args(argv)
    v = Variant(**json.loads(a.variant))
    try:
        rec = run_cookbook(v, Path(a.run_dir), Path(a.dataset), a.on_gpu, json.loads(a.aio) if a.aio else None, a.nvme_dir)
    except KeyboardInterrupt:
        mpath = Path(a.run_dir) / "metrics.jsonl"
        rows = [json.loads(l) for l in mpath.read_text().splitlines() if l.strip()] if mpath.is_file() else []
        plan = make_plan(v, "bf16" if a.on_gpu else "fp32", nvme_path=a.nvme_dir if v.nvme else None)
        rank0 = Path(a.run_dir) / "logs" / "rank0.log"
        rec = record(v, plan, {}, [], {}, "timeout", f"stopped by the wall-clock limit after {len(rows)} step(s)", rows,
                     {}, "", 0.0, breakdown=parse_breakdown(rank0.read_text(errors="replace")) if rank0.is_file() else [])
    Path(a.result).write_text(json.dumps(rec, indent=1, default=str))
    return 0


# ----------------------------------------------------------------------------------------------
# child: the Liger memory probe and the CPU Adam thread settings

def liger_probe(model: str, micros: list[int], seq_len: int, out: str) -> int:
    """Peak GPU memory of one forward+backward of ``model`` (bf16, gradient checkpointing, no ZeRO;
    each gradient dropped as soon as it is accumulated, as ZeRO-2's offload buckets move them out) at
    each micro batch, without and then with Liger's fused linear cross-entropy. Writes JSON rows."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from cookbook.models import resolve_model_path
    rows, t0 = [], time.time()
    if not torch.cuda.is_available():
        Path(out).write_text(json.dumps({"status": "not_run", "message": "no CUDA device"}))
        return 0
    folder, _ = resolve_model_path(model)
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.config.use_cache = False
    m.train()
    for prm in m.parameters():
        prm.register_post_accumulate_grad_hook(lambda t: setattr(t, "grad", None))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()

    def save():
        Path(out).write_text(json.dumps({"status": "ok", "params_gib": base / GIB, "rows": rows,
                                         "elapsed_s": time.time() - t0}, indent=1))
    for liger in (False, True):
        if liger:
            try:
                from liger_kernel.transformers import apply_liger_kernel_to_llama
                apply_liger_kernel_to_llama(rope=False, cross_entropy=False, fused_linear_cross_entropy=True,
                                            rms_norm=False, swiglu=False)
            except Exception as exc:  # noqa: BLE001 - recorded
                rows.append({"liger": True, "status": "failed", "message": f"{type(exc).__name__}: {exc}"})
                break
        for mb in micros:
            ids = torch.randint(0, config.vocab_size, (mb, seq_len), device="cuda")
            rec = {"liger": liger, "micro_batch": mb}
            try:
                for rep in range(2):   # the first pass is a warm-up (Triton compiles Liger's kernels)
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    t = time.perf_counter()
                    loss = m(input_ids=ids, labels=ids).loss
                    loss.backward()
                    torch.cuda.synchronize()
                    rec[f"time_s_{rep}"] = time.perf_counter() - t
                rec.update(status="ok", peak_above_params_gib=(torch.cuda.max_memory_allocated() - base) / GIB,
                           loss=float(loss))
            except torch.OutOfMemoryError as exc:
                rec.update(status="gpu_oom", message=str(exc).splitlines()[0][:200])
            del ids
            torch.cuda.empty_cache()
            rows.append(rec)
            save()
    save()
    return 0


def adam_bench(num_params: int, out: str) -> int:
    """DeepSpeedCPUAdam params/s with this process's OpenMP settings (benchmarks.ceilings.cpu_adam_rate)."""
    from benchmarks.ceilings import cpu_adam_rate
    import torch
    r = cpu_adam_rate(num_params, repeats=4)
    r.update(omp_num_threads=os.environ.get("OMP_NUM_THREADS"), omp_proc_bind=os.environ.get("OMP_PROC_BIND"),
             omp_places=os.environ.get("OMP_PLACES"), affinity=sorted(os.sched_getaffinity(0)),
             torch_threads=torch.get_num_threads())
    Path(out).write_text(json.dumps(r, indent=1))
    return 0


def binding_settings() -> dict:
    """CPU settings for one rank: name -> {env, cores}. ``ds-bind`` is what DeepSpeed's
    ``--bind_cores_to_rank`` does for one local rank (``deepspeed/utils/numa.py::get_numactl_cmd``:
    cores 0..physical-1, ``OMP_NUM_THREADS`` = that count; numactl replaced by the process affinity)."""
    import psutil
    logical = sorted(os.sched_getaffinity(0))
    phys = psutil.cpu_count(logical=False) or len(logical)
    pin = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    out = {"default": {"env": {"OMP_NUM_THREADS": str(len(logical))}, "cores": None},
           "omp-bind": {"env": dict(pin, OMP_NUM_THREADS=str(len(logical))), "cores": None},
           "ds-bind": {"env": {"OMP_NUM_THREADS": str(min(phys, len(logical)))}, "cores": logical[:phys]}}
    if phys >= len(logical):   # no SMT siblings visible: bind to all but one core, OpenMP pinned
        out["ds-bind"] = {"env": dict(pin, OMP_NUM_THREADS=str(len(logical) - 1)), "cores": logical[1:],
                          "note": "physical == logical cores: DeepSpeed's layout is every core; this leaves "
                                  "core 0 to the training thread instead"}
    return out


# ----------------------------------------------------------------------------------------------
# the driver

class Driver:
    def __init__(self, out: Path, work: Path, deadline_s: float, on_gpu: bool, rehearsal: bool, skip_aio: bool = False):
        from benchmarks.gpu_bench import make_long_dataset
        self.out, self.work, self.on_gpu, self.rehearsal, self.skip_aio = out, work, on_gpu, rehearsal, skip_aio
        self.t0 = time.time()
        self.deadline = self.t0 + deadline_s
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.log_f = open(out / "driver.log", "a")
        self.dataset = make_long_dataset(work / "long.jsonl")
        self.res: dict = {"what": "issue 19 levers + HF Trainer baselines + issue 18 disk probe", "started": self.t0,
                          "on_gpu": on_gpu, "rehearsal": rehearsal, "deadline_s": deadline_s, "runs": [],
                          "not_run": []}
        from cookbook.launch import extensions_dir
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

    def left(self) -> float:
        return self.deadline - time.time()

    def log(self, msg: str) -> None:
        line = f"[{time.time() - self.t0:7.1f}s] {msg}"
        print(line, flush=True)
        self.log_f.write(line + "\n")
        self.log_f.flush()

    def save(self) -> None:
        tmp = self.out / ".levers.json.tmp"
        tmp.write_text(json.dumps(self.res, indent=1, default=str))
        os.replace(tmp, self.out / "levers.json")
        tmp = self.out / ".runs.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for run in sorted((self.work / "runs").glob("*")):
                for name in ("summary.json", "metrics.jsonl", "ds_config.json", "command.sh", "result.json"):
                    if (run / name).is_file():
                        tar.add(run / name, arcname=f"{run.name}/{name}")
                for log in sorted((run / "logs").glob("*.log")) + sorted(run.glob("*.log")):
                    data = log.read_bytes()[-150_000:]
                    info = tarfile.TarInfo(f"{run.name}/{log.name}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, self.out / "runs.tar.gz")

    def py(self, code_or_args, log: Path, env=None, cores=None) -> subprocess.Popen:
        args = ["-c", code_or_args] if isinstance(code_or_args, str) else list(code_or_args)
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=dict(os.environ, **(env or {})),
                                stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)

    def wait(self, proc: subprocess.Popen, limit: float, name: str) -> int | None:
        try:
            return proc.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            self.log(f"{name}: wall-clock limit ({limit:.0f} s) reached, stopping")
            try:
                os.killpg(proc.pid, signal.SIGINT)
                return proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                return proc.wait()

    # -- phases ---------------------------------------------------------------------------------
    def setup(self) -> None:
        self.log("setup: CPU Adam + async I/O JIT builds, Liger memory probe")
        logs = self.work / "setup"
        logs.mkdir(exist_ok=True)
        t = time.time()
        jit_adam = self.py("from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu_adam ok')",
                           logs / "jit_cpu_adam.log")
        jit_aio = self.py("print('aio build skipped (--skip-aio)')", logs / "jit_aio.log") if self.skip_aio else self.py("from deepspeed.ops.op_builder import AsyncIOBuilder; b = AsyncIOBuilder(); "
                          "ok = b.is_compatible(); print('aio compatible', ok); ok and b.load(); print('aio loaded')",
                          logs / "jit_aio.log")
        probe = None
        if self.on_gpu:
            probe = self.py(["-m", "benchmarks.levers", "_probe", "--model", LLAMA3B, "--out", str(logs / "probe.json")],
                            logs / "probe.log")
        rc = {"cpu_adam": self.wait(jit_adam, 240, "jit cpu_adam"), "async_io": self.wait(jit_aio, 240, "jit aio")}
        self.res["setup"] = {"jit_exit_codes": rc, "jit_s": round(time.time() - t, 1),
                             "aio_log": (logs / "jit_aio.log").read_text()[-1500:],
                             "cpu_adam_log": (logs / "jit_cpu_adam.log").read_text()[-800:]}
        self.log(f"setup: JIT builds done {rc} in {time.time() - t:.0f} s")
        self._probe_proc = probe
        self.save()

    def disk(self) -> None:
        if self.res["setup"]["jit_exit_codes"].get("async_io") != 0 or "aio loaded" not in self.res["setup"]["aio_log"]:
            self.res["disk"] = {"status": "not_run", "message": "DeepSpeed's async I/O op did not build: "
                                + self.res["setup"]["aio_log"][-500:]}
            self.log("disk: not run (aio op not built)")
            return
        folder = Path("/tmp/nvme_probe")
        out = self.work / "disk.json"
        self.log("disk: aio sweep start")
        proc = self.py(["-m", "benchmarks.nvme_bench", "--folder", str(folder), "--io-gib",
                        "0.125" if self.rehearsal else "1", "--loops", "1", "--deadline-s", "25", "--out", str(out)],
                       self.work / "disk.log")
        rc = self.wait(proc, 90, "disk sweep")
        self.res["disk"] = json.loads(out.read_text()) if out.is_file() else \
            {"status": "failed", "exit": rc, "log": (self.work / "disk.log").read_text()[-2000:]}
        self.log(f"disk: exit {rc}; " + "; ".join(f"{s['name']} w {s.get('write_gb_s', 0):.2f} r {s.get('read_gb_s', 0):.2f}"
                                               for s in self.res["disk"].get("settings", [])))
        self.save()

    def cpu_settings(self) -> None:
        """CPU Adam under each thread setting (runs while the probe may still use the GPU: it needs
        one core)."""
        settings = binding_settings()
        self.res["cpu_settings"] = settings
        n = 20_000_000 if self.rehearsal else 200_000_000
        bench = {}
        for name, s in settings.items():
            o = self.work / f"adam_{name}.json"
            rc = self.wait(self.py(["-m", "benchmarks.levers", "_adam", "--params", str(n), "--out", str(o)],
                                   self.work / f"adam_{name}.log", env=s["env"], cores=s["cores"]), 60, f"adam {name}")
            bench[name] = json.loads(o.read_text()) if o.is_file() else {"status": "failed", "exit": rc}
            self.log(f"cpu adam {name}: {(bench[name].get('cpu_adam_params_per_s') or 0) / 1e9:.2f}e9 params/s")
        self.res["cpu_adam_settings"] = bench
        base = bench.get("default", {}).get("cpu_adam_params_per_s") or 0
        cands = {k: b.get("cpu_adam_params_per_s") or 0 for k, b in bench.items() if k != "default"}
        best = max(cands, key=cands.get) if cands else None
        self.best_bind = best if best and base and cands[best] > 1.03 * base else None
        self.best_bind_any = best
        self.res["cpu_adam_best"] = {"best": best, "over_default": (cands[best] / base) if best and base else None,
                                     "used_in_combo": self.best_bind}
        self.save()

    def ceilings(self) -> None:
        if self._probe_proc is not None:
            rc = self.wait(self._probe_proc, max(5.0, min(90.0, self.left() - 380)), "liger probe")
            p = self.work / "setup" / "probe.json"
            self.res["liger_probe"] = json.loads(p.read_text()) if p.is_file() else {"status": "failed"}
            self.res["liger_probe"]["exit"] = rc
            self.res["liger_probe"]["log_tail"] = (self.work / "setup" / "probe.log").read_text(errors="replace")[-2500:]
            self.log(f"liger probe: exit {rc}: " + "; ".join(
                f"{'L' if r.get('liger') else '-'}{r.get('micro_batch')}: {r.get('peak_above_params_gib', float('nan')):.2f} GiB "
                f"{r.get('time_s_1', float('nan')):.2f} s" for r in self.res["liger_probe"].get("rows", []) if r.get("status") == "ok"))
            self.save()
        self.log("ceilings: start")
        out = self.work / "ceilings.json"
        code = ("import json, sys; from benchmarks import ceilings as c; r = {'versions': c.versions()}; "
                "import torch\n"
                "if torch.cuda.is_available(): r.update(c.pcie_bandwidth()); r.update(c.matmul_rate())\n"
                f"json.dump(r, open({str(out)!r}, 'w'), indent=1)")
        rc = self.wait(self.py(code, self.work / "ceilings.log"), 90, "ceilings")
        self.res["ceilings"] = json.loads(out.read_text()) if out.is_file() else {"status": "failed", "exit": rc}
        self.log(f"ceilings: exit {rc}: " + ", ".join(f"{k} {v:.1f}" for k, v in self.res["ceilings"].items()
                                                     if isinstance(v, float)))
        self.save()

    def choose_micro(self, v: Variant) -> int | None:
        """The micro batch for ``liger`` / ``combo`` from the probe and the measured recipe peak."""
        probe = {(r["liger"], r["micro_batch"]): r["peak_above_params_gib"]
                 for r in self.res.get("liger_probe", {}).get("rows", []) if r.get("status") == "ok"}
        sfx = "-fp32" if v.name.endswith("-fp32") else ""
        base_run = next((r for r in self.res["runs"] if r["name"] == "recipe" + sfx and r.get("peak_gpu_allocated_gib")), None)
        base_alloc = base_run["peak_gpu_allocated_gib"] if base_run else 15.4   # docs/benchmarks.md, same recipe
        if (False, 16) not in probe:
            return None
        extra = 0.0
        if v.micro_batch == "combo":
            zf = next((r for r in self.res["runs"] if r["name"] == "zenflow" + sfx and r.get("peak_gpu_allocated_gib")), None)
            extra = (zf["peak_gpu_allocated_gib"] - base_alloc) if zf else 2.0
        pts = sorted(mb for (lg, mb) in probe if lg)

        def act(mb):   # linear between the probed micro batches (activations and logits scale with it)
            lo = max((p for p in pts if p <= mb), default=None)
            hi = min((p for p in pts if p >= mb), default=None)
            if lo is None or hi is None:
                return None
            if lo == hi:
                return probe[(True, lo)]
            return probe[(True, lo)] + (probe[(True, hi)] - probe[(True, lo)]) * (mb - lo) / (hi - lo)
        choice, table = None, {}
        for mb in (16, 20, 24, 28, 32):
            a = act(mb)
            if a is None:
                continue
            pred = base_alloc + extra + a - probe[(False, 16)]
            table[mb] = round(pred, 2)
            if pred <= FIT_GIB:
                choice = mb
        self.res.setdefault("micro_choice", {})[v.name] = {"predicted_allocated_gib": table, "chosen": choice,
                                                           "base_alloc_gib": base_alloc, "zenflow_extra_gib": extra,
                                                           "limit_gib": FIT_GIB}
        return choice

    def adjust_combo(self, v: Variant) -> Variant:
        """The combination of the winners measured so far: the faster ZenFlow mode (or none if neither
        beat the recipe), Liger only if its run worked."""
        by = {r["name"]: r for r in self.res["runs"]}

        def tps(name):
            r = by.get(name) or {}
            return (r.get("tokens_per_s_mean") or 0) if r.get("status") == "ok" else 0
        sfx = "-fp32" if v.name.endswith("-fp32") else ""
        base, native, accel = tps("recipe" + sfx), tps("zenflow" + sfx), tps("zenflow-accelerate" + sfx)
        if not base and sfx:   # no same-call fp32 baseline: the fp32-states recipe measured before (docs/benchmarks.md)
            base = 5924.0
        why = []
        if max(native, accel) <= base:
            v = dataclasses.replace(v, zenflow=None, zenflow_native=False)
            why.append("no ZenFlow: neither mode beat the recipe")
        elif accel > native:
            v = dataclasses.replace(v, zenflow_native=False)
            why.append("ZenFlow through Accelerate as is (faster than native)")
        else:
            why.append("ZenFlow with native update boundaries")
        if "liger" in by and by["liger"].get("status") != "ok":
            v = dataclasses.replace(v, liger=False, micro_batch=16)
            why.append("no Liger: its run failed")
        self.res.setdefault("combo_choice", []).extend(why)
        return dataclasses.replace(v, note=v.note + ": " + "; ".join(why))

    def cleanup(self, run_dir: Path) -> None:
        """Kill what a stopped run left (the launcher's ranks live in their own sessions)."""
        import psutil
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if proc.pid != os.getpid() and str(run_dir) in " ".join(proc.info["cmdline"] or []):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def run_variant(self, v: Variant) -> None:
        if self.left() < v.expect_s:
            self.log(f"{v.name}: not run, {self.left():.0f} s left < ~{v.expect_s:.0f} s it needs")
            self.res["not_run"].append({"name": v.name, "why": f"the device call's time ran out ({self.left():.0f} s left)",
                                        "note": v.note})
            self.save()
            return
        if v.name.startswith("combo"):
            v = self.adjust_combo(v)
        if isinstance(v.micro_batch, str):
            mb = self.choose_micro(v) if self.on_gpu else 8
            if mb is None and v.name == "combo":
                v = dataclasses.replace(v, liger=False, micro_batch=16, note=v.note + " (no Liger: its probe failed)")
            elif mb is None:
                self.res["not_run"].append({"name": v.name, "why": "no Liger probe result to size the micro batch"})
                self.log(f"{v.name}: not run (no probe)")
                self.save()
                return
            else:
                v = dataclasses.replace(v, micro_batch=mb)
        cores = None
        if v.bind:
            name = (self.best_bind if v.name == "combo" else self.best_bind_any) if v.bind == "best" else v.bind
            if name:   # a named setting runs without the cpu phase's micro-benchmark
                s = self.res.get("cpu_settings", {}).get(name) or binding_settings()[name]
                v = dataclasses.replace(v, env=dict(v.env, **s["env"]), bind=name)
                cores = s["cores"]
            else:
                v = dataclasses.replace(v, bind=None)
        if v.nvme and (self.res.get("disk") or {}).get("status") == "not_run":
            self.res["not_run"].append({"name": v.name, "why": "no async I/O op"})
            return
        run_dir = self.work / "runs" / v.name
        run_dir.mkdir(parents=True, exist_ok=True)
        result = run_dir / "result.json"
        result.unlink(missing_ok=True)
        limit = min(v.timeout_s + 30, self.left())
        self.log(f"{v.name}: start (limit {limit:.0f} s), micro {v.micro_batch}, bind {v.bind}")
        t = time.time()
        if v.kind == "trainer":
            rec = self._trainer(v, run_dir, result, limit, cores)
        else:
            args = ["-m", "benchmarks.levers", "_run", "--variant", json.dumps(dataclasses.asdict(v)), "--run-dir",
                    str(run_dir), "--dataset", str(self.dataset), "--result", str(result)]
            args += ["--on-gpu"] if self.on_gpu else []
            if v.nvme:
                nv = Path("/tmp/nvme_swap")
                nv.mkdir(exist_ok=True)
                args += ["--nvme-dir", str(nv)]
            proc = self.py(args, run_dir / "child.log", cores=cores)
            rc = self.wait(proc, limit, v.name)
            self.cleanup(run_dir)
            rec = json.loads(result.read_text()) if result.is_file() else {
                "name": v.name, "variant": dataclasses.asdict(v), "status": "driver_error",
                "message": f"no result (exit {rc})", "child_log_tail": (run_dir / "child.log").read_text()[-3000:]}
            if v.nvme:
                rec["nvme_swap_bytes"] = sum(f.stat().st_size for f in Path("/tmp/nvme_swap").rglob("*") if f.is_file())
        rec["wall_s"] = round(time.time() - t, 1)
        rec["cores"] = cores
        self.res["runs"].append(rec)
        self.log(f"{v.name}: {rec.get('status')} in {rec['wall_s']} s: {rec.get('tokens_per_s')} tokens/s (median), "
                 f"mean {rec.get('tokens_per_s_mean')}, GPU {rec.get('peak_gpu_allocated_gib')}/"
                 f"{rec.get('peak_gpu_reserved_gib')} GiB, host {rec.get('host_peak_gib')} GiB — "
                 f"{str(rec.get('message'))[:300]}")
        self.save()

    def _trainer(self, v: Variant, run_dir: Path, result: Path, limit: float, cores) -> dict:
        precision = "bf16" if self.on_gpu else "fp32"
        plan = make_plan(v, precision)
        cfg, changes = make_config(v, plan)
        cfg_path = run_dir / "ds_config.json"
        cfg_path.write_text(json.dumps(cfg, indent=1))
        cmd = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m",
               "benchmarks.trainer_baseline", "--config", str(cfg_path), "--model", v.model, "--dataset",
               str(self.dataset), "--seq-len", str(v.seq_len), "--max-steps", str(v.max_steps), "--result", str(result),
               "--output-dir", str(run_dir / "trainer_out")]
        if self.on_gpu:
            cmd += ["--emulate-gpu-memory-gib", "24"]
        env = {"OMP_NUM_THREADS": str(len(os.sched_getaffinity(0))), "TORCH_CUDA_ARCH_LIST": "9.0",
               "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
               "PYTHONWARNINGS": "ignore::FutureWarning"}
        (run_dir / "command.sh").write_text("#!/usr/bin/env bash\n" + " ".join(
            [f"{k}={val}" for k, val in env.items()] + ["python"] + cmd) + "\n")
        t = time.time()
        rc = self.wait(self.py(cmd, run_dir / "trainer.log", env=env, cores=cores), limit, v.name)
        self.cleanup(run_dir)
        out = json.loads(result.read_text()) if result.is_file() else {}
        rows = [dict(r, host_rss_gib=r.get("host_rss_peak_gib")) for r in out.get("steps", [])]
        log_tail = (run_dir / "trainer.log").read_text(errors="replace")[-3000:]
        status = out.get("status") or ("timeout" if rc is not None and rc < 0 else "failed")
        return record(v, plan, cfg, changes, env, status, out.get("message") or (log_tail[-400:] if status != "ok" else ""),
                      rows, {"tokens_per_s": out.get("tokens_per_s"), "step_time_s": out.get("step_time_s"),
                             "peak_gpu_allocated_gib": out.get("peak_gpu_allocated_gib"),
                             "peak_gpu_reserved_gib": out.get("peak_gpu_reserved_gib"),
                             "host_peak_gib": out.get("host_peak_gib")},
                      (run_dir / "command.sh").read_text(), time.time() - t, exit_code=rc,
                      trainer={k: out.get(k) for k in ("training_arguments", "model_init_s", "train_s", "wall_s",
                                                       "rows_full_length", "versions")},
                      log_tail=log_tail if status != "ok" else log_tail[-800:])

    def run(self, plan: list[Variant], phases=("setup", "disk", "cpu", "ceilings")) -> None:
        self._probe_proc = None
        self.best_bind = self.best_bind_any = None
        if "setup" in phases:
            self.setup()
        if "disk" in phases:
            self.disk()
        if "cpu" in phases:
            self.cpu_settings()
        if "ceilings" in phases:
            self.ceilings()
        for v in plan:
            self.run_variant(v)
        self.res["elapsed_s"] = time.time() - self.t0
        self.log("done")
        self.save()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_run":
        return _child(argv[1:])
    if argv and argv[0] == "_probe":
        p = argparse.ArgumentParser()
        p.add_argument("--model", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--seq-len", type=int, default=1024)
        p.add_argument("--micros", default="16,24,32")
        a = p.parse_args(argv[1:])
        return liger_probe(a.model, [int(x) for x in a.micros.split(",")], a.seq_len, a.out)
    if argv and argv[0] == "_adam":
        p = argparse.ArgumentParser()
        p.add_argument("--params", type=int, required=True)
        p.add_argument("--out", required=True)
        a = p.parse_args(argv[1:])
        return adam_bench(a.params, a.out)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for levers.json, driver.log, runs.tar.gz")
    p.add_argument("--work", default="/tmp/levers_work", help="scratch folder (run folders, data)")
    p.add_argument("--deadline-s", type=float, default=530.0, help="no run starts that cannot end before this")
    p.add_argument("--rehearsal", action="store_true", help="the CPU plan (tiny-llama)")
    p.add_argument("--only", default=None, help="comma-separated run names")
    p.add_argument("--skip-aio", action="store_true", help="no async I/O build or disk probe (a CPU box without libaio)")
    p.add_argument("--plan", default=None, choices=("call2", "call3", "call4", "call5", "call6"),
                   help="call2, call3 (fp32-states levers), call4 (LLaMA-7B one rank); none: the first call's runs")
    p.add_argument("--phases", default="setup,disk,cpu,ceilings", help="phases before the runs ('' for none)")
    p.add_argument("--probe-json", default=None, help="a Liger probe result from an earlier call (sizes micro batches)")
    a = p.parse_args(argv)
    import torch
    on_gpu = torch.cuda.is_available()
    plans = {"call2": call2_plan, "call3": call3_plan, "call4": call4_plan, "call5": call5_plan, "call6": call6_plan}
    plan = rehearsal_plan() if a.rehearsal or not on_gpu else plans[a.plan]() if a.plan else gpu_plan()
    if a.only:
        keep = set(a.only.split(","))
        plan = [v for v in plan if v.name in keep]
    d = Driver(Path(a.out), Path(a.work), a.deadline_s, on_gpu, a.rehearsal or not on_gpu, skip_aio=a.skip_aio)
    d.log(f"levers: on_gpu={on_gpu}, deadline {a.deadline_s:.0f} s, plan {[v.name for v in plan]}")
    if a.probe_json:
        d.res["liger_probe"] = json.loads(Path(a.probe_json).read_text())
        d.res["liger_probe_source"] = a.probe_json
    d.run(plan, tuple(x for x in a.phases.split(",") if x))
    return 0


if __name__ == "__main__":
    sys.exit(main())
