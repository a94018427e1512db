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
// backoff fail at once with ConnectionLost. A client that was idle when its
// server went away (and came back) notices the closed connection before its
// next call and reconnects, so that call does not fail. Held locks and the
// location cache do not survive a reconnect.
#pragma once

#include <chrono>
#include <cstddef>
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
  kWriteImm,  // requests are RDMA-written into a message buffer of this connection's ring, with an immediate
};

struct ClientOptions {
  // The server's address (an IP address or a name that resolves to one)
  // reachable over RDMA, and its port (kvserver --port).
  std::string host = "127.0.0.1";
  uint16_t port = 7471;
  // The local RDMA device (e.g. "mlx5_0", "rxe0"); empty = the first one.
  // rdma_cm picks the device that routes to `host`: naming another one
  // makes Connect fail with Unavailable.
  std::string device;
  // How PUT/DELETE requests travel; both reach the same workers. Results do
  // not depend on it.
  PutMode put_mode = PutMode::kSend;
  // Address/route resolution plus the connection handshake, at most.
  int connect_timeout_ms = 5000;
  // Per operation (Get/Put/Delete/Stats, each Lock attempt series, each
  // asynchronous Op from its Submit): past it the operation fails with
  // Timeout. When the server stops answering at all, the connection is
  // abandoned (every operation in flight fails with Timeout) and the next
  // call reconnects.
  int op_timeout_ms = 5000;
  // Keys whose entry location is remembered, so that a GET of a cached,
  // unchanged key is one round trip (the index word and the entry READ
  // together) instead of two (least recently used evicted; 0 = off). An
  // entry over 16 KiB is read from the cache once two GETs in a row found it
  // in the same place. Always linearizable: a stale location is detected and
  // refreshed. 32 bytes per entry.
  size_t location_cache_entries = 4096;
  // Operations in flight at most (1..64; values outside are clamped): each
  // costs ~33 KiB of registered buffers. Lower it for processes with many
  // Clients.
  uint32_t max_in_flight = 64;
  // The server's shared secret, if it requires one (kvserver --auth-token;
  // at most 32 bytes). Sent in the connect request; see docs/SECURITY.md.
  std::string auth_token;
  // Waiting for a completion (Wait, and the synchronous calls), the client
  // polls at least busy_poll_us (microseconds) after its last completion or
  // submitted operation, then sleeps until the next completion (0 = sleep
  // at once). While completions keep arriving just after the poll ended
  // (a reply slower than the poll: a wake-up per operation), the poll
  // doubles, up to busy_poll_max_us; it falls back when they stop or come
  // further apart (at or below busy_poll_us: it never grows). Longer saves
  // wake-ups when the thread has a CPU of its own; shorter leaves the CPU
  // to others (a server or Soft-RoCE on the same machine).
  uint32_t busy_poll_us = 50;
  // = busy_poll_us: no growth unless raised. Unlike kvserver's workers (250
  // by default), a client's growth cost ~14 % of the PUT rate of two
  // clients x 16 in flight in the 2-vCPU guest, where the clients share
  // CPUs with the server (docs/PERFORMANCE.md, "The workers' poll window
  // grows by default").
  uint32_t busy_poll_max_us = 50;
  // A PUT whose value has at least this many bytes is a rendezvous PUT (on
  // a device with type-2 memory windows; 0 = never), and so is one of at
  // least half as many while other operations of the client are in flight
  // (their transfers overlap the value's registration; one at a time it
  // would cost the PUT its latency, below): instead of the value in message-sized fragments,
  // the client binds a memory window READ-only over exactly the value on
  // its own connection, and the server pulls the value with one RDMA READ,
  // checks its checksum over its own copy, and applies the PUT. The window
  // is bound over a registration of exactly the value's bytes: made for
  // that PUT alone, or, for a value inside memory registered with
  // RegisterMemory, kept for the next PUT of the same bytes; a value that
  // cannot be registered (over the locked-memory limit, say) goes in
  // fragments instead (ClientStats::rendezvous_fallbacks). The window is
  // invalidated (and a registration of the PUT's own ended) before the PUT
  // returns (also on an error; a broken connection drops the window with
  // it): the value is exposed to the server, through this connection only,
  // for the one PUT (docs/SECURITY.md). The value must stay unchanged until
  // the PUT returns; a value changed meanwhile is refused
  // (InvalidArgument), never stored torn. Up to four rendezvous PUTs at a
  // time per connection, each with a window of its own (the others wait
  // their turn; the server READs up to two of a connection at once, the
  // next ones waiting there).
  // The default, 128 KiB, is where registering the value for the PUT stops
  // costing more than it saves. Measured on Soft-RoCE (docs/PERFORMANCE.md,
  // "Rendezvous PUTs on by default"): from 128 KiB a rendezvous PUT was
  // faster than fragments both one at a time and 16 in flight; at 64 KiB it
  // was faster 16 in flight but ~10 % slower one at a time (the per-PUT
  // registration), unless the value lies in registered memory; hence half
  // the threshold while others are in flight (64 KiB PUTs 16 in flight:
  // rendezvous PUTs moved more bytes a second than fragments in every run,
  // docs/PERFORMANCE.md, "Rendezvous PUTs from half the threshold while
  // others are in flight"). On a NIC where registering costs more against
  // the wire, measure (kvbench --rendezvous-bytes) and raise it.
  uint32_t rendezvous_bytes = 128 * 1024;
  // A rendezvous value of at most this many bytes that does not lie inside
  // memory registered with RegisterMemory is copied into a buffer of the
  // client's own instead of being registered for its PUT (0, the default:
  // never). Each of the connection's four windows has one buffer of this
  // many bytes, registered (pinned) once at connect; the window is bound
  // over the copy, made when the PUT is sent, only for that PUT (on rxe,
  // which checks READs against the region, the server could READ the rest
  // of that buffer: earlier values this client sent it; docs/SECURITY.md).
  // Off by default because on Soft-RoCE under emulation, where every byte
  // the CPU touches is slow, a 64 KiB copy was no cheaper than a
  // registration per PUT (docs/PERFORMANCE.md, "Copying rendezvous values");
  // on a NIC, where a registration costs tens of microseconds and a 64 KiB
  // copy a few, measure it (kvbench --rendezvous-copy-bytes).
  uint32_t rendezvous_copy_bytes = 0;
};

