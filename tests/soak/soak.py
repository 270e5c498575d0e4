"""Soak test: `hymt serve` with the demo model under mixed load for a number of minutes.

Client threads send, in a weighted random mix: LibreTranslate and native translations, chat
completions, streamed answers (SSE on /v1/chat/completions and /api/translate) read to their end,
streams and requests whose client goes away midway (closing or resetting the connection), bodies over
--max-body, malformed JSON, unknown languages, and /health and /metrics. Meanwhile the server's resident
memory (VmRSS) and open descriptors are sampled.

Passes when:
  - after the warm-up (the first WARMUP_SHARE of the time, at least MIN_WARMUP_SECONDS), resident
    memory stays within RSS_GROWTH_LIMIT of its first sample after the warm-up;
  - once the load stops, the descriptor count returns to what it was idle before the load;
  - every answer is one its kind expects; there is no 5xx but 503 (overload);
  - the server never dies, /health answers 200 at the end with every KV page and in-flight slot back,
    and SIGTERM then exits 0.
Prints requests by kind and status, RSS and descriptor figures; exits 1 on a failure.

Usage: python3 tests/soak/soak.py [--minutes M] [--clients N] BUILD_DIR   (tests/soak/run.sh wraps it)
Python standard library only."""

import argparse
import collections
import http.client
import json
import os
import random
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "lib"))
from hymt_server import Server, sse_events  # noqa: E402

MAX_BODY = 1 << 20         # --max-body of the soaked server; the oversized requests exceed it
WARMUP_SHARE = 0.10        # memory is judged after this share of the time,
MIN_WARMUP_SECONDS = 20    # and not before this (RSS climbs in the first seconds of load, then holds)
RSS_GROWTH_LIMIT = 0.05    # max RSS after the warm-up vs the first sample after it
SAMPLE_SECONDS = 2.0       # RSS and descriptor sampling period
FD_SETTLE_SECONDS = 20     # after the load, time for the server to close its connections
REQUEST_TIMEOUT = 120      # a request that takes longer is a failure

SENTENCES = [
    "The house is big.",
    "Good morning.",
    "I like to read books in the evening.",
    "The weather is very nice today.",
    "Where is the train station?",
    "My brother works in a hospital.",
    "We are going to the beach tomorrow.",
    "This coffee is too hot.",
]
LONG_TEXT = " ".join(SENTENCES * 3)  # long enough that a stream is still running when its client leaves
TO_ZH = "把下面的文本翻译成中文，不要额外解释。\n\n"
JSON = {"Content-Type": "application/json"}
WORK_STATUSES = {"200", "503"}


