"""Where DeepSpeed ZeRO-2 flattens the 16-bit parameters at initialisation, and what it costs (issue 31, class 2).

One GPU, one process: the model (random weights, bf16, built on the device by
:func:`cookbook.train.random_weights_model`) goes through ``deepspeed.initialize`` with the config the cookbook
builds for ZeRO-2 + optimizer offload to the CPU (:func:`cookbook.dsconfig.build_config`, preset ``zero2-offload``;
DeepSpeedCPUAdam). Recorded in one JSON: the free device memory DeepSpeed reads before it flattens (its own
``accelerator.available_memory()``: NVML's free memory on CUDA), the path it took (its log line "Flattening param
group 0 on ..."), ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` at the end of initialisation (the
ballast taken out), the host RSS peak, the time and the outcome, beside what :func:`cookbook.memory.flattens_on_gpu`
and :func:`cookbook.memory.estimate` predict for the same plan::

    python -m benchmarks.zero2_init_probe --model llama-7b --gpu-memory-gib 24 --mode ballast --out 7b.json   # GPU
    python -m benchmarks.zero2_init_probe --model tiny-llama --mode none --out t.json   # DS_ACCELERATOR=cpu
    python -m benchmarks.zero2_init_probe --model llama-7b --mode cap --device-total-gib 139.8 --dry --out p.json

Modes (``--mode``):

* ``ballast``: a real card of ``--gpu-memory-gib`` as NVML sees it. Before anything else one ``uint8`` tensor of
  (device total − card) bytes is allocated and kept alive, so NVML's free memory is the card minus what this
  process uses (CUDA context, parameters), and an allocation beyond the card fails on the device itself. No cap.
* ``cap``: ``torch.cuda.set_per_process_memory_fraction(card / total)``, how ``cookbook train
  --emulate-gpu-memory-gib`` emulates a card: NVML still sees the whole device, so DeepSpeed takes the device path.
* ``none``: neither (the only mode on DeepSpeed's CPU accelerator, ``DS_ACCELERATOR=cpu``).

``--dry``: the prediction only (no model, no DeepSpeed engine); its outcome is ``dry``, never ``ok``.

Outcome: ``ok`` (initialisation returned), ``oom`` (``torch.OutOfMemoryError``, its message kept), ``error`` (any
other exception, type and message), ``started`` (the JSON written before ``deepspeed.initialize``, left as it is
when the process is killed, e.g. by the host's OOM killer), ``dry``. Exit status 0 only for ``ok`` and ``dry``.
``measured.path`` / ``prediction.path``: ``device`` (DeepSpeed's "sufficient memory" branch, flattened on the
accelerator) or ``cpu`` (its "insufficient memory" branch). ``--available-memory-gib`` (tests only) replaces what
DeepSpeed reads at its check, to run its CPU branch on any machine.

Source of the path decision: DeepSpeed 0.19.8 ``runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.__init__``
(``available_memory >= flat_buffer_bytes``; "Flattening param group {i} on {device} (sufficient memory)" / "... on
CPU (insufficient memory)"), and ``accelerator/cuda_accelerator.py`` ``available_memory`` (``pynvml``
``nvmlDeviceGetMemoryInfo(...).free``, else total − ``memory_allocated``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

GIB = 2 ** 30
MODES = ("ballast", "cap", "none")
PINS = ("cookbook", "on", "off", "deepspeed")
FLATTEN_LINE = "Flattening param group"


class ProbeError(ValueError):
    """A probe flag out of its domain; the message names the flag, the value and the fix."""


def validate(args) -> None:
    """Check the parsed flags.

    Raises:
        ProbeError: unknown ``--mode``/``--pin``, a non-positive ``--gpu-memory-gib`` / ``--device-total-gib`` /
            ``--host-memory-gib``, a
            ``--device-total-gib`` below the card, or ``--mode cap --dry`` without ``--device-total-gib``.
    """
    if args.mode not in MODES:
        raise ProbeError(f"--mode {args.mode!r}: unknown; use one of {', '.join(MODES)} (ballast: a real card's NVML "
                         "view, cap: set_per_process_memory_fraction, none: no emulation, e.g. DS_ACCELERATOR=cpu)")
    if args.pin not in PINS:
        raise ProbeError(f"--pin {args.pin!r}: unknown; use one of {', '.join(PINS)} (cookbook: the config builder "
                         "decides from the host RAM, on/off: force offload_optimizer.pin_memory, deepspeed: the key "
                         "left out, DeepSpeed's default)")
    for flag, value in (("--gpu-memory-gib", args.gpu_memory_gib), ("--device-total-gib", args.device_total_gib),
                        ("--host-memory-gib", args.host_memory_gib)):
        if value is not None and not value > 0:
            raise ProbeError(f"{flag} {value:g}: must be a positive number of GiB (2**30 bytes), e.g. 24 for an "
                             "RTX 4090")
    if args.available_memory_gib is not None and not args.available_memory_gib >= 0:
        raise ProbeError(f"--available-memory-gib {args.available_memory_gib:g}: must be 0 or more GiB (0 makes "
                         "DeepSpeed take its CPU-flattening branch); leave it out to read the device")
    if args.device_total_gib is not None and args.device_total_gib < args.gpu_memory_gib:
        raise ProbeError(f"--device-total-gib {args.device_total_gib:g} is below --gpu-memory-gib "
                         f"{args.gpu_memory_gib:g}: the emulated card must fit in the device; lower --gpu-memory-gib")
    if args.dry and args.mode == "cap" and args.device_total_gib is None:
        raise ProbeError("--mode cap --dry: the prediction of a capped device needs its size; give "
                         "--device-total-gib (e.g. 139.8 for the H200) or drop --dry on the GPU")


def plan_and_config(model: str, gpu_memory_gib: float, *, host_memory_gib: float | None, pin: str = "cookbook",
                    bf16_states: bool = False, seq_len: int = 1024):
    """(plan, DeepSpeed config dict) of the probed run: the cookbook's ``zero2-offload`` preset on one GPU of
    ``gpu_memory_gib`` GiB, bf16, micro batch 1, ``seq_len`` tokens (the config builder,
    :func:`cookbook.dsconfig.build_config`, with ``host_memory_gib`` deciding ``pin_memory`` unless ``pin`` forces it:
    ``on``/``off`` set ``zero_optimization.offload_optimizer.pin_memory``, ``deepspeed`` removes the key so DeepSpeed's
    default applies — ``True`` in 0.19.8, ``runtime/zero/offload_config.py``, ``DeepSpeedZeroOffloadOptimizerConfig``).

    Raises:
        ProbeError: unknown ``pin``.
        cookbook.dsconfig.ConfigError, cookbook.plan.PlanError: from the builder and the plan.
        cookbook.models.ModelNotFoundError: ``model`` cannot be found locally.
    """
    from cookbook.dsconfig import build_config, preset_plan
    if pin not in PINS:
        raise ProbeError(f"--pin {pin!r}: unknown; use one of {', '.join(PINS)}")
    plan = preset_plan("zero2-offload", model=model, num_gpus=1, gpu_memory_gib=gpu_memory_gib,
                       host_memory_gib=host_memory_gib, seq_len=seq_len, micro_batch=1, grad_accum=1,
                       precision="bf16", gradient_checkpointing=True)
    cfg = build_config(plan, bf16_states=bf16_states)
    block = cfg["zero_optimization"]["offload_optimizer"]
    if pin in ("on", "off"):
        block["pin_memory"] = pin == "on"
    elif pin == "deepspeed":
        block.pop("pin_memory", None)
    return plan, cfg


def predict(plan, cfg: dict, *, mode: str, device_total_gib: float | None, bf16_states: bool = False) -> dict:
    """What the cookbook's estimator says about initialising ``plan`` (GiB unless named otherwise).

    ``path``: ``device`` (flattened on the accelerator) or ``cpu``. ``flattens_on_gpu``:
    :func:`cookbook.memory.flattens_on_gpu` with ``gpu_device_gib`` = the device in ``cap``
    mode (NVML sees it all), None otherwise (``ballast``: NVML sees the card; ``none``: no emulated card — the
    plan's card is still what is asked about). ``nvml_free_at_check_gib``: that function's model of the free memory
    at DeepSpeed's check (device − :data:`cookbook.memory.CUDA_CONTEXT_GIB` − p·N). ``init_peak_allocated_gib``:
    :func:`cookbook.memory.zero12_init_peak_bytes` (the estimate's initialisation term).
    ``estimate``: the whole estimate of the plan (training peak at micro batch 1, ``seq_len`` of the plan).
    """
    from cookbook import memory
    from cookbook.sizes import _bytes_per_state
    from cookbook.models import model_spec
    spec = model_spec(plan.model)
    p = _bytes_per_state(plan.precision, bf16_states)["param"]
    param_bytes = p * spec.num_params
    gpu_device_gib = device_total_gib if mode == "cap" else None
    on_gpu = memory.flattens_on_gpu(plan, param_bytes, gpu_device_gib=gpu_device_gib)
    device = plan.gpu_memory_gib if gpu_device_gib is None else gpu_device_gib
    e = memory.estimate(plan, spec=spec, ds_config=cfg, bf16_states=bf16_states, gpu_device_gib=gpu_device_gib)
    init = memory.zero12_init_peak_bytes(param_bytes, plan.num_gpus, on_gpu) / GIB
    return {
        "params": int(spec.num_params), "param_bytes": int(param_bytes), "param_gib": param_bytes / GIB,
        "gpu_device_gib": gpu_device_gib, "flattens_on_gpu": bool(on_gpu), "path": "device" if on_gpu else "cpu",
        "nvml_free_at_check_gib": device - memory.CUDA_CONTEXT_GIB - param_bytes / GIB,
        "init_peak_allocated_gib": init,
        "init_fits_card": init + memory.CUDA_CONTEXT_GIB <= plan.gpu_memory_gib,
        "host_init_transient_gib": (1 if on_gpu else 2) * param_bytes / GIB,
        "estimate": {"verdict": e.verdict, "fits_gpu": e.fits_gpu, "fits_host": e.fits_host,
                     "gpu_total_gib": e.gpu_gib["total"], "gpu_allocated_gib": e.gpu_allocated_gib,
                     "gpu_reserved_gib": e.gpu_reserved_gib, "host_total_gib": e.host_gib["total"],
                     "gpu_gib": e.gpu_gib, "host_gib": e.host_gib},
    }


class _FlattenLog(logging.Handler):
    """Keeps DeepSpeed's "Flattening param group ..." lines and calls ``on_line`` with each."""

    def __init__(self, on_line):
        super().__init__(level=logging.INFO)
        self.lines: list[str] = []
        self.on_line = on_line

    def emit(self, record):
        msg = record.getMessage()
        if FLATTEN_LINE in msg:
            self.lines.append(msg)
            self.on_line(msg)


def path_from_line(line: str | None) -> str | None:
    """``device`` / ``cpu`` from DeepSpeed's log line (``stage_1_and_2.py``: "... on CPU (insufficient memory)" is the
    CPU path; "... on {accelerator.device_name()} (sufficient memory)" the device path — on the CPU accelerator the
    device is ``cpu`` too, so the parenthesis decides), None without a line."""
    if not line:
        return None
    return "cpu" if "insufficient memory" in line else "device"


def _write(path: Path | None, rec: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(rec, indent=1, default=str))
        tmp.replace(path)


def run(args) -> dict:
    """Run the probe for the parsed ``args`` (see the module docstring); writes ``args.out`` at each stage.

    Raises:
        ProbeError: bad flags (:func:`validate`), ``--mode ballast|cap`` without a CUDA device, or a device
            smaller than the card in ``ballast`` mode.
    """
    validate(args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import psutil
    out = Path(args.out) if args.out else None
    host_gib = args.host_memory_gib or psutil.virtual_memory().total / GIB
    plan, cfg = plan_and_config(args.model, args.gpu_memory_gib, host_memory_gib=host_gib, pin=args.pin,
                                bf16_states=args.bf16_states, seq_len=args.seq_len)
    rec: dict = {"model": args.model, "mode": args.mode, "gpu_memory_gib": args.gpu_memory_gib, "pin": args.pin,
                 "bf16_states": args.bf16_states, "host_memory_gib": host_gib,
                 "pin_memory": cfg["zero_optimization"]["offload_optimizer"].get("pin_memory"),
                 "ds_config": cfg, "outcome": "dry" if args.dry else "started"}
    if args.dry:
        rec["prediction"] = predict(plan, cfg, mode=args.mode, device_total_gib=args.device_total_gib,
                                    bf16_states=args.bf16_states)
        _write(out, rec)
        return rec

    import torch
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    cuda = acc.device_name() == "cuda" and torch.cuda.is_available()
    if args.mode != "none" and not cuda:
        raise ProbeError(f"--mode {args.mode}: needs a CUDA GPU, and DeepSpeed's accelerator here is "
                         f"{acc.device_name()!r}; use --mode none (no emulation) or --dry (prediction only)")
    t0 = time.perf_counter()
    ballast = None
    rec["ballast_bytes"] = 0
    if cuda:
        torch.cuda.set_device(0)
        free0, total = torch.cuda.mem_get_info()
        rec["device"] = {"name": torch.cuda.get_device_name(0), "total_gib": total / GIB,
                         "free_at_start_gib": free0 / GIB}
        if args.device_total_gib is None:
            args.device_total_gib = total / GIB
        if args.mode == "ballast":
            nbytes = int(total - args.gpu_memory_gib * GIB)
            if nbytes <= 0:
                raise ProbeError(f"--gpu-memory-gib {args.gpu_memory_gib:g}: not below this device's "
                                 f"{total / GIB:.1f} GiB, no ballast to allocate; use a smaller card or --mode none")
            ballast = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            rec["ballast_bytes"] = nbytes
        elif args.mode == "cap":
            rec["cap_fraction"] = min(1.0, args.gpu_memory_gib * GIB / total)
            torch.cuda.set_per_process_memory_fraction(rec["cap_fraction"], 0)
        torch.cuda.reset_peak_memory_stats()
        rec["device"]["nvml_free_after_emulation_gib"] = acc.available_memory() / GIB
    rec["prediction"] = predict(plan, cfg, mode=args.mode, device_total_gib=args.device_total_gib,
                                bf16_states=args.bf16_states)
    import deepspeed.accelerator.cuda_accelerator as cuda_acc
    rec["available_memory_source"] = (("pynvml" if getattr(cuda_acc, "pynvml", None) else
                                       "total_memory - memory_allocated") if cuda else f"{acc.device_name()} accelerator")

    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29533"), ("RANK", "0"), ("LOCAL_RANK", "0"),
                 ("WORLD_SIZE", "1")):
        os.environ.setdefault(k, v)
    import deepspeed
    from deepspeed.utils import logger as ds_logger
    deepspeed.init_distributed(dist_backend=acc.communication_backend_name())

    from cookbook.models import resolve_model_path
    from cookbook.train import host_peak_rss_gib, random_weights_model
    measured: dict = {"available_memory_reads_gib": []}
    rec["measured"] = measured
    outcome, message = "error", None
    engine = None
    try:
        t = time.perf_counter()
        folder, _ = resolve_model_path(args.model)
        model = random_weights_model(folder, torch.bfloat16, "cuda" if cuda and args.build_on == "device" else "cpu",
                                     seed=0)
        measured["model_build_s"] = time.perf_counter() - t
        if cuda:
            torch.cuda.synchronize()
            measured["allocated_after_model_gib"] = (torch.cuda.memory_allocated() - rec["ballast_bytes"]) / GIB
        measured["nvml_free_before_optimizer_gib"] = acc.available_memory() / GIB

        # what DeepSpeed itself reads at its check, kept as it returns it
        orig = acc.available_memory

        def reading(*a, **kw):
            value = orig(*a, **kw) if args.available_memory_gib is None else int(args.available_memory_gib * GIB)
            measured["available_memory_reads_gib"].append(value / GIB)
            return value

        def on_line(line):
            measured["flatten_line"] = line
            measured["path"] = path_from_line(line)
            _write(out, rec)  # the path survives a later kill (host OOM while the states are allocated)

        handler = _FlattenLog(on_line)
        ds_logger.addHandler(handler)
        old_level = ds_logger.level
        if ds_logger.getEffectiveLevel() > logging.INFO:
            ds_logger.setLevel(logging.INFO)
        acc.available_memory = reading
        if args.diagnose:
            _diagnose_flatten(measured, torch, ballast)
        _write(out, rec)
        t = time.perf_counter()
        try:
            engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
            outcome = "ok"
        finally:
            measured["initialize_s"] = time.perf_counter() - t
            acc.available_memory = orig
            ds_logger.removeHandler(handler)
            ds_logger.setLevel(old_level)
    except torch.OutOfMemoryError as exc:
        outcome, message = "oom", str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure is recorded, never reported as ok
        outcome, message = "error", f"{type(exc).__name__}: {exc}"
    rec["outcome"], rec["message"] = outcome, message
    if "path" not in measured and measured["available_memory_reads_gib"]:
        # no log line (e.g. the logger silenced): DeepSpeed's own comparison, redone with the flat buffer's bytes
        flat = rec["prediction"]["param_bytes"] / GIB
        measured["path"] = "device" if measured["available_memory_reads_gib"][0] >= flat else "cpu"
        measured["path_inferred"] = True
    if engine is not None:
        opt = engine.optimizer
        flat = getattr(opt, "bit16_groups_flat", None)
        if flat:
            measured["flat_buffer_bytes"] = int(sum(f.numel() * f.element_size() for f in flat))
            measured["flat_buffer_device"] = str(flat[0].device)
    if cuda:
        b = rec["ballast_bytes"]
        measured.update(max_allocated_gib=(torch.cuda.max_memory_allocated() - b) / GIB,
                        max_reserved_gib=(torch.cuda.max_memory_reserved() - b) / GIB,
                        allocated_end_gib=(torch.cuda.memory_allocated() - b) / GIB,
                        nvml_free_end_gib=acc.available_memory() / GIB)
    measured["host_peak_rss_gib"] = host_peak_rss_gib()
    measured["host_rss_end_gib"] = psutil.Process().memory_info().rss / GIB
    measured["wall_s"] = time.perf_counter() - t0
    pred = rec["prediction"]
    rec["comparison"] = {
        "path_as_predicted": measured.get("path") == pred["path"] if measured.get("path") else None,
        "nvml_free_measured_minus_predicted_gib": (
            measured["available_memory_reads_gib"][0] - pred["nvml_free_at_check_gib"]
            if cuda and measured["available_memory_reads_gib"] else None),
        "max_allocated_over_predicted_init": (measured["max_allocated_gib"] / pred["init_peak_allocated_gib"]
                                              if cuda and outcome == "ok" else None),
        "oom_as_predicted": (outcome == "oom") == (not pred["init_fits_card"]) if outcome in ("ok", "oom") else None,
    }
    _write(out, rec)
    del ballast
    return rec


def _live_cuda(torch, ballast) -> dict:
    """The CUDA tensors alive now (gc's view), without ``ballast``: count, GiB, how many are parameters, and for
    the three largest the types of the objects that refer to them (who keeps a parameter's storage alive)."""
    import gc
    seen, rows = set(), []
    for obj in gc.get_objects():
        try:
            if not torch.is_tensor(obj) or not obj.is_cuda or obj is ballast:
                continue
            ptr = obj.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - half-built objects in gc's list
            continue
        if ptr in seen:
            continue
        seen.add(ptr)
        rows.append((obj.untyped_storage().nbytes(), obj))
    rows.sort(key=lambda r: -r[0])
    top = []
    for nbytes, t in rows[:3]:
        refs = [type(r).__name__ + (f"({getattr(r, 'f_code', None) and r.f_code.co_name})" if type(r).__name__ ==
                                    "frame" else "") for r in gc.get_referrers(t)][:8]
        top.append({"gib": nbytes / 2**30, "is_parameter": isinstance(t, torch.nn.Parameter), "shape": list(t.shape),
                    "referrers": refs})
    return {"count": len(rows), "gib": sum(r[0] for r in rows) / 2**30,
            "parameters": sum(isinstance(r[1], torch.nn.Parameter) for r in rows), "largest": top}


def _diagnose_flatten(measured: dict, torch, ballast) -> None:
    """``--diagnose``: record :func:`_live_cuda` when DeepSpeed's ZeRO-1/2 optimizer flattens (its
    ``flatten_dense_tensors_aligned``), i.e. after the CPU branch has replaced every parameter's data."""
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer
    orig = DeepSpeedZeroOptimizer.flatten_dense_tensors_aligned

    def wrapped(self, tensor_list, alignment, use_cpu_data=False, param_padding=None):
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
        measured["at_flatten"] = {"use_cpu_data": use_cpu_data,
                                  "allocated_gib": torch.cuda.memory_allocated() / 2**30 if cuda else None,
                                  "live": _live_cuda(torch, ballast)}
        return orig(self, tensor_list, alignment, use_cpu_data=use_cpu_data, param_padding=param_padding)

    DeepSpeedZeroOptimizer.flatten_dense_tensors_aligned = wrapped


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a shipped name (llama-7b) or a config folder (benchmarks/models/llama-3b)")
    p.add_argument("--gpu-memory-gib", type=float, default=24.0, help="the emulated card, GiB (default 24)")
    p.add_argument("--mode", default="ballast", help=f"one of {', '.join(MODES)} (default ballast)")
    p.add_argument("--pin", default="cookbook", help=f"pin_memory of the optimizer offload: one of {', '.join(PINS)}")
    p.add_argument("--bf16-states", action="store_true", help="bf16 master weights, gradients and Adam states")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per row of the plan (the estimate's training peak)")
    p.add_argument("--device-total-gib", type=float, default=None,
                   help="GiB of the physical device (default: measured); needed by --mode cap --dry")
    p.add_argument("--host-memory-gib", type=float, default=None,
                   help="host RAM the config builder decides pin_memory with (default: this machine's)")
    p.add_argument("--available-memory-gib", type=float, default=None,
                   help="for tests: what DeepSpeed reads as free device memory at its check (0 takes its CPU path)")
    p.add_argument("--build-on", default="device", choices=("device", "cpu"),
                   help="where the random-weights model is built before deepspeed.initialize (cpu: DeepSpeed moves it)")
    p.add_argument("--diagnose", action="store_true",
                   help="record the live CUDA tensors and their referrers when DeepSpeed flattens (slow: a gc scan)")
    p.add_argument("--dry", action="store_true", help="the prediction only: no model, no DeepSpeed engine")
    p.add_argument("--out", default=None, help="the JSON file to write (also printed)")
    return p


def main(argv=None) -> int:
    """Command line entry; 0 for outcome ``ok`` or ``dry``, 1 for ``oom``/``error``, 2 for bad flags."""
    args = parser().parse_args(argv)
    try:
        rec = run(args)
    except ProbeError as exc:
        print(f"zero2_init_probe: {exc}", file=sys.stderr)
        return 2
    m, pr = rec.get("measured", {}), rec.get("prediction", {})
    print(json.dumps({"model": rec["model"], "mode": rec["mode"], "outcome": rec["outcome"],
                      "message": (rec.get("message") or "")[:300], "predicted_path": pr.get("path"),
                      "path": m.get("path"), "nvml_free_read_gib": (m.get("available_memory_reads_gib") or [None])[0],
                      "predicted_nvml_free_gib": pr.get("nvml_free_at_check_gib"),
                      "max_allocated_gib": m.get("max_allocated_gib"),
                      "predicted_init_peak_gib": pr.get("init_peak_allocated_gib"),
                      "host_peak_rss_gib": m.get("host_peak_rss_gib"), "wall_s": m.get("wall_s")}, indent=1))
    return 0 if rec["outcome"] in ("ok", "dry") else 1


if __name__ == "__main__":
    sys.exit(main())
