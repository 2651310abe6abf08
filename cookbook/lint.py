"""DeepSpeed config linter: paste a config from an article, get every problem named with its fix.

``lint(config_or_path, world_size=8, mode="accelerate", gpu="RTX 4090")`` returns a
:class:`LintReport` (a list of :class:`Finding`: severity, JSON path, message, fix), rendered as a
table in notebooks. ``cookbook lint CONFIG.json [--world-size N]`` is the same from a shell; exit code
0: no errors, 1: errors, 2: the file cannot be used (missing, not JSON, not a JSON object). Its default
mode, ``launch``, reads the file as ``cookbook launch --config`` does: every ``"auto"`` filled from the
plan options (:func:`cookbook.dsconfig.resolve_config`; same options and defaults as ``cookbook launch``),
a config value that disagrees with a typed option an error naming both, then the resolved config checked
as DeepSpeed sees it, with what this machine decides (:func:`_rule_machine`); ``--resolve -o FILE`` writes
the resolved config. So a file is never "0 errors" in ``cookbook lint`` and refused by ``cookbook launch``.

Rules (each names its source):
  1. parse: file, line, column and the likely cause (trailing comma, single quotes, Python
     ``True``/``False``/``None``, comments, unquoted keys); "not found" with the absolute path.
  2. batch arithmetic as DeepSpeed does it (:func:`deepspeed_batch`): the keys a config leaves out derived with
     floor division, then ``train_batch_size = micro batch × accumulation × world size``, DeepSpeed's refusal
     quoted (``deepspeed/runtime/config.py``, ``_set_batch_related_parameters`` / ``_batch_assertion``); the plan
     never fills a key the config leaves out, and only options the user typed are compared with the config.
  3. ``"auto"`` values: DeepSpeed does not fill them; Accelerate fills some
     (``accelerate/utils/dataclasses.py::DeepSpeedPlugin``, ``accelerator.py::_prepare_deepspeed``);
     the HF Trainer fills the rest (``transformers/integrations/deepspeed.py::HfTrainerDeepSpeedConfig``).
  4. unknown / misplaced keys: known keys are read off DeepSpeed itself — the pydantic models'
     fields and aliases (``DeepSpeedZeroConfig``, offload, fp16/bf16, monitor, comms configs; these
     reject unknown keys) and the keys ``DeepSpeedConfig._initialize_params`` reads (top level,
     ``aio``, ``activation_checkpointing``, ...; unknown ones there are silently ignored).
  5. precision: fp16 on a bf16-capable GPU; fp16 on a GPU without bf16 (compute capability < 8.0): what dynamic
     loss scaling does and when it exits (:func:`loss_scaling`, ``runtime/fp16/loss_scaler.py``), with the fixes;
     fp16 loss-scale keys under ``bf16`` (DeepSpeed's ``DeepSpeedBF16Config`` forbids them).
  6. ``activation_checkpointing`` with a Hugging Face model (it configures only
     ``deepspeed.checkpointing.checkpoint`` calls, which transformers models do not make).
  7. offload: ``offload_param`` below stage 3, NVMe without ``nvme_path``, NVMe-only keys with a
     CPU device, ``pin_memory`` with short host RAM, an NVMe parameter buffer too small.
  8. ZeRO-3 without ``stage3_gather_16bit_weights_on_model_save`` when an HF model is saved.
  9. wrong types and ranges (DeepSpeed's pydantic validation plus the top-level numbers).
 10. ``optimizer.params`` / ``scheduler.params`` keys the class DeepSpeed builds does not take (read off
     the signatures of FusedAdam / DeepSpeedCPUAdam / torch.optim.* and ``runtime/lr_schedules.py``),
     with a did-you-mean; unknown optimizer / scheduler types.
 11. bucket sizes far below the h² rule (under a tenth of it): more, smaller collectives.
 12. ZenFlow (``zero_optimization.zenflow``): needs an offloaded optimizer (``offload_optimizer.device`` cpu;
     ``runtime/zenflow/zenflow_stage_1_and_2.py``), ZeRO stage 1, 2 or 3 (:data:`ZENFLOW_STAGES`), no bf16/fp16
     master weights with stages 1-2 (DeepSpeed 0.19.8 ``_enforce_cpu_offload`` in ``runtime/zero/stage_1_and_2.py``
     accepts only ``DeepSpeedCPUAdam``; measured on the H200), ``zenflow.offload`` only with ``overlap_comm``.
 13. ``--liger`` (a plan with ``liger``) with ZeRO-3 or an architecture other than llama/qwen2.
 14. with ``model`` and ``gpu_memory_gib``: the activations and logits of DeepSpeed's micro batch per GPU × the
     sequence length (:func:`cookbook.memory.activation_bytes`), which ZeRO does not partition or offload, against
     the card (:func:`_rule_memory`).
 Also in rule 7: NVMe optimizer offload with bf16 master weights / optimizer states (DeepSpeed 0.19.8
 ``AssertionError`` in ``runtime/swap_tensor/utils.py``). With ``machine=True``: fp16 on a CPU rehearsal
 without CPU fp16, NVMe without libaio.
"""
from __future__ import annotations

import difflib
import functools
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .dsconfig import config_world_size  # noqa: F401 - re-exported
from .dsconfig import BatchArithmetic, deepspeed_batch  # noqa: F401 - DeepSpeed's batch arithmetic, re-exported
from .hardware import cpu_fp16_refusal, cpu_fp16_supported
from .hardware import GPU_COMPUTE_CAPABILITY, gpu_compute_capability
from .plan import Plan, PlanError

MODES = ("launch", "deepspeed", "accelerate", "trainer")
ERROR, WARNING = "error", "warning"

#: fp16 dynamic-loss-scaling keys (``precision_config.DeepSpeedFP16Config``); DeepSpeed's bf16
#: model forbids them (bf16 has fp32's exponent range and needs no loss scaling).
FP16_ONLY_KEYS = ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                  "min_loss_scale", "auto_cast", "fp16_master_weights_and_grads")

#: Keys inside an offload block that only take effect with ``device: nvme``
#: (``deepspeed/runtime/zero/offload_config.py`` field docs).
NVME_ONLY_KEYS = {"offload_param": ("nvme_path", "buffer_count", "buffer_size", "max_in_cpu"),
                  "offload_optimizer": ("nvme_path", "buffer_count", "pipeline_read", "pipeline_write", "fast_init")}

BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


# ----------------------------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One problem: ``severity`` (``error``/``warning``), JSON ``path`` (dotted, ``(file)`` for the
    file itself), ``message`` (what is wrong and why) and ``fix`` (what to write instead)."""

    severity: str
    path: str
    message: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


class LintReport(list):
    """The findings of one lint run, errors first. A list of :class:`Finding`.

    Attributes:
        source: the file linted, or ``None`` for a dict.
        readable: False when the file is missing, does not parse as JSON, or is not a JSON object
            (CLI exit code 2: it cannot be used); findings after a parse error, if any, come from a
            best-effort repaired text.
        resolved: in mode ``launch``, the :class:`cookbook.dsconfig.Resolution` (the config with every
            ``"auto"`` filled, and the fill table); else None.
        notes: lines about how the lint was run (e.g. where the world size came from).
    """

    def __init__(self, findings=(), *, source: str | None = None, readable: bool = True, resolved=None,
                 notes: tuple = ()):
        order = {ERROR: 0, WARNING: 1}
        super().__init__(sorted(findings, key=lambda f: order.get(f.severity, 2)))
        self.source = source
        self.readable = readable
        self.resolved = resolved
        self.notes = tuple(notes)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return self.readable and not self.errors

    @property
    def exit_code(self) -> int:
        """CLI exit code: 2 unreadable, 1 errors, 0 otherwise."""
        return 2 if not self.readable else (1 if self.errors else 0)

    def paths(self, severity: str | None = None) -> list[str]:
        return [f.path for f in self if severity is None or f.severity == severity]

    def to_json(self) -> dict:
        """``{"errors": [{path, message, fix}, ...], "warnings": [...]}``."""
        def rows(items):
            return [{"path": f.path, "message": f.message, "fix": f.fix} for f in items]
        return {"errors": rows(self.errors), "warnings": rows(self.warnings)}

    def to_frame(self):
        """A pandas DataFrame with columns severity, path, message, fix."""
        import pandas as pd
        return pd.DataFrame([f.to_dict() for f in self], columns=["severity", "path", "message", "fix"])

    def _repr_html_(self) -> str:
        if not len(self):
            return "<p>No problems found.</p>"
        return self.to_frame().to_html(index=False)

    def __str__(self) -> str:
        if not len(self):
            return "no problems found"
        lines = []
        for f in self:
            lines.append(f"{f.severity:<7} {f.path}: {f.message}")
            lines.append(f"{'':<7} fix: {f.fix}")
        lines.append(f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)")
        return "\n".join(lines)

    #: Findings :meth:`__repr__` lists before it says how many more there are.
    REPR_FINDINGS = 10

    def __repr__(self) -> str:
        """The file linted and the counts, then one ``severity path: message`` line per finding (the first
        :attr:`REPR_FINDINGS`, each message shortened to one line): what a plain-text view of a notebook shows;
        ``print()`` it (:meth:`__str__`) for every message in full with its fix."""
        import textwrap
        where = f" of {Path(self.source).name}" if self.source else ""
        if not self.readable:
            head = f"LintReport{where}: the file cannot be used"
        elif not len(self):
            return f"LintReport{where}: no problems found"
        else:
            head = f"LintReport{where}: {len(self.errors)} error(s), {len(self.warnings)} warning(s)"
        lines = [head] + [f"  {f.severity:<7} " + textwrap.shorten(f"{f.path}: {f.message}", 120, placeholder=" …")
                          for f in self[:self.REPR_FINDINGS]]
        if len(self) > self.REPR_FINDINGS:
            lines.append(f"  … and {len(self) - self.REPR_FINDINGS} more (print() the report for all, with fixes)")
        return "\n".join(lines)


class LintParseError(ValueError):
    """A config file is missing or not valid JSON. ``finding`` holds file, line, column, cause."""

    def __init__(self, finding: Finding, repaired: dict | None = None, extra: list[Finding] | None = None):
        super().__init__(f"{finding.path}: {finding.message}")
        self.finding = finding
        self.repaired = repaired
        self.extra = extra or []


# ----------------------------------------------------------------------------------------------
# rule 1: reading and parsing
# ----------------------------------------------------------------------------------------------

def _scan(text: str):
    """Walk JSON-ish text outside double-quoted strings; yield (kind, start, end, token).

    kinds: ``comment``, ``squote`` (single-quoted string), ``word`` (bare identifier),
    ``trailing_comma``. Used to name the likely cause of a parse error and to repair the text.
    """
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "#" or text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            yield "comment", i, j, text[i:j]
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            yield "comment", i, j, text[i:j]
            i = j
            continue
        if c == "'":
            j = i + 1
            while j < n and text[j] not in "'\n":
                j += 2 if text[j] == "\\" else 1
            yield "squote", i, min(j + 1, n), text[i:j + 1]
            i = j + 1
            continue
        if c == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                yield "trailing_comma", i, i + 1, ","
            i += 1
            continue
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*").match(text, i)
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "._+-")):
            yield "word", i, m.end(), m.group()
            i = m.end()
            continue
        i += 1


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_JSON_WORDS = {"true", "false", "null"}


def _diagnose(text: str) -> tuple[list[str], str]:
    """Likely causes (with line:col) of a JSON parse error, and a repaired text."""
    causes: list[str] = []
    out: list[str] = []
    last = 0
    for kind, start, end, token in _scan(text):
        line, col = _line_col(text, start)
        repl = None
        if kind == "comment":
            causes.append(f"comment {token.strip()[:30]!r} at {line}:{col} (JSON has no comments)")
            repl = ""
        elif kind == "squote":
            causes.append(f"single-quoted string {token[:30]} at {line}:{col} (JSON strings use double quotes)")
            repl = json.dumps(token[1:-1] if token.endswith("'") and len(token) > 1 else token[1:])
        elif kind == "trailing_comma":
            causes.append(f"trailing comma at {line}:{col} (JSON allows no comma before }} or ])")
            repl = ""
        elif kind == "word" and token in _PY_LITERALS:
            causes.append(f"Python {token} at {line}:{col} (JSON writes {_PY_LITERALS[token]})")
            repl = _PY_LITERALS[token]
        elif kind == "word" and token not in _JSON_WORDS and not re.fullmatch(r"[eE]\d*", token):
            causes.append(f"unquoted {'key' if text[end:].lstrip().startswith(':') else 'value'} {token!r} at "
                          f"{line}:{col} (JSON strings need double quotes)")
            repl = json.dumps(token)
        if repl is not None:
            out.append(text[last:start])
            out.append(repl)
            last = end
    out.append(text[last:])
    return causes, "".join(out)


def _no_duplicates(pairs):
    seen: dict[str, Any] = {}
    dups = []
    for key, value in pairs:
        if key in seen:
            dups.append(key)
        seen[key] = value
    if dups:
        seen["__duplicate_keys__"] = dups
    return seen


def load_config(path: str | os.PathLike) -> dict:
    """Read a DeepSpeed JSON config file.

    Raises:
        LintParseError: the file is missing, unreadable, or not valid JSON; its ``finding`` names
            the absolute path, line, column and the likely cause (trailing comma, single quotes,
            Python ``True``/``False``/``None``, comments, unquoted keys), and ``repaired`` holds
            the config parsed after fixing those causes (or None).
    """
    p = Path(path).expanduser()
    ap = str(p.resolve())
    if not p.exists():
        raise LintParseError(Finding(ERROR, "(file)", f"{ap} not found",
                                     "check the path; the config must exist before launch"))
    if p.is_dir():
        raise LintParseError(Finding(ERROR, "(file)", f"{ap} is a folder, not a config file",
                                     "pass the .json file inside it"))
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise LintParseError(Finding(ERROR, "(file)", f"{ap} cannot be read: {exc}",
                                     "save it as UTF-8 text and check its permissions")) from None
    return _parse_text(text, ap)


def _parse_text(text: str, name: str) -> dict:
    if not text.strip():
        raise LintParseError(Finding(ERROR, "(file)", f"{name} is empty", "paste the JSON config into it"))
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        causes, repaired_text = _diagnose(text)
        where = f"{name}, line {exc.lineno}, column {exc.colno}: {exc.msg}"
        if causes:
            message = f"not valid JSON ({where}); likely cause: " + "; ".join(causes[:8])
            if len(causes) > 8:
                message += f"; and {len(causes) - 8} more"
        else:
            message = f"not valid JSON ({where})"
        fix = ("write true/false/null (not True/False/None), double quotes only, no comments, no comma "
               "before } or ]; Accelerate and the HF Trainer read the file with json.load")
        repaired = None
        try:
            candidate = json.loads(repaired_text, object_pairs_hook=_no_duplicates)
            if causes:
                repaired = candidate
        except json.JSONDecodeError:
            pass
        raise LintParseError(Finding(ERROR, "(file)", message, fix), repaired=repaired) from None


# ----------------------------------------------------------------------------------------------
# known keys, from DeepSpeed itself
# ----------------------------------------------------------------------------------------------

def _model_keys(model) -> set[str]:
    keys = set()
    for name, info in model.model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
    return keys


@functools.lru_cache(maxsize=1)
def _pydantic_sections() -> dict[str, Any]:
    """Config path -> DeepSpeed pydantic model (these reject unknown keys)."""
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.monitor.config import CometConfig, CSVConfig, TensorBoardConfig, WandbConfig
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zenflow.zenflow_config import ZenFlowConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                       DeepSpeedZeroOffloadParamConfig)
    return {
        "zero_optimization": DeepSpeedZeroConfig,
        "zero_optimization.offload_param": DeepSpeedZeroOffloadParamConfig,
        "zero_optimization.offload_optimizer": DeepSpeedZeroOffloadOptimizerConfig,
        "zero_optimization.zenflow": ZenFlowConfig,  # deepspeed/runtime/zenflow/zenflow_config.py
        "fp16": DeepSpeedFP16Config,
        "bf16": DeepSpeedBF16Config,
        "bfloat16": DeepSpeedBF16Config,
        "tensorboard": TensorBoardConfig,
        "wandb": WandbConfig,
        "csv_monitor": CSVConfig,
        "comet": CometConfig,
        "comms_logger": CommsLoggerConfig,
    }


class _Keys:
    def __init__(self, rec):
        self.rec = rec

    def __contains__(self, key):
        self.rec.seen.add(key)
        return dict.__contains__(self.rec, key)

    def __iter__(self):
        return iter(dict.keys(self.rec))

    def __len__(self):
        return dict.__len__(self.rec)


class _RecordingDict(dict):
    """A dict that records every key DeepSpeed's config code asks it for."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: set[str] = set()

    def get(self, key, *default):
        self.seen.add(key)
        return dict.get(self, key, *default)

    def __contains__(self, key):
        self.seen.add(key)
        return dict.__contains__(self, key)

    def __getitem__(self, key):
        self.seen.add(key)
        return dict.__getitem__(self, key)

    def keys(self):
        return _Keys(self)

    def setdefault(self, key, *default):
        self.seen.add(key)
        return dict.setdefault(self, key, *default)

    def pop(self, key, *default):
        self.seen.add(key)
        return dict.pop(self, key, *default)


