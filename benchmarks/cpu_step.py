"""Serial CPU part of a ZeRO-2 + optimizer-offload step, against the host's memory bandwidth (issue 32, item 3).

    python -m benchmarks.cpu_step --params 3.4e9 --chunks 1,2,4,8,16 --threads 16 --device cuda --out cpu_step.json

What DeepSpeed 0.19.8 does (``deepspeed/runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.step``, the
``if self.cpu_offload:`` branch of "Step 2", per param group): ``self._optimizer_step(i)`` (DeepSpeedCPUAdam over the
whole fp32 partition, ``deepspeed/ops/adam/cpu_adam.py`` ``DeepSpeedCPUAdam.step`` -> the C++
``ds_opt_adam.adam_update``), then ``bit16_partition_buffer.data.copy_(fp32_partition.data)`` (the fp32 -> bf16 cast
into a pinned host buffer), then ``bit16_partitions[partition_id].data.copy_(bit16_partition_buffer.data,
non_blocking=True)`` (the host-to-GPU copy). The three run one after another; nothing overlaps them.

This benchmark rebuilds that sequence on flat tensors (one param group, as the cookbook's ZeRO-2 run has) and times:

* ``serial``: Adam, cast, H2D copy as DeepSpeed does them (each part timed inside the sequence, and the whole);
* ``chunked_cpu_cast`` (K chunks): Adam of chunk i on the main thread while a worker thread casts chunk i-1 into the
  pinned staging buffer and issues its non-blocking H2D copy on a side CUDA stream (Megatron-LM-style);
* ``chunked_gpu_cast`` (K chunks, ``--device cuda`` only): after Adam of chunk i the main thread issues a non-blocking
  H2D copy of the fp32 chunk (from pinned fp32 params, which DeepSpeed holds when ``pin_memory`` is on) and casts it
  to bf16 on the GPU; no CPU cast at all, the copy engine overlaps the next chunk's Adam.

Every variant starts from the same state and runs the same steps; its final fp32 params and bf16 copy are compared
bit for bit with the serial run's. Chunk boundaries are multiples of ``ALIGN`` elements, so each chunk's AVX/scalar
split inside DeepSpeedCPUAdam (``csrc/includes/cpu_adam.h`` ``Step_AVX``: blocks of ``SIMD_WIDTH * span``, scalar
tail in ``Step_1``) matches the whole tensor's; elements are otherwise independent in Adam, so the result is exact.

A STREAM-like probe (copy, triad, torch on CPU tensors, same thread count) gives the machine's bandwidth; Adam's
achieved GB/s is ``ADAM_BYTES_PER_PARAM * params / adam_s``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ALIGN = 4096
"""Chunk boundaries are multiples of this many elements (a multiple of DeepSpeedCPUAdam's SIMD block, 128 on
AVX-512, and of a 4 KiB page of bf16/fp32 data)."""

ADAM_BYTES_PER_PARAM = 28
"""DRAM bytes DeepSpeedCPUAdam moves per fp32 parameter (``Step_AVX`` in ``csrc/includes/cpu_adam.h``): it loads
grad, param, exp_avg, exp_avg_sq (4 x 4 B) and stores param, exp_avg, exp_avg_sq (3 x 4 B) in place. The stored
lines were just read, so a write-allocate costs no extra traffic: 16 + 12 = 28 B."""

CAST_BYTES_PER_PARAM = 6
"""fp32 -> bf16 cast: read 4 B of fp32 param, write 2 B of bf16 (not counting a write-allocate read)."""

H2D_BYTES_PER_PARAM = 2
"""Host-to-device copy of the bf16 params: 2 B per parameter over PCIe (read from pinned host memory by DMA)."""

LR, BETAS, EPS, WEIGHT_DECAY = 1e-4, (0.9, 0.95), 1e-8, 0.01


class UsageError(ValueError):
    """Bad command-line input; the message names the flag, the value and the fix."""


def parse_params(text: str) -> int:
    """``--params`` (a count of parameters, ``3.4e9`` or ``2000000``) -> int; UsageError if not a positive number."""
    try:
        n = int(float(text))
    except (TypeError, ValueError):
        raise UsageError(f"--params {text!r}: not a number; give a parameter count such as 3.4e9") from None
    if n <= 0:
        raise UsageError(f"--params {text!r}: must be positive; give a parameter count such as 3.4e9")
    return n


def parse_chunks(text: str) -> list[int]:
    """``--chunks`` (comma-separated chunk counts, ``1,4,8,16``) -> list of ints; UsageError if any is < 1."""
    try:
        ks = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--chunks {text!r}: not a comma-separated list of integers; e.g. --chunks 1,4,8,16") from None
    if not ks or any(k < 1 for k in ks):
        raise UsageError(f"--chunks {text!r}: every chunk count must be >= 1; e.g. --chunks 1,4,8,16")
    return ks


def check_device(device: str) -> str:
    """``--device`` -> 'cuda' or 'cpu'; UsageError for anything else, or for cuda without a GPU."""
    if device not in ("cuda", "cpu"):
        raise UsageError(f"--device {device!r}: unknown device; use --device cuda (one NVIDIA GPU) or --device cpu")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA GPU visible to torch; use --device cpu on this machine")
    return device


def chunk_bounds(n: int, k: int, align: int = ALIGN) -> list[tuple[int, int]]:
    """Split ``[0, n)`` into at most ``k`` contiguous ``(start, end)`` ranges whose starts are multiples of ``align``
    elements; fewer than ``k`` ranges when ``n`` is too small for ``k`` aligned chunks. ValueError if n < 1 or k < 1."""
    if n < 1 or k < 1:
        raise ValueError(f"chunk_bounds: n={n} and k={k} must both be >= 1")
    size = -(-(-(-n // k)) // align) * align
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def _cache_cpuinfo():
    """DeepSpeedCPUAdam.__init__ calls ``cpuinfo.get_cpu_info()`` (subprocesses, ~1 s) only to read the vendor; one
    fresh optimizer per variant would pay that each time, so the answer is cached (the CPU does not change)."""
    import functools
    import cpuinfo
    if not hasattr(cpuinfo.get_cpu_info, "cache_info"):
        cpuinfo.get_cpu_info = functools.lru_cache(maxsize=1)(cpuinfo.get_cpu_info)


def _median(xs):
    return statistics.median(xs) if xs else None


class Bench:
    """The fp32 state (params, grads, exp_avg, exp_avg_sq on the CPU, as DeepSpeedCPUAdam holds them), the bf16
    pinned staging buffer and the bf16 destination (on the GPU for ``device='cuda'``, else on the CPU)."""

    def __init__(self, n: int, device: str, adam: str, cast_threads: int, seed: int = 1234):
        import torch
        self.torch, self.n, self.device, self.adam, self.cast_threads = torch, n, device, adam, cast_threads
        cuda = device == "cuda"
        self.p = torch.empty(n, dtype=torch.float32, pin_memory=cuda)
        self.g = torch.empty(n, dtype=torch.float32)
        self.m = torch.empty(n, dtype=torch.float32)
        self.v = torch.empty(n, dtype=torch.float32)
        self.staging = torch.empty(n, dtype=torch.bfloat16, pin_memory=cuda)
        self.dst = torch.empty(n, dtype=torch.bfloat16, device=device) if cuda else self.staging
        gen = torch.Generator().manual_seed(seed)
        self._p0 = torch.randn(1 << 20, generator=gen) * 0.02
        g0 = torch.randn((1 << 20) + 17, generator=gen) * 1e-3     # another period than p's, so p and g decorrelate
        self._tile(self.g, g0)
        self.reset()
        self.stream = torch.cuda.Stream() if cuda else None

    @staticmethod
    def _tile(dst, block):
        b = block.numel()
        full = dst.numel() // b * b
        if full:
            dst[:full].view(-1, b).copy_(block)
        dst[full:].copy_(block[:dst.numel() - full])

    def reset(self):
        """Back to the initial state: the same params, exp_avg = exp_avg_sq = 0, step 0 (grads never change)."""
        self._tile(self.p, self._p0)
        self.m.zero_()
        self.v.zero_()
        self.staging.zero_()
        if self.device == "cuda":
            self.dst.zero_()
            self.sync()   # the variants copy on a side stream: the zeroing must not land after their copies

    def optimizer(self, bounds):
        """An optimizer with one param group per chunk: views of p (grad = view of g) whose state points at views of
        m and v, so no state is allocated. DeepSpeedCPUAdam (``--adam deepspeed``) or torch AdamW (``--adam torch``,
        fused CPU kernel), both AdamW with the module's LR, BETAS, EPS, WEIGHT_DECAY."""
        torch = self.torch
        groups = []
        for a, b in bounds:
            p = self.p[a:b]
            p.grad = self.g[a:b]
            groups.append({"params": [p]})
        if self.adam == "deepspeed":
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            _cache_cpuinfo()
            opt = DeepSpeedCPUAdam(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, adamw_mode=True)
            step0 = lambda: 0  # noqa: E731
        else:
            opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, fused=True)
            step0 = lambda: torch.tensor(0.0)  # noqa: E731
        for grp, (a, b) in zip(opt.param_groups, bounds):
            opt.state[grp["params"][0]] = {"step": step0(), "exp_avg": self.m[a:b], "exp_avg_sq": self.v[a:b]}
        return opt

    @staticmethod
    def step_group(opt, i):
        """Step param group ``i`` alone, as ``DeepSpeedZeroOptimizer._optimizer_step`` does (swap param_groups)."""
        groups = opt.param_groups
        opt.param_groups = [groups[i]]
        try:
            opt.step()
        finally:
            opt.param_groups = groups

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    # ---- the variants: each runs `steps` optimizer steps from the current state, returns per-step timings ----
    def run_serial(self, steps: int) -> list[dict]:
        """DeepSpeed's order: Adam over everything, then the cast into staging, then the H2D copy."""
        opt = self.optimizer([(0, self.n)])
        out = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.step_group(opt, 0)
            t1 = time.perf_counter()
            self.staging.copy_(self.p)
            t2 = time.perf_counter()
            if self.device == "cuda":
                self.dst.copy_(self.staging, non_blocking=True)
                self.sync()
            t3 = time.perf_counter()
            out.append({"adam_s": t1 - t0, "cast_s": t2 - t1, "h2d_s": (t3 - t2) if self.device == "cuda" else None,
                        "total_s": t3 - t0})
        return out

    def run_chunked_cpu_cast(self, steps: int, k: int) -> list[dict]:
        """Adam of chunk i (main thread) overlaps cast + non-blocking H2D copy of earlier chunks (worker thread)."""
        import queue
        import threading
        torch = self.torch
        bounds = chunk_bounds(self.n, k)
        opt = self.optimizer(bounds)
        work: queue.Queue = queue.Queue()
        errors: list = []

        def worker():
            torch.set_num_threads(self.cast_threads)   # this thread's OpenMP team only
            while True:
                item = work.get()
                if item is None:
                    return
                a, b, done = item
                try:
                    self.staging[a:b].copy_(self.p[a:b])
                    if self.device == "cuda":
                        with torch.cuda.stream(self.stream):
                            self.dst[a:b].copy_(self.staging[a:b], non_blocking=True)
                except BaseException as e:  # surfaced by the main thread
                    errors.append(e)
                if done is not None:
                    done.set()

        th = threading.Thread(target=worker, daemon=True)
        th.start()
        out = []
        try:
            for _ in range(steps):
                t0 = time.perf_counter()
                adam = 0.0
                for i, (a, b) in enumerate(bounds):
                    s = time.perf_counter()
                    self.step_group(opt, i)
                    adam += time.perf_counter() - s
                    work.put((a, b, None))
                t1 = time.perf_counter()
                done = threading.Event()
                work.put((0, 0, done))
                done.wait()
                if self.stream is not None:
                    self.stream.synchronize()
                t2 = time.perf_counter()
                if errors:
                    raise errors[0]
                out.append({"adam_s": adam, "adam_loop_s": t1 - t0, "drain_s": t2 - t1, "total_s": t2 - t0})
        finally:
            work.put(None)
            th.join()
        return out

    def run_chunked_gpu_cast(self, steps: int, k: int) -> list[dict]:
        """After Adam of chunk i: non-blocking H2D copy of the fp32 chunk (pinned) and the bf16 cast on the GPU, on a
        side stream, while the CPU goes on with chunk i+1. Two device fp32 chunk buffers in a ring (stream order
        keeps reuse safe)."""
        torch = self.torch
        bounds = chunk_bounds(self.n, k)
        opt = self.optimizer(bounds)
        size = bounds[0][1] - bounds[0][0]
        ring = [torch.empty(size, dtype=torch.float32, device="cuda") for _ in range(min(2, len(bounds)))]
        out = []
        for _ in range(steps):
            t0 = time.perf_counter()
            adam = 0.0
            for i, (a, b) in enumerate(bounds):
                s = time.perf_counter()
                self.step_group(opt, i)
                adam += time.perf_counter() - s
                buf = ring[i % len(ring)][: b - a]
                with torch.cuda.stream(self.stream):
                    buf.copy_(self.p[a:b], non_blocking=True)
                    self.dst[a:b].copy_(buf)
            t1 = time.perf_counter()
            self.stream.synchronize()
            t2 = time.perf_counter()
            out.append({"adam_s": adam, "adam_loop_s": t1 - t0, "drain_s": t2 - t1, "total_s": t2 - t0})
        del ring
        return out

    def same_as(self, ref_p, ref_dst) -> dict:
        """Bit-identity of the fp32 params and the bf16 copy with a reference (compared as raw bits)."""
        torch = self.torch
        return {"fp32_params_identical": bool(torch.equal(self.p.view(torch.int32), ref_p.view(torch.int32))),
                "bf16_copy_identical": bool(torch.equal(self.dst.view(torch.int16), ref_dst.view(torch.int16)))}


