"""UI figures: valid, deterministic PNGs from stored tables, published as image artifacts."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from prefect import flow

from scarce.flows import manifest as mf
from scarce.flows import plots
from scarce.flows.config import FlowConfig
from scarce.flows.runtime import RunContext, RunOptions

CONVERGENCE = pd.DataFrame(
    {
        "iteration": [1, 2, 3, 4],
        "objective": [812.5, 640.25, 601.0, 598.75],
        "validation_p_at_1": [0.41, 0.52, 0.55, 0.56],
        "seconds": [0.8, 0.7, 0.7, 0.6],
    }
)
CURVE = pd.DataFrame(
    {
        "k": [3, 4, 5, 6],
        "n_features": [20, 40, 40, 80],
        "m_mean": [0.71, 0.66, 0.52, 0.49],
        "m_random": [0.33, 0.25, 0.2, 0.17],
        "m_norm": [0.38, 0.41, 0.32, 0.32],
        "m_std": [0.02, 0.01, 0.04, 0.03],
        "n_samples": [2, 2, 2, 2],
    }
)
SUBSETS = pd.DataFrame(
    {
        "k": [3, 4, 5, 6],
        "n_features": [20, 40, 40, 80],
        "coverage": [0.6, 0.7, 0.7, 0.9],
        "feasible": [True] * 4,
        "criterion": [1.5, 2.25, 3.0, 3.5],
    }
)
SCORES = pd.DataFrame(
    {
        "method": ["ripper", "strip-labeled", "strip-partial"],
        "muc_f": [0.51, 0.40, 0.47],
        "b3_f": [0.77, 0.76, 0.77],
        "ceaf_e_f": [0.77, 0.74, 0.76],
        "pairwise_f": [0.23, 0.17, 0.20],
        "n_rules": [3, 2, 4],
    }
)
PHASES = pd.DataFrame(
    {
        "method": np.repeat(SCORES["method"].to_numpy(), 3),
        "phase": ["grow", "prune", "optimize"] * 3,
        "seconds": [0.3, 0.1, 0.2] * 3,
        "n_rules": [5, 3, 3, 4, 2, 2, 6, 4, 4],
    }
)


COVERAGE = pd.DataFrame(
    {
        "method": ["ripper", "ripper", "strip-partial", "strip-partial", "strip-partial"],
        "rule_id": [0, 1, 0, 1, 2],
        "rule": ["head_match == True", "alias == True AND sentence_distance <= 2.0",
                 "string_match == True", "pronoun_j == True AND gender_agree == yes "
                 "AND number_agree == yes AND mention_distance <= 1.0", "appositive == True"],
        "new_pos": [120, 14, 131, 40, 6],
        "new_neg": [9, 3, 11, 25, 1],
    }
)


def _image(png: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(png))
    img.load()  # decodes every chunk: a truncated or corrupt PNG raises here
    return img


@pytest.mark.parametrize(
    ("draw", "size"),
    [
        (lambda: plots.leml_convergence(CONVERGENCE), (640, 360)),
        (lambda: plots.relations_stability(CURVE, 4), (640, 360)),
        (
            lambda: plots.relations_stability(CURVE, 4, SUBSETS, CURVE.assign(m_norm=0.2)),
            (640, 680),
        ),
        (lambda: plots.strip_comparison(SCORES), (640, 380)),
        (lambda: plots.strip_comparison(SCORES, PHASES), (1000, 380)),
        (lambda: plots.strip_rule_coverage(COVERAGE), (800, 390)),
        (lambda: plots.strip_rule_coverage(COVERAGE, ["ripper", "strip-labeled",
                                                      "strip-partial"]), (800, 494)),
    ],
    ids=["leml", "relations", "relations-with-subsets", "strip", "strip-with-phases",
         "strip-rule-coverage", "strip-rule-coverage-with-empty"],
)
def test_plots_are_small_valid_pngs_with_identical_bytes_on_every_call(draw, size):
    png = draw()
    img = _image(png)
    assert img.format == "PNG" and img.size == size
    assert 5_000 < len(png) < 200_000
    assert "Software" not in img.info  # no matplotlib version stamp in the bytes
    # not blank: the figure has drawn lines and text in more than a handful of colours
    assert len(img.convert("RGB").getcolors(maxcolors=1 << 16) or []) > 20
    assert draw() == png


def test_the_figures_follow_the_tables():
    without_val = CONVERGENCE.assign(validation_p_at_1=np.nan)
    assert plots.leml_convergence(without_val) != plots.leml_convergence(CONVERGENCE)
    # no validation split: nothing of validation P@1 drawn, as without the column
    assert plots.leml_convergence(without_val) == plots.leml_convergence(
        CONVERGENCE.drop(columns="validation_p_at_1"))
    seconds = CONVERGENCE.assign(seconds=[9.0, 9.0, 9.0, 9.0])  # volatile: never drawn
    assert plots.leml_convergence(seconds) == plots.leml_convergence(CONVERGENCE)
    assert plots.relations_stability(CURVE, 4) != plots.relations_stability(CURVE, 5)
    fewer = COVERAGE.assign(new_neg=COVERAGE["new_neg"].where(COVERAGE["rule_id"] != 1, 0))
    assert plots.strip_rule_coverage(fewer) != plots.strip_rule_coverage(COVERAGE)
    slower = PHASES.assign(seconds=PHASES["seconds"] * 7)
    assert plots.strip_comparison(SCORES, slower) == plots.strip_comparison(SCORES, PHASES)


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match=r"convergence table lacks columns \['objective'\]"):
        plots.leml_convergence(CONVERGENCE.drop(columns="objective"))
    with pytest.raises(ValueError, match="stability curve is empty"):
        plots.relations_stability(CURVE.iloc[:0], 4)
    with pytest.raises(ValueError, match="scores table has none of the columns"):
        plots.strip_comparison(SCORES[["method", "n_rules"]])
    with pytest.raises(ValueError, match=r"rule coverage table lacks columns \['new_neg'\]"):
        plots.strip_rule_coverage(COVERAGE.drop(columns="new_neg"))


def _artifacts(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a for a in arts}


@pytest.mark.usefixtures("prefect_server")
def test_an_image_artifact_writes_the_png_and_a_markdown_artifact_whose_text_is_short(tmp_path):
    png = plots.leml_convergence(CONVERGENCE)

    @flow(name="plots-demo")
    def demo() -> dict:
        ctx = RunContext.open(
            "plots-demo",
            FlowConfig(seed=0),
            RunOptions(store=str(tmp_path / "cache"), runs=str(tmp_path / "runs"), run_id="r1"),
        )
        ctx.artifacts.image("Objective", png, "objective over iterations")
        progress = ctx.artifacts.progress("loop", 3, "three units")
        for _ in range(3):
            progress.advance()
        with pytest.raises(ValueError, match="not a PNG"):
            ctx.artifacts.image("bad", b"GIF89a", "")
        metrics = pd.DataFrame({"dataset": ["d"], "method": ["m"], "metric": ["x"], "value": [1.0]})
        return ctx.finish(ctx.store.write("plots-demo/metrics", metrics))

    state = demo(return_state=True)
    summary = state.result()
    run_dir = tmp_path / "runs" / "r1"
    assert (run_dir / "plots" / "plots-demo-objective.png").read_bytes() == png
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [p["path"] for p in manifest["plots"]] == ["plots/plots-demo-objective.png"]
    other = {**manifest, "plots": [{**manifest["plots"][0], "sha256": "0" * 64}]}
    assert mf.compare_outputs(manifest, other) == []  # plots are not outputs a rerun compares
    assert summary["manifest"]["plots"][0]["sha256"] == manifest["plots"][0]["sha256"]

    arts = _artifacts(state.state_details.flow_run_id)
    image = arts["plots-demo-objective"]
    # The UI prints an image artifact's data, the whole data: URL, as the link text under the
    # picture; a markdown artifact shows the picture with its alt text and a short caption.
    assert image.type == "markdown" and image.description == "objective over iterations"
    shown = _markdown_image(image.data)
    assert shown["alt"] == "objective over iterations"
    assert base64.b64decode(shown["base64"]) == png  # stored whole, not truncated
    assert image.data.count("data:") == 1  # the URL once, as the image's source
    assert len(shown["caption"]) < 200 and "plots/plots-demo-objective.png" in shown["caption"]
    progress = arts["plots-demo-loop"]
    assert progress.type == "progress" and float(progress.data) == 100.0
    assert "plots-demo-bad" not in arts


def _markdown_image(text: str) -> dict[str, str]:
    """The parts of a published figure: ``![alt](data:image/png;base64,...)``, a caption."""
    match = re.fullmatch(r"!\[(?P<alt>[^\]\n]{1,160})\]\(data:image/png;base64,"
                         r"(?P<base64>[A-Za-z0-9+/]+=*)\)\n\n(?P<caption>.+)", text, re.S)
    assert match, text[:300]
    return match.groupdict()


def _leml_metrics() -> pd.DataFrame:
    return pd.DataFrame(
        [
            ("bibtex", "leml-squared-k64", "precision@1", 0.6012),
            ("bibtex", "leml-squared-k64", "precision@3", 0.3601),
            ("bibtex", "leml-squared-k64", "instance_auc", 0.9012),
            ("bibtex", "br-ridge", "precision@1", 0.5811),
            ("bibtex", "br-ridge", "precision@3", 0.3422),
            ("bibtex", "br-ridge", "instance_auc", 0.8833),
        ],
        columns=["dataset", "method", "metric", "value"],
    )


def _publish_in_a_flow(tmp_path, flow_name, publish, *args):
    """Run ``publish(ctx, *args)`` inside a flow run; the run's artifacts by key."""

    @flow(name=flow_name)
    def demo() -> None:
        ctx = RunContext.open(
            flow_name, args[0],
            RunOptions(store=str(tmp_path / "cache"), runs=str(tmp_path / "runs"), run_id="r1"),
        )
        publish(ctx, *args)

    state = demo(return_state=True)
    assert state.is_completed(), state
    return _artifacts(state.state_details.flow_run_id)


