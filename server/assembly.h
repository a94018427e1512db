// Reassembly of a PUT whose value arrives in fragments (FIRST ... LAST), and
// the server-wide budget that bounds the memory all assemblies hold.
//
// A FIRST fragment fixes everything later fragments must match: the request
// id, the key length, the lock token, the condition (IF_VERSION and
// if_version) and the value's total length, which
// sizes the buffer. A later fragment is accepted only if it extends the
// assembly exactly (its offset is the bytes received so far) and stays
// inside that buffer; anything else aborts the assembly. An assembly's bytes
// are taken from the budget at FIRST (NoResource when it is spent) and given
// back when it completes, aborts, times out or its connection closes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "common/format/format_constants.h"
#include "common/protocol/messages.h"
#include "common/status.h"

namespace kvrdma::server {

// Bytes of assembly buffers the whole server may hold. Thread-safe.
class AssemblyBudget {
 public:
  explicit AssemblyBudget(uint64_t limit) : limit_(limit) {}
  // Takes n bytes; false (nothing taken) if that would pass the limit.
  bool Take(uint64_t n) noexcept;
  void Give(uint64_t n) noexcept { used_.fetch_sub(n, std::memory_order_relaxed); }
  uint64_t used() const noexcept { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const noexcept { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

// One connection's assembly. Owned by the connection, touched only by its
// worker. The bytes live in server memory (copies of what arrived).
class Assembly {
 public:
  bool active() const noexcept { return value_ != nullptr; }
  int64_t started_ms() const noexcept { return started_ms_; }
  uint64_t token() const noexcept { return token_; }
  // The FIRST's condition: kFlagIfVersion or 0, and its if_version.
  uint8_t condition_flags() const noexcept { return condition_flags_; }
  uint64_t if_version() const noexcept { return if_version_; }
  std::span<const uint8_t> key() const noexcept { return {key_, key_len_}; }
  std::span<const uint8_t> value() const noexcept { return {value_.get(), value_len_}; }
  bool complete() const noexcept { return active() && received_ == value_len_; }

  // Starts from a FIRST (not LAST) fragment whose header ParseRequest
  // accepted. Aborts any assembly in progress first. NoResource when the
  // budget cannot hold value_len bytes.
  Status Begin(const RequestHeader& h, std::span<const uint8_t> key, std::span<const uint8_t> frag,
               AssemblyBudget& budget, int64_t now_ms);
  // Adds a later fragment (not FIRST). InvalidArgument, and the assembly is
  // aborted, unless the fragment extends this assembly exactly.
  Status Extend(const RequestHeader& h, std::span<const uint8_t> frag, AssemblyBudget& budget);
  // Ends the assembly (completed, aborted, timed out, or closed) and gives
  // its bytes back.
  void Release(AssemblyBudget& budget) noexcept;

 private:
  uint64_t request_id_ = 0;
  uint64_t token_ = 0;
  uint64_t if_version_ = 0;
  uint8_t condition_flags_ = 0;
  uint32_t value_len_ = 0;
  uint32_t received_ = 0;
  uint16_t key_len_ = 0;
  int64_t started_ms_ = 0;
  uint8_t key_[kMaxKeyBytes];
  std::unique_ptr<uint8_t[]> value_;  // value_len_ bytes, from the budget
};

}  // namespace kvrdma::server