// Op::if_version / Put/Delete's `if_version`: no condition (the default), or
// the version the key must have for a conditional write to commit, 0 (=
// kIfAbsent) meaning "only if the key has no value" (absent or deleted).
inline constexpr uint64_t kAnyVersion = UINT64_MAX;
inline constexpr uint64_t kIfAbsent = 0;

// One operation of the asynchronous API. Owned by the caller, who keeps it
// (and the memory its views point to) alive and unchanged from Submit until
// Poll/Wait hands it back; the library allocates nothing per operation.
struct Op {
  enum class Type : uint8_t { kGet, kPut, kDelete };
  Type type = Type::kGet;
  std::string_view key;
  std::string_view value;        // kPut
  // kPut/kDelete: commit only if the key's current version is this, checked
  // by the server when it applies the write (kIfAbsent: only if the key has
  // no value; not for kDelete). kAnyVersion: unconditional.
  uint64_t if_version = kAnyVersion;
  // kGet: where the value goes. `result` if set (reuse the string to avoid
  // allocations); otherwise the caller's `buffer`: the value is put into
  // its first value_bytes bytes (copied there, or READ there without a copy
  // if the buffer lies in memory registered with Client::RegisterMemory),
  // and a value longer than the buffer fails with TooLarge (value_bytes
  // then says how long it is). The rest of the buffer is unspecified.
  std::string* result = nullptr;
  std::span<std::byte> buffer;
  void* user = nullptr;           // the caller's pointer, untouched
  // Set when the operation completes:
  Status status;                  // as the synchronous call of the same name would return
  uint64_t version = 0;           // kPut/kDelete: the write's version (see Client::last_version);
                                  // after VersionMismatch, the key's current one (0: no value)
  size_t value_bytes = 0;         // kGet, OK or TooLarge: the value's length
};

