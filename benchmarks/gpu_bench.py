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

Suite ``nvme`` (issue 18 item 3, :func:`nvme_suite`; ``bash benchmarks/device/call_nvme.sh 520`` on the one-GPU
machine): tune the aio settings on the swap folder, then ZeRO-3 with optimizer and parameters on NVMe for a 134M
and the 1.1B LLaMA shape with DeepSpeed's default and the tuned aio block (the 3.4B last, if time remains). Each
NVMe record has an ``nvme`` block (:func:`nvme_record`); ``python -m benchmarks.nvme_reference --from-results
results.json --write data/reference/h200_nvme_runs_DATE.json`` turns them into the reference record.

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
    nvme_path: str = ""               # NVMe offload: the swap folder (the suite's nvme_prepare folder, tuned there)
    aio: str = ""                     # NVMe offload: "default" (DeepSpeed's aio block) or "tuned" (this call's nvme-tune)
    min_left_s: float = 0.0           # not started with less than this many seconds before the suite's deadline


LLAMA3B = str(MODELS / "llama-3b")
LLAMA1B = str(MODELS / "llama-1b")
LLAMA134M = str(MODELS / "llama-134m")
NVME_DIR = "/tmp/cookbook_nvme"   # on the one-GPU H200: /dev/vda (ext4), 64 GiB free
NVME_TUNE_FILE = "nvme_tune.json"  # in the driver's --work folder: this call's `cookbook nvme-tune` result
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
        "nvme": nvme_suite(),
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


def nvme_suite() -> list:
    """``nvme`` (issue 18 item 3, one H200 capped at 24 GiB, one device call of ~520 s): ZeRO-3 with optimizer AND
    parameters on NVMe, fp32 optimizer states (DeepSpeed 0.19.8 refuses bf16 states with NVMe), the shipped chats
    packed into full rows of 1024 tokens, micro batch 4, no accumulation; in this order:

    1. ``nvme_prepare``: DeepSpeedCPUAdam and the async I/O op JIT-built, then ``cookbook.nvme.tune`` on the swap
       folder (bounded time; ``read_share`` from the 1.1B plan's estimate); its best aio block and the default's
       bandwidth are recorded in the folder (the runs' step-time floors use them) and in results.json;
    2. ``nvme-134m-default``: a 134M LLaMA shape (``benchmarks/models/llama-134m``), the small point of the
       host-RAM fit (fixed + per parameter, extrapolated to LLaMA-7B: ``benchmarks/nvme_reference.py``);
    3. ``nvme-1b-default`` and 4. ``nvme-1b-tuned``: the 1.1B LLaMA shape (18.4 GiB on the disk, SSD-only floor
       ~30 s/step on this disk), DeepSpeed's default aio block, then this call's tuned one; 3 steps each
       (s/step = median of the steps after the first);
    5. ``nvme-3b-tuned``: the 3.4B shape (57 GiB of the 64 GiB free), 3 steps (~70 s each by the 1.1B run's
       bytes per second), only when >= 250 s remain: a call of its own (``--only nvme-3b-tuned`` on a clean disk);
       a deadline that cuts it leaves a partial record that says so.

    The swap folder is measured (bytes of DeepSpeed's files) and emptied after every rung."""
    N = dict(group="nvme", zero_stage=3, offload_optimizer="nvme", offload_param="nvme", bf16_states=False,
             data="chat", seq_len=1024, micro_batch=4, grad_accum=1, nvme_path=NVME_DIR)
    return [("nvme_prepare", {"folder": NVME_DIR, "time_limit_s": 45.0, "io_size_mib": 256, "loops": 2,
                              "read_share_model": LLAMA1B, "buffer_counts": (2, 5, 8), "buffer_sizes": (10 ** 8,)}),
            {"A": [Rung("nvme-134m-default", model=LLAMA134M, aio="default", max_steps=4, timeout_s=150, **N),
                   Rung("nvme-1b-default", model=LLAMA1B, aio="default", max_steps=3, timeout_s=260, **N),
                   Rung("nvme-1b-tuned", model=LLAMA1B, aio="tuned", max_steps=3, timeout_s=260, **N),
                   Rung("nvme-3b-tuned", model=LLAMA3B, aio="tuned", max_steps=3, timeout_s=420, min_left_s=250,
                        **N)]}]


