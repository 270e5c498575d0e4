// The server's life cycle (start, background load, shutdown), the request wrapper that maps every
// error, and the routes that need no model work (health, metrics, status, the page, settings).
// The translation routes are in routes_translate.cc, the OpenAI ones in routes_openai.cc.
#include "server/server.h"

#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "core/json.h"
#include "core/logging.h"
#include "server/http_util.h"
#include "server/sse.h"
#include "server/web_assets.h"

namespace hymt {
namespace {

using Clock = std::chrono::steady_clock;

// Keep-alive connections idle longer than this are closed (each holds an HTTP thread meanwhile).
constexpr time_t kKeepAliveSeconds = 5;
// A client that does not take response bytes for this long is dropped.
constexpr time_t kWriteTimeoutSeconds = 10;
// HTTP threads beyond max_inflight, for quick requests (health, metrics, the page, refusals).
constexpr int kQuickRequestThreads = 16;
// Retry-After while the model loads or the server stops.
constexpr int kLoadingRetryAfterSeconds = 5;
// Request bodies logged with --log-text are cut to this size.
constexpr size_t kMaxLoggedBodyBytes = 2000;

// Set by Handle() and read by the access logger on the same HTTP thread (cpp-httplib runs a request's
// handler and its logger on the thread that owns the connection).
thread_local const char* t_route = nullptr;
thread_local Clock::time_point t_start;

const char* ContentTypeFor(const std::string& name) {
  if (EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (EndsWith(name, ".css")) return "text/css; charset=utf-8";
  if (EndsWith(name, ".svg")) return "image/svg+xml";
  if (EndsWith(name, ".png")) return "image/png";
  return "application/octet-stream";
}

uint64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  if (!(in >> pages >> resident)) return 0;
  return resident * 4096;
}

}  // namespace

// Registers a cancel flag so that Shutdown can cancel the request; unregisters on destruction.
class Server::ActiveFlag {
 public:
  ActiveFlag(Server* server, std::shared_ptr<std::atomic<bool>> flag)
      : server_(server), flag_(std::move(flag)) {
    std::lock_guard<std::mutex> lock(server_->flags_mu_);
    server_->flags_.insert(flag_);
    if (server_->cancelling_all_) flag_->store(true);
  }
  ~ActiveFlag() {
    std::lock_guard<std::mutex> lock(server_->flags_mu_);
    server_->flags_.erase(flag_);
  }
  ActiveFlag(const ActiveFlag&) = delete;
  ActiveFlag& operator=(const ActiveFlag&) = delete;

 private:
  Server* server_;
  std::shared_ptr<std::atomic<bool>> flag_;
};

struct Server::Call {
  std::shared_ptr<std::atomic<bool>> cancelled;
  std::unique_ptr<ActiveFlag> active;
  ConnectionWatcher::Watch watch;
};

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      keys_(options_.api_keys),
      rate_(options_.rate_limit_per_minute),
      gate_(options_.max_inflight),
      files_(options_.download_max_files, options_.download_max_bytes, options_.download_ttl) {
  if (options_.max_inflight < 1) Fail(ErrorCode::kInvalidArgument, "--max-inflight must be at least 1");
  if (options_.http_threads < 0) Fail(ErrorCode::kInvalidArgument, "--http-threads must not be negative");
  if (options_.port < 0 || options_.port > 65535)
    Fail(ErrorCode::kInvalidArgument, "--port must be 0..65535");
  started_ = Clock::now();
  started_unix_ = static_cast<int64_t>(std::time(nullptr));
}

Server::~Server() {
  Shutdown(std::chrono::milliseconds(0));
}

std::string Server::load_error() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return load_error_;
}

