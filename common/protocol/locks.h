// The lock table: 8-byte words clients change with RDMA compare-and-swap.
//
//   word 0           unused (a client asks for the server's clock with a
//                    CLOCK request, protocol 6)
//   words 1..lock_words   lock words; a key's word is LockPlaceOf(key).index.
//
// A lock word is 0 (free) or | owner:20 | key:8 | expiry:36 |:
//   owner   the holder's connection id;
//   key     which keys of the word the lock covers: the key byte of the one
//           key locked (1..255, LockPlaceOf), or kLockAllKeys (0) when its
//           holder locked two keys of the word with different key bytes;
//   expiry  the server-clock time at which the lease ends, in units of
//           kLockExpiryUnitMs (rounded up: a lease lasts at least as long as
//           asked, at most one unit longer; 36 bits of 16 ms are 34 years).
// Only clients change lock words, and only with RDMA atomics: the server
// never does a CPU read-modify-write on them (NIC atomics are atomic only
// against other NIC atomics on IBV_ATOMIC_HCA devices); it only loads them to
// check a PUT/DELETE. Keys share a word when they hash to the same one (the
// table has --lock-words words). A lock refuses other clients' writes only to
// the keys it covers, so a lock on one key blocks a write of another key of
// its word only when their key bytes match too (1 in 255); two locks of
// different keys on one word do exclude each other (TryLock answers Locked).
// Locks are advisory: any client may CAS any word to anything (steal a held
// lock, or set an expiry up to 34 years away; the library's Lock takes at
// most 2^32 ms, 49 days), and the server cannot tell. What the server
// enforces is a conditional write (docs/DESIGN.md, "Conditional writes").
#pragma once

#include <cstdint>
#include <string_view>

#include "common/format/hash.h"

namespace kvrdma {

inline constexpr unsigned kLockExpiryBits = 36;
inline constexpr unsigned kLockKeyBits = 8;
inline constexpr uint64_t kLockExpiryMask = (uint64_t{1} << kLockExpiryBits) - 1;
inline constexpr uint64_t kLockExpiryUnitMs = 16;
inline constexpr uint32_t kLockOwnerMax = (1u << 20) - 1;
inline constexpr uint8_t kLockAllKeys = 0;  // the key byte of a lock on every key of its word
static_assert(20 + kLockKeyBits + kLockExpiryBits == 64, "a lock word is one CAS-able 8-byte word");

// `expiry_ms` is rounded up to a whole unit.
constexpr uint64_t PackLock(uint32_t owner, uint8_t key, uint64_t expiry_ms) noexcept {
  const uint64_t units = (expiry_ms + kLockExpiryUnitMs - 1) / kLockExpiryUnitMs;
  return (uint64_t{owner} << (kLockKeyBits + kLockExpiryBits)) | (uint64_t{key} << kLockExpiryBits) |
         (units & kLockExpiryMask);
}
constexpr uint32_t LockOwner(uint64_t word) noexcept {
  return static_cast<uint32_t>(word >> (kLockKeyBits + kLockExpiryBits));
}
constexpr uint8_t LockKey(uint64_t word) noexcept { return static_cast<uint8_t>(word >> kLockExpiryBits); }
// The server-clock millisecond at which the lease ends.
constexpr uint64_t LockExpiry(uint64_t word) noexcept { return (word & kLockExpiryMask) * kLockExpiryUnitMs; }
// A connection's owner id is its connection id (ServerDescriptor::conn_id):
// 1..kLockOwnerMax, never 0. The server hands out each id once, and after all
// were used reuses only an id that no live connection holds and no lock word
// names with an unended lease: two holders never share one.

// Where a key's lock lives: its word's index (>= 1) in a table of `lock_words`
// lock words, and its key byte (1..255), from the key's hash h (hash.h:
// XXH3-64 of the key with the server's seed, the hash its window comes from;
// protocol 11: before, a second XXH3 with another seed, which every PUT paid
// again). h is mixed first (splitmix64's finalizer), so that the keys of one
// window, whose h share their low bits, spread over the whole table; the
// word and the key byte come from disjoint bits of the mix, each by a
// multiply and a shift, not a division.
struct LockPlace {
  uint64_t index;
  uint8_t key;
};
constexpr LockPlace LockPlaceOfHash(uint64_t h, uint32_t lock_words) noexcept {
  uint64_t z = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return {1 + (((z >> 32) * lock_words) >> 32), static_cast<uint8_t>(1 + ((((z & 0xffffffffu) >> 8) * 255) >> 24))};
}
inline LockPlace LockPlaceOf(std::string_view key, uint64_t seed, uint32_t lock_words) noexcept {
  return LockPlaceOfHash(HashKeyBytes(key, seed), lock_words);
}
static_assert(LockPlaceOfHash(0, 1).index == 1 && LockPlaceOfHash(~uint64_t{0}, 1).index == 1);
static_assert(LockPlaceOfHash(~uint64_t{0}, 0xffffffffu).index <= 0xffffffffu);
static_assert(LockPlaceOfHash(0, 7).key >= 1 && LockPlaceOfHash(12345, 7).key >= 1);

// Whether a PUT/DELETE of a key whose lock place is `place`, carrying `token`
// (0 = none), from the connection whose owner id is `requester`, may change
// the key while its lock word is `word`, at server clock `now_ms`: the word is
// free, its lease has ended, it covers other keys of the word only, or the
// request comes from the holder of exactly this lease. The token alone proves
// nothing (lock words are readable by every client): the word's owner must be
// the connection the request arrived on.
constexpr bool LockAllows(uint64_t word, uint8_t key, uint64_t token, uint32_t requester, uint64_t now_ms) noexcept {
  return word == 0 || LockExpiry(word) <= now_ms || (LockKey(word) != kLockAllKeys && LockKey(word) != key) ||
         (word == token && LockOwner(word) == requester);
}

}  // namespace kvrdma
