#!/usr/bin/env python3
"""Writes the seed corpus for the fuzz targets (tests/fuzz/corpus/<target>/).

Seeds are well-formed messages, laid out as docs/DESIGN.md describes, so the
fuzzer starts from inputs that get past the first checks. Run it again after
a format change; the files are committed.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def request(op, flags, key, value, frag_off=0, total=None, rid=7, token=0, if_version=0):
    total = len(value) + frag_off if total is None else total
    hdr = struct.pack('<BBHIQQIIQ', op, flags, len(key) if flags & 1 else 0, total, rid, token, frag_off, len(value),
                      if_version)
    return hdr + (key if flags & 1 else b'') + value


def reply(status, flags, body, rid=7, version=3):
    return struct.pack('<BBHIQQ', status, flags, 0, len(body), rid, version) + body


def stats(pairs):
    out = struct.pack('<H', len(pairs))
    for name, v in pairs:
        out += struct.pack('<B', len(name)) + name + struct.pack('<Q', v)
    return out


PROTOCOL_MAJOR = 11  # common/protocol/handshake.h kProtocolMajor


def preamble(body, major=PROTOCOL_MAJOR, minor=0):
    return b'KVRD' + struct.pack('<HHH', major, minor, 10 + len(body)) + body


def region(addr, length, rkey):
    return struct.pack('<QQI', addr, length, rkey)


def descriptor():
    body = struct.pack('<I', 5) + region(0x7f0000000000, 1 << 20, 11) + struct.pack('<QHQ', 1 << 16, 128, 99)
    body += region(0x7f0001000000, 64 << 20, 12) + region(0x7f0010000000, 8 * 1032, 13)
    body += region(0x7f0020000000, 8 * 4096, 14) + struct.pack('<IHHIII', 4096, 8, 1023, 1 << 20, 50000, 1024)
    return preamble(body)


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


write('fuzz_request', 'put', request(1, 3, b'key', b'value'))
write('fuzz_request', 'put_first_fragment', request(1, 1, b'k', b'0123', total=10))
write('fuzz_request', 'put_last_fragment', request(1, 2, b'', b'89', frag_off=8, total=10))
write('fuzz_request', 'delete', request(2, 3, b'key', b''))
write('fuzz_request', 'stats', request(3, 3, b'', b''))
write('fuzz_request', 'put_if_version', request(1, 3 | 4, b'key', b'value', if_version=41))
write('fuzz_request', 'put_if_absent', request(1, 3 | 4, b'key', b'value'))
write('fuzz_request', 'delete_if_version', request(2, 3 | 4, b'key', b'', if_version=41))
write('fuzz_request', 'reply_version_mismatch', reply(16, 0, b'the key is at version 42', version=42))
write('fuzz_request', 'reply_ok', reply(0, 0, b''))
write('fuzz_request', 'reply_stats', reply(0, 0, stats([(b'puts', 10), (b'items', 7)])))
write('fuzz_request', 'reply_error', reply(2, 0, b'request lengths do not add up'))
# Several writes per message (protocol 10): whole PUT/DELETEs back to back,
# MORE (bit 3) on all but the last; the reply is one record per request.
MORE = 8
write('fuzz_request', 'writes_put_delete_put',
      request(1, 3 | MORE, b'key', b'value', rid=7) + request(2, 3 | 4 | MORE, b'k2', b'', rid=8, if_version=41)
      + request(1, 3, b'key3', b'v', rid=9, token=5))
write('fuzz_request', 'reply_records',
      reply(0, 0, b'', rid=7, version=50) + reply(16, 0, b'the key is at version 42', rid=8, version=42)
      + reply(10, 0, b'the key is locked', rid=9, version=0))
write('fuzz_handshake', 'descriptor', descriptor() + b'\0' * 40)
write('fuzz_handshake', 'connect_request', preamble(struct.pack('<BB', 1, 5) + b'token'))
write('fuzz_handshake', 'reject', preamble(struct.pack('<HH', 12, 20) + b'protocol 2.0 refused'))
# Format 5 entries (common/format/entry.h): a 12-byte header, guard and lengths
# in the order the entry's offset gives (byte 2's top bit: at 4 mod 8).
LENGTHS = 3 | (5 << 10)  # key 3, value 5
write('fuzz_read_path', 'window_and_entry',
      bytes([10, 15, 2]) + b'key' + bytes(16 * 8) + struct.pack('<QI', 0, LENGTHS) + b'key' + b'value')
write('fuzz_read_path', 'window_and_entry_at_4_mod_8',
      bytes([10, 15, 0x82]) + b'key' + bytes(16 * 8) + struct.pack('<IQ', LENGTHS, 0) + b'key' + b'value')


def entry_checksum(lengths, key_and_value, seed):
    """EntryChecksum (common/format/entry.cc), through the system's libxxhash."""
    import ctypes
    lib = ctypes.CDLL('libxxhash.so.0')
    lib.XXH3_64bits_withSeed.restype = ctypes.c_uint64
    lib.XXH3_64bits_withSeed.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    mixed = (seed ^ (lengths * 0x9E3779B97F4A7C15)) & (2**64 - 1)
    return lib.XXH3_64bits_withSeed(key_and_value, len(key_and_value), mixed) & (2**63 - 1)


