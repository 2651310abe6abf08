"""Environment checks: will this machine run the planned ZeRO fine-tune, and if not, what to change.

Two halves, kept apart so every rule is testable without the hardware:

* **facts** — :func:`gather_facts` records what this machine has (GPUs, driver, CUDA toolkit,
  library versions, host RAM, ``/dev/shm``, disk, the environment variables that matter) as a
  JSON-serialisable dict; :func:`load_facts` reads one recorded elsewhere (``cookbook env
  --dump-facts facts.json`` on the user's box). Missing keys mean "unknown", never a crash.
* **rules** — :func:`check` evaluates the rules on a facts dict (and optionally a :class:`Plan`)
  and returns an :class:`EnvReport`: one :class:`Check` per rule with status ``ok``/``warn``/``fail``,
  the value seen, the reason and the fix, plus the environment variables to export
  (:func:`recommended_env`).

Nothing here initialises CUDA in the caller's process: GPU facts come from NVML (``nvidia-ml-py``,
the library behind ``nvidia-smi``); ``torch.cuda`` and DeepSpeed's op builders are only touched in
child processes that run under a timeout, so a hung NCCL all-reduce becomes a ``fail`` with a fix.

Secrets: environment variables whose names contain TOKEN, KEY, SECRET or PASSWORD are recorded
as ``"<set>"`` — never their values — in the facts, the report and its JSON.
"""
from __future__ import annotations

import ast
import difflib
import html
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .dsconfig import _load_config, plan_from_ds_config  # noqa: F401 - re-exported for callers of env
from .hardware import LIBAIO_PACKAGES, free_port, libaio_present
from .plan import Plan, PlanError, add_plan_arguments, plan_from_args

GIB = 2**30
FACTS_VERSION = 1
STATUSES = ("ok", "warn", "fail")

#: Substring Accelerate looks for in a GPU name; ``unsupported_devices = {"RTX 40"}`` in
#: ``accelerate/utils/environment.py::check_cuda_p2p_ib_support`` (accelerate 1.15).
ACCELERATE_P2P_UNSUPPORTED = ("RTX 40",)
#: First driver Accelerate trusts with P2P on RTX 40xx (``acceptable_driver_version`` there).
ACCELERATE_P2P_MIN_DRIVER = "550.40.07"

#: DeepSpeed's table of CUDA minor versions that may be mixed within one major version,
#: copied from ``deepspeed/ops/op_builder/builder.py::cuda_minor_mismatch_ok`` (deepspeed 0.19.8;
#: tests/test_env.py asserts the copy equals the installed one).
CUDA_MINOR_MISMATCH_OK = {
    10: ["10.0", "10.1", "10.2"],
    11: ["11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8"],
    12: ["12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"],
}

#: Minimum Linux driver for a CUDA major version under minor-version compatibility. Source: NVIDIA,
#: "CUDA Compatibility — Minor Version Compatibility", table "CUDA Toolkit 11.x, 12.x, and 13.x
#: Driver Version Ranges" (11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580).
CUDA_MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.0"}

#: NCCL environment variables the cookbook knows (NCCL docs, "Environment Variables"); names
#: close to one of these but not equal are reported as misspelled.
KNOWN_NCCL_VARS = (
    "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_DIRECT_DISABLE",
    "NCCL_P2P_READ_ENABLE", "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_SHM_DISABLE", "NCCL_SHM_USE_CUDA_MEMCPY",
    "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD",
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_IB_HCA", "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_IB_CUDA_SUPPORT",
    "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_CROSS_NIC",
    "NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS", "NCCL_LAUNCH_MODE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE",
    "NCCL_COLLNET_ENABLE", "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_FILE",
    "NCCL_IGNORE_DISABLED_P2P", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT", "NCCL_CHECKS_DISABLE", "NCCL_CHECK_POINTERS", "NCCL_SET_STACK_SIZE",
    "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_COMM_BLOCKING", "NCCL_NVB_DISABLE", "NCCL_PXN_DISABLE", "NCCL_RUNTIME_CONNECT",
)
#: Prefixes / names of environment variables recorded in the facts.
_ENV_PREFIXES = ("NCCL", "CUDA_", "DS_", "ACCELERATE_", "TORCH_", "PYTORCH_", "OMP_", "MKL_", "HF_",
                 "HUGGING_FACE_", "TRANSFORMERS_", "CCL_", "MASTER_", "WANDB_", "KMP_", "GOMP_")
_ENV_NAMES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LD_LIBRARY_PATH", "CFLAGS",
              "LDFLAGS", "CXX", "CC", "TOKENIZERS_PARALLELISM", "NVIDIA_VISIBLE_DEVICES")
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
SECRET_MASK = "<set>"

#: KMP_AFFINITY words that bind threads, and those that turn binding off (Intel OpenMP "Thread Affinity Interface").
_KMP_BINDING_WORDS = ("granularity", "compact", "scatter", "explicit", "balanced")
_KMP_NO_BINDING_WORDS = ("disabled", "none")
#: The measured cost of pinned OpenMP threads in the rank that runs DeepSpeed's CPU Adam: the evidence record
#: ``omp_binding.cpu_adam`` (:mod:`cookbook.evidence`; optimizer_step is the median of DeepSpeed's wall-clock
#: breakdown per step, tokens/s the median over the steps after the first).
def _omp_binding_cost() -> dict:
    from .evidence import get
    r = get("omp_binding.cpu_adam")
    return {"source": r.cite(), "optimizer_step_s_bound": r.extra["optimizer_step_s_bound"],
            "optimizer_step_s_free": r.extra["optimizer_step_s_free"],
            "slowdown": r.extra["optimizer_step_slowdown"],  # of the unrounded medians
            "tokens_per_s_bound": round(r.value), "tokens_per_s_free": round(float(r.baseline["value"]))}


OMP_BINDING_COST = _omp_binding_cost()

#: Packages for the version check, with the pip name for the fix.
_PACKAGES = (("torch", "torch"), ("deepspeed", "deepspeed"), ("transformers", "transformers"),
             ("accelerate", "accelerate"))

#: The repository's constraints file: the versions CI and the committed GPU evidence used.
CONSTRAINTS_PATH = Path(__file__).resolve().parent.parent / "constraints.txt"


def tested_versions(path: str | os.PathLike | None = None) -> dict[str, list[str]]:
    """The tested set: ``{package: [versions]}`` from ``constraints.txt`` (``name==version`` lines, and a
    ``# torch tested: V (where), V (where)`` comment, since CI and the GPU machine used different torch builds).
    Empty when the file is not there (an install from a wheel, without the repository)."""
    path = Path(path) if path else CONSTRAINTS_PATH
    if not path.is_file():
        return {}
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s;#]+)", line)
        if m:
            out.setdefault(m.group(1).lower(), []).append(m.group(2))
        m = re.match(r"#\s*torch tested:\s*(.+)", line)
        if m:
            out["torch"] = re.findall(r"(\d+\.\d+(?:\.\d+)?)", m.group(1))
    return out


def _version_vs_tested(mod: str, v: str, tested: dict) -> Check:
    """``ok`` when ``v`` is one the tested set names (the public part, without ``+cu130``), else ``warn``."""
    want = tested.get(mod)
    if not want:
        return Check(mod, "ok", v, f"{mod} is installed")
    if v.split("+")[0] in want:
        return Check(mod, "ok", v, f"{mod} is installed, the version the cookbook was tested with (constraints.txt)")
    return Check(mod, "warn", v, f"{mod} {v} differs from the tested {' / '.join(want)} (constraints.txt: what CI "
                 "and the committed GPU runs used); the cookbook relies on version-specific behaviour of DeepSpeed, "
                 "transformers and Accelerate", f"pip install -e '.[test]' -c constraints.txt (or pin {mod}=="
                 f"{want[0]})")


class FactsError(ValueError):
    """A facts file cannot be read or holds a value of the wrong type; the message names file, key and fix."""


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One rule's verdict.

    Attributes:
        name: short rule name (``rtx40_p2p``, ``host_memory``, …).
        status: ``ok``, ``warn`` or ``fail``.
        value: what was seen, for people (``4 × NVIDIA GeForce RTX 4090, driver 535.104``).
        reason: why this status.
        fix: what to do (empty when nothing to do).
    """

    name: str
    status: str
    value: str
    reason: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Check {self.name}: status={self.status!r}; use one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "value": self.value, "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True)
class EnvReport:
    """All checks for one machine (and optionally one plan).

    Attributes:
        checks: the verdicts, in rule order.
        facts: the facts they were computed from (secrets masked).
        recommended_env: variables to export before launching (see :func:`recommended_env`).
        plan: the plan checked against, or None.
    """

    checks: tuple[Check, ...]
    facts: dict
    recommended_env: dict[str, str]
    plan: Plan | None = None

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings allowed)."""
        return not self.failed

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def warnings(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "warn")

    def __getitem__(self, name: str) -> Check:
        """The check called ``name``; KeyError names the available ones."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks: {', '.join(c.name for c in self.checks)}")

    def names(self) -> list[str]:
        return [c.name for c in self.checks]

    def to_frame(self):
        """A pandas DataFrame, one row per check: name, status, value, reason, fix."""
        import pandas as pd
        return pd.DataFrame([c.to_dict() for c in self.checks], columns=["name", "status", "value", "reason", "fix"])

    def env_block(self) -> str:
        """The recommended environment as shell lines to paste (``export NCCL_P2P_DISABLE=1`` …), with an ``unset``
        line for OpenMP binding variables when the ``omp_binding`` check warned (:func:`cpu_adam_binding_check`)."""
        block = env_block(self.recommended_env, self.facts)
        pinned = [c for c in self.checks if c.name == "omp_binding" and c.status == "warn"]
        if pinned:
            names = " ".join(omp_binding_vars((self.facts or {}).get("env") or {}))
            block += (("\n" if block else "") + f"unset {names}  # pinned OpenMP threads slow DeepSpeed's CPU Adam "
                      f"{OMP_BINDING_COST['slowdown']}x ({OMP_BINDING_COST['source']})")
        return block

    @property
    def verdict(self) -> str:
        n_fail, n_warn = len(self.failed), len(self.warnings)
        if n_fail:
            return f"FAIL: {n_fail} check(s) failed, {n_warn} warning(s)"
        return f"OK with {n_warn} warning(s)" if n_warn else "OK"

    def to_dict(self) -> dict:
        return {"ok": self.ok, "verdict": self.verdict, "checks": [c.to_dict() for c in self.checks],
                "recommended_env": dict(self.recommended_env), "env_block": self.env_block(),
                "plan": self.plan.to_dict() if self.plan else None, "facts": mask_secrets(self.facts)}

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON (secrets masked)."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def __str__(self) -> str:
        marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
        lines = [f"cookbook env — {self.verdict}" + (f" — plan: {self.plan.model or 'no model'}, {self.plan.num_gpus} "
                                                     f"GPU(s), {self.plan.label}" if self.plan else "")]
        for c in self.checks:
            lines.append(f"[{marks[c.status]}] {c.name}: {c.value}")
            if c.status != "ok" or c.reason:
                lines.append(f"         {c.reason}")
            if c.fix and c.status != "ok":
                lines.append(f"         fix: {c.fix}")
        block = self.env_block()
        if block:
            lines += ["", "Recommended environment (paste before launching):", block]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """One line: the :attr:`verdict`, how many checks, the names of those that failed or warned, and the plan
        checked, e.g. ``EnvReport(OK with 1 warning(s): 19 checks; warn: host_memory; plan: qwen-14b, 8 GPU(s),
        ZeRO-3)``; ``print()`` it (:meth:`__str__`) for every check with its reason and fix."""
        parts = [f"{self.verdict}: {len(self.checks)} checks"]
        if self.failed:
            parts.append("fail: " + ", ".join(c.name for c in self.failed))
        if self.warnings:
            parts.append("warn: " + ", ".join(c.name for c in self.warnings))
        if self.plan:
            parts.append(f"plan: {self.plan.model or 'no model'}, {self.plan.num_gpus} GPU(s), {self.plan.label}")
        return f"EnvReport({'; '.join(parts)})"

    def _repr_html_(self) -> str:
        colors = {"ok": "#2e7d32", "warn": "#ef6c00", "fail": "#c62828"}
        rows = []
        for c in self.checks:
            rows.append(
                "<tr>" + f"<td>{html.escape(c.name)}</td>"
                + f"<td style='color:{colors[c.status]};font-weight:bold'>{c.status}</td>"
                + "".join(f"<td style='text-align:left'>{html.escape(x)}</td>" for x in (c.value, c.reason, c.fix))
                + "</tr>")
        head = "".join(f"<th>{h}</th>" for h in ("check", "status", "value", "reason", "fix"))
        block = self.env_block()
        pre = f"<p>Recommended environment:</p><pre>{html.escape(block)}</pre>" if block else ""
        return (f"<p><b>{html.escape(self.verdict)}</b></p><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>{pre}")


# --------------------------------------------------------------------------------------------------
# secrets and facts I/O
# --------------------------------------------------------------------------------------------------
def is_secret_name(name: str) -> bool:
    """True when an environment variable's name contains TOKEN, KEY, SECRET or PASSWORD (any case)."""
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS)


