// Translation routes: LibreTranslate's /translate, /detect, /translate_file (+ downloads) and the
// native /api/translate with its SSE stream of partial translations.
#include <httplib.h>

#include <algorithm>

#include "core/json.h"
#include "core/logging.h"
#include "server/http_util.h"
#include "server/server.h"
#include "server/sse.h"

namespace hymt {
namespace {

// LibreTranslate reports detection confidence in percent; hymt's detector in 0..1.
constexpr double kLibrePercent = 100.0;

Json DetectionJson(const Detection& d, double scale) {
  Json e = Json::MakeObject();
  e.Set("language", d.code);
  e.Set("confidence", d.confidence * scale);
  return e;
}

const char* DownloadContentType(TextFormat f) {
  return f == TextFormat::kHtml ? "text/html; charset=utf-8" : "text/plain; charset=utf-8";
}

// RFC 5987 encoding of a file name for Content-Disposition's filename* (UTF-8 names).
std::string PercentEncode(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
        c == '_') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The plain filename= of Content-Disposition, for clients that ignore filename*: ASCII only.
std::string AsciiFileName(std::string name) {
  for (char& c : name)
    if (static_cast<unsigned char>(c) >= 0x80) c = '_';
  return name;
}

// The name a translated file is offered under: "report.de.md" for "report.md" into German.
std::string TranslatedFileName(const std::string& name, const std::string& target) {
  size_t dot = name.rfind('.');
  return name.substr(0, dot) + "." + target + name.substr(dot);
}

// A Host header usable in a URL we hand back: host name or address characters and a port only.
bool PlausibleHost(const std::string& host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          std::string_view(".-:[]").find(c) != std::string_view::npos))
      return false;
  return true;
}

// Checks the languages before a request is admitted, so that a typo is a 400 even under load.
void CheckLanguages(const Translator& translator, const std::string& source, const std::string& target) {
  RequireLanguage(target, translator.languages());
  if (source != "auto") RequireLanguage(source, translator.languages());
}

}  // namespace

std::string Server::PublicBase(const httplib::Request& req) const {
  if (!options_.public_url.empty()) {
    std::string base = options_.public_url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    return base;
  }
  const std::string host = req.get_header_value("Host");
  if (PlausibleHost(host)) return "http://" + host;
  return StrCat("http://", options_.host, ":", port_);
}

void Server::HandleTranslate(const httplib::Request& req, httplib::Response& res, Call& call) {
  RequestFields fields = FieldsOf(req, BodyKinds::kJsonOrForm);
  LibreTranslateRequest r = ParseLibreTranslate(fields, options_.limits);
  Admit(req, r.api_key);
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  CheckLanguages(*loaded->translator, r.source, r.target);
  InflightGate::Slot slot = gate_.Enter();

  TranslateRequest tr;
  tr.texts = r.texts;
  tr.source = r.source;
  tr.target = r.target;
  tr.deadline = Deadline(r.timeout_seconds);
  tr.cancelled = WatchClient(req, call);
  TranslationOutcome result = RunTranslation(loaded->context, tr, r.format);
  const std::vector<std::string>& out = result.translations;

  Json body = Json::MakeObject();
  auto texts_json = [&](const std::vector<std::string>& v) {
    Json a = Json::MakeArray();
    for (const std::string& s : v) a.Push(s);
    return a;
  };
  body.Set("translatedText", r.is_list ? texts_json(out) : Json(out[0]));
  if (r.source == "auto") {
    Json d = Json::MakeArray();
    for (const Detection& det : result.detected) d.Push(DetectionJson(det, kLibrePercent));
    body.Set("detectedLanguage", r.is_list ? std::move(d) : d.AsArray()[0]);
  }
  if (r.alternatives > 0) {
    // Extra candidates are sampled (the model's sampling settings, fixed seeds); duplicates of the main
    // translation or of each other are dropped, as LibreTranslate does.
    TranslateRequest alt = tr;
    alt.texts.clear();
    for (const std::string& t : r.texts)
      for (int k = 0; k < r.alternatives; ++k) alt.texts.push_back(t);
    SamplingOverrides seeded;
    seeded.seed = 1;
    alt.sampling = ResolveSampling(seeded, loaded->session->model().generation);
    std::vector<std::string> candidates = RunTranslation(loaded->context, alt, r.format).translations;
    Json all = Json::MakeArray();
    for (size_t i = 0; i < r.texts.size(); ++i) {
      std::vector<std::string> kept;
      for (int k = 0; k < r.alternatives; ++k) {
        const std::string& c = candidates[i * static_cast<size_t>(r.alternatives) + static_cast<size_t>(k)];
        if (c != out[i] && std::find(kept.begin(), kept.end(), c) == kept.end()) kept.push_back(c);
      }
      all.Push(texts_json(kept));
    }
    body.Set("alternatives", r.is_list ? std::move(all) : all.AsArray()[0]);
  }
  res.set_header("X-Finish-Reason", FinishReasonName(result.finish));
  SendJson(res, body);
}

void Server::HandleDetect(const httplib::Request& req, httplib::Response& res, Call&) {
  RequestFields fields = FieldsOf(req, BodyKinds::kJsonOrForm);
  DetectRequest r = ParseDetect(fields, options_.limits);
  Admit(req, r.api_key);
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  Json all = Json::MakeArray();
  for (const std::string& text : r.texts) {
    Json candidates = Json::MakeArray();
    if (std::optional<Detection> d = loaded->translator->Detect(text))
      candidates.Push(DetectionJson(*d, kLibrePercent));
    all.Push(std::move(candidates));
  }
  SendJson(res, r.is_list ? all : all.AsArray()[0]);
}

