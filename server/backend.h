// What the network side of kvserver needs from the store: apply a request,
// describe the regions clients read, report statistics. Implemented over the
// Store (server/store/); kept narrow so the connection and worker code does
// not depend on index and log internals.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/store/commit_check.h"

namespace kvrdma::server {

struct StoreRegions {
  void* index_base = nullptr;
  size_t index_bytes = 0;
  uint64_t index_homes = 0;   // homes (common/format/window.h)
  uint16_t index_window = 0;  // words per window
  uint64_t hash_seed = 0;
  void* log_base = nullptr;
  size_t log_bytes = 0;
  // How long a freed segment waits before reuse, and a move tag lives
  // (StoreConfig::grace_period): the round limit clients get must be
  // shorter (Server::Start refuses otherwise).
  std::chrono::nanoseconds grace_period{0};
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Called by worker `worker` (0..workers-1) only; thread-safe across workers.
  // `check` runs at the commit point (commit_check.h); its refusal is returned.
  // wait_for_space false: a full log answers ServerFull at once instead of
  // waiting for room (Store::Put).
  virtual Status Put(uint32_t worker, std::span<const uint8_t> key, std::span<const uint8_t> value,
                     const CommitCheck& check, bool wait_for_space, uint64_t* version) = 0;
  virtual Status Delete(uint32_t worker, std::span<const uint8_t> key, const CommitCheck& check,
                        bool wait_for_space, uint64_t* version) = 0;
  // Put, refused (InvalidArgument, nothing written) unless the entry's
  // checksum (RendezvousChecksum(key, value, hash seed)) is `expected`: a
  // rendezvous PUT's value as the client computed it. The store checks it
  // against the entry checksum it computes over its own log copy (one pass);
  // a backend that wraps another forwards to it.
  virtual Status PutChecked(uint32_t worker, std::span<const uint8_t> key, std::span<const uint8_t> value,
                            uint64_t expected, const CommitCheck& check, bool wait_for_space, uint64_t* version) = 0;
  // A rendezvous PUT whose value the worker READs straight into its place
  // in the log (Store::BeginPut): takes_values_in_place() true, then
  // BeginPut (the place, or a refusal), the READ into PlacedValue(place)'s
  // value_len bytes, then FinishPut (as PutChecked, over the log's copy)
  // once the READ completed, or AbandonPut if it failed. Each BeginPut is
  // ended by exactly one of the two. false (the default): the worker READs
  // into staging of its own and calls PutChecked.
  virtual bool takes_values_in_place() const { return false; }
  virtual Result<uint64_t> BeginPut(uint32_t /*worker*/, std::span<const uint8_t> /*key*/, uint32_t /*value_len*/,
                                    bool /*wait_for_space*/) {
    return Status::Internal("this backend takes no values in place");
  }
  virtual uint8_t* PlacedValue(uint64_t /*place*/) const { return nullptr; }
  virtual Status FinishPut(uint32_t /*worker*/, uint64_t /*place*/, std::span<const uint8_t> /*key*/,
                           uint32_t /*value_len*/, uint64_t /*expected*/, const CommitCheck& /*check*/,
                           uint64_t* /*version*/) {
    return Status::Internal("this backend takes no values in place");
  }
  virtual void AbandonPut(uint64_t /*place*/) {}
  // Durable store: makes worker `worker`'s writes so far durable
  // (Store::Commit); a worker calls it before it answers them. Memory only:
  // durable() is false and nothing needs calling.
  virtual bool durable() const { return false; }
  virtual Status Commit(uint32_t /*worker*/) { return Status::OK(); }
  virtual StoreRegions regions() const = 0;
  // Appends (name, value) pairs: items, index/log bytes used, cleaner runs, evictions...
  virtual void AppendStats(std::vector<std::pair<std::string_view, uint64_t>>* out) const = 0;
};

}  // namespace kvrdma::server
