"""Process control of launched runs: no rank outlives its launcher, one live run per folder,
``cookbook status`` and ``cookbook stop``.

Ranks die with their launcher: the Linux parent-death signal
------------------------------------------------------------
A run is a chain of three kinds of process: the *cookbook process* (``cookbook train``/``launch``, or
the Jupyter kernel that called :func:`cookbook.launch.launch`) → the *launcher* (``accelerate launch``,
which runs torch elastic's agent in-process) → one process per *rank* (``python -m cookbook.train``,
each started by the agent in a session of its own, so no signal sent to a process group reaches it).
Every link is covered by the kernel's parent-death signal, ``prctl(PR_SET_PDEATHSIG, SIGTERM)``
(prctl(2)): the kernel sends the child SIGTERM when its parent ends, however it ends — ``kill -9``, a
kernel restart in JupyterLab, a closed terminal included.

* cookbook → launcher: the launcher is started as ``python -m cookbook.procs --parent PID -- CMD``,
  which arms the signal, checks that its parent is still PID (it may have died before the signal was
  armed: then it exits at once), exports ``COOKBOOK_AGENT_PID`` and execs CMD (the setting survives
  execve(2); only set-user-ID programs clear it). On SIGTERM torch elastic's agent stops its ranks
  (SIGTERM to each, SIGKILL after its grace period) and exits.
* launcher → rank: each rank arms the signal first thing (:func:`guard_rank`, from
  ``cookbook.train.main``) and checks that its parent is ``COOKBOOK_AGENT_PID``. A daemon thread also
  watches the parent every second (a heartbeat): once the rank is orphaned it sends itself SIGTERM,
  and SIGKILL 15 s later if the graceful exit is stuck (a rank blocked in a collective).
* The kernel sends the signal when the *thread* that forked the child ends, not the process.
  :func:`cookbook.launch.launch` starts the launcher and waits for it in the same thread, so that
  thread ends only after the run; the agent forks its ranks from its main thread.
* Sweep: the environment of every process of a run carries ``COOKBOOK_RUN_ID``; after the launcher
  exits, and in ``cookbook stop``'s hard phase, any process still carrying it is killed
  (:func:`run_processes`, :func:`kill_run`).

A notebook is the cookbook process: killing or restarting its kernel ends the run as ``kill -9`` of the
CLI does. :func:`cookbook.launch.launch` also registers its launchers to be stopped at interpreter exit
(:func:`register_live`), and the lock file records the kernel's PID.

One live run per folder: ``run.lock``
-------------------------------------
``OUTPUT_DIR/run.lock`` (JSON: ``pid``, ``host``, ``start_time``, ``command``, ``run_id``, the launcher
PIDs) exists while a run launched by the cookbook is live there; the cookbook process touches it every
:data:`HEARTBEAT_S` seconds. A second run into the folder is refused (:class:`RunBusyError`) while the
lock is live. A lock is *stale*, and taken over with a console note, when

* on this host: its PID is gone (or is a different process now — the start time is compared) and no
  process of its run remains (processes still dying are given :data:`LEFTOVER_WAIT_S` seconds);
* on another host (a shared file system): its heartbeat is older than :data:`STALE_AFTER_S` seconds
  — a PID on another machine cannot be checked, and a live run there touches the lock every
  :data:`HEARTBEAT_S` seconds. A fresh lock from another host is refused, naming the host.

Checking and writing the lock happen under ``flock(2)`` on the file itself, so two runs starting at once
cannot both take it.
"""
from __future__ import annotations

import ctypes
import json
import os
import shlex
import signal
import socket
import sys
import threading
import time
from pathlib import Path

#: prctl(2) option numbers (linux/prctl.h)
PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2
LOCK_NAME = "run.lock"
#: seconds between touches of the lock by the live cookbook process
HEARTBEAT_S = 5.0
#: a lock from another host whose heartbeat is older than this is stale (12 missed heartbeats)
STALE_AFTER_S = 60.0
#: how long a new run waits for the processes of a dead run to finish dying before refusing
LEFTOVER_WAIT_S = 20.0
#: how long an orphaned rank waits after its SIGTERM before it SIGKILLs itself
RANK_GRACE_S = 15.0
RUN_ID_ENV = "COOKBOOK_RUN_ID"
AGENT_PID_ENV = "COOKBOOK_AGENT_PID"


