// hello_kvrdma: a small application of the installed kvrdma client library.
// Connects to a kvserver, puts, gets, deletes, then runs a small batch
// through the asynchronous API (Submit/Wait) and checks every result.
//
//   hello_kvrdma HOST[:PORT]          exit 0 when everything did what it should
#include <kvrdma/client.h>
#include <kvrdma/sharded_client.h>  // only for ParseServerAddress

#include <cstdio>
#include <string>
#include <vector>

namespace {

int Fail(const char* what, const kvrdma::Status& st) {
  std::fprintf(stderr, "hello_kvrdma: %s: %s\n", what, st.ToString().c_str());
  return 1;
}

// Puts, then reads back, a batch of keys with the asynchronous API: the
// caller owns the Ops; Submit takes as many as fit, Wait hands back completed
// ones (in any order).
int AsyncBatch(kvrdma::Client& c) {
  constexpr size_t kBatch = 32;
  std::vector<std::string> keys, values, results(kBatch);
  std::vector<kvrdma::Op> ops(kBatch);
  for (size_t i = 0; i < kBatch; ++i) {
    keys.push_back("hello:batch:" + std::to_string(i));
    values.push_back("value " + std::to_string(i * i));
  }
  for (kvrdma::Op::Type type : {kvrdma::Op::Type::kPut, kvrdma::Op::Type::kGet, kvrdma::Op::Type::kDelete}) {
    std::vector<kvrdma::Op*> todo;
    for (size_t i = 0; i < kBatch; ++i) {
      ops[i] = kvrdma::Op{};
      ops[i].type = type;
      ops[i].key = keys[i];
      ops[i].value = values[i];
      ops[i].result = &results[i];
      todo.push_back(&ops[i]);
    }
    size_t submitted = 0, completed = 0;
    kvrdma::Op* done[16];
    while (completed < kBatch) {
      if (submitted < kBatch) submitted += c.Submit(std::span<kvrdma::Op* const>(todo).subspan(submitted));
      size_t n = c.Wait(done, 5000);
      if (n == 0 && submitted == kBatch) {
        std::fprintf(stderr, "hello_kvrdma: async: nothing completed within 5 s\n");
        return 1;
      }
      for (size_t j = 0; j < n; ++j) {
        if (!done[j]->status.ok()) return Fail("async operation", done[j]->status);
      }
      completed += n;
    }
  }
  for (size_t i = 0; i < kBatch; ++i) {
    if (results[i] != values[i]) {
      std::fprintf(stderr, "hello_kvrdma: async get of %s returned '%s'\n", keys[i].c_str(), results[i].c_str());
      return 1;
    }
  }
  std::printf("async: put, got and deleted %zu keys in batches (Submit/Wait)\n", kBatch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hello_kvrdma HOST[:PORT]\n");
    return 2;
  }
  kvrdma::ClientOptions o;
  if (kvrdma::Status st = kvrdma::ShardedClient::ParseServerAddress(argv[1], &o.host, &o.port); !st.ok()) {
    return Fail("server address", st);
  }
  auto c = kvrdma::Client::Connect(o);
  if (!c.ok()) return Fail("connect", c.status());
  kvrdma::Client& client = **c;
  std::printf("connected to %s:%u (values up to %u bytes)\n", o.host.c_str(), o.port, client.max_value_bytes());

  if (auto st = client.Put("hello", "world"); !st.ok()) return Fail("put", st);
  std::printf("put hello = world (version %llu)\n", static_cast<unsigned long long>(client.last_version()));
  std::string v;
  if (auto st = client.Get("hello", &v); !st.ok()) return Fail("get", st);
  std::printf("get hello -> %s\n", v.c_str());
  if (v != "world") return Fail("get", kvrdma::Status::Corruption("unexpected value " + v));
  if (auto st = client.Delete("hello"); !st.ok()) return Fail("delete", st);
  kvrdma::Status gone = client.Get("hello", &v);
  if (!gone.IsNotFound()) return Fail("get after delete (expected NotFound)", gone);
  std::printf("delete hello; get hello -> %s\n", gone.ToString().c_str());

  if (AsyncBatch(client) != 0) return 1;
  const kvrdma::ClientStats& s = client.stats();
  std::printf("client counters: %llu gets, %llu puts, %llu deletes, %llu RDMA READs\n",
              static_cast<unsigned long long>(s.gets), static_cast<unsigned long long>(s.puts),
              static_cast<unsigned long long>(s.deletes), static_cast<unsigned long long>(s.reads));
  std::printf("hello_kvrdma: OK\n");
  return 0;
}
