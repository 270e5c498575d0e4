"""The bad-request catalogue (issue 8): each hostile or broken request gets the right 4xx with a JSON error
body (OpenAI's shape under /v1/), and the server keeps serving (/health is checked after each). A few
requests that must succeed safely (path tricks in file names that still name a text file, HTML with
scripts) are checked for the safety property instead.

Usage: python3 tests/e2e/server_bad_requests.py BUILD_DIR"""

import json
import os
import socket
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from hymt_server import Checks, Server, build_dir, read_response, status_of  # noqa: E402

BUILD = build_dir()
c = Checks("bad requests")
READ_TIMEOUT = 2  # --read-timeout for this server, so the slow-body case is quick
MAX_BODY = 1 << 20
JSON = {"Content-Type": "application/json"}
OK = {"q": "The house is big.", "source": "en", "target": "zh"}
CHAT = {"messages": [{"role": "user", "content": "The house is big."}]}


def multipart(fields, files):
    boundary = "hymt" + uuid.uuid4().hex
    out = b""
    for k, v in fields.items():
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, k, v)).encode()
    for field, name, data in files:
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"" % (boundary, field)).encode()
        out += name + b"\"\r\nContent-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
    out += ("--%s--\r\n" % boundary).encode()
    return out, {"Content-Type": "multipart/form-data; boundary=" + boundary}


def upload(name, data=b"The house is big.\n", fields=None):
    body, hdrs = multipart(fields or {"source": "en", "target": "de"}, [("file", name, data)])
    return ("POST", "/translate_file", body, hdrs)


def with_(base, **kw):
    d = dict(base)
    d.update(kw)
    return d


def nested(depth):
    return "[" * depth + "]" * depth


