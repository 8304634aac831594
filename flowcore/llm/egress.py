"""Where the LLM client may connect (issue 25.3). In a team deployment the endpoint URL is something a member
typed, and the server would POST prompts and a key to whatever it names: a listener of theirs, the cloud's
metadata service at 169.254.169.254, the workspace's PostgreSQL, the app itself on 127.0.0.1.

The policy (:class:`Egress`, built from the environment):

- ``MERMAIDFLOW_ENDPOINTS``: the endpoints the server may call, as URLs (``https://api.openai.com/v1,
  http://10.0.0.5:8000/v1``). When it is set, an outbound URL must be under one of them (same scheme, host and
  port; the path at a ``/`` boundary). ``OPENAI_BASE_URL``, the operator's own endpoint, is always allowed.
- In a team deployment every address the host name resolves to must be a public one: private (10/8, 172.16/12,
  192.168/16, fc00::/7), loopback (127/8, ::1; the server's own services), link-local (169.254/16 with the
  cloud's metadata service, fe80::/10), shared (100.64/10), unspecified, reserved and multicast addresses are
  refused, unless the endpoint is listed (or is ``OPENAI_BASE_URL``). Served on loopback for one person, local
  endpoints are what the app is for (a llama.cpp server on 127.0.0.1), so this rule is off there.

It is checked twice: when a URL is typed (a message naming what is wrong), and at every connection the client
makes. There the client resolves the name itself, checks every address it got, and connects to an address it
checked, so a name re-pointed at 127.0.0.1 after the check (DNS rebinding of the endpoint) gets nowhere. A
guarded client follows no redirect (a 307 elsewhere would carry the prompt along) and uses no proxy from the
environment (a proxy would make the connection for it).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ENDPOINTS_ENV = "MERMAIDFLOW_ENDPOINTS"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class EndpointRefused(ValueError):
    """An outbound URL or connection the policy does not allow (the message says why)."""


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int
    path: str = ""

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointRefused(f"{url!r} is not an http:// or https:// URL with a host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise EndpointRefused(f"{url!r} has no valid port") from None
        return cls(parts.scheme, parts.hostname.lower().rstrip("."), port, parts.path.rstrip("/"))

    def under(self, entry: Origin) -> bool:
        return (self.scheme, self.host, self.port) == (entry.scheme, entry.host, entry.port) and (
            not entry.path or self.path == entry.path or self.path.startswith(entry.path + "/"))


def public_address(address: str) -> bool:
    """Whether one resolved address may be called from a team server (globally routable, not multicast)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:  # a NAT64 gateway would reach the IPv4 address in its last 32 bits
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.is_global and not ip.is_multicast


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (an address literal resolves to itself)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise EndpointRefused(f"the host {host!r} could not be resolved ({e})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Egress:
    team: bool = False
    listed: tuple[Origin, ...] = ()  # MERMAIDFLOW_ENDPOINTS
    own: tuple[Origin, ...] = ()  # OPENAI_BASE_URL: the operator's endpoint, always allowed

    @classmethod
    def from_env(cls, team: bool | None = None, env: Mapping[str, str] | None = None) -> Egress:
        """The policy of this process: ``team`` from the caller (the app knows how it is served), else from
        MERMAIDFLOW_LOGIN; ValueError naming a MERMAIDFLOW_ENDPOINTS entry that is not a URL."""
        env = os.environ if env is None else env
        if team is None:
            team = (env.get("MERMAIDFLOW_LOGIN") or "").strip().lower() in ("1", "true", "yes", "on")
        listed = []
        for raw in (x.strip() for x in (env.get(ENDPOINTS_ENV) or "").split(",")):
            if raw:
                try:
                    listed.append(Origin.of(raw))
                except EndpointRefused as e:
                    raise ValueError(f"{ENDPOINTS_ENV}: {e}") from None
        own = (env.get("OPENAI_BASE_URL") or "").strip()
        try:
            owns = (Origin.of(own),) if own else ()
        except EndpointRefused:
            owns = ()  # LLMSettings.from_env reports a bad OPENAI_BASE_URL
        return cls(bool(team), tuple(listed), owns)

    @property
    def active(self) -> bool:
        return self.team or bool(self.listed)

    def _named(self, host: str, port: int) -> bool:
        return any((o.host, o.port) == (host, port) for o in (*self.listed, *self.own))

    def check_url(self, url: str | None) -> None:
        """Raise EndpointRefused (saying why) unless the client may call ``url`` (None: OpenAI's own)."""
        if not self.active:
            return
        o = Origin.of(url or "https://api.openai.com/v1")
        if self.listed and not any(o.under(e) for e in (*self.listed, *self.own)):
            raise EndpointRefused(f"{url} is not one of the endpoints this server may call ({ENDPOINTS_ENV})")
        self.addresses(o.host, o.port)

    def addresses(self, host: str, port: int) -> list[str]:
        """The addresses of ``host`` a connection may go to; EndpointRefused when it may go to none."""
        host = host.lower().rstrip(".")
        if self.listed and not self._named(host, port):
            raise EndpointRefused(f"{host}:{port} is not one of the endpoints this server may call ({ENDPOINTS_ENV})")
        found = resolve(host, port)
        if self.team and not self._named(host, port):
            private = [a for a in found if not public_address(a)]
            if private:
                raise EndpointRefused(f"{host} resolves to {', '.join(private)}, a private, loopback or link-local "
                                      f"address, which a team server calls only when it is listed in {ENDPOINTS_ENV}")
        return found


def from_settings(policy: Egress | None) -> Egress:
    """The policy a client follows: the one its settings carry, else this process's environment's."""
    return policy if policy is not None else Egress.from_env()


# -- guarded HTTP clients (httpx2 / httpcore2, what the openai client runs on) ----------------------------------

def _backends() -> tuple[Any, Any]:
    import httpcore2

    class Refused(httpcore2.ConnectError):
        """A connection the policy refused (httpx2 reports it as a ConnectError with this message)."""

    class AsyncGuard(httpcore2.AsyncNetworkBackend):
        def __init__(self, policy: Egress) -> None:
            self.policy, self.inner = policy, httpcore2.AnyIOBackend()

        async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                              local_address: str | None = None, socket_options: Any = None) -> Any:
            import anyio

            try:
                found = await anyio.to_thread.run_sync(self.policy.addresses, host, port)
            except EndpointRefused as e:
                raise Refused(f"refused by the endpoint policy: {e}") from None
            last: Exception | None = None
            for address in found:  # only addresses that were checked: the name is not looked up again
                try:
                    return await self.inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                        socket_options=socket_options)
                except httpcore2.ConnectError as e:
                    last = e
            raise last or Refused(f"{host} has no address")

        async def connect_unix_socket(self, *args: Any, **kw: Any) -> Any:
            raise Refused("refused by the endpoint policy: unix sockets are not endpoints")

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    class SyncGuard(httpcore2.NetworkBackend):
        def __init__(self, policy: Egress) -> None:
            self.policy, self.inner = policy, httpcore2.SyncBackend()

        def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                        local_address: str | None = None, socket_options: Any = None) -> Any:
            try:
                found = self.policy.addresses(host, port)
            except EndpointRefused as e:
                raise Refused(f"refused by the endpoint policy: {e}") from None
            last: Exception | None = None
            for address in found:
                try:
                    return self.inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                  socket_options=socket_options)
                except httpcore2.ConnectError as e:
                    last = e
            raise last or Refused(f"{host} has no address")

        def connect_unix_socket(self, *args: Any, **kw: Any) -> Any:
            raise Refused("refused by the endpoint policy: unix sockets are not endpoints")

        def sleep(self, seconds: float) -> None:
            self.inner.sleep(seconds)

    return AsyncGuard, SyncGuard


def http_client(policy: Egress, ssl_context: ssl.SSLContext, *, sync: bool = False, **kwargs: Any) -> Any:
    """An httpx2 client for the openai client whose every connection goes through ``policy``, with no redirects
    and no proxy from the environment (the openai client's own connection limits)."""
    import httpcore2
    import httpx2

    async_guard, sync_guard = _backends()
    pool = {"ssl_context": ssl_context, "max_connections": 1000, "max_keepalive_connections": 100,
            "keepalive_expiry": 5.0}
    if sync:
        transport: Any = httpx2.HTTPTransport(verify=ssl_context, trust_env=False)
        transport._pool = httpcore2.ConnectionPool(**pool, network_backend=sync_guard(policy))  # noqa: SLF001
        return httpx2.Client(transport=transport, follow_redirects=False, trust_env=False, **kwargs)
    transport = httpx2.AsyncHTTPTransport(verify=ssl_context, trust_env=False)
    # httpx2 builds its pool with no way to pass a network backend: the pool is swapped for a guarded one
    transport._pool = httpcore2.AsyncConnectionPool(**pool, network_backend=async_guard(policy))  # noqa: SLF001
    return httpx2.AsyncClient(transport=transport, follow_redirects=False, trust_env=False, **kwargs)
