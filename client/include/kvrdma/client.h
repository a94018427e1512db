// kvrdma client library: GET with one-sided RDMA READs, PUT/DELETE as
// messages to the server's workers.
//
//   auto c = kvrdma::Client::Connect({.host = "10.0.0.1"});
//   if (!c.ok()) { /* c.status().ToString() says why */ }
//   (*c)->Put("k", "v");
//   std::string v;
//   kvrdma::Status s = (*c)->Get("k", &v);   // s.IsNotFound() when absent
//
// Thread safety: a Client is used by one thread at a time (it owns one QP and
// its buffers). Use one Client per thread; Clients are independent.
// Errors: every call returns a Status; nothing throws, aborts or exits on a
// remote failure. After a failure (ConnectionLost/Timeout for what was in
// flight), the next operation submitted when nothing is in flight reconnects,
// with exponential backoff (10 ms up to 2 s); operations started during the
// backoff fail at once with ConnectionLost. Held locks and the location cache
// do not survive a reconnect.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvrdma/status.h"

namespace kvrdma {

enum class PutMode : uint8_t {
  kSend,      // requests travel as SENDs into the server's shared receive queue
  kWriteImm,  // requests are RDMA-written into this connection's ring slot, with an immediate
};

struct ClientOptions {
  std::string host = "127.0.0.1";  // the server's RDMA-reachable address
  uint16_t port = 7471;
  std::string device;              // local RDMA device; empty = the first
  PutMode put_mode = PutMode::kSend;
  int connect_timeout_ms = 5000;
  int op_timeout_ms = 5000;        // per operation; past it the call returns Timeout
  // Keys whose entry location is remembered, so that a GET of a cached,
  // unchanged key is one RDMA READ (least recently used evicted; 0 = off).
  // Always linearizable: a stale location is detected and refreshed.
  size_t location_cache_entries = 4096;
  // Operations in flight at most (1..64): each costs ~33 KiB of registered
  // buffers. Lower it for processes with many Clients.
  uint32_t max_in_flight = 64;
  // The server's shared secret, if it requires one (<= 32 bytes).
  std::string auth_token;
};

// One operation of the asynchronous API. Owned by the caller, who keeps it
// (and the memory its views point to) alive and unchanged from Submit until
// Poll/Wait hands it back; the library allocates nothing per operation.
struct Op {
  enum class Type : uint8_t { kGet, kPut, kDelete };
  Type type = Type::kGet;
  std::string_view key;
  std::string_view value;        // kPut
  std::string* result = nullptr;  // kGet: receives the value (reuse it to avoid allocations)
  void* user = nullptr;           // the caller's tag, untouched
  // Set when the operation completes:
  Status status;                  // as the synchronous call of the same name would return
  uint64_t version = 0;           // kPut/kDelete: the key's version after the write
};

// Counters of what this client did (for tests and benchmarks).
struct ClientStats {
  uint64_t gets = 0;
  uint64_t get_rounds = 0;   // bucket-READ rounds (1 per GET without races)
  uint64_t get_retries = 0;  // rounds repeated: torn/superseded entry, concurrent move
  uint64_t reads = 0;        // RDMA READs posted
  uint64_t cache_hits = 0;   // GETs answered by one READ at a cached location
  uint64_t cache_stale = 0;  // cached locations found superseded/recycled (fell back to the index)
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t messages = 0;     // request messages sent (fragments count)
};

class Client {
 public:
  // Connects to a kvserver. Errors: Unavailable (no device, nothing listening,
  // refused: the message carries the server's reason), Protocol (another
  // protocol version), Timeout.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Reads the value of `key` into *value. OK, NotFound, InvalidArgument
  // (empty key), TooLarge (key over the server's limit), Timeout (no
  // consistent read within op_timeout_ms: writers kept racing), Corruption,
  // ConnectionLost. The value returned was the key's value at some instant
  // during the call.
  Status Get(std::string_view key, std::string* value);
  // Stores value under key. OK (the store has it; a later Get sees it),
  // InvalidArgument, TooLarge, ServerFull, Timeout, ConnectionLost.
  Status Put(std::string_view key, std::string_view value);
  // Deletes key. OK, NotFound (was not there), InvalidArgument, TooLarge,
  // ServerFull (no room for the tombstone), Timeout, ConnectionLost.
  Status Delete(std::string_view key);
  // The server's counters (connections, puts, deletes, errors, items, ...).
  Result<std::vector<std::pair<std::string, uint64_t>>> Stats();

  // --- Locks: leases taken with RDMA compare-and-swap on the server's lock
  // table, measured on the server's clock. While this client holds a key's
  // lock, its Put/Delete of that key carry the lock's token; the server
  // refuses a Put/Delete of a key locked by another client with Locked until
  // the lock is released or its lease ends. A holder that dies loses the lock
  // when the lease ends. Keys may share a lock word (the table is hashed).
  //
  // Takes the lock, waiting (with backoff) while another client holds it.
  // OK, Timeout (still held by another after op_timeout_ms), InvalidArgument,
  // ConnectionLost.
  Status Lock(std::string_view key, std::chrono::milliseconds lease);
  // One attempt: OK, or Locked when another client holds an unexpired lease.
  Status TryLock(std::string_view key, std::chrono::milliseconds lease);
  // Releases it: OK; NotFound if this client does not hold it; Locked if the
  // lease had ended and another client took the lock over meanwhile.
  Status Unlock(std::string_view key);

  // --- Asynchronous, pipelined API. The synchronous calls above are built on
  // it. Operations submitted together are posted with one doorbell; GETs
  // overlap their READs (within the QP's READ limit), PUT/DELETE overlap
  // within the server's credits. Completion order is not submission order.

  // Starts up to ops.size() operations; returns how many were taken (the
  // first n). Fewer when max_in_flight() would be exceeded: Poll, then
  // resubmit the rest. An invalid operation is taken and completes at the
  // next Poll with its error.
  size_t Submit(std::span<Op* const> ops);
  // Makes progress without blocking; stores completed operations in `done`
  // and returns how many.
  size_t Poll(std::span<Op*> done);
  // Like Poll, but waits until at least one operation completes or
  // timeout_ms passes (then returns 0).
  size_t Wait(std::span<Op*> done, int timeout_ms);
  size_t in_flight() const;
  size_t max_in_flight() const;

  // The version the server reported for the last successful Put/Delete.
  uint64_t last_version() const;
  const ClientStats& stats() const;
  uint32_t max_value_bytes() const;
  uint32_t max_key_bytes() const;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class ClientFactory;
};

}  // namespace kvrdma
