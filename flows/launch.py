"""The ``scarce`` console script, and the preloaded process's program: the layer above the
command line (:mod:`scarce.flows.cli`) and the preloaded process (:mod:`scarce.flows.preload`),
which ties them together without either importing the other's layer.

``scarce ARGS`` runs the command in the preloaded process when it can (only the standard
library and :mod:`scarce.flows.preload` are imported on the way), else in this process.
``python -m scarce.flows.launch HOME SERVER_PID TOKEN KEY PATH`` is the preloaded process
(started by :func:`scarce.flows.preload.ensure`).
"""

from __future__ import annotations

import contextlib
import json
import sys

from scarce.flows import preload


def entrypoint() -> None:
    """The console script ``scarce``: the command in the preloaded process when it can run
    there (:func:`scarce.flows.preload.run_preloaded`), else
    :func:`scarce.flows.cli.entrypoint` in this process."""
    code = preload.run_preloaded(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from scarce.flows.cli import entrypoint as in_this_process

    in_this_process()


#: Modules a flow run imports on first use, not when its modules are imported: Prefect's
#: encoder of a flow run's parameters.
FIRST_USE = ("fastapi.encoders",)


def load() -> None:
    """Import what the commands import (the command line, every flow's module and
    :data:`FIRST_USE`), and read what a run records of the installed packages (the key
    changes with them)."""
    import importlib

    from scarce.flows import cli, manifest
    from scarce.flows.registry import FLOWS

    cli.build_parser()
    for spec in FLOWS.values():
        spec.load_flow()
        spec.load_model()
    for name in FIRST_USE:
        importlib.import_module(name)
    manifest.package_versions()


def _command(argv: list[str]) -> int:
    from scarce.flows.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors and --help
        code = exc.code
    except KeyboardInterrupt:  # before the command line's own handler was set
        print("interrupted", file=sys.stderr)
        code = 130
    except BaseException:  # noqa: BLE001 (what a fresh process would print)
        import traceback

        traceback.print_exc()
        code = 1
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        return 1
    return code


def _finish(code: int) -> None:
    """What a fresh process does when its command returns (:func:`scarce.flows.cli.entrypoint`):
    wait for its threads (unless interrupted), run the exit handlers, flush."""
    import atexit
    import logging
    import threading

    from scarce.flows.cli import EXIT_INTERRUPTED, EXIT_TERMINATED

    if code not in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()
        else:
            for thread in threading.enumerate():
                if thread is not threading.main_thread() and not thread.daemon:
                    thread.join()
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def run(argv: list[str]) -> int:
    """The command line ``argv`` run as a fresh process runs it, to its exit: its exit code."""
    code = _command(argv)
    _finish(code)
    return code


if __name__ == "__main__":
    sys.path[:] = json.loads(sys.argv[5])
    sys.exit(preload.serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4],
                           load, run))
