"""Builds a section tree from a stream of headings (with levels) and text."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Node:
    level: int
    title: str
    paragraphs: list[str] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)
    current: list[str] = field(default_factory=list)

    def flush(self) -> None:
        text = "\n".join(self.current).strip()
        if text:
            self.paragraphs.append(text)
        self.current = []

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "text": "\n\n".join(self.paragraphs),
            "children": [c.to_dict() for c in self.children],
        }


class SectionBuilder:
    """Headings open sections at their level; text lines accumulate into paragraphs."""

    def __init__(self) -> None:
        self._root = _Node(level=0, title="")
        self._stack: list[_Node] = [self._root]

    def open_section(self, level: int, title: str) -> None:
        self._stack[-1].flush()
        while len(self._stack) > 1 and self._stack[-1].level >= level:
            self._stack.pop()
        node = _Node(level=level, title=title.strip())
        self._stack[-1].children.append(node)
        self._stack.append(node)

    def add_line(self, line: str) -> None:
        node = self._stack[-1]
        if line.strip():
            node.current.append(line.rstrip())
        else:
            node.flush()

    def add_paragraph(self, text: str) -> None:
        node = self._stack[-1]
        node.flush()
        if text.strip():
            node.paragraphs.append(text.strip())

    def pending_paragraph(self) -> bool:
        return bool(self._stack[-1].current)

    def is_empty(self) -> bool:
        root = self._root
        return not root.children and not root.paragraphs and not root.current

    def build(self) -> list[dict]:
        for node in self._stack:
            node.flush()
        sections = []
        if self._root.paragraphs:
            sections.append({"title": "", "text": "\n\n".join(self._root.paragraphs)})
        sections.extend(child.to_dict() for child in self._root.children)
        return sections
