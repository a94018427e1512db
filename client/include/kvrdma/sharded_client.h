// kvrdma::ShardedClient: one client object over several kvservers. Each key
// lives on exactly one server, chosen by consistent hashing, so adding a
// server to the end of the list moves about 1/(n+1) of the keys (and only to
// the new server) while the others stay where they are.
//
//   kvrdma::ShardedClientOptions o;
//   o.servers = {"10.0.0.1", "10.0.0.2:7471", "10.0.0.3:7500"};
//   auto c = kvrdma::ShardedClient::Connect(o);
//   if (!c.ok()) { /* c.status().ToString() names the server that failed */ }
//   (*c)->Put("k", "v");                      // goes to server (*c)->ServerFor("k")
//
// Placement (stable across releases, processes and machines; docs/DESIGN.md,
// "Several servers"): h = XXH3-64(key, seed 0x6b7672646d61736b), and the key's
// server is JumpConsistentHash(h, n) (Lamport & Veach, 2014), an index into
// the server list. The list's ORDER is part of the placement: every client of
// a deployment must use the same list in the same order, and a server is
// added by appending it. Removing or reordering servers moves more keys.
// The servers do not know about each other: moving keys when the list
// changes is the application's job (ServerFor/PlaceKey say where they go).
//
// Thread safety: like Client, a ShardedClient is used by one thread at a time
// (it owns one Client, so one QP, per server). Use one per thread.
// Errors: every call returns a Status; nothing throws, aborts or exits on a
// remote failure. A call fails with what the key's server's Client returns
// (see client.h); the other servers are unaffected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvrdma/client.h"
#include "kvrdma/status.h"

namespace kvrdma {

struct ShardedClientOptions {
  // The servers, each "HOST[:PORT]" ("[v6addr]:PORT" for IPv6); PORT defaults
  // to client.port. The order is part of the placement (see above).
  std::vector<std::string> servers;
  // Used when `servers` is empty: a file with one "HOST[:PORT]" per line;
  // '#' starts a comment, blank lines and surrounding blanks are ignored.
  std::string config_file;
  // Options of every per-server connection; host and port come from the
  // server list.
  ClientOptions client;
};

class ShardedClient {
 public:
  // The seed of the key hash that places keys on servers (fixed: changing it
  // would move every key).
  static constexpr uint64_t kPlacementSeed = 0x6b7672646d61736bull;  // "kvrdmask"
  // Servers in one ShardedClient at most.
  static constexpr size_t kMaxServers = 1024;

  // Connects to every server of the list (in order). Errors: InvalidArgument
  // (empty or malformed list, more than kMaxServers, the same server twice),
  // IOError (config file unreadable), or the first failing server's
  // Client::Connect error (Unavailable, Protocol, Timeout) with the server's
  // address in the message. Either all servers are connected or none.
  static Result<std::unique_ptr<ShardedClient>> Connect(const ShardedClientOptions& options);
  ~ShardedClient();
  ShardedClient(const ShardedClient&) = delete;
  ShardedClient& operator=(const ShardedClient&) = delete;

  // Client::Get/Put/Delete on the key's server (ServerFor(key)): same
  // results, same errors (conditional writes too: after VersionMismatch,
  // server(ServerFor(key)).last_version() is the key's current version).
  Status Get(std::string_view key, std::string* value);
  Status Get(std::string_view key, std::span<std::byte> buffer, size_t* value_bytes);
  Status Put(std::string_view key, std::string_view value, uint64_t if_version = kAnyVersion);
  Status Delete(std::string_view key, uint64_t if_version = kAnyVersion);
  // Client::RegisterMemory / UnregisterMemory with every server's client
  // (a GET into it then needs no copy whichever server has the key). If one
  // fails, those that succeeded are undone.
  Status RegisterMemory(std::span<std::byte> memory);
  Status UnregisterMemory(std::span<std::byte> memory);
  // The counters of server `server` (an index into the list). InvalidArgument
  // if server >= server_count(); otherwise as Client::Stats.
  Result<std::vector<std::pair<std::string, uint64_t>>> Stats(size_t server);

  // The index (into the server list) of the server that holds `key`. Pure:
  // equals PlaceKey(key, server_count()).
  size_t ServerFor(std::string_view key) const;
  size_t server_count() const;
  // Server i as given ("HOST[:PORT]"). REQUIRES: i < server_count().
  const std::string& server_address(size_t i) const;
  // The Client of server i, for calls that name one server (locks, stats,
  // counters). It stays owned by this object. REQUIRES: i < server_count().
  Client& server(size_t i);

  // --- Asynchronous API: as Client's, each operation routed to its key's
  // server. Operations of one Submit going to one server are posted there
  // with one doorbell.
  //
  // Takes the first n operations and returns n: fewer than ops.size() when
  // the next operation's server has max_in_flight() operations in flight
  // (Poll, then resubmit the rest). The caller keeps each Op alive and
  // unchanged until Poll/Wait hands it back.
  size_t Submit(std::span<Op* const> ops);
  // Makes progress on every server without blocking; stores completed
  // operations in `done` and returns how many.
  size_t Poll(std::span<Op*> done);
  // Like Poll, but waits (polling) until at least one operation completes or
  // timeout_ms passes (then returns 0). Returns 0 at once when nothing is in
  // flight.
  size_t Wait(std::span<Op*> done, int timeout_ms);
  // Operations submitted and not yet completed, over all servers (as
  // Client::in_flight: completed ones waiting for Poll do not count).
  size_t in_flight() const;

  // --- Placement, without a connection.
  // XXH3-64 of the key with kPlacementSeed.
  static uint64_t PlacementHash(std::string_view key) noexcept;
  // Jump consistent hash: the bucket in [0, buckets) of a 64-bit hash; when
  // buckets grows by one, a hash either keeps its bucket or moves to the new
  // one (probability 1/buckets). REQUIRES: buckets >= 1.
  static uint32_t JumpHash(uint64_t hash, uint32_t buckets) noexcept;
  // The server index of `key` among `server_count` servers:
  // JumpHash(PlacementHash(key), server_count). REQUIRES: server_count >= 1.
  static size_t PlaceKey(std::string_view key, size_t server_count) noexcept;
  // Parses a server list in the config-file format (one "HOST[:PORT]" per
  // line, '#' comments). InvalidArgument, naming the line, for a malformed
  // entry; an empty list is not an error here.
  static Result<std::vector<std::string>> ParseServerList(std::string_view text);
  // Splits "HOST[:PORT]" ("[v6]:PORT"): InvalidArgument if malformed. *port
  // is left unchanged when the string has no port.
  static Status ParseServerAddress(std::string_view s, std::string* host, uint16_t* port);

  class Impl;

 private:
  explicit ShardedClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class ShardedClientFactory;
};

}  // namespace kvrdma
