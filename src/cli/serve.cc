// hymt serve: the web page and the HTTP APIs over one model (see src/server/server.h).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/json.h"
#include "core/logging.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "server/server.h"

namespace hymt {
namespace {

// How often the main thread, while waiting for a signal, checks whether the model failed to load.
constexpr std::chrono::milliseconds kSignalPoll{200};

void AddServeOptions(Args& args) {
  AddSessionOptions(args);
  const ServerOptions d;
  const RequestLimits l;
  args.Option("config", "JSON file with any of these options (names as here; the command line wins)")
      .Option("host", "address to listen on", d.host)
      .Option("port", "port to listen on (0: any free port, printed at start)", std::to_string(d.port))
      .Option("api-key", "require this API key (repeatable; Bearer header or api_key field)", "", true)
      .Option("rate-limit", "requests per minute per API key (or client address without keys); 0: none", "0")
      .Flag("cors", "allow cross-origin requests from any origin (Access-Control-Allow-Origin: *)")
      .Option("cors-origin", "allow cross-origin requests from this origin only")
      .Option("max-inflight", "translation requests worked on at once; more get 503",
              std::to_string(d.max_inflight))
      .Option("http-threads", "HTTP worker threads (0: max-inflight plus 16)", "0")
      .Option("max-chars", "characters per text", std::to_string(l.max_text_chars))
      .Option("max-texts", "texts per request", std::to_string(l.max_texts))
      .Option("max-file-chars", "characters per uploaded file", std::to_string(l.max_file_chars))
      .Option("max-body", "request body size (larger: 413)", "4M")
      .Option("timeout", "seconds a request may take unless it asks for less", "300")
      .Option("read-timeout", "seconds a client may stall while sending a request (then 400)",
              std::to_string(d.read_timeout_seconds))
      .Option("grace-seconds",
              "on SIGTERM/SIGINT, how long running requests may finish before they are cancelled", "10")
      .Option("download-ttl", "seconds a translated file stays downloadable", "3600")
      .Option("public-url", "base URL of download links (default: from the request's Host header)")
      .Option("prompt-style", "hunyuan-mt, hy-mt1.5 or hy-mt2 (default: from the model's name)")
      .Option("cache", "SQLite file of a translation cache (created when missing); default: no cache")
      .Option("cache-ttl", "how long cached translations are kept: seconds, or a number with s, m, h or d",
              "30d")
      .Flag("log-text", "write request bodies (the texts) to the log; off by default");
}

// The options of a --config file as command-line arguments: "name": value becomes --name=value (a list
// gives one per item; true gives a flag; false leaves it out). Unknown names are an error.
std::vector<std::string> ConfigArgs(const std::string& path, const Args& args) {
  Json config;
  try {
    config = Json::Parse(ReadFile(path));
  } catch (const Error& e) {
    Fail(ErrorCode::kInvalidArgument, "--config ", path, ": ", e.what());
  }
  if (!config.is_object()) Fail(ErrorCode::kInvalidArgument, "--config ", path, ": expected a JSON object");
  std::vector<std::string> out;
  for (const auto& entry : config.AsObject()) {
    // Named references rather than structured bindings: clang 14 cannot capture the latter in lambdas.
    const std::string& key = entry.first;
    const Json& value = entry.second;
    std::string name = key;
    for (char& c : name)
      if (c == '_') c = '-';
    std::optional<bool> takes_value = args.TakesValue(name);
    if (!takes_value || name == "config")
      Fail(ErrorCode::kInvalidArgument, "--config ", path, ": unknown option '", key, "'");
    auto scalar = [&](const Json& v) {
      if (v.is_string()) return v.AsString();
      if (v.is_integer()) return std::to_string(v.AsInt());
      if (v.is_number()) return StrCat(v.AsDouble());
      Fail(ErrorCode::kInvalidArgument, "--config ", path, ": option '", key, "' needs a string or a number");
    };
    if (!*takes_value) {
      if (!value.is_bool())
        Fail(ErrorCode::kInvalidArgument, "--config ", path, ": option '", key, "' is true or false");
      if (value.AsBool()) out.push_back("--" + name);
    } else if (value.is_array()) {
      for (const Json& v : value.AsArray()) out.push_back("--" + name + "=" + scalar(v));
    } else {
      out.push_back("--" + name + "=" + scalar(value));
    }
  }
  return out;
}

// "90", "90s", "15m", "12h", "30d" in seconds.
int64_t Seconds(const Args& args, const char* name) {
  const std::string v = args.Get(name);
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  const std::string unit = end ? end : "";
  int64_t scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  if (unit == "m") scale = 60;
  if (unit == "h") scale = 3600;
  if (unit == "d") scale = 86400;
  if (v.empty() || end == v.c_str() || scale == 0 || n < 0)
    Fail(ErrorCode::kInvalidArgument, "--", name, " needs a duration such as 3600, 90m, 12h or 30d, got '", v,
         "'");
  return n * scale;
}

int64_t PositiveInt(const Args& args, const char* name) {
  int64_t v = args.GetInt(name);
  if (v < 1) Fail(ErrorCode::kInvalidArgument, "--", name, " must be at least 1");
  return v;
}

ServerOptions ServerOptionsFromArgs(const Args& args) {
  ServerOptions o;
  o.session = SessionOptionsFromArgs(args);
  o.host = args.Get("host");
  const int64_t port = args.GetInt("port");
  if (port < 0 || port > 65535) Fail(ErrorCode::kInvalidArgument, "--port must be 0..65535");
  o.port = static_cast<int>(port);
  o.api_keys = args.GetAll("api-key");
  for (const std::string& k : o.api_keys)
    if (k.empty() || k.size() > kMaxApiKeyBytes)
      Fail(ErrorCode::kInvalidArgument, "--api-key must have 1 to ", kMaxApiKeyBytes, " characters");
  o.rate_limit_per_minute = static_cast<int>(args.GetInt("rate-limit"));
  if (o.rate_limit_per_minute < 0) Fail(ErrorCode::kInvalidArgument, "--rate-limit must not be negative");
  if (args.GetFlag("cors")) o.cors_origin = "*";
  if (args.Has("cors-origin")) o.cors_origin = args.Get("cors-origin");
  o.max_inflight = static_cast<int>(PositiveInt(args, "max-inflight"));
  o.http_threads = static_cast<int>(args.GetInt("http-threads"));
  o.limits.max_text_chars = static_cast<size_t>(PositiveInt(args, "max-chars"));
  o.limits.max_texts = static_cast<size_t>(PositiveInt(args, "max-texts"));
  o.limits.max_file_chars = static_cast<size_t>(PositiveInt(args, "max-file-chars"));
  o.max_body_bytes = args.GetBytes("max-body");
  o.read_timeout_seconds = static_cast<int>(PositiveInt(args, "read-timeout"));
  o.default_timeout_seconds = args.GetDouble("timeout");
  if (o.default_timeout_seconds <= 0) Fail(ErrorCode::kInvalidArgument, "--timeout must be more than 0");
  o.limits.max_timeout_seconds = o.default_timeout_seconds;
  o.download_ttl = std::chrono::seconds(Seconds(args, "download-ttl"));
  if (o.download_ttl.count() < 1)
    Fail(ErrorCode::kInvalidArgument, "--download-ttl must be at least 1 second");
  o.public_url = args.Get("public-url");
  o.prompt_style = args.Get("prompt-style");
  o.log_text = args.GetFlag("log-text");
  o.cache_path = args.Get("cache");
  o.cache_ttl_seconds = Seconds(args, "cache-ttl");
  return o;
}

}  // namespace

int RunServe(int argc, char** argv) {
  Args args("hymt serve [--model PATH] [--host 127.0.0.1] [--port 8080] [--config FILE] [options]");
  AddServeOptions(args);
  // --config is read first; its options go before the command line's, so the command line wins.
  std::vector<std::string> all = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string path;
    if (a.rfind("--config=", 0) == 0) path = a.substr(9);
    if (a == "--config" && i + 1 < argc) path = argv[i + 1];
    if (!path.empty()) {
      std::vector<std::string> from_file = ConfigArgs(path, args);
      all.insert(all.begin() + 1, from_file.begin(), from_file.end());
    }
  }
  for (int i = 1; i < argc; ++i) all.push_back(argv[i]);
  std::vector<char*> ptrs;
  for (std::string& s : all) ptrs.push_back(s.data());
  if (!args.Parse(static_cast<int>(ptrs.size()), ptrs.data())) return 0;
  if (!args.positional().empty())
    Fail(ErrorCode::kInvalidArgument, "hymt serve takes no positional arguments (got '", args.positional()[0],
         "')");
  ServerOptions options = ServerOptionsFromArgs(args);
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(args.GetDouble("grace-seconds") * 1000));
  if (grace.count() < 0) Fail(ErrorCode::kInvalidArgument, "--grace-seconds must not be negative");

  // Signals are taken by this thread only (sigtimedwait below): block them before any thread starts,
  // so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Server server(options);
  server.Start();
  const std::string url =
      StrCat("http://", options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host,
             ":", server.port());
  std::printf("hymt: serving %s (loading the model; /health answers 503 until it is ready)\n", url.c_str());
  std::fflush(stdout);

  bool announced = false;
  while (true) {
    timespec wait{0, static_cast<long>(std::chrono::nanoseconds(kSignalPoll).count())};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) {
      HYMT_LOG_INFO("signal ", sig == SIGTERM ? "SIGTERM" : "SIGINT", ": stopping (grace ", grace.count(),
                    " ms)");
      server.Shutdown(grace);
      std::printf("hymt: stopped\n");
      return 0;
    }
    const Server::State state = server.state();
    if (state == Server::State::kFailed) {
      std::string error = server.load_error();
      server.Shutdown(std::chrono::milliseconds(0));
      Fail(ErrorCode::kInvalidArgument, "the model did not load: ", error);
    }
    if (state == Server::State::kReady && !announced) {
      announced = true;
      std::printf("hymt: ready: open %s in a browser\n", url.c_str());
      std::fflush(stdout);
    }
  }
}

}  // namespace hymt
