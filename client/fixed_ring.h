// A FIFO of trivially copyable values with a capacity fixed when it is sized:
// one allocation in Reserve, none per push or pop (std::deque allocates and
// frees a node every few hundred bytes pushed through it).
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace kvrdma {

template <typename T>
class FixedRing {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  // Drops the contents; holds up to `capacity` values from now on.
  void Reserve(size_t capacity) {
    size_t c = 1;
    while (c < capacity) c *= 2;
    buf_ = std::make_unique<T[]>(c);
    mask_ = c - 1;
    head_ = tail_ = 0;
  }
  size_t capacity() const { return buf_ ? mask_ + 1 : 0; }
  size_t size() const { return tail_ - head_; }
  bool empty() const { return head_ == tail_; }
  void clear() { head_ = tail_ = 0; }
  // REQUIRES size() < capacity(): callers bound what they push (op states, credits).
  void push_back(const T& v) {
    assert(size() < capacity());
    buf_[tail_++ & mask_] = v;
  }
  const T& front() const { return buf_[head_ & mask_]; }
  // REQUIRES i < size(): the i-th value from the front.
  const T& at(size_t i) const { return buf_[(head_ + i) & mask_]; }
  void pop_front() { ++head_; }
  // Removes every value equal to v, keeping the order of the rest. O(size):
  // for rare paths (an operation that timed out before it was posted).
  void erase(const T& v) {
    size_t out = head_;
    for (size_t i = head_; i != tail_; ++i) {
      if (!(buf_[i & mask_] == v)) buf_[out++ & mask_] = buf_[i & mask_];
    }
    tail_ = out;
  }

 private:
  std::unique_ptr<T[]> buf_;
  size_t mask_ = 0;
  size_t head_ = 0, tail_ = 0;  // free-running; index & mask_
};

}  // namespace kvrdma
