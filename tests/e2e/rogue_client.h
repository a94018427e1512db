// A client built directly on the transport and the wire protocol, for tests
// that play an attacker: it sends any bytes, as SENDs or WRITE_WITH_IMM into
// any ring position, posts as many reply receives as it likes (none: it never
// takes its replies), and reads the replies it does take raw.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/protocol/handshake.h"
#include "common/protocol/messages.h"
#include "tests/common/transport_test_util.h"

namespace kvrdma::testing {

// A request message: header, the key when FIRST, then `frag` value bytes.
inline std::vector<uint8_t> RequestMsg(RequestHeader h, std::string_view key, std::string_view frag) {
  if (h.key_len == 0) h.key_len = static_cast<uint16_t>(key.size());
  h.frag_len = static_cast<uint32_t>(frag.size());
  std::vector<uint8_t> m(kRequestHeaderSize);
  EncodeRequestHeader(h, m.data());
  if (h.flags & kFlagFirst) m.insert(m.end(), key.begin(), key.end());
  m.insert(m.end(), frag.begin(), frag.end());
  return m;
}

inline std::vector<uint8_t> WholePut(std::string_view key, std::string_view value, uint64_t id = 5,
                                     uint64_t token = 0) {
  RequestHeader h;
  h.value_len = static_cast<uint32_t>(value.size());
  h.request_id = id;
  h.lock_token = token;
  return RequestMsg(h, key, value);
}

inline std::vector<uint8_t> StatsMsg(uint64_t id = 9) {
  RequestHeader h;
  h.opcode = Opcode::kStats;
  h.request_id = id;
  return RequestMsg(h, {}, {});
}

struct RawReply {
  Status::Code code = Status::Code::kTimeout;
  uint8_t flags = 0;
  uint64_t request_id = 0;
  std::string body;
};

class RogueClient {
 public:
  static constexpr size_t kMemBytes = 1 << 16;
  static constexpr size_t kReplyOff = 32768;  // reply receive buffers from here
  static constexpr uint32_t kMaxReceives = 32;

