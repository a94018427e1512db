#include "common/protocol/handshake.h"

#include <algorithm>
#include <bit>

#include "common/format/hash.h"
#include "common/format/window.h"
#include "common/protocol/messages.h"
#include "common/protocol/wire.h"

namespace kvrdma {
namespace {

// magic u32 | major u16 | minor u16 | length u16 (whole message)
constexpr size_t kPreamble = 10;

void WritePreamble(wire::Writer& w, uint16_t major, uint16_t minor) {
  w.U32(kWireMagic);
  w.U16(major);
  w.U16(minor);
  w.U16(0);  // length, patched at the end
}

// Reads the preamble; returns the message body reader limited to `length`.
Status ReadPreamble(std::span<const uint8_t> in, const char* what, uint16_t* major, uint16_t* minor,
                    std::span<const uint8_t>* body) {
  wire::Reader r(in);
  uint32_t magic = r.U32();
  *major = r.U16();
  *minor = r.U16();
  uint16_t len = r.U16();
  if (!r.ok() || magic != kWireMagic) {
    return Status::Protocol(std::string(what) + ": not a kvrdma message (bad magic)");
  }
  if (len < kPreamble || len > in.size()) {
    return Status::Protocol(std::string(what) + ": bad length " + std::to_string(len));
  }
  *body = in.subspan(kPreamble, len - kPreamble);
  return Status::OK();
}

Status CheckMajor(const char* what, uint16_t major, uint16_t minor) {
  if (major == kProtocolMajor) return Status::OK();
  return Status::Protocol(std::string(what) + " speaks protocol " + std::to_string(major) + "." +
                          std::to_string(minor) + ", this build speaks " + std::to_string(kProtocolMajor) +
                          "." + std::to_string(kProtocolMinor));
}

void WriteRegion(wire::Writer& w, const RemoteRegion& r) {
  w.U64(r.addr);
  w.U64(r.length);
  w.U32(r.rkey);
}

RemoteRegion ReadRegion(wire::Reader& r) {
  RemoteRegion g;
  g.addr = r.U64();
  g.length = r.U64();
  g.rkey = r.U32();
  return g;
}

}  // namespace

size_t EncodeConnectRequest(const ConnectRequestMsg& m, std::span<uint8_t> out) {
  wire::Writer w(out.first(std::min(out.size(), kMaxRequestData)));
  WritePreamble(w, m.major, m.minor);
  w.U8(static_cast<uint8_t>(m.put_path));
  uint8_t n = std::min<uint8_t>(m.auth_len, kMaxAuthToken);
  w.U8(n);
  w.Bytes(std::span<const uint8_t>(m.auth.data(), n));
  w.PatchU16(8, static_cast<uint16_t>(w.size()));
  return w.ok() ? w.size() : 0;
}

Result<ConnectRequestMsg> DecodeConnectRequest(std::span<const uint8_t> in) {
  ConnectRequestMsg m;
  std::span<const uint8_t> body;
  KVRDMA_RETURN_IF_ERROR(ReadPreamble(in, "connect request", &m.major, &m.minor, &body));
  KVRDMA_RETURN_IF_ERROR(CheckMajor("the client", m.major, m.minor));
  wire::Reader r(body);
  uint8_t path = r.U8();
  m.auth_len = r.U8();
  if (!r.ok()) return Status::Protocol("connect request: truncated");
  if (path > 1) return Status::Protocol("connect request: unknown put path " + std::to_string(path));
  m.put_path = static_cast<PutPath>(path);
  if (m.auth_len > kMaxAuthToken) return Status::Protocol("connect request: auth token too long");
  auto tok = r.Bytes(m.auth_len);
  if (!r.ok()) return Status::Protocol("connect request: truncated auth token");
  std::copy(tok.begin(), tok.end(), m.auth.begin());
  return m;
}

size_t EncodeServerDescriptor(const ServerDescriptor& d, std::span<uint8_t> out) {
  wire::Writer w(out.first(std::min(out.size(), kMaxAcceptData)));
  WritePreamble(w, d.major, d.minor);
  w.U32(d.conn_id);
  WriteRegion(w, d.index);
  w.U64(d.index_homes);
  w.U16(d.index_window);
  w.U64(d.hash_seed);
  WriteRegion(w, d.log);
  WriteRegion(w, d.locks);
  WriteRegion(w, d.ring);
  w.U32(d.message_bytes);
  w.U16(d.credits);
  w.U16(d.max_key_bytes);
  w.U32(d.max_value_bytes);
  w.U32(d.round_limit_us);
  w.U32(d.lock_words);
  w.PatchU16(8, static_cast<uint16_t>(w.size()));
  return w.ok() ? w.size() : 0;
}

Status CheckMessageLimits(uint32_t message_bytes, uint32_t max_key_bytes) {
  if (uint64_t{kRequestHeaderSize} + max_key_bytes + 1 > message_bytes) {
    return Status::InvalidArgument(
        "a message buffer of " + std::to_string(message_bytes) + " bytes cannot hold a request header (" +
        std::to_string(kRequestHeaderSize) + " bytes), the longest key (" + std::to_string(max_key_bytes) +
        " bytes) and one value byte: raise --message-bytes to at least " +
        std::to_string(kRequestHeaderSize + max_key_bytes + 1) + " or lower --max-key-bytes to at most " +
        std::to_string(message_bytes > kRequestHeaderSize + 1 ? message_bytes - kRequestHeaderSize - 1 : 0));
  }
  return Status::OK();
}

Result<ServerDescriptor> DecodeServerDescriptor(std::span<const uint8_t> in) {
  ServerDescriptor d;
  std::span<const uint8_t> body;
  KVRDMA_RETURN_IF_ERROR(ReadPreamble(in, "server descriptor", &d.major, &d.minor, &body));
  KVRDMA_RETURN_IF_ERROR(CheckMajor("the server", d.major, d.minor));
  wire::Reader r(body);
  d.conn_id = r.U32();
  d.index = ReadRegion(r);
  d.index_homes = r.U64();
  d.index_window = r.U16();
  d.hash_seed = r.U64();
  d.log = ReadRegion(r);
  d.locks = ReadRegion(r);
  d.ring = ReadRegion(r);
  d.message_bytes = r.U32();
  d.credits = r.U16();
  d.max_key_bytes = r.U16();
  d.max_value_bytes = r.U32();
  d.round_limit_us = r.U32();
  d.lock_words = r.U32();
  if (!r.ok()) return Status::Protocol("server descriptor: truncated");
  // Sanity: a client will index memory with these numbers.
  if (d.index_homes < 1 || d.index_homes > kMaxHomeCount || !std::has_single_bit(d.index_homes) ||
      d.index_window < 1 || d.index_window > kMaxWindowWords ||
      IndexWords(d.index_homes, d.index_window) * kWordBytes > d.index.length) {
    return Status::Protocol("server descriptor: bad index size or window");
  }
  if (d.credits == 0 || d.message_bytes < 64 || uint64_t{d.credits} * d.message_bytes > d.ring.length) {
    return Status::Protocol("server descriptor: bad request ring");
  }
  if (d.max_key_bytes < 1 || d.max_key_bytes > kMaxKeyBytes) {
    return Status::Protocol("server descriptor: max key bytes " + std::to_string(d.max_key_bytes) +
                            " outside 1.." + std::to_string(kMaxKeyBytes));
  }
  if (Status st = CheckMessageLimits(d.message_bytes, d.max_key_bytes); !st.ok()) {
    return Status::Protocol("server descriptor: limits that cannot work together: " + st.message());
  }
  if (d.lock_words != 0 && (uint64_t{d.lock_words} + 1) * 8 > d.locks.length) {
    return Status::Protocol("server descriptor: lock words outside the lock table");
  }
  return d;
}

size_t EncodeReject(const RejectMsg& m, std::span<uint8_t> out) {
  wire::Writer w(out.first(std::min(out.size(), kMaxRejectData)));
  WritePreamble(w, m.server_major, m.server_minor);
  w.U16(static_cast<uint16_t>(m.code));
  size_t room = kMaxRejectData - kPreamble - 4;
  std::string_view reason(m.reason);
  reason = reason.substr(0, room);
  w.U16(static_cast<uint16_t>(reason.size()));
  w.Bytes(reason);
  w.PatchU16(8, static_cast<uint16_t>(w.size()));
  return w.ok() ? w.size() : 0;
}

Result<RejectMsg> DecodeReject(std::span<const uint8_t> in) {
  RejectMsg m;
  std::span<const uint8_t> body;
  Status st = ReadPreamble(in, "reject", &m.server_major, &m.server_minor, &body);
  if (!st.ok()) return Status::NotFound("no kvrdma reject reason");
  wire::Reader r(body);
  uint16_t code = r.U16();
  uint16_t n = r.U16();
  auto s = r.Bytes(n);
  if (!r.ok() || code > static_cast<uint16_t>(Status::kLastCode)) {
    return Status::Protocol("reject: malformed");
  }
  m.code = static_cast<Status::Code>(code);
  m.reason.assign(reinterpret_cast<const char*>(s.data()), s.size());
  return m;
}

}  // namespace kvrdma
