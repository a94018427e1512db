// Entry ref: the part of an 8-byte index word that names one log entry
// (window.h has the word, whose move tag sits between the size class and the
// location).
//
//   bit 63           52 51         41 40   36 35                           0
//      | fingerprint:12 | size class:11 | (tag) | location:36              |
//
//   fingerprint  top 12 bits of the key's XXH3-64 hash (hash.h); a reader
//                only fetches entries whose fingerprint matches.
//   size class   how many bytes to READ at `location` to get the whole entry
//                (header + key + value + padding) in one READ:
//                  0 .. 3         never a real entry (the smallest is 4 units);
//                                 RefLooksValid rejects them
//                  4 .. 1023      the exact length in 4-byte units (<= 4092 B)
//                  1024 + 32*e + m  (e >= 0, 0 <= m < 32): the entry is at most
//                                 (32 + m) << (e + 7) bytes and longer than the
//                                 previous code's bytes; e <= 9 covers the
//                                 largest entry (kMaxSizeClass)
//                The writer stores the smallest code whose bytes cover the
//                entry (SizeClassFor), so a READ of SizeClassBytes(code) is at
//                most (1 + 1/32) x the entry's length; the header has the exact
//                length, and a reader checks that it maps to the same code.
//   location     the entry's offset in the value log in 4-byte units
//                (entries are 4-aligned): a log of up to 256 GiB.
//
// An entry ref of 0 (kEmptyRef): the word names no entry. A real ref is never
// 0: its size class is >= 4. A ref never has tag bits (bits 40..36); the word
// holding it may.
#pragma once

#include <cstdint>

#include "common/format/format_constants.h"

