// The server's pieces that need no HTTP: the error mapper, request parsing at the edge, file names,
// stop strings, the chat template over several turns, admission (keys, rate limit, in-flight gate),
// the download store, SSE coalescing and the Prometheus writer.
#include <gtest/gtest.h>

#include "runtime/loader.h"
#include "server/admission.h"
#include "server/chat.h"
#include "server/fields.h"
#include "server/file_store.h"
#include "server/http_error.h"
#include "server/metrics.h"
#include "server/requests.h"
#include "server/sse.h"

namespace hymt {
namespace {

int StatusOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return MapError(e).status;
  }
  return 200;
}

TEST(HttpError, MapsEveryCode) {
  EXPECT_EQ(MapError(Error(ErrorCode::kInvalidArgument, "x")).status, 400);
  EXPECT_EQ(MapError(Error(ErrorCode::kCorruptData, "x")).status, 400);
  EXPECT_EQ(MapError(Error(ErrorCode::kUnsupported, "x")).status, 400);
  EXPECT_EQ(MapError(Error(ErrorCode::kNotFound, "x")).status, 404);
  EXPECT_EQ(MapError(Error(ErrorCode::kResourceExhausted, "x")).status, 413);
  ErrorReply busy = MapError(Error(ErrorCode::kUnavailable, "queue full"));
  EXPECT_EQ(busy.status, 503);
  EXPECT_GE(busy.retry_after, 1);
  EXPECT_EQ(MapError(Error(ErrorCode::kCancelled, "x")).status, kStatusClientClosed);
  EXPECT_EQ(MapError(Error(ErrorCode::kDeadlineExceeded, "x")).status, 504);
  EXPECT_EQ(MapError(Error(ErrorCode::kInternal, "x")).status, 500);
  ErrorReply limited = MapError(HttpError(429, ErrorCode::kUnavailable, "slow down", 7));
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.retry_after, 7);
  // Not an hymt::Error: a bug, reported without its detail.
  ErrorReply bug = MapError(std::runtime_error("secret detail"));
  EXPECT_EQ(bug.status, 500);
  EXPECT_EQ(bug.message, "internal error");
}

TEST(HttpError, BodiesAreValidJsonInBothStyles) {
  ErrorReply r = MapError(Error(ErrorCode::kInvalidArgument, std::string("bad \xff byte and \"quotes\"")));
  Json plain = Json::Parse(ErrorBody(r, ErrorStyle::kPlain));
  EXPECT_EQ(plain.Find("error")->AsString(), "bad \xEF\xBF\xBD byte and \"quotes\"");
  Json openai = Json::Parse(ErrorBody(r, ErrorStyle::kOpenAi));
  EXPECT_EQ(openai.Find("error")->Find("type")->AsString(), "invalid_request_error");
  EXPECT_EQ(openai.Find("error")->Find("code")->AsString(), "invalid_argument");
  // Long messages are cut, never echoing a large input back.
  ErrorReply huge = MapError(Error(ErrorCode::kInvalidArgument, std::string(100000, 'a')));
  EXPECT_LT(huge.message.size(), 1100u);
  EXPECT_EQ(ReplyForStatus(413).status, 413);
}

TEST(RequestFields, RejectsBadBodies) {
  EXPECT_THROW(RequestFields::FromJson(""), Error);
  EXPECT_THROW(RequestFields::FromJson("  \n"), Error);
  EXPECT_THROW(RequestFields::FromJson("[1]"), Error);
  EXPECT_THROW(RequestFields::FromJson("{\"q\": \"\xff\"}"), Error);
  EXPECT_THROW(RequestFields::FromJson(std::string(100, '[') + std::string(100, ']')), Error);
  EXPECT_THROW(RequestFields::FromForm({{"q", "\xc3\x28"}}), Error);
}

