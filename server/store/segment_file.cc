#include "server/store/segment_file.h"

#include <xxhash.h>

#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace kvrdma {
namespace {

static_assert(std::endian::native == std::endian::little, "the disk format is little-endian");

constexpr uint64_t kMetaMagic = 0x4154454d4452564bull;     // "KVRDMETA"
constexpr uint64_t kSegmentMagic = 0x4745534d4452564bull;  // "KVRDMSEG"
constexpr uint64_t kSyncedBoundMagic = 0x434e59534452564bull;  // "KVRDSYNC"

void Put64(std::byte* p, uint64_t v) noexcept { std::memcpy(p, &v, 8); }
void Put32(std::byte* p, uint32_t v) noexcept { std::memcpy(p, &v, 4); }
uint64_t Get64(const std::byte* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t Get32(const std::byte* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string Hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%016" PRIx64, v);
  return b;
}

// The fields common to both: magic, format, then five u64 fields, two zero
// words, the checksum (9 words after the magic/format pair: 72 bytes).
void EncodeCommon(uint64_t magic, uint32_t second, const uint64_t (&f)[3], std::byte* out) noexcept {
  std::memset(out, 0, 72);
  Put64(out, magic);
  Put32(out + 8, kDiskFormatVersion);
  Put32(out + 12, second);
  for (int i = 0; i < 3; ++i) Put64(out + 16 + 8 * i, f[i]);
  Put64(out + 64, XXH3_64bits(out, 64));
}

Status DecodeCommon(std::span<const std::byte> in, uint64_t magic, const char* what, const std::string& where,
                    uint64_t (&f)[3], uint32_t* second) {
  if (in.size() < 72) {
    return Status::Corruption(where + ": " + what + " is " + std::to_string(in.size()) +
                              " bytes, expected at least 72 (a truncated file)");
  }
  const std::byte* p = in.data();
  if (Get64(p) != magic) {
    return Status::Corruption(where + ": not a kvrdma " + what + " (magic " + Hex(Get64(p)) + ", expected " +
                              Hex(magic) + ")");
  }
  if (Get32(p + 8) != kDiskFormatVersion) {
    return Status::Corruption(where + ": disk format " + std::to_string(Get32(p + 8)) + ", this kvserver reads " +
                              std::to_string(kDiskFormatVersion));
  }
  if (const uint64_t sum = XXH3_64bits(p, 64); Get64(p + 64) != sum) {
    return Status::Corruption(where + ": " + what + " checksum " + Hex(Get64(p + 64)) + ", expected " + Hex(sum) +
                              " (damaged)");
  }
  *second = Get32(p + 12);
  for (int i = 0; i < 3; ++i) f[i] = Get64(p + 16 + 8 * i);
  return Status::OK();
}

}  // namespace

void EncodeMeta(const DataDirMeta& m, std::span<std::byte, kMetaBytes> out) noexcept {
  const uint64_t f[3] = {m.data_dir_id, m.hash_seed, m.segment_bytes};
  EncodeCommon(kMetaMagic, 0, f, out.data());
}

Result<DataDirMeta> DecodeMeta(std::span<const std::byte> in, const std::string& where) {
  uint64_t f[3];
  uint32_t zero;
  KVRDMA_RETURN_IF_ERROR(DecodeCommon(in, kMetaMagic, "meta file", where, f, &zero));
  return DataDirMeta{f[0], f[1], f[2]};
}

void EncodeSegmentHeader(const SegmentHeader& h, std::span<std::byte, kSegmentHeaderUsedBytes> out) noexcept {
  const uint64_t f[3] = {h.data_dir_id, h.open_seq, h.segment_bytes};
  EncodeCommon(kSegmentMagic, static_cast<uint32_t>(kSegmentHeaderBytes), f, out.data());
}

Result<SegmentHeader> DecodeSegmentHeader(std::span<const std::byte> in, const std::string& where) {
  uint64_t f[3];
  uint32_t header_bytes;
  KVRDMA_RETURN_IF_ERROR(DecodeCommon(in, kSegmentMagic, "segment file header", where, f, &header_bytes));
  if (header_bytes != kSegmentHeaderBytes) {
    return Status::Corruption(where + ": header of " + std::to_string(header_bytes) + " bytes, expected " +
                              std::to_string(kSegmentHeaderBytes));
  }
  return SegmentHeader{f[0], f[1], f[2]};
}

void EncodeSyncedBound(uint64_t open_seq, uint64_t bound, std::span<std::byte, kSyncedBoundBytes> out) noexcept {
  std::byte* p = out.data();
  Put64(p, kSyncedBoundMagic);
  Put64(p + 8, open_seq);
  Put64(p + 16, bound);
  Put64(p + 24, XXH3_64bits(p, 24));
}

uint64_t DecodeSyncedBound(std::span<const std::byte> header_region, uint64_t open_seq,
                           uint64_t segment_bytes) noexcept {
  uint64_t best = kSyncedBoundUnknown;
  for (const size_t at : kSyncedBoundOffsets) {
    if (header_region.size() < at + kSyncedBoundBytes) continue;
    const std::byte* p = header_region.data() + at;
    if (Get64(p) != kSyncedBoundMagic || Get64(p + 8) != open_seq || Get64(p + 24) != XXH3_64bits(p, 24)) continue;
    const uint64_t bound = Get64(p + 16);
    if (bound > segment_bytes) continue;  // cannot be this file's: not a record
    if (best == kSyncedBoundUnknown || bound > best) best = bound;
  }
  return best;
}

std::string SegmentFileName(uint64_t open_seq) {
  char b[48];
  std::snprintf(b, sizeof(b), "segment-%016" PRIx64 ".kvseg", open_seq);
  return b;
}

bool ParseSegmentFileName(const std::string& name, uint64_t* open_seq) {
  if (name.size() != 8 + 16 + 6 || name.compare(0, 8, "segment-") != 0 || name.compare(24, 6, ".kvseg") != 0) {
    return false;
  }
  uint64_t v = 0;
  for (size_t i = 8; i < 24; ++i) {
    const char c = name[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *open_seq = v;
  return true;
}

}  // namespace kvrdma
