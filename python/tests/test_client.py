"""The kvrdma Python package against real kvservers on Soft-RoCE."""
import os
import subprocess
import sys
import threading
import time

import pytest

import kvrdma
from conftest import ADDR, ROOT, make_server

SIZES = [0, 1, 7, 100, 1000, 4095, 4096, 4097, 65536, 300_000, (1 << 20) - 1, 1 << 20]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_sizes(kv, size):
    value = os.urandom(size)
    version = kv.put(f"rt:{size}", value)
    assert version >= 1
    assert kv.get(f"rt:{size}") == value
    assert kv.get(f"rt:{size}".encode()) == value  # a str key is its UTF-8 bytes


@pytest.mark.parametrize("size", [0, 1, 100, 4097, 65536, 300_000, 1 << 20])
def test_get_into_a_buffer(kv, size):
    value = os.urandom(size)
    kv.put(f"into:{size}", value)
    buf = bytearray(size + 5)
    assert kv.get_into(f"into:{size}", buf) == size
    assert bytes(buf[:size]) == value
    view = memoryview(buf)[3:]  # a slice: written in place, at its own start
    assert kv.get_into(f"into:{size}", view) == size
    assert bytes(buf[3:3 + size]) == value
    assert kv.get_into(f"into-absent:{size}", buf) is None
    if size > 0:
        with pytest.raises(kvrdma.TooLarge) as e:
            kv.get_into(f"into:{size}", bytearray(size - 1))
        assert f"value of {size} bytes" in str(e.value)
    with pytest.raises(TypeError):
        kv.get_into(f"into:{size}", b"read-only bytes")


def test_get_into_registered_memory_reads_straight_into_it(kv):
    size = 65536
    value = os.urandom(size)
    kv.put("registered", value)
    buf = bytearray(2 * size)
    kv.register_memory(buf)
    before = kv.client_stats()["direct_reads"]
    view = memoryview(buf)[7:]  # inside the registration, at an odd offset
    assert kv.get_into("registered", view) == size
    assert bytes(buf[7:7 + size]) == value
    assert kv.client_stats()["direct_reads"] > before
    view.release()
    with pytest.raises(BufferError):
        buf.extend(b"x")  # held exported while registered: it cannot move
    with pytest.raises(kvrdma.InvalidArgument):
        kv.register_memory(memoryview(buf)[10:20])  # overlaps the registration
    with pytest.raises(TypeError):
        kv.register_memory(b"read-only bytes")
    kv.unregister_memory(buf)
    buf.extend(b"x")  # released
    with pytest.raises(kvrdma.NotFound):
        kv.unregister_memory(buf)
    assert kv.get_into("registered", buf) == size  # the ordinary way again
    assert bytes(buf[:size]) == value


def rendezvous_counts(c):
    """(rendezvous puts, value registrations, values copied) of client c."""
    s = c.client_stats()
    return s["rendezvous_puts"], s["rendezvous_registrations"], s["rendezvous_copies"]


def test_rendezvous_puts_from_bytes_and_from_registered_memory(server):
    # Values of 64 KiB and more: the server pulls each with one RDMA READ. A
    # value in registered memory keeps its registration for the next put of
    # the same bytes; any other value is registered for its put alone.
    with kvrdma.Client(ADDR, server.port, rendezvous_bytes=65536) as c:
        small, big = os.urandom(1000), os.urandom(300_000)
        c.put("rdv:small", small)
        c.put("rdv:big", big)
        assert rendezvous_counts(c) == (1, 1, 0)
        assert c.get("rdv:small") == small and c.get("rdv:big") == big
        buf = bytearray(os.urandom(200_000))
        c.register_memory(buf)
        view = memoryview(buf)[100:100 + 70_000]
        c.put("rdv:reg", view)
        buf[100:110] = b"0123456789"  # the same bytes, new contents: READ again
        c.put("rdv:reg", view)
        assert rendezvous_counts(c) == (3, 2, 0)  # the registration kept from the first put of the view
        assert c.get("rdv:reg") == bytes(buf[100:100 + 70_000])
        view.release()
        c.unregister_memory(buf)


def test_rendezvous_values_copied_instead_of_registered(server):
    # rendezvous_copy_bytes (off by default): a value up to that size outside
    # registered memory is copied into a buffer registered at connect.
    assert kvrdma.DEFAULT_RENDEZVOUS_COPY_BYTES == 0
    with kvrdma.Client(ADDR, server.port, rendezvous_bytes=65536, rendezvous_copy_bytes=100_000) as c:
        copied, registered = os.urandom(90_000), os.urandom(150_000)
        c.put("copy:a", copied)
        c.put("copy:b", registered)
        assert rendezvous_counts(c) == (2, 1, 1)
        assert c.get("copy:a") == copied and c.get("copy:b") == registered


