"""cookbook run-all and what it reads and writes: argument handling, failure reporting, the HTML report
(cookbook.report), the results notebooks record (cookbook.results), and the numbers of the helpers the
notebooks show — tables, figures, the articles' arithmetic, the hardware ceilings, the GPU references —
computed here by hand from the parameter counts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from cookbook import answers as answers_mod
from cookbook import articles, checkpoint, figures, hardware, memory, reference, report, results, runall, tables
from cookbook.models import model_spec
from cookbook.plan import Plan

GIB = 2 ** 30
ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------------------------
# run-all arguments

@pytest.mark.parametrize("text, value", [("None", None), ("null", None), ("True", True), ("false", False),
                                         ("8", 8), ("-3", -3), ("24.0", 24.0), ("1e-5", 1e-5),
                                         ("qwen-14b", "qwen-14b"), ("", "")])
def test_parse_value_follows_papermill_rules(text, value):
    assert runall.parse_value(text) == value
    assert type(runall.parse_value(text)) is type(value)


def test_select_by_number_name_and_file():
    nbs = runall.list_notebooks()
    assert [p.stem for p in nbs] == ["00_environment", "01_oom_reproduction", "02_zero2", "03_zero3",
                                     "04_zero3_offload", "05_final_8x4090", "06_final_1x4090"]
    assert [p.stem for p in runall.select(nbs, ["3"])] == ["03_zero3"]
    assert [p.stem for p in runall.select(nbs, ["06_final_1x4090.ipynb", "01"])] == ["01_oom_reproduction",
                                                                                      "06_final_1x4090"]
    with pytest.raises(runall.RunAllError, match="--only 9: no such notebook; choose from 00_environment"):
        runall.select(nbs, ["9"])
    # a comma-separated list, as typed `--only 04,06`, is the same as `--only 04 06`
    assert [p.stem for p in runall.select(nbs, ["06,04"])] == ["04_zero3_offload", "06_final_1x4090"]
    with pytest.raises(runall.RunAllError, match="--only 7: no such notebook"):
        runall.select(nbs, ["04,7"])


def test_parameters_are_routed_to_the_notebooks_that_declare_them():
    nbs = runall.list_notebooks()
    routed = runall.parameters_for(nbs, [("06:MODEL", "llama-7b"), ("MAX_STEPS", "5"), ("MODEL", "qwen-14b"),
                                         ("NUM_GPUS", "8")])
    assert routed["02_zero2"] == {"MAX_STEPS": 5, "MODEL": "qwen-14b", "NUM_GPUS": 8}
    assert routed["06_final_1x4090"] == {"MAX_STEPS": 5, "MODEL": "llama-7b", "NUM_GPUS": 8}
    assert "MAX_STEPS" not in routed["00_environment"]  # 00 trains nothing
    assert routed["00_environment"] == {"MODEL": "qwen-14b", "NUM_GPUS": 8}
    with pytest.raises(runall.RunAllError, match="has no parameter 'BATCH'"):
        runall.parameters_for(nbs, [("BATCH", "4")])
    with pytest.raises(runall.RunAllError, match="use --output-dir"):
        runall.parameters_for(nbs, [("OUTPUT_DIR", "/tmp/x")])
    with pytest.raises(runall.RunAllError, match="notebook 00 has no parameter 'MAX_STEPS'"):
        runall.parameters_for(nbs, [("00:MAX_STEPS", "3")])


def test_empty_notebooks_dir_is_a_clear_error(tmp_path):
    with pytest.raises(runall.RunAllError, match="no numbered notebooks"):
        runall.list_notebooks(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(tmp_path),
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 2 and "no numbered notebooks" in proc.stderr


# ----------------------------------------------------------------------------------------------
# a real papermill execution: one notebook that records results, one that fails in a known cell

def _notebook(path: Path, cells: list[tuple[str, str]]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    for i, (kind, src) in enumerate(cells):
        cell = (nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell)(src, id=f"c{i}")
        if kind == "params":
            cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    nbformat.write(nb, str(path))


def test_run_all_executes_reports_and_names_the_failed_cell(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    _notebook(nbdir / "00_good.ipynb", [
        ("md", "# 00 · good"),
        ("code", "from cookbook import results"),
        ("params", 'OUTPUT_DIR: str = "runs/00_good"  # output\nSTEPS: int = 2  # steps'),
        ("code", 'results.record(OUTPUT_DIR, "00_good", title="00 · good", target="none", steps=STEPS,\n'
                 '               headline=[f"ran {STEPS} steps"])'),
    ])
    _notebook(nbdir / "01_bad.ipynb", [
        ("md", "# 01 · bad"),
        ("params", 'OUTPUT_DIR: str = "runs/01_bad"  # output'),
        ("code", "x = 1"),
        ("code", "raise ValueError('boom in cell 3')"),
        ("code", "y = 2"),
    ])
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(nbdir),
                           "--output-dir", str(out), "-p", "STEPS", "7", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the failure names the notebook and the cell; the executed copy keeps the traceback
    assert "01_bad" in proc.stderr and "(cell 4)" in proc.stderr
    assert "failed in cell 4" in proc.stdout and "ValueError: boom in cell 3" in proc.stdout
    executed = nbformat.read(str(out / "01_bad.ipynb"), as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "ValueError"
    # the good one ran with the injected parameters, under its own folder
    good = json.loads((out / "00_good" / "results.json").read_text())
    assert good["steps"] == 7 and good["headline"] == ["ran 7 steps"]
    summary = json.loads((out / "run-all.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["ok", "failed"]
    assert summary["notebooks"][1]["error"]["cell"] == 4
    html_text = (out / "report.html").read_text()
    assert "ran 7 steps" in html_text and "boom in cell 3" in html_text
    # `--only 01` into the same folder (moved elsewhere first) keeps 00's earlier results in the report
    moved = tmp_path / "moved"
    out.rename(moved)
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(nbdir),
                           "--output-dir", str(moved), "--only", "01", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary2 = json.loads((moved / "run-all.json").read_text())
    assert summary2["ran_now"] == ["01_bad"]
    assert [n["name"] for n in summary2["notebooks"]] == ["00_good", "01_bad"]
    kept = summary2["notebooks"][0]
    assert kept["earlier_run"] == summary["written"] and kept["output_dir"] == str(moved.resolve() / "00_good")
    html_text = (moved / "report.html").read_text()
    assert "ran 7 steps" in html_text and f"earlier ({summary['written']})" in html_text
    # a run-all stopped before it wrote run-all.json (a time limit): 00 is recovered from its folder
    (moved / "run-all.json").unlink()
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(nbdir),
                           "--output-dir", str(moved), "--only", "01", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    summary3 = json.loads((moved / "run-all.json").read_text())
    assert [(n["name"], n["status"]) for n in summary3["notebooks"]] == [("00_good", "ok"), ("01_bad", "failed")]
    assert summary3["notebooks"][0]["earlier_run"] == "recovered from the folder"
    assert "ran 7 steps" in (moved / "report.html").read_text()
    # --report-only: runs nothing; a notebook whose results.json is gone is a failure, not a silent omission
    (moved / "00_good" / "results.json").unlink()
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(nbdir),
                           "--output-dir", str(moved), "--report-only"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "00_good: failed" in proc.stderr and "results.json is missing" in proc.stderr
    summary4 = json.loads((moved / "run-all.json").read_text())
    assert [(n["name"], n["status"]) for n in summary4["notebooks"]] == [("00_good", "failed"), ("01_bad", "failed")]
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--output-dir", str(moved), "--report-only",
                           "--only", "01"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--only would be ignored" in proc.stderr


def test_quiet_console_leaves_out_deepspeeds_accelerator_line_not_the_errors(tmp_path):
    """A notebook's child process that imports DeepSpeed on a machine without a GPU logs "Setting accelerator to
    CPU ..."; ipykernel copies a child's output to the notebook and to the kernel's console, run-all's. The quiet
    console (the default) leaves that line out and keeps the child's other stderr; the notebook keeps both;
    --verbose keeps the line on the console too."""
    from cookbook.hardware import on_gpu_machine
    if on_gpu_machine():
        pytest.skip("DeepSpeed finds the GPU here: it logs no CPU-accelerator line")
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    child = ("from deepspeed.accelerator import get_accelerator; get_accelerator(); import sys; "
             "print('child error: the real thing', file=sys.stderr)")
    _notebook(nbdir / "00_child.ipynb", [
        ("code", "import subprocess, sys\nfrom cookbook import results"),
        ("params", 'OUTPUT_DIR: str = "runs/00_child"  # output'),
        # (the pause: ipykernel forwards a child's output from a thread; the cell must not end before it has)
        ("code", f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\nimport time; time.sleep(1)"),
        ("code", 'results.record(OUTPUT_DIR, "00_child", title="00 · child", target="none", headline=["ran"])'),
    ])
    line = "Setting accelerator to CPU"
    # ipykernel does not capture file descriptors under pytest (it looks for PYTEST_CURRENT_TEST): run as a user does
    # and without DS_ACCELERATOR (an earlier test's rehearsal sets it): with it DeepSpeed logs no detection line
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "DS_ACCELERATOR")}
    for extra, shown in (([], False), (["--verbose"], True)):
        out = tmp_path / f"out{len(extra)}"
        proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(nbdir),
                               "--output-dir", str(out), *extra], capture_output=True, text=True, timeout=300, env=env)
        console = proc.stdout + proc.stderr
        assert proc.returncode == 0, console
        assert (line in console) is shown, console
        assert "child error: the real thing" in console
        assert [ln.split()[:2] for ln in proc.stdout.splitlines() if "00_child.ipynb" in ln] == [["ok", "00_child"]]
        executed = nbformat.read(str(out / "00_child.ipynb"), as_version=4)
        text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
        assert line in text and "child error: the real thing" in text


def test_pass_through_drops_only_deepspeeds_accelerator_lines():
    import io
    r, w = os.pipe()
    os.write(w, b"[2026-12-01 22:29:29,245] [WARNING] [real_accelerator.py:213:get_accelerator] Setting accelerator "
                b"to CPU. If you have GPU or other accelerator, we were unable to detect it.\nTraceback: real\n"
                b"[2026-12-01 22:29:29,246] [INFO] [real_accelerator.py:260:get_accelerator] Setting ds_accelerator to "
                b"cpu (auto detect)\nSetting accelerator to CPU, said by someone else\nno newline at the end")
    os.close(w)
    dest = io.StringIO()
    runall._pass_through(r, dest)
    assert dest.getvalue() == "Traceback: real\nSetting accelerator to CPU, said by someone else\nno newline at the end\n"


# ----------------------------------------------------------------------------------------------
# the helpers the notebooks show, and the recorder

def test_scaled_budget_is_the_same_bytes_per_parameter():
    n_tiny, n_qwen = model_spec("tiny-qwen2").num_params, model_spec("qwen-14b").num_params
    assert (n_tiny, n_qwen) == (354_880, 14_167_290_880)
    budget = hardware.scaled_budget_gib(24.0, "tiny-qwen2", "qwen-14b")
    assert budget == pytest.approx(24.0 * 354_880 / 14_167_290_880)
    # 1.82 bytes per parameter: less than the 2 bytes of a replicated 16-bit copy (so ZeRO-2 cannot fit)
    assert budget * GIB / n_tiny == pytest.approx(24 * GIB / n_qwen) == pytest.approx(1.819, abs=1e-3)
    with pytest.raises(ValueError, match="gpu_memory_gib=0"):
        hardware.scaled_budget_gib(0, "tiny-qwen2", "qwen-14b")


def test_article_memory_table_numbers():
    plan = Plan(model="qwen-14b", num_gpus=8, seq_len=512, micro_batch=1, grad_accum=16, zero_stage=2)
    t = articles.article_memory_table(plan).set_index("component")
    n = 14_167_290_880
    assert t.loc["16-bit parameters", "correct GiB"] == round(2 * n / GIB, 1) == 26.4
    assert t.loc["fp32 master weights", "article GB"] == "omitted"          # article 002 leaves it out
    assert t.loc["fp32 master weights", "correct GB"] == round(4 * n / 1e9, 1) == 56.7
    assert t.loc["Adam m and v (fp32)", "article GB"] == 112.0
    total = t.loc["TOTAL model states (all GPUs together)"]
    assert total["correct GiB"] == round(20 * n / GIB, 1) == 263.9
    assert "218 stated" in total["article GB"]
    # per GPU under ZeRO-2 on 8 GPUs: 2N + 18N/8 (DeepSpeed's estimate_zero2_model_states_mem_needs)
    assert t.loc["per GPU under ZeRO-2 on 8 GPU(s) (model states)", "correct GiB"] == round((2 * n + 18 * n / 8) / GIB, 1)
    llama = articles.article_memory_table(Plan(model="llama-7b", num_gpus=1, zero_stage=3)).set_index("component")
    assert "86 stated (114 from its items)" in llama.loc["TOTAL model states (all GPUs together)", "article GB"]
    with pytest.raises(ValueError, match="qwen-14b, llama-7b"):
        articles.article_memory_table(Plan(model="tiny-qwen2"))


def test_throughput_ceiling_by_hand():
    plan = Plan(model="llama-7b", num_gpus=1, seq_len=1024, micro_batch=2, grad_accum=8, zero_stage=3,
                offload_optimizer="cpu", offload_param="cpu", gradient_checkpointing=True)
    n, layers, h = 6_738_415_616, 32, 4096
    fpt = (6 * n + 12 * layers * h * 1024) * 4 / 3
    c = hardware.throughput_ceiling(plan)
    assert c["compute_samples_per_s"] == pytest.approx(165.2e12 / (fpt * 1024))
    assert c["pcie_samples_per_s"] == pytest.approx(2 * 31.5e9 / (4 * n))
    assert c["ceiling_samples_per_s"] == pytest.approx(2.337, abs=1e-3)
    assert c["ceiling_samples_per_s"] < 2.4  # article 001's claim is above it
    assert hardware.throughput_ceiling(plan.replace(offload_param="none"))["pcie_samples_per_s"] is None


def test_batch_sweep_zero2_never_fits_qwen14b_on_24gib():
    plan = Plan(model="qwen-14b", num_gpus=8, gpu_memory_gib=24, zero_stage=2)
    ests = memory.batch_sweep(plan, micro_batches=(1, 8), seq_lens=(256, 1024))
    frame = tables.batch_sweep_frame(ests)
    assert list(zip(frame["micro batch"], frame["seq len"])) == [(1, 256), (1, 1024), (8, 256), (8, 1024)]
    assert not frame["fits"].any()
    assert (frame["model states GiB"] == round((2 * 14_167_290_880 + 18 * 14_167_290_880 / 8) / GIB, 2)).all()
    fig = figures.plot_batch_sweep(ests)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1×256", "1×1024", "8×256", "8×1024"]


def test_choose_variant_takes_the_first_that_fits():
    machine = Plan(model="qwen-14b", num_gpus=8, gpu_memory_gib=24, host_memory_gib=512, seq_len=512,
                   micro_batch=1, grad_accum=16)
    chosen, ladder = memory.choose_variant(machine)
    assert chosen.plan.label == "ZeRO-3 + opt→cpu"
    assert [e.fits for e in ladder][:3] == [False, False, False]
    # 256 GiB: CPU offload needs 326+ GiB; NVMe offload at DeepSpeed's sub_group_size 1e9 pins the optimizer swap
    # buffers (4 × a 1e9-element fp32 sub-group) and a 16-bit gradient buffer on each of the 8 ranks, ~372 GiB; issue
    # 31: the estimate sizes sub_group_size for the machine (5e8 here, what `cookbook config` writes), and then fits
    small, ladder = memory.choose_variant(machine.replace(host_memory_gib=256))
    nvme = ladder[-1]
    default = memory.estimate(nvme.plan, nvme_knobs={"sub_group_size": 10 ** 9, "max_in_cpu": 10 ** 9,
                                                     "pin_memory": True})
    assert default.host_gib["total"] > 256 and nvme.nvme["settings"]["sub_group_size"] == 5 * 10 ** 8
    assert small is nvme and nvme.plan.label == "ZeRO-3 + opt→nvme + param→nvme" and nvme.host_gib["total"] < 256
    assert memory.choose_variant(machine.replace(host_memory_gib=64))[0] is None


def test_record_writes_results_and_figures(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    run = {"status": "ok", "message": "m", "run_dir": "r", "command": "c", "duration_s": 3.0,
           "summary": {"world_size": 2, "device": "cpu", "first5_mean_loss": 7.5, "last5_mean_loss": 5.5,
                       "tokens_per_s": 100.0, "host_peak_gib": 1.2},
           "metrics": [{"loss": 7.6}, {"loss": 5.4}], "estimate": {"gpu_gib": {"total": 0.0},
                                                                   "host_gib": {"total": 1.1}, "device": "cpu"},
           "details": {"traceback": "a\nb\nc"}}
    r = results.run_record(run)
    assert r["loss_fell"] and r["losses"] == [7.6, 5.4] and r["hardware"] == "CPU rehearsal (2 ranks)"
    assert r["details"]["traceback_tail"] == "a\nb\nc" and "traceback" not in r["details"]
    frame = tables.runs_frame({"ZeRO-2": r})
    # 2 steps: the first and last step's loss (the 5-step means would overlap); host 1.2 measured, 1.1
    # estimated: (1.1 - 1.2) / 1.2 = -8.3 %, within ±15 %
    assert frame.loc["ZeRO-2", "loss"] == "7.600 → 5.400 (step 1 → step 2)"
    assert frame.loc["ZeRO-2", "peak host GiB (estimate, error, ±15 %)"] == "1.20 (est 1.10, -8 %, within)"
    sweep = tables.batch_sweep_frame(memory.batch_sweep(Plan(model="tiny-qwen2", num_gpus=2), (1,), (64,)))
    from cookbook import dsconfig
    change = dsconfig.diff({"a": 1}, {"a": 2})  # anything with to_frame() is kept as its frame's records
    path = results.record(tmp_path / "nb", "02_zero2", title="t", target="8 × RTX 4090", rehearsal=True,
                          headline=["h1", None], runs={"ZeRO-2": run}, tables={"the run": frame, "change": change},
                          figures={"loss": figures.plot_loss({"ZeRO-2": run}), "none": None}, a=1, frame=sweep,
                          nan=float("nan"))
    data = json.loads(path.read_text())
    assert path == (tmp_path / "nb" / "results.json").resolve()
    assert data["notebook"] == "02_zero2" and data["rehearsal"] is True and data["target"] == "8 × RTX 4090"
    assert data["a"] == 1 and data["nan"] is None and data["headline"] == ["h1"] and data["figures"] == ["figures/loss.png"]
    assert data["frame"][0]["micro batch"] == 1 and data["runs"]["ZeRO-2"]["estimate_host_gib"] == 1.1
    assert data["runs"]["ZeRO-2"] == json.loads(json.dumps(r))
    assert data["tables"]["change"] == [{"path": "a", "before": "1", "after": "2"}]
    assert (tmp_path / "nb" / "figures" / "loss.png").stat().st_size > 1000
    assert results.load_results(tmp_path / "nb") == data
    page = report.write_html_report(tmp_path, [{"name": "02_zero2", "status": "ok", "duration_s": 1.0,
                                                "executed": str(tmp_path / "02_zero2.ipynb"),
                                                "output_dir": str(tmp_path / "nb")}])
    text = page.read_text()
    # the figures are the PNG files record() wrote, linked relative to the report, not embedded
    assert "ZeRO variants side by side" in text and "data:image" not in text and "h1" in text
    assert '<img src="nb/figures/loss.png"' in text and '<img src="report_figures/loss.png"' in text
    assert (tmp_path / "report_figures" / "loss.png").stat().st_size > 1000
    # CPU rehearsal: world size an integer, GPU-only columns labelled once in the header, no raw None
    assert frame.loc["ZeRO-2", "world size"] == 2 and isinstance(frame.loc["ZeRO-2", "world size"], int)
    assert "peak GPU reserved GiB (estimate, error, ±15 %) — n/a (CPU)" in frame.columns
    assert frame.loc["ZeRO-2", "steps"] == "—" and "why not within ±15 %" not in frame.columns
    assert "<td>None</td>" not in text and "<td>2.0</td>" not in text and "<td>2</td>" in text
    assert "n/a (CPU)" in text and "0.49 GiB per rank" in text   # why the rehearsal's variants measure alike


def test_figures_made_here_show_once_in_a_notebook():
    """Closed in pyplot, so a cell ending with the figure shows it once; drawn on the caller's Axes, left open."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.close("all")
    run = {"status": "ok", "losses": [3.0, 2.0], "summary": None}
    fig = figures.plot_loss({"a": run})
    assert not plt.get_fignums() and fig.axes[0].get_lines()[0].get_ydata().tolist() == [3.0, 2.0]
    est = memory.sweep(Plan(model="tiny-qwen2", num_gpus=2), [(3, "none", "none")])
    figures.plot_host_ram(est)
    memory.plot_breakdown(est)
    assert not plt.get_fignums()
    own, ax = plt.subplots()
    assert figures.plot_loss({"a": run}, ax=ax) is own and plt.get_fignums() == [own.number]
    plt.close("all")


