// The loopback transport: RDMA semantics in one process, for fast unit tests
// and fault injection.
//
// A LoopbackFabric is the "network": devices made from it can listen and
// connect to each other (by port; the host name is ignored). One "NIC" thread
// per fabric executes posted work requests in order per QP and delivers
// completions asynchronously, checking what real hardware checks: the rkey
// belongs to the peer's protection domain, the range lies inside the region,
// the region grants the access; local SGEs lie in registered memory. A failed
// WR completes with the same WcStatus verbs reports, puts the QP in the error
// state, and flushes what follows. SEND/WRITE_WITH_IMM wait (RNR) until the
// peer posts a receive. Private data is padded like IB CM pads it (56 bytes
// for a connect request, 196 for an accept, 148 for a reject).
//
// It is for tests; the verbs transport is the product. CI runs the protocol
// suite over both.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/transport/transport.h"

namespace kvrdma {

// Fault hooks. They run on the fabric's NIC thread without its lock held.
struct LoopbackFaults {
  // Called before each send WR executes; a non-success status fails the WR
  // with that status (the QP then enters the error state, as with verbs).
  std::function<WcStatus(const SendWr&)> fail_wr;
  // Torn-read injection: READs copy `read_chunk_bytes` at a time (0 = all at
  // once) and call between_read_chunks(wr, bytes_copied_so_far) in between, so
  // a test can change the source in the middle of a READ.
  size_t read_chunk_bytes = 0;
  std::function<void(const SendWr&, size_t)> between_read_chunks;
  // Copy the chunks of a READ from its last byte to its first (a responder
  // may read the bytes of one READ in any order: the specification says
  // nothing about it). between_read_chunks then gets the bytes copied so far.
  bool read_descending = false;
  // Added latency per executed WR.
  std::chrono::microseconds wr_delay{0};
  // Asked before a WR runs, with the fabric's lock held (it must not call
  // the fabric): true holds the WR at the head of its QP's send queue for
  // now, as a slow responder would (the QP's later WRs wait behind it, other
  // QPs go on); it is asked again a moment later.
  std::function<bool(const SendWr&)> hold_wr;
  // PostSend calls (counted fabric-wide from when the faults are set) whose
  // 1-based index equals this fail with IOError, posting nothing. 0 = never.
  uint64_t fail_post_number = 0;
  // RegisterMemory of at least this many bytes fails with NoResource, as
  // ibv_reg_mr does over the locked-memory limit (RLIMIT_MEMLOCK). 0 = never.
  size_t fail_registrations_of = 0;
};

struct LoopbackStats {
  uint64_t reads = 0;
  uint64_t writes = 0;  // WRITE and WRITE_WITH_IMM
  uint64_t sends = 0;
  uint64_t atomics = 0;
  uint64_t invalidations = 0;  // LOCAL_INVs that unbound a window
  uint64_t errors = 0;  // WRs completed with an error (not counting flushes)
  uint64_t flushed = 0;
  uint64_t qps = 0;  // QPs alive on the fabric now (both sides)
  // Windows bound by Connection::BindWindow and not invalidated (nor gone
  // with their QP, region or themselves) now.
  uint64_t runtime_windows_bound = 0;
  // READs posted and not yet executed now, the most on one QP's send queue.
  uint64_t reads_queued_on_one_qp = 0;
};

class LoopbackFabric {
 public:
  static std::shared_ptr<LoopbackFabric> Create();
  virtual ~LoopbackFabric() = default;

  // A new device (its own protection domain) on this fabric.
  virtual std::shared_ptr<Device> CreateDevice(const std::string& name) = 0;
  // ... without type-2 memory windows, as some providers are:
  // DeviceInfo::memory_windows false, CreateMemoryWindow fails, and a QP
  // that would bind windows (QpConfig::windows, mw_binding) is refused.
  virtual std::shared_ptr<Device> CreateDeviceWithoutWindows(const std::string& name) = 0;
  virtual void SetFaults(LoopbackFaults faults) = 0;
  virtual LoopbackStats stats() const = 0;
  // Puts the connection's QP into the error state now (as a fatal QP event
  // would): queued WRs are flushed and the peer sees the connection broken.
  virtual void InjectQpError(Connection& conn) = 0;

 protected:
  LoopbackFabric() = default;
};

}  // namespace kvrdma
