"""Every endpoint of `hymt serve` answering as documented (docs/API.md), with the demo model.

Usage: python3 tests/e2e/server_api.py BUILD_DIR"""

import json
import os
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from hymt_server import Checks, Server, build_dir, sse_events  # noqa: E402

BUILD = build_dir()
c = Checks("server API")


def multipart(fields, files):
    """A multipart/form-data body: fields {name: value}, files [(field, filename, bytes)]."""
    boundary = "hymt" + uuid.uuid4().hex
    parts = []
    for k, v in fields.items():
        parts.append(("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, k, v)).encode())
    for field, name, data in files:
        parts.append(("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                      "Content-Type: application/octet-stream\r\n\r\n" % (boundary, field, name)).encode() + data + b"\r\n")
    parts.append(("--%s--\r\n" % boundary).encode())
    return b"".join(parts), {"Content-Type": "multipart/form-data; boundary=" + boundary}


with Server(BUILD) as s:
    # ---- health, status, page, metrics ----
    st, _, body = s.json("GET", "/health")
    c.check(st == 200 and body == {"status": "ok"}, "GET /health is 200 {status: ok} when ready", body)
    st, _, status = s.json("GET", "/api/status")
    c.check(st == 200 and status["model"] == "hymt-demo" and status["mode"] == "cpu" and status["demo"],
            "GET /api/status names the model and the memory mode", status)
    c.check([l["code"] for l in status["languages"]] == ["en", "zh", "de"] and status["languages"][1]["native"] == "中文",
            "/api/status lists the model's languages with native names", status.get("languages"))
    st, hdrs, page = s.request("GET", "/")
    c.check(st == 200 and b"<title>hymt translate</title>" in page and hdrs["content-type"].startswith("text/html"),
            "GET / serves the page", st)
    c.check("default-src 'self'" in hdrs.get("content-security-policy", ""), "the page has a content security policy")
    for asset, kind in (("/app.js", "text/javascript"), ("/style.css", "text/css")):
        st, hdrs, _ = s.request("GET", asset)
        c.check(st == 200 and hdrs["content-type"].startswith(kind), "GET %s is %s" % (asset, kind), st)

    # ---- LibreTranslate ----
    st, _, langs = s.json("GET", "/languages")
    c.check(st == 200 and langs[0] == {"code": "en", "name": "English", "targets": ["zh", "de"]},
            "GET /languages lists code, name and targets", langs)
    st, _, settings = s.json("GET", "/frontend/settings")
    c.check(st == 200 and settings["charLimit"] == 5000 and settings["filesTranslation"] is True and
            ".srt" in settings["supportedFilesFormat"] and settings["keyRequired"] is False,
            "GET /frontend/settings", settings)

    st, hdrs, r = s.json("POST", "/translate", {"q": "The house is big.", "source": "en", "target": "zh"})
    c.check(st == 200 and r == {"translatedText": "这房子很大。"}, "POST /translate (JSON, one text) en→zh", r)
    c.check(hdrs.get("x-finish-reason") == "stop", "the finish reason is in X-Finish-Reason", hdrs)
    st, _, r = s.json("POST", "/translate", {"q": ["The house is big.", "Good morning."], "source": "en", "target": "zh"})
    c.check(st == 200 and isinstance(r["translatedText"], list) and r["translatedText"][0] == "这房子很大。",
            "POST /translate with a list answers a list", r)
    st, _, r = s.json("POST", "/translate", "q=The+house+is+big.&source=en&target=zh",
                      {"Content-Type": "application/x-www-form-urlencoded"})
    c.check(st == 200 and r == {"translatedText": "这房子很大。"}, "POST /translate form-encoded", r)
    form, hdrs = multipart({"q": "The house is big.", "source": "en", "target": "zh"}, [])
    st, _, r = s.json("POST", "/translate", form, hdrs)
    c.check(st == 200 and r == {"translatedText": "这房子很大。"}, "POST /translate as multipart form fields", r)
    st, _, r = s.json("POST", "/translate", {"q": "Das Haus ist sehr groß.", "source": "auto", "target": "en"})
    c.check(st == 200 and r["detectedLanguage"]["language"] == "de" and r["detectedLanguage"]["confidence"] > 50,
            "source auto reports detectedLanguage (confidence in percent)", r)
    st, _, r = s.json("POST", "/translate", {"q": ["Das Haus ist groß.", "The house is big."], "source": "auto",
                                             "target": "zh"})
    c.check(st == 200 and [d["language"] for d in r["detectedLanguage"]] == ["de", "en"],
            "auto detection is per text", r)
    st, _, r = s.json("POST", "/translate", {"q": "The house is big.", "source": "en", "target": "de", "alternatives": 2})
    c.check(st == 200 and isinstance(r.get("alternatives"), list) and len(r["alternatives"]) <= 2,
            "alternatives: a list of at most 2 other translations", r)
    html = '<p class="x">The house is <b>big</b>.</p><script>var a = "The house";</script>'
    st, _, r = s.json("POST", "/translate", {"q": html, "source": "en", "target": "de", "format": "html"})
    out = r.get("translatedText", "") if r else ""
    c.check(st == 200 and out.startswith('<p class="x">') and '<script>var a = "The house";</script>' in out and
            "<b>" in out, "format html keeps tags and leaves scripts untouched", out)

    st, _, r = s.json("POST", "/detect", {"q": "Das Haus ist sehr groß und schön."})
    c.check(st == 200 and r[0]["language"] == "de", "POST /detect (one text)", r)
    st, _, r = s.json("POST", "/detect", {"q": ["The house is big.", "这房子很大。"]})
    c.check(st == 200 and r[0][0]["language"] == "en" and r[1][0]["language"] == "zh", "POST /detect (a list)", r)

    docs = {
        "notes.txt": (b"The house is big.\nGood morning.\n", lambda t: t.count("\n") == 2),
        "notes.md": (b"# Title\n\nThe house is big.\n\n```\ncode stays\n```\n", lambda t: t.startswith("# ") and
                     "```\ncode stays\n```" in t),
        "page.html": (b"<html><body><h1>The house</h1><p>The house is big.</p></body></html>",
                      lambda t: t.startswith("<html><body><h1>") and t.endswith("</p></body></html>")),
        "film.srt": (b"1\n00:00:01,000 --> 00:00:02,000\nThe house is big.\n\n2\n00:00:03,000 --> 00:00:04,000\n"
                     b"Good morning.\n", lambda t: "00:00:01,000 --> 00:00:02,000" in t and t.startswith("1\n")),
    }
    for name, (data, keeps) in docs.items():
        form, hdrs = multipart({"source": "en", "target": "de"}, [("file", name, data)])
        st, _, r = s.json("POST", "/translate_file", form, hdrs)
        url = (r or {}).get("translatedFileUrl", "")
        c.check(st == 200 and "/download_file/" in url, "POST /translate_file " + name, r)
        path = url[url.index("/download_file/"):] if "/download_file/" in url else "/"
        st, hdrs, got = s.request("GET", path)
        text = got.decode("utf-8", "replace")
        stem, ext = name.rsplit(".", 1)
        c.check(st == 200 and "attachment" in hdrs.get("content-disposition", "") and
                ("%s.de.%s" % (stem, ext)) in hdrs.get("content-disposition", "") and keeps(text) and
                text != data.decode(), "the translated %s downloads, markup kept" % name, text)
        c.check("sandbox" in hdrs.get("content-security-policy", ""), "downloads are sandboxed (%s)" % name)
    st, _, _ = s.json("GET", "/download_file/" + "0" * 32 + "/x.txt")
    c.check(st == 404, "an unknown download is 404", st)

    # ---- native API ----
    st, _, r = s.json("POST", "/api/translate", {"text": "The house is big.", "source": "en", "target": "zh"})
    c.check(st == 200 and r["translations"] == ["这房子很大。"] and r["finish_reason"] == "stop" and
            r["usage"]["output_tokens"] > 0 and r["model"] == "hymt-demo", "POST /api/translate (JSON)", r)
    st, _, r = s.json("POST", "/api/translate", {"texts": ["The house is big.", "Good morning."], "source": "en",
                                                 "target": "zh", "glossary": {"house": "房子"},
                                                 "context": "We talk about a house."})
    c.check(st == 200 and len(r["translations"]) == 2, "glossary and context are accepted", r)
    st, _, r = s.json("POST", "/api/translate", {"text": "The house is big.", "source": "en", "target": "de",
                                                 "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 7})
    c.check(st == 200 and r["translations"][0], "sampling settings are accepted", r)
    st, _, r = s.json("POST", "/api/translate", {"text": "# Title\n\nThe house is big.\n", "source": "en",
                                                 "target": "de", "format": "markdown"})
    c.check(st == 200 and r["translations"][0].startswith("# "), "format markdown keeps the heading", r)
    st, hdrs, data = s.request("POST", "/api/translate", {"texts": ["The house is big.", "Good morning."],
                                                          "source": "en", "target": "zh", "stream": True})
    events = sse_events(data)
    names = [e[0] for e in events]
    c.check(st == 200 and hdrs["content-type"].startswith("text/event-stream"), "stream: text/event-stream", hdrs)
    c.check("partial" in names and names[-1] == "done", "stream: partial events, then done", names)
    done = json.loads(events[-1][1]) if events else {}
    c.check(done.get("translations", [None])[0] == "这房子很大。", "stream: the done event has the translations", done)
    partials = [json.loads(d) for n, d in events if n == "partial"]
    c.check(all(p["index"] in (0, 1) for p in partials) and
            any(p["text"] == "这房子很大。"[:len(p["text"])] and p["index"] == 0 for p in partials),
            "stream: partial texts grow toward the translation", partials[:4])

    # ---- OpenAI ----
    st, _, r = s.json("GET", "/v1/models")
    c.check(st == 200 and r["object"] == "list" and r["data"][0]["id"] == "hymt-demo", "GET /v1/models", r)
    prompt = "把下面的文本翻译成中文，不要额外解释。\n\nThe house is big."
    st, _, r = s.json("POST", "/v1/chat/completions", {"model": "hymt-demo", "messages": [{"role": "user", "content": prompt}]})
    c.check(st == 200 and r["object"] == "chat.completion" and r["choices"][0]["message"]["content"] == "这房子很大。" and
            r["choices"][0]["finish_reason"] == "stop", "chat completion with the model's prompt", r)
    c.check(r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] and
            r["usage"]["completion_tokens"] > 0, "usage counts add up", r.get("usage"))
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], "n": 2,
                                                       "temperature": 0.8, "seed": 3})
    c.check(st == 200 and [ch["index"] for ch in r["choices"]] == [0, 1], "n=2 gives two choices", r)
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], "max_tokens": 1})
    c.check(st == 200 and r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 1,
            "max_tokens 1 stops with finish_reason length", r)
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], "stop": ["很大"]})
    c.check(st == 200 and r["choices"][0]["message"]["content"] == "这房子" and r["choices"][0]["finish_reason"] == "stop",
            "a stop string cuts the answer before it", r)
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": [
        {"role": "system", "content": "You translate."},
        {"role": "user", "content": prompt}, {"role": "assistant", "content": "这房子很大。"},
        {"role": "user", "content": "把下面的文本翻译成中文，不要额外解释。\n\nGood morning."}],
        "top_k": 1, "top_p": 0.5})
    c.check(st == 200 and r["choices"][0]["message"]["content"], "a multi-turn conversation with a system message", r)
    st, hdrs, data = s.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                                "stream": True, "stream_options": {"include_usage": True}})
    events = [d for _, d in sse_events(data)]
    chunks = [json.loads(d) for d in events[:-1]]
    text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks if ch["choices"])
    c.check(st == 200 and events and events[-1] == "[DONE]", "stream ends with data: [DONE]", events[-3:])
    c.check(text == "这房子很大。" and chunks[0]["choices"][0]["delta"].get("role") == "assistant" and
            chunks[0]["object"] == "chat.completion.chunk", "stream deltas add up to the answer", text)
    c.check("usage" in chunks[-1] and chunks[-1]["choices"] == [], "include_usage adds a usage chunk", chunks[-1])
    finals = [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]]
    c.check(finals[-1] == "stop" and all(f is None for f in finals[:-1]), "only the last delta has a finish reason",
            finals)

    # ---- metrics ----
    m = s.metrics()
    c.check(m.get('hymt_http_requests_total{code="200",route="/translate"}', 0) >= 5, "metrics count requests by route and code")
    for name in ("hymt_queue_depth", "hymt_running_sequences", "hymt_tokens_per_second", "hymt_kv_pages_used",
                 "hymt_kv_pages_total", "hymt_kv_bytes_total", "hymt_requests_in_flight", "hymt_process_resident_bytes",
                 'hymt_memory_bytes{device="cpu",kind="weights"}', "hymt_generated_tokens_total"):
        c.check(name in m, "metric " + name)
    c.check(m["hymt_kv_pages_used"] == 0 and m["hymt_kv_pages_total"] > 0, "KV pages are all back when idle", m["hymt_kv_pages_used"])

