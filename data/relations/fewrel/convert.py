"""How ``val_wiki.jsonl.gz`` was made from FewRel 1.0's ``val_wiki.json`` (standard library only).

    python data/relations/fewrel/convert.py FEWREL_DATA_DIR data/relations/fewrel/val_wiki.jsonl.gz

FewRel keeps one JSON object per relation (a Wikidata property id) holding its 700 instances;
each instance has ``tokens``, ``h`` and ``t``, an entity being ``[surface, Wikidata id,
[[token positions], ...]]`` with one position list per mention in the sentence.  The project's
JSON Lines format (``tasks/readers/jsonl.py``) takes one pair per line with ``head`` and
``tail`` as token spans ``[start, end)``: the first mention listed is taken (425 of the 22,400
entities list more than one; every first mention is contiguous and no head overlaps its tail),
``label`` is the property's English name from ``pid2name.json`` and ``id`` is
``<property>-<index within the property>``.  Lines follow the file's order; gzip with mtime 0,
so the output's bytes depend on the input alone.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def convert(source: Path, target: Path) -> int:
    data = json.loads((source / "val_wiki.json").read_text(encoding="utf-8"))
    names = json.loads((source / "pid2name.json").read_text(encoding="utf-8"))
    lines = []
    for pid, instances in data.items():
        for i, inst in enumerate(instances):
            spans = []
            for entity in (inst["h"], inst["t"]):
                first = entity[2][0]
                if first != list(range(first[0], first[-1] + 1)):
                    raise ValueError(f"{pid}-{i}: mention {first} is not contiguous")
                spans.append([first[0], first[-1] + 1])
            lines.append(json.dumps({"id": f"{pid}-{i}", "tokens": inst["tokens"],
                                     "head": spans[0], "tail": spans[1],
                                     "label": names[pid][0]}, ensure_ascii=False))
    with open(target, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                  filename="") as out:
        out.write(("\n".join(lines) + "\n").encode("utf-8"))
    return len(lines)


if __name__ == "__main__":
    print(convert(Path(sys.argv[1]), Path(sys.argv[2])), "pairs")