  // Connects; posts `receives` reply buffers (0: it never takes a reply).
  Status Connect(TransportEnv& env, uint16_t port, PutPath path = PutPath::kSend, uint32_t receives = 4) {
    ConnectRequestMsg msg;
    msg.put_path = path;
    return Connect(env, port, msg, receives);
  }
  // The same with any connect request (another protocol version...);
  // reject() holds the server's reject data when it refuses.
  Status Connect(TransportEnv& env, uint16_t port, const ConnectRequestMsg& msg, uint32_t receives = 4) {
    uint8_t req[kMaxRequestData];
    size_t n = EncodeConnectRequest(msg, req);
    ConnectOptions o;
    o.host = env.addr;
    o.port = port;
    auto c = env.client->Connect(o, QpConfig{}, {req, n}, &reject_);
    if (!c.ok()) return c.status();
    conn_ = std::move(c).value();
    auto d = DecodeServerDescriptor(conn_->peer_private_data());
    if (!d.ok()) return d.status();
    desc_ = *d;
    mem_.assign(kMemBytes, 0);
    auto mr = env.client->RegisterMemory(mem_.data(), mem_.size(), kAccessLocalWrite);
    if (!mr.ok()) return mr.status();
    mr_ = std::move(mr).value();
    for (uint32_t i = 0; i < receives; ++i) KVRDMA_RETURN_IF_ERROR(PostReceive(i));
    return Status::OK();
  }
  Status PostReceive(uint32_t i) {
    RecvWr r{i, mr_->Slice(kReplyOff + size_t{i % kMaxReceives} * kMaxReplySize, kMaxReplySize)};
    return conn_->PostRecv({&r, 1});
  }
  // Sends raw bytes as a SEND (waits for the send completion when `wait`).
  // `at`: where in the send area (below 16384) the message is staged; sends
  // posted without waiting need distinct places (the transport may still be
  // reading an earlier one).
  Status Send(std::span<const uint8_t> msg, bool wait = true, size_t at = 0) {
    if (at + msg.size() > 16384) return Status::InvalidArgument("RogueClient::Send: past the send area");
    std::memcpy(mem_.data() + at, msg.data(), msg.size());
    SendWr w;
    w.opcode = WrOpcode::kSend;
    w.local = mr_->Slice(static_cast<uint32_t>(at), static_cast<uint32_t>(msg.size()));
    return Post(w, wait);
  }
  // WRITE_WITH_IMM of msg into ring position `pos` with an immediate that
  // claims `imm_len` bytes (default: the message's length).
  Status WriteImm(std::span<const uint8_t> msg, uint32_t pos, uint32_t imm_len = ~0u, bool wait = true) {
    if (imm_len == ~0u) imm_len = static_cast<uint32_t>(msg.size());
    return WriteImmAt(msg, pos, imm_len, size_t{pos} * desc_.message_bytes, wait);
  }
  // WRITE_WITH_IMM of msg to any byte offset of the ring (inside it or not),
  // with an immediate that names position `pos` and claims `imm_len` bytes.
  Status WriteImmAt(std::span<const uint8_t> msg, uint32_t pos, uint32_t imm_len, uint64_t ring_offset,
                    bool wait = true) {
    std::memcpy(mem_.data(), msg.data(), msg.size());
    SendWr w;
    w.opcode = WrOpcode::kWriteImm;
    w.local = mr_->Slice(0, static_cast<uint32_t>(msg.size()));
    w.remote_addr = desc_.ring.addr + ring_offset;
    w.rkey = desc_.ring.rkey;
    w.imm = (pos << 24) | imm_len;
    return Post(w, wait);
  }
  // A plain RDMA WRITE into the ring (no receive consumed, nothing signalled).
  Status WriteRing(std::span<const uint8_t> bytes, uint64_t ring_offset) {
    std::memcpy(mem_.data() + 16384, bytes.data(), bytes.size());
    SendWr w;
    w.opcode = WrOpcode::kWrite;
    w.local = mr_->Slice(16384, static_cast<uint32_t>(bytes.size()));
    w.remote_addr = desc_.ring.addr + ring_offset;
    w.rkey = desc_.ring.rkey;
    return Post(w, true);
  }
  // An RDMA WRITE of 64 bytes to any region r; its send completion.
  Completion WriteTo(const RemoteRegion& r) {
    std::memset(mem_.data(), 0xee, 64);
    SendWr w;
    w.opcode = WrOpcode::kWrite;
    w.local = mr_->Slice(0, 64);
    w.remote_addr = r.addr;
    w.rkey = r.rkey;
    EXPECT_TRUE(conn_->PostSend({&w, 1}).ok());
    auto c = WaitForSend(*conn_, 1);
    return c.empty() ? Completion{0, WcStatus::kOther} : c[0];
  }
  // Posts n SENDs of msg back to back, each waiting only for its send
  // completion, never for a reply: more requests than credits when n > credits.
  Status Flood(std::span<const uint8_t> msg, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) KVRDMA_RETURN_IF_ERROR(Send(msg));
    return Status::OK();
  }
  // A WRITE (imm_data 0: none) or WRITE_WITH_IMM of `bytes` to any ring the
  // caller names (address + offset, with that ring's rkey): an attacker who
  // learned another connection's ring.
  Status WriteInto(const RemoteRegion& ring, uint64_t offset, std::span<const uint8_t> bytes, bool with_imm,
                   uint32_t imm = 0) {
    std::memcpy(mem_.data() + 16384, bytes.data(), bytes.size());
    SendWr w;
    w.opcode = with_imm ? WrOpcode::kWriteImm : WrOpcode::kWrite;
    w.local = mr_->Slice(16384, static_cast<uint32_t>(bytes.size()));
    w.remote_addr = ring.addr + offset;
    w.rkey = ring.rkey;
    w.imm = imm;
    return Post(w, true);
  }
  // An RDMA compare-and-swap on lock word `index` of the server's lock table
  // (what any connected client may do): the word's old value.
  Result<uint64_t> CasLockWord(uint32_t index, uint64_t compare, uint64_t swap) {
    SendWr w;
    w.opcode = WrOpcode::kCompareSwap;
    w.local = mr_->Slice(24576, 8);
    w.remote_addr = desc_.locks.addr + uint64_t{index} * 8;
    w.rkey = desc_.locks.rkey;
    w.compare_add = compare;
    w.swap = swap;
    KVRDMA_RETURN_IF_ERROR(Post(w, true));
    uint64_t old;
    std::memcpy(&old, mem_.data() + 24576, 8);
    return old;
  }
  // The next reply (the receive buffer is posted again).
  // Replies that arrived together wait in arrived_ for the next calls.
  RawReply Reply(int timeout_ms = 10000) {
    if (arrived_.empty()) {
      auto got = WaitFor(conn_->recv_cq(), 1, timeout_ms);
      arrived_.insert(arrived_.end(), got.begin(), got.end());
    }
    if (arrived_.empty()) return {};
    const Completion wc = arrived_.front();
    arrived_.pop_front();
    if (wc.status != WcStatus::kSuccess) return {Status::Code::kConnectionLost, 0, 0, "receive failed"};
    uint32_t i = static_cast<uint32_t>(wc.wr_id);
    auto* b = mem_.data() + kReplyOff + size_t{i % kMaxReceives} * kMaxReplySize;
    auto p = ParseReply({b, wc.byte_len});
    (void)PostReceive(i);
    if (!p.ok()) return {Status::Code::kProtocol, 0, 0, p.status().ToString()};
    return {p->header.status, p->header.flags, p->header.request_id, std::string(p->body.begin(), p->body.end())};
  }
  // Waits until the server has closed this connection (true) or timeout_ms.
  bool WaitClosed(int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      conn_->PollCmEvents();
      if (conn_->broken()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  const ServerDescriptor& desc() const { return desc_; }
  const std::vector<uint8_t>& reject() const { return reject_; }
  Connection& conn() { return *conn_; }

 private:
  Status Post(const SendWr& w, bool wait) {
    SendWr s = w;
    s.signaled = wait;
    KVRDMA_RETURN_IF_ERROR(conn_->PostSend({&s, 1}));
    if (!wait) return Status::OK();
    auto c = WaitForSend(*conn_, 1);
    if (c.empty()) return Status::Timeout("no send completion");
    return CompletionStatus(c[0]);
  }
  std::vector<uint8_t> reject_;
  std::deque<Completion> arrived_;  // reply receives polled and not yet returned by Reply
  std::unique_ptr<Connection> conn_;
  ServerDescriptor desc_;
  std::vector<uint8_t> mem_;
  std::unique_ptr<MemoryRegion> mr_;
};

}  // namespace kvrdma::testing
