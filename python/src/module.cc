// kvrdma._kvrdma: the C++ client library (libkvrdma, kvrdma::client) for
// Python. The kvrdma package (kvrdma/__init__.py) wraps these classes.
//
// Threading: every call that may wait on the network releases the GIL.
// The C++ Client is used by one thread at a time, so each wrapper holds a
// mutex around its client, taken with the GIL released (a second Python
// thread calling the same object waits without blocking the interpreter).
// Keys and values are viewed in place (KeyArg/ValueArg hold a reference);
// results are copied into bytes after the GIL is taken back (get_into: into
// the caller's buffer, held exported while the GIL is released).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <kvrdma/client.h>
#include <kvrdma/sharded_client.h>

#include "args.h"
#include "errors.h"

namespace py = pybind11;

namespace kvrdma::python {
namespace {

using Pairs = std::vector<std::pair<std::string, uint64_t>>;

ClientOptions MakeOptions(const std::string& host, uint16_t port, const std::string& device,
                          const std::string& put_mode, int connect_timeout_ms, int op_timeout_ms,
                          size_t location_cache_entries, uint32_t max_in_flight, const std::string& auth_token,
                          uint32_t rendezvous_bytes, uint32_t rendezvous_copy_bytes) {
  ClientOptions o;
  o.host = host;
  o.port = port;
  o.device = device;
  if (put_mode == "send") {
    o.put_mode = PutMode::kSend;
  } else if (put_mode == "write-imm") {
    o.put_mode = PutMode::kWriteImm;
  } else {
    throw py::value_error("put_mode must be 'send' or 'write-imm'");
  }
  if (connect_timeout_ms <= 0 || op_timeout_ms <= 0) throw py::value_error("timeouts must be > 0 ms");
  o.connect_timeout_ms = connect_timeout_ms;
  o.op_timeout_ms = op_timeout_ms;
  o.location_cache_entries = location_cache_entries;
  o.max_in_flight = max_in_flight;
  o.auth_token = auth_token;
  o.rendezvous_bytes = rendezvous_bytes;
  o.rendezvous_copy_bytes = rendezvous_copy_bytes;
  return o;
}

py::dict ToDict(const Pairs& p) {
  py::dict d;
  for (const auto& [k, v] : p) d[py::str(k)] = v;
  return d;
}

// Runs ops to completion through the asynchronous engine: each Submit posts
// what fits in the window with one doorbell, Wait collects completions.
// REQUIRES: the GIL released, the client's mutex held.
template <typename C>
void RunBatch(C& c, std::vector<Op>& ops) {
  std::vector<Op*> todo(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) todo[i] = &ops[i];
  std::vector<bool> finished(ops.size(), false);
  std::vector<Op*> done(64);
  size_t submitted = 0, completed = 0;
  while (completed < ops.size()) {
    if (submitted < ops.size()) submitted += c.Submit(std::span<Op* const>(todo).subspan(submitted));
    size_t n = c.Wait(done, 100);
    if (n == 0 && c.in_flight() == 0) n = c.Poll(done);  // completed ones wait for Poll
    for (size_t j = 0; j < n; ++j) finished[static_cast<size_t>(done[j] - ops.data())] = true;
    completed += n;
    if (n == 0 && c.in_flight() == 0 && submitted == ops.size()) break;  // nothing more will come
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!finished[i]) ops[i].status = Status::Internal("the client library did not complete the operation");
  }
}

// The first failure among ops (NotFound is not one for GET/DELETE), raised.
void RaiseFirstFailure(const std::vector<Op>& ops, const std::vector<KeyArg>& keys, const char* what) {
  size_t failed = 0, first = ops.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].status.ok() || ops[i].status.IsNotFound()) continue;
    if (failed++ == 0) first = i;
  }
  if (failed == 0) return;
  const Status& st = ops[first].status;
  std::string key(keys[first].view().substr(0, 64));
  Raise(Status(st.code(), std::string(what) + ": " + std::to_string(failed) + " of " + std::to_string(ops.size()) +
                              " failed; the first, key '" + key + "': " + st.message()));
}

// What Client and ShardedClient share; C is the C++ class.
template <typename C>
class Binding {
 public:
  explicit Binding(std::unique_ptr<C> c) : c_(std::move(c)) {}

