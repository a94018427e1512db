// Requests (client -> server worker) and replies (worker -> client).
//
// A request arrives either as a SEND (in a receive buffer of the SRQ) or as an
// RDMA WRITE_WITH_IMM into a message buffer of the connection's ring; the bytes are the same.
// A PUT whose value does not fit one message buffer is sent as fragments (FIRST ...
// LAST) on the same connection; a connection's messages are handled in order
// by one worker, which reassembles them. Every message, fragment or not, is
// answered with exactly one reply, which returns its credit.
//
// Several writes per message (protocol 10): a message may carry up to
// kMaxRequestsPerMessage whole PUT/DELETE requests back to back, each with
// its own header; every request but the last has flag MORE (the last ends
// the message, as a lone request does). Each is exactly what it would be
// alone plus MORE (conditions and lock tokens included); no query, no
// fragment. The
// worker validates every request of the message before it applies any (a
// malformed one anywhere refuses the whole message: nothing is applied and
// the reply is ONE record with the error, naming the request); otherwise
// it applies them in order and the reply carries one record per request, in
// order (see "Reply"). A message of one request is byte for byte protocol 9's.
//
// Request (little-endian):
//   0  u8  opcode        1 PUT, 2 DELETE, 3 STATS
//   1  u8  flags         bit0 FIRST, bit1 LAST (a whole request has both),
//                        bit2 IF_VERSION (PUT/DELETE: a conditional write),
//                        bit3 MORE (a whole PUT/DELETE: another request
//                        follows it in this message),
//                        bit4 RENDEZVOUS (protocol 10.1: a whole PUT whose
//                        value the server READs from the client, below)
//   2  u16 key_len
//   4  u32 value_len     total value length (PUT), else 0
//   8  u64 request_id    echoed in the reply
//   16 u64 lock_token    0 = none
//   24 u32 frag_offset   where this message's value bytes go in the value
//   28 u32 frag_len      value bytes in this message
//   32 u64 if_version    with IF_VERSION: commit only if the key's current
//                        version is this (0: only if the key has no value);
//                        0 without IF_VERSION. Every fragment of a PUT
//                        carries the FIRST's flag and value.
//   40 key               key_len bytes, in the FIRST message only
//      value fragment    frag_len bytes
//   A request is exactly 40 + key bytes + frag_len bytes; without MORE it
//   must end the message, with MORE the next request starts right after it.
//   Rendezvous PUT (flag RENDEZVOUS, protocol 10.1; with FIRST and LAST, never
//   MORE, IF_VERSION and a lock token allowed): value_len is the value's
//   length (1..max value), frag_offset 0, frag_len 24, and the 24 bytes after
//   the key describe where the value is instead of carrying it:
//     u64 addr      the value's first byte in the client's memory
//     u32 rkey      a memory window the client bound READ-only over exactly
//                   [addr, addr + value_len) on THIS connection's QP
//     u32 reserved  0
//     u64 checksum  RendezvousChecksum(key, value, hash seed) as the
//                   client computed it: the checksum the value's log entry
//                   will carry (EntryChecksum)
//   The server READs value_len bytes at addr with rkey on the connection the
//   request came on into memory of its own, and applies the PUT only if the
//   entry checksum the store computes over its copy in the log equals the
//   client's (else InvalidArgument: the value changed during the READ;
//   nothing is published).
//   The connection's next message is handled only after this request's
//   reply is queued, unless it is another rendezvous PUT, which the server
//   may take at once (its READ then runs while this one is applied; the
//   replies still come in request order). The client keeps the window
//   bound until the reply.
//   A conditional write is checked at the commit point, under the key's
//   window lock (server/store/commit_check.h): refused with VersionMismatch,
//   the reply's version then being the key's current one (0: no value; a
//   tombstone is no value). A DELETE only-if-absent is refused as malformed.
//
// Reply: one record per request of the message, back to back, the message
// exactly their total length. A record (little-endian):
//   0  u8  status        Status::Code
//   1  u8  flags         bit0 FRAGMENT_ACK (more fragments expected)
//   2  u16 reserved
//   4  u32 body_len
//   8  u64 request_id
//   16 u64 version       the key's version after a PUT/DELETE; with status
//                        VersionMismatch, its current version (0: no value)
//   24 body              error text, or the STATS table
//   A reply to a message of n > 1 requests has n records (or one, the whole
//   message's refusal, whose request_id is its first request's), each error
//   text cut to kMaxBatchErrorText bytes: n * (24 + kMaxBatchErrorText) <=
//   kMaxReplySize, so the records of every message always fit one reply.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/format/entry.h"
#include "common/protocol/wire.h"
#include "common/status.h"