def test_tidy_frame_counts_blanks_and_gpu_columns():
    import pandas as pd
    raw = pd.DataFrame([{"hardware": "CPU rehearsal (1 rank)", "world size": 1.0, "steps": None, "peak GPU GiB": None,
                         "tflops": float("nan"), "loss": 7.25, "note": None},
                        {"hardware": "CPU rehearsal (2 ranks)", "world size": 2.0, "steps": 10.0, "peak GPU GiB": None,
                         "tflops": None, "loss": None, "note": "x"}])
    t = tables.tidy_frame(raw)
    assert list(t["world size"]) == [1, 2] and all(type(v) is int for v in t["world size"])
    assert list(t["steps"]) == ["—", 10] and list(t["loss"]) == [7.25, "—"] and list(t["note"]) == ["—", "x"]
    assert list(t["peak GPU GiB — n/a (CPU)"]) == ["", ""] and list(t["tflops — n/a (CPU)"]) == ["", ""]
    assert raw["world size"].tolist() == [1.0, 2.0]            # the input is not modified
    gpu = tables.tidy_frame(raw.assign(hardware="2 × NVIDIA H200"))  # on GPUs an empty GPU column is just missing
    assert list(gpu["peak GPU GiB"]) == ["—", "—"]
    half = tables.tidy_frame(pd.DataFrame({"world size": [2.5]}))     # not whole: left as it is
    assert half["world size"].tolist() == [2.5]
    with pytest.raises(TypeError, match="DataFrame"):
        tables.tidy_frame([{"a": 1}])


