// The transport seam: the few RDMA operations kvrdma uses, behind an interface
// with two implementations.
//
//  - verbs (common/transport/verbs_transport.h): rdma_cm + libibverbs; the
//    real thing, run on a NIC or Soft-RoCE.
//  - loopback (common/transport/loopback_transport.h): a real in-process
//    implementation (rkey table with bounds and access checks, asynchronous
//    completions, QP error state, fault and torn-read injection) for fast
//    unit tests. It is never a substitute for the verbs path in CI.
//
// Object model (mirrors verbs):
//   Device            one NIC + protection domain; registers memory, makes
//                     CQs and SRQs, listens and connects.
//   MemoryRegion      registered memory: lkey for local use, rkey for peers.
//   MemoryWindow      remote access to part of a region, bound to one QP
//                     (type 2): its rkey works on that QP only.
//   CompletionQueue   completions, pollable, with a blocking wait.
//   SharedReceiveQueue receive buffers shared by many connections.
//   Connection        one reliable-connected QP to a peer.
//   Listener          accepts connection requests (with private data).
//
// Lifetime: children hold a shared_ptr to their Device, so a Device outlives
// everything made from it. Destroy connections before the CQs/SRQ they use.
// Threading: a Connection's PostSend/PollSend are used by one thread at a
// time; a CompletionQueue is polled by one thread at a time; Device methods
// are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvrdma {

// Access rights of a memory region (same meaning as IBV_ACCESS_*).
enum AccessFlags : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteRead = 1u << 1,
  kAccessRemoteWrite = 1u << 2,
  kAccessRemoteAtomic = 1u << 3,
  // Memory windows may be bound over the region (IBV_ACCESS_MW_BIND). Gives
  // no remote right by itself: a region with only local rights and this
  // exposes no usable rkey; the windows bound over it carry the rights.
  kAccessMwBind = 1u << 4,
};

enum class WrOpcode : uint8_t {
  kRead,          // RDMA READ remote -> local
  kWrite,         // RDMA WRITE local -> remote
  kWriteImm,      // RDMA WRITE with immediate; consumes a receive at the peer
  kSend,          // SEND; consumes a receive at the peer
  kCompareSwap,   // 8-byte CAS on remote memory; old value -> local
  kFetchAdd,      // 8-byte fetch-and-add on remote memory; old value -> local
  kRecv,          // completion of a receive (SEND arrived)
  kRecvWriteImm,  // completion of a receive consumed by a WRITE with immediate
  kBindMw,        // completion of Connection::BindWindow (a failed one, or signaled)
  kLocalInv,      // invalidate the memory window whose rkey is SendWr::rkey (local)
};
const char* WrOpcodeName(WrOpcode op) noexcept;

// One scatter/gather element in registered local memory.
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// One work request for the send queue. Trivial, preallocatable; posting a
// batch of them rings one doorbell.
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  bool signaled = true;      // unsignaled successful WRs produce no completion
  bool inline_data = false;  // copy local bytes into the WR (SEND/WRITE, small)
  Sge local;                 // atomics: 8 bytes that receive the old value
  // kRead only: a second scatter element (length 0: none). The READ's bytes
  // fill `local`, then `local2`: remote_addr spans both lengths. A GET reads
  // an entry's header and key into its own buffer and the value straight
  // into the caller's registered memory this way (client_get.cc).
  Sge local2;
  uint64_t remote_addr = 0;  // READ/WRITE/atomics
  uint32_t rkey = 0;         // READ/WRITE/atomics; kLocalInv: the window's rkey
  uint32_t imm = 0;          // kWriteImm, host byte order
  uint64_t compare_add = 0;  // CAS: compare value; FAA: value to add
  uint64_t swap = 0;         // CAS: new value
};

// One receive buffer.
struct RecvWr {
  uint64_t wr_id = 0;
  Sge local;
};

