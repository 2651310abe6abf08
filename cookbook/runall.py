"""``cookbook run-all``: execute every notebook with papermill, in order, and write a report.

    cookbook run-all [--output-dir DIR] [--only 03 ...] [--params FILE] [-p NAME VALUE ...] [--verbose]

For each notebook ``notebooks/NN_*.ipynb`` (in order; ``--only`` picks some by number or name) it

1. injects ``OUTPUT_DIR = DIR/NN_name``, the values of a parameter file (``--params FILE``: a
   ``shared:`` section for every notebook that declares the key, and a section per notebook,
   :func:`load_params_file`) and the ``-p`` values, which win over the file (``-p MODEL qwen-14b``
   goes to every notebook that has ``MODEL``; ``-p 06:MODEL llama-7b`` to notebook 06 only). ``-p``
   values are read like papermill's own ``-p``: ``None``, ``True``/``False``, integers, floats, else
   strings;
2. executes it with papermill, with the working directory set to the notebook's output folder, and
   saves the executed copy as ``DIR/NN_name.ipynb`` — also when a cell fails (papermill writes it,
   with the traceback, before raising). The console gets one line a notebook (and whatever the
   notebook's processes print to their console, such as a rank's error, less DeepSpeed's "Setting
   accelerator to CPU" lines: :func:`_filtered_console_kernel_manager`); ``--verbose`` adds papermill's
   bars of cells and the kernel's log messages, and keeps DeepSpeed's lines;
3. checks the notebook's central run: a notebook records, with ``results.record(..., central=LABEL,
   expected=EXPECTED_OUTCOME)``, which run the story rests on and how it is expected to end (``ok``,
   or ``gpu_oom`` where the story is the out-of-memory). A central run that ended otherwise (refused,
   config_error, failed, hung, another status) or none recorded marks the notebook ``unexpected``
   (:func:`central_outcome`);
4. writes ``DIR/report.html`` (the answers for the two targets first, then every notebook's
   evidence; :func:`cookbook.report.write_html_report`) and ``DIR/run-all.json``.

On a GPU box the same notebooks run the real sizes with a parameter file (notebooks/params/)::

    cookbook run-all --params notebooks/params/gpu-1x24gib.yaml --output-dir runs/gpu

Exit code 0 when every notebook ran and every central run ended as expected; 1 otherwise (the message
names the notebook, the cell or the run and its message); 2 for bad arguments. The notebooks are
independent (each writes only under its own folder), so a failure does not stop the others unless
``--stop-on-failure``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
import logging
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: Where the notebooks live (the repository's ``notebooks/`` folder).
NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"

#: Default output folder of ``cookbook run-all`` (relative to the current directory).
DEFAULT_OUTPUT_DIR = "runs/run-all"


class RunAllError(ValueError):
    """Bad ``run-all`` input: the message names the option, the value and the fix."""


@dataclass(frozen=True)
class NotebookRun:
    """One executed notebook.

    Attributes:
        name: notebook name without ``.ipynb`` (``03_zero3``).
        source: the notebook executed. executed: the executed copy (outputs, tracebacks).
        output_dir: the notebook's output folder (``results.json``, ``figures/``, runs).
        status: ``ok``, ``failed`` (a cell raised, the kernel died) or ``unexpected`` (every cell ran
            but the central run did not end as the notebook expected, or none was recorded).
        duration_s: wall time in seconds.
        parameters: the values injected. error: for a failure, ``cell`` (index in the executed
            copy), ``exec_count`` (the ``In [N]`` number), ``ename``, ``evalue``, ``source`` (the
            cell's first lines); for ``unexpected``, ``run``, ``expected``, ``status`` and ``message``
            of the central run too (``cell`` None).
        central: the central run as recorded (:func:`central_outcome`), or None.
    """

    name: str
    source: str
    executed: str
    output_dir: str
    status: str
    duration_s: float
    parameters: dict = field(default_factory=dict)
    error: dict | None = None
    central: dict | None = None


@dataclass(frozen=True)
class RunAllResult:
    """All executed notebooks and the report."""

    output_dir: str
    runs: tuple[NotebookRun, ...]
    report: str | None

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.runs)

    @property
    def failed(self) -> tuple[NotebookRun, ...]:
        return tuple(r for r in self.runs if r.status != "ok")

    def to_frame(self):
        import pandas as pd
        return pd.DataFrame([{"notebook": r.name, "status": r.status, "central run": _central_cell(r.central),
                              "duration s": round(r.duration_s, 1), "executed": r.executed,
                              "error": _error_line(r.error)} for r in self.runs])

    def _repr_html_(self) -> str:
        return self.to_frame().to_html(index=False)


def _central_cell(central: dict | None) -> str:
    """The central run in one table cell: ``label: status (expected X)``."""
    if not central:
        return ""
    mark = "" if central.get("as_expected") else " — NOT AS EXPECTED"
    return f"{central.get('run')}: {central.get('status')} (expected {central.get('expected')}){mark}"


def _error_line(error: dict | None) -> str:
    if not error:
        return ""
    if error.get("cell") is None and "expected" in error:
        return f"central run {error.get('run')!r}: {error.get('evalue')}"
    return f"cell {error['cell']}: {error['ename']}: {error['evalue']}"


def central_outcome(results: dict | None, declares_expected: bool | str) -> tuple[dict | None, dict | None]:
    """Did the notebook's central run end as the notebook expected?

    Args:
        results: the notebook's ``results.json`` (None when it wrote none).
        declares_expected: the notebook has an ``EXPECTED_OUTCOME`` parameter (its value when a string).

    Returns:
        ``(central, error)``: ``central`` as recorded (``run``, ``status``, ``expected``, ``message``,
        ``as_expected``) or None; ``error`` None when it ended as expected (or the notebook declares
        no expectation), else ``{"cell": None, "ename": "UnexpectedOutcome", "evalue", "run",
        "status", "expected", "message"}``.
    """
    central = (results or {}).get("central")
    expected = (central or {}).get("expected")
    if expected is None and isinstance(declares_expected, str):
        expected = declares_expected
    if expected is None and not declares_expected:
        return central, None
    if not central or central.get("run") is None:
        why = ("the notebook wrote no results.json" if results is None else
               "results.record(...) names no central run (central=LABEL, expected=EXPECTED_OUTCOME)")
        return central, {"cell": None, "exec_count": None, "ename": "UnexpectedOutcome", "run": None,
                         "status": None, "expected": expected, "message": why,
                         "evalue": f"no central run recorded: {why}"}
    if central.get("status") == expected:
        return central, None
    msg = central.get("message") or ""
    return central, {"cell": None, "exec_count": None, "ename": "UnexpectedOutcome", "run": central.get("run"),
                     "status": central.get("status"), "expected": expected, "message": msg,
                     "evalue": f"ended {central.get('status')}, expected {expected}: {msg}"}


def list_notebooks(notebooks_dir: str | os.PathLike | None = None) -> list[Path]:
    """The numbered notebooks ``NN_*.ipynb`` in order.

    Raises:
        RunAllError: the folder does not exist or holds none.
    """
    folder = Path(notebooks_dir) if notebooks_dir else NOTEBOOKS_DIR
    found = sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb") if p.is_file())
    if not found:
        raise RunAllError(f"--notebooks-dir {folder}: no numbered notebooks (NN_name.ipynb) there; point it at the "
                          "cookbook's notebooks/ folder")
    return found


def select(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    """Keep the notebooks named in ``only`` (a number ``03``/``3``, a prefix ``03_zero3`` or a file name; a
    comma-separated list such as ``04,06`` counts as its names).

    Raises:
        RunAllError: a name that matches no notebook (lists the available ones).
    """
    if not only:
        return notebooks
    keep = []
    for want in (part.strip() for item in only for part in str(item).split(",") if part.strip()):
        w = want.removesuffix(".ipynb")
        if w.isdigit():
            w = f"{int(w):02d}"
        hits = [p for p in notebooks if p.stem == w or p.stem.startswith(w + "_") or p.stem.split("_")[0] == w]
        if not hits:
            raise RunAllError(f"--only {want}: no such notebook; choose from {', '.join(p.stem for p in notebooks)}")
        keep += [p for p in hits if p not in keep]
    return [p for p in notebooks if p in keep]


def parse_value(text: str):
    """A ``-p`` value: ``None``/``null`` -> None, ``True``/``False`` -> bool, integer, float, else the string
    (the rules of papermill's own ``-p``)."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def declared_parameters(path: Path) -> dict:
    """Names declared in a notebook's ``parameters`` cell -> their inferred type name (papermill's
    ``inspect_notebook``)."""
    import papermill as pm
    return {name: info.get("inferred_type_name") for name, info in pm.inspect_notebook(str(path)).items()}


#: Python types a notebook parameter of each declared type (papermill's ``inferred_type_name`` for
#: ``NAME: int = 3``) accepts: an int is a float, a bool is only a bool (``True`` is an ``int`` in Python).
_ACCEPTED = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def type_problem(value, declared: str | None) -> str | None:
    """Why ``value`` cannot be a notebook parameter declared ``declared`` (``int``/``float``/``bool``/``str``),
    or None when it can (or the type is not one of those: not checked). Raises nothing."""
    accepted = _ACCEPTED.get(declared or "")
    if accepted is None:
        return None
    if isinstance(value, bool) and declared != "bool":
        ok = False
    else:
        ok = isinstance(value, accepted)
    if ok:
        return None
    got = "null" if value is None else type(value).__name__
    example = {"int": "3", "float": "1.0e-5", "bool": "true or false", "str": "text (quote it)"}[declared]
    return f"{value!r} is {got}, the notebook declares {declared}; give a{'n' if declared == 'int' else ''} {declared}, e.g. {example}"


def parameters_for(notebooks: list[Path], pairs: list[tuple[str, str]]) -> dict[str, dict]:
    """Route ``-p NAME VALUE`` pairs to the notebooks that declare ``NAME``.

    ``NAME`` may be qualified with a notebook number, ``06:MODEL``, to reach that notebook only.

    Returns:
        notebook stem -> {name: value}.

    Raises:
        RunAllError: a name no selected notebook declares, a value not of its declared type
            (:func:`type_problem`; a declared ``str`` keeps the text as typed), or ``OUTPUT_DIR`` (set with
            --output-dir).
    """
    declared = {p.stem: declared_parameters(p) for p in notebooks}
    out: dict[str, dict] = {p.stem: {} for p in notebooks}
    # a qualified name (06:MODEL) wins over the plain one (MODEL), whatever their order
    pairs = sorted(pairs, key=lambda pair: ":" in pair[0])
    for raw_name, raw_value in pairs:
        target, name = (raw_name.split(":", 1) if ":" in raw_name else (None, raw_name))
        if name == "OUTPUT_DIR":
            raise RunAllError("-p OUTPUT_DIR: run-all gives each notebook its own folder under --output-dir; "
                              "use --output-dir DIR instead")
        if target is not None:
            target = f"{int(target):02d}" if target.isdigit() else target
        value = parse_value(raw_value)
        hit = False
        for stem, names in declared.items():
            if target is not None and not (stem == target or stem.split("_")[0] == target):
                continue
            if name in names:
                v = value
                if names[name] == "str" and not isinstance(v, str):
                    v = raw_value  # papermill-style parsing made a number of it; the notebook declares str
                problem = type_problem(v, names[name])
                if problem:
                    raise RunAllError(f"-p {raw_name} {raw_value}: notebook {stem}: {name}: {problem}")
                out[stem][name] = v
                hit = True
        if not hit:
            where = f"notebook {target}" if target else "any selected notebook"
            known = sorted({n for names in declared.values() for n in names})
            raise RunAllError(f"-p {raw_name} {raw_value}: {where} has no parameter {name!r}; "
                              f"parameters: {', '.join(known)}")
    return out


#: The section of a parameter file that goes to every notebook declaring the key.
SHARED_SECTION = "shared"


def load_params_file(path: str | os.PathLike, notebooks: list[Path]) -> dict[str, dict]:
    """Read a parameter file (YAML) and route its values to the notebooks.

    Layout (``notebooks/params/*.yaml``; notebooks/README.md)::

        shared:                    # every notebook that declares the key gets it
          EMULATE_GPU_MEMORY_GIB: 24
          LR: 1.0e-5
        02_zero2:                  # one notebook (its name, or its number "02"): wins over shared
          MODEL: qwen2-14b-share8
          EXPECTED_OUTCOME: gpu_oom

    Args:
        path: the YAML file.
        notebooks: every notebook the file may name (its keys are checked against their ``parameters``
            cells, also for notebooks not selected with ``--only``).

    Returns:
        notebook stem -> {name: value} (shared values, then the notebook's own section over them).

    Raises:
        RunAllError: an unreadable file, a section that names no notebook, a key no notebook (or not the
            named notebook) declares, a value not of the type the notebook declares (:func:`type_problem`),
            or ``OUTPUT_DIR``; the message names the file, the notebook, the key
            and the parameters the notebook has.
    """
    import yaml
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise RunAllError(f"--params {p}: no such file; the shipped ones are in notebooks/params/") from None
    except yaml.YAMLError as exc:
        raise RunAllError(f"--params {p}: not valid YAML ({exc})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RunAllError(f"--params {p}: expected a mapping of sections (shared:, 02_zero2:, ...), got "
                          f"{type(data).__name__}")
    declared = {nb.stem: declared_parameters(nb) for nb in notebooks}
    by_key = {}
    for stem in declared:
        by_key[stem] = stem
        by_key.setdefault(stem.split("_")[0], stem)
    out: dict[str, dict] = {stem: {} for stem in declared}
    shared = data.get(SHARED_SECTION) or {}
    if not isinstance(shared, dict):
        raise RunAllError(f"--params {p}: section {SHARED_SECTION!r} must map parameter names to values")
    for name, value in shared.items():
        if name == "OUTPUT_DIR":
            raise RunAllError(f"--params {p}: {SHARED_SECTION}: OUTPUT_DIR is set by run-all (--output-dir)")
        hit = [stem for stem, names in declared.items() if name in names]
        if not hit:
            known = sorted({n for names in declared.values() for n in names})
            raise RunAllError(f"--params {p}: {SHARED_SECTION}: no notebook has a parameter {name!r}; "
                              f"parameters: {', '.join(known)}")
        for stem in hit:
            problem = type_problem(value, declared[stem][name])
            if problem:
                raise RunAllError(f"--params {p}: {SHARED_SECTION}: {name}: {problem} (notebook {stem}); fix the "
                                  f"value in {p}")
            out[stem][name] = value
    for section, values in data.items():
        if section == SHARED_SECTION:
            continue
        key = str(section).removesuffix(".ipynb")
        key = f"{int(key):02d}" if key.isdigit() else key
        stem = by_key.get(key)
        if stem is None:
            raise RunAllError(f"--params {p}: section {section!r} names no notebook; sections are "
                              f"{SHARED_SECTION!r} or a notebook: {', '.join(declared)}")
        if not isinstance(values, dict):
            raise RunAllError(f"--params {p}: section {section!r} must map parameter names to values")
        for name, value in values.items():
            if name == "OUTPUT_DIR":
                raise RunAllError(f"--params {p}: {stem}: OUTPUT_DIR is set by run-all (--output-dir)")
            if name not in declared[stem]:
                raise RunAllError(f"--params {p}: notebook {stem} has no parameter {name!r}; its parameters: "
                                  f"{', '.join(n for n in declared[stem] if n != 'OUTPUT_DIR')}")
            problem = type_problem(value, declared[stem][name])
            if problem:
                raise RunAllError(f"--params {p}: section {section!r}: {name}: {problem} (notebook {stem}); fix the "
                                  f"value in {p}")
            out[stem][name] = value
    return out


def _quiet_kernel_logs() -> None:
    """One line a notebook: no kernel transport warnings, no papermill/nbclient log chatter."""
    for name in ("papermill", "nbclient", "traitlets", "jupyter_client", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(jupyter_client|zmq|nbclient|papermill)(\..*)?")
    warnings.filterwarnings("ignore", message=r".*(Proactor|event loop|transport).*")


#: DeepSpeed's accelerator-detection log lines (``deepspeed/accelerator/real_accelerator.py`` ``get_accelerator``:
#: "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it." at WARNING,
#: "Setting ds_accelerator to cpu (auto detect)" at INFO), printed by every process that imports DeepSpeed on a
#: machine without a GPU: the ranks and helper processes a notebook starts.
DEEPSPEED_ACCELERATOR_LINE = re.compile(rb"\[real_accelerator\.py:\d+:\w+\] Setting (?:ds_)?accelerator to ")


def _pass_through(fd: int, dest, drop=DEEPSPEED_ACCELERATOR_LINE) -> None:
    """Copy the lines read from pipe ``fd`` to ``dest`` (a text stream), leaving out those ``drop`` matches; until
    every writer has closed the pipe."""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        pending = b""
        while True:
            chunk = pipe.read(65536)
            *lines, pending = (pending + chunk).split(b"\n")
            if not chunk and pending:  # the last line, without its newline
                lines, pending = lines + [pending], b""
            kept = [ln for ln in lines if not drop.search(ln)]
            if kept:
                try:
                    dest.write(b"\n".join(kept).decode(errors="replace") + "\n")
                    dest.flush()
                except (OSError, ValueError):  # the console went away: keep draining the pipe
                    pass
            if not chunk:
                return


def _filtered_console_kernel_manager():
    """A Jupyter kernel manager class (for papermill's ``kernel_manager_class``) whose kernel writes its console
    (file descriptors 1 and 2) into pipes that this process copies to its own stdout and stderr without
    DeepSpeed's accelerator-detection lines (:data:`DEEPSPEED_ACCELERATOR_LINE`).

    Why: ipykernel captures what the kernel's child processes (the training ranks, helper probes) write to
    file descriptors 1 and 2 and sends it to the notebook *and* to the kernel's own console (``OutStream.
    _watch_pipe_fd``: "the original stdout/err, to capture errors in terminals"), which is run-all's console.
    The notebook keeps every line; run-all's console keeps every other line (tracebacks, errors). Returns
    ``(class, readers)``: ``readers`` collects the copying threads, to be joined once the kernel is gone."""
    import threading
    from jupyter_client.manager import AsyncKernelManager

    readers: list = []

    class FilteredConsoleKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            if "stdout" in kw or "stderr" in kw:
                return await super()._async_launch_kernel(kernel_cmd, **kw)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                await super()._async_launch_kernel(kernel_cmd, stdout=out_w, stderr=err_w, **kw)
            except BaseException:
                os.close(out_r)
                os.close(err_r)
                raise
            finally:
                os.close(out_w)  # the kernel holds its copies; the readers end when it and its children close them
                os.close(err_w)
            for fd, dest in ((out_r, sys.stdout), (err_r, sys.stderr)):
                t = threading.Thread(target=_pass_through, args=(fd, dest), daemon=True, name="run-all-console")
                t.start()
                readers.append(t)

    return FilteredConsoleKernelManager, readers


def _expected_default(path: Path) -> bool | str:
    """The default of a notebook's ``EXPECTED_OUTCOME`` parameter (a string), True when it is not a plain
    string literal, False when the notebook has none."""
    import ast
    import papermill as pm
    info = pm.inspect_notebook(str(path)).get("EXPECTED_OUTCOME")
    if info is None:
        return False
    try:
        value = ast.literal_eval(str(info.get("default")))
    except (ValueError, SyntaxError):
        return True
    return value if isinstance(value, str) else True


def _kernel_env() -> None:
    """Make the default ``python3`` kernel (``argv: ["python", ...]``) start this interpreter: put its
    folder first on PATH (the kernel process inherits the environment)."""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = bindir + (os.pathsep + path if path else "")


def _error_info(exc, executed: Path) -> dict:
    info = {"cell": getattr(exc, "cell_index", None), "exec_count": getattr(exc, "exec_count", None),
            "ename": getattr(exc, "ename", type(exc).__name__), "evalue": getattr(exc, "evalue", str(exc))}
    src = getattr(exc, "source", None)
    if src:
        info["source"] = "\n".join(str(src).splitlines()[:3])
    if info["cell"] is None and executed.is_file():  # find the first cell with an error output
        try:
            import nbformat
            nb = nbformat.read(str(executed), as_version=4)
            for i, cell in enumerate(nb.cells):
                for o in cell.get("outputs", []):
                    if o.get("output_type") == "error":
                        info.update(cell=i, exec_count=cell.get("execution_count"), ename=o.get("ename"),
                                    evalue=o.get("evalue"))
                        raise StopIteration
        except StopIteration:
            pass
        except Exception:  # noqa: BLE001 - best effort
            pass
    return info


def run_all(output_dir: str | os.PathLike = DEFAULT_OUTPUT_DIR, *, only: list[str] | None = None,
            parameters: list[tuple[str, str]] | None = None, notebooks_dir: str | os.PathLike | None = None,
            kernel_name: str = "python3", progress: bool = True, stop_on_failure: bool = False,
            cell_timeout_s: int | None = None, report: bool = True, params_file: str | os.PathLike | None = None,
            echo=None) -> RunAllResult:
    """Execute the notebooks with papermill, in order, and write the report.

    Args:
        output_dir: folder for the executed notebooks, their output folders and ``report.html``.
        only: notebook numbers or names to run (default: all).
        parameters: ``(NAME, VALUE)`` pairs as given to ``-p`` (see :func:`parameters_for`); they win
            over ``params_file``.
        params_file: a YAML parameter file (:func:`load_params_file`).
        notebooks_dir: where the notebooks are (default: the repository's ``notebooks/``).
        kernel_name: Jupyter kernel to execute with.
        progress: overall tqdm bar over notebooks plus papermill's bar over cells and the kernel's log
            messages (False: quiet, and DeepSpeed's accelerator-detection lines that the notebooks' processes
            print are left out of this console; the executed notebooks keep them).
        echo: called with one line per notebook as it finishes (None: nothing printed).
        stop_on_failure: do not run the notebooks after a failed one.
        cell_timeout_s: papermill's per-cell execution timeout (None: no limit).
        report: write ``report.html``.

    Returns:
        :class:`RunAllResult`.

    Raises:
        RunAllError: unknown notebook, parameter or parameter-file key (before anything runs).
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out = Path(output_dir).resolve()
    if out.exists() and not out.is_dir():
        raise RunAllError(f"--output-dir={out}: is a file; give a folder (it will be created)")
    every = list_notebooks(notebooks_dir)
    notebooks = select(every, only)
    from_file = load_params_file(params_file, every) if params_file else {}
    from_cli = parameters_for(notebooks, list(parameters or []))
    per_notebook = {nb.stem: {**from_file.get(nb.stem, {}), **from_cli[nb.stem]} for nb in notebooks}
    declares_expected = {nb.stem: _expected_default(nb) for nb in notebooks}
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunAllError(f"--output-dir={out}: cannot be created ({exc.strerror}); give a folder you can write "
                          "to") from None
    _kernel_env()
    if not progress:
        _quiet_kernel_logs()
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(notebooks), desc="notebooks", unit="nb", position=0)
    runs: list[NotebookRun] = []
    try:
        for nb in notebooks:
            name = nb.stem
            nb_out = out / name
            nb_out.mkdir(parents=True, exist_ok=True)
            (nb_out / "results.json").unlink(missing_ok=True)  # an earlier run's results never stand in for this one
            executed = out / nb.name
            params = {"OUTPUT_DIR": str(nb_out), **per_notebook[name]}
            if bar is not None:
                bar.set_description(f"notebooks ({name})")
            t0 = time.time()
            error = None
            readers: list = []
            try:
                quiet = {}
                if not progress:  # the console: one line a notebook (DeepSpeed's accelerator lines left out)
                    manager, readers = _filtered_console_kernel_manager()
                    quiet = {"extra_arguments": ["--IPKernelApp.log_level=CRITICAL"], "kernel_manager_class": manager}
                pm.execute_notebook(str(nb), str(executed), parameters=params, kernel_name=kernel_name,
                                    progress_bar=progress, cwd=str(nb_out), execution_timeout=cell_timeout_s,
                                    log_output=False, **quiet)
                status = "ok"
            except PapermillExecutionError as exc:
                status, error = "failed", _error_info(exc, executed)
            except Exception as exc:  # noqa: BLE001 - kernel died, timeout, ...: still a named failure
                status, error = "failed", _error_info(exc, executed)
            dt = time.time() - t0
            for t in readers:  # the kernel's last console lines before this notebook's line
                t.join(timeout=5)
            from .results import load_results
            central, unexpected = central_outcome(load_results(nb_out),
                                                  params.get("EXPECTED_OUTCOME", declares_expected[name]))
            if status == "ok" and unexpected:
                status, error = "unexpected", unexpected
            run = NotebookRun(name=name, source=str(nb), executed=str(executed), output_dir=str(nb_out),
                              status=status, duration_s=dt, parameters=params, error=error, central=central)
            runs.append(run)
            if echo is not None:
                (bar.write if bar is not None else echo)(console_line(run))
            elif error and bar is not None:
                bar.write(console_line(run))
            if bar is not None:
                bar.update(1)
            if error and stop_on_failure:
                break
    finally:
        if bar is not None:
            bar.close()
    entries = [asdict(r) for r in runs]
    if only:  # the notebooks not picked keep their earlier results in this folder (report and run-all.json)
        entries = merge_earlier(out, entries, [nb.stem for nb in every])
    report_path = None
    if report:
        from .report import write_html_report
        report_path = str(write_html_report(out, entries))
    summary = {"written": _dt.datetime.now().isoformat(timespec="seconds"), "output_dir": str(out),
               "ok": all(r.status == "ok" for r in runs), "report": report_path,
               "params_file": str(params_file) if params_file else None,
               "ran_now": [r.name for r in runs], "notebooks": entries}
    (out / "run-all.json").write_text(json.dumps(summary, indent=1, default=str))
    return RunAllResult(output_dir=str(out), runs=tuple(runs), report=report_path)


def merge_earlier(out: Path, entries: list[dict], order: list[str]) -> list[dict]:
    """Add the notebooks an earlier ``run-all`` wrote into ``out`` that this one (``--only``) did not run.

    ``run-all --only 06`` into a folder that already holds 00-05 must not drop them from the report: each
    earlier entry of ``out/run-all.json`` whose ``results.json`` is still in ``out/NAME/`` is kept, re-rooted
    at ``out`` (the folder may have been moved or copied from another machine) and marked
    ``earlier_run`` with that run-all's date. A notebook with no entry there (its run-all was stopped
    before it wrote ``run-all.json``, e.g. by a time limit) is recovered from its folder when both
    ``NAME/results.json`` (written by the notebook's last cell) and the executed ``NAME.ipynb`` exist:
    status ``failed`` if the executed copy holds an error output, else from its central run
    (:func:`central_outcome`), marked ``earlier_run: "recovered from the folder"``. Entries come back in
    notebook order.

    Args:
        out: the run-all output folder. entries: this invocation's entries (``asdict(NotebookRun)``).
        order: every notebook name, in order.

    Returns:
        the merged entries (this run's win).
    """
    from .results import load_results
    index = out / "run-all.json"
    try:
        earlier = json.loads(index.read_text())
    except (OSError, ValueError):
        earlier = {}
    now = {e["name"]: e for e in entries}
    kept = {}

    def broken(name: str) -> str | None:
        """Why ``name``'s results cannot be read (None: they can)."""
        path = out / name / "results.json"
        if not path.is_file():
            return f"{path} is missing (the notebook did not reach its results.record(...) cell)"
        if load_results(out / name) is None:
            return f"{path} is not valid JSON"
        return None

    for e in earlier.get("notebooks") or []:
        name = e.get("name")
        if name in now or name not in order:
            continue
        why = broken(name)
        if why and not (out / f"{name}.ipynb").is_file():
            continue
        e = dict(e, output_dir=str(out / name), executed=str(out / f"{name}.ipynb"),
                 earlier_run=e.get("earlier_run") or earlier.get("written"))
        if why:
            e.update(status="failed", error={"cell": None, "exec_count": None, "ename": "MissingResults",
                                             "evalue": why}, central=None)
        kept[name] = e
    for name in order:
        executed = out / f"{name}.ipynb"
        if name in now or name in kept or not executed.is_file():
            continue
        why = broken(name)
        if why:
            kept[name] = {"name": name, "source": None, "executed": str(executed), "output_dir": str(out / name),
                          "status": "failed", "duration_s": None, "parameters": {}, "central": None,
                          "error": {"cell": None, "exec_count": None, "ename": "MissingResults", "evalue": why},
                          "earlier_run": "recovered from the folder"}
            continue
        import nbformat
        nb = nbformat.read(str(executed), as_version=4)
        errors = [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        params = nb.metadata.get("papermill", {}).get("parameters", {})
        central, unexpected = central_outcome(load_results(out / name), params.get("EXPECTED_OUTCOME", False))
        error = ({"cell": errors[0][0], "exec_count": None, "ename": errors[0][1].get("ename"),
                  "evalue": errors[0][1].get("evalue")} if errors else unexpected)
        status = "failed" if errors else ("unexpected" if unexpected else "ok")
        kept[name] = {"name": name, "source": None, "executed": str(executed), "output_dir": str(out / name),
                      "status": status, "duration_s": nb.metadata.get("papermill", {}).get("duration"),
                      "parameters": params, "error": error, "central": central,
                      "earlier_run": "recovered from the folder"}
    return [now.get(n) or kept[n] for n in order if n in now or n in kept]


def console_line(run: NotebookRun) -> str:
    """One line a notebook (two with its failure): status, name, time, the central run, the executed copy."""
    central = f"  [{_central_cell(run.central)}]" if run.central else ""
    line = f"{run.status:>10}  {run.name:<22} {run.duration_s:7.1f} s{central}  {run.executed}"
    err = run.error
    if err and err.get("cell") is not None:
        line += f"\n            failed in cell {err['cell']} (In [{err['exec_count']}]): {err['ename']}: {err['evalue']}"
    elif err:
        line += f"\n            central run {err.get('run')!r} {err.get('evalue')}"
    return line


def _failure_name(r: NotebookRun) -> str:
    err = r.error or {}
    if r.status == "unexpected":
        return (f"{r.name} (central run {err.get('run')!r} ended {err.get('status')}, expected {err.get('expected')}: "
                f"{err.get('message')})")
    return f"{r.name} (cell {err.get('cell', '?')})"


def rebuild_report(output_dir: str | os.PathLike, notebooks_dir: str | os.PathLike | None = None) -> Path:
    """Rewrite ``report.html`` and ``run-all.json`` of a run-all folder from what it holds, running nothing.

    For folders assembled from several ``run-all --only`` calls (or copied from a GPU box): every
    notebook with its ``results.json`` and executed copy there is taken, as :func:`merge_earlier` keeps
    or recovers it.

    Raises:
        RunAllError: the folder holds no notebook results.
    """
    out = Path(output_dir).resolve()
    if not out.is_dir():
        raise RunAllError(f"--output-dir={out}: no such folder; give the folder an earlier `cookbook run-all` wrote")
    names = [nb.stem for nb in list_notebooks(notebooks_dir)]
    entries = merge_earlier(out, [], names)
    if not entries:
        raise RunAllError(f"--output-dir={out}: no executed notebook there (NN_name.ipynb beside NN_name/results.json); "
                          "give the folder an earlier `cookbook run-all` wrote")
    from .report import write_html_report
    report_path = write_html_report(out, entries)
    summary = {"written": _dt.datetime.now().isoformat(timespec="seconds"), "output_dir": str(out),
               "ok": all(e["status"] == "ok" for e in entries), "report": str(report_path), "params_file": None,
               "ran_now": [], "rebuilt_from_folder": True, "notebooks": entries}
    (out / "run-all.json").write_text(json.dumps(summary, indent=1, default=str))
    return report_path


def _cli(args) -> int:
    verbose = bool(getattr(args, "verbose", False)) and not args.no_progress
    if getattr(args, "report_only", False):
        ignored = [f for f, v in (("--only", args.only), ("-p", args.parameter), ("--params", args.params)) if v]
        if ignored:
            print(f"error: --report-only runs nothing, so {', '.join(ignored)} would be ignored: drop "
                  f"{'them' if len(ignored) > 1 else 'it'}, or drop --report-only to run notebooks", file=sys.stderr)
            return 2
        try:
            path = rebuild_report(args.output_dir, args.notebooks_dir)
        except RunAllError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"report: {path}")
        bad = [e for e in json.loads((Path(path).parent / "run-all.json").read_text())["notebooks"] if e["status"] != "ok"]
        for e in bad:
            print(f"error: {e['name']}: {e['status']}: {(e.get('error') or {}).get('evalue')}", file=sys.stderr)
        return 1 if bad else 0
    try:
        result = run_all(args.output_dir, only=args.only, parameters=[tuple(p) for p in (args.parameter or [])],
                         notebooks_dir=args.notebooks_dir, kernel_name=args.kernel, progress=verbose,
                         stop_on_failure=args.stop_on_failure, cell_timeout_s=args.cell_timeout,
                         params_file=args.params, echo=print)
    except RunAllError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result.report:
        print(f"report: {result.report}")
    if not result.ok:
        names = "; ".join(_failure_name(r) for r in result.failed)
        print(f"error: {len(result.failed)} notebook(s) did not end as expected: {names}; the executed copies keep "
              "the tracebacks and the runs' messages", file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    """Add ``cookbook run-all [--output-dir DIR] [--only 03 ...] [--params FILE] [-p NAME VALUE ...] [--verbose]``."""
    p = subparsers.add_parser(
        "run-all", help="execute every notebook (papermill) and write a report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="GPU box example (one H200 capped at 24 GiB as an RTX 4090):\n"
               "  cookbook run-all --params notebooks/params/gpu-1x24gib.yaml --output-dir runs/gpu\n"
               "8 GPUs: notebooks/params/gpu-8x24gib.yaml (2 and 4: gpu-2x24gib.yaml, gpu-4x24gib.yaml).",
        description="Execute the cookbook's notebooks in order with papermill, save each executed copy, and write "
                    "report.html (figures and the ZeRO variants compared: memory, throughput, loss). Without a GPU "
                    "the notebooks run their CPU rehearsal; -p selects real sizes on GPUs.")
    p.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, help=f"output folder (default {DEFAULT_OUTPUT_DIR})")
    p.add_argument("--only", nargs="+", default=None, metavar="NB", help="run only these notebooks (03, 03_zero3, ...)")
    p.add_argument("--params", default=None, metavar="FILE",
                   help="YAML parameter file: a 'shared:' section and a section per notebook (notebooks/params/)")
    p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="set a notebook parameter (every notebook that declares it; 06:NAME for notebook 06 only); "
                        "wins over --params")
    p.add_argument("--notebooks-dir", default=None, help="folder of the notebooks (default: the cookbook's notebooks/)")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name (default python3)")
    p.add_argument("--cell-timeout", type=int, default=None, help="seconds one cell may run (default: no limit)")
    p.add_argument("--stop-on-failure", action="store_true", help="stop at the first failed notebook")
    p.add_argument("--verbose", action="store_true",
                   help="papermill's progress bars of cells and the kernel's log messages (default: one line a notebook)")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rebuild report.html and run-all.json from the notebooks' results in --output-dir")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (the default; kept for scripts)")
    p.set_defaults(func=_cli)


__all__ = ["DEFAULT_OUTPUT_DIR", "NOTEBOOKS_DIR", "SHARED_SECTION", "NotebookRun", "RunAllError", "RunAllResult",
           "central_outcome", "console_line", "declared_parameters", "list_notebooks", "load_params_file", "parameters_for", "parse_value", "register", "run_all", "select"]
