#include "server/metrics/exposition.h"

#include <charconv>
#include <cmath>

namespace kvrdma::server::metrics {
namespace {

bool NameChar(char c, bool first) noexcept {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

void AppendEscaped(std::string& out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

}  // namespace

bool Exposition::ValidName(std::string_view name) noexcept {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0)) return false;
  }
  return true;
}

std::string Exposition::FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void Exposition::Family(std::string_view name, std::string_view type, std::string_view help) {
  if (!ValidName(name)) {
    out_ += "# invalid metric name omitted\n";
    return;
  }
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  AppendEscaped(out_, help, /*quote=*/false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

bool Exposition::Begin(std::string_view name, std::initializer_list<Label> labels) {
  if (!ValidName(name)) {
    out_ += "# invalid metric name omitted\n";
    return false;
  }
  for (const Label& l : labels) {
    if (!ValidName(l.first) || l.first.find(':') != std::string_view::npos) {
      out_ += "# invalid label name omitted\n";
      return false;
    }
  }
  out_ += name;
  if (labels.size() > 0) {
    out_ += '{';
    bool first = true;
    for (const Label& l : labels) {
      if (!first) out_ += ',';
      first = false;
      out_ += l.first;
      out_ += "=\"";
      AppendEscaped(out_, l.second, /*quote=*/true);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  return true;
}

void Exposition::Sample(std::string_view name, std::initializer_list<Label> labels, uint64_t value) {
  if (!Begin(name, labels)) return;
  out_ += std::to_string(value);
  out_ += '\n';
}

void Exposition::Sample(std::string_view name, std::initializer_list<Label> labels, double value) {
  if (!Begin(name, labels)) return;
  out_ += FormatDouble(value);
  out_ += '\n';
}

}  // namespace kvrdma::server::metrics
