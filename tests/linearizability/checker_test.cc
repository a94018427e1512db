// The checker itself: it accepts linearizable histories (hand-written, and
// random ones generated from a sequential execution with overlapping
// intervals around the linearization points), rejects the classic
// violations, agrees with a brute-force search on thousands of small random
// histories, and is fast on a few thousand operations per key.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "tests/linearizability/checker.h"

namespace kvrdma::lin {
namespace {

// Builders: times in arbitrary units.
HistoryOp Put(uint32_t c, std::string v, uint64_t a, uint64_t b, std::string key = "k") {
  return {c, std::move(key), OpType::kPut, Outcome::kOk, std::move(v), a, b};
}
HistoryOp PutUnknown(uint32_t c, std::string v, uint64_t a, std::string key = "k") {
  return {c, std::move(key), OpType::kPut, Outcome::kUnknown, std::move(v), a, a};
}
HistoryOp Get(uint32_t c, std::string v, uint64_t a, uint64_t b, std::string key = "k") {
  return {c, std::move(key), OpType::kGet, Outcome::kOk, std::move(v), a, b};
}
HistoryOp GetNone(uint32_t c, uint64_t a, uint64_t b, std::string key = "k") {
  return {c, std::move(key), OpType::kGet, Outcome::kNotFound, "", a, b};
}
HistoryOp Del(uint32_t c, uint64_t a, uint64_t b, std::string key = "k") {
  return {c, std::move(key), OpType::kDelete, Outcome::kOk, "", a, b};
}
HistoryOp DelNone(uint32_t c, uint64_t a, uint64_t b, std::string key = "k") {
  return {c, std::move(key), OpType::kDelete, Outcome::kNotFound, "", a, b};
}
HistoryOp DelUnknown(uint32_t c, uint64_t a, std::string key = "k") {
  return {c, std::move(key), OpType::kDelete, Outcome::kUnknown, "", a, a};
}

size_t g_checked = 0;

Verdict Check(const History& h) {
  ++g_checked;
  return CheckHistory(h).verdict;
}

TEST(LinChecker, AcceptsHandWrittenLinearizableHistories) {
  size_t before = g_checked;
  // Sequential.
  EXPECT_EQ(Check({}), Verdict::kLinearizable);
  EXPECT_EQ(Check({GetNone(0, 0, 1), Put(0, "a", 2, 3), Get(0, "a", 4, 5), Del(0, 6, 7), GetNone(0, 8, 9),
                   DelNone(0, 10, 11)}),
            Verdict::kLinearizable);
  // A GET concurrent with a PUT may see the old or the new value.
  EXPECT_EQ(Check({Put(0, "a", 0, 1), Put(1, "b", 10, 20), Get(2, "a", 12, 14)}), Verdict::kLinearizable);
  EXPECT_EQ(Check({Put(0, "a", 0, 1), Put(1, "b", 10, 20), Get(2, "b", 12, 14)}), Verdict::kLinearizable);
  // ... and after seeing the new value, never the old one again; but two
  // concurrent writes may be ordered either way.
  EXPECT_EQ(Check({Put(0, "a", 0, 30), Put(1, "b", 0, 30), Get(2, "b", 5, 10), Get(2, "a", 12, 14)}),
            Verdict::kLinearizable);
  // A DELETE concurrent with a GET.
  EXPECT_EQ(Check({Put(0, "a", 0, 1), Del(1, 10, 20), Get(2, "a", 12, 14), GetNone(3, 15, 16)}),
            Verdict::kLinearizable);
  // Two DELETEs of a present key: exactly one finds it.
  EXPECT_EQ(Check({Put(0, "a", 0, 1), Del(1, 10, 20), DelNone(2, 10, 20)}), Verdict::kLinearizable);
  // Unknown-outcome writes: seen long after, or never.
  EXPECT_EQ(Check({Put(0, "a", 0, 1), PutUnknown(1, "b", 5), Get(2, "a", 100, 101), Get(2, "b", 200, 201)}),
            Verdict::kLinearizable);
  EXPECT_EQ(Check({Put(0, "a", 0, 1), PutUnknown(1, "b", 5), Get(2, "a", 100, 101)}), Verdict::kLinearizable);
  EXPECT_EQ(Check({Put(0, "a", 0, 1), DelUnknown(1, 5), Get(2, "a", 100, 101), GetNone(2, 200, 201)}),
            Verdict::kLinearizable);
  // GETs that got no answer constrain nothing.
  EXPECT_EQ(Check({Put(0, "a", 0, 1), {2, "k", OpType::kGet, Outcome::kUnknown, "", 2, 3}}), Verdict::kLinearizable);
  // Keys are independent.
  EXPECT_EQ(Check({Put(0, "a", 0, 1, "x"), Put(0, "a", 0, 1, "y"), Del(1, 2, 3, "x"), Get(2, "a", 4, 5, "y"),
                   GetNone(2, 4, 5, "x")}),
            Verdict::kLinearizable);
  std::printf("[lin] hand-written linearizable histories checked: %zu\n", g_checked - before);
}

TEST(LinChecker, RejectsHandWrittenViolations) {
  struct Case {
    const char* name;
    History h;
  };
  std::vector<Case> cases = {
      {"stale read after a completed write", {Put(0, "a", 0, 10), Put(1, "b", 20, 30), Get(2, "a", 40, 50)}},
      {"read of a never-written value", {Put(0, "a", 0, 10), Get(1, "zz", 20, 30)}},
      {"read of a value before its write began", {Get(1, "a", 0, 10), Put(0, "a", 20, 30)}},
      {"two readers see two writes in opposite orders",
       {Put(0, "a", 0, 100), Put(1, "b", 0, 100), Get(2, "a", 10, 20), Get(2, "b", 30, 40), Get(3, "b", 10, 20),
        Get(3, "a", 30, 40)}},
      {"read of a deleted value after the delete completed", {Put(0, "a", 0, 10), Del(1, 20, 30), Get(2, "a", 40, 50)}},
      {"NotFound after a completed PUT", {Put(0, "a", 0, 10), GetNone(1, 20, 30)}},
      {"DELETE found a never-written key", {Del(0, 0, 10)}},
      {"DELETE said NotFound while the key was present", {Put(0, "a", 0, 10), DelNone(1, 20, 30)}},
      {"two DELETEs both found the key", {Put(0, "a", 0, 1), Del(1, 10, 20), Del(2, 10, 20)}},
      {"value flips back: old, new, old", {Put(0, "a", 0, 100), Put(1, "b", 0, 100), Get(2, "a", 10, 20),
                                           Get(2, "b", 30, 40), Get(2, "a", 50, 60)}},
      {"an unknown write cannot take effect twice",
       {Put(0, "a", 0, 10), PutUnknown(1, "b", 5), Get(2, "a", 20, 30), Get(2, "b", 40, 50), Get(2, "a", 60, 70)}},
      {"an unknown write cannot take effect before its invocation", {Get(1, "a", 0, 10), PutUnknown(0, "a", 20)}},
      {"a violation on one key among linearizable ones",
       {Put(0, "a", 0, 1, "x"), Get(0, "a", 2, 3, "x"), Put(0, "a", 0, 1, "y"), Del(0, 2, 3, "y"),
        Get(1, "a", 4, 5, "y")}},
  };
  for (const Case& c : cases) {
    CheckResult r = CheckHistory(c.h);
    ++g_checked;
    EXPECT_EQ(r.verdict, Verdict::kViolation) << c.name;
    for (const KeyResult& k : r.keys) {
      if (k.verdict == Verdict::kViolation) std::printf("[lin] rejected (%s): %s\n", c.name, k.explanation.c_str());
    }
  }
  std::printf("[lin] hand-written violations rejected: %zu\n", cases.size());
}

// Clients run operations one after another; each takes effect at a random
// instant inside its interval, in a sequential execution that decides the
// results. Some writes lose their answer (unknown outcome) and take effect
// or not; some GETs lose their answer.
History RandomLinearizable(std::mt19937_64& rng, uint32_t clients, uint32_t ops, uint32_t keys, double unknown_p,
                           uint64_t width = 100) {
  struct Planned {
    HistoryOp op;
    uint64_t at;
    bool happens;
  };
  std::vector<Planned> plan;
  std::vector<uint64_t> cursor(clients, 0);
  std::uniform_int_distribution<uint64_t> gap(0, width / 4), len(1, width);
  std::uniform_real_distribution<double> coin(0, 1);
  for (uint32_t i = 0; i < ops; ++i) {
    uint32_t c = static_cast<uint32_t>(rng() % clients);
    Planned p{};
    p.op.client = c;
    p.op.key = "k" + std::to_string(rng() % keys);
    double t = coin(rng);
    p.op.type = t < 0.5 ? OpType::kGet : (t < 0.85 ? OpType::kPut : OpType::kDelete);
    if (p.op.type == OpType::kPut) p.op.value = "c" + std::to_string(c) + "-" + std::to_string(i);
    p.op.invoke_ns = cursor[c] + gap(rng);
    p.at = p.op.invoke_ns + len(rng);
    p.op.complete_ns = p.at + len(rng);
    cursor[c] = p.op.complete_ns + 1;
    p.happens = true;
    if (coin(rng) < unknown_p) {
      p.op.outcome = Outcome::kUnknown;
      if (p.op.type != OpType::kGet) p.happens = coin(rng) < 0.5;
    }
    // Distinct instants: time * clients + client.
    p.op.invoke_ns = p.op.invoke_ns * clients + c;
    p.op.complete_ns = p.op.complete_ns * clients + c;
    p.at = p.at * clients + c;
    plan.push_back(std::move(p));
  }
  std::sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) { return a.at < b.at; });
  std::map<std::string, std::string> reg;
  History h;
  for (Planned& p : plan) {
    bool present = reg.count(p.op.key) != 0;
    if (p.happens) {
      switch (p.op.type) {
        case OpType::kPut: reg[p.op.key] = p.op.value; break;
        case OpType::kDelete: reg.erase(p.op.key); break;
        case OpType::kGet: break;
      }
    }
    if (p.op.outcome != Outcome::kUnknown) {
      if (p.op.type == OpType::kGet) {
        p.op.outcome = present ? Outcome::kOk : Outcome::kNotFound;
        if (present) p.op.value = reg[p.op.key];
      } else if (p.op.type == OpType::kDelete) {
        p.op.outcome = present ? Outcome::kOk : Outcome::kNotFound;
      }
    }
    h.push_back(std::move(p.op));
  }
  std::shuffle(h.begin(), h.end(), rng);
  return h;
}