def stream_probe(n_elems: int, reps: int = 5) -> dict:
    """STREAM-like copy (``b = a``, 8 B/elem), triad (``a = b + s*c``, 12 B/elem) and read (``a.sum()``, 4 B/elem)
    on fp32 CPU tensors of ``n_elems`` elements with torch's current thread count; best and median GB/s (1e9 B/s)
    over ``reps``, and ``best_gbs`` over the three. With few threads torch's kernels are compute-bound, so this is a
    lower bound of the DRAM limit (``bandwidth.probe_below_adam`` says when Adam itself beat it)."""
    import torch
    a = torch.ones(n_elems)
    b = torch.full((n_elems,), 2.0)
    c = torch.full((n_elems,), 0.5)
    res = {}
    for name, fn, nbytes in (("copy", lambda: b.copy_(a), 8), ("triad", lambda: torch.add(b, c, alpha=3.0, out=a), 12),
                             ("read", lambda: a.sum(), 4)):
        fn()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        res[f"{name}_best_gbs"] = nbytes * n_elems / min(ts) / 1e9
        res[f"{name}_median_gbs"] = nbytes * n_elems / statistics.median(ts) / 1e9
    res["best_gbs"] = max(res[f"{k}_best_gbs"] for k in ("copy", "triad", "read"))
    res["array_elems"] = n_elems
    res["array_gib"] = n_elems * 4 / 2**30
    return res


