"""Instruction data: load through ``datasets``, format, tokenize with loss only on the response.

Records carry ``instruction``, ``input`` (may be empty) and ``output``. The prompt follows the
Alpaca layout (Taori et al., 2023, github.com/tatsu-lab/stanford_alpaca); labels are -100 on every
prompt token, so the cross-entropy covers only the response and its end-of-sequence token.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .models import DATASET_PATH, TOKENIZER_DIR

FIELDS = ("instruction", "input", "output")
IGNORE_INDEX = -100  # torch.nn.CrossEntropyLoss's default ignore_index


class DataError(ValueError):
    """The dataset cannot be used; the message names the file, the field and the fix."""


def format_prompt(instruction: str, input: str = "") -> str:
    """The prompt text before the response (Alpaca layout)."""
    if input:
        return f"### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
    return f"### Instruction:\n{instruction}\n\n### Response:\n"


def load_records(path: str | os.PathLike | None = None):
    """Load an instruction dataset with ``datasets``.

    Args:
        path: a ``.jsonl``/``.json`` file, a folder written by ``Dataset.save_to_disk``, or None
            for the shipped ``data/instructions.jsonl``.

    Returns:
        a ``datasets.Dataset`` with at least the fields ``instruction`` and ``output``
        (``input`` is added empty when absent).

    Raises:
        DataError: missing or empty file, unparsable JSON, or records without the fields.
    """
    import datasets

    path = Path(path) if path else DATASET_PATH
    if not path.exists():
        raise DataError(f"dataset={str(path)!r}: not found ({path.resolve()}); pass --dataset with a JSONL "
                        "file of {instruction, input, output} records or a datasets folder")
    if path.is_dir():
        try:
            ds = datasets.load_from_disk(str(path))
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            raise DataError(f"dataset={str(path)!r}: not a folder written by Dataset.save_to_disk ({exc})") from None
        if isinstance(ds, datasets.DatasetDict):
            if "train" not in ds:
                raise DataError(f"dataset={str(path)!r}: DatasetDict without a 'train' split; save the training split")
            ds = ds["train"]
    else:
        if path.stat().st_size == 0:
            raise DataError(f"dataset={str(path)!r}: the file is empty; it needs JSONL records with "
                            "instruction, input and output")
        try:
            ds = datasets.load_dataset("json", data_files=str(path), split="train")
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"dataset={str(path)!r}: cannot be read as JSON lines ({type(exc).__name__}: {exc}); "
                            "each line must be one JSON object") from None
    if len(ds) == 0:
        raise DataError(f"dataset={str(path)!r}: no records; it needs at least one")
    missing = [f for f in ("instruction", "output") if f not in ds.column_names]
    if missing:
        raise DataError(f"dataset={str(path)!r}: records lack the field(s) {missing} (found {ds.column_names}); "
                        "each record needs 'instruction' and 'output' ('input' optional)")
    if "input" not in ds.column_names:
        ds = ds.add_column("input", [""] * len(ds))
    return ds


def load_tokenizer(name: str | os.PathLike | None = None, trust_remote_code: bool = False):
    """A tokenizer from a folder (the shipped one when None) or the local hub cache; never downloads."""
    from transformers import AutoTokenizer
    target = str(name) if name else str(TOKENIZER_DIR)
    try:
        tok = AutoTokenizer.from_pretrained(target, local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"tokenizer={target!r}: cannot be loaded locally ({type(exc).__name__}); pass --tokenizer "
                        "with a folder holding tokenizer.json, or omit it for the shipped tokenizer") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@dataclass(frozen=True)
class TokenizedData:
    """Tokenized examples: lists of token ids and labels (-100 on prompt tokens), one per example."""

    input_ids: list
    labels: list
    num_truncated: int
    seq_len: int

    def __len__(self) -> int:
        return len(self.input_ids)


def tokenize(records, tokenizer, seq_len: int) -> TokenizedData:
    """Tokenize records to at most ``seq_len`` tokens, loss on the response only.

    Examples longer than ``seq_len`` are truncated (their count is reported); examples whose prompt
    alone fills ``seq_len`` keep no response token and are dropped.

    Raises:
        DataError: when no example keeps a response token (``seq_len`` too short).
    """
    if seq_len < 8:
        raise DataError(f"seq_len={seq_len}: too short for an instruction and a response; use 64 or more")
    eos = tokenizer.eos_token_id
    ids_out, labels_out, truncated = [], [], 0
    for rec in records:
        prompt = tokenizer(format_prompt(rec["instruction"], rec.get("input") or ""), add_special_tokens=False)["input_ids"]
        answer = tokenizer(str(rec["output"]), add_special_tokens=False)["input_ids"] + [eos]
        if tokenizer.bos_token_id is not None:
            prompt = [tokenizer.bos_token_id] + prompt
        ids = prompt + answer
        labels = [IGNORE_INDEX] * len(prompt) + answer
        if len(ids) > seq_len:
            truncated += 1
            ids, labels = ids[:seq_len], labels[:seq_len]
        if all(x == IGNORE_INDEX for x in labels):
            continue
        ids_out.append(ids)
        labels_out.append(labels)
    if not ids_out:
        raise DataError(f"seq_len={seq_len}: every example's prompt fills the sequence, no response token is "
                        "left to learn from; raise --seq-len")
    return TokenizedData(ids_out, labels_out, truncated, seq_len)


def collate(batch_ids: list, batch_labels: list, pad_id: int):
    """Right-pad a micro batch. Returns dict of LongTensors ``input_ids``, ``labels``,
    ``attention_mask``, each of shape [micro_batch, longest sequence in the batch]."""
    import torch
    width = max(len(x) for x in batch_ids)
    ids = torch.full((len(batch_ids), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch_ids), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch_ids), width), dtype=torch.long)
    for i, (x, y) in enumerate(zip(batch_ids, batch_labels)):
        ids[i, :len(x)] = torch.tensor(x)
        labels[i, :len(y)] = torch.tensor(y)
        mask[i, :len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def sample_order(num_examples: int, seed: int, step: int, micro_step: int, rank: int,
                 micro_batch: int, grad_accum: int, world_size: int) -> list[int]:
    """Indices of the examples for one micro batch: a pure function of the step, so a resumed run
    sees exactly the data an uninterrupted run would.

    Epoch e is ``torch.randperm(num_examples)`` seeded with ``seed + e``; the global batch of
    optimizer step s takes the next ``micro_batch × grad_accum × world_size`` positions (wrapping
    into the next epoch), laid out [micro_step][rank][micro_batch].
    """
    import torch
    per_step = micro_batch * grad_accum * world_size
    start = step * per_step + (micro_step * world_size + rank) * micro_batch
    out, cache = [], {}
    for pos in range(start, start + micro_batch):
        epoch, offset = divmod(pos, num_examples)
        if epoch not in cache:
            cache[epoch] = torch.randperm(num_examples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        out.append(cache[epoch][offset])
    return out