void Server::HandleTranslateFile(const httplib::Request& req, httplib::Response& res, Call& call) {
  if (!req.is_multipart_form_data())
    throw HttpError(415, ErrorCode::kInvalidArgument, "send the file as multipart/form-data (field 'file')");
  if (!req.has_file("file") || req.get_file_value("file").filename.empty())
    Fail(ErrorCode::kInvalidArgument, "field 'file' (an uploaded file) is required");
  if (req.files.count("file") > 1) Fail(ErrorCode::kInvalidArgument, "upload one file at a time");
  httplib::MultipartFormData file = req.get_file_value("file");
  RequestFields fields = FieldsOf(req, BodyKinds::kJsonOrForm);
  FileTranslateRequest r =
      ParseFileTranslate(fields, file.filename, std::move(file.content), options_.limits);
  Admit(req, r.api_key);
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  CheckLanguages(*loaded->translator, r.source, r.target);
  InflightGate::Slot slot = gate_.Enter();

  TranslateRequest tr;
  tr.texts = {r.content};
  tr.source = r.source;
  tr.target = r.target;
  tr.deadline = Deadline(r.timeout_seconds);
  tr.cancelled = WatchClient(req, call);
  std::vector<std::string> out = RunTranslation(loaded->context, tr, r.format).translations;

  StoredFile stored;
  stored.name = TranslatedFileName(r.file_name, r.target);
  stored.content_type = DownloadContentType(r.format);
  stored.data = std::move(out[0]);
  const std::string name = stored.name;
  const std::string id = files_.Put(std::move(stored));
  Json body = Json::MakeObject();
  body.Set("translatedFileUrl", PublicBase(req) + "/download_file/" + id + "/" + PercentEncode(name));
  SendJson(res, body);
}

void Server::HandleDownload(const httplib::Request& req, httplib::Response& res) {
  std::optional<StoredFile> f = files_.Get(req.matches[1]);
  if (!f) throw HttpError(404, ErrorCode::kNotFound, "no such file (downloads expire)");
  // Served as an attachment in a sandbox: an uploaded HTML page never runs as part of this site.
  res.set_header("Content-Disposition", "attachment; filename=\"" + AsciiFileName(f->name) +
                                            "\"; filename*=UTF-8''" + PercentEncode(f->name));
  res.set_header("Content-Security-Policy", "sandbox; default-src 'none'");
  res.set_content(std::move(f->data), f->content_type.c_str());
}

void Server::HandleNativeTranslate(const httplib::Request& req, httplib::Response& res, Call& call) {
  RequestFields fields = FieldsOf(req, BodyKinds::kJsonOnly);
  NativeTranslateRequest r = ParseNativeTranslate(fields, options_.limits);
  Admit(req, r.api_key);
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  CheckLanguages(*loaded->translator, r.source, r.target);
  InflightGate::Slot slot = gate_.Enter();

  TranslateRequest tr;
  tr.texts = r.texts;
  tr.source = r.source;
  tr.target = r.target;
  tr.prompt = r.prompt;
  tr.sampling = ResolveSampling(r.sampling, loaded->session->model().generation);
  tr.max_new_tokens = r.max_new_tokens;
  tr.deadline = Deadline(r.timeout_seconds);
  const std::string model_name = loaded->session->model().name;
  const auto start = std::chrono::steady_clock::now();
  auto respond = [model_name, start](const TranslationOutcome& result) {
    Json body = Json::MakeObject();
    Json texts = Json::MakeArray();
    for (const std::string& s : result.translations) texts.Push(s);
    body.Set("translations", std::move(texts));
    Json detected = Json::MakeArray();
    for (const Detection& d : result.detected) detected.Push(DetectionJson(d, 1.0));
    body.Set("detected", std::move(detected));
    body.Set("finish_reason", FinishReasonName(result.finish));
    Json usage = Json::MakeObject();
    usage.Set("input_tokens", result.input_tokens);
    usage.Set("output_tokens", result.output_tokens);
    usage.Set("segments", result.segments);
    usage.Set("cache_hits", result.cache_hits);
    body.Set("usage", std::move(usage));
    body.Set("model", model_name);
    body.Set("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return body;
  };

  if (!r.stream) {
    tr.cancelled = WatchClient(req, call);
    SendJson(res, respond(RunTranslation(loaded->context, tr, r.format)));
    return;
  }
  tr.cancelled = std::make_shared<std::atomic<bool>>(false);
  const TextFormat format = r.format;
  StartStream(req, res, std::move(slot), tr.cancelled,
              [this, loaded, tr, format, respond](SseChannel& channel) mutable {
                // Partial texts are per input text; a markup document is translated piece by piece and
                // only its final result is sent.
                if (format == TextFormat::kText) {
                  tr.on_partial = [&channel](size_t index, const std::string& so_far) {
                    Json e = Json::MakeObject();
                    e.Set("index", static_cast<int64_t>(index));
                    e.Set("text", so_far);
                    channel.PushLatest(index, SseEvent("partial", e.Dump()));
                  };
                }
                try {
                  channel.Push(SseEvent("done", respond(RunTranslation(loaded->context, tr, format)).Dump()));
                } catch (...) {
                  ErrorReply reply = ReplyFor(std::current_exception());
                  Json e = Json::MakeObject();
                  e.Set("error", reply.message);
                  e.Set("status", reply.status);
                  channel.Push(SseEvent("error", e.Dump()));
                }
              });
}

}  // namespace hymt