void Server::Start() {
  http_ = std::make_unique<httplib::Server>();
  const size_t threads = options_.http_threads > 0
                             ? static_cast<size_t>(options_.http_threads)
                             : static_cast<size_t>(options_.max_inflight + kQuickRequestThreads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_timeout(kKeepAliveSeconds);
  http_->set_read_timeout(options_.read_timeout_seconds, 0);
  http_->set_write_timeout(kWriteTimeoutSeconds, 0);
  httplib::Headers defaults = {{"X-Content-Type-Options", "nosniff"}};
  if (!options_.cors_origin.empty()) {
    defaults.emplace("Access-Control-Allow-Origin", options_.cors_origin);
    if (options_.cors_origin != "*") defaults.emplace("Vary", "Origin");
  }
  http_->set_default_headers(defaults);
  Routes();

  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) Fail(ErrorCode::kUnavailable, "cannot listen on ", options_.host, " (any port)");
  } else {
    if (!http_->bind_to_port(options_.host, options_.port))
      Fail(ErrorCode::kUnavailable, "cannot listen on ", options_.host, ":", options_.port,
           " (in use, or not an address of this machine)");
    port_ = options_.port;
  }
  listen_thread_ = std::thread([this] { http_->listen_after_bind(); });
  load_thread_ = std::thread([this] { Load(); });
}

void Server::Load() {
  try {
    auto loaded = std::make_shared<Loaded>();
    if (!options_.cache_path.empty()) {
      TranslationCacheOptions co;
      co.path = options_.cache_path;
      co.ttl_seconds = options_.cache_ttl_seconds;
      loaded->cache = TranslationCache::Open(co);
    }
    loaded->session = Session::Open(options_.session);
    loaded->translator = std::make_unique<Translator>(loaded->session->model(), loaded->session->engine(),
                                                      CreateSentenceSegmenter(), CreateLanguageDetector());
    if (!options_.prompt_style.empty()) {
      PromptStyle style;
      if (!ParsePromptStyle(options_.prompt_style, &style))
        Fail(ErrorCode::kInvalidArgument, "--prompt-style must be hunyuan-mt, hy-mt1.5 or hy-mt2");
      loaded->translator->set_prompt_style(style);
    }
    const LoadedModel& model = loaded->session->model();
    loaded->context.translator = loaded->translator.get();
    loaded->context.cache = loaded->cache.get();
    loaded->context.model_id = ModelIdentity(model, options_.session.weight_type);
    loaded->context.model_greedy = !model.generation.do_sample;
    const Plan& plan = loaded->session->plan();
    HYMT_LOG_INFO("model ", loaded->session->model().name, " ready in ",
                  std::chrono::duration<double>(Clock::now() - started_).count(), " s (memory mode ",
                  plan.mode, ", ", plan.max_seqs, " sequences, ", plan.kv_pages * plan.page_size,
                  " KV tokens)");
    std::lock_guard<std::mutex> lock(state_mu_);
    loaded_ = std::move(loaded);
    State expected = State::kLoading;
    state_.compare_exchange_strong(expected, State::kReady);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(state_mu_);
    load_error_ = e.what();
    State expected = State::kLoading;
    state_.compare_exchange_strong(expected, State::kFailed);
  }
}

void Server::Shutdown(std::chrono::milliseconds grace) {
  std::call_once(shutdown_once_, [&] {
    state_ = State::kStopping;
    if (http_) http_->stop();  // no new connections; idle keep-alive connections close
    // Running requests may finish within the grace period.
    const auto until = Clock::now() + grace;
    while (gate_.in_flight() > 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
      std::lock_guard<std::mutex> lock(flags_mu_);
      cancelling_all_ = true;
      for (const auto& f : flags_) f->store(true);
    }
    if (listen_thread_.joinable()) listen_thread_.join();  // returns when every HTTP thread is done
    if (load_thread_.joinable()) load_thread_.join();
    std::shared_ptr<Loaded> loaded;
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      loaded = loaded_;
    }
    if (loaded) loaded->session->engine().Shutdown(std::chrono::milliseconds(0));
  });
}

