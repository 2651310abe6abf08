"""The measured numbers the cookbook quotes, read from one data file (``data/evidence.json``).

A message that quotes a measurement renders it from its record — value, unit, conditions, machine, date and the
reference record it comes from — so a new GPU run changes one data file, not prose in several modules, and
``tests/test_evidence.py`` checks every record against the reference record it names. The dated narrative of how
each number was found stays in ``docs/benchmarks.md`` and ``docs/gpu/``.

    >>> from cookbook import evidence
    >>> r = evidence.get("recipe.flex_liger_micro32")
    >>> round(r.ratio, 2), r.unit
    (2.06, 'tokens/s')
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Mapping

EVIDENCE_FILE = Path(__file__).resolve().parent.parent / "data" / "evidence.json"


class EvidenceError(KeyError):
    """An evidence key that ``data/evidence.json`` does not hold."""


@dataclasses.dataclass(frozen=True)
class Evidence:
    """One measured number: ``value`` in ``unit`` under ``conditions`` on ``machine`` (``date``), from the reference
    record ``source``: ``{"file", "call", "run"}`` names a run of the file's ``runs`` list (``"list"`` names another
    list, a missing ``"call"`` matches any), or ``{"file", "path"}`` a dotted path to a number in the file;
    ``baseline`` (optional) is the number it is compared with, measured in the same call unless it says
    ``"same_call": false``. ``extra`` holds the record's other fields (micro batch, memory, the run's ``"field"``
    the value is read from when it is not tokens/s, the run's ``"status"`` when it is not ``ok``, ...)."""

    key: str
    value: float
    unit: str
    machine: str
    date: str
    conditions: str
    source: Mapping[str, str]
    baseline: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """value / baseline value (same call), or None without a baseline."""
        return self.value / float(self.baseline["value"]) if self.baseline else None

    def cite(self) -> str:
        """Where the number comes from, in one line: machine, date and the evidence key."""
        return f"{self.machine}, {self.date}; data/evidence.json `{self.key}`"

    def __str__(self) -> str:
        text = f"{_number(self.value)} {self.unit}"
        if self.baseline:
            where = "" if self.baseline.get("same_call", True) else ", measured in another call"
            text += f", {self.ratio:.2f}x {self.baseline['what']} ({_number(float(self.baseline['value']))}{where})"
        return f"{text} — {self.conditions} ({self.cite()})"


def _number(value: float) -> str:
    """Thousands without decimals (tokens/s), smaller numbers to three significant digits (GiB, loss)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


@functools.lru_cache(maxsize=4)
def _load(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))["records"]


def keys(path: str | Path = EVIDENCE_FILE) -> tuple[str, ...]:
    """Every evidence key in ``path``."""
    return tuple(_load(str(path)))


def get(key: str, path: str | Path = EVIDENCE_FILE) -> Evidence:
    """The record ``key`` of ``data/evidence.json``.

    Raises:
        EvidenceError: no such key (the message lists the known ones).
    """
    records = _load(str(path))
    if key not in records:
        raise EvidenceError(f"evidence key {key!r} is not in {path}; known: {', '.join(records)}")
    r = dict(records[key])
    fields = {f.name for f in dataclasses.fields(Evidence)} - {"key", "extra"}
    main = {k: r.pop(k) for k in list(r) if k in fields}
    return Evidence(key=key, extra=r, **main)


__all__ = ["EVIDENCE_FILE", "Evidence", "EvidenceError", "get", "keys"]
