"""Format detection, per-format loaders and the errors bad files produce."""

import time
from pathlib import Path

import pytest

from serve_app.errors import MalformedDocumentError, PayloadTooLargeError, UnsupportedFormatError
from serve_app.loaders import detect_format, load_bytes, load_file

MARKDOWN = b"""# Guide Title

Intro paragraph
over two lines.

## Install

Run it.

### Linux

apt-get it.

```
# not a heading inside a fence
```

Setext Heading
--------------

Body.
"""

HTML = b"""<!DOCTYPE html><html><head><title>Page Title</title><script>var x;</script></head>
<body><nav>menu</nav><h1>Main</h1><p>First para.</p><h2>Part A</h2><p>Alpha text.</p>
<ul><li>item one</li></ul><h3>Deeper</h3><p>Deep text.</p><h2>Part B</h2><p>Beta.</p>
<footer>copyright</footer></body></html>"""


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF with a real text layer (Helvetica, one text object)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


class TestDetect:
    @pytest.mark.parametrize(
        "name,head,fmt",
        [
            ("a.txt", b"hello", "text"),
            ("a.md", b"# x", "markdown"),
            ("noext", b"<!DOCTYPE html><html>", "html"),
            ("a.bin", b"%PDF-1.7", "pdf"),
            ("a.xml", b'<?xml version="1.0"?><article>', "jats"),
        ],
    )
    def test_formats(self, name, head, fmt):
        assert detect_format(name, head) == fmt

    def test_unsupported(self):
        with pytest.raises(UnsupportedFormatError, match=r"\.docx"):
            detect_format("report.docx", b"PK\x03\x04")


class TestText:
    def test_load(self):
        doc = load_bytes(b"Line one.\r\n\r\nLine two.", "notes.txt")
        assert doc.title == "notes" and doc.text == "Line one.\n\nLine two."
        assert doc.id == "notes" and doc.metadata["format"] == "text"

    def test_binary_is_malformed(self):
        with pytest.raises(MalformedDocumentError, match="binary"):
            load_bytes(b"\x00\x01\x02abc", "x.txt")

    def test_empty_is_malformed(self):
        with pytest.raises(MalformedDocumentError, match="no text"):
            load_bytes(b"   \n", "x.txt")


class TestMarkdown:
    def test_heading_tree(self):
        doc = load_bytes(MARKDOWN, "guide.md")
        assert doc.title == "Guide Title"
        blocks = list(doc.iter_blocks())
        assert blocks[0] == ((), "Intro paragraph\nover two lines.")
        assert ((("Install",), "Run it.")) in blocks
        assert any(
            chain == ("Install", "Linux") and "not a heading" in text for chain, text in blocks
        )
        assert (("Setext Heading",), "Body.") in blocks

    def test_quotes_and_list_items_keep_only_their_text(self):
        text = (
            "> quoted\n>> deeper\n> > - 1. listed\n>\n- item\n  + sub-item\n2) second\n\n"
            "*emphasis* stays, 1.5 mg stays, -5 stays\n- - -\n"
            "```\n> code keeps its markers\n- too\n```\n"
            "> # quoted hash\n- item\n---\n"
        )
        [(_, body)] = load_bytes(text.encode(), "q.md").iter_blocks()
        assert body.split("\n\n") == [
            "quoted\ndeeper\n1. listed",  # an ordered item's number is text
            "item\nsub-item\n2) second",
            "*emphasis* stays, 1.5 mg stays, -5 stays",
            "```\n> code keeps its markers\n- too\n```\n# quoted hash\nitem\n---",
        ]

    def test_ordered_numbers_and_digits_of_ordinary_text_are_kept(self):
        """(was: "2024." and "12." deleted) Only quote and bullet markers are structure; an
        ordered item's number is text (a clause number, a year that wraps to a line's start)."""
        text = (
            "Revenue grew in\n2024. After that it fell.\n\n"
            "12. The tenant shall pay rent.\n3) Notice is given in writing.\n\n"
            "> - 7. quoted clause\n- 1. 2. nested numbers\n"
        )
        blocks = [body for _, body in load_bytes(text.encode(), "lease.md").iter_blocks()]
        assert blocks == [
            "Revenue grew in\n2024. After that it fell.\n\n"
            "12. The tenant shall pay rent.\n3) Notice is given in writing.\n\n"
            "7. quoted clause\n2. nested numbers"
        ]

    def test_code_blocks_are_never_rewritten(self):
        """(was: "    > out.txt" lost its ">", a quoted fence lost its "- ") Indented code
        and fenced code inside a quote keep every character but the quote's own markers."""
        text = (
            "Run it:\n\n    cat in.txt > out.txt\n    > out.txt\n    - not a bullet\n\n"
            "> ```python\n> - x\n> > y\n> ```\n> - quoted item\n\n"
            "> ```\n> unclosed\n\n- after the quote\n\n## Heading\n\nBody.\n"
        )
        [(_, body), heading] = load_bytes(text.encode(), "code.md").iter_blocks()
        assert "    > out.txt\n    - not a bullet" in body
        assert "```python\n- x\n> y\n```\nquoted item" in body
        assert body.endswith("```\nunclosed\n\nafter the quote")  # the quote closed the fence
        assert heading == (("Heading",), "Body.")
        [(_, code)] = load_bytes(b"# Run\n    > out.txt\n", "h.md").iter_blocks()
        assert code == "> out.txt"  # code right after a heading keeps its ">"

    def test_markers_nested_100_000_deep_cost_linear_time(self):
        started = time.perf_counter()
        doc = load_bytes(("> " * 50_000 + "- " * 50_000 + "text").encode(), "deep.md")
        assert [body for _, body in doc.iter_blocks()] == ["text"]
        assert time.perf_counter() - started < 5  # quadratic: minutes