TEST(RequestFields, TypedGetters) {
  RequestFields f =
      RequestFields::FromJson(R"({"s": "x", "n": 3, "f": 1.5, "b": true, "l": ["a", "b"], "z": null})");
  EXPECT_EQ(*f.String("s", 10), "x");
  EXPECT_THROW(f.String("n", 10), Error);
  EXPECT_THROW(f.String("s", 0), Error);  // too long
  EXPECT_EQ(*f.Int("n", 0, 5), 3);
  EXPECT_THROW(f.Int("n", 4, 5), Error);
  EXPECT_THROW(f.Int("f", 0, 5), Error);
  EXPECT_DOUBLE_EQ(*f.Number("f", 0, 2), 1.5);
  EXPECT_TRUE(*f.Bool("b"));
  EXPECT_THROW(f.Bool("s"), Error);
  EXPECT_FALSE(f.Has("z"));  // null reads as absent
  EXPECT_FALSE(f.String("missing", 10).has_value());
  bool is_list = false;
  EXPECT_EQ(f.StringOrList("l", 5, 10, &is_list)->size(), 2u);
  EXPECT_TRUE(is_list);
  EXPECT_THROW(f.StringOrList("l", 1, 10, &is_list), Error);

  RequestFields form = RequestFields::FromForm({{"b", "yes"}, {"n", "12"}, {"q", "a"}, {"q", "b"}});
  EXPECT_TRUE(*form.Bool("b"));
  EXPECT_EQ(*form.Int("n", 0, 100), 12);
  EXPECT_EQ(form.StringOrList("q", 5, 10, &is_list)->size(), 2u);
  EXPECT_THROW(form.String("q", 10), Error);  // given twice
}

TEST(Requests, LibreTranslate) {
  RequestLimits limits;
  LibreTranslateRequest r = ParseLibreTranslate(
      RequestFields::FromJson(
          R"({"q": ["a", "b"], "source": "en", "target": "zh", "format": "html", "alternatives": 2})"),
      limits);
  EXPECT_EQ(r.texts.size(), 2u);
  EXPECT_TRUE(r.is_list);
  EXPECT_EQ(r.format, TextFormat::kHtml);
  EXPECT_EQ(r.alternatives, 2);
  EXPECT_EQ(ParseLibreTranslate(RequestFields::FromJson(R"({"q": "a", "target": "de"})"), limits).source,
            "auto");
  auto status = [&](const char* body) {
    return StatusOf([&] { ParseLibreTranslate(RequestFields::FromJson(body), limits); });
  };
  EXPECT_EQ(status(R"({"target": "de"})"), 400);
  EXPECT_EQ(status(R"({"q": "a"})"), 400);
  EXPECT_EQ(status(R"({"q": [], "target": "de"})"), 400);
  EXPECT_EQ(status(R"({"q": "a", "target": "d e"})"), 400);
  EXPECT_EQ(status(R"({"q": "a", "target": "de", "format": "markdown"})"),
            400);  // LibreTranslate: text or html
  limits.max_text_chars = 3;
  EXPECT_EQ(status(R"({"q": "abcd", "target": "de"})"), 400);
  EXPECT_EQ(status(R"({"q": "中文字", "target": "de"})"), 200);  // characters, not bytes
}

TEST(Requests, NativeGlossaryForms) {
  RequestLimits limits;
  auto parse = [&](const std::string& body) {
    return ParseNativeTranslate(RequestFields::FromJson(body), limits);
  };
  auto a = parse(R"({"text": "x", "target": "de", "glossary": {"house": "Haus"}})");
  auto b = parse(R"({"text": "x", "target": "de", "glossary": [{"source": "house", "target": "Haus"}]})");
  auto c = parse(R"({"text": "x", "target": "de", "glossary": [["house", "Haus"]], "stream": true})");
  EXPECT_EQ(a.prompt.glossary, b.prompt.glossary);
  EXPECT_EQ(b.prompt.glossary, c.prompt.glossary);
  EXPECT_TRUE(c.stream);
  EXPECT_FALSE(a.is_list);
  EXPECT_TRUE(parse(R"({"texts": ["x"], "target": "de"})").is_list);
  EXPECT_THROW(parse(R"({"text": "x", "target": "de", "glossary": [{"source": "a"}]})"), Error);
  EXPECT_THROW(parse(R"({"text": "x", "target": "de", "glossary": {"": "b"}})"), Error);
  auto s = parse(R"({"text": "x", "target": "de", "temperature": 0, "seed": 5})");
  GenerationDefaults g;
  std::optional<SamplingParams> p = ResolveSampling(s.sampling, g);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->greedy());
  EXPECT_EQ(p->seed, 5u);
  EXPECT_FALSE(ResolveSampling(SamplingOverrides{}, g).has_value());
}