@pytest.mark.usefixtures("prefect_server")
@pytest.mark.parametrize("fraction", [0.0, 0.2], ids=["no-validation", "validation"])
def test_leml_artifacts_name_validation_only_with_a_split_and_published_only_on_leml_rows(
    tmp_path, fraction
):
    from scarce.flows.leml import LemlConfig, publish

    config = LemlConfig.model_validate({
        "dataset": {"name": "bibtex", "train": "train.txt", "test": "test.txt",
                    "validation_fraction": fraction},
        "model": {"rank": 64}, "baselines": ["br-ridge"]})
    convergence = CONVERGENCE if fraction else CONVERGENCE.assign(validation_p_at_1=np.nan)
    arts = _publish_in_a_flow(tmp_path, "leml", publish, config, _leml_metrics(), convergence)

    # keys name the flow, the data set and the artifact
    table, image, summary = (arts["leml-bibtex-convergence"], arts["leml-bibtex-objective"],
                             arts["leml-bibtex-summary"])
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    mentions = [table.description, image.description, summary.data]
    if fraction:
        assert [r["validation_p_at_1"] for r in rows] == [0.41, 0.52, 0.55, 0.56]
        assert all("validation P@1" in text for text in mentions[:2])
        assert "| validation_p_at_1 |" in summary.data and "| 0.56 |" in summary.data
    else:  # no column of nulls, no NaN, no mention of a validation P@1 there is not
        assert [sorted(r) for r in rows] == [["iteration", "objective", "seconds"]] * 4
        assert not [text for text in mentions if "validation" in text.lower()]
        assert "nan" not in summary.data.lower()
    # the published LEML figures stand beside LEML's own rows only
    assert "| leml-squared-k64 | precision@1 | 60.12 | 62.54 |" in summary.data
    assert "| leml-squared-k64 | precision@3 | 36.01 | 38.41 |" in summary.data
    assert "| br-ridge | precision@1 | 58.11 |  |" in summary.data
    assert "| br-ridge | precision@3 | 34.22 |  |" in summary.data
    shown = _markdown_image(image.data)
    assert shown["alt"] == image.description and image.description in shown["caption"]


