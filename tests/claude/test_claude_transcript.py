"""Context use from real-shaped Claude Code transcripts (transcript.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nika_brain.claude import transcript

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "claude" / "transcript.jsonl"


def assistant(mid: str | None, *, inp: int = 0, create: int = 0, read: int = 0, out: int = 10,
              model: str = "claude-sonnet-4-5-20250929", **extra) -> str:
    msg = {"role": "assistant", "model": model, "content": [{"type": "text", "text": "ok"}],
           "usage": {"input_tokens": inp, "cache_creation_input_tokens": create,
                     "cache_read_input_tokens": read, "output_tokens": out}}
    if mid is not None:
        msg["id"] = mid
    return json.dumps({"type": "assistant", "isSidechain": False, "message": msg, **extra})


def user(text: str = "hi") -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}})


def write(tmp_path: Path, lines: list[str], tail: str = "") -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n" + tail)
    return p


def test_recorded_transcript_fixture():
    usage = transcript.last_usage(FIXTURE)
    # msg_02BBB: 4 + 1,200 + 45,000; the sidechain, usage-less, synthetic and cut lines after it are skipped.
    assert (usage.used, usage.window, usage.pct, usage.message_id) == (46204, 200_000, 23.1, "msg_02BBB")
    totals = transcript.scan(FIXTURE)
    assert totals.responses == 2            # msg_01AAA is on 3 lines, msg_02BBB on 2
    assert totals.output_tokens == 410 + 95  # each response counted once
    assert totals.last == usage


def test_duplicates_by_message_id_count_once_and_the_last_line_wins(tmp_path):
    p = write(tmp_path, [user(), assistant("m1", inp=10, read=1000, out=5),
                         assistant("m1", inp=10, read=1000, out=5),
                         assistant("m1", inp=10, read=1000, out=40), user(),
                         assistant("m2", inp=3, create=500, read=2000, out=7),
                         assistant("m2", inp=3, create=500, read=2000, out=9)])
    totals = transcript.scan(p)
    assert totals.responses == 2
    assert totals.output_tokens == 40 + 9
    assert transcript.last_usage(p).used == 3 + 500 + 2000


def test_synthetic_rows_and_missing_usage_are_skipped(tmp_path):
    no_usage = json.dumps({"type": "assistant", "message": {"id": "m3", "role": "assistant", "content": []}})
    api_error = assistant("m4", inp=99_999, isApiErrorMessage=True)
    p = write(tmp_path, [assistant("m1", inp=1, read=30_000), assistant("m2", model="<synthetic>"),
                         no_usage, api_error, assistant("m5")])  # all-zero usage: a placeholder
    usage = transcript.last_usage(p)
    assert usage.used == 30_001 and usage.message_id == "m1"
    assert transcript.scan(p).responses == 1


def test_sidechain_uses_its_own_window(tmp_path):
    side = assistant("s1", inp=150_000, isSidechain=True).replace('"isSidechain": false, ', "")
    p = write(tmp_path, [assistant("m1", read=10_000), side])
    assert transcript.last_usage(p).used == 10_000


def test_truncated_last_line_is_ignored(tmp_path):
    p = write(tmp_path, [assistant("m1", read=8_000)], tail=assistant("m2", read=190_000)[:60])
    assert transcript.last_usage(p).used == 8_000


@pytest.mark.parametrize("lines", [[], [user(), user("again")], ["{not json", "[1,2]", "null"]])
def test_no_usable_response_gives_none(tmp_path, lines):
    p = write(tmp_path, lines)
    assert transcript.last_usage(p) is None
    assert transcript.scan(p) == transcript.Totals(0, 0, None)


def test_missing_or_unnamed_file_gives_none(tmp_path):
    assert transcript.last_usage(None) is None
    assert transcript.last_usage("") is None
    assert transcript.last_usage(tmp_path / "nope.jsonl") is None
    assert transcript.last_usage(tmp_path) is None  # a folder
    assert transcript.scan(tmp_path / "nope.jsonl").responses == 0


def test_window_size(tmp_path, monkeypatch):
    monkeypatch.delenv("NIKA_CONTEXT_WINDOW", raising=False)
    p = write(tmp_path, [assistant("m1", read=100_000, model="claude-sonnet-4-5[1m]")])
    assert transcript.last_usage(p).window == 1_000_000 and transcript.last_usage(p).pct == 10.0
    p = write(tmp_path, [assistant("m1", read=300_000)])  # more than 200k proves an extended window
    assert transcript.last_usage(p).pct == 30.0
    p = write(tmp_path, [assistant("m1", read=100_000)])
    assert transcript.last_usage(p).pct == 50.0
    assert transcript.last_usage(p, window=400_000).pct == 25.0
    monkeypatch.setenv("NIKA_CONTEXT_WINDOW", "500000")
    assert transcript.last_usage(p).pct == 20.0


def test_large_transcript_read_from_the_end_across_block_boundaries(tmp_path):
    # The last response's line straddles a 64 KiB block boundary and is followed by 200 KiB of
    # tool output: the backwards reader must reassemble it.
    filler = [user("x" * 1000) for _ in range(300)]
    big = assistant("last", read=77_000, out=1)
    big = big.replace('"text": "ok"', '"text": "' + "z" * 100_000 + '"')
    p = write(tmp_path, [assistant("first", read=5)] + filler + [big] + filler)
    assert transcript.last_usage(p).used == 77_000
    assert transcript.scan(p).responses == 2


def test_answered_says_whether_the_newest_prompt_has_its_response_in_the_file(tmp_path):
    """What a Stop hook waits for before it reads the context use: Claude Code may write the turn's
    response just after Stop fires, and the usage read before that is the previous turn's."""
    import json as _json

    from nika_brain.claude import transcript as tr
    p = tmp_path / "t.jsonl"

    def line(obj):
        with open(p, "a", encoding="utf-8") as fh:
            fh.write(_json.dumps(obj) + "\n")

    assert tr.answered(str(p)) is False and tr.answered(None) is False   # no file yet
    line({"type": "user", "message": {"role": "user", "content": "first"}})
    line({"type": "assistant", "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "a"}],
                                           "usage": {"input_tokens": 1200, "output_tokens": 1}}})
    assert tr.answered(str(p)) is True
    line({"type": "user", "message": {"role": "user", "content": "second"}})
    line({"type": "system", "subtype": "stop_hook_summary"})
    assert tr.answered(str(p)) is False   # its response is not in the file yet
    line({"type": "assistant", "message": {"id": "m2", "role": "assistant", "content": [{"type": "text", "text": "b"}],
                                           "usage": {"input_tokens": 450000, "output_tokens": 1}}})
    assert tr.answered(str(p)) is True and tr.last_usage(str(p)).used >= 450000
