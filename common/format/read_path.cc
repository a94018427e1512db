#include "common/format/read_path.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvrdma {

Status ValidateIndexParams(const IndexParams& p) {
  if (p.slot_count < 1 || p.slot_count > kMaxSlotCount || !std::has_single_bit(p.slot_count)) {
    return Status::InvalidArgument("slot_count must be a power of two in [1, 2^40]");
  }
  if (p.window_slots < 1 || p.window_slots > kMaxWindowSlots) {
    return Status::InvalidArgument("window_slots must be in [1, 128]");
  }
  if (p.log_bytes == 0 || p.log_bytes > kMaxLogBytes || p.log_bytes % kEntryAlign != 0) {
    return Status::InvalidArgument("log_bytes must be a non-zero multiple of 8 up to 512 GiB");
  }
  return Status::OK();
}

Result<KeyWindow> KeyWindowRead(const IndexParams& p, std::string_view key) {
  KVRDMA_RETURN_IF_ERROR(ValidateIndexParams(p));
  if (key.empty() || key.size() > kMaxKeyBytes) return Status::InvalidArgument("key length");
  KeyWindow r;
  r.hash = MakeKeyHash(key, p.seed, p.slot_count);
  r.read = RemoteRead{r.hash.home * kSlotBytes, static_cast<uint32_t>(p.window_slots * kSlotBytes)};
  return r;
}

namespace {
uint64_t WordAt(std::span<const std::byte> window, int word) noexcept {
  uint64_t w;
  std::memcpy(&w, window.data() + static_cast<size_t>(word) * kSlotBytes, kSlotBytes);
  return w;
}
}  // namespace

Status ProbeWindow(std::span<const std::byte> window, const KeyHash& kh, const IndexParams& p,
                   WindowProbe* out) noexcept {
  *out = WindowProbe{};
  if (p.window_slots == 0 || p.window_slots > kMaxWindowSlots || window.size() != p.window_slots * kSlotBytes) {
    return Status::InvalidArgument("window bytes must be window_slots * 8");
  }
  // The hot loop of an uncached GET (128 words): per word a bit test for a
  // tag and a shift-compare for the fingerprint; both are rarely true, so the
  // branches predict well (callgrind: bench/callgrind/run).
  const uint64_t fp = kh.fingerprint & kSlotFingerprintMask;
  constexpr uint64_t kTagSetWordBit = kTagSetBit << kWordTagShift;
  for (int i = 0; i < static_cast<int>(p.window_slots); ++i) {
    const uint64_t word = WordAt(window, i);
    if ((word & kTagSetWordBit) != 0 && TagMatches(WordTag(word), kh.tag_nibble)) out->tag_matched = true;
    if ((word >> kSlotFingerprintShift) != fp) continue;
    const uint64_t slot = WordSlot(word);
    if (slot == kEmptySlot) continue;
    if (!SlotLooksValid(slot) || SlotLogOffset(slot) + kEntryHeaderBytes > p.log_bytes) {
      ++out->rejected;
      continue;
    }
    out->candidates[static_cast<size_t>(i) / 64] |= uint64_t{1} << (i % 64);
    ++out->count;
  }
  return Status::OK();
}

int NextCandidate(const WindowProbe& probe, int from) noexcept {
  for (int i = std::max(from, 0); i < static_cast<int>(kMaxWindowSlots);) {
    const uint64_t bits = probe.candidates[static_cast<size_t>(i) / 64] >> (i % 64);
    if (bits != 0) return i + std::countr_zero(bits);
    i = (i / 64 + 1) * 64;
  }
  return -1;
}

SlotCandidate CandidateAt(std::span<const std::byte> window, int word, const IndexParams& p) noexcept {
  SlotCandidate c;
  if (word < 0 || static_cast<size_t>(word) * kSlotBytes + kSlotBytes > window.size()) return c;
  c.slot = WordSlot(WordAt(window, word));
  const uint64_t off = SlotLogOffset(c.slot);
  uint64_t len = SizeClassBytes(SlotSizeClass(c.slot));
  if (off >= p.log_bytes) return SlotCandidate{};
  if (len > p.log_bytes - off) len = p.log_bytes - off;
  c.entry = RemoteRead{off, static_cast<uint32_t>(len)};
  return c;
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