# (name, expected status, request): request is (method, path, body, headers) or a callable(server) that
# returns (status, body bytes).
CASES = [
    # invalid UTF-8
    ("JSON string with a 0xFF byte", 400, ("POST", "/translate", b'{"q": "ab\xffcd", "source": "en", "target": "zh"}', JSON)),
    ("JSON with an overlong encoding of '/'", 400, ("POST", "/translate", b'{"q": "a\xc0\xafb", "source": "en", "target": "zh"}', JSON)),
    ("JSON with a lone surrogate escape", 400, ("POST", "/translate", b'{"q": "a\\ud800b", "source": "en", "target": "zh"}', JSON)),
    ("JSON with a UTF-8-encoded surrogate", 400, ("POST", "/api/translate", b'{"text": "\xed\xa0\x80", "target": "zh"}', JSON)),
    ("form value that decodes to invalid UTF-8", 400, ("POST", "/translate", b"q=%FF%FE&source=en&target=zh",
                                                        {"Content-Type": "application/x-www-form-urlencoded"})),
    ("uploaded file that is not UTF-8", 400, upload(b"latin1.txt", b"caf\xe9 cr\xe8me\n")),
    ("chat message with invalid UTF-8", 400, ("POST", "/v1/chat/completions",
                                              b'{"messages": [{"role": "user", "content": "\xc3\x28"}]}', JSON)),
    # overlong fields
    ("a text over the character limit", 400, ("POST", "/translate", with_(OK, q="a" * 5001), None)),
    ("one text of a list over the limit", 400, ("POST", "/translate", with_(OK, q=["ok", "b" * 5001]), None)),
    ("a 100-character language code", 400, ("POST", "/translate", with_(OK, source="e" * 100), None)),
    ("a 1000-byte API key", 400, ("POST", "/translate", with_(OK, api_key="k" * 1000), None)),
    ("a 300-byte glossary term", 400, ("POST", "/api/translate", {"text": "x", "target": "zh", "source": "en",
                                                                   "glossary": {"t" * 300: "x"}}, None)),
    ("context over the character limit", 400, ("POST", "/api/translate", {"text": "x", "target": "zh", "source": "en",
                                                                           "context": "c" * 5001}, None)),
    ("a 100-byte stop string", 400, ("POST", "/v1/chat/completions", with_(CHAT, stop="s" * 100), None)),
    ("five stop strings", 400, ("POST", "/v1/chat/completions", with_(CHAT, stop=["a", "b", "c", "d", "e"]), None)),
    ("a 20,000-byte URI", 414, ("GET", "/languages?" + "a" * 20000, None, None)),
    # wrong JSON types
    ("q is a number", 400, ("POST", "/translate", with_(OK, q=123), None)),
    ("q is a list of numbers", 400, ("POST", "/translate", with_(OK, q=[1, 2]), None)),
    ("q is an object", 400, ("POST", "/translate", with_(OK, q={"a": 1}), None)),
    ("target is a number", 400, ("POST", "/translate", with_(OK, target=5), None)),
    ("alternatives is a string", 400, ("POST", "/translate", with_(OK, alternatives="two"), None)),
    ("alternatives is a fraction", 400, ("POST", "/translate", with_(OK, alternatives=1.5), None)),
    ("alternatives out of range", 400, ("POST", "/translate", with_(OK, alternatives=99), None)),
    ("stream is a string", 400, ("POST", "/api/translate", {"text": "x", "target": "zh", "stream": "yes"}, None)),
    ("messages is a string", 400, ("POST", "/v1/chat/completions", {"messages": "hi"}, None)),
    ("message content is a number", 400, ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, None)),
    ("a tool message", 400, ("POST", "/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, None)),
    ("a conversation ending with the assistant", 400, ("POST", "/v1/chat/completions", {"messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}, None)),
    ("an image content part", 400, ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}, None)),
    ("n = 0", 400, ("POST", "/v1/chat/completions", with_(CHAT, n=0), None)),
    ("n = 100", 400, ("POST", "/v1/chat/completions", with_(CHAT, n=100), None)),
    ("a negative temperature", 400, ("POST", "/v1/chat/completions", with_(CHAT, temperature=-1), None)),
    ("temperature as text", 400, ("POST", "/api/translate", {"text": "x", "target": "zh", "temperature": "hot"}, None)),
    ("max_tokens = 0", 400, ("POST", "/v1/chat/completions", with_(CHAT, max_tokens=0), None)),
    ("top_p = 0", 400, ("POST", "/v1/chat/completions", with_(CHAT, top_p=0), None)),
    ("model is a number", 400, ("POST", "/v1/chat/completions", with_(CHAT, model=5), None)),
    ("stream_options is a list", 400, ("POST", "/v1/chat/completions", with_(CHAT, stream_options=[1]), None)),
    ("glossary is a string", 400, ("POST", "/api/translate", {"text": "x", "target": "zh", "glossary": "a=b"}, None)),
    ("a glossary term with a line break", 400, ("POST", "/api/translate", {"text": "x", "target": "zh", "source": "en",
                                                                            "glossary": {"a\nb": "c"}}, None)),
    ("the body is a JSON list", 400, ("POST", "/translate", [OK], None)),
    ("the body is a JSON string", 400, ("POST", "/translate", b'"hello"', JSON)),
    ("a negative timeout", 400, ("POST", "/translate", with_(OK, timeout=-5), None)),
    ("a timeout longer than the server allows", 400, ("POST", "/translate", with_(OK, timeout=1e9), None)),
    ("both text and texts", 400, ("POST", "/api/translate", {"text": "x", "texts": ["y"], "target": "zh"}, None)),
    # empty bodies and missing fields
    ("an empty JSON body", 400, ("POST", "/translate", b"", JSON)),
    ("an empty chat body", 400, ("POST", "/v1/chat/completions", b"", JSON)),
    ("a body of spaces", 400, ("POST", "/api/translate", b"   \n ", JSON)),
    ("q missing", 400, ("POST", "/translate", {"source": "en", "target": "zh"}, None)),
    ("q is an empty list", 400, ("POST", "/translate", with_(OK, q=[]), None)),
    ("target missing", 400, ("POST", "/translate", {"q": "x", "source": "en"}, None)),
    ("messages is empty", 400, ("POST", "/v1/chat/completions", {"messages": []}, None)),
    ("translate_file without a file", 400, ("POST", "/translate_file", *multipart({"source": "en", "target": "de"}, []))),
    ("an empty uploaded file", 400, upload(b"empty.txt", b"")),
    # unknown languages
    ("target 'xx'", 400, ("POST", "/translate", with_(OK, target="xx"), None)),
    ("source 'klingon'", 400, ("POST", "/translate", with_(OK, source="klingon"), None)),
    ("a real language the model does not serve", 400, ("POST", "/translate", with_(OK, target="fr"), None)),
    ("target 'auto'", 400, ("POST", "/translate", with_(OK, target="auto"), None)),
    ("a code with punctuation", 400, ("POST", "/api/translate", {"text": "x", "target": "zh!!"}, None)),
    ("an unknown language in an upload", 400, upload(b"a.txt", fields={"source": "en", "target": "qq"})),
    # huge lists
    ("129 texts", 400, ("POST", "/translate", with_(OK, q=["x"] * 129), None)),
    ("100,000 texts", 400, ("POST", "/api/translate", {"texts": ["x"] * 100000, "target": "zh"}, None)),
    ("65 messages", 400, ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "a"},
                                                                         {"role": "assistant", "content": "b"}] * 32 +
                                                           [{"role": "user", "content": "c"}]}, None)),
    ("65 glossary terms", 400, ("POST", "/api/translate", {"text": "x", "target": "zh", "source": "en",
                                                           "glossary": {"t%d" % i: "u" for i in range(65)}}, None)),
    ("a form field repeated 200 times", 400, ("POST", "/translate", ("source=en&target=zh&" + "".join("q=x%d&" % i for i in range(200))).encode(),
                                              {"Content-Type": "application/x-www-form-urlencoded"})),
    # deeply nested JSON
    ("100,000 nested lists", 400, ("POST", "/translate", nested(100000).encode(), JSON)),
    ("a field nested 20 deep", 400, ("POST", "/api/translate", ('{"text": "x", "target": "zh", "glossary": ' +
                                                                nested(20) + "}").encode(), JSON)),
    # malformed JSON and HTTP
    ("invalid JSON", 400, ("POST", "/translate", b'{"q": "x", ', JSON)),
    ("JSON with trailing data", 400, ("POST", "/translate", json.dumps(OK).encode() + b" {}", JSON)),
    ("a garbage request line", 400, lambda s: raw(s, b"GARBAGE\r\n\r\n")),
    ("broken chunked encoding", 400, lambda s: raw(s, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                                   b"application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n")),
    ("a body that stalls past the read timeout", 400, lambda s: slow_body(s)),
    ("a body over --max-body", 413, ("POST", "/translate", b'{"q": "' + b"a" * (MAX_BODY + 10) + b'"}', JSON)),
    ("a form body over 8 KiB", 413, ("POST", "/translate", b"q=" + b"a" * 9000 + b"&target=zh",
                                     {"Content-Type": "application/x-www-form-urlencoded"})),
    # path tricks
    ("an upload named ../../etc/passwd", 400, upload(b"../../etc/passwd")),
    ("an upload named ..\\..\\windows\\evil.exe", 400, upload(b"..\\..\\windows\\evil.exe")),
    ("an upload with an empty name", 400, upload(b"")),
    ("an upload named .htaccess", 400, upload(b".htaccess")),
    ("a download path with ../", 404, ("GET", "/download_file/../../etc/passwd", None, None)),
    ("an encoded ../ in the path", 404, ("GET", "/%2e%2e/%2e%2e/etc/passwd", None, None)),
    ("a download id that is not ours", 404, ("GET", "/download_file/" + "f" * 32 + "/passwd", None, None)),
    ("a static file outside web/", 404, ("GET", "/../CMakeLists.txt", None, None)),
    # formats and content types
    ("format xml", 400, ("POST", "/translate", with_(OK, format="xml"), None)),
    ("text/plain to /translate", 415, ("POST", "/translate", b"The house is big.", {"Content-Type": "text/plain"})),
    ("application/xml to /translate", 415, ("POST", "/translate", b"<q>x</q>", {"Content-Type": "application/xml"})),
    ("a form to the chat route", 415, ("POST", "/v1/chat/completions", b"messages=x",
                                       {"Content-Type": "application/x-www-form-urlencoded"})),
    ("multipart to /api/translate", 415, ("POST", "/api/translate", *multipart({"text": "x", "target": "zh"}, []))),
    ("JSON to /translate_file", 415, ("POST", "/translate_file", OK, None)),
    # routes and methods
    ("GET on a POST route", 405, ("GET", "/translate", None, None)),
    ("DELETE on a POST route", 405, ("DELETE", "/v1/chat/completions", None, None)),
    ("POST on a GET route", 405, ("POST", "/languages", b"{}", JSON)),
    ("an unknown route", 404, ("GET", "/admin", None, None)),
    ("an unknown OpenAI route", 404, ("POST", "/v1/embeddings", {"input": "x"}, None)),
]


