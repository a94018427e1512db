// The hash index in RDMA-visible memory (common/format/window.h), the
// server-private locks that serialize changes to it, hopscotch displacement
// and the expiry of move tags.
//
// Thread safety: any number of server threads. A word is changed only with
// the lock of a window that contains it held: words are grouped in blocks of
// kMaxWindowWords, a window spans at most two blocks, and WindowGuard locks
// the lock stripes of both (in stripe order: no deadlock). Readers on other
// machines read the words concurrently without any lock, which is why every
// store into a word is a single 8-byte atomic store (release).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "common/format/hash.h"
#include "common/format/entry_ref.h"
#include "common/format/window.h"
#include "common/status.h"
#include "server/store/arena.h"
#include "server/store/store_config.h"

namespace kvrdma {

class Index {
 public:
  using Clock = std::chrono::steady_clock;

  // REQUIRES: home_count a power of two in [1, kMaxHomeCount]; window_words
  // in [1, kMaxWindowWords] (tests use odd sizes: home_count 1 and a window
  // of 14 is an index of exactly 14 words for every key). `tag_ttl`: how long
  // a move tag stays on a word (> the clients' round limit, see DESIGN.md).
  static Result<std::unique_ptr<Index>> Create(uint64_t home_count, uint64_t window_words,
                                               std::chrono::nanoseconds tag_ttl, HugePages huge_pages);

  class WindowGuard {
   public:
    // Inline (every write takes one): a window spans two blocks at all but
    // one home in kMaxWindowWords, so two stripes.
    WindowGuard(Index* idx, uint64_t first_word, uint64_t last_word) noexcept
        : idx_(idx), s0_(StripeOf(first_word)), s1_(StripeOf(last_word)), held_(true) {
      // A window is at most kMaxWindowWords words: at most two blocks.
      if (s0_ > s1_) std::swap(s0_, s1_);
      idx_->LockStripe(s0_);
      if (s1_ != s0_) idx_->LockStripe(s1_);
    }
    ~WindowGuard() { Unlock(); }
    WindowGuard(const WindowGuard&) = delete;
    WindowGuard& operator=(const WindowGuard&) = delete;
    void Unlock() noexcept {
      if (!held_) return;
      held_ = false;
      if (s1_ != s0_) idx_->UnlockStripe(s1_);
      idx_->UnlockStripe(s0_);
    }

   private:
    Index* idx_;
    size_t s0_, s1_;
    bool held_;
  };
  // Locks the window of `home`: every word of it may then be changed.
  WindowGuard LockWindow(uint64_t home) { return WindowGuard(this, home, home + window_words_ - 1); }

  uint64_t home_count() const noexcept { return home_count_; }
  uint64_t window_words() const noexcept { return window_words_; }
  uint64_t words() const noexcept { return words_; }
  std::byte* data() const noexcept { return arena_.data(); }
  size_t bytes() const noexcept { return arena_.size(); }
  Arena::Backing backing() const noexcept { return arena_.backing(); }

  // Word access. Load: relaxed (callers hold the lock, or scan optimistically
  // and re-check under the lock). StoreRef: REQUIRES the lock of a window
  // containing word `w` (or that no other thread uses the index: recovery,
  // Store::Recover); keeps the word's tag; release, so that everything
  // written before (the entry bytes) is visible before the ref is.
  uint64_t LoadWord(uint64_t w) const noexcept {
    return std::atomic_ref<uint64_t>(words_base_[w]).load(std::memory_order_relaxed);
  }
  uint64_t LoadRef(uint64_t w) const noexcept { return WordRef(LoadWord(w)); }
  void StoreRef(uint64_t w, uint64_t ref) noexcept {
    std::atomic_ref<uint64_t> a(words_base_[w]);
    a.store(WordWith(ref, WordTag(a.load(std::memory_order_relaxed))), std::memory_order_release);
  }