#: Top-level keys read outside ``_initialize_params`` (``DeepSpeedConfig._do_warning_check`` and
#: ``DeepSpeedConfig.__init__``), and the optimizer/scheduler section keys (``runtime/config.py``
#: ``get_optimizer_*`` / ``get_scheduler_*``).
_EXTRA_TOP_KEYS = {"vocabulary_size", "sequence_parallel_size"}
_STATIC_SECTION_KEYS = {"optimizer": {"type", "params", "legacy_fusion"}, "scheduler": {"type", "params"}}
#: Sections whose sub-keys DeepSpeed reads with ``get_scalar_param`` (unknown ones are ignored).
_RECORDED_SECTIONS = ("aio", "activation_checkpointing", "flops_profiler", "checkpoint", "data_types")


def _run_initialize(param_dict) -> None:
    from deepspeed.runtime.config import DeepSpeedConfig
    cfg = DeepSpeedConfig.__new__(DeepSpeedConfig)
    cfg._param_dict = param_dict
    cfg.world_size = 1
    cfg.global_rank = 0
    cfg._initialize_params(param_dict)


@functools.lru_cache(maxsize=1)
def known_keys() -> dict[str, set[str]]:
    """Known config keys by section path (``""`` = top level), read off DeepSpeed.

    Top level and the ``get_scalar_param`` sections: the keys ``DeepSpeedConfig._initialize_params``
    asks for when it parses a config (recorded with a dict that logs lookups). Pydantic sections:
    field names and aliases of DeepSpeed's config models.
    """
    top = _RecordingDict(train_micro_batch_size_per_gpu=1)
    _run_initialize(top)
    result: dict[str, set[str]] = {"": set(top.seen) | _EXTRA_TOP_KEYS}
    for section in _RECORDED_SECTIONS:
        sub = _RecordingDict()
        try:
            _run_initialize(_RecordingDict({"train_micro_batch_size_per_gpu": 1, section: sub}))
        except Exception:  # noqa: BLE001 — a section that needs fields to parse: keep what was read
            pass
        result[section] = set(sub.seen)
    for path, model in _pydantic_sections().items():
        result[path] = _model_keys(model)
    result.update({k: set(v) for k, v in _STATIC_SECTION_KEYS.items()})
    return result


def _removed_keys() -> tuple[dict, dict]:
    from deepspeed.runtime import config as ds_config
    return (getattr(ds_config, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", {}),
            getattr(ds_config, "_REMOVED_ZERO_CONFIG_KEYS", {}))


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------

def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _walk(node, prefix=""):
    """Yield (path, value) for every leaf (lists are walked with [i]); the resolver's own walk."""
    from .dsconfig import _walk_leaves
    return _walk_leaves(node, prefix)


def _get(cfg: dict, path: str, default=None):
    node = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _enabled(block) -> bool:
    return isinstance(block, dict) and block.get("enabled") in (True, "true", "auto")


def _fmt(v) -> str:
    return json.dumps(v) if not isinstance(v, str) or v != "auto" else '"auto"'


# ----------------------------------------------------------------------------------------------
# the rules
# ----------------------------------------------------------------------------------------------

class _Ctx:
    def __init__(self, cfg, world_size, mode, gpu, model, plan, will_save_hf_model):
        self.cfg = cfg
        self.world_size = world_size
        self.mode = mode
        self.gpu = gpu
        self.model = model
        self.plan = plan
        self.hf_model = bool(will_save_hf_model or model or plan)
        self.will_save = will_save_hf_model
        self.findings: list[Finding] = []
        self.handled: set[str] = set()  # paths a specific rule already reported
        self.filled: set[str] = set()  # paths the run's options filled (lint(filled=...))
        self.names: dict = {}  # how to name the options (lint(names=...))
        self.stated: set | None = None  # the plan fields the user typed (None: every field of a Plan passed)

    def add(self, severity, path, message, fix):
        self.findings.append(Finding(severity, path, message, fix))

    @functools.cached_property
    def spec(self):
        name = self.model or (self.plan.model if self.plan else None)
        if not name:
            return None
        try:
            from .models import model_spec
            return model_spec(name)
        except Exception:  # noqa: BLE001 — reported once in lint()
            return None

    @property
    def stage(self):
        s = _get(self.cfg, "zero_optimization.stage", 0)
        return s if _is_int(s) else None


_BATCH_FIELDS = {"train_micro_batch_size_per_gpu": ("micro_batch", "the plan's micro batch"),
                 "gradient_accumulation_steps": ("grad_accum", "the plan's accumulation")}


def _intended(ctx: _Ctx, key: str) -> tuple[int | None, str]:
    """The plan's value for a batch key and how to name it, when the user stated it (a ``Plan`` passed from
    Python states every field; the CLI passes ``stated``, the options typed); ``(None, name)`` otherwise."""
    field, label = _BATCH_FIELDS[key]
    name = ctx.names.get(field, label)
    if ctx.plan is None or (ctx.stated is not None and field not in ctx.stated):
        return None, name
    return getattr(ctx.plan, field), name



def _batch_fix(ds: BatchArithmetic, given: dict, ctx: _Ctx) -> str:
    """What to write when DeepSpeed refuses the batch keys: values that satisfy ``train_batch_size = micro ×
    accumulation × world size``, keeping the keys the user typed (the plan's stated micro batch and
    accumulation where the config leaves them out, else 1)."""
    n = ds.world_size
    tb, mb, ga = (given[k] for k in BATCH_KEYS)
    if tb is None and mb is None:
        return ("set train_micro_batch_size_per_gpu (sequences per GPU per step) and gradient_accumulation_steps; "
                "DeepSpeed computes train_batch_size from them")
    m = mb if mb is not None else (_intended(ctx, "train_micro_batch_size_per_gpu")[0] or 1)
    g = ga if ga is not None else (_intended(ctx, "gradient_accumulation_steps")[0] or 1)
    right = f"set train_batch_size to {m * g * n} (micro batch {m} × accumulation {g} × world size {n})"
    if mb is not None and ga is not None:
        return f"{right}, or drop train_batch_size (DeepSpeed computes it)"
    if mb is None and ga is not None:
        return (f"{right}, a multiple of gradient_accumulation_steps {g} × world size {n} = {g * n}; or replace "
                f"train_batch_size with \"train_micro_batch_size_per_gpu\": {m} (DeepSpeed then computes "
                f"train_batch_size {m * g * n})")
    if mb is not None:  # accumulation missing
        return (f"{right}, a multiple of train_micro_batch_size_per_gpu {m} × world size {n} = {m * n}; or replace "
                f"train_batch_size with \"gradient_accumulation_steps\": {g} (DeepSpeed then computes "
                f"train_batch_size {m * g * n})")
    return (f"{right}, a multiple of world size {n}; or replace train_batch_size with "
            f"\"train_micro_batch_size_per_gpu\": {m} and \"gradient_accumulation_steps\": {g}")


def _rule_batch(ctx: _Ctx) -> None:
    """Rule 2: the batch keys as DeepSpeed reads them (:func:`deepspeed_batch`), and against the plan.

    The plan never fills a key the config leaves out, except where the reader does: plain ``deepspeed.initialize``
    and Accelerate leave a missing key missing and DeepSpeed derives it (Accelerate's ``_prepare_deepspeed`` and
    ``DeepSpeedPlugin.deepspeed_config_process`` fill only ``"auto"``; the HF Trainer's ``fill_match`` likewise, and
    it raises on a given value that differs from ``TrainingArguments``:
    ``transformers/integrations/deepspeed.py::HfTrainerDeepSpeedConfig.trainer_config_process``)."""
    cfg, n = ctx.cfg, ctx.world_size
    vals = {k: cfg.get(k) for k in BATCH_KEYS}
    if any(v == "auto" for v in vals.values()):
        # rule 3 reports autos; arithmetic is checked only on explicit numbers
        if sum(_is_int(v) for v in vals.values()) < 3:
            return
    for v in vals.values():
        if v is not None and v != "auto" and not (_is_int(v) and v > 0):
            return  # rule 9 reports the type/range problem
    given = {k: (None if v == "auto" else v) for k, v in vals.items()}
    tb, mb, ga = (given[k] for k in BATCH_KEYS)
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        planned, name = _intended(ctx, key)
        if given[key] is not None and planned is not None and given[key] != planned:
            if ctx.mode == "trainer":
                ctx.add(ERROR, key, f"{key}={given[key]} but the plan (TrainingArguments) has {planned}; the HF "
                        "Trainer raises 'Please correct the following DeepSpeed config values that mismatch "
                        "TrainingArguments'", f'set {key} to {planned}, or to "auto"')
            else:
                ctx.add(WARNING, key, f"{key}={given[key]} but {name} is {planned}; the config wins",
                        f"set {key} to {planned}, or change {name}")
    if n is None:
        if any(v is not None for v in (tb, mb, ga)):
            ctx.add(WARNING, "train_batch_size", "batch arithmetic not checked: the world size is unknown",
                    "pass world_size (CLI: --world-size N), the number of GPUs over all machines")
        return
    if ctx.mode == "trainer" and tb is not None:
        (pm, mname), (pg, gname) = (_intended(ctx, k) for k in _BATCH_FIELDS)
        if pm is not None and pg is not None and tb != pm * pg * n:
            ctx.add(ERROR, "train_batch_size", f"train_batch_size={tb} but the plan (TrainingArguments) gives world "
                    f"size {n} × per_device_train_batch_size {pm} × gradient_accumulation_steps {pg} = {pm * pg * n}; "
                    "the HF Trainer raises 'Please correct the following DeepSpeed config values that mismatch "
                    "TrainingArguments' (train_batch_size (calculated))",
                    f'set train_batch_size to {pm * pg * n}, or to "auto"')
            return
    ds = deepspeed_batch(tb, mb, ga, n)
    if not ds.ok:
        if ds.train_batch_size is None and ctx.mode != "deepspeed":
            return  # Accelerate / the Trainer: a script's DataLoader may set it (rule 3 names the "auto" keys)
        lead = [f"DeepSpeed derives {key} = {how}" for key, how in ds.derived]
        if ds.refusal.startswith("Check batch"):
            product = ds.micro_batch * ds.grad_accum * n
            lead.append(f"train_batch_size={ds.train_batch_size} but micro batch {ds.micro_batch} × accumulation "
                        f"{ds.grad_accum} × world size {n} = {product}")
        typed = given.get(ds.refused_key) is not None or ds.train_batch_size is None  # name a key the user wrote
        ctx.add(ERROR, ds.refused_key if typed else "train_batch_size",
                "; ".join(lead + [f"DeepSpeed refuses the config: '{ds.refusal}' (deepspeed/runtime/config.py, "
                                  "DeepSpeedConfig._set_batch_related_parameters / _batch_assertion)"]),
                _batch_fix(ds, given, ctx))
        return
    for key in _BATCH_FIELDS:
        how = ds.how(key)
        planned, name = _intended(ctx, key)
        if how is None:
            continue
        value = ds.micro_batch if key == "train_micro_batch_size_per_gpu" else ds.grad_accum
        if planned is not None and planned != value:
            m = planned if key == "train_micro_batch_size_per_gpu" else ds.micro_batch
            g = planned if key == "gradient_accumulation_steps" else ds.grad_accum
            ctx.add(WARNING, key, f"{key} is not in the config: DeepSpeed derives {key} = {how}, but {name} is {planned}; "
                    f"DeepSpeed's engine counts {value} (its step boundaries, throughput and own DataLoader)",
                    f"set {key} to {planned} and train_batch_size to {m * g * n}, or change {name} to {value}")
        elif key == "train_micro_batch_size_per_gpu" and tb is not None and ga is not None and planned is None:
            ctx.add(WARNING, key, f"train_micro_batch_size_per_gpu is not set; DeepSpeed derives it: {how}",
                    f"set train_micro_batch_size_per_gpu to {value} explicitly so the arithmetic is visible")


def _auto_values(ctx: _Ctx) -> dict[str, str]:
    """What the HF Trainer would write for each "auto" path (``HfTrainerDeepSpeedConfig``), as fix text:
    numbers where the plan / model give them, the ``TrainingArguments`` default otherwise."""
    from .dsconfig import bucket_sizes, trainer_defaults
    td = trainer_defaults()
    out = {
        "gradient_clipping": f"{td['max_grad_norm']} (TrainingArguments.max_grad_norm)",
        "optimizer.params.lr": "the peak learning rate, e.g. 2e-5",
        "optimizer.params.betas": f"[{td['adam_beta1']}, {td['adam_beta2']}] (TrainingArguments.adam_beta1/adam_beta2)",
        "optimizer.params.eps": f"{td['adam_epsilon']} (TrainingArguments.adam_epsilon)",
        "optimizer.params.weight_decay": f"{td['weight_decay']} (TrainingArguments.weight_decay)",
        "scheduler.params.warmup_min_lr": "0",
        "scheduler.params.warmup_max_lr": "the peak learning rate (as optimizer.params.lr)",
        "scheduler.params.warmup_num_steps": "the warm-up steps, at least 1",
        "scheduler.params.total_num_steps": "the run's optimizer steps",
        "fp16.enabled": "true for fp16 (GPUs before Ampere), else false",
        "bf16.enabled": "true for bf16 (Ampere and newer), else false",
        "zero_optimization.stage": "2 or 3",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": "true (save_pretrained then writes real weights)",
        "zero_optimization.offload_optimizer.device": "\"cpu\", \"nvme\" or \"none\"",
        "zero_optimization.offload_param.device": "\"cpu\", \"nvme\" or \"none\"",
        "zero_optimization.offload_optimizer.nvme_path": "a folder on a local NVMe SSD",
        "zero_optimization.offload_param.nvme_path": "a folder on a local NVMe SSD",
    }
    plan = ctx.plan
    if plan is not None:
        n = ctx.world_size or plan.world_size
        out.update({"train_micro_batch_size_per_gpu": f"{plan.micro_batch} (the plan's micro batch)",
                    "gradient_accumulation_steps": f"{plan.grad_accum} (the plan's accumulation)",
                    "train_batch_size": f"{plan.micro_batch * plan.grad_accum * n} (micro batch {plan.micro_batch} × "
                                        f"accumulation {plan.grad_accum} × world size {n})"})
    else:
        out.update({"train_micro_batch_size_per_gpu": "the micro batch per GPU",
                    "gradient_accumulation_steps": "the accumulation steps",
                    "train_batch_size": "micro batch × accumulation × world size (or delete it)"})
    if ctx.spec is not None:
        b = bucket_sizes(ctx.spec.hidden_size)
        h = ctx.spec.hidden_size
        out.update({f"zero_optimization.{k}": f"{v} ({ctx.spec.name}, hidden size {h})" for k, v in b.items()})
    else:
        out.update({"zero_optimization.reduce_bucket_size": "hidden_size² of the model (pass --model to get the number)",
                    "zero_optimization.stage3_prefetch_bucket_size": "int(0.9 × hidden_size²) (pass --model)",
                    "zero_optimization.stage3_param_persistence_threshold": "10 × hidden_size (pass --model)"})
    return out


def _auto_fix(ctx: _Ctx, paths: list[str]) -> str:
    values = _auto_values(ctx)
    parts = [f"{p}: {values.get(p, 'a value of your choice')}" for p in paths]
    return ("write the value for each: " + "; ".join(parts)
            + " — or let `cookbook launch --config` fill them from the plan (`cookbook lint --resolve` shows how)")


def _rule_auto(ctx: _Ctx) -> None:
    from .dsconfig import DEEPSPEED_OWN_AUTO
    autos = [p for p, v in _walk(ctx.cfg) if v == "auto" and p not in DEEPSPEED_OWN_AUTO]
    if not autos or ctx.mode == "launch":  # launch mode: the resolution reported every "auto" left
        ctx.handled.update(autos)
        return
    if ctx.mode == "deepspeed":
        ctx.add(ERROR, autos[0] if len(autos) == 1 else "(config)",
                f"\"auto\" is filled only by Accelerate or the HF Trainer; plain deepspeed.initialize fails on "
                f"top-level \"auto\" and silently drops it inside sections (DeepSpeed defaults apply). "
                f"\"auto\" at: {', '.join(autos)}", _auto_fix(ctx, autos))
        ctx.handled.update(autos)
        return
    # Accelerate (accelerate/utils/dataclasses.py DeepSpeedPlugin + accelerator.py _prepare_deepspeed)
    acc_fills = {
        "train_micro_batch_size_per_gpu": "the train DataLoader's batch_size",
        "train_batch_size": "micro batch × accumulation × num_processes",
        "gradient_accumulation_steps": "Accelerator(gradient_accumulation_steps=...) / accelerate config",
        "gradient_clipping": "the accelerate config (default 1.0)",
        "zero_optimization.stage": "the accelerate config zero_stage",
        "zero_optimization.offload_optimizer.device": "the accelerate config",
        "zero_optimization.offload_param.device": "the accelerate config",
        "zero_optimization.offload_optimizer.nvme_path": "the accelerate config",
        "zero_optimization.offload_param.nvme_path": "the accelerate config",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save":
            "the accelerate config zero3_save_16bit_model (default false!)",
        "zero_optimization.reduce_bucket_size": "hidden_size² from model.config",
        "zero_optimization.stage3_prefetch_bucket_size": "0.9·hidden_size² from model.config",
        "zero_optimization.stage3_param_persistence_threshold": "10·hidden_size from model.config",
        "fp16.enabled": "--mixed_precision", "bf16.enabled": "--mixed_precision",
    }
    acc_conditional = {
        "optimizer.params.lr": "only with accelerate.utils.DummyOptim(params, lr=...)",
        "optimizer.params.weight_decay": "only with DummyOptim(..., weight_decay=...)",
        "scheduler.params.warmup_min_lr": "only with accelerate.utils.DummyScheduler (0)",
        "scheduler.params.warmup_max_lr": "only with DummyScheduler (the optimizer's lr)",
        "scheduler.params.warmup_num_steps": "only with DummyScheduler(warmup_num_steps=...)",
        "scheduler.params.total_num_steps": "only with DummyScheduler(total_num_steps=...)",
    }
    # HF Trainer (transformers/integrations/deepspeed.py trainer_config_process / _finalize)
    trainer_fills = {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
                     "gradient_clipping", "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
                     "optimizer.params.weight_decay", "scheduler.params.warmup_min_lr",
                     "scheduler.params.warmup_max_lr", "scheduler.params.total_num_steps",
                     "scheduler.params.warmup_num_steps", "fp16.enabled", "bf16.enabled",
                     "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
                     "zero_optimization.stage3_param_persistence_threshold"}
    if ctx.mode == "trainer":
        left = [p for p in autos if p not in trainer_fills and p not in acc_fills]
    else:
        filled = [p for p in autos if p in acc_fills]
        cond = [p for p in autos if p in acc_conditional]
        left = [p for p in autos if p not in acc_fills and p not in acc_conditional]
        if filled:
            ctx.add(WARNING, "(config)",
                    "Accelerate fills these \"auto\" values: "
                    + "; ".join(f"{p} from {acc_fills[p]}" for p in filled),
                    "fine if those sources are what you intend; write numbers to pin them")
        if cond:
            ctx.add(WARNING, "(config)",
                    "Accelerate fills these \"auto\" values only if the script passes its dummy objects: "
                    + "; ".join(f"{p} {acc_conditional[p]}" for p in cond),
                    "use DummyOptim/DummyScheduler in the training script, or write the numbers")
    if left:
        who = "the HF Trainer nor Accelerate fills" if ctx.mode == "trainer" else "Accelerate leaves"
        ctx.add(ERROR, left[0] if len(left) == 1 else "(config)",
                f"neither {who} these \"auto\" values: {', '.join(left)}" if ctx.mode == "trainer"
                else f"{who} these \"auto\" values unfilled and raises ValueError at prepare(): {', '.join(left)}",
                _auto_fix(ctx, left))
    ctx.handled.update(autos)


def _suggest(key: str, candidates) -> str | None:
    match = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.75)
    return match[0] if match else None


