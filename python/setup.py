"""Builds the kvrdma Python package against the installed kvrdma client
library (cmake --install; found with pkg-config, so set PKG_CONFIG_PATH for
a prefix pkg-config does not search). No PyPI: setuptools and pybind11 come
from Debian (python3-setuptools, python3-pybind11), hence
    pip install --no-build-isolation ./python
"""
import os
import shlex
import subprocess
import sys

try:
    from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
    from setuptools import setup
except ImportError as e:
    # A Python whose environment lacks Debian's packages (pyenv, conda, a venv
    # without --system-site-packages) first on PATH: say in one line what works.
    raise SystemExit(
        f"kvrdma: {sys.executable} cannot import {e.name or 'pybind11'} (Debian's python3-pybind11 and "
        "python3-setuptools serve /usr/bin/python3): build with that interpreter, e.g. "
        "'/usr/bin/python3 -m venv --system-site-packages ENV && ENV/bin/pip install --no-build-isolation "
        "./python', or install pybind11 and setuptools into this Python's environment") from None


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "kvrdma"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(
            "kvrdma: pkg-config cannot find the installed kvrdma library "
            "(cmake --install BUILD [--prefix P]; then PKG_CONFIG_PATH=P/lib/pkgconfig): " + str(e))
    return shlex.split(out)


cflags = pkg_config("--cflags")
libdir = pkg_config("--variable=libdir")[0]
libdir = os.path.realpath(libdir)

ext = Pybind11Extension(
    "kvrdma._kvrdma",
    ["src/module.cc", "src/errors.cc", "src/args.cc"],
    include_dirs=[f[2:] for f in cflags if f.startswith("-I")],
    library_dirs=[libdir],
    libraries=["kvrdma"],
    # The library's directory is recorded in the module, so it loads without
    # LD_LIBRARY_PATH wherever the library was installed.
    runtime_library_dirs=[libdir],
    cxx_std=20,
    extra_compile_args=["-Wall", "-Wextra", "-Werror", "-fvisibility=hidden"],
)



class BuildExt(build_ext):
    """Always rebuilds and relinks: the library's location (the rpath) and
    headers come from outside this tree, so an earlier build in python/build
    must never be reused."""

    def finalize_options(self):
        super().finalize_options()
        self.force = True


# The three sources compile in parallel (KVRDMA_PY_JOBS, default 2).
ParallelCompile("KVRDMA_PY_JOBS", default=2).install()
setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
