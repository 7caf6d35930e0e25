"""``hwdecomp``: one subcommand per module of this package.

Each subcommand module defines ``add_parser(subparsers)`` (which registers
itself and sets ``func``) and a function ``run(args) -> int``. A user's
mistake or broken input (:data:`~dask_hwdecomp.cli.errors.USER_ERRORS`)
prints one line to stderr and exits 2 for a command line that cannot run,
1 for broken input; anything else keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import USER_ERRORS, InputError, UsageError

SUBCOMMANDS = ("info", "demo", "selfcheck", "bench", "service")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="hwdecomp",
        description="Parquet for Dask with page decompression on the GPU.",
    )
    parser.add_argument("--version", action="version", version=f"hwdecomp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"dask_hwdecomp.cli.{name}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hwdecomp`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        kind = "" if isinstance(exc, (UsageError, InputError)) else f"{type(exc).__name__}: "
        # One line: dask wraps a reader's error in a multi-line message.
        print(f"hwdecomp {args.command}: {kind}{' '.join(str(exc).split())}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        print(f"hwdecomp {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