TEST(LinChecker, AcceptsRandomLinearizableHistories) {
  std::mt19937_64 rng(42);
  size_t n = 0, ops = 0;
  for (int i = 0; i < 3000; ++i) {
    uint32_t clients = 1 + static_cast<uint32_t>(rng() % 6);
    History h = RandomLinearizable(rng, clients, 1 + static_cast<uint32_t>(rng() % 60), 1 + rng() % 3,
                                   i % 3 == 0 ? 0.1 : 0.0);
    CheckResult r = CheckHistory(h, CheckOptions{.threads = 1});
    ASSERT_EQ(r.verdict, Verdict::kLinearizable) << "history " << i;
    ++n;
    ops += h.size();
  }
  g_checked += n;
  std::printf("[lin] random linearizable histories accepted: %zu (%zu operations)\n", n, ops);
}

// An independent, memo-free search over orders that respect real time.
bool BruteForce(const History& h) {
  std::vector<const HistoryOp*> ops;
  for (const HistoryOp& op : h) {
    if (!(op.type == OpType::kGet && op.outcome == Outcome::kUnknown)) ops.push_back(&op);
  }
  std::vector<bool> used(ops.size(), false);
  auto known = [](const HistoryOp* o) { return o->outcome != Outcome::kUnknown; };
  std::function<bool(const std::string*)> dfs = [&](const std::string* reg) -> bool {
    bool all_known = true;
    for (size_t i = 0; i < ops.size(); ++i) all_known = all_known && (used[i] || !known(ops[i]));
    if (all_known) return true;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (used[i]) continue;
      bool ready = true;  // every known op that completed before i began is placed
      for (size_t j = 0; j < ops.size(); ++j) {
        if (!used[j] && j != i && known(ops[j]) && ops[j]->complete_ns < ops[i]->invoke_ns) ready = false;
      }
      if (!ready) continue;
      const HistoryOp& o = *ops[i];
      const std::string* next = reg;
      bool ok = true;
      switch (o.type) {
        case OpType::kPut: next = &o.value; break;
        case OpType::kDelete:
          if (o.outcome == Outcome::kOk) ok = reg != nullptr;
          if (o.outcome == Outcome::kNotFound) ok = reg == nullptr;
          next = nullptr;
          break;
        case OpType::kGet:
          ok = o.outcome == Outcome::kOk ? (reg != nullptr && *reg == o.value) : reg == nullptr;
          break;
      }
      if (!ok) continue;
      used[i] = true;
      bool found = dfs(next);
      used[i] = false;
      if (found) return true;
    }
    return false;
  };
  return dfs(nullptr);
}

