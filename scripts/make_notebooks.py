"""Write the cookbook's notebooks (notebooks/00_*.ipynb … 06_*.ipynb) from this file, without outputs.

    python scripts/make_notebooks.py            # (re)write all
    python scripts/make_notebooks.py --check    # exit 1 when a committed notebook differs from this source

The notebooks follow /shared/STYLE.md: a title cell (goal, hardware targeted, what the CPU rehearsal
runs instead, the previous notebook), imports of the standard library and ``cookbook`` only, ONE cell
tagged ``parameters`` (typed literals, a comment each), derived settings printed in the next cell,
numbered sections whose markdown says why and what we expect before the code, results recorded in
``OUTPUT_DIR/results.json`` (:class:`cookbook.report.Recorder`). Cell ids are fixed so regenerating
gives the same files.
"""
from __future__ import annotations

import argparse
import ast
import sys
import textwrap
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

IMPORTS = """\
import json
from pathlib import Path

from cookbook import dsconfig, env, lint, memory, report
from cookbook.launch import launch
from cookbook.models import model_spec
from cookbook.plan import Plan"""


def md(text: str) -> dict:
    return {"kind": "markdown", "source": textwrap.dedent(text).strip("\n")}


def code(text: str, tags: tuple = ()) -> dict:
    return {"kind": "code", "source": textwrap.dedent(text).strip("\n"), "tags": list(tags)}


def params(text: str, extra: str = "") -> dict:
    """The ``parameters`` cell: ``text`` (dedented) followed by ``extra`` (already flush left)."""
    source = textwrap.dedent(text).strip("\n") + ("\n" + extra.strip("\n") if extra else "")
    return {"kind": "code", "source": source, "tags": ["parameters"]}


def build(stem: str, cells: list[dict]):
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, c in enumerate(cells):
        cid = f"{stem.split('_')[0]}-{i:02d}"
        if c["kind"] == "markdown":
            cell = nbformat.v4.new_markdown_cell(c["source"], id=cid)
        else:
            try:
                ast.parse(c["source"])
            except SyntaxError as exc:
                raise SystemExit(f"{stem}, cell {i}: {exc}\n{c['source']}") from None
            cell = nbformat.v4.new_code_cell(c["source"], id=cid)
            if c["tags"]:
                cell.metadata["tags"] = c["tags"]
        nb.cells.append(cell)
    return nb


# ------------------------------------------------------------------------------------------------
# shared pieces

RUN_PARAMS = """\
MODEL: str = "{model}"  # model actually trained: the tiny {arch} (random weights) in the rehearsal; "{real}" on the GPU box
NUM_GPUS: int = {ranks}  # ranks actually run: {ranks} CPU process(es) in the rehearsal; {real_gpus} on the GPU box
SEQ_LEN: int = 128  # tokens per sequence of the run (the rehearsal's short sequences; {t_seq} for the real run)
MICRO_BATCH: int = 4  # sequences per rank per forward/backward ({t_micro} for the real run)
GRAD_ACCUM: int = 1  # gradient accumulation steps ({t_accum} for the real run; more: bigger batch, same memory)
PRECISION: str = "bf16"  # bf16: native on RTX 40xx, H100/H200 and CPUs; no loss scaling needed
MAX_STEPS: int = {steps}  # optimizer steps of the run (~1 s each in the rehearsal)
LR: float = 3e-3  # peak learning rate; 3e-3 suits the tiny models, use ~1e-5 for a real 7-14B fine-tune
EMULATE_GPU_MEMORY_GIB: float = 0.0  # GPU box only: cap each GPU at this many GiB (24 on an H200 acts as a 4090); 0: the card's own memory
HOST_MEMORY_GIB: float = 0.0  # host RAM of this machine in GiB; 0: measure it"""


def title(number: str, name: str, goal: str, target: str, rehearsal: str, previous: str, nxt: str) -> dict:
    return md(f"""
    # {number} · {name}

    {goal}

    **Hardware targeted:** {target}
    **CPU rehearsal (the defaults):** {rehearsal}
    **Previous:** {previous} · **Next:** {nxt}

    Run it top to bottom in a fresh kernel. Everything it writes goes under `OUTPUT_DIR`;
    `cookbook run-all` executes it with papermill and sets `OUTPUT_DIR` for you.
    """)


def reference_cells(number: str, runs: str) -> list[dict]:
    return [
        md("""
        ### Beside the measurements on GPUs

        This run next to the results the maintainers measured on real GPUs for this notebook (`data/reference/`),
        each row labelled with the hardware it came from. Only this run's rows appear when none were recorded.
        In the CPU rehearsal this run's memory is the host RSS of all ranks: the Python/torch/DeepSpeed runtime
        (~0.55 GiB per rank, measured) dominates it and the tiny model's states are megabytes, so the ZeRO variants
        differ only at real sizes — the GPU rows show those.
        """),
        code(f"""
        rec.add(reference=report.reference_results("{number}"), reference_notes=report.reference_notes())
        print(*report.reference_notes(), sep="\\n")
        if report.rehearsal():
            print(report.rehearsal_memory_note())
        rec.table("this run beside the GPU measurements", report.beside_reference({runs}, "{number}"))
        """),
    ]


# ------------------------------------------------------------------------------------------------
# 00 · environment