def tiny_phase(phase):
    """The ``--tiny`` form of a suite phase (rungs through :func:`tiny`; the NVMe tune small and short)."""
    if isinstance(phase, dict):
        return {k: [tiny(r) for r in v] for k, v in phase.items()}
    if isinstance(phase, tuple) and phase[0] == "prepare":
        return ("prepare", tuple(sorted({"tiny-qwen2" if "qwen" in Path(m).name else "tiny-llama" for m in phase[1]})))
    if isinstance(phase, tuple) and phase[0] == "nvme_prepare":
        return ("nvme_prepare", dict(phase[1], folder="/tmp/cookbook_nvme_tiny", time_limit_s=20.0, io_size_mib=16,
                                     read_share_model="tiny-llama", buffer_counts=(2, 5), buffer_sizes=(2 ** 20,)))
    return phase


def tiny(rung: Rung) -> Rung:
    """The CPU check of a GPU rung: the tiny model of the same architecture, sequences 16× shorter
    (at least 64 tokens), 2 steps."""
    model = "tiny-qwen2" if "qwen" in Path(rung.model).name else "tiny-llama"
    nvme = {"nvme_path": "/tmp/cookbook_nvme_tiny"} if rung.nvme_path else {}
    return dataclasses.replace(rung, model=model, seq_len=max(64, rung.seq_len // 16), max_steps=2, lr=3e-3,
                               timeout_s=400, **nvme)


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
                offload_param=rung.offload_param, gradient_checkpointing=True,
                nvme_path=rung.nvme_path or None)
    bf16_states = rung.bf16_states and precision == "bf16"
    nvme = "nvme" in (rung.offload_optimizer, rung.offload_param)
    aio_arg = None
    if nvme:
        if rung.aio not in ("default", "tuned") or not rung.nvme_path:
            raise ValueError(f"rung {rung.name}: NVMe offload needs nvme_path and aio 'default' or 'tuned' "
                             f"(got nvme_path={rung.nvme_path!r}, aio={rung.aio!r})")
        Path(rung.nvme_path).mkdir(parents=True, exist_ok=True)
        if rung.aio == "tuned":
            tuned = run_dir.parent.parent / NVME_TUNE_FILE
            if not tuned.is_file():
                return {"name": rung.name, "group": rung.group, "rung": dataclasses.asdict(rung), "status": "not_run",
                        "message": f"no tuned aio block: this call's nvme-tune did not produce {tuned} (see the "
                                   "nvme-tune record)", "expected": rung.expect}
            aio_arg = str(tuned)
    changes: list[str] = []
    if rung.stock:
        from benchmarks.stock import resolve
        config, changes = resolve(rung.stock, plan, lr=rung.lr, max_steps=rung.max_steps)
    else:
        from cookbook.dsconfig import build_config
        config = build_config(plan, "accelerate", lr=rung.lr, warmup_steps=1, total_steps=rung.max_steps,
                              bf16_states=bf16_states, aio=aio_arg)
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
    if nvme:
        record["nvme"] = nvme_record(rung, plan, config, summary, record, on_gpu, aio_arg)
    return record


def swap_folder_bytes(folder) -> dict:
    """Bytes DeepSpeed left in an NVMe swap folder: ``files`` (sum of sizes), ``allocated`` (blocks on the
    disk, ``st_blocks`` × 512) and ``swp`` (the ``*.swp`` swap files under ``zero_stage_3``, what
    ``cookbook.nvme.check_run`` counts); the bandwidth record and this call's tune file are not counted."""
    from cookbook.nvme import BANDWIDTH_RECORD
    files = alloc = swp = 0
    root = Path(folder)
    for f in (root.rglob("*") if root.is_dir() else []):
        if f.is_file() and f.name != BANDWIDTH_RECORD:
            st = f.stat()
            files += st.st_size
            alloc += st.st_blocks * 512
            if f.suffix == ".swp" and "zero_stage_3" in f.parts:
                swp += st.st_size
    return {"files": files, "allocated": alloc, "swp": swp}


