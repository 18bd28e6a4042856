"""tests/isolated.py on the CPU: an @isolated test really runs in a child, and the child's pass,
failure, skip and overrun become the parent's. The targets below exist only when the self-test
asks for them (SELFTEST_ENV), so a plain run collects none of them."""

from __future__ import annotations

import os

import pytest

from tests.isolated import CHILD_ENV, isolated, run_in_child, trap_safe_env

SELFTEST_ENV = "MKERNEL_ISOLATED_SELFTEST"
PARENT_PID_ENV = "MKERNEL_ISOLATED_SELFTEST_PARENT"
HERE = "tests/test_isolated.py"

if os.environ.get(SELFTEST_ENV) == "1":

    def test_target_passes_in_a_child():
        assert os.environ[CHILD_ENV] == "1"
        assert str(os.getppid()) == os.environ[PARENT_PID_ENV]
        mps_pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]  # outside any MPS server
        assert os.path.isdir(mps_pipe) and not os.listdir(mps_pipe), mps_pipe

    def test_target_fails():
        assert 2 + 2 == 5, "target-failure-7f3a"

    def test_target_skips():
        pytest.skip("target-skip-reason-91c2")

    def test_target_overruns():
        import time

        time.sleep(60)

    def test_target_dies_by_a_signal():
        import signal

        os.kill(os.getpid(), signal.SIGABRT)  # what a dead CUDA context's abort at exit looks like


def _child(name: str, timeout_s: float = 60.0) -> None:
    run_in_child(f"{HERE}::{name}", timeout_s,
                 extra_env={SELFTEST_ENV: "1", PARENT_PID_ENV: str(os.getpid())})


def test_a_passing_child_passes():
    _child("test_target_passes_in_a_child")


def test_a_failing_child_fails_with_its_report():
    with pytest.raises(pytest.fail.Exception, match="target-failure-7f3a"):
        _child("test_target_fails")


def test_a_skipping_child_skips_with_its_reason():
    with pytest.raises(pytest.skip.Exception, match="target-skip-reason-91c2"):
        _child("test_target_skips")


def test_a_child_past_its_timeout_is_killed_and_fails():
    with pytest.raises(pytest.fail.Exception, match="ran past 3 s"):
        _child("test_target_overruns", timeout_s=3.0)


def test_a_child_killed_by_a_signal_fails():
    with pytest.raises(pytest.fail.Exception, match="signal 6"):
        _child("test_target_dies_by_a_signal")


@isolated(timeout_s=60.0)
@pytest.mark.parametrize("x", [3])
def test_decorated_test_runs_in_a_child_with_its_params(x):
    assert os.environ.get(CHILD_ENV) == "1", "ran in the parent"
    assert x == 3


def test_trap_safe_env_points_mps_at_an_empty_directory_it_removes():
    with trap_safe_env({"X_EXTRA": "1"}) as env:
        pipe = env["CUDA_MPS_PIPE_DIRECTORY"]
        assert os.path.isdir(pipe) and not os.listdir(pipe)
        assert env["X_EXTRA"] == "1" and env["PATH"] == os.environ["PATH"]
    assert not os.path.exists(pipe)
