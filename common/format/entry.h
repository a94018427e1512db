// Value-log entry: what a client READs at the location an entry ref gives.
// Entries start 4-aligned. The 12-byte header is two words, the guard (8
// bytes) and the lengths (4), placed so that the guard is 8-aligned: which
// way round depends on the entry's offset `off` in the log (GuardAt,
// LengthsAt below):
//
//   off % 8 == 0:  +0 guard (8)    +8 lengths (4)   +12 key, value, padding
//   off % 8 == 4:  +0 lengths (4)  +4 guard (8)     +12 key, value, padding
//
//   guard     bit 63: NOT-CURRENT; bits 0..62: checksum.
//             The server writes every entry with the bit SET (unpublished),
//             clears it with one 8-byte release store only AFTER an index
//             ref of the key points at the entry (publication), and sets it
//             again (one release store) BEFORE the ref moves away (update,
//             delete, cleaner relocation, eviction). So while the bit reads
//             clear, the key's ref names this entry: it is the key's current
//             entry. An entry that is never published (the tombstone of an
//             absent key, a PUT answered ServerFull, a cleaner copy that lost
//             to an update) keeps the bit set for as long as its segment is in
//             use. The checksum is the low 63 bits of XXH3-64 over the key and
//             the value, seeded with the seed mixed with the lengths word
//             (EntryChecksum): it covers the lengths, the key and the value,
//             and nothing that depends on where the entry is, so a cleaner
//             copy at another offset keeps it. The guard is outside it by
//             construction, and is read in one 8-byte load: its bit and its
//             checksum are always of the same entry.
//   lengths   bits 0..9 key length (1..1023), bits 10..30 value length
//             (0..2 MiB-1), bit 31 TOMBSTONE (the key is deleted; value length
//             0).
//   key, value, then zero padding to the next multiple of 4.
//
// There is no per-key version in the entry (format 4 had 4 bytes of it): the
// version a PUT or DELETE reports is the server's write sequence number
// (server/store/store.h), which grows with every write of every key.
//
// A reader accepts an entry only if the lengths are plausible and agree with
// the ref's size class, the checksum matches and the key is its key: a torn
// entry (READ racing a write), a recycled one (segment reused) or garbage is
// rejected with overwhelming probability (a 63-bit checksum). A reader that
// did not just read the ref (a cached location, or a READ that outlived the
// round limit) also requires NOT-CURRENT clear (docs/DESIGN.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "common/format/format_constants.h"

