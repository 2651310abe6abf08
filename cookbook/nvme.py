"""NVMe offload (ZeRO-Infinity): the disk's bandwidth, DeepSpeed's ``aio`` settings tuned for it, and
what a plan puts on the SSD, keeps in host RAM and moves per optimizer step.

Three parts:

* **Measure** — :func:`measure_bandwidth` times a sequential write and read of a bounded file in
  the NVMe folder and deletes it. With DeepSpeed's async I/O op it uses DeepSpeed's own benchmark
  engine (``deepspeed/nvme/ds_aio_handle.py::AIOHandle_Engine``, the engine behind ``ds_io``, O_DIRECT
  through libaio) with DeepSpeed's default ``aio`` settings, in a child process under a timeout;
  otherwise a plain-file probe with ``O_DIRECT`` (or, where the file system refuses ``O_DIRECT``,
  buffered writes + ``fsync`` and reads after ``posix_fadvise(DONTNEED)``). The result says which
  method ran. ``cookbook env --nvme-path DIR`` records it in the facts (``nvme_bandwidth``).
* **Tune** — :func:`tune` (``cookbook nvme-tune PATH``) sweeps DeepSpeed's ``aio`` settings
  (``block_size``, ``queue_depth``, ``intra_op_parallelism``, ``single_submit``, ``overlap_events``)
  the way ``ds_nvme_tune`` does (``deepspeed/nvme/perf_run_sweep.py``: a product of setting lists,
  timed by ``AIOHandle_Engine``), then the parameter swap buffers (``offload_param.buffer_count`` ×
  ``buffer_size``) by timing that many concurrent swaps with DeepSpeed's own
  ``swap_tensor/utils.py::swap_in_tensors``/``swap_out_tensors``; bounded in bytes and seconds. It
  writes the best ``aio`` block as JSON; :func:`cookbook.dsconfig.build_config` takes it
  (``aio=FILE``, CLI ``cookbook config zero3-nvme --aio-config FILE``). DeepSpeed 0.19.8's own
  ``ds_nvme_tune`` output is not used as is: ``perf_generate_param.py::convert_to_param`` writes
  ``"num_threads"`` (the config parser reads ``intra_op_parallelism``, so the tuned parallelism is
  silently dropped) and the booleans as the strings ``"true"``/``"false"``.
* **Estimate** — :func:`estimate_nvme` counts, from DeepSpeed 0.19.8's source, the bytes a ZeRO-3
  plan keeps on the SSD per state, the host RAM NVMe offload still needs (swap buffers, staging,
  flat buffers), the bytes read and written per optimizer step, and from those a step-time floor on
  a given disk and the SSD write volume (endurance). Sources are cited at each term in
  :func:`estimate_nvme`.

Units: bandwidth in GB/s = 10**9 bytes/s (SSD datasheets use decimal units; DeepSpeed's ``ds_io``
prints "GB/sec" computed with 1024**3, i.e. GiB/s); sizes in bytes or GiB (2**30) as named.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

GB = 10 ** 9
GIB = 2 ** 30
MIB = 2 ** 20

#: The five keys of DeepSpeed's ``aio`` block the cookbook writes (``runtime/swap_tensor/constants.py``;
#: ``use_gds`` is left at DeepSpeed's default ``false``: GPUDirect Storage is not used by the cookbook).
AIO_KEYS = ("block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events")

#: DeepSpeed's ``aio`` defaults (``runtime/swap_tensor/constants.py``: AIO_BLOCK_SIZE_DEFAULT 1048576,
#: AIO_QUEUE_DEPTH_DEFAULT 8, AIO_INTRA_OP_PARALLELISM_DEFAULT 1, AIO_SINGLE_SUBMIT_DEFAULT false,
#: AIO_OVERLAP_EVENTS_DEFAULT true); tests compare with the installed DeepSpeed.
AIO_DEFAULTS = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
                "overlap_events": True}

#: ``swap_tensor/utils.py``: a tensor is swapped only when it has at least ``max(MIN_AIO_BYTES, block_size)``
#: bytes (``OptimizerSwapper.is_swappable_tensor``, ``AsyncPartitionedParameterSwapper.swappable_tensor``);
#: swap sizes are rounded up to ``AIO_ALIGNED_BYTES × intra_op_parallelism`` bytes (``_io_aligned_numel``).
MIN_AIO_BYTES = 1024 ** 2
AIO_ALIGNED_BYTES = 1024

#: DeepSpeed's offload defaults (``runtime/zero/offload_config.py``): optimizer ``buffer_count`` 4 ("at
#: least the number of states maintained per parameter by the optimizer", Adam: parameter, gradient,
#: momentum, variance); parameter ``buffer_count`` 5, ``buffer_size`` 1e8 elements, ``max_in_cpu`` 1e9.
DS_OFFLOAD_DEFAULTS = {"optimizer_buffer_count": 4, "param_buffer_count": 5, "param_buffer_size": 10 ** 8,
                       "max_in_cpu": 10 ** 9}

#: The consumer SSD the notebooks project onto: a PCIe 4.0 ×4 NVMe drive of the datasheet class of the
#: Samsung 990 PRO 2 TB (sequential read/write up to 7.45/6.9 GB/s, 1,200 TBW) and the WD_BLACK SN850X
#: 2 TB (7.3/6.6 GB/s, 1,200 TBW) — vendor datasheets; rounded down to 7.0/6.5 GB/s. Datasheet speeds
#: are best case: DeepSpeed's DeepNVMe tutorial (docs/_tutorials/deepnvme.md) reaches 3.69/3.18 GB/s
#: with ``ds_nvme_tune`` on a drive rated 5.6/4.3 GB/s (66 % / 74 %).
CONSUMER_PCIE4_SSD = {
    "name": "consumer PCIe 4.0 x4 NVMe SSD, 2 TB (datasheet class: Samsung 990 PRO 2 TB, WD_BLACK SN850X 2 TB)",
    "read_gb_s": 7.0, "write_gb_s": 6.5, "tbw_tb": 1200.0, "capacity_tb": 2.0,
    "source": "vendor datasheets: Samsung 990 PRO 2 TB 7.45/6.9 GB/s, 1,200 TBW; WD_BLACK SN850X 2 TB "
              "7.3/6.6 GB/s, 1,200 TBW; rounded down to 7.0/6.5 GB/s",
}

#: What DeepSpeed says about SSD wear: nothing. Neither DeepSpeed 0.19.8's source nor its docs
#: (deepspeedai/DeepSpeed docs/, blogs/ at edaa722) give an endurance figure or warning for NVMe
#: offload; the note below is the cookbook's, from the write volume and vendor TBW ratings.
ENDURANCE_NOTE = ("Every optimizer step rewrites the optimizer states (and gradients and 16-bit parameters) on the "
                  "SSD. Consumer drives are rated for a total write volume (TBW, e.g. 1,200 TB for a 2 TB PCIe 4.0 "
                  "drive; warranty ends there) — compare the write volume per 1,000 steps below with it. DeepSpeed's "
                  "docs give no endurance figure; this note is the cookbook's.")

#: File in the NVMe folder where the probe and the tuner leave their measurements (read by training
#: summaries for the step-time floor). Not a probe file: the probe's own test files are deleted.
BANDWIDTH_RECORD = "cookbook_nvme_bandwidth.json"

_CHILD_PREFIX = "COOKBOOK_NVME "


class NvmeError(ValueError):
    """Bad NVMe input (folder, aio block, tuning file); the message names the flag or key, the value and the fix."""


# ----------------------------------------------------------------------------------------------
# the aio block
# ----------------------------------------------------------------------------------------------

def validate_aio(block: Any, *, source: str = "aio") -> dict:
    """A DeepSpeed ``aio`` block, checked and completed with DeepSpeed's defaults.

    DeepSpeed 0.19.8 has no schema for this block (``runtime/swap_tensor/aio_config.py::get_aio_config``
    reads the keys with ``dict.get`` and ignores anything else), so a misspelt key or a string
    ``"false"`` would pass silently; this check refuses them.

    Returns:
        ``{"block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events"}``
        (``use_gds`` kept when given as a bool).

    Raises:
        NvmeError: not a dict, an unknown key, or a value of the wrong type/range (names ``source``.key).
    """
    if not isinstance(block, Mapping):
        raise NvmeError(f"{source}={block!r}: an aio block is a JSON object with {', '.join(AIO_KEYS)}")
    unknown = [k for k in block if k not in AIO_KEYS and k != "use_gds"]
    if unknown:
        hint = ("; ds_nvme_tune's 'num_threads' is DeepSpeed's 'intra_op_parallelism'" if "num_threads" in unknown
                else "")
        raise NvmeError(f"{source}: unknown key(s) {', '.join(map(repr, unknown))}: DeepSpeed reads only "
                        f"{', '.join(AIO_KEYS)} and use_gds (and silently ignores the rest){hint}")
    out = dict(AIO_DEFAULTS)
    for key, value in block.items():
        if key in ("single_submit", "overlap_events", "use_gds"):
            if not isinstance(value, bool):
                raise NvmeError(f"{source}.{key}={value!r}: must be true or false (a JSON boolean, not a string)")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise NvmeError(f"{source}.{key}={value!r}: must be a positive integer")
        out[key] = value
    if out["block_size"] % 512:
        raise NvmeError(f"{source}.block_size={out['block_size']}: must be a multiple of 512 bytes (O_DIRECT "
                        "alignment, deepspeed_py_io_handle.cpp O_DIRECT_ALIGNMENT), e.g. 1048576")
    return out


def load_aio_config(path_or_block) -> dict:
    """The tuned settings in a file (or dict): ``{"aio": {...}, "offload_param": {...} or None}``.

    Accepts the JSON ``cookbook nvme-tune`` writes (``{"aio": {...}, "offload_param": {...}, ...}``),
    a DeepSpeed config holding an ``aio`` block, a bare ``aio`` block, or a facts file written by
    ``cookbook env --dump-facts`` after ``cookbook nvme-tune --facts`` (its ``nvme_tuned`` key).

    Raises:
        NvmeError: unreadable file, not JSON, no aio block, or an invalid block.
    """
    if isinstance(path_or_block, Mapping):
        data, source = dict(path_or_block), "aio config"
    else:
        p = Path(path_or_block)
        source = f"--aio-config {p}"
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise NvmeError(f"{source}: cannot be read ({exc.strerror or exc}); give the JSON written by "
                            "`cookbook nvme-tune PATH -o FILE`") from None
        except json.JSONDecodeError as exc:
            raise NvmeError(f"{source}: not valid JSON (line {exc.lineno}: {exc.msg}); write it again with "
                            "`cookbook nvme-tune PATH -o FILE`") from None
    if isinstance(data, Mapping) and isinstance(data.get("nvme_tuned"), Mapping):
        data = data["nvme_tuned"]
    if isinstance(data, Mapping) and "aio" in data:
        aio, param = data["aio"], data.get("offload_param")
    elif isinstance(data, Mapping) and any(k in data for k in AIO_KEYS):
        aio, param = data, None
    else:
        raise NvmeError(f"{source}: no aio block found; expected {{\"aio\": {{...}}}} as `cookbook nvme-tune` "
                        "writes it, or a bare aio block")
    out = {"aio": validate_aio(aio, source=f"{source}: aio"), "offload_param": None}
    if param is not None:
        if not isinstance(param, Mapping):
            raise NvmeError(f"{source}: offload_param={param!r} must be an object with buffer_count, buffer_size")
        clean = {}
        for key in ("buffer_count", "buffer_size"):
            value = param.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise NvmeError(f"{source}: offload_param.{key}={value!r} must be a positive integer")
            clean[key] = value
        out["offload_param"] = clean or None
    return out


# ----------------------------------------------------------------------------------------------
# DeepSpeed's async I/O op
# ----------------------------------------------------------------------------------------------

def async_io_available() -> tuple[bool, str]:
    """(usable, why) for DeepSpeed's ``async_io`` op: ``AsyncIOBuilder().is_compatible()`` (libaio headers
    and library found; ``deepspeed/ops/op_builder/async_io.py``). Does not compile the op."""
    real = sys.__stderr__ or sys.stderr
    try:
        # DeepSpeed's has_function dup2()s sys.stderr.fileno(): give it the real stream (a notebook's or
        # pytest's replacement has no file descriptor, which DeepSpeed reports as "not compatible")
        with contextlib.redirect_stdout(real), contextlib.redirect_stderr(real):
            from deepspeed.ops.op_builder import AsyncIOBuilder
            ok = bool(AsyncIOBuilder().is_compatible(verbose=False))
    except Exception as exc:  # noqa: BLE001 - reported to the user
        return False, f"DeepSpeed's AsyncIOBuilder could not be asked ({type(exc).__name__}: {exc})"
    if not ok:
        from .hardware import LIBAIO_PACKAGES
        return False, f"DeepSpeed's async_io op is not compatible here (libaio missing): {LIBAIO_PACKAGES}"
    return True, "DeepSpeed's async_io op is compatible (libaio found)"


def prepare_async_io(timeout_s: float = 1800.0) -> tuple[bool, str]:
    """Build (first use: a JIT compile of minutes) and load DeepSpeed's ``async_io`` op in a child process, in the
    extensions folder the cookbook's launched ranks use (:func:`cookbook.launch.extensions_dir`), so that a
    training run does not compile it in every rank at once. Returns (ok, why)."""
    ok, why = async_io_available()
    if not ok:
        return ok, why
    from .hardware import extensions_dir
    built = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or extensions_dir()) / "async_io"
    if (built / "async_io.so").is_file() and not (built / "lock").exists():
        return True, f"DeepSpeed's async_io op is built ({built})"
    t0 = time.perf_counter()
    rows, err = _run_child({"folder": tempfile.gettempdir(), "time_limit_s": 1, "settings": []}, timeout_s=timeout_s)
    if any(r.get("event") == "loaded" for r in rows):
        return True, f"DeepSpeed's async_io op loads ({time.perf_counter() - t0:.0f} s)"
    return False, f"DeepSpeed's async_io op is compatible but did not build/load: {err or 'no result'}"


def _check_folder(path, flag: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise NvmeError(f"{flag} {str(path)!r}: not an existing folder; create it on the NVMe SSD first "
                        f"(mkdir -p {path})")
    if not os.access(p, os.W_OK):
        raise NvmeError(f"{flag} {str(path)!r}: not writable by this user; pick a folder you can write")
    return p


def _parse_child(text: str) -> list[dict]:
    rows = []
    for line in (text or "").splitlines():
        if line.startswith(_CHILD_PREFIX):
            try:
                rows.append(json.loads(line[len(_CHILD_PREFIX):]))
            except json.JSONDecodeError:
                pass
    return rows


def _run_child(job: dict, timeout_s: float) -> tuple[list[dict], str]:
    """Run :func:`_child_main` with ``job`` in a fresh interpreter; (rows printed, error text)."""
    cmd = [sys.executable, "-c", "from cookbook.nvme import _child_main; _child_main()", json.dumps(job)]
    env = dict(os.environ)
    if "TORCH_EXTENSIONS_DIR" not in env:  # the folder the cookbook's launched ranks build DeepSpeed's ops in
        from .hardware import extensions_dir
        env["TORCH_EXTENSIONS_DIR"] = str(extensions_dir())
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return _parse_child(out), f"timeout after {timeout_s:.0f} s"
    rows = _parse_child(proc.stdout)
    err = "" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
    return rows, err


def _emit(row: dict) -> None:
    sys.stdout.write(_CHILD_PREFIX + json.dumps(row) + "\n")
    sys.stdout.flush()


def _child_main() -> None:
    """Entry of the child process (DeepSpeed's op can abort the process; the parent survives and cleans up)."""
    job = json.loads(sys.argv[-1])
    t0 = time.perf_counter()
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's task_log / op loader print to stdout
        from deepspeed.ops.op_builder import AsyncIOBuilder
        AsyncIOBuilder().load(verbose=False)
    sys.stdout = real_stdout
    _emit({"event": "loaded", "load_s": round(time.perf_counter() - t0, 3)})
    deadline = time.perf_counter() + float(job["time_limit_s"])
    folder = job["folder"]
    for i, setting in enumerate(job.get("settings", [])):
        if time.perf_counter() > deadline:
            _emit({"event": "stopped", "reason": "time limit", "done": i})
            break
        with contextlib.redirect_stdout(sys.stderr):
            row = _aio_engine_measure(folder, int(job["io_size"]), setting, int(job["loops"]))
        _emit(dict(row, event="aio", index=i))
    best = job.get("buffer_aio")
    for i, (count, size) in enumerate(job.get("buffers", [])):
        if time.perf_counter() > deadline:
            _emit({"event": "stopped", "reason": "time limit", "done_buffers": i})
            break
        with contextlib.redirect_stdout(sys.stderr):
            row = _buffer_measure(folder, best, int(count), int(size), int(job["elem_size"]), int(job["loops"]))
        _emit(dict(row, event="buffers", index=i))


def _aio_engine_measure(folder: str, io_size: int, setting: dict, loops: int) -> dict:
    """Write then read ``io_size`` bytes ``loops`` times (+1 warm-up) with DeepSpeed's ``ds_io`` engine
    (``deepspeed/nvme/ds_aio_handle.py::AIOHandle_Engine``) under ``setting``; GB/s = 1e9 bytes/s."""
    import argparse
    from deepspeed.nvme.ds_aio_handle import AIOHandle_Engine
    out = {"aio": dict(setting)}
    for read in (False, True):
        args = argparse.Namespace(
            folder=folder, mapping_list=[(0, folder)], read=read, io_size=io_size, block_size=setting["block_size"],
            queue_depth=setting["queue_depth"], single_submit=setting["single_submit"],
            sequential_requests=not setting["overlap_events"], io_parallel=setting["intra_op_parallelism"],
            use_gds=False, gpu=False, use_accelerator_pin_memory=False, slow_bounce_buffer=False, validate=False,
            different_file_each_iteration=False, warmup_loops=1, loops=loops, total_loops=loops + 1)
        engine = AIOHandle_Engine(args, 0, read)
        try:
            for loop in range(args.total_loops):
                (engine.read if read else engine.write)(args, 0, loop)
            secs = engine.ctxt["elapsed_sec"][args.warmup_loops:]
        finally:
            engine.fini()
        out["read_gb_s" if read else "write_gb_s"] = round(io_size * len(secs) / sum(secs) / GB, 4)
    return out


def _buffer_measure(folder: str, aio: dict, count: int, numel: int, elem: int, loops: int) -> dict:
    """``count`` swap buffers of ``numel`` elements of ``elem`` bytes written and read concurrently, the way the
    parameter swapper moves partitions (``swap_tensor/utils.py::swap_out_tensors``/``swap_in_tensors`` on one
    handle, then ``wait()``); GB/s = 1e9 bytes/s."""
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder
    from deepspeed.runtime.swap_tensor.utils import swap_in_tensors, swap_out_tensors
    handle = AsyncIOBuilder().load(verbose=False).aio_handle(aio["block_size"], aio["queue_depth"],
                                                               aio["single_submit"], aio["overlap_events"],
                                                               aio["intra_op_parallelism"])
    dtype = {2: torch.bfloat16, 4: torch.float32}[elem]
    align = AIO_ALIGNED_BYTES * aio["intra_op_parallelism"] // elem
    aligned = -(-numel // align) * align
    buffers = [handle.new_cpu_locked_tensor(aligned, torch.empty(0, dtype=dtype)) for _ in range(count)]
    paths = [os.path.join(folder, f"_cookbook_swap_{count}_{numel}_{i}.swp") for i in range(count)]
    try:
        for b in buffers:
            b.normal_()
        times = {"write": [], "read": []}
        for loop in range(loops + 1):
            t = time.perf_counter()
            swap_out_tensors(handle, buffers, paths)
            assert handle.wait() == count
            dt_w = time.perf_counter() - t
            t = time.perf_counter()
            swap_in_tensors(handle, buffers, paths)
            assert handle.wait() == count
            dt_r = time.perf_counter() - t
            if loop:
                times["write"].append(dt_w)
                times["read"].append(dt_r)
        nbytes = count * aligned * elem
        return {"buffer_count": count, "buffer_size": numel, "locked_bytes": nbytes,
                "write_gb_s": round(nbytes * loops / sum(times["write"]) / GB, 4),
                "read_gb_s": round(nbytes * loops / sum(times["read"]) / GB, 4)}
    finally:
        for b in buffers:
            handle.free_cpu_locked_tensor(b)
        for p in paths:
            with contextlib.suppress(OSError):
                os.remove(p)


# ----------------------------------------------------------------------------------------------
# bandwidth probe
# ----------------------------------------------------------------------------------------------

def _plain_probe(folder: Path, size: int, block: int, time_limit_s: float) -> dict:
    """Sequential write + read of ``size`` bytes in ``block``-byte requests with ``O_DIRECT`` (page-aligned
    ``mmap`` buffer), or buffered + ``fsync`` where ``O_DIRECT`` is refused; stops at ``time_limit_s``."""
    path = folder / "_cookbook_probe.bin"
    buf = mmap.mmap(-1, block)
    buf.write(os.urandom(block))
    direct = hasattr(os, "O_DIRECT")
    note = ""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o600)
    except OSError as exc:
        direct = False
        note = f"O_DIRECT refused by the file system ({exc.strerror}); "
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    t0 = time.perf_counter()
    written = 0
    try:
        while written < size and time.perf_counter() - t0 < time_limit_s / 2:
            written += os.write(fd, buf)
        os.fsync(fd)
    finally:
        os.close(fd)
    t_write = time.perf_counter() - t0
    if not direct and hasattr(os, "posix_fadvise"):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    t0 = time.perf_counter()
    read = 0
    try:
        while read < written and time.perf_counter() - t0 < time_limit_s / 2:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            read += n
    finally:
        os.close(fd)
    t_read = time.perf_counter() - t0
    method = ("o_direct" if direct else "fsync")
    note += ("plain-file probe with O_DIRECT (no page cache), one request of block_size at a time" if direct else
             "buffered write + fsync; read after posix_fadvise(DONTNEED) (pages the kernel kept cached make "
             "the read an upper bound)")
    return {"method": method, "write_gb_s": round(written / t_write / GB, 4), "read_gb_s": round(read / t_read / GB, 4),
            "bytes_written": written, "bytes_read": read, "seconds": round(t_write + t_read, 3), "note": note}


def measure_bandwidth(path, *, size_mib: int = 256, time_limit_s: float = 30.0, method: str = "auto",
                      aio: Mapping | None = None, load_timeout_s: float = 120.0, record: bool = True) -> dict:
    """Sequential write and read bandwidth of the file system holding ``path`` (GB/s = 1e9 bytes/s).

    Writes one file of ``size_mib`` MiB in a temporary folder under ``path``, reads it back, and deletes
    the folder (also after errors). Bounded: ``size_mib`` bytes and ``time_limit_s`` seconds of I/O (plus,
    for the DeepSpeed method, up to ``load_timeout_s`` for loading the op — its first use JIT-compiles it).

    Args:
        path: the NVMe folder (must exist and be writable).
        size_mib: bytes to write and read, MiB (1 to 65536).
        time_limit_s: seconds of I/O at most.
        method: ``"auto"`` (DeepSpeed's async I/O when ``AsyncIOBuilder().is_compatible()``, else plain
            file), ``"deepspeed_aio"`` or ``"plain"``.
        aio: the aio settings for the DeepSpeed method (default DeepSpeed's defaults, :data:`AIO_DEFAULTS`,
            which is what an untuned run uses).
        record: also store the result in ``path``/:data:`BANDWIDTH_RECORD` (read by run summaries).

    Returns:
        ``{"path", "method", "read_gb_s", "write_gb_s", "bytes", "seconds", "aio" (DeepSpeed method),
        "note", "measured_at"}``; ``method`` is ``deepspeed_aio`` (DeepSpeed's ``AIOHandle_Engine``,
        O_DIRECT via libaio, 1 warm-up + 2 timed passes), ``o_direct`` or ``fsync`` (plain file).

    Raises:
        NvmeError: ``path`` missing/not writable, ``size_mib``/``time_limit_s`` out of range, unknown
            ``method``, or ``method="deepspeed_aio"`` where the op is not usable.
    """
    folder = _check_folder(path, "--nvme-path")
    if isinstance(size_mib, bool) or not isinstance(size_mib, int) or not 1 <= size_mib <= 65536:
        raise NvmeError(f"size_mib={size_mib!r}: give 1 to 65536 MiB (default 256)")
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise NvmeError(f"time_limit_s={time_limit_s!r}: give a positive number of seconds")
    if method not in ("auto", "deepspeed_aio", "plain"):
        raise NvmeError(f"method={method!r}: use auto, deepspeed_aio or plain")
    setting = validate_aio(aio or AIO_DEFAULTS)
    size = size_mib * MIB
    tmp = Path(tempfile.mkdtemp(prefix=".cookbook_nvme_probe_", dir=folder))
    why = ""
    result: dict | None = None
    try:
        if method in ("auto", "deepspeed_aio"):
            ok, why = async_io_available()
            if ok:
                loops = 2
                rows, err = _run_child({"folder": str(tmp), "io_size": size // (loops + 1) // 4096 * 4096 or 4096,
                                        "loops": loops, "time_limit_s": time_limit_s, "settings": [setting]},
                                       timeout_s=time_limit_s * 3 + load_timeout_s)
                got = [r for r in rows if r.get("event") == "aio"]
                if got:
                    io = size // (loops + 1) // 4096 * 4096 or 4096
                    result = {"method": "deepspeed_aio", "read_gb_s": got[0]["read_gb_s"],
                              "write_gb_s": got[0]["write_gb_s"], "aio": setting, "bytes": io * (loops + 1),
                              "note": "DeepSpeed's ds_io engine (deepspeed.nvme.ds_aio_handle.AIOHandle_Engine, "
                                      f"O_DIRECT via libaio), {io / MIB:.0f} MiB × ({loops} timed + 1 warm-up) "
                                      "written then read, with the aio settings shown"}
                else:
                    why = ("DeepSpeed's async_io op did not load or run "
                           f"({err or 'no result'}; its first use JIT-compiles it, which can take minutes: run "
                           "`cookbook nvme-tune PATH` once)")
            if result is None and method == "deepspeed_aio":
                raise NvmeError(f"method='deepspeed_aio': {why}")
        if result is None:
            t0 = time.perf_counter()
            result = _plain_probe(tmp, size, MIB, time_limit_s)
            result["bytes"] = result.pop("bytes_written")
            result.pop("bytes_read", None)
            result["seconds"] = round(time.perf_counter() - t0, 3)
            if why:
                result["note"] = f"{result['note']} (DeepSpeed method not used: {why})"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.update(path=str(folder.resolve()), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                  size_mib=size_mib, time_limit_s=time_limit_s)
    if record:
        _record(folder, result)
    return result


def _record(folder: Path, measurement: dict) -> None:
    path = folder / BANDWIDTH_RECORD
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        data = {}
    rows = [m for m in data.get("measurements", []) if m.get("aio") != measurement.get("aio")
            or m.get("method") != measurement.get("method")]
    rows.append(measurement)
    with contextlib.suppress(OSError):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"measurements": rows[-20:]}, indent=1) + "\n")
        os.replace(tmp, path)


