// An SRQ worker: polls its completion queue, applies requests to the store
// and answers each with a small SEND. The request path, top to bottom:
//
//   worker.cc           the thread: drain the CQ, queue each received
//                       message on its connection (ConnTable, no lock;
//                       at most credits each, or the connection closes),
//                       serve the connections round robin, one message
//                       each per round, copying the request out of
//                       client-reachable memory ONCE (CopyRequest)
//   worker_requests.cc  parse the copy (every request of the message
//                       before any is applied) and apply it, by concern:
//                       STATS, whole PUT/DELETE (lock check at the store's
//                       commit point), several whole writes in one message
//                       (HandleWrites: in order, one reply record each),
//                       fragments (Assembly)
//   worker_replies.cc   answer in request order from the connection's own
//                       reply buffers; never wait, never poll re-entrantly
//
// Every connection is bound to one worker (its QP's send and receive CQ are
// the worker's CQ), so a connection's messages are handled in order by one
// thread, which is what reassembly and reply order rely on. The receive
// buffers belong to the server-wide SRQ; a worker reposts each buffer as soon
// as it has copied the message out of it (a connection holds at most credits
// of them meanwhile).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/protocol/locks.h"
#include "server/server_clock.h"
#include "common/protocol/messages.h"
#include "server/assembly.h"
#include "server/backend.h"
#include "server/config.h"
#include "server/conn_state.h"
#include "server/conn_table.h"
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
  // Several writes per message (protocol 10): messages that carried more
  // than one request, and the requests they carried (a message of one
  // request counts in neither).
  std::atomic<uint64_t> batched_messages{0};
  std::atomic<uint64_t> batched_requests{0};
  // Service time per worker, failures by status, closes by client, refusals
  // (kvserver --metrics-listen; server/metrics/).
  metrics::RequestMetrics request_metrics;
};

// The shared receive side: SRQ + its buffers.
struct ReceivePool {
  SharedReceiveQueue* srq = nullptr;
  MemoryRegion* mr = nullptr;  // count * buffer_bytes
  uint32_t buffer_bytes = 0;
  uint8_t* Buffer(uint64_t i) const { return static_cast<uint8_t*>(mr->addr()) + i * buffer_bytes; }
  Status Repost(uint64_t i) const {
    RecvWr r{i, mr->Slice(i * buffer_bytes, buffer_bytes)};
    return srq->PostRecv({&r, 1});
  }
};

// The lock table as the workers see it: they only load words (never a CPU
// read-modify-write: clients change lock words with NIC atomics).
struct LockView {
  const uint64_t* words = nullptr;  // 1..lock_words: lock words (word 0 unused)
  const ServerClock* clock = nullptr;  // the clock leases are measured on
  uint32_t lock_words = 0;
  uint64_t seed = 0;
  // Status to answer a PUT/DELETE of the key whose hash is key_hash
  // (hash.h, with this seed: the store's) carrying token: OK or Locked.
  // requester: the owner id (connection id) of the connection it came on.
  // Inline up to the word's load: a free word (the common case) allows the
  // write with no clock read and no call (LockAllows); a held one is
  // judged by CheckHeld.
  Status Check(uint64_t key_hash, uint64_t token, uint32_t requester) const {
    if (words == nullptr) return Status::OK();
    const LockPlace place = LockPlaceOfHash(key_hash, lock_words);
    const uint64_t word = __atomic_load_n(&words[place.index], __ATOMIC_ACQUIRE);
    if (word == 0) return Status::OK();
    return CheckHeld(word, place.key, token, requester);
  }
  // Check of a held word (not 0), at the lease clock's now.
  Status CheckHeld(uint64_t word, uint8_t key_byte, uint64_t token, uint32_t requester) const;
};

// Milliseconds on the steady clock (reply watchdog, assembly timeout).
int64_t SteadyMs();