namespace kvrdma {

// The header's two words as read (not a memory layout: where they sit
// depends on the entry's offset, GuardAt / LengthsAt).
struct EntryHeader {
  uint64_t guard = 0;    // not-current bit | checksum, see above
  uint32_t lengths = 0;  // key length | value length | tombstone, see above
};

// Byte offsets of the guard and the lengths inside an entry that starts at
// log offset `entry_off` (a multiple of kEntryAlign): the guard is the
// 8-aligned word of the header's first 12 bytes.
constexpr size_t GuardAt(uint64_t entry_off) noexcept { return (entry_off & 4) != 0 ? 4 : 0; }
constexpr size_t LengthsAt(uint64_t entry_off) noexcept { return (entry_off & 4) != 0 ? 0 : 8; }
inline constexpr size_t kEntryKeyOffset = kEntryHeaderBytes;  // the key starts right after the header
static_assert(kEntryAlign == 4 && kEntryHeaderBytes == 12);
static_assert((0 + GuardAt(0)) % 8 == 0 && (4 + GuardAt(4)) % 8 == 0, "the guard is 8-aligned");
static_assert(GuardAt(0) + 8 <= kEntryHeaderBytes && LengthsAt(0) + 4 <= kEntryHeaderBytes);
static_assert(GuardAt(4) + 8 <= kEntryHeaderBytes && LengthsAt(4) + 4 <= kEntryHeaderBytes);
static_assert(LengthsAt(0) >= GuardAt(0) + 8 && GuardAt(4) >= LengthsAt(4) + 4, "the words do not overlap");

inline constexpr uint64_t kGuardNotCurrentBit = uint64_t{1} << 63;
inline constexpr uint64_t kGuardChecksumMask = kGuardNotCurrentBit - 1;

inline constexpr unsigned kKeyLenBits = 10;
inline constexpr unsigned kValueLenBits = 21;
inline constexpr uint32_t kKeyLenMask = (1u << kKeyLenBits) - 1;
inline constexpr uint32_t kValueLenMask = (1u << kValueLenBits) - 1;
inline constexpr uint32_t kTombstoneBit = 1u << 31;
static_assert(kKeyLenMask == kMaxKeyBytes && kValueLenMask == kMaxValueBytes);
static_assert(kKeyLenBits + kValueLenBits + 1 == 32);

// REQUIRES: 1 <= key_len <= kMaxKeyBytes, value_len <= kMaxValueBytes.
constexpr uint32_t PackLengths(size_t key_len, size_t value_len, bool tombstone) noexcept {
  return static_cast<uint32_t>(key_len) | (static_cast<uint32_t>(value_len) << kKeyLenBits) |
         (tombstone ? kTombstoneBit : 0u);
}
constexpr uint32_t LengthsKey(uint32_t lengths) noexcept { return lengths & kKeyLenMask; }
constexpr uint32_t LengthsValue(uint32_t lengths) noexcept { return (lengths >> kKeyLenBits) & kValueLenMask; }
constexpr bool LengthsTombstone(uint32_t lengths) noexcept { return (lengths & kTombstoneBit) != 0; }
constexpr size_t LengthsEntryBytes(uint32_t lengths) noexcept {
  return EntryBytes(LengthsKey(lengths), LengthsValue(lengths));
}

// The checksum stored in the guard: low 63 bits of XXH3-64 over the `n`
// bytes of key and value that start at the entry's key, seeded with `seed`
// mixed with the lengths word (so the lengths are covered too).
uint64_t EntryChecksum(uint32_t lengths, const std::byte* key_and_value, size_t n, uint64_t seed) noexcept;
// The smallest value copied in the checksum's pass (EntryChecksumCopy,
// EntryChecksumCopyIn): below it a separate copy (glibc's memcpy, from
// cache) was as fast or faster; at 16 KiB the one pass took 0.8x the time of
// the two, at 64 KiB 0.63x (bench/store_bench.cc, BM_EntryChecksumAndCopy;
// docs/PERFORMANCE.md).
inline constexpr size_t kFusedCopyMinBytes = 16 * 1024;
// The same checksum, and copies bytes [from, n) of key_and_value to dst (a
// GET's value into the caller's buffer) in the same pass where the CPU has
// AVX2 (checksum_avx2.cc), else after it. dst must not overlap the input.
uint64_t EntryChecksumCopy(uint32_t lengths, const std::byte* key_and_value, size_t n, size_t from, std::byte* dst,
                           uint64_t seed) noexcept;
// The other way: copies src's n - from bytes to key_and_value + from (a
// value into the log after its key) and returns the checksum of
// key_and_value's n bytes, in one pass over src where the CPU has AVX2: the
// checksum is of the bytes the destination holds. src must not overlap it.
uint64_t EntryChecksumCopyIn(uint32_t lengths, std::byte* key_and_value, size_t n, size_t from, const std::byte* src,
                             uint64_t seed) noexcept;
// The same checksum over key and value bytes that lie in two pieces: the
// first `a`, then `b` (a GET that READ the value into the caller's memory).
uint64_t EntryChecksum(uint32_t lengths, std::span<const std::byte> a, std::span<const std::byte> b,
                       uint64_t seed) noexcept;
// The same checksum of a key and a value that are not contiguous (XXH3's
// streaming form, which equals the one-shot one): what a writer that holds
// the value apart from the key computes, e.g. a rendezvous PUT's client.
uint64_t EntryChecksumOf(std::string_view key, std::span<const std::byte> value, uint64_t seed) noexcept;

// Whether the n bytes at a and b are equal: a key against an entry's key (a
// GET's decode, the server's index lookup). Keys are short: up to 16 bytes
// in two overlapping loads of each side and no call (memcmp's call and the
// registers its callers save around it cost a lookup ~20 instructions);
// longer ones by memcmp.
namespace detail {
// Whether p and q agree in their first and last sizeof(W) bytes (n >= sizeof(W)).
template <typename W>
inline bool EndsEqual(const unsigned char* p, const unsigned char* q, size_t n) noexcept {
  W p0, p1, q0, q1;
  std::memcpy(&p0, p, sizeof(W));
  std::memcpy(&p1, p + n - sizeof(W), sizeof(W));
  std::memcpy(&q0, q, sizeof(W));
  std::memcpy(&q1, q + n - sizeof(W), sizeof(W));
  return ((p0 ^ q0) | (p1 ^ q1)) == 0;
}
}  // namespace detail
inline bool KeyBytesEqual(const void* a, const void* b, size_t n) noexcept {
  const auto* p = static_cast<const unsigned char*>(a);
  const auto* q = static_cast<const unsigned char*>(b);
  if (n > 16) return std::memcmp(p, q, n) == 0;
  if (n >= 8) return detail::EndsEqual<uint64_t>(p, q, n);
  if (n >= 4) return detail::EndsEqual<uint32_t>(p, q, n);
  // 0..3 bytes: the first, middle and last byte cover them.
  return n == 0 || (p[0] == q[0] && p[n / 2] == q[n / 2] && p[n - 1] == q[n - 1]);
}

// Encodes a complete entry into plain (non-shared) memory, laid out as for
// log offset `entry_off` (only whether it is 8-aligned matters): tests,
// fuzzers, benchmarks. The server writes entries into RDMA-visible memory
// itself (Store::WriteEntry) with the same fields. The guard's not-current
// bit is clear. Returns the entry's size, or 0 if `out` is too small, a
// length is out of range or `entry_off` is not a multiple of kEntryAlign.
size_t EncodeEntry(std::span<std::byte> out, uint64_t entry_off, std::string_view key, std::string_view value,
                   bool tombstone, uint64_t seed) noexcept;

}  // namespace kvrdma