NB00 = [
    title("00", "The environment: what this machine has, what is missing, how to fix it",
          "Before any ZeRO run, check the machine: GPUs and driver, the CUDA build of torch, DeepSpeed's ops, host RAM "
          "for offload, `/dev/shm`, NVMe, and the RTX 40-series NCCL trap that both Qwen-14B articles hit. Each "
          "check says what it saw, why it matters and the fix; the notebook ends with the environment block to paste.",
          "the machine you will train on: 8 × RTX 4090 (24 GiB) for notebooks 01–05, 1 × RTX 4090 for 06.",
          "the same checks on this machine (no GPU: it reports the CPU rehearsal's needs), plus the same rules "
          "evaluated on facts recorded on RTX 4090 and H200 machines (`tests/fixtures/facts/`).",
          "none, this is the first.", "[01 · reproducing the OOM](01_oom_reproduction.ipynb)"),
    code(IMPORTS),
    params("""
    OUTPUT_DIR: str = "runs/00_environment"  # everything this notebook writes goes here
    MODEL: str = "tiny-qwen2"  # model of the planned run on THIS machine ("qwen-14b" on the 8-GPU box)
    NUM_GPUS: int = 2  # world size planned on this machine (2 CPU ranks in the rehearsal; 8 on the GPU box)
    ZERO_STAGE: int = 3  # planned ZeRO stage
    OFFLOAD_OPTIMIZER: str = "cpu"  # planned optimizer-state offload: none / cpu / nvme
    OFFLOAD_PARAM: str = "cpu"  # planned parameter offload: none / cpu / nvme (ZeRO-3 only)
    HOST_MEMORY_GIB: float = 0.0  # host RAM in GiB; 0: measure this machine
    RUN_ALLREDUCE: bool = True  # with 2+ GPUs, time an NCCL all-reduce with P2P on and off (up to 2 min)
    TARGET_MODEL: str = "qwen-14b"  # the articles' model, for the checks on recorded machines
    TARGET_GPUS: int = 8  # the articles' world size (8 × RTX 4090)
    """),
    code("""
    REHEARSAL = report.rehearsal()  # no NVIDIA GPU here -> CPU rehearsal
    plan = Plan(model=MODEL, num_gpus=NUM_GPUS, zero_stage=ZERO_STAGE, offload_optimizer=OFFLOAD_OPTIMIZER,
                offload_param=OFFLOAD_PARAM, host_memory_gib=HOST_MEMORY_GIB or None)
    target = Plan(model=TARGET_MODEL, num_gpus=TARGET_GPUS, zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    RECORDED = {  # facts files recorded on real machines (cookbook env --dump-facts), in report.FACTS_DIR
        "8 × RTX 4090, driver 560, 256 GiB RAM": "host256_8xrtx4090.json",
        "4 × RTX 4090, driver 535": "rtx4090x4_driver535.json",
        "4 × RTX 4090, driver 560": "rtx4090x4_driver560.json",
        "2 × H200 (measured all-reduce)": "h200x2_recorded.json",
    }
    rec = report.Recorder(OUTPUT_DIR, "00_environment", title="00 · The environment",
                          target="8 × RTX 4090 (24 GiB) / 1 × RTX 4090", rehearsal=REHEARSAL,
                          parameters={"MODEL": MODEL, "NUM_GPUS": NUM_GPUS, "plan": plan.label})
    print(f"rehearsal: {REHEARSAL}; plan on this machine: {plan.model}, {plan.num_gpus} rank(s), {plan.label}")
    print(f"target plan for the recorded machines: {target.model}, {target.num_gpus} GPUs, {target.label}")
    """),
    md("""
    ## 1. This machine

    `cookbook.env.check` gathers the facts (NVML for the GPUs — the kernel never initialises CUDA —, library
    versions, RAM, `/dev/shm`, DeepSpeed's op builders in a child process) and runs every rule on them for the
    plan. On a laptop without a GPU we expect a warning that only the CPU rehearsal can run here, and
    `DS_ACCELERATOR=cpu` in the recommended environment; on the 8-GPU box, any failure is a run that would
    have died later.
    """),
    code("""
    live = env.check(plan, run_allreduce=RUN_ALLREDUCE)
    rec.add(live={"ok": live.ok, "verdict": live.verdict, "failed": [c.name for c in live.failed],
                  "warnings": [c.name for c in live.warnings], "recommended_env": live.recommended_env,
                  "gpus": live.facts.get("gpus"), "ds_ops": live.facts.get("ds_ops")})
    rec.headline(f"This machine ({'no GPU: CPU rehearsal' if REHEARSAL else 'GPU box'}): {live.verdict}")
    live
    """),
    md("""
    ## 2. What is missing, and how to fix it

    The checks that did not pass, each with its fix. Warnings do not stop a run; failures would.
    """),
    code("""
    frame = live.to_frame()
    missing = frame[frame["status"] != "ok"][["name", "status", "value", "fix"]]
    rec.add(missing=missing)
    rec.table("missing on this machine", missing)
    """),
    md("""
    ## 3. The RTX 40-series NCCL situation

    Both Qwen-14B articles say that RTX 40-series cards *must* run with `NCCL_P2P_DISABLE=1` and
    `NCCL_IB_DISABLE=1`; article 002 quotes the error as "Using RTX 3090 or 4000 series doesn't support faster
    communication via P2P or IB" (Accelerate's message, `accelerate/state.py`, reads "Using RTX 4000 series
    doesn't support faster communication broadband via P2P or IB"). What Accelerate actually does
    (`accelerate/utils/environment.py::check_cuda_p2p_ib_support`): with **more than one** GPU whose name
    contains "RTX 40" **and a driver older than 550.40.07**, `accelerate launch` sets the two variables itself
    with a warning, and any other launcher (`torchrun`, `deepspeed`, a notebook) raises that error unless they
    are set. On drivers ≥ 550.40.07 nothing is needed. We expect the recorded driver-535 box to fail the
    `rtx40_p2p` rule with the two exports as the fix, and the driver-560 boxes to pass it.
    """),
    code("""
    recorded_table, recorded = report.check_recorded(target, RECORDED)
    rec.add(recorded=recorded)
    rec.table("the same rules on recorded machines (target: Qwen-14B, ZeRO-3 + full CPU offload)", recorded_table)
    """),
    md("""
    ### What disabling P2P costs

    Article 002 puts the bandwidth with P2P and IB disabled at "~50 GB/s". With P2P off, NCCL stages the data in
    host memory, so each GPU's traffic goes over its own PCIe link to host RAM and back; a PCIe 4.0 ×16 link (the
    RTX 4090's) carries at most 31.5 GB/s each way. The all-reduce measured on the recorded 2 × H200 box (`cookbook env` times one with P2P
    on and off) shows the size of the drop; on an RTX 40xx box with an old driver P2P is not an option at all.
    """),
    code("""
    h200 = env.load_facts(report.FACTS_DIR / RECORDED["2 × H200 (measured all-reduce)"]).get("allreduce") or {}
    bw = {k: round(v.get("busbw_gbps", 0.0), 1) for k, v in h200.items() if isinstance(v, dict)}
    rec.add(allreduce_h200_busbw_gbps=bw, allreduce_this_machine=live.facts.get("allreduce"))
    rec.headline(f"All-reduce bus bandwidth measured on 2 × H200: P2P on {bw.get('p2p_on')} GB/s, "
                 f"P2P off {bw.get('p2p_off')} GB/s (the article's '~50 GB/s' with P2P off exceeds a PCIe 4.0 ×16 "
                 f"link's {report.PCIE4_X16_GBPS} GB/s)")
    bw
    """),
    md("""
    ## 4. The environment block to paste

    The variables this machine needs for the plan, as shell lines (empty when nothing is needed). The launch
    helper sets them for its own child processes; paste them into your shell for anything you launch yourself.
    Below it, the block for the recorded driver-535 RTX 4090 box, the situation of the articles.
    """),
    code("""
    block = live.env_block()
    rec.add(env_block=block, env_block_rtx4090_driver535=recorded["4 × RTX 4090, driver 535"]["env_block"])
    print("# this machine\\n" + (block or "# (nothing to set)"))
    print("\\n# 4 × RTX 4090 with driver 535 (recorded)\\n" + recorded["4 × RTX 4090, driver 535"]["env_block"])
    """),
]


# ------------------------------------------------------------------------------------------------
# 01 · OOM reproduction

