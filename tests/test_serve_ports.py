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
