"""Hardware ceilings that bound a ZeRO-offload training step: PCIe copies, bf16 matmul, CPU Adam.

Run on the GPU machine (``python -m benchmarks.ceilings --out ceilings.json``); on a CPU-only box the
GPU rows are recorded as not measured and only the CPU Adam rate is taken (a rehearsal of the script).

What is measured (each the median of timed repetitions after warm-up, wall clock around
``torch.cuda.synchronize``):

* ``h2d_gb_s`` / ``d2h_gb_s``: pinned host <-> device copy of one 1 GiB buffer, GB/s (1e9 bytes/s) —
  the path DeepSpeed's offload uses (pinned buffers, ``non_blocking`` copies).
* ``bf16_matmul_tflops``: ``torch.matmul`` of two 8192 x 8192 bf16 matrices, 2*8192^3 FLOPs each.
* ``cpu_adam_params_per_s``: ``DeepSpeedCPUAdam.step()`` (``deepspeed/ops/adam/cpu_adam.py``, AVX
  kernel JIT-built by DeepSpeed's op builder) over fp32 parameters with fp32 gradients, the update
  ZeRO-Offload runs on the host (Ren et al. 2021, "ZeRO-Offload", Section 5.1), params/s; with the
  number of OpenMP threads the run was given (``torch.get_num_threads()``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

GIB = 2 ** 30


def _median_time(fn, repeats: int, warmup: int, sync) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pcie_bandwidth(nbytes: int = GIB, repeats: int = 10) -> dict:
    """Pinned host<->device copy bandwidth of ``nbytes`` bytes, GB/s (1e9 bytes per second)."""
    import torch
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    sync = torch.cuda.synchronize
    t_h2d = _median_time(lambda: dev.copy_(host, non_blocking=True), repeats, 2, sync)
    t_d2h = _median_time(lambda: host.copy_(dev, non_blocking=True), repeats, 2, sync)
    del host, dev
    torch.cuda.empty_cache()
    return {"h2d_gb_s": nbytes / t_h2d / 1e9, "d2h_gb_s": nbytes / t_d2h / 1e9, "copy_bytes": nbytes}


def matmul_rate(n: int = 8192, repeats: int = 10) -> dict:
    """Dense bf16 matmul rate, TFLOP/s (2*n^3 FLOPs per product)."""
    import torch
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = _median_time(lambda: torch.matmul(a, b), repeats, 3, torch.cuda.synchronize)
    return {"bf16_matmul_tflops": 2 * n ** 3 / t / 1e12, "matmul_n": n}


def cpu_adam_rate(num_params: int = 500_000_000, repeats: int = 5) -> dict:
    """``DeepSpeedCPUAdam.step()`` throughput over ``num_params`` fp32 parameters, params/s."""
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    t_build = time.perf_counter()
    p = torch.nn.Parameter(torch.zeros(num_params, dtype=torch.float32))
    p.grad = torch.randn(num_params, dtype=torch.float32) * 1e-3
    opt = DeepSpeedCPUAdam([p], lr=1e-4, adamw_mode=True)
    t_build = time.perf_counter() - t_build  # includes the JIT build on a fresh machine
    t = _median_time(opt.step, repeats, 1, lambda: None)
    return {"cpu_adam_params_per_s": num_params / t, "cpu_adam_params": num_params,
            "cpu_adam_threads": torch.get_num_threads(), "cpu_adam_setup_s": t_build}


def versions() -> dict:
    """Library versions, the GPU, the CPU count: what the numbers were measured with."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("torch", "deepspeed", "transformers", "accelerate", "datasets"):
        try:
            mod = __import__(name)
            out[name] = getattr(mod, "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            out[name] = f"not importable: {type(exc).__name__}"
    try:
        import torch
        out["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            out["gpu_memory_gib"] = torch.cuda.get_device_properties(0).total_memory / GIB
    except Exception:  # noqa: BLE001
        pass
    out["cpu_count"] = os.cpu_count()
    try:
        out["cpu_affinity"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        import psutil
        out["host_memory_gib"] = psutil.virtual_memory().total / GIB
    except Exception:  # noqa: BLE001
        pass
    try:
        with open("/proc/cpuinfo") as f:
            out["cpu_model"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    return out


def measure(adam_params: int = 500_000_000) -> dict:
    """All ceilings available on this machine, with versions; GPU rows are None without CUDA."""
    import torch
    out = {"versions": versions(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if torch.cuda.is_available():
        out.update(pcie_bandwidth())
        out.update(matmul_rate())
    else:
        out.update({"h2d_gb_s": None, "d2h_gb_s": None, "bf16_matmul_tflops": None,
                    "note": "no CUDA device: GPU ceilings not measured"})
    out.update(cpu_adam_rate(adam_params))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--adam-params", type=int, default=500_000_000, help="parameters in the CPU Adam test")
    args = p.parse_args(argv)
    res = measure(args.adam_params)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: v for k, v in res.items() if k != "versions"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
