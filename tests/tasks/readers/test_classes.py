"""Defect classes over every reader of an input file, found from the code: a byte-order mark
is read as the file without it, an undecodable byte is named by its line, a truncated gzip
stream is one line naming the file, and a folder holding one file both plain and gzipped is
refused naming both, by every listing of a folder."""

from __future__ import annotations

import gzip
import importlib
import inspect
import pkgutil
import re

import pytest

import scarce.tasks
import scarce.tasks.readers
from scarce.tasks.errors import InputError
from tests.tasks.readers.registry import NOT_TEXT_READERS, TEXT_READERS

# A call of a reading helper (not a method: ``path.read_text()`` reads no input file).
READ_CALLS = re.compile(r"(?<![\w.])(read_text|read_bytes|read_lines|iter_lines|decode_text|"
                        r"read_delimited)\(|\bpd\.read_(csv|json)\(")
# Every other module of the tasks package (any of them may read an input file), found by
# walking the package so that a module split off or added is searched too.
OTHER_MODULES = tuple(m.name for m in pkgutil.walk_packages(scarce.tasks.__path__, "scarce.tasks.")
                      if not m.name.startswith("scarce.tasks.readers."))
# Functions that call a reading helper but are not readers of their own.
HELPERS = {
    "scarce.tasks.readers.xmc._numbers": "parses text read_xmc has read",
    "scarce.tasks.readers.semeval._numbered_lines": "read_semeval's lines",
    "scarce.tasks.readers.table._read_jsonl": "read_table's JSON Lines",
    "scarce.tasks.readers.conllu.write_chains": "rewrites a file read_conllu has read",
    "scarce.tasks.leml_files.data_line": "the line of a row of a file a reader has read",
}


def _readers_in_code() -> set[str]:
    """Every public ``read_*`` function of the readers package, and every function of the
    task modules that reads a file through the shared helpers or pandas."""
    found = set()
    names = [f"scarce.tasks.readers.{m.name}"
             for m in pkgutil.iter_modules(scarce.tasks.readers.__path__)]
    for module_name in [*names, *OTHER_MODULES]:
        module = importlib.import_module(module_name)
        for name, fn in vars(module).items():
            if not inspect.isfunction(fn) or fn.__module__ != module_name:
                continue
            public = module_name in names and name.startswith("read_")
            if public or READ_CALLS.search(inspect.getsource(fn)):
                found.add(f"{module_name}.{name}")
    return found - set(HELPERS)


def _qualified(fn) -> str:
    return f"{fn.__module__}.{fn.__name__}"


def test_every_reader_of_a_file_is_listed():
    listed = {_qualified(r.reader) for r in TEXT_READERS} | set(NOT_TEXT_READERS)
    assert _readers_in_code() == listed


def _write(path, data: bytes, gz: bool):
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _file(tmp_path, reader, data: bytes, gz: bool = False):
    return _write(tmp_path / f"f{reader.suffix}{'.gz' * gz}", data, gz)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("reader", TEXT_READERS, ids=lambda r: r.name)
def test_a_byte_order_mark_is_read_as_the_file_without_it(tmp_path, reader, gz):
    plain = reader.read(_file(tmp_path, reader, reader.good.encode(), gz))
    marked = tmp_path / "marked"
    marked.mkdir()
    assert reader.read(_file(marked, reader, b"\xef\xbb\xbf" + reader.good.encode(), gz)) \
        == plain


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("reader", TEXT_READERS, ids=lambda r: r.name)
def test_an_undecodable_byte_is_named_by_its_line(tmp_path, reader, gz):
    lines = reader.good.encode().split(b"\n")
    # the last line with text (the first, for a reader of the header only), ended by a
    # Latin-1 e-acute
    at = max(i for i, line in enumerate(lines) if line.strip()) if reader.whole else 0
    lines[at] += b"caf\xe9"
    path = _file(tmp_path, reader, b"\n".join(lines), gz)
    with pytest.raises(InputError) as err:
        reader.read(path)
    assert err.value.path == str(path) and err.value.line == at + 1
    assert "not UTF-8 text (byte 0xe9" in str(err.value)


