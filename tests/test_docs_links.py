"""Every relative link of the docs and the README resolves: the file exists and, when the link
names an anchor, the file has a heading with that anchor (GitHub's slug rule); the journal's
entries are named by date and listed in its index."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
JOURNAL = DOCS / "journal"

_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def _prose(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks (a fence's lines become blank)."""
    out, fence = [], None
    for line in text.split("\n"):
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if fence is None and marker:
            fence = marker.group(1)[0] * len(marker.group(1))
            out.append("")
        elif fence is not None:
            if stripped.startswith(fence) and not stripped.strip(fence[0]).strip():
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower-cased, every
    character but letters, digits, marks, ``_``, ``-`` and spaces dropped, spaces made
    hyphens (github-slugger's rule, before duplicates are numbered)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    kept = [ch for ch in text.lower()
            if ch in "-_ " or ch.isalnum() or unicodedata.category(ch).startswith("M")]
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated one gets ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text(encoding="utf-8")):
        if m := _HEADING.match(line):
            base = slug(m.group(2))
            n = seen.get(base, 0)
            out.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every inline link of ``path`` outside code."""
    out = []
    for number, line in enumerate(_prose(path.read_text(encoding="utf-8")), 1):
        for m in _LINK.finditer(_CODE_SPAN.sub("", line)):
            out.append((number, m.group(1)))
    return out


def broken_links(paths: list[Path], root: Path = REPO) -> list[str]:
    """``file:line: target (why)`` for every relative link that does not resolve (paths
    shown relative to ``root``)."""
    cache: dict[Path, set[str]] = {}
    problems = []
    for path in paths:
        for number, target in links(path):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, data:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file)")
                continue
            if anchor:
                if dest.suffix != ".md":
                    problems.append(f"{where} (an anchor into a file that is not Markdown)")
                    continue
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{where} (no heading with this anchor)")
    return problems


@pytest.mark.parametrize(("heading", "anchor"), [
    ("The flow on a cluster at full scale (2026-12-02)",
     "the-flow-on-a-cluster-at-full-scale-2026-12-02"),
    ("The frequency and χ² rankings on the corpora (an experiment)",
     "the-frequency-and-χ²-rankings-on-the-corpora-an-experiment"),
    ("Restarts of the subsample clusterings: k = 6 on 4 of 5 seeds",
     "restarts-of-the-subsample-clusterings-k--6-on-4-of-5-seeds"),
    ("Where a worker's memory peaks; `W` and `H` freed",
     "where-a-workers-memory-peaks-w-and-h-freed"),
    ("Applying a model: `apply-strip`", "applying-a-model-apply-strip"),
    ("The [store](design/store.md) and w_step.runner", "the-store-and-w_steprunner"),
])
def test_slug_follows_githubs_rule(heading, anchor):
    assert slug(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Results\n\n```\n# not a heading\n```\n\n## Results\n\n### Results\n")
    assert anchors(page) == {"results", "results-1", "results-2"}


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n[ok](#top) [bad](#nowhere) [gone](b.md)\n"
                                   "`[code](#nowhere)` [web](https://example.org/#x)\n")
    assert broken_links([tmp_path / "a.md"], root=tmp_path) == [
        "a.md:3: #nowhere (no heading with this anchor)", "a.md:3: b.md (no such file)"]


def test_every_relative_link_in_the_docs_and_readme_resolves():
    problems = broken_links(pages())
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_journal_entries_are_dated_and_listed_in_its_index():
    index = (JOURNAL / "README.md").read_text(encoding="utf-8")
    listed = {Path(target.partition("#")[0]).name for _, target in links(JOURNAL / "README.md")}
    entries = sorted(p.name for p in JOURNAL.glob("*.md") if p.name != "README.md")
    assert entries, "docs/journal/ holds no entry"
    misnamed = [e for e in entries if not re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", e)]
    assert not misnamed, f"journal entries not named YYYY-MM-DD-topic.md: {misnamed}"
    missing = [e for e in entries if e not in listed]
    assert not missing, (f"journal entries not listed in docs/journal/README.md: {missing}; "
                         "add a line each, newest first")
    order = [Path(t.partition("#")[0]).name for _, t in links(JOURNAL / "README.md")
             if re.match(r"\d{4}-\d{2}-\d{2}-", Path(t).name)]
    dates = [name[:10] for name in order]
    assert dates == sorted(dates, reverse=True), "docs/journal/README.md lists entries newest first"
    assert index.startswith("# ")
