"""``hwdecomp``: one subcommand per module of this package.

Each subcommand module defines ``add_parser(subparsers)`` (which registers
itself and sets ``func``) and a function ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ("info", "demo", "selfcheck", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hwdecomp",
        description="Parquet for Dask with page decompression on the GPU.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"dask_hwdecomp.cli.{name}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hwdecomp`` console script."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
