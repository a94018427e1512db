// The durable store's files (docs/DESIGN.md, "Durability"): one meta file
// that says whose data dir this is, and one segment file per log segment
// opened, holding that segment's bytes exactly as they are in memory.
//
//   DIR/kvrdma.meta                      (kMetaBytes, written once, at creation)
//     magic "KVRDMETA" u64 | disk format u32 | 0 u32 | data dir id u64 |
//     hash seed u64 | segment bytes u64 | 0 u64 x 2 | checksum u64
//   DIR/segment-<open seq, 16 hex digits>.kvseg
//     header (kSegmentHeaderBytes; its first 64 bytes used):
//       magic "KVRDMSEG" u64 | disk format u32 | header bytes u32 |
//       data dir id u64 | open seq u64 | segment bytes u64 | 0 u64 x 2 |
//       checksum u64
//     then the segment: segment bytes, at in-segment offset o at file
//     offset kSegmentHeaderBytes + o. Writes are leader + entry, back to
//     back from offset 0 (entry_leader.h, entry.h); the file is allocated
//     whole when created, so what was never written reads as zeros.
//
// All integers little-endian. Checksums: XXH3-64 of the bytes before them
// (seed 0). The data dir id is random, chosen when the dir is created: a
// segment file of another server's dir is refused by name and not served.
// open seq: the order in which segments were opened (never reused; it
// resumes above the largest on disk after a restart).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

namespace kvrdma {

inline constexpr uint32_t kDiskFormatVersion = 1;
inline constexpr size_t kMetaBytes = 72;
inline constexpr size_t kSegmentHeaderBytes = 4096;
inline constexpr size_t kSegmentHeaderUsedBytes = 72;
inline constexpr const char* kMetaFileName = "kvrdma.meta";
// kvserver holds an exclusive flock(2) on this file while it runs (two
// servers on one data dir would overwrite each other's files).
inline constexpr const char* kLockFileName = "kvrdma.lock";
// --fsync always: the next segment's file, made ahead (allocated and written
// whole with zeros, then synced) and renamed to its segment's name when the
// segment opens. Removed at start: never more than a file of zeros.
inline constexpr const char* kSpareFileName = "kvrdma.spare";

struct DataDirMeta {
  uint64_t data_dir_id = 0;
  uint64_t hash_seed = 0;
  uint64_t segment_bytes = 0;
};

struct SegmentHeader {
  uint64_t data_dir_id = 0;
  uint64_t open_seq = 0;
  uint64_t segment_bytes = 0;
};

void EncodeMeta(const DataDirMeta& m, std::span<std::byte, kMetaBytes> out) noexcept;
// `where` names the file in errors. Corruption with what was expected.
Result<DataDirMeta> DecodeMeta(std::span<const std::byte> in, const std::string& where);

void EncodeSegmentHeader(const SegmentHeader& h, std::span<std::byte, kSegmentHeaderUsedBytes> out) noexcept;
Result<SegmentHeader> DecodeSegmentHeader(std::span<const std::byte> in, const std::string& where);

// "segment-000000000000002a.kvseg" for open seq 42; ParseSegmentFileName
// returns false for any other name.
std::string SegmentFileName(uint64_t open_seq);
bool ParseSegmentFileName(const std::string& name, uint64_t* open_seq);

}  // namespace kvrdma
