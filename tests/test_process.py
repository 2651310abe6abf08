"""Process control: ranks never outlive their launcher (kill -9 of the command's group, of the command
alone, of a notebook kernel), one live run per output folder (run.lock), `cookbook status`/`stop`,
Ctrl-C's one line, and --resume after each of them. Processes are found independently of the
mechanism under test: by their command line (psutil), not by cookbook.procs' run id."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cookbook.procs import STALE_AFTER_S, RunBusyError, RunLock, run_state

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_until(cond, timeout_s: float, what: str, every: float = 0.2):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


# ----------------------------------------------------------------------------------------------
# the lock, without a real run

HOLDER = textwrap.dedent("""
    import sys, time
    from cookbook.procs import RunLock
    lock = RunLock.acquire(sys.argv[1], command="holder")
    print(lock.run_id, flush=True)
    time.sleep(600)
""")


def test_live_lock_refuses_a_second_run_and_a_dead_ones_is_taken_over(tmp_path):
    from cookbook.launch import launch
    from cookbook.plan import Plan
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        run_id = holder.stdout.readline().strip()
        info = json.loads((run / "run.lock").read_text())
        assert (info["pid"], info["host"], info["command"], info["run_id"]) == \
            (holder.pid, socket.gethostname(), "holder", run_id)
        assert abs(time.mktime(time.strptime(info["start_time"], "%Y-%m-%d %H:%M:%S")) - time.time()) < 120
        with pytest.raises(RunBusyError) as exc:
            RunLock.acquire(run)
        msg = str(exc.value)
        assert f"--output-dir={run}" in msg and f"PID {holder.pid}" in msg and "command: holder" in msg
        assert f"cookbook stop {run}" in msg
        # launch() refuses before writing anything into the live run's folder
        res = launch(Plan(model="tiny-qwen2", num_gpus=2, precision="fp32"), run, resume=True, progress=False)
        assert res.status == "config_error" and f"PID {holder.pid}" in res.message
        assert not (run / "ds_config.json").exists() and not (run / "command.sh").exists()
        st = run_state(run)
        assert st["running"] and st["state"] == "running" and st["lock"]["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
    lock = RunLock.acquire(run, command="second")
    assert f"PID {holder.pid} is no longer running" in lock.note and "taking over the stale lock" in lock.note
    assert json.loads((run / "run.lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert not (run / "run.lock").exists()


def test_lock_of_another_host_goes_stale_by_heartbeat_and_a_reused_pid_is_not_its_owner(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "run.lock"
    path.write_text(json.dumps({"pid": 1, "host": "gpu-box-7", "start_time": "2026-01-01 00:00:00",
                                "command": "cookbook train ...", "run_id": "r1"}))
    with pytest.raises(RunBusyError, match="host gpu-box-7"):
        RunLock.acquire(run)  # fresh heartbeat: another machine's run is live
    old = time.time() - STALE_AFTER_S - 5
    os.utime(path, (old, old))
    lock = RunLock.acquire(run)
    assert "host gpu-box-7 has not touched it" in lock.note
    lock.release()
    # a live PID that is a different process than the one that wrote the lock (PID reused)
    path.write_text(json.dumps({"pid": os.getppid(), "pid_create_time": 12345.0, "host": socket.gethostname(),
                                "start_time": "2026-01-01 00:00:00", "command": "x", "run_id": "r2"}))
    lock = RunLock.acquire(run)
    assert "is no longer running" in lock.note
    lock.release()


def test_status_says_when_a_run_builds_deepspeed_ops(tmp_path, capsys):
    """A first run JIT-compiles CPU Adam for minutes before its first step: status says so, from the build
    lock torch.utils.cpp_extension holds in the ranks' extensions folder (recorded in run.lock)."""
    from cookbook.cli import main
    run, ext = tmp_path / "run", tmp_path / "torch_extensions"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True,
                              env=_env())
    try:
        holder.stdout.readline()
        from cookbook.procs import update_lock
        info = json.loads((run / "run.lock").read_text())
        update_lock(run, info["run_id"], lambda i: i.update(torch_extensions_dir=str(ext)))  # as launch() does
        assert run_state(run)["building"] == [] and "building" not in run_state(run)["message"]
        (ext / "cpu_adam").mkdir(parents=True)
        (ext / "cpu_adam" / "build.ninja").write_text("rule cxx\n")
        (ext / "cpu_adam" / "lock").write_text("")
        st = run_state(run)
        assert st["state"] == "running" and [b["op"] for b in st["building"]] == ["cpu_adam"]
        assert st["message"].startswith("running: building DeepSpeed op(s) cpu_adam (a JIT compile, minutes on a "
                                        f"first run; later runs load the build from {ext})")
        assert main(["status", str(run)]) == 0 and "building DeepSpeed op(s) cpu_adam" in capsys.readouterr().out
        (ext / "cpu_adam" / "lock").unlink()  # the build ended
        assert run_state(run)["building"] == []
    finally:
        holder.kill()
        holder.wait()


