// OpenAI-compatible routes: GET /v1/models and POST /v1/chat/completions (with SSE streaming).
#include <httplib.h>

#include <algorithm>
#include <ctime>

#include "core/json.h"
#include "server/chat.h"
#include "server/http_util.h"
#include "server/server.h"
#include "server/sse.h"

namespace hymt {
namespace {

std::atomic<uint64_t> g_next_completion{1};

int64_t UnixTime() {
  return static_cast<int64_t>(std::time(nullptr));
}

Json Usage(int32_t prompt_tokens, int32_t completion_tokens) {
  Json u = Json::MakeObject();
  u.Set("prompt_tokens", prompt_tokens);
  u.Set("completion_tokens", completion_tokens);
  u.Set("total_tokens", prompt_tokens + completion_tokens);
  return u;
}

}  // namespace

void Server::HandleModels(httplib::Response& res) {
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  Json model = Json::MakeObject();
  model.Set("id", loaded->session->model().name);
  model.Set("object", "model");
  model.Set("created", started_unix_);
  model.Set("owned_by", "hymt");
  Json data = Json::MakeArray();
  data.Push(std::move(model));
  Json body = Json::MakeObject();
  body.Set("object", "list");
  body.Set("data", std::move(data));
  SendJson(res, body);
}

void Server::HandleChat(const httplib::Request& req, httplib::Response& res, Call& call) {
  RequestFields fields = FieldsOf(req, BodyKinds::kJsonOnly);
  ChatRequest r = ParseChatCompletion(fields, options_.limits);
  Admit(req, std::nullopt);
  std::shared_ptr<Loaded> loaded = RequireLoaded();
  const LoadedModel& model = loaded->session->model();
  Engine& engine = loaded->session->engine();

  ChatGeneration g;
  g.prompt = EncodeConversation(model, r.messages);
  const int32_t room = engine.options().max_context - static_cast<int32_t>(g.prompt.size());
  if (room < 1)
    Fail(ErrorCode::kInvalidArgument, "the messages take ", g.prompt.size(), " tokens; the context holds ",
         engine.options().max_context);
  // More than the context can hold is cut to what it holds (the choice then ends with "length").
  g.max_tokens = std::min(room, r.max_tokens.value_or(model.generation.max_new_tokens));
  g.sampling = ResolveSampling(r.sampling, model.generation).value_or(DefaultSampling(model.generation));
  g.n = r.n;
  g.stop = r.stop;
  g.deadline = Deadline(r.timeout_seconds);
  InflightGate::Slot slot = gate_.Enter();

  const std::string id = StrCat("chatcmpl-", g_next_completion.fetch_add(1));
  const std::string model_name = model.name;
  const int64_t created = UnixTime();
  auto chunk = [id, model_name, created](Json choices) {
    Json c = Json::MakeObject();
    c.Set("id", id);
    c.Set("object", "chat.completion.chunk");
    c.Set("created", created);
    c.Set("model", model_name);
    c.Set("choices", std::move(choices));
    return c;
  };

  if (!r.stream) {
    g.cancelled = WatchClient(req, call);
    ChatOutcome out = RunChat(model, engine, g);
    Json choices = Json::MakeArray();
    int32_t completion = 0;
    for (size_t i = 0; i < out.choices.size(); ++i) {
      Json message = Json::MakeObject();
      message.Set("role", "assistant");
      message.Set("content", out.choices[i].text);
      Json c = Json::MakeObject();
      c.Set("index", static_cast<int64_t>(i));
      c.Set("message", std::move(message));
      c.Set("finish_reason", OpenAiFinishReason(out.choices[i].finish));
      choices.Push(std::move(c));
      completion += out.choices[i].completion_tokens;
    }
    Json body = Json::MakeObject();
    body.Set("id", id);
    body.Set("object", "chat.completion");
    body.Set("created", created);
    body.Set("model", model_name);
    body.Set("choices", std::move(choices));
    body.Set("usage", Usage(out.prompt_tokens, completion));
    SendJson(res, body);
    return;
  }

  g.cancelled = std::make_shared<std::atomic<bool>>(false);
  const bool include_usage = r.include_usage;
  StartStream(
      req, res, std::move(slot), g.cancelled,
      [this, loaded, g, chunk, include_usage](SseChannel& channel) mutable {
        auto delta_chunk = [&](int index, Json delta, Json finish) {
          Json c = Json::MakeObject();
          c.Set("index", index);
          c.Set("delta", std::move(delta));
          c.Set("finish_reason", std::move(finish));
          Json choices = Json::MakeArray();
          choices.Push(std::move(c));
          return SseEvent("", chunk(std::move(choices)).Dump());
        };
        for (int i = 0; i < g.n; ++i) {
          Json role = Json::MakeObject();
          role.Set("role", "assistant");
          role.Set("content", "");
          channel.Push(delta_chunk(i, std::move(role), Json()));
        }
        g.on_delta = [&](int index, const std::string& text) {
          Json d = Json::MakeObject();
          d.Set("content", text);
          channel.Push(delta_chunk(index, std::move(d), Json()));
        };
        try {
          ChatOutcome out = RunChat(loaded->session->model(), loaded->session->engine(), g);
          int32_t completion = 0;
          for (size_t i = 0; i < out.choices.size(); ++i) {
            channel.Push(delta_chunk(static_cast<int>(i), Json::MakeObject(),
                                     Json(OpenAiFinishReason(out.choices[i].finish))));
            completion += out.choices[i].completion_tokens;
          }
          if (include_usage) {
            Json c = chunk(Json::MakeArray());
            c.Set("usage", Usage(out.prompt_tokens, completion));
            channel.Push(SseEvent("", c.Dump()));
          }
        } catch (...) {
          channel.Push(SseEvent("", ErrorBody(ReplyFor(std::current_exception()), ErrorStyle::kOpenAi)));
        }
        channel.Push(SseEvent("", "[DONE]"));
      });
}

}  // namespace hymt
