"""``scarce init``: a new project folder, with the flows' configs to edit and a README.

The way ``kedro new`` starts a project: the three training flows' default configs (shipped
with the package) are copied into ``configs/``, their data paths pointing at files under the
project's ``data/``, where the store and the runs go as well.  Nothing existing is replaced
unless asked.
"""

from __future__ import annotations

import re
from pathlib import Path

from scarce.flows.config import packaged_configs
from scarce.flows.outputs import check_targets
from scarce.tasks.errors import InputError
from scarce.tasks.store.atomic import atomic_write_bytes, make_folder, synced_folders

#: Per flow: (a line of the shipped config, as a pattern, and what it becomes in a new project).
EDITS: dict[str, list[tuple[str, str]]] = {
    "leml": [
        (r"^name: .*$", "name: mydata                      # names the runs leml-mydata-..."),
        (r"^  name: .*$", "  name: mydata"),
        (r"^  format: .*$", "  format: table                   # xmc | arff | parquet | table "
                            "(a CSV, TSV, Parquet or JSON Lines table)"),
        (r"^  train: .*$", "  train: data/train.csv           # your training table: a row per "
                           "example"),
        (r"^  test: .*$", "  test: data/test.csv             # your test table, same columns\n"
                          "  table:                          # format table: your columns\n"
                          "    labels_column: tags           # label names: a list, or joined "
                          "by label_separator\n"
                          "    label_separator: \",\"\n"
                          "    text_column: text             # vectorised (TF-IDF, fitted on "
                          "train); or features_column"),
    ],
    "relations": [
        (r"^dataset: .*$", "dataset: mydata"),
        (r"^  - data/.*$", "  - data/pairs.jsonl        # your entity pairs (SemEval text or JSON "
                           "Lines)"),
    ],
    "strip": [
        (r"^dataset: .*$", "dataset: mydata"),
        (r"^data_dir: .*$", "data_dir: data/documents    # your CoNLL-U documents, one per file"),
        (r"^splits_file: .*$", "splits_file: data/splits.tsv  # doc_id <tab> split, one per line"),
    ],
}

#: The header of a written config, in place of the shipped one (which describes the shipped
#: run on its data set, and names files of the repository).
HEADER = """\
# Written by `scarce init` from the defaults shipped with scarce: point the data paths below
# at your own files (their formats: the input formats reference of the docs), then
#   scarce run {flow}
# {description}.
# Every key is checked when a run starts (the configs reference of the docs describes each);
# `scarce run {flow} --set KEY=VALUE` overrides one for a run.  A value whose comment says
# "default ..." is not the method's default, and the comment says why.
"""

README = """\
# A scarce project

```
configs/    one YAML file per flow: the defaults shipped with scarce, with the data paths
            pointing at data/ here; edit them (every key is checked when a run starts)
data/       your data; the result store (data/cache/) and the runs (data/runs/) go here too
```

Put your data where the configs say (or change the paths), then:

```sh
scarce run leml           # or relations, strip; prints the metrics and the run id
scarce runs               # the runs so far
scarce apply RUN_ID --input new.csv --output labels.csv   # a run's model on new data
python -c "import scarce; print(scarce.load_model('latest').predict_top_k(['some text'], 5))"
```

The LEML config reads a CSV with a `text` column and a `tags` column of comma-separated
label names (`data/train.csv`, `data/test.csv`); new rows to label need no `tags`.

Each run writes `data/runs/<run-id>/` (its manifest, metrics and outputs, all Parquet) and can
be rerun to the same bytes with `scarce rerun RUN_ID`.  `SCARCE_ROOT` runs the commands on this
folder from anywhere else.
"""


def init_project(folder: Path, force: bool = False) -> list[Path]:
    """Write ``configs/<flow>.yaml`` for each training flow, ``data/`` and ``README.md`` into
    ``folder`` (created with its parents); returns the files written.

    Raises
    ------
    InputError
        When ``folder`` is a file, or a file to be written exists and ``force`` is false
        (checked before anything is written).
    """
    if folder.exists() and not folder.is_dir():
        raise InputError("not a folder", path=folder, key="DIR")
    files = {folder / "configs" / f"{flow}.yaml": _config(flow) for flow in EDITS}
    files[folder / "README.md"] = README
    existing = [p for p in files if p.exists()]
    if existing and not force:
        raise InputError(f"{len(existing)} file(s) exist, first {existing[0].name}; give "
                         "--force to replace them", path=existing[0], key="DIR")
    check_targets(files, force=force, key="DIR")  # never an input of a run, a store or runs
    with synced_folders() as syncs:  # each folder fsync-ed once, after its last file
        make_folder(folder / "data", syncs)
        for path, text in files.items():
            atomic_write_bytes(path, text.encode("utf-8"), syncs)  # (and its folders)
    return list(files)


def _config(flow: str) -> str:
    """The shipped config of ``flow``, its opening comments replaced by :data:`HEADER` and
    :data:`EDITS` applied (each must match once)."""
    from scarce.flows.registry import FLOWS

    lines = (packaged_configs() / f"{flow}.yaml").read_text(encoding="utf-8").splitlines(True)
    first_key = next(i for i, line in enumerate(lines)
                     if line.strip() and not line.startswith("#"))
    text = "".join(lines[first_key:])
    for pattern, line in EDITS[flow]:
        text, n = re.subn(pattern, line, text, count=1, flags=re.M)
        if n != 1:  # the shipped config changed: the edit no longer applies
            raise RuntimeError(f"configs/{flow}.yaml has no line matching {pattern!r}")
    return HEADER.format(flow=flow, description=FLOWS[flow].description) + text