# ---- options: API keys and rate limits, CORS, in-flight bound, deadlines, cache ----
with Server(BUILD, "--api-key", "k-one", "--api-key", "k-two", "--rate-limit", "4") as s:
    body = {"q": "The house is big.", "source": "en", "target": "zh"}
    st, _, r = s.json("POST", "/translate", body)
    c.check(st == 401 and "API key" in r["error"], "no key: 401", r)
    st, _, r = s.json("POST", "/translate", body, {"Authorization": "Bearer wrong"})
    c.check(st == 403 and r == {"error": "invalid API key"}, "a wrong key: 403", r)
    st, _, r = s.json("POST", "/translate", body, {"Authorization": "Bearer k-one"})
    c.check(st == 200, "a Bearer key: 200", r)
    st, _, r = s.json("POST", "/translate", dict(body, api_key="k-two"))
    c.check(st == 200, "the api_key field: 200", r)
    st, _, r = s.json("POST", "/translate?api_key=k-two", body)
    c.check(st == 200, "the api_key query parameter: 200", r)
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    c.check(st == 401 and r["error"]["type"] == "authentication_error", "OpenAI routes answer 401 in OpenAI's shape", r)
    st, _, _ = s.json("GET", "/languages")
    c.check(st == 200, "GET routes need no key")
    st, _, settings = s.json("GET", "/frontend/settings")
    c.check(settings["keyRequired"] is True, "/frontend/settings says a key is required")
    codes = [s.json("POST", "/translate", body, {"Authorization": "Bearer k-one"})[0] for _ in range(5)]
    st, hdrs, r = s.json("POST", "/translate", body, {"Authorization": "Bearer k-one"})
    c.check(st == 429 and int(hdrs.get("retry-after", "0")) >= 1 and "rate limit" in r["error"],
            "past 4 requests a minute: 429 with Retry-After", (codes, st, hdrs, r))
    st, _, _ = s.json("POST", "/translate", body, {"Authorization": "Bearer k-two"})
    c.check(st == 200, "the rate limit is per key")

