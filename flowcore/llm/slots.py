"""The LLM call slots of one client (its ``concurrency``), shared fairly between tenants (a server's key owners).

First come, first served let one tenant with slow prompts hold every slot while another's calls waited until
their deadline (attack8 #1-#3, tests/serve/test_attacks_serve2.py). Here:

- a tenant holds at most ``share`` slots at once: the rest are always left for the others (a served call of
  another owner starts at once, without waiting for one of the first tenant's long calls to end);
- a freed slot goes to the waiting tenants in turn (round-robin over tenants, first come first served within
  one), never to whoever asks most often;
- otherwise a call takes a free slot at once (nothing to wait for: no extra cost on the common path).

With ``share == capacity`` (the default outside a server) this is a plain semaphore with FIFO hand-over.
Belongs to one event loop (as asyncio.Semaphore).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Hashable

_NOBODY = object()


class FairSlots:
    def __init__(self, capacity: int, share: int | None = None) -> None:
        self.capacity = capacity
        self.share = capacity if share is None else max(1, min(share, capacity))
        self.free = capacity
        self.held: dict[Hashable, int] = {}
        self._waiting: OrderedDict[Hashable, deque[asyncio.Future]] = OrderedDict()  # order: whose turn is next

    def set_share(self, share: int) -> None:
        self.share = max(1, min(share, self.capacity))
        self._hand_over()

    async def acquire(self, tenant: Hashable = None) -> None:
        if self.free > 0 and self.held.get(tenant, 0) < self.share and not self._waiting:
            self._take(tenant)
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(fut)
        self._hand_over()  # a slot may be free for this tenant while others wait at their share
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, then cancelled before it ran: give it back
                self.release(tenant)
            else:
                self._forget(tenant, fut)
            raise

    def release(self, tenant: Hashable = None) -> None:
        n = self.held.get(tenant, 0) - 1
        if n > 0:
            self.held[tenant] = n
        else:
            self.held.pop(tenant, None)
        self.free += 1
        self._hand_over()

    def _take(self, tenant: Hashable) -> None:
        self.free -= 1
        self.held[tenant] = self.held.get(tenant, 0) + 1

    def _forget(self, tenant: Hashable, fut: asyncio.Future) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None:
            try:
                queue.remove(fut)
            except ValueError:
                pass
            if not queue:
                del self._waiting[tenant]

    def _hand_over(self) -> None:
        """Give free slots to waiting tenants under their share, in turn: a tenant served goes to the back."""
        while self.free > 0 and self._waiting:
            tenant = next((t for t in self._waiting if self.held.get(t, 0) < self.share), _NOBODY)
            if tenant is _NOBODY:
                return  # every waiting tenant holds its share: the free slots stay for newcomers
            queue = self._waiting[tenant]
            fut = queue.popleft()
            if queue:
                self._waiting.move_to_end(tenant)
            else:
                del self._waiting[tenant]
            if fut.cancelled():
                continue
            self._take(tenant)
            fut.set_result(None)