// Completion status; the same kinds on both transports.
enum class WcStatus : uint8_t {
  kSuccess,
  kRemoteAccessError,     // bad rkey, out of bounds, or missing access right
  kRemoteInvalidRequest,  // e.g. misaligned atomic, too long for the receive
  kRemoteOperationError,
  kLocalProtectionError,  // local SGE not in a registered region / no access
  kLocalLengthError,
  kFlushed,               // the QP was in error: the WR was not executed
  kRetryExceeded,         // the peer did not answer
  kRnrRetryExceeded,      // the peer had no receive posted
  kMwBindError,           // a window bind or invalidation the NIC refused
  kOther,
};
const char* WcStatusName(WcStatus s) noexcept;

struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WrOpcode opcode = WrOpcode::kSend;
  bool has_imm = false;
  uint32_t imm = 0;       // host byte order
  uint32_t byte_len = 0;  // receives: bytes that arrived
  uint32_t qp_num = 0;    // the QP the completion belongs to
  uint32_t vendor_err = 0;
};

// The Status a failed completion means: RemoteAccess for access errors,
// ConnectionLost for flushed/retry-exceeded, IOError for the rest.
Status CompletionStatus(const Completion& c);

struct DeviceInfo {
  std::string name;                   // e.g. "rxe0", "loop0"
  uint32_t max_qp_rd_atom = 0;        // READs/atomics in flight per QP (responder)
  uint32_t max_qp_init_rd_atom = 0;   // ... (initiator)
  bool atomics_hca_only = true;       // atomics are atomic only against other NIC atomics
  uint32_t max_srq_wr = 0;
  uint32_t max_cqe = 0;
  uint32_t max_qp_wr = 0;
  uint64_t max_mr_size = 0;
  // Type-2 memory windows (a window bound by a work request on a QP, as the
  // server's ring and a client's rendezvous PUTs use them).
  bool memory_windows = false;
};

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* addr() const noexcept { return addr_; }
  uint64_t base() const noexcept { return reinterpret_cast<uint64_t>(addr_); }
  size_t length() const noexcept { return length_; }
  uint32_t lkey() const noexcept { return lkey_; }
  uint32_t rkey() const noexcept { return rkey_; }
  uint32_t access() const noexcept { return access_; }
  // An SGE over [offset, offset + len) of this region.
  Sge Slice(size_t offset, uint32_t len) const noexcept {
    return Sge{base() + offset, len, lkey_};
  }

 protected:
  MemoryRegion(void* addr, size_t length, uint32_t lkey, uint32_t rkey, uint32_t access)
      : addr_(addr), length_(length), lkey_(lkey), rkey_(rkey), access_(access) {}

 private:
  void* addr_;
  size_t length_;
  uint32_t lkey_;
  uint32_t rkey_;
  uint32_t access_;
};

// A type-2 memory window: remote access to [addr, addr + length) of a region
// registered with kAccessMwBind, granted through ONE queue pair. The NIC
// refuses its rkey on every other QP (remote access error), and the window
// stops working when it is destroyed. Made by Device::CreateMemoryWindow,
// bound by ConnectRequest::Accept (QpConfig::mw_binding) before the peer learns
// the rkey, or at run time by Connection::BindWindow on a QP made with
// QpConfig::windows, and unbound by a kLocalInv work request on that QP
// (after which it may be bound again, with a new rkey). Destroy it BEFORE the
// QP it is bound to and before its region: a bound window holds a reference
// on its QP, and rxe (Linux 6.1) destroying that QP first waits 50 s for the
// reference, warns and fails the destroy (measured: every teardown of such a
// QP took 51 s). rxe's source (6.1, rxe_dereg_mr) also refuses to deregister a
// region while a window is bound over it (not measured here): invalidate
// (and wait for the completion) first.
class MemoryWindow {
 public:
  virtual ~MemoryWindow() = default;
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;
  // The rkey the window has once bound: the one to give the peer. Its low
  // byte (the key part a type-2 bind chooses) is random, and each
  // Connection::BindWindow picks a new one, so an rkey of an earlier binding
  // never names a later one.
  uint32_t rkey() const noexcept { return rkey_; }

 protected:
  explicit MemoryWindow(uint32_t rkey) : rkey_(rkey) {}
  uint32_t rkey_;  // changed by the transport's BindWindow (one thread: the QP's poster)
};

