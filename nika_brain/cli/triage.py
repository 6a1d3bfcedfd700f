"""`nika-brain triage`: route a prompt, recalibrate the goals index, run the benchmark contract.

    nika-brain triage "<prompt>" [--json] [--kernel-context ID] [--data-class NAME]
    nika-brain triage calibrate [--labelled CAL.jsonl] [--json]
    nika-brain triage bench --routes ROUTES.yml --queries QUERIES.jsonl [--calibration CAL.jsonl] --json
    nika-brain triage correct <ask-id> | --prompt "<prompt>"  --kernel ID | --none
    nika-brain triage corrections [--json]
"""
from __future__ import annotations

import json
from pathlib import Path

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app
from nika_brain.errors import Invalid


def _print_decision(d) -> None:
    print(f"{d.decision}: {', '.join(d.kernels)}")
    print(f"  reason: {d.reason}")
    if d.data_class:
        print(f"  data class: {d.data_class}")
    for p in d.parts:
        print(f"  part -> {p.kernel} ({p.score:.2f} >= {p.threshold:.2f}): {p.clause or p.text}")
    if d.context:
        print(f"  typed in {d.context}: " + ("WRONG KERNEL, it belongs to " + ", ".join(d.kernels)
                                              if d.wrong_kernel else "fine"))
    for s in d.scores:
        mark = "" if s.allowed else f"   not allowed: {s.why_not}"
        if s.passes and s.everyday_like:
            mark += f"   nearer to everyday requests ({s.everyday:.2f}) than to its texts ({s.near:.2f})"
        print(f"  {s.kernel:<32} {s.score:7.2f}  threshold {s.threshold:.2f}"
              f"{'  passes' if s.passes else ''}{mark}")


@app.command("triage", context_settings={"help_option_names": ["-h", "--help"]})
def triage_cmd(
    words: list[str] = typer.Argument(None, help='"<prompt>", or: calibrate | bench'),
    as_json: bool = typer.Option(False, "--json", help="one JSON object"),
    kernel_context: str = typer.Option(None, "--kernel-context", help="the kernel the prompt was typed in"),
    data_class: str = typer.Option(None, "--data-class", help="state the prompt's data class"),
    routes: Path = typer.Option(None, "--routes", help="bench: ROUTES.yml"),
    queries: Path = typer.Option(None, "--queries", help="bench: QUERIES.jsonl"),
    calibration: Path = typer.Option(None, "--calibration", help="bench: labelled CAL.jsonl"),
    labelled: Path = typer.Option(None, "--labelled", help="calibrate: labelled JSONL refining thresholds"),
    kernel: str = typer.Option(None, "--kernel", help="correct: the kernel the prompt belongs to"),
    none: bool = typer.Option(False, "--none", help="correct: the prompt belongs to no kernel"),
    prompt: str = typer.Option(None, "--prompt", help="correct: the prompt itself (instead of an ask id)"),
):
    """Route a prompt to a kernel (scores, thresholds and the reason), or calibrate / bench."""
    words = words or []
    if words[:1] == ["correct"]:
        _correct(words[1:], kernel, none, prompt, as_json)
        return
    if words == ["corrections"]:
        _corrections(as_json)
        return
    if words[:1] == ["bench"] and len(words) == 1:
        from nika_brain.federation.triage import bench
        if routes is None or queries is None:
            raise Invalid("triage bench needs --routes ROUTES.yml and --queries QUERIES.jsonl")
        out = bench.run(routes, queries, calibration)
        if as_json:
            print(json.dumps(out, ensure_ascii=False))
        else:
            for k in ("in_scope_accuracy", "oos_recall", "oos_precision", "split_accuracy",
                      "p50_ms", "p95_ms", "n"):
                print(f"{k}: {out[k]}")
        return
    if words[:1] == ["calibrate"] and len(words) == 1:
        from nika_brain.federation.triage import goals
        index = goals.refresh(Brain.find(), force=True, labelled=labelled)
        rep = index.report
        if as_json:
            print(json.dumps({"digest": index.digest, "model_id": index.model_id, **rep}, ensure_ascii=False))
            return
        print(f"goals index: {len(index.entries)} kernels, model {index.model_id}, calibrated against "
              f"{rep.get('background', 0)} everyday requests, {rep.get('corrections', 0)} corrections"
              + (f", refined by {rep['labelled']} labelled prompts" if rep.get("labelled") else ""))
        for kid, r in rep.get("kernels", {}).items():
            print(f"  {kid:<32} threshold {r['threshold']:.2f}  examples {r['examples']}"
                  + ("  (self-calibrated)" if r["self_calibrated"] else "")
                  + (f"  vocabulary: {'; '.join(r['vocabulary'])}" if r.get("vocabulary") else ""))
        return
    if not words:
        raise Invalid('triage needs a prompt: nika-brain triage "<prompt>"')
    from nika_brain.federation.triage.decide import triage
    d = triage(Brain.find(), " ".join(words), context=kernel_context, data_class=data_class)
    if as_json:
        print(json.dumps(d.as_dict(), ensure_ascii=False))
    else:
        _print_decision(d)


def _correct(args: list[str], kernel: str | None, none: bool, prompt: str | None, as_json: bool) -> None:
    from nika_brain.federation.triage import corrections
    if (kernel is None) == (not none):
        raise Invalid("triage correct needs exactly one of --kernel ID or --none")
    if (prompt is None) == (len(args) != 1) or len(args) > 1:
        raise Invalid('triage correct needs an ask id or --prompt "..." (one of them)')
    brain = Brain.find()
    if kernel is not None:
        corrections.check_kernel(brain, kernel)
    ask = args[0] if args else None
    if prompt is None:
        from nika_brain.federation.asking import record
        text = record.load_ask(brain, ask or "")["prompt"]   # `nika-brain ask` recorded it
    else:
        text = prompt
    c = corrections.record(brain, text, kernel, ask=ask)
    if as_json:
        print(json.dumps({"id": c.id, "prompt": c.prompt, "kernel": c.kernel, "ask": c.ask, "at": c.at},
                         ensure_ascii=False))
    else:
        print(f"recorded {corrections.FOLDER}/{c.id}.yml: {c.kernel or 'no kernel (generalist)'}"
              " (the goals index takes it in on the next triage)")


def _corrections(as_json: bool) -> None:
    from nika_brain.federation.triage import corrections
    items = corrections.load_all(Brain.find())
    if as_json:
        print(json.dumps([{"id": c.id, "prompt": c.prompt, "kernel": c.kernel, "ask": c.ask, "at": c.at}
                          for c in items], ensure_ascii=False))
        return
    if not items:
        print("no triage corrections")
    for c in items:
        print(f"{c.id}  {c.at}  {c.kernel or '(none)':<32} {c.prompt}")
