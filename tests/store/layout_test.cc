// Sizes and offsets of the layouts clients read over RDMA (the wire contract).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "common/format/bucket.h"
#include "common/format/entry.h"
#include "common/format/hash.h"
#include "common/format/slot.h"

namespace kvrdma {
namespace {

TEST(Layout, Bucket) {
  EXPECT_EQ(sizeof(IndexBucket), 64u);
  EXPECT_EQ(alignof(IndexBucket), 64u);
  EXPECT_EQ(offsetof(IndexBucket, version), 0u);
  EXPECT_EQ(offsetof(IndexBucket, slots), 8u);
  EXPECT_EQ(BucketSlotOffset(6), 56u);
  EXPECT_EQ(kSlotsPerBucket, 7u);
}

TEST(Layout, EntryHeader) {
  EXPECT_EQ(sizeof(EntryHeader), 16u);
  EXPECT_EQ(offsetof(EntryHeader, guard), 0u);
  EXPECT_EQ(offsetof(EntryHeader, version), 8u);
  EXPECT_EQ(offsetof(EntryHeader, lengths), 12u);
  EXPECT_EQ(EntryBytes(1, 0), 24u);
  EXPECT_EQ(EntryBytes(8, 8), 32u);
  EXPECT_EQ(EntryBytes(3, 6), 32u);  // 25 -> 32
  const uint32_t l = PackLengths(1023, kMaxValueBytes, false);
  EXPECT_EQ(LengthsKey(l), 1023u);
  EXPECT_EQ(LengthsValue(l), kMaxValueBytes);
  EXPECT_FALSE(LengthsTombstone(l));
  EXPECT_TRUE(LengthsTombstone(PackLengths(5, 0, true)));
}

TEST(Layout, SlotPacking) {
  const uint64_t off = (kMaxLogBytes - 8);
  const uint64_t s = PackSlot(0xffff, kMaxSizeClass, off);
  EXPECT_EQ(SlotFingerprint(s), 0xffff);
  EXPECT_EQ(SlotSizeClass(s), kMaxSizeClass);
  EXPECT_EQ(SlotLogOffset(s), off);
  EXPECT_TRUE(SlotLooksValid(s));
  // All 12 bits round-trip (code 4095 is packable though never valid).
  EXPECT_EQ(SlotSizeClass(PackSlot(0, kSlotSizeClassMask, 0)), 4095u);
  EXPECT_EQ(SizeClassFor(24), 3u);
  EXPECT_EQ(SizeClassFor(16376), 2047u);
  EXPECT_EQ(SizeClassFor(16384), 2048u);
  EXPECT_EQ(SizeClassFor(EntryBytes(kMaxKeyBytes, kMaxValueBytes)), kMaxSizeClass);
  EXPECT_EQ(kMaxSizeClass, 2048u + 7 * 64 + 1);
  EXPECT_NE(PackSlot(0, kMinSizeClass, 0), kEmptySlot);
  // Codes 0..2 are never entries (code 1 is reserved for a marker slot).
  for (uint64_t code = 0; code < kMinSizeClass; ++code) EXPECT_FALSE(SlotLooksValid(PackSlot(0x1234, code, 64)));
  EXPECT_FALSE(SlotLooksValid(PackSlot(0x1234, kMaxSizeClass + 1, 64)));
  EXPECT_EQ(kMaxLogBytes, uint64_t{512} << 30);
}

TEST(Layout, EncodedEntryBytes) {
  std::byte buf[64];
  ASSERT_EQ(EncodeEntry(buf, "abc", "value!", 7, false, 42), 32u);
  EntryHeader h;
  std::memcpy(&h, buf, sizeof(h));
  EXPECT_EQ(h.version, 7u);
  EXPECT_EQ(LengthsKey(h.lengths), 3u);
  EXPECT_EQ(LengthsValue(h.lengths), 6u);
  EXPECT_EQ(h.guard & kGuardNotCurrentBit, 0u);
  EXPECT_EQ(h.guard, EntryChecksum(buf + 8, 8 + 3 + 6, 42));
  EXPECT_EQ(std::memcmp(buf + 16, "abcvalue!", 9), 0);
  EXPECT_EQ(buf[25], std::byte{0});  // padding is zero
  EXPECT_EQ(EncodeEntry(std::span<std::byte>(buf, 31), "abc", "value!", 7, false, 42), 0u);
  EXPECT_EQ(EncodeEntry(buf, "", "x", 1, false, 42), 0u);
}

TEST(Hash, CandidateBucketsDifferAndAreSymmetric) {
  for (uint64_t count : {2ull, 4ull, 1024ull, 1ull << 20}) {
    for (int k = 0; k < 2000; ++k) {
      const std::string key = "key-" + std::to_string(k);
      const KeyHash kh = MakeKeyHash(key, 99, count);
      ASSERT_NE(kh.bucket[0], kh.bucket[1]);
      ASSERT_LT(kh.bucket[1], count);
      ASSERT_EQ(AlternateBucket(kh.bucket[1], kh.fingerprint, count), kh.bucket[0]);
    }
  }
}

}  // namespace
}  // namespace kvrdma
