// Constants of the memory layouts that clients read over RDMA (index buckets,
// slots, log entries). Changing any of them changes the wire contract between
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
// 3: the slot's 12-bit size hint became a size class (slot.h): one READ fetches any entry.
inline constexpr uint32_t kFormatVersion = 3;

// ---- index
inline constexpr size_t kBucketBytes = 64;      // one cache line, one RDMA READ
inline constexpr size_t kSlotBytes = 8;         // one 8-byte-atomic word
inline constexpr size_t kSlotsPerBucket = 7;    // word 0 is the bucket version
inline constexpr size_t kCandidateBuckets = 2;  // buckets a key may live in

// ---- slot packing (see slot.h): | fingerprint:16 | size class:12 | location:36 |
inline constexpr unsigned kSlotLocationBits = 36;
inline constexpr unsigned kSlotSizeClassBits = 12;
inline constexpr unsigned kSlotFingerprintBits = 16;
static_assert(kSlotLocationBits + kSlotSizeClassBits + kSlotFingerprintBits == 64);

// ---- value log
inline constexpr size_t kEntryAlign = 8;        // entries start 8-aligned (the guard word)
inline constexpr size_t kEntryHeaderBytes = 16;
// Largest key / value the layout can express (the server may configure less).
inline constexpr size_t kMaxKeyBytes = (size_t{1} << 10) - 1;    // 1023
inline constexpr size_t kMaxValueBytes = (size_t{1} << 21) - 1;  // 2 MiB - 1
// Largest log the slot can address: 2^36 units of kEntryAlign bytes = 512 GiB.
inline constexpr uint64_t kMaxLogBytes = (uint64_t{1} << kSlotLocationBits) * kEntryAlign;

// Bytes of an entry with these lengths, padding included.
constexpr size_t EntryBytes(size_t key_len, size_t value_len) noexcept {
  return (kEntryHeaderBytes + key_len + value_len + kEntryAlign - 1) & ~(kEntryAlign - 1);
}

}  // namespace kvrdma