@pytest.mark.parametrize("reader", [r for r in TEXT_READERS if r.whole], ids=lambda r: r.name)
def test_a_truncated_gzip_stream_is_one_line_naming_the_file(tmp_path, reader):
    whole = gzip.compress(reader.good.encode())
    path = tmp_path / f"f{reader.suffix}.gz"
    path.write_bytes(whole[: len(whole) - 12])  # the stream without its end
    with pytest.raises(InputError, match="gzip file") as err:
        reader.read(path)
    assert err.value.path == str(path) and "\n" not in str(err.value)


# -- a file both plain and gzipped in one folder ----------------------------------------------
def _listings():
    """Every listing of a folder of inputs, with the endings it takes (from the code)."""
    from scarce.flows import apply_leml, apply_relations
    from scarce.flows.apply import input_files
    from scarce.tasks import strip
    from scarce.tasks.leml import PART_PATTERNS, input_parts

    out = [(f"apply-leml-{fmt}", lambda p, s=suffixes: input_files(p, s), suffixes)
           for fmt, suffixes in apply_leml.SUFFIXES.items()]
    out.append(("apply-relations", lambda p: input_files(p, apply_relations.SUFFIXES),
                apply_relations.SUFFIXES))
    out.append(("apply-strip", lambda p: input_files(p, strip.DOC_SUFFIXES),
                strip.DOC_SUFFIXES))
    out += [(f"parts-{fmt}", lambda p, f=fmt: input_parts(p, f),
             tuple(pattern.lstrip("*") for pattern in patterns))
            for fmt, patterns in PART_PATTERNS.items()]
    out.append(("strip-data-dir", _strip_documents, strip.DOC_SUFFIXES))
    return out


def _strip_documents(folder):
    from scarce.tasks.strip import select_documents

    splits = folder.parent / "splits.tsv"
    splits.write_text("doc_id\tsplit\na\ttrain\n")
    return select_documents(splits, folder, {"train": ["train"]})


def _twins(suffixes):
    """The endings ``s`` of ``suffixes`` whose ``s.gz`` the listing takes too."""
    lower = {s.lower() for s in suffixes}
    return sorted(s for s in lower if f"{s}.gz" in lower)


LISTINGS = _listings()
TWINS = [pytest.param(listing, s, id=f"{listing[0]}{s}")
         for listing in LISTINGS for s in _twins(listing[2])]


def test_every_listing_that_reads_gzip_is_tested():
    plain_and_gz = {name for name, _, suffixes in LISTINGS if _twins(suffixes)}
    gz = {name for name, _, suffixes in LISTINGS if any(s.endswith(".gz") for s in suffixes)}
    assert plain_and_gz == gz and len(plain_and_gz) >= 5


@pytest.mark.parametrize(("listing", "suffix"), TWINS)
def test_a_file_both_plain_and_gzipped_in_a_folder_is_refused_naming_both(tmp_path, listing,
                                                                          suffix):
    name, listed, _ = listing
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / f"a{suffix}").write_text("x\n")
    (folder / f"a{suffix}.gz").write_bytes(gzip.compress(b"x\n"))
    with pytest.raises(InputError) as err:
        listed(folder)
    message = str(err.value)
    assert f"a{suffix} and a{suffix}.gz" in message and str(folder) in message


# -- a name given twice ------------------------------------------------------------------------
def _arff_attributes(tmp_path):
    from scarce.tasks.readers.arff import read_arff

    (tmp_path / "a.arff").write_text("@relation r\n@attribute f numeric\n@attribute f numeric\n"
                                     "@attribute y {0,1}\n@data\n1,2,1\n")
    return lambda: read_arff(tmp_path / "a.arff", n_labels=1), "'f' is declared twice"


def _arff_label_names(tmp_path):
    from scarce.tasks.readers.arff import read_arff

    (tmp_path / "a.arff").write_text("@relation r\n@attribute f numeric\n@attribute y {0,1}\n"
                                     "@attribute z {0,1}\n@data\n1,1,0\n")
    return (lambda: read_arff(tmp_path / "a.arff", label_names=["y", "y"]),
            "'y' is named twice")