def _where_key_belongs(key: str, known: dict[str, set[str]], exclude: str) -> str | None:
    for section in ("", "zero_optimization", "zero_optimization.offload_optimizer", "zero_optimization.offload_param",
                    "fp16", "bf16", "aio", "optimizer", "scheduler", "activation_checkpointing"):
        if section != exclude and key in known.get(section, ()):
            return section
    return None


def _rule_keys(ctx: _Ctx) -> None:
    known = known_keys()
    removed_top, removed_zero = _removed_keys()
    pyd = _pydantic_sections()
    cfg = ctx.cfg

    def check(section: str, node: dict):
        allowed = known.get(section)
        if allowed is None or not isinstance(node, dict):
            return
        strict = section in pyd  # pydantic: unknown keys are rejected
        for key, value in node.items():
            path = f"{section}.{key}" if section else key
            if key == "__duplicate_keys__":
                continue
            if section == "" and key in removed_top:
                ctx.add(ERROR, path, f"DeepSpeed rejects this removed feature: {removed_top[key]}", f"delete {key}")
                continue
            if section == "zero_optimization" and key in removed_zero:
                ctx.add(ERROR, path, f"DeepSpeed rejects it: {removed_zero[key]}", f"delete {path}")
                continue
            if key in allowed:
                sub = f"{section}.{key}" if section else key
                if isinstance(value, dict) and sub in known:
                    check(sub, value)
                continue
            if section in ("bf16", "bfloat16") and key in FP16_ONLY_KEYS:
                continue  # rule 5
            if section == "zero_optimization" and key == "aio":
                ctx.add(ERROR, path, "the aio block sits inside zero_optimization; DeepSpeed reads it only at the "
                        "top level (and the ZeRO config model rejects unknown keys)",
                        "move \"aio\" to the top level of the config, next to zero_optimization")
                continue
            home = _where_key_belongs(key, known, section)
            guess = _suggest(key, allowed)
            consequence = ("DeepSpeed rejects the config (unknown keys are not permitted here)" if strict
                           else "DeepSpeed silently ignores it")
            if home is not None and home != section and not guess:
                where = "the top level" if home == "" else home
                ctx.add(ERROR, path, f"{key!r} does not belong in {section or 'the top level'}; {consequence}",
                        f"move it under {where}")
            elif guess:
                ctx.add(ERROR, path, f"unknown key {key!r} in {section or 'the top level'}; {consequence}",
                        f"did you mean {guess!r}? rename it")
            elif home is not None:
                where = "the top level" if home == "" else home
                ctx.add(ERROR, path, f"{key!r} does not belong in {section or 'the top level'}; {consequence}",
                        f"move it under {where}")
            else:
                ctx.add(ERROR if strict else WARNING, path,
                        f"unknown key {key!r} in {section or 'the top level'}; {consequence}",
                        "delete it, or check the DeepSpeed config reference (https://www.deepspeed.ai/docs/config-json/)")

    check("", cfg)
    dups = []

    def find_dups(node, prefix=""):
        if isinstance(node, dict):
            for k in node.get("__duplicate_keys__", []):
                dups.append(f"{prefix}.{k}" if prefix else k)
            for k, v in node.items():
                if k != "__duplicate_keys__":
                    find_dups(v, f"{prefix}.{k}" if prefix else k)
    find_dups(cfg)
    for p in dups:
        ctx.add(ERROR, p, "key given twice; DeepSpeed's loader refuses duplicate keys, json.load keeps the last",
                "keep one of them")


def _rule_precision(ctx: _Ctx) -> None:
    cfg = ctx.cfg
    bf16 = cfg.get("bf16", cfg.get("bfloat16"))
    bf16_key = "bf16" if "bf16" in cfg else "bfloat16"
    fp16 = cfg.get("fp16")
    if isinstance(bf16, dict):
        bad = [k for k in bf16 if k in FP16_ONLY_KEYS]
        if bad:
            ctx.add(ERROR, f"{bf16_key}.{bad[0]}" if len(bad) == 1 else bf16_key,
                    f"fp16 loss-scaling key(s) {', '.join(bad)} under {bf16_key}: recent DeepSpeed rejects them "
                    "(DeepSpeedBF16Config permits no extra keys); bf16 has fp32's exponent range and needs no "
                    "loss scaling",
                    f"delete {', '.join(bad)} from {bf16_key}: {{\"{bf16_key}\": {{\"enabled\": true}}}}")
    if _enabled(fp16) and fp16.get("enabled") is True and _enabled(bf16) and bf16.get("enabled") is True:
        ctx.add(ERROR, "fp16.enabled", "fp16 and bf16 are both enabled; DeepSpeed asserts "
                "'bfloat16 and fp16 modes cannot be simultaneously enabled'", "keep one: bf16 on Ampere or newer")
    # fp16 by the config itself, or "auto" that the reader fills from the run's precision (--precision fp16)
    by_auto = (isinstance(fp16, dict) and fp16.get("enabled") == "auto" and getattr(ctx, "precision", None) == "fp16"
               and ctx.mode in ("trainer", "accelerate"))
    if ctx.gpu and isinstance(fp16, dict) and (fp16.get("enabled") is True or by_auto):
        cc = gpu_compute_capability(ctx.gpu)
        if cc is not None and cc >= (8, 0):
            via = (" (fp16.enabled \"auto\", filled from --precision fp16 as the "
                   + ("HF Trainer's --fp16" if ctx.mode == "trainer" else "Accelerate's --mixed_precision fp16")
                   + " fills it)") if by_auto else ""
            ctx.add(WARNING, "fp16",
                    f"fp16 on {ctx.gpu} (compute capability {cc[0]}.{cc[1]}){via}, which computes in bf16 natively: "
                    "fp16 needs loss scaling and can overflow (skipped steps, NaN loss); bf16 has fp32's range",
                    "--precision bf16 (the Trainer's --bf16)" if by_auto else
                    'replace the fp16 block with "bf16": {"enabled": true}')
    if ctx.gpu and isinstance(fp16, dict) and (fp16.get("enabled") is True or by_auto):
        cc = gpu_compute_capability(ctx.gpu)
        if cc is not None and cc < (8, 0):
            via = (" (fp16.enabled \"auto\", filled from --precision fp16)") if by_auto else ""
            message, fix = fp16_loss_scale_warning(fp16, ctx.gpu, cc, cfg=cfg, via=via)
            ctx.add(WARNING, "fp16", message, fix)
    if ctx.gpu and gpu_compute_capability(ctx.gpu) is None:
        ctx.add(WARNING, "(gpu)", f"unknown GPU {ctx.gpu!r}: bf16 support not checked",
                "name it like 'RTX 4090', 'A100', 'H100', 'V100'")
    if ctx.gpu and _enabled(bf16) and bf16.get("enabled") is True:
        cc = gpu_compute_capability(ctx.gpu)
        if cc is not None and cc < (8, 0):
            ctx.add(ERROR, bf16_key, f"bf16 on {ctx.gpu} (compute capability {cc[0]}.{cc[1]} < 8.0): no native "
                    "bf16 compute", 'use "fp16": {"enabled": true, "loss_scale": 0} instead')