namespace kvrdma {

// kStats and kClock are queries: no key, no value. kClock's reply body is the
// server clock leases are measured on (EncodeClock; server/server_clock.h).
enum class Opcode : uint8_t { kPut = 1, kDelete = 2, kStats = 3, kClock = 4 };
constexpr bool IsQuery(Opcode op) noexcept { return op == Opcode::kStats || op == Opcode::kClock; }
inline constexpr size_t kClockReplyBytes = 8;

inline constexpr uint8_t kFlagFirst = 1;
inline constexpr uint8_t kFlagLast = 2;
inline constexpr uint8_t kFlagIfVersion = 4;
inline constexpr uint8_t kFlagMore = 8;
inline constexpr uint8_t kFlagRendezvous = 16;
// The bytes after the key of a rendezvous PUT (frag_len of its header).
inline constexpr size_t kRendezvousFieldsBytes = 24;
inline constexpr uint8_t kReplyFragmentAck = 1;
inline constexpr size_t kRequestHeaderSize = 40;
inline constexpr size_t kReplyHeaderSize = 24;
inline constexpr size_t kMaxReplySize = 1024;  // client receive buffers for replies
// Several writes per message: at most this many requests in one message, and
// the error text of each record of a reply to more than one cut to this.
inline constexpr size_t kMaxRequestsPerMessage = 16;
inline constexpr size_t kMaxBatchErrorText = 40;
static_assert(kMaxRequestsPerMessage * (kReplyHeaderSize + kMaxBatchErrorText) <= kMaxReplySize,
              "the records of a full message's reply fit one reply buffer");
static_assert(kMaxRequestsPerMessage <= 255, "a count of requests fits a byte");

struct RequestHeader {
  Opcode opcode = Opcode::kPut;
  uint8_t flags = kFlagFirst | kFlagLast;
  uint16_t key_len = 0;
  uint32_t value_len = 0;
  uint64_t request_id = 0;
  uint64_t lock_token = 0;
  uint32_t frag_offset = 0;
  uint32_t frag_len = 0;
  uint64_t if_version = 0;  // with kFlagIfVersion: the version required (0: absent)
};

// Writes exactly kRequestHeaderSize bytes.
void EncodeRequestHeader(const RequestHeader& h, uint8_t* out) noexcept;

// Where a rendezvous PUT's value is (flag RENDEZVOUS).
struct RendezvousValue {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t checksum = 0;  // RendezvousChecksum of the key and value
};

struct ParsedRequest {
  RequestHeader header;
  std::span<const uint8_t> key;    // empty unless FIRST
  std::span<const uint8_t> value;  // this message's fragment (empty for a rendezvous PUT)
  RendezvousValue rendezvous;      // flag RENDEZVOUS only
};

// A rendezvous PUT's header (value_len, frag_len set) and descriptor bytes
// after the key: writes kRendezvousFieldsBytes at out.
void EncodeRendezvous(const RendezvousValue& v, uint8_t* out) noexcept;
// The checksum of a rendezvous PUT: the entry checksum of (key, value) with
// the server's hash seed (ServerDescriptor::hash_seed), which the store
// computes anyway when it writes the entry, so the server checks the value
// with no pass of its own. Inline: it needs kvrdma_format, which client and
// server link and kvrdma_common does not.
inline uint64_t RendezvousChecksum(std::span<const uint8_t> key, std::span<const uint8_t> value,
                                   uint64_t seed) noexcept {
  return EntryChecksumOf({reinterpret_cast<const char*>(key.data()), key.size()}, std::as_bytes(value), seed);
}

// Validates everything a worker relies on: a known opcode, lengths that add
// up to the message size, key and value within the limits, a fragment inside
// the value, a condition only on a PUT/DELETE (not a DELETE only-if-absent)
// and if_version 0 without one. InvalidArgument / TooLarge with a message fit for the client.
// A lone request (MORE refused).
Result<ParsedRequest> ParseRequest(std::span<const uint8_t> msg, uint32_t max_key,
                                   uint32_t max_value) noexcept;

// A whole message: its requests into out (kMaxRequestsPerMessage entries),
// returning how many. Every request is validated as ParseRequest does, and
// one with MORE must be a whole PUT/DELETE followed by another; a message of
// more than kMaxRequestsPerMessage requests is refused. The error names the
// request (its index) and, through RequestIdOfFirst, the reply goes to the
// first request's id.
Result<size_t> ParseMessage(std::span<const uint8_t> msg, uint32_t max_key, uint32_t max_value,
                            std::span<ParsedRequest> out) noexcept;

struct ReplyHeader {
  Status::Code status = Status::Code::kOk;
  uint8_t flags = 0;
  uint64_t request_id = 0;
  uint64_t version = 0;
};

// Header + body (truncated to fit kMaxReplySize and out); returns the
// length (0: out cannot hold a header). Inline: every write's reply is
// encoded here, most of them the header alone.
inline size_t EncodeReply(const ReplyHeader& h, std::span<const uint8_t> body, std::span<uint8_t> out) noexcept {
  const size_t room = std::min(out.size(), kMaxReplySize);
  if (room < kReplyHeaderSize) return 0;
  const size_t n = std::min(body.size(), room - kReplyHeaderSize);
  uint8_t* p = out.data();
  p[0] = static_cast<uint8_t>(h.status);
  p[1] = h.flags;
  wire::StoreLe<uint16_t>(p + 2, 0);
  wire::StoreLe<uint32_t>(p + 4, static_cast<uint32_t>(n));
  wire::StoreLe<uint64_t>(p + 8, h.request_id);
  wire::StoreLe<uint64_t>(p + 16, h.version);
  static_assert(kReplyHeaderSize == 24, "the offsets above are ParseReply's");
  if (n > 0) std::memcpy(p + kReplyHeaderSize, body.data(), n);
  return kReplyHeaderSize + n;
}

struct ParsedReply {
  ReplyHeader header;
  std::span<const uint8_t> body;
};
Result<ParsedReply> ParseReply(std::span<const uint8_t> msg) noexcept;

// A reply of several records (a message of several requests): every record
// into out, their count returned; Protocol unless the records fill the
// message exactly and number at most out.size().
Result<size_t> ParseReplies(std::span<const uint8_t> msg, std::span<ParsedReply> out) noexcept;

// STATS body: u16 count, then per entry u8 name_len, name, u64 value.
size_t EncodeStats(std::span<const std::pair<std::string_view, uint64_t>> stats, std::span<uint8_t> out) noexcept;
Result<std::vector<std::pair<std::string, uint64_t>>> DecodeStats(std::span<const uint8_t> body);

// CLOCK body: u64 server clock in ms (kClockReplyBytes). Decode: Protocol
// unless the body is exactly that.
size_t EncodeClock(uint64_t now_ms, std::span<uint8_t> out) noexcept;
Result<uint64_t> DecodeClock(std::span<const uint8_t> body);

}  // namespace kvrdma