with Server(BUILD, "--cors") as s:
    st, hdrs, _ = s.request("OPTIONS", "/translate", headers={"Origin": "http://example.org",
                                                               "Access-Control-Request-Method": "POST"})
    c.check(st == 204 and hdrs.get("access-control-allow-origin") == "*" and
            "POST" in hdrs.get("access-control-allow-methods", ""), "CORS preflight: 204 with the allowed methods", hdrs)
    st, hdrs, _ = s.request("GET", "/languages", headers={"Origin": "http://example.org"})
    c.check(hdrs.get("access-control-allow-origin") == "*", "--cors adds Access-Control-Allow-Origin")

long_texts = ["The house is big and the garden is very beautiful in the summer. " * 10] * 24
with Server(BUILD, "--max-inflight", "1") as s:
    results = {}

    def hold():
        results["long"] = s.json("POST", "/translate", {"q": long_texts, "source": "en", "target": "de"})[0]

    t = threading.Thread(target=hold)
    t.start()
    for _ in range(200):
        if s.metrics().get("hymt_requests_in_flight", 0) >= 1:
            break
        time.sleep(0.02)
    st, hdrs, r = s.json("POST", "/translate", {"q": "Hi.", "source": "en", "target": "de"})
    c.check(st == 503 and hdrs.get("retry-after") == "1" and "busy" in r["error"],
            "past --max-inflight: 503 with Retry-After", (st, hdrs, r))
    t.join()
    c.check(results.get("long") == 200, "the request in flight completes", results)
    st, _, r = s.json("POST", "/translate", {"q": long_texts, "source": "en", "target": "de", "timeout": 0.2})
    c.check(st == 504 and "deadline" in r["error"], "a request past its timeout: 504", (st, r))
    c.check(s.metrics()["hymt_kv_pages_used"] == 0, "a request past its deadline gives its KV pages back")

with tempfile.TemporaryDirectory() as tmp:
    cache = os.path.join(tmp, "cache.sqlite")
    body = {"texts": ["The house is big.", "Good morning."], "source": "en", "target": "zh"}
    with Server(BUILD, "--cache", cache, "--cache-ttl", "1d") as s:
        st, _, first = s.json("POST", "/api/translate", body)
        st2, _, second = s.json("POST", "/api/translate", body)
        c.check(st == 200 and first["usage"]["cache_hits"] == 0, "cache: the first request misses", first)
        c.check(st2 == 200 and second["usage"]["cache_hits"] == 2 and second["translations"] == first["translations"]
                and second["usage"]["output_tokens"] == 0, "cache: the second is answered from the cache", second)
    with Server(BUILD, "--cache", cache) as s:
        st, _, third = s.json("POST", "/api/translate", body)
        c.check(third["usage"]["cache_hits"] == 2, "cache: entries survive a restart", third)
        st, _, r = s.json("POST", "/api/translate", dict(body, temperature=0.9))
        c.check(r["usage"]["cache_hits"] == 0, "cache: sampled translations bypass the cache", r)

c.finish()