def mask_secrets(facts: dict) -> dict:
    """A copy of ``facts`` whose ``env`` shows secret variables as ``"<set>"``, never their values."""
    out = dict(facts)
    env = facts.get("env")
    if isinstance(env, dict):
        out["env"] = {k: (SECRET_MASK if is_secret_name(k) and v is not None else v) for k, v in env.items()}
    return out


def _relevant_env_name(name: str) -> bool:
    if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES:
        return True
    # misspellings of NCCL variables that lost their prefix shape (NCLL_P2P_DISABLE, nccl_p2p_disable)
    return bool(difflib.get_close_matches(name.upper(), KNOWN_NCCL_VARS, n=1, cutoff=0.8))


def relevant_env(environ: dict | None = None) -> dict[str, str]:
    """Environment variables that matter for a DeepSpeed/Accelerate run, secrets masked."""
    environ = os.environ if environ is None else environ
    return {k: (SECRET_MASK if is_secret_name(k) else v) for k, v in sorted(environ.items()) if _relevant_env_name(k)}


_FACT_TYPES = {
    "gpus": list, "driver_version": str, "cuda_visible_devices": str, "torch_version": str,
    "torch_cuda_version": str, "nvcc_version": str, "cuda_home": str, "python_version": str,
    "python_headers": bool, "ninja": bool, "cxx": bool, "libaio": bool, "host_memory_gib": (int, float),
    "host_available_gib": (int, float), "swap_gib": (int, float), "shm_gib": (int, float),
    "disk_free_gib": (int, float), "nvme_path": str, "nvme_path_exists": bool, "env": dict,
    "deepspeed_version": str, "accelerate_version": str, "transformers_version": str,
    "cpu_count": int, "cpu_count_physical": int, "ds_ops": dict, "peer_access": list, "allreduce": dict,
    "ds_accelerator": str, "nvme_bandwidth": dict, "nvme_tuned": dict, "libaio_files": dict, "ds_prebuilt_ops": dict,
    "python_include": str, "wsl": bool,
}


def validate_facts(facts: dict, *, source: str = "facts") -> dict:
    """Check the types of the known keys; unknown keys are kept, missing keys mean unknown.

    Returns:
        ``facts`` with secrets masked.

    Raises:
        FactsError: a known key holds a value of the wrong type (message names key, value, expected type).
    """
    if not isinstance(facts, dict):
        raise FactsError(f"{source}: top level is {type(facts).__name__}; a facts file is a JSON object "
                         "(write one with `cookbook env --dump-facts facts.json`)")
    for key, types in _FACT_TYPES.items():
        value = facts.get(key)
        if value is None:
            continue
        if isinstance(value, bool) and types in ((int, float), int):
            raise FactsError(f"{source}: {key}={value!r} must be a number, not a bool")
        if not isinstance(value, types):
            want = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
            raise FactsError(f"{source}: {key}={value!r} must be {want} (or null for unknown)")
    for i, gpu in enumerate(facts.get("gpus") or []):
        if not isinstance(gpu, dict) or not isinstance(gpu.get("name", ""), str):
            raise FactsError(f"{source}: gpus[{i}]={gpu!r} must be an object with \"name\", \"memory_gib\", "
                             "\"compute_capability\": [major, minor]")
        cc = gpu.get("compute_capability")
        if cc is not None and not (isinstance(cc, (list, tuple)) and len(cc) == 2 and all(isinstance(x, int) for x in cc)):
            raise FactsError(f"{source}: gpus[{i}].compute_capability={cc!r} must be [major, minor], e.g. [8, 9]")
        mem = gpu.get("memory_gib")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, (int, float))):
            raise FactsError(f"{source}: gpus[{i}].memory_gib={mem!r} must be a number of GiB")
    env = facts.get("env") or {}
    for k, v in env.items():
        if v is not None and not isinstance(v, str):
            raise FactsError(f"{source}: env[{k!r}]={v!r} must be a string (environment values are text)")
    return mask_secrets(facts)


