// `vkgate generate`: greedy decoding with a model checkpoint. The new ids go
// to stdout as they come (one line, space-separated), everything else to stderr.
#include <climits>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "chat_template.hpp"
#include "cli.hpp"
#include "vkgate/error.hpp"
#include "vkgate/generate.hpp"
#include "vkgate/model.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kGenerateUsage = R"(usage: vkgate generate --weights DIR (--prompt TEXT | --prompt-file FILE | --prompt-ids "1,2,3")
                       --max-new-tokens N [--tokenizer PATH] [--device SEL] [--precision fp32|fp16|bf16]
                       [--quant T] [--int8] [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed N]
                       [--repeat-penalty R] [--repeat-last-n N] [--presence-penalty X] [--frequency-penalty X]
                       [--stop STR]... [--chat [--system TEXT] [--no-think]] [--ignore-eos] [--ignore-context-limit]
                       [--no-check-finite] [--json [--logprobs N]] [--quiet]

Decoding, greedy unless --temperature is above 0: one step for the prompt,
then one replayed step per new token, with the KV cache (a GLA model: each
layer's recurrent state) on the device, its room for 256 new tokens at first
and doubled as they come.
With --prompt, the text is tokenized with the model's own tokenizer.json and
the generated text streams to stdout as it is decided (whole UTF-8
characters); with --prompt-ids, the generated ids (not the prompt) go to
stdout space-separated on one line. Nothing else goes to
stdout; progress, tokens/s and errors go to stderr. The prompt is tokenized
as given, unless --chat puts it in the model's chat template first.

  --weights DIR          a model checkpoint directory: config.json (model_type qwen3, llama,
                         gla, qwen3_next, qwen3_moe, qwen3_5 or qwen3_5_moe), model.safetensors or
                         model.safetensors.index.json and shards, optionally generation_config.json
                         and tokenizer.json; or a GGUF file (.gguf: llama, qwen3, qwen3moe, qwen3next,
                         qwen35, qwen35moe), which holds the config, the eos ids and the tokenizer
                         (tokenizer.ggml.*) too
  --prompt TEXT          the prompt as text (UTF-8), tokenized with DIR/tokenizer.json (a GGUF:
                         its own tokenizer) and the special tokens its post-processor adds
                         (e.g. Llama 3.1's BOS; a GGUF's add_bos_token)
  --prompt-file FILE     the prompt as text, read from FILE (byte for byte; - reads stdin)
  --prompt-ids LIST      the prompt's token ids, comma-separated, each in [0, vocab_size)
  --max-new-tokens N     at most N new ids
  --tokenizer PATH       a tokenizer.json (or a directory holding one, or a .gguf) instead of DIR's
  --chat                 the prompt as a user turn in the model's chat template (DIR's
                         tokenizer_config.json or chat_template.jinja, a GGUF's
                         tokenizer.chat_template; Qwen's ChatML or Llama 3's, as vkgate serve
                         renders them), the reply up to the end of the assistant's turn
  --system TEXT          with --chat: a system turn before it
  --no-think             with --chat and Qwen3's or Qwen3.5's template: enable_thinking false (the reply
                         opens with an empty <think></think>)
