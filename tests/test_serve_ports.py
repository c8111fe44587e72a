"""`serve` never claims ready for a server it did not start: taken ports are refused before the start, and a
readiness answer from another process is told apart from the child's (no Triton needed: plain sockets)."""
from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.serve.server import Server, ServerPlan, _serves_port


def _repo(tmp_path):
    (tmp_path / "repo" / "sr").mkdir(parents=True)
    (tmp_path / "repo" / "sr" / "config.pbtxt").write_text('name: "sr"\nbackend: "python"\n')
    return tmp_path / "repo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def other_server():
    """Another HTTP server that answers Triton's readiness probe with 200."""
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Ready)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_taken_port_is_refused_before_start(tmp_path, capsys, other_server):
    rc = main(["serve", str(_repo(tmp_path)), "--tritonserver", "/bin/true", "--http-port", str(other_server),
               "--grpc-port", str(_free_port()), "--metrics-port", str(_free_port())])
    cap = capsys.readouterr()
    assert rc == 2 and "ready" not in cap.out, cap
    assert cap.err.strip() == (f"error: 127.0.0.1:{other_server} (--http-port) is taken (Address already in use): "
                               "another server runs there; stop it or choose another --http-port")


def test_readiness_answered_by_another_process_is_not_ready(other_server):
    """The race the port check cannot close: the port is taken after the check, the probe reaches the other one."""
    plan = ServerPlan([sys.executable, "-c", "import time; time.sleep(60)"], "127.0.0.1",
                      {"http": other_server, "grpc": _free_port(), "metrics": _free_port()}, load=[])
    server = Server(plan, echo=None)
    try:
        with pytest.raises(PipelineError, match=f"another server answers on http://127.0.0.1:{other_server}, not"):
            server.wait_ready(timeout=20)
        assert server.proc.poll() is not None  # the child was stopped
    finally:
        server.stop()


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_child_listening_itself_is_recognised(other_server, wrapped):
    """The server itself, or under a wrapper script that did not exec it (--tritonserver wrapper.sh)."""
    port = _free_port()
    server = [sys.executable, "-c", "import socket, sys, time\n"
              f"s = socket.create_server(('127.0.0.1', {port}))\nprint('up', flush=True)\ntime.sleep(60)"]
    if wrapped:
        server = ["sh", "-c", '"$@"; exit', "sh", *server]
    child = subprocess.Popen(server, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == "up"
        assert _serves_port(child.pid, port) is True
        assert _serves_port(child.pid, other_server) is False  # this test process holds that one
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


FAKE_SERVER = """#!{python}
import http.server, sys, threading
args = sys.argv[1:]
port = int(args[args.index("--http-port") + 1])
for i in range(57):
    print(f"I1125 noise line {{i}}", flush=True)
print("E1125 CudaDriverHelper has not been initialized", flush=True)
if {fail}:
    print("E1125 model sr failed to load", flush=True)
    sys.exit(3)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), Ready).serve_forever()
"""


@pytest.mark.parametrize("fail", [False, True])
def test_the_server_log_goes_to_a_file_and_prints_only_on_failure(tmp_path, capsys, fail):
    """Issue 42: serve printed tritonserver's 57-line log (an E line about CUDA included, on a CPU machine) before
    its own summary. The log goes to a file; its last lines print only when the server fails."""
    fake = tmp_path / "tritonserver"
    fake.write_text(FAKE_SERVER.format(python=sys.executable, fail=fail))
    fake.chmod(0o755)
    log = tmp_path / "logs" / "triton.log"
    http_port = _free_port()
    rc = main(["serve", str(_repo(tmp_path)), "--tritonserver", str(fake), "--http-port", str(http_port),
               "--grpc-port", str(_free_port()), "--metrics-port", str(_free_port()), "--stop-after", "0.5",
               "--log", str(log)])
    cap = capsys.readouterr()
    lines = log.read_text().splitlines()
    assert lines[0] == "I1125 noise line 0" and "E1125 CudaDriverHelper has not been initialized" in lines
    if fail:
        assert rc == 2 and cap.err.endswith("error: tritonserver exited (code 3) before it was ready: E1125 model sr "
                                            "failed to load\n")
        assert f"tritonserver's last 20 log lines (all of it: {log}):" in cap.err and "noise line 56" in cap.err
    else:
        assert rc == 0 and "noise" not in cap.out + cap.err and "E1125" not in cap.out + cap.err
        assert f"log      {log}" in cap.out and cap.out.startswith("serving sr (python)")
