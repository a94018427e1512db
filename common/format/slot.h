// Index slot: one 8-byte word of an index bucket (see bucket.h).
//
//   bit 63             48 47           36 35                               0
//      | fingerprint:16  | size hint:12  | location:36                      |
//
//   fingerprint  top 16 bits of the key's XXH3-64 hash (hash.h); a reader
//                only fetches entries whose fingerprint matches.
//   size hint    the entry's length in 8-byte units (header + key + value +
//                padding), saturated at 4095 (= 32760 bytes): a reader READs
//                hint*8 bytes at `location` and gets the whole entry in one
//                READ unless the hint is saturated; then the header tells
//                the exact length and a second READ fetches the rest.
//   location     the entry's offset in the value log in 8-byte units
//                (entries are 8-aligned): a log of up to 512 GiB.
//
// A slot of 0 is empty. A used slot is never 0: every entry is at least 24
// bytes (16-byte header + a key of >= 1 byte, rounded up), so hint >= 3.
// Slots are written only by server threads, with a single 8-byte release
// store (std::atomic_ref); readers copy them as part of a bucket READ.
#pragma once

#include <cstdint>

#include "common/format/format_constants.h"

namespace kvrdma {

inline constexpr uint64_t kEmptySlot = 0;
inline constexpr uint64_t kSlotLocationMask = (uint64_t{1} << kSlotLocationBits) - 1;
inline constexpr uint64_t kSlotHintMask = (uint64_t{1} << kSlotHintBits) - 1;
inline constexpr unsigned kSlotHintShift = kSlotLocationBits;
inline constexpr unsigned kSlotFingerprintShift = kSlotLocationBits + kSlotHintBits;
inline constexpr uint64_t kMaxSlotHint = kSlotHintMask;  // saturated: "at least this much"
// Smallest hint of a real entry (header + 1-byte key, rounded).
inline constexpr uint64_t kMinSlotHint = EntryBytes(1, 0) / kEntryAlign;
static_assert(kMinSlotHint == 3);
static_assert(kMaxHintedEntryBytes == kMaxSlotHint * kEntryAlign);

// The size hint for an entry of `entry_bytes` (a multiple of kEntryAlign).
constexpr uint64_t SlotHintFor(uint64_t entry_bytes) noexcept {
  uint64_t units = entry_bytes / kEntryAlign;
  return units > kMaxSlotHint ? kMaxSlotHint : units;
}

// REQUIRES: log_offset % kEntryAlign == 0, log_offset < kMaxLogBytes,
// kMinSlotHint <= hint <= kMaxSlotHint.
constexpr uint64_t PackSlot(uint16_t fingerprint, uint64_t hint, uint64_t log_offset) noexcept {
  return (uint64_t{fingerprint} << kSlotFingerprintShift) | ((hint & kSlotHintMask) << kSlotHintShift) |
         ((log_offset / kEntryAlign) & kSlotLocationMask);
}
constexpr uint16_t SlotFingerprint(uint64_t slot) noexcept {
  return static_cast<uint16_t>(slot >> kSlotFingerprintShift);
}
constexpr uint64_t SlotHint(uint64_t slot) noexcept { return (slot >> kSlotHintShift) & kSlotHintMask; }
// Byte offset of the entry in the value log.
constexpr uint64_t SlotLogOffset(uint64_t slot) noexcept {
  return (slot & kSlotLocationMask) * kEntryAlign;
}
// Bytes to READ to get the entry in one READ (the whole entry unless the hint saturated).
constexpr uint64_t SlotReadBytes(uint64_t slot) noexcept { return SlotHint(slot) * kEntryAlign; }
// A slot a reader may follow: not empty and with a plausible hint.
constexpr bool SlotLooksValid(uint64_t slot) noexcept {
  return slot != kEmptySlot && SlotHint(slot) >= kMinSlotHint;
}

static_assert(SlotLogOffset(PackSlot(0xabcd, 77, 8 * 12345)) == 8 * 12345);
static_assert(SlotHint(PackSlot(0xabcd, 77, 8 * 12345)) == 77);
static_assert(SlotFingerprint(PackSlot(0xabcd, 77, 8 * 12345)) == 0xabcd);
static_assert(PackSlot(0, kMinSlotHint, 0) != kEmptySlot);

}  // namespace kvrdma
