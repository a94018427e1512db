#include "common/format/read_path.h"

#include <bit>
#include <cstring>

namespace kvrdma {

Status ValidateIndexParams(const IndexParams& p) {
  if (p.bucket_count < 2 || !std::has_single_bit(p.bucket_count)) {
    return Status::InvalidArgument("bucket_count must be a power of two >= 2");
  }
  if (p.bucket_count > (uint64_t{1} << 40)) return Status::InvalidArgument("bucket_count too large");
  if (p.log_bytes == 0 || p.log_bytes > kMaxLogBytes || p.log_bytes % kEntryAlign != 0) {
    return Status::InvalidArgument("log_bytes must be a non-zero multiple of 8 up to 512 GiB");
  }
  return Status::OK();
}

Result<BucketReads> CandidateBucketReads(const IndexParams& p, std::string_view key) {
  KVRDMA_RETURN_IF_ERROR(ValidateIndexParams(p));
  if (key.empty() || key.size() > kMaxKeyBytes) return Status::InvalidArgument("key length");
  BucketReads r;
  r.hash = MakeKeyHash(key, p.seed, p.bucket_count);
  for (size_t i = 0; i < kCandidateBuckets; ++i) {
    r.reads[i] = RemoteRead{r.hash.bucket[i] * kBucketBytes, static_cast<uint32_t>(kBucketBytes)};
  }
  return r;
}

Status ProbeBuckets(std::span<const std::byte> bucket0, std::span<const std::byte> bucket1,
                    const KeyHash& kh, const IndexParams& p, ProbeResult* out) noexcept {
  out->count = 0;
  out->rejected = 0;
  if (bucket0.size() != kBucketBytes || bucket1.size() != kBucketBytes) {
    return Status::InvalidArgument("bucket bytes must be 64 each");
  }
  const std::span<const std::byte> buckets[kCandidateBuckets] = {bucket0, bucket1};
  for (size_t b = 0; b < kCandidateBuckets; ++b) {
    std::memcpy(&out->versions[b], buckets[b].data() + offsetof(IndexBucket, version), 8);
    for (size_t i = 0; i < kSlotsPerBucket; ++i) {
      uint64_t slot;
      std::memcpy(&slot, buckets[b].data() + BucketSlotOffset(i), 8);
      if (slot == kEmptySlot || SlotFingerprint(slot) != kh.fingerprint) continue;
      const uint64_t off = SlotLogOffset(slot);
      if (!SlotLooksValid(slot) || off + kEntryHeaderBytes > p.log_bytes) {
        ++out->rejected;
        continue;
      }
      SlotCandidate& c = out->candidates[out->count++];
      c.slot = slot;
      c.bucket = static_cast<uint8_t>(b);
      c.index = static_cast<uint8_t>(i);
      uint64_t len = SizeClassBytes(SlotSizeClass(slot));
      if (len > p.log_bytes - off) len = p.log_bytes - off;
      c.entry = RemoteRead{off, static_cast<uint32_t>(len)};
    }
  }
  return Status::OK();
}

EntryView DecodeEntry(std::span<const std::byte> bytes, std::string_view key, uint64_t slot,
                      uint64_t seed, bool require_current) noexcept {
  EntryView v;
  if (bytes.size() < kEntryHeaderBytes) return v;  // kMalformed
  EntryHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  const uint32_t klen = LengthsKey(h.lengths);
  const uint32_t vlen = LengthsValue(h.lengths);
  const bool tomb = LengthsTombstone(h.lengths);
  if (klen == 0 || (tomb && vlen != 0)) return v;
  const size_t total = EntryBytes(klen, vlen);
  // The header's length must map to the slot's size class: a disagreement
  // means the bytes are not the entry the slot was made for (recycled or
  // torn header). A READ of the class's bytes (clamped to the log, which the
  // entry lies within) always covers the entry, so fewer bytes are malformed
  // too; an entry shorter than the READ uses only its `total` bytes.
  if (SizeClassFor(total) != SlotSizeClass(slot) || bytes.size() < total) return v;
  v.total_bytes = static_cast<uint32_t>(total);
  const size_t covered = kEntryHeaderBytes + klen + vlen - kEntryChecksumOffset;
  if (EntryChecksum(bytes.data() + kEntryChecksumOffset, covered, seed) != (h.guard & kGuardChecksumMask)) {
    v.verdict = EntryVerdict::kTorn;
    return v;
  }
  v.version = h.version;
  v.superseded = (h.guard & kGuardNotCurrentBit) != 0;
  if (klen != key.size() || std::memcmp(bytes.data() + kEntryHeaderBytes, key.data(), klen) != 0) {
    v.verdict = EntryVerdict::kWrongKey;
    return v;
  }
  if (require_current && v.superseded) {
    v.verdict = EntryVerdict::kSuperseded;
    return v;
  }
  if (tomb) {
    v.verdict = EntryVerdict::kTombstone;
    return v;
  }
  v.verdict = EntryVerdict::kValue;
  v.value = bytes.subspan(kEntryHeaderBytes + klen, vlen);
  return v;
}

const char* EntryVerdictName(EntryVerdict v) noexcept {
  switch (v) {
    case EntryVerdict::kValue: return "value";
    case EntryVerdict::kTombstone: return "tombstone";
    case EntryVerdict::kWrongKey: return "wrong-key";
    case EntryVerdict::kTorn: return "torn";
    case EntryVerdict::kMalformed: return "malformed";
    case EntryVerdict::kSuperseded: return "superseded";
  }
  return "?";
}

Status EntryVerdictStatus(EntryVerdict v) {
  switch (v) {
    case EntryVerdict::kValue: return Status::OK();
    case EntryVerdict::kTombstone:
    case EntryVerdict::kWrongKey: return Status::NotFound();
    default: return Status::Retry(EntryVerdictName(v));
  }
}

}  // namespace kvrdma
