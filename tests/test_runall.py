"""cookbook run-all and what it reads and writes: argument handling, failure reporting, the HTML report
(cookbook.report), the results notebooks record (cookbook.results), and the numbers of the helpers the
notebooks show — tables, figures, the articles' arithmetic, the hardware ceilings, the GPU references —
computed here by hand from the parameter counts."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

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
    small = memory.choose_variant(machine.replace(host_memory_gib=256))[0]
    assert small.plan.label == "ZeRO-3 + opt→nvme + param→nvme"   # 136 GiB of host RAM; CPU offload needs 326+
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
    assert frame.loc["ZeRO-2", "loss last 5"] == 5.5 and frame.loc["ZeRO-2", "estimate host GiB"] == 1.1
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
    assert "ZeRO variants side by side" in text and "data:image/png;base64," in text and "h1" in text
    # CPU rehearsal: world size an integer, GPU-only columns labelled once in the header, no raw None
    assert frame.loc["ZeRO-2", "world size"] == 2 and isinstance(frame.loc["ZeRO-2", "world size"], int)
    assert "peak GPU reserved GiB — n/a (CPU)" in frame.columns and frame.loc["ZeRO-2", "steps"] == "—"
    assert "<td>None</td>" not in text and "<td>2.0</td>" not in text and "<td>2</td>" in text
    assert "n/a (CPU)" in text and "0.55 GiB per rank" in text   # why the rehearsal's variants measure alike


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
    assert "0.55 GiB per rank" in note and "5.4 MiB" in note and "data/reference/" in note  # 16 × 354880 / 2**20 = 5.42
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
    assert "within 0.117" in sentence  # last-5 means (here all 3 steps): 6.0 and 6.1167