class RunBusyError(RuntimeError):
    """A live run holds the output folder; the message names it (PID, host, start, command) and the fix."""


# ----------------------------------------------------------------------------------------------
# parent-death signal

def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent (the thread that forked it)
    ends: ``prctl(PR_SET_PDEATHSIG, sig)``, prctl(2). Returns False where unavailable (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parent_death_signal() -> int:
    """The parent-death signal armed for this process (0: none), ``prctl(PR_GET_PDEATHSIG)``."""
    if not sys.platform.startswith("linux"):
        return 0
    value = ctypes.c_int(0)
    ctypes.CDLL(None, use_errno=True).prctl(PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0)
    return value.value


def child_command(argv: list[str], parent_pid: int | None = None) -> list[str]:
    """``argv`` wrapped so that it dies with this process: ``python -m cookbook.procs --parent PID -- argv``."""
    return [sys.executable, "-m", "cookbook.procs", "--parent", str(parent_pid or os.getpid()), "--", *argv]


def _exec_main(argv: list[str]) -> int:
    """``python -m cookbook.procs --parent PID -- CMD...``: arm SIGTERM on parent death, check that
    the parent is still PID, export ``COOKBOOK_AGENT_PID`` (this PID, which CMD keeps) and exec CMD."""
    if len(argv) < 4 or argv[0] != "--parent" or argv[2] != "--":
        print("usage: python -m cookbook.procs --parent PID -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    parent = int(argv[1])
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the signal was armed
        print(f"cookbook.procs: parent {parent} is gone; not starting {argv[3]}", file=sys.stderr)
        return 1
    os.environ[AGENT_PID_ENV] = str(os.getpid())
    cmd = argv[3:]
    os.execvp(cmd[0], cmd)
    return 1  # not reached


def guard_rank(grace_s: float = RANK_GRACE_S, poll_s: float = 1.0) -> int:
    """Make this rank die with its launcher; call first thing in the rank's ``main``.

    Arms SIGTERM as the parent-death signal, exits at once (code 1) when the parent is not the agent
    named by ``COOKBOOK_AGENT_PID`` (it died before the signal was armed), and starts a daemon thread
    that, once the parent is gone, sends SIGTERM to this process and SIGKILL ``grace_s`` seconds
    later. Returns the parent's PID.
    """
    set_parent_death_signal(signal.SIGTERM)
    parent = os.getppid()
    agent = os.environ.get(AGENT_PID_ENV)
    if agent and agent.isdigit() and int(agent) != parent:
        print(f"[stop] the launcher (PID {agent}) is gone; this rank exits", file=sys.stderr, flush=True)
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="cookbook-parent-watch", daemon=True).start()
    return parent


# ----------------------------------------------------------------------------------------------
# processes of a run

def _proc_alive(pid: int | None, create_time: float | None = None) -> bool:
    """Whether ``pid`` runs and (when given) was started at ``create_time`` (not a reused PID)."""
    import psutil
    if not pid:
        return False
    try:
        p = psutil.Process(int(pid))
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(p.create_time() - float(create_time)) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def _create_time(pid: int) -> float | None:
    import psutil
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def run_processes(run_id: str) -> list:
    """The live processes of this host whose environment carries ``COOKBOOK_RUN_ID=run_id``
    (launchers and ranks; readable for processes of the same user), as ``psutil.Process``."""
    import psutil
    found = []
    if not run_id:
        return found
    me = os.getpid()
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            if p.environ().get(RUN_ID_ENV) == run_id and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def kill_run(run_id: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process of the run (:func:`run_processes`); returns their PIDs."""
    pids = []
    for p in run_processes(run_id):
        try:
            p.send_signal(sig)
            pids.append(p.pid)
        except Exception:  # noqa: BLE001 - gone meanwhile
            pass
    return pids


def wait_gone(run_id: str, timeout_s: float) -> list:
    """Wait up to ``timeout_s`` until no process of the run is alive; returns what is still alive
    (psutil processes)."""
    deadline = time.time() + timeout_s
    while True:
        left = run_processes(run_id)
        if not left or time.time() >= deadline:
            return left
        time.sleep(0.3)


# ----------------------------------------------------------------------------------------------
# registry of the runs this interpreter launched (a notebook kernel that exits stops them)

_LIVE: dict[str, list] = {}
_ATEXIT = False


def register_live(run_id: str, popens: list) -> None:
    """Record the launchers of a run started from this interpreter; at interpreter exit (a kernel
    shut down or restarted cleanly) those still running are stopped (SIGTERM to their process group,
    SIGKILL after 10 s, then every process of the run). A SIGKILLed interpreter relies on the
    parent-death signal instead."""
    global _ATEXIT
    _LIVE[run_id] = list(popens)
    if not _ATEXIT:
        import atexit
        atexit.register(_stop_live_runs)
        _ATEXIT = True


def unregister_live(run_id: str) -> None:
    _LIVE.pop(run_id, None)


def stop_popens(popens, grace_s: float = 10.0) -> None:
    """SIGTERM each launcher's process group, then SIGKILL what is left after ``grace_s``; a second
    Ctrl-C during the grace period goes straight to SIGKILL."""
    for p in popens:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.time() + grace_s
    try:
        for p in popens:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
                pass
    except KeyboardInterrupt:
        pass
    for p in popens:
        if p.poll() is None:  # an exited launcher's PID may belong to someone else by now
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _stop_live_runs() -> None:
    for run_id, popens in list(_LIVE.items()):
        stop_popens(popens)
        kill_run(run_id)
    _LIVE.clear()


# ----------------------------------------------------------------------------------------------
# the lock file

def lock_path(run_dir) -> Path:
    return Path(run_dir) / LOCK_NAME


def _now_iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t if t is not None else time.time()))


def caller_command() -> str:
    """What started this process, for the lock: the ``cookbook`` command line, or the notebook kernel."""
    if "ipykernel" in sys.modules:
        return f"launch() in a Jupyter kernel (PID {os.getpid()})"
    argv = list(sys.argv)
    if argv and (Path(argv[0]).name == "cookbook" or argv[0].endswith(os.path.join("cookbook", "cli.py"))):
        argv[0] = "cookbook"
    return shlex.join(argv) if argv and argv[0] else f"python (PID {os.getpid()})"


def read_lock(run_dir) -> dict | None:
    """The lock's JSON, with ``heartbeat_age_s`` added, or None when there is none (or it is empty)."""
    path = lock_path(run_dir)
    try:
        text = path.read_text()
        age = time.time() - path.stat().st_mtime
    except OSError:
        return None
    try:
        info = json.loads(text) if text.strip() else None
    except ValueError:
        info = {"unreadable": text[:200]}
    if isinstance(info, dict):
        info["heartbeat_age_s"] = round(age, 1)
    return info if isinstance(info, dict) else None


def lock_liveness(info: dict) -> tuple[bool, str]:
    """(live, why) for a lock read by :func:`read_lock`."""
    if "unreadable" in info:
        return False, "the lock file is unreadable"
    host, pid = info.get("host"), info.get("pid")
    age = info.get("heartbeat_age_s", 0.0)
    if host != socket.gethostname():
        if age < STALE_AFTER_S:
            return True, (f"PID {pid} on host {host} touched it {age:.0f} s ago (a PID on another host cannot be "
                          f"checked; its lock goes stale after {STALE_AFTER_S:.0f} s without a heartbeat)")
        return False, f"host {host} has not touched it for {age:.0f} s"
    if pid == os.getpid() and info.get("run_id") not in _LIVE:
        return False, "this process's earlier run there has ended"
    if _proc_alive(pid, info.get("pid_create_time")):
        return True, f"PID {pid} is running"
    return False, f"PID {pid} is no longer running"


def busy_message(run_dir) -> str | None:
    """Why a new run may not start in ``run_dir`` (a live lock), or None. A quick check before
    anything is written; :meth:`RunLock.acquire` decides for good."""
    run_dir = Path(run_dir)
    info = read_lock(run_dir)
    if not info:
        return None
    live, why = lock_liveness(info)
    if not live:
        return None
    return _busy_text(run_dir, info, why)


def _busy_text(run_dir, info: dict, why: str) -> str:
    return (f"--output-dir={run_dir}: a run is live there ({_describe(info)}; {why}). Wait for it, "
            f"stop it with `cookbook stop {run_dir}`, or choose another --output-dir.")


def _describe(info: dict) -> str:
    return (f"PID {info.get('pid')} on host {info.get('host')}, started {info.get('start_time')}, "
            f"command: {info.get('command')}")


class RunLock:
    """The lock of one run folder held by this process (see the module docstring)."""

    def __init__(self, run_dir, info: dict, note: str | None):
        self.run_dir = Path(run_dir)
        self.info = info
        self.note = note  # the stale lock taken over, if any
        self._last_beat = time.time()

    @property
    def run_id(self) -> str:
        return self.info["run_id"]

    @classmethod
    def acquire(cls, run_dir, *, command: str | None = None, launch_command: str = "") -> "RunLock":
        """Take the lock of ``run_dir`` (created if missing) for this process.

        Raises:
            RunBusyError: a live run holds it (the message names its PID, host, start, command and the fix).
        """
        import fcntl
        import uuid
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = lock_path(run_dir)
        waited = False
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    if os.fstat(fd).st_ino != os.stat(path).st_ino:
                        continue  # released (unlinked) meanwhile: open the new file
                except FileNotFoundError:
                    continue
                info = read_lock(run_dir)
                note = None
                if info is not None:
                    live, why = lock_liveness(info)
                    if live:
                        raise RunBusyError(_busy_text(run_dir, info, why))
                    left = run_processes(info.get("run_id", ""))
                    if left and not waited and info.get("host") == socket.gethostname():
                        # its processes are still dying (parent-death signal): wait, outside the flock
                        os.close(fd)
                        fd = -1
                        waited = True
                        left = wait_gone(info.get("run_id", ""), LEFTOVER_WAIT_S)
                        if not left:
                            continue
                    if left:
                        raise RunBusyError(
                            f"--output-dir={run_dir}: the run that held it is gone ({why}) but processes of it are "
                            f"still alive (PIDs {', '.join(str(p.pid) for p in left)}); end them with "
                            f"`cookbook stop {run_dir}`, then start again.")
                    note = (f"taking over the stale lock of {run_dir} ({_describe(info)}): {why}")
                me = os.getpid()
                now = time.time()
                mine = {"pid": me, "pid_create_time": _create_time(me), "host": socket.gethostname(),
                        "start_time": _now_iso(now), "started_at": now,
                        "command": command or caller_command(), "launch_command": launch_command,
                        "run_id": uuid.uuid4().hex, "launcher_pids": [], "cwd": os.getcwd()}
                os.ftruncate(fd, 0)
                os.pwrite(fd, (json.dumps(mine, indent=1) + "\n").encode(), 0)
                os.fsync(fd)
                return cls(run_dir, mine, note)
            finally:
                if fd >= 0:
                    os.close(fd)  # closing drops the flock

    def _rewrite(self, update) -> dict | None:
        """Apply ``update(info)`` to the lock on disk under the flock, if the lock is still ours."""
        return update_lock(self.run_dir, self.run_id, update)

    def update(self, **fields) -> None:
        self.info.update(fields)
        self._rewrite(lambda info: info.update(fields))

    def beat(self, force: bool = False) -> None:
        """Touch the lock (the heartbeat) when :data:`HEARTBEAT_S` has passed since the last touch."""
        if force or time.time() - self._last_beat >= HEARTBEAT_S:
            try:
                os.utime(lock_path(self.run_dir))
            except OSError:
                pass
            self._last_beat = time.time()

    def stop_requested(self) -> dict | None:
        info = read_lock(self.run_dir)
        return (info or {}).get("stop_requested") if (info or {}).get("run_id") == self.run_id else None

    def release(self) -> None:
        """Remove the lock if it is still ours."""
        import fcntl
        path = lock_path(self.run_dir)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            info = read_lock(self.run_dir)
            if info and info.get("run_id") == self.run_id and os.fstat(fd).st_ino == os.stat(path).st_ino:
                os.unlink(path)
        except OSError:
            pass
        finally:
            os.close(fd)


def update_lock(run_dir, run_id: str, update) -> dict | None:
    """Apply ``update(info)`` (a function changing the dict in place) to the lock of ``run_dir`` under
    its flock when its ``run_id`` matches; returns the new content, or None (no such lock)."""
    import fcntl
    path = lock_path(run_dir)
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, 1 << 20, 0).decode("utf-8", "replace")
        try:
            info = json.loads(raw) if raw.strip() else None
        except ValueError:
            return None
        if not isinstance(info, dict) or info.get("run_id") != run_id:
            return None
        update(info)
        data = (json.dumps(info, indent=1) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return info
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------
# state of a run folder: cookbook status

def metrics_rows(run_dir: Path) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl`` (a line being written is skipped)."""
    rows = []
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return rows


def latest_checkpoint(run_dir) -> tuple[str | None, int | None]:
    """(folder name, step) of the newest complete checkpoint of the run, or (None, None)."""
    from .checkpoint import checkpoint_step, find_resumable
    found, _ = find_resumable(Path(run_dir) / "checkpoints")
    if found is None:
        return None, None
    try:
        return found.name, checkpoint_step(found)
    except (OSError, ValueError, KeyError):
        return found.name, None


def resume_hint(run_dir, *, python: bool = True) -> str:
    """``--resume continues from checkpoint step-M`` or the no-checkpoint sentence."""
    name, step = latest_checkpoint(run_dir)
    flag = "`--resume`" + (" (resume=True from Python)" if python else "")
    if name is None:
        return "no checkpoint yet: a new run starts from step 0 (--save-steps N saves every N steps)"
    return f"{flag} continues from checkpoint {name} (step {step})"


def building_ops(extensions_dir) -> list[dict]:
    """DeepSpeed ops being JIT-built in ``extensions_dir`` (the ranks' ``TORCH_EXTENSIONS_DIR``), one dict
    per op: ``op`` (the build folder's name, e.g. ``cpu_adam``), ``folder``, ``since_s`` (age of its
    build lock) and ``last_write_s`` (seconds since anything in the folder changed).

    ``torch.utils.cpp_extension.load`` (which DeepSpeed's ``OpBuilder.jit_load`` calls) holds an empty
    ``lock`` file in the op's build folder while it compiles (``torch/utils/file_baton.py``); other ranks
    wait for it to go. The first build of CPU Adam takes minutes on a cold machine; later runs load it.
    """
    root = Path(extensions_dir)
    out, now = [], time.time()
    for lock in sorted((*root.glob("*/lock"), *root.glob("*/*/lock"))) if root.is_dir() else []:
        try:
            since = now - lock.stat().st_mtime
            newest = max([lock.stat().st_mtime] + [f.stat().st_mtime for f in lock.parent.iterdir()])
        except OSError:  # the build ended meanwhile
            continue
        out.append({"op": lock.parent.name, "folder": str(lock.parent), "since_s": round(since, 1),
                    "last_write_s": round(now - newest, 1)})
    return out


def run_state(run_dir) -> dict:
    """What ``cookbook status`` reports for ``run_dir``.

    Returns a dict: ``run_dir``, ``running`` (bool), ``state`` (``running``, ``finished``,
    ``stopped`` — ended before its last step —, ``failed``, ``not started`` or ``no run``), ``lock``
    (the lock's JSON or None), ``lock_note`` (live/stale reason), ``step``, ``max_steps``, ``last``
    (the last row of ``metrics.jsonl``), ``summary_status``, ``checkpoint``/``checkpoint_step``
    (newest complete), ``building`` (while a live run JIT-builds DeepSpeed ops in the extensions folder its
    lock names, :func:`building_ops`; else []) and ``message`` (one line in words).
    """
    run_dir = Path(run_dir).resolve()
    info = read_lock(run_dir)
    live, why = lock_liveness(info) if info else (False, None)
    rows = metrics_rows(run_dir)
    last = rows[-1] if rows else None
    max_steps = None
    try:
        max_steps = json.loads((run_dir / "run.json").read_text()).get("args", {}).get("max_steps")
    except (OSError, ValueError):
        pass
    summary = None
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        pass
    ckpt_name, ckpt_step = latest_checkpoint(run_dir)
    step = last["step"] if last else 0
    # a summary older than the rows (a resumed run still going, or stopped) does not describe them
    summary_fresh = summary is not None and (not rows or summary.get("steps") == step)
    if live:
        state = "running"
    elif summary_fresh and summary.get("status") == "ok":
        state = "finished"
    elif summary_fresh and summary.get("status") not in (None, "stopped"):
        state = "failed"
    elif rows or ckpt_name:
        state = "stopped"
    elif info or (run_dir / "run.json").exists() or (run_dir / "command.sh").exists():
        state = "not started"
    else:
        state = "no run"
    of = f"/{max_steps}" if max_steps else ""
    where = f"step {step}{of}"
    if last:
        bits = [f"loss {last['loss']:.4f}"] + ([f"lr {last['lr']:.3g}"] if last.get("lr") is not None else []) \
            + ([f"{last['tokens_per_s']:.0f} tokens/s"] if last.get("tokens_per_s") is not None else [])
        where += " (" + ", ".join(bits) + ")"
    building = building_ops(info["torch_extensions_dir"]) if live and info.get("torch_extensions_dir") else []
    if state == "running":
        since = time.time() - float(info.get("started_at", time.time()))
        msg = (f"running: {where}; {_describe(info)}; for {since / 60:.1f} min, heartbeat "
               f"{info.get('heartbeat_age_s', 0):.0f} s ago")
        if building:
            ops = ", ".join(b["op"] for b in building)
            msg = (f"running: building DeepSpeed op(s) {ops} (a JIT compile, minutes on a first run; later runs "
                   f"load the build from {Path(building[0]['folder']).parent}): for "
                   f"{max(b['since_s'] for b in building) / 60:.1f} min, last build file written "
                   f"{min(b['last_write_s'] for b in building):.0f} s ago; " + msg[len("running: "):])
    elif state == "finished":
        msg = (f"finished: {summary['steps']} steps, loss {summary['first_loss']:.4f} → {summary['last_loss']:.4f}, "
               f"{summary['tokens_per_s']:.0f} tokens/s")
    elif state == "failed":
        msg = f"not running: ended with status {summary.get('status')!r} at {where}"
    elif state == "stopped":
        msg = f"not running: stopped at {where}; {resume_hint(run_dir, python=False)}"
    elif state == "not started":
        msg = "not running: no step was trained"
    else:
        msg = f"no run in {run_dir} (no run.lock, metrics.jsonl, run.json or checkpoints)"
    if info and not live and state != "no run":
        msg += f" (stale lock: {why})"
    return {"run_dir": str(run_dir), "running": live, "state": state, "lock": info, "lock_note": why,
            "step": step, "max_steps": max_steps, "last": last,
            "summary_status": summary.get("status") if summary else None,
            "checkpoint": ckpt_name, "checkpoint_step": ckpt_step, "building": building, "message": msg}


# ----------------------------------------------------------------------------------------------
# cookbook stop

def stop_run(run_dir, timeout_s: float = 30.0, *, hard: bool = False) -> tuple[bool, str]:
    """Stop the live run in ``run_dir``: mark the lock ``stop_requested`` (the cookbook process watches
    for it, stops its launchers itself and reports status ``stopped``), SIGTERM each launcher's process
    group (torch elastic's agent then stops its ranks), and SIGKILL every process of the run still
    alive after ``timeout_s`` (``hard``: at once). Then wait up to 10 s for the cookbook process to
    release the lock. Processes are found by ``COOKBOOK_RUN_ID`` in their environment, never by a
    recorded PID alone (a PID may have been reused).

    Returns (stopped anything, message). A run on another host is not touched (False)."""
    run_dir = Path(run_dir).resolve()
    info = read_lock(run_dir)
    if not info:
        return False, f"no run is live in {run_dir} (no {LOCK_NAME})"
    if info.get("host") != socket.gethostname():
        return False, (f"the run in {run_dir} runs on host {info.get('host')} (PID {info.get('pid')}): run "
                       f"`cookbook stop {run_dir}` there")
    run_id = info.get("run_id", "")
    live, why = lock_liveness(info)
    if not live:
        left = kill_run(run_id)
        try:
            lock_path(run_dir).unlink()
        except OSError:
            pass
        if left:
            return True, f"the cookbook process is gone ({why}); killed the processes left of its run: {left}"
        return False, f"no run is live in {run_dir}: removed its stale lock ({why})"
    update_lock(run_dir, run_id, lambda i: i.update(stop_requested={"by_pid": os.getpid(), "time": _now_iso(),
                                                                    "hard": hard}))
    launchers = {int(p) for p in info.get("launcher_pids") or []}
    for p in run_processes(run_id):
        if p.pid in launchers:
            try:
                os.killpg(p.pid, signal.SIGKILL if hard else signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    if hard:
        kill_run(run_id)

    def owner_holds() -> bool:
        return (read_lock(run_dir) or {}).get("run_id") == run_id and _proc_alive(info.get("pid"),
                                                                                  info.get("pid_create_time"))
    deadline = time.time() + (0 if hard else timeout_s)
    while time.time() < deadline and (run_processes(run_id) or owner_holds()):
        time.sleep(0.3)
    forced = kill_run(run_id)
    deadline = time.time() + 10.0
    while time.time() < deadline and owner_holds():
        time.sleep(0.2)
    st = run_state(run_dir)
    how = ("killed (SIGKILL)" if hard else
           f"stopped (SIGTERM; {len(forced)} process(es) needed SIGKILL after {timeout_s:.0f} s)" if forced else
           "stopped (SIGTERM)")
    return True, f"{how} at step {st['step']}; {resume_hint(run_dir, python=False)}"


# ----------------------------------------------------------------------------------------------
# CLI

def _status_cli(args) -> int:
    st = run_state(args.run_dir)
    if args.json:
        print(json.dumps(st, indent=1, default=str))
    else:
        print(f"{st['run_dir']}: {st['message']}")
        if st["checkpoint"] and st["state"] == "running":
            print(f"  newest complete checkpoint: {st['checkpoint']} (step {st['checkpoint_step']})")
    return 2 if st["state"] == "no run" else 0


def _stop_cli(args) -> int:
    stopped, message = stop_run(args.run_dir, args.timeout, hard=args.hard)
    print(message)
    return 0 if stopped else 1


def register(subparsers) -> None:
    st = subparsers.add_parser("status", help="is the run in a folder running; its step and last metrics",
                               description="Whether a run is live in RUN_DIR (its run.lock), whether it is JIT-building DeepSpeed ops (first run), the step it reached and "
                                           "its last metrics (metrics.jsonl), its result (summary.json) and newest "
                                           "complete checkpoint. Exit 0, or 2 when RUN_DIR holds no run.")
    st.add_argument("run_dir", help="the run's --output-dir")
    st.add_argument("--json", action="store_true", help="print the state as JSON")
    st.set_defaults(func=_status_cli)
    sp = subparsers.add_parser("stop", help="stop the run in a folder: SIGTERM, then SIGKILL after a timeout",
                               description="Stop the live run in RUN_DIR: SIGTERM to its launcher (which stops the "
                                           "ranks), then SIGKILL to every process of the run still alive after "
                                           "--timeout seconds. Continue later with --resume from the newest complete "
                                           "checkpoint. Exit 0 when a run was stopped, 1 when none was live.")
    sp.add_argument("run_dir", help="the run's --output-dir")
    sp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait after SIGTERM before SIGKILL")
    sp.add_argument("--hard", action="store_true", help="SIGKILL at once")
    sp.set_defaults(func=_stop_cli)


if __name__ == "__main__":
    sys.exit(_exec_main(sys.argv[1:]))
