"""Ingest: chunking on structure, text/Markdown/PDF, a resumed ingest without duplicates (in process
and after a kill -9), and bad input files each refused in one line while the rest goes in."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from nika_brain.errors import BrainError
from nika_brain.federation.vault import admin, chroma, chunking, ingest, query
from nika_brain.federation.vault.chunking import chunk_text
from tests.federation.vaultkit import prose, vault_brain, write_pdf


@pytest.fixture(autouse=True)
def _no_session(monkeypatch):
    monkeypatch.delenv("NIKA_KERNEL_ID", raising=False)


def test_markdown_is_chunked_on_headings_and_paragraphs():
    md = "# Ops\n\nIntro para.\n\n## Backups\n\n" + "\n\n".join(
        f"Paragraph {i} " + "word " * 40 for i in range(6)) + "\n\n## Restore\n\nMount and copy.\n"
    chunks = chunk_text(md, 500)
    assert chunks[0] == "# Ops\nIntro para."
    backups = [c for c in chunks if c.startswith("## Backups\n")]
    assert len(backups) >= 2 and all(len(c) <= 500 for c in backups)  # split, heading repeated
    assert chunks[-1] == "## Restore\nMount and copy."
    # a paragraph longer than a chunk is cut on sentences, never lost
    long = " ".join(f"Sentence {i} is here." for i in range(200))
    pieces = chunk_text(long, 300)
    assert all(len(p) <= 300 for p in pieces)
    assert " ".join(pieces).split() == long.split()


def test_a_huge_heading_is_text_chunked_once_not_repeated_in_every_chunk():
    heading = "# " + " ".join(f"term{i}" for i in range(15_000))   # ~100 KB on one heading line
    md = heading + "\n\n" + "\n\n".join(f"Paragraph {i} is about topic {i}." for i in range(60)) + "\n"
    chunks = chunk_text(md, 1200)
    assert all(len(c) <= 1200 + chunking.MAX_HEADING + 4 for c in chunks)
    words = " ".join(chunks).split()
    assert all(words.count(f"term{i}") >= 1 for i in (0, 7_000, 14_999))   # the heading's text is kept
    assert sum(c.count("term14999") for c in chunks) == 1                   # once, not in every chunk
    assert all(f"Paragraph {i} is about" in " ".join(chunks) for i in range(60))


def test_a_chunk_of_chinese_or_korean_fits_the_models_window_and_keeps_every_character():
    """The embedder cuts a chunk at the model's 512 tokens: 1,200 Chinese characters (~760 tokens)
    would leave a third of each chunk in no vector. Wide characters count more in a chunk's size, so
    each chunk fits the window, and no character is lost; Latin text is chunked as before."""
    from nika_brain.federation.embedding import MAX_TOKENS, E5Embedder
    emb = E5Embedder()
    zh = "服务器的备份每天凌晨两点运行，失败时请检查日志并通知值班工程师。" * 60
    ko = "백업은 매일 새벽 두 시에 실행되며 실패하면 로그를 확인하고 당직 엔지니어에게 알립니다. " * 40
    for text in (zh, "# 运维手册\n\n" + zh, ko, "Intro in English. " * 10 + zh):
        chunks = chunk_text(text, 1200)
        assert len(chunks) >= 2
        assert all(emb.token_count(c, kind="passage") <= MAX_TOKENS for c in chunks)
        body = "".join("".join(c.split("\n", 1)[1:] or [c]) if c.startswith("# ") else c for c in chunks)
        assert "".join(body.split()) == "".join(text.replace("# 运维手册", "").split())
    latin = "\n\n".join(prose(i) for i in range(12))
    assert chunk_text(latin, 1200) == list(chunking._pack(chunking._sections(latin), 1200))


def _corpus(folder, n_files=4, per_file=3):
    folder.mkdir(parents=True, exist_ok=True)
    seed = 0
    for f in range(n_files):
        paras = []
        for _ in range(per_file):
            paras.append(prose(seed))
            seed += 1
        (folder / f"note-{f:02d}.md").write_text(f"# File {f}\n\n" + "\n\n".join(paras) + "\n")
    return folder


def _texts(brain, kernel):
    ids, _ = query.records(brain, kernel)
    return sorted(r.text for r in query.get(brain, ids, kernel=kernel))


def test_interrupted_ingest_resumes_without_duplicates(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b", extra="federation:\n  vault:\n    batch: 3\n    chunk_chars: 300\n")
    docs = _corpus(tmp_path / "docs")
    full = ingest.ingest(vb, [str(docs)], "gamma")      # the uninterrupted reference
    assert full.chunks >= 8 and full.added + full.dropped == full.chunks

    def stop_after_two_batches(done, total):
        if done >= 6:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        ingest.ingest(vb, [str(docs)], "alpha", progress=stop_after_two_batches)
    partial = len(query.records(vb, "alpha")[0])
    assert 0 < partial < full.added
    again = ingest.ingest(vb, [str(docs)], "alpha")
    assert again.already == partial
    texts = _texts(vb, "alpha")
    assert len(texts) == len(set(texts)) == full.added
    assert texts == _texts(vb, "gamma")
    assert ingest.ingest(vb, [str(docs)], "alpha").added == 0   # a third run adds nothing


KILLED = textwrap.dedent("""
    import sys
    from nika_brain.brain import Brain
    from nika_brain.federation.vault.ingest import ingest
    def progress(done, total):
        print(done, flush=True)
    ingest(Brain.at(sys.argv[1]), [sys.argv[2]], "beta", progress=progress)