# ----------------------------------------------------------------------------------------------
# the parent-death chain, without DeepSpeed: cookbook process -> launcher -> rank

RANK = textwrap.dedent("""
    import os, signal, sys, time
    from cookbook.procs import guard_rank
    if sys.argv[2] == "ignore-sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    guard_rank(grace_s=1.0, poll_s=0.2)
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(600)
""")
AGENT = textwrap.dedent("""
    import os, subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]], start_new_session=True)
    open(sys.argv[4], "w").write(str(os.getpid()))
    time.sleep(600)
""")
COOKBOOK = textwrap.dedent("""
    import subprocess, sys, time
    from cookbook.procs import child_command
    subprocess.Popen(child_command([sys.executable, "-c", *sys.argv[1:]]), start_new_session=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("victim,rank_mode", [("cookbook", "default"), ("launcher", "default"),
                                              ("launcher", "ignore-sigterm")])
def test_parent_death_signal_ends_launcher_and_ranks(tmp_path, victim, rank_mode):
    rank_pid, agent_pid = tmp_path / "rank.pid", tmp_path / "agent.pid"
    top = subprocess.Popen([sys.executable, "-c", COOKBOOK, AGENT, RANK, str(rank_pid), rank_mode, str(agent_pid)],
                           env=_env(), start_new_session=True)
    try:
        _wait_until(lambda: rank_pid.is_file() and rank_pid.read_text() and agent_pid.read_text(), 60, "rank started")
        rank, agent = int(rank_pid.read_text()), int(agent_pid.read_text())
        import psutil
        assert psutil.Process(rank).ppid() == agent and psutil.Process(agent).ppid() == top.pid
        os.kill(top.pid if victim == "cookbook" else agent, signal.SIGKILL)
        t0 = time.time()
        _wait_until(lambda: not _alive(rank) and not _alive(agent), 10, "launcher and rank gone")
        # a rank that ignores SIGTERM is SIGKILLed by its own parent watch after its grace period (1 s here)
        assert time.time() - t0 < (5 if rank_mode == "default" else 8)
    finally:
        os.killpg(top.pid, signal.SIGKILL)
        top.wait()


def test_rank_whose_launcher_died_before_it_armed_the_signal_exits():
    out = subprocess.run([sys.executable, "-c", "from cookbook.procs import guard_rank; guard_rank(); print('ran')"],
                         env=dict(_env(), COOKBOOK_AGENT_PID="1"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "ran" not in out.stdout and "launcher (PID 1) is gone" in out.stderr


# ----------------------------------------------------------------------------------------------
# real 2-rank runs

TRAIN = ["--num-processes", "2", "--zero-stage", "2", "--max-steps", "100000", "--seq-len", "32", "--micro-batch", "1",
         "--grad-accum", "4", "--lr", "3e-3", "--save-steps", "10", "--verify-save", "off", "--no-final-save",
         "--no-progress"]
STARTUP_S = 300  # imports, gloo, DeepSpeed on a loaded 2-core machine


def _run_processes(run: Path) -> list:
    """Launchers and ranks of the run in ``run``, from their command lines."""
    import psutil
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(run) in cmd and ("cookbook.train" in cmd or "accelerate" in cmd):
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.NoSuchProcess:
                pass
    return found


def _steps(run: Path) -> list[int]:
    rows = []
    for line in (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").is_file() else []:
        try:
            rows.append(json.loads(line)["step"])
        except ValueError:
            pass
    return rows


def _newest_complete(run: Path) -> int:
    done = [int(d.name.split("-")[1]) for d in (run / "checkpoints").glob("step-*") if (d / "COMPLETE").is_file()]
    return max(done, default=0)


def _start(run: Path, tmp: Path, name: str, *extra) -> tuple[subprocess.Popen, Path]:
    err = tmp / f"{name}.err"
    (run / "logs" / "rank0.log").unlink(missing_ok=True)  # what is waited for below is this run's
    with open(tmp / f"{name}.out", "w") as out, open(err, "w") as e:
        p = subprocess.Popen([sys.executable, "-m", "cookbook.cli", "train", *TRAIN, "--output-dir", str(run), *extra],
                             stdout=out, stderr=e, env=_env(), start_new_session=True, preexec_fn=_as_in_a_terminal)
    return p, err


def _as_in_a_terminal() -> None:
    """The child starts as a command typed in a terminal does: SIGINT at its default. A test run started in
    the background (``pytest &``, a non-interactive shell's ``&``) has SIGINT ignored, and an ignored signal is
    inherited — the cookbook process would then never see the Ctrl-C this test sends (it honours an ignored
    signal, as ``nohup`` users expect)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _resumed_and_training(run: Path, from_step: int):
    def ok():
        log = run / "logs" / "rank0.log"
        steps = _steps(run)
        return (log.is_file() and f"[resume] continuing from step-{from_step:08d}" in log.read_text()
                and _newest_complete(run) > from_step and steps and steps[-1] > _newest_complete(run))
    _wait_until(ok, STARTUP_S, f"resumed from step {from_step}, at a new checkpoint")
    steps = _steps(run)
    assert steps == list(range(1, steps[-1] + 1)), "metrics continue the checkpoint's steps without a gap"


def _no_rank_within(run: Path, seconds: float) -> float:
    t0 = time.time()
    _wait_until(lambda: not _run_processes(run), seconds, f"no launcher or rank of {run} left",)
    return time.time() - t0


@pytest.mark.slow
def test_kill_9_ctrl_c_stop_and_resume_of_cli_runs(tmp_path):
    run = tmp_path / "run"
    from cookbook.launch import launch
    from cookbook.plan import Plan

    # 1. a live run: status says so; a second run into the folder is refused; kill -9 of its group
    p1, _ = _start(run, tmp_path, "p1")
    try:
        _wait_until(lambda: _newest_complete(run) >= 10 and _steps(run) and _steps(run)[-1] >= 11, STARTUP_S,
                    "first run at a checkpoint")
        st = subprocess.run([sys.executable, "-m", "cookbook.cli", "status", str(run)], capture_output=True, text=True,
                            env=_env(), timeout=60)
        assert st.returncode == 0 and f"{run}: running: step " in st.stdout and f"PID {p1.pid}" in st.stdout, st.stdout
        busy = launch(Plan(model="tiny-qwen2", num_gpus=2, precision="fp32", zero_stage=2), run, resume=True,
                      progress=False)
        assert busy.status == "config_error" and "a run is live there" in busy.message and f"PID {p1.pid}" in busy.message
        assert len(_run_processes(run)) == 3  # the launcher and two ranks
        os.killpg(p1.pid, signal.SIGKILL)
        assert _no_rank_within(run, 15) < 15
    finally:
        p1.kill()
        p1.wait()
    m1 = _newest_complete(run)

    # 2. --resume takes over the stale lock and continues from the checkpoint; kill -9 of the command alone
    p2, err2 = _start(run, tmp_path, "p2", "--resume")
    try:
        _resumed_and_training(run, m1)
        assert "taking over the stale lock" in err2.read_text() and f"PID {p1.pid} is no longer running" in err2.read_text()
        os.kill(p2.pid, signal.SIGKILL)
        assert _no_rank_within(run, 15) < 15
    finally:
        p2.kill()
        p2.wait()
    m2 = _newest_complete(run)

    # 3. Ctrl-C (SIGINT to the cookbook process): one line, no traceback, no rank left
    p3, err3 = _start(run, tmp_path, "p3", "--resume")
    try:
        _resumed_and_training(run, m2)
        p3.send_signal(signal.SIGINT)
        assert p3.wait(timeout=60) == 130
    finally:
        p3.kill()
        p3.wait()
    assert not _run_processes(run)
    text = err3.read_text() + (tmp_path / "p3.out").read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    n, m3 = _steps(run)[-1], _newest_complete(run)
    expected = (f"interrupted at step {n}; `--resume` (resume=True from Python) continues from checkpoint "
                f"step-{m3:08d} (step {m3})")
    assert [l for l in text.splitlines() if "interrupted" in l] == [expected]
    assert not (run / "run.lock").exists()

    # 4. cookbook stop: graceful, the run says "stopped", status says not running
    p4, err4 = _start(run, tmp_path, "p4", "--resume")
    try:
        _resumed_and_training(run, m3)
        stop = subprocess.run([sys.executable, "-m", "cookbook.cli", "stop", str(run), "--timeout", "30"],
                              capture_output=True, text=True, env=_env(), timeout=120)
        assert stop.returncode == 0 and stop.stdout.startswith("stopped (SIGTERM") and "continues from checkpoint" \
            in stop.stdout, stop.stdout + stop.stderr
        assert p4.wait(timeout=60) == 143
    finally:
        p4.kill()
        p4.wait()
    assert not _run_processes(run)
    assert f"stopped by `cookbook stop` at step {_steps(run)[-1]}" in err4.read_text()
    st = run_state(run)
    assert not st["running"] and st["state"] == "stopped" and st["step"] == _steps(run)[-1]
    assert st["checkpoint_step"] == _newest_complete(run) and not (run / "run.lock").exists()
    again = subprocess.run([sys.executable, "-m", "cookbook.cli", "stop", str(run)], capture_output=True, text=True,
                           env=_env(), timeout=60)
    assert again.returncode == 1 and "no run is live" in again.stdout


NOTEBOOK_CELL = """
from cookbook.launch import launch
from cookbook.plan import Plan
plan = Plan(model="tiny-qwen2", num_gpus=2, seq_len=32, micro_batch=1, grad_accum=4, precision="fp32", zero_stage=2,
            gradient_checkpointing=False)
result = launch(plan, OUTPUT_DIR, max_steps=100000, lr=3e-3, save_steps=10, verify_save="off", final_save=False,
                progress=False)
"""


@pytest.mark.slow
def test_killed_notebook_kernel_leaves_no_rank(tmp_path):
    import nbformat
    import psutil
    run = tmp_path / "run"
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    params = nbformat.v4.new_code_cell(f"OUTPUT_DIR = {str(run)!r}", id="p")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(NOTEBOOK_CELL, id="launch")]
    nbformat.write(nb, str(tmp_path / "launch.ipynb"))
    pm = subprocess.Popen([sys.executable, "-m", "papermill", str(tmp_path / "launch.ipynb"),
                           str(tmp_path / "executed.ipynb"), "-k", "python3"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), start_new_session=True)
    try:
        _wait_until(lambda: _steps(run) and _steps(run)[-1] >= 3, STARTUP_S, "the notebook's run is training")
        kernel = next(c for c in psutil.Process(pm.pid).children(recursive=True)
                      if "ipykernel" in " ".join(c.cmdline()))
        lock = json.loads((run / "run.lock").read_text())  # the run is registered to the kernel
        assert lock["pid"] == kernel.pid and lock["command"] == f"launch() in a Jupyter kernel (PID {kernel.pid})"
        assert len(_run_processes(run)) == 3
        kernel.kill()  # what a restart does to a kernel busy in a cell
        assert _no_rank_within(run, 15) < 15
    finally:
        os.killpg(pm.pid, signal.SIGKILL)
        pm.wait()
    assert "stale lock" in run_state(run)["message"]
