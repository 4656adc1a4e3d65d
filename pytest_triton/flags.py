"""Options whose value is optional: the bare flag, or the flag with its value after '='.

A flag with choices (`--triton-judge`, `--triton-judge=off`) takes its value only after '=':
the bare flag never takes the next argument, so `--triton-judge tests/x.py` runs tests/x.py.
argparse's optional values (nargs="?") take whatever follows, and a value taken back out cannot
be returned to the test paths (pytest reads them after the options, replacing any put there),
so each `--flag=CHOICE` is an option of its own, found by argparse's exact match before it
splits the argument at '='. A flag whose value is a free name (`--triton-perf-save=main`)
cannot list its values that way: it refuses a test path as a name, saying how to write it.
"""

from __future__ import annotations

import argparse
import os
import re

import pytest


def add_choice_flag(group, flag: str, dest: str, choices: tuple[str, ...], const: str,
                    metavar: str, help: str) -> None:
    """`flag` alone stores `const`; `flag=CHOICE` stores CHOICE (one hidden option each). The
    help starts with the values, '[=on|default|off]', as --help shows no metavar for a flag
    that takes no argument."""
    group.addoption(flag, action="store_const", dest=dest, default=None, const=const,
                    help=f"[={metavar}] {help}")
    for choice in choices:
        group.addoption(f"{flag}={choice}", action="store_const", dest=dest, default=None,
                        const=choice, help=argparse.SUPPRESS)


def add_name_flag(group, flag: str, dest: str, const: str, metavar: str | None,
                  help: str) -> None:
    """`flag` alone stores `const`; `flag=NAME` stores NAME; a test path after the bare flag is
    refused (argparse's nargs="?" would take it as the name)."""
    group.addoption(flag, action="store", dest=dest, default=None, nargs="?", const=const,
                    metavar=metavar, type=_name_value(flag), help=help)


def _name_value(flag: str):
    def check(value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value) or os.path.exists(value):
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a name (letters, digits, '.', '_', '-'); give the name "
                f"with '=' ({flag}=NAME), and put test paths before the bare {flag}")
        return value

    check.__name__ = flag  # argparse names the type in its error
    return check


def check_choices_read_as_paths(config: pytest.Config, flag: str,
                                choices: tuple[str, ...]) -> None:
    """`--triton-judge on` is the bare flag and a test path 'on': where no such path exists,
    say how the value is written, instead of pytest's 'file or directory not found: on'."""
    for arg in config.args:
        if arg in choices and not (config.invocation_params.dir / arg).exists():
            raise pytest.UsageError(
                f"{flag} {arg}: {arg!r} was read as a test path (there is none): {flag} takes "
                f"its value only with '=': {flag}={arg}")