// Counters of what this client did since Connect (for tests and
// benchmarks). Kept across reconnects.
struct ClientStats {
  uint64_t gets = 0;
  uint64_t get_rounds = 0;   // window-READ rounds (1 per GET without races)
  uint64_t get_retries = 0;  // rounds repeated: torn/superseded entry, concurrent move
  uint64_t reads = 0;        // RDMA READs posted
  uint64_t cache_hits = 0;   // GETs answered at a cached location (its word and entry READ in one round trip)
  uint64_t cache_stale = 0;  // cached locations found superseded/recycled (fell back to the index)
  uint64_t direct_reads = 0; // entry READs that put the value straight into registered memory (RegisterMemory)
  uint64_t puts = 0;         // PUTs the server acknowledged
  uint64_t deletes = 0;      // DELETEs the server acknowledged (found or not)
  uint64_t messages = 0;     // request messages sent (fragments count)
  uint64_t rendezvous_puts = 0;  // PUTs sent as rendezvous PUTs (ClientOptions::rendezvous_bytes)
  uint64_t rendezvous_registrations = 0;  // values those registered (not a registration kept from an earlier PUT)
  uint64_t rendezvous_copies = 0;  // values those copied into the window's buffer instead (rendezvous_copy_bytes)
  // PUTs of at least rendezvous_bytes sent in fragments because registering
  // the value failed (the locked-memory limit, RLIMIT_MEMLOCK, most likely;
  // the first one is logged as a warning).
  uint64_t rendezvous_fallbacks = 0;
  // GETs by outcome, with what they cost (cached GETs included: turn the
  // location cache off to see the index's cost alone).
  uint64_t get_hits = 0;         // GETs that found their key
  uint64_t get_hit_reads = 0;    // RDMA READs those GETs posted
  uint64_t get_misses = 0;       // GETs that found no value (NotFound)
  uint64_t get_miss_rounds = 0;  // window-READ rounds those GETs took
};

