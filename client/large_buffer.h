// The ranges of the client's large buffer that GETs hold (client_get.cc).
//
// An entry READ longer than a GET's own entry buffer (kOpEntryBytes) holds a
// range of the large buffer as long as its entry: from when the READ is
// staged (or, for a late round, from its window READ on) until its entry is
// decoded. Ranges never overlap, so the large READs of one connection in
// flight at once never hold more than the buffer's bytes, the size class of
// the largest entry the server accepts: a READ of the largest entry runs
// alone, as when the whole buffer was one GET's turn, while sixteen of 64 KiB
// run together (docs/DESIGN.md, "Client: GET path", step 3). Fixed storage:
// nothing allocated per GET.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace kvrdma {

template <size_t kMaxRanges>
class LargeBufferRanges {
 public:
  // Nothing held; `bytes` to share from now on.
  void Reset(uint64_t bytes) {
    bytes_ = bytes;
    n_ = 0;
  }
  // Holds `len` (> 0) bytes: the offset of the lowest free range that fits,
  // or nullopt (nothing fits now, or every range is taken).
  std::optional<uint64_t> Take(uint64_t len) {
    if (len == 0 || n_ == kMaxRanges) return std::nullopt;
    uint64_t at = 0;
    size_t i = 0;
    for (; i < n_; ++i) {
      if (held_[i].at >= at + len) break;  // the gap before range i fits
      at = held_[i].at + held_[i].len;
    }
    if (i == n_ && (at > bytes_ || bytes_ - at < len)) return std::nullopt;
    for (size_t j = n_; j > i; --j) held_[j] = held_[j - 1];
    held_[i] = Range{at, len};
    ++n_;
    return at;
  }
  // Gives back the range that Take returned at `at`.
  void Give(uint64_t at) {
    for (size_t i = 0; i < n_; ++i) {
      if (held_[i].at != at) continue;
      for (size_t j = i + 1; j < n_; ++j) held_[j - 1] = held_[j];
      --n_;
      return;
    }
  }
  size_t ranges() const { return n_; }

 private:
  struct Range {
    uint64_t at;
    uint64_t len;
  };
  std::array<Range, kMaxRanges> held_{};  // by offset
  size_t n_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace kvrdma
