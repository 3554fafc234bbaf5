"""Redis refusing some commands under a real client, as a lost server makes it refuse: a
client on the same server (or in-process stand-in) whose connections raise ConnectionError
before sending a command that `refuse` picks. redis-py's `connection_class` is the seam; no
product function is replaced."""

from collections.abc import Callable
from typing import Any

import redis

Refuse = Callable[[bytes], bool]  # the packed command (RESP bytes) -> refuse it?


def mentioning(*parts: str) -> Refuse:
    """Commands naming any of `parts` in a key or argument (":turn:" for the turn tokens)."""
    wanted = [p.encode() for p in parts]
    return lambda packed: any(p in packed for p in wanted)


def refusing(client: redis.Redis, refuse: Refuse) -> redis.Redis:
    """A client on `client`'s server whose commands (and pipelines) `refuse` picks raise
    ConnectionError("refused"), sent nowhere; the others go through. Close it after use."""
    pool = client.connection_pool
    base: Any = pool.connection_class

    class RefusingConnection(base):  # type: ignore[misc, valid-type]
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            packed = command if isinstance(command, bytes) else b"".join(
                bytes(c) for c in command)
            if refuse(packed):
                raise redis.exceptions.ConnectionError("refused")
            super().send_packed_command(command, check_health)

    return redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=RefusingConnection, **pool.connection_kwargs))
