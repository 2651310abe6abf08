"""Kill-safe checkpoints: written into a temporary folder, renamed into place when complete,
and only then recorded as the latest.

Layout under ``OUTPUT_DIR/checkpoints``::

    step-00000020/            a complete checkpoint
        deepspeed/            DeepSpeed engine state (``accelerator.save_state``): model, optimizer,
                              scheduler, RNG states, one shard per rank
        hf/                   16-bit weights gathered from all ranks (``save_pretrained``, safetensors);
                              with ``--save-16bit final`` only the final checkpoint has it, the others
                              keep ``config/`` (config.json and the tokenizer, no weights)
        trainer_state.json    step, seed, data position
        COMPLETE              written last, holds the list of files and their sizes
    .tmp-step-00000030/       a save in progress (or left by a crash): never used
    latest                    the name of the newest complete checkpoint (replaced atomically)
    .del-step-00000010/       a checkpoint being deleted by ``--save-total-limit`` (renamed first)

A rename within one filesystem is atomic (POSIX ``rename(2)``), so a crash leaves either the old
state or the new one; ``COMPLETE`` also guards against a folder that was copied in part.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

PREFIX = "step-"
TMP_PREFIX = ".tmp-step-"
DEL_PREFIX = ".del-step-"
MARKER = "COMPLETE"
#: Folder of a checkpoint without 16-bit weights that holds the model config and tokenizer.
CONFIG_DIR = "config"


def step_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, fsync and ``os.replace``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _inventory(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != MARKER}


def tmp_dir(root: Path, step: int) -> Path:
    """The temporary folder a save of ``step`` is written into."""
    return Path(root) / f"{TMP_PREFIX}{step:08d}"


def finalize(root: Path, step: int) -> Path:
    """Mark the temporary save of ``step`` complete, rename it into place and record it as latest.

    Call on one process (rank 0) after every rank has finished writing.
    Returns the final folder.
    """
    root = Path(root)
    tmp = tmp_dir(root, step)
    atomic_write_text(tmp / MARKER, json.dumps({"step": step, "files": _inventory(tmp)}, indent=1))
    final = root / step_name(step)
    if final.exists():  # a save of the same step from an earlier attempt
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    atomic_write_text(root / "latest", final.name + "\n")
    return final


def is_complete(folder: Path) -> tuple[bool, str]:
    """Whether ``folder`` is a complete checkpoint, and why not."""
    folder = Path(folder)
    marker = folder / MARKER
    if not marker.is_file():
        return False, f"{folder.name}: no {MARKER} marker (the save did not finish)"
    try:
        files = json.loads(marker.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return False, f"{folder.name}: unreadable {MARKER} marker ({exc})"
    for rel, size in files.items():
        p = folder / rel
        if not p.is_file():
            return False, f"{folder.name}: {rel} is missing"
        if p.stat().st_size != size:
            return False, f"{folder.name}: {rel} has {p.stat().st_size} bytes, {size} were written"
    return True, "complete"


def find_resumable(root: Path) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint under ``root`` and messages about what was skipped.

    Incomplete folders (no marker, missing or truncated files) and leftover temporary folders
    are skipped with a message each; the previous complete checkpoint is returned.
    """
    root = Path(root)
    messages: list[str] = []
    if not root.is_dir():
        return None, messages
    for tmp in sorted(root.glob(f"{TMP_PREFIX}*")):
        messages.append(f"skipping {tmp.name}: a save that never finished (left by a crash)")
    for folder in sorted(root.glob(f"{PREFIX}*"), reverse=True):
        ok, why = is_complete(folder)
        if ok:
            return folder, messages
        messages.append(f"skipping {why}; using the previous complete checkpoint")
    return None, messages


