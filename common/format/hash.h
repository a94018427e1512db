// Key hashing and placement, shared by server and client.
//
// h = XXH3-64(key, seed) with the server's per-instance seed.
//   home        = h & (home_count - 1): the first word of the key's window
//                 (window.h); the window is words [home, home + window_words)
//   fingerprint = h >> 52 (12 bits, stored in the entry ref)
//   tag nibble  = (h >> 44) & 15 (a move of the key tags the word it left)
// The three use disjoint bits of h as long as home_count <= 2^44.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/format/format_constants.h"

namespace kvrdma {

inline constexpr uint64_t kMaxHomeCount = uint64_t{1} << 40;

struct KeyHash {
  uint64_t hash = 0;         // XXH3-64 of the key
  uint64_t home = 0;         // first word of the key's window
  uint16_t fingerprint = 0;  // top kRefFingerprintBits bits of hash
  uint8_t tag_nibble = 0;    // hash bits 44..47
};

uint64_t HashKeyBytes(std::string_view key, uint64_t seed) noexcept;

// REQUIRES: home_count is a power of two (ValidateIndexParams).
constexpr KeyHash KeyHashOf(uint64_t hash, uint64_t home_count) noexcept {
  KeyHash kh;
  kh.hash = hash;
  kh.home = hash & (home_count - 1);
  kh.fingerprint = static_cast<uint16_t>(hash >> (64 - kRefFingerprintBits));
  kh.tag_nibble = static_cast<uint8_t>((hash >> 44) & 15);
  return kh;
}

inline KeyHash MakeKeyHash(std::string_view key, uint64_t seed, uint64_t home_count) noexcept {
  return KeyHashOf(HashKeyBytes(key, seed), home_count);
}

}  // namespace kvrdma
