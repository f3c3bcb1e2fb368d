"""The garbage collector of a command's process: paused while a command that runs flows
imports (the console script only), then on again, with what the imports made frozen, once the
command's Prefect API is chosen; untouched for every other command and for ``main`` called
from Python.

Each check runs in a fresh interpreter: pausing and freezing are process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs the console script's entrypoint with ``main`` replaced by a probe of the collector,
# then ``prefect_api`` (with PREFECT_API_URL set: no server) after a pause and without one.
PROBE = textwrap.dedent("""
    import gc, json, os, sys
    from scarce.flows import cli, runners

    seen = {}

    def probe(argv):
        seen[argv[0]] = gc.isenabled()
        return 0

    cli.main = probe
    for argv in (["run", "leml"], ["rerun", "RUN"], ["apply", "RUN"], ["runs"], ["claims", "X"],
                 ["--debug", "run", "leml"]):
        try:
            cli.entrypoint(argv)
        except SystemExit:
            pass
        seen[" ".join(argv)] = seen.pop(argv[0])
        gc.enable()  # as settle_collector would have, for the next command
        runners._collector_paused = False

    os.environ["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
    frozen = gc.get_freeze_count()
    with runners.prefect_api():
        unpaused = [gc.isenabled(), gc.get_freeze_count() - frozen]
    runners.pause_collector()
    paused = [gc.isenabled()]
    with runners.prefect_api():
        paused += [gc.isenabled(), gc.get_freeze_count() > frozen]
    print(json.dumps({"seen": seen, "unpaused": unpaused, "paused": paused}))
""")


def test_a_flow_command_imports_with_the_collector_paused_and_runs_its_flows_with_it_on():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # paused (the collector off while main ran) for the commands that run flows only
    assert got["seen"] == {"run leml": False, "rerun RUN": False, "apply RUN": False,
                           "runs": True, "claims X": True, "--debug run leml": False}
    # not paused: the API block changes nothing, freezes nothing
    assert got["unpaused"] == [True, 0]
    # paused: off until the API is chosen, then on, with what existed frozen
    assert got["paused"] == [False, True, True]
