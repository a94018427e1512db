// The pure read path on good, torn, corrupt, recycled and wrong-key bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/format/read_path.h"

namespace kvrdma {
namespace {

constexpr uint64_t kSeed = 1234;

struct Encoded {
  std::vector<std::byte> bytes;
  uint64_t ref;
};

// An entry encoded as at log offset `off` (off % 8 says where its guard is).
Encoded Make(std::string_view key, std::string_view value, bool tomb = false, uint64_t off = 64) {
  Encoded e;
  e.bytes.resize(EntryBytes(key.size(), value.size()));
  EXPECT_EQ(EncodeEntry(e.bytes, off, key, value, tomb, kSeed), e.bytes.size());
  const KeyHash kh = MakeKeyHash(key, kSeed, 1024);
  e.ref = PackRef(kh.fingerprint, SizeClassFor(e.bytes.size()), off);
  return e;
}

TEST(ReadPath, KeyWindowRead) {
  IndexParams p{1024, 128, kSeed, 1 << 20};
  auto r = KeyWindowRead(p, "hello");
  ASSERT_TRUE(r.ok());
  const KeyHash kh = MakeKeyHash("hello", kSeed, 1024);
  EXPECT_EQ(r->read.offset, kh.home * 8);
  EXPECT_EQ(r->read.length, 128u * 8);
  EXPECT_TRUE(KeyWindowRead(IndexParams{1, 14, kSeed, 1 << 20}, "k").ok());
  EXPECT_EQ(KeyWindowRead(IndexParams{1, 14, kSeed, 1 << 20}, "k")->read.offset, 0u);
  EXPECT_FALSE(KeyWindowRead(IndexParams{1000, 128, kSeed, 1 << 20}, "k").ok());  // not a power of two
  EXPECT_FALSE(KeyWindowRead(IndexParams{0, 128, kSeed, 1 << 20}, "k").ok());
  EXPECT_FALSE(KeyWindowRead(IndexParams{1024, 0, kSeed, 1 << 20}, "k").ok());
  EXPECT_FALSE(KeyWindowRead(IndexParams{1024, 129, kSeed, 1 << 20}, "k").ok());
  EXPECT_FALSE(KeyWindowRead(IndexParams{1024, 128, kSeed, 0}, "k").ok());
  EXPECT_FALSE(KeyWindowRead(p, "").ok());
  EXPECT_FALSE(KeyWindowRead(p, std::string(2000, 'k')).ok());
}

// ProbeWindow scans four words at a time (SSE2); the one-word-at-a-time scan
// is the reference. Random windows of every size, whose words are drawn so
// that fingerprint matches, tags (the key's, any key's, another key's, unset
// set bit), empty words and implausible refs all occur often, must give the
// same probe.
TEST(ReadPath, EveryWindowScanAgreesWithTheOneWordScan) {
  using detail::WindowScan;
  ASSERT_TRUE(detail::WindowScanAvailable(WindowScan::kSse2));
  if (!detail::WindowScanAvailable(WindowScan::kAvx2)) std::printf("this CPU has no AVX2: its scan is not tested\n");
  std::mt19937_64 rng(7);
  uint64_t w[kMaxWindowWords];
  for (int round = 0; round < 20000; ++round) {
    const uint64_t n = 1 + rng() % kMaxWindowWords;
    IndexParams p{1024, n, kSeed, uint64_t{1} << (10 + rng() % 20)};
    KeyHash kh = MakeKeyHash("k" + std::to_string(round), kSeed, 1024);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t fp = rng() % 3 == 0 ? kh.fingerprint : rng();
      const uint64_t code = rng() % 4 == 0 ? rng() % (kRefSizeClassMask + 1) : 3 + rng() % 40;
      uint64_t ref = rng() % 5 == 0 ? kEmptyRef : PackRef(fp, code, (rng() % (p.log_bytes / 4)) * 8);
      uint64_t tag = 0;
      switch (rng() % 6) {
        case 0: tag = kTagSetBit | kh.tag_nibble(); break;
        case 1: tag = kTagSetBit | kTagAnyKey; break;
        case 2: tag = kTagSetBit | (rng() & kTagNibbleMask); break;
        case 3: tag = rng() & kTagNibbleMask; break;  // set bit clear: no tag
        default: break;
      }
      w[i] = rng() % 50 == 0 ? rng() : WordWith(ref, tag);  // now and then any 64 bits
    }
    // Rarely a tag at all, so that tag_matched is false often enough.
    if (round % 2 == 0) {
      for (uint64_t i = 0; i < n; ++i) w[i] = WordWith(WordRef(w[i]), 0);
    }
    const auto bytes = std::as_bytes(std::span(w, n));
    WindowProbe ref;
    ASSERT_TRUE(detail::ProbeWindowWith(WindowScan::kOneWord, bytes, kh, p, &ref).ok());
    for (WindowScan scan : {WindowScan::kSse2, WindowScan::kAvx2}) {
      if (!detail::WindowScanAvailable(scan)) continue;
      WindowProbe fast;
      ASSERT_TRUE(detail::ProbeWindowWith(scan, bytes, kh, p, &fast).ok());
      const int s = static_cast<int>(scan);
      ASSERT_EQ(fast.candidates, ref.candidates) << "scan " << s << ", round " << round << ", " << n << " words";
      ASSERT_EQ(fast.count, ref.count) << "scan " << s << ", round " << round;
      ASSERT_EQ(fast.rejected, ref.rejected) << "scan " << s << ", round " << round;
      ASSERT_EQ(fast.tag_matched, ref.tag_matched) << "scan " << s << ", round " << round;
    }
    WindowProbe chosen;
    ASSERT_TRUE(ProbeWindow(bytes, kh, p, &chosen).ok());
    ASSERT_EQ(chosen.candidates, ref.candidates) << "round " << round;
    ASSERT_EQ(chosen.tag_matched, ref.tag_matched) << "round " << round;
  }
}

// KeyBytesEqual (a key's comparison without a call up to 16 bytes) against
// memcmp: every length up to 40, equal bytes and a difference at each
// position, at unaligned addresses.
TEST(ReadPath, KeyBytesEqualAgreesWithMemcmp) {
  std::mt19937_64 rng(11);
  std::vector<unsigned char> a(64), b(64);
  for (size_t n = 0; n <= 40; ++n) {
    for (size_t at = 0; at < 3; ++at) {
      for (auto& x : a) x = static_cast<unsigned char>(rng());
      b = a;
      ASSERT_TRUE(KeyBytesEqual(a.data() + at, b.data() + at + 0, n)) << n;
      for (size_t i = 0; i < n; ++i) {
        b[at + i] ^= static_cast<unsigned char>(1 + rng() % 255);
        ASSERT_EQ(KeyBytesEqual(a.data() + at, b.data() + at, n), std::memcmp(a.data() + at, b.data() + at, n) == 0)
            << n << " bytes, differing at " << i;
        ASSERT_FALSE(KeyBytesEqual(a.data() + at, b.data() + at, n)) << n << " bytes, differing at " << i;
        b[at + i] = a[at + i];
      }
    }
  }
}

TEST(ReadPath, ProbeWindowFindsFingerprintMatchesAndTags) {
  IndexParams p{1024, 16, kSeed, 1 << 20};
  const KeyHash kh = MakeKeyHash("hello", kSeed, 1024);
  uint64_t w[16] = {};
  w[3] = PackRef(kh.fingerprint, 4, 800);
  w[4] = PackRef(kh.fingerprint ^ 1, 4, 800);          // other fingerprint
  w[15] = PackRef(kh.fingerprint, 4, (1 << 20) - 8);   // outside the log (no room for a header)
  w[0] = PackRef(kh.fingerprint, 4, 1 << 21);          // outside the log
  w[1] = PackRef(kh.fingerprint, 1, 64);               // impossible size class
  w[9] = WordWith(PackRef(kh.fingerprint, 4, 960), kTagSetBit | ((kh.tag_nibble() + 1) & 15));  // another key's tag
  WindowProbe r;
  const auto bytes = [&] { return std::as_bytes(std::span(w)); };
  ASSERT_TRUE(ProbeWindow(bytes(), kh, p, &r).ok());
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(r.rejected, 3);
  EXPECT_FALSE(r.tag_matched);
  EXPECT_EQ(NextCandidate(r, 0), 3);
  EXPECT_EQ(NextCandidate(r, 4), 9);
  EXPECT_EQ(NextCandidate(r, 10), -1);
  Candidate c = CandidateAt(bytes(), 9, p);
  EXPECT_EQ(c.ref, PackRef(kh.fingerprint, 4, 960));  // the tag is not part of the ref
  EXPECT_EQ(c.entry.offset, 960u);
  EXPECT_EQ(c.entry.length, 16u);  // code 4: 4 units of 4 bytes
  w[15] = PackRef(kh.fingerprint, 4, (1 << 20) - 12);  // a header's room: a clamped read
  ASSERT_TRUE(ProbeWindow(bytes(), kh, p, &r).ok());
  EXPECT_EQ(r.count, 3);
  EXPECT_EQ(CandidateAt(bytes(), 15, p).entry.length, 12u);
  // A tag matching the key, on an empty word: no candidate, but no proof of a miss.
  w[7] = WordWith(kEmptyRef, kTagSetBit | kh.tag_nibble());
  ASSERT_TRUE(ProbeWindow(bytes(), kh, p, &r).ok());
  EXPECT_TRUE(r.tag_matched);
  EXPECT_FALSE(MissIsProven(r, true));
  w[7] = WordWith(kEmptyRef, kTagSetBit | kTagAnyKey);
  ASSERT_TRUE(ProbeWindow(bytes(), kh, p, &r).ok());
  EXPECT_TRUE(r.tag_matched);
  w[7] = 0;
  ASSERT_TRUE(ProbeWindow(bytes(), kh, p, &r).ok());
  EXPECT_TRUE(MissIsProven(r, true));
  EXPECT_FALSE(MissIsProven(r, false));  // a round over the round limit proves nothing
  EXPECT_FALSE(ProbeWindow(std::as_bytes(std::span(w)).first(120), kh, p, &r).ok());
  // Codes 0..2 and codes beyond the largest entry's are never followed.
  for (uint64_t code : {uint64_t{2}, kMaxSizeClass + 1, kRefSizeClassMask}) {
    uint64_t c[4] = {PackRef(kh.fingerprint, code, 64), 0, 0, 0};
    WindowProbe rc;
    ASSERT_TRUE(ProbeWindow(std::as_bytes(std::span(c)), kh, IndexParams{1024, 4, kSeed, 1 << 20}, &rc).ok());
    EXPECT_EQ(rc.count, 0) << code;
    EXPECT_EQ(rc.rejected, 1) << code;
  }
}

TEST(ReadPath, NextCandidateWalksAllWordsOfTheWidestWindow) {
  WindowProbe r;
  for (int i : {0, 63, 64, 127}) r.candidates[static_cast<size_t>(i) / 64] |= uint64_t{1} << (i % 64);
  EXPECT_EQ(NextCandidate(r, 0), 0);
  EXPECT_EQ(NextCandidate(r, 1), 63);
  EXPECT_EQ(NextCandidate(r, 64), 64);
  EXPECT_EQ(NextCandidate(r, 65), 127);
  EXPECT_EQ(NextCandidate(r, 128), -1);
}

TEST(ReadPath, DecodeValidEntryAtEitherAlignment) {
  for (uint64_t off : {64, 68}) {
    Encoded e = Make("key", "the value", false, off);
    EntryView v = DecodeEntry(e.bytes, "key", e.ref, kSeed, true);
    ASSERT_EQ(v.verdict, EntryVerdict::kValue) << off;
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(v.value.data()), v.value.size()), "the value");
    EXPECT_EQ(v.total_bytes, 24u);  // 12 + 3 + 9
    EXPECT_TRUE(EntryVerdictStatus(v.verdict).ok());
    // Read as if at the other alignment, the header's words are swapped: rejected.
    const uint64_t other = PackRef(RefFingerprint(e.ref), RefSizeClass(e.ref), off ^ 4);
    EXPECT_NE(DecodeEntry(e.bytes, "key", other, kSeed, false).verdict, EntryVerdict::kValue) << off;
  }
}

