"""GPU benchmark driver: the ZeRO ladder, the stock-config comparison, the 2-rank runs (issues 9, 10),
the estimator's held-out calibration and the packed-chat recipe (issue 13).

One command runs a *suite*: phases run one after another; inside a phase, *lanes* run in parallel
(on the 2-GPU machine: lane A = GPU 0 + CPU cores 0-15, lane B = GPU 1 + cores 16-31, each like
the 16-core one-GPU machine), and each lane runs its *rungs* in order. A rung is one
``cookbook.launch.launch`` of a plan (through ``accelerate launch -m cookbook.train``), with each
rank's GPU memory capped at 24 GiB (``emulate_gpu_memory_gib``). Out-of-memory rungs are results.

Every rung is run by a child process with a wall-clock limit, and the results file is rewritten after
each rung, so a suite stopped by the device's time limit still returns what it measured::

    python -m benchmarks.gpu_bench --suite call1 --out $OUT --deadline-s 570     # on the GPU machine
    python -m benchmarks.gpu_bench --suite calib --out $OUT --only recipe-chat,ho-llama3b-z3-offopt-s2048-b4
    DS_ACCELERATOR=cpu python -m benchmarks.gpu_bench --suite rehearsal --out /tmp/bench_out   # CPU
    DS_ACCELERATOR=cpu python -m benchmarks.gpu_bench --suite calib --tiny --out /tmp/calib   # CPU check

``--tiny`` runs a GPU suite's rungs with the tiny model of the same architecture (``tiny-llama`` /
``tiny-qwen2``), sequences 16× shorter and 2 steps, to check the suite's definition on a CPU.

Suite ``calib`` (issue 13, one H200 capped at 24 GiB; ``calib2``: the same rungs on two lanes of
the 2-GPU machine): ``recipe-chat`` is the 3.4B LLaMA-shaped recipe (ZeRO-2 + optimizer offload,
micro batch 16, bf16 states, seq 1024) on the shipped chat data packed into full rows, to compare
with the synthetic full-length ``recipe-bf16-states`` of ``data/reference/h200x2_2026-11-30.json``;
the ``ho-*`` rungs are the estimator's held-out calibration points: shapes none of the fitting
points has (sequence 2048-4096, micro batch 1-8, LLaMA and Qwen2 architectures, ZeRO-2/3 with and
without offload; four are expected not to fit), on the packed chat data at full rows. Turn their
results into held-out points with ``python -m benchmarks.calibration --from-results results.json``.

Writes into ``--out``: ``results.json`` (every rung: plan, config, status, tokens/s, peaks, the
estimate beside the measurement), ``ceilings.json``, ``driver.log``, ``runs.tar.gz`` (each run
folder's summary, metrics, DeepSpeed config and log tails).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "benchmarks" / "models"
GIB = 2 ** 30
LOCK = threading.Lock()


# ----------------------------------------------------------------------------------------------
# the data: full-length sequences, so tokens/s counts seq_len tokens per sequence

def make_long_dataset(path: Path, *, examples: int = 128, records_per_example: int = 45, seed: int = 0) -> Path:
    """Write a JSONL of ``examples`` instruction records whose output concatenates
    ``records_per_example`` shipped records (~34 tokens each with the shipped tokenizer, so every
    example exceeds 1024 tokens and is truncated to exactly ``seq_len``)."""
    from cookbook.data import format_prompt
    from cookbook.models import INSTRUCTIONS_PATH
    recs = [json.loads(l) for l in INSTRUCTIONS_PATH.read_text().splitlines() if l.strip()]
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for _ in range(examples):
            parts = [format_prompt(r["instruction"], r.get("input", "")) + r["output"]
                     for r in rng.sample(recs, records_per_example)]
            f.write(json.dumps({"instruction": "Continue the practice sheet.", "input": "",
                                "output": "\n\n".join(parts)}) + "\n")
    return path


def weights_dir(work: Path, model: str) -> Path:
    return Path(work) / "weights" / Path(model).name


def make_weights(model: str, out: Path) -> Path:
    """Random bf16 weights for ``model`` (a config folder), initialised on the GPU and saved as
    safetensors beside a copy of the config: a ZeRO-1/2 run then loads them in seconds instead of
    initialising billions of parameters on the CPU (minutes)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    if (out / "model.safetensors.index.json").is_file() or (out / "model.safetensors").is_file():
        return out
    from cookbook.models import resolve_model_path
    config = AutoConfig.from_pretrained(str(resolve_model_path(model)[0]), local_files_only=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(1234)
    with torch.device(device):
        m = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    m.save_pretrained(tmp, safe_serialization=True)
    os.replace(tmp, out)
    return out


# ----------------------------------------------------------------------------------------------
# rungs and suites

@dataclasses.dataclass(frozen=True)
class Rung:
    """One launch: plan fields, the config source, run options, and where it runs."""

    name: str
    group: str
    model: str
    num_gpus: int = 1
    zero_stage: int = 2
    offload_optimizer: str = "none"
    offload_param: str = "none"
    micro_batch: int = 16
    grad_accum: int = 1
    seq_len: int = 1024
    bf16_states: bool = False
    stock: str | None = None          # a benchmarks.stock name, else the cookbook's config
    max_steps: int = 6
    lr: float = 2e-5
    env: tuple = ()                   # extra (NAME, value) pairs for the ranks
    timeout_s: float = 300.0
    expect: str = "ok"                # "ok" or "gpu_oom": what the estimate predicts / the story needs
    weights: bool = False             # load random weights saved once on this machine (fast start, ZeRO-1/2)
    data: str = "long"                # "long": the synthetic full-length set; "chat": the shipped chats, packed


LLAMA3B = str(MODELS / "llama-3b")
QWEN3B = str(MODELS / "qwen2.5-3b")


def gpu_suites() -> dict:
    """The suites run on the 2 x H200 machine: {name: [phase, ...]}, phase = {lane: [Rung, ...]} or
    the string "ceilings"."""
    L = dict(model=LLAMA3B, seq_len=1024)
    ladder = [
        Rung("ladder-z2", "ladder_1rank", zero_stage=2, max_steps=3, timeout_s=150, expect="gpu_oom", **L),
        Rung("ladder-z3", "ladder_1rank", zero_stage=3, max_steps=3, timeout_s=150, expect="gpu_oom", **L),
        Rung("ladder-z2-offopt", "ladder_1rank", zero_stage=2, offload_optimizer="cpu", max_steps=10, **L),
        Rung("ladder-z3-offopt", "ladder_1rank", zero_stage=3, offload_optimizer="cpu", **L),
        Rung("ladder-z3-offall", "ladder_1rank", zero_stage=3, offload_optimizer="cpu", offload_param="cpu", **L),
    ]
    lane_b1 = [
        Rung("recipe-bf16-states", "bf16_states", zero_stage=2, offload_optimizer="cpu", bf16_states=True,
             max_steps=10, **L),
        Rung("llama7b-z3-offall-bf16-states", "llama7b_1rank", model="llama-7b", seq_len=1024, zero_stage=3,
             offload_optimizer="cpu", offload_param="cpu", micro_batch=8, grad_accum=2, bf16_states=True,
             max_steps=4, timeout_s=330),
        Rung("stock-llama-factory", "stock", zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
             micro_batch=2, grad_accum=8, stock="llama-factory", max_steps=5, **L),
    ]
    two_rank = [Rung("llama3b-2rank-recipe", "ladder_2rank", num_gpus=2, zero_stage=2, offload_optimizer="cpu",
                     micro_batch=8, grad_accum=1, max_steps=6, env=(("OMP_NUM_THREADS", "16"),), **L)]
    Q = dict(model=QWEN3B, num_gpus=2, seq_len=512, micro_batch=4, grad_accum=2,
             env=(("OMP_NUM_THREADS", "16"),))
    issue10 = [
        Rung("qwen3b-2rank-z3-offall", "issue10", zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
             max_steps=6, **Q),
        Rung("qwen3b-2rank-z3-offall-p2p-off", "issue10", zero_stage=3, offload_optimizer="cpu",
             offload_param="cpu", max_steps=6, **dict(Q, env=Q["env"] + (("NCCL_P2P_DISABLE", "1"),))),
        Rung("qwen3b-2rank-z2", "issue10", zero_stage=2, max_steps=3, timeout_s=150, expect="gpu_oom", **Q),
        Rung("qwen3b-2rank-z3", "issue10", zero_stage=3, max_steps=3, timeout_s=150, expect="gpu_oom", **Q),
    ]
    stock_rest = {
        "A": [Rung("stock-accelerate", "stock", zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                   micro_batch=2, grad_accum=8, stock="accelerate", max_steps=5, **L)],
        "B": [Rung("stock-llama-article", "stock", zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                   micro_batch=2, grad_accum=8, stock="llama-article", max_steps=5, **L)],
    }
    # call 2: what call 1 could not finish (3B ZeRO-1/2 rungs load saved weights: CPU init took minutes)
    S = dict(zero_stage=3, offload_optimizer="cpu", offload_param="cpu", micro_batch=2, grad_accum=8, max_steps=4,
             timeout_s=240, **L)
    call2_lanes = {
        "A": [Rung("ladder-z3-offopt", "ladder_1rank", zero_stage=3, offload_optimizer="cpu", max_steps=5, **L),
              Rung("ladder-z3-offall", "ladder_1rank", zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                   max_steps=5, **L),
              Rung("stock-accelerate", "stock", stock="accelerate", **S)],
        "B": [Rung("ladder-z2", "ladder_1rank", zero_stage=2, max_steps=3, timeout_s=150, expect="gpu_oom",
                   weights=True, **L),
              Rung("ladder-z3", "ladder_1rank", zero_stage=3, max_steps=3, timeout_s=150, expect="gpu_oom", **L),
              Rung("stock-llama-factory", "stock", stock="llama-factory", **S),
              Rung("stock-llama-article", "stock", stock="llama-article", **S)],
    }
    call2_two = {"AB": [
        Rung("qwen3b-2rank-z3-offall", "issue10", zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
             max_steps=5, **Q),
        Rung("qwen3b-2rank-z3", "issue10", zero_stage=3, max_steps=3, timeout_s=150, expect="gpu_oom", **Q),
        Rung("qwen3b-2rank-z3-offall-p2p-off", "issue10", zero_stage=3, offload_optimizer="cpu",
             offload_param="cpu", max_steps=5, **dict(Q, env=Q["env"] + (("NCCL_P2P_DISABLE", "1"),))),
        Rung("qwen3b-2rank-z2", "issue10", zero_stage=2, max_steps=3, timeout_s=150, expect="gpu_oom", weights=True, **Q),
        Rung("llama3b-2rank-recipe", "ladder_2rank", num_gpus=2, zero_stage=2, offload_optimizer="cpu",
             micro_batch=8, grad_accum=1, max_steps=5, weights=True, env=(("OMP_NUM_THREADS", "16"),), **L),
    ]}
    return {
        "call1": ["ceilings", {"A": ladder, "B": lane_b1}, {"AB": two_rank}],
        "call2": [("prepare", (LLAMA3B, QWEN3B)), call2_lanes, call2_two],
        "call1b": ["ceilings", {"AB": issue10}, stock_rest],
        "smoke": ["ceilings"],
        "calib": calib_suite(lanes=1),
        "calib2": calib_suite(lanes=2),
        "calib-fast": calib_fast_suite(),
    }


def calib_rungs() -> list[Rung]:
    """Issue 13: the packed-chat recipe and the held-out calibration shapes, in priority order (the
    estimator's ``cookbook.memory.estimate`` for each is in the comment: GPU reserved GiB, fits 24?)."""
    C = dict(data="chat", max_steps=5, timeout_s=330)
    H = dict(C, group="heldout")
    return [
        # the issue's benchmark: compare tokens/s with recipe-bf16-states (synthetic full rows)
        Rung("recipe-chat", "recipe_chat", model=LLAMA3B, zero_stage=2, offload_optimizer="cpu", micro_batch=16,
             seq_len=1024, bf16_states=True, weights=True, **dict(C, max_steps=10)),        # 22.0, fits
        Rung("ho-llama3b-z3-offopt-s2048-b4", model=LLAMA3B, zero_stage=3, offload_optimizer="cpu",
             micro_batch=4, seq_len=2048, **H),                                              # 12.5, fits
        Rung("ho-qwen3b-z2-offopt-s2048-b2", model=QWEN3B, zero_stage=2, offload_optimizer="cpu",
             micro_batch=2, seq_len=2048, weights=True, **H),                                # 19.8, fits
        Rung("ho-llama3b-z3-offall-s4096-b4", model=LLAMA3B, zero_stage=3, offload_optimizer="cpu",
             offload_param="cpu", micro_batch=4, seq_len=4096, **H),                        # 15.4, fits
        Rung("ho-qwen3b-z3-offall-s4096-b1", model=QWEN3B, zero_stage=3, offload_optimizer="cpu",
             offload_param="cpu", micro_batch=1, seq_len=4096, **H),                        # 14.6, fits
        Rung("ho-llama3b-z2-offopt-s4096-b2", model=LLAMA3B, zero_stage=2, offload_optimizer="cpu",
             micro_batch=2, seq_len=4096, weights=True, **H),                                # 17.4, fits
        Rung("ho-qwen3b-z3-offopt-s2048-b1", model=QWEN3B, zero_stage=3, offload_optimizer="cpu",
             micro_batch=1, seq_len=2048, **H),                                              # 12.0, fits
        Rung("ho-llama3b-z3-offall-s2048-b8", model=LLAMA3B, zero_stage=3, offload_optimizer="cpu",
             offload_param="cpu", micro_batch=8, seq_len=2048, **H),                        # 15.4, fits
        Rung("ho-llama3b-z3-offall-s4096-b8", model=LLAMA3B, zero_stage=3, offload_optimizer="cpu",
             offload_param="cpu", micro_batch=8, seq_len=4096, expect="gpu_oom", **dict(H, max_steps=3)),  # 28.0
        Rung("ho-qwen3b-z2-offopt-s2048-b4", model=QWEN3B, zero_stage=2, offload_optimizer="cpu",
             micro_batch=4, seq_len=2048, weights=True, expect="gpu_oom", **dict(H, max_steps=3)),  # 28.1
        Rung("ho-llama3b-z2-s2048-b1", model=LLAMA3B, zero_stage=2, micro_batch=1, seq_len=2048, weights=True,
             expect="gpu_oom", **dict(H, max_steps=3, timeout_s=200)),                     # 71.4
        Rung("ho-qwen3b-z3-s4096-b1", model=QWEN3B, zero_stage=3, micro_batch=1, seq_len=4096,
             expect="gpu_oom", **dict(H, max_steps=3, timeout_s=200)),                     # 63.0
    ]


def calib_suite(lanes: int = 1) -> list:
    """``calib``: every rung of :func:`calib_rungs` on lane A (one GPU); ``calib2``: alternated over
    lanes A and B (two GPUs, 16 cores each). Saved random weights are prepared first for the ZeRO-2 rungs."""
    rungs = calib_rungs()
    phase = {"A": rungs} if lanes == 1 else {"A": rungs[0::2], "B": rungs[1::2]}
    return [("prepare", (LLAMA3B, QWEN3B)), phase]


def calib_fast_suite() -> list:
    """``calib-fast``: the ``calib`` rungs without saved weights (ZeRO-0/1/2 models initialise on the GPU in
    seconds now) and with 4 steps (3 timed) for the held-out points: what one ~8-minute device call holds."""
    rungs = [dataclasses.replace(r, weights=False, max_steps=r.max_steps if r.name == "recipe-chat" else min(r.max_steps, 4))
             for r in calib_rungs()]
    return [{"A": rungs}]


def tiny(rung: Rung) -> Rung:
    """The CPU check of a GPU rung: the tiny model of the same architecture, sequences 16× shorter
    (at least 64 tokens), 2 steps."""
    model = "tiny-qwen2" if "qwen" in Path(rung.model).name else "tiny-llama"
    return dataclasses.replace(rung, model=model, seq_len=max(64, rung.seq_len // 16), max_steps=2, lr=3e-3,
                               timeout_s=400)


def rehearsal_suite() -> list:
    """The same shape on the CPU (DS_ACCELERATOR=cpu): tiny models, short sequences, 2 lanes."""
    T = dict(model="tiny-llama", seq_len=128, micro_batch=4, grad_accum=1, max_steps=3, lr=3e-3, timeout_s=240)
    return ["ceilings",
            ("prepare", ("tiny-llama",)),
            {"A": [Rung("cpu-z2-offopt", "ladder_1rank", zero_stage=2, offload_optimizer="cpu", weights=True, **T),
                   Rung("cpu-z3-offall", "ladder_1rank", zero_stage=3, offload_optimizer="cpu", offload_param="cpu", **T)],
             "B": [Rung("cpu-stock-llama-article", "stock", zero_stage=3, offload_optimizer="cpu",
                        offload_param="cpu", stock="llama-article", **dict(T, micro_batch=2, grad_accum=2)),
                   Rung("cpu-timeout", "test", zero_stage=2, **dict(T, max_steps=200, timeout_s=25))]},
            {"AB": [Rung("cpu-2rank-qwen", "issue10", num_gpus=2, zero_stage=3,
                         offload_optimizer="cpu", offload_param="cpu", **dict(T, model="tiny-qwen2"))]}]


LANES_GPU = {"A": ("0", range(0, 16)), "B": ("1", range(16, 32)), "AB": ("0,1", None)}


def _cores(wanted) -> set | None:
    """The CPU cores of a lane that exist here (None: no pinning)."""
    if wanted is None:
        return None
    have = os.sched_getaffinity(0)
    cores = set(wanted) & have
    return cores or None


# ----------------------------------------------------------------------------------------------
# one rung, in a child process

def run_rung(rung: Rung, run_dir: Path, dataset: Path, on_gpu: bool) -> dict:
    """Launch one rung and return its record (plain dict for results.json)."""
    from cookbook.launch import launch
    from cookbook.memory import compare, estimate
    from cookbook.models import model_spec
    from cookbook.plan import Plan

    from cookbook.models import CHAT_DATASET_PATH
    precision = "bf16" if on_gpu else "fp32"
    model = rung.model
    if rung.data == "chat":
        dataset = CHAT_DATASET_PATH
    if rung.weights:
        model = str(weights_dir(run_dir.parent.parent, rung.model))
    plan = Plan(model=model, num_gpus=rung.num_gpus, gpu_memory_gib=24.0, seq_len=rung.seq_len,
                micro_batch=rung.micro_batch, grad_accum=rung.grad_accum, precision=precision,
                zero_stage=rung.zero_stage, offload_optimizer=rung.offload_optimizer,
                offload_param=rung.offload_param, gradient_checkpointing=True)
    bf16_states = rung.bf16_states and precision == "bf16"
    changes: list[str] = []
    if rung.stock:
        from benchmarks.stock import resolve
        config, changes = resolve(rung.stock, plan, lr=rung.lr, max_steps=rung.max_steps)
    else:
        from cookbook.dsconfig import build_config
        config = build_config(plan, "accelerate", lr=rung.lr, warmup_steps=1, total_steps=rung.max_steps,
                              bf16_states=bf16_states)
    if rung.offload_optimizer == "none" and "optimizer" in config:
        # DeepSpeed's FusedAdam is JIT-built with nvcc on first use (a minute, and DeepSpeed 0.19.8
        # cannot parse torch 2.11's '9.0a' arch names without TORCH_CUDA_ARCH_LIST); torch's AdamW
        # holds the same 8 bytes of state per parameter, so the memory result is the same
        config["optimizer"]["params"]["torch_adam"] = True
        changes.append("optimizer.params.torch_adam: true (no FusedAdam JIT build; same state bytes)")
    env = dict(rung.env)
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    env.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0)) // rung.num_gpus))
    t0 = time.time()
    res = launch(plan, run_dir, config=config, max_steps=rung.max_steps, lr=rung.lr, warmup_steps=1,
                 dataset=str(dataset), seed=1234, bf16_states=bf16_states,
                 emulate_gpu_memory_gib=24.0 if on_gpu else None, verify_save="off", final_save=False,
                 force=True, hang_timeout_s=rung.timeout_s, env=env, progress=False,
                 packing=True if rung.data == "chat" else None,
                 random_weights=True,  # memory and speed of the shipped architectures: no weights needed
                 tokenizer="shipped")  # config-only model folders: the shipped tokenizer, on purpose
    summary = res.summary or {}
    spec = model_spec(rung.model)
    import psutil
    eplan = plan.replace(host_memory_gib=psutil.virtual_memory().total / GIB)
    est = estimate(eplan, bf16_states=bf16_states, device="cuda" if on_gpu else "cpu", ds_config=config)
    measured = {k: summary.get(k) for k in ("peak_gpu_allocated_gib", "peak_gpu_reserved_gib", "host_peak_gib")}
    table = json.loads(compare(est, measured).to_json(orient="records"))
    record = {
        "name": rung.name, "group": rung.group, "rung": dataclasses.asdict(rung), "plan": plan.to_dict(),
        "label": plan.label, "num_params": spec.num_params, "bf16_states": bf16_states,
        "status": res.status, "message": res.message, "expected": rung.expect,
        "duration_s": round(time.time() - t0, 1), "command": res.command,
        "tokens_per_s": summary.get("tokens_per_s"), "step_time_s": summary.get("step_time_s"),
        "tflops": summary.get("tflops"), "mfu": summary.get("mfu"),
        "peak_gpu_allocated_gib": measured["peak_gpu_allocated_gib"],
        "peak_gpu_reserved_gib": measured["peak_gpu_reserved_gib"], "host_peak_gib": measured["host_peak_gib"],
        "host_peak_gib_per_rank": summary.get("host_peak_gib_per_rank"),
        "losses": [m.get("loss") for m in res.metrics], "step_times_s": [m.get("step_time_s") for m in res.metrics],
        "metrics": res.metrics,
        "estimate": {"gpu_total_gib": est.gpu_gib["total"], "host_total_gib": est.host_gib["total"],
                     "fits_gpu": est.fits_gpu, "fits_host": est.fits_host, "gpu_gib": est.gpu_gib,
                     "host_gib": est.host_gib, "reasons": list(est.reasons)},
        "estimate_vs_measured": table,
        "details": {k: v for k, v in (res.details or {}).items() if k != "traceback"},
        "traceback_tail": ((res.details or {}).get("traceback") or "")[-3000:],
        "stock_changes": changes, "deepspeed_config": config, "env": env,
        "set": "held_out" if rung.group == "heldout" else None, "data": rung.data,
        "dataset": str(dataset), **{k: summary.get(k) for k in (
            "packing", "packing_efficiency", "row_tokens_mean", "row_tokens_max", "row_width_max",
            "tokens_per_micro_batch_mean", "tokens_per_micro_batch_max", "row_note", "attention", "rows",
            "estimate_shape")},
    }
    return record