// Errors common to the data calls below (Status codes, see status.h):
//   InvalidArgument  empty key
//   TooLarge         key over max_key_bytes() or value over max_value_bytes()
//   ConnectionLost   the connection broke (QP error, server gone or
//                    restarted, reconnect failed or still backing off); the
//                    operation may or may not have taken effect
//   Timeout          no answer within op_timeout_ms; the outcome of a
//                    PUT/DELETE is unknown, as for ConnectionLost
//   Protocol         the server sent something this client cannot parse (the
//                    connection is dropped and rebuilt by the next call)
// A write that failed with ConnectionLost or Timeout may have been applied:
// read the key to find out, or write again (a PUT is idempotent).
//
// Conditional writes (`if_version`, Op::if_version) are what the server
// enforces between clients: the write commits only if, at its commit point
// (under the key's window lock), the key's current version is `if_version`
// (kIfAbsent: the key has no value), else it fails with VersionMismatch and
// reports the current version (0: no value) in last_version() / Op::version.
// Versions come from writes (a write's reply, a VersionMismatch); a Get does
// not return one. Read-modify-write: learn the version first, then read,
// then write conditionally; a write in between makes the last step fail
// (examples/conditional_counter.cc). Locks, by contrast, are advisory: any
// client can CAS a lock word (docs/SECURITY.md).
//   uint64_t v = kIfAbsent;                    // guess: the key is new
//   std::string cur;                           // its value at version v
//   for (;;) {
//     Status s = c->Put(key, Next(cur), v);
//     if (!s.IsVersionMismatch()) break;       // OK, or another error
//     v = c->last_version();                   // the version now, then its value:
//     if (c->Get(key, &cur).IsNotFound()) cur.clear();
//   }
class Client {
 public:
  // Connects to a kvserver: resolves host, connects with rdma_cm, receives
  // the regions' addresses and keys and the server's limits. Errors:
  //   InvalidArgument  auth_token longer than 32 bytes
  //   Unavailable      no RDMA device (or not the named one), host not
  //                    resolvable or not routed over RDMA, nothing listening
  //   RemoteAccess     refused: missing or wrong auth token
  //   Protocol         refused, or the reply not understood: another protocol
  //                    version (the message gives both), malformed descriptor
  //   NoResource       refused: the server is out of memory for a connection
  //   Timeout          no answer within connect_timeout_ms
  //   IOError          a local verbs call failed (e.g. memory registration:
  //                    check `ulimit -l`)
  // The message names the server and, when it refused, its reason.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  // Disconnects. Operations still in flight are abandoned: their Op objects
  // are never completed (so they may be freed once this returns), and
  // writes among them may or may not be applied. Locks still held are not
  // released; they lapse when their lease ends.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Reads the value of `key` into *value, with one-sided RDMA READs (the
  // server's CPU is not involved). OK, NotFound, Timeout (also: no
  // consistent read within op_timeout_ms because writers kept rewriting the
  // key; what fails validation is read again, never returned), and the
  // common errors above. On OK, *value is the key's value at
  // some instant during the call (linearizable); otherwise *value is
  // unspecified.
  Status Get(std::string_view key, std::string* value);
  // The same into the caller's memory, without allocating: OK puts the
  // value in the first *value_bytes bytes of `buffer` (one copy, from the
  // READ's buffer; none if `buffer` lies in registered memory, below). TooLarge when the value is longer than `buffer`:
  // *value_bytes is then its length (call again with at least that much;
  // nothing else in `buffer` is specified). NotFound and the other errors
  // as Get above (*value_bytes is 0; `buffer` is unspecified: bytes the GET
  // READ that did not validate may be in it).
  Status Get(std::string_view key, std::span<std::byte> buffer, size_t* value_bytes);
  // --- Registered memory: GETs and rendezvous PUTs without a copy or a
  // registration each. Registers `memory` with this client's RDMA device
  // (its pages are pinned while registered; the process's `ulimit -l`
  // bounds how much). A GET into a buffer that lies inside registered memory
  // READs the value straight into the buffer instead of copying it out of
  // the client's own (entries of 4 KiB and more: below that a copy costs
  // less). A rendezvous PUT (ClientOptions::rendezvous_bytes) of a value
  // that lies inside it registers exactly the value's bytes once and keeps
  // that registration (up to 64 of them) for the next PUT of the same bytes.
  // No registration grants the server anything (no rkey): only a rendezvous
  // PUT's window reaches memory, READ-only, over exactly that PUT's value,
  // until the PUT returns. Registrations last until
  // UnregisterMemory or the Client's end, across reconnects.
  // Errors: InvalidArgument (empty, or overlaps memory registered already),
  // and the device's (IOError, NoResource).
  Status RegisterMemory(std::span<std::byte> memory);
  // Ends the registration made with exactly `memory`. NotFound if there is
  // none; InvalidArgument while an operation in flight has its buffer or its
  // rendezvous PUT's value there.
  Status UnregisterMemory(std::span<std::byte> memory);
  // Stores value under key (any bytes, 0..max_value_bytes()). OK: the store
  // has it, and every Get that starts afterwards, from any client, sees it
  // or a later write. Errors: ServerFull (index or log full in store mode;
  // nothing changed), Locked (another client holds the key's lock),
  // VersionMismatch (conditional, above: nothing changed), and the common
  // errors above. Without `if_version` the write is unprotected: it replaces
  // whatever another client wrote meanwhile, lock or no lock.
  Status Put(std::string_view key, std::string_view value, uint64_t if_version = kAnyVersion);
  // Deletes key. OK (it is gone); NotFound (it was not there: nothing
  // changed); ServerFull (no room for the tombstone); Locked;
  // VersionMismatch (a key without a value at `if_version` is a mismatch
  // with current version 0, not NotFound); InvalidArgument (if_version =
  // kIfAbsent); and the common errors above.
  Status Delete(std::string_view key, uint64_t if_version = kAnyVersion);
  // The server's counters (connections, puts, deletes, errors, items, ...)
  // as name/value pairs. The common errors above.
  Result<std::vector<std::pair<std::string, uint64_t>>> Stats();

