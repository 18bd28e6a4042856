"""Go and Python records share the zap logger: one level, one format."""

import json
import subprocess
import sys

import pytest

import mkernel


def _run(code: str, **env) -> subprocess.CompletedProcess:
    import os

    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=e)


def test_python_records_go_through_zap_json():
    r = _run("import mkernel; mkernel.get_logger('test').warning('hello %s', 'world')",
             MKERNEL_LOG_LEVEL="info", MKERNEL_LOG_FORMAT="json")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    mine = [x for x in recs if x.get("msg") == "hello world"]
    assert mine, r.stderr
    assert mine[0]["level"] == "warn" and mine[0]["logger"] == "mkernel.test"
    assert "ts" in mine[0]


def test_level_from_env_filters_python_records():
    r = _run("import mkernel; mkernel.get_logger('t').info('hidden'); mkernel.get_logger('t').error('shown')",
             MKERNEL_LOG_LEVEL="error")
    assert "hidden" not in r.stderr and "shown" in r.stderr


def test_set_level_at_run_time():
    r = _run("import mkernel; l = mkernel.get_logger('t'); l.info('a1');"
             "mkernel.set_log_level('info'); l.info('b2')", MKERNEL_LOG_LEVEL="warn")
    assert r.returncode == 0, r.stderr
    assert "a1" not in r.stderr and "b2" in r.stderr


def test_bad_level_is_an_error():
    with pytest.raises(RuntimeError, match="unknown log level"):
        mkernel.set_log_level("loud")