# ----------------------------------------------------------------------------------------------
# fp16 dynamic loss scaling (GPUs without bf16)
# ----------------------------------------------------------------------------------------------

#: DeepSpeed's defaults for the fp16 loss-scaling keys (``deepspeed/runtime/precision_config.py``,
#: ``DeepSpeedFP16Config`` 0.19.8: ``loss_scale`` 0 = dynamic; ``initial_scale_power`` 16; ``loss_scale_window``
#: 1000; ``hysteresis`` 2; ``consecutive_hysteresis`` false; ``min_loss_scale`` 1).
FP16_LOSS_SCALE_DEFAULTS = {"loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000, "hysteresis": 2,
                            "consecutive_hysteresis": False, "min_loss_scale": 1}

#: DeepSpeed's message when dynamic loss scaling cannot go lower (``runtime/fp16/loss_scaler.py``,
#: ``DynamicLossScaler.update_scale``).
LOSS_SCALE_AT_MINIMUM = "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."


def loss_scaling(fp16_block: dict | None) -> dict:
    """DeepSpeed's fp16 loss-scaling settings for a config's ``fp16`` block, its defaults filled
    (:data:`FP16_LOSS_SCALE_DEFAULTS`), and ``overflows_to_exit``: how many overflowing steps in a row (no
    ``loss_scale_window`` clean steps between them) end a dynamic-scaling run with :data:`LOSS_SCALE_AT_MINIMUM`.

    The count follows ``DynamicLossScaler.update_scale`` (``deepspeed/runtime/fp16/loss_scaler.py``, 0.19.8): the
    scale starts at 2^``initial_scale_power``; an overflowing step is skipped and, while the hysteresis counter is
    above 1, only decrements it (``hysteresis`` - 1 steps); after that each overflow halves the scale, floored at
    ``min_loss_scale``; an overflow at the floor raises. ``dynamic`` is False for a static ``loss_scale`` > 0 (no
    exit; ``overflows_to_exit`` None). Values the config gives that are not numbers are left as given (rule 9)."""
    block = fp16_block if isinstance(fp16_block, dict) else {}
    s = {k: block.get(k, v) for k, v in FP16_LOSS_SCALE_DEFAULTS.items()}
    s["dynamic"] = s["loss_scale"] == 0
    s["overflows_to_exit"] = None
    try:
        scale, floor, hyst = 2.0 ** int(s["initial_scale_power"]), float(s["min_loss_scale"]), int(s["hysteresis"])
    except (TypeError, ValueError, OverflowError):
        return s
    if s["dynamic"] and floor > 0:
        steps = 0
        while True:  # DynamicLossScaler.update_scale(overflow=True), one call per overflowing step
            steps += 1
            if hyst == 1:
                if scale == floor:
                    break
                scale = max(scale / 2.0, floor)
            else:
                hyst -= 1
            if steps > 10_000:  # cannot happen with finite settings; a guard, not a rule
                return s
        s["overflows_to_exit"] = steps
    return s


def _int_or(v, default: int) -> int:
    return v if _is_int(v) else default


def fp16_loss_scale_warning(fp16_block: dict | None, gpu: str, cc: tuple[int, int], *, cfg: dict | None = None,
                            via: str = "") -> tuple[str, str]:
    """(message, fix) for fp16 on a GPU without bf16 (compute capability < 8.0: V100 7.0, T4 7.5, ...): what
    DeepSpeed's dynamic loss scaling does with these settings (:func:`loss_scaling`), its failure
    (:data:`LOSS_SCALE_AT_MINIMUM`) and the fixes, leaving out those ``cfg`` already has (a ``gradient_clipping``
    > 0, a scheduler with warm-up steps). Used by ``cookbook lint`` (rule 5) and ``cookbook env``."""
    s = loss_scaling(fp16_block)
    cfg = cfg if isinstance(cfg, dict) else {}
    head = (f"fp16 on {gpu} (compute capability {cc[0]}.{cc[1]}: no bf16, so fp16 is the only 16-bit choice){via}. ")
    if not s["dynamic"]:
        return (head + f"loss_scale {s['loss_scale']} is a static scale: DeepSpeed never lowers it, so gradients "
                "that overflow fp16's range (max 65504) at that scale give skipped steps or inf/NaN, and ones below "
                "its range underflow to zero",
                'set "loss_scale": 0 (dynamic loss scaling, DeepSpeed\'s default) unless you know the right scale')
    n = s["overflows_to_exit"]
    msg = (head + f"DeepSpeed's dynamic loss scaling multiplies the loss by 2^{s['initial_scale_power']} "
           f"(initial_scale_power) so small gradients survive in fp16; a step whose gradients overflow is skipped "
           f"('OVERFLOW! ... Skipping step') and, after hysteresis {s['hysteresis']}, halves the scale; "
           f"loss_scale_window {s['loss_scale_window']} clean steps double it again. A loss that keeps overflowing "
           f"drives it down to min_loss_scale {s['min_loss_scale']}, and the next overflow ends the run: "
           f"'{LOSS_SCALE_AT_MINIMUM}' (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale)"
           + (f" — with these settings after {n} overflowing steps without {s['loss_scale_window']} clean steps "
              "between them" if n else "")
           + ". It is the usual sign of a diverging run (lr too high, no warm-up), not of the scaler")
    sched = cfg.get("scheduler") if isinstance(cfg.get("scheduler"), dict) else {}
    params = sched.get("params") if isinstance(sched.get("params"), dict) else {}
    fixes = []
    if not params.get("warmup_num_steps") and not params.get("warmup_ratio"):
        fixes.append("warm the lr up (scheduler WarmupDecayLR / WarmupLR warmup_num_steps, e.g. 5 % of the steps; "
                     "cookbook: --warmup-steps)")
    fixes.append("lower the lr (e.g. halve it)")
    clip = cfg.get("gradient_clipping")
    if not (_is_num(clip) and clip > 0):
        fixes.append('clip gradients: "gradient_clipping": 1.0')
    p = s["initial_scale_power"]
    fixes.append(f"start lower and halve less often: fp16.initial_scale_power {max(int(p) - 4, 8) if _is_int(p) else 12} "
                 f"(now {p}), hysteresis {max(_int_or(s['hysteresis'], 2) * 2, 4)} (overflows tolerated before a "
                 f"halving; now {s['hysteresis']}), loss_scale_window {max(_int_or(s['loss_scale_window'], 1000) // 2, 1)} "
                 f"(the scale climbs back sooner; now {s['loss_scale_window']})")
    floor = s["min_loss_scale"]
    fixes.append("min_loss_scale " + (f"{floor} ends the run sooner than DeepSpeed's default: set it to 1, the lowest "
                                      "floor" if _is_num(floor) and floor > 1 else
                                      "is at 1, the lowest floor: DeepSpeed 0.19.8 takes only an integer >= 1 "
                                      "(DeepSpeedFP16Config)"))
    fixes.append("or train in fp32 (fp16.enabled false; cookbook: --precision fp32): no loss scaling, but slower, and "
                 "weights and activations in fp32 take twice the GPU memory")
    return msg, "if the run stops there: " + "; ".join(fixes)


def _rule_activation_checkpointing(ctx: _Ctx) -> None:
    if "activation_checkpointing" in ctx.cfg and ctx.hf_model:
        ctx.add(WARNING, "activation_checkpointing",
                "activation_checkpointing configures only deepspeed.checkpointing.checkpoint() calls; Hugging Face "
                "transformers models do not make them, so this block does nothing and activation memory is unchanged",
                "delete the block and call model.gradient_checkpointing_enable() (or TrainingArguments("
                "gradient_checkpointing=True)) before training")


#: ZeRO stages with a ZenFlow optimizer in DeepSpeed 0.19.8: ``runtime/engine.py`` builds
#: ``ZenFlowZeroOptimizer`` (``runtime/zenflow/zenflow_stage_1_and_2.py``) for stages 1-2 and hooks
#: ``runtime/zenflow/engine_stage3.py`` into ``stage3.py`` for stage 3; stage 0 has no ZeRO optimizer.
ZENFLOW_STAGES = (1, 2, 3)


def _rule_zenflow(ctx: _Ctx) -> None:
    """ZenFlow (``zero_optimization.zenflow``, DeepSpeed >= 0.18; config model ``runtime/zenflow/zenflow_config.py``)."""
    zero = ctx.cfg.get("zero_optimization")
    if not isinstance(zero, dict) or zero.get("zenflow") is None:
        return
    path = "zero_optimization.zenflow"
    zf = zero["zenflow"]
    stage = ctx.stage
    if stage is not None and stage not in ZENFLOW_STAGES:
        ctx.add(ERROR, f"{path}", f"zenflow with zero_optimization.stage {stage}: ZenFlow is built into DeepSpeed's "
                "ZeRO optimizers (runtime/zenflow/zenflow_stage_1_and_2.py for stages 1-2, engine_stage3.py for stage 3); "
                "stage 0 has none",
                "set zero_optimization.stage to 2 (with offload_optimizer.device cpu), or delete zenflow")
    off = zero.get("offload_optimizer")
    device = off.get("device", "none") if isinstance(off, dict) else "none"
    if device in (None, "none"):
        shown = "missing" if not isinstance(off, dict) else f"device {device!r}"
        ctx.add(ERROR, "zero_optimization.offload_optimizer.device",
                f"zenflow without an offloaded optimizer (offload_optimizer {shown}): ZenFlow splits the update between "
                "the GPU and a CPU optimizer (ZenFlowCPUAdam, built only for an offloaded optimizer: runtime/engine.py "
                "get_optimizer_configuration); with stages 1-2 DeepSpeed 0.19.8 raises 'Zenflow must be used with cpu "
                "offload' (runtime/zenflow/zenflow_stage_1_and_2.py)",
                "add \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true} to zero_optimization, or "
                "delete zenflow")
    elif device == "nvme":
        ctx.add(WARNING, "zero_optimization.offload_optimizer.device",
                "zenflow with offload_optimizer.device 'nvme': ZenFlow's overlapped CPU optimizer was measured only with "
                "device cpu (docs/benchmarks.md section 10); stages 1-2 take the CPU path for nvme anyway",
                "set offload_optimizer.device to \"cpu\"")
    bf16_key = "bf16" if "bf16" in ctx.cfg else "bfloat16"
    bf16 = ctx.cfg.get(bf16_key)
    if stage in (1, 2) and isinstance(bf16, dict) and bf16.get("enabled") in (True, "auto") \
            and bf16.get("bf16_master_weights_and_grads") is True:
        ctx.add(ERROR, f"{bf16_key}.bf16_master_weights_and_grads",
                f"zenflow with {bf16_key}.bf16_master_weights_and_grads true (bf16 optimizer states): DeepSpeed 0.19.8 "
                "stops at start with 'Master weights feature requires ZeRO-2 Offload with DeepSpeedCPUAdam' "
                "(runtime/zero/stage_1_and_2.py, _enforce_cpu_offload: an exact type check that ZenFlowCPUAdam fails; "
                "seen on an H200, docs/benchmarks.md)",
                f"set {bf16_key}.bf16_master_weights_and_grads and {bf16_key}.bf16_optimizer_states to false (fp32 "
                "states: about twice the host RAM), or delete zenflow")
    fp16 = ctx.cfg.get("fp16")
    if stage in (1, 2) and isinstance(fp16, dict) and fp16.get("fp16_master_weights_and_grads") is True:
        ctx.add(ERROR, "fp16.fp16_master_weights_and_grads",
                "zenflow with fp16.fp16_master_weights_and_grads true: the same DeepSpeed 0.19.8 check "
                "(_enforce_cpu_offload in runtime/zero/stage_1_and_2.py) refuses ZenFlowCPUAdam",
                "set fp16.fp16_master_weights_and_grads to false, or delete zenflow")
    if isinstance(zf, dict) and zf.get("offload") is True and zero.get("overlap_comm") is not True:
        ctx.add(ERROR, f"{path}.offload",
                f"zenflow.offload true without zero_optimization.overlap_comm true: DeepSpeed asserts 'offload selective "
                "optimizer should be used with overlap_comm' (runtime/zenflow/zenflow_stage_1_and_2.py, "
                "engine_stage3.py)",
                "set zero_optimization.overlap_comm to true, or zenflow.offload to false")


def _rule_liger(ctx: _Ctx) -> None:
    """``--liger`` (``plan.liger``, :mod:`cookbook.liger`) where it does not apply: ZeRO-3 and other architectures.
    (No NVIDIA GPU is a machine fact: ``cookbook train`` refuses it before launching.)"""
    if ctx.plan is None or not ctx.plan.liger:
        return
    from . import liger
    model_type = ctx.spec.model_type if ctx.spec is not None else None
    if ctx.stage == 3:
        ctx.add(ERROR, "zero_optimization.stage",
                "zero_optimization.stage 3 with --liger: Liger's fused linear cross-entropy reads lm_head.weight without "
                "calling lm_head, so ZeRO-3 never gathers it and the kernel gets an empty partition (Liger-Kernel issue "
                "#1048: 'The size of tensor a (0) must match the size of tensor b')",
                "set zero_optimization.stage to 2 (the measured recipe: ZeRO-2 + offload_optimizer cpu), or drop --liger")
    if model_type is not None and model_type not in liger.ARCHITECTURES:
        ctx.add(ERROR, "(model)",
                f"--liger with model type {model_type!r}: the cookbook applies Liger's fused linear cross-entropy to "
                f"{', '.join(sorted(liger.ARCHITECTURES))} only", "drop --liger for this model")


