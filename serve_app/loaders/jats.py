"""JATS XML (PLOS, PMC): title, abstracts, nested body sections, figure/table captions.

References and other back matter are dropped. The DOI, when present, is the document id.
"""

from __future__ import annotations

import re

from lxml import etree

from serve_app.errors import MalformedDocumentError

_SPACE = re.compile(r"\s+")
_FLOATS = {"fig", "table-wrap", "disp-formula-group", "boxed-text", "supplementary-material"}
_SKIP_INLINE = {"fig", "table-wrap", "table", "ref-list", "supplementary-material"}
MAX_SECTION_DEPTH = 32
"""Real articles nest a handful of levels; deeper is refused (bounded recursion below)."""


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _inline_text(element: etree._Element) -> str:
    """Text of an element, skipping floats (captions are added separately), tails kept.

    An iterative walk (``iterwalk``): no Python recursion, whatever the nesting."""
    parts: list[str] = []
    skipping = 0
    for event, node in etree.iterwalk(element, events=("start", "end")):
        skip = isinstance(node.tag, str) and etree.QName(node).localname in _SKIP_INLINE
        if event == "start":
            if skip or skipping:
                skipping += 1
            elif node.text:
                parts.append(node.text)
            continue
        if skip or skipping:
            skipping -= 1
        if node is not element and not skipping and node.tail:
            parts.append(node.tail)
    return _clean("".join(parts))


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname if isinstance(element.tag, str) else ""


def _caption(element: etree._Element) -> str:
    label = element.find("label")
    caption = element.find("caption")
    if caption is None:
        return ""
    text = _inline_text(caption)
    prefix = _inline_text(label) if label is not None else _local(element).capitalize()
    return f"{prefix}. {text}" if text else ""


def _section(element: etree._Element, default_title: str = "", depth: int = 0) -> dict:
    if depth > MAX_SECTION_DEPTH:
        raise MalformedDocumentError(
            f"sections nested more than {MAX_SECTION_DEPTH} deep (JATS <sec> in <sec>)"
        )
    title_el = element.find("title")
    title = _inline_text(title_el) if title_el is not None else default_title
    paragraphs: list[str] = []
    children: list[dict] = []
    for child in element:
        name = _local(child)
        if name == "sec":
            children.append(_section(child, depth=depth + 1))
        elif name == "p":
            text = _inline_text(child)
            if text:
                paragraphs.append(text)
            paragraphs.extend(c for c in map(_caption, child.iter(*_FLOATS)) if c)
        elif name in _FLOATS:
            caption = _caption(child)
            if caption:
                paragraphs.append(caption)
        elif name in {"list", "disp-quote", "statement", "def-list"}:
            text = _inline_text(child)
            if text:
                paragraphs.append(text)
    return {"title": title, "text": "\n\n".join(paragraphs), "children": children}


def _text_of(root: etree._Element, path: str) -> str:
    found = root.find(path)
    return _inline_text(found) if found is not None else ""


def _sections(meta: etree._Element, body: etree._Element | None) -> list[dict]:
    sections: list[dict] = []
    for abstract in meta.findall("abstract"):
        kind = abstract.get("abstract-type")
        if kind in {"toc", "teaser"}:
            continue
        default = "Author Summary" if kind == "summary" else "Abstract"
        section = _section(abstract, default_title=default)
        if abstract.find("title") is None:
            section["title"] = default
        sections.append(section)
    if body is not None:
        loose = _section(body)
        if loose["text"]:
            sections.append({"title": "", "text": loose["text"], "children": []})
        sections.extend(loose["children"])
    return sections


def load_jats(data: bytes, name: str) -> dict:
    # No huge_tree: libxml2 keeps its limits (nesting 256 deep, text nodes 10 MB), so a
    # hostile file fails to parse (400) instead of exhausting the stack or memory.
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, recover=False
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as error:
        raise MalformedDocumentError(f"{name}: malformed XML ({error})") from None
    if _local(root) != "article":
        raise MalformedDocumentError(f"{name}: XML root is <{_local(root)}>, not a JATS <article>")
    meta = root.find("front/article-meta")
    if meta is None:
        raise MalformedDocumentError(f"{name}: JATS article without front/article-meta")

    try:
        sections = _sections(meta, root.find("body"))
    except MalformedDocumentError as error:
        raise MalformedDocumentError(f"{name}: {error.message}") from None

    metadata: dict = {}
    doi = meta.findtext("article-id[@pub-id-type='doi']")
    if doi:
        metadata["doi"] = doi.strip()
    journal = root.findtext("front/journal-meta/journal-title-group/journal-title")
    if journal:
        metadata["journal"] = journal.strip()
    if root.get("article-type"):
        metadata["article_type"] = root.get("article-type")
    year = meta.findtext("pub-date/year")
    if year and year.strip().isdigit():
        metadata["year"] = int(year)
    subjects = [
        _clean(s.text or "")
        for s in meta.findall(
            "article-categories/subj-group[@subj-group-type='Discipline']/subject"
        )
    ]
    if subjects:
        metadata["subjects"] = [s for s in subjects if s]

    fields: dict = {
        "title": _text_of(meta, "title-group/article-title"),
        "sections": sections,
        "metadata": metadata,
    }
    if doi:
        fields["id"] = doi.strip()
    return fields