  py::object Get(py::handle key) {
    KeyArg k(key);
    std::string v;
    Status st = Call([&](C& c) { return c.Get(k.view(), &v); });
    if (st.IsNotFound()) return py::none();
    if (!st.ok()) Raise(st);
    return py::bytes(v);
  }
  py::object GetInto(py::handle key, py::handle buffer) {
    KeyArg k(key);
    BufferArg b(buffer);
    size_t n = 0;
    Status st = Call([&](C& c) { return c.Get(k.view(), b.span(), &n); });
    if (st.IsNotFound()) return py::none();
    if (!st.ok()) Raise(st);
    return py::int_(n);
  }
  // The buffer stays exported (BufferArg) while registered: its object can
  // neither resize nor free it, so the registered pages stay the buffer's.
  void RegisterMemory(py::handle buffer) {
    auto b = std::make_unique<BufferArg>(buffer);
    Status st = Call([&](C& c) { return c.RegisterMemory(b->span()); });
    if (!st.ok()) Raise(st);
    registered_.push_back(std::move(b));
  }
  void UnregisterMemory(py::handle buffer) {
    BufferArg b(buffer);
    Status st = Call([&](C& c) { return c.UnregisterMemory(b.span()); });
    if (!st.ok()) Raise(st);
    std::erase_if(registered_, [&](const std::unique_ptr<BufferArg>& r) {
      return r->span().data() == b.span().data() && r->span().size() == b.span().size();
    });
  }
  uint64_t Put(py::handle key, py::handle value, py::handle if_version) {
    KeyArg k(key);
    ValueArg v(value);
    const uint64_t cond = IfVersion(if_version);
    uint64_t version = 0;
    Status st = Call([&](C& c) {
      Status s = c.Put(k.view(), v.view(), cond);
      if (s.ok() || s.IsVersionMismatch()) version = LastVersion(c, k.view());
      return s;
    });
    if (!st.ok()) Raise(st, version);
    return version;
  }
  bool Delete(py::handle key, py::handle if_version) {
    KeyArg k(key);
    const uint64_t cond = IfVersion(if_version);
    uint64_t version = 0;
    Status st = Call([&](C& c) {
      Status s = c.Delete(k.view(), cond);
      if (s.IsVersionMismatch()) version = LastVersion(c, k.view());
      return s;
    });
    if (st.IsNotFound()) return false;
    if (!st.ok()) Raise(st, version);
    return true;
  }
  py::list GetMany(const py::iterable& keys) {
    std::vector<KeyArg> ks;
    for (py::handle h : keys) ks.emplace_back(h);
    std::vector<std::string> values(ks.size());
    std::vector<Op> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      ops[i].type = Op::Type::kGet;
      ops[i].key = ks[i].view();
      ops[i].result = &values[i];
    }
    Call([&](C& c) {
      RunBatch(c, ops);
      return Status::OK();
    });
    RaiseFirstFailure(ops, ks, "get_many");
    py::list out(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      out[i] = ops[i].status.ok() ? py::object(py::bytes(values[i])) : py::object(py::none());
    }
    return out;
  }
  void PutMany(const py::iterable& items) {
    std::vector<KeyArg> ks;
    std::vector<ValueArg> vs;
    py::object pairs = py::isinstance<py::dict>(items) ? items.attr("items")() : py::object(items);
    for (py::handle h : pairs) {
      py::tuple t = py::reinterpret_borrow<py::object>(h).cast<py::tuple>();
      if (t.size() != 2) throw py::type_error("put_many takes a mapping or (key, value) pairs");
      ks.emplace_back(t[0]);
      vs.emplace_back(t[1]);
    }
    std::vector<Op> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      ops[i].type = Op::Type::kPut;
      ops[i].key = ks[i].view();
      ops[i].value = vs[i].view();
    }
    Call([&](C& c) {
      RunBatch(c, ops);
      return Status::OK();
    });
    RaiseFirstFailure(ops, ks, "put_many");
  }
  bool TryLock(py::handle key, double lease_s) {
    KeyArg k(key);
    auto lease = LeaseMs(lease_s);
    Status st = Call([&](C& c) { return ClientOf(c, k.view()).TryLock(k.view(), lease); });
    if (st.code() == Status::Code::kLocked) return false;
    if (!st.ok()) Raise(st);
    return true;
  }
  void Lock(py::handle key, double lease_s) {
    KeyArg k(key);
    auto lease = LeaseMs(lease_s);
    Status st = Call([&](C& c) { return ClientOf(c, k.view()).Lock(k.view(), lease); });
    if (!st.ok()) Raise(st);
  }
  void Unlock(py::handle key) {
    KeyArg k(key);
    Status st = Call([&](C& c) { return ClientOf(c, k.view()).Unlock(k.view()); });
    if (!st.ok()) Raise(st);
  }
  void Close() {
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> g(mu_);
      c_.reset();  // disconnects, and ends the registrations
      closed_.store(true);
    }
    registered_.clear();  // with the GIL: releases the buffers
  }
  // Without the mutex: a call in progress on another thread does not block it.
  bool closed() const { return closed_.load(); }

  // Runs f(client) with the GIL released and the mutex held.
  template <typename F>
  Status Call(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> g(mu_);
    if (!c_) return Status(Status::Code::kInvalidArgument, "the client is closed");
    return f(*c_);
  }
  C& client() { return *c_; }

 private:
  static std::chrono::milliseconds LeaseMs(double s) {
    if (!(s >= 0.001 && s <= 49.0 * 86400)) throw py::value_error("lease must be 0.001 .. 4233600 seconds");
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  // None: no condition; an int in [0, 2^64 - 2]: the version required (0:
  // only if the key has no value).
  static uint64_t IfVersion(py::handle v) {
    if (v.is_none()) return kAnyVersion;
    if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v)) {
      throw py::type_error("if_version must be None or an int");
    }
    py::int_ i = py::reinterpret_borrow<py::int_>(v);
    if (i < py::int_(0) || i >= py::int_(kAnyVersion)) {
      throw py::value_error("if_version must be in [0, 2**64 - 2]");
    }
    return i.cast<uint64_t>();
  }
  static Client& ClientOf(Client& c, std::string_view) { return c; }
  static Client& ClientOf(ShardedClient& c, std::string_view key) { return c.server(c.ServerFor(key)); }
  static uint64_t LastVersion(Client& c, std::string_view) { return c.last_version(); }
  static uint64_t LastVersion(ShardedClient& c, std::string_view key) { return c.server(c.ServerFor(key)).last_version(); }

  std::mutex mu_;
  // Buffers registered with register_memory, held exported; declared before
  // c_ so that the client (and its registrations) ends first.
  std::vector<std::unique_ptr<BufferArg>> registered_;
  std::unique_ptr<C> c_;  // guarded by mu_
  std::atomic<bool> closed_{false};
};