def _rule_nvme_param_buffers(ctx: _Ctx, block: dict, path: str) -> None:
    """``offload_param`` nvme whose ``buffer_count`` cannot hold the parameters DeepSpeed 0.19.8 keeps swapped in
    at once for this model (:func:`cookbook.nvme.param_buffers_needed`, counted on the config's own
    ``stage3_max_reuse_distance``, ``max_in_cpu``, persistence threshold and aio block size): the run stops
    with ``AssertionError: Not enough buffers 0 for swapping 1`` (``partitioned_param_swapper.py:310``;
    DeepSpeed issue #3062)."""
    count = block.get("buffer_count", 5)
    if not _is_int(count) or ctx.stage != 3:
        return
    from .nvme import NVME_PARAM_MAX_REUSE_DISTANCE, estimate_nvme
    from .plan import Plan
    plan = ctx.plan
    opt = _get(ctx.cfg, "zero_optimization.offload_optimizer.device", "none")
    try:
        if plan is None or plan.offload_param != "nvme":
            plan = Plan(model=ctx.spec.name, num_gpus=ctx.world_size, zero_stage=3, offload_param="nvme",
                        offload_optimizer=opt if opt in ("cpu", "nvme") else "none",
                        nvme_path=block.get("nvme_path") or "/nvme", gradient_checkpointing=False)
        est = estimate_nvme(plan, spec=ctx.spec, ds_config=ctx.cfg, device="cpu")
    except Exception:  # noqa: BLE001 - the model or the plan cannot be estimated: other rules report it
        return
    st = est.settings
    need, kept, init = st["param_buffers_needed"], st["param_buffers_kept_by_reuse"], st["param_buffers_init_gather"]
    if count >= need:
        return
    reuse = st["stage3_max_reuse_distance"]
    why = []
    if kept:
        why.append(f"{kept} parameter tensor(s) on the SSD are reused within stage3_max_reuse_distance {_fmt(reuse)} "
                   "elements, so DeepSpeed keeps them swapped in (each holding a buffer) from forward to backward, "
                   "plus 1 for the module being fetched")
    if init > count:
        why.append(f"transformers' ZeRO-3 weight init gathers {init} swapped tensors of one block at once")
    bs = block.get("buffer_size", 10 ** 8)
    fix_count = max(5, init)
    ctx.add(ERROR, f"{path}.buffer_count",
            f"buffer_count {count} cannot hold the {need} parameter swap buffers DeepSpeed keeps in use at once for "
            f"{ctx.spec.name} on {ctx.world_size} rank(s) ({'; '.join(why)}); the run stops with 'AssertionError: "
            "Not enough buffers 0 for swapping 1' (partitioned_param_swapper.py swap_in; DeepSpeed issue #3062)",
            f"set zero_optimization.stage3_max_reuse_distance to {NVME_PARAM_MAX_REUSE_DISTANCE} and "
            f"{path}.buffer_count to at least {fix_count} (what the cookbook's builder writes), or keep the "
            f"reuse distance and set buffer_count to at least {need} (locks {need} × buffer_size {_fmt(bs)} × "
            f"{st['bytes_16bit']} B = {need * (bs if _is_num(bs) else 10 ** 8) * st['bytes_16bit'] / 2 ** 30:.2f} "
            "GiB of host RAM per rank)")