// DecodeEntryInto (a GET of a large value into the caller's buffer): the
// value copied into the buffer in the checksum's pass, with the same verdict
// as DecodeEntry's for the same bytes; a flipped byte, another key, a
// tombstone or a buffer too short never gives kValue over the buffer.
TEST(ReadPath, DecodeIntoABufferCopiesALargeValueAndDecidesAsDecodeEntry) {
  for (size_t len : {kFusedCopyMinBytes - 1, kFusedCopyMinBytes, size_t{65536}, size_t{100000}}) {
    std::string value(len, '\0');
    for (size_t i = 0; i < len; ++i) value[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
    for (uint64_t off : {64, 68}) {
      const Encoded e = Make("a-longer-key-of-29-bytes-long", value, false, off);
      std::vector<std::byte> out(len + 8, std::byte{0});
      EntryView v = DecodeEntryInto(e.bytes, "a-longer-key-of-29-bytes-long", e.ref, kSeed, false, out);
      ASSERT_EQ(v.verdict, EntryVerdict::kValue) << len;
      ASSERT_EQ(std::string_view(reinterpret_cast<const char*>(v.value.data()), v.value.size()), value) << len;
      // Copied into the buffer from 16 KiB; below, the value is in the entry's bytes.
      EXPECT_EQ(v.value.data() == out.data(), len >= kFusedCopyMinBytes) << len;
      if (len >= kFusedCopyMinBytes) {
        EXPECT_EQ(std::memcmp(out.data(), value.data(), len), 0);
      }
      // A buffer one byte short: not copied, the value still decoded (the
      // caller reports TooLarge).
      std::vector<std::byte> short_out(len - 1);
      v = DecodeEntryInto(e.bytes, "a-longer-key-of-29-bytes-long", e.ref, kSeed, false, short_out);
      ASSERT_EQ(v.verdict, EntryVerdict::kValue);
      EXPECT_NE(v.value.data(), short_out.data());
      EXPECT_EQ(v.value.size(), len);
      EXPECT_EQ(DecodeEntryInto(e.bytes, "a-longer-key-of-29-bytes-lonG", e.ref, kSeed, false, out).verdict,
                EntryVerdict::kWrongKey);
      for (size_t at : {size_t{12}, size_t{12 + 29 + 5}, size_t{12 + 29 + len / 2}, size_t{12 + 29 + len - 1}}) {
        std::vector<std::byte> b = e.bytes;
        b[at] ^= std::byte{0x10};
        EXPECT_EQ(DecodeEntryInto(b, "a-longer-key-of-29-bytes-long", e.ref, kSeed, false, out).verdict,
                  DecodeEntry(b, "a-longer-key-of-29-bytes-long", e.ref, kSeed, false).verdict);
        EXPECT_NE(DecodeEntryInto(b, "a-longer-key-of-29-bytes-long", e.ref, kSeed, false, out).verdict,
                  EntryVerdict::kValue) << len << " byte " << at;
      }
    }
  }
  const Encoded t = Make("k", "", /*tomb=*/true);
  std::vector<std::byte> out(kFusedCopyMinBytes);
  EXPECT_EQ(DecodeEntryInto(t.bytes, "k", t.ref, kSeed, false, out).verdict, EntryVerdict::kTombstone);
}

TEST(ReadPath, RejectsEveryByteFlip) {
  for (uint64_t off : {64, 68}) {
    Encoded e = Make("key", "the value", false, off);
    const size_t not_current_byte = GuardAt(off) + 7;
    for (size_t i = 0; i < e.bytes.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<std::byte> b = e.bytes;
        b[i] ^= std::byte(1 << bit);
        EntryView v = DecodeEntry(b, "key", e.ref, kSeed, false);
        if (i == not_current_byte && bit == 7) {  // the not-current bit is outside the checksum
          EXPECT_EQ(v.verdict, EntryVerdict::kValue);
          EXPECT_TRUE(v.superseded);
          continue;
        }
        ASSERT_LT(i, 12u + 3 + 9) << "no padding: 24 bytes";
        EXPECT_NE(v.verdict, EntryVerdict::kValue) << "off " << off << " byte " << i << " bit " << bit;
        EXPECT_NE(v.verdict, EntryVerdict::kTombstone);
      }
    }
  }
}