class Stats:
    """Outcomes by kind (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.defaultdict(collections.Counter)
        self.unexpected = []

    def add(self, kind, outcome, allowed, detail=""):
        with self.lock:
            self.counts[kind][outcome] += 1
            if outcome not in allowed and len(self.unexpected) < 20:
                self.unexpected.append("%s: %s %s" % (kind, outcome, str(detail)[:300]))


class Client:
    """One load thread: a keep-alive connection for plain requests, fresh sockets for the rest."""

    def __init__(self, server, rng, stats):
        self.server, self.rng, self.stats = server, rng, stats
        self.conn = None

    # ---- plumbing ----
    def request(self, method, path, body=None, headers=None):
        """Sends on the keep-alive connection (once more on a fresh one if a reused connection was
        closed by the server meanwhile); returns (status, headers, body bytes)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = dict(JSON, **(headers or {}))
        for attempt in range(2):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection(self.server.host, self.server.port, timeout=REQUEST_TIMEOUT)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return str(r.status), {k.lower(): v for k, v in r.getheaders()}, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if fresh or attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def raw_socket(self):
        return socket.create_connection((self.server.host, self.server.port), timeout=REQUEST_TIMEOUT)

    def send_post(self, sock, path, body):
        data = json.dumps(body).encode()
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % (path.encode(), len(data)) + data)

    def leave(self, sock):
        """Goes away: half the time a plain close (FIN), else a reset (RST)."""
        if self.rng.random() < 0.5:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    def sentence(self):
        return self.rng.choice(SENTENCES)

    # ---- the kinds: each returns (outcome, detail) ----
    def translate(self):
        q = self.sentence() if self.rng.random() < 0.7 else self.rng.sample(SENTENCES, 3)
        st, _, data = self.request("POST", "/translate", {"q": q, "source": "en", "target": self.rng.choice(["de", "zh"])})
        if st == "200":
            r = json.loads(data)
            ok = isinstance(r.get("translatedText"), str if isinstance(q, str) else list)
            return (st if ok else "200-bad-body"), data[:200]
        return st, data[:200]

    def translate_native(self):
        st, _, data = self.request("POST", "/api/translate", {"text": self.sentence(), "source": "en",
                                                               "target": self.rng.choice(["de", "zh"])})
        if st == "200":
            return (st if json.loads(data).get("translations") else "200-bad-body"), data[:200]
        return st, data[:200]

    def chat(self):
        st, _, data = self.request("POST", "/v1/chat/completions",
                                   {"messages": [{"role": "user", "content": TO_ZH + self.sentence()}]})
        if st == "200":
            ok = json.loads(data)["choices"][0]["message"]["content"] is not None
            return (st if ok else "200-bad-body"), data[:200]
        return st, data[:200]

    def stream_chat(self):
        st, hdrs, data = self.request("POST", "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": TO_ZH + self.sentence()}], "stream": True})
        if st == "200":
            events = [d for _, d in sse_events(data)]
            return (st if events and events[-1] == "[DONE]" else "200-unfinished-stream"), events[-2:]
        return st, data[:200]

    def stream_native(self):
        st, _, data = self.request("POST", "/api/translate", {"texts": self.rng.sample(SENTENCES, 2), "source": "en",
                                                               "target": "de", "stream": True})
        if st == "200":
            names = [n for n, _ in sse_events(data)]
            return (st if names and names[-1] == "done" else "200-unfinished-stream"), names[-2:]
        return st, data[:200]

    def cancel_stream(self):
        """Starts a long streamed answer, reads until the first event, then goes away."""
        body = {"messages": [{"role": "user", "content": TO_ZH + LONG_TEXT}], "stream": True}
        if self.rng.random() < 0.3:
            path, body = "/api/translate", {"text": LONG_TEXT, "source": "en", "target": "zh", "stream": True}
        else:
            path = "/v1/chat/completions"
        sock = self.raw_socket()
        try:
            self.send_post(sock, path, body)
            data = b""
            while b"data: " not in data.partition(b"\r\n\r\n")[2]:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in data:
                    return data[9:12].decode(), data[:200]  # refused (503 when busy)
            return ("left-mid-stream" if b"data: " in data else "closed-before-stream"), data[:200]
        finally:
            self.leave(sock)

    def cancel_request(self):
        """Sends a translation of a long text and goes away before the answer."""
        sock = self.raw_socket()
        try:
            self.send_post(sock, "/translate", {"q": LONG_TEXT, "source": "en", "target": "de"})
            time.sleep(self.rng.uniform(0.0, 0.3))
            return "left-before-answer", ""
        finally:
            self.leave(sock)

    def oversized(self):
        body = b'{"q": "' + b"a" * (MAX_BODY + self.rng.randint(1, 4096)) + b'", "source": "en", "target": "de"}'
        st, _, data = self.request("POST", self.rng.choice(["/translate", "/v1/chat/completions"]), body, JSON)
        return st, data[:200]

    def malformed_json(self):
        body = self.rng.choice([b'{"q": "The house", "source": "en"', b'{"q": [1, 2,, 3]}', b"\x00\xff{",
                                b'{"q": "a", "source": "en", "target": "de"} trailing', b'[[[[[[[[[[['])
        st, _, data = self.request("POST", self.rng.choice(["/translate", "/api/translate", "/v1/chat/completions"]),
                                   body, JSON)
        return st, data[:200]

    def unknown_language(self):
        if self.rng.random() < 0.5:
            body = {"q": self.sentence(), "source": "en", "target": self.rng.choice(["xx", "tlh", "zz-ZZ", "fr"])}
            st, _, data = self.request("POST", "/translate", body)
        else:
            body = {"text": self.sentence(), "source": self.rng.choice(["qq", "klingon"]), "target": "de"}
            st, _, data = self.request("POST", "/api/translate", body)
        return st, data[:200]

    def monitor(self):
        st, _, data = self.request("GET", self.rng.choice(["/health", "/metrics", "/api/status"]))
        return st, data[:200]


