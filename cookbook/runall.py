"""``cookbook run-all``: execute every notebook with papermill, in order, and write a report.

    cookbook run-all [--output-dir DIR] [--only 03 ...] [-p NAME VALUE ...]

For each notebook ``notebooks/NN_*.ipynb`` (in order; ``--only`` picks some by number or name) it

1. injects ``OUTPUT_DIR = DIR/NN_name`` and the ``-p`` values the notebook declares in its
   ``parameters`` cell (``-p MODEL qwen-14b`` goes to every notebook that has ``MODEL``;
   ``-p 06:MODEL llama-7b`` to notebook 06 only). Values are read like papermill's own ``-p``:
   ``None``, ``True``/``False``, integers, floats, else strings;
2. executes it with papermill (its own progress bar of cells under an overall bar of notebooks),
   with the working directory set to the notebook's output folder, and saves the executed copy as
   ``DIR/NN_name.ipynb`` — also when a cell fails (papermill writes it, with the traceback, before
   raising);
3. writes ``DIR/report.html`` (every notebook's headline numbers, tables and figures, and the ZeRO
   variants side by side; :func:`cookbook.report.write_html_report`) and ``DIR/run-all.json``.

On a GPU box the same notebooks run the real sizes, e.g. on 8 H200s acting as 8 × RTX 4090::

    cookbook run-all --output-dir runs/gpu -p MODEL qwen-14b -p NUM_GPUS 8 -p SEQ_LEN 512 \
        -p MICRO_BATCH 1 -p GRAD_ACCUM 16 -p EMULATE_GPU_MEMORY_GIB 24 -p LR 1e-5 -p MAX_STEPS 20 \
        -p 06:MODEL llama-7b -p 06:NUM_GPUS 1 -p 06:SEQ_LEN 1024 -p 06:MICRO_BATCH 2 -p 06:GRAD_ACCUM 8

Exit code 0 when every notebook ran; 1 when one failed (the message names the notebook and the
cell); 2 for bad arguments. The notebooks are independent (each writes only under its own folder),
so a failure does not stop the others unless ``--stop-on-failure``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
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
        status: ``ok`` or ``failed``. duration_s: wall time in seconds.
        parameters: the values injected. error: for a failure, ``cell`` (index in the executed
            copy), ``exec_count`` (the ``In [N]`` number), ``ename``, ``evalue``, ``source`` (the
            cell's first lines).
    """

    name: str
    source: str
    executed: str
    output_dir: str
    status: str
    duration_s: float
    parameters: dict = field(default_factory=dict)
    error: dict | None = None


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
        return pd.DataFrame([{"notebook": r.name, "status": r.status, "duration s": round(r.duration_s, 1),
                              "executed": r.executed,
                              "error": (f"cell {r.error['cell']}: {r.error['ename']}: {r.error['evalue']}"
                                        if r.error else "")} for r in self.runs])

    def _repr_html_(self) -> str:
        return self.to_frame().to_html(index=False)


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
    """Keep the notebooks named in ``only`` (a number ``03``/``3``, a prefix ``03_zero3`` or a file name).

    Raises:
        RunAllError: a name that matches no notebook (lists the available ones).
    """
    if not only:
        return notebooks
    keep = []
    for want in only:
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


