// What travels in rdma_cm private data when a client connects.
//
//   client -> server  ConnectRequestMsg  (<= 56 bytes: IB CM REQ limit)
//   server -> client  ServerDescriptor   (<= 196 bytes: REP limit), on accept
//   server -> client  RejectMsg          (<= 148 bytes: REJ limit), on refusal
//
// Each starts with the magic "KVRD" and carries its own encoded length,
// because the receiver may see the private data zero-padded to the limit.
// A peer with another *major* version is refused; minor versions only add
// fields at the end, which older readers skip. Layouts: docs/DESIGN.md.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvrdma {

inline constexpr uint32_t kWireMagic = 0x4452564b;  // bytes "KVRD"
// 2: log format 2 (common/format/format_constants.h) and the server clock in
// its own read-only region.
// 3: log format 3: entry refs carry a size class, not a size hint.
// 4: log format 4: the index is words and a key's window of them (one READ),
//    each word with a move tag; the descriptor carries index_homes (u64) and
//    index_window (u16) instead of a bucket count.
// 5: a lock word names the key it covers (owner:20 | key:8 | expiry:36 in
//    16 ms units, common/protocol/locks.h): a lock no longer blocks writes of
//    the other keys of its word.
// 6: the lease clock is asked for with a CLOCK request (the server reads its
//    clock when it answers); the descriptor no longer names a clock region.
// 7: format 5 (common/format/format_constants.h): a 12-byte entry header
//    without a per-key version, entries 4-aligned, locations in 4-byte units;
//    a write's version is the server's write sequence number.
// 8: format 6: a key's tag nibble is 0..14, computed from hash bits 40..47
//    (15 is only the any-key tag); client and server must agree on it.
// 9: conditional writes: the request header is 40 bytes (u64 if_version at
//    32, flag IF_VERSION), and a reply may carry status VersionMismatch (16)
//    with the key's current version (common/protocol/messages.h).
// 10: several writes per message: whole PUT/DELETEs back to back with flag
//    MORE, answered by one reply of one record per request
//    (common/protocol/messages.h). A protocol 9 server would refuse MORE
//    request by request; the handshake refuses the pair at connect instead.
// 10.1: rendezvous PUT (flag RENDEZVOUS, common/protocol/messages.h): the
//    server READs a large value from a memory window the client bound on its
//    connection. A 10.0 server refused the flag ("unknown request flags"), so
//    a 10.1 client used it only with a server whose descriptor said minor >= 1.
// 11: a key's lock word and key byte come from its index hash (XXH3 of the
//    key with the server's seed, mixed: common/protocol/locks.h
//    LockPlaceOfHash), not from a second XXH3 with another seed: a PUT hashes
//    its key once. A protocol 10 client would CAS other words than the server
//    checks. Every 11.x server takes rendezvous PUTs.
inline constexpr uint16_t kProtocolMajor = 11;
inline constexpr uint16_t kProtocolMinor = 0;

inline constexpr size_t kMaxRequestData = 56;
inline constexpr size_t kMaxAcceptData = 196;
inline constexpr size_t kMaxRejectData = 148;
inline constexpr size_t kMaxAuthToken = 32;

// How a client sends PUT/DELETE.
enum class PutPath : uint8_t {
  kSend = 0,      // SEND: the request lands in a receive buffer of the SRQ
  kWriteImm = 1,  // RDMA WRITE_WITH_IMM into a message buffer of the connection's ring
};

struct ConnectRequestMsg {
  uint16_t major = kProtocolMajor;
  uint16_t minor = kProtocolMinor;
  PutPath put_path = PutPath::kSend;
  uint8_t auth_len = 0;  // bytes of auth token used
  std::array<uint8_t, kMaxAuthToken> auth{};
};

// One remotely accessible region.
struct RemoteRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
  bool operator==(const RemoteRegion&) const = default;
};

struct ServerDescriptor {
  uint16_t major = kProtocolMajor;
  uint16_t minor = kProtocolMinor;
  uint32_t conn_id = 0;           // the server's name for this connection (logs)
  RemoteRegion index;             // REMOTE_READ
  uint64_t index_homes = 0;       // homes of the index: a power of two (common/format/window.h)
  uint16_t index_window = 0;      // words per window: 1..128
  uint64_t hash_seed = 0;
  RemoteRegion log;               // REMOTE_READ
  RemoteRegion locks;             // REMOTE_ATOMIC + REMOTE_READ: lock words
  RemoteRegion ring;              // REMOTE_WRITE, this connection's only
  uint32_t message_bytes = 0;         // bytes per message buffer (ring and receive buffers)
  uint16_t credits = 0;           // requests in flight per connection
  uint16_t max_key_bytes = 0;
  uint32_t max_value_bytes = 0;
  uint32_t round_limit_us = 0;    // a GET round older than this restarts (reclamation)
  uint32_t lock_words = 0;        // lock words after word 0 (common/protocol/locks.h); 0: no locks
  bool operator==(const ServerDescriptor&) const = default;
};

struct RejectMsg {
  Status::Code code = Status::Code::kProtocol;
  uint16_t server_major = kProtocolMajor;
  uint16_t server_minor = kProtocolMinor;
  std::string reason;  // human readable; truncated to fit
};

// Whether the message limits can work together: a request header, the
// longest key and at least one value byte must fit in one message buffer
// (receive buffer / ring), because the key travels whole in the first fragment
// and every fragment must carry value bytes. InvalidArgument names the
// numbers. Checked by kvserver at startup and by the client on the
// descriptor it receives.
Status CheckMessageLimits(uint32_t message_bytes, uint32_t max_key_bytes);

// Encoders return the number of bytes written into out (which must be at
// least the kMax*Data size); decoders accept zero padding after the message.
size_t EncodeConnectRequest(const ConnectRequestMsg& m, std::span<uint8_t> out);
// Protocol (bad magic/length, or another major version: the message says
// which) or InvalidArgument.
Result<ConnectRequestMsg> DecodeConnectRequest(std::span<const uint8_t> in);

size_t EncodeServerDescriptor(const ServerDescriptor& d, std::span<uint8_t> out);
Result<ServerDescriptor> DecodeServerDescriptor(std::span<const uint8_t> in);

size_t EncodeReject(const RejectMsg& m, std::span<uint8_t> out);
// A reject that is not ours (e.g. empty: nothing listening) decodes to NotFound.
Result<RejectMsg> DecodeReject(std::span<const uint8_t> in);

}  // namespace kvrdma