  // A hint: the first two lines of the window of `home` and its lock will
  // be used soon (recovery fetches them a few keys ahead while it installs
  // one: a key not yet in the index takes the first empty word, near its
  // home). Read prefetches: x86-64-v2 has no PREFETCHW, and GCC drops write
  // ones. Always inlined: GCC 12 finds a function that only prefetches
  // "const" and drops the calls (and the prefetches with them).
  [[gnu::always_inline]] void PrefetchHome(uint64_t home) const noexcept {
    __builtin_prefetch(words_base_ + home);
    __builtin_prefetch(words_base_ + home + 64 / kWordBytes);
    __builtin_prefetch(&stripes_[StripeOf(home)]);
  }

  // The hash of the key a ref names (the server reads the key from the log).
  using HashOfRef = std::function<uint64_t(uint64_t ref)>;
  // Frees a word in kh's window by hopscotch: finds the nearest empty word at
  // or after the home (at most kHopscotchProbe words), then hops refs whose
  // own windows reach it towards the home, each hop under the lock of the
  // moved key's window and re-validated there; each hop tags the word it
  // vacated (window.h). REQUIRES: no lock held by the caller. OK if it made
  // room (another thread may take it: the caller retries); ServerFull if no
  // hop sequence exists; Retry if the words changed under it.
  Status MakeRoom(const KeyHash& kh, const HashOfRef& hash_of);

  // Clears the tags whose tag_ttl has passed. REQUIRES: no lock held. Cheap
  // when none is due (one relaxed load).
  void ExpireTags(Clock::time_point now);
  // Whether any tag is queued (ExpireTags' own first check, a hint as
  // there): a caller skips its clock read for ExpireTags when none is.
  bool TagsQueued() const noexcept { return next_tag_due_ns_.load(std::memory_order_relaxed) != INT64_MAX; }

  uint64_t moves() const noexcept { return moves_.load(std::memory_order_relaxed); }
  uint64_t tags_pending() const;  // lock-free (a relaxed load)

 private:
  struct alignas(64) Stripe {
    std::atomic<uint32_t> locked{0};
  };
  struct TagExpiry {
    uint64_t word;
    Clock::time_point at;
  };
  Index(Arena arena, uint64_t home_count, uint64_t window_words, std::chrono::nanoseconds tag_ttl);
  static size_t StripeOf(uint64_t word) noexcept { return (word / kMaxWindowWords) & (kLockStripes - 1); }
  // The uncontended case inline; LockStripeSlow spins (and yields).
  void LockStripe(size_t s) noexcept {
    std::atomic<uint32_t>& l = stripes_[s].locked;
    if (l.load(std::memory_order_relaxed) == 0 && l.exchange(1, std::memory_order_acquire) == 0) return;
    LockStripeSlow(s);
  }
  void LockStripeSlow(size_t s) noexcept;
  void UnlockStripe(size_t s) noexcept { stripes_[s].locked.store(0, std::memory_order_release); }
  // Moves the ref of word `from` (whose key has hash `hash`) into the empty
  // word `to` of the same window and tags `from`. REQUIRES the window's lock.
  void Hop(uint64_t from, uint64_t to, uint64_t ref, uint64_t hash);

  Arena arena_;
  uint64_t* words_base_;
  const uint64_t home_count_;
  const uint64_t window_words_;
  const uint64_t words_;
  const std::chrono::nanoseconds tag_ttl_;
  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<uint64_t> moves_{0};

  // Tags waiting to expire, oldest first. Lock order: a window's stripes,
  // then tags_mu_ (a hop holds the window lock when it queues a tag).
  mutable std::mutex tags_mu_;
  std::deque<TagExpiry> tag_fifo_;                          // guarded by tags_mu_
  std::unordered_map<uint64_t, Clock::time_point> tag_due_; // word -> latest expiry, guarded by tags_mu_
  std::atomic<int64_t> next_tag_due_ns_{INT64_MAX};        // earliest expiry queued (a hint)
  // tag_due_.size(), stored under tags_mu_ and read without it (STATS and the
  // metrics thread never take a lock a worker's hop takes).
  std::atomic<uint64_t> tags_pending_{0};
};

}  // namespace kvrdma
