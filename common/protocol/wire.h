// Little-endian field-by-field encoding for everything kvrdma puts on the
// wire (connect private data, requests, replies). Never memcpy a struct:
// padding and host byte order must not leak into the protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace kvrdma::wire {

// Appends to a fixed buffer; ok() is false once anything did not fit.
class Writer {
 public:
  explicit Writer(std::span<uint8_t> buf) noexcept : buf_(buf) {}
  void U8(uint8_t v) noexcept { Put(&v, 1); }
  void U16(uint16_t v) noexcept { PutLe(v, 2); }
  void U32(uint32_t v) noexcept { PutLe(v, 4); }
  void U64(uint64_t v) noexcept { PutLe(v, 8); }
  void Bytes(std::span<const uint8_t> b) noexcept { Put(b.data(), b.size()); }
  void Bytes(std::string_view s) noexcept { Put(s.data(), s.size()); }
  // Overwrites a u16 written earlier at `at` (e.g. a length field).
  void PatchU16(size_t at, uint16_t v) noexcept {
    if (at + 2 <= pos_) {
      buf_[at] = static_cast<uint8_t>(v);
      buf_[at + 1] = static_cast<uint8_t>(v >> 8);
    }
  }
  size_t size() const noexcept { return pos_; }
  bool ok() const noexcept { return ok_; }

 private:
  void PutLe(uint64_t v, size_t n) noexcept {
    if (!Room(n)) return;
    for (size_t i = 0; i < n; ++i) buf_[pos_++] = static_cast<uint8_t>(v >> (8 * i));
  }
  void Put(const void* p, size_t n) noexcept {
    if (!Room(n)) return;
    if (n != 0) std::memcpy(buf_.data() + pos_, p, n);
    pos_ += n;
  }
  bool Room(size_t n) noexcept {
    if (!ok_ || buf_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::span<uint8_t> buf_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Reads from untrusted bytes; every read is bounds-checked, and once one
// fails ok() is false and every later read returns 0 / empty.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> buf) noexcept : buf_(buf) {}
  uint8_t U8() noexcept { return static_cast<uint8_t>(GetLe(1)); }
  uint16_t U16() noexcept { return static_cast<uint16_t>(GetLe(2)); }
  uint32_t U32() noexcept { return static_cast<uint32_t>(GetLe(4)); }
  uint64_t U64() noexcept { return GetLe(8); }
  std::span<const uint8_t> Bytes(size_t n) noexcept {
    if (!Room(n)) return {};
    auto s = buf_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const noexcept { return pos_; }
  size_t remaining() const noexcept { return buf_.size() - pos_; }
  bool ok() const noexcept { return ok_; }

 private:
  uint64_t GetLe(size_t n) noexcept {
    if (!Room(n)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{buf_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  bool Room(size_t n) noexcept {
    if (!ok_ || buf_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::span<const uint8_t> buf_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace kvrdma::wire
