// Requests (client -> server worker) and replies (worker -> client).
//
// A request arrives either as a SEND (in a receive buffer of the SRQ) or as an
// RDMA WRITE_WITH_IMM into a message buffer of the connection's ring; the bytes are the same.
// A PUT whose value does not fit one message buffer is sent as fragments (FIRST ...
// LAST) on the same connection; a connection's messages are handled in order
// by one worker, which reassembles them. Every message, fragment or not, is
// answered with exactly one reply, which returns its credit.
//
// Request (little-endian):
//   0  u8  opcode        1 PUT, 2 DELETE, 3 STATS
//   1  u8  flags         bit0 FIRST, bit1 LAST (a whole request has both),
//                        bit2 IF_VERSION (PUT/DELETE: a conditional write)
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
//   The message length must be exactly 40 + key bytes + frag_len.
//   A conditional write is checked at the commit point, under the key's
//   window lock (server/store/commit_check.h): refused with VersionMismatch,
//   the reply's version then being the key's current one (0: no value; a
//   tombstone is no value). A DELETE only-if-absent is refused as malformed.
//
// Reply (little-endian):
//   0  u8  status        Status::Code
//   1  u8  flags         bit0 FRAGMENT_ACK (more fragments expected)
//   2  u16 reserved
//   4  u32 body_len
//   8  u64 request_id
//   16 u64 version       the key's version after a PUT/DELETE; with status
//                        VersionMismatch, its current version (0: no value)
//   24 body              error text, or the STATS table
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
inline constexpr uint8_t kReplyFragmentAck = 1;
inline constexpr size_t kRequestHeaderSize = 40;
inline constexpr size_t kReplyHeaderSize = 24;
inline constexpr size_t kMaxReplySize = 1024;  // client receive buffers for replies

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

struct ParsedRequest {
  RequestHeader header;
  std::span<const uint8_t> key;    // empty unless FIRST
  std::span<const uint8_t> value;  // this message's fragment
};

// Validates everything a worker relies on: a known opcode, lengths that add
// up to the message size, key and value within the limits, a fragment inside
// the value, a condition only on a PUT/DELETE (not a DELETE only-if-absent)
// and if_version 0 without one. InvalidArgument / TooLarge with a message fit for the client.
Result<ParsedRequest> ParseRequest(std::span<const uint8_t> msg, uint32_t max_key,
                                   uint32_t max_value) noexcept;

struct ReplyHeader {
  Status::Code status = Status::Code::kOk;
  uint8_t flags = 0;
  uint64_t request_id = 0;
  uint64_t version = 0;
};

// Header + body (truncated to fit kMaxReplySize); returns the length.
size_t EncodeReply(const ReplyHeader& h, std::span<const uint8_t> body, std::span<uint8_t> out) noexcept;

struct ParsedReply {
  ReplyHeader header;
  std::span<const uint8_t> body;
};
Result<ParsedReply> ParseReply(std::span<const uint8_t> msg) noexcept;

// STATS body: u16 count, then per entry u8 name_len, name, u64 value.
size_t EncodeStats(std::span<const std::pair<std::string_view, uint64_t>> stats, std::span<uint8_t> out) noexcept;
Result<std::vector<std::pair<std::string, uint64_t>>> DecodeStats(std::span<const uint8_t> body);

// CLOCK body: u64 server clock in ms (kClockReplyBytes). Decode: Protocol
// unless the body is exactly that.
size_t EncodeClock(uint64_t now_ms, std::span<uint8_t> out) noexcept;
Result<uint64_t> DecodeClock(std::span<const uint8_t> body);

}  // namespace kvrdma
