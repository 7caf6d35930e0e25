"""``--help`` that shows every option's default, once."""

from __future__ import annotations

import argparse

__all__ = ["DefaultsFormatter", "add_command"]


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's ``(default: X)`` after each option's help, unless the help says it.

    An option whose default is None or a flag's False has no value to show:
    its help says in words what happens without it (``(default: OUT/data)``),
    and argparse's own ``(default: None)`` would follow it.

    ``_get_help_string`` is the one method ``ArgumentDefaultsHelpFormatter``
    itself overrides; ``tests/test_cli.py`` reads the help of every
    subcommand, so an argparse that stops calling it fails there.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        help = action.help or ""
        if "(default" in help or action.default is None or action.default is False:
            return help
        return super()._get_help_string(action) or ""


def add_command(subparsers, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """Register subcommand ``name``: ``help`` in ``hwdecomp --help``, ``description`` atop its own, defaults shown."""
    return subparsers.add_parser(name, help=help, description=description, formatter_class=DefaultsFormatter)
