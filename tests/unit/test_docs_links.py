"""Every Markdown link in README.md and docs/ stays inside the repository and lands somewhere real.

A user of a clone or of the published sources has only this repository: a link to a sibling checkout
(``../shared/...``), to a web copy of the reference material, or to a file or heading that does not exist
leaves them with nothing. Checked: inline links and images ``[x](target)``, reference definitions
``[x]: target``, and autolinks ``<scheme:...>``; code (fenced blocks and backtick spans) is not prose and is
skipped. No URL is allowed at all: the docs need none, and any that appears should be argued for here.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); the text may hold one level of brackets, the target may be <...>
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)


@dataclass(frozen=True)
class Link:
    document: Path
    line: int
    target: str


def _prose_lines(text: str, *, blank_code: bool = True) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1, with backtick code spans blanked (a link
    inside one is not a link) unless ``blank_code`` is false (a heading's anchor keeps their text)."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        lines.append((number, _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line) if blank_code else line))
    return lines


def links_in(document: Path) -> list[Link]:
    found: list[Link] = []
    for number, line in _prose_lines(document.read_text(encoding="utf-8")):
        targets = [m.group(1) for m in _INLINE.finditer(line)]
        targets += [m.group(1) for m in _REFERENCE.finditer(line)]
        targets += [m.group(1) for m in _AUTOLINK.finditer(line)]
        found.extend(Link(document, number, target.strip("<>")) for target in targets)
    return found


def heading_anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the document's headings (duplicates numbered), plus explicit ``<a id>``."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(document.read_text(encoding="utf-8"), blank_code=False):
        anchors.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = _slug(heading.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _slug(heading: str) -> str:
    text = re.sub(r"<[^>]+>", "", heading)  # inline HTML
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = text.replace("`", "").lower()
    kept = "".join(char for char in text if char in " -_" or unicodedata.category(char)[0] in ("L", "N", "M"))
    return kept.replace(" ", "-")


def problem_with(link: Link, root: Path = ROOT) -> str | None:
    """Why ``link`` leaves the repository or leads nowhere; ``None`` when it is fine."""
    target = link.target
    if _SCHEME.match(target) or target.startswith("//"):
        return "links outside the repository (a URL)"
    path_part, _, anchor = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if "shared/" in path_part.replace("\\", "/") and path_part.startswith(".."):
        return "points at ../shared, which is not part of the repository"
    if path_part.startswith("/"):
        return "absolute path: use a path relative to the document"
    resolved = (link.document.parent / path_part).resolve() if path_part else link.document.resolve()
    if not resolved.is_relative_to(root.resolve()):
        return "resolves outside the repository"
    if not resolved.exists():
        return f"{resolved.relative_to(root.resolve())} does not exist"
    if anchor and resolved.suffix == ".md" and unquote(anchor) not in heading_anchors(resolved):
        return f"no heading with the anchor #{anchor} in {resolved.relative_to(root.resolve())}"
    return None


def test_the_documents_exist() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in DOCUMENTS}
    assert {"README.md", "docs/configuration.md", "docs/semantics.md", "docs/api.md"} <= names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_stay_in_the_repository(document: Path) -> None:
    problems = [
        f"{link.document.relative_to(ROOT)}:{link.line}: ({link.target}) {problem}"
        for link in links_in(document)
        if (problem := problem_with(link)) is not None
    ]
    assert not problems, "\n".join(problems)


def test_readme_links_the_reference_pages() -> None:
    targets = {link.target.partition("#")[0] for link in links_in(ROOT / "README.md")}
    assert {"docs/semantics.md", "docs/configuration.md", "docs/api.md"} <= targets


# --- the checker itself, on documents written for the purpose ----------------------------------------------


def _check(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "repo" / "docs").mkdir(parents=True)
    (tmp_path / "repo" / "docs" / "other.md").write_text("# Other page\n\n## Buffering, and activation\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "spec.md").write_text("# Spec\n")
    document = tmp_path / "repo" / "docs" / "page.md"
    document.write_text(text)
    return [
        f"{link.target}: {problem}"
        for link in links_in(document)
        if (problem := problem_with(link, tmp_path / "repo")) is not None
    ]


def test_checker_refuses_what_leaves_the_repository(tmp_path: Path) -> None:
    problems = _check(
        tmp_path,
        "# Page\n"
        "See [the spec](../../shared/spec.md) and [the web](https://example.com/spec.md).\n"
        "Also ![img](../../elsewhere.png), [gone](missing.md), <https://example.com>.\n"
        "[ref]: ../../shared/spec.md\n",
    )
    assert problems == [
        "../../shared/spec.md: points at ../shared, which is not part of the repository",
        "https://example.com/spec.md: links outside the repository (a URL)",
        "../../elsewhere.png: resolves outside the repository",
        "missing.md: docs/missing.md does not exist",
        "https://example.com: links outside the repository (a URL)",
        "../../shared/spec.md: points at ../shared, which is not part of the repository",
    ]


def test_checker_checks_anchors_and_skips_code(tmp_path: Path) -> None:
    problems = _check(
        tmp_path,
        "# Page\n\n## Page\n"
        "[ok](other.md#buffering-and-activation), [here](#page), [dup](#page-1), [no](other.md#nope),\n"
        "[self](#absent).\n"
        "`[not a link](../../shared/spec.md)` and\n"
        "```\n[in a block](https://example.com)\n```\n",
    )
    assert problems == [
        "other.md#nope: no heading with the anchor #nope in docs/other.md",
        "#absent: no heading with the anchor #absent in docs/page.md",
    ]
