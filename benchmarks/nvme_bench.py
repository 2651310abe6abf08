"""Sequential read/write bandwidth of an NVMe offload folder through DeepSpeed's async I/O op (issue 18).

The same call path as DeepSpeed's ``ds_io`` with its default ``aio_handle`` engine
(``deepspeed/nvme/ds_aio_handle.py``: ``AsyncIOBuilder().load().aio_handle(block_size, queue_depth,
single_submit, overlap_events, intra_op_parallelism)``, a page-locked buffer from
``new_cpu_locked_tensor``, ``pwrite``/``pread`` then ``wait``), run for several ``aio`` settings in one
process so a sweep costs seconds, not a process start per setting. Bounded: ``--deadline-s`` stops the
sweep between settings; every file it writes is removed.

    python -m benchmarks.nvme_bench --folder /tmp/nvme_probe --io-gib 1 --out nvme.json

GB/s are 1e9 bytes per second; each setting writes (then reads back) ``loops`` files of ``io_gib`` GiB
after one untimed warm-up of each, and reports the median.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

GIB = 2 ** 30

#: DeepSpeed's aio defaults (``deepspeed/runtime/swap_tensor/constants.py``: block 1 MiB, queue depth 8,
#: intra-op parallelism 1, single_submit False, overlap_events True) first, then settings of the kind
#: ``ds_nvme_tune`` sweeps (``deepspeed/nvme/perf_generate_param.py``: block size, queue depth, parallelism).
SETTINGS = [
    {"name": "deepspeed-default", "block_size": 1048576, "queue_depth": 8, "single_submit": False,
     "overlap_events": True, "intra_op_parallelism": 1},
    {"name": "bs1M-qd32-p4", "block_size": 1048576, "queue_depth": 32, "single_submit": False,
     "overlap_events": True, "intra_op_parallelism": 4},
    {"name": "bs1M-qd64-p8", "block_size": 1048576, "queue_depth": 64, "single_submit": False,
     "overlap_events": True, "intra_op_parallelism": 8},
    {"name": "bs4M-qd32-p8", "block_size": 4194304, "queue_depth": 32, "single_submit": False,
     "overlap_events": True, "intra_op_parallelism": 8},
    {"name": "bs8M-qd16-p8", "block_size": 8388608, "queue_depth": 16, "single_submit": False,
     "overlap_events": True, "intra_op_parallelism": 8},
]


def disk_facts(folder: Path) -> dict:
    """Free space and the file system of ``folder`` (``shutil.disk_usage``, ``findmnt``, ``lsblk``)."""
    du = shutil.disk_usage(folder)
    out = {"folder": str(folder), "free_gib": du.free / GIB, "total_gib": du.total / GIB}
    for name, cmd in (("findmnt", ["findmnt", "-T", str(folder), "-o", "SOURCE,FSTYPE,OPTIONS", "-n"]),
                      ("lsblk", ["lsblk", "-d", "-o", "NAME,SIZE,ROTA,MODEL"])):
        try:
            out[name] = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            out[name] = f"unavailable: {exc}"
    return out


def sweep(folder: str | os.PathLike, io_gib: float = 1.0, loops: int = 2, settings=None,
          deadline_s: float = 90.0) -> dict:
    """Write and read bandwidth, GB/s, for each aio setting in ``settings`` (default :data:`SETTINGS`).

    Raises:
        RuntimeError: DeepSpeed's async I/O op cannot be built here (libaio missing): the message says so.
    """
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder
    t0 = time.time()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    builder = AsyncIOBuilder()
    if not builder.is_compatible():
        raise RuntimeError("DeepSpeed's async I/O op is not compatible here (libaio and its header missing?); "
                           "install libaio-dev (Debian/Ubuntu) and retry")
    op = builder.load()
    nbytes = int(io_gib * GIB)
    rows = []
    for s in (settings or SETTINGS):
        if time.time() - t0 > deadline_s:
            rows.append(dict(s, status="not_run", message=f"sweep deadline {deadline_s:.0f} s reached"))
            continue
        h = op.aio_handle(s["block_size"], s["queue_depth"], s["single_submit"], s["overlap_events"],
                          s["intra_op_parallelism"])
        buf = h.new_cpu_locked_tensor(nbytes, torch.empty(0, dtype=torch.uint8))
        buf.copy_(torch.randint(0, 255, (nbytes,), dtype=torch.uint8))
        files = [folder / f"probe_{s['name']}_{i}.bin" for i in range(loops + 1)]
        w, r = [], []
        try:
            for f in files:                      # the first write is a warm-up
                t = time.perf_counter()
                assert h.pwrite(buf, str(f), False, True) != -1
                h.wait()
                w.append(time.perf_counter() - t)
            for f in files:                      # the first read is a warm-up
                t = time.perf_counter()
                assert h.pread(buf, str(f), False, True) != -1
                h.wait()
                r.append(time.perf_counter() - t)
            rows.append(dict(s, status="ok", write_gb_s=nbytes / statistics.median(w[1:]) / 1e9,
                             read_gb_s=nbytes / statistics.median(r[1:]) / 1e9,
                             write_s=[round(x, 4) for x in w], read_s=[round(x, 4) for x in r]))
        except Exception as exc:  # noqa: BLE001 - recorded per setting
            rows.append(dict(s, status="failed", message=f"{type(exc).__name__}: {exc}"))
        finally:
            h.free_cpu_locked_tensor(buf)
            for f in files:
                f.unlink(missing_ok=True)
    ok = [x for x in rows if x.get("status") == "ok"]
    best = max(ok, key=lambda x: x["read_gb_s"] + x["write_gb_s"]) if ok else None
    default = next((x for x in ok if x["name"] == "deepspeed-default"), None)
    out = {"io_bytes": nbytes, "loops": loops, "settings": rows, "facts": disk_facts(folder),
           "elapsed_s": time.time() - t0, "best": best["name"] if best else None}
    if best and default:
        out["best_over_default"] = {"read": best["read_gb_s"] / default["read_gb_s"],
                                    "write": best["write_gb_s"] / default["write_gb_s"]}
        out["best_aio_block"] = {k: best[k] for k in ("block_size", "queue_depth", "intra_op_parallelism",
                                                      "single_submit", "overlap_events")}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", required=True, help="folder on the disk to probe (files are removed afterwards)")
    p.add_argument("--io-gib", type=float, default=1.0, help="GiB per file")
    p.add_argument("--loops", type=int, default=2, help="timed files per setting (after one warm-up)")
    p.add_argument("--deadline-s", type=float, default=90.0, help="no new setting starts after this")
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    res = sweep(a.folder, a.io_gib, a.loops, deadline_s=a.deadline_s)
    Path(a.out).write_text(json.dumps(res, indent=1))
    for s in res["settings"]:
        print(f"{s['name']:>18}: {s.get('status')} write {s.get('write_gb_s', 0):.2f} GB/s read {s.get('read_gb_s', 0):.2f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
