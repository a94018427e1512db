// libFuzzer target: the client read path over arbitrary window and entry
// bytes (what a torn, recycled or hostile READ could return). It must never
// crash, and must never answer a value unless the entry's checksum holds and
// its key is the key asked for (checked against the documented layout by
// CheckIsTheEntry, not with DecodeEntry's own helpers), nor read past the
// bytes it was given; a candidate's READ is never longer than the largest
// size class's bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#include <xxhash.h>

#include "common/format/read_path.h"

namespace {

// What a valid entry is, written out from docs/DESIGN.md ("Log entry")
// without entry.h's helpers: at log offset `off`, the guard is the 8-aligned
// word of the first 12 bytes and the lengths the other 4; the guard's low 63
// bits are XXH3-64 of key and value seeded with seed ^ lengths * 0x9E3779B97F4A7C15.
// Aborts unless `bytes` hold such an entry of `key` whose value is `value`.
void CheckIsTheEntry(std::span<const std::byte> bytes, uint64_t off, std::string_view key, uint64_t seed,
                     bool tombstone, std::span<const std::byte> value) {
  if (bytes.size() < 12) std::abort();
  uint64_t guard;
  uint32_t lengths;
  std::memcpy(&guard, bytes.data() + (off % 8 == 0 ? 0 : 4), 8);
  std::memcpy(&lengths, bytes.data() + (off % 8 == 0 ? 8 : 0), 4);
  const size_t klen = lengths & 1023, vlen = (lengths >> 10) & ((1u << 21) - 1);
  if (((lengths >> 31) != 0) != tombstone) std::abort();
  if (klen != key.size() || 12 + klen + vlen > bytes.size()) std::abort();
  if (std::memcmp(bytes.data() + 12, key.data(), klen) != 0) std::abort();
  const uint64_t sum = XXH3_64bits_withSeed(bytes.data() + 12, klen + vlen, seed ^ (uint64_t{lengths} * 0x9E3779B97F4A7C15ull));
  if (((sum ^ guard) & ((uint64_t{1} << 63) - 1)) != 0) std::abort();
  if (!tombstone && (value.data() != bytes.data() + 12 + klen || value.size() != vlen)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  // Layout of the input: [home count exponent][window words - 1][key length | 0x80: entry at 4 mod 8][key]
  // [window][entry bytes].
  kvrdma::IndexParams p;
  p.home_count = uint64_t{1} << (data[0] % 41);
  p.window_words = 1 + data[1] % kvrdma::kMaxWindowWords;
  p.seed = 0x1234;
  p.log_bytes = uint64_t{1} << 30;
  size_t klen = 1 + data[2] % 64;
  size_t off = 3;
  if (size < off + klen) return 0;
  std::string_view key(reinterpret_cast<const char*>(data + off), klen);
  off += klen;
  auto kw = kvrdma::KeyWindowRead(p, key);
  if (!kw.ok()) std::abort();  // valid parameters and key always give a READ
  const uint64_t index_bytes = kvrdma::IndexWords(p.home_count, p.window_words) * kvrdma::kWordBytes;
  if (kw->read.offset + kw->read.length > index_bytes || kw->read.length != p.window_words * 8) std::abort();
  if (size < off + kw->read.length) return 0;
  const std::span<const std::byte> window(reinterpret_cast<const std::byte*>(data + off), kw->read.length);
  kvrdma::WindowProbe probe;
  if (!kvrdma::ProbeWindow(window, kw->hash, p, &probe).ok()) std::abort();  // a well-sized window always probes
  off += kw->read.length;
  std::span<const std::byte> entry(reinterpret_cast<const std::byte*>(data + off), size - off);
  int candidates = 0;
  // No candidate: an entry ref whose size class agrees with the header's lengths
  // (exact or coarse), so the fuzzer reaches the checksum and key checks.
  // The entry's offset decides where its header's words sit (entry.h).
  const uint64_t entry_off = (data[2] & 0x80) != 0 ? 4 : 0;
  uint64_t code = kvrdma::kMinSizeClass;
  if (entry.size() >= kvrdma::kEntryHeaderBytes) {
    uint32_t lengths;
    std::memcpy(&lengths, entry.data() + kvrdma::LengthsAt(entry_off), sizeof(lengths));
    code = kvrdma::SizeClassFor(kvrdma::EntryBytes(kvrdma::LengthsKey(lengths), kvrdma::LengthsValue(lengths)));
    code = std::clamp(code, kvrdma::kMinSizeClass, kvrdma::kMaxSizeClass);
  }
  uint64_t ref = kvrdma::PackRef(kw->hash.fingerprint, code, entry_off);
  for (int w = kvrdma::NextCandidate(probe, 0); w >= 0; w = kvrdma::NextCandidate(probe, w + 1), ++candidates) {
    if (w >= static_cast<int>(p.window_words)) std::abort();
    const kvrdma::Candidate c = kvrdma::CandidateAt(window, w, p);
    if (c.entry.offset + c.entry.length > p.log_bytes || kvrdma::WordTag(c.ref) != 0) std::abort();
    if (c.entry.length > kvrdma::SizeClassBytes(kvrdma::kMaxSizeClass)) std::abort();
    if (candidates == 0) ref = c.ref;
  }
  if (candidates != probe.count) std::abort();
  for (bool current : {false, true}) {
    kvrdma::EntryView v = kvrdma::DecodeEntry(entry, key, ref, p.seed, current);
    if (v.verdict == kvrdma::EntryVerdict::kValue || v.verdict == kvrdma::EntryVerdict::kTombstone) {
      CheckIsTheEntry(entry, kvrdma::RefLogOffset(ref), key, p.seed, v.verdict == kvrdma::EntryVerdict::kTombstone,
                      v.value);
    }
    if (v.verdict == kvrdma::EntryVerdict::kValue) {
      if (!v.value.empty() && (v.value.data() < entry.data() || v.value.data() + v.value.size() > entry.data() + entry.size())) {
        std::abort();
      }
      if (current && v.superseded) std::abort();
      // One READ's bytes: the entry lies within them and its length maps to the ref's size class.
      if (v.total_bytes > entry.size() || kvrdma::SizeClassFor(v.total_bytes) != kvrdma::RefSizeClass(ref)) {
        std::abort();
      }
    }
  }
  if (probe.tag_matched && kvrdma::MissIsProven(probe, true)) std::abort();
  return 0;
}
