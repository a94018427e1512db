// Key hashing and bucket placement, shared by server and client.
//
// h = XXH3-64(key, seed) with the server's per-instance seed.
//   fingerprint = h >> 48 (stored in the slot)
//   bucket 0    = h & (bucket_count - 1)
//   bucket 1    = bucket 0 XOR AltOffset(fingerprint)   (partial-key cuckoo)
// AltOffset is never 0 modulo bucket_count, so the two buckets differ, and
// AlternateBucket is an involution: the server can move a slot between its
// two buckets knowing only the slot (no read of the key from the log).
#pragma once

#include <cstdint>
#include <string_view>

namespace kvrdma {

struct KeyHash {
  uint64_t hash = 0;           // XXH3-64 of the key
  uint64_t bucket[2] = {0, 0}; // candidate bucket indexes (distinct)
  uint16_t fingerprint = 0;    // top 16 bits of hash
};

uint64_t HashKeyBytes(std::string_view key, uint64_t seed) noexcept;

// The other candidate bucket of a slot with `fingerprint` living in `bucket`.
// REQUIRES: bucket_count is a power of two >= 2.
constexpr uint64_t AlternateBucket(uint64_t bucket, uint16_t fingerprint, uint64_t bucket_count) noexcept {
  const uint64_t mask = bucket_count - 1;
  uint64_t off = (uint64_t{fingerprint} + 1) * 0x9E3779B97F4A7C15ull;  // spread the 16 bits
  off = (off >> 29) & mask;
  if (off == 0) off = 1;
  return (bucket ^ off) & mask;
}

// REQUIRES: bucket_count is a power of two >= 2 (ValidateIndexParams).
inline KeyHash MakeKeyHash(std::string_view key, uint64_t seed, uint64_t bucket_count) noexcept {
  KeyHash kh;
  kh.hash = HashKeyBytes(key, seed);
  kh.fingerprint = static_cast<uint16_t>(kh.hash >> 48);
  kh.bucket[0] = kh.hash & (bucket_count - 1);
  kh.bucket[1] = AlternateBucket(kh.bucket[0], kh.fingerprint, bucket_count);
  return kh;
}

}  // namespace kvrdma
