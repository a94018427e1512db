// libFuzzer target: the client read path over arbitrary bucket and entry
// bytes (what a torn, recycled or hostile READ could return). It must never
// crash, and must never answer a value unless the entry's checksum holds and
// its key is the key asked for, nor read past the bytes it was given; a
// candidate's READ is never longer than the largest size class's bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#include "common/format/read_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  // Layout of the input: [bucket count exponent][key length][key][2 buckets][entry bytes].
  kvrdma::IndexParams p;
  p.bucket_count = uint64_t{1} << (1 + data[0] % 20);
  p.seed = 0x1234;
  p.log_bytes = uint64_t{1} << 30;
  size_t klen = 1 + data[1] % 64;
  size_t off = 2;
  if (size < off + klen) return 0;
  std::string_view key(reinterpret_cast<const char*>(data + off), klen);
  off += klen;
  auto br = kvrdma::CandidateBucketReads(p, key);
  if (!br.ok()) return 0;
  for (const auto& r : br->reads) {
    if (r.offset + r.length > p.bucket_count * kvrdma::kBucketBytes) std::abort();
  }
  if (size < off + 2 * kvrdma::kBucketBytes) return 0;
  const auto* b = reinterpret_cast<const std::byte*>(data + off);
  kvrdma::ProbeResult probe;
  if (!kvrdma::ProbeBuckets({b, kvrdma::kBucketBytes}, {b + kvrdma::kBucketBytes, kvrdma::kBucketBytes}, br->hash, p,
                            &probe)
           .ok()) {
    std::abort();  // well-sized buckets always probe
  }
  for (int i = 0; i < probe.count; ++i) {
    const kvrdma::RemoteRead& r = probe.candidates[i].entry;
    if (r.length > kvrdma::SizeClassBytes(kvrdma::kMaxSizeClass) || r.offset + r.length > p.log_bytes) std::abort();
  }
  off += 2 * kvrdma::kBucketBytes;
  std::span<const std::byte> entry(reinterpret_cast<const std::byte*>(data + off), size - off);
  // No candidate: a slot whose size class agrees with the header's lengths
  // (exact or coarse), so the fuzzer reaches the checksum and key checks.
  uint64_t code = kvrdma::kMinSizeClass;
  if (entry.size() >= kvrdma::kEntryHeaderBytes) {
    kvrdma::EntryHeader h;
    std::memcpy(&h, entry.data(), sizeof(h));
    code = kvrdma::SizeClassFor(kvrdma::EntryBytes(kvrdma::LengthsKey(h.lengths), kvrdma::LengthsValue(h.lengths)));
    code = std::clamp(code, kvrdma::kMinSizeClass, kvrdma::kMaxSizeClass);
  }
  uint64_t slot = probe.count > 0 ? probe.candidates[0].slot : kvrdma::PackSlot(br->hash.fingerprint, code, 0);
  for (bool current : {false, true}) {
    kvrdma::EntryView v = kvrdma::DecodeEntry(entry, key, slot, p.seed, current);
    if (v.verdict == kvrdma::EntryVerdict::kValue) {
      if (!v.value.empty() && (v.value.data() < entry.data() || v.value.data() + v.value.size() > entry.data() + entry.size())) {
        std::abort();
      }
      if (current && v.superseded) std::abort();
      // One READ's bytes: the entry lies within them and its length maps to the slot's code.
      if (v.total_bytes > entry.size() ||
          kvrdma::SizeClassFor(v.total_bytes) != kvrdma::SlotSizeClass(slot)) {
        std::abort();
      }
    }
  }
  kvrdma::MissCheck m;
  (void)m.ConfirmMiss(probe);
  return 0;
}
