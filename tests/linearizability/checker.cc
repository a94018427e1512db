#include "tests/linearizability/checker.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

namespace kvrdma::lin {

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kLinearizable: return "linearizable";
    case Verdict::kViolation: return "NOT linearizable";
    case Verdict::kGaveUp: return "gave up (state budget)";
  }
  return "?";
}

namespace {

constexpr int32_t kAbsent = -1;
constexpr int32_t kNeverWritten = -2;  // a GET read a value no PUT of the key wrote
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

// One operation of one key, in invocation order.
struct Prepared {
  OpType type;
  Outcome outcome;
  int32_t value;     // PUT: the id written; GET kOk: the id read
  uint64_t invoke;
  uint64_t complete;  // unused when !known
  bool known;         // false: a write with unknown outcome (no completion event)
  uint32_t src;       // index in the caller's span
};

// Applies op to the register `s`; false if the op's result contradicts s.
inline bool Step(const Prepared& op, int32_t s, int32_t* next) {
  switch (op.type) {
    case OpType::kPut:
      *next = op.value;
      return true;
    case OpType::kDelete:
      *next = kAbsent;
      if (op.outcome == Outcome::kOk) return s != kAbsent;
      if (op.outcome == Outcome::kNotFound) return s == kAbsent;
      return true;  // unknown: whichever it was, the key is absent afterwards
    case OpType::kGet:
      *next = s;
      return op.outcome == Outcome::kOk ? s == op.value : s == kAbsent;
  }
  return false;
}

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

// The memo: a set of variable-length records of 32-bit words, in one arena,
// with an open-addressing table of (hash, offset).
class Memo {
 public:
  explicit Memo(size_t max_bytes) : max_bytes_(max_bytes), table_(1024) {}
  // Inserts rec; 1 if new, 0 if present, -1 if over the memory budget.
  int Insert(const std::vector<uint32_t>& rec) {
    uint64_t h = 0x12345;
    for (uint32_t w : rec) h = Mix(h, w);
    h |= 1;  // 0 marks an empty table entry
    size_t mask = table_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Entry& e = table_[i];
      if (e.hash == 0) break;
      if (e.hash == h && arena_[e.offset] == rec.size() &&
          std::equal(rec.begin(), rec.end(), arena_.begin() + static_cast<ptrdiff_t>(e.offset) + 1)) {
        return 0;
      }
    }
    if (Bytes() > max_bytes_) return -1;
    uint64_t off = arena_.size();
    arena_.push_back(static_cast<uint32_t>(rec.size()));
    arena_.insert(arena_.end(), rec.begin(), rec.end());
    Place(h, off);
    if (++count_ * 2 > table_.size()) Grow();
    return 1;
  }
  uint64_t count() const { return count_; }

 private:
  struct Entry {
    uint64_t hash = 0;
    uint64_t offset = 0;
  };
  size_t Bytes() const { return arena_.capacity() * sizeof(uint32_t) + table_.size() * sizeof(Entry); }
  void Place(uint64_t h, uint64_t off) {
    size_t mask = table_.size() - 1;
    size_t i = h & mask;
    while (table_[i].hash != 0) i = (i + 1) & mask;
    table_[i] = Entry{h, off};
  }
  void Grow() {
    std::vector<Entry> old(table_.size() * 2);
    old.swap(table_);
    for (const Entry& e : old) {
      if (e.hash != 0) Place(e.hash, e.offset);
    }
  }
  size_t max_bytes_;
  std::vector<uint32_t> arena_;
  std::vector<Entry> table_;
  uint64_t count_ = 0;
};

class KeySearch {
 public:
  KeySearch(std::span<const HistoryOp> src, const CheckOptions& o) : src_(src), memo_(o.max_memo_bytes) {}

