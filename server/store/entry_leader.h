// The entry leader: 8 bytes the server writes in the log just before each
// entry. Server-private: no ref points at it and no client interprets it (a
// client's READ of an entry may cover the next entry's leader, as it may
// cover any bytes after the entry). It carries what the entry itself does
// not: the write's version, which conditional writes compare and which a
// durable store keeps across restarts (docs/DESIGN.md, "Versions" and
// "Durability").
//
//   | version:56 | check:8 |   (a little-endian u64; the check is the top byte)
//
// version: the write's version (Store::Put), 1 .. 2^56 - 1; 0 marks an entry
// that is not a write: never published (a refused write keeps its segment
// walkable). In a segment file, 0 also marks a write that is no longer its
// key's newest (a mark DurableLog writes over its leader once the newer
// write is durable); in memory a leader never changes.
// check: CRC-8 (polynomial 0x07) of the seven version bytes, xor 0x5a. A CRC
// catches every single-bit flip; the xor makes an all-zero word (a log or
// file that was never written) invalid. Written before the entry's bytes in
// the same store, so a write torn after a valid entry's last byte cannot
// have left its leader half-written (DESIGN "Durability").
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/format/format_constants.h"

namespace kvrdma {

inline constexpr size_t kLeaderBytes = 8;
inline constexpr uint64_t kMaxWriteVersion = (uint64_t{1} << 56) - 1;
static_assert(kLeaderBytes % kEntryAlign == 0, "a leader keeps the entry after it aligned");

namespace detail {
// CRC-8 (polynomial 0x07) of each byte value.
constexpr auto kCrc8Table = [] {
  struct Table {
    uint8_t v[256];
  } t{};
  for (int i = 0; i < 256; ++i) {
    uint8_t crc = static_cast<uint8_t>(i);
    for (int b = 0; b < 8; ++b) crc = static_cast<uint8_t>((crc & 0x80) ? (crc << 1) ^ 0x07 : crc << 1);
    t.v[i] = crc;
  }
  return t;
}();
// The check byte one table lookup per byte, each depending on the last.
constexpr uint8_t LeaderCheckBytewise(uint64_t version) noexcept {
  uint8_t crc = 0;
  for (int i = 0; i < 7; ++i) crc = kCrc8Table.v[crc ^ static_cast<uint8_t>(version >> (8 * i))];
  return static_cast<uint8_t>(crc ^ 0x5a);
}
// The same CRC is linear (a zero start, no final xor inside), so it is the
// xor of each byte's own share: byte i followed by 6 - i zero bytes, i.e.
// the table applied 7 - i times. Seven independent lookups instead of a
// chain of seven: recovery checks every leader of the log.
constexpr auto kCrc8ByteShares = [] {
  struct Tables {
    uint8_t v[7][256];
  } t{};
  for (int x = 0; x < 256; ++x) {
    uint8_t c = static_cast<uint8_t>(x);
    for (int i = 6; i >= 0; --i) {
      c = kCrc8Table.v[c];
      t.v[i][x] = c;
    }
  }
  return t;
}();
}  // namespace detail

constexpr uint8_t LeaderCheck(uint64_t version) noexcept {
  uint8_t crc = 0x5a;
  // Unrolled: GCC -O2 kept the loop (11 instructions a byte, ~80 of a small
  // PUT's server instructions; unrolled, 4 a byte).
#pragma GCC unroll 7
  for (int i = 0; i < 7; ++i) crc ^= detail::kCrc8ByteShares.v[i][static_cast<uint8_t>(version >> (8 * i))];
  return crc;
}
// The table-driven CRC is the bitwise one (x^8 + x^2 + x + 1), and the
// shares give the chained lookups' byte (tests/store: on random versions).
static_assert(detail::kCrc8Table.v[1] == 0x07 && detail::kCrc8Table.v[0x80] == 0x89);
static_assert(LeaderCheck(0) == detail::LeaderCheckBytewise(0) && LeaderCheck(1) == detail::LeaderCheckBytewise(1) &&
              LeaderCheck(0x00ffffffffffffffull) == detail::LeaderCheckBytewise(0x00ffffffffffffffull) &&
              LeaderCheck(0x0012345678abcdefull) == detail::LeaderCheckBytewise(0x0012345678abcdefull));

constexpr uint64_t PackLeader(uint64_t version) noexcept {
  return (version & kMaxWriteVersion) | (uint64_t{LeaderCheck(version & kMaxWriteVersion)} << 56);
}
constexpr uint64_t LeaderVersion(uint64_t leader) noexcept { return leader & kMaxWriteVersion; }
constexpr bool LeaderValid(uint64_t leader) noexcept {
  return static_cast<uint8_t>(leader >> 56) == LeaderCheck(LeaderVersion(leader));
}
static_assert(!LeaderValid(0), "a log never written holds no leader");
static_assert(LeaderValid(PackLeader(0)) && LeaderValid(PackLeader(kMaxWriteVersion)));
static_assert(!LeaderValid(PackLeader(5) ^ 1) && !LeaderValid(PackLeader(5) ^ (uint64_t{1} << 60)));

// Bytes one write takes in the log: its leader, then its entry.
constexpr size_t LogBytes(size_t key_len, size_t value_len) noexcept {
  return kLeaderBytes + EntryBytes(key_len, value_len);
}

}  // namespace kvrdma