def recorded_bandwidth(nvme_path, aio: Mapping | None = None) -> dict | None:
    """The bandwidth last measured in ``nvme_path`` (by :func:`measure_bandwidth` or :func:`tune`), preferring
    a measurement made with the ``aio`` settings given; None when nothing was recorded. The returned dict
    has ``"matches_aio"``: whether it was measured with those settings."""
    if not nvme_path:
        return None
    path = Path(nvme_path).expanduser() / BANDWIDTH_RECORD
    try:
        rows = json.loads(path.read_text()).get("measurements") or []
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    rows = [r for r in rows if isinstance(r, dict) and r.get("read_gb_s") and r.get("write_gb_s")]
    if not rows:
        return None
    want = validate_aio(aio) if aio else None
    same = [r for r in rows if want is not None and r.get("aio") == want]
    best = dict((same or rows)[-1])
    best["matches_aio"] = bool(same)
    return best


# ----------------------------------------------------------------------------------------------
# tuner
# ----------------------------------------------------------------------------------------------

#: The default sweep: a bounded subset of ``ds_nvme_tune``'s ``DEFAULT_SWEEP_CONFIG``
#: (``perf_run_sweep.py``: block_size 1M/8M, queue_depth 32/128, single_submit, sequential_requests,
#: io_parallel 1/2/4/8 = 64 settings) plus DeepSpeed's runtime defaults (1M, depth 8): 2 × 3 × 2 = 12.
DEFAULT_SWEEP = {"block_size": [1048576, 8388608], "queue_depth": [8, 32, 128], "intra_op_parallelism": [1, 4],
                 "single_submit": [False], "overlap_events": [True]}

