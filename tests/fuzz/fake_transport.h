// Deterministic in-process stand-ins for the transport objects a Worker
// touches, for the stateful fuzzer: a connection that records every reply it
// is asked to send and completes them only when told, a receive queue that
// counts reposts, memory regions over plain memory.
#pragma once

#include <cstring>
#include <deque>
#include <vector>

#include "common/transport/transport.h"

namespace kvrdma::fuzz {

class FakeRegion final : public MemoryRegion {
 public:
  FakeRegion(void* addr, size_t len) : MemoryRegion(addr, len, 1, 1, kAccessLocalWrite) {}
};

class FakeCq final : public CompletionQueue {
 public:
  int Poll(std::span<Completion>) override { return 0; }
  Status Wait(int) override { return Status::Timeout("fake"); }
  void Wake() override {}
};

class FakeSrq final : public SharedReceiveQueue {
 public:
  Status PostRecv(std::span<const RecvWr> wrs) override {
    for (const RecvWr& r : wrs) reposted.push_back(r.wr_id);
    return Status::OK();
  }
  uint32_t max_wr() const noexcept override { return 1024; }
  std::vector<uint64_t> reposted;
};

// A reply as the client would receive it.
struct SentReply {
  std::vector<uint8_t> bytes;
};

class FakeConnection final : public Connection {
 public:
  FakeConnection(uint32_t qp_num, uint32_t max_inline, uint32_t max_send_wr) : qp_num_(qp_num) {
    max_inline_ = max_inline;
    max_send_wr_ = max_send_wr;
  }
  Status PostSend(std::span<const SendWr> wrs) override {
    for (const SendWr& w : wrs) {
      if (broken_) return Status::ConnectionLost("fake: broken");
      if (posted_.size() + reads.size() >= max_send_wr_) {
        refused_full = true;
        return Status::NoResource("fake: send queue full");
      }
      if (w.opcode == WrOpcode::kRead) {  // a rendezvous READ: completed when the fuzzer says (PostedRead)
        reads.push_back({w.wr_id, w.signaled, w.local.addr, w.local.length, w.remote_addr, w.rkey});
        continue;
      }
      if (w.inline_data && w.local.length > max_inline_) return Status::InvalidArgument("fake: inline too long");
      const auto* p = reinterpret_cast<const uint8_t*>(w.local.addr);
      replies.push_back({std::vector<uint8_t>(p, p + w.local.length)});
      // A non-inline SEND reads its buffer when the NIC sends it: keep where
      // it is, to check the buffer is not reused before the completion.
      posted_.push_back({w.wr_id, w.signaled, w.inline_data ? nullptr : p, w.local.length, replies.back().bytes});
    }
    return Status::OK();
  }
  Status BindWindow(const MwBinding&, bool) override { return Status::InvalidArgument("fake: no windows"); }
  Status PostRecv(std::span<const RecvWr>) override { return Status::OK(); }
  uint32_t qp_num() const noexcept override { return qp_num_; }
  bool broken() const noexcept override { return broken_; }
  void MarkBroken() noexcept override { broken_ = true; }
  void Disconnect() noexcept override { broken_ = true; }

  // The client takes its replies up to the next signaled one: its completion
  // (if any) is returned for the worker. False if none is pending. `intact`
  // is false if a non-inline reply's buffer changed before it completed.
  bool CompleteNext(Completion* out, bool* intact) {
    while (!posted_.empty()) {
      Posted p = std::move(posted_.front());
      posted_.pop_front();
      if (p.buffer != nullptr && std::memcmp(p.buffer, p.sent.data(), p.len) != 0) *intact = false;
      if (!p.signaled) continue;
      *out = Completion{};
      out->wr_id = p.wr_id;
      out->opcode = WrOpcode::kSend;
      out->qp_num = qp_num_;
      out->status = broken_ ? WcStatus::kFlushed : WcStatus::kSuccess;
      return true;
    }
    return false;
  }
  // Non-inline replies posted and not completed.
  size_t large_outstanding() const {
    size_t n = 0;
    for (const Posted& p : posted_) n += p.buffer != nullptr;
    return n;
  }
  // Whether one more WR fits the send queue.
  bool has_room() const { return posted_.size() + reads.size() < max_send_wr_; }
  std::vector<SentReply> replies;
  bool refused_full = false;  // a post found the send queue full
  // READs posted and not completed, in order: the fuzzer completes them
  // (writing the local bytes itself) and hands their completions to the worker.
  struct PostedRead {
    uint64_t wr_id;
    bool signaled;
    uint64_t local_addr;
    uint32_t len;
    uint64_t remote_addr;
    uint32_t rkey;
  };
  std::deque<PostedRead> reads;

 private:
  struct Posted {
    uint64_t wr_id;
    bool signaled;
    const uint8_t* buffer;
    uint32_t len;
    std::vector<uint8_t> sent;
  };
  uint32_t qp_num_;
  bool broken_ = false;
  std::deque<Posted> posted_;
};

}  // namespace kvrdma::fuzz