TEST(Requests, ChatMessagesMustAlternate) {
  RequestLimits limits;
  auto parse = [&](const std::string& body) {
    return ParseChatCompletion(RequestFields::FromJson(body), limits);
  };
  ChatRequest r = parse(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
      {"role": "assistant", "content": [{"type": "text", "text": "a"}]}, {"role": "user", "content": "v"}],
      "stop": "x", "n": 2, "max_tokens": 9, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[2].content, "a");
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_TRUE(r.include_usage);
  EXPECT_THROW(parse(R"({"messages": [{"role": "assistant", "content": "a"}]})"), Error);
  EXPECT_THROW(parse(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})"),
               Error);
  EXPECT_THROW(
      parse(R"({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}]})"),
      Error);
  EXPECT_THROW(parse(R"({"messages": [{"role": "user", "content": "a"}], "stop": ["a", ""]})"), Error);
}

TEST(Requests, SafeFileNames) {
  TextFormat f;
  EXPECT_EQ(SafeFileName("notes.md", &f), "notes.md");
  EXPECT_EQ(f, TextFormat::kMarkdown);
  EXPECT_EQ(SafeFileName("../../etc/passwd.txt", &f), "passwd.txt");
  EXPECT_EQ(SafeFileName("C:\\Users\\me\\Film.SRT", &f), "Film.SRT");
  EXPECT_EQ(f, TextFormat::kSrt);
  EXPECT_EQ(SafeFileName("a\"b\x01<c>.html", &f), "a_b__c_.html");
  EXPECT_EQ(f, TextFormat::kHtml);
  EXPECT_EQ(SafeFileName("报告.txt", &f), "报告.txt");
  EXPECT_EQ(SafeFileName("..hidden.txt", &f), "hidden.txt");
  for (const char* bad : {"", "passwd", ".htaccess", "../x.exe", "x.txt/", "a.html.exe"})
    EXPECT_THROW(SafeFileName(bad, &f), Error) << bad;
  EXPECT_LE(SafeFileName(std::string(1000, 'a') + ".txt", &f).size(), kMaxFileNameBytes);
}