std::shared_ptr<Server::Loaded> Server::RequireLoaded() const {
  switch (state_.load()) {
    case State::kReady:
      break;
    case State::kLoading:
      throw HttpError(503, ErrorCode::kUnavailable, "the model is still loading", kLoadingRetryAfterSeconds);
    case State::kFailed:
      throw HttpError(503, ErrorCode::kUnavailable, "the model failed to load");
    case State::kStopping:
      throw HttpError(503, ErrorCode::kUnavailable, "the server is shutting down", kLoadingRetryAfterSeconds);
  }
  std::lock_guard<std::mutex> lock(state_mu_);
  return loaded_;
}

void Server::Admit(const httplib::Request& req, const std::optional<std::string>& body_key) {
  std::optional<std::string> key = RequestApiKey(req, body_key);
  keys_.Check(key);
  rate_.Take(key ? "key:" + *key : "addr:" + req.remote_addr);
}

std::chrono::steady_clock::time_point Server::Deadline(const std::optional<double>& seconds) const {
  const double s = seconds.value_or(options_.default_timeout_seconds);
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

void Server::WriteError(httplib::Response& res, const ErrorReply& reply, ErrorStyle style) const {
  res.status = reply.status;
  if (reply.retry_after > 0) res.set_header("Retry-After", std::to_string(reply.retry_after));
  res.set_content(ErrorBody(reply, style), "application/json");
}

void Server::Handle(const char* route, ErrorStyle style, const httplib::Request& req, httplib::Response& res,
                    const std::function<void(Call&)>& fn) {
  t_route = route;
  Call call;
  try {
    fn(call);
  } catch (...) {
    ErrorReply reply = ReplyFor(std::current_exception());
    WriteError(res, reply, style);
  }
}

ErrorReply Server::ReplyFor(std::exception_ptr e) {
  ErrorReply reply = MapError(std::move(e));
  if (reply.code == ErrorCode::kCancelled) {
    if (cancelling_all_) {
      reply = MapError(HttpError(503, ErrorCode::kUnavailable, "cancelled: the server is shutting down"));
    } else {
      disconnects_.fetch_add(1);
    }
  }
  return reply;
}

std::shared_ptr<std::atomic<bool>> Server::WatchClient(const httplib::Request& req, Call& call) {
  call.cancelled = std::make_shared<std::atomic<bool>>(false);
  call.active = std::make_unique<ActiveFlag>(this, call.cancelled);
  call.watch = watcher_.Add(
      ConnectionAddress{req.remote_addr, req.remote_port, req.local_addr, req.local_port}, call.cancelled);
  return call.cancelled;
}

void Server::AccessLog(const httplib::Request& req, const httplib::Response& res) {
  const char* route = t_route ? t_route : "other";
  const double seconds = t_route ? std::chrono::duration<double>(Clock::now() - t_start).count() : 0.0;
  t_route = nullptr;
  counters_.Record(route, res.status, seconds);
  if (CurrentLogLevel() > LogLevel::kInfo) return;
  std::string line = StrCat(req.method, " ", route, " ", res.status, " ",
                            static_cast<int64_t>(seconds * 1000), " ms, ", req.body.size(), " bytes in");
  if (options_.log_text && !req.body.empty()) {
    std::string body = req.body.substr(0, kMaxLoggedBodyBytes);
    for (char& c : body)
      if (c == '\n' || c == '\r') c = ' ';
    line += StrCat(", body: ", body);
  }
  HYMT_LOG_INFO(line);
}

void Server::Routes() {
  httplib::Server& s = *http_;
  using Req = httplib::Request;
  using Res = httplib::Response;
  s.set_pre_routing_handler([](const Req&, Res&) {
    t_start = Clock::now();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_logger([this](const Req& req, const Res& res) { AccessLog(req, res); });
  // Statuses the library produces itself (no route, body too large, malformed request) get a JSON body
  // in the style of the API that was called.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const Req& req, Res& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ErrorReply reply = ReplyForStatus(res.status);
    res.set_content(ErrorBody(reply, StartsWith(req.path, "/v1/") ? ErrorStyle::kOpenAi : ErrorStyle::kPlain),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const Req& req, Res& res, std::exception_ptr e) {
    ErrorReply reply = MapError(std::move(e));
    res.status = reply.status;
    res.set_content(ErrorBody(reply, StartsWith(req.path, "/v1/") ? ErrorStyle::kOpenAi : ErrorStyle::kPlain),
                    "application/json");
  });

  const ErrorStyle plain = ErrorStyle::kPlain, openai = ErrorStyle::kOpenAi;
  auto get = [&](const char* pattern, const char* route, ErrorStyle style,
                 std::function<void(const Req&, Res&, Call&)> fn) {
    s.Get(pattern, [this, route, style, fn](const Req& req, Res& res) {
      Handle(route, style, req, res, [&](Call& call) { fn(req, res, call); });
    });
  };
  auto post = [&](const char* pattern, const char* route, ErrorStyle style,
                  std::function<void(const Req&, Res&, Call&)> fn) {
    s.Post(pattern, [this, route, style, fn](const Req& req, Res& res) {
      Handle(route, style, req, res, [&](Call& call) { fn(req, res, call); });
    });
  };

  get("/", "/", plain, [this](const Req&, Res& res, Call&) { HandleAsset("index.html", res); });
  get(R"(/([A-Za-z0-9_-]+\.(?:js|css|svg|png|html)))", "/static", plain,
      [this](const Req& req, Res& res, Call&) { HandleAsset(req.matches[1], res); });
  get("/health", "/health", plain, [this](const Req&, Res& res, Call&) { HandleHealth(res); });
  get("/metrics", "/metrics", plain, [this](const Req&, Res& res, Call&) { HandleMetrics(res); });
  get("/api/status", "/api/status", plain, [this](const Req&, Res& res, Call&) { HandleStatus(res); });
  get("/languages", "/languages", plain, [this](const Req&, Res& res, Call&) { HandleLanguages(res); });
  get("/frontend/settings", "/frontend/settings", plain,
      [this](const Req&, Res& res, Call&) { HandleSettings(res); });
  get(R"(/download_file/([0-9a-f]{32})(?:/[^/]*)?)", "/download_file", plain,
      [this](const Req& req, Res& res, Call&) { HandleDownload(req, res); });
  get("/v1/models", "/v1/models", openai, [this](const Req&, Res& res, Call&) { HandleModels(res); });
  post("/translate", "/translate", plain,
       [this](const Req& req, Res& res, Call& call) { HandleTranslate(req, res, call); });
  post("/detect", "/detect", plain,
       [this](const Req& req, Res& res, Call& call) { HandleDetect(req, res, call); });
  post("/translate_file", "/translate_file", plain,
       [this](const Req& req, Res& res, Call& call) { HandleTranslateFile(req, res, call); });
  post("/api/translate", "/api/translate", plain,
       [this](const Req& req, Res& res, Call& call) { HandleNativeTranslate(req, res, call); });
  post("/v1/chat/completions", "/v1/chat/completions", openai,
       [this](const Req& req, Res& res, Call& call) { HandleChat(req, res, call); });

  // A known route called with the wrong method gets 405 and the methods it takes; CORS preflights
  // get their answer when CORS is on.
  auto methods_of = [](const std::string& path) -> const char* {
    static const char* const kPost[] = {"/translate", "/detect", "/translate_file", "/api/translate",
                                        "/v1/chat/completions"};
    static const char* const kGet[] = {
        "/", "/health", "/metrics", "/api/status", "/languages", "/frontend/settings", "/v1/models"};
    for (const char* p : kPost)
      if (path == p) return "POST, OPTIONS";
    for (const char* p : kGet)
      if (path == p) return "GET, OPTIONS";
    return nullptr;
  };
  auto wrong_method = [this, methods_of](const Req& req, Res& res) {
    const char* allow = methods_of(req.path);
    const ErrorStyle style = StartsWith(req.path, "/v1/") ? ErrorStyle::kOpenAi : ErrorStyle::kPlain;
    Handle(allow ? "wrong-method" : "other", style, req, res, [&](Call&) {
      if (!allow) throw HttpError(404, ErrorCode::kNotFound, "no such route");
      res.set_header("Allow", allow);
      throw HttpError(405, ErrorCode::kInvalidArgument,
                      StrCat(req.method, " is not allowed here (allowed: ", allow, ")"));
    });
  };
  s.Get(".*", wrong_method);
  s.Post(".*", wrong_method);
  s.Put(".*", wrong_method);
  s.Patch(".*", wrong_method);
  s.Delete(".*", wrong_method);
  s.Options(".*", [this, methods_of, wrong_method](const Req& req, Res& res) {
    const char* allow = methods_of(req.path);
    if (options_.cors_origin.empty() || !allow) return wrong_method(req, res);
    t_route = "preflight";
    res.status = 204;
    res.set_header("Allow", allow);
    res.set_header("Access-Control-Allow-Methods", allow);
    res.set_header("Access-Control-Allow-Headers", "Content-Type, Authorization");
    res.set_header("Access-Control-Max-Age", "600");
  });
}

void Server::HandleAsset(const std::string& name, httplib::Response& res) {
  for (const WebAsset& a : WebAssets()) {
    if (name != a.name) continue;
    res.set_content(std::string(a.data, a.size), ContentTypeFor(name));
    // The page loads only its own files and talks only to this server.
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                   "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Cache-Control", "no-cache");
    return;
  }
  throw HttpError(404, ErrorCode::kNotFound, "no such file");
}

void Server::HandleHealth(httplib::Response& res) {
  Json body = Json::MakeObject();
  switch (state_.load()) {
    case State::kReady:
      body.Set("status", "ok");
      break;
    case State::kLoading:
      body.Set("status", "loading");
      break;
    case State::kFailed:
      body.Set("status", "failed");
      break;
    case State::kStopping:
      body.Set("status", "stopping");
      break;
  }
  if (state_ != State::kReady) {
    res.status = 503;
    res.set_header("Retry-After", std::to_string(kLoadingRetryAfterSeconds));
  }
  res.set_content(body.Dump(), "application/json");
}

void Server::HandleStatus(httplib::Response& res) {
  Json body = Json::MakeObject();
  body.Set("version", HYMT_VERSION);
  std::shared_ptr<Loaded> loaded;
  if (state_ == State::kReady) {
    std::lock_guard<std::mutex> lock(state_mu_);
    loaded = loaded_;
  }
  body.Set("status", loaded ? "ready" : (state_ == State::kLoading ? "loading" : "unavailable"));
  body.Set("max_text_chars", static_cast<int64_t>(options_.limits.max_text_chars));
  body.Set("max_texts", static_cast<int64_t>(options_.limits.max_texts));
  body.Set("key_required", keys_.required());
  if (loaded) {
    const LoadedModel& m = loaded->session->model();
    const Plan& plan = loaded->session->plan();
    EngineStats st = loaded->session->engine().stats();
    body.Set("model", m.name);
    body.Set("description", m.description);
    body.Set("demo", m.is_demo);
    body.Set("mode", plan.mode);
    body.Set("tokens_per_second", st.decode_tokens_per_second);
    body.Set("running", st.running);
    body.Set("queued", st.queued);
    Json langs = Json::MakeArray();
    for (const std::string& code : loaded->translator->languages()) {
      std::optional<Language> l = FindLanguage(code);
      if (!l) continue;
      Json e = Json::MakeObject();
      e.Set("code", l->code);
      e.Set("name", l->english_name);
      e.Set("native", l->native_name);
      langs.Push(std::move(e));
    }
    body.Set("languages", std::move(langs));
  }
  res.set_content(body.Dump(), "application/json");
}

void Server::HandleMetrics(httplib::Response& res) {
  PrometheusWriter w;
  w.Sample("hymt_model_loaded", "gauge", "1 once the model is loaded and serving",
           state_ == State::kReady ? 1 : 0);
  // Each family's samples must be contiguous in the exposition: one pass per family over one snapshot.
  const auto requests = counters_.Snapshot();
  for (const auto& [key, e] : requests) {
    std::map<std::string, std::string> labels = {{"route", key.first}, {"code", std::to_string(key.second)}};
    w.Sample("hymt_http_requests_total", "counter", "HTTP requests by route and status code",
             static_cast<double>(e.count), labels);
  }
  for (const auto& [key, e] : requests) {
    std::map<std::string, std::string> labels = {{"route", key.first}, {"code", std::to_string(key.second)}};
    w.Sample("hymt_http_request_seconds_total", "counter",
             "Time spent on HTTP requests by route and status code", e.seconds, labels);
  }
  w.Sample("hymt_requests_in_flight", "gauge", "Translation and generation requests being worked on",
           static_cast<double>(gate_.in_flight()));
  w.Sample("hymt_requests_in_flight_limit", "gauge", "Requests in flight beyond which 503 is returned",
           static_cast<double>(gate_.limit()));
  w.Sample("hymt_client_disconnects_total", "counter", "Requests cancelled because the client went away",
           static_cast<double>(disconnects_.load()));
  w.Sample("hymt_download_store_files", "gauge", "Translated files waiting for download",
           static_cast<double>(files_.count()));
  w.Sample("hymt_download_store_bytes", "gauge", "Bytes of translated files waiting for download",
           static_cast<double>(files_.bytes()));
  w.Sample("hymt_process_resident_bytes", "gauge", "Resident memory of the process",
           static_cast<double>(ResidentBytes()));
  std::shared_ptr<Loaded> loaded;
  if (state_ == State::kReady) {
    std::lock_guard<std::mutex> lock(state_mu_);
    loaded = loaded_;
  }
  if (loaded) {
    EngineStats st = loaded->session->engine().stats();
    const Plan& p = loaded->session->plan();
    w.Sample("hymt_queue_depth", "gauge", "Sequences waiting for the engine", static_cast<double>(st.queued));
    w.Sample("hymt_running_sequences", "gauge", "Sequences in the running batch",
             static_cast<double>(st.running));
    w.Sample("hymt_tokens_per_second", "gauge", "Recent decode rate over all sequences (tokens/s)",
             st.decode_tokens_per_second);
    w.Sample("hymt_generated_tokens_total", "counter", "Tokens generated",
             static_cast<double>(st.tokens_generated));
    w.Sample("hymt_prompt_tokens_total", "counter", "Prompt tokens processed",
             static_cast<double>(st.prompt_tokens));
    w.Sample("hymt_engine_steps_total", "counter", "Engine steps", static_cast<double>(st.steps));
    w.Sample("hymt_preemptions_total", "counter", "Sequences preempted for KV pages",
             static_cast<double>(st.preemptions));
    w.Sample("hymt_kv_pages_used", "gauge", "KV cache pages in use", static_cast<double>(st.kv_pages_used));
    w.Sample("hymt_kv_pages_total", "gauge", "KV cache pages", static_cast<double>(st.kv_pages_total));
    const double page_bytes = st.kv_pages_total > 0 ? static_cast<double>(st.kv_bytes_total) /
                                                          static_cast<double>(st.kv_pages_total)
                                                    : 0;
    w.Sample("hymt_kv_bytes_used", "gauge", "KV cache memory in use (bytes)",
             page_bytes * static_cast<double>(st.kv_pages_used));
    w.Sample("hymt_kv_bytes_total", "gauge", "KV cache memory (bytes)",
             static_cast<double>(st.kv_bytes_total));
    auto memory = [&](const char* device, const char* kind, uint64_t bytes) {
      w.Sample("hymt_memory_bytes", "gauge", "Memory planned per device and use (bytes)",
               static_cast<double>(bytes), {{"device", device}, {"kind", kind}});
    };
    memory("cpu", "weights", p.cpu_weight_bytes);
    memory("cpu", "kv", p.cpu_kv_bytes);
    memory("cpu", "scratch", p.cpu_scratch_bytes);
    if (p.gpu_total() > 0) {
      memory("gpu", "weights", p.gpu_weight_bytes);
      memory("gpu", "kv", p.gpu_kv_bytes);
      memory("gpu", "scratch", p.gpu_scratch_bytes);
      memory("gpu", "overhead", p.gpu_overhead_bytes);
    }
  }
  res.set_content(w.text(), "text/plain; version=0.0.4; charset=utf-8");
}

void Server::HandleLanguages(httplib::Response& res) {
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  const std::vector<std::string>& codes = loaded->translator->languages();
  Json out = Json::MakeArray();
  for (const std::string& code : codes) {
    std::optional<Language> l = FindLanguage(code);
    if (!l) continue;
    Json e = Json::MakeObject();
    e.Set("code", l->code);
    e.Set("name", l->english_name);
    Json targets = Json::MakeArray();
    for (const std::string& t : codes)
      if (t != code) targets.Push(t);
    e.Set("targets", std::move(targets));
    out.Push(std::move(e));
  }
  res.set_content(out.Dump(), "application/json");
}

void Server::HandleSettings(httplib::Response& res) {
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  const std::vector<std::string>& codes = loaded->translator->languages();
  Json out = Json::MakeObject();
  out.Set("charLimit", static_cast<int64_t>(options_.limits.max_text_chars));
  out.Set("frontendTimeout", 500);
  out.Set("apiKeys", keys_.required());
  out.Set("keyRequired", keys_.required());
  out.Set("suggestions", false);
  out.Set("filesTranslation", true);
  Json formats = Json::MakeArray();
  for (const char* f : {".txt", ".md", ".html", ".srt"}) formats.Push(f);
  out.Set("supportedFilesFormat", std::move(formats));
  auto lang = [](const std::string& code) {
    Json e = Json::MakeObject();
    e.Set("code", code);
    std::optional<Language> l = FindLanguage(code);
    e.Set("name", l ? l->english_name : std::string("Auto Detect"));
    return e;
  };
  Json language = Json::MakeObject();
  language.Set("source", lang("auto"));
  language.Set("target", lang(codes.size() > 1 ? codes[1] : codes.front()));
  out.Set("language", std::move(language));
  res.set_content(out.Dump(), "application/json");
}

void Server::StartStream(const httplib::Request& req, httplib::Response& res, InflightGate::Slot slot,
                         std::shared_ptr<std::atomic<bool>> cancelled,
                         std::function<void(SseChannel&)> work) {
  // Destroyed (stream joined first, then the watch, the registration and the slot) when the library
  // releases the response, which is before it closes the connection.
  struct State {
    InflightGate::Slot slot;
    std::unique_ptr<ActiveFlag> active;
    ConnectionWatcher::Watch watch;
    std::unique_ptr<SseStream> stream;
  };
  auto state = std::make_shared<State>();
  state->slot = std::move(slot);
  state->active = std::make_unique<ActiveFlag>(this, cancelled);
  state->watch = watcher_.Add(
      ConnectionAddress{req.remote_addr, req.remote_port, req.local_addr, req.local_port}, cancelled);
  state->stream = std::make_unique<SseStream>(std::move(work), cancelled);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // tells nginx-style proxies not to buffer the stream
  res.set_chunked_content_provider("text/event-stream", [state](size_t, httplib::DataSink& sink) {
    bool done = false;
    const bool more =
        state->stream->Pump([&](std::string_view s) { return sink.write(s.data(), s.size()); }, &done);
    if (done) {
      sink.done();
      return true;
    }
    return more;
  });
}

}  // namespace hymt