# (kind, weight, allowed outcomes)
KINDS = [
    ("translate", 30, WORK_STATUSES),
    ("translate-native", 12, WORK_STATUSES),
    ("chat", 8, WORK_STATUSES),
    ("stream-chat", 10, WORK_STATUSES),
    ("stream-native", 6, WORK_STATUSES),
    ("cancel-stream", 8, {"left-mid-stream", "503"}),
    ("cancel-request", 6, {"left-before-answer"}),
    ("oversized", 3, {"413"}),
    ("malformed-json", 6, {"400"}),
    ("unknown-language", 6, {"400"}),
    ("monitor", 5, {"200"}),
]
ALLOWED = {k: allowed for k, _, allowed in KINDS}


def run_kind(client, kind, stats):
    method = getattr(client, kind.replace("-", "_"))
    try:
        outcome, detail = method()
    except (OSError, http.client.HTTPException, ValueError) as e:
        client.close()
        outcome, detail = "error:" + type(e).__name__, e
    stats.add(kind, outcome, ALLOWED[kind], detail)


def worker(server, seed, deadline, stats, stop):
    client = Client(server, random.Random(seed), stats)
    names = [k for k, _, _ in KINDS]
    weights = [w for _, w, _ in KINDS]
    while time.time() < deadline and not stop.is_set():
        run_kind(client, client.rng.choices(names, weights)[0], stats)
    client.close()


