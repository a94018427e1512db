// Writer of the Prometheus text exposition format (version 0.0.4): one
// "# HELP" and one "# TYPE" line per metric family, then its samples.
//
//   Exposition e;
//   e.Family("kvrdma_puts_total", "counter", "PUTs applied");
//   e.Sample("kvrdma_puts_total", {}, 42);
//   std::string body = e.Take();
//
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]* (checked: a bad name is a bug,
// written as a comment line instead of a sample so a scrape still parses);
// label values are escaped (backslash, double quote, newline).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace kvrdma::server::metrics {

using Label = std::pair<std::string_view, std::string_view>;

class Exposition {
 public:
  // type: counter, gauge or histogram.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, std::initializer_list<Label> labels, uint64_t value);
  void Sample(std::string_view name, std::initializer_list<Label> labels, double value);
  std::string Take() { return std::move(out_); }

  static bool ValidName(std::string_view name) noexcept;
  // A double as Prometheus reads it: shortest round-trip form, +Inf, -Inf, NaN.
  static std::string FormatDouble(double v);

 private:
  bool Begin(std::string_view name, std::initializer_list<Label> labels);
  std::string out_;
};

}  // namespace kvrdma::server::metrics
