"""Every malformed input in ``tests/data/bad`` through ``scarce run``, end to end.

For each case the command line runs in a fresh temporary project (``SCARCE_ROOT``)
and must

* exit with code 2,
* print exactly one ``error:`` line on stderr naming the file and line (or the
  config key) -- the ``expect`` text of the case, e.g. ``xmc_nan_feature.txt:4``,
* leave nothing in the project's Parquet store (``data/cache``; Prefect's own
  ``_prefect`` records aside) or its runs folder (``data/runs``).

The manifest ``CASES`` names every file of the folder once (checked below). A data
file is given to its flow with ``--set`` over a small valid base config (an LEML file as
both the training and the test file, or as the test file beside the good training file); a
config file is given with ``--config``. Each case runs once; the two tests read its outcome.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from scarce.flows.cli import main

pytestmark = pytest.mark.usefixtures("prefect_server")

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"


@dataclass(frozen=True)
class Case:
    file: str  # name in tests/data/bad
    flow: str
    expect: str  # text the one error line must contain
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE; {file} is the bad file's project path
    config: bool = False  # the file is the config itself (--config)
    leaves_entries: str | None = None  # known: the store is not left empty (xfail reason)
    wrong_message: str | None = None  # known: the error line misses the place (xfail reason)
    env: tuple[tuple[str, str], ...] = ()  # environment; {project} is the project folder
    args: tuple[str, ...] = ()  # more command-line arguments
    name: str = ""  # id of a case without a file
    gzipped_too: bool = False  # a gzipped copy (<file>.gz) lies beside the file


def xmc(file: str, expect: str, **known) -> Case:
    """The file as the training set, and as the test set: its header then agrees with the
    test set's, and what is wrong in its body is what is named."""
    return Case(file, "leml", expect, ("dataset.train={file}", "dataset.test={file}"), **known)


def xmc_test(file: str, expect: str, **known) -> Case:
    """The file as the test set, beside the good training file."""
    return Case(file, "leml", expect, ("dataset.test={file}",), **known)


def arff(file: str, expect: str) -> Case:
    return Case(
        file,
        "leml",
        expect,
        ("dataset.format=arff", "dataset.n_labels=2", "dataset.train={file}",
         "dataset.test={file}"),
    )


# The memory the guards compare with: fixed, so that what is refused does not depend on the
# machine (each case's needs are terabytes).
SMALL_MEMORY = (("SCARCE_MEMORY_LIMIT_GB", "4"),)


TABLE = ("dataset.format=table", "dataset.train=good/train.csv", "dataset.test=good/test.csv",
         "dataset.table.labels_column=tags")


def table(file: str, expect: str, role: str = "train", *more: str, **known) -> Case:
    """The file as the training table (its test table the good one), as the test table beside
    the good training table, or as both (``role``); ``more``: other --set values."""
    roles = ("train", "test") if role == "both" else (role,)
    overrides = tuple(o for o in TABLE if not o.startswith(tuple(f"dataset.{r}=" for r in roles)))
    return Case(file, "leml", expect,
                (*overrides, *(f"dataset.{r}={{file}}" for r in roles), *more), **known)


def relations(file: str, expect: str) -> Case:
    return Case(file, "relations", expect, ("data=[{file}]",))


def conllu(file: str, expect: str, **known) -> Case:
    return Case(file, "strip", expect, **known)


def config(file: str, flow: str, expect: str, **known: str) -> Case:
    return Case(file, flow, expect, config=True, **known)


TRAIN_LOADED = ("the test file is read after the training file, whose leml-load (or "
                "leml-table-space) entries are stored by then (the run's own entries are not "
                "removed when it fails)")
PAIRS_AFTER_PREPROCESS = ("the training pairs are counted when the rules are grown: every "
                          "document's strip-preprocess entries are stored by then (the run's "
                          "own entries are not removed when it fails)")

