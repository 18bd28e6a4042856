"""python -m mkernel launch (python/mkernel/launch.py) on CPU: the ranks' environment, the
emulated-node split, failure propagation, signal forwarding, and the MPS daemon's life cycle
(against a stand-in nvidia-cuda-mps-control: the real one needs a GPU machine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mkernel import launch as L

ROOT = Path(__file__).resolve().parents[2]


def _script(tmp_path: Path, body: str) -> str:
    p = tmp_path / "rank.py"
    p.write_text(textwrap.dedent(body))
    return str(p)


# Each rank writes its environment to out/<rank>.json.
_ENV_DUMP = """
    import json, os, sys
    keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "MKERNEL_EMULATED_NODE", "NCCL_NVLS_ENABLE",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY"]
    out = sys.argv[1]
    with open(os.path.join(out, os.environ["RANK"] + ".json"), "w") as f:
        json.dump({k: os.environ.get(k) for k in keys} | {"argv": sys.argv[2:]}, f)
"""


@pytest.mark.parametrize("world, nodes, want", [
    (4, 2, [0, 0, 1, 1]), (5, 2, [0, 0, 0, 1, 1]), (3, 3, [0, 1, 2]), (8, 3, [0, 0, 0, 1, 1, 1, 2, 2]),
    (1, 1, [0]), (7, 1, [0] * 7)])
def test_node_split(world, nodes, want):
    """Contiguous blocks whose sizes differ by at most one, in rank order."""
    assert [L.node_of(r, world, nodes) for r in range(world)] == want


def test_rank_env_is_torchrun_style():
    e = L.rank_env(4, 5, 2, 29500, mps=True)
    assert e["RANK"] == "4" and e["WORLD_SIZE"] == "5" and e["MASTER_PORT"] == "29500"
    assert e["MKERNEL_EMULATED_NODE"] == "1" and e["GROUP_RANK"] == "1"
    assert e["LOCAL_RANK"] == "1" and e["LOCAL_WORLD_SIZE"] == "2"  # node 1 holds ranks 3, 4
    assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20" and e["NCCL_NVLS_ENABLE"] == "0"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in L.rank_env(0, 2, 1, 1)


def test_split_argv_leaves_the_rank_command_alone():
    assert L.split_argv(["--world", "2", "--mps", "-m", "pkg.mod", "--world", "9"]) == (
        ["--world", "2", "--mps"], ["-m", "pkg.mod", "--world", "9"])
    assert L.split_argv(["--world=3", "--", "--nodes"]) == (["--world=3"], ["--nodes"])
    assert L.split_argv(["--nodes", "2", "s.py", "--mps"]) == (["--nodes", "2"], ["s.py", "--mps"])


def test_every_rank_gets_its_environment(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = _script(tmp_path, _ENV_DUMP)
    assert L.launch([script, str(out), "--flag", "x"], world=5, nodes=2, quiet=True) == 0
    envs = [json.loads((out / f"{r}.json").read_text()) for r in range(5)]
    assert [e["MKERNEL_EMULATED_NODE"] for e in envs] == ["0", "0", "0", "1", "1"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2", "0", "1"]
    assert {e["MASTER_PORT"] for e in envs} == {envs[0]["MASTER_PORT"]}
    assert all(e["WORLD_SIZE"] == "5" and e["argv"] == ["--flag", "x"] for e in envs)
    assert all(e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] is None for e in envs)


def test_first_failure_stops_the_others(tmp_path):
    """Rank 2 fails with 7 at once; the others would sleep a minute: they are terminated and
    the launcher returns 7 within seconds."""
    script = _script(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "2":
            sys.exit(7)
        time.sleep(60)
    """)
    t0 = time.monotonic()
    assert L.launch([script], world=4, nodes=2, grace=2.0, quiet=True) == 7
    assert time.monotonic() - t0 < 20


def test_rank_ignoring_sigterm_is_killed_after_grace(tmp_path):
    script = _script(tmp_path, """
        import os, signal, sys, time
        if os.environ["RANK"] == "0":
            time.sleep(0.5)
            sys.exit(3)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
    """)
    t0 = time.monotonic()
    assert L.launch([script], world=2, grace=1.0, quiet=True) == 3
    assert time.monotonic() - t0 < 15


def test_killed_rank_status_is_128_plus_signal(tmp_path):
    script = _script(tmp_path, """
        import os, signal, time
        if os.environ["RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """)
    assert L.launch([script], world=2, grace=1.0, quiet=True) == 128 + signal.SIGKILL