LONG_RULES = pd.DataFrame(
    [
        (0, 0, "head_match", "==", "True", False),
        (1, 0, "pronoun_j", "==", "True", False),
        (1, 1, "gender_agree", "==", "yes", False),
        (1, 2, "number_agree", "==", "yes", False),
        (1, 3, "mention_distance", "<=", "1.0", False),
        (1, 4, "sentence_distance_between_the_two_mentions", "<=", "2.0", False),
        (1, 5, "paragraph_distance", "<=", "0.0", False),
        (1, 6, "entity_type_agree", "==", "yes", True),  # pruned: not part of the rule
        (2, 0, "alias", "==", "True", False),
        (2, 1, "sent_distance", ">=", "3.5", False),
    ],
    columns=["rule_id", "antecedent_index", "feature", "op", "value", "pruned"],
)


@pytest.mark.usefixtures("prefect_server")
def test_strip_rules_artifact_wraps_long_rules_one_antecedent_per_line(tmp_path):
    from scarce.flows.strip import StripConfig, publish

    config = StripConfig(variants=["ripper", "strip-partial"])
    no_rules = LONG_RULES.iloc[:0]
    coverage = COVERAGE.assign(fires=1, fires_pos=1, fires_neg=0, covered_pos=200,
                               covered_neg=50)

    def run(ctx, config):
        refs = {name: ctx.store.write(f"strip-test/{name}", frame) for name, frame in {
            "ripper": no_rules, "strip-partial": LONG_RULES, "scores": SCORES,
            "timings": PHASES, "coverage": coverage}.items()}
        publish(ctx, config, {v: refs[v] for v in config.variants}, refs,
                dict.fromkeys(config.variants, 1.0))

    arts = _publish_in_a_flow(tmp_path, "strip", run, config)
    text = arts["strip-gum-rules"].data
    assert "```" not in text  # a fenced block keeps its long lines: the UI cuts them
    assert max(len(line) for line in text.splitlines() if not line.startswith("|")) <= 80
    partial = text[text.index("## strip-partial"):]
    assert "## strip-partial: 3 rules" in partial
    assert "## ripper: 0 rules\n\n- every pair: not coreferent\n" in text
    lines = partial.splitlines()
    r1 = lines.index("- **R1**: coreferent if all of")
    assert lines[r1 + 1 : r1 + 7] == [
        "  - `pronoun_j == True`", "  - `gender_agree == yes`", "  - `number_agree == yes`",
        "  - `mention_distance <= 1.0`", "  - `sentence_distance_between_the_two_mentions <= 2.0`",
        "  - `paragraph_distance <= 0.0`"]
    assert "entity_type_agree" not in text  # pruned
    assert "- **R0**: coreferent if `head_match == True`" in lines
    assert lines[-1] == "- otherwise: not coreferent"
    assert arts["strip-gum-rule-coverage-plot"].type == "markdown"