NB01 = [
    title("01", "Reproducing the OOM: Qwen-14B on 8 × 24 GB with ZeRO-2",
          "Article 000 fine-tunes Qwen-14B on 8 × RTX 4090 with ZeRO-2 and runs out of memory however small the "
          "batch. Here the estimator shows why it cannot fit whatever the batch size, the articles' memory "
          "arithmetic sits beside the correct numbers, and a real out-of-memory is reproduced and shown as a result "
          "— then the same budget is met by ZeRO-3 with CPU offload.",
          "8 × RTX 4090 (24 GiB each) — or a larger GPU capped at 24 GiB (`EMULATE_GPU_MEMORY_GIB=24`).",
          "the tiny Qwen2 (same architecture, 355 k parameters) on 2 CPU ranks, with a per-rank *device budget* "
          "scaled down by the same ratio: 24 GiB × (tiny parameters ÷ Qwen-14B parameters). Each rank counts the "
          "model-state bytes it keeps on its device after initialisation and raises `torch.OutOfMemoryError` when "
          "they exceed the budget.",
          "[00 · the environment](00_environment.ipynb)", "[02 · ZeRO-2](02_zero2.ipynb)"),
    code(IMPORTS),
    params("""
    OUTPUT_DIR: str = "runs/01_oom_reproduction"  # everything this notebook writes goes here
    TARGET_MODEL: str = "qwen-14b"  # the articles' model: 14,167,290,880 parameters
    TARGET_GPUS: int = 8  # the articles' world size: 8 × RTX 4090
    GPU_MEMORY_GIB: float = 24.0  # memory of one RTX 4090 in GiB
    TARGET_SEQ_LEN: int = 512  # the articles' final sequence length
    TARGET_MICRO_BATCH: int = 1  # the articles' micro batch per GPU
    TARGET_GRAD_ACCUM: int = 16  # the articles' gradient accumulation steps
    MODEL: str = "tiny-qwen2"  # model actually run: tiny Qwen2 in the rehearsal; "qwen-14b" on the GPU box
    NUM_GPUS: int = 2  # ranks actually run: 2 CPU processes in the rehearsal; 8 on the GPU box
    SEQ_LEN: int = 128  # tokens per sequence of the run (512 for the real run)
    MICRO_BATCH: int = 4  # sequences per rank per step of the run (1 for the real run)
    GRAD_ACCUM: int = 1  # gradient accumulation of the run (16 for the real run)
    PRECISION: str = "bf16"  # bf16 on RTX 40xx / H200 / CPU
    MAX_STEPS: int = 10  # steps of the run that fits (ZeRO-3 + offload); the ZeRO-2 run stops at initialisation
    LR: float = 3e-3  # peak learning rate; 3e-3 suits the tiny model, use ~1e-5 for Qwen-14B
    EMULATE_GPU_MEMORY_GIB: float = 0.0  # GPU box only: cap each GPU at this many GiB (24 on an H200); 0: the card's own memory
    """),
    code("""
    REHEARSAL = report.rehearsal()  # no NVIDIA GPU here -> CPU rehearsal with a scaled device budget
    target = Plan(model=TARGET_MODEL, num_gpus=TARGET_GPUS, gpu_memory_gib=GPU_MEMORY_GIB, seq_len=TARGET_SEQ_LEN,
                  micro_batch=TARGET_MICRO_BATCH, grad_accum=TARGET_GRAD_ACCUM, precision=PRECISION, zero_stage=2)
    run_plan = Plan(model=MODEL, num_gpus=NUM_GPUS, gpu_memory_gib=GPU_MEMORY_GIB, seq_len=SEQ_LEN,
                    micro_batch=MICRO_BATCH, grad_accum=GRAD_ACCUM, precision=PRECISION, zero_stage=2)
    N_TARGET, N_RUN = model_spec(TARGET_MODEL).num_params, model_spec(MODEL).num_params
    HANG_TIMEOUT_S = 300.0 if REHEARSAL else 900.0  # seconds without output from rank 0 before the watchdog stops a run
    if REHEARSAL:  # the same memory per parameter as Qwen-14B has on a 24 GiB card
        BUDGET_GIB = report.scaled_budget_gib(GPU_MEMORY_GIB, MODEL, TARGET_MODEL)
    else:  # the real card, or a larger one capped
        BUDGET_GIB = EMULATE_GPU_MEMORY_GIB or None
    rec = report.Recorder(OUTPUT_DIR, "01_oom_reproduction", title="01 · Reproducing the OOM",
                          target=f"{TARGET_GPUS} × RTX 4090 ({GPU_MEMORY_GIB:g} GiB)", rehearsal=REHEARSAL,
                          budget_gib=BUDGET_GIB, budget_scaled=REHEARSAL,
                          budget_bytes_per_param=GPU_MEMORY_GIB * 2**30 / N_TARGET)
    print(f"target: {TARGET_MODEL} ({N_TARGET:,} parameters) on {TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB, "
          f"micro batch {TARGET_MICRO_BATCH} × {TARGET_SEQ_LEN} tokens × {TARGET_GRAD_ACCUM} accumulation")
    print(f"run:    {MODEL} ({N_RUN:,} parameters) on {NUM_GPUS} rank(s), micro batch {MICRO_BATCH} × {SEQ_LEN} tokens")
    if REHEARSAL:
        print(f"device budget per rank (scaled): {GPU_MEMORY_GIB:g} GiB × {N_RUN:,} / {N_TARGET:,} = "
              f"{BUDGET_GIB * 2**30 / 2**20:.3f} MiB  (= {GPU_MEMORY_GIB * 2**30 / N_TARGET:.2f} bytes per parameter, "
              "as on the real card)")
    else:
        print(f"device memory per GPU: {'the card itself' if BUDGET_GIB is None else f'capped at {BUDGET_GIB:g} GiB'}")
    """),
    md("""
    ## 1. The estimate: ZeRO-2 does not fit, whatever the batch size

    Article 000 lowered the batch size from 8 to 1 and the sequence length from 1024 to 256, and still ran out of
    memory. ZeRO-2 partitions the optimizer states and gradients across the 8 GPUs but **keeps a full copy of
    the 16-bit parameters on every GPU**: 2 bytes × 14.17 B = 26.4 GiB, more than the card has before a single
    activation. The batch shape only moves the activations, a few GiB at most. We expect every cell of the table
    below to say "does not fit", with the 16-bit parameters alone over the dashed 24 GiB line.
    """),
    code("""
    shapes = report.batch_sweep(target, micro_batches=(1, 2, 4, 8), seq_lens=(256, 512, 1024))
    sweep_table = report.batch_sweep_frame(shapes)
    rec.add(zero2_fits_any_batch=any(e.fits_gpu for e in shapes),
            zero2_min_gpu_gib=min(e.gpu_gib["total"] for e in shapes),
            zero2_model_states_gib=shapes[0].gpu_model_states_gib,
            zero2_params_16bit_gib=shapes[0].gpu_gib["params_16bit"])
    rec.table("ZeRO-2, Qwen-14B on 8 × 24 GiB, every batch shape (per GPU)", sweep_table)
    """),
    code("""
    rec.figure(report.plot_batch_sweep(shapes), "zero2_every_batch_shape")
    """),
    code("""
    print(rec.headline(f"ZeRO-2 needs at least {rec.data['zero2_min_gpu_gib']:.1f} GiB per GPU for {TARGET_MODEL} on "
                       f"{TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB at any batch shape: the replicated 16-bit parameters "
                       f"alone are {rec.data['zero2_params_16bit_gib']:.1f} GiB."))
    """),
    md("""
    ## 2. Every ZeRO variant for the same plan

    The same plan under each variant the next notebooks walk through. We expect ZeRO-3 alone still not to fit
    (its 18 bytes per parameter of partitioned states are 29.7 GiB per GPU on 8 GPUs), and ZeRO-3 with the optimizer
    states offloaded to the CPU to fit with room to spare — at a price in host RAM (notebook 04).
    """),
    code("""
    variants = memory.sweep(target)
    rec.add(variants=variants.to_frame())
    variants
    """),
    code("""
    rec.figure(memory.plot_breakdown(variants), "every_variant")
    """),
    md("""
    ## 3. The articles' arithmetic beside the correct numbers

    Article 002 (§4.2) counts 28 GB of 16-bit parameters, 112 GB of Adam states, 28 GB of gradients and ~50 GB of
    activations, 218 GB in all, and concludes that 8 × 24 GB = 192 GB is "almost enough"; article 000 puts the
    whole need at ~112 GB. Two things are missing: the **fp32 master weights** that mixed-precision Adam keeps
    (4 bytes per parameter, 56.7 GB) and DeepSpeed's fp32 gradient partition (4 more), and — decisive — the
    memory is **not one 192 GB pool**: under ZeRO-2 each GPU holds its own full copy of the 16-bit parameters. Activations
    with gradient checkpointing at micro batch 1 × 512 tokens are under 1 GiB per GPU, not 50 GB.
    """),
    code("""
    arithmetic = report.article_memory_table(target)
    print(arithmetic.attrs["source"]); print(*arithmetic.attrs["other"], sep="\\n")
    rec.table("the articles' memory arithmetic beside the correct numbers", arithmetic)
    """),
    md("""
    ## 4. A real out-of-memory

    Now the run itself, ZeRO-2, launched with `cookbook.launch.launch` — the same call on both machines. On the GPU
    box it is Qwen-14B on real 24 GiB cards (or larger cards capped at 24 GiB with
    `torch.cuda.set_per_process_memory_fraction`); in the CPU rehearsal it is the tiny Qwen2 with the **scaled
    device budget** printed above, the same number of bytes per parameter as the real card. The launch helper
    refuses a run that its estimate says will not fit; `force=True` launches it anyway, because the failure is
    what we came to see. We expect status `gpu_oom`, with the rank and the allocation that failed — a result, not a
    crash of this notebook.
    """),
    code("""
    oom = launch(run_plan, Path(OUTPUT_DIR) / "zero2", max_steps=MAX_STEPS, lr=LR, force=True,
                 emulate_gpu_memory_gib=BUDGET_GIB, final_save=False, hang_timeout_s=HANG_TIMEOUT_S)
    rec.run("ZeRO-2", oom)
    rec.add(oom_status=oom.status, oom_message=oom.message,
            oom_tried_to_allocate_gib=oom.details.get("tried_to_allocate_gib"))
    oom
    """),
    code("""
    print("exact launch command:\\n" + oom.command)
    print(rec.headline(f"ZeRO-2 run ({report.hardware_label(oom)}{', scaled device budget' if REHEARSAL else ''}): "
                       f"{oom.status} — {oom.message}"))
    """),
    md("""
    ## 5. The same budget, met: ZeRO-3 with the optimizer and the parameters offloaded to the CPU

    ZeRO-3 partitions the parameters too, and the offload moves the optimizer states (and here the parameters) to
    host RAM, so a rank keeps almost nothing on its device between steps. With the same budget we expect status
    `ok` and a falling loss. Notebooks 02–04 take these steps one at a time.
    """),
    code("""
    fix_plan = run_plan.replace(zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    fix = launch(fix_plan, Path(OUTPUT_DIR) / "zero3_offload", max_steps=MAX_STEPS, lr=LR,
                 emulate_gpu_memory_gib=BUDGET_GIB, final_save=False, hang_timeout_s=HANG_TIMEOUT_S)
    rec.run("ZeRO-3 + opt→cpu + param→cpu", fix)
    rec.add(fix_status=fix.status)
    fix
    """),
    code("""
    runs = {"ZeRO-2": oom, "ZeRO-3 + opt→cpu + param→cpu": fix}
    rec.table("the two runs", report.runs_frame(runs))
    """),
    code("""
    rec.figure(report.plot_loss(runs, title=f"same device budget: ZeRO-2 vs ZeRO-3 + offload ({MODEL})"), "loss")
    """),
    *reference_cells("01", "runs"),
    md("""
    ## 6. What we recorded

    `results.json` in `OUTPUT_DIR` holds the numbers above for the tests and the run-all report.
    """),
    code("""
    print(rec.headline(f"Same budget, ZeRO-3 + CPU offload: {fix.status} — {fix.message}"))
    print(json.dumps({k: rec.data[k] for k in ("zero2_fits_any_batch", "zero2_min_gpu_gib", "oom_status", "fix_status",
                                               "budget_gib", "budget_scaled")}, indent=1))
    """),
]


# ------------------------------------------------------------------------------------------------
# 02-04: one ZeRO step each