def machine_info(device: str, threads: int) -> dict:
    import psutil
    import torch
    info = {"cpu_cores": os.cpu_count(), "threads": threads, "host_memory_gib": psutil.virtual_memory().total / 2**30,
            "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
            "torch": torch.__version__, "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import deepspeed
        info["deepspeed"] = deepspeed.__version__
    except Exception as e:  # recorded, not fatal: --adam torch does not need it
        info["deepspeed"] = f"unavailable: {type(e).__name__}"
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def summarise(rows: list[dict], warmup: int) -> dict:
    """Medians over the timed steps (after ``warmup``) of every key of the per-step rows."""
    timed = rows[warmup:] or rows
    keys = [k for k in timed[0] if timed[0][k] is not None]
    return {k: _median([r[k] for r in timed]) for k in keys}


def run(n: int, chunks: list[int], threads: int, device: str, adam: str, reps: int = 3, warmup: int = 1,
        cast_threads: int | None = None, stream_elems: int | None = None, out: Path | None = None) -> dict:
    """Run every measurement; return the record (also written to ``out`` after each phase, so a run stopped by a
    time limit keeps what it measured). Bit-identity: every variant runs ``warmup + reps`` steps from the same
    initial state as the serial reference, then its fp32 params and bf16 copy are compared with the serial run's."""
    import torch
    torch.set_num_threads(threads)
    cast_threads = cast_threads or max(1, threads // 4)
    steps = warmup + reps
    rec: dict = {"what": "serial CPU part of a ZeRO-2 + offload_optimizer step (Adam, fp32->bf16 cast, H2D copy) vs "
                         "chunked overlapped variants; times in seconds (median of timed steps), bandwidth in GB/s "
                         "(1e9 B/s)",
                 "argv": sys.argv[1:], "params": n, "device": device, "adam": adam, "threads": threads,
                 "cast_threads": cast_threads, "reps": reps, "warmup": warmup, "align_elems": ALIGN,
                 "bytes_per_param": {"adam": ADAM_BYTES_PER_PARAM, "cast": CAST_BYTES_PER_PARAM,
                                     "h2d": H2D_BYTES_PER_PARAM},
                 "adam_bytes_note": "DeepSpeedCPUAdam Step_AVX reads g, p, m, v (16 B) and writes p, m, v (12 B) "
                                    "per fp32 param; torch fused AdamW moves the same streams",
                 "machine": machine_info(device, threads), "phases_s": {}}

    def save():
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(rec, indent=1))

    t = time.perf_counter()
    if adam == "deepspeed":   # JIT build/load of the cpu_adam op first: a failed build stops the run before 22 B/param
        from deepspeed.ops.op_builder import CPUAdamBuilder
        CPUAdamBuilder().load()
    rec["phases_s"]["adam_op_load"] = time.perf_counter() - t

    t = time.perf_counter()
    rec["stream"] = stream_probe(stream_elems or max(1 << 16, min(n, 1 << 28)))
    rec["phases_s"]["stream"] = time.perf_counter() - t
    save()

    t = time.perf_counter()
    bench = Bench(n, device, adam, cast_threads)
    rec["phases_s"]["allocate_init"] = time.perf_counter() - t

    t = time.perf_counter()
    rows = bench.run_serial(steps)
    ser = summarise(rows, warmup)
    ref_p = bench.p.clone()
    ref_dst = bench.dst.clone()
    rec["serial"] = {**ser, "steps": rows}
    rec["phases_s"]["serial"] = time.perf_counter() - t
    stream_bw = rec["stream"]["triad_best_gbs"]
    rec["bandwidth"] = {
        "adam_gbs": ADAM_BYTES_PER_PARAM * n / ser["adam_s"] / 1e9,
        "cast_gbs": CAST_BYTES_PER_PARAM * n / ser["cast_s"] / 1e9,
        "h2d_gbs": H2D_BYTES_PER_PARAM * n / ser["h2d_s"] / 1e9 if ser.get("h2d_s") else None,
        "stream_triad_best_gbs": stream_bw, "stream_copy_best_gbs": rec["stream"]["copy_best_gbs"]}
    rec["bandwidth"]["adam_fraction_of_triad"] = rec["bandwidth"]["adam_gbs"] / stream_bw
    rec["bandwidth"]["adam_fraction_of_copy"] = rec["bandwidth"]["adam_gbs"] / rec["stream"]["copy_best_gbs"]
    rec["bandwidth"]["adam_fraction_of_probe_best"] = rec["bandwidth"]["adam_gbs"] / rec["stream"]["best_gbs"]
    rec["bandwidth"]["probe_below_adam"] = rec["bandwidth"]["adam_gbs"] > rec["stream"]["best_gbs"]
    copy_part = ser["cast_s"] + (ser.get("h2d_s") or 0.0)
    rec["bounds_s"] = {
        "serial_sum": ser["adam_s"] + copy_part,
        "ideal_overlap": max(ser["adam_s"], copy_part),
        "adam_at_triad_bandwidth": ADAM_BYTES_PER_PARAM * n / stream_bw / 1e9,
        "adam_plus_cast_at_triad_bandwidth": (ADAM_BYTES_PER_PARAM + CAST_BYTES_PER_PARAM) * n / stream_bw / 1e9,
        "note": "ideal_overlap = max(adam, cast + h2d): what a perfect pipeline could reach if the cast did not share "
                "memory bandwidth with Adam; *_at_triad_bandwidth: the DRAM-traffic floor at STREAM triad speed"}
    rec["variants"] = {}
    save()

    kinds = ["chunked_cpu_cast"] + (["chunked_gpu_cast"] if device == "cuda" else [])
    for kind in kinds:
        for k in chunks:
            t = time.perf_counter()
            bench.reset()
            fn = bench.run_chunked_cpu_cast if kind == "chunked_cpu_cast" else bench.run_chunked_gpu_cast
            rows = fn(steps, k)
            s = summarise(rows, warmup)
            ident = bench.same_as(ref_p, ref_dst)
            rec["variants"][f"{kind}_{k}"] = {
                "kind": kind, "chunks_requested": k, "chunks": len(chunk_bounds(n, k)), **s, **ident,
                "serial_over_this": ser["total_s"] / s["total_s"], "steps": rows}
            rec["phases_s"][f"{kind}_{k}"] = time.perf_counter() - t
            save()
    rec["all_identical"] = all(v["fp32_params_identical"] and v["bf16_copy_identical"]
                               for v in rec["variants"].values())
    best = min(rec["variants"].items(), key=lambda kv: kv[1]["total_s"], default=None)
    if best:
        rec["best"] = {"variant": best[0], "total_s": best[1]["total_s"], "serial_total_s": ser["total_s"],
                       "hidden_s": ser["total_s"] - best[1]["total_s"]}
    save()
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", default="3.4e9", help="fp32 parameters in the offloaded partition (default 3.4e9)")
    p.add_argument("--chunks", default="1,4,8,16", help="comma-separated chunk counts K for the chunked variants")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads (OpenMP) for Adam and probes")
    p.add_argument("--cast-threads", type=int, default=None, help="threads of the chunked cast worker "
                   "(default threads // 4)")
    p.add_argument("--device", default="cuda", help="cuda (bf16 copy to the GPU) or cpu (no H2D copy)")
    p.add_argument("--adam", default="deepspeed", choices=("deepspeed", "torch"),
                   help="deepspeed: DeepSpeedCPUAdam (JIT-built on first use); torch: torch AdamW fused CPU kernel")
    p.add_argument("--reps", type=int, default=3, help="timed steps per variant (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps before them")
    p.add_argument("--stream-elems", type=float, default=None, help="elements per STREAM array (default min(params, 2^28))")
    p.add_argument("--out", default=None, help="write the JSON record here (also printed)")
    a = p.parse_args(argv)
    try:
        n = parse_params(a.params)
        chunks = parse_chunks(a.chunks)
        if a.threads < 1:
            raise UsageError(f"--threads {a.threads}: must be >= 1; e.g. --threads {os.cpu_count()}")
        if a.cast_threads is not None and a.cast_threads < 1:
            raise UsageError(f"--cast-threads {a.cast_threads}: must be >= 1 or left out")
        if a.reps < 1 or a.warmup < 0:
            raise UsageError(f"--reps {a.reps} / --warmup {a.warmup}: need reps >= 1 and warmup >= 0")
        # Both OpenMP runtimes (torch's and the one the cpu_adam op links) read this at start-up.
        os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
        device = check_device(a.device)
        import psutil
        need = 22 * n + 12 * int(a.stream_elems or min(n, 1 << 28))
        avail = psutil.virtual_memory().available
        if need > 0.9 * avail:
            raise UsageError(f"--params {a.params}: needs ~{need / 2**30:.1f} GiB of host memory (22 B/param: p, g, "
                             f"m, v, bf16 staging, reference copy), {avail / 2**30:.1f} GiB available; lower --params")
    except UsageError as e:
        print(f"cpu_step: {e}", file=sys.stderr)
        return 2
    rec = run(n, chunks, a.threads, device, a.adam, reps=a.reps, warmup=a.warmup, cast_threads=a.cast_threads,
              stream_elems=int(a.stream_elems) if a.stream_elems else None, out=Path(a.out) if a.out else None)
    short = {k: v for k, v in rec.items() if k not in ("serial", "variants")}
    short["serial"] = {k: v for k, v in rec["serial"].items() if k != "steps"}
    short["variants"] = {name: {k: v for k, v in x.items() if k != "steps"} for name, x in rec["variants"].items()}
    print(json.dumps(short, indent=1))
    return 0 if rec["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
