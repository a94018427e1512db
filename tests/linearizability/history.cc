#include "tests/linearizability/history.h"

#include <charconv>
#include <cstdio>
#include <istream>
#include <ostream>

namespace kvrdma::lin {

std::string_view OpTypeName(OpType t) {
  switch (t) {
    case OpType::kGet: return "GET";
    case OpType::kPut: return "PUT";
    case OpType::kDelete: return "DELETE";
  }
  return "?";
}

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "OK";
    case Outcome::kNotFound: return "NOTFOUND";
    case Outcome::kUnknown: return "UNKNOWN";
  }
  return "?";
}

void WriteHistory(std::ostream& out, const History& h) {
  for (const HistoryOp& op : h) {
    out << op.client << '\t' << op.key << '\t' << OpTypeName(op.type) << '\t' << OutcomeName(op.outcome) << '\t'
        << op.invoke_ns << '\t' << op.complete_ns << '\t' << op.value << '\n';
  }
}

namespace {

std::vector<std::string_view> SplitTabs(std::string_view line) {
  std::vector<std::string_view> f;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == '\t') {
      f.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  }
  return f;
}

template <typename T>
bool ParseNumber(std::string_view s, T* v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

bool ReadHistory(std::istream& in, History* h, std::string* error) {
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string_view> f = SplitTabs(line);
    auto fail = [&](const char* what) {
      *error = "line " + std::to_string(lineno) + ": " + what;
      return false;
    };
    if (f.size() != 7) return fail("expected 7 tab-separated fields");
    HistoryOp op;
    if (!ParseNumber(f[0], &op.client)) return fail("bad client");
    op.key = std::string(f[1]);
    if (f[2] == "GET") op.type = OpType::kGet;
    else if (f[2] == "PUT") op.type = OpType::kPut;
    else if (f[2] == "DELETE") op.type = OpType::kDelete;
    else return fail("bad operation type");
    if (f[3] == "OK") op.outcome = Outcome::kOk;
    else if (f[3] == "NOTFOUND") op.outcome = Outcome::kNotFound;
    else if (f[3] == "UNKNOWN") op.outcome = Outcome::kUnknown;
    else return fail("bad outcome");
    if (!ParseNumber(f[4], &op.invoke_ns) || !ParseNumber(f[5], &op.complete_ns)) return fail("bad time");
    op.value = std::string(f[6]);
    h->push_back(std::move(op));
  }
  return true;
}

std::string DescribeOp(const HistoryOp& op, uint64_t t0_ns) {
  auto us = [&](uint64_t ns) {
    char b[32];
    double v = (static_cast<double>(ns) - static_cast<double>(t0_ns)) / 1000.0;
    std::snprintf(b, sizeof b, "%.1f", v);
    return std::string(b);
  };
  std::string v;
  bool has_value = op.type == OpType::kPut || (op.type == OpType::kGet && op.outcome == Outcome::kOk);
  if (has_value) {
    size_t colon = op.value.find(':');
    if (colon == std::string::npos || op.value.size() <= 24) {
      v = " '" + op.value + "'";
    } else {
      v = " '" + op.value.substr(0, colon) + "'(" + std::to_string(op.value.size()) + "B)";
    }
  }
  std::string who = op.client == kPrefixClient ? std::string("prefix") : "c" + std::to_string(op.client);
  std::string s = who + " " + std::string(OpTypeName(op.type)) + " " + op.key + v +
                  " -> " + std::string(OutcomeName(op.outcome)) + "  [" + us(op.invoke_ns) + ", " +
                  (op.outcome == Outcome::kUnknown && op.type != OpType::kGet ? std::string("?") : us(op.complete_ns)) +
                  "] us";
  return s;
}

}  // namespace kvrdma::lin
