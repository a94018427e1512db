#include "errors.h"

#include <string>

namespace py = pybind11;

namespace kvrdma::python {
namespace {

constexpr int kCodes = static_cast<int>(Status::kLastCode) + 1;
// Owned references kept for the interpreter's life (never released: a
// static py::object would be destroyed after the interpreter is gone).
PyObject* g_error = nullptr;
PyObject* g_by_code[kCodes] = {};

struct ErrorSpec {
  Status::Code code;
  const char* name;
  PyObject* extra_base;  // a builtin it also is (or null)
  const char* doc;
};

}  // namespace

void DefineErrors(py::module_& m) {
  g_error = PyErr_NewExceptionWithDoc("kvrdma.Error",
                                      "Base of every kvrdma error; .code is the kvrdma::Status code.", nullptr, nullptr);
  if (g_error == nullptr) throw py::error_already_set();
  m.add_object("Error", py::reinterpret_borrow<py::object>(g_error));
  const ErrorSpec specs[] = {
      {Status::Code::kNotFound, "NotFound", nullptr, "The key is not stored (get returns None instead)."},
      {Status::Code::kInvalidArgument, "InvalidArgument", PyExc_ValueError, "Malformed input (e.g. an empty key)."},
      {Status::Code::kTooLarge, "TooLarge", PyExc_ValueError, "A key or value over the server's limit."},
      {Status::Code::kServerFull, "ServerFull", nullptr, "Index or log full (store mode); nothing changed."},
      {Status::Code::kNoResource, "NoResource", nullptr, "Temporarily out of credits or buffers: retry later."},
      {Status::Code::kRemoteAccess, "RemoteAccess", nullptr, "Refused: wrong auth token or RDMA access."},
      {Status::Code::kConnectionLost, "ConnectionLost", PyExc_ConnectionError,
       "The connection broke; a write in flight may or may not have been applied."},
      {Status::Code::kCorruption, "Corruption", nullptr, "Bytes failed validation."},
      {Status::Code::kTimeout, "Timeout", PyExc_TimeoutError,
       "No answer within op_timeout_ms (a write's outcome is unknown)."},
      {Status::Code::kLocked, "Locked", nullptr, "Another client holds the key's lock."},
      {Status::Code::kIOError, "IOError", nullptr, "A local system or verbs call failed (e.g. ulimit -l)."},
      {Status::Code::kProtocol, "Protocol", nullptr, "The peer speaks another protocol version or sent garbage."},
      {Status::Code::kRetry, "Retry", nullptr, "A read raced a writer; retrying succeeds."},
      {Status::Code::kInternal, "Internal", nullptr, "A bug: an invariant did not hold."},
      {Status::Code::kUnavailable, "Unavailable", nullptr, "No RDMA device, or the server is not reachable."},
      {Status::Code::kVersionMismatch, "VersionMismatch", nullptr,
       "A conditional write found the key at another version; .current_version is it (0: no value)."},
  };
  for (const ErrorSpec& s : specs) {
    std::string qual = std::string("kvrdma.") + s.name;
    PyObject* bases = s.extra_base != nullptr ? PyTuple_Pack(2, g_error, s.extra_base) : PyTuple_Pack(1, g_error);
    if (bases == nullptr) throw py::error_already_set();
    PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), s.doc, bases, nullptr);
    Py_DECREF(bases);
    if (cls == nullptr) throw py::error_already_set();
    auto obj = py::reinterpret_borrow<py::object>(cls);
    obj.attr("code") = static_cast<int>(s.code);
    g_by_code[static_cast<int>(s.code)] = cls;
    m.add_object(s.name, obj);
  }
  py::reinterpret_borrow<py::object>(g_error).attr("code") = -1;
}

void Raise(const Status& st, uint64_t current_version) {
  const int code = static_cast<int>(st.code());
  PyObject* cls = code > 0 && code < kCodes && g_by_code[code] != nullptr ? g_by_code[code] : g_error;
  std::string msg = st.message().empty() ? std::string(CodeName(st.code())) : st.message();
  // The message may come from the server: invalid UTF-8 is replaced, not an error.
  PyObject* text = PyUnicode_DecodeUTF8(msg.data(), static_cast<Py_ssize_t>(msg.size()), "replace");
  if (text == nullptr) throw py::error_already_set();
  PyObject* exc = PyObject_CallOneArg(cls, text);
  Py_DECREF(text);
  if (exc == nullptr) throw py::error_already_set();
  if (st.IsVersionMismatch()) {
    PyObject* v = PyLong_FromUnsignedLongLong(current_version);
    const int rc = v == nullptr ? -1 : PyObject_SetAttrString(exc, "current_version", v);
    Py_XDECREF(v);
    if (rc != 0) {
      Py_DECREF(exc);
      throw py::error_already_set();
    }
  }
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  throw py::error_already_set();
}

}  // namespace kvrdma::python
