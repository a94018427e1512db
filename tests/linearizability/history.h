// A recorded history of operations on a key-value store, as the
// linearizability checker sees it. Pure C++: no client, no transport.
//
// Each key is a register holding a value or "absent" (initially absent).
//   PUT v    -> register := v                           (outcome kOk)
//   DELETE   -> register was present; register := absent (kOk)
//               register was absent, unchanged          (kNotFound)
//   GET      -> returned the register's value           (kOk, value)
//               the register was absent                 (kNotFound)
// A write whose outcome is unknown (the call failed with ConnectionLost or
// Timeout) may have taken effect at any instant after its invocation, or
// never. A GET without an answer constrains nothing and is ignored.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace kvrdma::lin {

enum class OpType : uint8_t { kGet, kPut, kDelete };

enum class Outcome : uint8_t {
  kOk,        // GET read `value`; PUT/DELETE took effect
  kNotFound,  // GET/DELETE found the key absent
  kUnknown,   // no answer: a PUT/DELETE may or may not have taken effect
};

struct HistoryOp {
  uint32_t client = 0;
  std::string key;
  OpType type = OpType::kGet;
  Outcome outcome = Outcome::kOk;
  std::string value;         // PUT: the value written; GET kOk: the value read
  uint64_t invoke_ns = 0;    // steady_clock, before the call was issued
  uint64_t complete_ns = 0;  // steady_clock, after the answer arrived (ignored for kUnknown)
};

using History = std::vector<HistoryOp>;

// The client of the operations MinimizeViolation puts in place of a history's
// beginning (concurrent writes that can leave the register in exactly the
// states the beginning could).
constexpr uint32_t kPrefixClient = 1000000;

std::string_view OpTypeName(OpType t);
std::string_view OutcomeName(Outcome o);

// One line per operation:
//   client <TAB> key <TAB> GET|PUT|DELETE <TAB> OK|NOTFOUND|UNKNOWN <TAB> invoke_ns <TAB> complete_ns <TAB> value
// Keys and values must not contain tabs or newlines (the recorder's do not).
void WriteHistory(std::ostream& out, const History& h);
// Parses what WriteHistory wrote; false (and *error set) on a malformed line.
bool ReadHistory(std::istream& in, History* h, std::string* error);

// A readable line for reports: times relative to `t0_ns`, in microseconds;
// long values shortened to their tag (the part before ':') and length.
std::string DescribeOp(const HistoryOp& op, uint64_t t0_ns);

}  // namespace kvrdma::lin