TEST(ReadPath, PaddingIsNotCovered) {
  Encoded e = Make("key", "value", false, 64);  // 12 + 8 = 20 bytes, no padding
  ASSERT_EQ(e.bytes.size(), 20u);
  Encoded p = Make("key", "value!", false, 64);  // 21 -> 24: three bytes of padding
  ASSERT_EQ(p.bytes.size(), 24u);
  for (size_t i = 21; i < 24; ++i) {
    EXPECT_EQ(p.bytes[i], std::byte{0});
    std::vector<std::byte> b = p.bytes;
    b[i] = std::byte{0xff};
    EXPECT_EQ(DecodeEntry(b, "key", p.ref, kSeed, false).verdict, EntryVerdict::kValue);
  }
}

TEST(ReadPath, TornEntryIsRejected) {
  // Old and new entries of the same length at the same place: any mix of the
  // 8-byte words of the log (8-aligned in the log, so shifted by 4 in an
  // entry at an offset of 4 mod 8) from the two must not decode as a value
  // unless it equals one of them.
  for (uint64_t off : {64, 68}) {
    Encoded a = Make("key", std::string(41, 'a'), false, off);  // 12 + 44 = 56 bytes
    Encoded b = Make("key", std::string(41, 'b'), false, off);
    ASSERT_EQ(a.bytes.size(), b.bytes.size());
    // Word boundaries inside the entry: 0, 8, 16, ... or 0, 4, 12, 20, ...
    std::vector<size_t> cuts{0};
    for (size_t c = (off % 8 == 0 ? 8 : 4); c < a.bytes.size(); c += 8) cuts.push_back(c);
    cuts.push_back(a.bytes.size());
    const size_t words = cuts.size() - 1;
    int torn = 0;
    for (uint32_t mask = 1; mask + 1 < (1u << words); ++mask) {
      std::vector<std::byte> m = a.bytes;
      for (size_t w = 0; w < words; ++w) {
        if (mask & (1u << w)) std::memcpy(&m[cuts[w]], &b.bytes[cuts[w]], cuts[w + 1] - cuts[w]);
      }
      EntryView v = DecodeEntry(m, "key", a.ref, kSeed, false);
      if (v.verdict == EntryVerdict::kValue) {
        // Only a mix whose bytes equal one of the two (the pieces it took
        // from the other were identical: the lengths) may decode.
        EXPECT_TRUE(m == a.bytes || m == b.bytes) << "off " << off << " mask " << mask;
      } else {
        ++torn;
      }
    }
    EXPECT_GE(torn, static_cast<int>((1u << words) - 4)) << off;
  }
}