def test_rehearsal_memory_note_states_size():
    note = memory.rehearsal_memory_note(354_880)
    assert "0.49 GiB per rank" in note and "5.4 MiB" in note and "data/reference/" in note  # 16 × 354880 / 2**20 = 5.42
    assert "MiB)" not in memory.rehearsal_memory_note()


def test_reference_results_tolerate_absence_and_formats(tmp_path):
    assert reference.reference_results(directory=tmp_path / "missing") == []
    assert reference.reference_frame(directory=tmp_path / "missing").empty
    # records that name their notebook
    (tmp_path / "h200_named.json").write_text(json.dumps(
        {"hardware": "NVIDIA H200", "emulate_gpu_memory_gib": 24, "runs": [
            {"notebook": "02_zero2", "zero_stage": 2, "status": "gpu_oom"},
            {"notebook": "04_zero3_offload", "zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu",
             "summary": {"tokens_per_s": 900.0, "peak_gpu_reserved_gib": 9.5, "world_size": 8}}]}))
    # the benchmark's format: rungs with a group, a label and the plan; machine facts shared
    (tmp_path / "bench.json").write_text(json.dumps(
        {"versions": {"gpus": ["NVIDIA H200"], "gpu_memory_gib": 139.8}, "rungs": [
            {"name": "z3-offall", "group": "issue10", "label": "ZeRO-3 + opt→cpu + param→cpu", "status": "ok",
             "tokens_per_s": 1960.6, "losses": [11.0, 10.0, 9.0, 8.0, 7.0, 6.0], "projection_rtx4090": {"tokens_per_s": 682.8},
             "plan": {"model": "/somewhere/qwen2.5-3b", "num_gpus": 2, "gpu_memory_gib": 24.0}},
            {"name": "stock", "group": "stock", "label": "ZeRO-3", "status": "ok",
             "plan": {"model": "llama-3b", "num_gpus": 1, "gpu_memory_gib": 24.0}}]}))
    (tmp_path / "curves.json").write_text(json.dumps({"what": "loss curves", "curves": {"a": [1, 2]}}))  # no runs
    (tmp_path / "broken.json").write_text("{not json")
    frame = reference.reference_frame("04", directory=tmp_path).set_index("file")
    assert list(frame.index) == ["bench.json", "h200_named.json"]
    named, bench = frame.loc["h200_named.json"], frame.loc["bench.json"]
    assert named["hardware"] == "8 × NVIDIA H200 capped at 24 GiB" and named["tokens/s"] == 900.0
    assert named["run"] == "ZeRO-3 + opt→cpu + param→cpu"
    assert bench["hardware"] == "2 × NVIDIA H200 capped at 24 GiB" and bench["model"] == "qwen2.5-3b"
    # a run of under 10 steps: its first and last losses (means of 5 would overlap and hide the change)
    assert bench["loss first"] == 11.0 and bench["loss last"] == 6.0
    assert bench["RTX 4090 projection tokens/s"] == 682.8
    assert reference.reference_frame("03", directory=tmp_path).empty       # "stock" is not a notebook-03 group
    everything = reference.reference_results(directory=tmp_path)
    assert len([r for r in everything if "_error" not in r]) == 4 and any("_error" in r for r in everything)
    both = reference.beside_reference({"ZeRO-3": {"status": "ok", "losses": [], "summary": None}}, "01", tmp_path)
    assert list(both["source"]) == ["this run", "data/reference/bench.json"]
    # this run's row too: 4 steps, its first and last step (5-step means printed 12.379 twice on the GPU)
    short = {"status": "ok", "losses": [12.474, 12.295, 12.324, 12.425], "first_loss": 12.474, "last_loss": 12.425,
             "first5_mean_loss": 12.3795, "last5_mean_loss": 12.3795, "steps": 4}
    row = reference.beside_reference({"ZeRO-3": short}, "01", tmp_path).iloc[0]
    assert (row["loss first"], row["loss last"]) == (12.474, 12.425)


