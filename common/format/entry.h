// Value-log entry: what a client READs at the location an index slot gives.
//
//   offset  size  field
//        0     8  guard     bit 63: NOT-CURRENT; bits 0..62: checksum.
//                           The server writes every entry with the bit SET
//                           (unpublished), clears it with one 8-byte release
//                           store only AFTER an index slot of the key points
//                           at the entry (publication), and sets it again
//                           (one release store) BEFORE the slot moves away
//                           (update, delete, cleaner relocation, eviction).
//                           So while the bit reads clear, the key's slot
//                           names this entry: it is the key's current
//                           entry. An entry that is never published (the
//                           tombstone of an absent key, a PUT answered
//                           ServerFull, a cleaner copy that lost to an
//                           update) keeps the bit set for as long as its
//                           segment is in use. The checksum is the low 63
//                           bits of XXH3-64(seed) over bytes
//                           [8, 16 + key_len + value_len): the header fields
//                           below, the key and the value. The guard word is
//                           therefore outside the checksum by construction.
//        8     4  version   per-key version: 1 at first insert, +1 per
//                           update/delete (wraps modulo 2^32).
//       12     4  lengths   bits 0..9 key length (1..1023), bits 10..30 value
//                           length (0..2 MiB-1), bit 31 TOMBSTONE (the key is
//                           deleted; value length 0).
//       16     k  key
//     16+k     v  value
//   16+k+v     p  padding to the next multiple of 8 (zero), so the next
//                 entry's guard word is 8-aligned.
//
// A reader accepts an entry only if the lengths are plausible and agree with
// the slot's size class, the checksum matches and the key is its key: a torn
// entry (READ racing a write), a recycled one (segment reused) or garbage is
// rejected with overwhelming probability (a 63-bit checksum). A reader that
// did not just read the slot (a cached location, or a READ that outlived the
// GET deadline) also requires NOT-CURRENT clear (docs/DESIGN.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "common/format/format_constants.h"

namespace kvrdma {

struct EntryHeader {
  uint64_t guard;    // not-current bit | checksum, see above
  uint32_t version;  // per-key version
  uint32_t lengths;  // key length | value length | tombstone, see above
};

static_assert(sizeof(EntryHeader) == kEntryHeaderBytes);
static_assert(alignof(EntryHeader) == 8);
static_assert(offsetof(EntryHeader, guard) == 0);
static_assert(offsetof(EntryHeader, version) == 8);
static_assert(offsetof(EntryHeader, lengths) == 12);
static_assert(std::is_trivially_copyable_v<EntryHeader>);
static_assert(std::is_standard_layout_v<EntryHeader>);

inline constexpr uint64_t kGuardNotCurrentBit = uint64_t{1} << 63;
inline constexpr uint64_t kGuardChecksumMask = kGuardNotCurrentBit - 1;
inline constexpr size_t kEntryChecksumOffset = offsetof(EntryHeader, version);  // checksum starts here

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

// The checksum stored in the guard: low 63 bits of XXH3-64 over `n` bytes
// starting at the entry's version field.
uint64_t EntryChecksum(const std::byte* from_version, size_t n, uint64_t seed) noexcept;

// Encodes a complete entry into plain (non-shared) memory: tests, fuzzers,
// benchmarks and the client's own buffers. The server writes entries into
// RDMA-visible memory itself (server/store/log.cc) with the same fields.
// Returns the entry's size, or 0 if `out` is too small or a length is out of
// range.
size_t EncodeEntry(std::span<std::byte> out, std::string_view key, std::string_view value,
                   uint32_t version, bool tombstone, uint64_t seed) noexcept;

}  // namespace kvrdma