sampling (transformers' order: penalties, temperature, top-k, top-p, min-p, one draw):
  --temperature T        0 (default): greedy, the most likely id; above 0: sample from softmax(logits / T)
  --top-k K              keep the K most likely ids (default 0: all)
  --top-p P              keep the fewest most likely ids whose probability reaches P (default 1: all)
  --min-p P              drop ids less likely than P × the most likely one (default 0: none)
  --seed N               the random draws of a seed repeat exactly (default: a random seed)
  --repeat-penalty R     logits of ids among the last --repeat-last-n of the context: l/R if l > 0,
                         else l·R (default 1: off; also applies to greedy decoding)
  --repeat-last-n N      the window of the penalties (default 64; -1: the whole context, 0: none)
  --presence-penalty X   l − X for every id in the window, X in [-2, 2] (default 0)
  --frequency-penalty X  l − X × the id's count in the window, X in [-2, 2] (default 0)
  --stop STR             with --prompt: stop when the generated text contains STR, which is
                         left out of the text (repeatable; at most 16)
  --device SEL           device index or name substring (default: VKGATE_DEVICE, else the best)
  --precision P          device storage of weights and activations: fp32 (default), fp16, bf16
  --quant T              quantize the float projections and an untied lm_head on load to the
                         block format T: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k,
                         q5_k, q6_k, iq4_nl, iq4_xs
  --int8                 int8 activations: Q8_0 and Q4_0 projections quantize their input per
                         32-element block to int8 and multiply with integer dot products, where
                         the device has them (else the fp32 product; see vkgate run --help)
  --ignore-eos           keep going after eos_token_id (config.json or generation_config.json;
                         a list means any of them). Without it the eos id is printed, then
                         generation stops
  --ignore-context-limit run past the model's context limit (max_position_embeddings, or the
                         length its rope_scaling reaches): without it a longer prompt is refused
                         and generation stops there (finish_reason context_limit)
  --quiet                no progress line on stderr (drawn only on a terminal: a first run's
                         pipeline compilation, the tensors loading, a long prompt's prefill)
  --json                 print one JSON object instead: generated (the ids), text (with
                         --prompt: the generated text, bytes that are not UTF-8 as U+FFFD),
                         tokens_per_s (the decode steps'; null when one id was generated,
                         so no decode step ran), prefill_ms, step_ms (each decode step),
                         prompt_tokens, finish_reason (length, eos, stop, context_limit), and
                         with --prompt undecoded_ids
  --logprobs N           with --json: also logprobs, one {id, logprob, top: [[id, logprob], ...]}
                         per generated id, its log-probability under the model (log-softmax of
                         the logits, before temperature, penalties or truncation) and the N
                         (0-20) likeliest ids'
  --check-finite         (the default) refuse NaN or Inf in a weight, naming the directory,
                         the tensor and the element (and, with --precision fp16, a value
                         beyond fp16's range)
  --no-check-finite      let them through

A model may have more rows than its tokenizer has tokens (Qwen3: 151,936 and
151,669): a generated id the tokenizer does not know adds no text (as Hugging
Face decodes it), and stderr says so once.

Exit codes: 0 success, 1 bad file, config, id or device, 2 bad usage.
)";

// --prompt-file: a file's bytes, or stdin's for "-".
std::string read_prompt_file(const std::string& path) {
  if (path != "-") return read_file(path);
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) text.append(buf, n);
  if (std::ferror(stdin)) throw Error(ErrorCode::io, "--prompt-file -: cannot read stdin");
  return text;
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

std::string number(double v, const char* format = "%.3f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

int cmd_generate(Args& args) {
  std::string weights, device, text_prompt, tokenizer_path;
  std::vector<int64_t> prompt;
  bool json = false, have_prompt = false, quiet = false, chat = false, no_think = false;
  std::optional<std::string> system;
  int text_sources = 0;  // --prompt and --prompt-file
  ModelOptions options;
  GenerateOptions g;
  g.max_new_tokens = -1;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--weights") weights = args.value(a);
    else if (a == "--prompt-ids") prompt = parse_id_list(a, args.value(a)), have_prompt = true;
    else if (a == "--prompt") text_prompt = args.value(a), ++text_sources;
    else if (a == "--prompt-file") text_prompt = read_prompt_file(args.value(a)), ++text_sources;
    else if (a == "--tokenizer") tokenizer_path = args.value(a);
    else if (a == "--chat") chat = true;
    else if (a == "--system") system = args.value(a);
    else if (a == "--no-think") no_think = true;
    else if (a == "--max-new-tokens") g.max_new_tokens = int(args.number(a, 0, 1 << 24));
    else if (a == "--temperature") g.sampling.temperature = args.real(a, 0, 1e6);
    else if (a == "--top-k") g.sampling.top_k = int(args.number(a, 0, 1 << 24));
    else if (a == "--top-p") g.sampling.top_p = args.real(a, 1e-9, 1);
    else if (a == "--min-p") g.sampling.min_p = args.real(a, 0, 1);
    else if (a == "--seed") g.sampling.seed = uint64_t(args.number(a, 0, LONG_MAX));
    else if (a == "--repeat-penalty") g.sampling.repeat_penalty = args.real(a, 1e-6, 1e6);
    else if (a == "--repeat-last-n") g.sampling.repeat_last_n = int(args.number(a, -1, 1 << 24));
    else if (a == "--presence-penalty") g.sampling.presence_penalty = args.real(a, -2, 2);
    else if (a == "--frequency-penalty") g.sampling.frequency_penalty = args.real(a, -2, 2);
    else if (a == "--stop") {
      g.stop.push_back(args.value(a));
      if (g.stop.back().empty()) throw UsageError("--stop needs a non-empty string");
      if (g.stop.size() > 16) throw UsageError("--stop: at most 16 stop strings");
    }
    else if (a == "--device") device = args.value(a);
    else if (a == "--precision") options.precision = parse_precision(a, args.value(a));
    else if (a == "--quant") options.quant = parse_quant_flag(a, args.value(a));
    else if (a == "--int8") options.int8_activations = true;
    else if (a == "--ignore-eos") g.stop_at_eos = false;
    else if (a == "--ignore-context-limit") options.ignore_context_limit = true;
    else if (a == "--json") json = true;
    else if (a == "--logprobs") g.logprobs = int(args.number(a, 0, GenerateOptions::kMaxLogprobs));
    else if (a == "--quiet") quiet = true;
    else if (a == "--check-finite") options.check_finite = true;
    else if (a == "--no-check-finite") options.check_finite = false;
    else throw UsageError("generate: unknown option '" + a + "'");
  }
  if (weights.empty()) throw UsageError("generate: --weights is required");
  const bool have_text = text_sources > 0;
  if (int(have_prompt) + text_sources != 1)
    throw UsageError("generate: give one of --prompt, --prompt-file and --prompt-ids");
  if (have_prompt && prompt.empty()) throw UsageError("--prompt-ids needs at least one id");
  if (!tokenizer_path.empty() && !have_text) throw UsageError("generate: --tokenizer goes with --prompt");
  if (!g.stop.empty() && !have_text) throw UsageError("generate: --stop goes with --prompt (it is matched in the text)");
  if (chat && !have_text) throw UsageError("generate: --chat goes with --prompt or --prompt-file");
  if ((system || no_think) && !chat) throw UsageError("generate: --system and --no-think go with --chat");
  if (g.max_new_tokens < 0) throw UsageError("generate: --max-new-tokens is required");
  if (g.logprobs >= 0 && !json) throw UsageError("generate: --logprobs goes with --json (they are part of its object)");

  // The tokenizer first: a missing or malformed tokenizer.json fails before the weights load.
  std::optional<Tokenizer> tokenizer;
  if (have_text) {
    tokenizer = Tokenizer::load(tokenizer_path.empty() ? weights : tokenizer_path);
    if (chat) {
      const ChatTemplate t = ChatTemplate::detect(chat_template_text(weights));
      if (!t.usable())
        throw Error(ErrorCode::invalid_config, "--chat: " + weights + " has no chat template vkgate renders (Qwen's "
                                                   "ChatML or Llama 3's); give the prompt without --chat");
      if (no_think && !t.takes_tools())
        throw Error(ErrorCode::invalid_config,
                    "--no-think: the chat template of " + weights + " is not Qwen3's or Qwen3.5's");
      std::vector<ChatMessage> turns;
      if (system) turns.push_back({"system", *system});
      turns.push_back({"user", text_prompt});
      RenderOptions render;
      if (no_think) render.enable_thinking = false;
      try {
        text_prompt = t.render(turns, render);
      } catch (const ChatTemplateError& e) {
        throw Error(ErrorCode::invalid_argument, std::string("--chat: ") + e.what());
      }
      g.stop.push_back(t.end_of_turn());
    }
    std::vector<int32_t> ids;
    try {
      // A rendered chat holds its special tokens as text: no post-processor BOS on top.
      ids = tokenizer->encode(text_prompt, !chat);
    } catch (const Error& e) {
      throw Error(e.code(), std::string("--prompt: ") + e.what());
    }
    prompt.assign(ids.begin(), ids.end());
    if (prompt.empty()) throw Error(ErrorCode::invalid_argument, "--prompt: the text encodes to no tokens");
  }
  ContextOptions copts;
  copts.device = device;
  show_progress(copts, quiet);
  Context ctx(copts);
  Model model = load_model(ctx, weights, options);
  if (tokenizer && tokenizer->vocab_size() > model.config().vocab_size)
    throw Error(ErrorCode::invalid_argument, tokenizer->source() + " has " + std::to_string(tokenizer->vocab_size()) +
                                                 " tokens, more than the " + std::to_string(model.config().vocab_size) +
                                                 " rows of the model in " + weights);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= model.config().vocab_size)
      throw Error(ErrorCode::invalid_argument, "--prompt-ids: id " + std::to_string(prompt[i]) + " at position " +
                                                   std::to_string(i) + " is outside the vocabulary [0, " +
                                                   std::to_string(model.config().vocab_size) + ") of " + weights);
  std::fprintf(stderr, "vkgate: %s, %d layers, %s on %s: %zu prompt %s, up to %d new\n",
               model.config().model_type.c_str(), model.config().num_hidden_layers, to_string(options.precision),
               ctx.device().name.c_str(), prompt.size(), prompt.size() == 1 ? "id" : "ids", g.max_new_tokens);
  bool first = true;
  if (!json && tokenizer) {
    g.on_text = [&](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  } else if (!json) {
    g.on_token = [&](int64_t id) {
      std::printf("%s%lld", first ? "" : " ", static_cast<long long>(id));
      std::fflush(stdout);
      first = false;
      return true;
    };
  }
  Generation run(model, prompt, g, tokenizer ? &*tokenizer : nullptr);
  while (!run.done()) run.step();
  const GenerateResult r = run.result();
  if (validation_failed(ctx)) return 1;
  const std::optional<double> rate = r.tokens_per_s();
  if (json) {
    std::string ids;
    for (int64_t id : r.ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    std::string undecoded;
    for (int64_t id : r.undecoded_ids) undecoded += (undecoded.empty() ? "" : ", ") + std::to_string(id);
    const std::string text = tokenizer ? ", \"text\": " + json_string(r.text) + ", \"undecoded_ids\": [" + undecoded + "]" : "";
    std::string logprobs;
    if (g.logprobs >= 0) {
      for (const TokenLogprob& t : r.logprobs) {
        std::string top;
        for (const auto& [id, lp] : t.top)
          top += (top.empty() ? "[" : ", [") + std::to_string(id) + ", " + number(lp, "%.17g") + "]";
        logprobs += (logprobs.empty() ? "" : ", ") + std::string("{\"id\": ") + std::to_string(t.id) +
                    ", \"logprob\": " + number(t.logprob, "%.17g") + ", \"top\": [" + top + "]}";
      }
      logprobs = ", \"logprobs\": [" + logprobs + "]";
    }
    std::printf("{\"generated\": [%s]%s%s, \"finish_reason\": \"%s\", \"prompt_tokens\": %zu, \"tokens_per_s\": %s, "
                "\"prefill_ms\": %.3f, \"step_ms\": %s}\n",
                ids.c_str(), text.c_str(), logprobs.c_str(), to_string(r.finish), prompt.size(),
                rate.has_value() ? number(*rate).c_str() : "null", r.prefill_ms, json_list(r.step_ms).c_str());
  } else if (tokenizer) {
    std::fputc('\n', stderr);  // stdout holds exactly the generated text
  } else {
    std::printf("\n");
  }
  if (!r.undecoded_ids.empty())
    std::fprintf(stderr, "vkgate: %zu generated id(s), the first %lld, are not tokens of %s (%d tokens; the model "
                 "has %d rows): decoded as no text, as Hugging Face does\n",
                 r.undecoded_ids.size(), static_cast<long long>(r.undecoded_ids[0]), tokenizer->source().c_str(),
                 tokenizer->vocab_size(), model.config().vocab_size);
  if (r.finish == FinishReason::context_limit)
    std::fprintf(stderr, "vkgate: stopped at the model's context limit of %d tokens (--ignore-context-limit goes on)\n",
                 model.context_limit());
  std::fprintf(stderr, "vkgate: %zu %s (%s); prompt %.1f ms, %s\n", r.ids.size(), r.ids.size() == 1 ? "id" : "ids",
               to_string(r.finish), r.prefill_ms,
               rate.has_value() ? (number(*rate, "%.2f") + " tokens/s decoding").c_str()
                                : "tokens/s n/a (no decode step)");
  return 0;
}

}  // namespace

const Command kGenerate{"generate", kGenerateUsage, cmd_generate};

}  // namespace vkgate::cli