def empty_swap_folder(folder) -> None:
    """Delete everything in the swap folder but the bandwidth record (the disk has 64 GiB free)."""
    from cookbook.nvme import BANDWIDTH_RECORD
    root = Path(folder)
    for f in (root.iterdir() if root.is_dir() else []):
        if f.name == BANDWIDTH_RECORD:
            continue
        if f.is_dir() and not f.is_symlink():
            shutil.rmtree(f, ignore_errors=True)
        else:
            f.unlink(missing_ok=True)


def _pct(est, meas):
    return round(100.0 * (est - meas) / meas, 1) if est is not None and meas else None


def nvme_record(rung: Rung, plan, config: dict, summary: dict, record: dict, on_gpu: bool, aio_arg) -> dict:
    """The NVMe facts of a finished (or stopped) rung, measured before the swap folder is emptied: disk bytes vs
    ``estimate_nvme(...).disk_bytes``, host peak vs the memory estimate (±15 % target), SSD bytes read/written per
    step (the summary's ``/proc/self/io`` counters) vs the estimate, s/step and tokens/s (median of the steps
    after the first, as the summary has them), achieved/floor on the bandwidth this call measured in the folder."""
    from cookbook.nvme import check_run, estimate_nvme, recorded_bandwidth
    device = "cuda" if on_gpu else "cpu"
    disk = swap_folder_bytes(rung.nvme_path)
    out: dict = {"aio_setting": rung.aio, "aio": config.get("aio"), "aio_source": aio_arg,
                 "nvme_path": rung.nvme_path,
                 "offload_param": (config.get("zero_optimization") or {}).get("offload_param"),
                 "offload_optimizer": (config.get("zero_optimization") or {}).get("offload_optimizer"),
                 "disk_bytes_measured": disk["swp"], "disk_bytes_files": disk["files"],
                 "disk_bytes_allocated": disk["allocated"]}
    try:
        est = estimate_nvme(plan, ds_config=config, device=device)
        bw = recorded_bandwidth(rung.nvme_path, config.get("aio"))
        out.update(disk_bytes_estimate=est.disk_bytes, disk_error_pct=_pct(est.disk_bytes, disk["swp"]),
                   nvme_host_buffers_estimate_gib=est.host_bytes / GIB, estimate=est.to_dict(bw), bandwidth=bw,
                   read_bytes_per_step_estimate=est.read_bytes_per_step,
                   write_bytes_per_step_estimate=est.write_bytes_per_step)
        table = check_run(plan, config, summary, device=device)
        out["check_run"] = json.loads(table.to_json(orient="records"))
    except Exception as exc:  # noqa: BLE001 - the record must still be written
        out["estimate_error"] = f"{type(exc).__name__}: {exc}"
    io = summary.get("nvme_io") or {}
    m = io.get("measured_disk_io") or {}
    out.update(read_gb_per_step_measured=m.get("read_gb_per_step"), write_gb_per_step_measured=m.get("write_gb_per_step"),
               io_steps=m.get("steps"), read_error_pct=m.get("estimate_read_error_pct"),
               write_error_pct=m.get("estimate_write_error_pct"))
    host_est = (record.get("estimate") or {}).get("host_total_gib")
    host = record.get("host_peak_gib")
    out.update(host_peak_gib=host, host_estimate_gib=host_est, host_error_pct=_pct(host_est, host),
               host_within_15pct=(abs(_pct(host_est, host)) <= 15.0) if host_est is not None and host else None)
    step = summary.get("step_time_s")
    out.update(s_per_step=step, tokens_per_s=summary.get("tokens_per_s"),
               timed_steps=max(0, len(record.get("step_times_s") or []) - 1),
               step_basis="median of the optimizer steps after the first (cookbook.train summary)")
    fl = (out.get("estimate") or {}).get("floor_measured_disk")
    if fl and step:
        out.update(floor_serial_s=fl["floor_serial_s"], floor_overlap_s=fl["floor_overlap_s"],
                   achieved_over_floor=fl["floor_serial_s"] / step,
                   achieved_over_floor_overlap=fl["floor_overlap_s"] / step)
    elif fl:
        out.update(floor_serial_s=fl["floor_serial_s"], floor_overlap_s=fl["floor_overlap_s"])
    empty_swap_folder(rung.nvme_path)
    out["swap_folder_emptied"] = True
    return out


