// Little-endian field-by-field encoding for everything kvrdma puts on the
// wire (connect private data, requests, replies). Never memcpy a struct:
// padding and host byte order must not leak into the protocol.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace kvrdma::wire {

// The little-endian integer at `p` (the caller checked that its bytes are there).
template <typename T>
inline T LoadLe(const uint8_t* p) noexcept {
  T v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>(v | (T{p[i]} << (8 * i)));
  }
  return v;
}

// Stores v little-endian at `p` (the caller checked that its bytes are there).
template <typename T>
inline void StoreLe(uint8_t* p, T v) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
  }
}

// Appends to a fixed buffer; ok() is false once anything did not fit.
class Writer {
 public:
  explicit Writer(std::span<uint8_t> buf) noexcept : buf_(buf) {}
  void U8(uint8_t v) noexcept { Put(&v, 1); }
  void U16(uint16_t v) noexcept { PutLe(v); }
  void U32(uint32_t v) noexcept { PutLe(v); }
  void U64(uint64_t v) noexcept { PutLe(v); }
  void Bytes(std::span<const uint8_t> b) noexcept { Put(b.data(), b.size()); }
  void Bytes(std::string_view s) noexcept { Put(s.data(), s.size()); }
  // Overwrites a u16 written earlier at `at` (e.g. a length field).
  void PatchU16(size_t at, uint16_t v) noexcept {
    if (at + 2 <= pos_) StoreLe(buf_.data() + at, v);
  }
  size_t size() const noexcept { return pos_; }
  bool ok() const noexcept { return ok_; }

 private:
  // One integer, least significant byte first: on a little-endian host its
  // bytes as they are (one store, not a loop of byte stores: a request
  // header cost ~250 instructions that way), else byte by byte.
  template <typename T>
  void PutLe(T v) noexcept {
    if (!Room(sizeof(T))) return;
    StoreLe(buf_.data() + pos_, v);
    pos_ += sizeof(T);
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
  uint8_t U8() noexcept { return GetLe<uint8_t>(); }
  uint16_t U16() noexcept { return GetLe<uint16_t>(); }
  uint32_t U32() noexcept { return GetLe<uint32_t>(); }
  uint64_t U64() noexcept { return GetLe<uint64_t>(); }
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
  template <typename T>
  T GetLe() noexcept {
    if (!Room(sizeof(T))) return 0;
    T v = 0;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&v, buf_.data() + pos_, sizeof(T));
    } else {
      for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>(v | (T{buf_[pos_ + i]} << (8 * i)));
    }
    pos_ += sizeof(T);
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
