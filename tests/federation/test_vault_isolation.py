"""Isolation as a property: random adds, re-adds (upserts), deletes, grants, revokes, clock ticks and
queries against a reference model of who may read what. Queries include another kernel's exact
embedding, crafted `where` filters and ids of other kernels' records. Every text carries a canary
naming its kernel: no canary of a kernel ever reaches another kernel without an active grant, in
search results, gets, super-chunks or summaries.

Vectors are built on orthogonal axes (a topic axis plus a private noise axis per record), so every
cosine is known exactly and none sits near the 0.95 dedup edge; the model applies the same dedup.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nika_brain.errors import EXIT_REFUSED, BrainError
from nika_brain.federation.vault import grants, query, summaries, superchunks, write
from nika_brain.federation.vault.facts import same_thing
from nika_brain.federation.vault.records import LEVELS, record_id
from nika_brain.federation.vault.write import Chunk
from tests.federation.vaultkit import DIM, reset_store, vault_brain

KERNELS = ("alpha", "beta", "gamma")
CANARY = re.compile(r"CANARY-(\w+)-\d+")
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
EPS = (0.0, 0.2, 0.5)

kernel = st.sampled_from(KERNELS)
op = st.one_of(
    st.tuples(st.just("add"), kernel, st.integers(0, 4), st.sampled_from(EPS), st.sampled_from(LEVELS)),
    st.tuples(st.just("readd"), kernel, st.integers(0, 50)),
    st.tuples(st.just("copy_vector"), kernel, kernel, st.integers(0, 50)),
    st.tuples(st.just("delete"), kernel, kernel, st.integers(0, 50)),
    st.tuples(st.just("grant"), kernel, kernel,
              st.lists(st.sampled_from(LEVELS), max_size=2, unique=True),
              st.sampled_from((None, 30, 180))),
    st.tuples(st.just("revoke"), kernel, kernel),
    st.tuples(st.just("tick"),),
    st.tuples(st.just("query"), kernel, st.integers(0, 60), st.lists(kernel, max_size=2, unique=True),
              st.integers(0, 6), st.lists(st.sampled_from(LEVELS), max_size=2, unique=True)),
    st.tuples(st.just("get"), kernel, st.lists(st.tuples(kernel, st.integers(0, 50)), max_size=4),
              st.lists(kernel, max_size=2, unique=True)),
)


class Model:
    def __init__(self):
        self.records: dict[str, dict] = {}   # id -> {kernel, text, vec, level}
        self.grants: dict[tuple[str, str], tuple[tuple[str, ...], datetime | None]] = {}
        self.now = T0
        self.axis = 10
        self.n = 0

    def of(self, k: str) -> list[str]:
        return sorted(i for i, r in self.records.items() if r["kernel"] == k)

    def pick(self, k: str, n: int) -> str | None:
        ids = self.of(k)
        return ids[n % len(ids)] if ids else None

    def vector(self, topic: int, eps: float) -> np.ndarray:
        v = np.zeros(DIM, np.float32)
        v[topic] = 1.0
        if eps:
            v[self.axis] = eps
            self.axis += 1
        return v / np.linalg.norm(v)

    def add(self, k: str, text: str, vec: np.ndarray, level: str) -> str:
        rid = record_id(k, text)
        if rid in self.records:
            return "already"
        for i in self.of(k):
            if float(self.records[i]["vec"] @ vec) > 0.95 and same_thing(self.records[i]["text"], text):
                return "dropped"   # close AND the same statement (vault/facts.py)
        self.records[rid] = {"kernel": k, "text": text, "vec": vec, "level": level,
                             "day": self.now.strftime("%Y-%m-%d")}
        return "added"

    def active(self, owner: str, reader: str):
        g = self.grants.get((owner, reader))
        if g is None or (g[1] is not None and g[1] <= self.now):
            return None
        return g

    def readable(self, reader: str, owners: list[str], levels: list[str]) -> set[str] | None:
        """Ids `reader` may see asking for `owners`; None when the request must be refused."""
        allowed = {reader: ()}
        for o in owners:
            if o == reader:
                continue
            g = self.active(o, reader)
            if g is None:
                return None
            allowed[o] = g[0]
        out = set()
        for i, r in self.records.items():
            lv = allowed.get(r["kernel"])
            if lv is None or (lv and r["level"] not in lv) or (levels and r["level"] not in levels):
                continue
            out.add(i)
        return out


def wheres(k: str) -> list[dict | None]:
    others = [x for x in KERNELS if x != k]
    return [None, {"kernel_id": others[0]}, {"$or": [{"kernel_id": others[0]}, {"kernel_id": k}]},
            {"kernel_id": {"$ne": k}}, {"kernel_id": {"$in": list(KERNELS)}},
            {"superseded_by": {"$ne": "zzz"}}, {"level": {"$in": list(LEVELS)}}]


def canaries(text: str) -> set[str]:
    return set(CANARY.findall(text))


_OPERATOR_FILES: dict[str, bytes] = {}   # the module brain's key pair, made under the first test's home


@pytest.fixture(scope="module")
def vbrain(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    for name in ("NIKA_KERNEL_ID", "NIKA_BRAIN_DIR", "CLAUDECODE", "NIKA_NOW"):
        mp.delenv(name, raising=False)
    mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name, value in {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                        "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.invalid"}.items():
        mp.setenv(name, value)
    brain = vault_brain(tmp_path_factory.mktemp("iso") / "brain", KERNELS)
    from nika_brain.state import authority
    _OPERATOR_FILES.update({p.name: p.read_bytes() for p in authority.key_paths(brain.root)})
    yield brain
    mp.undo()


@pytest.fixture
def vbrain_here(vbrain):
    """The module's brain with its operator key in this test's passwd home (grants are signed)."""
    from nika_brain.state import authority
    for path in authority.key_paths(vbrain.root):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_OPERATOR_FILES[path.name])
    return vbrain


def _reset(brain) -> None:
    reset_store(brain)
    for g in grants.list_grants(brain):
        grants.grant_path(brain, g.owner, g.reader).unlink()


@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=40), finish=st.booleans())
def test_no_kernel_reads_another_without_a_grant(vbrain_here, ops, finish):
    brain = vbrain_here
    _reset(brain)
    m = Model()
    for o in ops:
        kind = o[0]
        if kind == "add":
            _, k, topic, eps, level = o
            m.n += 1
            text = f"CANARY-{k}-{m.n} note on topic {topic}"
            vec = m.vector(topic, eps)
            expect = m.add(k, text, vec, level)
            res = write.add(brain, k, [Chunk(text)], [vec], level=level, now=m.now)
            got = "added" if res.added else "already" if res.already else "dropped"
            assert got == expect, (o, res)
        elif kind == "readd":
            _, k, n = o
            rid = m.pick(k, n)
            if rid is None:
                continue
            r = m.records[rid]
            res = write.add(brain, k, [Chunk(r["text"])], [r["vec"]], level=r["level"], now=m.now)
            assert res.already == [rid] and not res.added
        elif kind == "copy_vector":
            _, k, victim, n = o
            rid = m.pick(victim, n)
            if rid is None:
                continue
            m.n += 1
            text = f"CANARY-{k}-{m.n} copy of a vector"
            vec = m.records[rid]["vec"]
            expect = m.add(k, text, vec, "atomic")
            res = write.add(brain, k, [Chunk(text)], [vec], now=m.now)
            assert ("added" if res.added else "dropped") == expect
        elif kind == "delete":
            _, k, target, n = o
            rid = m.pick(target, n)
            if rid is None:
                continue
            gone = write.delete(brain, k, [rid])
            if target == k:
                assert gone == [rid]
                del m.records[rid]
            else:
                assert gone == []
        elif kind == "grant":
            _, owner, reader, levels, minutes = o
            if owner == reader:
                with pytest.raises(BrainError):
                    grants.grant(brain, owner, reader)
                continue
            until = None if minutes is None else m.now + timedelta(minutes=minutes)
            grants.grant(brain, owner, reader, levels=levels,
                         until=until.isoformat() if until else None, now=m.now)
            m.grants[(owner, reader)] = (tuple(levels), until)
        elif kind == "revoke":
            _, owner, reader = o
            assert grants.revoke(brain, owner, reader, now=m.now) == ((owner, reader) in m.grants)
            m.grants.pop((owner, reader), None)
        elif kind == "tick":
            m.now += timedelta(hours=1)
        elif kind == "query":
            _, k, src, owners, wi, levels = o
            all_ids = sorted(m.records)
            if src < len(all_ids):      # another kernel's (or its own) exact embedding
                vec = m.records[all_ids[src]]["vec"]
            else:
                vec = m.vector(src % 5, 0.0)
            where = wheres(k)[wi]
            expect = m.readable(k, owners, levels)
            if expect is None:
                with pytest.raises(BrainError) as err:
                    query.search(brain, embedding=vec, kernel=k, k=100, owners=owners,
                                 levels=levels, where=where, now=m.now)
                assert err.value.exit_code == EXIT_REFUSED
                continue
            recs = query.search(brain, embedding=vec, kernel=k, k=100, owners=owners, levels=levels,
                                where=where, now=m.now)
            ids = {r.id for r in recs}
            assert ids <= expect, (o, ids - expect)
            readable_kernels = {k} | {x for x in owners if m.active(x, k)}
            for r in recs:
                assert canaries(r.text) <= readable_kernels, (o, r.text)
            if where is None:            # and nothing readable is missing
                assert ids == expect, (o, expect - ids)
        elif kind == "get":
            _, k, picks, owners = o
            want = [m.pick(t, n) for t, n in picks]
            want = [w for w in want if w]
            expect = m.readable(k, owners, [])
            if expect is None:
                with pytest.raises(BrainError):
                    query.get(brain, want, kernel=k, owners=owners)
                continue
            got = {r.id for r in query.get(brain, want, kernel=k, owners=owners)}
            assert got == set(want) & expect
    # The canary check on what the kernels' own records become: super-chunks and summaries.
    if finish:
        day = m.now.strftime("%Y-%m-%d")
        for k in KERNELS:
            for sup in superchunks.merge(brain, k, now=m.now):
                assert canaries(sup.text) <= {k}
                assert all(rid.startswith(f"{k}:") for rid in sup.replaces)
            s = summaries.summarize(brain, k, day, now=m.now)
            if any(m.records[i]["day"] == day for i in m.of(k)):
                assert s is not None
            if s is not None:
                assert canaries(s.text) <= {k}, s.text
            for r in query.search(brain, embedding=m.vector(0, 0.0), kernel=k, k=100,
                                  include_superseded=True, now=m.now):
                assert canaries(r.text) <= {k}
