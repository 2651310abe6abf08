"""Fallback for a machine without a working ``datasets`` (the benchmark driver puts this folder on
PYTHONPATH only when ``import datasets`` fails there): the few calls ``cookbook.data`` makes, over
JSON lines, with the same results for the shipped data. Not for users: install ``datasets``."""
import json

__version__ = "shim"


class Dataset:
    def __init__(self, rows):
        self._rows = list(rows)

    def __len__(self):
        return len(self._rows)

    def __iter__(self):
        return iter(self._rows)

    def __getitem__(self, i):
        return self._rows[i]

    @property
    def column_names(self):
        return list(self._rows[0]) if self._rows else []

    def add_column(self, name, values):
        return Dataset([dict(r, **{name: v}) for r, v in zip(self._rows, values)])


class DatasetDict(dict):
    pass


def load_dataset(kind, data_files=None, split="train"):
    if kind != "json":
        raise ValueError(f"shim: only 'json' is supported, not {kind!r}")
    with open(data_files) as f:
        return Dataset(json.loads(line) for line in f if line.strip())


def load_from_disk(path):
    raise ValueError("shim: load_from_disk is not supported; pass a JSONL file")