CASES = [
    # Extreme Classification text format (leml, the training file: the flow's first read)
    xmc("xmc_empty.txt", "xmc_empty.txt:1: empty file"),
    # 193 complete lines are recoverable from the cut stream (zlib.decompressobj agrees)
    xmc("xmc_truncated.txt.gz", "xmc_truncated.txt.gz:194: truncated gzip file"),
    xmc("xmc_header_two_fields.txt", "xmc_header_two_fields.txt:1: bad header '3 4'"),
    xmc("xmc_header_fewer_points.txt", "xmc_header_fewer_points.txt:1: the header says 5"),
    xmc("xmc_header_more_points.txt", "xmc_header_more_points.txt:4: the header says 2"),
    xmc("xmc_label_out_of_range.txt", "xmc_label_out_of_range.txt:4: label 3 is out of range"),
    xmc("xmc_feature_out_of_range.txt", "xmc_feature_out_of_range.txt:4: feature index 4"),
    xmc("xmc_nonnumeric_value.txt", "xmc_nonnumeric_value.txt:3: feature value 'abc'"),
    xmc("xmc_nan_feature.txt", "xmc_nan_feature.txt:4: feature value 'nan' is not finite"),
    xmc("xmc_inf_feature.txt", "xmc_inf_feature.txt:2: feature value 'inf' is not finite"),
    xmc("xmc_zero_points.txt", "xmc_zero_points.txt:1: the header declares 0 points"),
    xmc("xmc_zero_features.txt", "xmc_zero_features.txt:1: the header declares 0 features"),
    xmc("xmc_zero_labels.txt", "xmc_zero_labels.txt:1: the header declares 0 labels"),
    xmc("xmc_long_header.txt", "xmc_long_header.txt:1: bad header '1 1 1"),  # generated
    # a header's absurd dimensions: refused before anything is sized by them
    xmc("xmc_huge_features.txt", "xmc_huge_features.txt:1: the header declares 6 points, "
        "1,000,000,000,000 features and 3 labels: LEML factors", env=SMALL_MEMORY),
    xmc("xmc_huge_labels.txt", "xmc_huge_labels.txt:1: the header declares 6 points, 4 "
        "features and 1,000,000,000,000 labels: LEML factors", env=SMALL_MEMORY),
    xmc("xmc_huge_points.txt", "xmc_huge_points.txt:1: the header declares "
        "1,000,000,000,000 points", env=SMALL_MEMORY),
    xmc("xmc_features_beyond_int64.txt", "xmc_features_beyond_int64.txt:1: the header declares "
        "100000000000000000000 features; at most 9223372036854775807"),
    # finite values that are not finite in the model's dtype (float32)
    xmc("xmc_value_beyond_float32.txt",
        "xmc_value_beyond_float32.txt:2: feature value '1e39' is not finite in float32"),
    xmc("xmc_negative_value_beyond_float32.txt",
        "xmc_negative_value_beyond_float32.txt:5: feature value '-3.5e38' is not finite in "
        "float32"),
    # a training file without a single label
    xmc("xmc_no_labels.txt", "xmc_no_labels.txt: none of the 4 points has a label"),
    # a test file of another feature or label space than the training file's: refused
    # before either is read
    xmc_test("xmc_test_more_features.txt", "xmc_test_more_features.txt:1: key 'dataset.test': "
             "5 features and 3 labels, but the training file"),
    xmc_test("xmc_test_fewer_labels.txt", "xmc_test_fewer_labels.txt:1: key 'dataset.test': "
             "4 features and 2 labels, but the training file"),
    # an index in another syntax than digits (pandas' integer parse read 1e1 as 10)
    xmc("xmc_index_1e1.txt", "xmc_index_1e1.txt:3: feature index '1e1' is not an integer"),
    # too few rows to fit, from the header
    xmc("xmc_one_point.txt", "xmc_one_point.txt: key 'dataset.train': the training set has 1 "
        "row; a model is fitted on at least 2"),
    # a test file without labels: its metrics would be 0 and NaN
    xmc_test("xmc_test_no_labels.txt", "xmc_test_no_labels.txt: none of the 3 points has a "
             "label: a training or test set needs labels", leaves_entries=TRAIN_LOADED),
    # Mulan ARFF (leml, format arff, the last two attributes are the labels)
    arff("arff_no_data.arff", "arff_no_data.arff:6: no @data section"),
    arff("arff_wrong_value_count.arff", "arff_wrong_value_count.arff:8: dense row has 3"),
    arff("arff_label_not_binary.arff", "arff_label_not_binary.arff:8: value '2' of attribute"),
    arff("arff_nan_value.arff", "arff_nan_value.arff:8: value 'NaN' of attribute 'f0'"),
    arff("arff_sparse_index_out_of_range.arff", "arff_sparse_index_out_of_range.arff:8: sparse"),
    arff("arff_latin1.arff", "arff_latin1.arff:4: not UTF-8 text (byte 0xe9"),
    arff("arff_no_labels.arff", "arff_no_labels.arff: none of the 2 points has a label"),
    arff("arff_data_without_rows.arff", "arff_data_without_rows.arff:6: the @data section has "
         "no row"),
    arff("arff_no_feature_attribute.arff", "arff_no_feature_attribute.arff:4: n_labels=2 makes "
         "all 2 attributes labels: no feature attribute is left"),
    arff("arff_value_beyond_float32.arff", "arff_value_beyond_float32.arff:8: value '1e39' of "
         "attribute 'f1' is not finite in float32"),
    arff("arff_sparse_value_beyond_float32.arff", "arff_sparse_value_beyond_float32.arff:8: "
         "value '-4e38' of attribute 'f0' is not finite in float32"),
    arff("arff_category_beyond_float32.arff", "arff_category_beyond_float32.arff:8: value "
         "'1e39' of attribute 'f0' is not finite in float32"),
    arff("arff_duplicate_attribute.arff", "arff_duplicate_attribute.arff:3: attribute 'f0' is "
         "declared twice (first on line 2)"),
    # tables (leml, format table): the file as the training table, or as the test table
    table("table_test_without_labels.csv", "table_test_without_labels.csv: key 'dataset.test': "
          "no column 'tags'", "test"),
    table("table_header_only.csv", "table_header_only.csv: the csv table has no row"),
    table("table_features_empty.csv", "table_features_empty.csv: none of the 6 rows has a "
          "feature in column 'features'", "both", "dataset.table.features_column=features"),
    table("table_feature_index_huge.csv", "table_feature_index_huge.csv: the largest feature "
          "index, 4,611,686,018,427,387,904 (row 2, column 'features')", "both",
          "dataset.table.features_column=features", env=SMALL_MEMORY),
    # 1,449 complete lines are recoverable from the cut stream
    table("table_truncated.csv.gz", "table_truncated.csv.gz:1450: truncated gzip file"),
    table("table_latin1.csv", "table_latin1.csv:3: not UTF-8 text (byte 0xe9"),
    table("table_one_row.csv", "table_one_row.csv: key 'dataset.train': the training set has "
          "1 row"),
    table("table_semicolon_tags.csv", "table_semicolon_tags.csv: key "
          "'dataset.table.label_separator': column 'tags': 3 of the 6 rows with labels hold a "
          "name with ';' in it"),
    table("table_extra_field.csv", "table_extra_field.csv:3: 3 fields where the header has 2"),
    table("table_duplicate_column.csv", "table_duplicate_column.csv:1: the column 'tags' is "
          "named twice"),
    table("table_surrogate_label.jsonl", "table_surrogate_label.jsonl:2: 'tags'[0] holds a "
          "lone surrogate"),
    # SemEval-2010 Task 8 (relations); an empty file has no line to name
    relations("semeval_empty.txt", "semeval_empty.txt: no sentences found"),
    relations("semeval_no_e2.txt", "semeval_no_e2.txt:5: sentence 2: missing <e2>"),
    relations("semeval_nested.txt", "semeval_nested.txt:5: sentence 2: tag <e2> nested"),
    relations("semeval_reversed.txt", "semeval_reversed.txt:5: sentence 2: <e2> appears before"),
    relations("semeval_unknown_label.txt", "semeval_unknown_label.txt:6: sentence 2: unknown"),
    relations("semeval_latin1.txt", "semeval_latin1.txt:1: not UTF-8 text (byte 0xe9"),
    relations("semeval_plain_named.txt.gz", "semeval_plain_named.txt.gz: the name ends in .gz"),
    relations("semeval_huge_id.txt", "semeval_huge_id.txt:5: id 99999999999999999999 is out"),
    relations("semeval_blank_lines.txt", "semeval_blank_lines.txt: no sentences found"),
    relations("semeval_long_id.txt", "semeval_long_id.txt:5: id "
              "111111111111111111111111111111… is out of range"),
    # JSON Lines (relations)
    relations("jsonl_span_outside_tokens.jsonl", "jsonl_span_outside_tokens.jsonl:2: 'tail'"),
    relations("jsonl_negative_span.jsonl", "jsonl_negative_span.jsonl:3: 'head' span [-1, 1)"),
    relations("jsonl_overlapping_spans.jsonl", "jsonl_overlapping_spans.jsonl:2: head [0, 2]"),
    relations("jsonl_invalid_json.jsonl", "jsonl_invalid_json.jsonl:2: invalid JSON"),
    relations("jsonl_latin1.jsonl", "jsonl_latin1.jsonl:1: not UTF-8 text (byte 0xe9"),
    relations("jsonl_deep.jsonl", "jsonl_deep.jsonl:2: invalid JSON: nested too deeply"),
    relations("jsonl_blank_lines.jsonl", "jsonl_blank_lines.jsonl: no records found"),
    relations("jsonl_duplicate_key.jsonl", "jsonl_duplicate_key.jsonl:2: invalid JSON: the key "
              "'tail' is given twice in one object"),
    relations("jsonl_long_id.jsonl", "jsonl_long_id.jsonl:1: invalid JSON: an integer of "
              "5,000 digits"),
    relations("jsonl_only_other.jsonl", "jsonl_only_other.jsonl: no pairs left after keeping"),
    # a lone surrogate (valid JSON, not text) in any string of a record
    relations("jsonl_surrogate_token.jsonl",
              "jsonl_surrogate_token.jsonl:2: 'tokens'[1] holds a lone surrogate"),
    relations("jsonl_surrogate_label.jsonl",
              "jsonl_surrogate_label.jsonl:3: 'label' holds a lone surrogate"),
    relations("jsonl_surrogate_id.jsonl", "jsonl_surrogate_id.jsonl:1: 'id' holds a lone"),
    relations("jsonl_surrogate_key.jsonl",
              "jsonl_surrogate_key.jsonl:2: the key 'note\\ud83d' holds a lone surrogate"),
    relations("jsonl_surrogate_nested.jsonl",
              "jsonl_surrogate_nested.jsonl:2: 'meta'['source'][1] holds a lone surrogate"),
    # CoNLL-U with CorefUD Entity= brackets (strip; the file is a training document)
    conllu("conllu_unbalanced_open.conllu", "conllu_unbalanced_open.conllu:6: mention of"),
    conllu("conllu_unbalanced_close.conllu", "conllu_unbalanced_close.conllu:7: closing bracket"),
    conllu("conllu_nine_columns.conllu", "conllu_nine_columns.conllu:7: 9 tab-separated"),
    # 333 complete lines are recoverable from the cut stream (zlib.decompressobj agrees)
    conllu("conllu_truncated.conllu.gz", "conllu_truncated.conllu.gz:334: truncated gzip"),
    conllu("conllu_latin1.conllu", "conllu_latin1.conllu:3: not UTF-8 text (byte 0xe9"),
    conllu("conllu_duplicate_doc.conllu", "conllu_duplicate_doc.conllu:5: document 'twice'"),
    conllu("conllu_two_entity_items.conllu", "conllu_two_entity_items.conllu:6: 2 Entity= "
           "items in the MISC column"),
    conllu("conllu_head_self.conllu", "conllu_head_self.conllu:7: HEAD 2 is the token itself"),
    conllu("conllu_head_cycle.conllu", "conllu_head_cycle.conllu:6: the HEADs of tokens 1 -> 3 "
           "-> 1 form a cycle"),
    # a training document without a mention: nothing to learn from, found once the pairs of
    # every document are made
    conllu("conllu_no_mentions.conllu", "key 'train_splits': variant ripper: no coreferent "
           "labelled pair among the 0 training pairs", leaves_entries=PAIRS_AFTER_PREPROCESS),
    # a training document without a sentence
    conllu("conllu_empty.conllu", "conllu_empty.conllu: no token line in the file"),
    conllu("conllu_comments_only.conllu", "conllu_comments_only.conllu: no token line in the"),
    conllu("conllu_doc_without_sentence.conllu", "conllu_doc_without_sentence.conllu:1: document "
           "'conllu_doc_without_sentence' has no sentence"),
    # one document both plain and gzipped: which to read is not guessed
    conllu("conllu_plain_and_gzipped.conllu", "good/gum: key 'data_dir': both "
           "conllu_plain_and_gzipped.conllu and conllu_plain_and_gzipped.conllu.gz are here",
           gzipped_too=True),
    # configs
    config("config_leml_unknown_key.yaml", "leml", "key 'model.rnak': unknown key"),
    config("config_leml_negative_rank.yaml", "leml", "key 'model.rank': Input should be greater"),
    config(
        "config_leml_observed_fraction_zero.yaml", "leml", "key 'observed_fraction': Input should"
    ),
    config(
        "config_leml_observed_fraction_above_one.yaml",
        "leml",
        "key 'observed_fraction': Input should be less than or equal to 1",
    ),
    config(
        "config_relations_k_low_above_k_high.yaml",
        "relations",
        "config_relations_k_low_above_k_high.yaml: Value error, k_low (12) must not exceed",
    ),
    config(
        "config_relations_window_zero.yaml",
        "relations",
        "config_relations_window_zero.yaml: key 'window': Value error, window '0-0-0' selects",
    ),
    config("config_strip_window_zero.yaml", "strip", "key 'window': Input should be greater"),
    config("config_latin1.yaml", "leml", "config_latin1.yaml:2: not UTF-8 text (byte 0xe9"),
    config("config_alias_bomb.yaml", "leml", "key 'model.rank': Input should be a valid integer"),
]
OBSERVED_AFTER_LOAD = ("the mask is drawn from the loaded training labels: the two leml-load "
                       "entries are stored before it is refused (the run's own entries are not "
                       "removed when it fails)")
