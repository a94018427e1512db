// lincheck: checks a history file written by WriteHistory (for instance the
// one linearizability_test saves when it finds a violation).
//
//   lincheck HISTORY [--minimize]
//
// Exit status: 0 linearizable, 1 not linearizable, 2 usage/parse error,
// 3 the checker gave up.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "tests/linearizability/checker.h"

int main(int argc, char** argv) {
  using namespace kvrdma::lin;
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "--minimize") != 0)) {
    std::fprintf(stderr, "usage: lincheck HISTORY [--minimize]\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "lincheck: cannot open %s\n", argv[1]);
    return 2;
  }
  History h;
  std::string err;
  if (!ReadHistory(in, &h, &err)) {
    std::fprintf(stderr, "lincheck: %s: %s\n", argv[1], err.c_str());
    return 2;
  }
  CheckResult r = CheckHistory(h);
  std::printf("%zu operations, %zu keys: %s (%.3f s)\n", r.ops, r.keys.size(),
              std::string(VerdictName(r.verdict)).c_str(), r.seconds);
  for (const KeyResult& k : r.keys) {
    std::printf("  %s: %zu ops (%zu unknown), %s, %llu states, %llu backtracks\n", k.key.c_str(), k.ops, k.unknown,
                std::string(VerdictName(k.verdict)).c_str(), static_cast<unsigned long long>(k.states),
                static_cast<unsigned long long>(k.backtracks));
    if (k.verdict != Verdict::kViolation) continue;
    std::printf("  %s\n", k.explanation.c_str());
    if (argc == 3) {
      History mine;
      for (const HistoryOp& op : h) {
        if (op.key == k.key) mine.push_back(op);
      }
      History m = MinimizeViolation(mine, 30.0);
      uint64_t t0 = m.empty() ? 0 : m.front().invoke_ns;
      for (const HistoryOp& op : m) t0 = std::min(t0, op.invoke_ns);
      std::printf("  minimal failing history (%zu ops):\n", m.size());
      for (const HistoryOp& op : m) std::printf("    %s\n", DescribeOp(op, t0).c_str());
    }
  }
  return r.verdict == Verdict::kLinearizable ? 0 : (r.verdict == Verdict::kViolation ? 1 : 3);
}