class Worker {
 public:
  Worker(uint32_t index, const ServerConfig& cfg, Backend& backend, ServerCounters& counters,
         AssemblyBudget& assembly_budget, ReceivePool pool, LockView locks, std::unique_ptr<CompletionQueue> cq);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void Start();
  // Stops the thread once it finds nothing more to serve, or at most
  // kStopDrainMs (worker.cc) after it sees the request, its replies posted
  // (RequestStop alone does not wait; Stop joins).
  void RequestStop();
  void Stop();
  CompletionQueue& cq() { return *cq_; }
  // Control plane (any thread): routes completions of c->qp_num to c, which
  // must stay alive until it is Removed and c->released is set.
  void Add(ConnState* c);
  // Control plane: the worker forgets c (late completions are dropped), ends
  // its assembly and then sets c->released. Without a running thread (after
  // Stop, or never started), at once on the caller's thread.
  void Remove(ConnState* c);
  uint32_t index() const { return index_; }
  // Rendezvous PUTs (protocol 10.1, messages.h): `mr` (local write, the
  // server's own memory) holds kRendezvousSlots buffers of max_value_bytes
  // each, the READs' destinations. Without it a rendezvous PUT is refused
  // with Unavailable. Before Start; `mr` outlives the worker's connections.
  void SetRendezvous(MemoryRegion* staging, MemoryRegion* log);
  // Rendezvous PUTs a worker holds at once (READs in flight). A
  // connection's first takes any free slot; its later ones
  // (kRendezvousPerConnection) only while fewer than half are busy, so
  // that at least half are left to other connections' first ones.
  static constexpr uint32_t kRendezvousSlots = 4;
  // Steady-clock ms before which every completion of this worker's CQ has
  // been handled (the start of its last poll that emptied the CQ, or now
  // while it sleeps on an empty CQ). The reply watchdog judges a connection
  // only on this: a reply posted at P and still pending at caught_up_ms() was
  // not taken for caught_up_ms() - P, whatever the worker was busy with.
  int64_t caught_up_ms() const;

 private:
  static constexpr uint64_t kReplyTag = 1ull << 63;  // wr_id of reply SENDs (receives: buffer index)
  // wr_id of a rendezvous READ: kReadTag | generation << 8 | slot (the
  // generation tells a late completion of a slot given back from the READ
  // of its next user).
  static constexpr uint64_t kReadTag = 1ull << 62;

 public:
  // wr_id of the bind of a connection's ring memory window: posted unsignaled ahead
  // of any reply, it completes only if it fails, and is then handled like a
  // failed inline reply (no buffer; the connection closes).
  static constexpr uint64_t kMwBindWrId = kReplyTag | 0xffffffffu;

 private:
  friend class WorkerTestPeer;
  // --- worker.cc: the thread and completion dispatch ---
  void Run();
  // Polls until the CQ is empty (or 32 polls of completions): replies sent
  // are handled at once, messages queued on their connection. Returns the
  // completions seen. `now_ms`: SteadyMs() read just before the call.
  // Drain and Dispatch are inline into Run (worker.cc): a call and its
  // saved registers per iteration and per completion cost a small PUT ~40
  // instructions.
  int Drain(int64_t now_ms);
  [[gnu::always_inline]] void Dispatch(const Completion& c) {
    if (c.wr_id & kReplyTag) {
      OnReplySent(c);
    } else if (c.wr_id & kReadTag) {
      OnRendezvousRead(c);
    } else {
      OnReceive(c);
    }
  }
  void OnReceive(const Completion& c);
  [[gnu::cold, gnu::noinline]] void DropReceive(const Completion& c, ConnState* cs);
  [[gnu::cold, gnu::noinline]] void RefuseUnreadable(ConnState& cs, const Completion& c, bool out_of_range, uint32_t len);
  [[gnu::cold, gnu::noinline]] void LogRepostFailure(const Status& st);
  // One round: every connection on the ready list handles its oldest
  // message, in list order; those with more go to the back of the list.
  void ServeRound();
  bool HasReady() const { return ready_head_ < ready_.size(); }
  // Copies, reposts and handles cs's oldest queued message.
  void HandleNext(ConnState& cs);
  // Reposts the buffers of cs's queued messages (the connection is gone).
  void DropPending(ConnState& cs);
  void OnReplySent(const Completion& c);
  // Copies the request out of the ring or the receive buffer into request_;
  // the returned span is the only view of the request used afterwards.
  std::span<const uint8_t> CopyRequest(ConnState& cs, const Completion& c);
  // Where the message of receive completion c lies, client-writable: its
  // receive buffer, or its position in cs's ring (*len: its length, at most
  // message_bytes). Null if a WRITE_WITH_IMM names a position or length out
  // of range.
  const uint8_t* MessageAt(const ConnState& cs, const Completion& c, uint32_t* len) const;
  // The connection of qp_num, or null. Inline (one per completion); a miss
  // is FindAfterControl's.
  ConnState* Find(uint32_t qp_num) {
    if (ConnState* c = conns_.Find(qp_num)) return c;
    return FindAfterControl(qp_num);
  }
  // A connection accepted since the last batch: its Add may be pending.
  ConnState* FindAfterControl(uint32_t qp_num);
  void ApplyControl();
  void ExpireAssemblies(int64_t now_ms);
  // Marks the connection broken and asks the manager to close it.
  void RequestClose(ConnState& cs, ConnState::CloseReason why);