TEST(ReadPath, WrongKeyRecycledAndMalformed) {
  Encoded e = Make("key", "value");
  EXPECT_EQ(DecodeEntry(e.bytes, "kez", e.ref, kSeed, false).verdict, EntryVerdict::kWrongKey);
  EXPECT_EQ(DecodeEntry(e.bytes, "key2", e.ref, kSeed, false).verdict, EntryVerdict::kWrongKey);
  // Recycled: another entry of a different length now lives at the location.
  Encoded other = Make("other-key-long", "some other value that is longer");
  EXPECT_EQ(DecodeEntry(other.bytes, "key", e.ref, kSeed, false).verdict, EntryVerdict::kMalformed);
  // Recycled with the same length: the key check rejects it.
  Encoded same_len = Make("kez", "value");
  EXPECT_EQ(DecodeEntry(same_len.bytes, "key", e.ref, kSeed, false).verdict, EntryVerdict::kWrongKey);
  // Zeroed (freshly mapped or scrubbed) memory.
  std::vector<std::byte> zero(64);
  EXPECT_EQ(DecodeEntry(zero, "key", e.ref, kSeed, false).verdict, EntryVerdict::kMalformed);
  // Too short for a header.
  EXPECT_EQ(DecodeEntry(std::span(e.bytes).first(15), "key", e.ref, kSeed, false).verdict,
            EntryVerdict::kMalformed);
  // Other seed (another server's data): checksum mismatch.
  EXPECT_EQ(DecodeEntry(e.bytes, "key", e.ref, kSeed + 1, false).verdict, EntryVerdict::kTorn);
  // Status mapping.
  EXPECT_EQ(EntryVerdictStatus(EntryVerdict::kTorn).code(), Status::Code::kRetry);
  EXPECT_EQ(EntryVerdictStatus(EntryVerdict::kMalformed).code(), Status::Code::kRetry);
  EXPECT_EQ(EntryVerdictStatus(EntryVerdict::kTombstone).code(), Status::Code::kNotFound);
}

