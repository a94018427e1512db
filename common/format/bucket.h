// Index bucket: the unit a client READs from the hash index.
//
// The index is an array of `bucket_count` (a power of two) buckets, 64-byte
// aligned, at the start of the index memory region. A key may live in any of
// its two candidate buckets (hash.h); a GET READs both in one doorbell.
//
//   offset  size  field
//        0     8  version   bumped (release store) by the server each time a
//                           slot is moved OUT of this bucket by cuckoo
//                           displacement, between writing the destination
//                           slot and clearing this one. A reader that found
//                           nothing compares it across two rounds to tell a
//                           real miss from a key that moved under it
//                           (docs/DESIGN.md, "Displacement and misses").
//        8    56  slots[7]  packed slots (slot.h); 0 = empty.
//
// Server threads serialize changes with locks in server-private memory; the
// bucket words themselves hold no lock bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/format/format_constants.h"

namespace kvrdma {

struct alignas(kBucketBytes) IndexBucket {
  uint64_t version;                  // displacement counter, see above
  uint64_t slots[kSlotsPerBucket];   // packed slots, see slot.h
};

static_assert(sizeof(IndexBucket) == kBucketBytes);
static_assert(alignof(IndexBucket) == kBucketBytes);
static_assert(offsetof(IndexBucket, version) == 0);
static_assert(offsetof(IndexBucket, slots) == 8);
static_assert(std::is_trivially_copyable_v<IndexBucket>);
static_assert(std::is_standard_layout_v<IndexBucket>);

// Byte offset of slot `i` (0-based) inside a bucket.
constexpr size_t BucketSlotOffset(size_t i) noexcept { return offsetof(IndexBucket, slots) + i * kSlotBytes; }

}  // namespace kvrdma