  // Every register state some complete linearization of the ops ends in
  // (exhaustive; empty if none). False if the memo budget ran out. Values
  // are returned as the index (in src) of a PUT that wrote them; absent as
  // kNone.
  bool EndStates(std::vector<uint32_t>* out) {
    Prepare();
    for (const Prepared& p : ops_) {
      if (p.type == OpType::kGet && p.outcome == Outcome::kOk && p.value == kNeverWritten) return true;
    }
    collect_ends_ = true;
    if (Search() == Verdict::kGaveUp) return false;
    std::sort(ends_.begin(), ends_.end());
    ends_.erase(std::unique(ends_.begin(), ends_.end()), ends_.end());
    for (int32_t e : ends_) {
      uint32_t src = kNone;
      for (const Prepared& p : ops_) {
        if (e != kAbsent && p.type == OpType::kPut && p.value == e) src = p.src;
      }
      out->push_back(src);
    }
    return true;
  }

  KeyResult Run() {
    KeyResult r;
    if (!src_.empty()) r.key = src_[0].key;
    Prepare();
    r.ops = ops_.size();
    for (const Prepared& p : ops_) r.unknown += p.known ? 0 : 1;
    for (const Prepared& p : ops_) {
      if (p.type == OpType::kGet && p.outcome == Outcome::kOk && p.value == kNeverWritten) {
        r.verdict = Verdict::kViolation;
        r.explanation = "a GET returned a value no PUT of this key wrote: " + DescribeOp(src_[p.src], t0_);
        return r;
      }
    }
    r.verdict = Search();
    r.states = memo_.count();
    r.backtracks = backtracks_;
    if (r.verdict == Verdict::kViolation) r.explanation = Explain();
    return r;
  }

 private:
  void Prepare() {
    std::unordered_map<std::string_view, int32_t> ids;
    for (const HistoryOp& op : src_) {
      if (op.type == OpType::kPut) ids.emplace(op.value, static_cast<int32_t>(ids.size()));
    }
    t0_ = std::numeric_limits<uint64_t>::max();
    for (uint32_t i = 0; i < src_.size(); ++i) {
      const HistoryOp& op = src_[i];
      t0_ = std::min(t0_, op.invoke_ns);
      if (op.type == OpType::kGet && op.outcome == Outcome::kUnknown) continue;  // constrains nothing
      Prepared p{};
      p.type = op.type;
      p.outcome = op.outcome;
      p.invoke = op.invoke_ns;
      p.complete = std::max(op.complete_ns, op.invoke_ns);
      p.known = op.outcome != Outcome::kUnknown;
      p.src = i;
      p.value = kAbsent;
      if (op.type == OpType::kPut || (op.type == OpType::kGet && op.outcome == Outcome::kOk)) {
        auto it = ids.find(op.value);
        p.value = it == ids.end() ? kNeverWritten : it->second;
      }
      ops_.push_back(p);
    }
    std::stable_sort(ops_.begin(), ops_.end(), [](const Prepared& a, const Prepared& b) { return a.invoke < b.invoke; });
    const uint32_t n = static_cast<uint32_t>(ops_.size());
    // hi_[i]: the last op invoked no later than op i completes; an op linearized
    // while op i is pending lies in (i, hi_[i]].
    hi_.assign(n, 0);
    for (uint32_t i = 0, j = 0; i < n; ++i) {
      if (!ops_[i].known) continue;
      j = std::max(j, i);
      while (j + 1 < n && ops_[j + 1].invoke <= ops_[i].complete) ++j;
      hi_[i] = j;
    }
    for (uint32_t i = 0; i < n; ++i) {
      if (!ops_[i].known) unknown_.push_back(i);
    }
    // The event list: node 0 is the head; calls and completions in time
    // order, a call before a completion at the same instant (concurrent).
    struct Ev {
      uint64_t t;
      int kind;  // 0 call, 1 completion
      uint32_t op;
    };
    std::vector<Ev> evs;
    for (uint32_t i = 0; i < n; ++i) {
      evs.push_back({ops_[i].invoke, 0, i});
      if (ops_[i].known) evs.push_back({ops_[i].complete, 1, i});
    }
    std::stable_sort(evs.begin(), evs.end(),
                     [](const Ev& a, const Ev& b) { return a.t != b.t ? a.t < b.t : a.kind < b.kind; });
    const uint32_t nodes = static_cast<uint32_t>(evs.size()) + 2;  // + head + tail
    next_.assign(nodes, 0);
    prev_.assign(nodes, 0);
    node_op_.assign(nodes, kNone);
    node_call_.assign(nodes, false);
    call_node_.assign(n, kNone);
    ret_node_.assign(n, kNone);
    for (uint32_t k = 0; k < evs.size(); ++k) {
      uint32_t node = k + 1;
      node_op_[node] = evs[k].op;
      node_call_[node] = evs[k].kind == 0;
      (evs[k].kind == 0 ? call_node_ : ret_node_)[evs[k].op] = node;
    }
    tail_ = nodes - 1;
    for (uint32_t k = 0; k + 1 < nodes; ++k) {
      next_[k] = k + 1;
      prev_[k + 1] = k;
    }
    next_[tail_] = tail_;
  }

