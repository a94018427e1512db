// Keys and values from Python, as views that stay valid while the GIL is
// released: each holds a reference to (or a buffer export of) the object it
// views, and must be destroyed with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <span>
#include <string_view>

namespace kvrdma::python {

// A key: str (its UTF-8 bytes) or bytes. TypeError otherwise.
class KeyArg {
 public:
  explicit KeyArg(pybind11::handle h);
  std::string_view view() const { return view_; }

 private:
  pybind11::object ref_;  // keeps the bytes / str (and its UTF-8 cache) alive
  std::string_view view_;
};

// A value: any bytes-like object (bytes, bytearray, memoryview, ...), read
// through the buffer protocol. TypeError for str and everything else.
class ValueArg {
 public:
  explicit ValueArg(pybind11::handle h);
  ~ValueArg();
  ValueArg(ValueArg&& o) noexcept;
  ValueArg(const ValueArg&) = delete;
  ValueArg& operator=(const ValueArg&) = delete;
  ValueArg& operator=(ValueArg&&) = delete;
  std::string_view view() const { return view_; }

 private:
  Py_buffer buf_{};
  bool exported_ = false;
  std::string_view view_;
};

// Memory to write a value into: any writable, contiguous bytes-like object
// (bytearray, a memoryview of one, mmap, a numpy array, ...), through the
// buffer protocol. TypeError for read-only objects (bytes) and the rest.
class BufferArg {
 public:
  explicit BufferArg(pybind11::handle h);
  ~BufferArg();
  BufferArg(const BufferArg&) = delete;
  BufferArg& operator=(const BufferArg&) = delete;
  std::span<std::byte> span() const { return span_; }

 private:
  Py_buffer buf_{};
  std::span<std::byte> span_;
};

}  // namespace kvrdma::python