""")


def test_ingest_killed_with_sigkill_resumes_without_duplicates(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b", extra="federation:\n  vault:\n    batch: 3\n    chunk_chars: 300\n")
    docs = _corpus(tmp_path / "docs")
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(vb.root), str(docs)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    lines = []
    while len(lines) < 3:  # 0, then two batches written
        line = proc.stdout.readline()
        assert line, "the ingest process ended before it was killed"
        lines.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    chroma.reset_cache()
    partial = len(query.records(vb, "beta")[0])
    assert partial >= 3
    again = ingest.ingest(vb, [str(docs)], "beta")
    assert again.already >= partial
    texts = _texts(vb, "beta")
    assert len(texts) == len(set(texts)) == partial + again.added


def _notes(folder, n):
    folder.mkdir(parents=True, exist_ok=True)
    notes = [f"Note {i}: server {i * 7919 % 1000003} restarted on day {i % 31}." for i in range(n)]
    for i, note in enumerate(notes):
        (folder / f"n{i:05d}.md").write_text(note + "\n")
    return notes


def test_batched_ingest_keeps_every_record_once_and_dedups_alike_in_any_batch_size(tmp_path, git_env):
    """The real model; templated but distinct one-line notes, plus a copy of one note (already there)
    and a reformatted one (says the same thing: dropped). Batches of 5 (the twins in other batches
    than their originals: the store's query decides) and one batch (in-batch dedup decides) must give
    the same records, each note exactly once."""
    vb = vault_brain(tmp_path / "b", kernels=("alpha", "beta"))
    docs = tmp_path / "docs"
    notes = _notes(docs, 40)
    (docs / "z-copy.md").write_text(notes[10] + "\n")
    (docs / "z-near.md").write_text("note 25 - Server " + notes[25].split("server ")[1].upper() + "\n")
    for kernel, batch in (("alpha", 5), ("beta", 4096)):
        (vb.root / "nika-brain.yml").write_text(
            f"version: 1\nlock_poll: 0.01\nfederation:\n  vault:\n    batch: {batch}\n")
        rep = ingest.ingest(vb.__class__.at(vb.root), [str(docs)], kernel)
        assert (rep.files, rep.chunks, rep.added, rep.already, rep.dropped) == (42, 42, 40, 1, 1), \
            (kernel, rep.to_json())
        texts = _texts(vb, kernel)
        assert texts == sorted(notes), kernel     # none lost, none twice, the twins not added
    assert _texts(vb, "alpha") == _texts(vb, "beta")


def test_a_100_kb_heading_file_ingested_keeps_its_text_and_its_60_paragraphs(tmp_path, git_env, monkeypatch):
    """The whole ingest path (chunks, batches, dedup at write) on the bench's 100 KB heading file,
    every chunk given the very same vector (dedup then rests on what the texts say): nothing is
    dropped, each of the 60 paragraphs is stored once, the heading's text is all there, each word
    whole, and its start is not repeated in the chunks of the heading itself."""
    import numpy as np

    from nika_brain.federation.vault import store
    from tests.federation.vaultkit import axis
    embedded: list[str] = []

    def one_vector(brain, texts, kind):
        embedded.extend(texts)
        return np.stack([axis(0)] * len(texts))
    monkeypatch.setattr(store, "embed", one_vector)
    vb = vault_brain(tmp_path / "b", extra="federation:\n  vault:\n    batch: 16\n")
    heading = "# " + " ".join(f"term{i}" for i in range(15_000))
    paras = [f"Paragraph {i} is about topic {i}." for i in range(60)]
    doc = tmp_path / "heading.md"
    doc.write_text(heading + "\n\n" + "\n\n".join(paras) + "\n")
    rep = ingest.ingest(vb, [str(doc)], "alpha")
    assert rep.dropped == 0 and rep.added == rep.chunks == len(embedded), rep.to_json()
    texts = _texts(vb, "alpha")
    assert sorted(embedded) == texts                      # each chunk embedded once
    body = "\n".join(texts)
    for p in paras:
        assert body.count(p) == 1, p
    start = heading[:chunking.MAX_HEADING].rsplit(" ", 1)[0] + " …"
    under = [t for t in texts if t.startswith(start + "\n")]
    assert under and all("Paragraph" in t for t in under)  # its start names the paragraphs' chunks only
    words = Counter(body.split())
    named = set(start.split())
    bad = [i for i in range(15_000) if words[f"term{i}"] != 1 + len(under) * (f"term{i}" in named)]
    assert not bad, f"heading words lost, cut or repeated: term{bad[0]} ({len(bad)} of them)"
    assert sum(len(t) for t in texts) < len(doc.read_text()) + 2 * chunking.MAX_HEADING


def test_text_markdown_and_pdf_are_read(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("The backup server runs restic every night at two.\n")
    write_pdf(docs / "b.pdf", ["Le capteur de température du hangar est tombé en panne.",
                               "The tender for the city network closes on Friday."])
    (docs / "ignored.bin").write_bytes(b"\0\1\2")     # unknown suffix inside a folder: not read
    rep = ingest.ingest(vb, [str(docs)], "alpha")
    assert (rep.files, rep.chunks, rep.errors) == (2, 3, [])
    top = query.search(vb, "when does the tender close?", kernel="alpha", k=1)[0]
    assert "tender" in top.text and top.source.endswith("b.pdf#p2")


def test_bad_files_each_one_line_and_the_rest_ingested(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nThe mail relay was upgraded after the DNS outage.\n")
    (docs / "empty.txt").write_text("")
    (docs / "binary.txt").write_bytes(b"\x7fELF\0\0\0binary" * 100)
    (docs / "corrupt.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >>\ngarbage")
    (docs / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    with open(docs / "huge.txt", "w") as fh:      # 50 MB of text, over the 20 MB default limit
        line = "x" * 99 + "\n"
        fh.write(line * 500_000)
    write_pdf(docs / "fine.pdf", ["The GPU node lost its certificate during the audit."])
    env = dict(os.environ, NIKA_BRAIN_DIR=str(vb.root))
    proc = subprocess.run([sys.executable, "-m", "nika_brain", "rag", "ingest", str(docs), "--kernel",
                           "alpha", "--json"], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("nika-brain: ")]
    assert "Traceback" not in proc.stderr
    by_file = {os.path.basename(ln.split(": ")[1]): ln for ln in errors}
    assert set(by_file) == {"empty.txt", "binary.txt", "corrupt.pdf", "latin1.txt", "huge.txt"}
    assert len(errors) == 5
    assert "empty file" in by_file["empty.txt"]
    assert "binary" in by_file["binary.txt"]
    assert "PDF" in by_file["corrupt.pdf"]
    assert "UTF-8" in by_file["latin1.txt"]
    assert "too large" in by_file["huge.txt"]
    chroma.reset_cache()
    texts = _texts(vb, "alpha")
    assert len(texts) == 2 and any("mail relay" in t for t in texts) and any("GPU" in t for t in texts)


def test_unknown_level_or_parent_refused_before_anything_is_written(tmp_path, git_env):
    vb = vault_brain(tmp_path / "b")
    f = tmp_path / "a.md"
    f.write_text("Some text.\n")
    with pytest.raises(BrainError, match="unknown level"):
        ingest.ingest(vb, [str(f)], "alpha", level="epic")
    with pytest.raises(BrainError, match="no such parent"):
        ingest.ingest(vb, [str(f)], "alpha", level="task", parent="alpha:nope")
    with pytest.raises(BrainError, match="not a record of kernel alpha"):
        ingest.ingest(vb, [str(f)], "alpha", level="task", parent="beta:nope")
    assert admin.stats(vb)["records"] == 0
