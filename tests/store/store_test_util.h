// Helpers shared by the store tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/store/store.h"
#include "tests/store/native_reader.h"

namespace kvrdma::test {

inline StoreConfig SmallConfig() {
  StoreConfig c;
  c.index_homes = 8192;
  c.log_bytes = 4 << 20;
  c.segment_bytes = 64 << 10;
  c.workers = 2;
  c.huge_pages = HugePages::kOff;
  c.grace_period = std::chrono::milliseconds(0);
  c.cleaner_thread = false;
  c.full_wait = std::chrono::milliseconds(0);
  c.max_value_bytes = 16 << 10;
  return c;
}

inline std::unique_ptr<Store> OpenOrDie(const StoreConfig& c) {
  auto s = Store::Open(c);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline std::string Key(int i) { return "key-" + std::to_string(i); }
inline std::string Value(int i, int v, size_t len = 40) {
  std::string s = "v" + std::to_string(i) + "." + std::to_string(v) + ":";
  while (s.size() < len) s.push_back(static_cast<char>('a' + (i + v + s.size()) % 26));
  s.resize(len);
  return s;
}

// The value of `key` as a one-sided reader sees it; "" + NotFound if absent.
inline Status ReadNative(Store& s, std::string_view key, std::string* value, NativeGetResult* res = nullptr) {
  thread_local std::vector<std::byte> buf(64 << 10);  // >= the tests' largest entry
  ReadCounters c;
  NativeGetResult r;
  Status st = NativeGet(s.index_params(), s.index_base(), s.log_base(), key, buf, &r, &c);
  if (st.ok()) value->assign(reinterpret_cast<const char*>(r.value.data()), r.value.size());
  if (res != nullptr) *res = r;
  return st;
}

}  // namespace kvrdma::test
