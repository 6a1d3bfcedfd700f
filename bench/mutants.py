"""Mutation check: apply small realistic mutants one at a time to a temporary copy of the checkout,
run the tests that cover each, and report how many the suite kills.

    python bench/mutants.py                 # every mutant; prints a table and "killed N/M"
    python bench/mutants.py --only policy   # the mutants whose name contains "policy"
    python bench/mutants.py --list          # names, files and covering tests, nothing run

The working tree is never touched: the checkout (tracked and untracked files, without .git and the
caches) is copied to a temporary folder, each mutant edits that copy, its covering tests run there
(`python -m pytest -x -q -n 2`, the copy first on PYTHONPATH), and the file is put back. A mutant whose
text is not found exactly once is reported STALE (the code moved: update the mutant), never counted
as killed; nor is one whose file no longer compiles (BROKEN). The unmutated copy's covering tests run
first: if they fail, nothing is judged.

A mutant is killed when its tests fail (any non-zero exit) or run past --timeout (a hang is a kill:
the suite noticed). Each mutant names the issue item it stands for.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from isolation import own_operator_home

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", ".nika", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache",
                                ".benchmarks", "*.egg-info", "build", "dist")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str        # relative to the checkout
    old: str         # must occur exactly once
    new: str
    tests: tuple[str, ...]


POLICY = "nika_brain/claude/policy.py"
POLICY_TESTS = ("tests/claude/test_policy_writers.py",)
EDGES = "tests/federation/test_edges.py"
FAST = "nika_brain/cli/fast.py"
GITHOOKS = "nika_brain/hooks/git.py"
CLAUDE_HOOK = "nika_brain/hooks/claude.py"
CHUNKING = "nika_brain/federation/vault/chunking.py"
DECIDE = "nika_brain/federation/triage/decide.py"
VOCABULARY = "nika_brain/federation/triage/vocabulary.py"
INDEX = "nika_brain/engine/index.py"
ATTACKS = "tests/state/test_agent_attacks.py"
NO_DOOR = f"{ATTACKS}::test_without_a_door_an_agent_cannot_act_as_any_claim_whatever_nika_claim_says"
NO_OWNER_FROM_ENV = f"{ATTACKS}::test_the_commit_hook_takes_no_owner_from_nika_claim_in_an_agents_shell"
OWN_LOCK = "tests/hooks/test_claude_hooks.py::test_own_lock_allows_and_shared_or_expired_locks_of_others_do_not_block"
FOREIGN_DOOR_EDIT = ("tests/hooks/test_claude_hooks.py::"
                     "test_the_claims_own_door_named_from_another_process_tree_gives_none_of_its_locks")
FOREIGN_DOOR_COMMIT = "tests/gitrepo/test_githooks.py::test_an_agent_naming_a_door_not_its_own_commits_as_no_claim"
WIDE_CHUNKS = ("tests/federation/test_vault_ingest.py::"
               "test_a_chunk_of_chinese_or_korean_fits_the_models_window_and_keeps_every_character")
BOUNDED = "tests/federation/test_triage_learning.py::test_a_long_prompts_part_is_bounded_by_the_models_tokens"
INDEX_MEMO = "tests/engine/test_index_memo.py"
YAMLSAFE = "nika_brain/support/yamlsafe.py"
DUMPS_FAST = "tests/support/test_yamlsafe.py"
LAUNCHFAST = "nika_brain/cli/launchfast.py"
LAUNCH_FAST = "tests/cli/test_launch_fast.py"
DONE_ONCE = "tests/cli/test_new_user.py::test_launching_a_finished_workflow_says_done_once_and_names_restart"

MUTANTS: list[Mutant] = [
    # ---- a state file written in place, not through a temporary file renamed over it --------------
    Mutant("fsio: atomic_write writes the target in place (a kill mid-write tears it)",
           "nika_brain/support/fsio.py", "    fd, tmp = _temp_file(path)\n",
           "    fd, tmp = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), str(path)\n",
           ("tests/support/test_crash.py::test_kill_9_during_writes_leaves_old_or_new_versions",)),
    # ---- issue 25 §1: the survivors of the last check ------------------------------------------
    Mutant("authority: the record's id not signed (a signature replayed onto another id)",
           "nika_brain/state/authority.py",
           '"fields": {k: v for k, v in fields.items() if k != "signature"}}',
           '"fields": {k: v for k, v in fields.items() if k not in ("signature", "id")}}',
           ("tests/state/test_agent_attacks.py::"
            "test_a_signature_replayed_onto_another_id_is_refused_for_every_signed_kind",)),
    Mutant("authority: a lock's scope not signed (an operator release replayed onto another scope)",
           "nika_brain/state/authority.py",
           '"fields": {k: v for k, v in fields.items() if k != "signature"}}',
           '"fields": {k: v for k, v in fields.items() if k not in ("signature", "scope")}}',
           ("tests/state/test_agent_attacks.py::"
            "test_a_signature_replayed_onto_another_id_is_refused_for_every_signed_kind",)),
    Mutant("spawning: an approval not bound to the proposal's content",
           "nika_brain/federation/spawning/proposals.py",
           'if g.status == "approved" and f"[proposal {digest(p)}]" not in g.message:',
           'if False:',
           ("tests/state/test_agent_attacks.py::"
            "test_a_proposal_pointing_at_another_gate_or_edited_after_it_is_never_spawned",)),
    Mutant("inbox: a signed message obeyed whatever its signature", "nika_brain/engine/inbox.py",
           "if not authority.verify(brain, SIGNED_KIND, body, signature):", "if False:",
           ("tests/state/test_agent_attacks.py::"
            "test_forged_inbox_messages_are_ignored_and_a_malformed_one_does_not_stop_the_batch",)),
    Mutant("vault: expired grants still honoured", "nika_brain/state/grants.py",
           'return self.until is None or clock.parse(self.until, what="until") > now', "return True",
           (f"{EDGES}::test_an_expired_grant_is_refused",)),
    Mutant("handover: Stop and PreCompact both win _begin", "nika_brain/federation/lineage/handover.py",
           '        if data.get("handover"):\n            won.append(False)\n            return\n', "",
           (f"{EDGES}::test_stop_and_precompact_at_once_begin_one_handover",)),
    Mutant("handover: the 41 % default", "nika_brain/federation/lineage/handover.py",
           "DEFAULT_THRESHOLD = 41.0", "DEFAULT_THRESHOLD = 50.0",
           (f"{EDGES}::test_the_default_handover_threshold_is_41_percent",)),
    Mutant("stealing: grant written with plain set", "nika_brain/federation/stealing/protocol.py",
           "if not self.bus.set_if_absent(_k_grant(offer.tid, 1), record):",
           "if self.bus.set(_k_grant(offer.tid, 1), record):",
           (f"{EDGES}::test_a_second_owner_incarnation_keeps_the_first_grant",)),
    Mutant("stealing: runner does not check the newest grant", "nika_brain/federation/stealing/protocol.py",
           'if gs[-1]["to"] != self.kernel:\n                return "not-ours"',
           'if gs[0]["to"] != self.kernel:\n                return "not-ours"',
           (f"{EDGES}::test_a_runner_obeys_the_newest_decision",)),
    Mutant("stealing: a done task found again waits on the dead run's lease",
           "nika_brain/federation/stealing/protocol.py",
           '        if self.bus.get(_k_done(tid)) is not None:\n            # done, maybe by a run killed',
           '        if False:\n            # done, maybe by a run killed',
           ("tests/federation/test_stealing.py::"
            "test_a_run_killed_between_its_commit_and_its_tidying_is_tidied_by_the_next_incarnation_at_once",)),
    Mutant("stealing: grant_timeout swapped for the lease", "nika_brain/federation/stealing/protocol.py",
           '> self.cfg.grant_timeout', '> self.cfg.lease',
           (f"{EDGES}::test_an_unstarted_grant_returns_after_grant_timeout_not_the_lease",)),
    Mutant("policy: ln dropped from the writers", POLICY,
           '_WRITE_LAST = {"cp", "ln", "install", "rsync", "scp"}', '_WRITE_LAST = {"cp", "install", "rsync", "scp"}',
           POLICY_TESTS),
    Mutant("policy: install dropped", POLICY,
           '_WRITE_LAST = {"cp", "ln", "install", "rsync", "scp"}', '_WRITE_LAST = {"cp", "ln", "rsync", "scp"}',
           POLICY_TESTS),
    Mutant("policy: rsync dropped", POLICY,
           '_WRITE_LAST = {"cp", "ln", "install", "rsync", "scp"}', '_WRITE_LAST = {"cp", "ln", "install", "scp"}',
           POLICY_TESTS),
    Mutant("policy: scp dropped", POLICY,
           '_WRITE_LAST = {"cp", "ln", "install", "rsync", "scp"}', '_WRITE_LAST = {"cp", "ln", "install", "rsync"}',
           POLICY_TESTS),
    Mutant("policy: truncate dropped", POLICY,
           '"touch", "truncate", "tee"', '"touch", "tee"', POLICY_TESTS),
    Mutant("policy: curl -O not a write", POLICY,
           'or verb == "curl" and any(_cluster(a, "O") or a == "--remote-name" for a in args)',
           'or verb == "curl" and False', POLICY_TESTS),
    Mutant("policy: wget -P not a write", POLICY,
           'elif verb == "wget" and (a in ("-O", "-P", "--output-document", "--directory-prefix")',
           'elif verb == "wget" and (a in ("-O", "--output-document", "--directory-prefix")', POLICY_TESTS),
    Mutant("policy: tar -x without -C not a write", POLICY,
           '        if not any(a == "-C" or a.startswith("--directory") for a in args):\n'
           '            writes.append(".")',
           '        pass', POLICY_TESTS),
    Mutant("policy: git checkout/restore/clean not writes", POLICY,
           'operands[0] in ("rm", "mv", "checkout", "restore", "clean")', 'operands[0] in ("rm", "mv")',
           POLICY_TESTS),
    Mutant("triggers: saturation with one sample", "nika_brain/federation/spawning/triggers.py",
           'or m["samples"] < cfg["saturation_min_samples"]', 'or m["samples"] < 1',
           (f"{EDGES}::test_saturation_waits_for_its_minimum_samples",)),
    Mutant("vault: owner re-check on query results removed", "nika_brain/federation/vault/query.py",
           "                    if _allowed(rec, allowed):\n                        found.append(rec)",
           "                    found.append(rec)",
           (f"{EDGES}::test_records_chroma_returns_outside_the_readers_scope_are_dropped",)),
    Mutant("vault: dedup > becomes >= (in a batch)", "nika_brain/federation/vault/write.py",
           "above = np.flatnonzero(sims > threshold)", "above = np.flatnonzero(sims >= threshold)",
           (f"{EDGES}::test_a_dedup_threshold_of_one_drops_nothing",)),
    Mutant("vault: dedup > becomes >= (against the kernel's records)", "nika_brain/federation/vault/write.py",
           "if sim <= threshold or kernel_of(hid) != kernel_id:", "if sim < threshold or kernel_of(hid) != kernel_id:",
           (f"{EDGES}::test_a_dedup_threshold_of_one_drops_nothing",)),
    Mutant("locks: lookup by name misses the ancestors", "nika_brain/state/locks.py",
           "for i in range(1, len(parts)):  ", "for i in range(len(parts), len(parts)):  ",
           ("tests/state/test_lock_index.py",)),
    Mutant("locks: lookup by name misses the target and what lies below it", "nika_brain/state/locks.py",
           "self._starting(whole, out)  ", "pass  ",
           ("tests/state/test_lock_index.py",)),
    # ---- issue 25 §4-5: what this round fixed stays fixed ---------------------------------------
    Mutant("fencing: the counter's copy in .git ignored", "nika_brain/state/locks.py",
           "token = max(floor, _bump_copy(copy, 0)) + 1", "token = floor + 1",
           ("tests/campaign/test_defects.py::test_fencing_tokens_never_go_back_when_no_lock_was_ever_committed",
            "tests/campaign/test_defects.py::test_fencing_tokens_stay_above_a_local_counter_higher_than_git_history")),
    Mutant("fencing: a negative counter accepted", "nika_brain/state/locks.py",
           "if not text.isdigit() or", 'if not text.lstrip(b"-").isdigit() or',
           ("tests/campaign/test_defects.py::test_a_counter_that_is_not_a_small_non_negative_number_fails_closed",)),
    Mutant("fencing: a 26-digit counter accepted", "nika_brain/state/locks.py",
           "len(text.lstrip(b\"0\")) > _MAX_TOKEN_DIGITS", "len(text.lstrip(b\"0\")) > 99",
           ("tests/campaign/test_defects.py::test_a_counter_that_is_not_a_small_non_negative_number_fails_closed",)),
    Mutant("gates: a second approval journaled", "nika_brain/state/gates.py",
           "return g, False", "return g, True",
           ("tests/cli/test_new_user.py::test_approving_an_approved_gate_journals_nothing_and_rejecting_it_says_it_is_decided",)),
    Mutant("cli: invalid UTF-8 arguments let through", "nika_brain/__main__.py",
           "bad = undecodable(argv)", "bad = None",
           ("tests/campaign/test_newer_commands.py::test_invalid_utf8_arguments_are_one_line",)),
    Mutant("bus: a lone surrogate stored", "nika_brain/bus/codec.py",
           'text.encode("utf-8")   #', "pass   #",
           ("tests/campaign/test_newer_commands.py::test_bus_publish_refuses_what_it_cannot_store",)),
    Mutant("bus: a path as a channel name", "nika_brain/bus/codec.py",
           'if what == "channel" and', "if False and",
           ("tests/campaign/test_newer_commands.py::test_the_bus_refuses_a_path_like_channel_in_process",)),
    Mutant("support: FIFOs and devices read", "nika_brain/support/fsio.py",
           "if not stat.S_ISREG(mode):", "if False:",
           ("tests/campaign/test_newer_commands.py::test_input_files_that_never_end_are_refused_not_read",)),
    Mutant("kernels: a directive for a dead kernel queued", "nika_brain/federation/kernels/verbs.py",
           '    check_live(brain, kernel_id, "read this directive")\n', "",
           ("tests/campaign/test_newer_commands.py::test_directives_and_tasks_for_a_kernel_that_is_not_live_are_refused",)),
    Mutant("kernels: spawn --id differing only by case", "nika_brain/federation/kernels/verbs.py",
           "if other.name != kernel_id and other.name.casefold() == folded:", "if False:",
           ("tests/campaign/test_newer_commands.py::test_spawn_refuses_a_bad_id_or_card_before_writing",)),
    Mutant("rag: query for an unknown kernel answers nothing", "nika_brain/cli/rag.py",
           "        _known_kernel(brain, known)\n", "        pass\n",
           ("tests/cli/test_new_user.py::test_rag_query_for_an_unknown_kernel_is_an_error",)),
    Mutant("engine: a missing test runner counted as a red test", "nika_brain/engine/service.py",
           "if tr.missing:", "if False:",
           ("tests/engine/test_test_runner.py::test_a_missing_test_runner_is_named_not_counted_as_a_red_test",)),
    Mutant("vault: a huge heading repeated in every chunk", "nika_brain/federation/vault/chunking.py",
           "if len(heading) > MAX_HEADING:", "if False:",
           ("tests/federation/test_vault_ingest.py::test_a_huge_heading_is_text_chunked_once_not_repeated_in_every_chunk",)),
    Mutant("embedding: short texts of many tokens not cut", "nika_brain/federation/embedding.py",
           "if len(text) <= MAX_TOKENS - 16:", "if len(text) <= MAX_TOKENS * 2:",
           ("tests/federation/test_embedding.py::test_e5_cuts_short_texts_of_many_tokens",)),
    Mutant("engine: the red test output not kept", "nika_brain/engine/service.py",
           "                _keep_failure(brain, c.id, tr, now)\n", "",
           ("tests/engine/test_test_runner.py::test_a_red_test_commands_output_is_kept_on_the_claim_and_shown",)),
    # ---- issue 24/25, the code that moved last stop: a door is the only agent path to act as a claim ----
    Mutant("fast: a lock change for the session's own $NIKA_CLAIM made without the key (no door)", FAST,
           '    _operator(brain, f"{verb} a lock on {scope} for {owner}", owner, _outsider(brain, owner))',
           '    why = _outsider(brain, owner)\n'
           '    if why is not None:\n'
           '        _operator(brain, f"{verb} a lock on {scope} for {owner}", owner, why)',
           (NO_DOOR,)),
    Mutant("fast: a claim closed by its $NIKA_CLAIM without the key when no door is open", FAST,
           '    _operator(brain, f"closing claim {claim_id}", claim_id,',
           '    if door.bound(brain, claim_id) or claim_id != os.environ.get("NIKA_CLAIM"):\n'
           '        _operator(brain, f"closing claim {claim_id}", claim_id,',
           (NO_DOOR,)),
    Mutant("git hooks: the committer taken from $NIKA_CLAIM without the key", GITHOOKS,
           "    return hint if authority.available(brain) else None", "    return hint",
           (NO_OWNER_FROM_ENV,)),
    Mutant("git hooks: a door that does not answer this process falls back to $NIKA_CLAIM", GITHOOKS,
           "        return door.session_claim()   # a session with a door is its claim, or none",
           "        return door.session_claim() or hint",
           (NO_OWNER_FROM_ENV, FOREIGN_DOOR_COMMIT)),
    Mutant("door: a door that refuses this process is taken as $NIKA_CLAIM's", "nika_brain/bus/door.py",
           "    except BrainError:\n        return None\n    return claim if",
           '    except BrainError:\n        return os.environ.get("NIKA_CLAIM")\n    return claim if',
           (OWN_LOCK, FOREIGN_DOOR_EDIT, FOREIGN_DOOR_COMMIT)),
    Mutant("hook: $NIKA_CLAIM widens without a door (the claim's locks are the session's)", CLAUDE_HOOK,
           "        if door.session_claim() == claim_id:", "        if door.session_claim() in (claim_id, None):",
           (OWN_LOCK,)),
    Mutant("hook: $NIKA_CLAIM no longer narrows a write to the claim's scope", CLAUDE_HOOK,
           "            scope = claim.scope if claim.is_open else None", "            scope = None",
           ("tests/hooks/test_claude_hooks.py::test_pre_tool_use_fixture_decisions",)),
    # ---- the vault's chunks and the triage's bound in the model's tokens --------------------------------
    Mutant("chunking: a wide character weighs as a Latin one (a CJK chunk past 512 tokens)", CHUNKING,
           "WIDE_WEIGHT = 2.5", "WIDE_WEIGHT = 1.0", (WIDE_CHUNKS,)),
    Mutant("chunking: hangul not counted wide", CHUNKING, r"\uac00-\ud7af", r"\uac00-\uac00", (WIDE_CHUNKS,)),
    # (Not listed: "bound_tokens trusts the words' summed counts", the check of the joined text removed. It
    # is equivalent with both counts nika-brain ships: e5's tokenizer never makes a piece across a blank
    # (0 of 3,000 random 6-word joins of the triage sets count more than their words apart), and the
    # characters' estimate is sub-additive over words. No test can tell; see reports/h26m.md.)
    Mutant("decide: a bounded part keeps the head's words only (the prompt's last words lost)", DECIDE,
           "        tk = min(len(t), k * TAIL // (HEAD + TAIL))", "        tk = 0", (BOUNDED,)),
    Mutant("decide: one word over the bound left uncut", DECIDE,
           "    return cut_to_tokens(joined(k), limit, tokens)", "    return joined(k)", (BOUNDED,)),
    Mutant("decide: the everyday rule never applied (a cover letter goes to the client-mail kernel)", DECIDE,
           "        if top is not None and top.everyday_like:", "        if False:",
           ("tests/federation/test_triage.py::test_an_everyday_request_above_a_threshold_still_falls_back_and_says_why",)),
    Mutant("router: an everyday kernel competes with the background of its own themes",
           "nika_brain/federation/triage/router.py",
           "        if keep.sum() >= MIN_BACKGROUND:\n            model.everyday_mask[k] = keep",
           "        if False:\n            model.everyday_mask[k] = keep",
           ("tests/federation/test_triage.py::test_an_everyday_kernel_is_not_calibrated_against_its_own_kind_and_scored_by_its_nearest_theme",)),
    Mutant("goals: the shipped vocabulary never joins a kernel's texts", "nika_brain/federation/triage/goals.py",
           "    if st.vocabulary and n:", "    if False:",
           ("tests/federation/test_triage.py::test_each_kernel_takes_the_vocabulary_of_its_own_work_and_no_other_kernel_moves_it",
            "tests/federation/test_triage.py::test_a_prompt_in_its_domains_jargon_routes_by_the_vocabulary_and_leads_less_without_it")),
    Mutant("router: the vocabulary's words make sub-topics of their own", "nika_brain/federation/triage/router.py",
           "subtopics(x, np.where(own, owner, -1), K)", "subtopics(x, owner, K)",
           ("tests/federation/test_triage.py::test_an_everyday_request_above_a_threshold_still_falls_back_and_says_why",)),
    Mutant("router: the lexical share weighs as before the vocabulary (0.1)", "nika_brain/federation/triage/router.py",
           "LEX_WEIGHT = 0.2 ", "LEX_WEIGHT = 0.1 ",
           ("tests/federation/test_triage.py::test_the_lexical_share_weighs_enough_to_decide_between_two_near_kernels",)),
    Mutant("decide: \"about\" cuts a single clause in two aspects again", DECIDE,
           "(?:pour|for|avec|with|sur|de", "(?:pour|for|avec|with|sur|about|concernant|de",
           ("tests/federation/test_triage.py::test_about_names_the_subject_of_one_request_and_is_no_cut_between_two",)),
    Mutant("decide: only a single clause is looked at for two aspects", DECIDE,
           "        if split is None and aspects and not cut:",
           "        if split is None and len(parts) == 1 and aspects and not cut:",
           ("tests/federation/test_triage.py::test_two_clauses_no_clause_split_takes_are_still_looked_at_for_two_aspects",)),
    Mutant("embedding cache: a new file switched to WAL by every opener at once", "nika_brain/federation/embedding.py",
           '                with fsio.mutex(self.path.parent / "mutex" / f"{self.path.name}.lock"):',
           "                if True:",
           ("tests/federation/test_embedding.py::test_a_new_cache_file_is_switched_to_wal_by_one_opener_at_a_time",)),
    Mutant("kernel work: a bus error while serving ends it", "nika_brain/federation/stealing/protocol.py",
           "        except BrainError as exc:\n            worker = None\n",
           "        except BrainError as exc:\n            raise\n",
           ("tests/federation/test_stealing.py::"
            "test_kernel_work_outlives_a_bus_error_with_a_fresh_worker_and_gives_up_on_one_that_lasts",)),
    Mutant("two aspects: a word everyday requests use counts as one kernel's own", DECIDE,
           "stems(w) - common for w in text.split()", "stems(w) for w in text.split()",
           ("tests/federation/test_triage_learning.py::"
            "test_words_of_its_own_are_typed_words_the_other_kernel_lacks_that_no_everyday_request_uses",)),
    Mutant("two aspects: a word both kernels' texts name counts as each one's own", DECIDE,
           "only = (m.vocab[a] - m.vocab[b], m.vocab[b] - m.vocab[a])", "only = (m.vocab[a], m.vocab[b])",
           ("tests/federation/test_triage_learning.py::"
            "test_words_of_its_own_are_typed_words_the_other_kernel_lacks_that_no_everyday_request_uses",)),
    Mutant("two aspects: one word of its own is enough", DECIDE,
           "OWN_WORDS = 2 ", "OWN_WORDS = 1 ",
           ("tests/federation/test_triage_learning.py::"
            "test_words_of_its_own_are_typed_words_the_other_kernel_lacks_that_no_everyday_request_uses",)),
    Mutant("vocabulary: a term wrapped onto the next line is cut in two", VOCABULARY,
           'for t in " ".join(lines).split(",")', 'for t in ",".join(lines).split(",")',
           ("tests/federation/test_triage.py::test_a_vocabulary_term_wrapped_onto_the_next_line_is_one_term",)),
    Mutant("vocabulary: two votes attach a domain however many texts a kernel has", VOCABULARY,
           "VOTE_SHARE = 0.15", "VOTE_SHARE = 0.0",
           ("tests/federation/test_triage.py::test_a_domain_needs_two_votes_and_a_share_of_the_kernels_texts_each_near_enough",)),
    Mutant("vocabulary: a text far from every term still votes", VOCABULARY,
           "VOTE_SIMILARITY = 0.39 ", "VOTE_SIMILARITY = -1.0 ",
           ("tests/federation/test_triage.py::test_a_domain_needs_two_votes_and_a_share_of_the_kernels_texts_each_near_enough",)),
    Mutant("embedding: cut_to_tokens cuts once, not until the text fits", "nika_brain/federation/embedding.py",
           "    while n > limit and len(text) > 1:", "    if n > limit and len(text) > 1:",
           (BOUNDED, "tests/federation/test_embedding.py::test_e5_cuts_short_texts_of_many_tokens",
            "tests/federation/test_embedding.py::test_e5_cuts_long_texts_to_its_window",
            "tests/federation/test_embedding.py::test_e5_cuts_a_text_whose_start_is_denser_than_the_rest_to_its_window")),
    # ---- the index's memo by byte hashes, the summary cache, yamlsafe.Parsed: no stale record served -----
    Mutant("index memo: a racy input's bytes not compared (a stale index served after a change)", INDEX,
           "        if _read(path, size)[1] != digest:", "        if False:", (INDEX_MEMO,)),
    Mutant("index memo: files just written in a folder not fingerprinted by their bytes", INDEX,
           "        racy += [(path, st.st_size) for _, path, st in rows if",
           "        racy += [] and [(path, st.st_size) for _, path, st in rows if", (INDEX_MEMO,)),
    Mutant("index cache: a racy file's stat trusted (a stale summary served)", INDEX,
           "if good and hit[:3] == key and key[0] != -1:", "if good and hit[:3] == key:",
           ("tests/engine/test_index.py",)),
    Mutant("yamlsafe.Parsed: a changed file served from the memo", "nika_brain/support/yamlsafe.py",
           "if hit is not None and hit[0] == text:", "if hit is not None:",
           ("tests/support/test_yamlsafe.py", "tests/state/test_claims.py")),
    # ---- the swarm step's cuts (h26s): dump_plain, the typer-free launch, the lazy loaders ----------
    Mutant("dump_plain: a string that reads back as another type written unquoted", YAMLSAFE,
           "    if value[0] not in yamlfast.RESOLVED_FIRST:\n        return value\n",
           "    if True:\n        return value\n", (DUMPS_FAST,)),
    Mutant("dump_plain: an empty string written as nothing (reads back as null)", YAMLSAFE,
           "        if not value:\n            return \"''\"", "        if not value:\n            return \"\"",
           (DUMPS_FAST,)),
    Mutant("dump_plain: a sequence in a mapping indented (not dumps' indentless form)", YAMLSAFE,
           "if not _sequence_lines(value, indent, out):", "if not _sequence_lines(value, indent + \"  \", out):",
           (DUMPS_FAST,)),
    Mutant("dump_plain: a line past dumps' width written whole (dumps folds it)", YAMLSAFE,
           "if text is None or len(indent) + len(key) + len(text) > _LINE:", "if text is None:",
           (DUMPS_FAST,)),
    Mutant("launchfast: --poll passed on as text", LAUNCHFAST,
           '"--poll": ("poll", float),\n                                          "--timeout"',
           '"--poll": ("poll", str),\n                                          "--timeout"', (LAUNCH_FAST,)),
    Mutant("launchfast: resume runs as a launch", LAUNCHFAST,
           "workflow_launch if key == (\"workflow-launch\",) else workflow_resume", "workflow_launch",
           (LAUNCH_FAST,)),
    Mutant("launchfast: a finished workflow's DONE printed twice", LAUNCHFAST,
           "            print(f\"next (triggered): {triggered}\")\n        return\n",
           "            print(f\"next (triggered): {triggered}\")\n", (LAUNCH_FAST, DONE_ONCE)),
    Mutant("launchfast: every outcome exits 0", LAUNCHFAST,
           "    return out.exit_code\n", "    return 0\n", (LAUNCH_FAST,)),
    Mutant("validate: a lock file checked by the claim loader", "nika_brain/state/validate.py",
           '"lock": ("nika_brain.state.locks", "load_lock"),', '"lock": ("nika_brain.state.claims", "load_path"),',
           ("tests/state/test_validate.py",)),
    Mutant("validate: a gate file checked by the breaker loader", "nika_brain/state/validate.py",
           '"gate": ("nika_brain.state.gates", "load_path"),', '"gate": ("nika_brain.state.breakers", "load_path"),',
           ("tests/state/test_validate.py",)),
]


def copy_checkout(dest: Path) -> None:
    shutil.copytree(ROOT, dest, ignore=IGNORE, symlinks=True)


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float, workers: int) -> tuple[str, float, str]:
    """('pass' | 'fail' | 'timeout', seconds, the output's tail)."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                               "-n", str(workers), *tests],
                              cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - start, ""
    out = [x for x in (proc.stdout + proc.stderr).strip().splitlines()   # pytest-benchmark's xdist notice
           if "PytestBenchmarkWarning" not in x and "bringing up nodes" not in x]
    return ("pass" if proc.returncode == 0 else "fail"), time.monotonic() - start, "\n".join(out[-3:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run the mutants whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant's tests (a hang is a kill)")
    ap.add_argument("--workers", type=int, default=2, choices=(0, 1, 2),
                    help="pytest-xdist workers per run (-n; 2 at most on a shared machine, 0 serial)")
    ap.add_argument("--verbose", action="store_true", help="print the tail of each run's output")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only.lower() in m.name.lower()]
    if args.list:
        for m in chosen:
            print(f"{m.name}\n    {m.path}\n    " + "\n    ".join(m.tests))
        return 0
    if not chosen:
        print("no mutant matches", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="nika-mutants-") as tmp:
        copy = Path(tmp) / "checkout"
        copy_checkout(copy)
        every = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        verdict, secs, tail = run_tests(copy, every, args.timeout, args.workers)
        if verdict != "pass":
            print(f"the unmutated checkout's covering tests do not pass ({verdict}):\n{tail}", file=sys.stderr)
            return 1
        print(f"baseline: {len(every)} covering test selections pass on the unmutated copy ({secs:.0f}s)")
        killed = stale = 0
        rows = []
        for m in chosen:
            target = copy / m.path
            original = target.read_text(encoding="utf-8")
            if original.count(m.old) != 1:
                stale += 1
                rows.append(("STALE", m.name, 0.0, f"text found {original.count(m.old)} times in {m.path}"))
                continue
            mutated = original.replace(m.old, m.new, 1)
            try:   # a mutant that does not compile would fail every test: no kill, a mutant to fix
                compile(mutated, m.path, "exec")
            except SyntaxError as exc:
                stale += 1
                rows.append(("BROKEN", m.name, 0.0, f"does not compile: {exc}"))
                continue
            target.write_text(mutated, encoding="utf-8")
            try:
                verdict, secs, tail = run_tests(copy, m.tests, args.timeout, args.workers)
            finally:
                target.write_text(original, encoding="utf-8")
            kill = verdict in ("fail", "timeout")
            killed += kill
            rows.append(("killed" if kill else "SURVIVED", m.name, secs, tail if args.verbose or not kill else ""))
            print(f"{rows[-1][0]:>8}  {m.name}  ({secs:.0f}s{', timeout' if verdict == 'timeout' else ''})",
                  flush=True)
            if rows[-1][3]:
                print("          " + rows[-1][3].replace("\n", "\n          "))
        judged = len(chosen) - stale
        print(f"\nkilled {killed}/{judged} mutants" + (f" ({stale} stale or broken: update them)" if stale else ""))
        for verdict, name, _, why in rows:
            if verdict != "killed":
                print(f"  {verdict}: {name}" + (f" — {why}" if verdict in ("STALE", "BROKEN") else ""))
        return 0 if killed == judged and not stale else 1


if __name__ == "__main__":
    with own_operator_home():
        sys.exit(main())
