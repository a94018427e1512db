#include "args.h"

#include <string>

namespace py = pybind11;

namespace kvrdma::python {

KeyArg::KeyArg(py::handle h) : ref_(py::reinterpret_borrow<py::object>(h)) {
  PyObject* o = h.ptr();
  if (PyBytes_Check(o)) {
    view_ = {PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o))};
  } else if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(o, &n);
    if (p == nullptr) throw py::error_already_set();
    view_ = {p, static_cast<size_t>(n)};
  } else {
    throw py::type_error(std::string("a key must be str or bytes, not ") + Py_TYPE(o)->tp_name);
  }
}

ValueArg::ValueArg(py::handle h) {
  PyObject* o = h.ptr();
  if (PyUnicode_Check(o)) {
    throw py::type_error("a value must be bytes-like (bytes, bytearray, memoryview), not str: encode it");
  }
  if (PyObject_GetBuffer(o, &buf_, PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    throw py::type_error(std::string("a value must be bytes-like (bytes, bytearray, memoryview), not ") +
                         Py_TYPE(o)->tp_name);
  }
  exported_ = true;
  view_ = {static_cast<const char*>(buf_.buf), static_cast<size_t>(buf_.len)};
}

BufferArg::BufferArg(py::handle h) {
  PyObject* o = h.ptr();
  if (PyObject_GetBuffer(o, &buf_, PyBUF_WRITABLE) != 0) {
    PyErr_Clear();
    throw py::type_error(std::string("a buffer must be a writable, contiguous bytes-like object (bytearray, "
                                     "memoryview of one, mmap, ...), not ") +
                         Py_TYPE(o)->tp_name);
  }
  span_ = {static_cast<std::byte*>(buf_.buf), static_cast<size_t>(buf_.len)};
}

BufferArg::~BufferArg() { PyBuffer_Release(&buf_); }

ValueArg::ValueArg(ValueArg&& o) noexcept : buf_(o.buf_), exported_(o.exported_), view_(o.view_) {
  o.exported_ = false;
}

ValueArg::~ValueArg() {
  if (exported_) PyBuffer_Release(&buf_);
}

}  // namespace kvrdma::python
