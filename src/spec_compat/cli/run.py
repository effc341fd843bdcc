"""`spec-compat run SCRIPT [ARGS...]` / `python -m spec_compat run -m MODULE [ARGS...]`.

The `ddtrace-run` / `opentelemetry-instrument` convention: apply the patches, then run the
user's script or module as `__main__` with its own arguments.  Its exit code and its
exceptions pass through unchanged.  Patch selection: `--only a,b` / `--exclude c`, or the
environment variables SPEC_COMPAT_ONLY / SPEC_COMPAT_EXCLUDE (comma-separated names).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from spec_compat.engine.names import ENV_REPLICA, REPLICA_PATCH


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="spec-compat run",
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Everything after SCRIPT (or -m MODULE) goes to it untouched.",
    )
    parser.add_argument("--only", help="apply only these patches (comma-separated)")
    parser.add_argument("--exclude", help="leave these patches out (comma-separated)")
    parser.add_argument("-m", dest="module", help="run a module as __main__")
    replicas = parser.add_argument_group("data-parallel on Ray (pip install 'spec-compat[ray]')")
    replicas.add_argument("--replicas", type=int, help="copies of SCRIPT, each on a chunk")
    replicas.add_argument("--ray-address", help="join this Ray cluster (default: a local one)")
    replicas.add_argument("--attempts", type=int, default=3, help="tries a chunk gets")
    replicas.add_argument("--keep-parts", action="store_true", help="keep OUTPUT.replicas")
    replicas.add_argument(
        "--chunks-per-replica",
        type=int,
        default=3,
        help="about this many chunks a replica (each restarts vLLM; a chunk is the unit of "
        "retry and of balance)",
    )
    parser.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS...] or ARGS")
    args = parser.parse_args(argv)
    if not args.module and not args.target:
        parser.error("give a SCRIPT or -m MODULE")

    if args.replicas is not None:
        if args.module or args.replicas < 1 or args.chunks_per_replica < 1:
            parser.error("--replicas takes a SCRIPT and counts of at least 1")
        from spec_compat.replicas.run import main as replicas

        script, *rest = args.target
        return replicas(args, script, rest)

    from spec_compat import api
    from spec_compat.engine.selection import from_user

    api.apply(**from_user(args.only, args.exclude))
    if os.environ.get(ENV_REPLICA):  # a copy in a replicas run: it writes its chunk only
        api.apply(only=[REPLICA_PATCH])
    if args.module:
        sys.argv = [args.module, *args.target]
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    else:
        script, *rest = args.target
        sys.argv = [script, *rest]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")
    return 0