TEST(ReadPath, SupersededAndTombstone) {
  Encoded e = Make("key", "value");
  e.bytes[7] |= std::byte{0x80};
  EXPECT_EQ(DecodeEntry(e.bytes, "key", e.ref, kSeed, false).verdict, EntryVerdict::kValue);
  EXPECT_EQ(DecodeEntry(e.bytes, "key", e.ref, kSeed, true).verdict, EntryVerdict::kSuperseded);
  Encoded t = Make("key", "", true);
  EntryView v = DecodeEntry(t.bytes, "key", t.ref, kSeed, true);
  EXPECT_EQ(v.verdict, EntryVerdict::kTombstone);
}

TEST(ReadPath, SizeClassCodes) {
  // Exact codes: the length in 4-byte units, up to 4092 bytes.
  for (uint64_t bytes = 16; bytes <= kMaxExactEntryBytes; bytes += 4) {
    ASSERT_EQ(SizeClassFor(bytes), bytes / 4);
    ASSERT_EQ(SizeClassBytes(bytes / 4), bytes);
  }
  // Coarse codes: every entry size up to the largest gets the smallest code
  // covering it, the previous code does not cover it, and the READ is at
  // most 1/32 longer than the entry.
  for (uint64_t bytes = kMaxExactEntryBytes + 4; bytes <= kMaxEntryBytes; bytes += 4) {
    const uint64_t code = SizeClassFor(bytes);
    ASSERT_GE(code, kFirstCoarseSizeClass) << bytes;
    ASSERT_LE(code, kMaxSizeClass) << bytes;
    ASSERT_GE(SizeClassBytes(code), bytes) << bytes;
    ASSERT_LT(SizeClassBytes(code - 1), bytes) << bytes;
    ASSERT_LE(SizeClassBytes(code) * kSizeClassSteps, bytes * (kSizeClassSteps + 1)) << bytes;
  }
  EXPECT_EQ(SizeClassFor(kMaxEntryBytes), kMaxSizeClass);
  EXPECT_LT(kMaxSizeClass, 2048u);
  // Codes' bytes strictly increase, so "the smallest covering code" is unique.
  for (uint64_t code = kMinSizeClass; code < kMaxSizeClass; ++code) {
    ASSERT_LT(SizeClassBytes(code), SizeClassBytes(code + 1)) << code;
  }
}

