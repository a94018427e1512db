// Key hashing and placement, shared by server and client.
//
// h = XXH3-64(key, seed) with the server's per-instance seed.
//   home        = h & (home_count - 1): the first word of the key's window
//                 (window.h); the window is words [home, home + window_words)
//   fingerprint = h >> 52 (12 bits, stored in the entry ref)
//   tag nibble  = ((h >> 40) & 255) % 15, in 0..14 (a move of the key tags
//                 the word it left); 15 is the any-key tag (window.h
//                 kTagAnyKey), never a key's (format 6; format 5 took bits
//                 44..47, so a key of nibble 15 left an any-key tag)
// The three use disjoint bits of h as long as home_count <= 2^40 (kMaxHomeCount).
#pragma once

#include <cstdint>
#include <string_view>

#include "common/format/format_constants.h"

namespace kvrdma {

inline constexpr uint64_t kMaxHomeCount = uint64_t{1} << 40;

// Keys' tag nibbles are 0..kKeyTagNibbles-1; the nibble value kKeyTagNibbles
// (15) is reserved for the any-key tag (window.h static_asserts the two agree).
inline constexpr uint64_t kKeyTagNibbles = 15;
// The one place a key's tag nibble is computed (server and client). 256 values
// of bits 40..47 onto 15 nibbles: nibble 0 gets 18 of them, the others 17.
constexpr uint8_t TagNibbleOf(uint64_t hash) noexcept {
  return static_cast<uint8_t>(((hash >> 40) & 0xff) % kKeyTagNibbles);
}

struct KeyHash {
  uint64_t hash = 0;         // XXH3-64 of the key
  uint64_t home = 0;         // first word of the key's window
  uint16_t fingerprint = 0;  // top kRefFingerprintBits bits of hash
  // 0..14. Computed where asked (a window scan; a move of the key), not
  // with the rest: a server's write needs it only when its key moves.
  constexpr uint8_t tag_nibble() const noexcept { return TagNibbleOf(hash); }
};

uint64_t HashKeyBytes(std::string_view key, uint64_t seed) noexcept;

// REQUIRES: home_count is a power of two (ValidateIndexParams).
constexpr KeyHash KeyHashOf(uint64_t hash, uint64_t home_count) noexcept {
  KeyHash kh;
  kh.hash = hash;
  kh.home = hash & (home_count - 1);
  kh.fingerprint = static_cast<uint16_t>(hash >> (64 - kRefFingerprintBits));
  return kh;
}

inline KeyHash MakeKeyHash(std::string_view key, uint64_t seed, uint64_t home_count) noexcept {
  return KeyHashOf(HashKeyBytes(key, seed), home_count);
}

}  // namespace kvrdma
