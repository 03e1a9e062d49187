// `vkgate serve`: an OpenAI-compatible HTTP server (cpp-httplib) over one
// model. Handler threads parse and check requests (serve_openai.hpp) and
// hand them to the scheduler thread that owns the Model (serve_scheduler.hpp).
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "chat_reply.hpp"
#include "chat_template.hpp"
#include "cli.hpp"
#include "serve_openai.hpp"
#include "serve_page.hpp"
#include "serve_scheduler.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/model.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

namespace {

// The handler's own connection. httplib 0.11 does not hand its socket to
// handlers, so it is found among this process's sockets by its two ends
// (written by getnameinfo, as httplib writes them); -1 where none matches.
int connection_socket(const httplib::Request& req) {
  const std::string local_port = std::to_string(req.local_port), remote_port = std::to_string(req.remote_port);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
      continue;
    char host[NI_MAXHOST], port[NI_MAXSERV], own_port[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&peer), peer_len, host, sizeof host, port, sizeof port,
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0 ||
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), local_len, nullptr, 0, own_port, sizeof own_port,
                      NI_NUMERICSERV) != 0)
      continue;
    if (req.remote_addr == host && remote_port == port && local_port == own_port) return fd;
  }
  return -1;
}

// The client closed its end (HTTP clients never half-close while awaiting an answer).
bool peer_closed(int sock) {
  pollfd p{sock, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

constexpr const char* kServeUsage = R"(usage: vkgate serve --weights DIR|FILE.gguf [--host ADDR] [--port N] [--parallel N] [--ctx N]
                    [--queue N] [--prefill-chunk N] [--gather-ms N] [--prompt-cache N]
                    [--reasoning-parser qwen3]
                    [--api-key KEY] [--device SEL]
                    [--precision fp32|fp16|bf16] [--quant T] [--quiet]

An OpenAI-compatible HTTP server for one model. When it is ready it prints one
line to stdout, "vkgate serve: listening on http://HOST:PORT"; logs and errors
go to stderr. SIGINT or SIGTERM stops it: new requests get 503, the ones in
flight end within their current step, and it exits 0.

endpoints:
  GET  /                     a chat page (streams from /v1/chat/completions)
  GET  /health               {"status":"ok"}
  GET  /v1/models            the one model; its id is the name of DIR (or FILE without .gguf)
  POST /v1/completions       prompt (a string), max_tokens (default 16), temperature, top_p, top_k,
                             min_p, seed, presence_penalty, frequency_penalty, repeat_penalty, stop,
                             logprobs (0-5), n (1-16 choices; choice i samples with seed + i),
                             stream (server-sent events; stream_options.include_usage)
  POST /v1/chat/completions  messages (system, user, assistant; text content) and the same options,
                             max_completion_tokens too (default: the rest of the context),
                             logprobs (true) with top_logprobs (0-20) instead of logprobs N;
                             rendered with the model's chat template
                             (tokenizer_config.json's chat_template, a GGUF's tokenizer.chat_template)
                             when it is Qwen's ChatML or Llama 3's, else refused with 400.
                             With Qwen3's or Qwen3.5's template also tools (tool_choice auto or
                             none), assistant tool_calls and reasoning_content, tool messages, and
                             chat_template_kwargs.enable_thinking (Llama 3.1+: date_string); a
                             reply's <tool_call> blocks come back as tool_calls (finish_reason
                             "tool_calls"); streamed, a reply to a request with tools comes in one
                             chunk when it ends
  POST /apply-template       a chat request's prompt as the model would run it: {"prompt": TEXT}
  GET  /metrics              Prometheus text: requests, queue, tokens (cached prompt tokens too),
                             decode rate, KV cache bytes, time to first token (a histogram)

  --weights DIR|FILE     a model checkpoint directory with tokenizer.json, or a GGUF file
  --host ADDR            the address to listen on (default 127.0.0.1)
  --port N               the port (default 8080; 0: one the system picks, printed in the line)
  --parallel N           generations stepped in turn, each on its own sequence (default 4)
  --queue N              requests waiting for a slot beyond which new ones get 429 (default 64)
  --prefill-chunk N      prompt positions a generation runs per round (default 256): a long prompt
                         runs in pieces between the other generations' steps; new prompts that
                         run as many positions run together
  --gather-ms N          a request that finds the server idle waits until no other has come for N
                         ms (at most 5N), so that clients starting together run together (default
                         10; 0: start at once)
  --prompt-cache N       finished requests' sequences (KV caches, recurrent states) kept on the device
                         (default: --parallel; 0: none), the least recently used dropped first, and
                         all of them when memory runs out: a request whose prompt starts as one of
                         theirs (a chat's next turn, a shared system prompt) runs only the rest,
                         and its usage.prompt_tokens_details.cached_tokens says how much it took.
                         A recurrent model (Gated DeltaNet, GLA) starts from the end of a cached
                         sequence, or from a copy of its states before its prompt's last token.
                         A request's "cache_prompt": false (llama.cpp's field) neither takes nor
                         leaves one. Logits from a cache equal a cold run's within rounding, so a
                         sampled reply may differ where two tokens nearly tie
  --ctx N                the most tokens of a request, prompt and completion (default: the
                         model's context limit, else 4096); a longer prompt gets 400, a longer
                         max_tokens is cut to fit
  --reasoning-parser qwen3
                         a chat reply that opens with <think> (or whose prompt opened it, as
                         Qwen3.5's does) has its thinking (up to </think>) in
                         message.reasoning_content (streamed: delta.reasoning_content), the rest in
                         content, as vLLM's parser of that name
  --api-key KEY          every /v1/ request needs "Authorization: Bearer KEY" (else 401)
  --device SEL           device index or name substring (default: VKGATE_DEVICE, else the best)
  --precision P          device storage of weights and activations: fp32 (default), fp16, bf16
  --quant T              quantize the float projections on load: q8_0, q4_0, q4_1, q5_0, q5_1,
                         q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs
  --quiet                no progress line on stderr while the model loads

Requests are at most 1 MiB (else 413). Errors are OpenAI's shape:
{"error": {"message", "type", "code"}}.

Exit codes: 0 stopped by a signal, 1 bad file, config or device, or the port is taken, 2 bad usage.
)";

// The self-pipe: the signal handler only writes a byte; a watcher thread does the rest.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int) {
  const char b = 's';
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
}

std::string model_id(const std::string& weights) {
  namespace fs = std::filesystem;
  fs::path p(weights);
  if (!p.has_filename()) p = p.parent_path();  // "dir/"
  if (fs::is_regular_file(p) && p.extension() == ".gguf") return p.stem().string();
  return p.filename().string();
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string sse(const nlohmann::json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

struct Server {
  std::string id;
  ChatTemplate chat;
  int ctx_limit;
  std::string api_key;
  const Tokenizer& tok;
  Scheduler& scheduler;
  bool split_reasoning;  // --reasoning-parser qwen3
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> request_counter{0};
  // Streams whose last event has not gone out. httplib stops calling content providers once
  // stop() closes the listener, so a stop waits for these to send their error event and [DONE].
  std::atomic<int> open_streams{0};

  void wait_for_streams(std::chrono::milliseconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (open_streams.load() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // POST /apply-template (llama.cpp's server has it too): the prompt a chat request would run.
  void apply_template(const httplib::Request& req, httplib::Response& res) const {
    CompletionRequest cr = parse_completion_request(req.body, true);
    res.set_content(nlohmann::json{{"prompt", chat_prompt(chat, cr)}}.dump(), "application/json");
  }

  void completions(const httplib::Request& req, httplib::Response& res, bool is_chat) {
    CompletionRequest cr = parse_completion_request(req.body, is_chat);
    cr.split_reasoning = is_chat && split_reasoning;
    if (cr.model && *cr.model != id)
      throw ApiError(404, "invalid_request_error", "model_not_found",
                     "the model '" + *cr.model + "' does not exist; this server has '" + id + "'");
    GenerateOptions options = cr.options;
    std::string text;
    bool add_special = true;
    if (is_chat) {
      text = chat_prompt(chat, cr);
      add_special = false;  // the rendered text holds its own special tokens
      options.stop.push_back(chat.end_of_turn());
    } else {
      text = cr.prompt;
    }
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(text, add_special);
    } catch (const Error& e) {
      throw bad_request("invalid_prompt", std::string("the prompt cannot be tokenized: ") + e.what());
    }
    if (ids.empty()) throw bad_request("invalid_prompt", "the prompt encodes to no tokens");
    if (int64_t(ids.size()) >= ctx_limit)
      throw bad_request("context_length_exceeded", "the prompt's " + std::to_string(ids.size()) +
                                                       " tokens leave no room in the context of " +
                                                       std::to_string(ctx_limit) + " tokens");
    const int room = ctx_limit - int(ids.size());
    options.max_new_tokens = std::min(cr.max_tokens.value_or(is_chat ? room : 16), room);
    if (cr.n > scheduler.capacity())
      throw bad_request("invalid_value", "'n' of " + std::to_string(cr.n) +
                                             " is more choices than this server runs and queues at once (" +
                                             std::to_string(scheduler.capacity()) + ": --parallel + --queue)");
    // One generation per choice; choice i of a seeded request samples with seed + i.
    std::vector<std::shared_ptr<Job>> jobs;
    for (int i = 0; i < cr.n; ++i) {
      auto job = std::make_shared<Job>();
      job->options = options;
      job->options.keep_sequence = cr.cache_prompt;
      if (options.sampling.seed) job->options.sampling.seed = *options.sampling.seed + uint64_t(i);
      job->prompt.assign(ids.begin(), ids.end());
      jobs.push_back(std::move(job));
    }
    switch (scheduler.submit(jobs)) {
      case Scheduler::Admit::accepted: break;
      case Scheduler::Admit::queue_full:
        throw ApiError(429, "rate_limit_error", "queue_full", "too many requests are waiting; try again later");
      case Scheduler::Admit::closed:
        throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    }
    const std::string rid = std::string(is_chat ? "chatcmpl-" : "cmpl-") + std::to_string(unix_now()) + "-" +
                            std::to_string(++request_counter);
    const int64_t created = unix_now();
    const size_t prompt_tokens = ids.size();

    if (!cr.stream) {
      // A client that goes away before the answer frees its slots, as a stream's does.
      const int sock = connection_socket(req);
      std::vector<Choice> choices;
      Usage usage{prompt_tokens, 0};
      for (const auto& job : jobs) {
        while (!job->wait_finished(std::chrono::milliseconds(100)))
          if (sock >= 0 && peer_closed(sock)) {
            cancel(jobs);  // the scheduler drops them at its next step; no one reads this response
            return;
          }
        std::lock_guard lk(job->mu);
        if (std::optional<ApiError> e = job_error(*job)) {
          cancel(jobs);
          throw *e;
        }
        usage.completion_tokens += job->completion_tokens;
        if (job == jobs[0]) usage.cached_tokens = job->cached_tokens;
        size_t offset = 0;
        choices.push_back({job->text, job->finish,
                           cr.options.logprobs < 0 ? nlohmann::json(nullptr)
                                                   : logprobs_json(cr, job->logprobs, tok, offset)});
      }
      res.set_content(completion_response(cr, rid, created, id, choices, usage)
                          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                      "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    ++open_streams;
    // Each choice's own chunks, in turn: its role first (chat), its text and
    // logprobs as they come, its finish_reason once it ends.
    // With tools a choice's reply is held until it ends, to be sent as its content and calls.
    struct ChoiceStream {
      bool first = true, ended = false;
      size_t offset = 0;
      std::string held;
      std::vector<TokenLogprob> held_logprobs;
      ReasoningSplitter reasoning = ReasoningSplitter();  // split_reasoning without tools: pieces as they come
    };
    const bool hold = cr.chat && !cr.render.tools.empty();
    const ChoiceStream fresh{.reasoning = ReasoningSplitter(cr.think_opened)};
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, jobs, cr, rid, created, prompt_tokens, hold, streams = std::vector<ChoiceStream>(jobs.size(), fresh)](
            size_t, httplib::DataSink& sink) mutable {
          auto send = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            cancel(jobs);  // the client went away: the scheduler drops them at its next step
            return false;
          };
          const auto wait = std::chrono::milliseconds(std::max<size_t>(1, 100 / jobs.size()));
          std::optional<ApiError> error;
          for (size_t i = 0; i < jobs.size() && !error; ++i) {
            ChoiceStream& st = streams[i];
            if (st.ended) continue;
            std::vector<TokenLogprob> logprobs;
            std::string piece = jobs[i]->take(wait, st.ended, logprobs);
            if (hold) {
              st.held += piece;
              st.held_logprobs.insert(st.held_logprobs.end(), logprobs.begin(), logprobs.end());
              if (!st.ended) continue;
              piece = st.held;
              logprobs = std::move(st.held_logprobs);
            }
            std::string thought;
            if (cr.split_reasoning && !hold) {
              ReasoningSplitter::Parts p = st.reasoning.feed(piece);
              if (st.ended) {
                const ReasoningSplitter::Parts rest = st.reasoning.finish();
                p.reasoning += rest.reasoning;
                p.content += rest.content;
              }
              thought = std::move(p.reasoning);
              piece = std::move(p.content);
            }
            if (!piece.empty() || !thought.empty() || !logprobs.empty() || (st.first && cr.chat)) {
              const nlohmann::json lp =
                  cr.options.logprobs < 0 ? nlohmann::json(nullptr) : logprobs_json(cr, logprobs, tok, st.offset);
              if (!send(sse(completion_chunk(cr, rid, created, id, int(i), piece, st.first, std::nullopt, lp, false,
                                             thought))))
                return false;
              st.first = false;
            }
            if (!st.ended) continue;
            FinishReason finish;
            {
              std::lock_guard lk(jobs[i]->mu);  // not held while sending: the scheduler takes it
              error = job_error(*jobs[i]);
              finish = jobs[i]->finish;
            }
            if (!error && !send(sse(completion_chunk(cr, rid, created, id, int(i), "", false, finish, nullptr,
                                                     calls_tools(cr, st.held)))))
              return false;
          }
          const bool all_ended = std::all_of(streams.begin(), streams.end(), [](auto& st) { return st.ended; });
          if (!error && !all_ended) {
            if (sink.is_writable()) return true;
            cancel(jobs);
            return false;
          }
          if (error) {
            cancel(jobs);
            // The status line has gone: the error travels as an event, as OpenAI's streams do.
            if (!send("data: " + error_body(*error) + "\n\n")) return false;
          } else if (cr.include_usage) {
            Usage usage{prompt_tokens, 0};
            for (const auto& job : jobs) {
              std::lock_guard lk(job->mu);
              usage.completion_tokens += job->completion_tokens;
              if (job == jobs[0]) usage.cached_tokens = job->cached_tokens;
            }
            if (!send(sse(usage_chunk(cr, rid, created, id, usage)))) return false;
          }
          if (!send("data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        },
        [this, jobs](bool success) {
          if (!success) cancel(jobs);
          --open_streams;
        });
  }

  // What ended `job` other than its own finish (job.mu held): its failure, or the server's shutdown.
  static std::optional<ApiError> job_error(const Job& job) {
    if (job.error)
      return ApiError(job.error_status, job.error_status == 400 ? "invalid_request_error" : "server_error",
                      job.error_status == 503 ? "shutting_down" : "generation_failed", *job.error);
    if (job.finish == FinishReason::cancelled)
      return ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    return std::nullopt;
  }
  static void cancel(const std::vector<std::shared_ptr<Job>>& jobs) {
    for (const auto& job : jobs) job->cancelled = true;
  }
};

int cmd_serve(Args& args) {
  std::string weights, device, host = "127.0.0.1", api_key;
  int port = 8080, parallel = 4, queue = 64, ctx_arg = 0, prefill_chunk = 256, gather_ms = 10, cache_slots = -1;
  bool quiet = false, split_reasoning = false;
  ModelOptions options;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--weights") weights = args.value(a);
    else if (a == "--host") host = args.value(a);
    else if (a == "--port") port = int(args.number(a, 0, 65535));
    else if (a == "--parallel") parallel = int(args.number(a, 1, 256));
    else if (a == "--queue") queue = int(args.number(a, 0, 1 << 16));
    else if (a == "--ctx") ctx_arg = int(args.number(a, 2, 1 << 24));
    else if (a == "--prefill-chunk") prefill_chunk = int(args.number(a, 1, 1 << 24));
    else if (a == "--gather-ms") gather_ms = int(args.number(a, 0, 10000));
    else if (a == "--prompt-cache") cache_slots = int(args.number(a, 0, 256));
    else if (a == "--reasoning-parser") {
      if (args.value(a) != "qwen3") throw UsageError("--reasoning-parser takes qwen3 (a reply's <think> block)");
      split_reasoning = true;
    }
    else if (a == "--api-key") {
      api_key = args.value(a);
      if (api_key.empty()) throw UsageError("--api-key needs a non-empty key");
    }
    else if (a == "--device") device = args.value(a);
    else if (a == "--precision") options.precision = parse_precision(a, args.value(a));
    else if (a == "--quant") options.quant = parse_quant_flag(a, args.value(a));
    else if (a == "--quiet") quiet = true;
    else throw UsageError("serve: unknown option '" + a + "'");
  }
  if (weights.empty()) throw UsageError("serve: --weights is required");

  // Tokenizer and template first: a model without them fails before the weights load.
  const Tokenizer tok = Tokenizer::load(weights);
  const ChatTemplate chat = ChatTemplate::detect(chat_template_text(weights));
  ContextOptions copts;
  copts.device = device;
  show_progress(copts, quiet);
  Context ctx(copts);
  Model model = load_model(ctx, weights, options);
  if (tok.vocab_size() > model.config().vocab_size)
    throw Error(ErrorCode::invalid_argument, tok.source() + " has " + std::to_string(tok.vocab_size()) +
                                                 " tokens, more than the " + std::to_string(model.config().vocab_size) +
                                                 " rows of the model in " + weights);
  int ctx_limit = ctx_arg ? ctx_arg : (model.context_limit() > 0 ? model.context_limit() : 4096);
  if (model.context_limit() > 0) ctx_limit = std::min(ctx_limit, model.context_limit());

  Scheduler scheduler(model, tok, parallel, queue, prefill_chunk, std::chrono::milliseconds(gather_ms),
                      cache_slots < 0 ? parallel : cache_slots);
  Server srv{model_id(weights), chat, ctx_limit, api_key, tok, scheduler, split_reasoning};
  std::fprintf(stderr, "vkgate serve: %s (%s, %d layers) on %s; context %d, %d in parallel; chat template: %s\n",
               srv.id.c_str(), model.config().model_type.c_str(), model.config().num_hidden_layers,
               ctx.device().name.c_str(), ctx_limit, parallel,
               chat.dialect == ChatDialect::qwen3    ? "Qwen3's ChatML (tools)"
               : chat.dialect == ChatDialect::qwen35 ? "Qwen3.5's ChatML (tools)"
               : chat.family == ChatFamily::chatml ? "ChatML"
               : chat.family == ChatFamily::llama3 ? "Llama 3"
                                                   : "none");

  httplib::Server http;
  // Handlers wait on their generations: a thread each for the active and the queued ones, and a few spare.
  const size_t threads = size_t(std::min(parallel + queue + 4, 512));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(size_t(1) << 20);
  http.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (srv.stopping) {
      send_error(res, ApiError(503, "server_error", "shutting_down", "the server is shutting down"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!srv.api_key.empty() && (req.path.rfind("/v1/", 0) == 0 || req.path == "/apply-template") &&
        req.get_header_value("Authorization") != "Bearer " + srv.api_key) {
      send_error(res, ApiError(401, "invalid_request_error", "invalid_api_key",
                               "a valid API key is required: Authorization: Bearer KEY"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // httplib's own refusals (unknown path, body too large) in OpenAI's shape.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, ApiError(404, "invalid_request_error", "not_found", "no such endpoint: " + req.method + " " + req.path));
    else if (res.status == 413)
      send_error(res, ApiError(413, "invalid_request_error", "payload_too_large", "the request body is over 1 MiB"));
    else
      send_error(res, ApiError(res.status, "invalid_request_error", "http_error", "the request was refused"));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", "internal_error", e.what()));
    }
  });

  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kServePage, "text/html; charset=utf-8");
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  const int64_t started = unix_now();
  http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    const nlohmann::json m = {{"id", srv.id}, {"object", "model"}, {"created", started}, {"owned_by", "vkgate"}};
    res.set_content(nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({m})}}.dump(), "application/json");
  });
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(scheduler.stats()), "text/plain; version=0.0.4");
  });
  auto route = [&](bool is_chat) {
    return [&srv, is_chat](const httplib::Request& req, httplib::Response& res) {
      try {
        srv.completions(req, res, is_chat);
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    };
  };
  http.Post("/v1/completions", route(false));
  http.Post("/v1/chat/completions", route(true));
  http.Post("/apply-template", [&srv](const httplib::Request& req, httplib::Response& res) {
    try {
      srv.apply_template(req, res);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });

  const int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound < 0) throw Error(ErrorCode::io, "serve: cannot listen on " + host + ":" + std::to_string(port));

  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) throw Error(ErrorCode::io, "serve: cannot create a pipe");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not the end of the server
  std::thread watcher([&] {
    char b = 0;
    while (::read(g_signal_pipe[0], &b, 1) < 0 && errno == EINTR) {
    }
    if (b != 's') return;  // the listener ended on its own
    std::fprintf(stderr, "vkgate serve: stopping\n");
    srv.stopping = true;
    scheduler.shutdown();  // every generation ends after its current step
    srv.wait_for_streams(std::chrono::seconds(3));
    http.stop();
  });

  const std::string url = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                          std::to_string(bound);
  std::printf("vkgate serve: listening on %s\n", url.c_str());
  std::fflush(stdout);
  const bool listened = http.listen_after_bind();
  srv.stopping = true;
  scheduler.shutdown();
  {
    const char b = 'x';
    [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  }
  watcher.join();
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  if (validation_failed(ctx)) return 1;
  if (!listened) std::fprintf(stderr, "vkgate serve: the listener ended with an error\n");
  return 0;
}

}  // namespace

const Command kServe{"serve", kServeUsage, cmd_serve};

}  // namespace vkgate::cli
