#include "server/assembly.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvrdma::server {

bool AssemblyBudget::Take(uint64_t n) noexcept {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (n > limit_ - used || used > limit_) return false;
  } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
  return true;
}

bool Assembly::Reserve(uint32_t more, AssemblyBudget& budget) noexcept {
  const uint32_t need = received_ + more;  // <= value_len_ (checked by the callers)
  if (need <= capacity_ && value_ != nullptr) return true;
  // Double (fewer copies), but never past the value, and fall back to just
  // what is needed when the budget cannot hold the doubling.
  uint32_t want = std::max(need, std::min(value_len_, capacity_ * 2));
  want = std::max(want, 1u);
  if (!budget.Take(want - capacity_)) {
    want = std::max(need, 1u);
    if (want <= capacity_ || !budget.Take(want - capacity_)) return false;
  }
  void* p = std::realloc(value_.get(), want);
  if (p == nullptr) {
    budget.Give(want - capacity_);
    return false;
  }
  (void)value_.release();  // realloc freed or kept it: p is the buffer now
  value_.reset(static_cast<uint8_t*>(p));
  capacity_ = want;
  return true;
}

Status Assembly::Begin(const RequestHeader& h, std::span<const uint8_t> key, std::span<const uint8_t> frag,
                       AssemblyBudget& budget, int64_t now_ms) {
  Release(budget);
  if (key.size() > sizeof(key_) || key.size() != h.key_len || frag.size() > h.value_len) {
    return Status::InvalidArgument("first fragment does not match its header");
  }
  value_len_ = h.value_len;
  received_ = 0;
  if (!Reserve(static_cast<uint32_t>(frag.size()), budget)) {
    Release(budget);
    return Status::NoResource("the server is reassembling too many large values (" +
                              std::to_string(budget.limit()) + " bytes at most): retry later");
  }
  request_id_ = h.request_id;
  token_ = h.lock_token;
  condition_flags_ = h.flags & kFlagIfVersion;
  if_version_ = h.if_version;
  key_len_ = h.key_len;
  last_fragment_ms_ = now_ms;
  std::memcpy(key_, key.data(), key.size());
  if (!frag.empty()) std::memcpy(value_.get(), frag.data(), frag.size());
  received_ = static_cast<uint32_t>(frag.size());
  return Status::OK();
}

Status Assembly::Extend(const RequestHeader& h, std::span<const uint8_t> frag, AssemblyBudget& budget,
                        int64_t now_ms) {
  const char* why = nullptr;
  if (!active()) {
    why = "value fragment without a first fragment";
  } else if (h.request_id != request_id_ || h.key_len != key_len_ || h.lock_token != token_) {
    why = "value fragment of another request (request id, key length or lock token differ from its first)";
  } else if ((h.flags & kFlagIfVersion) != condition_flags_ || h.if_version != if_version_) {
    why = "value fragment with another condition than its first";
  } else if (h.value_len != value_len_) {
    why = "value fragment claims another total length than its first";
  } else if (h.frag_offset != received_) {
    why = "value fragment out of order";
  } else if (frag.size() != h.frag_len || uint64_t{received_} + frag.size() > value_len_) {
    why = "value fragment past the value's end";
  }
  if (why != nullptr) {
    Release(budget);
    return Status::InvalidArgument(why);
  }
  if (!Reserve(static_cast<uint32_t>(frag.size()), budget)) {
    Release(budget);
    return Status::NoResource("the server is reassembling too many large values (" +
                              std::to_string(budget.limit()) + " bytes at most): retry later");
  }
  if (!frag.empty()) std::memcpy(value_.get() + received_, frag.data(), frag.size());
  received_ += static_cast<uint32_t>(frag.size());
  last_fragment_ms_ = now_ms;
  return Status::OK();
}

void Assembly::Release(AssemblyBudget& budget) noexcept {
  budget.Give(capacity_);
  value_.reset();
  capacity_ = 0;
  value_len_ = received_ = 0;
  key_len_ = 0;
}

}  // namespace kvrdma::server