  void Unlink(uint32_t x) {
    next_[prev_[x]] = next_[x];
    prev_[next_[x]] = prev_[x];
  }
  void Relink(uint32_t x) {
    next_[prev_[x]] = x;
    prev_[next_[x]] = x;
  }
  void Lift(uint32_t op) {
    Unlink(call_node_[op]);
    if (ret_node_[op] != kNone) Unlink(ret_node_[op]);
  }
  void Unlift(uint32_t op) {
    if (ret_node_[op] != kNone) Relink(ret_node_[op]);
    Relink(call_node_[op]);
  }

  // The first known op not linearized (n if none).
  uint32_t AdvanceFrom(uint32_t m) const {
    while (m < ops_.size() && (lin_[m] || !ops_[m].known)) ++m;
    return m;
  }

  // The memo record of (linearized set, state): state, m, the linearized ops
  // after m (all within (m, hi_[m]]), and the linearized unknown ops before m.
  void BuildRecord(int32_t state, uint32_t m) {
    rec_.clear();
    rec_.push_back(static_cast<uint32_t>(state));
    rec_.push_back(m);
    if (m < ops_.size()) {
      for (uint32_t j = m + 1; j <= hi_[m]; ++j) {
        if (lin_[j]) rec_.push_back(j);
      }
    }
    rec_.push_back(kNone);
    for (uint32_t u : unknown_) {
      if (u >= m) break;
      if (lin_[u]) rec_.push_back(u);
    }
  }

  Verdict Search() {
    const uint32_t n = static_cast<uint32_t>(ops_.size());
    lin_.assign(n, false);
    uint32_t known_left = 0;
    for (const Prepared& p : ops_) known_left += p.known ? 1 : 0;
    const uint32_t known_total = known_left;
    uint32_t m = AdvanceFrom(0);
    int32_t state = kAbsent;
    struct Frame {
      uint32_t op;
      int32_t state;
      uint32_t m;
    };
    std::vector<Frame> stack;
    uint32_t node = next_[0];
    while (true) {
      if (known_left == 0) {
        if (!collect_ends_) return Verdict::kLinearizable;
        ends_.push_back(state);  // a complete linearization: note its end state, look for others
      } else if (node_call_[node]) {
        uint32_t op = node_op_[node];
        int32_t ns;
        if (Step(ops_[op], state, &ns)) {
          lin_[op] = true;
          uint32_t nm = op == m ? AdvanceFrom(m) : m;
          BuildRecord(ns, nm);
          int ins = memo_.Insert(rec_);
          if (ins < 0) return Verdict::kGaveUp;
          if (ins > 0) {
            stack.push_back({op, state, m});
            state = ns;
            m = nm;
            Lift(op);
            if (ops_[op].known) --known_left;
            node = next_[0];
            continue;
          }
          lin_[op] = false;
        }
        node = next_[node];
        continue;
      } else {
        // A completion of an op not yet linearized: nothing can be
        // linearized past it from here. Note the deepest such point.
        uint32_t depth = known_total - known_left;
        if (depth > best_depth_ || best_op_ == kNone) {
          best_depth_ = depth;
          best_op_ = node_op_[node];
          best_state_ = state;
          best_candidates_.clear();
          for (uint32_t k = next_[0]; k != node && best_candidates_.size() < 12; k = next_[k]) {
            if (node_call_[k]) best_candidates_.push_back(node_op_[k]);
          }
        }
      }
      if (stack.empty()) return ends_.empty() ? Verdict::kViolation : Verdict::kLinearizable;
      ++backtracks_;
      Frame f = stack.back();
      stack.pop_back();
      lin_[f.op] = false;
      Unlift(f.op);
      state = f.state;
      m = f.m;
      if (ops_[f.op].known) ++known_left;
      node = next_[call_node_[f.op]];
    }
  }

