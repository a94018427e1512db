// kvrdma.Error and one subclass per kvrdma::Status code, created when the
// module is imported; Raise() turns a Status into the matching exception.
#pragma once

#include <pybind11/pybind11.h>

#include <kvrdma/status.h>

namespace kvrdma::python {

// Defines kvrdma.Error and its subclasses in module m.
void DefineErrors(pybind11::module_& m);
// Sets the Python exception for st (REQUIRES: the GIL; !st.ok()) and throws
// pybind11::error_already_set to unwind to the interpreter. A
// VersionMismatch carries `current_version` as its .current_version.
[[noreturn]] void Raise(const Status& st, uint64_t current_version = 0);

}  // namespace kvrdma::python
