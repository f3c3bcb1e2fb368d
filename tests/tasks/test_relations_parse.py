"""The relations parse step refuses a file too small for the method before storing it, and
a format no reader reads."""

from __future__ import annotations

import json

import pytest

from scarce.algorithms.relations.model import RelationDiscovery
from scarce.tasks.errors import InputError
from scarce.tasks.relations import parse


def _pairs(path, n, other=0):
    lines = [json.dumps({"id": i, "tokens": ["a", "b", "c", "d"], "head": [0, 1], "tail": [2, 3],
                         "label": "Other" if i < other else "Cause-Effect"}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


ARGS = dict(fmt="auto", relation_types=None, include_other=False, directed=False)


@pytest.mark.parametrize("params, key, message", [
    (dict(k_low=2, k_high=3, rho=0.1), "rho", "rho (0.1) subsamples 2 of the 8 pairs"),
    (dict(k_low=2, k_high=8), "k_high", "k_high (8) must be below the number of pairs (8)"),
    (dict(k_low=2, k_high=3, ranking="chi2", chi2_k=9), "chi2_k", "chi2_k (9) must not exceed"),
])
def test_a_file_too_small_for_the_parameters_is_refused_naming_file_and_key(tmp_path, params,
                                                                           key, message):
    path = _pairs(tmp_path / "p.jsonl", 12, other=4)  # 8 pairs once 'Other' is left out
    need = RelationDiscovery(**params).step_params("check_n_pairs")
    with pytest.raises(InputError) as err:
        parse(path=str(path), **ARGS, enough_for=need)
    assert (err.value.path, err.value.key) == (str(path), key)
    assert message in err.value.message
    assert len(parse(path=str(path), **ARGS)) == 8  # without the check (one of several files)


def test_the_check_is_not_part_of_the_key(tmp_path):
    path = _pairs(tmp_path / "p.jsonl", 12)
    call = dict(path=str(path), **ARGS)
    assert parse.key(call) == parse.key({**call, "enough_for": {"k_high": 3, "rho": 0.5}})


def test_a_format_that_no_reader_reads_is_refused_naming_the_key(tmp_path):
    path = _pairs(tmp_path / "p.jsonl", 12)
    with pytest.raises(InputError) as err:
        parse(path=str(path), **{**ARGS, "fmt": "xml"})
    assert err.value.key == "format" and "auto, semeval, jsonl" in err.value.message
