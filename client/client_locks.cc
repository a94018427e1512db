// Locks with leases: RDMA compare-and-swap on the server's lock table
// (common/protocol/locks.h), leases measured on the server clock (a CLOCK
// request: the server reads its clock when it answers).
#include <cstring>
#include <random>
#include <thread>

#include "client/client_impl.h"
#include "common/protocol/locks.h"

namespace kvrdma {

uint64_t Client::Impl::TokenFor(std::string_view key) const {
  auto it = held_.find(key);
  return it == held_.end() ? 0 : it->second;
}

Result<uint64_t> Client::Impl::CasLockWord(uint64_t index, uint64_t compare, uint64_t swap) {
  NoticeDisconnectWhileIdle(Clock::now());
  if (!broken_.ok() && in_flight_ == 0) KVRDMA_RETURN_IF_ERROR(Reconnect());
  if (!broken_.ok()) return broken_;
  SendWr w;
  w.wr_id = MakeWrId(WrKind::kLockTable, 0);
  w.opcode = WrOpcode::kCompareSwap;
  w.local = mr_->Slice(scratch_off_, 8);
  w.remote_addr = desc_.locks.addr + index * 8;
  w.rkey = desc_.locks.rkey;
  w.compare_add = compare;
  w.swap = swap;
  sync_done_ = false;
  if (Status st = conn_->PostSend({&w, 1}); !st.ok()) {
    FailAll(st.IsConnectionLost() ? st : Status::ConnectionLost(st.ToString()));
    return broken_;
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(opts_.op_timeout_ms);
  busy_until_ = Clock::now() + busy_poll_.window();
  while (!sync_done_) {
    Progress();
    if (!sync_done_) IdleWait(deadline);
    if (!broken_.ok()) return broken_;
    if (Clock::now() > deadline) {
      FailAll(Status::Timeout("no answer to a lock-table operation; the connection is abandoned"));
      return broken_;
    }
  }
  uint64_t v;
  std::memcpy(&v, Mem(scratch_off_), 8);
  return v;
}

// One attempt. *locked_by_other tells a lease held by someone else from errors.
Status Client::Impl::TryLockOnce(std::string_view key, uint64_t lease_ms, bool* locked_by_other) {
  *locked_by_other = false;
  const LockPlace place = LockPlaceOf(key, desc_.hash_seed, desc_.lock_words);
  const uint32_t me = desc_.conn_id;  // the server's owner id for this connection
  auto now = ServerClockMs();
  if (!now.ok()) return now.status();
  uint64_t mine = PackLock(me, place.key, *now + lease_ms);
  auto old = CasLockWord(place.index, 0, mine);
  if (!old.ok()) return old.status();
  uint64_t seen = *old;
  if (seen != 0) {
    // Held: take it over only if the lease has ended (or it is ours already:
    // a renewal, or another key of ours on this word), with a CAS on the
    // exact word seen.
    if (LockOwner(seen) != me && LockExpiry(seen) > *now) {
      *locked_by_other = true;
      const bool same_key = LockKey(seen) == place.key || LockKey(seen) == kLockAllKeys;
      return Status::Locked((same_key ? "held by another client for "
                                      : "another key of its lock word is held by another client for ") +
                            std::to_string(LockExpiry(seen) - *now) + " ms more");
    }
    // Our other keys on the word (they carry `seen` as their token) keep
    // their cover: if one may have another key byte, the word then covers
    // every key of it.
    if (LockKey(seen) != place.key) {
      for (const auto& [k, token] : held_) {
        if (token == seen && k != key) mine = PackLock(me, kLockAllKeys, *now + lease_ms);
      }
    }
    auto again = CasLockWord(place.index, seen, mine);
    if (!again.ok()) return again.status();
    if (*again != seen) {
      *locked_by_other = true;
      return Status::Locked("another client took the lock first");
    }
    for (auto& [k, token] : held_) {  // our other keys on this word carry the new token
      if (token == seen) token = mine;
    }
  }
  held_[std::string(key)] = mine;
  return Status::OK();
}

Status Client::Impl::Lock(std::string_view key, uint64_t lease_ms, bool wait) {
  if (Status st = CheckKey(key); !st.ok()) return st;
  if (lease_ms == 0 || lease_ms > (uint64_t{1} << 32)) return Status::InvalidArgument("lease must be 1 ms .. 49 days");
  if (desc_.lock_words == 0) return Status::Unavailable("the server offers no locks (kvserver --lock-words 0)");
  auto deadline = Clock::now() + std::chrono::milliseconds(opts_.op_timeout_ms);
  std::minstd_rand jitter(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(this)));
  auto backoff = std::chrono::microseconds(50);
  for (;;) {
    bool other = false;
    Status st = TryLockOnce(key, lease_ms, &other);
    if (st.ok() || !other || !wait) return st;
    if (Clock::now() + backoff > deadline) {
      return Status::Timeout("lock still held by another client after " + std::to_string(opts_.op_timeout_ms) +
                             " ms: " + st.message());
    }
    std::this_thread::sleep_for(backoff + std::chrono::microseconds(jitter() % (backoff.count() + 1)));
    backoff = std::min(backoff * 2, std::chrono::microseconds(10000));
  }
}

Status Client::Impl::Unlock(std::string_view key) {
  auto it = held_.find(key);  // nothing is held without a lock table (Lock answers Unavailable)
  if (it == held_.end()) return Status::NotFound("this client does not hold that lock");
  uint64_t token = it->second;
  held_.erase(it);
  for (const auto& [k, t] : held_) {
    if (t == token) return Status::OK();  // another held key shares the word: keep it
  }
  auto old = CasLockWord(LockPlaceOf(key, desc_.hash_seed, desc_.lock_words).index, token, 0);
  if (!old.ok()) return old.status();
  if (*old != token) return Status::Locked("the lease had ended and another client took the lock over");
  return Status::OK();
}

}  // namespace kvrdma