TEST(LinChecker, AgreesWithBruteForceOnSmallRandomHistories) {
  std::mt19937_64 rng(7);
  size_t yes = 0, no = 0;
  for (int i = 0; i < 20000; ++i) {
    History h;
    int n = 1 + static_cast<int>(rng() % 7);
    std::vector<std::string> written;
    for (int k = 0; k < n; ++k) {
      HistoryOp op;
      op.client = static_cast<uint32_t>(k);
      op.key = "k";
      op.invoke_ns = rng() % 20;
      op.complete_ns = op.invoke_ns + rng() % 10;
      int t = static_cast<int>(rng() % 3);
      op.type = t == 0 ? OpType::kGet : (t == 1 ? OpType::kPut : OpType::kDelete);
      op.outcome = rng() % 2 == 0 ? Outcome::kOk : Outcome::kNotFound;
      if (rng() % 8 == 0) op.outcome = Outcome::kUnknown;
      if (op.type == OpType::kPut) {
        if (op.outcome == Outcome::kNotFound) op.outcome = Outcome::kOk;
        op.value = "v" + std::to_string(k);
        written.push_back(op.value);
      }
      h.push_back(op);
    }
    for (HistoryOp& op : h) {
      if (op.type == OpType::kGet && op.outcome == Outcome::kOk) {
        op.value = written.empty() || rng() % 10 == 0 ? "nobody" : written[rng() % written.size()];
      }
    }
    bool expect = BruteForce(h);
    Verdict v = CheckKey(h).verdict;
    ASSERT_EQ(v, expect ? Verdict::kLinearizable : Verdict::kViolation) << "case " << i << ":\n" << [&] {
      std::ostringstream s;
      WriteHistory(s, h);
      return s.str();
    }();
    (expect ? yes : no)++;
  }
  g_checked += yes + no;
  std::printf("[lin] small random histories, same verdict as brute force: %zu (%zu linearizable, %zu not)\n",
              yes + no, yes, no);
  EXPECT_GT(no, 1000u);
  EXPECT_GT(yes, 1000u);
}