class TestHtml:
    def test_sections_and_chrome_dropped(self):
        doc = load_bytes(HTML, "page.html")
        assert doc.title == "Main"
        text = " ".join(t for _, t in doc.iter_blocks())
        assert "menu" not in text and "copyright" not in text and "var x" not in text
        chains = {chain for chain, _ in doc.iter_blocks()}
        assert ("Part A", "Deeper") in chains and ("Part B",) in chains
        assert (("Part A",), "Alpha text.\n\nitem one") in list(doc.iter_blocks())


class TestJats:
    def test_plos_article(self, plos_dir):
        doc = load_file(plos_dir / "journal.pcbi.1004082.xml")
        assert doc.id == "10.1371/journal.pcbi.1004082"
        assert doc.metadata["doi"] == doc.id and doc.metadata["journal"]
        titles = [s.title for s in doc.sections or []]
        assert titles[:5] == ["Abstract", "Author Summary", "Introduction", "Results", "Discussion"]
        body = " ".join(t for _, t in doc.iter_blocks())
        assert "Fig 1." in body or "Fig. 1" in body  # figure captions kept
        assert "doi:" not in body.lower()[-5000:]  # reference list dropped

    def test_nested_sections(self, plos_dir):
        doc = load_file(plos_dir / "journal.pcbi.1004082.xml")
        depth = max(len(chain) for chain, _ in doc.iter_blocks())
        assert depth >= 2

    def test_all_plos_articles_load(self, plos_dir):
        files = sorted(plos_dir.glob("*.xml"))
        assert len(files) == 122
        docs = [load_file(f) for f in files]
        assert len({d.id for d in docs}) == 122
        assert all(d.title for d in docs)

    def test_malformed_xml(self):
        with pytest.raises(MalformedDocumentError, match="malformed XML"):
            load_bytes(b'<?xml version="1.0"?><article><front>', "broken.xml")

    def test_not_jats(self):
        with pytest.raises(MalformedDocumentError, match="not a JATS"):
            load_bytes(b'<?xml version="1.0"?><svg></svg>', "pic.xml", fmt="jats")


class TestPdf:
    def test_text_layer(self):
        doc = load_bytes(minimal_pdf("Hybrid retrieval works."), "paper.pdf")
        assert doc.sections and doc.sections[0].title == "Page 1"
        assert "Hybrid retrieval works." in doc.sections[0].text

    def test_garbage_pdf(self):
        with pytest.raises(MalformedDocumentError, match="PDF"):
            load_bytes(b"%PDF-1.4\nthis is not a pdf", "bad.pdf")


def test_size_limits(tmp_path: Path):
    path = tmp_path / "big.txt"
    path.write_text("word " * 1000)
    with pytest.raises(PayloadTooLargeError, match="max_document_chars"):
        load_file(path, max_chars=100)
    with pytest.raises(PayloadTooLargeError, match="max_file_bytes"):
        load_file(path, max_bytes=100)
