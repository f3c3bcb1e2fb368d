"""The handlers of the ``scarce`` subcommands, one module a command (or a pair of commands).

Each handler takes the parsed arguments and returns the exit code; :mod:`scarce.flows.cli` parses,
picks the handler (``set_defaults(func=...)``) and turns exceptions into exit codes.  The
modules import their heavy dependencies inside the handlers, so building the parser stays fast.
Here: the exit codes and the help format every parser of the command line shares.
"""

from __future__ import annotations

import argparse

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2
EXIT_PIPE = 141  # as a shell reports a command ended by SIGPIPE


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (a list stays a list), and each option's default
    after its help, unless the help already says it or there is none to say (``None``, an
    empty list, an off flag)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if "default" in (action.help or "") or default is None or (
            isinstance(default, list | tuple) and not default
        ) or (action.nargs == 0 and default is False):
            return action.help
        return super()._get_help_string(action)