  std::string StateName(int32_t s) const {
    if (s == kAbsent) return "absent";
    for (const Prepared& p : ops_) {
      if (p.type == OpType::kPut && p.value == s) {
        const std::string& v = src_[p.src].value;
        return "'" + v.substr(0, v.find(':')) + "'";
      }
    }
    return "?";
  }

  std::string Explain() const {
    std::string s = "at most " + std::to_string(best_depth_) + " operations linearize; then ";
    if (best_op_ == kNone) return s + "nothing";
    s += "no order of the pending operations lets\n    " + DescribeOp(src_[ops_[best_op_].src], t0_) +
         "\n  take effect before it completed (register " + StateName(best_state_) +
         " after the linearized prefix). Pending operations invoked before that completion:";
    for (uint32_t c : best_candidates_) s += "\n    " + DescribeOp(src_[ops_[c].src], t0_);
    return s;
  }

  std::span<const HistoryOp> src_;
  Memo memo_;
  uint64_t t0_ = 0;
  std::vector<Prepared> ops_;
  std::vector<uint32_t> hi_;
  std::vector<uint32_t> unknown_;
  std::vector<uint32_t> next_, prev_, node_op_, call_node_, ret_node_;
  std::vector<bool> node_call_;
  uint32_t tail_ = 0;
  std::vector<bool> lin_;
  std::vector<uint32_t> rec_;
  uint64_t backtracks_ = 0;
  uint32_t best_depth_ = 0;
  uint32_t best_op_ = kNone;
  int32_t best_state_ = kAbsent;
  std::vector<uint32_t> best_candidates_;
  bool collect_ends_ = false;
  std::vector<int32_t> ends_;
};

}  // namespace

KeyResult CheckKey(std::span<const HistoryOp> ops, const CheckOptions& options) {
  KeySearch s(ops, options);
  return s.Run();
}