#: ds_nvme_tune's sweep-config names -> DeepSpeed config names (``io_parallel`` is ``intra_op_parallelism``;
#: ``sequential_requests`` is ``not overlap_events``: ``ds_aio_handle.py`` passes ``not sequential_requests``).
_DS_SWEEP_NAMES = {"io_parallel": "intra_op_parallelism", "sequential_requests": "overlap_events"}


def _size(value, name: str) -> int:
    if isinstance(value, str):
        units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
        try:
            return int(value[:-1]) * units[value[-1].upper()] if value[-1].upper() in units else int(value)
        except (ValueError, IndexError):
            raise NvmeError(f"{name}={value!r}: give bytes, optionally with K, M or G (e.g. 1M)") from None
    return value


def sweep_settings(sweep: Mapping | None = None) -> list[dict]:
    """The aio settings of a sweep: the product of its lists (as ``perf_run_sweep.get_sweep_cmd_lines``), each
    validated; DeepSpeed's defaults first. Accepts DeepSpeed config names or ds_nvme_tune's
    (``io_parallel``, ``sequential_requests``; sizes like ``"1M"``).

    Raises:
        NvmeError: unknown key or invalid value (names the key).
    """
    space = dict(DEFAULT_SWEEP)
    if sweep is not None:
        if not isinstance(sweep, Mapping):
            raise NvmeError(f"--sweep-config: {sweep!r} must be a JSON object of setting lists")
        space = {k: [AIO_DEFAULTS[k]] for k in AIO_KEYS}
        for key, values in sweep.items():
            name = _DS_SWEEP_NAMES.get(key, key)
            if name not in AIO_KEYS:
                if key == "folder_to_device_mapping":
                    continue
                raise NvmeError(f"--sweep-config: unknown key {key!r}; use {', '.join(AIO_KEYS)} "
                                "(or ds_nvme_tune's io_parallel, sequential_requests)")
            values = values if isinstance(values, list) else [values]
            if key == "sequential_requests":
                values = [not v for v in values]
            if key == "block_size":
                values = [_size(v, "--sweep-config block_size") for v in values]
            space[name] = values
    out = []
    for combo in itertools.product(*(space[k] for k in AIO_KEYS)):
        s = validate_aio(dict(zip(AIO_KEYS, combo)), source="--sweep-config setting")
        if s not in out:
            out.append(s)
    default = validate_aio(AIO_DEFAULTS)
    if default in out:
        out.remove(default)
    return [default] + out