def test_inspect_saved_model_needs_weights(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors files"):
        checkpoint.inspect_saved_model(tmp_path)


def test_same_math_compares_runs_that_differ_only_in_zero_variant():
    base = {"model": "tiny-qwen2", "world_size": 2, "micro_batch": 4, "grad_accum": 1, "seq_len": 128,
            "precision": "bf16", "steps": 3}
    runs = {"a": dict(base, zero_stage=2, offload_optimizer="none", offload_param="none", losses=[7.0, 6.0, 5.0]),
            "b": dict(base, zero_stage=3, offload_optimizer="cpu", offload_param="cpu", losses=[7.0, 6.25, 5.1]),
            "c": dict(base, world_size=1, zero_stage=3, offload_optimizer="none", offload_param="none", losses=[9.0])}
    (sentence,) = report.same_math(runs)
    assert sentence.startswith("a, b (tiny-qwen2, 2 ranks, 3 steps)")
    assert "at most 0.25 at any step" in sentence  # |6.0 - 6.25|
    # 3 steps: the last step's losses, 5.0 and 5.1 (5-step means would be means of the same 3 steps)
    assert "their last-step losses lie within 0.1." in sentence
    long = {k: dict(v, steps=10, losses=[8.0] * 5 + v["losses"] + [v["losses"][-1]] * 2) for k, v in runs.items()}
    (sentence,) = report.same_math(long)
    # 10 steps: the last-5 means, (7 + 6 + 5 + 5 + 5)/5 = 5.6 and (7 + 6.25 + 3·5.1)/5 = 5.71
    assert "their last-5-step means lie within 0.11." in sentence


# ----------------------------------------------------------------------------------------------
# parameter files, central-run outcomes, the answers

PARAMS_DIR = ROOT / "notebooks" / "params"


@pytest.mark.parametrize("name", ["gpu-1x24gib.yaml", "gpu-2x24gib.yaml", "gpu-4x24gib.yaml", "gpu-8x24gib.yaml"])
def test_params_files_load_and_name_real_parameters(name):
    import yaml
    nbs = runall.list_notebooks()
    routed = runall.load_params_file(PARAMS_DIR / name, nbs)  # raises on any key a notebook does not declare
    raw = yaml.safe_load((PARAMS_DIR / name).read_text())
    for section, values in raw.items():
        if section == "shared":
            continue
        declared = runall.declared_parameters(next(p for p in nbs if p.stem == section))
        assert set(values) <= set(declared), (section, set(values) - set(declared))
    world = int(name.split("-")[1].split("x")[0])
    for stem, values in routed.items():
        if "EMULATE_GPU_MEMORY_GIB" in runall.declared_parameters(next(p for p in nbs if p.stem == stem)):
            assert values["EMULATE_GPU_MEMORY_GIB"] == 24 and values["RANDOM_WEIGHTS"] is True
            assert values["LR"] == 1e-5 and values["MAX_STEPS"] <= 5
    # the stories: ZeRO-2 and ZeRO-3 without offload run out of memory on 24 GiB; offload and the recipes run
    assert [routed[s]["EXPECTED_OUTCOME"] for s in ("01_oom_reproduction", "02_zero2", "03_zero3",
                                                    "04_zero3_offload", "05_final_8x4090", "06_final_1x4090")] == \
        ["gpu_oom", "gpu_oom", "gpu_oom", "ok", "ok", "ok"]
    assert routed["01_oom_reproduction"]["MODEL"] == "qwen-14b"
    assert routed["06_final_1x4090"]["MODEL"] == "llama-7b" and routed["06_final_1x4090"]["NUM_GPUS"] == 1
    share = {1: "qwen2-14b-share8", 2: "qwen2-14b-share4", 4: "qwen2-14b-share2", 8: "qwen-14b"}[world]
    for stem in ("02_zero2", "03_zero3", "04_zero3_offload", "05_final_8x4090"):
        assert routed[stem]["MODEL"] == share and routed[stem]["NUM_GPUS"] == world
        # every rank holds Qwen-14B's per-rank model states on 8 ranks (ZeRO-3 with bf16: 16-bit parameters 2,
        # fp32 master weights 4, Adam moments 8, DeepSpeed's fp32 gradient partition 4 bytes a parameter), within 0.1 %
        plan = Plan(model=share, num_gpus=world, gpu_memory_gib=24, seq_len=512, micro_batch=1, grad_accum=1,
                    precision="bf16", zero_stage=3)
        assert memory.rank_model_states_gib(plan) == pytest.approx(18 * 14_167_290_880 / 8 / GIB, rel=1e-3)


def test_params_file_errors_name_notebook_key_and_parameters(tmp_path):
    nbs = runall.list_notebooks()
    bad = tmp_path / "bad.yaml"
    bad.write_text("shared:\n  LR: 1.0e-5\n02_zero2:\n  MODLE: qwen-14b\n")
    with pytest.raises(runall.RunAllError, match=r"notebook 02_zero2 has no parameter 'MODLE'; its parameters: "
                                                 r"TARGET_MODEL, .*MODEL"):
        runall.load_params_file(bad, nbs)
    bad.write_text("shared:\n  NOPE: 1\n")
    with pytest.raises(runall.RunAllError, match="shared: no notebook has a parameter 'NOPE'"):
        runall.load_params_file(bad, nbs)
    bad.write_text("99_missing:\n  MODEL: x\n")
    with pytest.raises(runall.RunAllError, match="section '99_missing' names no notebook"):
        runall.load_params_file(bad, nbs)
    # -p wins over the file, the notebook's section over shared
    good = tmp_path / "good.yaml"
    good.write_text("shared:\n  MAX_STEPS: 3\n  MODEL: qwen-14b\n06:\n  MODEL: llama-7b\n")
    routed = runall.load_params_file(good, nbs)
    assert routed["06_final_1x4090"]["MODEL"] == "llama-7b" and routed["02_zero2"]["MODEL"] == "qwen-14b"
    assert "MAX_STEPS" not in routed["00_environment"]


def test_run_all_marks_a_refused_central_run_and_exits_nonzero(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    _notebook(nbdir / "00_refused.ipynb", [
        ("md", "# 00 · refused"),
        ("code", "from pathlib import Path\nfrom cookbook import results\nfrom cookbook.launch import launch\n"
                 "from cookbook.plan import Plan"),
        ("params", 'OUTPUT_DIR: str = "runs/00_refused"  # output\nHOST_MEMORY_GIB: float = 64.0  # host RAM\n'
                   'EXPECTED_OUTCOME: str = "ok"  # how the central run should end'),
        ("code", 'plan = Plan(model="tiny-qwen2", num_gpus=1, gpu_memory_gib=24.0, host_memory_gib=HOST_MEMORY_GIB,\n'
                 '            seq_len=32, micro_batch=1, grad_accum=1, precision="bf16", zero_stage=3,\n'
                 '            offload_optimizer="cpu", offload_param="cpu")\n'
                 'result = launch(plan, Path(OUTPUT_DIR) / "run", max_steps=1, lr=1e-3, dry_run=HOST_MEMORY_GIB > 1)'),
        ("code", 'results.record(OUTPUT_DIR, "00_refused", runs={"tiny": result}, central=result,\n'
                 '               expected=EXPECTED_OUTCOME if HOST_MEMORY_GIB < 1 else result.status)'),
    ])
    _notebook(nbdir / "01_nocentral.ipynb", [
        ("md", "# 01 · no central run"),
        ("code", "from cookbook import results"),
        ("params", 'OUTPUT_DIR: str = "runs/01_nocentral"  # output\nEXPECTED_OUTCOME: str = "ok"  # expected'),
        ("code", 'results.record(OUTPUT_DIR, "01_nocentral", headline=["nothing ran"])'),
    ])
    out = tmp_path / "out"
    params = tmp_path / "p.yaml"
    params.write_text("00_refused:\n  HOST_MEMORY_GIB: 0.001\n")  # the guard refuses: the states need more
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(nbdir),
                           "--output-dir", str(out), "--params", str(params)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the guard's refusal is a config_error: the estimate says it does not fit, nothing was launched
    assert ("00_refused (central run 'tiny' ended config_error, expected ok: the estimate says this will not fit"
            in proc.stderr), proc.stderr
    assert "01_nocentral (central run None ended None, expected ok: results.record(...) names no central run" \
        in proc.stderr
    # quiet: one line a notebook (plus its problem), no kernel transport warning, no progress bars
    assert "IPKernelApp" not in proc.stdout + proc.stderr and "cell/s" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines[0].split()[:2] == ["unexpected", "00_refused"] and "tiny: config_error (expected ok)" in lines[0]
    summary = json.loads((out / "run-all.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["unexpected", "unexpected"]
    assert summary["notebooks"][0]["error"]["run"] == "tiny" and summary["notebooks"][0]["error"]["status"] == "config_error"
    html_text = (out / "report.html").read_text()
    assert "did not end as expected" in html_text and "tiny: config_error (expected ok)" in html_text
    # -p wins over the file: with enough host RAM the dry run is the central run and ends as recorded
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--notebooks-dir", str(nbdir),
                           "--output-dir", str(out), "--params", str(params), "-p", "HOST_MEMORY_GIB", "64",
                           "--only", "00"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _fake_results(folder: Path, notebook: str, rehearsal: bool, **fields) -> str:
    run = {"status": "ok", "summary": {"tokens_per_s": 1234.5, "device": "cpu", "world_size": 2, "num_params": 1000},
           "metrics": [{"loss": 2.0}, {"loss": 1.5}], "estimate": {"device": "cpu"}}
    results.record(folder, notebook, rehearsal=rehearsal, runs={"central": run}, central="central", expected="ok",
                   **fields)
    return str(folder)


def _cells(table_html: str) -> list[str]:
    """The text of every cell of one HTML table."""
    import html as html_mod
    import re
    return [html_mod.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", table_html, re.S)]


def test_report_leads_with_the_answers_for_both_targets(tmp_path):
    import html as html_mod
    te = {"verdict": "ZeRO-3 + opt→cpu + param→cpu fits: 9.4 GiB per GPU", "fits_gpu": True, "fits_host": True}
    d = {"kind": "NVMe offload", "fits": True, "label": "ZeRO-3 + opt→nvme + param→nvme", "reason": "64 GiB",
         "alternatives": ["more host RAM: 153.0 GiB for fp32 states " + "x" * 300]}
    entries = [{"name": "05_final_8x4090", "status": "ok", "duration_s": 1.0,
                "output_dir": _fake_results(tmp_path / "05", "05_final_8x4090", True, target_estimate=te)},
               {"name": "06_final_1x4090", "status": "ok", "duration_s": 1.0,
                "output_dir": _fake_results(tmp_path / "06", "06_final_1x4090", True, desktop_choice=d)}]
    page = report.write_html_report(tmp_path, entries).read_text()
    # first what to run, one line per target, README's commands; then the answers, then the rest
    run_this, first = page.index("<h2>Run this</h2>"), page.index("<h2>The answers</h2>")
    assert page.index("<h1>") < run_this < first < page.index("<h2>Notebooks</h2>") < page.index("the CPU rehearsal's runs")
    lines = page[run_this:first]
    readme = (ROOT / "README.md").read_text()
    assert [t["target"] for t in answers_mod.RUN_THIS] == ["8 × RTX 4090 + Qwen-14B", "1 × RTX 4090 + LLaMA-7B",
                                                             "your own model and data"]
    assert lines.count("<li>") == 3
    for t in answers_mod.RUN_THIS:
        assert t["run"] in readme and t["ask"] in readme, t["target"]   # the same commands as README's table
        assert html_mod.escape(t["run"]) in lines and html_mod.escape(t["ask"]) in lines
    assert "cookbook train notebooks/qwen14b-8x4090.yaml" in lines and "cookbook train notebooks/llama7b-1x4090.yaml" in lines
    assert "<a href='#nb-05'>notebook 05</a>" in lines and "<a href='#nb-06'>notebook 06</a>" in lines
    assert "notebook 02 (not run here: <code>cookbook run-all --only 02</code>)" in lines
    assert "id='nb-05'" in page and "id='nb-06'" in page and "id='rehearsal'" in page
    section = page[first:page.index("<h2>Notebooks</h2>")]
    assert "8 × RTX 4090 + Qwen-14B" in section and "1 × RTX 4090 + LLaMA-7B" in section
    assert te["verdict"] in section and "ZeRO-3 + opt→nvme + param→nvme with NVMe offload" in section
    # short cells: the long alternatives (300+ characters) are a numbered note under the table
    table = section[section.index("<table"):section.index("</table>")]
    cells = _cells(table)
    assert max(map(len, cells)) <= answers_mod.CELL_MAX == 200
    assert d["alternatives"][0] not in "".join(cells) and html_mod.escape(d["alternatives"][0]) in section
    assert "<li id='note-1'>" in section and "<a href='#note-1'>" in table
    # the CPU rehearsal's tiny-model tokens/s (1,234 on 2 CPU ranks) is not in the answers, but in its own section
    label = hardware.hardware_label({"device": "cpu", "world_size": 2})
    assert label.startswith("CPU rehearsal")
    assert "1,234" not in section and "1234" not in section
    assert table.count("CPU rehearsal (tiny model): see <a href='#nb-05'>notebook 05</a>") == 1
    assert table.count("CPU rehearsal (tiny model): see <a href='#nb-06'>notebook 06</a>") == 1
    assert "<td>1234.5</td>" in page[page.index("id='rehearsal'"):]   # the rehearsal's runs table
    frame, notes = answers_mod.answers_table({e["name"]: results.load_results(e["output_dir"]) for e in entries})
    assert list(frame["measured here"]) == ["CPU rehearsal (tiny model): see notebook 05",
                                            "CPU rehearsal (tiny model): see notebook 06"]
    assert "CPU rehearsal: tiny model, not a 4090 number" in notes and not any("1,234" in n for n in notes)
    # the projection comes from the GPU reference run closest in size to each target's model
    ref7 = reference.reference_projection("06", model_spec("llama-7b").num_params)
    if ref7:
        assert f"{round(ref7['tokens_per_s']):,.0f}" in section and ref7["name"] in section  # whole, 1,257 not 1257.0
        assert f"{round(ref7['tokens_per_s']):.1f}<" not in section
    assert "data:image" not in page


def test_the_committed_gpu_report_is_small_and_links_its_figures():
    """docs/gpu/gpu-1x24gib/report.html: well under 200 KB, its figures PNG files beside it, short answer cells."""
    import re
    folder = ROOT / "docs" / "gpu" / "gpu-1x24gib"
    page = (folder / "report.html").read_text()
    assert len(page.encode()) < 200_000 and "data:image" not in page
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) >= 20 and all((folder / src).is_file() for src in images)
    assert page.index("<h2>Run this</h2>") < page.index("<h2>The answers</h2>") < page.index("<h2>Notebooks</h2>")
    answers = page[page.index("<h2>The answers</h2>"):page.index("<h2>Notebooks</h2>")]
    table = answers[answers.index("<table"):answers.index("</table>")]
    assert max(map(len, _cells(table))) <= answers_mod.CELL_MAX
    # the GPU runs' numbers, as notebooks 05 and 06 recorded them on one H200 capped at 24 GiB
    for name in ("05_final_8x4090", "06_final_1x4090"):
        res = json.loads((folder / name / "results.json").read_text())
        run = res["runs"][res["central"]["run"]]
        assert f"{run['status']}: {run['tokens_per_s']:,.0f} tokens/s, {res['central']['run']}" in table


def test_answers_for_a_notebook_not_run_here_borrow_no_number(tmp_path):
    import pandas as pd
    # only 06 ran (CPU rehearsal): the 05 row says "not run here" and names 05, with no projection
    entries = [{"name": "06_final_1x4090", "status": "ok", "duration_s": 1.0,
                "output_dir": _fake_results(tmp_path / "06", "06_final_1x4090", True)}]
    page = report.write_html_report(tmp_path, entries).read_text()
    frame = answers_mod.answers_frame({"06_final_1x4090": results.load_results(tmp_path / "06")})
    row = frame.set_index("notebook").loc["05_final_8x4090"]
    assert row["measured here"] == "not run here" and pd.isna(row["RTX 4090 projection tokens/s"])
    assert "notebooks/05_final_8x4090.ipynb produces it" in row["note"]
    assert "not run here: notebooks/05_final_8x4090.ipynb produces it" in page
    # a notebook that ran but recorded nothing borrows nothing either
    row = answers_mod.answers_frame({"05_final_8x4090": None}).set_index("notebook").loc["05_final_8x4090"]
    assert pd.isna(row["RTX 4090 projection tokens/s"]) and row["note"].startswith("no results recorded")
    # the rehearsal's row takes a reference projection only from a run of the target model's size
    import math
    rows = answers_mod.answers_frame({"05_final_8x4090": results.load_results(_fake_results(
        tmp_path / "05", "05_final_8x4090", True))}).set_index("notebook")
    n14 = model_spec("qwen-14b").num_params
    ref14 = reference.reference_projection("05_final_8x4090", n14)
    proj = rows.loc["05_final_8x4090", "RTX 4090 projection tokens/s"]
    if ref14 and abs(math.log(ref14["num_params"] / n14)) > 0.1:
        assert pd.isna(proj) and "is another model" in rows.loc["05_final_8x4090", "note"]
    elif ref14:
        assert proj == round(ref14["tokens_per_s"])


def test_collapse_repeated_makes_one_line():
    import pandas as pd
    why = "the states do not fit the 24 GiB card at any batch shape"
    frame = pd.DataFrame({"micro batch": [1, 2, 4], "fits": ["no", "no", "no"], "why": [why] * 3})
    kept, lines = answers_mod.collapse_repeated(frame)
    assert list(kept.columns) == ["micro batch", "fits"] and lines == [f"why (every row): {why}"]


def test_projection_keeps_the_achieved_fraction_of_the_floor():
    run = {"tokens_per_s": 1000.0, "estimate_device": "cuda", "num_params": 7e9, "world_size": 1, "micro_batch": 2,
           "grad_accum": 8, "seq_len": 1024, "zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"}
    here = {"bf16_matmul_tflops": 700.0, "h2d_gb_s": 50.0, "d2h_gb_s": 50.0, "cpu_adam_params_per_s": 4e9}
    T, N = 2 * 8 * 1024, 7e9
    floor = lambda c: (8 * N * T / (c["bf16_matmul_tflops"] * 1e12) + 4 * N * 8 / (c["h2d_gb_s"] * 1e9)
                       + 2 * N * 8 / (c["d2h_gb_s"] * 1e9) + N / c["cpu_adam_params_per_s"])
    expect = 1000.0 * floor(here) / floor(answers_mod.RTX4090_MODEL)
    assert answers_mod.project_rtx4090(run, here) == pytest.approx(expect, rel=1e-12)
    assert answers_mod.project_rtx4090(dict(run, estimate_device="cpu"), here) is None


def test_hardware_label_says_the_gpu_cap():
    from cookbook import hardware
    assert hardware.hardware_label({"device": "NVIDIA H200", "world_size": 1, "gpu_memory_cap_gib": 24.0}) == \
        "1 × NVIDIA H200 capped at 24 GiB"
    assert hardware.hardware_label({"device": "NVIDIA H200", "world_size": 2}) == "2 × NVIDIA H200"


def test_params_values_are_checked_against_the_declared_types(tmp_path):
    """shared: {MAX_STEPS: abc} used to pass and fail later in the notebook with a TypeError; now the file,
    section, key, value and declared type are named before anything runs (types from papermill's
    inspect_notebook: MAX_STEPS int, LR float, RANDOM_WEIGHTS bool, MODEL str)."""
    nbs = runall.list_notebooks()
    bad = tmp_path / "bad.yaml"
    bad.write_text("shared:\n  MAX_STEPS: abc\n")
    with pytest.raises(runall.RunAllError, match=r"bad\.yaml: shared: MAX_STEPS: 'abc' is str, the notebook "
                                                 r"declares int; give an int"):
        runall.load_params_file(bad, nbs)
    bad.write_text("02_zero2:\n  RANDOM_WEIGHTS: 1\n")  # an int is not a bool
    with pytest.raises(runall.RunAllError, match=r"section '02_zero2': RANDOM_WEIGHTS: 1 is int, the notebook "
                                                 r"declares bool"):
        runall.load_params_file(bad, nbs)
    bad.write_text("shared:\n  MAX_STEPS: true\n")  # a bool is not an int
    with pytest.raises(runall.RunAllError, match="MAX_STEPS: True is bool"):
        runall.load_params_file(bad, nbs)
    good = tmp_path / "good.yaml"
    good.write_text("shared:\n  LR: 1\n  MAX_STEPS: 5\n02_zero2:\n  MODEL: tiny-qwen2\n  RANDOM_WEIGHTS: false\n")
    routed = runall.load_params_file(good, nbs)  # an int is a valid float
    assert routed["02_zero2"] == {"LR": 1, "MAX_STEPS": 5, "MODEL": "tiny-qwen2", "RANDOM_WEIGHTS": False}
    with pytest.raises(runall.RunAllError, match=r"-p MAX_STEPS abc: notebook \S+: MAX_STEPS: 'abc' is str"):
        runall.parameters_for(nbs, [("MAX_STEPS", "abc")])
    assert runall.parameters_for(nbs, [("02:MODEL", "7")])["02_zero2"] == {"MODEL": "7"}  # declared str: kept


# ----------------------------------------------------------------------------------------------
# the answers: the host RAM the 8 × 4090 row assumes, what NVMe measured, the batch shape of the reference

N_LLAMA7B = 6_738_415_616
LLAMA_1X4090 = dict(model="llama-7b", num_gpus=1, gpu_memory_gib=24.0, seq_len=1024, micro_batch=2, grad_accum=8,
                    precision="bf16", zero_stage=3, offload_optimizer="cpu", offload_param="cpu")


def test_answers_8x4090_row_names_its_host_ram_and_the_recorded_256_gib_box(tmp_path):
    plan = Plan(model="qwen-14b", num_gpus=8, gpu_memory_gib=24.0, host_memory_gib=512.0, seq_len=512, micro_batch=1,
                grad_accum=16, precision="bf16", zero_stage=3, offload_optimizer="cpu")
    te = memory.estimate(plan).to_dict()  # what notebook 05 records as target_estimate
    recorded = json.loads((reference.FACTS_DIR / "host256_8xrtx4090.json").read_text())["host_memory_gib"]
    there = memory.estimate(plan.replace(host_memory_gib=recorded))
    b16 = memory.estimate(plan.replace(host_memory_gib=recorded), bf16_states=True)
    assert te["fits_host"] and there.host_gib["total"] > recorded and b16.fits  # 263.9 > 256; bf16 states fit
    rows = answers_mod.answers_frame({"05_final_8x4090": results.load_results(_fake_results(
        tmp_path / "05", "05_final_8x4090", True, target_estimate=te))}).set_index("notebook")
    row = rows.loc["05_final_8x4090"]
    assert row["fits host"] == f"yes at 512 GiB; no at {recorded:g} GiB"
    assert "host RAM assumed: 512 GiB" in row["note"]
    assert f"({recorded:g} GiB, host256_8xrtx4090.json) ZeRO-3 + opt→cpu needs {there.host_gib['total']:.1f} GiB: " \
           "does not fit" in row["note"]
    # issue 31: exact fp32 states first — on the 256 GiB box that is NVMe offload with a lowered sub_group_size
    # (its knobs sized for 256 GiB), not the lossy bf16 states that fit too
    nv = memory.estimate(plan.replace(host_memory_gib=recorded, offload_optimizer="nvme", offload_param="nvme",
                                      nvme_path="/local_nvme"))
    assert nv.status == "fits" and nv.nvme["settings"]["sub_group_size"] < 10 ** 9
    assert (f"what the cookbook's policy picks there (exact fp32 states first, with room for the estimator's measured "
            f"error): ZeRO-3 + opt→nvme + param→nvme with fp32 states, host {nv.host_gib['total']:.1f}/{recorded:g} GiB, "
            "fits") in row["note"]


def _floor(n, mb, ga, seq, c):
    """benchmarks/report.py's serial floor for ZeRO-3 + optimizer and parameter offload on one GPU, by hand."""
    return (8 * n * mb * ga * seq / (c["bf16_matmul_tflops"] * 1e12) + 4 * n * ga / (c["h2d_gb_s"] * 1e9)
            + 2 * n * ga / (c["d2h_gb_s"] * 1e9) + n / c["cpu_adam_params_per_s"])


def test_answers_1x4090_row_says_what_nvme_measured_and_the_batch_shape(tmp_path):
    desktop = memory.choose_offload_run(Plan(**LLAMA_1X4090, host_memory_gib=64.0), nvme_ok=True, nvme_free_gib=None)
    skipped = "TRY_NVME is False; it could not run here anyway: 119.6 GiB needed, 14.3 GiB free"
    summary = {"tokens_per_s": 427.26, "device": "NVIDIA H200", "world_size": 1, "num_params": N_LLAMA7B,
               "model": "llama-7b", "micro_batch": 2, "grad_accum": 8, "seq_len": 1024, "zero_stage": 3,
               "offload_optimizer": "cpu", "offload_param": "cpu", "step_time_s": 38.39}
    label = "ZeRO-3 + opt→cpu + param→cpu"
    road = {"floors": [{"disk": "consumer PCIe 4.0 SSD (datasheets)", "read GB/s": 7.0, "write GB/s": 6.5,
                        "SSD-only floor s/step": 64.1, "tokens/s at most": 255.6}]}
    results.record(tmp_path / "06", "06_final_1x4090", rehearsal=False, central=label, expected="ok",
                   runs={label: {"status": "ok", "summary": summary, "metrics": [{"loss": 11.2}],
                                 "estimate": {"device": "cuda"}}},
                   desktop_choice=desktop.to_dict(), nvme_status="skipped", nvme_skipped_reason=skipped,
                   this_machine_choice={"kind": "bf16 states", "bf16_states": True, "label": label}, nvme_road=road)
    row = answers_mod.answers_frame({"06_final_1x4090": results.load_results(tmp_path / "06")}).iloc[-1]
    assert desktop.reason.rstrip(".") in row["recipe"] and all(a in row["recipe"] for a in desktop.alternatives)
    assert f"with bf16 states, llama-7b, micro batch 2 × accumulation 8 × 1024 tokens" in row["measured here"]
    # the report's short cells: a GPU run's numbers stay (427 tokens/s, 1 rank); the model and shape are a note
    frame, notes = answers_mod.answers_table({"06_final_1x4090": results.load_results(tmp_path / "06")})
    short = frame.iloc[-1]
    assert short["measured here"] == f"ok: 427 tokens/s, {label} with bf16 states on {row['measured here'].split(' on ')[-1]}"
    assert short["recipe"] == f"{desktop.plan.label} with NVMe offload" and desktop.reason.rstrip(".") in notes
    assert "measured here: llama-7b, micro batch 2 × accumulation 8 × 1024 tokens, 1 rank" in notes
    assert all(len(str(v)) <= answers_mod.CELL_MAX for v in short.values)
    first, last = (int(x) for x in short["notes"].split("–"))
    assert frame.iloc[0]["notes"] == "1" and notes[0].startswith("not run here") and (first, last) == (2, len(notes))
    assert frame.iloc[0]["measured here"] == "not run here" and "LLaMA-7B itself has not run with NVMe offload on a GPU" in "".join(notes)
    note = row["note"]
    assert f"this notebook's NVMe run: skipped ({skipped})" in note
    # the projection column is the recipe's (the NVMe variant on this row), not the measured CPU-offload run's
    from cookbook.speed import Machine, gpu_spec, predict
    est = memory.estimate(desktop.plan, bf16_states=desktop.bf16_states)
    want = predict(est, Machine(gpu_spec("RTX 4090"), 16)).tokens_per_s
    assert desktop.plan.offload_param == "nvme" and row["RTX 4090 projection tokens/s"] == round(want, 0)
    assert f"the speed model for the recipe ({desktop.plan.label})" in note
    # one outcome per model and aio setting over every shipped NVMe runs record: finished if any run finished,
    # else stopped, else not run; 7B never ran with NVMe on a GPU
    shipped = [r for f in sorted((ROOT / "data" / "reference").glob("*nvme_runs*.json"))
               for r in json.loads(f.read_text())["runs"]]
    outcome = {}
    for r in shipped:
        key = (r["model"], r["aio"])
        best = {"ok": 2, "not_run": 0}.get(r["status"], 1)
        if best >= outcome.get(key, (-1, None))[0]:
            outcome[key] = (best, r["status"])
    for (model, aio), (_, status) in outcome.items():
        assert f"{model} ({aio} aio) {status}" in note, (model, aio)
    assert ("llama-1b", "default") in outcome and outcome["llama-1b", "default"][1] == "ok"
    assert note.count("llama-1b (default aio)") == 1                            # the earlier stop beside it, once
    assert ("an earlier run stopped — h200_nvme_runs_2026-12-01.json: failed, DeepSpeed #3062; fixed since in "
            "build_config") in note
    assert not any(r["model"] == "llama-7b" and r["status"] == "ok" for r in shipped)
    assert "LLaMA-7B itself has not run with NVMe offload on a GPU" in note
    assert "at least 64.1 s a step, at most 256 tokens/s" in note
    # the reference run of LLaMA-7B at micro 8 × 2 beside this run at 2 × 8: shapes, floors, measured steps
    h200 = json.loads((ROOT / "data" / "reference" / "h200x2_2026-11-30.json").read_text())
    ref = next(r for r in h200["rungs"] if r["name"] == "llama7b-z3-offall-bf16-states")
    c = reference.reference_ceilings()  # the measured H200 ceilings the projections use (first file that has them)
    mb, ga = ref["plan"]["micro_batch"], ref["plan"]["grad_accum"]
    assert (mb, ga) == (8, 2)
    f_ref, f_run = _floor(N_LLAMA7B, mb, ga, 1024, c), _floor(N_LLAMA7B, 2, 8, 1024, c)
    assert (f"{ref['tokens_per_s']:,.0f} tokens/s, RTX 4090 projection "
            f"{ref['projection_rtx4090']['tokens_per_s']:,.0f}) used micro batch 8 × accumulation 2 × 1024 tokens, "
            "this run 2 × 8 × 1024: the same 16 rows per optimizer step") in note
    assert "8 times a step instead of 2" in note
    assert f"{f_run:.1f} s vs {f_ref:.1f} s" in note
    assert f"measured 38.4 s vs {ref['step_time_s']:.1f} s a step ({f_run / 38.39:.2f} vs " \
           f"{f_ref / ref['step_time_s']:.2f} of the floor)" in note
    # the rehearsal's row: the reference projection is for 8 × 2; at the recipe's 2 × 8 the same fraction gives less
    results.record(tmp_path / "r06", "06_final_1x4090", rehearsal=True, central="central", expected="ok",
                   runs={"central": {"status": "ok", "summary": {"tokens_per_s": 900.0, "device": "cpu",
                                                                 "world_size": 1, "num_params": 354_624},
                                     "metrics": [{"loss": 2.0}], "estimate": {"device": "cpu"}}},
                   desktop_choice=desktop.to_dict())
    note = answers_mod.answers_frame({"06_final_1x4090": results.load_results(tmp_path / "r06")}).iloc[-1]["note"]
    r4090 = answers_mod.RTX4090_MODEL
    at_recipe = ref["projection_rtx4090"]["tokens_per_s"] * _floor(N_LLAMA7B, 8, 2, 1024, r4090) \
        / _floor(N_LLAMA7B, 2, 8, 1024, r4090)
    assert "the recipe 2 × 8 × 1024: the same 16 rows" in note
    assert f"at the recipe's shape the same fraction of the RTX 4090 floor gives ~{at_recipe:,.0f} tokens/s" in note


def test_an_output_dir_that_cannot_be_created_is_one_line(tmp_path):
    """`cookbook run-all --output-dir /proc/x` ended in a FileNotFoundError traceback; a file in the way of the
    folder (…/file/x) in NotADirectoryError. Both: exit 2, one line naming the flag."""
    (tmp_path / "file").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "cookbook.cli", "run-all", "--output-dir", str(tmp_path / "file" / "x")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--output-dir={tmp_path / 'file' / 'x'}: cannot be created (Not a directory)" in proc.stderr