def test_rules_markdown_puts_any_value_in_one_code_span():
    from scarce.flows.strip import rules_markdown

    rules = LONG_RULES.iloc[:1].assign(value="a`b``c")
    assert rules_markdown({"m": rules}).splitlines() == [
        "## m: 1 rule", "", "- **R0**: coreferent if ```head_match == a`b``c```",
        "- otherwise: not coreferent"]


def test_summaries_put_the_run_beside_the_published_figures_and_say_they_differ():
    from scarce.flows.relations import RelationsConfig
    from scarce.flows.relations import summary_markdown as relations_summary
    from scarce.flows.strip import StripConfig
    from scarce.flows.strip import summary_markdown as strip_summary

    text = strip_summary(SCORES, StripConfig(),
                         {"ripper": 1.0, "strip-labeled": 0.5, "strip-partial": 0.5})
    assert "| ripper | 0.51 | 0.77 | 0.77 | 0.23 | 3 |" in text
    assert "loss ratios chosen on dev: ripper 1, strip-labeled 0.5, strip-partial 0.5" in text
    assert ("StRip with partial supervision beats RIPPER: B³ +0.000, pairwise -0.030. "
            "Not judged: one run has no seed spread") in text
    assert "83.2 | 67.1" in text and "not comparable" in text and "MPQA" in text
    metrics = pd.DataFrame(
        [
            ("s", "entropy", "accuracy", 0.42),
            ("s", "entropy", "ari", 0.12),
            ("s", "entropy", "v_measure", 0.36),
            ("s", "entropy", "k_chosen", 8.0),
            ("s", "entropy", "k_true", 9.0),
            ("s", "hasegawa-true-k", "accuracy", 0.18),
            ("s", "hasegawa-true-k", "ari", 0.004),
            ("s", "hasegawa-true-k", "v_measure", 0.09),
            ("s", "hasegawa-true-k", "k_used", 9.0),
        ],
        columns=["dataset", "method", "metric", "value"],
    )
    text = relations_summary(metrics, RelationsConfig(), 8, 159)
    assert "| entropy | 0.420 | 41.3 / 50.6 / 42.4 | 0.120 | 0.360 | 8 |" in text
    assert "| hasegawa-true-k | 0.180 | 32.4 / 43.7 / 26.5 | 0.004 | 0.090 | 9 |" in text
    assert "true number of types is 9" in text and "Not a like-for-like" in text


