"""The config reference (docs/reference/configs.md) is what the flows' pydantic models say:
the page equals ``render()``, and every key a bundled config sets, every default the
estimators give and every nested section has its row."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, Field

from scarce.flows import config_reference
from scarce.flows.config import Strict
from scarce.flows.config_reference import COMMAND, render
from scarce.flows.registry import FLOWS

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "configs.md"


def _rows(text: str) -> dict[str, list[str]]:
    """The page's table rows by key: ``{"model.rank": [type, default, description]}``, the
    keys of every flow together (the last flow's row where two flows share a key)."""
    rows = {}
    for line in text.splitlines():
        if m := re.match(r"\| `([^`]+)` \| (.*) \|$", line):
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))]
    return rows


def _sections(text: str) -> dict[str, str]:
    """The page's text per flow (its ``## name`` section)."""
    parts = re.split(r"^## (\S+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_config_reference_page_is_what_render_gives():
    page = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert page == render(), (
        "docs/reference/configs.md differs from the flows' config models; regenerate it with\n"
        f"    {COMMAND}")


def test_every_registered_flow_has_a_section():
    ours = [name for name, spec in FLOWS.items() if spec.target.startswith("scarce.")]
    assert {"leml", "relations", "strip", "apply-leml"} <= set(ours)
    assert list(_sections(render())) == ours


def test_a_flow_registered_by_other_code_is_left_out(monkeypatch):
    from scarce.flows.registry import FlowSpec

    spec = FlowSpec(name="theirs", target="their_package.flows:theirs",
                    config_model="their_package.flows:Config", config_file="configs/t.yaml")
    monkeypatch.setitem(FLOWS, "theirs", spec)
    assert "theirs" not in _sections(render())
    assert render() == PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize("flow", ["leml", "relations", "strip"])
def test_every_key_the_bundled_config_sets_has_a_row(flow):
    def keys(mapping, prefix=""):
        for key, value in mapping.items():
            yield prefix + key
            if isinstance(value, dict):
                yield from keys(value, f"{prefix}{key}.")

    bundled = yaml.safe_load((REPO / FLOWS[flow].config_file).read_text(encoding="utf-8"))
    section = _rows(_sections(render())[flow])
    missing = [k for k in keys(bundled) if k not in section]
    assert not missing, f"keys of {FLOWS[flow].config_file} without a row: {missing}"


def test_defaults_from_an_estimator_are_the_estimators():
    from scarce.algorithms.leml import LEML

    rows = _rows(_sections(render())["leml"])
    assert rows["model.rank"][1] == f"`{LEML().rank}` (from `LEML.rank`)"
    assert rows["model.loss"][1] == f"`{LEML().loss}` (from `LEML.loss`)"
    assert rows["dataset.train"][1] == "required"
    assert rows["dataset.table"][0] == "section"


def test_nested_and_optional_sections_are_walked_with_dotted_keys(monkeypatch):
    class Inner(Strict):
        """A nested section."""

        size: int = Field(3, ge=1, le=9, description="How many | of them.")
        mode: str | None = Field(None, description="<name> or *none*.")

    class Outer(Strict):
        inner: Inner = Field(default_factory=Inner)
        maybe: Inner | None = None
        tags: list[str] = Field(default_factory=list, description="Tags.")

    class Spec:
        name, description, config_file = "toy", "A toy flow", "configs/toy.yaml"

        def load_model(self) -> type[BaseModel]:
            return Outer

    monkeypatch.setattr(config_reference, "FLOWS", {"toy": Spec()})
    rows = _rows(render())
    assert list(rows) == ["inner", "inner.size", "inner.mode", "maybe", "maybe.size",
                          "maybe.mode", "tags"]
    assert rows["inner"] == ["section", "", "A nested section."]
    assert rows["inner.size"] == ["int, >= 1, <= 9", "`3`", "How many \\| of them."]
    assert rows["inner.mode"] == ["str \\| null", "`null`", "&lt;name> or \\*none\\*."]
    assert rows["tags"] == ["list[str]", "`[]`", "Tags."]
