"""kvrdma: a Python client for the kvrdma RDMA key-value store.

GETs are one-sided RDMA READs (the server's CPU is not involved); PUT and
DELETE are messages to the server's workers. Built over libkvrdma (the C++
client library) with pybind11; every call that waits on the network
releases the GIL.

    import kvrdma
    with kvrdma.Client("10.0.0.1") as kv:
        kv.put("user:1", b"alice")
        assert kv.get("user:1") == b"alice"
        assert kv.get("nobody") is None          # absent: None, not an exception
        with kv.lock("user:1", lease=5.0):       # RDMA compare-and-swap lease
            kv.put("user:1", b"bob")

Keys are str (UTF-8) or bytes; values are bytes-like, returned as bytes.
Errors raise kvrdma.Error subclasses, one per kvrdma::Status code
(TooLarge, ServerFull, ConnectionLost, Timeout, Locked, ...).
"""
from __future__ import annotations

from typing import Sequence, Union

from . import _kvrdma
from ._kvrdma import (  # noqa: F401  (re-exported)
    DEFAULT_RENDEZVOUS_BYTES,
    DEFAULT_RENDEZVOUS_COPY_BYTES,
    ConnectionLost,
    Corruption,
    Error,
    Internal,
    InvalidArgument,
    IOError,
    Locked,
    NoResource,
    NotFound,
    Protocol,
    RemoteAccess,
    Retry,
    ServerFull,
    Timeout,
    TooLarge,
    Unavailable,
    VersionMismatch,
    place_key,
)

__version__ = "0.1.0"
__all__ = [
    "Client", "ShardedClient", "Lock", "place_key", "DEFAULT_RENDEZVOUS_BYTES", "DEFAULT_RENDEZVOUS_COPY_BYTES", "Error", "NotFound",
    "InvalidArgument", "TooLarge",
    "ServerFull", "NoResource", "RemoteAccess", "ConnectionLost", "Corruption", "Timeout", "Locked",
    "IOError", "Protocol", "Retry", "Internal", "Unavailable", "VersionMismatch",
]

Key = Union[str, bytes]
Value = Union[bytes, bytearray, memoryview]


class Lock:
    """A lease on a key's lock, taken with RDMA compare-and-swap on the
    server's lock table. Use it as a context manager (client.lock(key)):
    entering waits for the lock (raises Timeout after op_timeout_ms),
    leaving releases it, also when the block raises. While it is held, this
    client's put/delete of the key carry its token; other clients' writes of
    the key fail with Locked until it is released or the lease ends. The
    lease is not renewed in the background: call acquire() again to renew."""

    def __init__(self, client, key: Key, lease: float):
        self._client = client
        self.key = key
        self.lease = lease
        self.held = False

    def acquire(self) -> "Lock":
        """Waits for the lock (or renews it if held). Timeout if another
        client keeps it past op_timeout_ms."""
        self._client._lock(self.key, self.lease)
        self.held = True
        return self

    def release(self) -> None:
        """Releases it. NotFound if this client does not hold it; Locked if
        the lease had ended and another client took it over."""
        self.held = False
        self._client.unlock(self.key)

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.held:
            return
        if exc_type is None:
            self.release()
            return
        # The block raised: release, but never hide its exception behind ours.
        try:
            self.release()
        except Error:
            pass


class _Common:
    def lock(self, key: Key, lease: float = 10.0) -> Lock:
        """A Lock on key with a lease of `lease` seconds (not yet taken:
        use `with client.lock(key):` or .acquire())."""
        return Lock(self, key, lease)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


class Client(_Common, _kvrdma._Client):
    """A connection to one kvserver.

    Client(host, port=7471, *, device="", put_mode="send",
           connect_timeout_ms=5000, op_timeout_ms=5000,
           location_cache_entries=4096, max_in_flight=64, auth_token="",
           rendezvous_bytes=DEFAULT_RENDEZVOUS_BYTES,
           rendezvous_copy_bytes=DEFAULT_RENDEZVOUS_COPY_BYTES)

    Connects at once (Unavailable, RemoteAccess, Protocol, Timeout on
    failure). Methods: get(key) -> bytes | None; get_into(key, buffer) ->
    length | None (into your writable buffer, no bytes object made;
    register_memory(buffer) first and values of 4 KiB and more are READ
    straight into it, no copy at all; unregister_memory(buffer) ends it);
    put(key, value) -> version (the server pulls a value of
    rendezvous_bytes or more, 128 KiB by default, half that while other
    operations are in flight, 0 = never, with one RDMA READ instead of
    taking it in fragments; one in registered memory keeps
    its registration for the next put of the same bytes; with
    rendezvous_copy_bytes, 0 = off by default, a value up to that size
    outside registered memory is copied into a buffer registered once
    instead of registered for its put);
    delete(key) -> bool (False if it was absent); get_many(keys) ->
    list[bytes | None] and put_many(mapping or pairs), pipelined (one
    doorbell per window of up to max_in_flight operations); lock(key,
    lease) -> Lock; try_lock/unlock; stats() -> the server's counters;
    client_stats() -> this client's; close(). Safe to share between threads
    (calls on one Client are serialized); one Client per thread is faster.
    """

    def __init__(self, host: str, port: int = 7471, *, device: str = "", put_mode: str = "send",
                 connect_timeout_ms: int = 5000, op_timeout_ms: int = 5000,
                 location_cache_entries: int = 4096, max_in_flight: int = 64, auth_token: str = "",
                 rendezvous_bytes: int = _kvrdma.DEFAULT_RENDEZVOUS_BYTES,
                 rendezvous_copy_bytes: int = _kvrdma.DEFAULT_RENDEZVOUS_COPY_BYTES):
        super().__init__(host, port, device, put_mode, connect_timeout_ms, op_timeout_ms,
                         location_cache_entries, max_in_flight, auth_token, rendezvous_bytes,
                         rendezvous_copy_bytes)


class ShardedClient(_Common, _kvrdma._ShardedClient):
    """One client over several kvservers; each key lives on the server chosen
    by consistent hashing (server_for(key), the same placement as the C++
    ShardedClient). servers: "HOST[:PORT]" strings, in the same order for
    every client of a deployment. get/put/delete/get_many/put_many/lock as
    Client; stats(i) for server i; server_count."""

    def __init__(self, servers: Sequence[str], port: int = 7471, *, device: str = "", put_mode: str = "send",
                 connect_timeout_ms: int = 5000, op_timeout_ms: int = 5000,
                 location_cache_entries: int = 4096, max_in_flight: int = 64, auth_token: str = "",
                 rendezvous_bytes: int = _kvrdma.DEFAULT_RENDEZVOUS_BYTES,
                 rendezvous_copy_bytes: int = _kvrdma.DEFAULT_RENDEZVOUS_COPY_BYTES):
        if isinstance(servers, (str, bytes)):
            raise TypeError("servers must be a sequence of 'HOST[:PORT]' strings")
        super().__init__(list(servers), port, device, put_mode, connect_timeout_ms, op_timeout_ms,
                         location_cache_entries, max_in_flight, auth_token, rendezvous_bytes,
                         rendezvous_copy_bytes)
