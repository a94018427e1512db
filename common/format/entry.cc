#include "common/format/entry.h"

// Inlined (every xxHash symbol of this file static, no clash with the
// library's): a GET hashes its key and checksums a short entry, 16-128 bytes
// each, where the library's call and length dispatch were a quarter of
// XXH3's instructions. Also gives XXH3_state_t on the stack (EntryChecksum
// over two pieces).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

#include "common/format/hash.h"
#include "common/format/simd.h"

namespace kvrdma {

uint64_t HashKeyBytes(std::string_view key, uint64_t seed) noexcept {
  return XXH3_64bits_withSeed(key.data(), key.size(), seed);
}

namespace detail {
bool DetectAvx2() noexcept {
#if KVRDMA_HAVE_AVX2
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
#else
  return false;
#endif
}
}  // namespace detail

namespace {
// The lengths enter through the seed (multiplied by an odd constant so that
// every bit of them moves the seed's high bits too): the key and value are
// contiguous in both layouts, the lengths are not next to them.
constexpr uint64_t ChecksumSeed(uint64_t seed, uint32_t lengths) noexcept {
  return seed ^ (uint64_t{lengths} * 0x9E3779B97F4A7C15ull);
}
}  // namespace

uint64_t EntryChecksum(uint32_t lengths, const std::byte* key_and_value, size_t n, uint64_t seed) noexcept {
  const uint64_t mixed = ChecksumSeed(seed, lengths);
#if KVRDMA_HAVE_AVX2
  // Above 240 bytes XXH3 runs its vector loop (below, scalar code either way).
  if (n > 240 && detail::CpuHasAvx2()) return detail::Xxh3Avx2(key_and_value, n, mixed) & kGuardChecksumMask;
#endif
  return XXH3_64bits_withSeed(key_and_value, n, mixed) & kGuardChecksumMask;
}

uint64_t EntryChecksumCopy(uint32_t lengths, const std::byte* key_and_value, size_t n, size_t from, std::byte* dst,
                           uint64_t seed) noexcept {
#if KVRDMA_HAVE_AVX2
  if (n > 240 && detail::CpuHasAvx2()) {
    return detail::Xxh3Avx2Copy(key_and_value, n, from, dst, ChecksumSeed(seed, lengths)) & kGuardChecksumMask;
  }
#endif
  if (n > from) std::memcpy(dst, key_and_value + from, n - from);
  return EntryChecksum(lengths, key_and_value, n, seed);
}

uint64_t EntryChecksumCopyIn(uint32_t lengths, std::byte* key_and_value, size_t n, size_t from, const std::byte* src,
                             uint64_t seed) noexcept {
#if KVRDMA_HAVE_AVX2
  if (n > 240 && detail::CpuHasAvx2()) {
    return detail::Xxh3Avx2CopyIn(key_and_value, n, from, src, ChecksumSeed(seed, lengths)) & kGuardChecksumMask;
  }
#endif
  if (n > from) std::memcpy(key_and_value + from, src, n - from);
  return EntryChecksum(lengths, key_and_value, n, seed);
}

uint64_t EntryChecksum(uint32_t lengths, std::span<const std::byte> a, std::span<const std::byte> b,
                       uint64_t seed) noexcept {
  if (b.empty()) return EntryChecksum(lengths, a.data(), a.size(), seed);
  const uint64_t mixed = ChecksumSeed(seed, lengths);
#if KVRDMA_HAVE_AVX2
  if (detail::CpuHasAvx2()) {
    return detail::Xxh3Avx2Pieces(a.data(), a.size(), b.data(), b.size(), mixed) & kGuardChecksumMask;
  }
#endif
  XXH3_state_t st;
  XXH3_INITSTATE(&st);  // what reset reads before it writes (a state not from XXH3_createState)
  XXH3_64bits_reset_withSeed(&st, mixed);
  XXH3_64bits_update(&st, a.data(), a.size());
  XXH3_64bits_update(&st, b.data(), b.size());
  return XXH3_64bits_digest(&st) & kGuardChecksumMask;
}

uint64_t EntryChecksumOf(std::string_view key, std::span<const std::byte> value, uint64_t seed) noexcept {
  return EntryChecksum(PackLengths(key.size(), value.size(), false), std::as_bytes(std::span(key)), value, seed);
}

size_t EncodeEntry(std::span<std::byte> out, uint64_t entry_off, std::string_view key, std::string_view value,
                   bool tombstone, uint64_t seed) noexcept {
  if (key.empty() || key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) return 0;
  if (tombstone && !value.empty()) return 0;
  if (entry_off % kEntryAlign != 0) return 0;
  const size_t total = EntryBytes(key.size(), value.size());
  if (out.size() < total) return 0;
  std::byte* p = out.data();
  const uint32_t lengths = PackLengths(key.size(), value.size(), tombstone);
  std::memcpy(p + kEntryKeyOffset, key.data(), key.size());
  if (!value.empty()) std::memcpy(p + kEntryKeyOffset + key.size(), value.data(), value.size());
  const size_t used = kEntryKeyOffset + key.size() + value.size();
  std::memset(p + used, 0, total - used);
  std::memcpy(p + LengthsAt(entry_off), &lengths, sizeof(lengths));
  const uint64_t guard = EntryChecksum(lengths, p + kEntryKeyOffset, key.size() + value.size(), seed);
  std::memcpy(p + GuardAt(entry_off), &guard, sizeof(guard));
  return total;
}

}  // namespace kvrdma
