"""A Prefect server process that outlives no command, and why one did not start: shared by a
command's temporary server (:mod:`scarce.flows.runners`), the shared server's supervisor
(:mod:`scarce.flows.shared_server`) and ``scarce ui``.  Imports nothing of Prefect."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

# Run inside a server process we start, before it becomes the server: ask the kernel to send it
# SIGTERM when its parent (this command) dies, however it dies (SIGKILL, an abort), and give
# up at once if the parent is already gone.  PR_SET_PDEATHSIG (1) survives the exec.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "parent = int(sys.argv[1])\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != parent:\n"
    "    sys.exit(0)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


#: Prefect settings of every server scarce starts, where its environment does not set them.
#: The task-run recorder writes the task runs' states into the database as the flow's events
#: arrive; by default it writes each event on its own (a statement compiled and committed per
#: event), which kept the server busy on the second core while a flow's steps computed on the
#: first, and a step's arithmetic ran measurably slower beside it.  Written in batches of the
#: events of up to a second, the same rows cost the server a fraction of the CPU; a task run's
#: state shows in the UI up to a second later.  The flush interval is read as whole seconds
#: (0 would make the recorder poll without pause).
SERVER_DEFAULTS = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
}
#: Seconds after which the events a server has received are in its database: the recorder's
#: flush interval of :data:`SERVER_DEFAULTS`, with half a second for the flush itself.
RECORDED_WITHIN = float(
    SERVER_DEFAULTS["PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL"]) + 0.5


def launch_server(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """Start a Prefect server process (``args``: a Python command line) that outlives no
    command: in a session of its own, so that Ctrl-C (SIGINT to the terminal's foreground
    process group) reaches only the command, which then stops the server after reporting to
    it (killed first, the server left the flow retrying a dead API); and, on Linux, killed by
    the kernel when the command dies however it dies.  Its environment (``env``, else this
    process's) gets :data:`SERVER_DEFAULTS` where it does not set them."""
    if sys.platform.startswith("linux") and args[:1] == [sys.executable]:
        args = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *args[1:]]
    env = kwargs.pop("env", None)
    kwargs["env"] = {**SERVER_DEFAULTS, **(os.environ if env is None else env)}
    return subprocess.Popen(args, start_new_session=True, **kwargs)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*")


def last_error(lines: Iterable[str]) -> str:
    """The last line of a traceback among ``lines`` (``sqlite3.OperationalError: disk I/O
    error``), else the last line printed; "no output" when there is none."""
    text = [line.strip() for line in lines if line.strip()]
    errors = [line for line in text if _EXCEPTION_LINE.match(line)]
    return (errors or text or ["no output"])[-1]


def file_size_limit() -> str:
    """`` (the file size limit, ulimit -f, is N KiB)`` when the process has one, else
    empty."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return ""
    return f" (the file size limit, ulimit -f, is {soft // 1024} KiB)"