def test_signals_are_forwarded(tmp_path):
    """SIGTERM to the launcher reaches every rank (each writes a file from its handler) and the
    launcher exits with 128 + SIGTERM."""
    out = tmp_path / "out"
    out.mkdir()
    script = _script(tmp_path, f"""
        import os, signal, sys, time
        def on_term(signum, frame):
            open(os.path.join({str(out)!r}, os.environ["RANK"]), "w").write(str(signum))
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        open(os.path.join({str(out)!r}, "ready" + os.environ["RANK"]), "w").close()
        time.sleep(60)
    """)
    # launch.py alone (not `python -m mkernel`): no torch import in the launcher under test.
    runner = (f"import sys; sys.path.insert(0, {str(ROOT / 'python' / 'mkernel')!r}); import launch; "
              f"sys.exit(launch.main(sys.argv[1:]))")
    p = subprocess.Popen([sys.executable, "-c", runner, "--world", "3", "--grace", "5", script],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(list(out.glob("ready*"))) < 3:
            assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.poll() else ""
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 128 + signal.SIGTERM
    assert sorted(f.name for f in out.iterdir() if not f.name.startswith("ready")) == ["0", "1", "2"]
    assert all((out / str(r)).read_text() == str(int(signal.SIGTERM)) for r in range(3))


# A stand-in for nvidia-cuda-mps-control: `-d` "starts" the daemon (creates pipe/control and
# logs the start), commands on stdin succeed only while control exists, `quit` removes it.
_FAKE_MPS = """#!{python}
import os, sys
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
ctl = os.path.join(pipe, "control")
with open(os.path.join(os.environ["CUDA_MPS_LOG_DIRECTORY"], "calls"), "a") as f:
    f.write(" ".join(sys.argv[1:]) + "|" + sys.stdin.read().strip() if sys.argv[1:] != ["-d"] else "-d")
    f.write("\\n")
if sys.argv[1:] == ["-d"]:
    os.makedirs(pipe, exist_ok=True)
    open(ctl, "w").close()
    sys.exit(0)
if not os.path.exists(ctl):
    sys.exit(1)
with open(os.path.join(os.environ["CUDA_MPS_LOG_DIRECTORY"], "calls")) as f:
    if f.read().strip().endswith("|quit"):
        os.remove(ctl)
"""


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-cuda-mps-control"
    exe.write_text(_FAKE_MPS.format(python=sys.executable))
    exe.chmod(0o755)
    pipe, log = tmp_path / "mps-pipe", tmp_path / "mps-log"
    log.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    monkeypatch.setenv("CUDA_MPS_LOG_DIRECTORY", str(log))
    return pipe, log


def test_mps_daemon_started_and_stopped(tmp_path, fake_mps):
    pipe, log = fake_mps
    out = tmp_path / "out"
    out.mkdir()
    assert L.launch([_script(tmp_path, _ENV_DUMP), str(out)], world=4, nodes=2, mps=True, quiet=True) == 0
    envs = [json.loads((out / f"{r}.json").read_text()) for r in range(4)]
    assert all(e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25" for e in envs)
    assert all(e["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe) for e in envs)
    calls = (log / "calls").read_text().splitlines()
    assert "-d" in calls and calls[-1] == "|quit", calls
    assert not (pipe / "control").exists()


def test_running_mps_daemon_is_reused_and_left_running(tmp_path, fake_mps):
    pipe, log = fake_mps
    pipe.mkdir()
    (pipe / "control").touch()  # "already running"
    assert L.launch([_script(tmp_path, "pass\n")], world=2, mps=True, quiet=True) == 0
    calls = (log / "calls").read_text().splitlines()
    assert "-d" not in calls and not any(c.endswith("|quit") for c in calls), calls
    assert (pipe / "control").exists()


def test_mps_without_the_driver_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(L.LaunchError, match="nvidia-cuda-mps-control is not on PATH"):
        L.launch([_script(tmp_path, "pass\n")], world=2, mps=True, quiet=True)


def test_bad_arguments():
    with pytest.raises(L.LaunchError, match="--nodes"):
        L.launch(["x.py"], world=2, nodes=3)
    with pytest.raises(L.LaunchError, match="no script"):
        L.launch([], world=2)
    with pytest.raises(L.LaunchError, match="cannot start rank 0"):
        L.launch(["/nonexistent/program"], world=2, quiet=True)