def step_notebook(number: str, stem: str, name: str, goal: str, previous: str, nxt: str, stage: int, opt: str,
                  param: str, prev_code: str, config_md: str, estimate_md: str, run_md: str,
                  verdict_md: str, force: bool, extra: list[dict] = ()) -> list[dict]:
    return [
        title(number, name, goal,
              "8 × RTX 4090 (24 GiB each), Qwen-14B — or 8 larger GPUs capped at 24 GiB.",
              "the tiny Qwen2 (same architecture) on 2 CPU ranks with the shipped instruction data: the same code path "
              "(Accelerate + DeepSpeed, the same config builder), a real run with real memory and throughput numbers "
              "(host RAM instead of GPU memory), and the estimate for the real target beside it.",
              previous, nxt),
        code(IMPORTS),
        params(f"""
        OUTPUT_DIR: str = "runs/{stem}"  # everything this notebook writes goes here
        TARGET_MODEL: str = "qwen-14b"  # the articles' model
        TARGET_GPUS: int = 8  # the articles' world size: 8 × RTX 4090
        GPU_MEMORY_GIB: float = 24.0  # memory of one RTX 4090 in GiB
        TARGET_HOST_MEMORY_GIB: float = 512.0  # host RAM of the target machine in GiB (article 000 asks for ≥ 520 GB)
        TARGET_SEQ_LEN: int = 512  # the articles' sequence length
        TARGET_MICRO_BATCH: int = 1  # the articles' micro batch per GPU
        TARGET_GRAD_ACCUM: int = 16  # the articles' gradient accumulation steps
        """, RUN_PARAMS.format(model="tiny-qwen2", arch="Qwen2", real="qwen-14b", ranks=2, real_gpus=8, t_seq=512,
                                t_micro=1, t_accum=16, steps=40)),
        code(f"""
        REHEARSAL = report.rehearsal()  # no NVIDIA GPU here -> CPU rehearsal
        VARIANT = dict(zero_stage={stage}, offload_optimizer="{opt}", offload_param="{param}")  # this notebook's step
        target = Plan(model=TARGET_MODEL, num_gpus=TARGET_GPUS, gpu_memory_gib=GPU_MEMORY_GIB,
                      host_memory_gib=TARGET_HOST_MEMORY_GIB, seq_len=TARGET_SEQ_LEN, micro_batch=TARGET_MICRO_BATCH,
                      grad_accum=TARGET_GRAD_ACCUM, precision=PRECISION, **VARIANT)
        run_plan = Plan(model=MODEL, num_gpus=NUM_GPUS, gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or GPU_MEMORY_GIB,
                        host_memory_gib=HOST_MEMORY_GIB or None, seq_len=SEQ_LEN, micro_batch=MICRO_BATCH, grad_accum=GRAD_ACCUM,
                        precision=PRECISION, **VARIANT)
        WARMUP_STEPS = max(1, MAX_STEPS // 20)  # the launch helper's default warm-up: 5 % of the steps
        HANG_TIMEOUT_S = 300.0 if REHEARSAL else 900.0  # seconds without output from rank 0 before the watchdog stops a run
        rec = report.Recorder(OUTPUT_DIR, "{stem}", title="{number} · {name}",
                              target=f"{{TARGET_GPUS}} × RTX 4090 ({{GPU_MEMORY_GIB:g}} GiB), {{TARGET_MODEL}}",
                              rehearsal=REHEARSAL, variant=target.label)
        print(f"variant: {{target.label}}")
        print(f"target: {{TARGET_MODEL}} on {{TARGET_GPUS}} × {{GPU_MEMORY_GIB:g}} GiB, {{TARGET_HOST_MEMORY_GIB:g}} GiB host RAM, "
              f"micro batch {{TARGET_MICRO_BATCH}} × {{TARGET_SEQ_LEN}} tokens × {{TARGET_GRAD_ACCUM}}")
        print(f"run:    {{MODEL}} on {{NUM_GPUS}} rank(s) ({{'CPU rehearsal' if REHEARSAL else 'GPUs'}}), micro batch "
              f"{{MICRO_BATCH}} × {{SEQ_LEN}} tokens × {{GRAD_ACCUM}}, {{MAX_STEPS}} steps, warm-up {{WARMUP_STEPS}}")
        """),
        md(config_md),
        code(prev_code),
        code("""
        target_config = dsconfig.build_config(target, "accelerate", lr=LR, warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS)
        change = dsconfig.diff(previous_config, target_config)
        rec.add(config=target_config, diff_vs_previous=change.to_frame())
        rec.table(f"config: changed vs {PREVIOUS}", change.to_frame())
        """),
        code("""
        run_config = dsconfig.build_config(run_plan, "accelerate", lr=LR, warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS)
        print(f"The DeepSpeed config this notebook runs ({MODEL}, {NUM_GPUS} ranks; written to the run folder as ds_config.json):")
        print(json.dumps(run_config, indent=2))
        rec.table("what the rehearsal changes in the target's config", dsconfig.diff(target_config, run_config).to_frame())
        """),
        md(estimate_md),
        code("""
        target_estimate = memory.estimate(target)
        rec.add(target_estimate=target_estimate.to_dict(), fits_target=target_estimate.fits,
                fits_target_gpu=target_estimate.fits_gpu, fits_target_host=target_estimate.fits_host)
        print(target_estimate.verdict)
        target_estimate
        """),
        code("""
        rec.figure(memory.plot_breakdown([memory.estimate(target.replace(**v)) for v in PREVIOUS_VARIANTS + [VARIANT]]),
                   "estimate_per_gpu")
        """),
        md(run_md),
        code(f"""
        result = launch(run_plan, Path(OUTPUT_DIR) / "run", config=run_config, max_steps=MAX_STEPS, lr=LR,
                        warmup_steps=WARMUP_STEPS, emulate_gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or None, final_save=False,
                        force={force}, hang_timeout_s=HANG_TIMEOUT_S)
        rec.run(target.label, result)
        result
        """),
        code("""
        print("exact launch command (also in the run folder as command.sh):\\n" + result.command)
        rec.headline(f"{target.label} run ({report.hardware_label(result)}): {result.status} — {result.message}")
        """),
        md("""
        ## 4. Estimate beside measurement, and throughput

        The estimator's prediction for the run that actually ran, next to what it measured: GPU peaks on GPUs
        (`torch.cuda.max_memory_allocated/reserved`), the host RSS peak of all ranks in the rehearsal (where the
        ranks' "device" is host RAM). Then the per-rank share of the partitioned state, which shows what this
        ZeRO stage really splits, and the throughput.
        """),
        code("""
        run_estimate = memory.estimate(run_plan, device="cpu" if REHEARSAL else "cuda", ds_config=run_config)
        beside = report.tidy_frame(memory.compare(run_estimate, result.summary or {}), rehearsal=False)
        rec.table("estimate beside measurement (this run)", beside)
        """),
        code("""
        partition = (result.summary or {}).get("zero_partition")
        rec.add(zero_partition=partition)
        print(f"ZeRO partition ({(partition or {}).get('kind')}): per-rank elements {(partition or {}).get('per_rank_numel')} "
              f"of {(partition or {}).get('full_numel')}")
        rec.table("throughput and loss", report.runs_frame({target.label: result}))
        """),
        code("""
        rec.figure(report.plot_loss({f"{target.label} ({report.hardware_label(result)})": result}), "loss")
        """),
        code("""
        rec.figure(report.plot_runs({target.label: result}), "memory_throughput")
        """),
        *extra,
        *reference_cells(number, "{target.label: result}"),
        md(verdict_md),
        code("""
        verdict = (f"{target.label} for {TARGET_MODEL} on {TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB with "
                   f"{TARGET_HOST_MEMORY_GIB:g} GiB host RAM: {'FITS' if target_estimate.fits else 'DOES NOT FIT'} — "
                   + "; ".join(target_estimate.reasons[:2]))
        rec.add(verdict=verdict, run_status=result.status)
        print(rec.headline(verdict))
        """),
    ]


NB02_PREV = """
PREVIOUS = "article 002 (ZeRO-2, §3.1)"
PREVIOUS_VARIANTS = []  # the figure below shows this notebook's variant alone
previous_config = report.article_config("002_qwen14b_zero2")
findings = lint.lint(report.article_config_path("002_qwen14b_zero2"), world_size=TARGET_GPUS, mode="accelerate",
                     gpu="RTX 4090", model=TARGET_MODEL)
rec.add(article_lint=[f.to_dict() for f in findings])
rec.table("lint of article 002's ZeRO-2 config (8 GPUs, RTX 4090)", findings.to_frame())
"""

