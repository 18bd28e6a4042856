"""benchmarks/power_windows.py's nvidia-smi side on a machine without a GPU: which fields it asks
for (the instantaneous power where the driver reports it, the renamed clock-event reasons) against
a stand-in nvidia-smi on PATH, and how it reads the samples back."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import power_windows  # noqa: E402


def fake_smi(tmp_path: Path, answers: dict[str, str]) -> None:
    """An `nvidia-smi` that prints answers[field] for --query-gpu=field and fails for any other
    field, as the real one does for a name it does not know."""
    cases = "\n".join(f'  "--query-gpu={k}") echo "{v}"; exit 0 ;;' for k, v in answers.items())
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\ncase "$1" in\n{cases}\n  *) echo "Field is not a valid field to query." >&2; exit 2 ;;\nesac\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_instant_power_and_clock_event_reasons_where_known(on_path: Path) -> None:
    fake_smi(on_path, {"power.draw.instant": "73.77 W", "clocks_event_reasons.active": "0x0000000000000000"})
    assert power_windows.smi_fields() == ["timestamp", "clocks.sm", "power.draw.instant", "temperature.gpu",
                                          "clocks_event_reasons.active"]


def test_averaged_power_where_the_instant_one_is_not_supported(on_path: Path) -> None:
    # A known field without a value on this board prints [N/A]: the 1 s average it is, then.
    fake_smi(on_path, {"power.draw.instant": "[N/A]", "clocks_throttle_reasons.active": "0x0000000000000004"})
    assert power_windows.smi_fields() == ["timestamp", "clocks.sm", "power.draw", "temperature.gpu",
                                          "clocks_throttle_reasons.active"]


def test_neither_field_known(on_path: Path) -> None:
    fake_smi(on_path, {})
    assert power_windows.smi_fields() == ["timestamp", "clocks.sm", "power.draw", "temperature.gpu"]


def test_parse_smi_reads_rows_and_skips_bad_ones(tmp_path: Path) -> None:
    fields = ["timestamp", "clocks.sm", "power.draw.instant", "temperature.gpu", "clocks_event_reasons.active"]
    log = tmp_path / "smi.csv"
    log.write_text("timestamp, clocks.sm [MHz], power.draw.instant [W], temperature.gpu, reasons\n"
                   "2026/12/07 12:03:39.461, 1440 MHz, 699.35 W, 63, 0x0000000000000004\n"
                   "2026/12/07 12:03:39.481, [N/A], 512.00 W, 63, 0x0000000000000004\n"
                   "2026/12/07 12:03:39.501, 1395 MHz, 687.10 W, 64, 0x0000000000000000\n")
    rows = power_windows.parse_smi(log, fields)
    assert [(r["mhz"], r["w"], r["temp"], r["reasons"]) for r in rows] == [
        (1440.0, 699.35, 63.0, "0x0000000000000004"), (1395.0, 687.10, 64.0, "0x0000000000000000")]
    assert rows[1]["t"] - rows[0]["t"] == pytest.approx(0.040, abs=1e-6)
