"""Ctrl-C stops `scarce serve` even when a flow-run process lives on.

Prefect's runner waits for each flow-run process in a thread (``process.join``) that no
cancellation interrupts, and ends the processes still alive only after that wait; a process
that outlived its run held the command after Ctrl-C.  The runner here is a stand-in with that
same wait, in a subprocess (the signal must reach a process of its own), around a spawned
child that never ends by itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import asyncio
    import multiprocessing
    import time

    import anyio

    from scarce.flows.deploy import serve_until_interrupted


    def linger():
        time.sleep(3600)


    class Runner:
        async def start(self):
            child = multiprocessing.get_context("spawn").Process(target=linger)
            child.start()
            print(f"child {child.pid}", flush=True)
            async with anyio.create_task_group() as group:
                # what Prefect's runner awaits for each flow-run process
                group.start_soon(anyio.to_thread.run_sync, child.join)


    if __name__ == "__main__":
        asyncio.run(serve_until_interrupted(Runner(), grace=1))
        print("stopped", flush=True)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_ctrl_c_ends_a_lingering_flow_run_process_and_stops(tmp_path):
    script = tmp_path / "serve_stand_in.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    child = None
    try:
        first = proc.stdout.readline()
        assert first.startswith("child "), first
        child = int(first.split()[1])
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)  # 1 s of grace, then SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    assert f"ending flow-run process {child} (SIGTERM, SIGKILL after 1 s)" in out
    assert out.rstrip().endswith("stopped")
    deadline = time.monotonic() + 30  # reaped by the stand-in's join; a generous cap
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)