NB02 = step_notebook(
    "02", "02_zero2", "ZeRO-2: partition the optimizer states and the gradients",
    "ZeRO stage 2 splits the fp32 master weights, the Adam states and the gradients across the ranks, so each holds "
    "1/N of them; the 16-bit parameters stay whole on every rank. This notebook builds the ZeRO-2 config, compares "
    "it with article 002's, runs it, and puts the estimate beside the measurement.",
    "[01 · reproducing the OOM](01_oom_reproduction.ipynb)", "[03 · ZeRO-3](03_zero3.ipynb)",
    2, "none", "none", NB02_PREV,
    """
    ## 1. The config: changed vs article 002's ZeRO-2 config

    The previous step is the config article 002 (§3.1) ran into the OOM with. The cookbook builds its own from the
    plan (`cookbook.dsconfig.build_config`), so the batch numbers always agree: DeepSpeed requires
    `train_batch_size = micro batch × accumulation × world size`. We expect the diff to show bf16 instead of fp16
    (the RTX 4090 computes bf16 natively; no loss scaling), explicit micro batch and accumulation, and bucket sizes
    derived from the hidden size; and the linter to flag the article's config before anything runs.
    """,
    """
    ## 2. The estimate for the target

    Per GPU for Qwen-14B on 8 × 24 GiB: the 16-bit parameters are replicated (26.4 GiB), the rest is split eight
    ways. We expect "does not fit" whatever the batch (notebook 01), and a breakdown showing why.
    """,
    """
    ## 3. A real run

    The launch helper writes the run folder (Accelerate YAML, the DeepSpeed JSON above, `command.sh`), runs
    `accelerate launch -m cookbook.train` in a subprocess and streams the progress. In the rehearsal we expect a
    run that finishes its steps with a falling loss. On the GPU box with Qwen-14B, the estimate refuses it;
    `force=True` launches it anyway so that the real out-of-memory is shown as the result (status `gpu_oom`).
    """,
    """
    ## 5. The verdict for the target hardware

    What the estimate says for Qwen-14B on 8 × RTX 4090 — the rehearsal proves the code path and the numbers, the
    estimate (checked against GPU measurements in `data/calibration/`) carries them to the real size.
    """,
    force=True,
)

NB03_PREV = """
PREVIOUS = "02 (ZeRO-2)"
PREVIOUS_VARIANTS = [dict(zero_stage=2, offload_optimizer="none", offload_param="none")]
previous_config = dsconfig.build_config(target.replace(**PREVIOUS_VARIANTS[0]), "accelerate", lr=LR,
                                        warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS)
"""

NB03 = step_notebook(
    "03", "03_zero3", "ZeRO-3: partition the parameters too",
    "ZeRO stage 3 splits the 16-bit parameters as well, gathering each layer's just in time for its forward and "
    "backward and freeing it after. This notebook shows the config change from ZeRO-2, the estimate, a real run "
    "whose partition shows every rank holding half the parameters, and the verdict for 8 × RTX 4090.",
    "[02 · ZeRO-2](02_zero2.ipynb)", "[04 · ZeRO-3 + CPU offload](04_zero3_offload.ipynb)",
    3, "none", "none", NB03_PREV,
    """
    ## 1. The config: changed vs 02

    One word changes the memory picture — `stage: 3` — and with it come the ZeRO-3 knobs: the prefetch bucket,
    the persistence threshold below which small parameters (norms) stay whole, the live-parameter limit, and
    `stage3_gather_16bit_weights_on_model_save` so that a saved model holds real weights rather than empty
    placeholders. ZeRO-2's `allgather_*` and `reduce_scatter` keys go away.
    """,
    """
    ## 2. The estimate for the target

    Per GPU: 18 bytes per parameter of partitioned states (16-bit parameters, fp32 master weights, Adam m and v,
    fp32 gradients) ÷ 8 = 29.7 GiB, plus the gathered largest layer. Article 002 reports that ZeRO-3 "relieved the
    pressure but was not enough"; we expect the estimate to agree: better than ZeRO-2, still over 24 GiB.
    """,
    """
    ## 3. A real run

    The same launch call with the ZeRO-3 config. In the rehearsal we expect a completed run whose partition shows
    each rank holding about 1/2 of the parameters; on the GPU box with Qwen-14B the estimate refuses, and
    `force=True` shows the real out-of-memory instead.
    """,
    """
    ## 5. The verdict for the target hardware

    ZeRO-3 alone is not enough for Qwen-14B on 24 GiB cards; the states have to leave the GPU (notebook 04).
    """,
    force=True,
)

NB04_EXTRA = [
    md("""
    ### Host RAM: the other side of offload

    Offload moves the states into host RAM, pinned (page-locked) so that the copies run at full PCIe speed — and
    pinned memory cannot be swapped out. Article 000 asks for "≥ 520 GB" of system memory. We expect DeepSpeed's
    own estimators (which the cookbook's host numbers follow, with their 1.5 × buffer factor) to put the need for
    Qwen-14B on one 8-GPU machine at about 366 GiB for full offload and 326 GiB for optimizer-only offload —
    and to show that optimizer-only offload already fits the GPUs, so parameter offload buys GPU memory this
    target does not need, at the cost of PCIe traffic every step.
    """),
    code("""
    offloads = memory.sweep(target, [(3, "cpu", "none"), (3, "cpu", "cpu"), (3, "nvme", "nvme")])
    offloads_bf16 = memory.sweep(target, [(3, "cpu", "none"), (3, "cpu", "cpu")], bf16_states=True)
    rec.add(host_need_gib={e.plan.label: e.host_gib["total"] for e in offloads},
            host_need_bf16_states_gib={e.plan.label: e.host_gib["total"] for e in offloads_bf16})
    rec.table("offload variants for the target: GPU and host RAM", offloads.to_frame())
    """),
    code("""
    rec.figure(report.plot_host_ram(offloads), "host_ram")
    """),
    code("""
    full = offloads[1]
    print(rec.headline(f"Host RAM for {full.plan.label} on one {TARGET_GPUS}-GPU machine: {full.host_gib['total']:.0f} GiB "
                       f"(DeepSpeed's estimator incl. its 1.5× buffer factor; article 000 says ≥ 520 GB); optimizer-only "
                       f"offload: {offloads[0].host_gib['total']:.0f} GiB at {offloads[0].gpu_gib['total']:.1f} GiB per GPU."))
    """),
]

NB04_PREV = """
PREVIOUS = "03 (ZeRO-3)"
PREVIOUS_VARIANTS = [dict(zero_stage=2, offload_optimizer="none", offload_param="none"),
                     dict(zero_stage=3, offload_optimizer="none", offload_param="none")]
previous_config = dsconfig.build_config(target.replace(**PREVIOUS_VARIANTS[-1]), "accelerate", lr=LR,
                                        warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS)
"""

NB04 = step_notebook(
    "04", "04_zero3_offload", "ZeRO-3 + CPU offload: move the states to host RAM",
    "ZeRO-Offload keeps the optimizer states (and with parameter offload, the 16-bit parameters) in host RAM and runs "
    "Adam on the CPU (DeepSpeed's CPU Adam). The GPU keeps only what the current layer needs. This is article 000's "
    "fix; here it is with its real price in host RAM and PCIe traffic.",
    "[03 · ZeRO-3](03_zero3.ipynb)", "[05 · the whole recipe on 8 × RTX 4090](05_final_8x4090.ipynb)",
    3, "cpu", "cpu", NB04_PREV,
    """
    ## 1. The config: changed vs 03

    Two blocks appear: `offload_optimizer` and `offload_param`, each with `device: cpu` and `pin_memory` (page-locked
    buffers for fast copies; the builder turns pinning off when the plan's host RAM is short, because pinned memory
    cannot be swapped and a short machine would be killed instead of slowed).
    """,
    """
    ## 2. The estimate for the target

    On the GPU only the gathered layers, buckets, prefetch buffers and activations remain: we expect well under
    24 GiB per GPU. The host now holds the states.
    """,
    """
    ## 3. A real run

    The same launch call with the offload config: DeepSpeed builds its CPU Adam op (compiled the first time) and
    the ranks step on the CPU. In the rehearsal we expect a completed run on 2 ranks with a falling loss. On the
    GPU box the estimate gates the launch: it runs when the host RAM is enough, otherwise the result says so.
    """,
    """
    ## 5. The verdict for the target hardware

    ZeRO-3 with the optimizer offloaded fits 24 GiB cards; the host RAM decides which offload the machine can afford
    (notebook 05 picks it from the estimate).
    """,
    force=False, extra=NB04_EXTRA,
)


# ------------------------------------------------------------------------------------------------
# 05 · the whole recipe, 8 × RTX 4090

