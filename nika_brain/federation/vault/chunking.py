"""Reading files into chunks, on their structure: Markdown headings, then paragraphs, then sentences.

Text and Markdown files are read as UTF-8; PDF files through pypdf, page by page. Each chunk keeps
the heading it sits under (so a chunk read alone still says what it is about) and its source
(`path#n`, `path#p<page>` for PDFs). Bad files raise one BrainError naming the file: empty, binary,
not UTF-8, too large, or a PDF pypdf cannot read.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from nika_brain.errors import BrainError, MissingExtra
from nika_brain.federation.vault.write import Chunk

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text")
PDF_SUFFIXES = (".pdf",)
SUFFIXES = TEXT_SUFFIXES + PDF_SUFFIXES
_HEADING = re.compile(r"^(#{1,6})\s+\S")
_SENTENCE = re.compile(r"(?<=[.!?…])\s+")
# The heading each chunk repeats is at most this long: a longer one (a 100 KB "heading") is text,
# chunked once like a paragraph of its own, and its start names the section in the chunks that follow.
MAX_HEADING = 100


def discover(paths: list[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files to read (folders walked, sorted; only known suffixes inside folders) and the paths that
    do not exist."""
    files: list[Path] = []
    missing: list[tuple[str, str]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in SUFFIXES
                            and not any(part.startswith(".") for part in f.relative_to(p).parts))
        elif p.is_file():
            files.append(p)
        else:
            missing.append((raw, "no such file or folder"))
    return list(dict.fromkeys(files)), missing


def read_chunks(path: Path, *, chunk_chars: int, max_bytes: int) -> list[Chunk]:
    size = path.stat().st_size
    if size == 0:
        raise BrainError("empty file, nothing to ingest", file=str(path))
    if size > max_bytes:
        raise BrainError(f"file too large ({size / 1e6:.1f} MB, the limit is {max_bytes / 1e6:g} MB: "
                         "federation.vault.max_file_mb)", file=str(path))
    if path.suffix.lower() in PDF_SUFFIXES:
        return _pdf_chunks(path, chunk_chars)
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise BrainError("binary file, not text, Markdown or PDF", file=str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BrainError(f"not valid UTF-8 (byte {exc.start})", file=str(path)) from exc
    chunks = [Chunk(t, f"{path}#{i}", i) for i, t in enumerate(chunk_text(text, chunk_chars))]
    if not chunks:
        raise BrainError("no text in the file (only blanks)", file=str(path))
    return chunks


def _pdf_chunks(path: Path, chunk_chars: int) -> list[Chunk]:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError as exc:  # pragma: no cover - pypdf is a federation dependency
        raise MissingExtra.federation("pypdf") from exc
    import logging
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings would print per page
    out: list[Chunk] = []
    try:
        reader = PdfReader(str(path), strict=False)
        if reader.is_encrypted:
            raise BrainError("encrypted PDF, cannot read it", file=str(path))
        for pno, page in enumerate(reader.pages, 1):
            for t in chunk_text(page.extract_text() or "", chunk_chars):
                out.append(Chunk(t, f"{path}#p{pno}", len(out)))
    except BrainError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, RecursionError, AttributeError) as exc:
        raise BrainError(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:120]})",
                         file=str(path)) from exc
    if not out:
        raise BrainError("the PDF has no extractable text (scanned images?)", file=str(path))
    return out


# Characters e5's tokenizer reads as about 0.6 token each (CJK ideographs, kana, hangul, full-width
# forms), against 0.25-0.3 for Latin text: a chunk of them holds fewer characters, or what lies past
# the model's 512 tokens (the embedder cuts there) would be in no vector (1,200 Chinese characters
# are ~760 tokens). Each counts WIDE_WEIGHT characters in a chunk's size.
_WIDE = re.compile(r"[\u1100-\u11ff\u2e80-\ua4cf\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")
WIDE_WEIGHT = 2.5


def _width(text: str) -> int:
    return len(text) + int((WIDE_WEIGHT - 1) * len(_WIDE.findall(text)))


def chunk_text(text: str, chunk_chars: int) -> list[str]:
    out: list[str] = []
    for c in _pack(_sections(text), chunk_chars):
        if not c.strip():
            continue
        width = _width(c)
        if width <= chunk_chars:
            out.append(c)
        else:   # wide characters: the same chunk again, cut to hold chunk_chars in width
            out += [p for p in _pack(_sections(c), max(50, chunk_chars * len(c) // width)) if p.strip()]
    return out


def _sections(text: str) -> Iterator[tuple[str, list[str]]]:
    """(heading, paragraphs) for each Markdown section; text before any heading has heading ""."""
    heading, paras, cur = "", [], []  # type: ignore[var-annotated]
    for line in text.replace("\r\n", "\n").split("\n"):
        if _HEADING.match(line):
            if cur:
                paras.append("\n".join(cur))
                cur = []
            if paras:
                yield heading, paras
            heading, paras = line.strip(), []
            if len(heading) > MAX_HEADING:
                # its text is its own section, not prefixed with its own start (each of its chunks
                # would pay that prefix's tokens in the embedder for nothing); its paragraphs follow
                # under that start
                yield "", [heading]
                heading = heading[:MAX_HEADING].rsplit(" ", 1)[0] + " …"
        elif not line.strip():
            if cur:
                paras.append("\n".join(cur))
                cur = []
        else:
            cur.append(line.rstrip())
    if cur:
        paras.append("\n".join(cur))
    if paras:
        yield heading, paras


def _pieces(para: str, limit: int) -> Iterator[str]:
    if len(para) <= limit:
        yield para
        return
    buf = ""
    for sent in _SENTENCE.split(para):
        while len(sent) > limit:  # a sentence longer than a chunk: cut at its last blank in the
            if buf:               # chunk's second half (a word is not split), else hard
                yield buf
                buf = ""
            cut = sent.rfind(" ", limit // 2, limit + 1)
            if cut <= 0:
                yield sent[:limit]
                sent = sent[limit:]
            else:
                yield sent[:cut]
                sent = sent[cut + 1:]
        if buf and len(buf) + 1 + len(sent) > limit:
            yield buf
            buf = sent
        else:
            buf = f"{buf} {sent}" if buf else sent
    if buf:
        yield buf


def _pack(sections: Iterator[tuple[str, list[str]]], limit: int) -> Iterator[str]:
    for heading, paras in sections:
        room = max(limit - len(heading) - 1, limit // 2)
        buf: list[str] = []
        size = 0
        for para in paras:
            for piece in _pieces(para, room):
                if buf and size + len(piece) + 2 > room:
                    yield _with_heading(heading, buf)
                    buf, size = [], 0
                buf.append(piece)
                size += len(piece) + 2
        if buf:
            yield _with_heading(heading, buf)


def _with_heading(heading: str, paras: list[str]) -> str:
    body = "\n\n".join(paras)
    return f"{heading}\n{body}" if heading else body