  // --- Locks: leases taken with RDMA compare-and-swap on the server's lock
  // table, measured on the server's clock. While this client holds a key's
  // lock, its Put/Delete of that key carry the lock's token; the server
  // refuses a Put/Delete of a key locked by another client with Locked until
  // the lock is released or its lease ends. A holder that dies loses the lock
  // when the lease ends (leases have 16 ms resolution: rounded up). Keys may
  // share a lock word (the table is hashed): a lock refuses other clients'
  // writes of its own key only (and, 1 time in 255, of a key of its word with
  // the same key byte), but two locks of keys sharing a word exclude each
  // other, so locking one key can make another's Lock wait. A lease is not renewed in the
  // background: take the lock again (Lock/TryLock while holding it renews
  // it) before it ends. Locks do not survive a reconnect (the new connection
  // is another owner); the old ones lapse with their leases.
  // Locks are advisory for GET: readers never wait. They are advisory for
  // writers too, among clients that follow the protocol: the lock table is
  // RDMA-writable, so any client can CAS a lock word away, write, and put it
  // back, and the holder never learns. What the server enforces is a
  // conditional write (`if_version`): use it where another client's write
  // must not be lost (docs/SECURITY.md).
  //
  // Takes the lock for `lease` (1 ms .. 49 days), waiting with backoff while
  // another client holds it. OK; Timeout (still held by another after
  // op_timeout_ms); InvalidArgument (empty key, lease out of range);
  // TooLarge (key); Unavailable (the server offers no lock table);
  // ConnectionLost.
  Status Lock(std::string_view key, std::chrono::milliseconds lease);
  // One attempt: OK, or Locked when another client holds an unexpired lease;
  // otherwise the errors of Lock.
  Status TryLock(std::string_view key, std::chrono::milliseconds lease);
  // Releases it: OK; NotFound if this client does not hold it; Locked if the
  // lease had ended and another client took the lock over meanwhile (a Put
  // made after the lease ended may have been refused); ConnectionLost,
  // Timeout.
  Status Unlock(std::string_view key);

  // --- Asynchronous, pipelined API. The synchronous calls above are built on
  // it. Operations submitted together are posted with one doorbell; GETs
  // overlap their READs (within the QP's READ limit), PUT/DELETE overlap
  // within the server's credits. Completion order is not submission order;
  // two writes of the same key in flight at once may be applied in either
  // order. Synchronous calls may be mixed in: operations that complete
  // meanwhile wait for the next Poll/Wait.

  // Starts up to ops.size() operations; returns how many were taken (the
  // first n). Fewer when max_in_flight() would be exceeded: Poll, then
  // resubmit the rest. An invalid operation is taken and completes at the
  // next Poll with its error; so do all of them while the connection is
  // broken and its reconnect is backing off (ConnectionLost).
  size_t Submit(std::span<Op* const> ops);
  // Makes progress without blocking; stores up to done.size() completed
  // operations in `done` and returns how many (the rest wait for the next
  // call). Each operation is handed back exactly once.
  size_t Poll(std::span<Op*> done);
  // Like Poll, but waits until at least one operation completes or
  // timeout_ms passes (then it returns 0): it polls for its poll window
  // (ClientOptions::busy_poll_us, up to busy_poll_max_us), then sleeps until
  // the next completion.
  // Returns 0 at once when nothing is in flight or waiting.
  size_t Wait(std::span<Op*> done, int timeout_ms);
  // Operations submitted and not yet completed (completed ones waiting for
  // Poll do not count).
  size_t in_flight() const;
  // The most operations in flight at once (ClientOptions::max_in_flight,
  // clamped).
  size_t max_in_flight() const;

  // The version the server reported for the last successful synchronous
  // Put/Delete (asynchronous ones report theirs in Op::version): the server's
  // write sequence number, so versions of a key grow with each write of it
  // (they are not consecutive: other keys' writes take numbers in between).
  // After a Put/Delete that failed with VersionMismatch: the key's current
  // version (0: no value).
  uint64_t last_version() const;
  // This client's counters. The reference stays valid for the Client's life.
  const ClientStats& stats() const;
  // The server's limits, from the connect handshake.
  uint32_t max_value_bytes() const;
  uint32_t max_key_bytes() const;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class ClientFactory;
};

}  // namespace kvrdma