# Files made by the test instead of shipped (too large to keep in the repository).
GENERATED = {
    "xmc_long_header.txt": lambda: ("1 " * 200_000 + "\n").encode(),  # 400 KB of header
    "jsonl_deep.jsonl": lambda: (JSONL_GOOD.splitlines()[0] + "\n" + "[" * 100_000
                                 + "]" * 100_000 + "\n").encode(),
}

# Bad values given on the command line instead of in a file.
OVERRIDE_CASES = [
    Case("", "leml", "leml.yaml: key 'model.rank'", ("model.rank=-1",)),
    Case("", "leml", "leml.yaml: key 'model.rnak': --set: unknown key", ("model.rnak=3",)),
    Case("", "relations", "relations.yaml: Value error, k_low (9)", ("k_low=9", "k_high=3")),
    Case("", "strip", "strip.yaml: key 'window'", ("window=0",)),
    Case("", "leml", "key 'model.rank': --set: value '{' is not valid YAML", ("model.rank={{",),
         name="leml-set-rank-not-yaml"),
    Case("", "leml", "key 'model.lam': Input should be a finite number", ("model.lam=.inf",)),
    Case("", "leml", "key 'model.rank': Value error, a boolean", ("model.rank=true",),
         name="leml-set-rank-bool"),
    Case("", "strip", "key 'seed': Input should be less than or equal to 4294967295",
         ("seed=4294967296",)),
    Case("", "leml", "SCARCE_MEMORY_LIMIT_GB must be a number of GiB, got 'lots'",
         env=(("SCARCE_MEMORY_LIMIT_GB", "lots"),), name="leml-memory-limit-lots"),
    Case("", "leml", "is not a folder", env=(("SCARCE_STORE", "{project}/a-file"),),
         name="leml-store-is-a-file"),
    Case("", "leml", "no Dask scheduler at tcp://127.0.0.1:9",
         args=("--dask-address", "tcp://127.0.0.1:9"), name="leml-dask-nothing-listening"),
    # A validation split that leaves no training row: refused from the header.
    Case("", "leml", "train.txt: key 'dataset.validation_fraction': validation_fraction 0.99 "
         "holds out all 6 rows", ("dataset.validation_fraction=0.99",),
         name="leml-set-validation-holds-out-every-row"),
    Case("", "leml", "train.txt: key 'dataset.validation_fraction': validation_fraction 0.8 "
         "holds out 5 of the 6 rows of the training set, leaving 1 to fit",
         ("dataset.validation_fraction=0.8",), name="leml-set-validation-leaves-one-row"),
    # A table's rows are counted once it is read: its space and its rows are stored by then.
    Case("", "leml", "train.csv: key 'dataset.validation_fraction': validation_fraction 0.8 "
         "holds out 5 of the 6 rows", (*TABLE, "dataset.validation_fraction=0.8"),
         name="leml-table-set-validation-leaves-one-row",
         leaves_entries="a table's rows are counted once it is loaded"),
    # A mask that observes no entry, or none of the positive labels: the mask is drawn after
    # both files are loaded, so their entries stay in the store.
    Case("", "leml", "key 'observed_fraction': 0.001 observes none of the 6 x 3 entries",
         ("observed_fraction=0.001",), name="leml-set-observed-fraction-observes-nothing",
         leaves_entries=OBSERVED_AFTER_LOAD),
    Case("", "leml", "key 'observed_fraction': 0.05 observes 1 of the 6 x 3 entries of the "
         "training labels but none of its 7 positive labels", ("observed_fraction=0.05",),
         name="leml-set-observed-fraction-observes-no-label", leaves_entries=OBSERVED_AFTER_LOAD),
    # Too few pairs for the method's parameters (the base file's 6 pairs that are not
    # 'Other'): one input file is refused as it is parsed.
    Case("", "relations", "pairs.jsonl: key 'rho': rho (0.1) subsamples 2 of the 6 pairs, "
         "fewer than the k_high (3) clusters each subsample is split into; use rho >= 0.5",
         ("rho=0.1",), name="relations-set-rho-tiny"),
    Case("", "relations", "pairs.jsonl: key 'rho': rho (0.4) subsamples 2 of the 6 pairs",
         ("rho=0.4",), name="relations-set-rho-small"),
    Case("", "relations", "pairs.jsonl: key 'k_high': k_high (6) must be below the number of "
         "pairs (6)", ("k_high=6",), name="relations-set-k-high-every-pair"),
    Case("", "relations", "pairs.jsonl: key 'chi2_k': chi2_k (7) must not exceed the number of "
         "pairs (6)", ("ranking=chi2", "chi2_k=7"), name="relations-set-chi2-k-above-pairs"),
    Case("", "relations", "Value error, rho (0.2) subsamples 2 of the 10 pairs",
         ("max_pairs=10", "rho=0.2"), name="relations-set-rho-small-for-max-pairs"),
]

