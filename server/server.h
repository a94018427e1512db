// kvserver's network side: registers the store's regions, runs the
// connection manager (rdma_cm listener) and the SRQ workers.
//
// Memory and access rights (least privilege):
//   index, log      REMOTE_READ                  (clients GET with READs)
//   lock table      REMOTE_ATOMIC + REMOTE_READ  (CAS locks)
//   request ring    REMOTE_WRITE, one registration per connection
//   receive buffers, reply buffers (per connection): local only
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/transport/transport.h"
#include "server/backend.h"
#include "server/config.h"
#include "server/conn_state.h"
#include "server/worker.h"

namespace kvrdma::server {

class Server {
 public:
  // `device` is the RDMA device (verbs, or loopback in unit tests).
  Server(ServerConfig cfg, std::shared_ptr<Device> device, Backend& backend);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Registers memory, creates the SRQ, starts the workers and the listener.
  Status Start();
  // Runs the connection manager until RequestStop(); then shuts down in
  // order: stop accepting, let workers finish what arrived, disconnect
  // clients, release every resource.
  Status Run();
  // Safe from a signal handler's helper thread or any thread.
  void RequestStop() { stop_.store(true); }
  uint16_t port() const { return listener_ ? listener_->port() : 0; }
  const ServerCounters& counters() const { return counters_; }
  const ServerConfig& config() const { return cfg_; }
  // The lock table as workers see it (the metrics port counts held locks).
  // Valid between Start() and the end of Run().
  LockView lock_view() const {
    // No lock table (--lock-words 0): no words, so no write is refused.
    return LockView{cfg_.lock_words != 0 ? locks_.get() : nullptr, &clock_, cfg_.lock_words,
                    backend_.regions().hash_seed};
  }

 private:
  void OnConnectRequest(std::unique_ptr<ConnectRequest> req);
  void OnDisconnected(Connection* c);
  // Closes the connections a worker gave up on (QP failed, protocol broken)
  // and those whose replies stay unacknowledged past reply_timeout_ms.
  void CloseFailedConnections();
  using RejectReason = metrics::RequestMetrics::RejectReason;
  void Reject(ConnectRequest& req, const Status& why, RejectReason reason = RejectReason::kOther);
  // The connection limits (flow_control_backoff_ms, max_connections,
  // max_connections_per_peer): the refusal a new connection from `peer`
  // gets, or OK.
  Status CheckConnectionLimits(const std::string& peer, RejectReason* reason);
  // A connection from `peer` was closed for breaking flow control: its
  // address is refused new connections for a while (flow_control_backoff_ms).
  void NoteFlowControlClose(const std::string& peer);
  // Forgets addresses whose back-off ended long enough ago.
  void ForgetQuietAddresses(int64_t now_ms);
  // Adds a live connection to conns_ and its peer's count; Forget takes it out.
  void Remember(std::shared_ptr<ConnState> cs);
  std::shared_ptr<ConnState> Forget(std::vector<std::shared_ptr<ConnState>>::iterator it);
  // Counts the close of a connection a worker asked to close, by its reason;
  // returns the reason in words, or nullptr if no worker asked.
  const char* CountClose(const ConnState& cs);
  // Hands a connection to its worker's Remove and frees it once released.
  void Retire(std::shared_ptr<ConnState> cs);
  void FreeReleased();
  void Shutdown();

  ServerConfig cfg_;
  uint64_t round_limit_us_ = 0;  // the descriptor's; < the store's grace period (Start)
  std::shared_ptr<Device> device_;
  Backend& backend_;
  ServerCounters counters_;
  std::atomic<bool> stop_{false};

  // Creation order = declaration order; Shutdown() destroys in reverse.
  std::unique_ptr<MemoryRegion> index_mr_;
  std::unique_ptr<MemoryRegion> log_mr_;
  std::unique_ptr<uint64_t, FreeDeleter> locks_;
  size_t locks_bytes_ = 0;
  std::unique_ptr<MemoryRegion> locks_mr_;
  ServerClock clock_;  // the lease clock (CLOCK requests, lock checks)
  std::unique_ptr<uint8_t, FreeDeleter> recv_mem_;
  std::unique_ptr<MemoryRegion> recv_mr_;
  std::unique_ptr<SharedReceiveQueue> srq_;
  std::unique_ptr<AssemblyBudget> assembly_budget_;
  // Per worker, when the backend takes no values in place (a durable
  // store): its rendezvous staging slots (Worker::SetRendezvous), the
  // server's own memory, local write only.
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> rendezvous_mem_;
  std::vector<std::unique_ptr<MemoryRegion>> rendezvous_mr_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<Listener> listener_;
  // Live connections by Connection* (the manager thread's view), and how
  // many of them each peer address holds (no entry: none).
  std::vector<std::shared_ptr<ConnState>> conns_;
  std::unordered_map<std::string, uint32_t> peer_conns_;
  // Addresses with connections closed for breaking flow control lately: how
  // many such closes, and until when (steady clock, ms) their new connections
  // are refused. One entry per address with such a close within the last
  // 2 x kFlowControlBackoffMaxFactor x flow_control_backoff_ms.
  struct Backoff {
    uint32_t closes = 0;
    int64_t until_ms = 0;
  };
  std::unordered_map<std::string, Backoff> backoff_;
  int64_t last_backoff_sweep_ms_ = 0;
  // Connect requests from addresses in their back-off, refused at at_ms
  // (kRefusalDelayMaxMs); at most kDelayedRefusalsMax.
  struct DelayedRefusal {
    std::unique_ptr<ConnectRequest> req;
    Status why;
    int64_t at_ms = 0;
  };
  std::vector<DelayedRefusal> delayed_refusals_;
  // Refuses the delayed requests whose time has come (all of them if
  // `all`); returns the ms until the next one is due (-1: none left).
  int64_t RefuseDelayed(bool all);
  // Closed connections their worker may still refer to (until released).
  std::vector<std::shared_ptr<ConnState>> retiring_;
  // Connection ids are also lock owner ids (common/protocol/locks.h):
  // 1..kLockOwnerMax, unique among live connections and unexpired leases.
  uint32_t NextConnectionId();  // 0: none free (the connection is refused)
  uint32_t next_conn_id_ = 1;   // ids never handed out start here
  uint32_t reuse_cursor_ = 1;   // where the search for a reusable id resumes
  friend class ServerTestPeer;
  uint32_t next_worker_ = 0;
  int64_t last_close_check_ms_ = 0;
};

}  // namespace kvrdma::server
