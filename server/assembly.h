// Reassembly of a PUT whose value arrives in fragments (FIRST ... LAST), and
// the server-wide budget that bounds the memory all assemblies hold.
//
// A FIRST fragment fixes everything later fragments must match: the request
// id, the key length, the lock token, the condition (IF_VERSION and
// if_version) and the value's total length, which bounds the buffer. A later
// fragment is accepted only if it extends the
// assembly exactly (its offset is the bytes received so far) and stays
// inside that length; anything else aborts the assembly.
//
// The buffer grows with the bytes that arrive (doubling, never past the
// value's length), and the budget is charged for what the buffer holds, not
// for the length the FIRST announces: a connection's share of the budget is
// at most twice what it has sent, and at most one value (DESIGN.md, "The
// request path on the server"). A fragment the budget cannot hold is NoResource and
// aborts the assembly. The bytes go back when the assembly completes,
// aborts, times out (no fragment for assembly_timeout_ms) or its connection
// closes.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
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
  // When its last fragment was accepted (steady clock, ms): the assembly
  // timeout counts from here.
  int64_t last_fragment_ms() const noexcept { return last_fragment_ms_; }
  uint64_t token() const noexcept { return token_; }
  // The FIRST's condition: kFlagIfVersion or 0, and its if_version.
  uint8_t condition_flags() const noexcept { return condition_flags_; }
  uint64_t if_version() const noexcept { return if_version_; }
  std::span<const uint8_t> key() const noexcept { return {key_, key_len_}; }
  std::span<const uint8_t> value() const noexcept { return {value_.get(), value_len_}; }
  bool complete() const noexcept { return active() && received_ == value_len_; }

  // Starts from a FIRST (not LAST) fragment whose header ParseRequest
  // accepted. Aborts any assembly in progress first. NoResource when the
  // budget cannot hold the fragment's bytes.
  Status Begin(const RequestHeader& h, std::span<const uint8_t> key, std::span<const uint8_t> frag,
               AssemblyBudget& budget, int64_t now_ms);
  // Adds a later fragment (not FIRST). InvalidArgument unless the fragment
  // extends this assembly exactly, NoResource when the budget cannot hold
  // its bytes; either aborts the assembly.
  Status Extend(const RequestHeader& h, std::span<const uint8_t> frag, AssemblyBudget& budget, int64_t now_ms);
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
  uint32_t capacity_ = 0;  // bytes of value_, all charged to the budget
  uint16_t key_len_ = 0;
  int64_t last_fragment_ms_ = 0;
  uint8_t key_[kMaxKeyBytes];
  // Makes room for `more` bytes after received_: grows value_ (doubling, at
  // most value_len_), charging the growth to the budget. False: no room
  // (nothing changed).
  bool Reserve(uint32_t more, AssemblyBudget& budget) noexcept;
  struct FreeBytes {
    void operator()(uint8_t* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeBytes> value_;  // capacity_ bytes (malloc: grown by realloc)
};

}  // namespace kvrdma::server