def test_rendezvous_puts_are_on_by_default_from_128_kib(server):
    # The library's default (ClientOptions::rendezvous_bytes), not a copy of it.
    assert kvrdma.DEFAULT_RENDEZVOUS_BYTES == 128 * 1024
    with kvrdma.Client(ADDR, server.port) as c:
        below, at = os.urandom(128 * 1024 - 1), os.urandom(128 * 1024)
        c.put("default:below", below)
        assert c.client_stats()["rendezvous_puts"] == 0
        c.put("default:at", at)
        assert c.client_stats()["rendezvous_puts"] == 1
        assert c.client_stats()["rendezvous_fallbacks"] == 0  # its registration worked
        assert c.get("default:below") == below and c.get("default:at") == at
    with kvrdma.Client(ADDR, server.port, rendezvous_bytes=0) as c:
        c.put("default:off", at)
        assert c.client_stats()["rendezvous_puts"] == 0
        assert c.get("default:off") == at


def test_absent_delete_and_key_types(kv):
    assert kv.get("never-written") is None
    kv.put(b"\x00\xffbin", bytearray(b"ba"))
    assert kv.get(b"\x00\xffbin") == b"ba"
    kv.put("ключ", memoryview(b"mv"))
    assert kv.get("ключ".encode()) == b"mv"
    assert kv.delete("ключ") is True
    assert kv.delete("ключ") is False
    assert kv.get("ключ") is None
    v1 = kv.put("ver", b"1")
    assert kv.put("ver", b"2") > v1
    with pytest.raises(TypeError):
        kv.put("k", "a str value")
    with pytest.raises(TypeError):
        kv.get(42)


def test_errors_mapped(kv, server):
    with pytest.raises(kvrdma.TooLarge) as e:
        kv.put("big", b"x" * ((1 << 20) + 1))
    assert e.value.code == 3 and isinstance(e.value, ValueError)
    with pytest.raises(kvrdma.TooLarge):
        kv.put("k" * 2000, b"v")
    with pytest.raises(kvrdma.InvalidArgument):
        kv.put("", b"v")
    with pytest.raises(kvrdma.Unavailable):
        kvrdma.Client(ADDR, server.port + 3, connect_timeout_ms=2000)
    # Locked: another client's write of a key this one holds.
    with kvrdma.Client(ADDR, server.port) as other:
        with kv.lock("locked-key", lease=30):
            with pytest.raises(kvrdma.Locked):
                other.put("locked-key", b"x")
            assert other.try_lock("locked-key", 1.0) is False
    with pytest.raises(kvrdma.NotFound):
        kv.unlock("not-held")
    kv.close()
    with pytest.raises(kvrdma.InvalidArgument):
        kv.get("k")
    assert kv.closed


def test_server_full_and_auth():
    s = make_server("--log-mb", "12", "--segment-mb", "1", "--max-value-bytes", "300000", "--auth-token", "s3cret")
    try:
        with pytest.raises(kvrdma.RemoteAccess):
            kvrdma.Client(ADDR, s.port)
        with pytest.raises(kvrdma.RemoteAccess):
            kvrdma.Client(ADDR, s.port, auth_token="wrong")
        with kvrdma.Client(ADDR, s.port, auth_token="s3cret") as c:
            with pytest.raises(kvrdma.ServerFull):
                for i in range(200):
                    c.put(f"fill{i}", b"z" * 200_000)
            assert c.get("fill0") == b"z" * 200_000  # nothing lost
    finally:
        s.stop()


def test_connection_lost_and_reconnect():
    s = make_server()
    try:
        c = kvrdma.Client(ADDR, s.port, op_timeout_ms=3000)
        c.put("k", b"v")
        s.kill()
        with pytest.raises((kvrdma.ConnectionLost, kvrdma.Timeout)):
            for _ in range(50):  # the first call after the kill may still succeed from cache state
                c.put("k", b"w")
                time.sleep(0.05)
        c.close()
    finally:
        s.stop()


def test_gil_released_during_a_slow_call(server):
    """While one thread waits in lock() (a network wait that ends in Timeout),
    another Python thread keeps running."""
    holder = kvrdma.Client(ADDR, server.port)
    waiter = kvrdma.Client(ADDR, server.port, op_timeout_ms=1500)
    holder.try_lock("gil-key", 30)
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    deadline = time.monotonic() + 10
    while ticks[0] == 0 and time.monotonic() < deadline:  # the counter runs (bounded wait)
        time.sleep(0.001)
    assert ticks[0] > 0, "the counting thread never ran"
    before = ticks[0]
    t0 = time.monotonic()
    with pytest.raises(kvrdma.Timeout) as e:
        waiter.lock("gil-key", lease=5).acquire()
    waited = time.monotonic() - t0
    during = ticks[0] - before
    stop.set()
    t.join()
    assert isinstance(e.value, TimeoutError)
    assert waited >= 1.0
    # With the GIL held the counter could not move at all during the wait.
    assert during >= 50, f"only {during} ticks in {waited:.2f} s: the GIL was held"
    holder.unlock("gil-key")
    holder.close()
    waiter.close()


