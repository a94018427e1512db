#include "server/store/index.h"

#include <bit>
#include <cstdlib>
#include <thread>

namespace kvrdma {

Result<std::unique_ptr<Index>> Index::Create(uint64_t home_count, uint64_t window_words,
                                             std::chrono::nanoseconds tag_ttl, HugePages huge_pages) {
  if (home_count < 1 || home_count > kMaxHomeCount || !std::has_single_bit(home_count)) {
    return Status::InvalidArgument("index_homes must be a power of two in [1, 2^40]");
  }
  if (window_words < 1 || window_words > kMaxWindowWords) {
    return Status::InvalidArgument("index_window must be in [1, 128]");
  }
  auto arena = Arena::Create(IndexWords(home_count, window_words) * kWordBytes, huge_pages, "index");
  if (!arena.ok()) return arena.status();
  return std::unique_ptr<Index>(new Index(std::move(arena).value(), home_count, window_words, tag_ttl));
}

Index::Index(Arena arena, uint64_t home_count, uint64_t window_words, std::chrono::nanoseconds tag_ttl)
    : arena_(std::move(arena)),
      words_base_(reinterpret_cast<uint64_t*>(arena_.data())),  // mmap: page-aligned, zero-filled
      home_count_(home_count),
      window_words_(window_words),
      words_(IndexWords(home_count, window_words)),
      tag_ttl_(tag_ttl),
      stripes_(new Stripe[kLockStripes]) {}

void Index::LockStripeSlow(size_t s) noexcept {
  std::atomic<uint32_t>& l = stripes_[s].locked;
  for (int spins = 1;; ++spins) {  // LockStripe's attempt was the first
    if (l.load(std::memory_order_relaxed) == 0 && l.exchange(1, std::memory_order_acquire) == 0) return;
    if (spins > 64) std::this_thread::yield();  // holders may be descheduled (more threads than cores)
  }
}

void Index::Hop(uint64_t from, uint64_t to, uint64_t ref, uint64_t hash) {
  // Order matters for lock-free readers (DESIGN.md, "Misses while entry refs
  // move"): the key is in `to` before it leaves `from`, and the word it
  // leaves carries its tag from that same store on, for tag_ttl.
  StoreRef(to, ref);
  const uint64_t nibble = KeyHashOf(hash, home_count_).tag_nibble();
  std::atomic_ref<uint64_t> a(words_base_[from]);
  a.store(WordWith(kEmptyRef, TagAfterMove(WordTag(a.load(std::memory_order_relaxed)), nibble)),
          std::memory_order_release);
  moves_.fetch_add(1, std::memory_order_relaxed);
  const auto due = Clock::now() + tag_ttl_;
  std::lock_guard<std::mutex> l(tags_mu_);
  tag_fifo_.push_back(TagExpiry{from, due});
  tag_due_[from] = due;
  tags_pending_.store(tag_due_.size(), std::memory_order_relaxed);
  const int64_t due_ns = due.time_since_epoch().count();
  if (due_ns < next_tag_due_ns_.load(std::memory_order_relaxed)) {
    next_tag_due_ns_.store(due_ns, std::memory_order_relaxed);
  }
}

Status Index::MakeRoom(const KeyHash& kh, const HashOfRef& hash_of) {
  const uint64_t home = kh.home;
  const uint64_t h = window_words_;
  // The nearest empty word at or after the home (optimistic: re-checked
  // under the locks of each hop).
  const uint64_t end = std::min<uint64_t>(words_, home + kHopscotchProbe);
  uint64_t free = end;
  for (uint64_t w = home; w < end; ++w) {
    if (LoadRef(w) == kEmptyRef) {
      free = w;
      break;
    }
  }
  if (free == end) return Status::ServerFull("index full: no empty word within reach of the home");
  while (free >= home + h) {
    // A ref in (free - h, free) whose own window reaches `free`: the
    // farthest from `free` first (the hop that brings it closest to home).
    bool hopped = false;
    for (uint64_t w = free - h + 1; w < free; ++w) {
      const uint64_t s = LoadRef(w);
      if (s == kEmptyRef) {
        if (w >= home) return Status::Retry("a word of the window freed up");  // the caller takes it
        continue;
      }
      const uint64_t hash = hash_of(s);
      const uint64_t owner = KeyHashOf(hash, home_count_).home;
      if (owner > w || free >= owner + h) continue;
      WindowGuard g = LockWindow(owner);
      // Under the lock of the owner's window both words are stable; the
      // entry the ref names is live (its ref points at it), so the key
      // read from it now is the ref's key.
      if (LoadRef(w) != s || LoadRef(free) != kEmptyRef || hash_of(s) != hash) {
        return Status::Retry("hop path changed");
      }
      Hop(w, free, s, hash);
      free = w;
      hopped = true;
      break;
    }
    if (!hopped) return Status::ServerFull("index full: no hop brings an empty word into the window");
  }
  return Status::OK();
}

void Index::ExpireTags(Clock::time_point now) {
  if (now.time_since_epoch().count() < next_tag_due_ns_.load(std::memory_order_relaxed)) return;
  TagExpiry due[32];
  size_t n = 0;
  {
    std::lock_guard<std::mutex> l(tags_mu_);
    while (!tag_fifo_.empty() && tag_fifo_.front().at <= now && n < std::size(due)) {
      due[n++] = tag_fifo_.front();
      tag_fifo_.pop_front();
    }
    next_tag_due_ns_.store(tag_fifo_.empty() ? INT64_MAX : tag_fifo_.front().at.time_since_epoch().count(),
                           std::memory_order_relaxed);
  }
  for (size_t i = 0; i < n; ++i) {
    WindowGuard g(this, due[i].word, due[i].word);
    std::lock_guard<std::mutex> l(tags_mu_);
    auto it = tag_due_.find(due[i].word);
    if (it == tag_due_.end() || it->second != due[i].at) continue;  // tagged again since: a later expiry
    tag_due_.erase(it);
    tags_pending_.store(tag_due_.size(), std::memory_order_relaxed);
    std::atomic_ref<uint64_t> a(words_base_[due[i].word]);
    a.store(WordRef(a.load(std::memory_order_relaxed)), std::memory_order_release);
  }
}

uint64_t Index::tags_pending() const { return tags_pending_.load(std::memory_order_relaxed); }

}  // namespace kvrdma
