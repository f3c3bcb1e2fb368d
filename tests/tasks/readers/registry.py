"""Every reader of an input text file, with a small valid file for each: what the tests of a
defect class (a byte-order mark, an undecodable byte, a truncated gzip stream) run over.

``test_every_reader_of_a_file_is_listed`` (test_classes.py) finds the readers from the code
(the public ``read_*`` functions of ``scarce.tasks.readers`` and the other modules that read
input files), so a new reader cannot be left out of the classes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scarce.tasks.leml_table import read_label_list
from scarce.tasks.readers.arff import read_arff, read_arff_header, read_mulan_labels
from scarce.tasks.readers.conllu import read_conllu, read_conllu_files
from scarce.tasks.readers.jsonl import read_jsonl
from scarce.tasks.readers.semeval import read_semeval
from scarce.tasks.readers.table import read_delimited, read_table, table_columns
from scarce.tasks.readers.xmc import read_xmc, read_xmc_header
from scarce.tasks.strip.documents import _read_splits


@dataclass(frozen=True)
class TextReader:
    name: str  # the test id
    reader: Callable  # the function listed (what the completeness test finds)
    suffix: str  # the file's ending
    good: str  # a small valid file (every line of it read)
    read: Callable[[Path], object]  # reads the file, returns something comparable
    whole: bool = True  # reads every line (False: a header only)


XMC = "3 4 3\n0 0:1.0 1:0.5\n1 1:1.0\n2,0 2:1.0 3:0.25\n"
ARFF = textwrap.dedent("""\
    @relation r
    @attribute f0 numeric
    @attribute f1 numeric
    @attribute y {0,1}
    @data
    1,2,1
    {0 3}
    """)
MULAN = '<labels xmlns="http://mulan.sourceforge.net/labels">\n<label name="y"/>\n</labels>\n'
SEMEVAL = ('1\t"The <e1>smoke</e1> came from the <e2>fire</e2>."\nCause-Effect(e2,e1)\n'
           'Comment:\n\n2\t"A <e1>cup</e1> in a <e2>box</e2>."\nContent-Container(e1,e2)\n'
           'Comment:\n\n')
JSONL = ('{"id": 1, "tokens": ["smoke", "from", "fire"], "head": [0, 1], "tail": [2, 3], '
         '"label": "Cause-Effect"}\n'
         '{"id": 2, "tokens": ["cup", "in", "box"], "head": [0, 1], "tail": [2, 3]}\n')
CONLLU = textwrap.dedent("""\
    # newdoc id = d
    # global.Entity = GRP-etype-infstat-salience-centering-minspan-link-identity
    1\tAnna\tAnna\tPROPN\tNNP\t_\t2\tnsubj\t_\tEntity=(1-person-new-_-_-1-_-Anna)
    2\tsleeps\tsleep\tVERB\tVBZ\t_\t0\troot\t_\t_

    1\tShe\tshe\tPRON\tPRP\t_\t2\tnsubj\t_\tEntity=(1-person-giv-_-_-1-_-Anna)
    2\tdreams\tdream\tVERB\tVBZ\t_\t0\troot\t_\t_

    """)
CSV = 'text,tags\ngraph kernels,"graphs,kernels"\nparsing,nlp\nlast row,nlp\n'
TSV = "text\ttags\ngraph kernels\tgraphs,kernels\nparsing\tnlp\nlast row\tnlp\n"
TABLE_JSONL = ('{"text": "graph kernels", "tags": ["graphs", "kernels"]}\n'
               '{"text": "parsing", "tags": "nlp"}\n{"text": "last row", "tags": "nlp"}\n')
SPLITS = "doc_id\tsplit\nd1\ttrain\nd2\ttest\n"
LABEL_LIST = "graphs\nkernels\nnlp\n"


def _frame(frame):
    return frame.to_json()


def _matrices(out):
    return [m.toarray().tolist() for m in out[:2]] + list(out[2:])


TEXT_READERS = [
    TextReader("xmc", read_xmc, ".txt", XMC, lambda p: _matrices(read_xmc(p))),
    TextReader("xmc-header", read_xmc_header, ".txt", XMC, read_xmc_header, whole=False),
    TextReader("arff", read_arff, ".arff", ARFF,
               lambda p: _matrices(read_arff(p, n_labels=1))),
    TextReader("arff-header", read_arff_header, ".arff", ARFF,
               lambda p: read_arff_header(p, n_labels=1), whole=False),
    TextReader("mulan-labels", read_mulan_labels, ".xml", MULAN, read_mulan_labels),
    TextReader("semeval", read_semeval, ".txt", SEMEVAL, lambda p: _frame(read_semeval(p))),
    TextReader("jsonl", read_jsonl, ".jsonl", JSONL, lambda p: _frame(read_jsonl(p))),
    TextReader("conllu", read_conllu, ".conllu", CONLLU,
               lambda p: [_frame(f) for f in read_conllu(p)]),
    TextReader("conllu-files", read_conllu_files, ".conllu", CONLLU,
               lambda p: [_frame(f) for f in read_conllu_files([p])]),
    TextReader("table-csv", read_table, ".csv", CSV,
               lambda p: _frame(read_table(p, ["text", "tags"]))),
    TextReader("table-tsv", read_table, ".tsv", TSV,
               lambda p: _frame(read_table(p, ["text", "tags"]))),
    TextReader("table-jsonl", read_table, ".jsonl", TABLE_JSONL,
               lambda p: _frame(read_table(p, ["text", "tags"]))),
    TextReader("table-columns", table_columns, ".csv", CSV, table_columns, whole=False),
    TextReader("delimited", read_delimited, ".tsv", TSV,
               lambda p: _frame(read_delimited(p, "\t", ["text", "tags"])[0])),
    TextReader("strip-splits", _read_splits, ".tsv", SPLITS, lambda p: _frame(_read_splits(p))),
    TextReader("label-list", read_label_list, ".txt", LABEL_LIST, read_label_list),
]

#: Readers found in the code that read no text file, and why they are not listed.
NOT_TEXT_READERS = {
    "scarce.tasks.readers.jsonl.read_records": "reads Python dicts, not a file",
    "scarce.tasks.readers.text.read_bytes": "the shared helper the readers use",
    "scarce.tasks.readers.text.read_text": "the shared helper the readers use",
    "scarce.tasks.readers.text.read_lines": "the shared helper the readers use",
    "scarce.tasks.readers.text.iter_lines": "the shared helper the readers use",
    "scarce.tasks.readers.text.decode_text": "the shared helper the readers use",
}
