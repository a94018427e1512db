// kvserver's configuration (command line or --config FILE).
#pragma once

#include <cstdint>
#include <string>

#include "server/store/store_config.h"

namespace kvrdma::server {

// The longest flow-control back-off, in multiples of flow_control_backoff_ms.
inline constexpr uint32_t kFlowControlBackoffMaxFactor = 64;
// A connect request from an address in its back-off is refused when the
// back-off ends or after this long, whichever comes first (a delayed
// refusal): a client that reconnects as soon as it is refused then tries a
// few times a second instead of hundreds, and each try costs it an rdma_cm id
// and a QP. Below the ~4.3 s the connecting side's connection manager waits
// for an answer before it sends its request again (CMA_CM_RESPONSE_TIMEOUT).
inline constexpr int64_t kRefusalDelayMaxMs = 2000;
// Refusals delayed at once; a request beyond them is refused at once.
inline constexpr size_t kDelayedRefusalsMax = 256;

struct ServerConfig {
  std::string listen = "0.0.0.0";  // address to listen on; 0.0.0.0 = all
  uint16_t port = 7471;
  std::string device;              // RDMA device name; empty = the first
  uint64_t index_mb = 64;
  uint64_t log_mb = 1024;
  uint32_t workers = 2;
  CapacityMode mode = CapacityMode::kStore;
  uint32_t max_value_bytes = 1u << 20;
  uint32_t max_key_bytes = kMaxKeyBytes;  // 1023: what a log entry header can express
  HugePages huge_pages = HugePages::kAuto;
  // Flow control: requests in flight per connection, and the size of a ring
  // message buffer (ring / receive buffer; a larger message is sent in fragments).
  uint32_t credits = 8;
  uint32_t message_bytes = 4096;
  uint32_t srq_depth = 4096;
  // Connections the server holds at once, and from one peer address (0 = no
  // per-address limit); a connect request beyond either is refused with a
  // reason the client reports. Each connection pins its ring and reply
  // buffers (credits * message_bytes + ReplyMemoryBytes(credits): 56 KiB with
  // the defaults, so 56 MiB of registered memory at 1024), a QP and a memory
  // window.
  uint32_t max_connections = 1024;
  uint32_t max_connections_per_peer = 64;
  // After a connection from an address is closed for breaking flow control
  // (more messages in flight than its credits, replies it does not take),
  // new connections from that address are refused at connect time, before
  // anything is allocated for them, for this long, doubled with each further
  // such close up to kFlowControlBackoffMaxFactor times it; an address is
  // forgotten once it has had no such close for that maximum after its
  // refusals ended. 0 = never refuse. Without it a flooder closed at once
  // reconnects at once, and the QP, memory window and registrations of ~100
  // connects a second are paid by every client (docs/SECURITY.md).
  uint32_t flow_control_backoff_ms = 200;
  uint32_t lock_words = 65536;    // 8-byte lock words in the lock table
  // A freed log segment is reused only after this long; clients are told to
  // finish a GET within half of it (the descriptor's round_limit_us).
  uint32_t grace_period_ms = 100;
  // If not empty, a client must present this token (<= 32 bytes) in its
  // connect request, or it is refused before it learns any rkey.
  std::string auth_token;
  // A connection whose replies are not acknowledged for this long is closed:
  // its client sent more requests than its credits or stopped posting
  // receive buffers (a live client that follows the protocol always has a
  // buffer for every reply, so it never waits here). 0 = never.
  uint32_t reply_timeout_ms = 5000;
  // Memory all fragmented PUTs being reassembled may hold together, charged
  // for the bytes received (a fragment that would pass it is refused with
  // NoResource), and how long an assembly may wait for its next fragment
  // (from its last one) before it is dropped.
  uint64_t assembly_bytes = 256ull << 20;
  uint32_t assembly_timeout_ms = 10000;
  // After handling a completion, a worker polls its CQ at least
  // busy_poll_us before it sleeps on the completion channel (0 = sleep at
  // once), and up to busy_poll_max_us while requests keep arriving just
  // after its poll ended (BusyPoll, common/transport/busy_poll.h; at or
  // below busy_poll_us: no growth). Longer saves a wake-up when requests
  // come back to back and each worker has a CPU of its own; shorter leaves
  // the CPU to clients and to the kernel (Soft-RoCE runs there) when they
  // share CPUs.
  // 250 by default: in the 2-vCPU Soft-RoCE guest it took PUT p50 at depth 1
  // from ~210 to ~70 us with no loss at 2 clients x 8 or x 16 in flight
  // (those clients' windows at their default, 50: it was the clients'
  // growth, not the workers', that cost ~14 % there; docs/PERFORMANCE.md,
  // "The workers' poll window grows by default"). A worker that finds no
  // request within the ceiling falls back to busy_poll_us, so an idle or
  // sparse server still sleeps.
  uint32_t busy_poll_us = 50;
  uint32_t busy_poll_max_us = 250;
};

}  // namespace kvrdma::server
