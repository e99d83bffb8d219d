"""HTML: h1-h6 become nested sections; scripts, styles and page chrome are dropped."""

from __future__ import annotations

import re
from pathlib import Path

import lxml.html
from lxml import etree

from serve_app.errors import MalformedDocumentError
from serve_app.loaders.base import decode_text
from serve_app.loaders.tree import SectionBuilder

_SPACE = re.compile(r"\s+")
_DROP = {"script", "style", "noscript", "nav", "footer", "header", "aside", "form", "template"}
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_BLOCKS = {"p", "li", "pre", "blockquote", "figcaption", "dd", "dt", "td", "th", "caption"}


def _text(element: etree._Element) -> str:
    return _SPACE.sub(" ", element.text_content()).strip()


def load_html(data: bytes, name: str) -> dict:
    text = decode_text(data, name)
    parser = lxml.html.HTMLParser()
    try:
        root = lxml.html.document_fromstring(text, parser=parser)
    except (etree.ParserError, ValueError) as error:
        raise MalformedDocumentError(f"{name}: malformed HTML ({error})") from None
    # libxml2 stops at a fatal error (elements nested deeper than its limit of 256, say) and
    # returns what it parsed so far: everything after that point would be lost unseen.
    fatal = [e for e in parser.error_log if e.level == etree.ErrorLevels.FATAL]
    if fatal:
        first = fatal[0]
        raise MalformedDocumentError(
            f"{name}: the HTML parser stopped at line {first.line}, column {first.column}: "
            f"{first.message.strip()}; the rest of the document would be lost, so none of it "
            "is indexed (elements may nest at most 255 deep)"
        )
    for element in list(root.iter(*_DROP)):
        element.drop_tree()
    title = ""
    title_el = root.find(".//title")
    if title_el is not None:
        title = _text(title_el)
    body = root.find("body")
    if body is None:
        body = root
    builder = SectionBuilder()
    first_h1_taken = False

    def visit(element: etree._Element) -> None:
        nonlocal title, first_h1_taken
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag in _HEADINGS:
            heading = _text(element)
            if tag == "h1" and not first_h1_taken and builder.is_empty():
                first_h1_taken = True
                title = heading or title
                return
            builder.open_section(_HEADINGS[tag], heading)
            return
        if tag in _BLOCKS:
            builder.add_paragraph(_text(element))
            return
        if element.text and element.text.strip():
            builder.add_paragraph(element.text)
        for child in element:
            visit(child)
            if child.tail and child.tail.strip():
                builder.add_paragraph(child.tail)

    visit(body)
    return {"title": title or Path(name).stem, "sections": builder.build()}
