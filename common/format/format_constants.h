// Constants of the memory layouts that clients read over RDMA (index words,
// entry refs, log entries). Changing any of them changes the wire contract between
// server and client: bump kFormatVersion.
//
// Runtime tunables of the server (sizes, grace period, modes) live in
// server/store/store_config.h; this header holds only what both sides compile in.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace kvrdma {

static_assert(std::endian::native == std::endian::little,
              "kvrdma layouts are little-endian; big-endian hosts are not supported");

// Version of the index/log layout. It is part of the protocol major version
// (common/protocol/handshake.h): a change here bumps kProtocolMajor, so a
// client built for another layout is refused at connect time.
// 2: guard bit 63 means NOT-CURRENT (entries are written unpublished).
// 3: the entry ref's 12-bit size hint became a size class (entry_ref.h): one READ fetches any entry.
// 4: the index is an array of words and a key's window of them, read in one
//    READ; the word carries a move tag beside its entry ref (window.h).
// 5: the entry header is 12 bytes (guard + lengths; no per-key version) and
//    entries are 4-aligned: the guard sits at whichever of the first two
//    4-byte offsets is 8-aligned (entry.h). Locations are in 4-byte units.
// 6: a key's tag nibble is 0..14 (hash.h TagNibbleOf: bits 40..47 mod 15);
//    15 is only the any-key tag (window.h), so a key's first hop no longer
//    leaves a tag that blocks the one-round misses of every key of its window.
inline constexpr uint32_t kFormatVersion = 6;

// ---- index (see window.h): words of 8 bytes; a key's window of them
inline constexpr size_t kWordBytes = 8;            // one 8-byte-atomic word
inline constexpr size_t kMaxWindowWords = 128;     // largest window (1 KiB READ)
inline constexpr size_t kDefaultWindowWords = 128; // what kvserver uses (DESIGN.md)

// ---- word packing (entry_ref.h, window.h):
//      | fingerprint:12 | size class:11 | move tag:5 | location:36 |
inline constexpr unsigned kRefLocationBits = 36;
inline constexpr unsigned kWordTagBits = 5;
inline constexpr unsigned kWordTagShift = kRefLocationBits;
inline constexpr unsigned kRefSizeClassBits = 11;
inline constexpr unsigned kRefFingerprintBits = 12;
static_assert(kRefLocationBits + kWordTagBits + kRefSizeClassBits + kRefFingerprintBits == 64);

// ---- value log
inline constexpr size_t kEntryAlign = 4;        // entries start 4-aligned (entry.h: where the guard sits)
inline constexpr size_t kEntryHeaderBytes = 12; // guard (8) + lengths (4); the key follows
// Largest key / value the layout can express (the server may configure less).
inline constexpr size_t kMaxKeyBytes = (size_t{1} << 10) - 1;    // 1023
inline constexpr size_t kMaxValueBytes = (size_t{1} << 21) - 1;  // 2 MiB - 1
// Largest log an entry ref can address: 2^36 units of kEntryAlign bytes = 256 GiB.
inline constexpr uint64_t kMaxLogBytes = (uint64_t{1} << kRefLocationBits) * kEntryAlign;

// Bytes of an entry with these lengths, padding included.
constexpr size_t EntryBytes(size_t key_len, size_t value_len) noexcept {
  return (kEntryHeaderBytes + key_len + value_len + kEntryAlign - 1) & ~(kEntryAlign - 1);
}

}  // namespace kvrdma