// Thousands of operations per key, 8 concurrent clients.
TEST(LinChecker, LargeHistoriesAreFast) {
  std::mt19937_64 rng(3);
  History h = RandomLinearizable(rng, 8, 24000, 6, 0.002);
  CheckResult r = CheckHistory(h);
  ++g_checked;
  ASSERT_EQ(r.verdict, Verdict::kLinearizable);
  uint64_t states = 0;
  for (const KeyResult& k : r.keys) states += k.states;
  std::printf("[lin] %zu operations on %zu keys (8 clients): %s in %.3f s, %llu states\n", r.ops, r.keys.size(),
              std::string(VerdictName(r.verdict)).c_str(), r.seconds, static_cast<unsigned long long>(states));
  EXPECT_LT(r.seconds, 10.0);
}

// A stale read planted in a long random history is found, and minimized to
// a handful of operations that still prove it.
TEST(LinChecker, FindsAndMinimizesAPlantedStaleRead) {
  std::mt19937_64 rng(11);
  History h = RandomLinearizable(rng, 6, 3000, 1, 0.0);
  std::sort(h.begin(), h.end(), [](const HistoryOp& a, const HistoryOp& b) { return a.invoke_ns < b.invoke_ns; });
  // After everything, a PUT completes and then a GET returns the value of an
  // earlier PUT.
  uint64_t end = 0;
  std::string old_value;
  for (const HistoryOp& op : h) {
    end = std::max(end, op.complete_ns);
    if (op.type == OpType::kPut && old_value.empty() && op.invoke_ns > 1000) old_value = op.value;
  }
  ASSERT_FALSE(old_value.empty());
  // Plant it in the middle: after a write that completed mid-history.
  h.push_back(Put(99, "fresh", end + 10, end + 20, "k0"));
  h.push_back(Get(98, old_value, end + 30, end + 40, "k0"));
  h.push_back(Put(97, "later", end + 50, end + 60, "k0"));
  CheckResult r = CheckHistory(h);
  g_checked += 1;
  ASSERT_EQ(r.verdict, Verdict::kViolation);
  std::printf("[lin] planted stale read found in %.3f s (%llu states): %s\n", r.seconds,
              static_cast<unsigned long long>(r.keys[0].states), r.keys[0].explanation.c_str());
  auto t0 = std::chrono::steady_clock::now();
  History m = MinimizeViolation(h);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(CheckKey(m).verdict, Verdict::kViolation);
  EXPECT_LE(m.size(), 4u);
  // It still shows the stale value's PUT and the GET that read it.
  auto has = [&](OpType t, const std::string& v) {
    return std::any_of(m.begin(), m.end(), [&](const HistoryOp& op) { return op.type == t && op.value == v; });
  };
  EXPECT_TRUE(has(OpType::kPut, old_value));
  EXPECT_TRUE(has(OpType::kGet, old_value));
  std::printf("[lin] minimized %zu -> %zu operations in %.2f s:\n", h.size(), m.size(), s);
  for (const HistoryOp& op : m) std::printf("    %s\n", DescribeOp(op, 0).c_str());
}

TEST(LinChecker, HistoryTextRoundTrips) {
  std::mt19937_64 rng(5);
  History h = RandomLinearizable(rng, 3, 200, 2, 0.1);
  std::stringstream s;
  WriteHistory(s, h);
  History back;
  std::string err;
  ASSERT_TRUE(ReadHistory(s, &back, &err)) << err;
  ASSERT_EQ(back.size(), h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(back[i].key, h[i].key);
    EXPECT_EQ(back[i].value, h[i].value);
    EXPECT_EQ(back[i].invoke_ns, h[i].invoke_ns);
    EXPECT_EQ(back[i].outcome, h[i].outcome);
  }
}

}  // namespace
}  // namespace kvrdma::lin