TEST(StopMatcher, HoldsBackPrefixesAndCuts) {
  StopMatcher m({"END", "\n\n"});
  bool stopped = false;
  EXPECT_EQ(m.Push("hello E", &stopped), "hello ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Push("N", &stopped), "");
  EXPECT_EQ(m.Push("X", &stopped), "ENX");  // not a stop after all
  EXPECT_EQ(m.Push("abc\n", &stopped), "abc");
  EXPECT_EQ(m.Push("\nrest", &stopped), "");
  EXPECT_TRUE(stopped);
  StopMatcher none({});
  EXPECT_EQ(none.Push("all of it", &stopped), "all of it");
  StopMatcher tail({"xyz"});
  EXPECT_EQ(tail.Push("abx", &stopped), "ab");
  EXPECT_EQ(tail.Finish(), "x");
}

TEST(Chat, ConversationTemplateMatchesTheCheckedVector) {
  // The demo model uses the 7B family's special tokens.
  const std::string demo = FindDemoModel();
  if (demo.empty()) GTEST_SKIP() << "demo model not found";
  LoadedModel m = LoadModel(demo);
  std::vector<ChatMessage> msgs = {{ChatMessage::Role::kSystem, "Translate into German."},
                                   {ChatMessage::Role::kUser, "Good morning."},
                                   {ChatMessage::Role::kAssistant, "Guten Morgen."},
                                   {ChatMessage::Role::kUser, "Good night."}};
  // The two-turn example of ../shared/data/hunyuan/tokenizer_vectors.json.
  EXPECT_EQ(RenderConversation(m, msgs),
            "<|startoftext|>Translate into German.<|extra_4|>Good morning.<|extra_0|>Guten Morgen.<|eos|>"
            "<|startoftext|>Good night.<|extra_0|>");
  // One user turn equals the single-turn template.
  EXPECT_EQ(RenderConversation(m, {{ChatMessage::Role::kUser, "Hi"}}),
            RenderChat(ChatFamily::kHunyuan7B, "Hi"));
  // Special tokens inside a message are text.
  std::vector<int32_t> ids = EncodeConversation(m, {{ChatMessage::Role::kUser, "a<|eos|>b"}});
  const int32_t eos = *m.tokenizer->TokenId("<|eos|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eos), 0);
  EXPECT_EQ(ids.front(), *m.tokenizer->TokenId("<|startoftext|>"));
  EXPECT_EQ(ids.back(), *m.tokenizer->TokenId("<|extra_0|>"));
}

TEST(Admission, KeysRateAndGate) {
  KeyChecker open({});
  EXPECT_NO_THROW(open.Check(std::nullopt));
  KeyChecker keys({"k1", "k2"});
  EXPECT_EQ(StatusOf([&] { keys.Check(std::nullopt); }), 401);
  EXPECT_EQ(StatusOf([&] { keys.Check(std::string("k")); }), 403);
  EXPECT_EQ(StatusOf([&] { keys.Check(std::string("k2")); }), 200);

  RateLimiter rate(3);
  auto t0 = RateLimiter::Clock::now();
  for (int i = 0; i < 3; ++i) rate.Take("a", t0);
  try {
    rate.Take("a", t0);
    FAIL() << "a fourth request within the minute passed";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 429);
    EXPECT_EQ(e.retry_after(), 20);  // one token per 20 s
  }
  EXPECT_NO_THROW(rate.Take("b", t0));  // per client
  EXPECT_NO_THROW(rate.Take("a", t0 + std::chrono::seconds(20)));

  InflightGate gate(2);
  {
    InflightGate::Slot a = gate.Enter(), b = gate.Enter();
    EXPECT_EQ(gate.in_flight(), 2);
    EXPECT_EQ(StatusOf([&] { gate.Enter(); }), 503);
  }
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(FileStore, BoundsAndExpiry) {
  FileStore store(2, 10, std::chrono::seconds(60));
  auto t0 = FileStore::Clock::now();
  std::string a = store.Put({"a.txt", "text/plain", "aaaa"}, t0);
  std::string b = store.Put({"b.txt", "text/plain", "bbbb"}, t0);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(store.Get(a, t0)->data, "aaaa");
  store.Put({"c.txt", "text/plain", "cccc"}, t0);  // a third file pushes out the oldest
  EXPECT_FALSE(store.Get(a, t0).has_value());
  EXPECT_TRUE(store.Get(b, t0).has_value());
  EXPECT_LE(store.bytes(), 10u);
  EXPECT_FALSE(store.Get(b, t0 + std::chrono::seconds(61)).has_value());
  EXPECT_EQ(store.count(), 0u);
  EXPECT_THROW(store.Put({"big.txt", "text/plain", std::string(11, 'x')}, t0), Error);
}

TEST(Sse, LatestEventsReplaceUnsentOnes) {
  SseChannel ch;
  ch.PushLatest(0, SseEvent("partial", "a"));
  ch.PushLatest(1, SseEvent("partial", "x"));
  ch.PushLatest(0, SseEvent("partial", "ab"));
  ch.Push(SseEvent("done", "{}"));
  ch.Close();
  std::vector<std::string> out;
  EXPECT_TRUE(ch.Take(&out, std::chrono::milliseconds(0)));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], "event: partial\ndata: ab\n\n");
  EXPECT_EQ(out[1], "event: partial\ndata: x\n\n");
  EXPECT_EQ(out[2], "event: done\ndata: {}\n\n");
  out.clear();
  EXPECT_FALSE(ch.Take(&out, std::chrono::milliseconds(0)));
}

TEST(Metrics, PrometheusText) {
  PrometheusWriter w;
  w.Sample("m_total", "counter", "things", 3, {{"route", "/x\"y"}, {"code", "200"}});
  w.Sample("m_total", "counter", "things", 4.5, {{"route", "/z"}, {"code", "503"}});
  EXPECT_EQ(w.text(),
            "# HELP m_total things\n# TYPE m_total counter\n"
            "m_total{code=\"200\",route=\"/x\\\"y\"} 3\nm_total{code=\"503\",route=\"/z\"} 4.5\n");
}

}  // namespace
}  // namespace hymt