def test_batched_equals_single(kv):
    items = {f"batch:{i}": os.urandom(i * 37 % 5000) for i in range(300)}  # > max_in_flight (64)
    kv.put_many(items)
    keys = list(items) + ["batch:absent", b"batch:1"]
    batched = kv.get_many(keys)
    single = [kv.get(k) for k in keys]
    assert batched == single
    assert batched[:300] == list(items.values())
    assert batched[300] is None
    kv.put_many([("pairs:a", b"1"), (b"pairs:b", b"2")])
    assert kv.get_many(["pairs:a", "pairs:b"]) == [b"1", b"2"]
    assert kv.get_many([]) == []
    with pytest.raises(kvrdma.TooLarge) as e:
        kv.put_many({"ok1": b"1", "too-big": b"x" * ((1 << 20) + 1), "ok2": b"2"})
    assert "1 of 3 failed" in str(e.value)
    assert kv.get_many(["ok1", "ok2"]) == [b"1", b"2"]  # the others were applied


def test_lock_released_on_exception(kv, server):
    with kvrdma.Client(ADDR, server.port) as other:
        with pytest.raises(RuntimeError):
            with kv.lock("exc-key", lease=30) as lk:
                assert lk.held
                kv.put("exc-key", b"inside")
                raise RuntimeError("boom")
        assert other.try_lock("exc-key", 1.0) is True  # released by __exit__
        other.unlock("exc-key")
        with kv.lock("exc-key"):
            pass
        assert other.try_lock("exc-key", 1.0) is True


def test_conditional_writes(kv, server):
    """put/delete(if_version=...) are checked by the server; a refusal raises
    VersionMismatch carrying the key's current version (0: no value)."""
    v1 = kv.put("cond", b"one", if_version=0)  # only if absent
    with pytest.raises(kvrdma.VersionMismatch) as e:
        kv.put("cond", b"again", if_version=0)
    assert e.value.current_version == v1 and isinstance(e.value, kvrdma.Error)
    with kvrdma.Client(ADDR, server.port) as other:  # another client's write in between
        v2 = other.put("cond", b"other")
    with pytest.raises(kvrdma.VersionMismatch) as e:
        kv.put("cond", b"mine", if_version=v1)
    assert e.value.current_version == v2
    assert kv.get("cond") == b"other"
    v3 = kv.put("cond", b"mine", if_version=v2)
    assert v3 > v2 and kv.get("cond") == b"mine"
    with pytest.raises(kvrdma.VersionMismatch) as e:
        kv.delete("cond", if_version=v2)
    assert e.value.current_version == v3
    assert kv.delete("cond", if_version=v3) is True
    with pytest.raises(kvrdma.VersionMismatch) as e:  # deleted: no value, version 0
        kv.delete("cond", if_version=v3)
    assert e.value.current_version == 0
    assert kv.put("cond", b"new", if_version=0) > v3
    with pytest.raises(kvrdma.InvalidArgument):
        kv.delete("cond", if_version=0)
    with pytest.raises(ValueError):
        kv.put("cond", b"x", if_version=-1)
    with pytest.raises(TypeError):
        kv.put("cond", b"x", if_version="1")
    assert kv.put("cond", b"plain", if_version=None) > 0  # None: unconditional


def test_stats(kv):
    kv.put("stats-key", b"v")
    s = kv.stats()
    assert s["puts"] >= 1 and s["connections"] >= 1 and "items" in s
    cs = kv.client_stats()
    assert cs["puts"] >= 1


def test_sharded(server, second_server):
    servers = [server.addr, second_server.addr]
    with kvrdma.ShardedClient(servers) as sc:
        assert sc.server_count == 2
        items = {f"shard:{i}": str(i).encode() for i in range(200)}
        sc.put_many(items)
        assert sc.get_many(list(items)) == list(items.values())
        placed = [sc.server_for(k) for k in items]
        assert set(placed) == {0, 1}
        assert placed == [kvrdma.place_key(k, 2) for k in items]
        # Each key is on its server only.
        k = "shard:7"
        with kvrdma.Client(ADDR, [server, second_server][sc.server_for(k)].port) as direct:
            assert direct.get(k) == b"7"
        with kvrdma.Client(ADDR, [server, second_server][1 - sc.server_for(k)].port) as wrong:
            assert wrong.get(k) is None
        assert sc.delete(k) is True and sc.get(k) is None
        with sc.lock("shard:1"):
            sc.put("shard:1", b"locked write")
        assert sc.stats(0)["puts"] >= 1
    with pytest.raises(kvrdma.InvalidArgument):
        kvrdma.ShardedClient([server.addr, server.addr])


def test_example_runs(server):
    ex = os.path.join(ROOT, "examples", "python", "cached_function.py")
    r = subprocess.run([sys.executable, ex, ADDR, str(server.port)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cache hit" in r.stdout, r.stdout
