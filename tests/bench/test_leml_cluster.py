"""``scarce bench leml --sections distributed`` (bench.leml_cluster): the synthetic problem
written part by part, and the flow run as a process of its own in two modes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scarce.bench import leml as bench
from scarce.bench.leml_cluster import write_parts
from scarce.tasks.leml import input_parts
from scarce.tasks.leml_files import parquet_pair
from scarce.tasks.store.encoding import read_parquet_entry
from tests.bench.tables import leml_table


def test_each_part_is_the_generator_drawn_from_its_own_stream(tmp_path):
    counts = write_parts(tmp_path / "parts", 10, 200, 100, 3, seed=1, stream=7)
    files = input_parts(tmp_path / "parts", "parquet")
    assert [f.name for f in files] == [f"part-00{i}.X.parquet" for i in range(3)]
    nnz_x = nnz_y = 0
    for i, (path, rows) in enumerate(zip(files, (4, 3, 3), strict=True)):
        X, Y = read_parquet_entry(path), read_parquet_entry(parquet_pair(path)[1])
        X0, Y0 = bench.synthetic_wikipedia(rows, 200, 100, seed=1, stream=(7, i))
        assert X.shape == (rows, 200) and Y.shape == (rows, 100)
        assert (abs(X - X0)).max() == 0 and (abs(Y - Y0)).max() == 0
        nnz_x, nnz_y = nnz_x + X.nnz, nnz_y + Y.nnz
    assert counts == {"n": 10, "nnz_x": nnz_x, "nnz_y": nnz_y}
    # the default stream is the whole problem's sample of before (the synthetic section's)
    a, _ = bench.synthetic_wikipedia(5, 200, 100, seed=1)
    b, _ = bench.synthetic_wikipedia(5, 200, 100, seed=1, stream=(7, 0))
    assert (abs(a - b)).max() > 0


def test_a_workers_row_blocks_are_counted_as_the_flow_prepares_them(tmp_path):
    """``block_bytes``: per part, the bytes of the block the flow prepares from it."""
    from scarce.algorithms.leml.data import prepare_rows
    from scarce.bench.leml_cluster import block_bytes
    from scarce.tasks.leml_dask import data_nbytes

    write_parts(tmp_path / "parts", 30, 200, 100, 3, seed=1, stream=0)
    files = input_parts(tmp_path / "parts", "parquet")
    expected = []
    for path in files:
        X, Y = read_parquet_entry(path), read_parquet_entry(parquet_pair(path)[1])
        block = prepare_rows(X, Y, fit_intercept=False, dtype="float32",
                             layout={"labels": "full", "index_dtype": None})
        expected.append(data_nbytes(block))
    assert block_bytes(tmp_path / "parts") == expected


@pytest.mark.usefixtures("prefect_server")
def test_the_flow_in_one_process_and_on_blocks_gives_a_table_of_both(tmp_path):
    table = leml_table("--datasets", "none", "--sections", "distributed",
                       "--synthetic-scale", "0.0001", "--modes", "local,blocks",
                       "--parts", "2", "--flow-iterations", "2")
    for mode in ("local", "blocks"):
        row = table[f"LEML flow ({mode})"]
        iterations = [row[f"iteration {i} seconds (W + H)"] for i in (1, 2)]
        assert row["wall seconds"] > sum(iterations) > 0
        assert row["mean iteration seconds"] == pytest.approx(np.mean(iterations), abs=1e-3)
        assert 0.05 < row["client peak RSS GiB"] < 4
        assert all(0 <= row[f"precision@{k}"] <= 1 for k in (1, 3, 5))
    blocks = table["LEML flow (blocks)"]
    # rounding of the block sums only: the same problem solved, 2 iterations of 10 CG
    assert blocks["max|dW|/max|W| vs local (x1e-6)"] < 1e3
    assert blocks["max|dH|/max|H| vs local (x1e-6)"] < 1e3
    assert blocks["W-step / bare products"] > 0
    assert pd.isna(table.get(("LEML flow (local)", "W-step / bare products"), np.nan))


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_server")
def test_the_flow_with_its_solvers_on_a_worker_gives_the_same_factors(tmp_path):
    """``dask-1-worker`` (``compute.solvers: worker``: the solvers on the benchmark's cluster
    too) against ``dask-1`` (the cluster for the row blocks only): W and H bit for bit, and
    the worker's peak measured."""
    table = leml_table("--datasets", "none", "--sections", "distributed",
                       "--synthetic-scale", "0.0001", "--modes", "dask-1,dask-1-worker",
                       "--parts", "2", "--flow-iterations", "2",
                       "--dask-memory-limit", "2GiB")
    tasks = table["LEML flow (dask-1-worker)"]
    assert tasks["W and H bit-identical to the first Dask mode"] == 1
    assert tasks["worker 0 peak RSS GiB"] > 0
    assert tasks["worker 0 peak above its row blocks GiB"] == pytest.approx(  # the table
        tasks["worker 0 peak RSS GiB"] - tasks["worker 0 row blocks GiB"], abs=1e-3)  # 4 digits
    assert 0 <= tasks["worker 0 row blocks GiB"] < tasks["worker 0 peak RSS GiB"]  # KiB here
    # the same products timed in one process, as the one worker holds them
    assert tasks["W-step / bare products on as many processes at once"] > 0
    assert 0.2 < tasks["bare products: one process / as many at once (the machine's ceiling)"] < 5
    assert 0.05 < tasks["client peak RSS GiB"] < 4