# -- the small valid project each case starts from ------------------------------------
XMC_GOOD = "6 4 3\n0 0:1.0 1:0.5\n1 1:1.0\n2 2:1.0 3:0.25\n0,1 0:0.5 3:1.0\n1,2 2:2.0\n 1:1.0\n"
JSONL_GOOD = "".join(
    f'{{"id": {i}, "tokens": ["w{i}", "caused", "the", "x{i % 3}", "today"], '
    f'"head": [0, 1], "tail": [3, 4], "label": "{"Cause-Effect" if i % 2 else "Other"}"}}\n'
    for i in range(1, 13)
)
CONLLU_GOOD = textwrap.dedent(
    """\
    # newdoc id = good_doc
    # global.Entity = GRP-etype-infstat-salience-centering-minspan-link-identity
    1\tAnna\tAnna\tPROPN\tNNP\t_\t2\tnsubj\t_\tEntity=(1-person-new-_-_-1-_-Anna)
    2\tsleeps\tsleep\tVERB\tVBZ\t_\t0\troot\t_\t_

    1\tShe\tshe\tPRON\tPRP\t_\t2\tnsubj\t_\tEntity=(1-person-giv-_-_-1-_-Anna)
    2\tdreams\tdream\tVERB\tVBZ\t_\t0\troot\t_\t_

    """
)
TABLE_GOOD = "text,tags\n" + "".join(
    f'{text},"{tags}"\n' for text, tags in (
        ("graph kernels for molecules", "graphs,kernels"), ("parsing with kernels", "nlp"),
        ("graph parsing", "graphs,nlp"), ("molecules and graphs", "graphs"),
        ("kernels of graphs", "kernels"), ("parsing text", "nlp")))
