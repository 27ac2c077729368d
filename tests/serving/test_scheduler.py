"""The continuous-batching scheduler over a real page pool and radix cache (no model needed)."""

from __future__ import annotations

from memloop.engine.cache.kv_cache import PagePool
from memloop.engine.cache.radix import RadixCache
from memloop.engine.sched.scheduler import Scheduler, Sequence, Status


def make(num_pages: int, ps: int = 4, cache: bool = True, budget: int = 8, max_batch: int = 8) -> Scheduler:
    pool = PagePool(num_pages, ps)
    return Scheduler(pool, RadixCache(pool) if cache else None, max_batch=max_batch, prefill_budget=budget)


def run_prefill(s: Scheduler, plan) -> None:
    for chunk in plan.prefill:
        s.prefilled(chunk)
        if chunk.final and not chunk.seq.output:
            chunk.seq.output.append(7)


def test_chunked_prefill_respects_the_budget_and_samples_share_a_prompt() -> None:
    s = make(64, budget=8)
    prompt = list(range(20))
    a, b = Sequence(prompt=prompt, max_tokens=4), Sequence(prompt=list(prompt), max_tokens=4)
    s.add(a)
    s.add(b)
    plan = s.schedule()
    assert [(c.start, c.length) for c in plan.prefill] == [(0, 8)]
    assert b.status is Status.WAITING  # deferred: a is computing the same pages right now
    while a.status is Status.PREFILL:
        run_prefill(s, plan)
        plan = s.schedule()
    assert a.status is Status.DECODE and b.status is Status.PREFILL
    assert b.cached_tokens == 16 and b.pages[:4] == a.pages[:4]  # (20 - 1) // 4 whole pages shared
    assert s.pool.refcount[a.pages[0]] == 3  # tree + a + b


def test_back_pressure_queues_until_pages_free() -> None:
    s = make(8, cache=False, budget=64)  # 7 usable pages
    seqs = [Sequence(prompt=[i] * 12, max_tokens=2) for i in range(3)]  # 3 pages each
    for q in seqs:
        s.add(q)
    plan = s.schedule()
    assert len(s.running) == 2 and list(s.waiting) == [seqs[2]]
    run_prefill(s, plan)
    s.finish(seqs[0], "stop")
    s.schedule()
    assert seqs[2] in s.running and s.pool.num_free == 0  # seqs[1] took the last page to decode


def test_preemption_recomputes_the_youngest_from_the_cache() -> None:
    s = make(7, budget=64)  # 6 usable pages
    old, young = Sequence(prompt=[1] * 12, max_tokens=9), Sequence(prompt=[2] * 12, max_tokens=9)
    s.add(old)
    s.add(young)
    run_prefill(s, s.schedule())  # both prompts fill 3 pages each; outputs start
    plan = s.schedule()  # both need a 4th page for their next token: none free
    assert plan.decode == [old] and young.status is Status.WAITING and s.preemptions == 1
    assert young.pages == [] and s.waiting[0] is young
    # young's computed prompt went to the prefix cache; old got a page by evicting part of it
    assert s.tree.num_pages >= 1
    s.finish(old, "stop")
    plan = s.schedule()
    assert young.status is Status.PREFILL and young.computed == len(young.tokens) - 1 - plan.prefill[0].length


def test_prefill_chunks_group_by_length_bucket():
    from types import SimpleNamespace

    from memloop.engine.runner.step_runner import prefill_groups

    chunks = [SimpleNamespace(length=n) for n in (70, 5, 100, 128, 3, 512)]
    groups = prefill_groups(chunks)
    assert [[c.length for c in g] for g in groups] == [[512], [70, 100, 128], [5], [3]]
    assert sorted(c.length for g in groups for c in g) == sorted(c.length for c in chunks)