@pytest.mark.slow  # starts a Python process
def test_the_peak_of_a_child_is_its_own_not_this_processs():
    """``_PeakWatch`` reads the child's own high-water mark: a child touching 64 MiB peaks
    near that while this process holds 256 MiB more (``ru_maxrss`` from ``wait4`` reported
    at least this process's RSS at the fork)."""
    import os
    import subprocess
    import sys

    from scarce.bench.leml_cluster import _PeakWatch

    held = np.ones(256 * 2**20 // 8)  # touched: resident in this process
    code = "import numpy, time; a = numpy.ones(64 * 2**20 // 8); time.sleep(1.0)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    watch = _PeakWatch(proc.pid)
    os.wait4(proc.pid, 0)
    watch.stop()
    proc.returncode = 0
    assert 64 * 2**20 < watch.peak < 64 * 2**20 + 200 * 2**20
    assert held.sum() > 0


def test_a_task_is_off_its_worker_when_its_block_lives_on_the_other():
    """Blocks 0..3 on workers a, b, a, b (block b on sorted workers [b mod 2]): a block task
    (``-block<b>``) or a block's read (``-<b>of<n>``) on the other worker counts; a task of
    no block (a label block's solve) never does, nor a task of another program."""
    from scarce.tasks.leml_dask import tasks_off_their_worker

    stream = [
        {"key": "leml-w-block-0123abcd-0of4", "worker": "tcp://a"},   # on its worker
        {"key": "leml-w-block-0123abcd-1of4", "worker": "tcp://a"},   # off: 1 is b's
        {"key": "leml-w-hess_vec-f00d-7-block2", "worker": "tcp://a"},
        {"key": "leml-w-hess_vec-f00d-8-block3", "worker": "tcp://a"},  # off
        {"key": "leml-h-gram-f00d-9-block1", "worker": "tcp://b"},
        {"key": "leml-h-solve_label_block-f00d-10", "worker": "tcp://a"},
        {"key": "other-thing-block1", "worker": "tcp://a"},
    ]
    assert len(tasks_off_their_worker(stream, ["tcp://b", "tcp://a"])) == 2
    # one worker a: every block is a's, so only the sum on b is off
    assert len(tasks_off_their_worker(stream, ["tcp://a"])) == 1


def test_a_workers_samples_are_put_in_the_task_computing_at_their_time():
    """Hand-worked: worker a computes a block's read over [0, 2] and a Hessian product over
    [3, 4] (a transfer over [2, 3] is not computing); worker b's tasks do not count for a.
    Samples at 1 and 2 are in the read, 2.5 between tasks, 3.5 in the product, 9 after
    every task."""
    from scarce.bench.leml_cluster import BETWEEN_TASKS, peaks_by_task, task_kind

    stream = [
        {"worker": "a", "key": "leml-w-block-3f9a0c1d-0of4",
         "startstops": [{"action": "compute", "start": 0.0, "stop": 2.0}]},
        {"worker": "a", "key": "leml-w-hess_vec-1a2b3c4d-7-block0",
         "startstops": [{"action": "transfer", "start": 2.0, "stop": 3.0},
                        {"action": "compute", "start": 3.0, "stop": 4.0}]},
        {"worker": "b", "key": "leml-w-hess_vec-1a2b3c4d-7-block1",
         "startstops": [{"action": "compute", "start": 0.0, "stop": 9.0}]},
    ]
    samples = [(1.0, 10), (2.0, 30), (2.5, 50), (3.5, 40), (9.0, 20)]
    assert peaks_by_task(samples, stream, "a") == {"w-block": 30, "w-hess_vec": 40,
                                                   BETWEEN_TASKS: 50}
    assert peaks_by_task(samples, stream, "c") == {BETWEEN_TASKS: 50}
    assert task_kind("leml-e-block_metric_sums-9f8e7d6c-block3") == "e-block_metric_sums"
    assert task_kind("finalize-0123456789abcdef0123456789abcdef") == "finalize"


def test_the_timeline_reads_each_process_until_stopped_and_skips_one_gone():
    """This process's ``VmRSS`` (about what ``/proc`` says now, in bytes), read until the
    timeline stops (waited on a count of readings, with a generous cap); a pid that does not
    exist gives no reading and no error."""
    import os
    import time

    from scarce.bench.leml_cluster import _RSSTimeline, _status_bytes

    timeline = _RSSTimeline({"here": os.getpid(), "gone": 2**22 + 1}, every=0.01)
    for _ in range(3000):  # 3 readings, 30 s at most
        if len(timeline.samples["here"]) >= 3:
            break
        time.sleep(0.01)
    timeline.stop()
    count = len(timeline.samples["here"])
    time.sleep(0.05)
    assert count >= 3 and len(timeline.samples["here"]) == count  # stopped
    assert timeline.samples["gone"] == []
    times = [t for t, _ in timeline.samples["here"]]
    assert times == sorted(times)
    now = _status_bytes(os.getpid(), "VmRSS")
    assert all(0.5 * now < rss < 2 * now for _, rss in timeline.samples["here"])