def rotate(root: Path, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` complete checkpoints under ``root`` (``--save-total-limit``,
    as the HF Trainer's ``save_total_limit``); returns the names deleted, oldest first.

    Only complete checkpoints count and only older ones go: the newest complete checkpoint (the one
    ``latest`` names and ``--resume`` would use) is never deleted, whatever ``keep``; incomplete
    folders are left for :func:`find_resumable` to report. Each deletion first renames the folder to
    ``.del-step-N`` (atomic), so a crash mid-delete never leaves a half-deleted ``step-N`` behind;
    leftovers of such a crash are removed here. Call on one process (rank 0).

    Raises:
        ValueError: ``keep`` below 1.
    """
    if keep < 1:
        raise ValueError(f"keep={keep}: the newest complete checkpoint is always kept; give 1 or more")
    root = Path(root)
    for left in root.glob(f"{DEL_PREFIX}*"):
        shutil.rmtree(left, ignore_errors=True)
    complete = [f for f in sorted(root.glob(f"{PREFIX}*")) if is_complete(f)[0]]
    doomed = complete[:-keep]
    for folder in doomed:
        trash = root / (DEL_PREFIX + folder.name[len(PREFIX):])
        os.rename(folder, trash)
        _fsync_dir(root)
        shutil.rmtree(trash)
    return [f.name for f in doomed]


def checkpoint_step(folder: Path) -> int:
    return int(json.loads((Path(folder) / "trainer_state.json").read_text())["step"])


# ----------------------------------------------------------------------------------------------
# fp32 weights from a DeepSpeed checkpoint (DeepSpeed's zero_to_fp32)

def fp32_conversion_host_gib(num_params: int) -> float:
    """Host RAM DeepSpeed's ``zero_to_fp32`` needs, GiB: it loads every rank's fp32 master-weight
    partition (4 bytes per parameter over all ranks) and builds the merged fp32 state dict (another
    4 bytes per parameter): about 8·N bytes (deepspeed/utils/zero_to_fp32.py,
    ``_get_fp32_state_dict_from_zero*_checkpoint``). LLaMA-7B: ~50 GiB; Qwen-14B: ~106 GiB."""
    return 8 * num_params / 2 ** 30


#: What the ``checkpoint`` argument of :func:`to_fp32` (``cookbook to-fp32 CHECKPOINT``) takes, for its refusals.
CHECKPOINT_HINT = ("give a checkpoint folder written by cookbook train (OUTPUT_DIR/checkpoints/step-NNNNNNNN) or the "
                   "run's OUTPUT_DIR (its newest complete checkpoint)")


def checkpoint_problem(checkpoint: str | os.PathLike) -> str | None:
    """Why ``checkpoint`` (the argument of :func:`to_fp32`) is not a complete cookbook checkpoint, naming the
    argument, its value and the fix; None when it is one (or a run folder holding one). Told apart: a path
    that does not exist, a file, a run folder without a complete checkpoint, a folder that is no checkpoint
    at all, and a checkpoint whose save did not finish (no ``COMPLETE`` marker, missing or cut files)."""
    folder = Path(checkpoint)
    arg = f"checkpoint {str(checkpoint)!r}"
    if not folder.exists():
        return f"{arg}: the folder does not exist; {CHECKPOINT_HINT}"
    if not folder.is_dir():
        return f"{arg}: a file, not a folder; {CHECKPOINT_HINT}"
    if (folder / "checkpoints").is_dir():
        found, _ = find_resumable(folder / "checkpoints")
        if found is None:
            why = [is_complete(f)[1] for f in sorted((folder / "checkpoints").glob(f"{PREFIX}*"))]
            return (f"{arg}: a run folder without a complete checkpoint under {folder / 'checkpoints'}"
                    + (f" ({'; '.join(why)})" if why else "") + "; train with --save-steps N (or let the run "
                    "reach its final save), then give that folder again")
        return None
    ok, why = is_complete(folder)
    if ok:
        return None
    if not (folder / MARKER).exists() and not any((folder / n).exists() for n in ("deepspeed", "trainer_state.json")):
        return (f"{arg}: not a cookbook checkpoint (no {MARKER} marker, no deepspeed/ folder, no checkpoints/ "
                f"folder); {CHECKPOINT_HINT}")
    return f"{arg}: {why}; give a complete one (a step-NNNNNNNN folder beside it, or the run's OUTPUT_DIR)"


def to_fp32(checkpoint: str | os.PathLike, output_dir: str | os.PathLike) -> Path:
    """Write fp32 weights (safetensors) from a cookbook checkpoint with DeepSpeed's ``zero_to_fp32``,
    plus the config and tokenizer, so ``AutoModelForCausalLM.from_pretrained(output_dir)`` loads them.

    Args:
        checkpoint: ``OUTPUT_DIR/checkpoints/step-N`` (or a run's ``OUTPUT_DIR``: its latest checkpoint).
        output_dir: where to write.

    Raises:
        FileNotFoundError: no complete checkpoint there (the message names ``checkpoint``, its value and
            what to give instead: see :func:`checkpoint_problem`).
    """
    folder = Path(checkpoint)
    problem = checkpoint_problem(checkpoint)
    if problem:
        raise FileNotFoundError(problem)
    if (folder / "checkpoints").is_dir():
        folder, _ = find_resumable(folder / "checkpoints")
    from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_state_dict
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    convert_zero_checkpoint_to_state_dict(str(folder / "deepspeed"), str(out), safe_serialization=True, tag="pytorch_model")
    meta = folder / "hf" if (folder / "hf").is_dir() else folder / CONFIG_DIR
    for f in meta.iterdir():
        if f.suffix in (".json", ".model", ".txt") and not f.name.endswith(".index.json"):
            shutil.copy2(f, out / f.name)
    cfg = json.loads((out / "config.json").read_text())
    cfg["torch_dtype"] = cfg["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


# ----------------------------------------------------------------------------------------------
# the saved 16-bit model, read back

def inspect_saved_model(folder: str | os.PathLike, *, full_load_max_params: float = 2e9,
                        eval_examples: int = 8, seq_len: int = 128) -> dict:
    """What a saved 16-bit model folder holds, read back from disk, and (when small) a real reload.

    Reads the safetensors headers (names, shapes, dtypes; no tensor data), so it is cheap for any
    size. When the model has at most ``full_load_max_params`` parameters it is also loaded with
    ``transformers.AutoModelForCausalLM.from_pretrained`` and its loss computed on the first
    ``eval_examples`` shipped examples (truncated to ``seq_len`` tokens) with the saved tokenizer.

    Returns:
        ``{"folder", "files", "tensors", "params", "bytes", "dtypes", "empty_tensors", "reloaded",
        "reload_loss", "reload_params"}`` (reload fields None when not loaded).

    Raises:
        FileNotFoundError: the folder has no safetensors weights.
    """
    from safetensors import safe_open
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors files; was the run saved (final_save=True) and did it finish?")
    tensors, params, dtypes, empty = 0, 0, set(), []
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():
                sl = st.get_slice(name)
                shape = sl.get_shape()
                numel = math.prod(shape)
                tensors += 1
                params += numel
                dtypes.add(str(sl.get_dtype()))
                if numel == 0:
                    empty.append(name)
    out = {"folder": str(folder), "files": [f.name for f in files], "tensors": tensors, "params": params,
           "bytes": sum(f.stat().st_size for f in files), "dtypes": sorted(dtypes), "empty_tensors": empty,
           "reloaded": False, "reload_loss": None, "reload_params": None}
    if params <= full_load_max_params:
        import torch
        from transformers import AutoModelForCausalLM
        from .data import collate, load_records, load_tokenizer, tokenize
        from .hardware import quiet_loading_bars
        with quiet_loading_bars():  # no "Loading weights" bar kept in a notebook cell's output
            model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        model.eval()
        tok = load_tokenizer(folder if (folder / "tokenizer_config.json").is_file() else None)
        records = load_records(None).select(range(eval_examples))
        data = tokenize(records, tok, seq_len)
        batch = collate(data.input_ids, data.labels, tok.pad_token_id)
        with torch.no_grad():
            loss = float(model(**batch).loss)
        out.update(reloaded=True, reload_loss=loss,
                   reload_params=sum(p.numel() for p in model.parameters()),
                   reload_dtype=str(next(model.parameters()).dtype))
    return out


def _to_fp32_cli(args) -> int:
    try:
        out = to_fp32(args.checkpoint, args.output_dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"fp32 weights written to {out}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("to-fp32", help="fp32 weights from a checkpoint (DeepSpeed's zero_to_fp32)",
                              description=to_fp32.__doc__.splitlines()[0] + " Needs about 8 bytes of host RAM "
                                          "per parameter (LLaMA-7B ~50 GiB, Qwen-14B ~106 GiB).")
    p.add_argument("checkpoint", help="OUTPUT_DIR/checkpoints/step-N, or a run's OUTPUT_DIR for its latest checkpoint")
    p.add_argument("output_dir", help="where to write model.safetensors + config")
    p.set_defaults(func=_to_fp32_cli)