def raw(server, data):
    resp = server.raw(data, read_timeout=10)
    return status_of(resp), resp.partition(b"\r\n\r\n")[2]


def slow_body(server):
    """Sends the headers and part of the body, then waits past the server's read timeout."""
    s = socket.create_connection((server.host, server.port), timeout=READ_TIMEOUT + 10)
    try:
        s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"q\": \"The ho")
        start = time.time()
        resp = read_response(s)
        c.check(time.time() - start < READ_TIMEOUT + 3, "the stalled body is given up after the read timeout")
        return status_of(resp), resp.partition(b"\r\n\r\n")[2]
    finally:
        s.close()


def run(server, request):
    if callable(request):
        return request(server)
    method, path, body, headers = request
    st, _, data = server.request(method, path, body, headers, timeout=30)
    return st, data


with Server(BUILD, "--read-timeout", str(READ_TIMEOUT), "--max-body", str(MAX_BODY)) as s:
    count_4xx = 0
    for name, expected, request in CASES:
        try:
            status, body = run(s, request)
        except OSError as e:
            status, body = 0, str(e).encode()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(request, tuple) and request[1].startswith("/v1/"):
            shape_ok = isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) and \
                isinstance(parsed["error"].get("message"), str) and "type" in parsed["error"]
        else:
            shape_ok = isinstance(parsed, dict) and isinstance(parsed.get("error"), str) and parsed["error"]
        c.check(status == expected and shape_ok, "%s: %d with a JSON error" % (name, expected),
                "got %d %r" % (status, body[:300]))
        alive = s.request("GET", "/health")[0] == 200
        c.check(alive, "  ...and the server still serves")
        count_4xx += 1

    # Requests that are fine but must be handled safely.
    st, _, r = s.json("POST", "/translate_file", *multipart({"source": "en", "target": "de"},
                                                           [("file", b"../../etc/passwd.txt", b"The house is big.\n")]))
    url = (r or {}).get("translatedFileUrl", "")
    c.check(st == 200 and url.endswith("/passwd.de.txt"), "an upload named ../../etc/passwd.txt is stored as passwd.de.txt", r)
    st, _, r = s.json("POST", "/translate_file", *multipart({"source": "en", "target": "de"},
                                                           [("file", b'a"b\x01c<d>.txt', b"The house is big.\n")]))
    url = (r or {}).get("translatedFileUrl", "")
    c.check(st == 200 and url.endswith("/a_b_c_d_.de.txt"), "quotes, control and angle characters leave file names", r)
    html = b"<p>The house is big.</p><script>alert(document.cookie)</script><img src=x onerror=alert(1)>"
    st, _, r = s.json("POST", "/translate_file", *multipart({"source": "en", "target": "de"}, [("file", b"x.html", html)]))
    path = r["translatedFileUrl"][r["translatedFileUrl"].index("/download_file/"):]
    st, hdrs, data = s.request("GET", path)
    c.check(b"<script>alert(document.cookie)</script>" in data and "attachment" in hdrs["content-disposition"] and
            "sandbox" in hdrs["content-security-policy"],
            "HTML with scripts: scripts stay as they were, and the download is a sandboxed attachment", hdrs)
    # A stalled request line gets no answer (the HTTP library closes it at the read timeout).
    sock = socket.create_connection((s.host, s.port), timeout=READ_TIMEOUT + 10)
    sock.sendall(b"POST /transl")
    start = time.time()
    c.check(sock.recv(100) == b"" and time.time() - start < READ_TIMEOUT + 3,
            "a stalled request line is closed after the read timeout")
    sock.close()
    c.check(s.request("GET", "/health")[0] == 200, "the server still serves after the catalogue")
    print("%d bad requests in the catalogue" % count_4xx)
    c.check(count_4xx >= 50, "the catalogue has at least 50 bad requests", count_4xx)
    c.check(s.proc.poll() is None, "the server process is alive")

c.finish()
