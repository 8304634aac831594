"""flowcore.llm.slots.FairSlots: an LLM client's call slots shared by tenants (a server's key owners)."""

from __future__ import annotations

import asyncio

from flowcore.llm.slots import FairSlots


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_tenant_holds_at_most_its_share_and_another_finds_a_slot_at_once():
    async def go() -> tuple[int, bool, bool]:
        slots = FairSlots(8, 6)
        for _ in range(6):
            await slots.acquire("mallory")
        seventh = asyncio.ensure_future(slots.acquire("mallory"))
        await _settle()
        blocked = not seventh.done()  # two slots are free, but not for her
        await asyncio.wait_for(slots.acquire("alice"), 0.5)  # alice's call starts at once
        slots.release("mallory")
        await _settle()
        return slots.free, blocked, seventh.done()

    free, blocked, later = asyncio.run(go())
    assert blocked and later and free == 1


def test_freed_slots_go_to_the_waiting_tenants_in_turn():
    async def go() -> list[str]:
        slots = FairSlots(2, 2)
        await slots.acquire("a")
        await slots.acquire("a")
        order: list[str] = []

        async def wait(who: str) -> None:
            await slots.acquire(who)
            order.append(who)

        tasks = [asyncio.ensure_future(wait(w)) for w in ("a", "a", "a", "b", "b")]
        await _settle()
        for who in ("a", "a", "a", "b", "a"):  # each release lets one waiter in
            slots.release(who)
            await _settle()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(go()) == ["a", "b", "a", "b", "a"]


def test_without_a_share_one_tenant_uses_every_slot():
    async def go() -> int:
        slots = FairSlots(4)
        for _ in range(4):
            await asyncio.wait_for(slots.acquire("only"), 0.5)
        return slots.free

    assert asyncio.run(go()) == 0


def test_a_cancelled_waiter_leaves_no_slot_taken():
    async def go() -> tuple[bool, int, dict]:
        slots = FairSlots(1)
        await slots.acquire("a")
        waiter = asyncio.ensure_future(slots.acquire("b"))
        await _settle()
        waiter.cancel()
        slots.release("a")  # handed to nobody: b's wait was cancelled
        await _settle()
        granted = asyncio.ensure_future(slots.acquire("c"))
        await _settle()
        got = granted.done()  # the slot b never took went to the next caller
        slots.release("c")
        return got, slots.free, slots.held

    assert asyncio.run(go()) == (True, 1, {})