CheckResult CheckHistory(std::span<const HistoryOp> history, const CheckOptions& options) {
  auto start = std::chrono::steady_clock::now();
  std::map<std::string, std::vector<HistoryOp>> by_key;
  for (const HistoryOp& op : history) by_key[op.key].push_back(op);
  std::vector<const std::vector<HistoryOp>*> parts;
  for (auto& [k, v] : by_key) parts.push_back(&v);
  CheckResult r;
  r.keys.resize(parts.size());
  unsigned threads = options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(parts.size()));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < parts.size(); i = next++) r.keys[i] = CheckKey(*parts[i], options);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const KeyResult& k : r.keys) {
    r.ops += k.ops;
    if (k.verdict == Verdict::kViolation) r.verdict = Verdict::kViolation;
    else if (k.verdict == Verdict::kGaveUp && r.verdict == Verdict::kLinearizable) r.verdict = Verdict::kGaveUp;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// ---------------------------------------------------------------- minimizing

namespace {

bool Violates(const History& h, const CheckOptions& o) { return CheckKey(h, o).verdict == Verdict::kViolation; }

// Truncation at T: ops completed by T stay; writes pending at T become
// unknown; GETs pending at T and ops invoked after T go. If the input is
// linearizable so is this (everything dropped is linearized after T, after
// every op kept with a known outcome), so it is a relaxation.
History Truncate(const History& h, uint64_t t) {
  History out;
  for (const HistoryOp& op : h) {
    if (op.invoke_ns > t) continue;
    bool known = op.outcome != Outcome::kUnknown;
    if (known && op.complete_ns <= t) {
      out.push_back(op);
    } else if (op.type != OpType::kGet) {
      HistoryOp u = op;
      u.outcome = Outcome::kUnknown;
      out.push_back(u);
    }
  }
  return out;
}

// May unknown write h[i] be dropped without making the history stricter?
// An unknown PUT can only justify GETs of its value and a DELETE that found
// the key present; an unknown DELETE only results that found the key absent.
bool DroppableUnknown(const History& h, size_t i) {
  const HistoryOp& w = h[i];
  for (const HistoryOp& op : h) {
    if (op.outcome == Outcome::kUnknown) continue;
    if (w.type == OpType::kPut) {
      if (op.type == OpType::kGet && op.outcome == Outcome::kOk && op.value == w.value) return false;
      if (op.type == OpType::kDelete && op.outcome == Outcome::kOk) return false;
    } else if (op.outcome == Outcome::kNotFound) {
      return false;
    }
  }
  return true;
}

// The latest quiescent instants (no operation pending, no unknown write
// before them), latest first: everything before one is linearized before
// everything after it, so it can be replaced by concurrent writes that can
// end in exactly the same register states. The result is equivalent.
History CutAtQuiescence(const History& in, const CheckOptions& o) {
  History h = in;
  std::stable_sort(h.begin(), h.end(), [](const HistoryOp& a, const HistoryOp& b) { return a.invoke_ns < b.invoke_ns; });
  std::vector<size_t> cuts;
  uint64_t max_complete = 0;
  bool unknown = false;
  for (size_t i = 1; i < h.size(); ++i) {
    const HistoryOp& prev = h[i - 1];
    if (prev.type != OpType::kGet && prev.outcome == Outcome::kUnknown) unknown = true;
    max_complete = std::max({max_complete, prev.complete_ns, prev.invoke_ns});
    if (!unknown && max_complete < h[i].invoke_ns) cuts.push_back(i);
  }
  int tries = 0;
  for (auto it = cuts.rbegin(); it != cuts.rend() && tries < 8; ++it, ++tries) {
    size_t cut = *it;
    History prefix(h.begin(), h.begin() + static_cast<ptrdiff_t>(cut));
    KeySearch s(prefix, o);
    std::vector<uint32_t> ends;
    if (!s.EndStates(&ends) || ends.empty()) continue;
    uint64_t at = 0;
    for (const HistoryOp& op : prefix) at = std::max({at, op.complete_ns, op.invoke_ns});
    History out;
    // Context: PUTs of the beginning whose values the rest reads, as writes
    // that end before the summary's (they cannot change its end states).
    if (at >= 2) {
      std::set<std::string_view> ended;
      for (uint32_t e : ends) {
        if (e != kNone) ended.insert(prefix[e].value);
      }
      std::set<std::string_view> read;
      for (size_t i = cut; i < h.size(); ++i) {
        if (h[i].type == OpType::kGet && h[i].outcome == Outcome::kOk && !ended.count(h[i].value)) read.insert(h[i].value);
      }
      for (const HistoryOp& op : prefix) {
        if (op.type == OpType::kPut && read.erase(op.value) != 0) {
          out.push_back(op);
          out.back().invoke_ns = at - 2;
          out.back().complete_ns = at - 1;
        }
      }
    }
    bool absent = false;
    for (uint32_t e : ends) {
      if (e == kNone) {
        absent = true;
        continue;
      }
      out.push_back({kPrefixClient, h[0].key, OpType::kPut, Outcome::kOk, prefix[e].value, at, at});
    }
    // A DELETE after the context writes, concurrent with the summary's PUTs,
    // adds exactly "absent" to the end states.
    if (absent && !out.empty()) out.push_back({kPrefixClient, h[0].key, OpType::kDelete, Outcome::kOk, "", at, at});
    out.insert(out.end(), h.begin() + static_cast<ptrdiff_t>(cut), h.end());
    if (Violates(out, o)) return out;
  }
  return h;
}

}  // namespace

History MinimizeViolation(std::span<const HistoryOp> ops, double budget_seconds, const CheckOptions& options) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_seconds);
  auto out_of_time = [&] { return std::chrono::steady_clock::now() > deadline; };
  History h(ops.begin(), ops.end());
  if (!Violates(h, options)) return h;
  // 1. The earliest truncation that still fails (binary search over the
  //    completion times).
  std::vector<uint64_t> times;
  for (const HistoryOp& op : h) {
    if (op.outcome != Outcome::kUnknown) times.push_back(op.complete_ns);
  }
  std::sort(times.begin(), times.end());
  size_t lo = 0, hi = times.size();  // Truncate(times[hi-1]) fails
  while (lo + 1 < hi && !out_of_time()) {
    size_t mid = (lo + hi) / 2;
    if (Violates(Truncate(h, times[mid - 1]), options)) hi = mid;
    else lo = mid;
  }
  if (hi > 0) {
    History t = Truncate(h, times[hi - 1]);
    if (Violates(t, options)) h = std::move(t);
  }
  // 2. Drop what lies before the last quiescent instant (equivalently).
  h = CutAtQuiescence(h, options);
  // 3. Greedy relaxations, in blocks first (halving), then one at a time:
  //    drop GETs, make writes unknown, drop unknown writes nothing needs.
  enum class Move { kDropGet, kMakeUnknown, kDropUnknown };
  auto eligible = [&](const History& x, size_t i, Move mv) {
    const HistoryOp& op = x[i];
    switch (mv) {
      case Move::kDropGet: return op.type == OpType::kGet;
      case Move::kMakeUnknown: return op.type != OpType::kGet && op.outcome != Outcome::kUnknown;
      case Move::kDropUnknown:
        return op.type != OpType::kGet && op.outcome == Outcome::kUnknown && DroppableUnknown(x, i);
    }
    return false;
  };
  bool changed = true;
  while (changed && !out_of_time()) {
    changed = false;
    for (Move mv : {Move::kDropGet, Move::kMakeUnknown, Move::kDropUnknown}) {
      for (size_t block = std::max<size_t>(1, h.size() / 2);; block /= 2) {
        // The indices eligible now, tried `block` at a time, latest first. A
        // success changes h only at and after idx[begin], so the earlier
        // indices stay valid. (Dropping unknown writes never changes the
        // known ops DroppableUnknown looks at, so a block of them is safe.)
        std::vector<size_t> idx;
        for (size_t i = 0; i < h.size(); ++i) {
          if (eligible(h, i, mv)) idx.push_back(i);
        }
        for (size_t end = idx.size(); end > 0 && !out_of_time();) {
          size_t begin = end > block ? end - block : 0;
          std::vector<bool> hit(h.size(), false);
          for (size_t k = begin; k < end; ++k) hit[idx[k]] = true;
          History c;
          for (size_t i = 0; i < h.size(); ++i) {
            if (!hit[i]) {
              c.push_back(h[i]);
            } else if (mv == Move::kMakeUnknown) {
              c.push_back(h[i]);
              c.back().outcome = Outcome::kUnknown;
            }
          }
          if (Violates(c, options)) {
            h = std::move(c);
            changed = true;
          }
          end = begin;
        }
        if (block == 1 || out_of_time()) break;
      }
    }
  }
  return h;
}

}  // namespace kvrdma::lin