def _mulan_xml(tmp_path):
    from scarce.tasks.readers.arff import read_mulan_labels

    (tmp_path / "l.xml").write_text('<labels><label name="y"/><label name="y"/></labels>')
    return lambda: read_mulan_labels(tmp_path / "l.xml"), "'y' is named twice"


def _header(suffix, sep):
    def make(tmp_path):
        from scarce.tasks.readers.table import read_table

        (tmp_path / f"t{suffix}").write_text(f"text{sep}tags{sep}tags\na{sep}x{sep}y\n")
        return lambda: read_table(tmp_path / f"t{suffix}", ["text", "tags"]), \
            "'tags' is named twice"
    return make


def _parquet_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scarce.tasks.readers.table import read_table

    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["x"]), pa.array(["y"])],
                                        names=["text", "tags", "tags"]), tmp_path / "t.parquet")
    return lambda: read_table(tmp_path / "t.parquet", ["text", "tags"]), "'tags' is named twice"


def _table_jsonl(tmp_path):
    from scarce.tasks.readers.table import read_table

    (tmp_path / "t.jsonl").write_text('{"text": "a", "tags": "x", "tags": "y"}\n')
    return lambda: read_table(tmp_path / "t.jsonl", ["text", "tags"]), "'tags' is given twice"


def _pairs_jsonl(tmp_path):
    from scarce.tasks.readers.jsonl import read_jsonl

    (tmp_path / "p.jsonl").write_text('{"tokens": ["a", "b", "c"], "head": [0, 1], '
                                      '"tail": [2, 3], "tail": [1, 2]}\n')
    return lambda: read_jsonl(tmp_path / "p.jsonl"), "'tail' is given twice"


def _mapping_cell(text):
    def make(tmp_path):
        from scarce.tasks.readers.table import feature_rows

        return lambda: feature_rows([text], tmp_path / "t.csv", "f"), "given twice"
    return make


def _label_list(tmp_path):
    from scarce.tasks.leml_table import read_label_list

    (tmp_path / "l.txt").write_text("a\nb\na\n")
    return lambda: read_label_list(tmp_path / "l.txt"), "'a' is listed twice"


def _splits(tmp_path):
    from scarce.tasks.strip.documents import _read_splits

    (tmp_path / "s.tsv").write_text("doc_id\tsplit\nd\ttrain\nd\ttest\n")
    return lambda: _read_splits(tmp_path / "s.tsv"), "'d' listed twice"


def _splits_header(tmp_path):
    from scarce.tasks.strip.documents import _read_splits

    (tmp_path / "s.tsv").write_text("doc_id\tsplit\tsplit\nd\ttrain\ttest\n")
    return lambda: _read_splits(tmp_path / "s.tsv"), "'split' is named twice"


#: Every place a name (an attribute, a label, a column, a key, a document) is read, given
#: twice: each is one line naming the name (a reader that kept the first or the last would
#: mean one of the two silently).
NAMED_TWICE = {
    "arff-attribute": _arff_attributes,
    "arff-label-names": _arff_label_names,
    "mulan-xml-label": _mulan_xml,
    "csv-column": _header(".csv", ","),
    "tsv-column": _header(".tsv", "\t"),
    "parquet-column": _parquet_columns,
    "table-jsonl-key": _table_jsonl,
    "pairs-jsonl-key": _pairs_jsonl,
    "json-mapping-cell": _mapping_cell('{"3": 1, "3": 2}'),
    "python-mapping-cell": _mapping_cell("{3: 1, 3: 2}"),
    "label-list": _label_list,
    "splits-document": _splits,
    "splits-column": _splits_header,
}


@pytest.mark.parametrize("case", NAMED_TWICE, ids=list(NAMED_TWICE))
def test_a_name_given_twice_is_refused_naming_it(tmp_path, case):
    read, says = NAMED_TWICE[case](tmp_path)
    with pytest.raises(InputError) as err:
        read()
    assert says in str(err.value) and str(tmp_path) in str(err.value)
    assert "\n" not in str(err.value)