// A memory window to bind over part of a region on a new QP (see QpConfig::mw_binding).
struct MwBinding {
  MemoryWindow* mw = nullptr;           // nullptr: no binding
  const MemoryRegion* region = nullptr;  // registered with kAccessMwBind
  uint64_t addr = 0;                     // inside region
  uint64_t length = 0;
  uint32_t access = kAccessRemoteWrite;  // remote rights granted through the window
  // wr_id of the bind work request: a failed bind completes with it on the
  // QP's send CQ (a successful one is unsignaled and completes silently).
  uint64_t wr_id = 0;
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Takes up to out.size() completions; returns how many (0 if none), or -1
  // if the CQ itself failed.
  virtual int Poll(std::span<Completion> out) = 0;
  // Blocks until a completion may be there, Wake() is called, or timeout_ms
  // passes (Timeout; timeout_ms < 0: no limit).
  // Pattern: Poll -> empty -> Wait -> Poll. Wait arms the notification and
  // re-checks, so no completion that arrives in between is missed.
  virtual Status Wait(int timeout_ms) = 0;
  // Makes the Wait in progress, or else the next one, return OK at once.
  // Safe from any thread (a worker sleeps with no timeout; whoever gives it
  // work that is not a completion wakes it).
  virtual void Wake() = 0;

 protected:
  CompletionQueue() = default;
};

class SharedReceiveQueue {
 public:
  virtual ~SharedReceiveQueue() = default;
  virtual Status PostRecv(std::span<const RecvWr> wrs) = 0;
  virtual uint32_t max_wr() const noexcept = 0;

 protected:
  SharedReceiveQueue() = default;
};

// How to build a connection's QP.
struct QpConfig {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 64;  // ignored with an SRQ
  uint32_t max_inline = 64;
  uint8_t max_rd_atomic = 16;  // READs/atomics in flight each way; clamped to the device
  // Shared queues; nullptr = the connection makes and owns its own.
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // nullptr = a private receive queue
  // The QP binds and invalidates memory windows at run time
  // (Connection::BindWindow, WrOpcode::kLocalInv). verbs: the QP is made with
  // IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV.
  bool windows = false;
  // ConnectRequest::Accept only: bound on the new QP, ahead of anything else
  // on its send queue, before the peer is told (so before it can use it).
  MwBinding mw_binding;
};

class Connection {
 public:
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Posts a batch with one doorbell. Fails (ConnectionLost) on a broken
  // connection; InvalidArgument if a WR is malformed; NoResource if the send
  // queue is full. Nothing of a failed batch is posted past the bad WR.
  virtual Status PostSend(std::span<const SendWr> wrs) = 0;
  // Posts a type-2 bind of b.mw over [b.addr, b.addr + b.length) of
  // b.region with b.access (REQUIRES: QpConfig::windows; the window unbound:
  // new, or invalidated by a kLocalInv that executed). On OK b.mw->rkey() is
  // the new rkey. The bind executes before every WR posted after it on this
  // QP, so a peer that learns the rkey from a later SEND can use it, through
  // this QP only. It completes with b.wr_id when `signaled` or when it fails
  // (kMwBindError; the QP then enters the error state, as with verbs).
  virtual Status BindWindow(const MwBinding& b, bool signaled) = 0;
  // Receive buffers for a connection without an SRQ.
  virtual Status PostRecv(std::span<const RecvWr> wrs) = 0;
  // Polls the send CQ when the connection owns it (QpConfig::send_cq was
  // nullptr). A failed completion marks the connection broken.
  int PollSend(std::span<Completion> out);
  CompletionQueue& send_cq() noexcept { return *send_cq_; }
  CompletionQueue& recv_cq() noexcept { return *recv_cq_; }

  virtual uint32_t qp_num() const noexcept = 0;
  // The private data the peer sent with its connect request or accept.
  const std::vector<uint8_t>& peer_private_data() const noexcept { return peer_data_; }
  // Limits in force for this QP (after clamping to the device).
  uint32_t max_send_wr() const noexcept { return max_send_wr_; }
  uint32_t max_rd_atomic() const noexcept { return max_rd_atomic_; }
  uint32_t max_inline() const noexcept { return max_inline_; }

