// `hymt serve`: the HTTP server (cpp-httplib) in front of one session. HTTP threads parse and check each
// request at the edge into the typed requests of requests.h, then call the Translator (or RunChat) and
// wait; the engine thread batches every running sequence into each step.
//
// Routes (docs/API.md documents each):
//   GET  /                       the translation page (and its files: /app.js, /style.css)
//   GET  /health                 200 when ready; 503 while loading or shutting down
//   GET  /metrics                Prometheus text
//   GET  /api/status             model, memory mode, languages, speed (the page's status line)
//   POST /api/translate          native translation, JSON or SSE stream of partial translations
//   POST /translate, /detect, /translate_file; GET /languages, /frontend/settings, /download_file/ID/NAME
//                                LibreTranslate-compatible
//   POST /v1/chat/completions; GET /v1/models     OpenAI-compatible
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/session.h"
#include "server/admission.h"
#include "server/connection_watch.h"
#include "server/file_store.h"
#include "server/http_error.h"
#include "server/metrics.h"
#include "server/requests.h"
#include "server/translation.h"
#include "translate/cache.h"
#include "translate/translator.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace hymt {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see Server::port())
  SessionOptions session;
  std::string prompt_style;  // "" : from the model's name
  RequestLimits limits;
  // A request whose headers or body stall this long gets 400 and its connection closed, so slow
  // clients cannot hold HTTP threads.
  int read_timeout_seconds = 10;
  size_t max_body_bytes = 4 << 20;       // larger bodies are refused with 413
  int max_inflight = 64;                 // translation/generation requests at once; more get 503
  int http_threads = 0;                  // 0: max_inflight plus room for quick requests
  double default_timeout_seconds = 300;  // deadline of a request that sets none
  std::vector<std::string> api_keys;     // empty: no key needed
  int rate_limit_per_minute = 0;         // per API key (or client address without keys); 0: none
  std::string cors_origin;               // "": no CORS headers; "*" or an origin
  bool log_text = false;                 // log request texts (off: logs never contain them)
  size_t download_max_files = 256;       // the store of translated files
  size_t download_max_bytes = 64 << 20;
  std::chrono::seconds download_ttl{3600};
  std::string public_url;  // base of download URLs; "": from the request's Host header
  std::string cache_path;  // SQLite translation cache; "": none
  int64_t cache_ttl_seconds = 30 * 24 * 3600;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving (so /health answers at once), then loads the model in the background.
  // Throws Error(kUnavailable) when the address cannot be bound.
  void Start();
  int port() const { return port_; }

  // Loading state: kLoading until the model is ready (kReady) or failed (kFailed, see load_error()).
  enum class State { kLoading, kReady, kFailed, kStopping };
  State state() const { return state_.load(); }
  std::string load_error() const;

  // Stops accepting connections, lets running requests finish for up to `grace`, cancels the rest,
  // then stops the engine. Idempotent; returns when everything has stopped.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  // Everything that exists once the model is loaded.
  struct Loaded {
    std::unique_ptr<Session> session;
    std::unique_ptr<Translator> translator;
    std::unique_ptr<TranslationCache> cache;
    TranslationContext context;  // points into the members above
  };
  // One request being handled: its route, style of errors, cancel flag and start time.
  struct Call;
  // Stays registered (for cancellation at shutdown) while alive.
  class ActiveFlag;

  void Load();
  void Routes();
  // Runs `fn` for a request, turning every exception into the mapped error response.
  void Handle(const char* route, ErrorStyle style, const httplib::Request& req, httplib::Response& res,
              const std::function<void(Call&)>& fn);
  std::shared_ptr<Loaded> RequireLoaded() const;
  // Checks the API key and the rate limit of a request to a working route.
  void Admit(const httplib::Request& req, const std::optional<std::string>& body_key);
  // A cancel flag for the request, set when its client hangs up or the server stops; registered for
  // as long as `call` lives.
  std::shared_ptr<std::atomic<bool>> WatchClient(const httplib::Request& req, Call& call);
  std::chrono::steady_clock::time_point Deadline(const std::optional<double>& seconds) const;
  void WriteError(httplib::Response& res, const ErrorReply& reply, ErrorStyle style) const;
  void AccessLog(const httplib::Request& req, const httplib::Response& res);

  // Route handlers.
  void HandleHealth(httplib::Response& res);
  void HandleMetrics(httplib::Response& res);
  void HandleStatus(httplib::Response& res);
  void HandleAsset(const std::string& name, httplib::Response& res);
  void HandleLanguages(httplib::Response& res);
  void HandleSettings(httplib::Response& res);
  void HandleTranslate(const httplib::Request& req, httplib::Response& res, Call& call);
  void HandleDetect(const httplib::Request& req, httplib::Response& res, Call& call);
  void HandleTranslateFile(const httplib::Request& req, httplib::Response& res, Call& call);
  void HandleDownload(const httplib::Request& req, httplib::Response& res);
  void HandleNativeTranslate(const httplib::Request& req, httplib::Response& res, Call& call);
  void HandleModels(httplib::Response& res);
  void HandleChat(const httplib::Request& req, httplib::Response& res, Call& call);

  // Sends `work`'s events as a text/event-stream response; `slot` is held until the stream ends.
  void StartStream(const httplib::Request& req, httplib::Response& res, InflightGate::Slot slot,
                   std::shared_ptr<std::atomic<bool>> cancelled, std::function<void(class SseChannel&)> work);
  // MapError, plus: a cancellation counts as a client disconnect, or becomes 503 when the server is
  // shutting down (it cancelled the request).
  ErrorReply ReplyFor(std::exception_ptr e);
  std::string PublicBase(const httplib::Request& req) const;

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listen_thread_, load_thread_;
  int port_ = 0;

  std::atomic<State> state_{State::kLoading};
  mutable std::mutex state_mu_;
  std::string load_error_;
  std::shared_ptr<Loaded> loaded_;  // set once, under state_mu_
  std::chrono::steady_clock::time_point started_;
  int64_t started_unix_ = 0;  // seconds since 1970 (OpenAI's `created` of the model)

  KeyChecker keys_;
  RateLimiter rate_;
  InflightGate gate_;
  FileStore files_;
  RequestCounters counters_;
  ConnectionWatcher watcher_;
  std::atomic<int64_t> disconnects_{0};

  std::mutex flags_mu_;
  std::set<std::shared_ptr<std::atomic<bool>>> flags_;  // cancel flags of requests in flight
  std::atomic<bool> cancelling_all_{false};
  std::once_flag shutdown_once_;
};

}  // namespace hymt
