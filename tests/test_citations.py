"""Every document piw's code cites ships with it: each ``*.md`` a docstring or comment in ``piw/`` names is a path
from the repository root that exists (``docs/cli.md``, ``docs/design/persistence.md``), and each section it cites
(``§8``, ``§10.3``, ``#anchor``) is a heading of that file. A bare ``§4`` cites the documents its module names.

So a reader can open what a comment points at: no ``../shared/...`` or ``spec/...`` outside the repository, no
``persistence.md`` that could be any of several files, no section renumbered away.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT / "piw"

DOCUMENT = re.compile(r"(?<![\w/.-])((?:\.\./)*[\w./-]*[\w-]+\.md)\b(#[\w-]+)?")
SECTIONS_AFTER = re.compile(r"[`)]*,? ?((?:§\s?[\dA-Z][\w.]*(?:\s?(?:,|–|-|and)\s?)?)+)")
CITED = re.compile(DOCUMENT.pattern + "(?:" + SECTIONS_AFTER.pattern + ")?")
SECTION = re.compile(r"§\s?([\dA-Z][\w.]*?)\.?(?=[^\w.]|\.\s|\.$|$)")
BARE_SECTION = re.compile(r"§\s?(\d[\d.]*\d|\d)")
NAMED_WITHOUT_SUFFIX = re.compile(r"(?<![\w/.-])([\w-]+) §\s?\d")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)


def _headings(document: Path) -> tuple[set[str], set[str]]:
    """The section numbers (``3``, ``10.3``) and GitHub anchors of a document's headings."""
    numbers, anchors = set(), set()
    in_fence = False
    for line in document.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else HEADING.match(line)
        if match is None:
            continue
        title = match.group(1)
        number = re.match(r"§?(\d+(?:\.\d+)*)\.?\s", title + " ")
        if number:
            numbers.add(number.group(1))
        anchors.add(re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-"))
    return numbers, anchors


def _known_section(document: Path, section: str) -> bool:
    numbers, _ = _headings(document)
    if section in numbers:
        return True
    text = document.read_text(encoding="utf-8")
    return bool(re.match(r"[A-Z]\d+$", section)) and re.search(rf"\|\s*{section}\s*\|", text) is not None


def _problems(path: Path) -> list[str]:
    relative = path.relative_to(ROOT)
    text = path.read_text(encoding="utf-8")
    problems: list[str] = []
    cited: list[Path] = []
    for match in DOCUMENT.finditer(text):
        name, anchor = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        where = f"{relative}:{line}: {name}"
        target = (ROOT / name).resolve()
        if ".." in Path(name).parts or not target.is_relative_to(ROOT) or not target.is_file():
            problems.append(f"{where} is not a file of the repository (cite it from the root: docs/…)")
            continue
        cited.append(target)
        if anchor and anchor[1:] not in _headings(target)[1]:
            problems.append(f"{where}{anchor}: no such heading in {name}")
        after = SECTIONS_AFTER.match(text, match.end())
        for section in SECTION.findall(after.group(1)) if after else ():
            if not _known_section(target, section):
                problems.append(f"{where} §{section}: no such section in {name}")
    stems = {p.stem for p in (ROOT / "docs").rglob("*.md")}
    for match in NAMED_WITHOUT_SUFFIX.finditer(text):
        if match.group(1) in stems:
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{relative}:{line}: {match.group(0)!r} names a document without its path")
    blanked = CITED.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)  # same offsets, same lines
    for match in BARE_SECTION.finditer(blanked):
        section = match.group(1)
        if not any(_known_section(document, section) for document in cited):
            line = text.count("\n", 0, match.start()) + 1
            cites = ", ".join(sorted({str(d.relative_to(ROOT)) for d in cited})) or "no document"
            problems.append(
                f"{relative}:{line}: a bare §{section} is no section of what the module cites ({cites})"
            )
    return problems


def test_every_document_the_code_cites_is_in_the_repository() -> None:
    problems = [problem for path in sorted(CODE.rglob("*.py")) for problem in _problems(path)]
    assert not problems, "citations that do not resolve:\n" + "\n".join(problems)
