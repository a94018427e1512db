// The lock table: 8-byte words clients change with RDMA compare-and-swap.
//
//   word 0           unused (the server clock lives in its own region,
//                    registered REMOTE_READ only: ServerDescriptor::clock)
//   words 1..slots   lock words; a key's word is LockWordIndex(key).
//
// A lock word is 0 (free) or | owner:24 | expiry:40 |: the owner is the
// holder's connection id, the expiry is the server-clock
// millisecond at which the lease ends. Only clients change lock words, and
// only with RDMA atomics: the server never does a CPU read-modify-write on
// them (NIC atomics are atomic only against other NIC atomics on
// IBV_ATOMIC_HCA devices); it only loads them to check a PUT/DELETE.
// Keys share a word when they hash to the same one (then locking one locks
// both): the table has --lock-slots words.
#pragma once

#include <cstdint>
#include <string_view>

#include <xxhash.h>

namespace kvrdma {

inline constexpr unsigned kLockExpiryBits = 40;
inline constexpr uint64_t kLockExpiryMask = (uint64_t{1} << kLockExpiryBits) - 1;
inline constexpr uint32_t kLockOwnerMax = (1u << 24) - 1;

constexpr uint64_t PackLock(uint32_t owner, uint64_t expiry_ms) noexcept {
  return (uint64_t{owner} << kLockExpiryBits) | (expiry_ms & kLockExpiryMask);
}
constexpr uint32_t LockOwner(uint64_t word) noexcept { return static_cast<uint32_t>(word >> kLockExpiryBits); }
constexpr uint64_t LockExpiry(uint64_t word) noexcept { return word & kLockExpiryMask; }
// A connection's owner id is its connection id (ServerDescriptor::conn_id):
// 1..kLockOwnerMax, never 0. The server hands out each id once, and after all
// were used reuses only an id that no live connection holds and no lock word
// names with an unended lease: two holders never share one.

// The index (in words, >= 1) of key's lock word in a table of `slots` lock words.
inline uint64_t LockWordIndex(std::string_view key, uint64_t seed, uint32_t slots) noexcept {
  return 1 + XXH3_64bits_withSeed(key.data(), key.size(), seed ^ 0x6c6f636b73ull) % slots;
}

// Whether a PUT/DELETE carrying `token` (0 = none) from the connection whose
// owner id is `requester` may change a key whose lock word is `word`, at
// server clock `now_ms`: the lock is free, its lease has ended, or the request
// comes from the holder of exactly this lease. The token alone proves nothing
// (lock words are readable by every client): the word's owner must be the
// connection the request arrived on.
constexpr bool LockAllows(uint64_t word, uint64_t token, uint32_t requester, uint64_t now_ms) noexcept {
  return word == 0 || LockExpiry(word) <= now_ms || (word == token && LockOwner(word) == requester);
}

}  // namespace kvrdma