def read_rss_fds(pid):
    """(VmRSS in bytes, open descriptors) of a process, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration):
        return None


def sampler(server, samples, stop):
    while not stop.is_set():
        s = read_rss_fds(server.proc.pid)
        if s is None or server.proc.poll() is not None:
            return
        samples.append((time.time(), s[0], s[1]))
        stop.wait(SAMPLE_SECONDS)


def idle_fds(pid, timeout=FD_SETTLE_SECONDS, target=None):
    """Waits until the descriptor count is steady (or at most `target`); returns the last count."""
    end, last = time.time() + timeout, None
    while time.time() < end:
        s = read_rss_fds(pid)
        if s is None:
            return None
        if (target is not None and s[1] <= target) or (target is None and s[1] == last):
            return s[1]
        last = s[1]
        time.sleep(0.5)
    return last


def mb(n):
    return "%.1f MB" % (n / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=12, help="load threads (default 12)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    duration = args.minutes * 60
    failures = []
    print("soak: %s/hymt serve --max-body %d, %d clients for %.1f min" % (build, MAX_BODY, args.clients, args.minutes))
    sys.stdout.flush()

    with Server(build, "--max-body", str(MAX_BODY)) as server:
        pid = server.proc.pid
        # One request of each kind first, so that whatever the server sets up on first use is there
        # before the idle descriptor count is taken.
        stats = Stats()
        prime = Client(server, random.Random(args.seed), stats)
        for kind, _, _ in KINDS:
            run_kind(prime, kind, stats)
        prime.close()
        fds_idle = idle_fds(pid)
        print("primed: %s; %d descriptors idle" %
              (", ".join("%s %s" % (k, "/".join(c)) for k, c in stats.counts.items()), fds_idle))
        sys.stdout.flush()

        samples, stop = [], threading.Event()
        start = time.time()
        deadline = start + duration
        threads = [threading.Thread(target=sampler, args=(server, samples, stop), daemon=True)]
        threads += [threading.Thread(target=worker, args=(server, args.seed * 1000 + i, deadline, stats, stop), daemon=True)
                    for i in range(args.clients)]
        for t in threads:
            t.start()
        while time.time() < deadline and server.proc.poll() is None:
            time.sleep(min(1.0, max(0.0, deadline - time.time())))
        stop.set()
        for t in threads[1:]:
            t.join(REQUEST_TIMEOUT + 10)
        threads[0].join(SAMPLE_SECONDS + 5)
        took = time.time() - start

        alive = server.proc.poll() is None
        if not alive:
            failures.append("the server died (exit %s)" % server.proc.returncode)
        fds_end = idle_fds(pid, target=fds_idle) if alive else None
        health = pages = inflight = None
        if alive:
            # Cancelled work is still leaving the engine for a moment after its client went away.
            end = time.time() + FD_SETTLE_SECONDS
            while time.time() < end:
                m = server.metrics()
                pages, inflight = m.get("hymt_kv_pages_used"), m.get("hymt_requests_in_flight")
                if pages == 0 and inflight == 0:
                    break
                time.sleep(0.25)
            health = server.request("GET", "/health")[0]

        # ---- figures ----
        total = sum(sum(c.values()) for c in stats.counts.values())
        print("\n%d requests in %.0f s (%.1f/s), %d clients" % (total, took, total / took, args.clients))
        print("%-18s %8s  %s" % ("kind", "count", "outcomes"))
        for kind, _, _ in KINDS:
            c = stats.counts[kind]
            print("%-18s %8d  %s" % (kind, sum(c.values()), " ".join("%s=%d" % kv for kv in sorted(c.items()))))
        bad_5xx = sum(n for c in stats.counts.values() for o, n in c.items() if o.startswith("5") and o != "503")
        if bad_5xx:
            failures.append("%d responses with a 5xx other than 503" % bad_5xx)
        if stats.unexpected:
            failures.append("unexpected outcomes, e.g.:\n    " + "\n    ".join(stats.unexpected[:10]))

        warm_end = start + max(WARMUP_SHARE * duration, MIN_WARMUP_SECONDS)
        after = [s for s in samples if s[0] >= warm_end]
        if len(after) < 2:
            failures.append("too few memory samples after the warm-up (%d)" % len(after))
        else:
            rss_all = [s[1] for s in samples]
            base, peak = after[0][1], max(s[1] for s in after)
            growth = peak / base - 1
            print("RSS: %s at the end of the warm-up (%.0f s), max after it %s (%+.1f%%), min %s, max %s, last %s; "
                  "%d samples" % (mb(base), warm_end - start, mb(peak), 100 * growth, mb(min(rss_all)), mb(max(rss_all)),
                                  mb(samples[-1][1]), len(samples)))
            step = max(1, len(samples) // 20)
            print("RSS over time (MB, every %.0f s): %s" % (step * SAMPLE_SECONDS,
                                                          " ".join("%.0f" % (s[1] / 1e6) for s in samples[::step])))
            if growth > RSS_GROWTH_LIMIT:
                failures.append("resident memory grew %.1f%% after the warm-up (limit %.0f%%)" %
                                (100 * growth, 100 * RSS_GROWTH_LIMIT))
        if samples:
            fds = [s[2] for s in samples]
            print("descriptors: %d idle before the load, min %d, max %d under load, %s after it" %
                  (fds_idle, min(fds), max(fds), fds_end))
        if alive and (fds_end is None or fds_end > fds_idle):
            failures.append("descriptors did not return to %d after the load (%s)" % (fds_idle, fds_end))
        if alive:
            print("after the load: /health %s, KV pages in use %s, requests in flight %s" % (health, pages, inflight))
            if health != 200:
                failures.append("/health answered %s at the end" % health)
            if pages != 0 or inflight != 0:
                failures.append("KV pages in use %s, requests in flight %s after the load" % (pages, inflight))
            rc = server.stop()
            if rc != 0:
                failures.append("SIGTERM: exit %s" % rc)
        if failures:
            print("\nthe server's log (last 40 lines):\n" + "\n".join(server.log_text().splitlines()[-40:]))

    if failures:
        print("\nsoak FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("\nsoak passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