using PyClient = Binding<Client>;
using PySharded = Binding<ShardedClient>;

py::dict ClientStatsDict(const ClientStats& s) {
  py::dict d;
  d["gets"] = s.gets;
  d["get_rounds"] = s.get_rounds;
  d["get_retries"] = s.get_retries;
  d["reads"] = s.reads;
  d["cache_hits"] = s.cache_hits;
  d["cache_stale"] = s.cache_stale;
  d["direct_reads"] = s.direct_reads;
  d["puts"] = s.puts;
  d["deletes"] = s.deletes;
  d["messages"] = s.messages;
  d["rendezvous_puts"] = s.rendezvous_puts;
  d["rendezvous_registrations"] = s.rendezvous_registrations;
  d["rendezvous_copies"] = s.rendezvous_copies;
  d["rendezvous_fallbacks"] = s.rendezvous_fallbacks;
  d["get_hits"] = s.get_hits;
  d["get_hit_reads"] = s.get_hit_reads;
  d["get_misses"] = s.get_misses;
  d["get_miss_rounds"] = s.get_miss_rounds;
  return d;
}

template <typename B, typename Cls>
void DefineCommon(Cls& cls) {
  cls.def("get", &B::Get, py::arg("key"),
          "The value of key (bytes), or None if it is absent. One-sided RDMA READs; linearizable.")
      .def("get_into", &B::GetInto, py::arg("key"), py::arg("buffer"),
           "Reads key's value into buffer (a writable bytes-like object: bytearray, memoryview, mmap,\n"
           "numpy array, ...) and returns its length, or None if the key is absent. No bytes object\n"
           "is made: the value is copied once, from the READ's buffer into yours. TooLarge (naming\n"
           "the value's length) if it does not fit; the buffer's contents are then unspecified.")
      .def("register_memory", &B::RegisterMemory, py::arg("buffer"),
           "Registers a writable buffer (bytearray, memoryview, mmap, numpy array, ...) with the RDMA\n"
           "device, for local access only (the server cannot reach it): get_into a buffer inside it then\n"
           "READs values of 4 KiB and more straight into it, without the client's copy. The buffer\n"
           "stays exported until unregister_memory or close (a bytearray cannot be resized meanwhile).\n"
           "Pins its pages (ulimit -l). InvalidArgument if it overlaps memory registered already.")
      .def("unregister_memory", &B::UnregisterMemory, py::arg("buffer"),
           "Ends the registration made with exactly this buffer (NotFound if none).")
      .def("put", &B::Put, py::arg("key"), py::arg("value"), py::kw_only(), py::arg("if_version") = py::none(),
           "Stores value (bytes-like) under key; returns the write's version (it grows with each write of the key).\n"
           "if_version=V: only if the key's current version is V (0: only if it has no value), checked by the\n"
           "server; otherwise raises VersionMismatch, whose .current_version is the key's version (0: none).\n"
           "ServerFull, Locked, TooLarge, VersionMismatch.")
      .def("delete", &B::Delete, py::arg("key"), py::kw_only(), py::arg("if_version") = py::none(),
           "Deletes key: True if it was there, False if absent. if_version=V (V >= 1): only if the key is\n"
           "at version V, else VersionMismatch (also when it is absent).")
      .def("get_many", &B::GetMany, py::arg("keys"),
           "Values of keys (None where absent), in order, pipelined: one doorbell per window of up to\n"
           "max_in_flight operations. Raises the first failure other than absence after all completed.")
      .def("put_many", &B::PutMany, py::arg("items"),
           "Stores a mapping or an iterable of (key, value) pairs, pipelined like get_many. Raises the\n"
           "first failure after all completed (the others are applied). Two writes of one key in the\n"
           "same batch may be applied in either order.")
      .def("try_lock", &B::TryLock, py::arg("key"), py::arg("lease"),
           "One attempt at key's lock for lease seconds: True if taken, False if another client holds it.")
      .def("_lock", &B::Lock, py::arg("key"), py::arg("lease"))
      .def("unlock", &B::Unlock, py::arg("key"),
           "Releases key's lock: NotFound if not held, Locked if it was taken over after the lease.")
      .def("close", &B::Close, "Disconnects; later calls raise InvalidArgument. Locks held lapse with their leases.")
      .def_property_readonly("closed", &B::closed);
}

}  // namespace

}  // namespace kvrdma::python

