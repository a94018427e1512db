// An SRQ worker: polls its completion queue, applies requests to the store
// and answers each with a small SEND.
//
// Every connection is bound to one worker (its QP's send and receive CQ are
// the worker's CQ), so a connection's messages are handled in order by one
// thread, which is what fragment reassembly and ring-slot reuse rely on. The
// receive buffers belong to the server-wide SRQ; a worker reposts each buffer
// as soon as it has handled the message in it, so the SRQ never runs dry
// while clients stay within their credits.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/protocol/locks.h"
#include "common/protocol/messages.h"
#include "server/backend.h"
#include "server/config.h"
#include "server/conn_state.h"
#include "server/metrics/request_metrics.h"

namespace kvrdma::server {

struct ServerCounters {
  std::atomic<uint64_t> puts{0};
  std::atomic<uint64_t> deletes{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> connections_total{0};
  // Connections the server closed: QP failed, or the client broke flow
  // control (more requests than credits, replies not taken).
  std::atomic<uint64_t> closed_failed{0};
  std::atomic<uint64_t> closed_flow_control{0};
  // Service time per worker, failures by status, closes by client, refusals
  // (kvserver --metrics-listen; server/metrics/).
  metrics::RequestMetrics request_metrics;
};

// The shared receive side: SRQ + its buffers.
struct ReceivePool {
  SharedReceiveQueue* srq = nullptr;
  MemoryRegion* mr = nullptr;  // count * slot_bytes
  uint32_t slot_bytes = 0;
  uint8_t* Buffer(uint64_t i) const { return static_cast<uint8_t*>(mr->addr()) + i * slot_bytes; }
  Status Repost(uint64_t i) const {
    RecvWr r{i, mr->Slice(i * slot_bytes, slot_bytes)};
    return srq->PostRecv({&r, 1});
  }
};

// The lock table as the workers see it: they only load words (never a CPU
// read-modify-write: clients change lock words with NIC atomics).
struct LockView {
  const uint64_t* words = nullptr;  // word 0: server clock (ms); 1..slots: lock words
  uint32_t slots = 0;
  uint64_t seed = 0;
  // Status to answer a PUT/DELETE of key carrying token: OK or Locked.
  Status Check(std::span<const uint8_t> key, uint64_t token) const;
};

// Milliseconds on the steady clock (connection reply watchdog).
int64_t SteadyMs();

class Worker {
 public:
  Worker(uint32_t index, const ServerConfig& cfg, Backend& backend, ServerCounters& counters,
         ReceivePool pool, LockView locks, std::unique_ptr<CompletionQueue> cq,
         std::unique_ptr<MemoryRegion> reply_mr);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void Start();
  // Stops the thread after the messages already received are handled.
  void Stop();
  CompletionQueue& cq() { return *cq_; }
  // Routes completions of QP `qp_num` to c (c->conn may still be unset).
  void Add(std::shared_ptr<ConnState> c, uint32_t qp_num);
  // The worker forgets the connection; late completions for it are dropped.
  void Remove(uint32_t qp_num);
  uint32_t index() const { return index_; }
  // Buffers for replies: kReplySlots of kMaxReplySize.
  static constexpr uint32_t kReplySlots = 64;

 private:
  void Run();
  void Handle(const Completion& c);
  void HandleMessage(ConnState& cs, std::span<const uint8_t> msg);
  void Reply(ConnState& cs, const ReplyHeader& h, std::span<const uint8_t> body);
  void ReplyError(ConnState& cs, uint64_t request_id, const Status& st);
  // Marks the connection broken and asks the manager to close it.
  void RequestClose(ConnState& cs, ConnState::CloseReason why);
  std::shared_ptr<ConnState> Lookup(uint32_t qp_num);

  const uint32_t index_;
  const ServerConfig& cfg_;
  Backend& backend_;
  ServerCounters& counters_;
  ReceivePool pool_;
  LockView locks_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<MemoryRegion> reply_mr_;
  uint32_t next_reply_ = 0;
  bool reply_busy_[kReplySlots] = {};

  std::mutex mu_;
  std::unordered_map<uint32_t, std::shared_ptr<ConnState>> conns_;  // by qp_num; guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvrdma::server