LONG = ("gum test: window 20, loss ratios chosen on dev: ripper 1, strip-labeled 1, "
        "strip-partial 0.5, sources: person, organization, seed 0")


@pytest.mark.parametrize(
    "draw",
    [
        lambda: plots.leml_convergence(CONVERGENCE, title=LONG),
        lambda: plots.relations_stability(CURVE, 4, SUBSETS, title=LONG),
        lambda: plots.strip_comparison(SCORES, title=LONG),
        lambda: plots.strip_comparison(SCORES, PHASES, title=LONG),
        lambda: plots.strip_rule_coverage(COVERAGE, title=LONG),
    ],
    ids=["leml", "relations", "strip", "strip-with-phases", "strip-rule-coverage"],
)
def test_a_long_title_is_neither_clipped_nor_drawn_over_another(draw, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "_png", lambda fig: drawn.append(fig) or b"")
    draw()
    (fig,) = drawn
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)  # lays the figure out as savefig does
    titles = [t for t in [fig._suptitle, *(a.title for a in fig.axes)]
              if t is not None and t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in titles]
    page = fig.bbox
    for t, b in zip(titles, boxes, strict=True):
        assert b.x0 >= page.x0 - 1 and b.x1 <= page.x1 + 1, f"clipped: {t.get_text()!r}"
        assert b.y0 >= page.y0 - 1 and b.y1 <= page.y1 + 1, f"clipped: {t.get_text()!r}"
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (titles[i].get_text(), titles[j].get_text())
    assert any(LONG.split()[0] in t.get_text() for t in titles)  # the title is drawn


@pytest.mark.slow  # starts two Python processes
def test_a_prefetched_import_gives_the_figure_the_same_bytes_as_drawing_cold():
    """``plots.prefetch`` imports matplotlib on a background thread of a fresh interpreter
    (none of it imported before); a figure drawn while or after it runs has the bytes of one
    drawn in an interpreter that never prefetched."""
    import subprocess
    import sys

    draw = (
        "import hashlib, sys, pandas as pd\n"
        "from scarce.flows import plots\n"
        "assert 'matplotlib' not in sys.modules\n"
        "if sys.argv[1] == 'prefetch':\n"
        "    plots.prefetch()\n"
        "    assert any(t.name == 'scarce-plots-import' for t in __import__('threading')"
        ".enumerate()) or 'matplotlib.figure' in sys.modules\n"
        "conv = pd.DataFrame({'iteration': [1, 2, 3], 'objective': [9.0, 4.0, 3.5],\n"
        "                     'validation_p_at_1': [0.3, 0.5, 0.55]})\n"
        "print(hashlib.sha256(plots.leml_convergence(conv, title='t')).hexdigest())\n"
        "assert 'matplotlib.figure' in sys.modules\n"
    )
    digests = {how: subprocess.run([sys.executable, "-c", draw, how], capture_output=True,
                                   text=True, check=True).stdout.strip()
               for how in ("prefetch", "cold")}
    assert digests["prefetch"] == digests["cold"] and len(digests["cold"]) == 64
