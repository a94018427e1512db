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
//     and, at kSyncedBoundOffsets[0] and [1] (each in a 512-byte sector of
//     its own, apart from the header's), two synced bound records
//     (kSyncedBoundBytes each):
//       magic "KVRDSYNC" u64 | open seq u64 | synced bound u64 | checksum u64
//     the rest of the header zeros;
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
//
// The synced bound (docs/DESIGN.md "Durability", Recovery): an in-segment
// offset L such that the file's bytes before L were made durable by a sync
// (fdatasync) that returned. Written after a sync returned, never ahead of
// what it covered, into the slot that does not hold the newest record known
// durable, so that a write of one slot torn by a crash leaves the other
// slot's record, durable, in place; it becomes durable itself with the
// file's next sync. So every record that checks is <= the true synced
// length. The file's first record (bound 0) goes with its header, in the
// same write. A file of a kvserver before the synced bound (or of --fsync
// no, which never syncs) has none: its synced bound is unknown. The disk
// format is unchanged (1): older kvservers read only the header's first
// 72 bytes, and this one reads their files with an unknown bound.
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
// The synced bound records: two slots in the header's unused bytes, each
// in a sector (512 bytes, what a disk writes whole) of its own.
inline constexpr size_t kSyncedBoundBytes = 32;
inline constexpr size_t kSyncedBoundOffsets[2] = {512, 1024};
static_assert(kSyncedBoundOffsets[0] >= 512 && kSegmentHeaderUsedBytes <= 512,
              "the header and a synced bound record share no 512-byte sector");
static_assert(kSyncedBoundOffsets[1] / 512 != kSyncedBoundOffsets[0] / 512 &&
                  kSyncedBoundOffsets[0] % 512 + kSyncedBoundBytes <= 512 &&
                  kSyncedBoundOffsets[1] % 512 + kSyncedBoundBytes <= 512,
              "each synced bound record lies inside a 512-byte sector of its own");
static_assert(kSyncedBoundOffsets[1] + kSyncedBoundBytes <= kSegmentHeaderBytes, "inside the header region");
// What OpenSegment writes in one write: the header and the first record
// (bound 0) in slot 0.
inline constexpr size_t kSegmentFirstWriteBytes = kSyncedBoundOffsets[0] + kSyncedBoundBytes;
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

// A synced bound record: magic "KVRDSYNC" u64 | open seq u64 | synced bound
// (an in-segment offset) u64 | checksum u64 (XXH3-64 of the 24 bytes before).
void EncodeSyncedBound(uint64_t open_seq, uint64_t bound, std::span<std::byte, kSyncedBoundBytes> out) noexcept;
// The header region's synced bound: the largest bound among the records
// that check (magic, this file's open seq, checksum, at most segment_bytes);
// kSyncedBoundUnknown if none does (a file without records, or both torn).
inline constexpr uint64_t kSyncedBoundUnknown = UINT64_MAX;
uint64_t DecodeSyncedBound(std::span<const std::byte> header_region, uint64_t open_seq, uint64_t segment_bytes) noexcept;

// "segment-000000000000002a.kvseg" for open seq 42; ParseSegmentFileName
// returns false for any other name.
std::string SegmentFileName(uint64_t open_seq);
bool ParseSegmentFileName(const std::string& name, uint64_t* open_seq);

}  // namespace kvrdma
