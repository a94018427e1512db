// The format's vector kernels and how one is chosen: code built for AVX2
// lives in files of its own (checksum_avx2.cc, window_avx2.cc), the only ones
// compiled with -mavx2 (common/format/CMakeLists.txt defines
// KVRDMA_HAVE_AVX2 where it builds them), and runs only where the CPU has
// AVX2 (CpuHasAvx2). Everything else is built for the x86-64 baseline (SSE2).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvrdma::detail {

// Whether this CPU executes AVX2: asked once, when the program starts (a
// load and no call on the GET path). False where the library was built
// without its AVX2 files. Read during another file's static initialization
// it may still be false: its callers then take their baseline code, which
// gives the same results.
bool DetectAvx2() noexcept;  // entry.cc
#if KVRDMA_HAVE_AVX2
inline const bool kCpuHasAvx2 = DetectAvx2();
inline bool CpuHasAvx2() noexcept { return kCpuHasAvx2; }
#else
inline bool CpuHasAvx2() noexcept { return false; }
#endif

// What a window scan compares each word's high 32 bits with (window.h): the
// key's fingerprint under its mask, and the two 5-bit tags that match the key
// (its nibble with the set bit, and the any-key nibble), under the tag mask.
struct WindowKeyBits {
  uint32_t fp_mask;
  uint32_t fp_want;
  uint32_t tag_mask;
  uint32_t tag_key;
  uint32_t tag_any;
};

// Sets bit i of `flagged` (word i / 64, bit i % 64; the caller zeroes it)
// for each word i of `words` (blocks * kWindowBlockAvx2 words, at most 128)
// whose high half has the key's fingerprint or a tag that matches the key. A
// filter: each flagged word is then probed alone, which decides.
// window_avx2.cc; call only if CpuHasAvx2().
inline constexpr int kWindowBlockAvx2 = 8;
void FlagWindowWordsAvx2(const std::byte* words, int blocks, const WindowKeyBits& k, uint64_t flagged[2]) noexcept;

// XXH3 64-bit with a seed, built for AVX2 (checksum_avx2.cc); call only if
// CpuHasAvx2().
uint64_t Xxh3Avx2(const void* p, size_t n, uint64_t seed) noexcept;
// The same, and copies p[from, n) to dst (not overlapping p) in the same
// pass over p (a GET's value from its entry READ into the caller's buffer:
// read once, not once to check and once to copy). p must not change
// meanwhile.
uint64_t Xxh3Avx2Copy(const void* p, size_t n, size_t from, void* dst, uint64_t seed) noexcept;
// The other way: copies src[0, n - from) to base[from, n) and returns the
// XXH3-64 of base[0, n), in one pass over src (a store writing a value into
// the log after its key): every byte of base it hashes is what base holds.
uint64_t Xxh3Avx2CopyIn(void* base, size_t n, size_t from, const void* src, uint64_t seed) noexcept;
// The same over the bytes a[0, na) followed by b[0, nb) (XXH3's streaming
// form, whose result is the one-shot hash of the concatenation).
uint64_t Xxh3Avx2Pieces(const void* a, size_t na, const void* b, size_t nb, uint64_t seed) noexcept;

}  // namespace kvrdma::detail