def _nvme_tune_child(argv) -> int:
    """Child of :meth:`Driver.nvme_prepare`: build/load the async I/O op, estimate the read share of the plan's SSD
    traffic, run ``cookbook.nvme.tune``, write the tune file and a result record."""
    job = json.loads(argv[0])
    t0 = time.time()
    rec: dict = {"status": "failed"}
    try:
        from cookbook.nvme import estimate_nvme, prepare_async_io, tune
        ok, why = prepare_async_io(timeout_s=600)
        rec.update(async_io=why, async_io_build_s=round(time.time() - t0, 1))
        if not ok:
            rec["message"] = f"DeepSpeed's async I/O op is not usable: {why}"
            return 0
        from cookbook.dsconfig import build_config
        from cookbook.plan import Plan
        on_gpu = bool(job["on_gpu"])
        plan = Plan(model=job["read_share_model"], num_gpus=1, gpu_memory_gib=24.0, seq_len=1024 if on_gpu else 64,
                    micro_batch=4, grad_accum=1, precision="bf16" if on_gpu else "fp32", zero_stage=3,
                    offload_optimizer="nvme", offload_param="nvme", gradient_checkpointing=True,
                    nvme_path=job["folder"])
        est = estimate_nvme(plan, ds_config=build_config(plan, "accelerate", lr=2e-5, warmup_steps=1, total_steps=3),
                            device="cuda" if on_gpu else "cpu")
        total = est.read_bytes_per_step + est.write_bytes_per_step
        read_share = round(est.read_bytes_per_step / total, 3) if total else 0.5
        rec.update(read_share=read_share, read_share_plan=plan.label,
                   read_gb_per_step_estimate=est.read_bytes_per_step / 1e9,
                   write_gb_per_step_estimate=est.write_bytes_per_step / 1e9)
        t1 = time.time()
        result = tune(job["folder"], io_size_mib=int(job["io_size_mib"]), time_limit_s=float(job["time_limit_s"]),
                      loops=int(job["loops"]), buffer_counts=tuple(job["buffer_counts"]),
                      buffer_sizes=tuple(job["buffer_sizes"]), elem_size=2 if on_gpu else 4, read_share=read_share,
                      load_timeout_s=600)
        rec.update(status="ok", tune=result, tune_s=round(time.time() - t1, 1),
                   message=f"best aio {json.dumps(result['aio'])}, offload_param {result['offload_param']}")
        Path(job["tune_file"]).write_text(json.dumps(result, indent=1))
    except Exception as exc:  # noqa: BLE001 - reported in results.json
        import traceback
        rec.update(status="failed", message=f"{type(exc).__name__}: {exc}", traceback_tail=traceback.format_exc()[-3000:])
    finally:
        rec["seconds"] = round(time.time() - t0, 1)
        Path(job["result"]).write_text(json.dumps(rec, indent=1, default=str))
    return 0


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
            if left < max(min(rung.timeout_s, 90), rung.min_left_s):
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
            if rung.nvme_path:
                left_on_disk = swap_folder_bytes(rung.nvme_path)
                if not isinstance(rec.get("nvme"), dict):  # stopped before run_rung measured it: measure here
                    rec["nvme"] = {"aio_setting": rung.aio, "nvme_path": rung.nvme_path,
                                   "disk_bytes_measured": left_on_disk["swp"], "disk_bytes_files": left_on_disk["files"],
                                   "disk_bytes_allocated": left_on_disk["allocated"],
                                   "note": "measured by the driver after the rung stopped (swap files of an unfinished "
                                           "run)"}
                empty_swap_folder(rung.nvme_path)
                rec["nvme"]["swap_folder_emptied"] = True
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

    def nvme_prepare(self, spec: dict) -> None:
        """Issue 18: build DeepSpeedCPUAdam (JIT, in the background) and DeepSpeed's async I/O op, then tune the aio
        settings on the swap folder with ``cookbook.nvme.tune`` (bounded by ``spec["time_limit_s"]``), in a child
        process; the result goes into ``--work``/:data:`NVME_TUNE_FILE` (the ``aio: "tuned"`` rungs' block) and
        results.json (record ``nvme-tune``)."""
        folder = Path(spec["folder"])
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        tune_file = self.work / NVME_TUNE_FILE
        tune_file.unlink(missing_ok=True)
        result_path = self.work / "nvme_tune.result.json"
        result_path.unlink(missing_ok=True)
        self.log(f"nvme_prepare: cpu_adam build (background), async_io build, nvme-tune on {folder} "
                 f"({shutil.disk_usage(folder).free / GIB:.1f} GiB free)")
        from cookbook.launch import extensions_dir
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR") or str(extensions_dir()))
        t = time.time()
        jit = subprocess.Popen([sys.executable, "-c", "from deepspeed.ops.op_builder import CPUAdamBuilder; "
                                "CPUAdamBuilder().load(); print('cpu_adam loaded')"], cwd=ROOT, env=env,
                               stdout=open(self.work / "jit_cpu_adam.log", "w"), stderr=subprocess.STDOUT)
        job = dict(spec, on_gpu=self.on_gpu, tune_file=str(tune_file), result=str(result_path))
        limit = max(60.0, min(spec["time_limit_s"] * 2 + 420, self.deadline - time.time() - 60))
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.gpu_bench", "_nvme_tune", json.dumps(job)], cwd=ROOT,
                                env=env, start_new_session=True, stdout=open(self.work / "nvme_tune.log", "w"),
                                stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:
            jit.wait(timeout=max(30.0, min(300.0, self.deadline - time.time() - 60)))
        except subprocess.TimeoutExpired:
            jit.kill()
            jit.wait()
        log_tail = (self.work / "nvme_tune.log").read_text()[-3000:]
        if result_path.is_file():
            rec = json.loads(result_path.read_text())
        else:
            rec = {"status": "failed", "message": f"the tune child wrote no result (exit {proc.returncode}, limit "
                                                  f"{limit:.0f} s)", "log_tail": log_tail}
        rec.update(name="nvme-tune", group="nvme_tune", wall_s=round(time.time() - t, 1), spec=spec,
                   cpu_adam_exit=jit.returncode, cpu_adam_log_tail=(self.work / "jit_cpu_adam.log").read_text()[-1500:],
                   tune_log_tail=log_tail[-1500:], concurrent="DeepSpeedCPUAdam was compiling while the tune ran")
        with LOCK:
            self.results.append(rec)
        m = (rec.get("tune") or {}).get("measured") or {}
        self.log(f"nvme_prepare: {rec['status']} in {rec['wall_s']} s — {str(rec.get('message'))[:200]}; best "
                 f"{(rec.get('tune') or {}).get('aio')}: {m.get('best')}, default {m.get('deepspeed_default')}")
        self.save()

    def run(self, suite: list) -> None:
        for phase in suite:
            if phase == "ceilings":
                self.ceilings()
                continue
            if isinstance(phase, tuple) and phase[0] == "prepare":
                self.prepare(list(phase[1]))
                continue
            if isinstance(phase, tuple) and phase[0] == "nvme_prepare":
                self.nvme_prepare(dict(phase[1]))
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
    if argv and argv[0] == "_nvme_tune":
        return _nvme_tune_child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True,
                   help="call1, call2, smoke, calib, calib2, calib-fast, nvme (GPU) or rehearsal (CPU)")
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
        suite = [tiny_phase(ph) for ph in suite]
    driver = Driver(Path(a.out), Path(a.work), a.deadline_s, on_gpu)
    driver.log(f"suite {a.suite}, on_gpu={on_gpu}, deadline {a.deadline_s:.0f} s")
    driver.run(suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