def parameters_for(notebooks: list[Path], pairs: list[tuple[str, str]]) -> dict[str, dict]:
    """Route ``-p NAME VALUE`` pairs to the notebooks that declare ``NAME``.

    ``NAME`` may be qualified with a notebook number, ``06:MODEL``, to reach that notebook only.

    Returns:
        notebook stem -> {name: value}.

    Raises:
        RunAllError: a name no selected notebook declares, or ``OUTPUT_DIR`` (set with --output-dir).
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
                out[stem][name] = value
                hit = True
        if not hit:
            where = f"notebook {target}" if target else "any selected notebook"
            known = sorted({n for names in declared.values() for n in names})
            raise RunAllError(f"-p {raw_name} {raw_value}: {where} has no parameter {name!r}; "
                              f"parameters: {', '.join(known)}")
    return out


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
            cell_timeout_s: int | None = None, report: bool = True) -> RunAllResult:
    """Execute the notebooks with papermill, in order, and write the report.

    Args:
        output_dir: folder for the executed notebooks, their output folders and ``report.html``.
        only: notebook numbers or names to run (default: all).
        parameters: ``(NAME, VALUE)`` pairs as given to ``-p`` (see :func:`parameters_for`).
        notebooks_dir: where the notebooks are (default: the repository's ``notebooks/``).
        kernel_name: Jupyter kernel to execute with.
        progress: overall tqdm bar over notebooks plus papermill's bar over cells.
        stop_on_failure: do not run the notebooks after a failed one.
        cell_timeout_s: papermill's per-cell execution timeout (None: no limit).
        report: write ``report.html``.

    Returns:
        :class:`RunAllResult`.

    Raises:
        RunAllError: unknown notebook or parameter (before anything runs).
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out = Path(output_dir).resolve()
    if out.exists() and not out.is_dir():
        raise RunAllError(f"--output-dir={out}: is a file; give a folder (it will be created)")
    notebooks = select(list_notebooks(notebooks_dir), only)
    per_notebook = parameters_for(notebooks, list(parameters or []))
    out.mkdir(parents=True, exist_ok=True)
    _kernel_env()
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
            executed = out / nb.name
            params = {"OUTPUT_DIR": str(nb_out), **per_notebook[name]}
            if bar is not None:
                bar.set_description(f"notebooks ({name})")
            t0 = time.time()
            error = None
            try:
                pm.execute_notebook(str(nb), str(executed), parameters=params, kernel_name=kernel_name,
                                    progress_bar=progress, cwd=str(nb_out), execution_timeout=cell_timeout_s,
                                    log_output=False)
                status = "ok"
            except PapermillExecutionError as exc:
                status, error = "failed", _error_info(exc, executed)
            except Exception as exc:  # noqa: BLE001 - kernel died, timeout, ...: still a named failure
                status, error = "failed", _error_info(exc, executed)
            dt = time.time() - t0
            run = NotebookRun(name=name, source=str(nb), executed=str(executed), output_dir=str(nb_out),
                              status=status, duration_s=dt, parameters=params, error=error)
            runs.append(run)
            if error:
                msg = (f"notebook {nb.name} failed in cell {error['cell']} (In [{error['exec_count']}]): "
                       f"{error['ename']}: {error['evalue']}\n  executed copy with the traceback: {executed}")
                (bar.write if bar is not None else print)(msg)
            if bar is not None:
                bar.update(1)
            if error and stop_on_failure:
                break
    finally:
        if bar is not None:
            bar.close()
    report_path = None
    if report:
        from .report import write_html_report
        report_path = str(write_html_report(out, [asdict(r) for r in runs]))
    summary = {"written": _dt.datetime.now().isoformat(timespec="seconds"), "output_dir": str(out),
               "ok": all(r.status == "ok" for r in runs), "report": report_path,
               "notebooks": [asdict(r) for r in runs]}
    (out / "run-all.json").write_text(json.dumps(summary, indent=1, default=str))
    return RunAllResult(output_dir=str(out), runs=tuple(runs), report=report_path)


def _cli(args) -> int:
    try:
        result = run_all(args.output_dir, only=args.only, parameters=[tuple(p) for p in (args.parameter or [])],
                         notebooks_dir=args.notebooks_dir, kernel_name=args.kernel, progress=not args.no_progress,
                         stop_on_failure=args.stop_on_failure, cell_timeout_s=args.cell_timeout)
    except RunAllError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in result.runs:
        line = f"{r.status:>6}  {r.name:<22} {r.duration_s:7.1f} s  {r.executed}"
        if r.error:
            line += f"\n        failed in cell {r.error['cell']} (In [{r.error['exec_count']}]): {r.error['ename']}: {r.error['evalue']}"
        print(line)
    if result.report:
        print(f"report: {result.report}")
    if not result.ok:
        names = ", ".join(f"{r.name} (cell {r.error['cell'] if r.error else '?'})" for r in result.failed)
        print(f"error: {len(result.failed)} notebook(s) failed: {names}; the executed copies keep the tracebacks",
              file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    """Add ``cookbook run-all [--output-dir DIR] [--only 03 ...] [-p NAME VALUE ...]``."""
    p = subparsers.add_parser(
        "run-all", help="execute every notebook (papermill) and write a report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="GPU box example (8 GPUs capped at 24 GiB as RTX 4090s):\n"
               "  cookbook run-all --output-dir runs/gpu -p MODEL qwen-14b -p NUM_GPUS 8 -p SEQ_LEN 512 -p MICRO_BATCH 1 \\\n"
               "    -p GRAD_ACCUM 16 -p EMULATE_GPU_MEMORY_GIB 24 -p LR 1e-5 -p MAX_STEPS 20 \\\n"
               "    -p 06:MODEL llama-7b -p 06:NUM_GPUS 1 -p 06:SEQ_LEN 1024 -p 06:MICRO_BATCH 2 -p 06:GRAD_ACCUM 8",
        description="Execute the cookbook's notebooks in order with papermill, save each executed copy, and write "
                    "report.html (figures and the ZeRO variants compared: memory, throughput, loss). Without a GPU "
                    "the notebooks run their CPU rehearsal; -p selects real sizes on GPUs.")
    p.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, help=f"output folder (default {DEFAULT_OUTPUT_DIR})")
    p.add_argument("--only", nargs="+", default=None, metavar="NB", help="run only these notebooks (03, 03_zero3, ...)")
    p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="set a notebook parameter (every notebook that declares it; 06:NAME for notebook 06 only)")
    p.add_argument("--notebooks-dir", default=None, help="folder of the notebooks (default: the cookbook's notebooks/)")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name (default python3)")
    p.add_argument("--cell-timeout", type=int, default=None, help="seconds one cell may run (default: no limit)")
    p.add_argument("--stop-on-failure", action="store_true", help="stop at the first failed notebook")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cli)


__all__ = ["DEFAULT_OUTPUT_DIR", "NOTEBOOKS_DIR", "NotebookRun", "RunAllError", "RunAllResult", "declared_parameters",
           "list_notebooks", "parameters_for", "parse_value", "register", "run_all", "select"]
