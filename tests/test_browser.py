"""Notebook 01 in a real JupyterLab, driven by headless Chromium: the memory calculator works for a person.

A JupyterLab server starts on 127.0.0.1 with a token, serving a copy of ``notebooks/01_oom_reproduction.ipynb``
in the test's folder; Chromium (Debian's ``chromium``, driven by Playwright from PyPI) opens it, runs every
cell up to and including the calculator (the cells after it launch DeepSpeed runs, minutes on a CPU — the
papermill tests execute those), drags the GPU-count slider and picks a ZeRO stage with the mouse, and
checks that the verdicts and the chart follow: the verdict text must be exactly what
:func:`cookbook.memory.sweep` says for the plan the widgets now show. A screenshot goes to the test's folder.
Then the notebook is saved from JupyterLab (Ctrl+S), the check flags its outputs, and
``python -m cookbook.notebooks --clean`` turns it back into the committed source byte for byte.

Skipped, saying which, when Chromium, JupyterLab or Playwright is missing (``.ci/run`` installs Chromium with
apt-get; ``pip install -e '.[test]'`` brings the other two).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "01_oom_reproduction.ipynb"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
#: flags that keep a headless Chromium quiet and local on a machine without a display or network
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _missing() -> str | None:
    if not CHROMIUM:
        return "Chromium not installed (apt-get install chromium; .ci/run does it)"
    for module, what in (("playwright", "Playwright"), ("jupyterlab", "JupyterLab")):
        try:
            __import__(module)
        except ImportError:
            return f"{what} not installed (pip install -e '.[test]')"
    return None


pytestmark = [pytest.mark.browser, pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture()
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 serving ``tmp_path/lab``; yields (url, token, folder)."""
    from cookbook.hardware import free_port
    folder = tmp_path / "lab"
    folder.mkdir()
    shutil.copy2(NOTEBOOK, folder / NOTEBOOK.name)
    home = tmp_path / "jupyter"
    # JupyterLab settings: every cell rendered (no windowing), no news or update checks (no network here)
    settings = home / "settings"
    _write_json(settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings", {"windowingMode": "none"})
    _write_json(settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings",
                {"fetchNews": "false", "checkForUpdates": False})
    _write_json(home / "config" / "jupyter_server_config.json", {
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
                   "expose_app_in_browser": True},
        "ServerApp": {"terminals_enabled": False}})
    token, port = secrets.token_hex(16), free_port()
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's inline backend draws the chart
    env.update(JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),  # kernel = this Python
               PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    log = open(tmp_path / "jupyterlab.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                             f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--allow-root",
                             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not start: " + (tmp_path / "jupyterlab.log").read_text()[-2000:])
            time.sleep(0.5)
        yield url, token, folder
    finally:
        _stop_group(proc)
        log.close()


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop the server and the kernels it started (its process group): SIGTERM, then SIGKILL after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


#: the PNG a widget ``<img>`` shows (ipywidgets serves it as a blob URL), as a data URL
_IMAGE_DATA = """async img => { const blob = await (await fetch(img.src)).blob();
    return await new Promise(done => { const r = new FileReader(); r.onload = () => done(r.result); r.readAsDataURL(blob); }); }"""


def _expected(num_gpus: int, stage: tuple | None) -> list[str]:
    """The verdicts the calculator must print for notebook 01's plan with ``num_gpus`` GPUs."""
    from cookbook.memory import sweep
    from cookbook.plan import VARIANTS, Plan
    plan = Plan(model="qwen-14b", num_gpus=num_gpus, gpu_memory_gib=24.0, seq_len=512, micro_batch=1, grad_accum=16,
                precision="bf16")
    return [e.verdict for e in sweep(plan, VARIANTS if stage is None else [stage])]


def test_the_calculator_in_jupyterlab(lab, tmp_path):
    from playwright.sync_api import expect, sync_playwright
    url, token, folder = lab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/lab/tree/{NOTEBOOK.name}?token={token}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext.session "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                                   timeout=60_000)
            cells = page.locator(".jp-Notebook .jp-Cell")
            index = next(i for i in range(cells.count()) if "memory.calculator(" in cells.nth(i).inner_text())
            # run every cell above the calculator, then the calculator (JupyterLab's own commands)
            page.evaluate("""async (i) => {
                const app = window.jupyterapp, panel = app.shell.currentWidget;
                await panel.sessionContext.ready;
                panel.content.activeCellIndex = i;
                await app.commands.execute('notebook:run-all-above');
                await app.commands.execute('notebook:run-cell');
            }""", index)
            calc = cells.nth(index)
            out, chart = calc.locator(".jp-OutputArea-output .widget-html"), calc.locator("img.widget-image")
            expect(chart).to_be_visible(timeout=120_000)
            for line in _expected(8, None):
                expect(out).to_contain_text(line, timeout=30_000)
            chart_before = chart.evaluate(_IMAGE_DATA)
            text_before = out.inner_text()

            # drag the GPU-count slider to its left end (1 GPU) with the mouse
            slider = calc.locator(".widget-slider", has=page.locator("label", has_text="GPUs"))
            handle, track = slider.locator(".noUi-handle"), slider.locator(".noUi-base")
            calc.scroll_into_view_if_needed()
            h, t = handle.bounding_box(), track.bounding_box()
            page.mouse.move(h["x"] + h["width"] / 2, h["y"] + h["height"] / 2)
            page.mouse.down()
            page.mouse.move(t["x"] - 20, t["y"] + t["height"] / 2, steps=8)
            page.mouse.up()
            expect(slider.locator(".widget-readout")).to_have_text("1", timeout=10_000)
            for line in _expected(1, None):
                expect(out).to_contain_text(line, timeout=60_000)
            assert out.inner_text() != text_before
            # the verdict itself flips for ZeRO-3 + optimizer offload: 8 GPUs share the 16-bit states, 1 holds them all
            z3_8, z3_1 = (next(v for v in _expected(n, None) if v.startswith("ZeRO-3 + opt→cpu:")) for n in (8, 1))
            assert " fits;" in z3_8 and "DOES NOT FIT" in z3_1
            assert z3_8 in text_before and z3_1 in out.inner_text()

            # pick one ZeRO stage from the dropdown
            calc.locator(".widget-dropdown", has=page.locator("label", has_text="ZeRO")).locator("select").select_option(
                label="ZeRO-2")
            (zero2,) = _expected(1, (2, "none", "none"))
            expect(out).to_contain_text(zero2, timeout=60_000)
            expect(out).not_to_contain_text("ZeRO-3", timeout=30_000)
            chart_after = chart.evaluate(_IMAGE_DATA)
            assert chart_before.startswith("data:image/png;base64,") and chart_after.startswith("data:image/png;base64,")
            assert chart_after != chart_before                       # six bars for 8 GPUs, one for ZeRO-2 on 1
            assert chart.evaluate("img => img.naturalWidth") > 300  # a drawn PNG, not a broken image
            calc.scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / "calculator.png"))
            assert (tmp_path / "calculator.png").stat().st_size > 10_000

            # save from JupyterLab: the file now has outputs; the check flags them, --clean restores the source
            saved = folder / NOTEBOOK.name
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 30
            while '"execution_count": 1' not in saved.read_text() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            browser.close()
    assert '"execution_count": 1' in saved.read_text(), "JupyterLab did not save the executed notebook"
    check = [sys.executable, "-m", "cookbook.notebooks"]
    flagged = subprocess.run(check + [str(saved)], capture_output=True, text=True)
    assert flagged.returncode == 1 and "outputs in cells" in flagged.stderr
    assert subprocess.run(check + ["--clean", str(saved)], capture_output=True, text=True).returncode == 0
    assert saved.read_text() == NOTEBOOK.read_text()