NB05 = [
    title("05", "The whole recipe: Qwen-14B on 8 × RTX 4090",
          "Everything in one place, in the order you would do it: the plan and the variant the estimate picks for "
          "the machine, the environment check, the config, the linter, the launch with live progress, the metrics, "
          "the 16-bit weights saved and reloaded, the loss curve and a memory/throughput table.",
          "8 × RTX 4090 (24 GiB each) with 512 GiB host RAM, Qwen-14B (set `TARGET_HOST_MEMORY_GIB` to your machine's).",
          "the tiny Qwen2 on 2 CPU ranks, with the variant the estimate picks for the target, 40 steps, a checkpoint "
          "half-way, and the final 16-bit model saved, verified and reloaded.",
          "[04 · ZeRO-3 + CPU offload](04_zero3_offload.ipynb)", "[06 · LLaMA-7B on one RTX 4090](06_final_1x4090.ipynb)"),
    code(IMPORTS),
    params("""
    OUTPUT_DIR: str = "runs/05_final_8x4090"  # everything this notebook writes goes here
    TARGET_MODEL: str = "qwen-14b"  # the model to fine-tune
    TARGET_GPUS: int = 8  # GPUs of the machine
    GPU_MEMORY_GIB: float = 24.0  # memory of one GPU in GiB (RTX 4090: 24)
    TARGET_HOST_MEMORY_GIB: float = 512.0  # host RAM of the machine in GiB
    TARGET_SEQ_LEN: int = 512  # tokens per sequence
    TARGET_MICRO_BATCH: int = 1  # sequences per GPU per forward/backward
    TARGET_GRAD_ACCUM: int = 16  # gradient accumulation steps (global batch: 1 × 16 × 8, 128 sequences)
    BF16_STATES: bool = False  # keep master weights and Adam states in bf16: half the host RAM, less precise updates
    GPU_NAME: str = "RTX 4090"  # for the linter's precision checks
    """, RUN_PARAMS.format(model="tiny-qwen2", arch="Qwen2", real="qwen-14b", ranks=2, real_gpus=8, t_seq=512,
                            t_micro=1, t_accum=16, steps=40)),
    code("""
    REHEARSAL = report.rehearsal()  # no NVIDIA GPU here -> CPU rehearsal
    machine = Plan(model=TARGET_MODEL, num_gpus=TARGET_GPUS, gpu_memory_gib=GPU_MEMORY_GIB,
                   host_memory_gib=TARGET_HOST_MEMORY_GIB, seq_len=TARGET_SEQ_LEN, micro_batch=TARGET_MICRO_BATCH,
                   grad_accum=TARGET_GRAD_ACCUM, precision=PRECISION)
    WARMUP_STEPS = max(1, MAX_STEPS // 20)  # 5 % of the steps
    HANG_TIMEOUT_S = 300.0 if REHEARSAL else 900.0  # seconds without output from rank 0 before the watchdog stops a run
    SAVE_STEPS = MAX_STEPS // 2  # one kill-safe checkpoint half-way, and the final model at the end
    rec = report.Recorder(OUTPUT_DIR, "05_final_8x4090", title="05 · The whole recipe: Qwen-14B on 8 × RTX 4090",
                          target=f"{TARGET_GPUS} × {GPU_NAME} ({GPU_MEMORY_GIB:g} GiB), {TARGET_HOST_MEMORY_GIB:g} GiB RAM",
                          rehearsal=REHEARSAL)
    print(f"machine: {TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB, {TARGET_HOST_MEMORY_GIB:g} GiB host RAM; model {TARGET_MODEL}; "
          f"global batch {machine.global_batch} sequences × {TARGET_SEQ_LEN} tokens")
    print(f"run: {MODEL} on {NUM_GPUS} rank(s) ({'CPU rehearsal' if REHEARSAL else 'GPUs'}), {MAX_STEPS} steps, "
          f"checkpoint every {SAVE_STEPS}")
    """),
    md("""
    ## 1. The plan: the fastest variant that fits

    Each step of the ZeRO ladder saves memory and costs speed, so take the first one that fits both the GPUs and the
    host RAM (`cookbook.report.choose_variant` walks `cookbook.plan.VARIANTS` in order). For Qwen-14B on
    8 × 24 GiB with 512 GiB of RAM we expect ZeRO-3 with the optimizer offloaded to the CPU; with 256 GiB, NVMe
    offload (or `BF16_STATES`).
    """),
    code("""
    chosen, ladder = report.choose_variant(machine, bf16_states=BF16_STATES)
    if chosen is None:
        raise ValueError(f"no ZeRO variant fits {TARGET_MODEL} on {TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB with "
                         f"TARGET_HOST_MEMORY_GIB={TARGET_HOST_MEMORY_GIB:g}: see ladder.to_frame(); add host RAM or GPUs, "
                         "or set BF16_STATES = True")
    target = chosen.plan
    VARIANT = dict(zero_stage=target.zero_stage, offload_optimizer=target.offload_optimizer,
                   offload_param=target.offload_param, nvme_path=target.nvme_path)
    rec.add(variant=target.label, target_estimate=chosen.to_dict())
    rec.headline(f"Plan for {TARGET_MODEL} on {TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB with {TARGET_HOST_MEMORY_GIB:g} GiB RAM: "
                 f"{chosen.verdict}")
    print("chosen:", chosen.verdict)
    rec.table("the ZeRO ladder for this machine", ladder.to_frame())
    """),
    code("""
    rec.figure(memory.plot_breakdown(ladder), "ladder_per_gpu")
    """),
    code("""
    run_plan = Plan(model=MODEL, num_gpus=NUM_GPUS, gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or GPU_MEMORY_GIB,
                    host_memory_gib=HOST_MEMORY_GIB or None, seq_len=SEQ_LEN, micro_batch=MICRO_BATCH, grad_accum=GRAD_ACCUM,
                    precision=PRECISION, **({**VARIANT, "nvme_path": str(Path(OUTPUT_DIR).resolve() / "nvme")}
                                            if target.nvme_path else VARIANT))
    print(f"this run: {run_plan.model}, {run_plan.num_gpus} rank(s), {run_plan.label}")
    """),
    md("""
    ## 2. The environment check

    The checks of notebook 00 for this run. Failures stop here with their fix; the recommended environment
    (e.g. `NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1` on RTX 40xx with a driver older than 550.40.07) is applied by the launch
    helper to the ranks it starts.
    """),
    code("""
    checked = env.check(run_plan, run_allreduce=False)
    rec.add(env_ok=checked.ok, env_verdict=checked.verdict, env_failed=[c.name for c in checked.failed])
    print(checked.verdict)
    print(checked.env_block() or "(no environment variables needed)")
    checked.to_frame()[["name", "status", "value"]]
    """),
    md("""
    ## 3. The config

    The exact DeepSpeed JSON for the target machine (copy it to `ds_config.json` there) and the one this run uses;
    they differ only in the batch shape, the bucket sizes derived from the hidden size, and the learning-rate schedule.
    """),
    code("""
    target_config = dsconfig.build_config(target, "accelerate", lr=1e-5, warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS,
                                          bf16_states=BF16_STATES)
    run_config = dsconfig.build_config(run_plan, "accelerate", lr=LR, warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS,
                                       bf16_states=BF16_STATES)
    rec.add(config=target_config)
    print(f"# ds_config.json for {TARGET_MODEL} on {TARGET_GPUS} × {GPU_NAME}")
    print(json.dumps(target_config, indent=2))
    """),
    code("""
    rec.table("this run's config vs the target's", dsconfig.diff(target_config, run_config).to_frame())
    """),
    md("""
    ## 4. Lint

    The linter checks a config against the plan before anything starts: batch arithmetic, unknown or misplaced keys,
    `"auto"` values nobody fills, precision for the GPU, offload consistency, saving under ZeRO-3. We expect no
    errors for the cookbook's own configs.
    """),
    code("""
    target_lint = lint.lint(target_config, plan=target, mode="accelerate", gpu=GPU_NAME, model=TARGET_MODEL)
    run_lint = lint.lint(run_config, plan=run_plan, mode="accelerate", model=MODEL)
    rec.add(lint_errors=len(target_lint.errors) + len(run_lint.errors), lint_findings=target_lint.to_frame())
    print(f"target config: {len(target_lint.errors)} error(s), {len(target_lint.warnings)} warning(s); "
          f"run config: {len(run_lint.errors)} error(s), {len(run_lint.warnings)} warning(s)")
    target_lint if len(target_lint) else "no findings: the target's config agrees with its plan"
    """),
    md("""
    ## 5. Launch, with live progress

    First a dry run: the run folder and the exact command, nothing started. Then the run itself: the progress bar
    shows the loss and tokens/s as rank 0 reports each step; a checkpoint is written half-way (kill-safe: a
    temporary folder renamed into place), and at the end the 16-bit weights are gathered from all ranks, saved,
    reloaded and compared with the live model.
    """),
    code("""
    dry = launch(run_plan, Path(OUTPUT_DIR) / "run", config=run_config, max_steps=MAX_STEPS, lr=LR,
                 warmup_steps=WARMUP_STEPS, save_steps=SAVE_STEPS, bf16_states=BF16_STATES,
                 emulate_gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or None, dry_run=True)
    print(dry.status, "—", dry.message)
    print(dry.command)
    """),
    code("""
    result = launch(run_plan, Path(OUTPUT_DIR) / "run", config=run_config, max_steps=MAX_STEPS, lr=LR,
                    warmup_steps=WARMUP_STEPS, save_steps=SAVE_STEPS, bf16_states=BF16_STATES,
                    emulate_gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or None, hang_timeout_s=HANG_TIMEOUT_S)
    rec.run(run_plan.label, result)
    rec.headline(f"{run_plan.label} run ({report.hardware_label(result)}): {result.status} — {result.message}")
    result
    """),
    md("""
    ## 6. Metrics

    One row per optimizer step from `metrics.jsonl`: loss (mean over ranks), learning rate, gradient norm,
    throughput, and memory peaks. We expect the loss to fall from about ln(vocabulary) as the tiny model learns the
    instruction format.
    """),
    code("""
    metrics = result.metrics_frame()
    rec.table("metrics (last 5 steps)", report.tidy_frame(metrics.tail(5), rehearsal=REHEARSAL))
    report.tidy_frame(metrics.tail(10), rehearsal=REHEARSAL)
    """),
    code("""
    rec.figure(report.plot_loss({f"{run_plan.label} ({report.hardware_label(result)})": result}), "loss")
    """),
    md("""
    ## 7. The 16-bit weights: saved, verified, reloaded

    Under ZeRO-3 no rank holds the whole model; `stage3_gather_16bit_weights_on_model_save` gathers it for
    `save_pretrained`. The training entry reloaded the saved folder and compared its logits with the live engine's
    (`save_verification`). Here we read the saved files back independently: every tensor present with its full
    shape (a model saved without gathering has empty placeholders), and — for a model this small — a reload with
    `from_pretrained` and its loss on a few examples.
    """),
    code("""
    verification = (result.summary or {}).get("save_verification")
    saved = report.inspect_saved_model(Path(result.run_dir) / "final_model") if result.ok else None
    rec.add(save_verification=verification, saved_model=saved)
    print(json.dumps({"save_verification": verification, "read back": saved}, indent=1, default=str))
    """),
    md("""
    ## 8. Memory and throughput

    The estimate beside the measurement for this run, the run's throughput, and the measurements on GPUs where
    the maintainers recorded them.
    """),
    code("""
    run_estimate = memory.estimate(run_plan, device="cpu" if REHEARSAL else "cuda", ds_config=run_config,
                                   bf16_states=BF16_STATES)
    rec.table("estimate beside measurement (this run)", report.tidy_frame(memory.compare(run_estimate, result.summary or {}), rehearsal=False))
    """),
    code("""
    rec.table("memory and throughput", report.runs_frame({run_plan.label: result}))
    """),
    code("""
    rec.figure(report.plot_runs({run_plan.label: result}), "memory_throughput")
    """),
    *reference_cells("05", "{run_plan.label: result}"),
    md("""
    ## 9. The recipe, in one paragraph

    Estimate first (`cookbook estimate`), pick the first ZeRO variant that fits GPUs *and* host RAM, check the
    machine (`cookbook env`), build the config from the plan and lint it, launch with Accelerate, watch the loss,
    keep kill-safe checkpoints, and save the 16-bit weights gathered from all ranks — then reload them to be sure.
    """),
    code("""
    print(rec.headline(f"Recipe for {TARGET_MODEL} on {TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB: {target.label}; rehearsal run "
                       f"{result.status}, loss {(result.summary or {}).get('first5_mean_loss') or float('nan'):.3f} → "
                       f"{(result.summary or {}).get('last5_mean_loss') or float('nan'):.3f}, 16-bit model "
                       f"{'verified and reloaded' if (saved or {}).get('reloaded') else 'read back'}"))
    """),
]


