// Per-connection state on the server.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/protocol/handshake.h"
#include "common/transport/transport.h"

namespace kvrdma::server {

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// Owned by the connection manager; a worker holds a shared_ptr while it
// handles one of its messages, so the last holder destroys it.
struct ConnState {
  uint32_t id = 0;
  uint32_t worker = 0;
  PutPath put_path = PutPath::kSend;
  // Declaration order = creation order: the QP goes first, then the ring's
  // registration, then its memory.
  std::unique_ptr<uint8_t, FreeDeleter> ring;  // credits * slot_bytes, this connection's only
  std::unique_ptr<MemoryRegion> ring_mr;       // REMOTE_WRITE
  std::unique_ptr<Connection> conn;  // set by the manager once Accept returns
  // The same connection, published to the worker (under the worker's mutex)
  // before the accept reaches the client; workers use only this.
  Connection* qp = nullptr;
  uint32_t qp_num = 0;

  // --- touched only by the owning worker ---
  // Reassembly of a PUT sent in fragments.
  bool assembling = false;
  uint64_t asm_request = 0;
  std::vector<uint8_t> asm_key;
  std::vector<uint8_t> asm_value;
  uint32_t asm_received = 0;
  uint32_t unsignaled = 0;  // replies posted since the last signaled one
  uint32_t large_pending = 0;  // non-inline replies posted, not completed

  // --- written by the owning worker, read by the connection manager ---
  // Signaled replies posted and not completed, and when the last one was
  // posted with none pending or completed (steady clock, ms): a reply that
  // stays unacknowledged past reply_timeout_ms closes the connection.
  std::atomic<uint32_t> signaled_pending{0};
  std::atomic<int64_t> reply_progress_ms{0};
  // Set when the connection must end; the manager then closes it.
  enum class CloseReason : uint8_t { kNone, kQpFailed, kProtocol };
  std::atomic<CloseReason> close_reason{CloseReason::kNone};
};

}  // namespace kvrdma::server
