"""Routing quality and latency of the semantic triage (issue 12).

1. CLINC150 (../shared/data/clinc150, dev split): each of the 10 domains plays one kernel; its
   canonical prompts are the first 20 `train` queries of each of its 15 intents (300 per kernel);
   measured on `val` (3,000 in scope) + `oos_val` (100 out of scope). Thresholds come from the
   canonical prompts alone: no val, no oos_train. In the same run, the plain baseline: max cosine
   to the canonical prompts, one global threshold (calibrated the same way: the miss_rate quantile
   of the leave-one-out max cosine), plus its best threshold *chosen on val* for reference (an upper
   bound no calibration can claim).
   `--prefix query|passage` embeds prompts and examples with e5's `query: ` or `passage: ` prefix.
   `--generalist-examples` gives the generalist kernel the 100 `oos_train` queries as its own
   canonical prompts (reported separately: that uses labelled out-of-scope data).
2. The French set in bench/triage_fr/ (the seed's five kernels + a generalist, with out-of-scope
   and hybrid prompts), through the `triage bench` contract.
3. Latency: warm triage per prompt (embedding included, no cache for prompts), a cold
   `nika-brain triage` process (and whether chromadb was imported), a cold UserPromptSubmit hook
   process with the wrong-kernel check. Medians.

Embeddings of the dataset are cached under --cache (default: $TMPDIR/nika-bench-embeddings), so a
second run takes seconds; accuracy uses cached vectors, latency always embeds afresh.

    python bench/bench_triage.py [--prefix query] [--miss-rate 0.03] [--cache DIR] [--skip-clinc]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLINC = next((p for p in (ROOT.parent / "shared" / "data" / "clinc150" / "clinc150_dev.json",
                          ROOT.parents[1] / "shared" / "data" / "clinc150" / "clinc150_dev.json")
              if p.is_file()), ROOT.parent / "shared" / "data" / "clinc150" / "clinc150_dev.json")
FR = ROOT / "bench" / "triage_fr"


def clinc_routes(data: dict, per_intent: int = 20, generalist_examples: bool = False):
    from nika_brain.federation.triage.goals import Entry
    per: dict[str, list[str]] = defaultdict(list)
    for text, intent in data["train"]:
        if len(per[intent]) < per_intent:
            per[intent].append(text)
    entries = []
    for domain, intents in sorted(data["domains"].items()):
        examples = tuple(t for i in intents for t in per[i])
        entries.append(Entry(domain, domain.replace("_", " "), tuple(i.replace("_", " ") for i in intents),
                             examples))
    entries.append(Entry("generalist", "general requests no domain covers", (),
                         tuple(t for t, _ in data["oos_train"]) if generalist_examples else ()))
    dom = {i: d for d, intents in data["domains"].items() for i in intents}
    queries = [(t, dom[i]) for t, i in data["val"]] + [(t, None) for t, _ in data["oos_val"]]
    return entries, queries


def score(preds, queries):
    ins = [(p, e) for p, e in zip(preds, queries) if e[1] is not None]
    oos = [(p, e) for p, e in zip(preds, queries) if e[1] is None]
    acc = sum(p == e[1] for p, e in ins) / len(ins)
    rec = sum(p is None for p, _ in oos) / len(oos)
    to_def = [e for p, e in zip(preds, queries) if p is None]
    prec = sum(e[1] is None for e in to_def) / len(to_def) if to_def else None
    return acc, rec, prec


def run_clinc(args, emb) -> dict:
    import numpy as np

    from nika_brain.federation.triage import goals, router
    from nika_brain.federation.triage.decide import Triage
    data = json.loads(CLINC.read_text(encoding="utf-8"))
    entries, queries = clinc_routes(data, generalist_examples=args.generalist_examples)
    st = goals.Settings(default="generalist", miss_rate=args.miss_rate, split=True)
    t0 = time.perf_counter()
    index = goals.build(entries, emb, st)
    build_s = time.perf_counter() - t0
    tri = Triage(index, emb, st)  # cached vectors: accuracy does not depend on where they came from
    decisions = [tri.decide(t) for t, _ in queries]
    preds = [d.kernels[0] if d.decision == "kernel" else None for d in decisions]
    splits = sum(d.decision == "split" for d in decisions)
    ours = score(preds, queries)

    # baseline: max cosine to the canonical prompts, raw vectors, one global threshold
    kern = [e.id for e in entries if e.examples]
    texts = [x for e in entries if e.examples for x in e.examples]
    owner = np.array([k for k, e in enumerate(e for e in entries if e.examples) for _ in e.examples])
    canon = emb.embed(texts, kind=goals.EMBED_KIND)
    qv = emb.embed([t for t, _ in queries], kind=goals.EMBED_KIND)
    sims = qv @ canon.T
    best = sims.argmax(axis=1)
    top = sims.max(axis=1)
    self_sims = canon @ canon.T
    np.fill_diagonal(self_sims, -1)
    loo = self_sims.max(axis=1)
    thr = float(np.quantile(loo, args.miss_rate))

    def base_preds(t):
        return [kern[owner[b]] if s >= t and kern[owner[b]] != "generalist" else None
                for b, s in zip(best, top)]
    base = score(base_preds(thr), queries)
    sweep = []
    for t in np.quantile(top, np.linspace(0.0, 0.4, 81)):
        a, r, _ = score(base_preds(t), queries)
        sweep.append((a, r, float(t)))
    best80 = max((s for s in sweep if s[1] >= 0.8), default=None)
    best90 = max((s for s in sweep if s[1] >= 0.9), default=None)
    return {"ours": ours, "splits": splits, "build_s": build_s, "lex_weight": index.model.lex_weight,
            "loo_accuracy": index.report.get("loo_accuracy"), "baseline": base, "baseline_thr": thr,
            "baseline_best_on_val_at_oos80": best80, "baseline_best_on_val_at_oos90": best90,
            "n_in": sum(1 for _, e in queries if e is not None), "n_oos": sum(1 for _, e in queries if e is None),
            "router": {"topk": router.TOPK, "subtopic_size": router.SUBTOPIC_SIZE, "shrink": router.SHRINK,
                       "miss_rate": args.miss_rate, "neg_quantile": router.NEG_QUANTILE}}


def run_french(args, emb) -> dict:
    from nika_brain.federation.triage import bench
    return bench.run(FR / "routes.yml", FR / "queries.jsonl", embedder=emb, miss_rate=args.miss_rate)


def cold_processes(runs: int) -> dict:
    """Cold `nika-brain triage` and UserPromptSubmit processes on a temporary brain of the FR set."""
    from nika_brain.brain import Brain
    from nika_brain.federation.triage import goals
    from nika_brain.federation.triage.bench import read_routes
    from nika_brain.support.yamlsafe import dumps
    out: dict[str, float | bool] = {}
    with tempfile.TemporaryDirectory(prefix="nika-triage-cold-") as tmp:
        root = Path(tmp) / "brain"
        root.mkdir()
        (root / "nika-brain.yml").write_text("version: 1\nfederation:\n  triage: {default: kernel-generalist}\n")
        _, entries = read_routes(FR / "routes.yml")
        for e in entries:
            (root / "kernels" / e.id).mkdir(parents=True)
            (root / "kernels" / e.id / "kernel.yml").write_text(dumps(
                {"id": e.id, "goal": e.goal, "tags": list(e.domains), "examples": list(e.examples)}))
        brain = Brain.at(root)
        goals.refresh(brain, store=False)
        # Bytecode cached, as in an installed tool: the first round writes it (a sandbox may set
        # PYTHONDONTWRITEBYTECODE, which would make every "cold" run compile everything again).
        env = dict(os.environ, PYTHONPATH=str(ROOT), NIKA_BRAIN_DIR=str(root))
        env.pop("NIKA_EMBED_CACHE", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        probe = ("import runpy, sys, time; t=time.perf_counter(); sys.argv=['nika-brain','triage',"
                 "'vérifie les sauvegardes du serveur de fichiers'];\n"
                 "from nika_brain.__main__ import main\ncode=main(sys.argv[1:])\n"
                 "print('CHROMA', 'chromadb' in sys.modules, file=sys.stderr)")
        hook_in = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "bench-1", "cwd": str(root),
                              "prompt": "prépare le rapport mensuel d'avancement pour le client"})
        series: dict[str, list[float]] = {"python -c pass": [], "nika-brain triage": [], "hook UserPromptSubmit": []}
        chroma_seen = False
        hinted = True
        for i in range(runs + 1):  # the first round warms the bytecode cache
            for name, cmd, inp, extra in (
                ("python -c pass", [sys.executable, "-c", "pass"], None, {}),
                ("nika-brain triage", [sys.executable, "-c", probe], None, {}),
                ("hook UserPromptSubmit", [sys.executable, "-m", "nika_brain", "hook", "UserPromptSubmit"],
                 hook_in, {"NIKA_KERNEL_ID": "kernel-alpha-bcub3-it"}),
            ):
                t0 = time.perf_counter()
                r = subprocess.run(cmd, input=inp, env={**env, **extra}, cwd=root, capture_output=True,
                                   text=True, check=False)
                dt = (time.perf_counter() - t0) * 1000
                if r.returncode != 0:
                    raise SystemExit(f"{name} failed: {r.stderr}")
                if name == "nika-brain triage":
                    chroma_seen |= "CHROMA True" in r.stderr
                if name.startswith("hook"):
                    hinted &= "belongs to kernel" in r.stdout
                if i:
                    series[name].append(dt)
        for name, vals in series.items():
            out[name] = round(statistics.median(vals), 1)
        out["chromadb imported by triage"] = chroma_seen
        out["hook gave the hint"] = hinted
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", choices=("query", "passage"), default="query")
    ap.add_argument("--miss-rate", type=float, default=0.03)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "nika-bench-embeddings"))
    ap.add_argument("--generalist-examples", action="store_true")
    ap.add_argument("--skip-clinc", action="store_true")
    ap.add_argument("--runs", type=int, default=5, help="cold process runs")
    ap.add_argument("--latency-prompts", type=int, default=100)
    args = ap.parse_args()

    from nika_brain.federation.embedding import CachedEmbedder, E5Embedder
    from nika_brain.federation.triage import decide as triage
    from nika_brain.federation.triage import goals
    goals.EMBED_KIND = triage.EMBED_KIND = args.prefix
    raw = E5Embedder()
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    emb = CachedEmbedder(raw, Path(args.cache) / f"{raw.model_id.replace('/', '_')}.sqlite")
    print(f"model {raw.model_id}, prefix {args.prefix!r} for prompts and examples, miss_rate {args.miss_rate}")

    if not args.skip_clinc:
        if not CLINC.is_file():
            print(f"CLINC150 not found at {CLINC}; skipped")
        else:
            c = run_clinc(args, emb)
            a, r, p = c["ours"]
            print(f"\nCLINC150 dev ({c['n_in']} in scope, {c['n_oos']} out of scope; 10 kernels x 300 canonical prompts"
                  f"{' + generalist with oos_train' if args.generalist_examples else ''})")
            print(f"  triage      in-scope {a:.1%}  oos recall {r:.1%}  oos precision {p:.1%}  "
                  f"(wrongly split: {c['splits']}; fit {c['build_s']:.1f} s; lexical weight "
                  f"{c['lex_weight']:.3f}; canonical leave-one-out accuracy {c['loo_accuracy']:.1%})")
            a, r, p = c["baseline"]
            print(f"  plain kNN   in-scope {a:.1%}  oos recall {r:.1%}  oos precision {p:.1%}  "
                  f"(max cosine, global threshold {c['baseline_thr']:.3f} from the canonical prompts)")
            for label, key in (("oos>=80%", "baseline_best_on_val_at_oos80"),
                               ("oos>=90%", "baseline_best_on_val_at_oos90")):
                b = c[key]
                if b:
                    print(f"  plain kNN, threshold picked ON VAL for {label}: in-scope {b[0]:.1%}  "
                          f"oos recall {b[1]:.1%}")
            print(f"  floor >= 90 % / >= 80 %: {'met' if c['ours'][0] >= .9 and c['ours'][1] >= .8 else 'NOT met'}; "
                  f"aim >= 92 % / >= 90 %: {'met' if c['ours'][0] >= .92 and c['ours'][1] >= .9 else 'not met'}")

    fr = run_french(args, emb)
    print(f"\nFrench set (bench/triage_fr: {fr['n']} prompts, the seed's five kernels + generalist)")
    print(f"  in-scope {fr['in_scope_accuracy']:.1%}  oos recall {fr['oos_recall']:.1%}  "
          f"oos precision {fr['oos_precision']:.1%}  split accuracy {fr['split_accuracy']:.1%}")
    print(f"  warm triage per prompt, embedding included: p50 {fr['p50_ms']} ms  p95 {fr['p95_ms']} ms "
          f"(target p50 < 30 ms)")

    cold = cold_processes(args.runs)
    print(f"\nCold processes (medians of {args.runs}; bytecode cached):")
    for k, v in cold.items():
        print(f"  {k}: {v}{' ms' if isinstance(v, float) else ''}")
    print("  targets: nika-brain triage < 400 ms without chromadb; UserPromptSubmit < 250 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
