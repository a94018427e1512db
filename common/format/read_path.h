// The client read path as pure functions over bytes: no I/O, no allocation,
// safe on arbitrary input (every length and offset is bounds-checked), so the
// client runs them on what its RDMA READs returned and fuzzers run them on
// garbage.
//
// A GET (docs/DESIGN.md, "Store: index, value log, reclamation"):
//   1. CandidateBucketReads(params, key)      -> two {offset, 64} READs of the index
//   2. ProbeBuckets(bucket bytes, hash)       -> slots whose fingerprint matches
//                                                + both bucket versions
//   3. for each candidate: READ candidate.entry (SlotLogOffset, the size
//      class's bytes clamped to the log: the whole entry in one READ),
//      DecodeEntry(entry bytes, key, slot)    -> value / tombstone /
//                                                wrong key (next candidate) /
//                                                retry (torn, malformed, superseded)
//   4. nothing matched: MissCheck over consecutive rounds decides whether the
//      miss is real (bucket versions unchanged around a round) or another
//      round is needed.
// The whole sequence must finish within the GET deadline (<= the server's
// grace period), else it restarts from step 1.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/format/bucket.h"
#include "common/format/entry.h"
#include "common/format/hash.h"
#include "common/format/slot.h"
#include "common/status.h"

namespace kvrdma {

// What a client learns from the server at connect time.
struct IndexParams {
  uint64_t bucket_count = 0;  // power of two >= 2
  uint64_t seed = 0;          // XXH3 seed for keys and checksums
  uint64_t log_bytes = 0;     // size of the value-log region
};

// InvalidArgument unless the parameters describe a usable index and log.
Status ValidateIndexParams(const IndexParams& p);

struct RemoteRead {
  uint64_t offset = 0;  // from the start of the region
  uint32_t length = 0;
};

struct BucketReads {
  KeyHash hash;
  std::array<RemoteRead, kCandidateBuckets> reads;  // into the index region, in this order
};

// (a) The bucket READs for `key`. InvalidArgument on bad params or key length.
Result<BucketReads> CandidateBucketReads(const IndexParams& p, std::string_view key);

struct SlotCandidate {
  uint64_t slot = 0;          // the packed slot as read
  RemoteRead entry;           // READ for the entry (clamped to the log)
  uint8_t bucket = 0;         // 0 or 1: which candidate bucket
  uint8_t index = 0;          // slot index in that bucket
};

struct ProbeResult {
  std::array<SlotCandidate, kCandidateBuckets * kSlotsPerBucket> candidates;
  uint8_t count = 0;                                  // candidates[0..count)
  uint8_t rejected = 0;                               // fingerprint matched, slot implausible
  std::array<uint64_t, kCandidateBuckets> versions{}; // bucket version words as read
};

// (b) Slots in the two buckets whose fingerprint matches `kh`. Each bucket
// span must be exactly kBucketBytes (InvalidArgument otherwise). Slots that
// point outside the log or carry an impossible size class are skipped (`rejected`).
Status ProbeBuckets(std::span<const std::byte> bucket0, std::span<const std::byte> bucket1,
                    const KeyHash& kh, const IndexParams& p, ProbeResult* out) noexcept;

enum class EntryVerdict : uint8_t {
  kValue,       // valid entry of this key: value is the key's value
  kTombstone,   // valid entry of this key: the key is deleted (NotFound)
  kWrongKey,    // a valid entry of another key (fingerprint collision): next candidate
  kTorn,        // checksum mismatch: READ raced a write or recycling: retry the GET
  kMalformed,   // impossible lengths, lengths that disagree with the slot's size
                // class, or fewer bytes than the entry: retry
  kSuperseded,  // valid, but superseded and the caller required the current entry: retry
};
const char* EntryVerdictName(EntryVerdict v) noexcept;

struct EntryView {
  EntryVerdict verdict = EntryVerdict::kMalformed;
  bool superseded = false;      // the guard's superseded bit as read
  uint32_t version = 0;         // valid for kValue / kTombstone / kSuperseded / kWrongKey
  uint32_t total_bytes = 0;     // entry length (<= the bytes given) unless kMalformed
  std::span<const std::byte> value;  // kValue: points into the caller's bytes
};

// (c) Validates entry bytes READ at the location of `slot` for `key`.
// Never returns kValue unless the checksum matched and the key is equal.
// `require_current`: reject a superseded entry (the one-READ cached-location
// GET; the index path does not need it, see DESIGN.md).
EntryView DecodeEntry(std::span<const std::byte> bytes, std::string_view key, uint64_t slot,
                      uint64_t seed, bool require_current) noexcept;

// Status for a verdict: OK, NotFound, Retry.
Status EntryVerdictStatus(EntryVerdict v);

// Step 4: a GET that found no value must tell a real miss from a key that a
// cuckoo move carried from the bucket it had not read yet into the one it had
// already read. Every move bumps the source bucket's version between writing
// the destination slot and clearing the source slot, so:
//
//   a round that found nothing is a real miss (the key was absent at some
//   instant during that round) if the bucket versions read by the round
//   before it and by the round after it are equal.
//
// The rounds must be sequential (each posted after the previous completed).
// Call ConfirmMiss after every round that found nothing, in order; it returns
// true once the miss is confirmed (from the third round on: the first round
// is the GET itself, a miss costs two more). DESIGN.md has the proof; a client
// whose responder executes the READs of one doorbell in order may instead
// READ the two version words again behind the bucket READs of the second
// round and use MissIsReal(first round's versions, second round, trailing
// versions): two rounds.
class MissCheck {
 public:
  bool ConfirmMiss(const ProbeResult& r) noexcept {
    const bool real = rounds_ >= 2 && r.versions == prev2_;
    prev2_ = prev1_;
    prev1_ = r.versions;
    ++rounds_;
    return real;
  }
  int rounds() const noexcept { return rounds_; }

 private:
  std::array<uint64_t, kCandidateBuckets> prev1_{}, prev2_{};
  int rounds_ = 0;
};

// `round` found no value; `before` were read strictly before its bucket READs
// and `after` strictly after them.
inline bool MissIsReal(const std::array<uint64_t, kCandidateBuckets>& before, const ProbeResult& round,
                       const std::array<uint64_t, kCandidateBuckets>& after) noexcept {
  (void)round;
  return before == after;
}

}  // namespace kvrdma
