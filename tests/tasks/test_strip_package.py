"""``scarce.tasks.strip`` gives each of its names from its module, imported on first use: a
name is the module's own object, every name is listed once, and what needs only the
documents' and the outputs' names (the checks of ``scarce apply`` before it starts a server, a
StRip model's reader) imports neither the learner (scikit-learn, numba) nor Prefect."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import scarce.tasks.strip as strip
from tests.flows.helpers import FORBIDDEN_BEFORE_START


def test_every_name_is_its_modules_own_and_listed_once():
    listed = [n for names in strip._MODULES.values() for n in names]
    assert len(listed) == len(set(listed))
    assert sorted(strip.__all__) == sorted(listed)
    for module, names in strip._MODULES.items():
        source = importlib.import_module(f"scarce.tasks.strip.{module}")
        for name in names:
            assert getattr(strip, name) is getattr(source, name), name
    assert set(strip.__all__) <= set(dir(strip))


def test_a_name_it_does_not_have_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        strip.nope  # noqa: B018
    with pytest.raises(ImportError):
        from scarce.tasks.strip import nope  # noqa: F401


LIGHT = ("documents", "outputs")  # the names apply-strip's checks read


@pytest.mark.slow  # starts a Python process
def test_the_names_of_documents_and_outputs_import_neither_the_learner_nor_prefect():
    names = [n for m in LIGHT for n in strip._MODULES[m]]
    code = (f"import json, sys\nfrom scarce.tasks import strip\nfor n in {names!r}: "
            "getattr(strip, n)\nimport scarce.flows.model_strip\n"
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = json.loads(done.stdout.splitlines()[-1])
    assert "scarce.tasks.strip.outputs" in modules  # (the names were read)
    assert [m for m in modules if m.split(".")[0] in FORBIDDEN_BEFORE_START] == []