  // --- worker_requests.cc: a request, by concern ---
  void HandleRequest(ConnState& cs, std::span<const uint8_t> msg);
  void HandleStats(ConnState& cs, const RequestHeader& h);
  void HandleClock(ConnState& cs, const RequestHeader& h);
  void HandleWrite(ConnState& cs, const ParsedRequest& r);     // whole PUT or DELETE
  // A message of several whole PUT/DELETEs: applied in order, answered by
  // one reply of one record each.
  void HandleWrites(ConnState& cs, std::span<const ParsedRequest> reqs);
  void HandleFragment(ConnState& cs, const ParsedRequest& r);  // part of a PUT
  // --- worker_rendezvous.cc: a PUT whose value the worker READs ---
  // Posts the READ of r's value into a free staging slot (or answers
  // NoResource: all busy); the PUT completes in OnRendezvousRead.
  void HandleRendezvous(ConnState& cs, const ParsedRequest& r);
  // The READ completed: the checksum over the worker's copy, then Apply.
  void OnRendezvousRead(const Completion& c);
  // READs in flight past assembly_timeout_ms close their connection; slots
  // of connections removed meanwhile are given back after that long.
  void ExpireRendezvous(int64_t now_ms);
  // Remove: the connection's READs (if any) no longer name it.
  void OrphanRendezvous(ConnState& cs);
  // cs has rendezvous PUTs taken: whether its next message is taken now (a
  // rendezvous PUT, by its flags, within kRendezvousPerConnection, a slot
  // free for it); else it waits until they are all answered.
  bool TakesBehindRendezvous(const ConnState& cs) const;
  // cs's oldest rendezvous PUTs that were refused before their READ
  // (RendezvousSlot::refused) are answered, their slots given back: their
  // turn has come (every PUT before them answered).
  void AnswerRefusedRendezvous(ConnState& cs);
  void FreeRendezvousSlot(uint32_t slot);
  // Removes n of cs's rendezvous PUTs from rendezvous_slots, from `at` on.
  static void DropRendezvousSlots(ConnState& cs, uint32_t at, uint32_t n);
  // A rendezvous PUT's value, READ: its place in the log (Backend::BeginPut)
  // or kStaged (in a slot), and the client's checksum of the entry.
  struct RendezvousValue {
    static constexpr uint64_t kStaged = ~uint64_t{0};
    uint64_t place;
    uint64_t checksum;
  };
  // Applies a PUT (value) or DELETE (no value) with the lock check at the
  // store's commit point, and answers it. rdv: a rendezvous PUT's
  // (Backend::FinishPut in place, else Backend::PutChecked).
  void Apply(ConnState& cs, const RequestHeader& h, std::span<const uint8_t> key,
             std::span<const uint8_t> value, bool is_delete, const RendezvousValue* rdv = nullptr);
  // Apply's store call and counters, without the reply; *version: the
  // write's version, or a VersionMismatch's current one (else 0).
  Status ApplyWrite(ConnState& cs, const RequestHeader& h, std::span<const uint8_t> key,
                    std::span<const uint8_t> value, bool is_delete, uint64_t* version,
                    const RendezvousValue* rdv = nullptr);

