// The Backend that kvserver runs on: the Store (index + value log + cleaner).
#pragma once

#include <memory>

#include "server/backend.h"
#include "server/store/store.h"

namespace kvrdma::server {

class StoreBackend final : public Backend {
 public:
  static Result<std::unique_ptr<StoreBackend>> Create(const StoreConfig& cfg) {
    auto s = Store::Open(cfg);
    if (!s.ok()) return s.status();
    return std::unique_ptr<StoreBackend>(new StoreBackend(std::move(s).value()));
  }

  Status Put(uint32_t worker, std::span<const uint8_t> key, std::span<const uint8_t> value,
             const CommitCheck& check, bool wait_for_space, uint64_t* version) override {
    auto r = store_->Put(worker, View(key), View(value), check, wait_for_space);
    if (!r.ok()) return r.status();
    *version = *r;
    return Status::OK();
  }
  Status PutChecked(uint32_t worker, std::span<const uint8_t> key, std::span<const uint8_t> value, uint64_t expected,
                    const CommitCheck& check, bool wait_for_space, uint64_t* version) override {
    auto r = store_->Put(worker, View(key), View(value), check, wait_for_space, &expected);
    if (!r.ok()) return r.status();
    *version = *r;
    return Status::OK();
  }
  Status Delete(uint32_t worker, std::span<const uint8_t> key, const CommitCheck& check, bool wait_for_space,
                uint64_t* version) override {
    auto r = store_->Delete(worker, View(key), check, wait_for_space);
    if (!r.ok()) return r.status();
    *version = *r;
    return Status::OK();
  }
  bool takes_values_in_place() const override { return !store_->durable(); }
  Result<uint64_t> BeginPut(uint32_t worker, std::span<const uint8_t> key, uint32_t value_len,
                            bool wait_for_space) override {
    return store_->BeginPut(worker, View(key), value_len, wait_for_space);
  }
  uint8_t* PlacedValue(uint64_t place) const override {
    return reinterpret_cast<uint8_t*>(store_->PlacedValue(place));
  }
  Status FinishPut(uint32_t worker, uint64_t place, std::span<const uint8_t> key, uint32_t value_len,
                   uint64_t expected, const CommitCheck& check, uint64_t* version) override {
    auto r = store_->FinishPut(worker, place, View(key), value_len, expected, check);
    if (!r.ok()) return r.status();
    *version = *r;
    return Status::OK();
  }
  void AbandonPut(uint64_t place) override { store_->AbandonPut(place); }
  bool durable() const override { return store_->durable(); }
  Status Commit(uint32_t worker) override { return store_->Commit(worker); }
  StoreRegions regions() const override {
    IndexParams p = store_->index_params();
    return StoreRegions{store_->index_base(), store_->index_bytes(), p.home_count, static_cast<uint16_t>(p.window_words),
                        p.seed, store_->log_base(), store_->log_bytes(), store_->config().grace_period};
  }
  void AppendStats(std::vector<std::pair<std::string_view, uint64_t>>* out) const override {
    StoreStats s = store_->Stats();
    out->insert(out->end(), {{"items", s.items},
                             {"tombstones", s.tombstones},
                             {"index_bytes", s.index_bytes},
                             {"index_bytes_used", s.index_bytes_used},
                             {"log_bytes", s.log_bytes},
                             {"log_bytes_live", s.log_bytes_live},
                             {"segments_free", s.segments_free},
                             {"segments_used", s.segments_used},
                             {"cleaner_runs", s.cleaner_runs},
                             {"relocations", s.relocations},
                             {"evictions", s.evictions}});
  }
  Store& store() { return *store_; }

 private:
  explicit StoreBackend(std::unique_ptr<Store> s) : store_(std::move(s)) {}
  static std::string_view View(std::span<const uint8_t> b) {
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  std::unique_ptr<Store> store_;
};

}  // namespace kvrdma::server
