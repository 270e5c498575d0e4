"""Helpers for the server tests: start `hymt serve` on a free port, send requests, check results.

Python standard library only (the tests run on a bare Debian with python3)."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse


class Server:
    """A `hymt serve` process. Use as a context manager; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, build, *args, wait_ready=True, env=None):
        self.build = build
        self.log = tempfile.NamedTemporaryFile(prefix="hymt-serve-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        full_env.setdefault("HYMT_LOG", "warn")
        full_env.update(env or {})
        self.proc = subprocess.Popen([os.path.join(build, "hymt"), "serve", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=full_env)
        line = self.proc.stdout.readline()
        if not line.startswith("hymt: serving "):
            self.proc.wait(timeout=10)
            raise RuntimeError("hymt serve did not start: %r\n%s" % (line, self.log_text()))
        self.url = line.split()[2]
        parsed = urllib.parse.urlparse(self.url)
        self.host, self.port = parsed.hostname, parsed.port
        self.stdout_lines = [line]
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if wait_ready:
            self.wait_ready()

    def _drain(self):
        for line in self.proc.stdout:
            self.stdout_lines.append(line)

    def wait_ready(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("hymt serve exited %d:\n%s" % (self.proc.returncode, self.log_text()))
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("hymt serve did not become ready")

    def log_text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Returns (status, headers dict with lowercase names, body bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                headers = {"Content-Type": "application/json", **(headers or {})}
            elif isinstance(body, str):
                body = body.encode()
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            conn.close()

    def json(self, method, path, body=None, headers=None, timeout=120):
        status, hdrs, data = self.request(method, path, body, headers, timeout)
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = None
        return status, hdrs, parsed

    def metrics(self):
        """The /metrics samples as {'name{labels}': value}."""
        status, _, data = self.request("GET", "/metrics")
        assert status == 200, status
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def raw(self, data, read_timeout=30, shut_write=False):
        """Sends raw bytes on a new connection and returns the raw response (until the server closes
        or one response is complete)."""
        s = socket.create_connection((self.host, self.port), timeout=read_timeout)
        try:
            s.sendall(data)
            if shut_write:
                s.shutdown(socket.SHUT_WR)
            return read_response(s)
        finally:
            s.close()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()
        os.unlink(self.log.name)


def read_response(sock):
    """Reads one HTTP response (headers plus a Content-Length or chunked body) from a socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"content-length:" in lower:
        n = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < n:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    elif b"transfer-encoding: chunked" in lower:
        while not body.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    return head + b"\r\n\r\n" + body


def status_of(raw):
    """The status code of a raw response, or 0 when there is none."""
    try:
        return int(raw.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def sse_events(data):
    """Parses an event stream into [(event name or None, data string)]."""
    events = []
    for block in data.decode().split("\n\n"):
        name, payload = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                payload.append(line[6:])
        if payload:
            events.append((name, "\n".join(payload)))
    return events


class Checks:
    """Counts checks; prints each; exits 1 at the end if any failed."""

    def __init__(self, name):
        self.name, self.failed, self.passed, self.start = name, 0, 0, time.time()

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print("ok   " + what)
        else:
            self.failed += 1
            print("FAIL " + what + (": " + str(detail)[:500] if detail != "" else ""))
        sys.stdout.flush()
        return ok

    def finish(self):
        took = time.time() - self.start
        print("%s: %d passed, %d failed in %.1f s" % (self.name, self.passed, self.failed, took))
        sys.exit(1 if self.failed else 0)


def build_dir():
    return os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
