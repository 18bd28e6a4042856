"""``python -m mkernel <command>``: doctor, topology, demo, launch, knobs, version."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["launch"]:  # its own parser: the rank command's options pass through
        from .launch import main as launch_main

        return launch_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m mkernel", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doctor", help="check this machine's setup; non-zero exit if broken")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--sysfs", default=None, help="read another sysfs root (testing)")
    t = sub.add_parser("topology", help="print the discovered topology as JSON")
    t.add_argument("--sysfs", default=None)
    m = sub.add_parser("demo", help="run the ops across several local processes")
    m.add_argument("--world", type=int, default=4, help="number of ranks (processes)")
    m.add_argument("--nodes", type=int, default=2, help="emulated nodes the ranks are split into")
    m.add_argument("--timeout", type=float, default=120.0)
    m.add_argument("--require-all", action="store_true",
                   help="fail when an op is skipped because its kernel is not built for a backend")
    sub.add_parser("launch", help="run a script as W local ranks (emulated nodes, MPS): "
                   "launch --world W [--nodes N] [--mps] script.py args...")
    k = sub.add_parser("knobs", help="list every MKERNEL_* environment variable mkernel reads")
    k.add_argument("--json", action="store_true", help="print the list as JSON")
    sub.add_parser("version", help="print versions")
    args = parser.parse_args(argv)

    if args.cmd == "doctor":
        from .doctor import run_doctor

        return run_doctor(as_json=args.json, sysfs_root=args.sysfs)
    if args.cmd == "topology":
        from .topology import topology

        print(json.dumps(topology(args.sysfs), indent=2))
        return 0
    if args.cmd == "demo":
        from .demo import run_demo

        return run_demo(world=args.world, nodes=args.nodes, timeout=args.timeout,
                        require_all=args.require_all)
    if args.cmd == "knobs":
        return print_knobs(as_json=args.json)
    if args.cmd == "version":
        import torch

        from . import __version__, _native

        print(f"mkernel {__version__}  core {_native.core.Version()}  C ABI v{_native.API_VERSION}"
              f"  torch {torch.__version__}")
        return 0
    return 2


def print_knobs(as_json: bool = False) -> int:
    """Every MKERNEL_* variable of the C++ side (csrc/env_knobs.cpp, through the extension) and
    of the Python side (_env_knobs.py): name, kind (config or debug), values, default, meaning."""
    from . import _env_knobs

    rows = {k.name: dict(name=k.name, kind=k.kind, values=k.values, default=k.default, doc=k.doc)
            for k in _env_knobs.KNOBS.values()}
    try:
        import torch

        from . import ops  # noqa: F401  (loads the extension)

        for r in json.loads(torch.ops.mkernel._env_knobs()):
            rows.setdefault(r["name"], r)
    except Exception as e:  # noqa: BLE001  (no extension: the Python side's list alone)
        print(f"(the C++ side's variables are not listed: {e})", file=sys.stderr)
    listed = [rows[n] for n in sorted(rows)]
    if as_json:
        print(json.dumps(listed, indent=2))
        return 0
    for kind in ("config", "debug"):
        print("user configuration:" if kind == "config" else "\ndebug and measurement overrides:")
        for r in listed:
            if r["kind"] == kind:
                print(f"  {r['name']}={r['values']}  (default: {r['default']})\n      {r['doc']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