def _rule_offload(ctx: _Ctx) -> None:
    zero = ctx.cfg.get("zero_optimization")
    if not isinstance(zero, dict):
        return
    stage = ctx.stage
    for name in ("offload_optimizer", "offload_param"):
        block = zero.get(name)
        path = f"zero_optimization.{name}"
        if not isinstance(block, dict):
            continue
        device = block.get("device", "none")
        if device in (None, "none", "auto"):
            continue
        if name == "offload_param" and stage is not None and stage < 3:
            ctx.add(ERROR, path, f"offload_param with ZeRO stage {stage}: parameter offload exists only in stage 3; "
                    "DeepSpeed ignores it and the parameters stay on the GPU",
                    "set zero_optimization.stage to 3, or delete offload_param (use offload_optimizer for stage 1-2)")
        if name == "offload_optimizer" and stage == 0:
            ctx.add(ERROR, path, "offload_optimizer with ZeRO stage 0: offload needs ZeRO stage 1, 2 or 3",
                    "set zero_optimization.stage to 2 or 3")
        if device == "nvme" and not block.get("nvme_path"):
            ctx.add(ERROR, f"{path}.nvme_path", f"{name} to NVMe without nvme_path: DeepSpeed has nowhere to swap",
                    f"add \"nvme_path\": \"/local_nvme\" (a folder on a fast local NVMe SSD) to {path}")
        if device == "cpu":
            ignored = [k for k in NVME_ONLY_KEYS[name] if k in block]
            if ignored:
                ctx.add(WARNING, f"{path}.{ignored[0]}" if len(ignored) == 1 else path,
                        f"{', '.join(ignored)} only take(s) effect with device nvme; with device cpu DeepSpeed ignores it",
                        f"delete {', '.join(ignored)}, or set device to nvme")
        if name == "offload_param" and device == "nvme" and ctx.spec is not None and ctx.world_size:
            bs = block.get("buffer_size", 10**8)
            need = -(-ctx.spec.largest_layer_params // ctx.world_size)
            if _is_num(bs) and bs < need:
                ctx.add(ERROR, f"{path}.buffer_size",
                        f"buffer_size {int(bs)} elements is smaller than one rank's partition of {ctx.spec.name}'s "
                        f"largest tensor ({ctx.spec.largest_layer_params} / {ctx.world_size} = {need}); DeepSpeed "
                        "asserts 'More elements ... than buffer size' at the first swap",
                        f"set buffer_size to at least {need}")
            _rule_nvme_param_buffers(ctx, block, path)
    # NVMe optimizer offload with bf16 master weights / optimizer states
    off = zero.get("offload_optimizer")
    bf16_key = "bf16" if "bf16" in ctx.cfg else "bfloat16"
    bf16 = ctx.cfg.get(bf16_key)
    if isinstance(off, dict) and off.get("device") == "nvme" and isinstance(bf16, dict) \
            and bf16.get("enabled") in (True, "auto"):
        on = [k for k in ("bf16_optimizer_states", "bf16_master_weights_and_grads") if bf16.get(k) is True]
        if on:
            ctx.add(ERROR, f"{bf16_key}.{on[0]}",
                    f"{' and '.join(on)} with the optimizer offloaded to NVMe: DeepSpeed 0.19.8 stops at start with an "
                    "AssertionError in runtime/swap_tensor/utils.py (assert dtype == self.dtype; ZeRO-3 builds its NVMe "
                    "optimizer swapper for the bf16 master-weight dtype; seen on an H200)",
                    f"set {bf16_key}.bf16_master_weights_and_grads and {bf16_key}.bf16_optimizer_states to false (fp32 "
                    "states on NVMe), or set zero_optimization.offload_optimizer.device to \"cpu\" and keep the bf16 "
                    "states")
    # bf16 states without bf16 training, or bf16 optimizer states without bf16 master weights
    if isinstance(bf16, dict):
        on = [k for k in ("bf16_master_weights_and_grads", "bf16_optimizer_states") if bf16.get(k) is True]
        if on and bf16.get("enabled") in (False, None):
            ctx.add(WARNING, f"{bf16_key}.enabled",
                    f"{bf16_key}.{on[0]} true with {bf16_key}.enabled {str(bf16.get('enabled')).lower()}: bf16 master "
                    "weights and states belong to bf16 training, and DeepSpeed 0.19.8 does not tie them together "
                    "(runtime/config.py checks only the ZeRO stage), so the config says two things",
                    f"set {bf16_key}.enabled to true (bf16 training with bf16 states: `--bf16-states`), or set "
                    f"{' and '.join(f'{bf16_key}.{k}' for k in on)} to false")
        if bf16.get("bf16_optimizer_states") is True and bf16.get("bf16_master_weights_and_grads") is not True:
            ctx.add(ERROR, f"{bf16_key}.bf16_optimizer_states",
                    f"{bf16_key}.bf16_optimizer_states true without {bf16_key}.bf16_master_weights_and_grads: DeepSpeed "
                    "0.19.8 asserts 'bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled' at "
                    "start (runtime/config.py)",
                    f"set {bf16_key}.bf16_master_weights_and_grads to true as well, or bf16_optimizer_states to false")
    # pin_memory with short host RAM
    plan = ctx.plan
    pinned = [f"zero_optimization.{n}.pin_memory" for n in ("offload_optimizer", "offload_param")
              if isinstance(zero.get(n), dict) and zero[n].get("pin_memory") is True
              and zero[n].get("device") in ("cpu", "nvme")]
    if plan is not None and plan.host_memory_gib is not None and pinned and stage in (1, 2, 3):
        try:
            def dev(n):
                d = zero.get(n, {}).get("device", "none") if isinstance(zero.get(n), dict) else "none"
                return d if d in ("cpu", "nvme") else "none"
            eff = plan.replace(zero_stage=stage, offload_optimizer=dev("offload_optimizer"),
                               offload_param=dev("offload_param") if stage == 3 else "none",
                               nvme_path=plan.nvme_path or "/nvme", num_gpus=ctx.world_size or plan.num_gpus,
                               num_machines=1 if (ctx.world_size or plan.num_gpus) % plan.num_machines else plan.num_machines)
            from .dsconfig import host_memory_short
            from .memory import estimate
            b16 = _cfg_bf16_states(ctx.cfg)
            if host_memory_short(eff, bf16_states=b16):
                need = estimate(eff, bf16_states=b16, ds_config=ctx.cfg).host_gib["total"]
                ctx.add(WARNING, pinned[0] if len(pinned) == 1 else "zero_optimization",
                        f"pin_memory true while host RAM is short: the cookbook estimates {need:.0f} GiB per machine "
                        f"for this run with pinned buffers, the plan has {plan.host_memory_gib:g} GiB; pinned pages "
                        "cannot be swapped out, so the run gets killed instead of slowing down",
                        _pin_memory_fix(eff, ctx.cfg))
        except Exception:  # noqa: BLE001 — estimate unavailable (model unknown): skip this check
            pass


def _cfg_bf16_states(cfg: dict) -> bool:
    """The config asks for bf16 states: its ``bf16`` (or ``bfloat16``) block sets both bf16_master_weights_and_grads
    and bf16_optimizer_states (what ``build_config(..., bf16_states=True)`` writes)."""
    bf16 = cfg.get("bf16", cfg.get("bfloat16"))
    bf16 = bf16 if isinstance(bf16, dict) else {}
    return bool(bf16.get("bf16_master_weights_and_grads") and bf16.get("bf16_optimizer_states"))


def _pin_memory_fix(plan: Plan, cfg: dict) -> str:
    """The fix for pinned offload on short host RAM, only as far as the memory estimator says it fits:
    ``pin_memory: false`` when the pageable buffers (the estimate without the power-of-two rounding of
    pinned blocks) fit the RAM; otherwise the variants that fit (:func:`cookbook.memory.fixes_that_fit`),
    or the smallest change."""
    try:
        return _pin_memory_fix_checked(plan, cfg)
    except Exception as exc:  # noqa: BLE001 - no estimate: name only what needs none
        return f"add host RAM (the memory estimator could not check other fixes: {exc})"


def _pin_memory_fix_checked(plan: Plan, cfg: dict) -> str:
    from .memory import estimate, fixes_that_fit
    b16 = _cfg_bf16_states(cfg)
    from .dsconfig import PIN_MEMORY_OFF_COST as c
    est = estimate(plan, bf16_states=b16, ds_config=cfg)
    unpinned = est.host_gib["total"] - est.host_gib.get("pinned_rounding", 0.0)
    if unpinned <= plan.host_memory_gib:
        return (f"set pin_memory to false: unpinned, the host buffers need about {unpinned:.0f} GiB (the cookbook's "
                f"estimate without the power-of-two rounding of pinned blocks), which fits {plan.host_memory_gib:g} GiB; "
                f"transfers get slower (measured {c['pinned_tokens_per_s'] / c['unpinned_tokens_per_s']:.1f}x slower "
                f"end to end with full offload, {c['source']}): more host RAM is the better fix")
    fixes = fixes_that_fit(plan, exclude=est)
    head = (f"pin_memory false does not help: the states alone need about {unpinned:.0f} GiB > "
            f"{plan.host_memory_gib:g} GiB. ")
    if fixes[0].startswith("nothing"):
        return head + fixes[0]
    return head + "Variants the estimator says fit: " + "; ".join(fixes)


def _rule_save(ctx: _Ctx) -> None:
    if ctx.stage != 3 or not ctx.will_save:
        return
    zero = ctx.cfg["zero_optimization"]
    value = zero.get("stage3_gather_16bit_weights_on_model_save", zero.get("stage3_gather_fp16_weights_on_model_save"))
    path = "zero_optimization.stage3_gather_16bit_weights_on_model_save"
    if value is True:
        return
    if value == "auto" and ctx.mode == "accelerate":
        msg = ("is \"auto\": Accelerate fills it from zero3_save_16bit_model, which defaults to false; then ")
    elif value == "auto":
        return  # trainer fills it via Accelerate as well; reported with the autos in deepspeed mode
    else:
        msg = "is not true under ZeRO-3: "
    ctx.add(WARNING, path,
            f"stage3_gather_16bit_weights_on_model_save {msg}each rank holds only a shard of every parameter, so "
            "save_pretrained() / accelerator.save_model() would write empty placeholder tensors instead of weights",
            "set \"stage3_gather_16bit_weights_on_model_save\": true in zero_optimization (or rebuild fp32 "
            "weights afterwards with the checkpoint's zero_to_fp32.py)")


_SECTION_EXAMPLES = {
    "fp16": '{"enabled": true, "loss_scale": 0}', "bf16": '{"enabled": true}', "bfloat16": '{"enabled": true}',
    "zero_optimization.offload_param": '{"device": "cpu", "pin_memory": true}',
    "zero_optimization.offload_optimizer": '{"device": "cpu", "pin_memory": true}',
}

_NUMBER_TOP = {"train_batch_size": "a positive integer", "train_micro_batch_size_per_gpu": "a positive integer",
               "gradient_accumulation_steps": "a positive integer", "steps_per_print": "a positive integer",
               "gradient_clipping": "a number >= 0"}


def _rule_types(ctx: _Ctx) -> None:
    cfg = ctx.cfg
    # strings that hold numbers or booleans, anywhere
    for path, value in _walk(cfg):
        if not isinstance(value, str) or value == "auto" or path.endswith((".type", ".nvme_path", ".device")):
            continue
        try:
            float(value)
            is_num = value.strip().lower() not in ("nan", "inf", "infinity", "-inf")
        except ValueError:
            is_num = False
        if is_num:
            ctx.add(ERROR, path, f"{value!r} is a string where a number belongs; DeepSpeed's arithmetic and "
                    "the Accelerate/Trainer consistency checks compare it as text", f"write it unquoted: {value}")
            ctx.handled.add(path)
        elif value.strip().lower() in ("true", "false"):
            ctx.add(ERROR, path, f"{value!r} is a string where a boolean belongs",
                    f"write it unquoted in lower case: {value.strip().lower()}")
            ctx.handled.add(path)
    for key, want in _NUMBER_TOP.items():
        if key not in cfg or key in ctx.handled or cfg[key] == "auto":
            continue
        v = cfg[key]
        ok = (_is_int(v) and v > 0) if want.startswith("a positive integer") else (_is_num(v) and v >= 0)
        if not ok:
            ctx.add(ERROR, key, f"{key}={v!r}: must be {want}", f"set {key} to {want}")
    # ZeRO stage
    zero = cfg.get("zero_optimization")
    if zero is not None and not isinstance(zero, dict):
        ctx.add(ERROR, "zero_optimization", f"zero_optimization is a {type(zero).__name__}, not an object",
                'write it as {"stage": 2, ...}')
    stage = zero.get("stage") if isinstance(zero, dict) else None
    if (isinstance(zero, dict) and "stage" in zero and stage != "auto" and not (_is_int(stage) and 0 <= stage <= 3)
            and "zero_optimization.stage" not in ctx.handled):
        ctx.add(ERROR, "zero_optimization.stage", f"stage={stage!r}: ZeRO has stages 0, 1, 2 and 3",
                "set stage to 2 (optimizer states + gradients) or 3 (+ parameters)")
        ctx.handled.add("zero_optimization.stage")
    # optimizer params
    params = _get(cfg, "optimizer.params")
    if isinstance(params, dict):
        lr = params.get("lr")
        if lr is not None and lr != "auto" and not (_is_num(lr) and lr >= 0) and "optimizer.params.lr" not in ctx.handled:
            ctx.add(ERROR, "optimizer.params.lr", f"lr={lr!r}: must be a number >= 0", "e.g. 2e-5")
        betas = params.get("betas")
        if betas is not None and betas != "auto" and not (
                isinstance(betas, list) and len(betas) == 2 and all(_is_num(b) and 0 <= b < 1 for b in betas)):
            ctx.add(ERROR, "optimizer.params.betas", f"betas={betas!r}: must be two numbers in [0, 1)",
                    "e.g. [0.9, 0.95]")
    # DeepSpeed's own pydantic validation of its sections (skip unknown keys: rule 4; autos: rule 3)
    for section, model in _pydantic_sections().items():
        node = _get(cfg, section)
        if node is not None and node != "auto" and not isinstance(node, dict) and section != "zero_optimization":
            ctx.add(ERROR, section, f"{section} is {json.dumps(node)}, but DeepSpeed expects an object here",
                    f"write it as an object, e.g. {_SECTION_EXAMPLES.get(section, '{...}')}")
            ctx.handled.add(section)
        if not isinstance(node, dict):
            continue
        fields = _model_keys(model)
        data = {k: v for k, v in node.items()
                if k in fields and v != "auto" and f"{section}.{k}" not in ctx.handled
                and f"{section}.{k}" not in _pydantic_sections()}
        try:
            model(**data)
        except Exception as exc:  # pydantic.ValidationError or DeepSpeed's own assertions
            errors = exc.errors() if hasattr(exc, "errors") else [{"loc": (), "msg": str(exc)}]
            for err in errors:
                loc = ".".join(str(x) for x in err.get("loc", ()))
                path = f"{section}.{loc}" if loc else section
                if err.get("type") == "extra_forbidden" or path in ctx.handled:
                    continue
                got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
                ctx.add(ERROR, path, f"DeepSpeed rejects it: {err.get('msg')}{got}",
                        "fix the value's type or range (https://www.deepspeed.ai/docs/config-json/)")
                ctx.handled.add(path)


# ----------------------------------------------------------------------------------------------
# rule 10: optimizer / scheduler params against the signatures DeepSpeed calls
# ----------------------------------------------------------------------------------------------

#: ``optimizer.params`` keys DeepSpeed's engine pops before it builds an Adam/AdamW optimizer
#: (``runtime/engine.py`` ``_configure_basic_optimizer`` / ``get_optimizer_configuration``).
ADAM_ENGINE_KEYS = ("adam_w_mode", "torch_adam", "fp32_optimizer_states")


def _signature_keys(fn, skip: tuple) -> set[str]:
    import inspect
    return {n for n, p in inspect.signature(fn).parameters.items()
            if n not in skip and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


@functools.lru_cache(maxsize=32)
def optimizer_param_keys(type_name: str, cpu_optimizer: bool = False, torch_adam: bool = False):
    """(accepted ``optimizer.params`` keys, the class DeepSpeed builds) for an optimizer ``type``.

    Read off the signatures DeepSpeed 0.19.8 calls (``runtime/engine.py``, ``_configure_basic_optimizer``
    and ``get_optimizer_configuration``): Adam/AdamW → ``DeepSpeedCPUAdam`` when the optimizer is offloaded
    (``zero_use_cpu_optimizer``: device cpu or nvme), ``torch.optim.AdamW``/``Adam`` with ``torch_adam``,
    else ``FusedAdam`` — plus the keys the engine pops first (:data:`ADAM_ENGINE_KEYS`; ``foreach`` with
    ``torch_adam``) and less the ones it passes itself (``adamw_mode``, ``fp32_optimizer_states`` for CPU
    Adam; ``adam_w_mode`` for FusedAdam); Lamb → ``FusedLamb``; Adagrad → ``DeepSpeedCPUAdagrad`` /
    ``torch.optim.Adagrad``; Lion → ``DeepSpeedCPULion`` / ``FusedLion``; any other name → ``torch.optim.<type>``.
    ``max_grad_norm`` is refused by the engine for every type. Returns ``(None, reason)`` for types whose
    parameters are not checked (MuAdam/MuAdamW/MuSGD need ``mup``; Muon splits its keys) and
    ``(None, None)`` for a type DeepSpeed does not know.
    """
    import torch
    name = type_name.lower()
    if name in ("adam", "adamw"):
        if torch_adam:
            cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
            return _signature_keys(cls, ("params",)) | set(ADAM_ENGINE_KEYS), f"torch.optim.{cls.__name__}"
        if cpu_optimizer:
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            keys = _signature_keys(DeepSpeedCPUAdam, ("self", "model_params", "adamw_mode"))
            return keys | set(ADAM_ENGINE_KEYS), "DeepSpeedCPUAdam"
        from deepspeed.ops.adam import FusedAdam
        return _signature_keys(FusedAdam, ("self", "params")) | set(ADAM_ENGINE_KEYS), "FusedAdam"
    if name == "lamb":
        from deepspeed.ops.lamb import FusedLamb
        return _signature_keys(FusedLamb, ("self", "params")) - {"max_grad_norm"}, "FusedLamb"
    if name == "adagrad":
        if cpu_optimizer:
            from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
            return _signature_keys(DeepSpeedCPUAdagrad, ("self", "model_params")), "DeepSpeedCPUAdagrad"
        return _signature_keys(torch.optim.Adagrad, ("params",)), "torch.optim.Adagrad"
    if name == "lion":
        if cpu_optimizer:
            from deepspeed.ops.lion import DeepSpeedCPULion
            return _signature_keys(DeepSpeedCPULion, ("self", "model_params")), "DeepSpeedCPULion"
        from deepspeed.ops.lion import FusedLion
        return _signature_keys(FusedLion, ("self", "params")), "FusedLion"
    if name in ("muadam", "muadamw", "musgd", "muon"):
        return None, f"{type_name}'s parameters are not checked"
    cls = getattr(torch.optim, type_name, None)
    if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
        return _signature_keys(cls, ("params",)), f"torch.optim.{type_name}"
    return None, None


@functools.lru_cache(maxsize=32)
def scheduler_param_keys(type_name: str):
    """(accepted ``scheduler.params`` keys, the class) for a scheduler ``type``: DeepSpeed's own
    (``runtime/lr_schedules.py``, ``VALID_LR_SCHEDULES``) first, then ``torch.optim.lr_scheduler.<type>``
    (``runtime/engine.py`` ``_scheduler_from_config``); ``(None, None)`` for an unknown type."""
    import torch
    from deepspeed.runtime import lr_schedules
    if type_name in lr_schedules.VALID_LR_SCHEDULES:
        return _signature_keys(getattr(lr_schedules, type_name), ("self", "optimizer")), f"deepspeed {type_name}"
    cls = getattr(torch.optim.lr_scheduler, type_name, None)
    if isinstance(cls, type):
        return _signature_keys(cls, ("self", "optimizer")), f"torch.optim.lr_scheduler.{type_name}"
    return None, None


def _optimizer_type_names() -> list[str]:
    import torch
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS
    spelled = {"Adam", "AdamW", "Lamb", "Adagrad", "Lion", "MuAdam", "MuAdamW", "MuSGD", "Muon"}
    names = {n for n in spelled if n.lower() in DEEPSPEED_OPTIMIZERS}  # DeepSpeed matches them case-insensitively
    names |= {n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
              and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n != "Optimizer"}
    return sorted(names)


def _rule_params(ctx: _Ctx) -> None:
    cfg = ctx.cfg
    for section, example in (("optimizer", "AdamW"), ("scheduler", "WarmupDecayLR")):
        node = cfg.get(section)
        if isinstance(node, dict) and "type" in node and not isinstance(node["type"], str):
            ctx.add(ERROR, f"{section}.type", f"{section}.type is {json.dumps(node['type'])}, not a name",
                    f'write the class name as a string, e.g. "{example}"')
    zero = cfg.get("zero_optimization") if isinstance(cfg.get("zero_optimization"), dict) else {}
    off = zero.get("offload_optimizer")
    cpu_opt = isinstance(off, dict) and off.get("device") in ("cpu", "nvme")
    opt = cfg.get("optimizer")
    if isinstance(opt, dict) and isinstance(opt.get("type"), str):
        params = opt.get("params") if isinstance(opt.get("params"), dict) else {}
        tname = opt["type"]
        if "max_grad_norm" in params:
            ctx.add(ERROR, "optimizer.params.max_grad_norm", "DeepSpeed's engine refuses max_grad_norm as an optimizer "
                    "parameter (ValueError in _configure_basic_optimizer)",
                    "delete optimizer.params.max_grad_norm and set the top-level \"gradient_clipping\" instead")
        keys, cls = optimizer_param_keys(tname, cpu_opt, params.get("torch_adam") is True)
        if keys is None and cls is None:
            guess = _suggest_ci(tname, _optimizer_type_names())
            ctx.add(ERROR, "optimizer.type", f"optimizer type {tname!r} is neither a DeepSpeed optimizer nor a "
                    "torch.optim class; DeepSpeed fails at start (getattr(torch.optim, type))",
                    f"did you mean {guess!r}?" if guess else "use AdamW (DeepSpeed's FusedAdam / DeepSpeedCPUAdam)")
        elif keys is not None:
            for key in params:
                if key in keys or key == "max_grad_norm":
                    continue
                guess = _suggest(key, keys)
                ctx.add(ERROR, f"optimizer.params.{key}",
                        f"{cls} (what DeepSpeed builds for type {tname!r}"
                        + (" with the optimizer offloaded" if cpu_opt and tname.lower() in ("adam", "adamw") else "")
                        + f") takes no parameter {key!r}: TypeError at start. It takes: {', '.join(sorted(keys))}",
                        f"did you mean {guess!r}? rename optimizer.params.{key}" if guess
                        else f"delete optimizer.params.{key}")
    sch = cfg.get("scheduler")
    if isinstance(sch, dict) and isinstance(sch.get("type"), str):
        params = sch.get("params") if isinstance(sch.get("params"), dict) else {}
        keys, cls = scheduler_param_keys(sch["type"])
        if keys is None:
            from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES
            guess = _suggest_ci(sch["type"], VALID_LR_SCHEDULES)
            ctx.add(ERROR, "scheduler.type", f"scheduler type {sch['type']!r} is neither a DeepSpeed schedule "
                    f"({', '.join(VALID_LR_SCHEDULES)}) nor a torch.optim.lr_scheduler class: DeepSpeed asserts "
                    "'DeepSpeed does not recognize LR scheduler' at start",
                    f"did you mean {guess!r}?" if guess else "use WarmupDecayLR (linear warm-up and decay)")
        else:
            for key in params:
                if key in keys:
                    continue
                guess = _suggest(key, keys)
                ctx.add(ERROR, f"scheduler.params.{key}",
                        f"{cls} takes no parameter {key!r}: TypeError at start. It takes: {', '.join(sorted(keys))}",
                        f"did you mean {guess!r}? rename scheduler.params.{key}" if guess
                        else f"delete scheduler.params.{key}")


def _suggest_ci(name: str, candidates) -> str | None:
    low = {c.lower(): c for c in candidates}
    if name.lower() in low:
        return low[name.lower()]
    match = difflib.get_close_matches(name.lower(), list(low), n=1, cutoff=0.6)
    return low[match[0]] if match else None


# ----------------------------------------------------------------------------------------------
# rule 11: bucket sizes against the h² rule
# ----------------------------------------------------------------------------------------------

#: "Far below" the h² rule: under this fraction of it (the LLaMA article's reduce_bucket_size 1e6 for
#: h = 4096 is 1/16.8 of h² = 16777216).
BUCKET_FAR_BELOW = 0.1


def _rule_buckets(ctx: _Ctx) -> None:
    zero = ctx.cfg.get("zero_optimization")
    if ctx.spec is None or not isinstance(zero, dict) or ctx.stage in (None, 0):
        return
    from .dsconfig import bucket_sizes
    h = ctx.spec.hidden_size
    rule = bucket_sizes(h)
    n = ctx.spec.num_params
    checks = [("reduce_bucket_size", rule["reduce_bucket_size"], "gradient reduction")]
    if ctx.stage == 3:
        checks.append(("stage3_prefetch_bucket_size", rule["stage3_prefetch_bucket_size"], "parameter all-gather"))
    else:
        checks.append(("allgather_bucket_size", rule["reduce_bucket_size"], "all-gather of updated partitions"))
    for key, want, what in checks:
        value = zero.get(key)
        path = f"zero_optimization.{key}"
        if not _is_num(value) or value <= 0 or value >= BUCKET_FAR_BELOW * want or path in ctx.handled:
            continue
        many, few = -(-n // int(value)), -(-n // want)
        ctx.add(WARNING, path,
                f"{key} {int(value):,} elements is far below the h² rule for {ctx.spec.name} (hidden size {h}: "
                f"{want:,}, as the HF Trainer fills \"auto\"): the {what} of {n:,} parameters goes out in about "
                f"{many:,} collectives per pass instead of {few:,} — more, smaller collectives that use the "
                "interconnect poorly and overlap less with compute (it saves only the bucket's memory, "
                f"{(want - value) * 2 / 2**20:,.0f} MiB in 16-bit)",
                f"set {key} to {want} (or \"auto\", filled from the model's hidden size)")


# ----------------------------------------------------------------------------------------------
# entry point
# ----------------------------------------------------------------------------------------------

def _config_batch(cfg: dict, world_size: int | None = None) -> tuple[int, int, str] | None:
    """``(micro batch per GPU, accumulation, how)`` of a config as DeepSpeed reads it: the numbers it states, else
    the ones it derives from ``train_batch_size`` on ``world_size`` GPUs (:func:`deepspeed_batch`); None when the
    keys are missing, not numbers, or refused."""
    vals = [cfg.get(k) for k in BATCH_KEYS]
    if not all(x is None or (_is_int(x) and x > 0) for x in vals):
        mb = vals[1]
        return (mb, vals[2] if _is_int(vals[2]) else 1, "stated") if _is_int(mb) and mb > 0 else None
    if vals[1] is not None and (vals[0] is None or not world_size):
        return vals[1], vals[2] or 1, "stated"
    if not world_size or all(v is None for v in vals):
        return None
    ds = deepspeed_batch(*vals, world_size)
    if not ds.ok:
        return None
    how = ds.how("train_micro_batch_size_per_gpu")
    return ds.micro_batch, ds.grad_accum, f"DeepSpeed derives it: {how}" if how else "stated"


def _stated_micro(path, world_size: int | None = None) -> int | None:
    """The micro batch per GPU of the JSON file at ``path``: ``train_micro_batch_size_per_gpu`` as a number, else the
    one DeepSpeed derives from ``train_batch_size`` on ``world_size`` GPUs (:func:`deepspeed_batch`), else None."""
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        got = _config_batch(cfg, world_size) if isinstance(cfg, dict) else None
    except (OSError, ValueError):
        return None
    return got[0] if got else None


def _cfg_precision(ctx: _Ctx) -> str:
    """The run's precision for the activation bytes: the config's enabled block, else ``ctx.precision``, else the
    plan's, else bf16 (an ``"auto"`` block is filled by its reader)."""
    for key in ("bf16", "fp16"):
        if isinstance(ctx.cfg.get(key), dict) and ctx.cfg[key].get("enabled") is True:
            return key
    if ctx.precision:
        return ctx.precision
    if ctx.plan is not None:
        return ctx.plan.precision
    explicit_off = all(isinstance(ctx.cfg.get(k), dict) and ctx.cfg[k].get("enabled") is False for k in ("bf16", "fp16"))
    return "fp32" if explicit_off else "bf16"


#: Above this share of the card the activations and logits leave too little for what ZeRO keeps on the GPU (the
#: 16-bit parameters and gradients below ZeRO-3, the gathered layers and buckets with it) — a warning, not an error.
ACTIVATION_SHARE_WARN = 0.5


def _rule_memory(ctx: _Ctx) -> None:
    """Rule 14 (with ``model`` and ``gpu_memory_gib``): the activations and logits of one micro batch per GPU,
    which ZeRO neither partitions nor offloads, against the card.

    The micro batch is DeepSpeed's (:func:`_config_batch`), the bytes are :func:`cookbook.memory.activation_bytes`
    (checkpoints + the larger of the loss phase and one layer's recompute, with gradient checkpointing as
    ``cookbook train`` runs) plus the CUDA context (:data:`cookbook.memory.CUDA_CONTEXT_GIB`). Error: more than the
    card (no stage or offload fits it); warning: more than :data:`ACTIVATION_SHARE_WARN` of it. The fix keeps the
    global batch: the largest divisor of the micro batch under that share, accumulation raised to match; Liger's
    fused loss where the logits are the larger phase."""
    card = ctx.gpu_memory_gib
    if ctx.spec is None or not card:
        return
    got = _config_batch(ctx.cfg, ctx.world_size)
    if got is None:
        return
    micro, accum, how = got
    from .memory import CUDA_CONTEXT_GIB, GIB, activation_bytes
    seq = ctx.seq_len
    base = dict(model=ctx.spec.name, seq_len=seq, precision=_cfg_precision(ctx), gpu_memory_gib=float(card),
                gradient_checkpointing=True, liger=bool(ctx.plan.liger) if ctx.plan is not None else False)

    def need(m, **kw):
        act = activation_bytes(ctx.spec, Plan(**{**base, **kw, "micro_batch": m}))
        return {k: v / GIB for k, v in act.items()}

    now = need(micro)
    total = now["total"] + CUDA_CONTEXT_GIB
    if total <= ACTIVATION_SHARE_WARN * card:
        return
    key = "train_micro_batch_size_per_gpu"
    budget = ACTIVATION_SHARE_WARN * card
    smaller = [d for d in range(micro - 1, 0, -1) if micro % d == 0 and need(d)["total"] + CUDA_CONTEXT_GIB <= budget]
    fixes = []
    if smaller:
        d = smaller[0]
        fixes.append(f"set {key} to {d} and gradient_accumulation_steps to {accum * micro // d} (the same global batch; "
                     f"{need(d)['total'] + CUDA_CONTEXT_GIB:.1f} GiB)")
    else:
        fixes.append(f"even micro batch 1 needs {need(1)['total'] + CUDA_CONTEXT_GIB:.1f} GiB at seq len {seq}: "
                     "shorten the sequences")
    keep = (f". Keep gradient checkpointing on (without it micro batch {micro} holds "
            f"{need(micro, gradient_checkpointing=False)['total']:.1f} GiB of activations)")
    lig = need(micro, liger=True)
    if not base["liger"] and lig["total"] < now["total"] - 0.5:
        where = "needs ZeRO 0-2, not this config's stage 3" if ctx.stage == 3 else "ZeRO 0-2"
        fixes.append(f"Liger's fused linear cross-entropy (cookbook train --liger; {where}; llama/qwen2) holds "
                     f"{lig['logits']:.1f} GiB for the loss instead of {now['logits']:.1f} GiB of logits "
                     f"({lig['total'] + CUDA_CONTEXT_GIB:.1f} GiB in all)")
    verdict = ("more than the card: no ZeRO stage or offload fits it" if total > card else
               f"over {ACTIVATION_SHARE_WARN:.0%} of the card, leaving {card - total:.1f} GiB for what ZeRO keeps on "
               "the GPU")
    ctx.add(ERROR if total > card else WARNING, key,
            f"{key}={micro} ({how}) × seq len {seq} for {ctx.spec.name} needs {total:.1f} GiB per GPU for "
            f"activations and logits alone (cookbook.memory.activation_bytes, with gradient checkpointing: the layer "
            f"checkpoints and the larger of one layer's recompute and the loss phase's {now['logits']:.1f} GiB of "
            f"logits, + {CUDA_CONTEXT_GIB:g} GiB CUDA context) on a {card:g} GiB card: {verdict}. ZeRO partitions and offloads the model states, never "
            "these", "; or ".join(fixes) + keep)




def lint(config_or_path, *, world_size: int | None = None, mode: str = "deepspeed", gpu: str | None = None,
         model: str | None = None, plan: Plan | None = None, will_save_hf_model: bool = True,
         stated=None, names: dict | None = None, lr: float = 3e-3, max_steps: int = 40,
         warmup_steps: int | None = None, machine: bool = False, filled=None,
         precision: str | None = None, gpu_memory_gib: float | None = None,
         seq_len: int | None = None) -> LintReport:
    """Check a DeepSpeed config (dict, JSON file path) before launch; never raises on bad configs.

    Args:
        config_or_path: the config dict, or a path to a JSON file.
        world_size: data-parallel world size (GPUs over all machines); default ``plan.world_size``.
        precision: the run's precision where the config leaves it to its reader (``--precision``: in
            ``trainer`` mode the HF Trainer fills ``fp16.enabled``/``bf16.enabled`` "auto" from ``--fp16``/``--bf16``,
            ``transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig.trainer_config_process``; in
            ``accelerate`` mode from ``--mixed_precision``); default ``plan.precision`` in ``launch`` mode.
        mode: who reads the config — ``launch`` (what ``cookbook launch --config`` does: every ``"auto"``
            filled from the plan by :func:`cookbook.dsconfig.resolve_config`, then the result checked as
            DeepSpeed sees it; the resolved config is ``report.resolved``), ``deepspeed`` (plain
            ``deepspeed.initialize``: nothing filled), ``accelerate`` or ``trainer`` (which ``"auto"``
            values they fill, rule 3).
        gpu: GPU name (``"RTX 4090"``) for the precision checks (rule 5).
        model: model name (:func:`cookbook.models.model_spec`) for bucket-size hints and buffer checks.
        plan: the intended run; fills micro batch / accumulation missing from the config, and its
            ``host_memory_gib`` drives the ``pin_memory`` check. Mode ``launch`` resolves for it
            (default: ``Plan(num_gpus=world_size, model=model)``).
        will_save_hf_model: an HF model will be saved (``save_pretrained``), and the model is an HF
            transformers model (rules 6 and 8).
        stated, names, lr, max_steps, warmup_steps: mode ``launch``: the options the user typed, how to
            name them, and the training options (see :func:`cookbook.dsconfig.resolve_config`). In the other
            modes ``stated`` (plan field names) says which of ``plan``'s fields the user gave: only those are
            compared with the config's batch keys (default: every field of ``plan``), and ``names`` names them.
        machine: also check what this machine decides (what :func:`cookbook.launch.launch` checks before it
            starts anything): fp16 where DeepSpeed's CPU accelerator has none, NVMe offload without libaio, and
            the precision rules for this machine's GPU when ``gpu`` is not given.
        filled: config paths whose values the run's options filled (``fp16.enabled`` from ``--precision fp16``,
            named by ``names``): a machine rule then names the option, not the key. Mode ``launch`` adds the
            paths it fills itself.
        gpu_memory_gib: memory of one card in GiB; with ``model``, the activations and logits of the config's micro
            batch are checked against it (rule 14, :func:`_rule_memory`). seq_len: tokens per row for that check
            (default ``plan.seq_len``, else 128 as ``cookbook launch``).

    Returns:
        :class:`LintReport` (errors first). A missing or unparseable file, or one that is not a JSON object,
        gives ``readable=False`` (it cannot be used) and a ``(file)``/``(top level)`` finding; when the
        parse causes can be repaired, the rest of the rules run on the repaired config too.

    Raises:
        ValueError: ``mode`` or ``world_size`` itself is invalid (a caller error, not a config problem).
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: use one of {', '.join(MODES)}")
    if world_size is not None and (not _is_int(world_size) or world_size < 1):
        raise ValueError(f"world_size={world_size!r}: must be a positive integer (GPUs over all machines)")
    if plan is not None and not isinstance(plan, Plan):
        raise ValueError(f"plan={plan!r}: pass a cookbook.plan.Plan or None")
    if world_size is None and plan is not None:
        world_size = plan.world_size
    source = None
    pre: list[Finding] = []
    readable = True
    if isinstance(config_or_path, (str, os.PathLike)):
        source = str(config_or_path)
        try:
            cfg = load_config(config_or_path)
        except LintParseError as exc:
            pre.append(exc.finding)
            readable = False
            if exc.repaired is None:
                return LintReport(pre, source=source, readable=False)
            cfg = exc.repaired
            pre.append(Finding(WARNING, "(file)", "the findings below come from the config after repairing the "
                               "parse errors named above", "fix the parse errors, then lint again"))
    else:
        cfg = config_or_path
    if not isinstance(cfg, dict):
        pre.append(Finding(ERROR, "(top level)", f"the config is a {type(cfg).__name__}, not a JSON object: it "
                           "cannot be used (DeepSpeed, Accelerate and the HF Trainer read one object)",
                           'a DeepSpeed config is one object: {"train_micro_batch_size_per_gpu": 1, ...}'))
        return LintReport(pre, source=source, readable=False)
    resolved = None
    if mode == "launch":
        from .dsconfig import resolve_config
        base = plan if plan is not None else Plan(num_gpus=world_size or 1, **({"model": model} if model else {}))
        if world_size is not None and base.num_gpus != world_size:
            base = base.replace(num_gpus=world_size, num_machines=1)
        name = Path(source).name if source else "the config"
        try:
            resolved = resolve_config(cfg, base, stated=stated, names=names, lr=lr, max_steps=max_steps,
                                      warmup_steps=warmup_steps, save_16bit_model=will_save_hf_model, config_name=name)
        except Exception as exc:  # noqa: BLE001 — a linter must not crash on odd input
            from .dsconfig import Problem, Resolution
            resolved = Resolution(cfg, cfg, None, (), (Problem(
                "(config)", f"the config could not be resolved for this run: {type(exc).__name__}: {exc}",
                "fix the errors below and lint again"),), name)
        pre.extend(Finding(ERROR, p.path, p.message, p.fix) for p in resolved.problems)
        cfg = resolved.config
        if resolved.plan is not None:
            plan = resolved.plan
            world_size = plan.world_size
            model = model or str(plan.model)
    ctx = _Ctx(cfg, world_size, mode, gpu, model, plan, will_save_hf_model)
    ctx.handled.update(f.path for f in pre)
    ctx.names = dict(names or {})
    ctx.stated = set(stated) if stated is not None and mode != "launch" else None
    ctx.precision = precision
    if gpu_memory_gib is not None and not (_is_num(gpu_memory_gib) and gpu_memory_gib > 0):
        raise ValueError(f"gpu_memory_gib={gpu_memory_gib!r}: give one card's memory in GiB, e.g. 24")
    ctx.gpu_memory_gib = gpu_memory_gib
    ctx.seq_len = seq_len or (plan.seq_len if plan is not None else _launch_defaults()["seq_len"])
    ctx.filled = set(filled or ()) | ({r.path for r in resolved.rows if r.how != "kept"} if resolved else set())
    if (model or (plan and plan.model)) and ctx.spec is None:
        ctx.add(WARNING, "(model)", f"model {model or plan.model!r} not found: model-based checks skipped",
                "pass a shipped name (qwen-14b, llama-7b, ...) or a folder with config.json")
    rules = [_rule_types, _rule_auto, _rule_batch, _rule_keys, _rule_precision, _rule_activation_checkpointing,
             _rule_offload, _rule_zenflow, _rule_liger, _rule_save, _rule_params, _rule_buckets, _rule_memory]
    if machine:
        rules.insert(0, _rule_machine)
    for rule in rules:
        try:
            rule(ctx)
        except Exception as exc:  # noqa: BLE001 — a linter must not crash on odd input
            ctx.add(WARNING, "(linter)", f"check {rule.__name__[6:]} could not run on this config: "
                    f"{type(exc).__name__}: {exc}", "fix the errors above and lint again")
    findings = ctx.findings if not pre else [f for f in ctx.findings if f.path not in {p.path for p in pre}]
    return LintReport(pre + findings, source=source, readable=readable, resolved=resolved)


def _machine_gpu() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return None
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else str(name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver: no GPU
        return None


def _rule_machine(ctx: _Ctx) -> None:
    """What this machine decides (the checks :func:`cookbook.launch.launch` makes before it starts)."""
    cfg = ctx.cfg
    gpu = _machine_gpu()
    if ctx.gpu is None and gpu is not None:
        ctx.gpu = gpu  # the precision rules (5) then speak of this machine's GPU
    fp16 = cfg.get("fp16")
    if gpu is None and isinstance(fp16, dict) and fp16.get("enabled") is True and not cpu_fp16_supported():
        if "fp16.enabled" in ctx.filled:  # the option put it there ("auto" or no block): name the option
            why, fix = cpu_fp16_refusal(ctx.names.get("precision", "precision"), filled_into="fp16.enabled")
            ctx.add(ERROR, "fp16.enabled", why, fix)
        else:
            ctx.add(ERROR, "fp16.enabled", "fp16.enabled true on this machine, which has no NVIDIA GPU: the run is a "
                    "CPU rehearsal, and DeepSpeed's CPU accelerator trains in fp32 and bf16 but in fp16 only on a CPU "
                    "with oneDNN fp16 (CPU_Accelerator.is_fp16_supported()), which this one lacks; the engine raises "
                    "'Type fp16 is not supported on your device' at start",
                    "set fp16.enabled to \"auto\" (filled from the precision: fp32 on a CPU) or to false, or "
                    "\"bf16\": {\"enabled\": true}")
        ctx.handled.add("fp16.enabled")
    zero = cfg.get("zero_optimization") if isinstance(cfg.get("zero_optimization"), dict) else {}
    nvme = [f"zero_optimization.{n}.device" for n in ("offload_optimizer", "offload_param")
            if isinstance(zero.get(n), dict) and zero[n].get("device") == "nvme"]
    if nvme:
        from .hardware import LIBAIO_PACKAGES, libaio_present
        if not libaio_present():  # DeepSpeed's async_io op needs it; the run would fail minutes in
            ctx.add(ERROR, nvme[0], "NVMe offload needs libaio (DeepSpeed's async_io op) and this machine does not "
                    "have it", LIBAIO_PACKAGES)


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def _launch_defaults() -> dict:
    """The defaults of ``cookbook launch``'s options (read off its parser), so that ``cookbook lint`` in
    mode ``launch`` resolves exactly what ``cookbook launch --config`` would."""
    import argparse

    from .train import add_launch_arguments as _add_launch_arguments
    p = argparse.ArgumentParser(add_help=False)
    _add_launch_arguments(p, with_config=True)
    return {a.dest: a.default for a in p._actions if a.dest != "help"}


def _run(args) -> int:
    from .dsconfig import stdout_to_stderr
    from .plan import DEST_FIELDS, user_message
    typed = getattr(args, "_typed", None)
    if typed is None:  # called without cookbook.cli.main: every option given is typed
        typed = {k: k for k, v in vars(args).items() if v is not None and not k.startswith("_")}
    stated = {DEST_FIELDS.get(d, d) for d in typed}
    names = getattr(args, "_names", None) or {}
    if args.resolve and args.mode not in (None, "launch"):
        print(f"error: --resolve fills the config as cookbook launch does; it needs --mode launch (the default), "
              f"not --mode {args.mode}", file=sys.stderr)
        return 2
    mode = args.mode or "launch"
    notes = []
    world = args.world_size
    if world is not None and world < 1:
        print("error: " + user_message(PlanError.about("{num_gpus}: must be a positive integer; set {num_gpus.name} "
                                                       "to 1 or more", num_gpus=world), args), file=sys.stderr)
        return 2
    if world is None:
        try:
            stated_world = config_world_size(json.loads(Path(args.config).read_text(encoding="utf-8-sig")))
        except (OSError, ValueError):
            stated_world = None  # the lint below reports an unreadable file
        if stated_world:
            world = stated_world[0]
            notes.append(f"world size {world}: from the config, {stated_world[1]} (give --world-size to check "
                         "another)")
        elif mode == "launch":
            from .hardware import default_num_processes
            world = default_num_processes()
            notes.append(f"world size {world}: cookbook launch's default --num-processes here (this machine's GPUs; "
                         "2 CPU ranks without one) — the config does not state one; give --world-size N")
    plan = None
    try:
        if mode == "launch":
            d = _launch_defaults()
            precision = args.precision
            if precision is None and args.gpu:
                from .dsconfig import auto_precision
                cc = gpu_compute_capability(args.gpu)
                precision = auto_precision(cc) if cc else None
            if precision is None:
                from .hardware import default_precision
                precision = default_precision()
            fields = {k: d[k] if getattr(args, k) is None else getattr(args, k)
                      for k in ("model", "micro_batch", "grad_accum", "zero_stage", "offload_optimizer", "offload_param")}
            fields.update(num_gpus=world, precision=precision, nvme_path=args.nvme_path,
                          host_memory_gib=args.host_memory_gib,
                          seq_len=d["seq_len"] if getattr(args, "seq_len", None) is None else args.seq_len,
                          liger=bool(getattr(args, "liger", False)))
            plan = Plan(**fields)
        elif (args.micro_batch is not None or args.grad_accum is not None or args.host_memory_gib is not None
              or getattr(args, "seq_len", None) is not None):
            if args.host_memory_gib is not None and not args.model:
                print("error: --host-memory-gib needs --model (the host-RAM estimate depends on the model)",
                      file=sys.stderr)
                return 2
            fields = {"num_gpus": world} if world else {}
            for name in ("micro_batch", "grad_accum", "host_memory_gib", "model", "seq_len"):
                if getattr(args, name) is not None:
                    fields[name] = getattr(args, name)
            plan = Plan(**fields)
    except PlanError as exc:
        print(f"error: {user_message(exc, args)}", file=sys.stderr)
        return 2
    opts = {}
    if mode == "launch":
        d = _launch_defaults()
        from .models import REHEARSAL_LR, REHEARSAL_MAX_STEPS, is_rehearsal_model
        tiny = is_rehearsal_model(plan.model)  # only the tiny models have a default lr and length (see launch)
        lr_d = d["lr"] if d["lr"] is not None else (REHEARSAL_LR if tiny else None)
        steps_d = d["max_steps"] if d["max_steps"] is not None else (REHEARSAL_MAX_STEPS if tiny else None)
        if not args.model and tiny:  # a template resolved for the rehearsal is not a config for a real run
            notes.append(f"model: not given, so every \"auto\" that depends on the model or the run is filled for "
                         f"{plan.model}, the CPU rehearsal's tiny model (its default lr {lr_d:g} and {steps_d} steps "
                         "unless typed, buckets from its hidden size) — for a real run give --model NAME (and --lr, "
                         "--max-steps or --num-epochs), as cookbook launch --config needs them")
        opts = dict(stated=stated, names=names, lr=args.lr if args.lr is not None else lr_d,
                    max_steps=args.max_steps if args.max_steps is not None else steps_d,
                    warmup_steps=args.warmup_steps, machine=args.gpu is None)
    else:  # only the typed options are the user's plan; the rest are Plan's defaults, not what the user said
        opts = dict(stated=stated, names=names)
    card = getattr(args, "gpu_memory_gib", None)
    if card is not None and not card > 0:
        print(f"error: --gpu-memory-gib {card:g}: give one card's memory in GiB, e.g. --gpu-memory-gib 24",
              file=sys.stderr)
        return 2
    if card is None and args.gpu and args.model:
        from .speed import UnknownGpuError, gpu_spec
        try:
            card = gpu_spec(args.gpu).memory_gib
            notes.append(f"memory: checked against --gpu {args.gpu!r}'s {card:g} GiB (its datasheet; "
                         "--gpu-memory-gib G for another)")
        except UnknownGpuError:
            pass
    if args.model and card is None:
        notes.append("memory: the activations and logits were not checked against a card — give --gpu-memory-gib G "
                     "(or --gpu NAME)")
    seq = getattr(args, "seq_len", None) or (plan.seq_len if mode == "launch" and plan is not None
                                             else _launch_defaults()["seq_len"])
    try:
        with stdout_to_stderr():
            report = lint(args.config, world_size=world, mode=mode, gpu=args.gpu, model=args.model, plan=plan,
                          will_save_hf_model=not args.no_save, precision=args.precision, gpu_memory_gib=card,
                          seq_len=seq, **opts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    resolved = report.resolved
    if not args.model:
        micro = _stated_micro(args.config, world)
        notes.append("memory: not checked — no --model given. ZeRO partitions and offloads the model states, never "
                     "the activations and logits of each micro batch" + (f" (here {micro} per GPU)" if micro else "")
                     + "; to check them against the card: cookbook lint CONFIG --model NAME --seq-len TOKENS --gpu "
                     "NAME, or cookbook estimate NAME --micro-batch N --seq-len TOKENS --gpu-memory-gib G")
    if not Path(args.config).is_file():
        notes = []  # nothing was read: the "not found" error alone, not what the defaults would have been
    to_stdout = not (args.resolve and not args.output)  # --resolve alone: the JSON owns stdout
    out = sys.stdout if to_stdout else sys.stderr
    if args.json:
        js = report.to_json()
        js["notes"] = notes
        if resolved is not None:
            js["filled"] = [{"path": r.path, "value": r.value, "from": r.source} for r in resolved.rows]
        print(json.dumps(js, indent=2, ensure_ascii=False), file=out)
    else:
        for note in notes:
            print(note, file=out)
        if resolved is not None and resolved.rows:
            print(str(resolved), file=out)
        print(f"{report.source}: {report}", file=out)
    if args.resolve and resolved is not None:
        if not resolved.ok:
            print("the resolved config was not written: fix the errors above", file=sys.stderr)
            return max(report.exit_code, 1)
        text = json.dumps(resolved.config, indent=2) + "\n"
        if args.output:
            try:
                Path(args.output).write_text(text, encoding="utf-8")
            except OSError as exc:
                print(f"error: -o {args.output}: cannot be written ({exc.strerror}); create the folder first or pick "
                      "another path", file=sys.stderr)
                return 2
            print(f"resolved config written to {args.output}", file=sys.stderr if args.json else out)
        else:
            sys.stdout.write(text)
    return report.exit_code


def register(subparsers) -> None:
    """Add ``cookbook lint CONFIG.json [--world-size N] [--mode M] [plan options] [--resolve [-o FILE]] [--json]``."""
    from .plan import OFFLOAD_TARGETS, PRECISIONS, ZERO_STAGES
    p = subparsers.add_parser(
        "lint", help="check a DeepSpeed config before launch",
        description="Check a DeepSpeed JSON config. By default (--mode launch) the config is read as "
                    "`cookbook launch --config` reads it: every \"auto\" filled from the plan options (the same "
                    "options and defaults as cookbook launch), then checked as DeepSpeed sees it. --resolve writes "
                    "the resolved config (-o FILE, else stdout) without launching. Exit 0: no errors; 1: errors "
                    "found; 2: the file cannot be used (missing, not JSON, not a JSON object).")
    p.add_argument("config", help="DeepSpeed JSON config file")
    p.add_argument("--world-size", "--num-processes", dest="world_size", type=int, default=None,
                   help="GPUs over all machines (default: from the config when it states one, else cookbook "
                        "launch's default)")
    p.add_argument("--mode", choices=MODES, default=None,
                   help="who reads the config: launch (cookbook launch: \"auto\" filled from the plan; the default), "
                        "plain deepspeed.initialize, accelerate launch, or the HF Trainer")
    p.add_argument("--gpu", default=None, help="GPU name, e.g. 'RTX 4090' (bf16 check; default: this machine's)")
    p.add_argument("--model", default=None, help="model (qwen-14b, llama-7b, ...): hidden size for \"auto\" bucket "
                                                 "sizes, buffer checks, activations against --gpu-memory-gib")
    p.add_argument("--gpu-memory-gib", type=float, default=None,
                   help="memory of one card in GiB: with --model, the activations and logits of the config's micro "
                        "batch × --seq-len are checked against it (default: --gpu's datasheet memory)")
    p.add_argument("--micro-batch", type=int, default=None, help="micro batch per GPU")
    p.add_argument("--grad-accum", type=int, default=None, help="gradient accumulation steps")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per row of the run: the memory check and the GPU numbers of the suggested fixes "
                        "depend on it (default as cookbook launch: 128)")
    p.add_argument("--precision", choices=PRECISIONS, default=None, help="bf16 / fp16 / fp32 (default as cookbook launch)")
    p.add_argument("--zero-stage", type=int, choices=ZERO_STAGES, default=None, help="ZeRO stage (when the config says auto)")
    p.add_argument("--liger", action="store_true",
                   help="the run will use --liger (Liger's fused linear cross-entropy): check where it does not apply")
    p.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, default=None, help="optimizer states to cpu/nvme")
    p.add_argument("--offload-param", choices=OFFLOAD_TARGETS, default=None, help="parameters to cpu/nvme")
    p.add_argument("--nvme-path", default=None, help="folder on a fast SSD for NVMe offload")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default as cookbook launch)")
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps (scheduler total_num_steps)")
    p.add_argument("--warmup-steps", type=int, default=None, help="warm-up steps (default: 5%% of --max-steps)")
    p.add_argument("--host-memory-gib", type=float, default=None, help="host RAM per machine in GiB (pin_memory check)")
    p.add_argument("--no-save", action="store_true", help="no Hugging Face model will be saved (skip rules 6 and 8)")
    p.add_argument("--resolve", action="store_true", help="write the config with every \"auto\" filled (to -o FILE, "
                                                          "else stdout), without launching")
    p.add_argument("-o", "--output", default=None, help="with --resolve: write the resolved JSON here")
    p.add_argument("--json", action="store_true", help='print {"errors": [...], "warnings": [...], "filled": [...]}')
    p.set_defaults(func=_run)


__all__ = ["BatchArithmetic", "Finding", "LintReport", "LintParseError", "MODES", "deepspeed_batch",
           "fp16_loss_scale_warning", "loss_scaling", "FP16_LOSS_SCALE_DEFAULTS", "LOSS_SCALE_AT_MINIMUM", "GPU_COMPUTE_CAPABILITY", "gpu_compute_capability",
           "config_world_size", "cpu_fp16_supported", "known_keys", "lint", "load_config", "optimizer_param_keys",
           "register", "scheduler_param_keys"]
