// Sizes and offsets of the layouts clients read over RDMA (the wire contract).
#include <gtest/gtest.h>

#include <xxhash.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "common/format/entry.h"
#include "common/format/hash.h"
#include "common/format/simd.h"
#include "common/format/entry_ref.h"
#include "common/format/window.h"
#include "server/store/entry_leader.h"

namespace kvrdma {
namespace {

TEST(Layout, IndexWords) {
  EXPECT_EQ(kWordBytes, 8u);
  EXPECT_EQ(kMaxWindowWords, 128u);  // one READ of 1 KiB
  EXPECT_EQ(IndexWords(1 << 20, 128), (1u << 20) + 127);
  EXPECT_EQ(IndexWords(1, 14), 14u);
  // | fingerprint:12 | size class:11 | tag:5 | location:36 |
  EXPECT_EQ(kWordTagShift, 36u);
  EXPECT_EQ(kWordTagMask, uint64_t{0x1f} << 36);
  EXPECT_EQ(kRefSizeClassShift, 41u);
  EXPECT_EQ(kRefFingerprintShift, 52u);
}

TEST(Layout, MoveTagsBelongToTheWord) {
  const uint64_t ref = PackRef(0xabc, 40, 8 * 999);
  const uint64_t tagged = WordWith(ref, kTagSetBit | 7);
  EXPECT_EQ(WordRef(tagged), ref);
  EXPECT_EQ(WordTag(tagged), kTagSetBit | 7);
  EXPECT_EQ(RefFingerprint(WordRef(tagged)), 0xabc);
  EXPECT_EQ(RefLogOffset(WordRef(tagged)), 8u * 999);
  // An empty word can carry a tag: the ref is empty, the word is not 0.
  EXPECT_EQ(WordRef(WordWith(kEmptyRef, kTagSetBit | 3)), kEmptyRef);
  // A second key leaving a tagged word makes the tag match every key.
  EXPECT_EQ(TagAfterMove(kTagSetBit | 3, 3), kTagSetBit | 3);
  EXPECT_EQ(TagAfterMove(kTagSetBit | 3, 4), kTagSetBit | kTagAnyKey);
  for (uint64_t n = 0; n < 16; ++n) {
    EXPECT_TRUE(TagMatches(kTagSetBit | kTagAnyKey, n));
    EXPECT_EQ(TagMatches(kTagSetBit | 5, n), n == 5);
    EXPECT_FALSE(TagMatches(5, n));  // the set bit is clear: no tag
  }
}

TEST(Layout, EntryHeader) {
  EXPECT_EQ(kEntryHeaderBytes, 12u);
  EXPECT_EQ(GuardAt(0), 0u);  // an 8-aligned entry: guard, then lengths
  EXPECT_EQ(LengthsAt(0), 8u);
  EXPECT_EQ(GuardAt(4), 4u);  // an entry at 4 mod 8: lengths, then the guard
  EXPECT_EQ(LengthsAt(4), 0u);
  EXPECT_EQ(EntryBytes(1, 0), 16u);   // 13 -> 16
  EXPECT_EQ(EntryBytes(8, 8), 28u);
  EXPECT_EQ(EntryBytes(3, 6), 24u);   // 21 -> 24
  EXPECT_EQ(EntryBytes(16, 32), 60u);  // no padding: 12 + 48
  const uint32_t l = PackLengths(1023, kMaxValueBytes, false);
  EXPECT_EQ(LengthsKey(l), 1023u);
  EXPECT_EQ(LengthsValue(l), kMaxValueBytes);
  EXPECT_FALSE(LengthsTombstone(l));
  EXPECT_TRUE(LengthsTombstone(PackLengths(5, 0, true)));
}

TEST(Layout, RefPacking) {
  const uint64_t off = (kMaxLogBytes - 4);
  const uint64_t s = PackRef(0xfff, kMaxSizeClass, off);
  EXPECT_EQ(RefFingerprint(s), 0xfff);
  EXPECT_EQ(WordTag(s), 0u);
  EXPECT_EQ(RefSizeClass(s), kMaxSizeClass);
  EXPECT_EQ(RefLogOffset(s), off);
  EXPECT_TRUE(RefLooksValid(s));
  // All 11 bits round-trip (code 2047 is packable though never valid).
  EXPECT_EQ(RefSizeClass(PackRef(0, kRefSizeClassMask, 0)), 2047u);
  EXPECT_EQ(SizeClassFor(16), 4u);
  EXPECT_EQ(SizeClassFor(20), 5u);
  EXPECT_EQ(SizeClassFor(4092), 1023u);
  EXPECT_EQ(SizeClassFor(4096), 1024u);
  EXPECT_EQ(SizeClassFor(EntryBytes(kMaxKeyBytes, kMaxValueBytes)), kMaxSizeClass);
  EXPECT_EQ(kMaxSizeClass, 1024u + 9 * 32 + 1);
  EXPECT_NE(PackRef(0, kMinSizeClass, 0), kEmptyRef);
  EXPECT_EQ(RefLogOffset(PackRef(0, kMinSizeClass, 4)), 4u);  // locations in 4-byte units
  // Codes 0..3 are never entries.
  for (uint64_t code = 0; code < kMinSizeClass; ++code) EXPECT_FALSE(RefLooksValid(PackRef(0x123, code, 64)));
  EXPECT_FALSE(RefLooksValid(PackRef(0x123, kMaxSizeClass + 1, 64)));
  EXPECT_EQ(kMaxLogBytes, uint64_t{256} << 30);
}

TEST(Layout, EncodedEntryBytes) {
  for (uint64_t off : {0, 4}) {
    std::byte buf[64];
    ASSERT_EQ(EncodeEntry(buf, off, "abc", "value!", false, 42), 24u);  // 12 + 9 -> 24
    EntryHeader h;
    std::memcpy(&h.guard, buf + GuardAt(off), 8);
    std::memcpy(&h.lengths, buf + LengthsAt(off), 4);
    EXPECT_EQ(LengthsKey(h.lengths), 3u);
    EXPECT_EQ(LengthsValue(h.lengths), 6u);
    EXPECT_EQ(h.guard & kGuardNotCurrentBit, 0u);
    EXPECT_EQ(h.guard, EntryChecksum(h.lengths, buf + 12, 3 + 6, 42));
    EXPECT_EQ(std::memcmp(buf + 12, "abcvalue!", 9), 0);
    EXPECT_EQ(buf[21], std::byte{0});  // padding is zero
    EXPECT_EQ(EncodeEntry(std::span<std::byte>(buf, 23), off, "abc", "value!", false, 42), 0u);
    EXPECT_EQ(EncodeEntry(buf, off, "", "x", false, 42), 0u);
  }
  std::byte buf[64];
  EXPECT_EQ(EncodeEntry(buf, 2, "abc", "v", false, 42), 0u);  // not a multiple of 4
  // The checksum covers the lengths: the same bytes with other lengths differ.
  const auto* kv = reinterpret_cast<const std::byte*>("abcvalue!");
  EXPECT_NE(EntryChecksum(PackLengths(3, 6, false), kv, 9, 42), EntryChecksum(PackLengths(4, 5, false), kv, 9, 42));
}

// The AVX2 long hash (common/format/checksum_avx2.cc, XXH3 with its
// accumulators in registers) with seed 0, which takes XXH3's default secret
// instead of one derived from the seed (EntryChecksum's mixed seeds are
// almost never 0): one piece and two, around every block edge.
TEST(Layout, TheAvx2LongHashIsXxh3WithSeedZeroToo) {
#if defined(__x86_64__)  // where common/format builds checksum_avx2.cc
  if (!detail::CpuHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2";
  std::vector<std::byte> buf(3 * 4096 + 64);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  for (size_t n = 241; n <= 3 * 4096; n += (n < 1100 ? 1 : 61)) {
    const uint64_t want = XXH3_64bits_withSeed(buf.data() + 1, n, 0);
    ASSERT_EQ(detail::Xxh3Avx2(buf.data() + 1, n, 0), want) << n;
    for (size_t cut : {size_t{0}, size_t{1}, size_t{64}, size_t{1023}, size_t{1024}, n / 2, n - 1, n}) {
      ASSERT_EQ(detail::Xxh3Avx2Pieces(buf.data() + 1, cut, buf.data() + 1 + cut, n - cut, 0), want)
          << n << " bytes cut at " << cut;
    }
  }
#else
  GTEST_SKIP() << "no AVX2 kernels on this architecture";
#endif
}

// n bytes of xorshift64 from `seed` (inputs for the checksum tests).
std::vector<std::byte> XorshiftBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> buf(n);
  for (std::byte& b : buf) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    b = static_cast<std::byte>(seed);
  }
  return buf;
}

// EntryChecksum takes XXH3's AVX2 build for inputs over 240 bytes where the
// CPU has AVX2 (common/format/checksum_avx2.cc): every client and server must
// compute the same value as Debian's libxxhash (built for SSE2), or a reader
// on one machine would refuse a writer's entries. Every length around the
// vector loop's block and stripe edges, every alignment, and large ones.
TEST(Layout, EntryChecksumIsLibxxhashsXxh3AtEverySizeAndAlignment) {
  const std::vector<std::byte> buf = XorshiftBytes((size_t{1} << 20) + 4096, 0x9E3779B97F4A7C15ull);
  auto expect_same = [&](size_t n, size_t align, uint64_t seed) {
    const uint32_t lengths = PackLengths(16, static_cast<uint32_t>(n - 16), false);
    const uint64_t mixed = seed ^ (uint64_t{lengths} * 0x9E3779B97F4A7C15ull);
    const uint64_t want = XXH3_64bits_withSeed(buf.data() + align, n, mixed) & kGuardChecksumMask;
    ASSERT_EQ(EntryChecksum(lengths, buf.data() + align, n, seed), want) << n << " bytes at +" << align;
  };
  for (size_t n = 16; n <= 4200; ++n) ASSERT_NO_FATAL_FAILURE(expect_same(n, n % 64, 42));
  for (size_t n : {size_t{65536}, size_t{65536 + 17}, size_t{1} << 20}) {
    for (size_t align = 0; align < 64; align += 7) ASSERT_NO_FATAL_FAILURE(expect_same(n, align, n * 31 + align));
  }
  // Over two pieces (a direct READ: key in the client's buffer, value in the
  // caller's): the checksum of the whole, at every cut of the short inputs
  // and around the 240-byte, stripe and block edges of long ones.
  auto expect_pieces = [&](size_t n, size_t cut) {
    const uint32_t lengths = PackLengths(16, static_cast<uint32_t>(n - 16), false);
    const std::span<const std::byte> all(buf.data() + 3, n);
    ASSERT_EQ(EntryChecksum(lengths, all.first(cut), all.subspan(cut), 7), EntryChecksum(lengths, all.data(), n, 7))
        << n << " bytes cut at " << cut;
  };
  for (size_t n = 16; n <= 300; ++n) {
    for (size_t cut = 0; cut <= n; ++cut) ASSERT_NO_FATAL_FAILURE(expect_pieces(n, cut));
  }
  for (size_t n : {size_t{1000}, size_t{1024 + 64}, size_t{65536 + 5}, size_t{1} << 20}) {
    for (size_t cut : {size_t{1}, size_t{16}, size_t{63}, size_t{64}, size_t{65}, size_t{255}, size_t{256},
                       size_t{257}, size_t{1023}, size_t{1024}, n / 2, n - 1}) {
      if (cut <= n) {
        ASSERT_NO_FATAL_FAILURE(expect_pieces(n, cut));
      }
    }
  }
}

// EntryChecksumCopy (a GET's value copied into the caller's buffer in the
// pass that checksums it; AVX2: checksum_avx2.cc's HashLongMove) gives
// EntryChecksum's value and copies exactly bytes [from, n) to dst: every
// length around the 240-byte, stripe and block edges, keys of every length
// up to past a block, and large values; guard bytes on both sides of dst.
TEST(Layout, EntryChecksumCopyChecksumsAndCopiesExactlyTheValueBothWays) {
  const std::vector<std::byte> buf = XorshiftBytes((size_t{1} << 20) + 2048, 0x2545F4914F6CDD1Dull);
  constexpr size_t kGuard = 64;
  std::vector<std::byte> out(buf.size() + 2 * kGuard);
  auto expect_copy = [&](size_t n, size_t from, size_t align) {
    const uint32_t lengths = PackLengths(static_cast<uint32_t>(from), static_cast<uint32_t>(n - from), false);
    const std::byte* in = buf.data() + align;
    std::byte* dst = out.data() + kGuard + (align * 3) % 32;  // dst's alignment apart from the input's
    std::byte* const end = dst + (n - from);
    std::fill(dst - kGuard, end + kGuard, std::byte{0xA5});
    const uint64_t sum = EntryChecksumCopy(lengths, in, n, from, dst, 99);
    ASSERT_EQ(sum, EntryChecksum(lengths, in, n, 99)) << n << " bytes from " << from;
    ASSERT_EQ(std::memcmp(dst, in + from, n - from), 0) << n << " bytes from " << from;
    for (const std::byte* g = dst - kGuard; g < dst; ++g) ASSERT_EQ(*g, std::byte{0xA5}) << n << " from " << from;
    for (const std::byte* g = end; g < end + kGuard; ++g) {
      ASSERT_EQ(*g, std::byte{0xA5}) << n << " bytes from " << from << ": written past the value";
    }
  };
  // The other way (EntryChecksumCopyIn: a value into the log after its
  // key): the destination holds the key, then exactly the value, and the
  // checksum is EntryChecksum's over what it holds.
  auto expect_copy_in = [&](size_t n, size_t from, size_t align) {
    const uint32_t lengths = PackLengths(static_cast<uint32_t>(from), static_cast<uint32_t>(n - from), false);
    const std::byte* key = buf.data() + align;
    const std::byte* value = buf.data() + (buf.size() - (n - from)) - align % 17;
    std::byte* dst = out.data() + kGuard + (align * 5) % 32;
    std::fill(dst - kGuard, dst + n + kGuard, std::byte{0xA5});
    std::memcpy(dst, key, from);  // the key, written first as the store does
    const uint64_t sum = EntryChecksumCopyIn(lengths, dst, n, from, value, 77);
    ASSERT_EQ(std::memcmp(dst, key, from), 0) << n << " bytes from " << from;
    ASSERT_EQ(std::memcmp(dst + from, value, n - from), 0) << n << " bytes from " << from;
    ASSERT_EQ(sum, EntryChecksum(lengths, dst, n, 77)) << n << " bytes from " << from;
    for (const std::byte* g = dst - kGuard; g < dst; ++g) ASSERT_EQ(*g, std::byte{0xA5}) << n << " from " << from;
    for (const std::byte* g = dst + n; g < dst + n + kGuard; ++g) {
      ASSERT_EQ(*g, std::byte{0xA5}) << n << " bytes from " << from << ": written past the value";
    }
  };
  for (size_t n = 1; n <= 2200; n += (n < 300 ? 1 : 7)) {
    for (size_t from : {size_t{0}, size_t{1}, size_t{16}, size_t{63}, size_t{64}, size_t{65}, size_t{200},
                        size_t{1023}, size_t{1024}, size_t{1100}}) {
      if (from <= n) {
        ASSERT_NO_FATAL_FAILURE(expect_copy(n, from, n % 64));
        ASSERT_NO_FATAL_FAILURE(expect_copy_in(n, from, n % 64));
      }
    }
  }
  for (size_t n : {size_t{4096}, size_t{65536 + 16}, size_t{65536 + 16 + 37}, (size_t{1} << 20) + 1023}) {
    for (size_t from : {size_t{1}, size_t{16}, size_t{64}, size_t{255}, size_t{1023}}) {
      ASSERT_NO_FATAL_FAILURE(expect_copy(n, from, from % 64));
      ASSERT_NO_FATAL_FAILURE(expect_copy_in(n, from, from % 64));
    }
  }
}

// The leader's check byte from its per-byte shares is the chained CRC-8 the
// files were written with, on every version tried.
TEST(Layout, LeaderCheckIsTheChainedCrc8) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 1000000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    const uint64_t version = x & kMaxWriteVersion;
    ASSERT_EQ(LeaderCheck(version), detail::LeaderCheckBytewise(version)) << version;
    ASSERT_TRUE(LeaderValid(PackLeader(version)));
  }
  for (uint64_t v = 0; v < 70000; ++v) ASSERT_EQ(LeaderCheck(v), detail::LeaderCheckBytewise(v)) << v;
}

TEST(Hash, HomeFingerprintAndTagNibbleUseDisjointBits) {
  for (uint64_t count : {1ull, 2ull, 1024ull, 1ull << 20, 1ull << 40}) {
    for (int k = 0; k < 2000; ++k) {
      const std::string key = "key-" + std::to_string(k);
      const KeyHash kh = MakeKeyHash(key, 99, count);
      ASSERT_LT(kh.home, count);
      ASSERT_EQ(kh.home, kh.hash & (count - 1));
      ASSERT_EQ(kh.fingerprint, kh.hash >> 52);
      ASSERT_EQ(kh.tag_nibble(), ((kh.hash >> 40) & 255) % 15);
      ASSERT_LT(kh.tag_nibble(), kTagAnyKey);
    }
  }
}

}  // namespace
}  // namespace kvrdma
