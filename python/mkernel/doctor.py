"""``python -m mkernel doctor``: what this machine offers mkernel, and what
is set up wrong. Exit status 0 when nothing is broken, 1 otherwise.

Each finding is ``ok``, ``warn`` (works, but not as well as it could) or
``error`` (mkernel would fail or misbehave: fix before running).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
from dataclasses import asdict, dataclass
from typing import Any

import torch

from . import _env_knobs

OK, WARN, ERROR = "ok", "warn", "error"


@dataclass
class Finding:
    check: str
    status: str
    detail: str


def _gpus(findings: list[Finding]) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = []
    if not torch.cuda.is_available():
        findings.append(Finding("cuda", WARN, "no CUDA GPU visible to torch: ops run their CPU reference kernels"))
        return gpus
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": p.name, "sm_count": p.multi_processor_count,
                     "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1),
                     "pci_bus_id": getattr(p, "pci_bus_id", None)})
        if (p.major, p.minor) != (9, 0):
            findings.append(Finding(f"gpu{i}", WARN,
                                    f"{p.name} is sm_{p.major}{p.minor}: mkernel's fused kernels need Hopper "
                                    "(sm_90a); other GPUs use the unfused fallback"))
    findings.append(Finding("cuda", OK, f"{len(gpus)} GPU(s): " + ", ".join(
        f"{g['name']} ({g['sm_count']} SMs)" for g in gpus)))
    return gpus


def _nvlink_matrix(n: int) -> list[list[str]]:
    """Peer access between visible GPUs ('X' self, 'P' peer access, '.' none)."""
    return [["X" if i == j else ("P" if torch.cuda.can_device_access_peer(i, j) else ".")
             for j in range(n)] for i in range(n)]


def _transports(topo: dict[str, Any], findings: list[Finding]) -> list[str]:
    available = ["loopback", "tcp"]
    nics = topo.get("nics") or []
    kinds = {n.get("kind") for n in nics}
    for kind, lib in (("ibverbs", "ibverbs"), ("efa", "efa")):
        have_lib = ctypes.util.find_library(lib) is not None
        if kind in kinds and have_lib:
            available.append(kind)
        elif kind in kinds:
            findings.append(Finding(f"transport.{kind}", ERROR,
                                    f"{kind} NICs present but lib{lib}.so is missing: install rdma-core "
                                    f"(Debian: apt-get install lib{lib}1)"))
    if not nics:
        findings.append(Finding("nics", WARN, "no RDMA NIC found: inter-node traffic uses the tcp transport"))
    return available


def _environment(findings: list[Finding]) -> dict[str, Any]:
    env = {k: _env_knobs.get(k) if k.startswith("MKERNEL_") else os.environ.get(k) for k in (
        "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "MKERNEL_LOG_LEVEL", "MKERNEL_LOG_FORMAT",
        "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}
    nvls = env["NCCL_NVLS_ENABLE"]
    if nvls is None:
        findings.append(Finding("env.NCCL_NVLS_ENABLE", WARN,
                                "unset: NCCL may use NVLink multicast (NVLS); set NCCL_NVLS_ENABLE=0"))
    elif nvls.strip() != "0":
        findings.append(Finding("env.NCCL_NVLS_ENABLE", ERROR,
                                f"={nvls!r}: NVLink multicast must stay off; set NCCL_NVLS_ENABLE=0"))
    else:
        findings.append(Finding("env.NCCL_NVLS_ENABLE", OK, "0 (NVLink multicast off)"))
    if env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] not in (None, "1"):
        findings.append(Finding("env.TORCH_SYMM_MEM_DISABLE_MULTICAST", ERROR,
                                "must be 1 (or unset): NVLink multicast must stay off"))
    level = env["MKERNEL_LOG_LEVEL"]
    if level is not None and level.strip().lower() not in ("debug", "info", "warn", "warning", "error", "critical"):
        findings.append(Finding("env.MKERNEL_LOG_LEVEL", ERROR,
                                f"={level!r} is not a level (debug, info, warn, error)"))
    if env["CUDA_VISIBLE_DEVICES"] == "":
        findings.append(Finding("env.CUDA_VISIBLE_DEVICES", WARN, "set but empty: no GPU is visible"))
    return env


def _mps(findings: list[Finding]) -> dict[str, Any]:
    pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    running = os.path.exists(os.path.join(pipe_dir, "control"))
    state = {"pipe_directory": pipe_dir, "running": running,
             "active_thread_percentage": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        if local > torch.cuda.device_count() and not running:
            findings.append(Finding("mps", WARN,
                                    f"{local} local ranks share {torch.cuda.device_count()} GPU(s) without MPS: "
                                    "spinning kernels time-slice (~5 ms per flag round trip); start MPS"))
        else:
            findings.append(Finding("mps", OK, "running" if running else "not running"))
    return state


def _half_gemm(findings: list[Finding]) -> dict[str, float]:
    """torch's half-precision GEMM (cuBLAS) checked on this process's GPU share: mkernel's forward
    ops run their own kernels, but the backward's local GEMMs and every torch layer around them
    are torch's; session 46 found them silently wrong on an MPS share of an H100."""
    if not torch.cuda.is_available():
        return {}
    from ._local_gemm import HALF_GEMM_TOL, half_gemm_errors

    try:
        errors = half_gemm_errors("cuda")
    except RuntimeError as e:  # a GPU that cannot run a matmul is what doctor must report
        findings.append(Finding("torch.half_gemm", ERROR, f"torch's half-precision matmul failed on GPU 0: {e}"))
        return {}
    bad = {k: v for k, v in errors.items() if not v <= HALF_GEMM_TOL}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    share = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    where = f"GPU 0 as this process sees it ({sms} SMs" + (f", MPS share {share}%)" if share else ")")
    if bad:
        worst = max(bad, key=lambda k: bad[k])
        findings.append(Finding("torch.half_gemm", ERROR,
                                f"torch {torch.__version__}'s half-precision matmul is wrong on {where}: "
                                f"{len(bad)} of {len(errors)} cases past {HALF_GEMM_TOL}, worst {worst}: "
                                f"{bad[worst]:.3g} vs float64. Gradients through torch layers and mkernel's "
                                "backward GEMMs move to its engine (MKERNEL_LOCAL_GEMM=auto), but torch layers stay wrong; "
                                "run on a whole GPU or another torch/CUDA build"))
    else:
        findings.append(Finding("torch.half_gemm", OK,
                                f"bf16/fp16 matmul right on {where} (worst {max(errors.values()):.2g})"))
    return errors