BASE_CONFIGS = {
    "leml": """\
        seed: 0
        dataset: {name: tiny, format: xmc, train: good/train.txt, test: good/test.txt}
        model: {rank: 2, outer_iterations: 1}
        """,
    "relations": """\
        seed: 0
        data: [good/pairs.jsonl]
        k_low: 2
        k_high: 3
        n_prefixes: 2
        min_prefix: 2
        n_subsamples: 2
        """,
    "strip": """\
        seed: 0
        data_dir: good/gum
        splits_file: good/gum/splits.tsv
        dev_splits: []
        """,
}


def make_project(root: Path, case: Case) -> list[str]:
    """A project under ``root`` for ``case``; returns the ``scarce`` arguments."""
    (root / "configs").mkdir(parents=True)
    for flow, text in BASE_CONFIGS.items():
        (root / "configs" / f"{flow}.yaml").write_text(textwrap.dedent(text))
    good = root / "good"
    (good / "gum").mkdir(parents=True)
    (good / "train.txt").write_text(XMC_GOOD)
    (good / "test.txt").write_text(XMC_GOOD)
    (good / "pairs.jsonl").write_text(JSONL_GOOD)
    (good / "gum" / "good_doc.conllu").write_text(CONLLU_GOOD)
    (good / "train.csv").write_text(TABLE_GOOD)
    (good / "test.csv").write_text(TABLE_GOOD)
    splits = "doc_id\tsplit\ngood_doc\ttest\n"
    args = ["run", case.flow]
    if case.file:
        if case.flow == "strip" and not case.config:  # the bad file is a training document
            shutil.copy(BAD / case.file, good / "gum" / case.file)
            if case.gzipped_too:
                (good / "gum" / f"{case.file}.gz").write_bytes(
                    gzip.compress((BAD / case.file).read_bytes()))
            doc = case.file.removesuffix(".gz").removesuffix(".conllu")
            splits += f"{doc}\ttrain\n"
        elif case.file in GENERATED:
            (root / "bad").mkdir()
            (root / "bad" / case.file).write_bytes(GENERATED[case.file]())
        else:
            (root / "bad").mkdir()
            shutil.copy(BAD / case.file, root / "bad" / case.file)
        if case.config:
            args += ["--config", f"bad/{case.file}"]
    (good / "gum" / "splits.tsv").write_text(splits)
    for text in case.overrides:
        args += ["--set", text.format(file=f"bad/{case.file}")]
    (root / "a-file").write_text("not a folder\n")
    return args + list(case.args)