namespace kvrdma {

inline constexpr uint64_t kEmptyRef = 0;
inline constexpr uint64_t kRefLocationMask = (uint64_t{1} << kRefLocationBits) - 1;
inline constexpr uint64_t kRefSizeClassMask = (uint64_t{1} << kRefSizeClassBits) - 1;
inline constexpr uint64_t kRefFingerprintMask = (uint64_t{1} << kRefFingerprintBits) - 1;
inline constexpr unsigned kRefSizeClassShift = kRefLocationBits + kWordTagBits;  // the word's tag sits below
inline constexpr unsigned kRefFingerprintShift = kRefSizeClassShift + kRefSizeClassBits;
static_assert(kRefFingerprintShift + kRefFingerprintBits == 64);

// ---- size classes
// Codes below kFirstCoarseSizeClass are exact lengths in kEntryAlign units.
inline constexpr uint64_t kFirstCoarseSizeClass = uint64_t{1} << (kRefSizeClassBits - 1);  // 1024
inline constexpr uint64_t kMaxExactEntryBytes = (kFirstCoarseSizeClass - 1) * kEntryAlign;  // 4092
// A coarse code steps by 1/32 of its exponent's base: a READ is at most
// (1 + 1/kSizeClassSteps) x the entry.
inline constexpr uint64_t kSizeClassSteps = 32;
inline constexpr unsigned kSizeClassBaseShift = 7;  // (32 + 0) << 7 = 4096: right after 4092
static_assert((kSizeClassSteps << kSizeClassBaseShift) == kMaxExactEntryBytes + kEntryAlign);
// Smallest size class of a real entry (header + 1-byte key, rounded).
inline constexpr uint64_t kMinSizeClass = EntryBytes(1, 0) / kEntryAlign;
static_assert(kMinSizeClass == 4);

// Bytes a reader READs for `code` (REQUIRES code <= kRefSizeClassMask): the
// exact length for exact codes, else the most the code's entries can be.
constexpr uint64_t SizeClassBytes(uint64_t code) noexcept {
  if (code < kFirstCoarseSizeClass) return code * kEntryAlign;
  const uint64_t e = (code - kFirstCoarseSizeClass) / kSizeClassSteps;
  const uint64_t m = (code - kFirstCoarseSizeClass) % kSizeClassSteps;
  return (kSizeClassSteps + m) << (e + kSizeClassBaseShift);
}

// The smallest code whose bytes cover an entry of `entry_bytes` (REQUIRES
// kMinSizeClass * kEntryAlign <= entry_bytes <= kMaxEntryBytes; entries are
// multiples of kEntryAlign). Codes' bytes increase with the code, so this is
// the code the writer stores and the one a reader expects for the header's length.
constexpr uint64_t SizeClassFor(uint64_t entry_bytes) noexcept {
  if (entry_bytes <= kMaxExactEntryBytes) return (entry_bytes + kEntryAlign - 1) / kEntryAlign;
  // In units of 128 bytes, exponent e spans (32..63) << e.
  const uint64_t q = (entry_bytes + (uint64_t{1} << kSizeClassBaseShift) - 1) >> kSizeClassBaseShift;
  uint64_t e = 0;
  while (e < 40 && ((2 * kSizeClassSteps - 1) << e) < q) ++e;  // bounded on any input
  uint64_t mant = (q + (uint64_t{1} << e) - 1) >> e;  // ceil(q / 2^e), <= 63
  if (mant < kSizeClassSteps) mant = kSizeClassSteps;
  return kFirstCoarseSizeClass + e * kSizeClassSteps + (mant - kSizeClassSteps);
}

// The largest entry and its code: every valid ref has a code in
// [kMinSizeClass, kMaxSizeClass].
inline constexpr uint64_t kMaxEntryBytes = EntryBytes(kMaxKeyBytes, kMaxValueBytes);
inline constexpr uint64_t kMaxSizeClass = SizeClassFor(kMaxEntryBytes);
static_assert(kMaxSizeClass <= kRefSizeClassMask, "every entry size needs a code that fits 11 bits");
static_assert((kMaxSizeClass - kFirstCoarseSizeClass) / kSizeClassSteps <= 9, "the largest entry needs e <= 9");
static_assert(SizeClassBytes(kMaxSizeClass) >= kMaxEntryBytes);
static_assert(SizeClassBytes(kMaxSizeClass - 1) < kMaxEntryBytes);
static_assert(SizeClassBytes(kMaxSizeClass) <= UINT32_MAX, "a READ length is 32 bits");
// The boundaries: exact up to 4092, then 4096 = (32 + 0) << 7, each code
// covering up to its bytes; the READ is at most 1/32 longer than the entry.
static_assert(SizeClassFor(16) == 4 && SizeClassBytes(4) == 16);
static_assert(SizeClassFor(60) == 15 && SizeClassBytes(15) == 60);
static_assert(SizeClassFor(kMaxExactEntryBytes) == kFirstCoarseSizeClass - 1);
static_assert(SizeClassBytes(kFirstCoarseSizeClass - 1) == kMaxExactEntryBytes);
static_assert(SizeClassFor(kMaxExactEntryBytes + 4) == kFirstCoarseSizeClass);
static_assert(SizeClassBytes(kFirstCoarseSizeClass) == 4096);
static_assert(SizeClassFor(4100) == kFirstCoarseSizeClass + 1 && SizeClassBytes(kFirstCoarseSizeClass + 1) == 4224);
static_assert(SizeClassBytes(kFirstCoarseSizeClass + 31) == 63 * 128);
static_assert(SizeClassFor(63 * 128) == kFirstCoarseSizeClass + 31);
static_assert(SizeClassFor(63 * 128 + 4) == kFirstCoarseSizeClass + 32 && SizeClassBytes(kFirstCoarseSizeClass + 32) == 8192);
static_assert(SizeClassFor(8192 + 4) == kFirstCoarseSizeClass + 33 && SizeClassBytes(kFirstCoarseSizeClass + 33) == 8448);
static_assert(SizeClassFor(2097152) == kFirstCoarseSizeClass + 9 * 32 && SizeClassBytes(kFirstCoarseSizeClass + 9 * 32) == 2097152);
static_assert(kMaxSizeClass == kFirstCoarseSizeClass + 9 * 32 + 1 && SizeClassBytes(kMaxSizeClass) == 33 << 16);
// The worst READ/entry ratio is at the step from m = 0 to m = 1: 33/32.
static_assert(SizeClassBytes(kFirstCoarseSizeClass + 9 * 32 + 1) * kSizeClassSteps <= (2097152 + 4) * (kSizeClassSteps + 1));

// REQUIRES: log_offset % kEntryAlign == 0, log_offset < kMaxLogBytes,
// kMinSizeClass <= size_class <= kMaxSizeClass.
constexpr uint64_t PackRef(uint16_t fingerprint, uint64_t size_class, uint64_t log_offset) noexcept {
  return ((uint64_t{fingerprint} & kRefFingerprintMask) << kRefFingerprintShift) |
         ((size_class & kRefSizeClassMask) << kRefSizeClassShift) | ((log_offset / kEntryAlign) & kRefLocationMask);
}
constexpr uint16_t RefFingerprint(uint64_t ref) noexcept {
  return static_cast<uint16_t>(ref >> kRefFingerprintShift);
}
constexpr uint64_t RefSizeClass(uint64_t ref) noexcept { return (ref >> kRefSizeClassShift) & kRefSizeClassMask; }
// Byte offset of the entry in the value log.
constexpr uint64_t RefLogOffset(uint64_t ref) noexcept {
  return (ref & kRefLocationMask) * kEntryAlign;
}
// A ref a reader may follow: not empty and with the size class of a
// possible entry (codes 0..3 are never entries; codes above kMaxSizeClass
// would describe an entry larger than the format allows).
constexpr bool RefLooksValid(uint64_t ref) noexcept {
  return ref != kEmptyRef && RefSizeClass(ref) >= kMinSizeClass && RefSizeClass(ref) <= kMaxSizeClass;
}

static_assert(RefLogOffset(PackRef(0xabc, 77, 4 * 12345)) == 4 * 12345);
static_assert(RefSizeClass(PackRef(0xabc, 77, 4 * 12345)) == 77);
static_assert(RefFingerprint(PackRef(0xabc, 77, 4 * 12345)) == 0xabc);
static_assert(PackRef(0, kMinSizeClass, 0) != kEmptyRef);
static_assert(((PackRef(0xfff, kRefSizeClassMask, kMaxLogBytes - 8) >> kRefLocationBits) &
               ((uint64_t{1} << kWordTagBits) - 1)) == 0,
              "a ref leaves the tag bits clear");

}  // namespace kvrdma