def collect(sysfs_root: str | None = None) -> dict[str, Any]:
    """Gather the doctor's report as a dict (what ``--json`` prints)."""
    findings: list[Finding] = []
    report: dict[str, Any] = {"host": platform.node()}
    try:
        from . import __version__, _native

        report["versions"] = {"mkernel": __version__, "core": _native.core.Version(),
                              "c_abi": _native.API_VERSION, "torch": torch.__version__,
                              "cuda": torch.version.cuda, "python": platform.python_version()}
        findings.append(Finding("core", OK, f"Go control plane loaded (C ABI v{_native.API_VERSION})"))
    except Exception as e:  # a broken install is exactly what doctor must report
        findings.append(Finding("core", ERROR, f"mkernel failed to load: {e}"))
        report["findings"] = [asdict(f) for f in findings]
        return report
    from .topology import topology

    try:
        topo = topology(sysfs_root)
    except Exception as e:
        findings.append(Finding("topology", ERROR, f"topology discovery failed: {e}"))
        topo = {}
    report["topology"] = topo
    report["gpus"] = _gpus(findings)
    report["nvlink_matrix"] = _nvlink_matrix(len(report["gpus"])) if report["gpus"] else []
    report["transports"] = _transports(topo, findings)
    report["environment"] = _environment(findings)
    report["mps"] = _mps(findings)
    report["half_gemm"] = _half_gemm(findings)
    report["findings"] = [asdict(f) for f in findings]
    report["broken"] = any(f.status == ERROR for f in findings)
    return report


def _print_report(r: dict[str, Any]) -> None:
    v = r.get("versions", {})
    print(f"mkernel doctor on {r.get('host')}")
    if v:
        print("  versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    topo = r.get("topology") or {}
    print(f"  sysfs GPUs: {len(topo.get('gpus') or [])}, RDMA NICs: {len(topo.get('nics') or [])}, "
          f"NUMA nodes: {len(topo.get('numa_nodes') or [])}")
    for g in r.get("gpus", []):
        print(f"  GPU {g['index']}: {g['name']}, sm_{g['capability'].replace('.', '')}, {g['sm_count']} SMs, "
              f"{g['memory_gib']} GiB")
    if r.get("nvlink_matrix"):
        print("  peer access matrix (P = peer access):")
        for i, row in enumerate(r["nvlink_matrix"]):
            print(f"    GPU{i} " + " ".join(row))
    for nic in topo.get("nics") or []:
        print(f"  NIC {nic.get('name')}: {nic.get('kind')}, numa {nic.get('numa_node')}")
    for p in topo.get("placements") or []:
        print(f"  placement: GPU {p.get('gpu') or p.get('bus_id')} -> NICs {p.get('nics')}, "
              f"proxy CPUs {p.get('proxy_cpus')}")
    print("  transports: " + ", ".join(r.get("transports", [])))
    for f in r.get("findings", []):
        print(f"  [{f['status']:>5}] {f['check']}: {f['detail']}")
    print("  result: " + ("BROKEN" if r.get("broken", True) else "ok"))


def run_doctor(as_json: bool = False, sysfs_root: str | None = None) -> int:
    report = collect(sysfs_root)
    if as_json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_report(report)
    return 1 if report.get("broken", True) else 0