@dataclass
class Outcome:
    code: int
    err: str
    store: list[str]  # files under data/cache outside _prefect
    runs: list[str]  # files under data/runs


_outcomes: dict[str, Outcome] = {}


def run_case(case: Case, root: Path) -> Outcome:
    """Run the case once (in a fresh project under ``root``) and remember its outcome."""
    key = case_id(case)
    if key not in _outcomes:
        project = root / key
        args = make_project(project, case)
        names = ("SCARCE_ROOT", "SCARCE_STORE", "SCARCE_RUNS", "SCARCE_MEMORY_LIMIT_GB")
        saved = {v: os.environ.get(v) for v in names}
        os.environ["SCARCE_ROOT"] = str(project)
        for var in names[1:]:
            os.environ.pop(var, None)
        for var, value in case.env:
            os.environ[var] = value.format(project=project)
        err, out = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                code = main(args)
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
        cache, runs = project / "data" / "cache", project / "data" / "runs"
        store = sorted(
            str(p.relative_to(cache))
            for p in (cache.rglob("*") if cache.is_dir() else [])
            if p.is_file() and p.relative_to(cache).parts[0] != "_prefect"
        )
        written = sorted(
            str(p.relative_to(runs)) for p in (runs.rglob("*") if runs.is_dir() else [])
        )
        _outcomes[key] = Outcome(code, err.getvalue(), store, written)
    return _outcomes[key]