TEST(ReadPath, CoarseClassEntryDecodesFromOneRead) {
  // 12 + 3 + 40000 -> 40016 bytes: code 1024 + 3 * 32 + 8, a READ of (32 + 8) << 10 = 40960.
  const std::string big(40000, 'x');
  Encoded e = Make("big", big);
  const uint64_t code = RefSizeClass(e.ref);
  EXPECT_EQ(code, kFirstCoarseSizeClass + 3 * 32 + 8);
  EXPECT_GE(code, kFirstCoarseSizeClass);
  const uint64_t read = SizeClassBytes(code);
  ASSERT_EQ(read, 40960u);  // the entry is shorter than its READ
  // What the READ returns: the entry, then whatever follows it in the log.
  std::vector<std::byte> bytes = e.bytes;
  bytes.resize(read, std::byte{0xa5});
  EntryView v = DecodeEntry(bytes, "big", e.ref, kSeed, false);
  ASSERT_EQ(v.verdict, EntryVerdict::kValue);
  EXPECT_EQ(v.total_bytes, e.bytes.size());
  EXPECT_EQ(v.value.size(), big.size());
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(v.value.data()), v.value.size()), big);
  // Bytes short of the entry are rejected, by one 8-byte word or by many.
  for (size_t len : {e.bytes.size() - 1, e.bytes.size() - 8, size_t{32760}, size_t{16}}) {
    EXPECT_EQ(DecodeEntry(std::span(bytes).first(len), "big", e.ref, kSeed, false).verdict, EntryVerdict::kMalformed)
        << len;
  }
  // The exact entry, no more, is enough.
  EXPECT_EQ(DecodeEntry(e.bytes, "big", e.ref, kSeed, false).verdict, EntryVerdict::kValue);
}

