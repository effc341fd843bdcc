"""Command line: `doctor [--json]`, `rehearse MODEL`, `list`,
`run [--only/--exclude] SCRIPT|-m MODULE ...` and `check-data [--json] [--repair] DIR`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv else "help"
    if command == "doctor":
        from spec_compat.cli.doctor import main as doctor

        return doctor(argv)
    if command == "rehearse":
        from spec_compat.rehearse.command import main as rehearse

        return rehearse(argv)
    if command == "run":
        from spec_compat.cli.run import main as run

        return run(argv)
    if command == "check-data":
        from spec_compat.data.check import main as check_data

        return check_data(argv)
    if command == "list":
        from spec_compat.api import REGISTRY

        for p in REGISTRY.patches.values():
            extra = f" speculators{p.speculators}" if p.speculators else ""
            print(f"{p.name:<30} {p.side:<6} {p.qualified_target}{extra}\n    {p.summary}")
        return 0
    print(
        "usage: python -m spec_compat {doctor [--json] | rehearse MODEL [--json] | list | "
        "run [--only A,B] [--exclude C] "
        "SCRIPT [ARGS...] | run -m MODULE [ARGS...] | check-data [--json] [--repair] DIR}",
        file=sys.stderr,
    )
    return 0 if command in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())