# Valid entries (seed 0x1234, as the target uses), so that the fuzzer starts
# from inputs DecodeEntry accepts as values, at both parities.
GUARD = entry_checksum(LENGTHS, b'keyvalue', 0x1234)
write('fuzz_read_path', 'valid_entry',
      bytes([10, 15, 2]) + b'key' + bytes(16 * 8) + struct.pack('<QI', GUARD, LENGTHS) + b'key' + b'value')
write('fuzz_read_path', 'valid_entry_at_4_mod_8',
      bytes([10, 15, 0x82]) + b'key' + bytes(16 * 8) + struct.pack('<IQ', LENGTHS, GUARD) + b'key' + b'value')

# fuzz_read_path's world mode (first byte 0xFF; tests/fuzz/fuzz_read_path.cc):
# [homes: 1 << (b % 3)][window: 3 + b % 6][descending READs: b & 1], then
# commands: an action [op 0..5][key 0..2][...] or a GET [6][key][point][plan
# length][plan: actions]. Actions: 0 PUT [offset / 4: u16][value length][value];
# 1 DELETE [offset / 4: u16]; 2 relocate [offset / 4: u16]; 3 an entry image of
# the key [flags: 1 tombstone, 2 other parity's layout, 4 the stale entry's
# size, 8 at any offset, 16 4 bytes on][which stale location][any offset / 4:
# u16][value length][value]; 4 raw bytes [which stale location][length][bytes];
# 5 relocate and put an image where the key was [flags: 1 tombstone, 2 of the
# next key, 4 other parity's layout][offset / 4: u16][value length][value].
# The GET's plan runs at its `point`: 1..127 the n-th point of the GET (before
# each READ, between its 8-byte chunks), 128 + n before its READ n % 8 + 1. Issue 25 item 1's forged entries, each a complete attack
# (the fixed client answers right; tests/putback/run 25.1, 25.1b, 25.1c make
# it abort):


def put(key, off, value):
    return bytes([0, key]) + struct.pack('<H', off // 4) + bytes([len(value)]) + value


def image(key, flags, which=0, off=0, value=b''):
    return bytes([3, key, flags, which]) + struct.pack('<H', off // 4) + bytes([len(value)]) + value


def get(key, point=0, plan=b''):
    return bytes([6, key, point, len(plan)]) + plan


WORLD = bytes([0xFF, 0, 0, 0])  # 1 home, windows of 3 words, READs ascending
# A cached GET of k0 whose cached location (offset 0, parity 0) now holds an
# image of k0 (value "##", or a tombstone), after k0 moved to offset 36 (4 mod 8).
write('fuzz_read_path', 'world_cached_forged_value',
      WORLD + put(0, 0, b'v1') + get(0) + put(0, 36, b'v2') + image(0, 4, value=b'##') + get(0))
write('fuzz_read_path', 'world_cached_forged_tombstone',
      WORLD + put(0, 0, b'v1') + get(0) + put(0, 36, b'v2') + image(0, 1 | 4) + get(0))
# The same at parity 4: key1's entry at 4, its image laid out for 4 mod 8.
write('fuzz_read_path', 'world_cached_forged_value_at_4_mod_8',
      WORLD + put(1, 4, b'abcdef') + get(1) + put(1, 64, b'ghijkl') + image(1, 4, value=b'######') + get(1))
# A late round: after the window READ (point 4: before the entry READ), k0
# moves, a grace period passes (the round is late) and its old offset gets an
# image of k0, or of key1 (another key's bytes: the miss rule must not run).
write('fuzz_read_path', 'world_late_round_forged_value',
      WORLD + put(0, 0, b'v1') + get(0, 4, put(0, 36, b'v2') + image(0, 4, value=b'##')))
write('fuzz_read_path', 'world_late_round_other_key',
      WORLD + put(0, 0, b'v1') + get(0, 4, put(0, 36, b'v2') + image(1, 4, value=b'')))
# No attack: PUTs, a DELETE, a relocation and GETs (what the fuzzer mutates
# into attacks: tests/fuzz/README or the header of fuzz_read_path.cc).
write('fuzz_read_path', 'world_plain',
      WORLD + put(0, 0, b'v1') + put(1, 16, b'w1') + get(0) + get(1) + bytes([2, 0]) + struct.pack('<H', 40)
      + get(0) + bytes([1, 1]) + struct.pack('<H', 80) + get(1) + get(2))
