"""The user docs hold together: every relative link in README.md, bench/README.md
and docs/ (the notebook too) reaches an existing file, and a heading where it
names one; docs/results.md has a row for every shipped gin file, and each of
its sections of figures names a command and a date."""

from __future__ import annotations

import glob
import os
import re
from typing import Dict, List, Tuple

import pytest

from conftest import REPO_ROOT

RESULTS = os.path.join(REPO_ROOT, "docs", "results.md")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def markdown_files() -> List[str]:
    return sorted([os.path.join(REPO_ROOT, "README.md"),
                   os.path.join(REPO_ROOT, "bench", "README.md"),
                   *glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"), recursive=True)])


def prose_lines(text: str) -> List[str]:
    """The lines outside fenced code blocks, inline code spans removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (hyphens
    and underscores kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> set:
    seen: Dict[str, int] = {}
    found = set()
    text = open(path, encoding="utf-8").read()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"#{1,6} +(.*?) *#*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links() -> List[Tuple[str, str]]:
    links = []
    for path in markdown_files():
        for line in prose_lines(open(path, encoding="utf-8").read()):
            for target in LINK.findall(line):
                if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    links.append((path, target))
    return links


def test_the_docs_have_relative_links():
    assert len(relative_links()) > 50


@pytest.mark.parametrize("source,target", relative_links(),
                         ids=lambda value: os.path.relpath(value, REPO_ROOT)
                         if os.path.isabs(value) else value)
def test_a_relative_link_reaches_a_file_and_heading(source, target):
    file_part, _, anchor = target.partition("#")
    resolved = (os.path.normpath(os.path.join(os.path.dirname(source), file_part))
                if file_part else source)
    where = os.path.relpath(source, REPO_ROOT)
    assert os.path.exists(resolved), f"{where} links to {target}: no such file"
    if anchor and resolved.endswith(".md"):
        assert anchor in anchors(resolved), (
            f"{where} links to {target}: {os.path.relpath(resolved, REPO_ROOT)} has no "
            f"heading with the anchor #{anchor}")


def shipped_gin_files() -> List[str]:
    return sorted(os.path.basename(p)
                  for p in glob.glob(os.path.join(REPO_ROOT, "gin_configs", "*.gin")))


def test_results_has_a_row_for_every_shipped_gin_file():
    text = open(RESULTS, encoding="utf-8").read()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    missing = [name for name in shipped_gin_files()
               if not any(line.startswith(f"| `{name}` |") for line in rows)]
    assert not missing, (
        f"docs/results.md has no row for {missing}: add one to its table of every shipped "
        "config (\"not measured\" where there is no result yet)")


def sections(path: str) -> Dict[str, str]:
    """'## ' heading -> its text, up to the next '## ' heading."""
    out: Dict[str, str] = {}
    current = None
    for line in open(path, encoding="utf-8").read().splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def test_every_section_of_results_names_its_commands_and_dates():
    parts = sections(RESULTS)
    assert "Headline" in parts and "Every shipped config" in parts
    for heading, text in parts.items():
        if heading == "Every shipped config":  # an index: its rows point to the sections
            continue
        assert DATE.search(text), f"docs/results.md, section {heading!r}: no date"
        assert re.search(r"python -m (bench|alf_async)\.|`bench\.[a-z_]+`", text), (
            f"docs/results.md, section {heading!r}: no command")
    for line in parts["Headline"].splitlines():
        if line.startswith("| ") and not line.startswith("| what"):
            assert DATE.search(line) and re.search(r"`bench\.[a-z_]+`", line), (
                f"a headline row of docs/results.md without its command and date: {line}")


def test_the_readme_links_the_results_page():
    readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
    assert "(docs/results.md)" in readme