  // True once the QP failed or the peer disconnected. Never cleared.
  virtual bool broken() const noexcept = 0;
  virtual void MarkBroken() noexcept = 0;
  // Starts an orderly disconnect; the peer sees the connection broken.
  virtual void Disconnect() noexcept = 0;
  // For connections made with Device::Connect: reads pending connection-
  // manager events without blocking and marks the connection broken if the
  // peer disconnected. (Accepted connections learn this from the Listener.)
  virtual void PollCmEvents() noexcept {}

  // Opaque pointer for the owner (e.g. the server's per-connection state).
  void set_user(void* u) noexcept { user_ = u; }
  void* user() const noexcept { return user_; }

 protected:
  Connection() = default;
  std::vector<uint8_t> peer_data_;
  CompletionQueue* send_cq_ = nullptr;
  CompletionQueue* recv_cq_ = nullptr;
  uint32_t max_send_wr_ = 0;
  uint32_t max_rd_atomic_ = 0;
  uint32_t max_inline_ = 0;

 private:
  void* user_ = nullptr;
};

// A connection request seen by a listener.
class ConnectRequest {
 public:
  virtual ~ConnectRequest() = default;
  virtual std::span<const uint8_t> private_data() const noexcept = 0;
  // Who asks: the peer's IP address without the port ("10.0.0.1", "fe80::1";
  // loopback: the connecting device's name, one "host" per device). Empty if
  // unknown.
  virtual std::string peer_address() const = 0;
  // Creates the QP and accepts, answering with `reply` as private data.
  // `ready`, if given, runs after the QP exists and before the peer is told,
  // so the owner can route the QP's first completions (control path only).
  virtual Result<std::unique_ptr<Connection>> Accept(
      const QpConfig& cfg, std::span<const uint8_t> reply,
      const std::function<void(Connection&)>& ready = {}) = 0;
  // Refuses; the connecting side receives `reply` as the reason.
  virtual void Reject(std::span<const uint8_t> reply) noexcept = 0;
};

struct CmEvent {
  enum class Type : uint8_t {
    kConnectRequest,  // request is set: Accept or Reject it
    kEstablished,     // connection is set
    kDisconnected,    // connection is set and now broken(); its owner may destroy it
  };
  Type type = Type::kConnectRequest;
  std::unique_ptr<ConnectRequest> request;
  Connection* connection = nullptr;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // The next connection-manager event, or Timeout after timeout_ms (-1: wait
  // forever). Connections accepted here are reported kEstablished/
  // kDisconnected through this same call, so destroy them on this thread.
  virtual Result<CmEvent> NextEvent(int timeout_ms) = 0;
  virtual uint16_t port() const noexcept = 0;
};

struct ConnectOptions {
  std::string host;  // address (IPv4/IPv6 literal or name); loopback: any name
  uint16_t port = 0;
  int timeout_ms = 5000;
  // verbs: the local address to connect from (a literal; empty: the one the
  // route picks), so one host can be several clients to the server's
  // per-address limits (bench/fairness). Loopback: ignored.
  std::string source;
};

class Device : public std::enable_shared_from_this<Device> {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const DeviceInfo& info() const noexcept = 0;
  virtual Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t len,
                                                               uint32_t access) = 0;
  // An unbound type-2 memory window (bind it with QpConfig::mw_binding).
  virtual Result<std::unique_ptr<MemoryWindow>> CreateMemoryWindow() = 0;
  // A CQ with a completion channel (Wait blocks on it).
  virtual Result<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(uint32_t depth) = 0;
  virtual Result<std::unique_ptr<SharedReceiveQueue>> CreateSharedReceiveQueue(uint32_t max_wr) = 0;
  // Listens on host:port ("" or "0.0.0.0" = all addresses; port 0 = any).
  virtual Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port,
                                                   int backlog) = 0;
  // Connects, sending `private_data`; on a rejection returns Unavailable and,
  // if reject_reply is given, the peer's reason bytes.
  virtual Result<std::unique_ptr<Connection>> Connect(const ConnectOptions& opts,
                                                      const QpConfig& cfg,
                                                      std::span<const uint8_t> private_data,
                                                      std::vector<uint8_t>* reject_reply) = 0;

 protected:
  Device() = default;
};

}  // namespace kvrdma