def tune(path, *, io_size_mib: int = 64, time_limit_s: float = 120.0, sweep: Mapping | None = None,
         loops: int = 2, buffer_counts=(2, 5, 8), buffer_sizes=(DS_OFFLOAD_DEFAULTS["param_buffer_size"],),
         elem_size: int = 2, max_locked_mib: int = 2048, load_timeout_s: float = 600.0,
         record: bool = True, read_share: float = 0.5) -> dict:
    """Find DeepSpeed ``aio`` settings and parameter swap buffers that move data fastest on ``path``.

    1. aio sweep: each setting of :func:`sweep_settings` (DeepSpeed's defaults first) writes then reads
       ``io_size_mib`` MiB ``loops`` times after one warm-up with DeepSpeed's ``AIOHandle_Engine``; the
       best moves the plan's traffic fastest: least ``read_share / read_bw + (1 − read_share) / write_bw``
       (``read_share`` = the fraction of the SSD bytes that are reads; ``cookbook estimate`` shows both
       per step, e.g. 0.72 for LLaMA-7B at 2 × 8 micro-batches; 0.5 weighs them equally). DeepSpeed's
       ``perf_generate_param.generate_aio_param`` ranks by read + write bandwidth instead, which can pick a
       setting that reads slower for a faster write.
    2. buffer sweep, with the best aio settings: ``buffer_count`` buffers of ``buffer_size`` elements of
       ``elem_size`` bytes swapped out and in concurrently; the pick is the least locked host RAM whose
       read bandwidth is within 5 % of the best (parameters are read 2 × per micro-step, written once
       per step). Settings locking more than ``max_locked_mib`` MiB are skipped (listed as such). Pass
       ``buffer_sizes`` ≥ the largest parameter partition of your model (``cookbook config`` writes
       max(1e8, largest/world size)): DeepSpeed asserts that every partition fits one buffer.

    Bounded: every setting stops being started after ``time_limit_s`` seconds (the rest are listed as
    not run); the whole child process is killed at ``time_limit_s × 2 + load_timeout_s``. All files are
    deleted afterwards.

    Returns:
        ``{"aio": {...best...}, "offload_param": {"buffer_count", "buffer_size"} or None,
        "offload_optimizer": {"buffer_count": 4}, "measured": {"best", "deepspeed_default",
        "speedup_vs_default"}, "settings": [...], "buffers": [...], "stopped_early", ...}``.

    Raises:
        NvmeError: folder missing, bad sizes, DeepSpeed's async I/O op unusable, or nothing measured.
    """
    folder = _check_folder(path, "PATH")
    for name, value, lo, hi in (("--io-size-mib", io_size_mib, 1, 65536), ("--loops", loops, 1, 100),
                                ("--max-locked-mib", max_locked_mib, 1, 10 ** 7)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise NvmeError(f"{name} {value!r}: give an integer from {lo} to {hi}")
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise NvmeError(f"--time-limit-s {time_limit_s!r}: give a positive number of seconds")
    if elem_size not in (2, 4):
        raise NvmeError(f"elem_size={elem_size!r}: 2 (bf16/fp16 parameters) or 4 (fp32)")
    if isinstance(read_share, bool) or not isinstance(read_share, (int, float)) or not 0 <= read_share <= 1:
        raise NvmeError(f"--read-share {read_share!r}: give the fraction of SSD traffic that is reads, 0 to 1")
    for name, values in (("--buffer-counts", buffer_counts), ("--buffer-sizes", buffer_sizes)):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise NvmeError(f"{name} {list(values)!r}: give positive integers")
    ok, why = async_io_available()
    if not ok:
        raise NvmeError(f"nvme-tune needs DeepSpeed's async I/O op: {why}")
    settings = sweep_settings(sweep)
    io_size = io_size_mib * MIB
    tmp = Path(tempfile.mkdtemp(prefix=".cookbook_nvme_tune_", dir=folder))
    t0 = time.perf_counter()
    try:
        rows, err = _run_child({"folder": str(tmp), "io_size": io_size, "loops": loops, "time_limit_s": time_limit_s,
                                "settings": settings}, timeout_s=time_limit_s * 2 + load_timeout_s)
        measured = {r["index"]: r for r in rows if r.get("event") == "aio"}
        if not measured:
            raise NvmeError(f"nvme-tune: no aio setting could be measured in {path} ({err or 'no result'})")
        table = []
        for i, s in enumerate(settings):
            r = measured.get(i)
            table.append({"aio": s, "read_gb_s": r["read_gb_s"] if r else None,
                          "write_gb_s": r["write_gb_s"] if r else None, "status": "ok" if r else "not run (time limit)"})
        done = [t for t in table if t["status"] == "ok"]
        best = min(done, key=lambda t: read_share / t["read_gb_s"] + (1 - read_share) / t["write_gb_s"])
        default = table[0] if table[0]["status"] == "ok" else None
        spent = time.perf_counter() - t0
        load_s = next((r["load_s"] for r in rows if r.get("event") == "loaded"), 0.0)
        left = max(1.0, time_limit_s - (spent - load_s))
        combos = [(c, s) for s in buffer_sizes for c in buffer_counts]
        align = AIO_ALIGNED_BYTES * best["aio"]["intra_op_parallelism"] // elem_size
        fits = [(c, s) for c, s in combos if c * (-(-s // align) * align) * elem_size <= max_locked_mib * MIB]
        brows, berr = _run_child({"folder": str(tmp), "loops": loops, "time_limit_s": left, "settings": [],
                                  "buffers": fits, "buffer_aio": best["aio"], "elem_size": elem_size},
                                 timeout_s=left * 2 + load_timeout_s) if fits else ([], "")
        bmeasured = {tuple(fits[r["index"]]): r for r in brows if r.get("event") == "buffers"}
        buffers = []
        for c, s in combos:
            r = bmeasured.get((c, s))
            status = "ok" if r else ("skipped: locks more than --max-locked-mib" if (c, s) not in fits
                                     else "not run (time limit)" if not berr else f"failed ({berr[:120]})")
            buffers.append({"buffer_count": c, "buffer_size": s, "locked_bytes": c * s * elem_size,
                            "read_gb_s": r["read_gb_s"] if r else None, "write_gb_s": r["write_gb_s"] if r else None,
                            "status": status})
        bdone = [b for b in buffers if b["status"] == "ok"]
        pick = None
        if bdone:
            top = max(b["read_gb_s"] for b in bdone)
            pick = min((b for b in bdone if b["read_gb_s"] >= 0.95 * top), key=lambda b: b["locked_bytes"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "aio": dict(best["aio"]),
        "offload_param": {"buffer_count": pick["buffer_count"], "buffer_size": pick["buffer_size"]} if pick else None,
        "offload_optimizer": {"buffer_count": DS_OFFLOAD_DEFAULTS["optimizer_buffer_count"],
                              "why": "not swept: each optimizer buffer holds one whole sub-group in fp32 (4 × "
                                     "sub_group_size bytes, 4 GB at DeepSpeed's 1e9), and Adam needs 4 "
                                     "(offload_config.py); more only overlap gradient swap-out"},
        "measured": {"best": {"read_gb_s": best["read_gb_s"], "write_gb_s": best["write_gb_s"]},
                     "deepspeed_default": ({"read_gb_s": default["read_gb_s"], "write_gb_s": default["write_gb_s"]}
                                           if default else None),
                     "speedup_vs_default": ({"read": round(best["read_gb_s"] / default["read_gb_s"], 3),
                                             "write": round(best["write_gb_s"] / default["write_gb_s"], 3)}
                                            if default else None)},
        "settings": table, "buffers": buffers,
        "stopped_early": any(t["status"] != "ok" for t in table) or any(b["status"].startswith("not run")
                                                                         for b in buffers),
        "path": str(folder.resolve()), "io_size_bytes": io_size, "loops": loops, "time_limit_s": time_limit_s,
        "read_share": read_share,
        "elem_size": elem_size, "seconds": round(time.perf_counter() - t0, 2), "op_load_s": load_s,
        "method": "DeepSpeed's ds_io engine (deepspeed.nvme.ds_aio_handle.AIOHandle_Engine) for aio settings; "
                  "deepspeed.runtime.swap_tensor.utils.swap_out_tensors/swap_in_tensors for swap buffers",
        "units": "GB/s = 1e9 bytes/s",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if record:
        for row, label in ((best, "nvme-tune best"), (default, "nvme-tune DeepSpeed default")):
            if row:
                _record(folder, {"method": "deepspeed_aio", "aio": row["aio"], "read_gb_s": row["read_gb_s"],
                                 "write_gb_s": row["write_gb_s"], "note": label, "bytes": io_size * (loops + 1),
                                 "path": result["path"], "measured_at": result["measured_at"]})
    return result


# ----------------------------------------------------------------------------------------------
# estimate
# ----------------------------------------------------------------------------------------------

#: Display names of the NVMe host-RAM terms (see :func:`estimate_nvme`).
NVME_HOST_TERMS = {
    "optimizer_swap_buffers": "optimizer swap buffers (buffer_count × largest sub-group, fp32)",
    "param_swap_buffers": "parameter swap buffers (buffer_count × buffer_size, 16-bit)",
    "param_swap_out_staging": "16-bit parameter staging for the swap-out after each step",
    "param_flat_cpu_buffer": "flat 16-bit parameter buffer (max_in_cpu elements, pinned)",
    "params_kept_in_cpu": "parameters too small to swap (pinned)",
    "grad_flat_buffer": "16-bit gradient partition buffer (pinned)",
    "unswapped_optimizer_states": "optimizer sub-groups too small to swap (master, Adam, gradient)",
}
#: Display names of the NVMe disk terms.
NVME_DISK_TERMS = {"master": "master weights", "adam_m": "Adam m", "adam_v": "Adam v",
                   "grads": "gradients", "params_16bit": "16-bit parameters"}


@dataclass(frozen=True)
class NvmeEstimate:
    """What NVMe offload of a plan puts on the SSD, keeps in host RAM and moves per optimizer step.

    Per-rank byte counts (``*_per_rank``) and per-machine totals (× ranks per machine; one SSD per
    machine is assumed). See :func:`estimate_nvme` for every term's source.

    Attributes:
        disk_per_rank: bytes of swap files by state (:data:`NVME_DISK_TERMS` keys).
        host_per_rank: host bytes by term (:data:`NVME_HOST_TERMS` keys), at their real allocated size
            (PyTorch's power-of-two rounding of pinned blocks included on GPU runs).
        host_locked_per_rank: of ``host_per_rank``, the page-locked bytes (pinned or mlock'ed).
        transient_per_rank: extra host bytes for a moment (the first optimizer step's unpinned Adam m, v of
            one sub-group; at start, the fp32 copy of one sub-group).
        read_per_step_per_rank, write_per_step_per_rank: bytes per optimizer step (steady state), by flow.
        ranks_per_machine: r.
        notes: facts people should know (what did not go to the SSD and why).
        settings: the DeepSpeed settings the numbers assume.
    """

    plan: Any
    disk_per_rank: Mapping[str, float]
    host_per_rank: Mapping[str, float]
    host_locked_per_rank: float
    transient_per_rank: float
    read_per_step_per_rank: Mapping[str, float]
    write_per_step_per_rank: Mapping[str, float]
    ranks_per_machine: int
    notes: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def disk_bytes(self) -> float:
        """SSD bytes per machine."""
        return sum(self.disk_per_rank.values()) * self.ranks_per_machine

    @property
    def host_bytes(self) -> float:
        """Host bytes per machine for NVMe offload (steady state, without the transient)."""
        return sum(self.host_per_rank.values()) * self.ranks_per_machine

    @property
    def read_bytes_per_step(self) -> float:
        """SSD bytes read per optimizer step, per machine."""
        return sum(self.read_per_step_per_rank.values()) * self.ranks_per_machine

    @property
    def write_bytes_per_step(self) -> float:
        """SSD bytes written per optimizer step, per machine."""
        return sum(self.write_per_step_per_rank.values()) * self.ranks_per_machine

    def floor(self, read_gb_s: float, write_gb_s: float) -> dict:
        """Step-time floor from SSD traffic alone, seconds per optimizer step on a disk of the given bandwidth.

        ``floor_serial_s = read / read_bw + write / write_bw`` (DeepSpeed's optimizer swapper reads a
        sub-group, steps it, writes it back, one after the other; parameter reads in forward/backward and
        these do not overlap either); ``floor_overlap_s = max(read / read_bw, write / write_bw)`` (perfect
        overlap). Compute and PCIe time are not included: the floor is the disk's share.

        Raises:
            NvmeError: a bandwidth that is not a positive number.
        """
        for name, v in (("read_gb_s", read_gb_s), ("write_gb_s", write_gb_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise NvmeError(f"{name}={v!r}: give the disk's bandwidth in GB/s (1e9 bytes/s), e.g. 7.0")
        t_read = self.read_bytes_per_step / (read_gb_s * GB)
        t_write = self.write_bytes_per_step / (write_gb_s * GB)
        return {"read_gb_s": read_gb_s, "write_gb_s": write_gb_s, "t_read_s": t_read, "t_write_s": t_write,
                "floor_serial_s": t_read + t_write, "floor_overlap_s": max(t_read, t_write)}

    def endurance(self, tbw_tb: float = CONSUMER_PCIE4_SSD["tbw_tb"]) -> dict:
        """SSD write volume: bytes per step, TB per 1,000 steps, and optimizer steps until ``tbw_tb`` TB written
        (the drive's rated endurance; default the consumer 2 TB drive's 1,200 TBW)."""
        w = self.write_bytes_per_step
        return {"write_bytes_per_step": w, "write_tb_per_1000_steps": w * 1000 / 1e12, "tbw_tb": tbw_tb,
                "steps_to_tbw": (tbw_tb * 1e12 / w) if w else None, "note": ENDURANCE_NOTE}

    def to_dict(self, bandwidth: Mapping | None = None) -> dict:
        """JSON shape: per-machine GiB by term, per-step GB, floors on the consumer SSD (and on ``bandwidth``,
        ``{"read_gb_s", "write_gb_s", ...}``, when given), endurance, notes."""
        r = self.ranks_per_machine
        out = {
            "disk_gib": {k: round(v * r / GIB, 4) for k, v in self.disk_per_rank.items()},
            "disk_total_gib": round(self.disk_bytes / GIB, 4),
            "host_gib": {k: round(v * r / GIB, 4) for k, v in self.host_per_rank.items()},
            "host_total_gib": round(self.host_bytes / GIB, 4),
            "host_locked_gib": round(self.host_locked_per_rank * r / GIB, 4),
            "host_transient_gib": round(self.transient_per_rank * r / GIB, 4),
            "read_gb_per_step": {k: round(v * r / GB, 4) for k, v in self.read_per_step_per_rank.items()},
            "write_gb_per_step": {k: round(v * r / GB, 4) for k, v in self.write_per_step_per_rank.items()},
            "read_bytes_per_step": self.read_bytes_per_step, "write_bytes_per_step": self.write_bytes_per_step,
            "read_gb_per_step_total": round(self.read_bytes_per_step / GB, 4),
            "write_gb_per_step_total": round(self.write_bytes_per_step / GB, 4),
            "floor_consumer_ssd": dict(self.floor(CONSUMER_PCIE4_SSD["read_gb_s"], CONSUMER_PCIE4_SSD["write_gb_s"]),
                                       disk=CONSUMER_PCIE4_SSD["name"], source=CONSUMER_PCIE4_SSD["source"]),
            "endurance": self.endurance(),
            "ranks_per_machine": r, "notes": list(self.notes), "settings": dict(self.settings),
        }
        if bandwidth and bandwidth.get("read_gb_s") and bandwidth.get("write_gb_s"):
            out["floor_measured_disk"] = dict(self.floor(bandwidth["read_gb_s"], bandwidth["write_gb_s"]),
                                              method=bandwidth.get("method"), path=bandwidth.get("path"))
        return out

    def to_frame(self):
        """A pandas DataFrame per machine: ``where`` (SSD / host RAM), ``what``, ``GiB``; the host-RAM transient of
        the first optimizer step as its own row."""
        import pandas as pd
        r = self.ranks_per_machine
        rows = [("SSD", NVME_DISK_TERMS[k], v * r) for k, v in self.disk_per_rank.items() if v]
        rows += [("host RAM", NVME_HOST_TERMS[k], v * r) for k, v in self.host_per_rank.items() if v]
        rows.append(("host RAM", "first optimizer step only: Adam m, v of one sub-group before their first swap-out",
                     self.transient_per_rank * r))
        return pd.DataFrame([(w, t, round(b / GIB, 2)) for w, t, b in rows], columns=["where", "what", "GiB"])

    def floor_frame(self, disks, tokens_per_step: int | None = None):
        """SSD-only floors on several disks: ``disks`` is a list of (name, ``{"read_gb_s", "write_gb_s"}``);
        columns disk, read GB/s, write GB/s, floor s/step and, with ``tokens_per_step``, the tokens/s it allows."""
        import pandas as pd
        rows = []
        for name, d in disks:
            f = self.floor(d["read_gb_s"], d["write_gb_s"])
            row = {"disk": name, "read GB/s": d["read_gb_s"], "write GB/s": d["write_gb_s"],
                   "SSD-only floor s/step": round(f["floor_serial_s"], 1)}
            if tokens_per_step:
                row["tokens/s at most"] = round(tokens_per_step / f["floor_serial_s"], 1)
            rows.append(row)
        return pd.DataFrame(rows)

    def lines(self, bandwidth: Mapping | None = None) -> list[str]:
        """Human-readable lines for ``cookbook estimate`` and notebooks."""
        r = self.ranks_per_machine
        disk = ", ".join(f"{NVME_DISK_TERMS[k]} {v * r / GIB:.1f}" for k, v in self.disk_per_rank.items() if v)
        host = ", ".join(f"{NVME_HOST_TERMS[k].split(' (')[0]} {v * r / GIB:.2f}"
                         for k, v in self.host_per_rank.items() if v)
        fl = self.floor(CONSUMER_PCIE4_SSD["read_gb_s"], CONSUMER_PCIE4_SSD["write_gb_s"])
        e = self.endurance()
        out = [f"NVMe: {self.disk_bytes / GIB:.1f} GiB on the SSD per machine ({disk or 'nothing'} GiB)",
               f"NVMe host RAM: {self.host_bytes / GIB:.2f} GiB per machine ({host or 'none'} GiB), "
               f"+{self.transient_per_rank * r / GIB:.2f} GiB for a moment at the first optimizer step",
               f"NVMe traffic per optimizer step: read {self.read_bytes_per_step / GB:.1f} GB, write "
               f"{self.write_bytes_per_step / GB:.1f} GB; disk-only floor on a {CONSUMER_PCIE4_SSD['read_gb_s']:g}/"
               f"{CONSUMER_PCIE4_SSD['write_gb_s']:g} GB/s consumer PCIe 4.0 SSD: {fl['floor_serial_s']:.1f} s/step"]
        if bandwidth and bandwidth.get("read_gb_s"):
            m = self.floor(bandwidth["read_gb_s"], bandwidth["write_gb_s"])
            out.append(f"  on the measured disk ({bandwidth['read_gb_s']:.2f}/{bandwidth['write_gb_s']:.2f} GB/s, "
                       f"{bandwidth.get('method')}): {m['floor_serial_s']:.1f} s/step")
        steps = e["steps_to_tbw"]
        out.append(f"SSD writes: {e['write_tb_per_1000_steps']:.1f} TB per 1,000 steps"
                   + (f"; a {e['tbw_tb']:,.0f} TBW drive reaches its rating after ~{steps:,.0f} steps" if steps else ""))
        out += list(self.notes)
        return out


def _zero_block(ds_config: Mapping | None) -> dict:
    return dict((ds_config or {}).get("zero_optimization") or {})


def _num(value, default):
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


#: Room the NVMe folder needs beyond the estimated swap files: ×1.05 + 1 GiB — the estimate follows DeepSpeed's
#: sizes but not its file system's metadata/extents, and a full disk mid-run is ``OSError: [Errno 28] No space
#: left on device`` inside DeepSpeed's swap-out (seen on the H200, a run whose states exceeded the free space).
NVME_DISK_MARGIN_FRACTION = 0.05
NVME_DISK_MARGIN_BYTES = 2 ** 30


def nvme_disk_needed(disk_bytes: float) -> float:
    """Free bytes the NVMe folder must have for ``disk_bytes`` of estimated swap files (per machine):
    ``disk_bytes × (1 + NVME_DISK_MARGIN_FRACTION) + NVME_DISK_MARGIN_BYTES``."""
    return float(disk_bytes) * (1 + NVME_DISK_MARGIN_FRACTION) + NVME_DISK_MARGIN_BYTES


def nvme_disk_refusal(plan, ds_config: Mapping | None = None, *, spec=None) -> str | None:
    """Why an NVMe-offload launch of ``plan`` must not start on this machine: the swap files
    (:func:`estimate_nvme` ``disk_bytes``, per machine) plus the margin (:func:`nvme_disk_needed`) exceed the
    free space of the file system holding ``plan.nvme_path`` (``shutil.disk_usage`` of the folder, or of its
    nearest existing parent). None when it fits, when there is no NVMe target, or when the model cannot be
    estimated (other checks report that).

    Returns:
        a message naming --nvme-path, the free and needed GiB, and the fixes; or None.
    """
    if "nvme" not in (plan.offload_optimizer, plan.offload_param) or not plan.nvme_path or plan.zero_stage < 3:
        return None
    import shutil
    try:
        est = estimate_nvme(plan, spec=spec, ds_config=ds_config)
    except Exception:  # noqa: BLE001 - an unresolvable model is reported elsewhere
        return None
    if est is None or not est.disk_bytes:
        return None
    folder = Path(plan.nvme_path).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    need = nvme_disk_needed(est.disk_bytes)
    if free >= need:
        return None
    return (f"--nvme-path {plan.nvme_path}: {free / GIB:.1f} GiB free on its file system ({folder}), but the "
            f"NVMe swap files need {need / GIB:.1f} GiB ({est.disk_bytes / GIB:.1f} GiB estimated + "
            f"{NVME_DISK_MARGIN_FRACTION:.0%} + {NVME_DISK_MARGIN_BYTES / GIB:g} GiB margin); DeepSpeed would stop "
            "with 'OSError: [Errno 28] No space left on device'. Fix: free "
            f"{(need - free) / GIB:.1f} GiB there, point --nvme-path at a folder on a larger SSD, train a smaller "
            "model, or offload to the CPU instead (--offload-optimizer cpu --offload-param cpu)")


#: ``stage3_max_reuse_distance`` the cookbook writes for plans with ``offload_param.device: nvme`` (and
#: :func:`estimate_nvme` assumes without a ``ds_config``): 0, so that no parameter stays gathered — holding
#: its NVMe swap buffer — from one use to its next (DeepSpeed issue #3062; see :func:`param_buffers_needed`).
NVME_PARAM_MAX_REUSE_DISTANCE = 0


def param_buffers_needed(spec, numels, on_ssd, *, reuse: int, span: int = 2) -> dict:
    """How many ``offload_param`` swap buffers DeepSpeed 0.19.8 may hold at once for this model (an upper
    bound), and why: DeepSpeed asserts ``Not enough buffers 0 for swapping 1`` when a swap-in finds too few
    (``runtime/swap_tensor/partitioned_param_swapper.py:310``, ``swap_in``; issue #3062
    https://github.com/deepspeedai/DeepSpeed/issues/3062).

    A parameter on the SSD takes one buffer when it is swapped in and gives it back only when it is
    partitioned again (``partition_parameters.py:1809``, ``remove_partition_and_release_buffers``).

    * ``init_gather``: the most on-SSD tensors one ``GatheredParameters`` call swaps in together —
      transformers' ``initialize_weights_zero3`` (``integrations/deepspeed.py``) gathers a module's own
      parameters plus its direct children's: LLaMA's attention block q, k, v, o (4), its MLP gate, up,
      down (3). The list is swapped in at once (``partition_parameters.py:1718``).
    * ``kept_by_reuse``: on-SSD tensors the coordinator keeps gathered after their module because their next
      use lies within ``stage3_max_reuse_distance`` elements
      (``partitioned_param_coordinator.py:634-665``, ``__params_to_release``); counted as in
      :func:`estimate_nvme` (next use ``n + span × (elements after it)`` away, ``span`` 3 under gradient
      checkpointing, else 2); all are held together at the forward/backward turn. With the default 1e9
      that is the whole of a model below ~3e8 elements, and the last ~1e9/3 elements of a larger one.
    * ``need`` = max(init_gather, kept_by_reuse + 1): one more for the module being fetched. NVMe prefetch
      (``__prefetch_nvme_param_partitions``) only takes buffers that are free, and the regular prefetch
      stops at the first parameter still on the SSD (``_fetch_sub_module_impl``), so neither adds to it.
      0 when nothing is on the SSD.

    Args:
        spec: the model's :class:`cookbook.models.ModelSpec` (layer count).
        numels: parameter tensor sizes in module order (:func:`cookbook.sizes._tensor_numels`).
        on_ssd: per tensor, whether its partition lives on the SSD (see :func:`estimate_nvme`).
        reuse: ``stage3_max_reuse_distance`` (elements).
        span: 3 with gradient checkpointing, else 2.

    Returns:
        ``{"need", "init_gather", "kept_by_reuse"}`` (counts of buffers).
    """
    n_layers = int(getattr(spec, "num_layers", 0) or 0)
    per = 12 if getattr(spec, "model_type", "") == "qwen2" else 9
    groups = []
    if n_layers and 1 + n_layers * per <= len(numels):
        for j in range(n_layers):
            base = 1 + j * per
            groups.append([base + t for t in (0, 1, 2, 3) + ((9, 10, 11) if per == 12 else ())])  # attention
            groups.append([base + t for t in (4, 5, 6)])  # MLP
    init_gather = max([sum(1 for i in grp if on_ssd[i]) for grp in groups] + [1 if any(on_ssd) else 0])
    kept, after = 0, 0
    for i in reversed(range(len(numels))):
        if on_ssd[i] and numels[i] + span * after < reuse:
            kept += 1
        after += numels[i]
    need = max(init_gather, kept + 1) if any(on_ssd) else 0
    return {"need": need, "init_gather": init_gather, "kept_by_reuse": kept}


#: The host-RAM knobs of NVMe offload that :func:`cookbook.memory.choose_nvme_knobs` sets (DeepSpeed names; the
#: ``zero_optimization`` key, or the key inside both offload blocks).
NVME_KNOB_KEYS = ("sub_group_size", "max_in_cpu", "pin_memory")


def estimate_nvme(plan, *, spec=None, ds_config: Mapping | None = None, bf16_states: bool = False,
                  device: str = "cuda", knobs: Mapping | None = None) -> NvmeEstimate | None:
    """NVMe offload of ``plan``, term by term, from DeepSpeed 0.19.8's source; None without an NVMe target.

    Model: the parameter tensors of the architecture in module order (:func:`cookbook.memory._tensor_numels`),
    each partitioned into ``k = ceil(n / g)`` elements per rank (``partition_parameters.py``
    ``_partition_param``: padded to a multiple of the world size); ZeRO-3 optimizer sub-groups cut as
    ``stage3.py::_create_fp16_sub_groups`` does (parameters in order until ``sub_group_size``). ``p`` = bytes
    of a 16-bit parameter (4 for fp32 training), ``o`` = bytes of an optimizer state (4; 2 with bf16
    states). Settings come from ``ds_config`` or, when absent, from DeepSpeed's defaults with what the
    cookbook's builder writes for ``offload_param`` nvme: ``buffer_size`` max(1e8, largest partition),
    ``stage3_max_reuse_distance`` 0 and ``buffer_count`` max(5, :func:`param_buffers_needed`) — the same
    numbers as :func:`cookbook.dsconfig.build_config`, so that the host-RAM terms are the built config's.

    Which tensors swap (``swap_tensor/utils.py`` MIN_AIO_BYTES; ``is_swappable_tensor``/``swappable_tensor``):
    a tensor goes to the SSD only with at least ``max(1 MiB, aio.block_size)`` bytes. Parameters in sub-groups
    that fit in the first ``offload_param.max_in_cpu`` elements stay in CPU memory for good
    (``stage3.py::_create_param_groups_fp16_flat_cpu_memory`` / ``_move_to_flat_buffer``); persistent
    parameters (``numel <= stage3_param_persistence_threshold``) stay on the device.

    SSD, per rank (swap sizes rounded up to ``1024 × intra_op_parallelism`` bytes, ``_io_aligned_numel``):
      master weights, Adam m, Adam v: ``o × S`` each per swappable sub-group (``optimizer_utils.py``
      ``OptimizerStateSwapInfo``: the fp32 partition and the optimizer's state tensors);
      gradients: ``o × k`` per swappable gradient piece (``stage3.py::partition_grads`` →
      ``_swap_out_offload_fp32_gradients``; ``optimizer_utils._adjust_for_misaligned_lengths`` splits off
      the misaligned tail, which stays in memory); 16-bit parameters: ``p × k`` per swapped parameter
      (``partitioned_param_swapper.py`` ``…/zero_stage_3/<dtype>params/rank<r>/<id>_param.tensor.swp``).

    Host RAM, per rank (``new_cpu_locked_tensor`` = page-aligned ``posix_memalign`` + ``mlock``, exact
    size, ``ops/csrc/pin_memory/deepspeed_pin_tensor.cpp``; ``pin_memory()`` = PyTorch's pinned allocator,
    rounded up to a power of two on GPU runs):
      optimizer swap buffers: ``optimizer buffer_count × S_max × o``, locked (``optimizer_utils.py``
      ``SwapBufferManager(num_elems=largest_numel, count=buffer_count)``, allocated at start);
      parameter swap buffers: ``param buffer_count × buffer_size × p``, locked
      (``partitioned_param_swapper.py::_configure_aio``, ``self.buffers``);
      16-bit parameter staging for the swap-out after each step: ``p × Σ n`` over the parameters of the
      largest sub-group — full tensor sizes, not partitions (``stage3.py`` ``reserve_partitioned_swap_space(
      [t.ds_numel ...])``), locked, present when any sub-group's parameters live on the SSD;
      flat 16-bit parameter buffer: ``p × min(P, max_in_cpu)``, pinned (allocated whether or not any
      sub-group fits in it); parameters too small to swap: ``p × k`` each, pinned;
      16-bit gradient partition buffer: ``p × P``, pinned (``stage3.py::grad_partitions_flat_buffer``, any
      optimizer offload); optimizer sub-groups too small to swap: master ``o·S`` + Adam ``2·o·S`` unpinned
      + gradient ``o·S`` pinned (as CPU offload).
      Transient: ``2 × o × S_max`` — at the first step DeepSpeedCPUAdam creates Adam m and v of a sub-group
      unpinned before their first swap-out (``optimizer_utils._swap_out_unpinned_tensors``); at start,
      ``_create_fp32_partitions`` holds an unpinned fp32 copy of a sub-group.

    Traffic per optimizer step, per rank, steady state (G = gradient accumulation):
      read: 16-bit parameters, G × (their SSD bytes + those of the parameters fetched again in backward):
      every micro-step's forward fetches each one (``partition_parameters.py`` swap_in in ``_all_gather``);
      backward fetches it again unless it was kept gathered because its next use lies within
      ``stage3_max_reuse_distance`` elements (``partitioned_param_coordinator.py::__params_to_release``),
      counted here as ``n + 2 × (elements after it)`` (``3 ×`` under gradient checkpointing, which
      recomputes each later layer's forward in backward) — an approximation of the coordinator's trace; master
      weights + Adam m + v + gradients (``_prepare_sub_group`` → ``swap_in_optimizer_state``);
      write: gradients (at the accumulation boundary), master weights + Adam m + v
      (``swap_out_optimizer_state``), 16-bit parameters (``_partitioned_params_swap_out``). The first step
      reads no Adam states (they do not exist yet).

    ZeRO-1/2 never swap: with ``offload_optimizer.device: nvme`` they take the CPU-offload path and keep the
    states in host RAM (``stage_1_and_2.py``: ``cpu_offload = device != none``; swapping exists only in
    ``stage3.py::_configure_tensor_swapping``) — the estimate returns empty disk terms and says so.

    ``knobs`` (keys of :data:`NVME_KNOB_KEYS`) replace the config's (or the defaults') ``sub_group_size``,
    ``offload_param.max_in_cpu`` and both blocks' ``pin_memory``: how :func:`cookbook.memory.choose_nvme_knobs`
    tries settings.

    Returns:
        an :class:`NvmeEstimate`, or None when neither offload target is ``nvme``.

    Raises:
        cookbook.memory.EstimateError: bf16_states with a non-bf16 precision.
        cookbook.models.ModelNotFoundError: the model cannot be resolved.
    """
    if "nvme" not in (plan.offload_optimizer, plan.offload_param):
        return None
    from .sizes import _bytes_per_state, _pow2, _tensor_numels
    if spec is None:
        from .models import model_spec
        spec = model_spec(plan.model)
    B = _bytes_per_state(plan.precision, bf16_states)
    p = B["param"]
    o = B["master"] or B["param"]
    g, r = plan.num_gpus, plan.num_gpus // plan.num_machines
    zero = _zero_block(ds_config)
    aio = validate_aio({k: v for k, v in ((ds_config or {}).get("aio") or {}).items() if k in AIO_KEYS})
    opt_block, par_block = dict(zero.get("offload_optimizer") or {}), dict(zero.get("offload_param") or {})
    if knobs:
        unknown = set(knobs) - set(NVME_KNOB_KEYS)
        if unknown:
            raise NvmeError(f"knobs={dict(knobs)!r}: unknown {sorted(unknown)}; use {', '.join(NVME_KNOB_KEYS)}")
        zero = dict(zero)
        if "sub_group_size" in knobs:
            zero["sub_group_size"] = int(knobs["sub_group_size"])
        if "max_in_cpu" in knobs:
            par_block["max_in_cpu"] = int(knobs["max_in_cpu"])
        if "pin_memory" in knobs:
            opt_block["pin_memory"] = par_block["pin_memory"] = bool(knobs["pin_memory"])
    numels = [int(n) for n in _tensor_numels(spec)]
    parts = [math.ceil(n / g) for n in numels]
    P = sum(parts)
    largest_part = max(parts)
    sub_group_size = _num(zero.get("sub_group_size"), 10 ** 9)
    persist = zero.get("stage3_param_persistence_threshold")
    persist = _num(persist, 10 * int(spec.hidden_size))
    opt_count = _num(opt_block.get("buffer_count"), DS_OFFLOAD_DEFAULTS["optimizer_buffer_count"])
    par_count = _num(par_block.get("buffer_count"), DS_OFFLOAD_DEFAULTS["param_buffer_count"])
    par_size = _num(par_block.get("buffer_size"), max(DS_OFFLOAD_DEFAULTS["param_buffer_size"], largest_part))
    max_in_cpu = _num(par_block.get("max_in_cpu"), DS_OFFLOAD_DEFAULTS["max_in_cpu"])
    opt_pin = bool(opt_block.get("pin_memory", True))
    par_pin = bool(par_block.get("pin_memory", True))
    cuda = device == "cuda"

    def torch_pinned(nbytes: float, pin: bool) -> float:
        return _pow2(nbytes) if (cuda and pin) else float(nbytes)

    min_aio = max(MIN_AIO_BYTES, aio["block_size"])
    align_p = AIO_ALIGNED_BYTES * aio["intra_op_parallelism"] // p
    align_o = AIO_ALIGNED_BYTES * aio["intra_op_parallelism"] // o

    def aligned(n: int, a: int) -> int:
        return -(-n // a) * a

    settings = {"aio": aio, "sub_group_size": sub_group_size, "optimizer_buffer_count": opt_count,
                "param_buffer_count": par_count, "param_buffer_size": par_size, "max_in_cpu": max_in_cpu,
                "pin_memory": opt_pin and par_pin,
                "stage3_param_persistence_threshold": persist, "bytes_16bit": p, "bytes_optimizer_state": o,
                "world_size": g, "partition_elements_per_rank": P}
    notes: list[str] = []
    disk = dict.fromkeys(NVME_DISK_TERMS, 0.0)
    host = dict.fromkeys(NVME_HOST_TERMS, 0.0)
    locked = 0.0
    transient = 0.0
    read = {"params_16bit": 0.0, "optimizer_states": 0.0, "grads": 0.0}
    write = {"grads": 0.0, "optimizer_states": 0.0, "params_16bit": 0.0}
    if plan.zero_stage < 3:
        notes.append(f"ZeRO-{plan.zero_stage} does not swap to NVMe: with offload_optimizer.device nvme DeepSpeed "
                     "takes its CPU-offload path and keeps the optimizer states in host RAM (stage_1_and_2.py); "
                     "NVMe offload needs ZeRO-3")
        return NvmeEstimate(plan, disk, host, 0.0, 0.0, read, write, r, tuple(notes), settings)
    if bf16_states:
        notes.append("DeepSpeed 0.19.8 stops at start with NVMe offload and bf16 optimizer states "
                     "(AssertionError `dtype == self.dtype` in swap_tensor/utils.py, seen on the H200, "
                     "shared/notes/device.md): NVMe offload needs fp32 states")

    # sub-groups (indices of tensors) as stage3.py cuts them
    groups: list[list[int]] = []
    cur: list[int] = []
    acc = 0
    for i, k in enumerate(parts):
        cur.append(i)
        acc += k
        if sub_group_size and P > sub_group_size and (acc >= sub_group_size or i == len(parts) - 1):
            groups.append(cur)
            cur, acc = [], 0
    if cur:
        groups.append(cur)
    sizes = [sum(parts[i] for i in grp) for grp in groups]

    # ---- parameters -------------------------------------------------------------------------
    on_ssd = [False] * len(parts)
    if plan.offload_param == "nvme":
        flat = min(P, max_in_cpu)
        offset = 0
        in_flat = []
        for size in sizes:
            in_flat.append(flat > 0 and offset + size <= flat)
            offset += size
        if flat > 0:
            host["param_flat_cpu_buffer"] = torch_pinned(flat * p, par_pin)
            locked += host["param_flat_cpu_buffer"] if par_pin else 0.0
        small = 0.0
        for grp, fits in zip(groups, in_flat):
            for i in grp:
                k = parts[i]
                if fits:
                    continue
                if numels[i] <= persist:
                    continue  # ds_persist: partition on the device
                if k * p >= min_aio:
                    on_ssd[i] = True
                    disk["params_16bit"] += aligned(k, align_p) * p
                else:
                    small += torch_pinned(k * p, par_pin)
        host["params_kept_in_cpu"] = small
        locked += small if par_pin else 0.0
        reuse = _num(zero.get("stage3_max_reuse_distance"),
                     NVME_PARAM_MAX_REUSE_DISTANCE if ds_config is None else 10 ** 9)
        span = 3 if plan.gradient_checkpointing else 2
        need = param_buffers_needed(spec, numels, on_ssd, reuse=reuse, span=span)
        settings.update(param_buffers_needed=need["need"], param_buffers_kept_by_reuse=need["kept_by_reuse"],
                        param_buffers_init_gather=need["init_gather"])
        if ds_config is None:  # the builder's buffer_count (dsconfig.build_config): at least what DeepSpeed holds
            par_count = settings["param_buffer_count"] = max(par_count, need["need"])
        host["param_swap_buffers"] = par_count * aligned(par_size, align_p) * p
        locked += host["param_swap_buffers"]
        if not all(in_flat):
            big = max(range(len(groups)), key=lambda j: sizes[j])
            host["param_swap_out_staging"] = sum(aligned(numels[i], align_p) for i in groups[big]) * p
            locked += host["param_swap_out_staging"]
        n_flat = sum(s for s, f in zip(sizes, in_flat) if f)
        if n_flat:
            notes.append(f"{n_flat:,} of {P:,} parameter elements per rank stay in host RAM for good "
                         f"(offload_param.max_in_cpu {max_in_cpu:,}): they never reach the SSD")
        if flat and not n_flat:
            notes.append(f"DeepSpeed allocates a pinned {flat * p / GIB:.2f} GiB buffer for max_in_cpu {max_in_cpu:,} "
                         "elements that no sub-group fits in (each is larger): set offload_param.max_in_cpu to 0 "
                         "to save it")
        ssd_params = sum(aligned(parts[i], align_p) * p for i in range(len(parts)) if on_ssd[i])
        # fetched in forward; fetched again in backward unless the coordinator kept it gathered because it is
        # reused within stage3_max_reuse_distance elements (partitioned_param_coordinator.__params_to_release:
        # the elements traversed between the two uses: the rest of the forward, then the backward of the
        # later layers, which under checkpointing recomputes their forward first)
        after = 0
        reread = 0
        for i in reversed(range(len(parts))):
            if on_ssd[i] and numels[i] + span * after >= reuse:
                reread += aligned(parts[i], align_p) * p
            after += numels[i]
        read["params_16bit"] = plan.grad_accum * (ssd_params + reread)
        settings["stage3_max_reuse_distance"] = reuse
        write["params_16bit"] = ssd_params
        if not ssd_params:
            notes.append("no parameter reaches the SSD (each partition is below "
                         f"{min_aio / MIB:g} MiB, or stays in CPU by max_in_cpu)")

    # ---- optimizer ------------------------------------------------------------------------------
    if plan.offload_optimizer == "nvme":
        s_max = max(sizes)
        host["optimizer_swap_buffers"] = opt_count * aligned(s_max, align_o) * o
        locked += host["optimizer_swap_buffers"]
        host["grad_flat_buffer"] = torch_pinned(P * p, opt_pin)
        locked += host["grad_flat_buffer"] if opt_pin else 0.0
        swapped_groups = 0
        for grp, size in zip(groups, sizes):
            if size * o >= min_aio:
                swapped_groups += 1
                a = aligned(size, align_o) * o
                disk["master"] += a
                disk["adam_m"] += a
                disk["adam_v"] += a
                for i in grp:
                    k = parts[i]
                    if k * o < min_aio:
                        continue
                    head = (k // align_o) * align_o
                    if head * o >= min_aio:
                        disk["grads"] += head * o
            else:
                pinned_grad = torch_pinned(size * o, opt_pin)
                host["unswapped_optimizer_states"] += 3 * size * o + pinned_grad
                locked += pinned_grad if opt_pin else 0.0
        if swapped_groups:
            transient = 2 * o * max(s for s in sizes if s * o >= min_aio)
        if swapped_groups < len(groups):
            notes.append(f"{len(groups) - swapped_groups} of {len(groups)} optimizer sub-group(s) are below "
                         f"{min_aio / MIB:g} MiB and stay in host RAM (as with CPU offload)")
        states = disk["master"] + disk["adam_m"] + disk["adam_v"]
        read["optimizer_states"] = states
        read["grads"] = disk["grads"]
        write["grads"] = disk["grads"]
        write["optimizer_states"] = states
    if disk["grads"]:
        notes.append("the fp32 gradients go to the SSD too (written at each accumulation boundary, read for the "
                     "step): 4 bytes per parameter beyond the 12 of master weights and Adam")
    return NvmeEstimate(plan, disk, host, locked, transient, read, write, r, tuple(notes), settings)


def run_io_summary(plan, ds_config: Mapping | None, step_time_s: float | None, *, spec=None,
                   bf16_states: bool = False, device: str = "cuda", bandwidth: Mapping | None = None) -> dict | None:
    """The ``nvme_io`` block of a run summary: the estimate's SSD traffic per step, the disk-only floor on the
    bandwidth measured in the NVMe folder (:func:`recorded_bandwidth`, or ``bandwidth``), and
    achieved/floor = floor / measured step time (as ``benchmarks/report.py`` does for CPU offload).
    None when the run has no NVMe target."""
    est = estimate_nvme(plan, spec=spec, ds_config=ds_config, bf16_states=bf16_states, device=device)
    if est is None:
        return None
    aio = (ds_config or {}).get("aio")
    bw = bandwidth or recorded_bandwidth(plan.nvme_path, aio)
    out = est.to_dict(bw)
    out["bandwidth"] = bw
    fl = out.get("floor_measured_disk")
    if fl and step_time_s:
        out["achieved_over_floor_serial"] = fl["floor_serial_s"] / step_time_s
        out["achieved_over_floor_overlap"] = fl["floor_overlap_s"] / step_time_s
    elif not bw:
        out["floor_note"] = (f"no bandwidth measured in {plan.nvme_path}: run `cookbook env --nvme-path "
                             f"{plan.nvme_path}` or `cookbook nvme-tune {plan.nvme_path}` before training")
    return out


def check_run(plan, ds_config: Mapping | None, summary: Mapping | None, *, device: str = "cuda", spec=None):
    """A finished NVMe run beside the estimate, as a pandas DataFrame (quantity, unit, estimate, measured, error %):
    the bytes of DeepSpeed's swap files under ``plan.nvme_path``/zero_stage_3 (``*.swp``; they stay after the run)
    and the storage bytes read and written per optimizer step (the summary's ``nvme_io.measured_disk_io``, from
    ``/proc/self/io``). Each row in GiB (2**30 bytes) when its estimate is at least 1 GiB, else MiB (2**20), rounded
    to 3 decimals; error % = (estimate − measured) / measured × 100; a quantity not measured shows ``—``."""
    import pandas as pd
    from .tables import tidy_frame
    est = estimate_nvme(plan, spec=spec, ds_config=ds_config, device=device)
    root = Path(plan.nvme_path or ".") / "zero_stage_3"
    on_disk = sum(f.stat().st_size for f in root.rglob("*.swp")) if root.is_dir() else None
    m = ((summary or {}).get("nvme_io") or {}).get("measured_disk_io") or {}

    def gb(key):
        return m[key] * GB if m.get(key) is not None else None
    rows = []
    for what, e, got in (("SSD bytes (swap files)", est.disk_bytes, on_disk),
                         ("bytes read per optimizer step (/proc/self/io)", est.read_bytes_per_step, gb("read_gb_per_step")),
                         ("bytes written per optimizer step (/proc/self/io)", est.write_bytes_per_step,
                          gb("write_gb_per_step"))):
        unit, div = ("GiB", GIB) if e >= GIB else ("MiB", MIB)
        rows.append({"quantity": what, "unit": unit, "estimate": round(e / div, 3),
                     "measured": None if got is None else round(got / div, 3),
                     "error %": round(100 * (e - got) / got, 1) + 0.0 if got else None})  # + 0.0: no "-0.0"
    return tidy_frame(pd.DataFrame(rows, columns=["quantity", "unit", "estimate", "measured", "error %"]),
                      rehearsal=False)


#: Columns of :func:`reference_runs` (one row per measured NVMe run; a disk probe or tune is one bandwidth row).
REFERENCE_COLUMNS = ["file", "date", "kind", "model", "params", "aio", "status", "s/step", "tokens/s", "host peak GiB",
                     "host estimate GiB", "host error %", "estimate basis", "disk GiB", "disk estimate GiB",
                     "achieved/floor", "read GB/s", "write GB/s", "tuned aio", "tuned read GB/s", "tuned write GB/s", "cause", "cause (short)",
                     "call", "note"]

#: Stops seen in the NVMe reference runs, by a fragment of the message: (short cause, what happened and what the
#: cookbook does about it now). ``{disk_est}``/``{free}``: the run's estimated swap GiB and the record's
#: ``machine.disk_free_gib``.
KNOWN_STOPS = (
    ("Not enough buffers", "DeepSpeed #3062; fixed since in build_config",
     "DeepSpeed #3062: the parameters DeepSpeed keeps swapped in (stage3_max_reuse_distance 1e9) took every "
     "offload_param.buffer_count buffer; fixed since in cookbook.dsconfig.build_config (stage3_max_reuse_distance 0 "
     "for NVMe parameters, buffer_count from the model; `cookbook lint` flags a config that cannot hold them)"),
    ("No space left on device", "disk full; launch now refuses it before the start",
     "the NVMe folder's disk filled up ({disk_est} of swap files estimated, {free} free on that machine); "
     "cookbook.launch now refuses an NVMe run whose swap files (+5 % + 1 GiB) exceed the free space, before any "
     "rank starts (cookbook.nvme.nvme_disk_refusal)"),
)


def _bandwidth_row(fname: str, kind: str, default: Mapping | None, best_name, best: Mapping | None,
                   date=None) -> dict:
    note = (f"best {best_name}: read {best['read_gb_s']:.2f}, write {best['write_gb_s']:.2f} GB/s"
            if best and best.get("read_gb_s") and best.get("write_gb_s") else "")
    return {"file": fname, "date": date, "kind": kind, "aio": "default", "read GB/s": (default or {}).get("read_gb_s"),
            "write GB/s": (default or {}).get("write_gb_s"), "tuned aio": best_name,
            "tuned read GB/s": (best or {}).get("read_gb_s"), "tuned write GB/s": (best or {}).get("write_gb_s"),
            "note": note}


def _stop_cause(message: str, run: Mapping, data: Mapping) -> tuple[str, str] | None:
    """(short, long) cause of a known stop (:data:`KNOWN_STOPS`), filled with the run's and record's numbers."""
    free = (data.get("machine") or {}).get("disk_free_gib")
    est = run.get("disk_estimate_gib")
    for fragment, short, long in KNOWN_STOPS:
        if fragment in (message or ""):
            return short, long.format(disk_est=f"{est:.1f} GiB" if isinstance(est, (int, float)) else "unknown GiB",
                                      free=f"{free:.1f} GiB" if isinstance(free, (int, float)) else "unknown GiB")
    return None


def _estimate_basis(run: Mapping) -> str | None:
    """Which estimate a measured run's host error is against: ``held out`` (the run's own estimate already had
    :data:`cookbook.memory.NVME_HOST_RUNTIME_GIB`), ``re-based, fitted on`` (today's estimate; the term was fitted
    on runs like it), ``as run, before the runtime term`` (a record that predates it), or None (no estimate)."""
    now, then = run.get("host_estimate_now_gib"), run.get("host_estimate_gib")
    if not isinstance(then, (int, float)):
        return None
    if not isinstance(now, (int, float)):
        return "as run, before the runtime term"
    return "held out" if abs(now - then) <= 0.01 else "re-based, fitted on"


def reference_runs(folder=None, pattern: str = "*nvme*.json"):
    """Measured NVMe offload shipped under ``data/reference/`` (files whose name contains ``nvme``), as a pandas
    DataFrame with :data:`REFERENCE_COLUMNS` (empty when there are none).

    Rows, by file shape:

    * a runs record (``"kind": "nvme_runs"``, written by ``python -m benchmarks.nvme_reference``): one row per
      measured run (kind ``NVMe run``: model, parameters, aio setting, s/step and tokens/s — median of the steps
      after the first —, host peak beside the estimate and its error %, GiB of swap files beside the estimate,
      achieved/floor on the bandwidth measured in the same call; for a run that did not finish, ``note`` holds its
      message and ``cause`` what is known about it, :data:`KNOWN_STOPS` — ``, not re-run`` added when no later
      record has a finished run of the same model), one ``aio tune`` row (DeepSpeed's default aio bandwidth in
      ``read/write GB/s``, the best setting in ``tuned …``) and one ``7B host extrapolation`` row (its range in
      ``note``), and one ``default vs tuned`` row per model that one call ran with both aio blocks
      (``aio_comparison``: tuned s/step, the ratio and the steps' spread in ``note``);
    * a disk probe (``benchmarks/nvme_bench.py``: ``settings`` with ``write_gb_s``/``read_gb_s``): one
      ``disk probe`` row with the default setting's bandwidth and the best one's;
    * anything else: one row saying it was not understood (never silently dropped); unreadable files: a row
      with the error in ``note``.
    """
    import pandas as pd
    if folder is None:
        from .models import DATA_DIR
        folder = DATA_DIR / "reference"
    rows = []
    for f in sorted(Path(folder).glob(pattern)):
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            rows.append({"file": f.name, "kind": "unreadable", "note": str(exc)})
            continue
        date = data.get("date") if isinstance(data, Mapping) else None
        if isinstance(data, Mapping) and isinstance(data.get("runs"), list):
            calls = [c.get("bandwidth") or {} for c in data.get("calls") or [] if isinstance(c, Mapping)]
            for n, bw in enumerate(calls or [data.get("bandwidth") or {}]):  # one tune per device call
                if bw.get("default") or bw.get("best"):
                    row = _bandwidth_row(f.name, "aio tune", bw.get("default"), json.dumps(bw.get("best_aio")),
                                         bw.get("best"), date)
                    if len(calls) > 1:  # which device call of the record, and its runs
                        row["call"] = f"call {n + 1} ({', '.join(data['calls'][n].get('runs') or []) or 'no run'})"
                    rows.append(row)
            for r in data["runs"]:
                if not isinstance(r, Mapping):
                    continue
                ok = r.get("status") == "ok"
                cause = None if ok else _stop_cause(str(r.get("message") or ""), r, data)
                rows.append({"file": f.name, "date": date, "kind": "NVMe run", "model": r.get("model"),
                             "params": r.get("params"), "aio": r.get("aio"), "status": r.get("status"),
                             "s/step": r.get("s_per_step"), "tokens/s": r.get("tokens_per_s"),
                             "host peak GiB": r.get("host_peak_gib"),
                             # today's estimator where the record has it (benchmarks/nvme_reference.py), the
                             # estimate as the run had it in the note
                             "host estimate GiB": r.get("host_estimate_now_gib") or r.get("host_estimate_gib"),
                             "host error %": (r.get("host_error_now_pct") if r.get("host_estimate_now_gib")
                                              else r.get("host_error_pct")),
                             "estimate basis": _estimate_basis(r) if ok else None,
                             "disk GiB": r.get("disk_gib"),
                             "disk estimate GiB": r.get("disk_estimate_gib"),
                             "achieved/floor": r.get("achieved_over_floor"),
                             "read GB/s": r.get("bandwidth_read_gb_s"), "write GB/s": r.get("bandwidth_write_gb_s"),
                             "_cause": cause, "note": (str(r.get("message") or "")[:200] if not ok else
                                                       f"host estimate as run: {r['host_estimate_gib']:.2f} GiB "
                                                       f"({r.get('host_error_pct'):+.1f} %), before "
                                                       "memory.NVME_HOST_RUNTIME_GIB (fitted on runs like this one)"
                                                       if _estimate_basis(r) == "re-based, fitted on"
                                                       and r.get("host_error_pct") is not None else "")})
            for c in data.get("aio_comparison") or []:  # default vs tuned aio, one model, one call
                if isinstance(c, Mapping) and c.get("speedup"):
                    spread = c.get("spread_pct")
                    rows.append({"file": f.name, "date": date, "kind": "default vs tuned", "model": c.get("model"),
                                 "aio": "tuned", "s/step": c.get("tuned_s_per_step"),
                                 "note": f"{c.get('model')}: tuned aio {c.get('tuned_s_per_step'):.2f} s/step vs "
                                         f"DeepSpeed's default {c.get('default_s_per_step'):.2f} in the same call "
                                         f"({c['speedup']:.2f}×" + (f"; the later steps of each run spread by up to "
                                                                    f"{spread:.1f} %" if spread is not None else "")
                                         + (")" if spread is None or abs(c["speedup"] - 1) * 100 > spread else
                                            ": not told apart from that spread)")})
            fit = data.get("host_fit") or {}
            if fit.get("status") == "ok":
                rows.append({"file": f.name, "date": date, "kind": "7B host extrapolation",
                             "model": (fit.get("target") or {}).get("model"),
                             "params": fit.get("target_params"), "host peak GiB": fit.get("central_gib"),
                             "host estimate GiB": fit.get("target_estimate_gib"), "note": fit.get("verdict")})
        elif isinstance(data, Mapping) and isinstance(data.get("settings"), list):
            ok = [s for s in data["settings"] if isinstance(s, Mapping) and s.get("read_gb_s") and s.get("write_gb_s")]
            default = next((s for s in ok if all(s.get(k) == v for k, v in AIO_DEFAULTS.items())), None)
            best = next((s for s in ok if s.get("name") == data.get("best")), None)
            rows.append(_bandwidth_row(f.name, "disk probe", default, data.get("best"), best, date))
        else:
            rows.append({"file": f.name, "kind": "not understood",
                         "note": "neither an NVMe runs record (runs) nor a disk probe (settings)"})
    for i, row in enumerate(rows):  # a run that did not finish: was one of that model and aio finished later?
        cause = row.pop("_cause", None)
        if row.get("kind") != "NVMe run" or row.get("status") == "ok":
            continue
        # later: a later date, or the same date in a file that sorts after (…-01.json, …-01b.json)
        later = next((o for j, o in enumerate(rows) if o.get("kind") == "NVMe run" and o.get("status") == "ok"
                      and o.get("model") == row["model"] and o.get("aio") == row.get("aio")
                      and (str(o.get("date") or ""), j > i and o.get("file") != row.get("file"))
                      > (str(row.get("date") or ""), False)), None)
        since = f"ran since: {later['file']}, ok" if later is not None else None
        if cause:
            row["cause"] = cause[1] + (f"; {since}" if since else f"; not re-run since (no later finished "
                                                                  f"{row['model']} run with {row.get('aio')} aio in these records)")
            row["cause (short)"] = cause[0] + (f", {since}" if since else ", not re-run")
        elif since:
            row["cause"] = row["cause (short)"] = since
    return pd.DataFrame(rows, columns=REFERENCE_COLUMNS)


#: Columns of :func:`reference_run_table`.
RUN_TABLE_COLUMNS = ["date", "model", "parameters (B)", "aio", "status", "s/step", "tokens/s", "host peak GiB",
                     "host estimate GiB", "host error %", "estimate basis", "disk GiB", "disk estimate GiB", "achieved/floor",
                     "stopped with"]


def reference_run_table(frame=None):
    """The NVMe training runs of :func:`reference_runs` (``frame``, default: the shipped ones) as notebook 06 shows
    them: one row per run, :data:`RUN_TABLE_COLUMNS` — model, parameters in billions, the aio setting (DeepSpeed's
    ``default`` or the call's ``tuned``), status, s/step, tokens/s, host peak beside the estimate (GiB, error % =
    (estimate − measured) / measured), swap-file GiB beside the estimate, achieved/floor (the disk-only floor over
    the measured step), and for a run that did not finish its message with the known cause. Rounded for reading;
    no raw None/NaN (:func:`cookbook.tables.tidy_frame`: ``—``)."""
    import pandas as pd
    from .tables import tidy_frame
    df = reference_runs() if frame is None else frame
    runs = df[df["kind"] == "NVMe run"] if len(df) else df
    rows = []
    for _, r in runs.iterrows():
        def num(col, nd):
            v = r.get(col)
            return round(float(v), nd) if isinstance(v, (int, float)) and not pd.isna(v) else None
        stop = ""
        if r.get("status") != "ok":
            stop = str(r.get("note") or r.get("status"))
            if isinstance(r.get("cause"), str) and r.get("cause"):
                stop += f" — {r['cause']}"
        params = r.get("params")
        rows.append({"date": r.get("date"), "model": r.get("model"),
                     "parameters (B)": round(params / 1e9, 2) if isinstance(params, (int, float)) and not pd.isna(params)
                     else None, "aio": r.get("aio"), "status": r.get("status"), "s/step": num("s/step", 2),
                     "tokens/s": num("tokens/s", 0), "host peak GiB": num("host peak GiB", 2),
                     "host estimate GiB": num("host estimate GiB", 2), "host error %": num("host error %", 1),
                     "estimate basis": r.get("estimate basis"),
                     "disk GiB": num("disk GiB", 2), "disk estimate GiB": num("disk estimate GiB", 2),
                     "achieved/floor": num("achieved/floor", 2), "stopped with": stop})
    return tidy_frame(pd.DataFrame(rows, columns=RUN_TABLE_COLUMNS), rehearsal=False)


def _aio_words(block) -> str:
    try:
        b = json.loads(block) if isinstance(block, str) and block.startswith("{") else block
    except json.JSONDecodeError:
        b = block
    if not isinstance(b, Mapping):
        return str(b)
    return (f"block {b.get('block_size', 0) / 2**20:g} MiB, queue depth {b.get('queue_depth')}, "
            f"{b.get('intra_op_parallelism')} thread(s)")


def reference_lines(frame=None) -> list[str]:
    """One short line per bandwidth measurement in :func:`reference_runs` (``frame``, default: the shipped ones):
    DeepSpeed's default aio read/write GB/s beside the tuned setting's, and the ratio; default vs tuned aio in
    training (one model, one call: s/step and the ratio beside the steps' spread); and the LLaMA-7B host-RAM
    extrapolation's verdict. [] when there are none."""
    import pandas as pd
    df = reference_runs() if frame is None else frame
    lines = []
    fits = df[df["kind"] == "7B host extrapolation"]
    newest = fits.iloc[-1]["file"] if len(fits) else None  # files sort by date
    for _, r in df.iterrows():
        if r["kind"] in ("disk probe", "aio tune"):
            what = "disk probe, benchmarks/nvme_bench.py" if r["kind"] == "disk probe" else "cookbook nvme-tune"
            if isinstance(r.get("call"), str):  # a record of several device calls
                what += f" in {r['call']}"
            rd, wr, trd, twr = (r.get(c) for c in ("read GB/s", "write GB/s", "tuned read GB/s", "tuned write GB/s"))
            have = lambda *v: all(isinstance(x, (int, float)) and not pd.isna(x) for x in v)  # noqa: E731
            line = f"{r['file']} — {what}: DeepSpeed's default aio " + (
                f"read {rd:.2f} / write {wr:.2f} GB/s" if have(rd, wr) else "not measured")
            if have(trd, twr):
                line += f"; tuned ({_aio_words(r.get('tuned aio'))}) read {trd:.2f} / write {twr:.2f} GB/s"
                if have(rd, wr):
                    line += f" ({trd / rd:.2f}× / {twr / wr:.2f}×)"
            lines.append(line)
        elif r["kind"] == "default vs tuned" and r.get("note"):
            lines.append(f"{r['file']} — default vs tuned aio in training: {r['note']}")
        elif r["kind"] == "7B host extrapolation" and r.get("note"):
            lines.append(f"{r['file']} — LLaMA-7B's host RAM extrapolated from the measured runs: {r['note']}"
                         + ("" if r["file"] == newest else f" (superseded by {newest})"))
    return lines


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def _csv_ints(text: str) -> list[int]:
    try:
        return [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise NvmeError(f"{text!r}: give comma-separated integers, e.g. 2,5,8") from None


def _run_cli(args) -> int:
    import contextlib
    try:
        sweep = None
        if args.sweep_config:
            try:
                sweep = json.loads(Path(args.sweep_config).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise NvmeError(f"--sweep-config {args.sweep_config}: cannot be read as JSON ({exc})") from None
        with contextlib.redirect_stdout(sys.stderr):  # the JSON owns stdout
            result = tune(args.path, io_size_mib=args.io_size_mib, time_limit_s=args.time_limit_s, sweep=sweep,
                          loops=args.loops, buffer_counts=_csv_ints(args.buffer_counts),
                          buffer_sizes=_csv_ints(args.buffer_sizes), max_locked_mib=args.max_locked_mib,
                          elem_size=4 if args.fp32 else 2, read_share=args.read_share)
    except NvmeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1) + "\n"
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            print(f"error: -o {args.output}: cannot be written ({exc.strerror}); pick another path", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    if args.facts:
        # the facts file is plain JSON (cookbook env --dump-facts writes it; env validates it when it loads it)
        try:
            facts = json.loads(Path(args.facts).read_text()) if Path(args.facts).is_file() else {}
        except (OSError, ValueError) as exc:
            print(f"error: --facts {args.facts}: cannot be read as JSON ({exc}); give a facts file written by "
                  "`cookbook env --dump-facts` or a new path", file=sys.stderr)
            return 2
        facts["nvme_tuned"] = {k: result[k] for k in ("aio", "offload_param", "measured", "path", "measured_at")}
        Path(args.facts).write_text(json.dumps(facts, indent=1, default=str) + "\n")
    m = result["measured"]
    sp = m["speedup_vs_default"]
    print(f"best aio {json.dumps(result['aio'])}: read {m['best']['read_gb_s']:.2f} GB/s, write "
          f"{m['best']['write_gb_s']:.2f} GB/s"
          + (f" ({sp['read']:.2f}× / {sp['write']:.2f}× DeepSpeed's defaults)" if sp else "")
          + (f"; offload_param {json.dumps(result['offload_param'])}" if result["offload_param"] else "")
          + (" — stopped early by the time limit" if result["stopped_early"] else "")
          + (f" -> {args.output}" if args.output else ""), file=sys.stderr)
    return 0


def register(subparsers) -> None:
    """Add ``cookbook nvme-tune PATH [-o FILE] [--io-size-mib N] [--time-limit-s S] ...``."""
    p = subparsers.add_parser(
        "nvme-tune", help="tune DeepSpeed's aio settings and swap buffers on an NVMe folder",
        description="Sweep DeepSpeed's aio settings (block_size, queue_depth, intra_op_parallelism, single_submit, "
                    "overlap_events) with DeepSpeed's own ds_io engine, then the parameter swap buffers "
                    "(buffer_count × buffer_size), on PATH; write the best as JSON for `cookbook config zero3-nvme "
                    "--aio-config FILE`. Bounded by --io-size-mib and --time-limit-s; deletes its files.")
    p.add_argument("path", help="folder on the NVMe SSD (the run's --nvme-path)")
    p.add_argument("-o", "--output", default=None, help="write the JSON here (default stdout)")
    p.add_argument("--io-size-mib", type=int, default=64, help="MiB written and read per setting and pass (default 64)")
    p.add_argument("--time-limit-s", type=float, default=120.0,
                   help="no new setting starts after this many seconds (default 120; op compile time excluded)")
    p.add_argument("--loops", type=int, default=2, help="timed passes per setting after one warm-up (default 2)")
    p.add_argument("--sweep-config", default=None,
                   help="JSON of setting lists (DeepSpeed names, or ds_nvme_tune's io_parallel/sequential_requests)")
    p.add_argument("--buffer-counts", default="2,5,8", help="offload_param.buffer_count values (default 2,5,8)")
    p.add_argument("--buffer-sizes", default="100000000",
                   help="offload_param.buffer_size values in elements (default 1e8; use ≥ your largest partition)")
    p.add_argument("--max-locked-mib", type=int, default=2048,
                   help="skip buffer settings that would lock more host RAM than this (default 2048)")
    p.add_argument("--fp32", action="store_true", help="fp32 parameters (4-byte swap elements) instead of 16-bit")
    p.add_argument("--read-share", type=float, default=0.5,
                   help="fraction of the run's SSD bytes that are reads (cookbook estimate shows read and write GB "
                        "per step); the best setting minimises read_share/read_bw + (1-read_share)/write_bw (default 0.5)")
    p.add_argument("--facts", default=None, help="also store the result in this facts file (key nvme_tuned)")
    p.set_defaults(func=_run_cli)


__all__ = ["AIO_DEFAULTS", "AIO_KEYS", "BANDWIDTH_RECORD", "CONSUMER_PCIE4_SSD", "DEFAULT_SWEEP", "ENDURANCE_NOTE",
           "KNOWN_STOPS", "NVME_DISK_TERMS", "NVME_HOST_TERMS", "NvmeError", "REFERENCE_COLUMNS", "RUN_TABLE_COLUMNS", "NvmeEstimate", "async_io_available", "check_run", "estimate_nvme",
           "load_aio_config", "measure_bandwidth", "prepare_async_io", "recorded_bandwidth", "reference_lines", "reference_run_table", "reference_runs", "register", "run_io_summary",
           "sweep_settings", "tune", "validate_aio"]