using namespace kvrdma;          // NOLINT: the module's definitions below
using namespace kvrdma::python;  // NOLINT

PYBIND11_MODULE(_kvrdma, m) {
  m.doc() = "The kvrdma client library (C++), wrapped by the kvrdma package.";
  DefineErrors(m);
  // ClientOptions' default, so that Python's default is the library's.
  m.attr("DEFAULT_RENDEZVOUS_BYTES") = ClientOptions{}.rendezvous_bytes;
  m.attr("DEFAULT_RENDEZVOUS_COPY_BYTES") = ClientOptions{}.rendezvous_copy_bytes;

  py::class_<PyClient> client(m, "_Client");
  client.def(py::init([](const std::string& host, uint16_t port, const std::string& device,
                         const std::string& put_mode, int connect_timeout_ms, int op_timeout_ms,
                         size_t location_cache_entries, uint32_t max_in_flight, const std::string& auth_token,
                         uint32_t rendezvous_bytes, uint32_t rendezvous_copy_bytes) {
                 ClientOptions o = MakeOptions(host, port, device, put_mode, connect_timeout_ms, op_timeout_ms,
                                               location_cache_entries, max_in_flight, auth_token, rendezvous_bytes,
                                               rendezvous_copy_bytes);
                 Result<std::unique_ptr<Client>> c = Status::Internal("not run");
                 {
                   py::gil_scoped_release nogil;
                   c = Client::Connect(o);
                 }
                 if (!c.ok()) Raise(c.status());
                 return std::make_unique<PyClient>(std::move(c).value());
               }),
               py::arg("host"), py::arg("port"), py::arg("device"), py::arg("put_mode"),
               py::arg("connect_timeout_ms"), py::arg("op_timeout_ms"), py::arg("location_cache_entries"),
               py::arg("max_in_flight"), py::arg("auth_token"), py::arg("rendezvous_bytes"),
               py::arg("rendezvous_copy_bytes"));
  DefineCommon<PyClient>(client);
  client
      .def("stats",
           [](PyClient& b) {
             Pairs p;
             Status st = b.Call([&](Client& c) {
               auto r = c.Stats();
               if (!r.ok()) return r.status();
               p = std::move(r).value();
               return Status::OK();
             });
             if (!st.ok()) Raise(st);
             return ToDict(p);
           })
      .def("client_stats",
           [](PyClient& b) {
             ClientStats s;
             Status st = b.Call([&](Client& c) {
               s = c.stats();
               return Status::OK();
             });
             if (!st.ok()) Raise(st);
             return ClientStatsDict(s);
           })
      .def_property_readonly("max_value_bytes", [](PyClient& b) {
        uint32_t v = 0;
        Status st = b.Call([&](Client& c) {
          v = c.max_value_bytes();
          return Status::OK();
        });
        if (!st.ok()) Raise(st);
        return v;
      });

  py::class_<PySharded> sharded(m, "_ShardedClient");
  sharded.def(py::init([](const std::vector<std::string>& servers, uint16_t port, const std::string& device,
                          const std::string& put_mode, int connect_timeout_ms, int op_timeout_ms,
                          size_t location_cache_entries, uint32_t max_in_flight, const std::string& auth_token,
                          uint32_t rendezvous_bytes, uint32_t rendezvous_copy_bytes) {
                  ShardedClientOptions so;
                  so.servers = servers;
                  so.client = MakeOptions("", port, device, put_mode, connect_timeout_ms, op_timeout_ms,
                                          location_cache_entries, max_in_flight, auth_token, rendezvous_bytes,
                                          rendezvous_copy_bytes);
                  Result<std::unique_ptr<ShardedClient>> c = Status::Internal("not run");
                  {
                    py::gil_scoped_release nogil;
                    c = ShardedClient::Connect(so);
                  }
                  if (!c.ok()) Raise(c.status());
                  return std::make_unique<PySharded>(std::move(c).value());
                }),
                py::arg("servers"), py::arg("port"), py::arg("device"), py::arg("put_mode"),
                py::arg("connect_timeout_ms"), py::arg("op_timeout_ms"), py::arg("location_cache_entries"),
                py::arg("max_in_flight"), py::arg("auth_token"), py::arg("rendezvous_bytes"),
                py::arg("rendezvous_copy_bytes"));
  DefineCommon<PySharded>(sharded);
  sharded
      .def("stats",
           [](PySharded& b, size_t server) {
             Pairs p;
             Status st = b.Call([&](ShardedClient& c) {
               auto r = c.Stats(server);
               if (!r.ok()) return r.status();
               p = std::move(r).value();
               return Status::OK();
             });
             if (!st.ok()) Raise(st);
             return ToDict(p);
           },
           py::arg("server"))
      .def("server_for",
           [](PySharded& b, py::handle key) {
             KeyArg k(key);
             size_t i = 0;
             Status st = b.Call([&](ShardedClient& c) {
               i = c.ServerFor(k.view());
               return Status::OK();
             });
             if (!st.ok()) Raise(st);
             return i;
           },
           py::arg("key"))
      .def_property_readonly("server_count", [](PySharded& b) {
        size_t n = 0;
        Status st = b.Call([&](ShardedClient& c) {
          n = c.server_count();
          return Status::OK();
        });
        if (!st.ok()) Raise(st);
        return n;
      });
  m.def("place_key", [](py::handle key, size_t server_count) {
    if (server_count == 0) throw py::value_error("server_count must be >= 1");
    KeyArg k(key);
    return ShardedClient::PlaceKey(k.view(), server_count);
  }, py::arg("key"), py::arg("server_count"));
}