// A direct READ (client_get.cc): header and key in one piece, the rest of
// the READ in another (the caller's buffer). The same verdicts as one piece,
// the value handed out where it lies, the padding not needed; bytes short of
// key and value are malformed, a flipped byte in either piece is caught.
TEST(ReadPath, AnEntryInTwoPiecesDecodesAsInOne) {
  for (uint64_t off : {64, 68}) {
    const std::string value(5000, 'v');
    Encoded e = Make("key", value + "!", false, off);  // 12 + 3 + 5001 -> padding of 0..3 bytes
    std::vector<std::byte> bytes = e.bytes;
    bytes.resize(SizeClassBytes(RefSizeClass(e.ref)), std::byte{0xa5});
    const size_t head = 12 + 3;
    const std::span<const std::byte> all(bytes);
    EntryView v = DecodeEntry(all.first(head), all.subspan(head), "key", e.ref, kSeed, false);
    ASSERT_EQ(v.verdict, EntryVerdict::kValue) << off;
    EXPECT_EQ(v.value.data(), all.data() + head);  // in the second piece, not copied
    EXPECT_EQ(v.value.size(), 5001u);
    // Only key and value must be there: the second piece may end right after the value.
    EXPECT_EQ(DecodeEntry(all.first(head), all.subspan(head, 5001), "key", e.ref, kSeed, false).verdict,
              EntryVerdict::kValue);
    EXPECT_EQ(DecodeEntry(all.first(head), all.subspan(head, 5000), "key", e.ref, kSeed, false).verdict,
              EntryVerdict::kMalformed);
    // Another key of the same length, and a flipped byte in each piece.
    EXPECT_EQ(DecodeEntry(all.first(head), all.subspan(head), "kez", e.ref, kSeed, false).verdict,
              EntryVerdict::kWrongKey);
    for (size_t i : {size_t{13}, head + 0, head + 4000}) {
      std::vector<std::byte> b = bytes;
      b[i] ^= std::byte{0x10};
      const std::span<const std::byte> f(b);
      EXPECT_EQ(DecodeEntry(f.first(head), f.subspan(head), "key", e.ref, kSeed, false).verdict, EntryVerdict::kTorn)
          << "byte " << i;
    }
    // A cut elsewhere (inside the key): the same verdict, a value in one piece.
    v = DecodeEntry(all.first(13), all.subspan(13), "key", e.ref, kSeed, false);
    EXPECT_EQ(v.verdict, EntryVerdict::kValue);
    EXPECT_EQ(v.value.data(), all.data() + head);
  }
  // A tombstone in two pieces.
  Encoded t = Make("key", "", true, 64);
  EXPECT_EQ(DecodeEntry(std::span(t.bytes).first(15), std::span(t.bytes).subspan(15), "key", t.ref, kSeed, false)
                .verdict,
            EntryVerdict::kTombstone);
}

