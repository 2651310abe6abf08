"""The notebooks as source: is each ``notebooks/NN_*.ipynb`` committed clean, and make it so.

The ``.ipynb`` files are the source people edit (in JupyterLab); there is no generator. A clean
notebook has no outputs and no execution counts (stripped with ``nbstripout``, the standard tool),
the fixed notebook metadata :data:`METADATA` (no Python version, widget state or signature),
cell metadata holding only ``tags`` (the ``parameters`` tag papermill needs), and the layout
``nbformat`` writes (what JupyterLab's save writes too). Cell ids are kept: JupyterLab keeps them
stable, so a diff shows only the cells that changed.

    python -m cookbook.notebooks                 # check every notebook; exit 1 and say what is not clean
    python -m cookbook.notebooks --clean         # strip them in place (after saving in JupyterLab)
    python -m cookbook.notebooks --clean notebooks/03_zero3.ipynb

Needs ``nbstripout`` (in the ``test`` extra: ``pip install -e '.[test]'``).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

#: The notebook metadata every committed notebook carries: the default ``python3`` kernel (the one
#: ``cookbook run-all`` executes with) and the language, nothing that depends on who saved it.
METADATA = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python"}}

#: Cell metadata kept; everything else JupyterLab or an extension adds (``collapsed``, ``scrolled``,
#: ``execution`` timings, ``jp-MarkdownHeadingCollapsed``, ...) is dropped.
CELL_METADATA_KEPT = ("tags",)

#: Keys nbstripout strips by default (``nbstripout/_nbstripout.py``, ``main``), passed explicitly
#: because its library function does not add them itself.
_NBSTRIPOUT_KEYS = ["metadata.signature", "metadata.widgets", "cell.metadata.collapsed", "cell.metadata.ExecuteTime",
                    "cell.metadata.execution", "cell.metadata.heading_collapsed", "cell.metadata.hidden",
                    "cell.metadata.scrolled"]


class NotebookSourceError(RuntimeError):
    """The cleaner cannot run (nbstripout missing); the message says what to install."""


def _strip_output():
    try:
        from nbstripout import strip_output
    except ImportError:
        raise NotebookSourceError("nbstripout is not installed: pip install nbstripout "
                                  "(or pip install -e '.[test]', which has it)") from None
    return strip_output


def clean(nb):
    """A clean copy of the notebook ``nb`` (an ``nbformat`` NotebookNode, version 4): outputs and
    execution counts stripped by ``nbstripout.strip_output`` (ids kept), notebook metadata set to
    :data:`METADATA`, cell metadata reduced to :data:`CELL_METADATA_KEPT` (an empty ``tags`` dropped).

    Raises:
        NotebookSourceError: nbstripout is not installed.
    """
    import nbformat
    nb = _strip_output()(copy.deepcopy(nb), keep_output=False, keep_count=False, keep_id=True,
                         extra_keys=list(_NBSTRIPOUT_KEYS))
    nb.metadata = nbformat.from_dict(copy.deepcopy(METADATA))
    for cell in nb.cells:
        kept = {k: v for k, v in cell.get("metadata", {}).items() if k in CELL_METADATA_KEPT and v}
        cell["metadata"] = nbformat.from_dict(kept)
    return nb


def clean_text(text: str) -> str:
    """The file text of the clean notebook whose file text is ``text`` (``nbformat.writes`` layout plus
    the final newline ``nbformat.write`` adds, as JupyterLab's save writes it)."""
    import nbformat
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    return nbformat.writes(clean(nb)) + "\n"


def problems(path: str | os.PathLike) -> list[str]:
    """What is not clean in the notebook file ``path``, in words; ``[]`` when it is clean.

    Raises:
        NotebookSourceError: nbstripout is not installed.
    """
    import nbformat
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 - not JSON, not a notebook, invalid: say so
        return [f"{path.name}: not a valid notebook ({type(exc).__name__}: {exc})"]
    found = []
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    with_out = [i for i, c in code if c.get("outputs")]
    counted = [i for i, c in code if c.get("execution_count") is not None]
    if with_out:
        found.append(f"outputs in cells {with_out}")
    if counted:
        found.append(f"execution counts in cells {counted}")
    if nb.metadata != METADATA:
        found.append(f"notebook metadata {dict(nb.metadata)} is not the fixed {METADATA}")
    extra = [(i, sorted(set(c.get("metadata", {})) - set(CELL_METADATA_KEPT))) for i, c in enumerate(nb.cells)]
    extra = [f"cell {i}: {keys}" for i, keys in extra if keys]
    if extra:
        found.append("cell metadata beyond tags: " + "; ".join(extra))
    if not found and clean_text(text) != text:
        found.append("layout differs from what nbformat (and JupyterLab's save) writes")
    return [f"{path.name}: {p}" for p in found]


def notebook_files(paths: list[str] | None = None) -> list[Path]:
    """``paths`` as Paths, or every numbered notebook of the cookbook (:func:`cookbook.runall.list_notebooks`)."""
    if paths:
        return [Path(p) for p in paths]
    from .runall import list_notebooks
    return list_notebooks()


def main(argv: list[str] | None = None) -> int:
    """Check (default) or clean the notebooks; exit 0 clean, 1 not clean, 2 cannot run."""
    p = argparse.ArgumentParser(prog="python -m cookbook.notebooks", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="notebooks (default: every notebooks/NN_*.ipynb)")
    p.add_argument("--clean", action="store_true", help="strip outputs, counts and metadata in place")
    args = p.parse_args(argv)
    try:
        files = notebook_files(args.files)
        if args.clean:
            for f in files:
                text = f.read_text(encoding="utf-8")
                new = clean_text(text)
                if new != text:
                    f.write_text(new, encoding="utf-8")
                    print(f"cleaned {f}")
            return 0
        found = [msg for f in files for msg in problems(f)]
    except (NotebookSourceError, OSError, ValueError) as exc:  # nbstripout missing, no such file, no notebooks
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for msg in found:
        print(msg, file=sys.stderr)
    if found:
        print("fix: python -m cookbook.notebooks --clean  (then commit the notebooks)", file=sys.stderr)
        return 1
    print(f"{len(files)} notebook(s) clean")
    return 0


__all__ = ["CELL_METADATA_KEPT", "METADATA", "NotebookSourceError", "clean", "clean_text", "main",
           "notebook_files", "problems"]

if __name__ == "__main__":
    sys.exit(main())
