"""Redis refusing or racing under a real client, as a lost server or another process makes
it: a client on the same server (or in-process stand-in) whose connections look at each
command before sending it. redis-py's `connection_class` is the seam; no product function
is replaced."""

from collections.abc import Callable
from typing import Any

import redis

Refuse = Callable[[bytes], bool]  # the packed command (RESP bytes) -> refuse it?


def mentioning(*parts: str) -> Refuse:
    """Commands naming any of `parts` in a key or argument (":turn:" for the turn tokens)."""
    wanted = [p.encode() for p in parts]
    return lambda packed: any(p in packed for p in wanted)


def words(packed: bytes) -> list[str]:
    """The command's name and arguments, from its RESP bytes (one command or a pipeline's)."""
    lines = packed.split(b"\r\n")
    return [lines[i + 1].decode(errors="replace") for i, line in enumerate(lines[:-1])
            if line.startswith(b"$")]


def intercepting(client: redis.Redis, before_send: Callable[[bytes], None]) -> redis.Redis:
    """A client on `client`'s server that calls `before_send(packed)` before each command or
    pipeline goes out; an exception it raises is the command's. Close it after use."""
    pool = client.connection_pool
    base: Any = pool.connection_class

    class InterceptedConnection(base):  # type: ignore[misc, valid-type]
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            before_send(command if isinstance(command, bytes)
                        else b"".join(bytes(c) for c in command))
            super().send_packed_command(command, check_health)

    return redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=InterceptedConnection, **pool.connection_kwargs))


def refusing(client: redis.Redis, refuse: Refuse) -> redis.Redis:
    """A client on `client`'s server whose commands (and pipelines) `refuse` picks raise
    ConnectionError("refused"), sent nowhere; the others go through. Close it after use."""
    def before_send(packed: bytes) -> None:
        if refuse(packed):
            raise redis.exceptions.ConnectionError("refused")
    return intercepting(client, before_send)