def case_id(case: Case) -> str:
    if case.file:
        return case.file
    if case.name:
        return case.name
    return f"{case.flow}-set-" + "-".join(o.split("=")[0] for o in case.overrides)


ALL = CASES + OVERRIDE_CASES


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("bad-inputs")


def test_manifest_covers_every_file_of_the_folder():
    files = sorted(p.name for p in BAD.iterdir() if p.is_file())
    named = sorted(c.file for c in CASES if c.file not in GENERATED)
    assert named == files
    assert len(files) >= 25
    for stem in ("xmc_", "arff_", "semeval_", "jsonl_", "conllu_", "config_"):
        assert any(f.startswith(stem) for f in files), stem


def known(reason_attr: str) -> list:
    """The cases, with the ones known to fail this check marked strict xfail."""
    out = []
    for c in ALL:
        reason = getattr(c, reason_attr)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(c, marks=marks, id=case_id(c)))
    return out


@pytest.mark.parametrize("case", known("wrong_message"))
def test_exit_2_with_one_error_line_naming_the_place(case, root):
    outcome = run_case(case, root)
    assert outcome.code == 2, outcome.err[-2000:]
    lines = [line for line in outcome.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, outcome.err[-2000:]
    assert case.expect in lines[0], lines[0]
    assert "Traceback" not in outcome.err
    # one short line, and the last thing said: nothing of the message spills onto more lines
    assert len(lines[0]) < 500, lines[0][:1000]
    assert outcome.err.rstrip().splitlines()[-1] == lines[0]
    assert len(outcome.err) < 20_000  # no echo of the input in Prefect's logs either


@pytest.mark.parametrize("case", known("leaves_entries"))
def test_nothing_left_in_store_or_runs(case, root):
    outcome = run_case(case, root)
    assert outcome.code == 2
    assert outcome.store == []
    assert outcome.runs == []