  // --- worker_replies.cc: replies ---
  // Queue the reply on cs; FlushReplies posts what the batch queued.
  void Reply(ConnState& cs, const ReplyHeader& h, std::span<const uint8_t> body);
  // Queue an encoded reply (records, <= kMaxReplySize bytes) on cs.
  void ReplyEncoded(ConnState& cs, std::span<const uint8_t> reply);
  // Reply and ReplyEncoded in two steps: QueueReply queues the SEND of cs's
  // next reply of `len` (<= kMaxReplySize) bytes and returns the buffer the
  // caller writes them to (null: cs does not take its replies and is being
  // closed; nothing queued); ReplyWritten then posts the queue if it is full.
  uint8_t* QueueReply(ConnState& cs, size_t len);
  void ReplyWritten(ConnState& cs);
  // `version`: the reply's version field (a VersionMismatch's current version).
  void ReplyError(ConnState& cs, uint64_t request_id, const Status& st, uint64_t version = 0);
  void FlushReplies();
  void FlushReplies(ConnState& cs);
  // A durable store: the writes this worker applied since its last Commit
  // are made durable (Backend::Commit: one call for all of them, the group
  // commit) before any reply leaves; if that fails, their replies, still
  // queued, become IOError.
  void CommitWrites();

  const uint32_t index_;
  const ServerConfig& cfg_;
  const bool durable_;  // the backend keeps its writes in files (Backend::durable)
  std::array<Completion, 32> wc_;  // Run's completion buffer (not re-initialised per poll)
  Backend& backend_;
  ServerCounters& counters_;
  AssemblyBudget& assembly_budget_;
  ReceivePool pool_;
  LockView locks_;
  std::unique_ptr<CompletionQueue> cq_;
  // The one copy of the request being handled (message_bytes): worker-owned,
  // out of every client's reach.
  std::unique_ptr<uint8_t[]> request_;
  // The requests of the message being handled (views of request_), and the
  // reply of a message of several, built here before it is queued.
  std::array<ParsedRequest, kMaxRequestsPerMessage> parsed_;
  std::array<uint8_t, kMaxReplySize> records_;
  ConnTable conns_;  // the worker thread's only
  // Connections with replies queued in this round (a round handles one
  // message per connection: each appears once; capacity reserved at Add).
  // Emptied before any Remove is applied.
  std::vector<ConnState*> reply_queued_;
  // Replies to writes applied since the last Commit (a durable store): the
  // connection and the reply's place in its queue.
  struct Awaiting {
    ConnState* cs;
    uint32_t queued;
    uint64_t request_id;
    bool records;  // a reply of several records (HandleWrites): the OK ones become IOError
  };
  std::vector<Awaiting> awaiting_;
  // Connections with messages queued, in the order they are served:
  // ready_[ready_head_..] (each at most once: ConnState::in_ready).
  std::vector<ConnState*> ready_;
  size_t ready_head_ = 0;
  int64_t last_expiry_ms_ = 0;
  // Where the next request's service time starts (metrics::ServiceTimer):
  // Run's clock reading before its drain, then the end of the request
  // served before it (one clock reading per request).
  std::chrono::steady_clock::time_point service_start_ = std::chrono::steady_clock::now();
  // Rendezvous staging (SetRendezvous): slot i is rdv_mr_ at i * max_value_bytes.
  struct RendezvousSlot {
    bool busy = false;         // a READ posted into it, not completed (or not given back)
    // Taken behind another rendezvous PUT of its connection and refused
    // before any READ (no log space, no room on the QP): no READ, answered
    // with this when its turn comes (AnswerRefusedRendezvous).
    Status refused;
    ConnState* cs = nullptr;   // whose PUT; nullptr once the connection is removed
    uint32_t generation = 0;   // of the READ posted last
    bool closing = false;      // the READ took too long: its connection is being closed
    int64_t posted_ms = 0;
    RequestHeader header;      // the PUT's (request id, token, condition, value length)
    std::vector<uint8_t> key;  // the worker's copy of the key
    uint64_t checksum = 0;     // the client's RendezvousChecksum
    uint64_t place = 0;        // in place: the entry's (Backend::BeginPut), while busy
  };
  MemoryRegion* rdv_mr_ = nullptr;  // staging (a durable store), else null
  MemoryRegion* log_mr_ = nullptr;  // in place: the log, registered for local write, else null
  std::vector<RendezvousSlot> rdv_;
  uint32_t rdv_busy_ = 0;  // slots busy
  std::atomic<int64_t> caught_up_ms_{0};
  std::atomic<bool> sleeping_{false};  // in cq_->Wait with an empty CQ

  // Control plane -> worker: Add/Remove requests, applied by the worker
  // between completion batches (and on a lookup miss).
  struct ControlOp {
    bool add;
    ConnState* conn;
  };
  std::mutex control_mu_;
  std::vector<ControlOp> control_;  // guarded by control_mu_
  std::atomic<bool> control_pending_{false};
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvrdma::server