TEST(ReadPath, SizeClassDisagreeingWithTheHeaderIsMalformed) {
  // Exact codes: one unit off either way.
  Encoded e = Make("key", "value");
  const uint64_t code = RefSizeClass(e.ref);
  const uint64_t off = RefLogOffset(e.ref);
  const uint16_t fp = RefFingerprint(e.ref);
  std::vector<std::byte> padded = e.bytes;
  padded.resize(e.bytes.size() + 64);
  EXPECT_EQ(DecodeEntry(padded, "key", PackRef(fp, code, off), kSeed, false).verdict, EntryVerdict::kValue);
  EXPECT_EQ(DecodeEntry(padded, "key", PackRef(fp, code + 1, off), kSeed, false).verdict, EntryVerdict::kMalformed);
  EXPECT_EQ(DecodeEntry(padded, "key", PackRef(fp, code - 1, off), kSeed, false).verdict, EntryVerdict::kMalformed);
  // Coarse codes: the neighbouring codes, a code whose bytes would cover the
  // entry but is not the smallest, and a coarse code on a small entry.
  Encoded big = Make("big", std::string(100 << 10, 'y'));
  const uint64_t bc = RefSizeClass(big.ref);
  std::vector<std::byte> bb = big.bytes;
  bb.resize(SizeClassBytes(bc + 1));
  ASSERT_EQ(DecodeEntry(bb, "big", big.ref, kSeed, false).verdict, EntryVerdict::kValue);
  for (uint64_t other : {bc - 1, bc + 1, bc + 64, kFirstCoarseSizeClass - 1}) {
    EXPECT_EQ(DecodeEntry(bb, "big", PackRef(RefFingerprint(big.ref), other, 64), kSeed, false).verdict,
              EntryVerdict::kMalformed)
        << other;
  }
  EXPECT_EQ(DecodeEntry(padded, "key", PackRef(fp, kFirstCoarseSizeClass, off), kSeed, false).verdict,
            EntryVerdict::kMalformed);
}

TEST(ReadPath, RandomBytesNeverDecodeAsValue) {
  std::mt19937_64 rng(7);
  std::vector<std::byte> buf(256);
  for (int iter = 0; iter < 200000; ++iter) {
    for (size_t i = 0; i < buf.size(); i += 8) {
      uint64_t w = rng();
      std::memcpy(&buf[i], &w, 8);
    }
    const size_t len = rng() % buf.size();
    const uint64_t ref = rng();
    const EntryView v = DecodeEntry(std::span(buf).first(len), "key", ref, kSeed, false);
    ASSERT_NE(v.verdict, EntryVerdict::kValue);
    ASSERT_NE(v.verdict, EntryVerdict::kTombstone);
    IndexParams p{uint64_t{1} << (rng() % 20), 1 + rng() % 32, rng(), (rng() % (1 << 20) + 1) * 8};
    WindowProbe r;
    const KeyHash kh = MakeKeyHash("key", p.seed, p.home_count);
    const auto window = std::span(buf).first(p.window_words * 8);
    ASSERT_TRUE(ProbeWindow(window, kh, p, &r).ok());
    int n = 0;
    for (int w = NextCandidate(r, 0); w >= 0; w = NextCandidate(r, w + 1), ++n) {
      const Candidate c = CandidateAt(window, w, p);
      ASSERT_LE(c.entry.offset + c.entry.length, p.log_bytes);
      ASSERT_GE(c.entry.length, kEntryHeaderBytes);
    }
    ASSERT_EQ(n, r.count);
  }
}

}  // namespace
}  // namespace kvrdma