# ------------------------------------------------------------------------------------------------
# 06 · LLaMA-7B on one RTX 4090

NB06 = [
    title("06", "The whole recipe: LLaMA-7B on one RTX 4090",
          "Article 001 fine-tunes LLaMA-7B on a single RTX 4090 with ZeRO-Offload and a 64 GB desktop. On one GPU "
          "ZeRO cannot partition anything: all the model states must live somewhere, and with Adam that is about "
          "125 GiB. This notebook shows the host-RAM reality, the NVMe offload option, what the article's throughput "
          "claims would require, and runs the recipe.",
          "1 × RTX 4090 (24 GiB), 64 GiB host RAM, a fast NVMe SSD, LLaMA-7B.",
          "the tiny LLaMA (same architecture) on ONE CPU rank with ZeRO-3 and CPU offload; NVMe offload too when "
          "DeepSpeed's async I/O op works on this machine (libaio), otherwise the notebook says why it skipped it.",
          "[05 · Qwen-14B on 8 × RTX 4090](05_final_8x4090.ipynb)", "none, this is the last."),
    code(IMPORTS),
    params("""
    OUTPUT_DIR: str = "runs/06_final_1x4090"  # everything this notebook writes goes here
    TARGET_MODEL: str = "llama-7b"  # article 001's model: 6,738,415,616 parameters
    TARGET_GPUS: int = 1  # one RTX 4090
    GPU_MEMORY_GIB: float = 24.0  # memory of the RTX 4090 in GiB
    TARGET_HOST_MEMORY_GIB: float = 64.0  # article 001's desktop: i9-13900K with 64 GB DDR5
    TARGET_SEQ_LEN: int = 1024  # article 001's sequence length
    TARGET_MICRO_BATCH: int = 2  # article 001's batch size for LLaMA 7B
    TARGET_GRAD_ACCUM: int = 8  # article 001's gradient accumulation steps
    ARTICLE_SAMPLES_PER_S: float = 2.4  # article 001's claimed throughput for LLaMA 7B on one RTX 4090
    ARTICLE_HOST_GB: float = 48.0  # article 001's claimed host memory use for that run
    NVME_PATH: str = ""  # folder on a fast NVMe SSD for NVMe offload; empty: OUTPUT_DIR/nvme (fine for the rehearsal)
    TRY_NVME: bool = True  # also run NVMe offload when DeepSpeed's async I/O op works here
    """, RUN_PARAMS.format(model="tiny-llama", arch="LLaMA", real="llama-7b", ranks=1, real_gpus=1, t_seq=1024,
                            t_micro=2, t_accum=8, steps=40)),
    code("""
    REHEARSAL = report.rehearsal()  # no NVIDIA GPU here -> CPU rehearsal
    NVME_DIR = NVME_PATH or str(Path(OUTPUT_DIR).resolve() / "nvme")
    machine = Plan(model=TARGET_MODEL, num_gpus=TARGET_GPUS, gpu_memory_gib=GPU_MEMORY_GIB,
                   host_memory_gib=TARGET_HOST_MEMORY_GIB, seq_len=TARGET_SEQ_LEN, micro_batch=TARGET_MICRO_BATCH,
                   grad_accum=TARGET_GRAD_ACCUM, precision=PRECISION, zero_stage=3, offload_optimizer="cpu",
                   offload_param="cpu", nvme_path=NVME_DIR)
    run_plan = Plan(model=MODEL, num_gpus=NUM_GPUS, gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or GPU_MEMORY_GIB,
                    host_memory_gib=HOST_MEMORY_GIB or None, seq_len=SEQ_LEN, micro_batch=MICRO_BATCH, grad_accum=GRAD_ACCUM,
                    precision=PRECISION, zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
    WARMUP_STEPS = max(1, MAX_STEPS // 20)  # 5 % of the steps
    HANG_TIMEOUT_S = 300.0 if REHEARSAL else 900.0  # seconds without output from rank 0 before the watchdog stops a run
    rec = report.Recorder(OUTPUT_DIR, "06_final_1x4090", title="06 · The whole recipe: LLaMA-7B on one RTX 4090",
                          target=f"1 × RTX 4090 ({GPU_MEMORY_GIB:g} GiB), {TARGET_HOST_MEMORY_GIB:g} GiB RAM, NVMe",
                          rehearsal=REHEARSAL)
    print(f"machine: {TARGET_GPUS} × {GPU_MEMORY_GIB:g} GiB, {TARGET_HOST_MEMORY_GIB:g} GiB RAM, NVMe at {NVME_DIR}")
    print(f"run: {MODEL} on {NUM_GPUS} rank ({'CPU rehearsal' if REHEARSAL else 'GPU'}), {run_plan.label}, {MAX_STEPS} steps")
    """),
    md("""
    ## 1. The arithmetic: article 001 beside the correct numbers

    Article 001 lists 14 GB of fp16 parameters, 28 GB of fp32 copies, 14 GB of gradients, 56 GB of Adam states and
    ~2 GB of activations — its items are right for 7 B parameters, but it adds them up to "about 86 GB" (they
    make 114 GB), and it leaves out DeepSpeed's fp32 gradient partition. With one GPU there is nobody to partition
    with: ZeRO's stages change nothing; only offload moves states off the card.
    """),
    code("""
    arithmetic = report.article_memory_table(machine)
    rec.table("article 001's arithmetic beside the correct numbers", arithmetic)
    """),
    md("""
    ## 2. The host-RAM reality

    Offload moves the states into host RAM, and DeepSpeed's estimator (states + its 1.5 × buffer factor) puts full
    CPU offload of LLaMA-7B at well over 100 GiB — more than the article's 64 GB desktop has, so its "48 GB of host
    memory in use" cannot be a full fine-tune with Adam. We expect: CPU offload does not fit 64 GiB (bf16 states
    do not rescue it either), and NVMe offload — states on the SSD, small pinned buffers in RAM — is the variant
    that fits this machine.
    """),
    code("""
    chosen, ladder = report.choose_variant(machine)
    _, ladder_bf16 = report.choose_variant(machine, bf16_states=True)
    cpu_full = next(e for e in ladder if e.plan.offload_param == "cpu")
    rec.add(chosen_variant=chosen.plan.label if chosen else None, host_need_cpu_offload_gib=cpu_full.host_gib["total"],
            fits_cpu_offload_64=cpu_full.fits_host, host_need_bf16_gib={e.plan.label: e.host_gib["total"] for e in ladder_bf16},
            nvme_gib=ladder[-1].nvme_gib)
    print(rec.headline(f"LLaMA-7B, full CPU offload on one GPU: {cpu_full.host_gib['total']:.0f} GiB host RAM needed vs "
                       f"{TARGET_HOST_MEMORY_GIB:g} GiB (article 001 claims {ARTICLE_HOST_GB:g} GB in use); the estimate picks "
                       f"{chosen.plan.label if chosen else 'nothing'} ({ladder[-1].nvme_gib:.0f} GiB on the SSD)."))
    rec.table("the ladder on 1 × 24 GiB with 64 GiB RAM", ladder.to_frame())
    """),
    code("""
    rec.figure(report.plot_host_ram(ladder), "host_ram")
    """),
    md("""
    ## 3. What the article's throughput would require

    Article 001 reports 2.4 samples/s (1024 tokens each) for LLaMA-7B with parameters offloaded. Two hard
    ceilings (`cookbook.report.throughput_ceiling`): the GPU at 100 % of its 165 TFLOP/s bf16 peak, and — with
    parameter offload — the 16-bit parameters crossing the PCIe 4.0 ×16 link at least twice per micro batch at
    its theoretical 31.5 GB/s, ignoring the CPU's Adam step entirely. We expect the claim to sit above the PCIe ceiling.
    """),
    code("""
    ceiling = report.throughput_ceiling(machine)
    rec.add(throughput_ceiling=ceiling, article_samples_per_s=ARTICLE_SAMPLES_PER_S)
    print(rec.headline(f"Ceilings for LLaMA-7B on one RTX 4090 with parameter offload: compute "
                       f"{ceiling['compute_samples_per_s']:.2f} samples/s at 100 % of peak, PCIe "
                       f"{ceiling['pcie_samples_per_s']:.2f} samples/s; article 001 claims {ARTICLE_SAMPLES_PER_S:g}."))
    """),
    md("""
    ## 4. Environment: can this machine do NVMe offload?

    NVMe offload needs DeepSpeed's `async_io` op (built against libaio) and free space at the NVMe path. The same
    checks as notebook 00, for the NVMe plan.
    """),
    code("""
    nvme_plan = run_plan.replace(offload_optimizer="nvme", offload_param="nvme", nvme_path=NVME_DIR)
    checked = env.check(nvme_plan, run_allreduce=False)
    NVME_OK = bool((checked.facts.get("ds_ops") or {}).get("async_io"))
    nvme_checks = checked.to_frame()
    nvme_checks = nvme_checks[nvme_checks["name"].str.contains("nvme|deepspeed_ops|host_memory|build", regex=True)]
    rec.add(nvme_possible=NVME_OK, env_verdict=checked.verdict)
    print(f"async_io usable here: {NVME_OK}")
    rec.table("checks for NVMe offload on this machine", nvme_checks)
    """),
    md("""
    ## 5. The config, and article 001's

    The cookbook's config for the run, the NVMe variant as a diff against it, and the linter on the config article
    001 printed — Python `True` inside JSON, `train_batch_size` that disagrees with the micro batch and accumulation,
    and an `activation_checkpointing` block that does nothing for a Hugging Face model.
    """),
    code("""
    run_config = dsconfig.build_config(run_plan, "accelerate", lr=LR, warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS)
    nvme_config = dsconfig.build_config(nvme_plan, "accelerate", lr=LR, warmup_steps=WARMUP_STEPS, total_steps=MAX_STEPS)
    rec.add(config=run_config, nvme_config=nvme_config)
    print(json.dumps(run_config, indent=2))
    rec.table("NVMe offload: changed vs CPU offload", dsconfig.diff(run_config, nvme_config).to_frame())
    """),
    code("""
    article_lint = lint.lint(report.article_config_path("001_llama7b_ds_config"), world_size=1, mode="accelerate",
                             gpu="RTX 4090", model=TARGET_MODEL)
    rec.add(article_lint_errors=len(article_lint.errors))
    rec.table("lint of article 001's config", article_lint.to_frame())
    """),
    md("""
    ## 6. Launch: ZeRO-3 with CPU offload on one rank

    One rank, so ZeRO partitions nothing; the offload is what moves the states. We expect a completed run with a
    falling loss, and the final 16-bit model saved and verified.
    """),
    code("""
    result = launch(run_plan, Path(OUTPUT_DIR) / "cpu_offload", config=run_config, max_steps=MAX_STEPS, lr=LR,
                    warmup_steps=WARMUP_STEPS, emulate_gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or None,
                    hang_timeout_s=HANG_TIMEOUT_S)
    runs = {run_plan.label: result}
    rec.run(run_plan.label, result)
    rec.headline(f"{run_plan.label} run ({report.hardware_label(result)}): {result.status} — {result.message}")
    result
    """),
    code("""
    print("exact launch command:\\n" + result.command)
    """),
    md("""
    ## 7. The NVMe option

    The same run with the states on the SSD — when this machine's DeepSpeed can do asynchronous I/O. Otherwise the
    result records why it was skipped and how to fix it (it is not faked).
    """),
    code("""
    if TRY_NVME and NVME_OK:
        Path(NVME_DIR).mkdir(parents=True, exist_ok=True)
        nvme = launch(nvme_plan, Path(OUTPUT_DIR) / "nvme_offload", config=nvme_config, max_steps=MAX_STEPS, lr=LR,
                      warmup_steps=WARMUP_STEPS, emulate_gpu_memory_gib=EMULATE_GPU_MEMORY_GIB or None,
                      final_save=False, hang_timeout_s=HANG_TIMEOUT_S)
        runs[nvme_plan.label] = nvme
        rec.run(nvme_plan.label, nvme)
        rec.add(nvme_status=nvme.status)
        print(nvme)
    else:
        why = ("TRY_NVME is False" if not TRY_NVME else
               f"DeepSpeed's async_io op is not usable here ({checked['deepspeed_ops'].value}); fix: {env.LIBAIO_PACKAGES}")
        rec.add(nvme_status="skipped", nvme_skipped_reason=why)
        print("NVMe run skipped:", why)
    """),
    md("""
    ## 8. Metrics, the saved model, memory and throughput
    """),
    code("""
    rec.figure(report.plot_loss({f"{k} ({report.hardware_label(v)})": v for k, v in runs.items()}), "loss")
    """),
    code("""
    saved = report.inspect_saved_model(Path(result.run_dir) / "final_model") if result.ok else None
    rec.add(save_verification=(result.summary or {}).get("save_verification"), saved_model=saved)
    print(json.dumps(saved, indent=1, default=str))
    """),
    code("""
    run_estimate = memory.estimate(run_plan, device="cpu" if REHEARSAL else "cuda", ds_config=run_config)
    rec.table("estimate beside measurement (CPU offload run)", report.tidy_frame(memory.compare(run_estimate, result.summary or {}), rehearsal=False))
    rec.table("memory and throughput", report.runs_frame(runs))
    """),
    code("""
    rec.figure(report.plot_runs(runs), "memory_throughput")
    """),
    *reference_cells("06", "runs"),
    md("""
    ## 9. The verdict

    For LLaMA-7B on one RTX 4090: the GPU is not the limit once the states are offloaded — the host RAM is. With
    64 GiB, offload to NVMe; with ~192 GiB or more, CPU offload; and expect throughput well under the article's.
    """),
    code("""
    verdict = (f"LLaMA-7B on 1 × {GPU_MEMORY_GIB:g} GiB with {TARGET_HOST_MEMORY_GIB:g} GiB RAM: "
               f"{chosen.verdict if chosen else 'nothing fits'}")
    rec.add(verdict=verdict, run_status=result.status)
    print(rec.headline(verdict))
    """),
]


NOTEBOOK_CELLS = {
    "00_environment": NB00,
    "01_oom_reproduction": NB01,
    "02_zero2": NB02,
    "03_zero3": NB03,
    "04_zero3_offload": NB04,
    "05_final_8x4090": NB05,
    "06_final_1x4090": NB06,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed notebook differs from this source")
    args = parser.parse_args(argv)
    NOTEBOOKS.mkdir(exist_ok=True)
    stale = []
    for stem, cells in NOTEBOOK_CELLS.items():
        text = nbformat.writes(build(stem, cells)) + "\n"
        path = NOTEBOOKS / f"{stem}.ipynb"
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"out of date (run python scripts/make_notebooks.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
