"""Fixtures: real kvservers on the RDMA device (run under tools/with-rdma,
which sets KVRDMA_TEST_ADDR); the kvrdma package from PYTHONPATH (tools/test
installs it into BUILD/python-site with pip)."""
import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KVRDMA_BUILD", os.path.join(ROOT, "build"))
ADDR = os.environ.get("KVRDMA_TEST_ADDR", "")
_next_port = [20000 + os.getpid() % 20000]


class Server:
    def __init__(self, *extra):
        import kvrdma
        _next_port[0] += 7
        self.port = _next_port[0]
        self.addr = f"{ADDR}:{self.port}"
        self.log = open(os.path.join(BUILD, f"pytest-kvserver-{self.port}.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "server", "kvserver"), "--listen", ADDR, "--port", str(self.port),
             "--index-mb", "4", "--workers", "2", *extra] + ([] if "--log-mb" in extra else ["--log-mb", "64"]),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:  # ready when a client connects (bounded)
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvserver exited {self.proc.returncode}: {open(self.log.name).read()}")
            try:
                kvrdma.Client(ADDR, self.port, connect_timeout_ms=1000,
                              auth_token=_token(extra)).close()
                return
            except (kvrdma.Unavailable, kvrdma.Timeout):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self):
        # SIGKILL, without waiting for the exit: Soft-RoCE's driver holds a
        # killed process's verbs objects (and so its exit) for 50-200 s
        # (__rxe_cleanup; DESIGN "Durability"), which waiting cost the suite.
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.killed = True

    def stop(self):
        if not getattr(self, "killed", False) and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


def _token(extra):
    extra = list(extra)
    return extra[extra.index("--auth-token") + 1] if "--auth-token" in extra else ""


@pytest.fixture(scope="session")
def server():
    if not ADDR:
        pytest.skip("no RDMA device: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)")
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def second_server(server):
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def kv(server):
    import kvrdma
    with kvrdma.Client(ADDR, server.port) as c:
        yield c


def make_server(*extra):
    if not ADDR:
        pytest.skip("no RDMA device: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)")
    return Server(*extra)