def _rung_child(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rung", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--on-gpu", action="store_true")
    a = p.parse_args(argv)
    rung = Rung(**{k: (tuple(tuple(x) for x in v) if k == "env" else v) for k, v in json.loads(a.rung).items()})
    try:
        rec = run_rung(rung, Path(a.run_dir), Path(a.dataset), a.on_gpu)
    except KeyboardInterrupt:
        mpath = Path(a.run_dir) / "metrics.jsonl"
        metrics = [json.loads(l) for l in mpath.read_text().splitlines() if l.strip()] if mpath.is_file() else []
        rec = {"name": rung.name, "group": rung.group, "rung": dataclasses.asdict(rung), "status": "timeout",
               "message": f"stopped by the benchmark's wall-clock limit ({rung.timeout_s:.0f} s) after "
                          f"{len(metrics)} step(s)", "metrics": metrics}
    Path(a.result).write_text(json.dumps(rec, indent=1, default=str))
    return 0


# ----------------------------------------------------------------------------------------------
# the driver

class Driver:
    def __init__(self, out: Path, work: Path, deadline_s: float, on_gpu: bool):
        self.out, self.work, self.on_gpu = out, work, on_gpu
        self.t0 = time.time()
        self.deadline = self.t0 + deadline_s
        self.results: list[dict] = []
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.log_f = open(out / "driver.log", "a")
        self.dataset = make_long_dataset(work / "long.jsonl")

    def log(self, msg: str) -> None:
        line = f"[{time.time() - self.t0:7.1f}s] {msg}"
        with LOCK:
            print(line, flush=True)
            self.log_f.write(line + "\n")
            self.log_f.flush()

    def save(self) -> None:
        with LOCK:
            tmp = self.out / ".results.json.tmp"
            tmp.write_text(json.dumps({"suite_started": self.t0, "on_gpu": self.on_gpu,
                                       "results": self.results}, indent=1, default=str))
            os.replace(tmp, self.out / "results.json")
            self._pack()

    def _pack(self) -> None:
        tmp = self.out / ".runs.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for run in sorted((self.work / "runs").glob("*")):
                for name in ("summary.json", "metrics.jsonl", "ds_config.json", "command.sh", "run.json"):
                    if (run / name).is_file():
                        tar.add(run / name, arcname=f"{run.name}/{name}")
                for log in sorted((run / "logs").glob("*.log")):
                    data = log.read_bytes()[-200_000:]
                    info = tarfile.TarInfo(f"{run.name}/logs/{log.name}")
                    info.size = len(data)
                    import io
                    tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, self.out / "runs.tar.gz")

    def ceilings(self) -> None:
        self.log("ceilings: start")
        cmd = [sys.executable, "-m", "benchmarks.ceilings", "--out", str(self.out / "ceilings.json")]
        env = dict(os.environ)
        cores = _cores(LANES_GPU["A"][1]) if self.on_gpu else None
        if self.on_gpu:
            env.update(CUDA_VISIBLE_DEVICES="0", OMP_NUM_THREADS=str(len(cores or os.sched_getaffinity(0))))
        else:
            cmd += ["--adam-params", "20000000"]
        try:
            r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
                               preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
            self.log(f"ceilings: rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        except subprocess.TimeoutExpired:
            self.log("ceilings: timed out")

    def run_lane(self, lane: str, rungs: list[Rung]) -> None:
        gpus, cores = LANES_GPU[lane]
        for rung in rungs:
            left = self.deadline - time.time()
            if left < min(rung.timeout_s, 90):
                self.log(f"{rung.name}: not run, {left:.0f} s left before the suite's deadline")
                self.results.append({"name": rung.name, "group": rung.group, "rung": dataclasses.asdict(rung),
                                     "status": "not_run", "message": "the device call's time ran out first"})
                self.save()
                continue
            limit = min(rung.timeout_s + 60, left)
            run_dir = self.work / "runs" / rung.name
            shutil.rmtree(run_dir, ignore_errors=True)
            result_path = self.work / f"{rung.name}.result.json"
            result_path.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "benchmarks.gpu_bench", "_rung", "--rung",
                   json.dumps(dataclasses.asdict(rung)), "--run-dir", str(run_dir), "--dataset", str(self.dataset),
                   "--result", str(result_path)] + (["--on-gpu"] if self.on_gpu else [])
            env = dict(os.environ)
            pin = _cores(cores) if self.on_gpu else None
            if self.on_gpu:
                env["CUDA_VISIBLE_DEVICES"] = gpus
            self.log(f"{rung.name}: start on lane {lane} (limit {limit:.0f} s)")
            t = time.time()
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True,
                                    preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None,
                                    stdout=open(self.work / f"{rung.name}.child.log", "w"), stderr=subprocess.STDOUT)
            try:
                proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                self.log(f"{rung.name}: wall-clock limit reached, interrupting")
                os.kill(proc.pid, signal.SIGINT)  # KeyboardInterrupt -> launch() stops its process groups
                try:
                    proc.wait(timeout=45)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if result_path.is_file():
                rec = json.loads(result_path.read_text())
            else:
                tail = (self.work / f"{rung.name}.child.log").read_text()[-3000:]
                rec = {"name": rung.name, "group": rung.group, "rung": dataclasses.asdict(rung), "status": "driver_error",
                       "message": f"the rung's child wrote no result (exit {proc.returncode})", "child_log_tail": tail}
            rec["wall_s"] = round(time.time() - t, 1)
            rec["lane"] = lane
            with LOCK:
                self.results.append(rec)
            self.log(f"{rung.name}: {rec['status']} in {rec['wall_s']} s — {str(rec.get('message'))[:300]}")
            self.save()

    def prepare(self, models: list[str]) -> None:
        """Build DeepSpeedCPUAdam (JIT, ~50 s) and save random weights of ``models``, in parallel:
        model i on GPU i % 2."""
        self.log(f"prepare: cpu_adam build, weights for {[Path(m).name for m in models]}")
        from cookbook.launch import extensions_dir  # where the ranks look for it (cookbook.launch.child_env)
        jit = subprocess.Popen([sys.executable, "-c", "from deepspeed.ops.op_builder import CPUAdamBuilder; "
                                "CPUAdamBuilder().load()"], cwd=ROOT, stdout=open(self.work / "jit.log", "w"),
                               stderr=subprocess.STDOUT,
                               env=dict(os.environ, TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR")
                                        or str(extensions_dir())))
        procs = []
        import torch
        n_gpus = max(1, torch.cuda.device_count())
        for i, m in enumerate(models):
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i % n_gpus))
            code = (f"from benchmarks.gpu_bench import make_weights; from pathlib import Path; "
                    f"make_weights({m!r}, Path({str(weights_dir(self.work, m))!r}))")
            procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                                          stdout=open(self.work / f"weights-{i}.log", "w"), stderr=subprocess.STDOUT))
        for p in procs + [jit]:
            p.wait()
        self.log(f"prepare: done, exit codes {[p.returncode for p in procs + [jit]]}")

    def run(self, suite: list) -> None:
        for phase in suite:
            if phase == "ceilings":
                self.ceilings()
                continue
            if isinstance(phase, tuple) and phase[0] == "prepare":
                self.prepare(list(phase[1]))
                continue
            threads = [threading.Thread(target=self.run_lane, args=(lane, rungs)) for lane, rungs in phase.items()]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        self.log("suite done")
        self.save()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_rung":
        return _rung_child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True, help="call1, call2, smoke, calib, calib2 (GPU) or rehearsal (CPU)")
    p.add_argument("--tiny", action="store_true",
                   help="run the suite's rungs with tiny models of the same architectures (a CPU check of the suite)")
    p.add_argument("--out", required=True, help="folder for results.json, ceilings.json, logs")
    p.add_argument("--work", default="/tmp/cookbook_bench", help="scratch folder for run folders and data")
    p.add_argument("--deadline-s", type=float, default=570.0, help="no rung starts that cannot end before this")
    p.add_argument("--only", default=None, help="comma-separated rung names to run (others skipped)")
    a = p.parse_args(argv)
    import torch
    on_gpu = torch.cuda.is_available()
    suites = gpu_suites()
    suites["rehearsal"] = rehearsal_suite()
    if a.suite not in suites:
        p.error(f"--suite {a.suite!r}: use one of {', '.join(suites)}")
    suite = suites[a.suite]
    if a.only:
        keep = set(a.only.split(","))
        known = {r.name for ph in suite if isinstance(ph, dict) for v in ph.values() for r in v}
        if keep - known:
            p.error(f"--only: {sorted(keep - known)} not in suite {a.suite!r} (rungs: {', '.join(sorted(known))})")
        suite = [ph if not isinstance(ph, dict) else {k: [r for r in v if r.name in keep] for k, v in ph.items()}
                 for ph in suite]
    if a.tiny:
        suite = [{k: [tiny(r) for r in v] for k, v in ph.items()} if isinstance(ph, dict) else
                 ("prepare", tuple(sorted({"tiny-qwen2" if "qwen" in Path(m).name else "tiny-llama" for m in ph[1]})))
                 if isinstance(ph, tuple) else ph for ph in suite]
    driver = Driver(Path(a.out), Path(a.work), a.deadline_s, on_gpu)
    driver.log(f"suite {a.suite}, on_gpu={on_gpu}, deadline {a.deadline_s:.0f} s")
    driver.run(suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