def load_facts(path) -> dict:
    """Read a facts file written by ``cookbook env --dump-facts`` (or by hand).

    Raises:
        FactsError: file missing/unreadable, not JSON, or a key of the wrong type.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise FactsError(f"facts file {str(p)!r} cannot be read ({exc.strerror or exc}); give the path of a file "
                         "written by `cookbook env --dump-facts FILE`") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FactsError(f"facts file {str(p)!r} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}); write it again with `cookbook env --dump-facts FILE`") from None
    return validate_facts(data, source=f"facts file {str(p)!r}")


def dump_facts(facts: dict, path) -> Path:
    """Write ``facts`` (secrets masked) as indented JSON; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(mask_secrets(facts), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return p


# --------------------------------------------------------------------------------------------------
# gathering facts (this machine)
# --------------------------------------------------------------------------------------------------
def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch_build_versions() -> tuple[str | None, str | None]:
    """(torch.__version__, torch.version.cuda) read from ``torch/version.py`` without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    values: dict[str, str | None] = {}
    try:
        for node in ast.parse(path.read_text()).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
                values[target.id] = node.value.value
    except (OSError, SyntaxError):
        return _dist_version("torch"), None
    return values.get("__version__") or _dist_version("torch"), values.get("cuda")


def _find_cuda_home() -> str | None:
    """CUDA_HOME the way ``torch.utils.cpp_extension._find_cuda_home`` finds it (which DeepSpeed uses):
    ``$CUDA_HOME`` or ``$CUDA_PATH``, else the folder above the ``bin`` holding ``nvcc`` on PATH,
    else ``/usr/local/cuda`` if it exists."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home is None:
        nvcc = shutil.which("nvcc")
        if nvcc:
            home = os.path.dirname(os.path.dirname(nvcc))
        elif os.path.exists("/usr/local/cuda"):
            home = "/usr/local/cuda"
    return home


def _nvcc_version(cuda_home: str | None) -> str | None:
    """``major.minor`` from ``$CUDA_HOME/bin/nvcc -V``, parsed like DeepSpeed's ``installed_cuda_version``."""
    if not cuda_home:
        return None
    try:
        out = subprocess.run([os.path.join(cuda_home, "bin", "nvcc"), "-V"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def _nvml_facts() -> dict:
    """GPUs and driver from NVML (what ``nvidia-smi`` shows: all GPUs, ignoring CUDA_VISIBLE_DEVICES)."""
    try:
        import pynvml
    except ImportError:
        return {"gpus": None, "driver_version": None, "nvml_error": "nvidia-ml-py is not installed (pip install nvidia-ml-py)"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        # no driver library / no GPU: an honest "no NVIDIA GPU here"
        return {"gpus": [], "driver_version": None, "nvml_error": str(exc)}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total / GIB
            try:
                cc = list(pynvml.nvmlDeviceGetCudaComputeCapability(h))
            except pynvml.NVMLError:
                cc = None
            gpus.append({"index": i, "name": name, "memory_gib": round(mem, 2), "compute_capability": cc})
        return {"gpus": gpus, "driver_version": driver}
    except pynvml.NVMLError as exc:
        return {"gpus": None, "driver_version": None, "nvml_error": str(exc)}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


#: Child-process probe: torch's CUDA view (peer access) and DeepSpeed's op builders' own answers.
_PROBE = r"""
import contextlib, json, sys
out = {}
with contextlib.redirect_stdout(sys.stderr):
    try:
        import torch
        out["torch_version"] = torch.__version__
        out["torch_cuda_version"] = torch.version.cuda
        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            out["cuda_device_count"] = n
            out["peer_access"] = [[i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)]
                                  for i in range(n)]
    except Exception as exc:
        out["torch_error"] = repr(exc)
    try:
        from deepspeed.accelerator import get_accelerator
        acc = get_accelerator()
        out["ds_accelerator"] = acc.device_name()
        ops = {}
        for key, name in (("cpu_adam", "CPUAdamBuilder"), ("async_io", "AsyncIOBuilder"),
                          ("fused_adam", "FusedAdamBuilder")):
            try:
                cls = acc.get_op_builder(name)
                ops[key] = None if cls is None else bool(cls().is_compatible(False))
            except Exception as exc:
                ops[key] = False
                out.setdefault("ds_ops_errors", {})[key] = repr(exc)[:300]
        out["ds_ops"] = ops
        try:  # ops compiled at install (DS_BUILD_*=1): OpBuilder.load imports them, no JIT build, no probe
            from deepspeed.git_version_info import accelerator_name, installed_ops
            out["ds_prebuilt_ops"] = {k: bool(installed_ops.get(k)) and accelerator_name == acc._name for k in ops}
        except Exception as exc:
            out.setdefault("ds_ops_errors", {})["prebuilt"] = repr(exc)[:300]
    except Exception as exc:
        out["deepspeed_error"] = repr(exc)[:300]
print("COOKBOOK_PROBE_JSON:" + json.dumps(out))
"""


def _run_probe(timeout_s: float) -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"probe_error": f"torch/DeepSpeed probe did not finish in {timeout_s:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("COOKBOOK_PROBE_JSON:"):
            return json.loads(line.split(":", 1)[1])
    return {"probe_error": f"probe exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}


def _existing_parent(path: str) -> Path:
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


# --------------------------------------------------------------------------------------------------
# libaio on disk, WSL: facts gathered from files, each a pure function of what it reads (testable with a root)
# --------------------------------------------------------------------------------------------------
#: Folders gcc and ld search without -I / -L (Debian/Ubuntu multiarch, RHEL/Fedora lib64, /usr/local).
LIBAIO_DEFAULT_INCLUDE = ("/usr/include", "/usr/local/include", "/usr/include/x86_64-linux-gnu",
                          "/usr/include/aarch64-linux-gnu")
LIBAIO_DEFAULT_LIB = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                      "/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib", "/usr/local/lib",
                      "/usr/local/lib64")


def _flag_dirs(value: str | None, flag: str) -> list[str]:
    """The folders of ``-I``/``-L`` entries in a CFLAGS / LDFLAGS value (``-I/x`` and ``-I /x``)."""
    import shlex
    try:
        words = shlex.split(value or "")
    except ValueError:
        words = (value or "").split()
    out = []
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            out.append(words[i + 1])
        elif w.startswith(flag) and len(w) > len(flag):
            out.append(w[len(flag):])
    return out


def libaio_files(environ: dict | None = None, *, root: str | os.PathLike = "/") -> dict:
    """Where libaio's files are: what DeepSpeed's async_io probe compiles and links against.

    ``AsyncIOBuilder.is_compatible`` (``deepspeed/ops/op_builder/async_io.py``) calls ``OpBuilder.has_function
    ('io_submit', ('aio',))`` (``op_builder/builder.py``): a test program compiled with ``CFLAGS`` and linked with
    ``LDFLAGS`` and ``-laio`` through distutils. So it needs the header ``libaio.h`` and the link-time library
    ``libaio.so`` (libaio-dev / libaio-devel), in the compiler's default folders
    (:data:`LIBAIO_DEFAULT_INCLUDE`, :data:`LIBAIO_DEFAULT_LIB`) or in ones ``CFLAGS -I`` / ``LDFLAGS -L`` name;
    the run-time library ``libaio.so.1`` alone (libaio1 / libaio1t64) is not enough to build. Also searched:
    ``$CONDA_PREFIX`` and this Python's prefix (a libaio from conda-forge lives there).

    Args:
        environ: the variables to read (``CFLAGS``, ``LDFLAGS``, ``CONDA_PREFIX``); default ``os.environ``.
        root: prefix for every folder searched (tests point it at a temporary tree).

    Returns:
        ``{"header": path or None, "library": path or None, "runtime": path or None, "default_paths": bool}``;
        ``default_paths``: header and library were both found where the compiler looks without flags (or in
        folders the flags already name).
    """
    environ = os.environ if environ is None else environ
    flags_inc = _flag_dirs(environ.get("CFLAGS"), "-I")
    flags_lib = _flag_dirs(environ.get("LDFLAGS"), "-L")
    extra = [p for p in (environ.get("CONDA_PREFIX"), sys.prefix, sys.base_prefix) if p]
    inc_dirs = list(LIBAIO_DEFAULT_INCLUDE) + flags_inc + [os.path.join(p, "include") for p in extra]
    lib_dirs = list(LIBAIO_DEFAULT_LIB) + flags_lib + [os.path.join(p, d) for p in extra for d in ("lib", "lib64")]
    base = Path(root)

    def find(dirs, names):
        for d in dirs:
            folder = base / d.lstrip("/")
            for name in names:
                hits = sorted(folder.glob(name)) if "*" in name else ([folder / name] if (folder / name).exists() else [])
                if hits:
                    return d, str(Path(d) / hits[0].name)
        return None, None

    hdir, header = find(inc_dirs, ("libaio.h",))
    ldir, library = find(lib_dirs, ("libaio.so",))
    _, runtime = find(lib_dirs, ("libaio.so.1*",))
    seen_inc = set(LIBAIO_DEFAULT_INCLUDE) | set(flags_inc)
    seen_lib = set(LIBAIO_DEFAULT_LIB) | set(flags_lib)
    return {"header": header, "library": library, "runtime": runtime,
            "default_paths": bool(header and library and hdir in seen_inc and ldir in seen_lib)}


def detect_wsl(proc_version: str | None, environ: dict | None = None) -> bool:
    """True on Windows Subsystem for Linux: ``/proc/version`` names Microsoft's kernel (``...-microsoft-standard-WSL2``)
    or WSL set ``WSL_DISTRO_NAME`` (Microsoft, "WSL: environment variables" / the WSL kernel's version string)."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("WSL_DISTRO_NAME")) or "microsoft" in (proc_version or "").lower()


def _read_proc_version() -> str | None:
    try:
        return Path("/proc/version").read_text(errors="replace")
    except OSError:
        return None


def gather_facts(*, nvme_path: str | None = None, probe: bool = True, run_allreduce: bool = False,
                 allreduce_timeout_s: float = 60.0, probe_timeout_s: float = 90.0, nvme_probe: bool = False,
                 nvme_probe_mib: int = 256, nvme_probe_time_limit_s: float = 30.0) -> dict:
    """Facts about this machine, JSON-serialisable, secrets masked.

    Args:
        nvme_path: folder planned for NVMe offload; records whether it exists and the free disk
            (GiB) of the file system holding it (or its nearest existing parent).
        probe: run the child-process probe (torch CUDA peer access, DeepSpeed op builders'
            ``is_compatible()``); about 2–4 s.
        run_allreduce: with 2+ visible GPUs, also time an NCCL all-reduce with P2P on and off
            (:func:`measure_allreduce`), each under ``allreduce_timeout_s``.
        nvme_probe: with ``nvme_path`` an existing folder, measure its sequential write and read bandwidth
            (:func:`cookbook.nvme.measure_bandwidth`: ``nvme_probe_mib`` MiB, at most
            ``nvme_probe_time_limit_s`` s of I/O, files deleted) into ``nvme_bandwidth``; a failed probe is
            recorded as ``{"error": ...}``.

    Returns:
        dict with the keys listed in the module doc of the issue (``gpus``, ``driver_version``,
        ``torch_cuda_version``, ``nvcc_version``, ``host_memory_gib``, ``env``, …); ``None`` means unknown.
        Sizes in GiB (2**30 bytes).
    """
    import psutil

    facts: dict = {"facts_version": FACTS_VERSION, "platform": platform.platform(),
                   "python_version": platform.python_version(), "python_executable": sys.executable}
    facts.update(_nvml_facts())
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts["torch_version"], facts["torch_cuda_version"] = _torch_build_versions()
    for name in ("deepspeed", "accelerate", "transformers"):
        facts[f"{name}_version"] = _dist_version(name)
    facts["cuda_home"] = _find_cuda_home()
    facts["nvcc_version"] = _nvcc_version(facts["cuda_home"])
    facts["python_headers"] = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    facts["ninja"] = shutil.which("ninja") is not None
    facts["cxx"] = shutil.which(os.environ.get("CXX", "c++")) is not None
    facts["libaio"] = libaio_present()
    facts["libaio_files"] = libaio_files()
    facts["python_include"] = sysconfig.get_paths()["include"]
    facts["wsl"] = detect_wsl(_read_proc_version())
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    facts["host_memory_gib"] = round(vm.total / GIB, 2)
    facts["host_available_gib"] = round(vm.available / GIB, 2)
    facts["swap_gib"] = round(sw.total / GIB, 2)
    facts["shm_gib"] = round(shutil.disk_usage("/dev/shm").total / GIB, 2) if os.path.isdir("/dev/shm") else None
    facts["cpu_count"] = psutil.cpu_count(logical=True)
    facts["cpu_count_physical"] = psutil.cpu_count(logical=False)
    if nvme_path:
        facts["nvme_path"] = str(nvme_path)
        facts["nvme_path_exists"] = os.path.isdir(os.path.expanduser(nvme_path))
        facts["disk_free_gib"] = round(shutil.disk_usage(_existing_parent(nvme_path)).free / GIB, 2)
        if nvme_probe and facts["nvme_path_exists"]:
            from .nvme import NvmeError, measure_bandwidth
            try:
                facts["nvme_bandwidth"] = measure_bandwidth(os.path.expanduser(nvme_path), size_mib=nvme_probe_mib,
                                                            time_limit_s=nvme_probe_time_limit_s)
            except (NvmeError, OSError) as exc:
                facts["nvme_bandwidth"] = {"error": str(exc)}
    facts["env"] = relevant_env()
    if probe:
        found = _run_probe(probe_timeout_s)
        for key in ("peer_access", "cuda_device_count", "ds_ops", "ds_ops_errors", "ds_prebuilt_ops", "ds_accelerator",
                    "torch_error", "deepspeed_error", "probe_error"):
            if key in found:
                facts[key] = found[key]
    n_visible = facts.get("cuda_device_count") or 0
    if run_allreduce and n_visible >= 2:
        facts["allreduce"] = measure_allreduce(timeout_s=allreduce_timeout_s)
    return mask_secrets(facts)


# --------------------------------------------------------------------------------------------------
# all-reduce with P2P on / off, in a child process under a timeout
# --------------------------------------------------------------------------------------------------
_ALLREDUCE = r"""
import datetime, json, os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def worker(rank, world, port, numel, iters, q):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    x = torch.ones(numel, dtype=torch.float32, device="cuda")
    dist.all_reduce(x); torch.cuda.synchronize()
    correct = bool(torch.all(x == world).item())
    for _ in range(2):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / iters
    if rank == 0:
        q.put({"seconds": dt, "correct": correct})
    dist.barrier(); dist.destroy_process_group()

if __name__ == "__main__":
    world, port, size_mib, iters = (int(a) for a in sys.argv[1:5])
    numel = size_mib * 2**20 // 4
    ctx = mp.get_context("spawn"); q = ctx.SimpleQueue()
    mp.spawn(worker, args=(world, port, numel, iters, q), nprocs=world)
    r = q.get()
    algbw = numel * 4 / r["seconds"] / 1e9
    print("COOKBOOK_ALLREDUCE_JSON:" + json.dumps({"world_size": world, "size_mib": size_mib, "seconds": r["seconds"],
          "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world, "correct": r["correct"]}))
"""


def _allreduce_once(p2p_disable: str, world: int, timeout_s: float, size_mib: int, iters: int) -> dict:
    env = dict(os.environ, NCCL_P2P_DISABLE=p2p_disable)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(_ALLREDUCE)
        script = f.name
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, script, str(world), str(free_port()), str(size_mib), str(iters)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the spawned ranks too
        proc.communicate()
        return {"status": "timeout", "timeout_s": timeout_s}
    finally:
        os.unlink(script)
    for line in out.splitlines():
        if line.startswith("COOKBOOK_ALLREDUCE_JSON:"):
            res = json.loads(line.split(":", 1)[1])
            res["status"] = "ok" if res.get("correct") else "wrong_result"
            res["wall_s"] = round(time.monotonic() - t0, 1)
            return res
    return {"status": "error", "returncode": proc.returncode, "stderr_tail": err.strip()[-600:]}


def measure_allreduce(*, world_size: int | None = None, timeout_s: float = 60.0, size_mib: int = 64,
                      iters: int = 5) -> dict:
    """Time an NCCL all-reduce across the visible GPUs with P2P on and with P2P off.

    Each setting runs in its own child process group (``NCCL_P2P_DISABLE=0`` then ``=1``), killed
    after ``timeout_s`` seconds, so a P2P hang (the RTX 40xx failure mode) is reported as
    ``{"status": "timeout"}`` instead of hanging the caller.

    Bandwidth: ``algbw = bytes / time`` and ``busbw = algbw × 2(n−1)/n`` in GB/s (1e9 bytes/s), the
    definitions of nccl-tests (``doc/PERFORMANCE.md``). The first all-reduce of ones is checked to
    equal the world size (``correct``): broken P2P can also return wrong sums silently.

    Returns:
        ``{"p2p_on": {...}, "p2p_off": {...}}``, each with ``status`` ``ok``/``timeout``/
        ``error``/``wrong_result`` and, when ok, ``busbw_gbps``, ``algbw_gbps``, ``seconds``.
    """
    if world_size is None:
        found = _run_probe(60)
        world_size = found.get("cuda_device_count") or 0
    if world_size < 2:
        return {"skipped": f"{world_size} visible GPU(s); the all-reduce needs 2 or more"}
    return {"p2p_on": _allreduce_once("0", world_size, timeout_s, size_mib, iters),
            "p2p_off": _allreduce_once("1", world_size, timeout_s, size_mib, iters)}


# --------------------------------------------------------------------------------------------------
# plan helpers
# --------------------------------------------------------------------------------------------------
#: The model of a plan built from a DeepSpeed config alone (``cookbook env --config ds.json`` without
#: ``--model``): the checks that need the model (:data:`MODEL_CHECKS`) say so instead of guessing one.
NO_MODEL = ""


def _needs_jit_ops(plan: Plan | None) -> list[str]:
    """DeepSpeed ops the plan makes DeepSpeed JIT-compile."""
    if plan is None:
        return []
    ops = []
    if plan.offload_optimizer != "none":
        ops.append("cpu_adam")
    if "nvme" in (plan.offload_optimizer, plan.offload_param):
        ops.append("async_io")
    return ops


def _ranks_per_machine(plan: Plan | None) -> int:
    return plan.num_gpus // plan.num_machines if plan else 1


def _nvme_bytes(plan: Plan) -> float | None:
    """Bytes DeepSpeed writes to the NVMe folder per machine: :func:`cookbook.nvme.estimate_nvme` (per swappable
    sub-group fp32 master weights + Adam m + v, the fp32 gradients, and the 16-bit parameters; 18 B/param
    for a large model with both targets on NVMe), or None when the model cannot be resolved."""
    try:
        from .nvme import estimate_nvme
        est = estimate_nvme(plan)
    except Exception:
        return None
    return None if est is None else float(est.disk_bytes)


def _estimate(plan: Plan):
    """The memory estimator's answer for ``plan``, or (None, reason) when it is unavailable."""
    try:
        from .memory import estimate
    except ImportError as exc:
        return None, f"memory estimator unavailable ({exc})"
    try:
        return estimate(plan), ""
    except Exception as exc:  # a model that cannot be resolved, etc.: report, don't crash
        return None, f"estimator failed for this plan: {exc}"


# --------------------------------------------------------------------------------------------------
# rules
# --------------------------------------------------------------------------------------------------
def _parse_version(v: str | None):
    from packaging.version import InvalidVersion, parse
    if not v:
        return None
    try:
        return parse(v)
    except InvalidVersion:
        return None


def _gpu_summary(gpus: list) -> str:
    if not gpus:
        return "none"
    names: dict[str, int] = {}
    for g in gpus:
        names[g.get("name", "?")] = names.get(g.get("name", "?"), 0) + 1
    return ", ".join(f"{n} × {name}" for name, n in names.items())


def accelerate_p2p_unsupported(facts: dict) -> bool | None:
    """Accelerate's verdict "this box's GPUs have broken P2P/IB", reproduced on facts.

    Reproduces ``accelerate/utils/environment.py::check_cuda_p2p_ib_support`` (accelerate 1.15):
    GPU names and count come from ``nvidia-smi --query-gpu=count,name`` (all GPUs in the machine;
    ``CUDA_VISIBLE_DEVICES`` is *not* applied); unsupported when the count is > 1, any name contains
    ``"RTX 40"`` (which also matches the workstation "RTX 4000 Ada"), and the driver of the first GPU
    parses (``packaging.version``) below ``550.40.07``. Any error there makes Accelerate assume
    support, so unknown facts give ``None`` here (unknown) rather than a verdict.

    What Accelerate then does (same version): ``accelerate launch`` (``commands/launch.py::
    multi_gpu_launcher`` and ``deepspeed_launcher``) sets ``NCCL_P2P_DISABLE=1`` and
    ``NCCL_IB_DISABLE=1`` for the children when they are absent, with a warning; any other start
    (torchrun, ``deepspeed``, ``python train.py``, a notebook) reaches ``state.py::
    PartialState.__init__``, which raises ``NotImplementedError`` when the device is CUDA and either
    variable is *absent* from ``os.environ`` (presence only: a value of ``0`` passes and leaves P2P on).

    Returns:
        True when Accelerate will treat P2P/IB as unsupported, False when not, None when unknown.
    """
    gpus = facts.get("gpus")
    if gpus is None:
        return None
    if len(gpus) <= 1 or not any(s in g.get("name", "") for g in gpus for s in ACCELERATE_P2P_UNSUPPORTED):
        return False
    driver = _parse_version(facts.get("driver_version"))
    if driver is None:
        return None
    return driver < _parse_version(ACCELERATE_P2P_MIN_DRIVER)


def _misspelled_nccl(env: dict) -> list[tuple[str, str | None]]:
    """(name, closest known name) for NCCL-looking variables that NCCL will not read."""
    out = []
    for name in env:
        if name in KNOWN_NCCL_VARS:
            continue
        upper = name.upper()
        close = difflib.get_close_matches(upper.replace("-", "_"), KNOWN_NCCL_VARS, n=1, cutoff=0.8)
        invalid = not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)
        looks_nccl = upper.startswith(("NCCL", "NCLL", "NCC_"))
        if close and (close[0] != name):
            out.append((name, close[0]))
        elif looks_nccl and invalid:
            out.append((name, None))
    return out


def _check_versions(facts: dict, plan: Plan | None) -> list[Check]:
    checks = [Check("python", "ok" if facts.get("python_version") else "warn",
                    facts.get("python_version") or "unknown",
                    "Python interpreter running the cookbook" if facts.get("python_version") else "not recorded in the facts")]
    tested = tested_versions()
    for mod, pip in _PACKAGES:
        v = facts.get(f"{mod}_version")
        if v:
            checks.append(_version_vs_tested(mod, v, tested))
        elif f"{mod}_version" in facts:
            checks.append(Check(mod, "fail", "not installed", f"the cookbook needs {mod}", f"pip install {pip}"))
        else:
            checks.append(Check(mod, "warn", "unknown", f"{mod}_version not recorded in the facts"))
    gpus = facts.get("gpus")
    tv, tcuda = facts.get("torch_version"), facts.get("torch_cuda_version")
    if tv is None:
        checks.append(Check("torch_cuda_build", "warn", "unknown", "torch version not known"))
    elif gpus:
        if tcuda:
            checks.append(Check("torch_cuda_build", "ok", f"torch {tv} built for CUDA {tcuda}",
                                "a CUDA build of torch on a GPU machine"))
        else:
            checks.append(Check("torch_cuda_build", "fail", f"torch {tv} (CPU-only build)",
                                f"this machine has {len(gpus)} NVIDIA GPU(s) but torch was built without CUDA, so "
                                "training would run on the CPU",
                                "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu124 "
                                "(pick the cuXXX your driver supports, see pytorch.org/get-started)"))
    else:
        checks.append(Check("torch_cuda_build", "ok" if not tcuda else "warn",
                            f"torch {tv}" + (f" (CUDA {tcuda})" if tcuda else " (CPU build)"),
                            "no NVIDIA GPU here: a CPU build is what a CPU rehearsal needs" if not tcuda else
                            "a CUDA build of torch but no NVIDIA GPU visible: runs fall back to the CPU"))
    return checks


def _check_gpus(facts: dict, plan: Plan | None) -> list[Check]:
    gpus = facts.get("gpus")
    driver = facts.get("driver_version")
    checks = []
    if gpus is None:
        checks.append(Check("gpus", "warn", "unknown", f"GPU facts unavailable ({facts.get('nvml_error', 'not recorded')})",
                            "pip install nvidia-ml-py, then run `cookbook env` again"))
        return checks
    if not gpus:
        checks.append(Check("gpus", "warn", "no NVIDIA GPU",
                            f"NVML found no GPU ({facts.get('nvml_error', 'count 0')}): this box can only run the CPU "
                            "rehearsal (DeepSpeed's CPU accelerator)", "export DS_ACCELERATOR=cpu (see the recommended environment)"))
        return checks
    mems = [g.get("memory_gib") for g in gpus if g.get("memory_gib") is not None]
    ccs = [tuple(g["compute_capability"]) for g in gpus if g.get("compute_capability")]
    value = f"{_gpu_summary(gpus)}; " + (f"{min(mems):.1f} GiB each" if mems and min(mems) == max(mems) else
                                         f"{min(mems or [0]):.1f}–{max(mems or [0]):.1f} GiB") + \
        (f"; compute capability {min(ccs)[0]}.{min(ccs)[1]}" if ccs else "")
    status, reasons, fixes = "ok", [f"{len(gpus)} GPU(s) seen by NVML"], []
    if len({g.get("name") for g in gpus}) > 1:
        status = "warn"
        reasons.append("mixed GPU models: every ZeRO step waits for the slowest GPU and the smallest memory sets the limit")
        fixes.append("restrict CUDA_VISIBLE_DEVICES to one model")
    if plan is not None:
        per_machine = _ranks_per_machine(plan)
        if per_machine > len(gpus):
            status = "fail"
            reasons.append(f"the plan puts {per_machine} rank(s) on this machine but it has {len(gpus)} GPU(s)")
            fixes.append(f"--gpus {len(gpus) * plan.num_machines}")
        if mems and plan.gpu_memory_gib > min(mems) * 1.02:
            status = "fail" if status == "fail" else "warn"
            reasons.append(f"the plan assumes {plan.gpu_memory_gib:g} GiB per GPU, the smallest GPU has {min(mems):.1f} GiB")
            fixes.append(f"--gpu-memory-gib {min(mems):.1f}")
    checks.append(Check("gpus", status, value, "; ".join(reasons), "; ".join(fixes)))

    # bf16
    if ccs:
        bf16 = min(ccs) >= (8, 0)
        if plan is not None and plan.precision == "bf16" and not bf16:
            checks.append(Check("bf16", "fail", f"compute capability {min(ccs)[0]}.{min(ccs)[1]}",
                                "bf16 needs compute capability 8.0+ (Ampere and newer; torch.cuda.is_bf16_supported)",
                                "--precision fp16 (DeepSpeed fp16 with dynamic loss scaling)"))
        else:
            checks.append(Check("bf16", "ok", "supported" if bf16 else "not supported",
                                "bf16 needs compute capability 8.0+ (Ampere and newer)" +
                                ("" if bf16 else "; use fp16 on this GPU")))

    # driver vs torch's CUDA
    tcuda = facts.get("torch_cuda_version")
    if driver is None:
        checks.append(Check("driver", "warn", "unknown", "driver version not recorded"))
    elif tcuda:
        major = int(tcuda.split(".")[0])
        need = CUDA_MIN_DRIVER.get(major)
        dv = _parse_version(driver)
        if need and dv is not None and dv < _parse_version(need):
            checks.append(Check("driver", "fail", f"driver {driver}",
                                f"torch is built for CUDA {tcuda}, which needs driver >= {need} (NVIDIA CUDA "
                                "minor-version compatibility table); torch.cuda.is_available() will be False",
                                f"upgrade the NVIDIA driver to >= {need}, or install a torch build for an older CUDA"))
        else:
            checks.append(Check("driver", "ok", f"driver {driver}",
                                f"supports torch's CUDA {tcuda}" + (f" (needs >= {need})" if need else "")))
    else:
        checks.append(Check("driver", "ok", f"driver {driver}", "recorded"))
    return checks


def _check_rtx40(facts: dict, plan: Plan | None) -> list[Check]:
    env = facts.get("env") or {}
    gpus = facts.get("gpus")
    verdict = accelerate_p2p_unsupported(facts)
    misspelled = _misspelled_nccl(env)
    checks = []
    cvd = facts.get("cuda_visible_devices")
    note_cvd = (f" Accelerate counts GPUs with nvidia-smi, ignoring CUDA_VISIBLE_DEVICES={cvd!r}, so limiting the "
                "visible GPUs does not avoid this." if cvd else
                " Accelerate counts GPUs with nvidia-smi, ignoring CUDA_VISIBLE_DEVICES.")
    if verdict is None:
        checks.append(Check("rtx40_p2p", "ok" if gpus == [] else "warn", "unknown" if gpus != [] else "no NVIDIA GPU",
                            "no GPU: Accelerate's RTX 40xx P2P rule does not apply" if gpus == [] else
                            "GPU names or driver version unknown: cannot predict Accelerate's RTX 40xx P2P rule"))
    elif not gpus:
        checks.append(Check("rtx40_p2p", "ok", "no NVIDIA GPU", "Accelerate's RTX 40xx P2P/IB rule does not apply"))
    elif not verdict:
        n40 = sum(1 for g in gpus if any(s in g.get("name", "") for s in ACCELERATE_P2P_UNSUPPORTED))
        if n40 and len(gpus) > 1:
            reason = (f"{n40} RTX 40xx GPU(s) but driver {facts.get('driver_version')} >= {ACCELERATE_P2P_MIN_DRIVER}: "
                      "Accelerate allows P2P/IB (check_cuda_p2p_ib_support returns True)")
        elif n40:
            reason = "one GPU in the machine: Accelerate's rule needs more than one (nvidia-smi count)"
        else:
            reason = "no GPU named 'RTX 40…': Accelerate's P2P/IB rule does not apply"
        checks.append(Check("rtx40_p2p", "ok", f"{_gpu_summary(gpus)}, driver {facts.get('driver_version')}", reason))
    else:
        p2p, ib = env.get("NCCL_P2P_DISABLE"), env.get("NCCL_IB_DISABLE")
        value = f"{_gpu_summary(gpus)}, driver {facts.get('driver_version')} < {ACCELERATE_P2P_MIN_DRIVER}"
        fix = ("export NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1 (or upgrade the NVIDIA driver to >= "
               f"{ACCELERATE_P2P_MIN_DRIVER})")
        base = ("Accelerate (utils/environment.py::check_cuda_p2p_ib_support) finds more than one GPU named 'RTX 40…' "
                f"on a driver older than {ACCELERATE_P2P_MIN_DRIVER}: P2P/IB are broken there." + note_cvd)
        if p2p is None or ib is None:
            missing = [n for n, v in (("NCCL_P2P_DISABLE", p2p), ("NCCL_IB_DISABLE", ib)) if v is None]
            extra = ""
            if misspelled:
                extra = " Set but misspelled (no effect): " + ", ".join(m for m, _ in misspelled) + "."
            checks.append(Check("rtx40_p2p", "fail", value,
                                base + f" {' and '.join(missing)} not set: Accelerator() raises NotImplementedError "
                                "at start (PartialState in accelerate/state.py) for any launcher other than `accelerate launch` (torchrun, "
                                "deepspeed, python, notebooks), even with one process; `accelerate launch` sets the "
                                "two variables itself with a warning." + extra, fix))
        elif p2p != "1" or ib != "1":
            checks.append(Check("rtx40_p2p", "warn", value + f"; NCCL_P2P_DISABLE={p2p}, NCCL_IB_DISABLE={ib}",
                                base + " Accelerate only checks that both variables exist, so it starts, but with a "
                                "value other than 1 NCCL still uses P2P/IB and can hang or corrupt results.", fix))
        else:
            checks.append(Check("rtx40_p2p", "ok", value + "; NCCL_P2P_DISABLE=1, NCCL_IB_DISABLE=1",
                                base + " Both variables are set to 1: Accelerate starts and NCCL avoids P2P/IB."))
    # misspelled NCCL variables
    if misspelled:
        items = ", ".join(f"{m} (did you mean {c}?)" if c else f"{m} (not a valid variable name)" for m, c in misspelled)
        checks.append(Check("nccl_env", "warn" if verdict is not True else "fail", items,
                            "NCCL and Accelerate read exact names only: these variables have no effect",
                            "unset them and export the correct names: " + ", ".join(
                                f"{c}={env.get(m, '1')}" for m, c in misspelled if c) if any(c for _, c in misspelled)
                            else "unset them"))
    else:
        nccl = {k: v for k, v in env.items() if k.startswith("NCCL")}
        checks.append(Check("nccl_env", "ok", ", ".join(f"{k}={v}" for k, v in nccl.items()) or "none set",
                            "no misspelled NCCL variables"))
    return checks


def _check_p2p(facts: dict, plan: Plan | None) -> list[Check]:
    checks = []
    gpus = facts.get("gpus") or []
    peer = facts.get("peer_access")
    if peer is not None and len(peer) >= 2:
        pairs = [(i, j) for i in range(len(peer)) for j in range(len(peer)) if i != j]
        ok_pairs = [p for p in pairs if peer[p[0]][p[1]]]
        checks.append(Check("peer_access", "ok", f"{len(ok_pairs)}/{len(pairs)} GPU pairs",
                            "torch.cuda.can_device_access_peer between the visible GPUs" + (
                                "" if len(ok_pairs) == len(pairs) else
                                "; without peer access NCCL routes traffic through host memory (slower, still correct)")))
    elif len(gpus) >= 2:
        checks.append(Check("peer_access", "warn", "unknown", "peer access not measured (torch probe not run or failed: "
                            f"{facts.get('torch_error') or facts.get('probe_error') or 'not recorded'})"))
    ar = facts.get("allreduce")
    if ar and "p2p_on" in ar:
        on, off = ar["p2p_on"], ar.get("p2p_off", {})

        def show(r):
            if r.get("status") == "ok":
                return f"{r['busbw_gbps']:.1f} GB/s bus bandwidth"
            return r.get("status", "unknown")
        value = f"P2P on: {show(on)}; P2P off: {show(off)}"
        env = facts.get("env") or {}
        if on.get("status") == "ok" and off.get("status") == "ok":
            faster_off = off["busbw_gbps"] > on["busbw_gbps"] * 1.1
            if faster_off and env.get("NCCL_P2P_DISABLE") != "1":
                checks.append(Check("allreduce", "warn", value, "all-reduce is faster with P2P off on this machine",
                                    "export NCCL_P2P_DISABLE=1"))
            else:
                checks.append(Check("allreduce", "ok", value, "both settings work; use "
                                    + ("NCCL_P2P_DISABLE=1" if faster_off else "P2P on (the NCCL default)")))
        elif off.get("status") == "ok":
            status = "ok" if env.get("NCCL_P2P_DISABLE") == "1" else "fail"
            checks.append(Check("allreduce", status, value,
                                f"the all-reduce with P2P on ended with '{on.get('status')}' (hang, error or wrong sums) "
                                "and works with P2P off: a training run with P2P on would hang", "export NCCL_P2P_DISABLE=1"))
        else:
            checks.append(Check("allreduce", "fail", value,
                                "NCCL all-reduce fails with P2P on and off: multi-GPU training cannot work as is",
                                "run with NCCL_DEBUG=INFO to see the transport error; check /dev/shm size "
                                "(docker --ipc=host) and the driver"))
    elif ar and "skipped" in ar:
        checks.append(Check("allreduce", "ok", "skipped", ar["skipped"]))
    elif len(gpus) >= 2:
        checks.append(Check("allreduce", "warn", "not measured",
                            "the P2P on/off all-reduce was not run (facts without it, or --no-allreduce)",
                            "run `cookbook env` on the machine without --no-allreduce"))
    return checks


def cuda_versions_compatible(torch_cuda: str, toolkit: str) -> bool:
    """DeepSpeed's rule (``deepspeed/ops/op_builder/builder.py::assert_no_cuda_mismatch``): the toolkit
    (``nvcc``) and torch's CUDA must be equal in ``major.minor``, or share a major version with both
    listed in :data:`CUDA_MINOR_MISMATCH_OK`."""
    t = ".".join(torch_cuda.split(".")[:2])
    s = ".".join(toolkit.split(".")[:2])
    if t == s:
        return True
    major = int(s.split(".")[0])
    ok = CUDA_MINOR_MISMATCH_OK.get(major, [])
    return s in ok and t in ok


def _python_headers_fix(facts: dict) -> str:
    """How to get Python.h for the Python that runs DeepSpeed: the distribution package named for its version, or
    the interpreter's own include folder (``sysconfig.get_paths()["include"]``, what torch's cpp_extension uses)."""
    v = ".".join(str(facts.get("python_version") or "").split(".")[:2])
    where = facts.get("python_include")
    return (f"sudo apt-get install python{v or '3'}-dev (Debian/Ubuntu; python3-dev when {v or 'it'} is the "
            f"system's default Python; Fedora/RHEL: sudo dnf install python{v or '3'}-devel)"
            + (f"; Python.h must end up in {where}, the include folder of the Python this venv runs — a uv, pyenv or "
               "conda Python ships its headers there, so reinstall that Python if it is missing" if where else ""))


def _check_build(facts: dict, plan: Plan | None) -> list[Check]:
    checks = []
    need = _needs_jit_ops(plan)
    tcuda, nvcc = facts.get("torch_cuda_version"), facts.get("nvcc_version")
    env = facts.get("env") or {}
    if not tcuda:
        checks.append(Check("cuda_toolkit", "ok", f"nvcc {nvcc or 'not found'}; torch without CUDA",
                            "torch is a CPU build: DeepSpeed compiles its CPU ops (CPU Adam) with the C++ compiler "
                            "only; the CUDA toolkit is not used" if "torch_cuda_version" in facts or facts.get("torch_version")
                            else "torch's CUDA version not recorded"))
    elif not nvcc:
        checks.append(Check("cuda_toolkit", "warn", f"torch CUDA {tcuda}; nvcc not found (CUDA_HOME={facts.get('cuda_home')})",
                            "DeepSpeed cannot JIT-compile its CUDA ops (FusedAdam, used when the DeepSpeed config names "
                            "an Adam optimizer without offload); CPU-only ops still build",
                            f"install the CUDA {tcuda} toolkit and export CUDA_HOME=/usr/local/cuda-{tcuda}"))
    elif cuda_versions_compatible(tcuda, nvcc):
        checks.append(Check("cuda_toolkit", "ok", f"torch CUDA {tcuda}, nvcc {nvcc}",
                            "DeepSpeed's assert_no_cuda_mismatch accepts this pair"))
    else:
        skip = env.get("DS_SKIP_CUDA_CHECK") == "1"
        checks.append(Check(
            "cuda_toolkit", "warn" if skip else "fail", f"torch CUDA {tcuda}, nvcc {nvcc} (CUDA_HOME={facts.get('cuda_home')})",
            f"torch was built for CUDA {tcuda} but the toolkit DeepSpeed compiles with is {nvcc}: DeepSpeed's "
            "assert_no_cuda_mismatch (op_builder/builder.py) raises CUDAMismatchException when it JIT-builds a CUDA "
            "op (FusedAdam; and CPU Adam / async_io in DeepSpeed versions that build them with nvcc)"
            + (". DS_SKIP_CUDA_CHECK=1 is set: DeepSpeed builds anyway, at your risk" if skip else ""),
            f"install the CUDA {tcuda} toolkit and export CUDA_HOME=/usr/local/cuda-{tcuda}, or install torch built "
            f"for CUDA {nvcc}: pip install torch --index-url https://download.pytorch.org/whl/cu{nvcc.replace('.', '')}"))

    missing = [name for key, name in (("python_headers", "Python.h"), ("ninja", "ninja"), ("cxx", "C++ compiler"))
               if facts.get(key) is False]
    unknown = [name for key, name in (("python_headers", "Python.h"), ("ninja", "ninja")) if facts.get(key) is None]
    prebuilt = facts.get("ds_prebuilt_ops") or {}
    jit = [op for op in need if prebuilt.get(op) is not True]  # OpBuilder.load: prebuilt ops are imported, not built
    fixes = {"Python.h": _python_headers_fix(facts),
             "ninja": "pip install ninja (and make sure the venv's bin is on PATH)",
             "C++ compiler": "sudo apt-get install build-essential"}
    if missing:
        if jit:
            why = (f"this plan makes DeepSpeed JIT-build {', '.join(jit)} (not prebuilt into this DeepSpeed: "
                   "OpBuilder.load in deepspeed/ops/op_builder/builder.py falls back to jit_load, which compiles with "
                   "torch.utils.cpp_extension and needs Python.h, ninja and a C++ compiler); without them the run stops "
                   "at start, when the optimizer or the NVMe swapper loads the op")
        elif need:
            why = (f"this plan's ops ({', '.join(need)}) are prebuilt into this DeepSpeed (DS_BUILD_*=1 at install): "
                   "OpBuilder.load imports them, nothing is JIT-built; another op or a reinstall without them would "
                   "need the build tools")
        else:
            why = ("DeepSpeed JIT-compiles its ops (torch.utils.cpp_extension needs Python.h, ninja and a C++ "
                   "compiler); this plan needs none (no optimizer offload, no NVMe)" if plan is not None else
                   "DeepSpeed JIT-compiles its ops (torch.utils.cpp_extension needs Python.h, ninja and a C++ "
                   "compiler): CPU Adam for optimizer offload, async_io for NVMe; give the plan to know")
        checks.append(Check("build_tools", "fail" if jit else "warn", "missing: " + ", ".join(missing), why,
                            "; ".join(fixes[m] for m in missing)))
    else:
        checks.append(Check("build_tools", "warn" if unknown else "ok",
                            "Python.h, ninja" + (" (unknown: " + ", ".join(unknown) + ")" if unknown else " present"),
                            "what DeepSpeed needs to JIT-compile CPU Adam and other ops"))

    ops = facts.get("ds_ops")
    if ops is None:
        checks.append(Check("deepspeed_ops", "warn" if need else "ok", "not probed",
                            "DeepSpeed's op builders were not asked (" + (facts.get("deepspeed_error") or facts.get(
                                "probe_error") or "not in the facts") + ")"))
    else:
        wanted = need or ["cpu_adam"]
        bad = [o for o in wanted if ops.get(o) is False and prebuilt.get(o) is not True]
        value = ", ".join(f"{k}={'yes' if v else ('n/a' if v is None else 'no')}" for k, v in ops.items())
        if bad:
            fix = []
            if "async_io" in bad:
                files = facts.get("libaio_files") or {}
                fix.append("libaio is installed: see the libaio check (CFLAGS/LDFLAGS, or DS_BUILD_AIO=1)"
                           if files.get("header") and files.get("library") else f"install libaio: {LIBAIO_PACKAGES}")
            if "cpu_adam" in bad:
                fix.append("see `ds_report`; install Python.h, ninja and a C++ compiler")
            checks.append(Check("deepspeed_ops", "fail" if need else "warn", value,
                                f"DeepSpeed's own is_compatible() says no for {', '.join(bad)}"
                                + (f", which this plan needs" if need else ""), "; ".join(fix)))
        else:
            checks.append(Check("deepspeed_ops", "ok", value,
                                "DeepSpeed's op builders' is_compatible() (deepspeed.accelerator.get_accelerator()"
                                ".get_op_builder(...)().is_compatible())"))
    return checks


def _check_fp16(facts: dict, plan: Plan | None, config=None) -> list[Check]:
    """fp16 on GPUs without bf16 (compute capability < 8.0: V100, T4, ...): what DeepSpeed's dynamic loss scaling
    does, its failure 'Current loss scale already at minimum - cannot decrease scale anymore' and the fixes
    (:func:`cookbook.lint.fp16_loss_scale_warning`, the same words ``cookbook lint`` uses), for the GPUs in the facts;
    the loss-scaling settings are the config's ``fp16`` block when ``config`` (a dict or JSON path) has one, else
    DeepSpeed's defaults."""
    if plan is None or plan.precision != "fp16":
        return []
    gpus = [g for g in facts.get("gpus") or [] if g.get("compute_capability")]
    if not gpus:
        return []
    low = min(gpus, key=lambda g: tuple(g["compute_capability"]))
    cc = tuple(low["compute_capability"])
    if cc >= (8, 0):
        return []
    cfg = config
    if isinstance(config, (str, os.PathLike)):
        try:
            cfg = _load_config(config)
        except Exception:  # noqa: BLE001 - an unreadable config is reported by the plan's own reading
            cfg = None
    cfg = cfg if isinstance(cfg, dict) else {}
    from .lint import fp16_loss_scale_warning, loss_scaling
    message, fix = fp16_loss_scale_warning(cfg.get("fp16"), low.get("name") or "this GPU", cc, cfg=cfg)
    s = loss_scaling(cfg.get("fp16"))
    value = (f"fp16 on compute capability {cc[0]}.{cc[1]}; " + (
        f"dynamic loss scale 2^{s['initial_scale_power']}, exits after {s['overflows_to_exit']} overflows in a row"
        if s["dynamic"] else f"static loss_scale {s['loss_scale']}"))
    return [Check("fp16_loss_scaling", "warn", value, message, fix)]


def _check_memory(facts: dict, plan: Plan | None) -> list[Check]:
    checks = []
    total, avail = facts.get("host_memory_gib"), facts.get("host_available_gib")
    swap = facts.get("swap_gib")
    typed = ""  # what the user typed is the machine being checked; the value then names both
    if plan is not None and plan.host_memory_gib and (total is None or abs(float(plan.host_memory_gib) - total) > 0.05):
        typed = f" (--host-memory-gib; this machine has {total:.1f} GiB)" if total else " (--host-memory-gib)"
        total, avail = float(plan.host_memory_gib), None
    if plan is None or not plan.model:
        checks.append(Check("host_memory", "ok" if total else "warn",
                            f"{total:.1f} GiB RAM" if total else "unknown",
                            "no plan given: pass --model ... (as for `cookbook estimate`) to compare with the plan's need"
                            if plan is None else "the plan's host-RAM need depends on the model: pass --model NAME"))
    elif not total:
        checks.append(Check("host_memory", "warn", "unknown", "host_memory_gib not recorded"))
    else:
        est, why = _estimate(plan)
        if est is None:
            checks.append(Check("host_memory", "warn", f"{total:.1f} GiB RAM", why))
        else:
            need = float(est.host_gib["total"])
            swap_note = (f" Swap ({swap:.0f} GiB) does not count: offloaded states sit in pinned (page-locked) memory, "
                         "which the kernel cannot swap out." if swap else "")
            value = (f"need ≈ {need:.1f} GiB of {total:.1f} GiB{typed}"
                     + (f" ({avail:.1f} GiB available now)" if avail else ""))
            if need > total:
                fix = _host_fixes(plan, total, est)
                checks.append(Check("host_memory", "fail", value,
                                    f"the estimator's host need for {plan.label} on {plan.num_gpus} rank(s) exceeds the "
                                    "RAM: the kernel OOM killer ends the run (rank killed with signal 9)." + swap_note, fix))
            elif (avail is not None and need > avail) or need > 0.9 * total:
                checks.append(Check("host_memory", "warn", value,
                                    "little headroom: the OS, page cache, data loader workers and other processes need "
                                    "RAM too" + (" and only the available memory is free now" if avail is not None and
                                                 need > avail else "") + "." + swap_note,
                                    "close other processes, or pick a variant with less host RAM that the estimator "
                                    "says fits (`cookbook estimate ... --sweep`)"))
            else:
                checks.append(Check("host_memory", "ok", value, "the plan's host need fits in RAM"))
    shm = facts.get("shm_gib")
    gpus = facts.get("gpus") or []
    multi = len(gpus) > 1 and (plan is None or _ranks_per_machine(plan) > 1)
    if shm is None:
        checks.append(Check("shm", "warn", "unknown", "/dev/shm size not recorded"))
    elif shm < 1.0:
        fail = multi and shm < 0.5
        checks.append(Check("shm", "fail" if fail else "warn", f"/dev/shm {shm * 1024:.0f} MiB",
                            "DataLoader workers pass batches through /dev/shm, and NCCL's SHM transport (used between "
                            "GPUs when P2P is disabled) allocates there; a container's 64 MiB default makes them crash "
                            "('Bus error', NCCL 'unhandled system error')",
                            "docker run --ipc=host (or --shm-size=16g); on a host: mount -o remount,size=16G /dev/shm"))
    else:
        checks.append(Check("shm", "ok", f"/dev/shm {shm:.1f} GiB", "enough for DataLoader workers and NCCL's SHM transport"))
    return checks


def _host_fixes(plan: Plan, total_gib: float, est) -> str:
    """Only fixes the memory estimator says fit in ``total_gib`` of host RAM (:func:`cookbook.memory.fixes_that_fit`)."""
    try:
        from .memory import fixes_that_fit
        fixes = fixes_that_fit(plan.replace(host_memory_gib=float(total_gib)), exclude=est)
    except Exception as exc:  # noqa: BLE001 - the estimator cannot say: name only more RAM
        return f"more RAM (the estimator could not rank other variants: {exc})"
    if not fixes:
        return f"more RAM: the plan needs about {est.host_gib['total']:.0f} GiB"
    return "variants the estimator says fit: " + "; ".join(fixes) if not fixes[0].startswith("nothing") else fixes[0]


#: DeepSpeed's compile probe for libaio, for messages (``AsyncIOBuilder.is_compatible`` -> ``OpBuilder.has_function``).
AIO_PROBE = ("DeepSpeed's async_io probe (AsyncIOBuilder.is_compatible in deepspeed/ops/op_builder/async_io.py) compiles "
             "and links a test program calling io_submit with -laio (OpBuilder.has_function in op_builder/builder.py, "
             "through distutils, with $CFLAGS and $LDFLAGS)")


def _aio_prebuild_fix(facts: dict) -> str:
    v = facts.get("deepspeed_version")
    return (f"or compile the op once at install, so no probe or JIT build runs later (OpBuilder.load then imports it): "
            f"DS_BUILD_AIO=1 pip install --no-cache-dir --force-reinstall deepspeed{'==' + v if v else ''} "
            "(with the same CFLAGS/LDFLAGS exported)")


def libaio_check(facts: dict) -> Check:
    """The ``libaio`` check for an NVMe plan: libaio's files (:func:`libaio_files`) told apart from DeepSpeed's probe.

    * the op prebuilt into DeepSpeed (``ds_prebuilt_ops.async_io``, ``DS_BUILD_AIO=1``): only the run-time library
      matters;
    * the probe passes: ok;
    * the probe fails with libaio's header and ``libaio.so`` present: the cause is elsewhere, named from the facts (no
      C compiler; distutils missing; libaio outside the compiler's default folders), fix ``CFLAGS="-I..."
      LDFLAGS="-L..."`` or prebuild with ``DS_BUILD_AIO=1``;
    * only the run-time ``libaio.so.1``, or nothing: install libaio-dev (:data:`LIBAIO_PACKAGES`).
    """
    files = facts.get("libaio_files") if isinstance(facts.get("libaio_files"), dict) else None
    lib = facts.get("libaio")
    ds_aio = (facts.get("ds_ops") or {}).get("async_io")
    prebuilt = (facts.get("ds_prebuilt_ops") or {}).get("async_io") is True
    have_dev = bool(files and files.get("header") and files.get("library"))
    if prebuilt:
        if files is not None and not (files.get("runtime") or files.get("library")):
            return Check("libaio", "fail", "async_io prebuilt; libaio.so.1 missing",
                         "DeepSpeed's async_io op was compiled at install and links libaio's run-time library, which "
                         "is not on this machine", LIBAIO_PACKAGES)
        return Check("libaio", "ok", "async_io prebuilt into DeepSpeed",
                     "the op was compiled at install (DS_BUILD_AIO=1): OpBuilder.load imports it, no probe or JIT build")
    if ds_aio is True:
        return Check("libaio", "ok", "present", "DeepSpeed's async_io op can link libaio (its own probe passes)")
    if ds_aio is False and have_dev:
        causes, fixes = [], []
        err = str((facts.get("ds_ops_errors") or {}).get("async_io") or "")
        if facts.get("cxx") is False:
            causes.append("no C/C++ compiler on PATH")
            fixes.append("sudo apt-get install build-essential (gcc)")
        if "distutils" in err or "setuptools" in err:
            causes.append(f"distutils cannot be imported ({err[:120]})")
            fixes.append("pip install setuptools (Python 3.12+ has no distutils of its own)")
        hdir, ldir = os.path.dirname(files["header"]), os.path.dirname(files["library"])
        flags = f'export CFLAGS="-I{hdir}" LDFLAGS="-L{ldir}"'
        if not files.get("default_paths"):
            causes.append(f"libaio is outside the compiler's default folders ({hdir}, {ldir}) and CFLAGS/LDFLAGS do "
                          "not name them")
        elif not causes:
            causes.append("the compile or link fails for another reason (`ds_report`, or DS_BUILD_AIO=1 pip install "
                          "-v, shows the compiler's error)")
        fixes.append(f"{flags} (the probe and the JIT build both read them)")
        return Check("libaio", "fail", f"libaio installed ({files['header']}, {files['library']}); DeepSpeed's async_io "
                     "probe fails",
                     f"libaio itself is there, so installing libaio-dev is not the fix: {AIO_PROBE}; here: "
                     + "; ".join(causes), "; ".join(fixes) + "; " + _aio_prebuild_fix(facts))
    if ds_aio is False or lib is False:
        if files and files.get("runtime") and not have_dev:
            return Check("libaio", "fail", f"only the run-time library ({files['runtime']})",
                         "the development files DeepSpeed's async_io op is built against are missing: "
                         + ("libaio.h" if not files.get("header") else "")
                         + (" and " if not files.get("header") and not files.get("library") else "")
                         + ("libaio.so (the link-time library)" if not files.get("library") else "")
                         + f"; {AIO_PROBE}", LIBAIO_PACKAGES)
        return Check("libaio", "fail", "missing",
                     "NVMe offload uses DeepSpeed's async_io op, which links libaio (headers and .so); "
                     "without it DeepSpeed cannot build the op and the run stops at start", LIBAIO_PACKAGES)
    if lib is None and ds_aio is None:
        return Check("libaio", "warn", "unknown", "libaio presence not recorded", LIBAIO_PACKAGES)
    return Check("libaio", "ok", "present", "libaio's header and library are installed")


def _check_nvme(facts: dict, plan: Plan | None) -> list[Check]:
    if plan is None or "nvme" not in (plan.offload_optimizer, plan.offload_param):
        return []
    checks = [libaio_check(facts)]
    path = facts.get("nvme_path") or plan.nvme_path
    exists = facts.get("nvme_path_exists")
    if exists is False:
        checks.append(Check("nvme_path", "fail", f"{path} does not exist",
                            "DeepSpeed writes the swap files into this folder and does not create it",
                            f"mkdir -p {path}  (on a local NVMe SSD)"))
    elif exists is None:
        checks.append(Check("nvme_path", "warn", f"{path}: unknown", "the facts do not say whether the folder exists",
                            f"cookbook env --nvme-path {path} on the machine"))
    else:
        checks.append(Check("nvme_path", "ok", f"{path} exists", "NVMe swap folder present"))
    need = _nvme_bytes(plan) if plan.model else None
    free = facts.get("disk_free_gib")
    if not plan.model:
        checks.append(Check("nvme_disk", "warn", f"free {free if free is not None else 'unknown'} GiB",
                            "the size of the offloaded states depends on the model: pass --model NAME"))
    elif need is None or free is None:
        checks.append(Check("nvme_disk", "warn", f"free {free if free is not None else 'unknown'} GiB",
                            "offloaded size or free disk unknown"))
    else:
        from .nvme import nvme_disk_needed
        need_gib = nvme_disk_needed(need) / GIB  # the swap files + the margin launch() asks for
        what = " + ".join(x for x, on in (("optimizer states and gradients 16 B/param", plan.offload_optimizer == "nvme"),
                                         ("parameters 2 B/param", plan.offload_param == "nvme")) if on)
        if free < need_gib:
            checks.append(Check("nvme_disk", "fail", f"need {need_gib:.1f} GiB, free {free:.1f} GiB",
                                f"the offloaded states ({what}) do not fit on the file system of {path}",
                                f"free {need_gib - free:.1f} GiB or point --nvme-path at a larger SSD"))
        else:
            checks.append(Check("nvme_disk", "ok", f"need {need_gib:.1f} GiB, free {free:.1f} GiB",
                                f"the offloaded states ({what}) fit"))
    bw = facts.get("nvme_bandwidth")
    if isinstance(bw, dict) and bw.get("error"):
        checks.append(Check("nvme_bandwidth", "warn", "not measured", f"the bandwidth probe failed: {bw['error']}"))
    elif isinstance(bw, dict) and bw.get("read_gb_s") and bw.get("write_gb_s"):
        floor = ""
        try:
            from .nvme import estimate_nvme
            est = estimate_nvme(plan)
            if est is not None and est.write_bytes_per_step:
                f = est.floor(bw["read_gb_s"], bw["write_gb_s"])
                floor = (f"; this plan moves {est.read_bytes_per_step / 1e9:.1f} GB in and "
                         f"{est.write_bytes_per_step / 1e9:.1f} GB out per optimizer step: at least "
                         f"{f['floor_serial_s']:.1f} s per step on this disk")
        except Exception:  # noqa: BLE001 - the floor is advisory
            pass
        checks.append(Check("nvme_bandwidth", "ok",
                            f"read {bw['read_gb_s']:.2f} GB/s, write {bw['write_gb_s']:.2f} GB/s ({bw.get('method')})",
                            f"sequential bandwidth measured in {bw.get('path', path)}{floor}",
                            f"tune DeepSpeed's aio settings for it: cookbook nvme-tune {path} -o aio.json"))
    return checks


def omp_binding_vars(env: dict) -> dict[str, str]:
    """The variables of ``env`` that pin OpenMP threads to cores, name -> value (empty: threads are free to move).

    * ``OMP_PROC_BIND``: any value other than ``false`` (``true``, ``close``, ``spread``, ``master``, ``primary``
      or a list of them); empty counts as unset.
    * ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``: any value, unless ``OMP_PROC_BIND=false``, which disables thread
      affinity and so the places and libgomp's CPU list (OpenMP spec "OMP_PROC_BIND"; libgomp manual
      "GOMP_CPU_AFFINITY": "when OMP_PROC_BIND is set to FALSE, the host system handles the assignment").
    * ``KMP_AFFINITY`` (Intel/LLVM OpenMP): a value naming ``granularity``, ``compact``, ``scatter``, ``explicit``
      or ``balanced``, and not ``disabled`` or ``none``.

    Why it matters: :func:`cpu_adam_binding_check` (measured cost, source: evidence ``omp_binding.cpu_adam``).
    """
    found: dict[str, str] = {}
    bind = str(env.get("OMP_PROC_BIND") or "").strip()
    disabled = bind.lower() == "false"
    if bind and not disabled:
        found["OMP_PROC_BIND"] = bind
    for name in ("OMP_PLACES", "GOMP_CPU_AFFINITY"):
        value = str(env.get(name) or "").strip()
        if value and not disabled:
            found[name] = value
    kmp = str(env.get("KMP_AFFINITY") or "").strip()
    words = [w.strip().split("=")[0].lower() for w in kmp.split(",")]
    if any(w in _KMP_BINDING_WORDS for w in words) and not any(w in _KMP_NO_BINDING_WORDS for w in words):
        found["KMP_AFFINITY"] = kmp
    return found


def cpu_adam_binding_check(env: dict, plan: Plan | None) -> Check | None:
    """Pinned OpenMP threads in a rank that runs DeepSpeed's CPU Adam: ``warn`` with the measured cost and the fix.

    DeepSpeedCPUAdam does the optimizer step on the host, with OpenMP threads, whenever the optimizer is
    offloaded (``cpu`` and ``nvme`` alike). Measured (source: evidence ``omp_binding.cpu_adam``, :data:`OMP_BINDING_COST`;
    one H200, LLaMA-7B ZeRO-3 with the optimizer on the CPU): DeepSpeed's core layout (cores 1–15) with
    ``OMP_PROC_BIND=close``, ``OMP_PLACES=cores`` made the CPU Adam about 10× slower and the run about a fifth as fast.

    Args:
        env: the environment the ranks inherit (the facts' ``env``, or ``os.environ`` in ``cookbook launch``).
        plan: the planned run; None, or no optimizer offload: no verdict.

    Returns:
        None without a plan or optimizer offload; else a :class:`Check` named ``omp_binding``: ``warn`` naming
        the variables found (:func:`omp_binding_vars`) with their values, ``ok`` when none is set.
    """
    if plan is None or plan.offload_optimizer not in ("cpu", "nvme"):
        return None
    c = OMP_BINDING_COST
    measured = (f"measured in {c['source']} (one H200, LLaMA-7B ZeRO-3, optimizer on the CPU): DeepSpeed's core "
                f"layout (cores 1–15) with OMP_PROC_BIND=close made the CPU Adam {c['slowdown']}× slower "
                f"(optimizer_step {c['optimizer_step_s_bound']} s vs {c['optimizer_step_s_free']} s per step) and the "
                f"run {c['tokens_per_s_bound'] / c['tokens_per_s_free']:.2f}× as fast ({c['tokens_per_s_bound']:,} vs "
                f"{c['tokens_per_s_free']:,} tokens/s)")
    where = ("DeepSpeed's CPU Adam (optimizer offloaded to " + plan.offload_optimizer
             + (": its states live on the SSD, its step runs on the host" if plan.offload_optimizer == "nvme" else "")
             + ")")
    found = omp_binding_vars(env)
    if not found:
        return Check("omp_binding", "ok", "no OpenMP thread binding set",
                     f"the rank runs {where} with its OpenMP threads free to move, as it should: {measured}")
    return Check("omp_binding", "warn", ", ".join(f"{k}={v}" for k, v in found.items()),
                 f"{' and '.join(found)} pin{'s' if len(found) == 1 else ''} the OpenMP threads of the rank that runs "
                 f"{where}: {measured}",
                 f"unset {' '.join(found)} before launching, and do not bind cores (`deepspeed --bind_cores_to_rank`, "
                 "`accelerate launch --enable_cpu_affinity`) for a run whose optimizer step runs on the CPU")


def cpu_adam_binding_warning(env: dict, plan: Plan | None) -> str | None:
    """The one line ``cookbook launch`` prints before it starts the ranks (``[env] warning: ...``), or None:
    :func:`cpu_adam_binding_check`'s warning (source: evidence ``omp_binding.cpu_adam``) as value, reason and fix."""
    c = cpu_adam_binding_check(env, plan)
    if c is None or c.status != "warn":
        return None
    return f"[env] warning: {c.name}: {c.value}: {c.reason}. Fix: {c.fix}"


def _check_omp_binding(facts: dict, plan: Plan | None) -> list[Check]:
    c = cpu_adam_binding_check(facts.get("env") or {}, plan)
    return [] if c is None else [c]


def recommended_env(facts: dict, plan: Plan | None = None) -> dict[str, str]:
    """Environment variables to set for the training processes on this machine.

    * no NVIDIA GPU: ``DS_ACCELERATOR=cpu`` (DeepSpeed's accelerator override,
      ``deepspeed/accelerator/real_accelerator.py``) and ``OMP_NUM_THREADS`` = physical cores ÷
      ranks per machine, at least 1 — the split Accelerate applies for multi-CPU runs
      (``accelerate/state.py``, ``psutil.cpu_count(logical=False) / local_world_size``).
    * Accelerate's RTX 40xx rule applies (:func:`accelerate_p2p_unsupported`), or the measured
      all-reduce hangs / is faster with P2P off: ``NCCL_P2P_DISABLE=1`` (and ``NCCL_IB_DISABLE=1``
      for the RTX 40xx rule).

    Returns:
        name -> value; empty when nothing needs setting.
    """
    env: dict[str, str] = {}
    gpus = facts.get("gpus")
    if gpus == [] or (gpus is None and not facts.get("torch_cuda_version")):
        env["DS_ACCELERATOR"] = "cpu"
        cores = facts.get("cpu_count_physical") or facts.get("cpu_count") or 1
        env["OMP_NUM_THREADS"] = str(max(1, int(cores) // _ranks_per_machine(plan)))
    if accelerate_p2p_unsupported(facts):
        env["NCCL_P2P_DISABLE"] = "1"
        env["NCCL_IB_DISABLE"] = "1"
    ar = facts.get("allreduce") or {}
    on, off = ar.get("p2p_on") or {}, ar.get("p2p_off") or {}
    if off.get("status") == "ok" and (on.get("status") not in (None, "ok") or
                                       (on.get("status") == "ok" and off["busbw_gbps"] > on["busbw_gbps"] * 1.1)):
        env["NCCL_P2P_DISABLE"] = "1"
    return env


def env_block(env: dict[str, str], facts: dict | None = None) -> str:
    """Shell lines to paste: ``export NAME=value`` per variable, plus a comment per misspelled NCCL variable."""
    lines = [f"export {k}={v}" for k, v in env.items()]
    for name, close in _misspelled_nccl((facts or {}).get("env") or {}):
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            lines.append(f"unset {name}  # misspelled" + (f" {close}" if close else "") + ": has no effect")
        else:
            lines.append(f"# {name} is not a valid variable name and has no effect; remove it from your launch script")
    return "\n".join(lines)


def _check_recommended(facts: dict, rec: dict[str, str]) -> Check:
    env = facts.get("env") or {}
    missing = {k: v for k, v in rec.items() if env.get(k) != v}
    if not rec:
        return Check("recommended_env", "ok", "nothing to set", "no variable needed for this machine and plan")
    if missing:
        return Check("recommended_env", "warn", ", ".join(f"{k}={v}" for k, v in missing.items()),
                     "not set in this environment yet (`cookbook.launch` sets them for its child processes)",
                     "; ".join(f"export {k}={v}" for k, v in missing.items()) + " (or paste the block below)")
    return Check("recommended_env", "ok", ", ".join(f"{k}={v}" for k, v in rec.items()), "already set")


#: NVIDIA, "CUDA on WSL User Guide", section "Known Limitations for Linux CUDA Applications"
#: (https://docs.nvidia.com/cuda/wsl-user-guide/index.html), its words on pinned memory.
WSL_PINNED_LIMIT = ("Pinned system memory (example: System memory that an application makes resident for GPU "
                    "accesses) availability for applications is limited")


def _check_wsl(facts: dict, plan: Plan | None) -> list[Check]:
    """WSL2 (:func:`detect_wsl`): CUDA there limits pinned host memory (:data:`WSL_PINNED_LIMIT`), and DeepSpeed's
    offload pins its host buffers (``offload_optimizer`` / ``offload_param`` ``pin_memory``); the cost of turning
    pinning off is :data:`cookbook.dsconfig.PIN_MEMORY_OFF_COST` (measured, cited by that key)."""
    if not facts.get("wsl"):
        return []
    from .dsconfig import PIN_MEMORY_OFF_COST as cost
    slower = cost["pinned_tokens_per_s"] / cost["unpinned_tokens_per_s"]
    measured = (f"pin_memory false costs speed: measured {slower:.1f}x slower end to end with the optimizer and the "
                f"parameters offloaded ({cost['pinned_tokens_per_s']:,.0f} -> {cost['unpinned_tokens_per_s']:,.0f} "
                f"tokens/s; cookbook.dsconfig.PIN_MEMORY_OFF_COST, {cost['source']})")
    offload = plan is not None and (plan.offload_optimizer != "none" or plan.offload_param != "none")
    reason = (f"WSL2: NVIDIA's CUDA on WSL User Guide, Known Limitations: '{WSL_PINNED_LIMIT}' — training can exceed "
              "it and may not work (NVIDIA's words). DeepSpeed's offload pins its host buffers (pin_memory true in "
              "offload_optimizer / offload_param), the memory that limit is about")
    if offload:
        return [Check("wsl", "warn", "WSL2", reason + f"; this plan offloads ({plan.label})",
                      "write \"pin_memory\": false in zero_optimization.offload_optimizer and offload_param "
                      f"(cookbook config ... -o ds.json, edit, then cookbook launch --config ds.json); {measured}; "
                      "native Linux keeps pinned buffers; and give the WSL VM the RAM: %UserProfile%\\.wslconfig "
                      "[wsl2] memory=...")]
    return [Check("wsl", "ok" if plan is not None else "warn", "WSL2",
                  reason + ("; this plan offloads nothing, so DeepSpeed pins no host buffers" if plan is not None
                            else "; give the plan to know whether it offloads"),
                  "" if plan is not None else f"with CPU or NVMe offload, set pin_memory false; {measured}")]


RULES = (_check_versions, _check_gpus, _check_rtx40, _check_p2p, _check_build, _check_memory, _check_nvme,
         _check_omp_binding, _check_wsl)


def check(plan: Plan | None = None, facts: dict | None = None, *, config: dict | str | None = None,
          run_allreduce: bool = True, world_size: int | None = None, ds_config: dict | None = None) -> EnvReport:
    """Run every rule on ``facts`` (gathered live when None) for an optional plan.

    Args:
        plan: the planned run; None checks the machine alone.
        facts: a facts dict (e.g. :func:`load_facts`); None gathers this machine's facts
            (:func:`gather_facts`, a few seconds; with 2+ GPUs and ``run_allreduce`` the timed
            all-reduce adds up to two timeouts).
        config: a DeepSpeed config (dict or JSON path); its ZeRO stage, offload targets, micro batch,
            accumulation and precision replace the plan's (model and world size stay the plan's,
            or ``world_size`` when given).
        run_allreduce: time the P2P on/off all-reduce when gathering live facts.
        ds_config: the DeepSpeed config ``plan`` was read from, when the caller read it (``cookbook env --config``):
            its ``fp16`` block's loss-scaling settings go into the fp16 check (:func:`_check_fp16`).

    Returns:
        :class:`EnvReport`; ``report.ok`` is False when any check failed.

    Raises:
        PlanError: config unreadable or inconsistent with a plan; FactsError: malformed facts.
    """
    if config is not None:
        plan = plan_from_ds_config(config, base=plan or Plan(model=NO_MODEL), world_size=world_size)
    if facts is None:
        facts = gather_facts(nvme_path=plan.nvme_path if plan else None, run_allreduce=run_allreduce)
    else:
        facts = validate_facts(facts)
    checks: list[Check] = []
    for rule in RULES:
        checks.extend(rule(facts, plan))
    rec = recommended_env(facts, plan)
    checks.append(_check_recommended(facts, rec))
    checks.extend(_model_check(plan))
    checks.extend(_check_fp16(facts, plan, ds_config if ds_config is not None else config))
    return EnvReport(checks=tuple(checks), facts=mask_secrets(facts), recommended_env=rec, plan=plan)


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------
def register(subparsers) -> None:
    """Add ``cookbook env [plan] [--facts FILE] [--dump-facts FILE] [--json]``."""
    p = subparsers.add_parser(
        "env", help="check this machine (or a recorded facts file) for the traps of a ZeRO run",
        description="Check the machine for a planned run. The plan is optional: give it as for `cookbook estimate` "
                    "(--model, --gpus, --zero-stage, --offload-*) or as --config DS.json --world-size N [--model NAME] "
                    "(without --model, every check that needs no model runs and the report names the others). "
                    "Exit code 1 when any check fails.")
    add_plan_arguments(p)
    p.add_argument("--config", default=None, help="a DeepSpeed JSON config; with --world-size (and --model for the "
                                                  "memory checks)")
    p.add_argument("--world-size", type=int, default=None, help="ranks over all machines (with --config)")
    p.add_argument("--facts", default=None, help="evaluate the rules on a recorded facts file instead of this machine")
    p.add_argument("--dump-facts", default=None, metavar="FILE", help="write this machine's facts as JSON (secrets masked)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-allreduce", action="store_true", help="skip the timed P2P on/off all-reduce (2+ GPUs)")
    p.add_argument("--allreduce-timeout", type=float, default=60.0, help="seconds per all-reduce setting before it counts as a hang")
    p.add_argument("--no-nvme-probe", action="store_true",
                   help="with --nvme-path, skip timing the folder's sequential write/read bandwidth")
    p.add_argument("--nvme-probe-mib", type=int, default=256, help="MiB the NVMe bandwidth probe writes and reads (default 256)")
    p.add_argument("--nvme-probe-time-limit-s", type=float, default=30.0,
                   help="seconds of I/O at most for the NVMe bandwidth probe (default 30)")
    p.set_defaults(func=_main)


#: The checks that need the model (its parameter count): skipped, and named, without --model.
MODEL_CHECKS = {"host_memory": "the plan's host-RAM need, from the memory estimate",
                "nvme_disk": "the size of the states offloaded to NVMe"}


def _model_check(plan: Plan | None) -> list[Check]:
    if plan is None or plan.model:
        return []
    return [Check("model", "warn", "not given", "checks that need --model ran without it: "
                  + "; ".join(f"{k}: {v}" for k, v in MODEL_CHECKS.items())
                  + ". Every other check (versions, CUDA toolkit vs torch, Python headers, ninja, libaio for an "
                  "NVMe config, NCCL variables) ran for the config", "add --model NAME (as for `cookbook estimate`)")]


def _main(args) -> int:
    plan = None
    if args.config is not None:
        # the config decides ZeRO stage, offload, batch shape and precision; the world size is --world-size
        # (or the config's own, when its batch numbers state one); without --model the checks that need the
        # model say so (MODEL_CHECKS) and every other one runs
        world = args.world_size if args.world_size is not None else args.num_gpus
        if world is None:
            from .dsconfig import config_world_size
            stated = config_world_size(_load_config(args.config))
            if stated is None:
                raise PlanError("--config needs --world-size N: the config does not state its world size "
                                "(its train_batch_size is not micro batch × accumulation × N in numbers)")
            world = stated[0]
            print(f"world size {world}: from the config, {stated[1]}", file=sys.stderr)
        base = plan_from_args(args, num_gpus=world, model=args.model or NO_MODEL)
        plan = plan_from_ds_config(args.config, base=base)
    elif args.model:
        plan = plan_from_args(args, num_gpus=args.world_size)
    elif args.host_memory_gib is not None and not (args.host_memory_gib > 0):
        Plan(model=NO_MODEL, host_memory_gib=args.host_memory_gib)  # raises the plan's own message for the value
    elif (args.zero_stage is not None or args.offload_optimizer != "none" or args.offload_param != "none"
          or args.nvme_path):
        # a plan typed without --model: its op, libaio and NVMe checks still run; the memory ones say they need it
        plan = plan_from_args(args, num_gpus=args.world_size, model=NO_MODEL)
        print("plan without --model: the op, libaio and NVMe checks run for it; host and GPU memory need --model",
              file=sys.stderr)
    if args.model:  # an unknown model is refused as estimate and train refuse it, before any check runs
        from .models import ModelNotFoundError, resolve_model_path
        try:
            resolve_model_path(args.model)
        except ModelNotFoundError as exc:
            print(f"error: --model: {exc}", file=sys.stderr)
            return 2
    try:
        if args.facts:
            facts = load_facts(args.facts)
        else:
            facts = gather_facts(nvme_path=(plan.nvme_path if plan else None) or args.nvme_path,
                                 run_allreduce=not args.no_allreduce, allreduce_timeout_s=args.allreduce_timeout,
                                 nvme_probe=not args.no_nvme_probe, nvme_probe_mib=args.nvme_probe_mib,
                                 nvme_probe_time_limit_s=args.nvme_probe_time_limit_s)
    except FactsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dump_facts:
        path = dump_facts(facts, args.dump_facts)
        print(f"facts written to {path}", file=sys.stderr)
    report = check(plan, facts, ds_config=_load_config(args.config) if args.config is not None else None)
    print(report.to_json() if args.json else str(report))
    return 0 if report.ok else 1
