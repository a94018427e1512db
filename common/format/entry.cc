#include "common/format/entry.h"

#include <xxhash.h>

#include <cstring>

#include "common/format/hash.h"

namespace kvrdma {

uint64_t HashKeyBytes(std::string_view key, uint64_t seed) noexcept {
  return XXH3_64bits_withSeed(key.data(), key.size(), seed);
}

uint64_t EntryChecksum(const std::byte* from_version, size_t n, uint64_t seed) noexcept {
  return XXH3_64bits_withSeed(from_version, n, seed) & kGuardChecksumMask;
}

size_t EncodeEntry(std::span<std::byte> out, std::string_view key, std::string_view value,
                   uint32_t version, bool tombstone, uint64_t seed) noexcept {
  if (key.empty() || key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) return 0;
  if (tombstone && !value.empty()) return 0;
  const size_t total = EntryBytes(key.size(), value.size());
  if (out.size() < total) return 0;
  std::byte* p = out.data();
  EntryHeader h{};
  h.version = version;
  h.lengths = PackLengths(key.size(), value.size(), tombstone);
  std::memcpy(p + kEntryHeaderBytes, key.data(), key.size());
  if (!value.empty()) std::memcpy(p + kEntryHeaderBytes + key.size(), value.data(), value.size());
  const size_t used = kEntryHeaderBytes + key.size() + value.size();
  std::memset(p + used, 0, total - used);
  std::memcpy(p + kEntryChecksumOffset, &h.version, 8);
  h.guard = EntryChecksum(p + kEntryChecksumOffset, used - kEntryChecksumOffset, seed);
  std::memcpy(p, &h.guard, 8);
  return total;
}

}  // namespace kvrdma
