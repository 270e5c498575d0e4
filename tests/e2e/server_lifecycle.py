"""The server's life: 503 while loading, a model that fails to load, --config, private logs, expiring
downloads, clients that disconnect (their KV pages come back, seen in /metrics), and SIGTERM/SIGINT
(exit 0; running work finishes within the grace period or is cancelled at its end).

Usage: python3 tests/e2e/server_lifecycle.py BUILD_DIR"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from hymt_server import Checks, Server, build_dir, status_of  # noqa: E402

BUILD = build_dir()
c = Checks("server lifecycle")
SENTENCE = "The house is big and the garden is very beautiful in the summer. "
LONG = {"q": [SENTENCE * 10] * 24, "source": "en", "target": "de"}  # several seconds of work


def wait_for(pred, timeout, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def post_raw(server, path, body):
    """Opens a connection and sends a JSON POST without reading the answer."""
    data = json.dumps(body).encode()
    s = socket.create_connection((server.host, server.port), timeout=60)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % (path.encode(), len(data)) + data)
    return s


# ---- loading ----
s = Server(BUILD, "--weight-type", "q5_k", wait_ready=False)  # quantising at load takes a moment
st, hdrs, body = s.json("GET", "/health")
c.check(st == 503 and body == {"status": "loading"} and hdrs.get("retry-after"), "/health is 503 while loading", (st, body))
st, hdrs, body = s.json("POST", "/translate", {"q": "x", "source": "en", "target": "de"})
c.check(st == 503 and "loading" in body["error"] and hdrs.get("retry-after"), "work is refused with 503 while loading", body)
st, _, body = s.json("GET", "/api/status")
c.check(st == 200 and body["status"] == "loading", "/api/status says loading", body)
s.wait_ready()
c.check(s.json("GET", "/health")[0] == 200, "/health turns 200 once the model is ready")
c.check(any("ready" in l for l in s.stdout_lines) or wait_for(lambda: any("ready" in l for l in s.stdout_lines), 2),
        "the URL is printed again once ready", s.stdout_lines)
c.check(s.stop() == 0, "SIGTERM: exit 0")

proc = subprocess.run([os.path.join(BUILD, "hymt"), "serve", "--port", "0", "--model", "/nonexistent/model"],
                      capture_output=True, text=True, timeout=60)
c.check(proc.returncode == 2 and "did not load" in proc.stderr and proc.stdout.startswith("hymt: serving"),
        "a model that cannot load: the server starts, then exits 2 naming the problem", (proc.returncode, proc.stderr))

# ---- --config ----
with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "serve.json")
    with open(cfg, "w") as f:
        json.dump({"api_key": ["cfg-key"], "max_chars": 10, "cors": True, "grace_seconds": 5}, f)
    with Server(BUILD, "--config", cfg, "--max-chars", "20") as s:
        body = {"q": "x" * 15, "source": "en", "target": "de"}
        st, _, _ = s.json("POST", "/translate", body)
        c.check(st == 401, "--config: api_key from the file is required", st)
        st, hdrs, r = s.json("POST", "/translate", body, {"Authorization": "Bearer cfg-key"})
        c.check(st == 200 and hdrs.get("access-control-allow-origin") == "*",
                "--config: cors from the file; --max-chars 20 on the command line wins over 10", (st, r))
    with open(cfg, "w") as f:
        json.dump({"colour": "blue"}, f)
    proc = subprocess.run([os.path.join(BUILD, "hymt"), "serve", "--config", cfg], capture_output=True, text=True,
                          timeout=30)
    c.check(proc.returncode == 2 and "unknown option 'colour'" in proc.stderr, "--config: an unknown option is an error",
            proc.stderr)

# ---- logs keep request text out unless asked ----
secret = "Zebra-" + uuid.uuid4().hex[:8]
for flag, expect in (((), False), (("--log-text",), True)):
    with Server(BUILD, *flag, env={"HYMT_LOG": "info"}) as s:
        s.json("POST", "/translate", {"q": "The %s is big." % secret, "source": "en", "target": "de"})
        s.json("POST", "/translate", {"q": "The %s" % secret, "source": "en", "target": "xx"})
        s.stop()
        log = s.log_text()
        c.check((secret in log) == expect and "POST /translate 200" in log,
                "the log %s request text%s" % ("holds" if expect else "never holds", " with --log-text" if expect else ""),
                log[-600:])

# ---- downloads expire ----
with Server(BUILD, "--download-ttl", "1") as s:
    boundary = "b" + uuid.uuid4().hex
    form = ("--%s\r\nContent-Disposition: form-data; name=\"target\"\r\n\r\nde\r\n--%s\r\nContent-Disposition: "
            "form-data; name=\"source\"\r\n\r\nen\r\n--%s\r\nContent-Disposition: form-data; name=\"file\"; "
            "filename=\"a.txt\"\r\n\r\nThe house is big.\r\n--%s--\r\n" % ((boundary,) * 4)).encode()
    st, _, r = s.json("POST", "/translate_file", form, {"Content-Type": "multipart/form-data; boundary=" + boundary})
    path = r["translatedFileUrl"][r["translatedFileUrl"].index("/download_file/"):]
    c.check(s.request("GET", path)[0] == 200, "a translated file can be downloaded")
    time.sleep(1.3)
    c.check(s.request("GET", path)[0] == 404, "...and is gone after --download-ttl")

# ---- disconnects give the KV pages back ----
with Server(BUILD) as s:
    for what, path, body in (
            ("a plain request", "/translate", LONG),
            ("a stream", "/api/translate", {"texts": LONG["q"], "source": "en", "target": "de", "stream": True}),
            ("a chat stream", "/v1/chat/completions", {"messages": [{"role": "user", "content": SENTENCE * 40}],
                                                       "n": 4, "stream": True, "max_tokens": 2000})):
        before = s.metrics()["hymt_client_disconnects_total"]
        sock = post_raw(s, path, body)
        busy = wait_for(lambda: s.metrics()["hymt_kv_pages_used"] > 0, 10)
        used = s.metrics()["hymt_kv_pages_used"]
        c.check(busy, "%s: KV pages in use while it runs (%d)" % (what, used))
        if path != "/translate":
            c.check(sock.recv(4096).startswith(b"HTTP/1.1 200"), "%s: the stream has started" % what)
        closed_at = time.time()
        sock.close()
        back = wait_for(lambda: s.metrics()["hymt_kv_pages_used"] == 0, 5)
        m = s.metrics()
        c.check(back and m["hymt_running_sequences"] == 0 and m["hymt_queue_depth"] == 0,
                "%s: after the client hangs up every KV page comes back (in %.2f s)" % (what, time.time() - closed_at), m)
        c.check(wait_for(lambda: s.metrics()["hymt_client_disconnects_total"] == before + 1, 5),
                "%s: counted as a client disconnect" % what)
    c.check(s.json("POST", "/translate", {"q": "The house is big.", "source": "en", "target": "zh"})[2] ==
            {"translatedText": "这房子很大。"}, "the server translates normally afterwards")

# ---- SIGTERM / SIGINT ----
# Running work within the grace period completes; new connections are refused meanwhile.
s = Server(BUILD, "--grace-seconds", "60")
result = {}
medium = {"q": [SENTENCE * 4] * 8, "source": "en", "target": "de"}


def call(name, body):
    result[name] = s.json("POST", "/translate", body, timeout=120)


t = threading.Thread(target=call, args=("medium", medium))
t.start()
wait_for(lambda: s.metrics()["hymt_requests_in_flight"] >= 1, 10)
start = time.time()
s.proc.send_signal(signal.SIGTERM)
time.sleep(0.3)
try:
    refused = s.request("GET", "/health", timeout=5)[0] != 200
except OSError:
    refused = True
c.check(refused, "after SIGTERM no new request is served")
t.join()
rc = s.proc.wait(timeout=60)
c.check(result["medium"][0] == 200 and len(result["medium"][2]["translatedText"]) == 8,
        "SIGTERM: the request in flight completes within the grace period", result["medium"][0])
c.check(rc == 0, "SIGTERM: exit 0 after finishing (%.1f s)" % (time.time() - start), rc)
os.unlink(s.log.name)

# Work still running at the end of the grace period is cancelled; the server exits promptly.
s = Server(BUILD, "--grace-seconds", "1")
t = threading.Thread(target=call, args=("long", {"q": [SENTENCE * 10] * 96, "source": "en", "target": "de"}))
t.start()
wait_for(lambda: s.metrics()["hymt_kv_pages_used"] > 0, 10)
start = time.time()
s.proc.send_signal(signal.SIGTERM)
rc = s.proc.wait(timeout=60)
took = time.time() - start
t.join()
c.check(rc == 0 and took < 1 + 3, "SIGTERM with work past the grace: exit 0 in %.1f s (grace 1 s)" % took, rc)
c.check(result["long"][0] == 503 and "shutting down" in result["long"][2]["error"],
        "the cancelled request is answered 503 (shutting down)", result["long"])
os.unlink(s.log.name)

s = Server(BUILD)
c.check(s.stop(signal.SIGINT) == 0, "SIGINT: exit 0")
os.unlink(s.log.name)

c.finish()
