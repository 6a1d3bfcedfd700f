"""The answer a kernel's Stop hook records is its turn's own, never the previous turn's (a race the
real CLI showed under load: Stop fired before the new answer reached the transcript)."""
from __future__ import annotations

import json
import threading
import time

from nika_brain.federation.kernels.health import _answer_in, _last_answer


def _line(kind: str, content) -> bytes:
    return json.dumps({"type": kind, "message": {"role": kind, "content": content}}).encode()


PREVIOUS = [_line("user", "first question"), _line("assistant", [{"type": "text", "text": "old answer"}])]


def test_the_new_prompt_without_its_answer_is_not_answered_by_the_old_one():
    assert _answer_in(PREVIOUS + [_line("user", "second question")]) == (False, None)


def test_the_turns_own_text_after_its_tools_is_the_answer():
    lines = PREVIOUS + [_line("user", "second question"),
                        _line("assistant", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]),
                        _line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
                        _line("assistant", [{"type": "text", "text": "new answer"}])]
    assert _answer_in(lines) == (True, "new answer")


def test_a_turn_that_answered_with_tools_only_is_found_without_text():
    lines = PREVIOUS + [_line("user", "second question"),
                        _line("assistant", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}])]
    assert _answer_in(lines) == (True, None)


def test_the_stop_hook_waits_for_the_answer_being_written(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(PREVIOUS + [_line("user", "second question")]) + b"\n")

    def late_write() -> None:
        time.sleep(0.3)
        with open(path, "ab") as fh:
            fh.write(_line("assistant", [{"type": "text", "text": "new answer"}]) + b"\n")

    writer = threading.Thread(target=late_write)
    writer.start()
    try:
        assert _last_answer(str(path), wait=30.0) == "new answer"
    finally:
        writer.join()
