"""What the Prefect UI shows of a run: its table, markdown, image and progress artifacts.

A run's :class:`Artifacts` (``ctx.artifacts``) publishes them under keys of the flow's and
the data set's names (``<flow>-<dataset>-<name>``: the UI's latest ``leml-bibtex-metrics`` is
Bibtex's, whatever ran since on Delicious), keeps the PNG of every published figure for the
run folder's ``plots/``, and memoises drawing a figure in the store (:meth:`Artifacts.plot`).
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from scarce.tasks.store import Store
from scarce.tasks.store.encoding import CorruptEntry
from scarce.tasks.store.leases import Lease

PLOTS = "plots"  # the run folder's subfolder of PNG figures (not compared by rerun)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Artifacts:
    """The artifacts of one run of ``flow`` (``run_id``), and the figures it keeps.

    ``plots`` maps an artifact key to the PNG that :meth:`finish <flows.runtime.RunContext>`
    writes to ``plots/<key>.png``; ``plot_refs`` maps it to the figure's store memo, which the
    manifest lists so that ``scarce cache gc`` keeps it.
    """

    flow: str
    run_id: str
    store: Store
    lease: Lease | None = None
    dataset: str | None = None  # the data set's name, in every key
    plots: dict[str, bytes] = field(default_factory=dict)
    plot_refs: dict[str, str] = field(default_factory=dict)
    _memos: dict[str, str] = field(default_factory=dict)  # sha256 of a PNG -> its memo

    def key(self, name: str) -> str:
        """The artifact key of ``name``: ``<flow>-<dataset>-<name>`` (``<flow>-<name>`` without
        a data set), lower case, dashes."""
        parts = [self.flow, self.dataset, name] if self.dataset else [self.flow, name]
        return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")

    def table(self, name: str, value: Any, description: str = "") -> None:
        """A table artifact from a stored table (a ref) or a DataFrame."""
        from prefect.artifacts import create_table_artifact

        frame = self.store.read(value) if isinstance(value, str) else value
        records = json.loads(frame.to_json(orient="records"))  # NaN -> null
        create_table_artifact(table=records, key=self.key(name), description=description)

    def markdown(self, name: str, text: str, description: str = "") -> None:
        """A markdown artifact."""
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(markdown=text, key=self.key(name), description=description)

    def image(self, name: str, png: bytes, description: str = "") -> None:
        """A markdown artifact showing ``png``; the file goes to ``plots/<key>.png``.

        Parameters
        ----------
        name : str
            The figure's name, in the artifact's key (:meth:`key`).
        png : bytes
            The figure, a PNG image.
        description : str
            One short line: the artifact's description, the image's alt text and its caption.

        Raises
        ------
        ValueError
            When ``png`` is not a PNG image.

        Notes
        -----
        The image travels inside the artifact as a ``data:image/png;base64`` URL, so the UI
        shows it without a file server.  It is a markdown artifact, ``![description](data:...)``
        and a one-line caption, not an image artifact: the UI prints an image artifact's data,
        here the whole URL (tens of thousands of characters), as the link text under the
        picture, while it renders a markdown image as an ``<img>`` with the alt text alone.
        The file is written when the run finishes (a failed run writes no run folder) and
        listed under ``plots`` in the manifest, outside the outputs that ``rerun`` compares.
        """
        from prefect.artifacts import create_markdown_artifact

        if not png.startswith(PNG_SIGNATURE):
            raise ValueError(f"plot {name!r} is not a PNG image")
        key = self.key(name)
        self.plots[key] = png
        memo = self._memos.get(hashlib.sha256(png).hexdigest())
        if memo is not None:
            self.plot_refs[key] = memo
        alt = " ".join(re.sub(r"[\[\]\\]", "", description or key).split())
        url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        where = f"`{PLOTS}/{key}.png` in the folder of run `{self.run_id}`"
        caption = f"{description} ({where})" if description else f"The figure: {where}."
        text = f"![{alt}]({url})\n\n{caption}"
        create_markdown_artifact(markdown=text, key=key, description=description)

    def plot(self, fn: Any, *args: Any, **kwargs: Any) -> bytes:
        """``fn(*args, **kwargs)`` (a figure as PNG bytes), memoised in the store.

        Drawing a figure costs seconds (importing matplotlib alone is about one), which was
        most of a cached rerun of a small flow.  The PNG is kept as a store entry
        ``plots/<digest>`` (a one-row table with a binary ``png`` column, checksummed like any
        entry), the digest covering the function's source and the plots module's, and the
        arguments (tables by their content).  The manifest lists the memo of each published
        plot, so ``scarce cache gc`` keeps the memos of existing runs and drops the others.
        """
        from scarce.flows import plots as plots_module

        h = hashlib.sha256()
        h.update(inspect.getsource(fn).encode())
        h.update(inspect.getsource(plots_module).encode())
        for value in (*args, *sorted(kwargs.items())):
            if isinstance(value, tuple):  # a keyword: (name, value)
                h.update(value[0].encode())
                value = value[1]
            if isinstance(value, pd.DataFrame):
                h.update(repr((list(value.columns), [str(t) for t in value.dtypes])).encode())
                h.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
            else:
                h.update(repr(value).encode())
        ref = f"plots/{h.hexdigest()[:32]}"
        with self.lease.hold([ref]) if self.lease else nullcontext():
            if self.store.exists(ref):
                try:
                    png = self.store.read(ref)["png"].iloc[0]
                    if isinstance(png, bytes) and png.startswith(PNG_SIGNATURE):
                        self._memos[hashlib.sha256(png).hexdigest()] = ref
                        return png
                except (CorruptEntry, OSError, ValueError, KeyError, IndexError):
                    pass  # a damaged memo is drawn again and rewritten
        png = fn(*args, **kwargs)
        self.store.write(ref, pd.DataFrame({"png": [png]}))
        self._memos[hashlib.sha256(png).hexdigest()] = ref
        return png

    def progress(self, name: str, total: int, description: str = "") -> Progress:
        """A progress artifact (at 0%) for a loop of ``total`` units; ``advance()`` per unit."""
        return Progress(total, key=self.key(name), description=description)


class Progress:
    """A Prefect progress artifact over ``total`` units of a loop.

    Created at 0%; :meth:`advance` updates it when the percentage has moved by a whole point
    or reached 100 (at most about 100 API calls however long the loop).
    """

    def __init__(self, total: int, key: str | None = None, description: str = "") -> None:
        from prefect.artifacts import create_progress_artifact

        self.total, self.done, self.shown = max(int(total), 1), 0, 0.0
        self.artifact_id = create_progress_artifact(0.0, key=key, description=description)

    def advance(self, n: int = 1) -> None:
        from prefect.artifacts import update_progress_artifact

        self.done = min(self.done + n, self.total)
        percent = 100.0 * self.done / self.total
        if percent - self.shown >= 1.0 or (self.done == self.total and percent > self.shown):
            update_progress_artifact(self.artifact_id, percent)
            self.shown = percent


def markdown_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub-style markdown table (pandas' to_markdown needs the tabulate package)."""

    def cell(v: Any) -> str:
        return f"{v:.{digits}g}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])
