// `vkgate run` on input_ids and `vkgate generate`, as child processes: the
// golden qwen3 model (logits, statistics, greedy ids, fp16/bf16), a sharded
// bf16 llama checkpoint against the reference, eos handling, and malformed
// model directories, each exiting 1 (or 2 for bad usage) with a message that
// names the file and the tensor or key, leaving no output file.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "golden.hpp"
#include "harness.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "vkgate/model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/tokenizer.hpp"

namespace test_cli_model {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

using test::w1_dir;

std::vector<double> read_f64(const std::string& path, const std::string& tensor) {
  return SafetensorsFile(path).at(tensor).to_f64();
}

void check_nmse(const std::vector<double>& got, const std::vector<double>& want, double bound) {
  REQUIRE(got.size() == want.size());
  const std::vector<float> g(got.begin(), got.end());
  const reference::Diff d = reference::compare(g, want);
  INFO("nmse " << d.nmse << ", max abs " << d.max_abs);
  CHECK(d.first_bad == -1);
  CHECK(d.nmse <= bound);
}


}  // namespace

TEST_CASE("cli model: run on the golden w1 model writes its logits and statistics, generate prints its greedy ids") {
  TempDir tmp("w1");
  const std::string input = w1_dir() + "/input.safetensors", expected = w1_dir() + "/expected.safetensors";
  const CliResult r = run_cli(with_device({"run", "--weights", w1_dir(), "--input", input, "--output", tmp / "out.safetensors", "--stats"}), tmp.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("model: 2 layers, batch 1, tokens 7, fp32") != std::string::npos);
  const std::string out = tmp / "out.safetensors";
  check_nmse(read_f64(out, "logits"), read_f64(expected, "logits"), 1e-8);
  auto close = [&](const char* name, double abs, double rel) {
    CAPTURE(name);
    const auto got = read_f64(out, name), want = read_f64(expected, name);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= abs + rel * std::abs(want[i]));
  };
  close("stats.first_token_attn", 1e-4, 0);
  close("stats.gate_mean", 1e-4, 0);
  close("stats.max_activation", 0, 1e-4);
  CHECK(SafetensorsFile(out).at("stats.first_token_attn").shape == std::vector<int64_t>{2, 4});

  for (const auto& [precision, bound] : {std::pair{"fp16", 1e-4}, std::pair{"bf16", 1e-3}}) {
    CAPTURE(precision);
    const std::string o = tmp / (std::string(precision) + ".safetensors");
    const CliResult p = run_cli(with_device({"run", "--weights", w1_dir(), "--input", input, "--output", o, "--precision", precision}), tmp.path);
    check_clean_exit(p);
    REQUIRE(p.code == 0);
    check_nmse(read_f64(o, "logits"), read_f64(expected, "logits"), bound);
  }

  const json gen = json::parse(test::read_file_text(w1_dir() + "/generate.json"));
  std::string prompt = id_line(gen.at("prompt_ids").get<std::vector<int64_t>>());
  std::replace(prompt.begin(), prompt.end(), ' ', ',');
  const std::string want = id_line(gen.at("generated").get<std::vector<int64_t>>());
  const std::string n = std::to_string(gen.at("max_new_tokens").get<int>());
  const CliResult g = run_cli(with_device({"generate", "--weights", w1_dir(), "--prompt-ids", prompt, "--max-new-tokens", n}), tmp.path);
  check_clean_exit(g);
  REQUIRE(g.code == 0);
  CHECK(g.out == want + "\n");
  const CliResult j = run_cli(with_device({"generate", "--weights", w1_dir(), "--prompt-ids", prompt, "--max-new-tokens", n, "--json"}), tmp.path);
  check_clean_exit(j);
  REQUIRE(j.code == 0);
  const json doc = json::parse(j.out);
  CHECK(doc.at("generated") == gen.at("generated"));
  CHECK(doc.at("tokens_per_s").get<double>() > 0);
  CHECK(doc.at("step_ms").size() == gen.at("generated").size() - 1);
  CHECK(doc.contains("prefill_ms"));
  CHECK(!doc.contains("logprobs"));
  // --logprobs: greedy, so each generated id is its step's likeliest
  const CliResult l = run_cli(with_device({"generate", "--weights", w1_dir(), "--prompt-ids", prompt, "--max-new-tokens", n,
                                           "--json", "--logprobs", "2"}), tmp.path);
  check_clean_exit(l);
  REQUIRE(l.code == 0);
  const json lp = json::parse(l.out).at("logprobs");
  REQUIRE(lp.size() == gen.at("generated").size());
  for (size_t i = 0; i < lp.size(); ++i) {
    CAPTURE(i);
    CHECK(lp[i].at("id") == gen.at("generated")[i]);
    REQUIRE(lp[i].at("top").size() == 2);
    CHECK(lp[i].at("top")[0][0] == lp[i].at("id"));
    CHECK(lp[i].at("logprob") == lp[i].at("top")[0][1]);
    CHECK(lp[i].at("top")[1][1] <= lp[i].at("logprob"));
    CHECK(lp[i].at("logprob").get<double>() <= 0);
  }
  const CliResult bare = run_cli({"generate", "--weights", w1_dir(), "--prompt-ids", prompt, "--max-new-tokens", n,
                                  "--logprobs", "2"}, tmp.path);
  CHECK(bare.code == 2);
  CHECK(bare.err.find("--logprobs goes with --json") != std::string::npos);
}

TEST_CASE("cli model: a sharded bf16 llama checkpoint with biases, tied, batch 2, I32 ids, against the reference") {
  std::mt19937 rng(std::random_device{}());
  test::TinyModel shape;
  shape.model_type = "llama";
  shape.bias = shape.tied = true;
  ModelDir m(shape, rng, DType::BF16, true);
  const std::vector<int64_t> ids = test::random_ids(rng, 6, shape.vocab);
  const std::string input = m.ids_file("ids.safetensors", ids, 2, 3, DType::I32);
  const CliResult r = run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", m.dir / "out.safetensors"}), m.dir.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  const auto want = reference::model_forward(m.model.cfg, m.map, {ids, 2, 3});
  check_nmse(read_f64(m.dir / "out.safetensors", "logits"), want.logits, 1e-8);
}

TEST_CASE("cli model: a qwen3 model with a G2 value gate (self_attn.gate_proj) through run --stats and generate") {
  std::mt19937 rng(std::random_device{}());
  test::TinyModel shape;
  shape.gate = GateKind::elementwise;
  shape.gate_position = GatePosition::value;
  ModelDir m(shape, rng, DType::F32, false,
             {{"gate_position", "value"}, {"gate_layout", "separate"}, {"gate_activation", "sigmoid"}});
  const std::vector<int64_t> ids = test::random_ids(rng, 6, shape.vocab);
  const std::string input = m.ids_file("ids.safetensors", ids, 1, 6);
  const std::string out = m.dir / "out.safetensors";
  const CliResult r = run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", out, "--stats"}), m.dir.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  const auto want = reference::model_forward(m.model.cfg, m.map, {ids, 1, 6});
  check_nmse(read_f64(out, "logits"), want.logits, 1e-8);
  const auto gate_mean = read_f64(out, "stats.gate_mean");
  REQUIRE(gate_mean.size() == want.gate_mean.size());
  for (size_t l = 0; l < gate_mean.size(); ++l) CHECK(std::abs(gate_mean[l] - want.gate_mean[l]) <= 1e-4);
  // Each step attends to the earlier tokens' values as the cache holds them: gated.
  const auto greedy = reference::greedy_generate(m.model.cfg, m.map, std::vector<int64_t>(ids.begin(), ids.begin() + 3), 5, false);
  const std::string expect = id_line(greedy);
  const CliResult g = run_cli(with_device({"generate", "--weights", m.path(), "--prompt-ids",
                                           std::to_string(ids[0]) + "," + std::to_string(ids[1]) + "," + std::to_string(ids[2]),
                                           "--max-new-tokens", "5", "--ignore-eos"}), m.dir.path);
  check_clean_exit(g);
  REQUIRE(g.code == 0);
  CHECK(g.out == expect + "\n");
}

// Scaled RoPE from config.json as released checkpoints spell it: Llama 3.1's
// rope_scaling (llama3) on a llama model, a transformers 5 rope_parameters
// YaRN on qwen3 through run, and dynamic NTK through generate's decode steps
// past max_position_embeddings, each against the reference.
TEST_CASE("cli model: rope_scaling llama3 and yarn through run, dynamic NTK through generate, against the reference") {
  std::mt19937 rng(std::random_device{}());
  struct Case {
    const char* model_type;
    json keys;
  };
  const Case cases[] = {
      {"llama",
       {{"max_position_embeddings", 64},
        {"rope_scaling",
         {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 16}, {"rope_type", "llama3"}}}}},
      {"qwen3",
       {{"max_position_embeddings", 64},
        {"rope_theta", nullptr},
        {"rope_parameters",
         {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}, {"rope_theta", 10000.0}}}}},
  };
  for (const Case& k : cases) {
    CAPTURE(k.model_type);
    test::TinyModel shape;
    shape.model_type = k.model_type;
    ModelDir m(shape, rng, DType::F32, false, k.keys);
    const ModelConfig parsed = load_model_config(m.path());
    CHECK(parsed.attention.rope_scaling.type != RopeType::none);
    CHECK(parsed.attention.rope_theta == 10000.0);
    const std::vector<int64_t> ids = test::random_ids(rng, 10, shape.vocab);
    const std::string input = m.ids_file("ids.safetensors", ids, 1, 10);
    const std::string out = m.dir / "out.safetensors";
    const CliResult r = run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", out}), m.dir.path);
    check_clean_exit(r);
    REQUIRE(r.code == 0);
    check_nmse(read_f64(out, "logits"), reference::model_forward(parsed, m.map, {ids, 1, 10}).logits, 1e-8);
  }
  // Dynamic NTK (the older `type` spelling): the prompt within max_position_embeddings, the steps beyond it
  // (and beyond the context limit of 4 × 2, which --ignore-context-limit lifts).
  test::TinyModel shape;
  ModelDir m(shape, rng, DType::F32, false,
             {{"max_position_embeddings", 4}, {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}});
  const ModelConfig parsed = load_model_config(m.path());
  REQUIRE(parsed.attention.rope_scaling.type == RopeType::dynamic);
  const std::vector<int64_t> prompt = test::random_ids(rng, 3, shape.vocab);
  const auto greedy = reference::greedy_generate(parsed, m.map, prompt, 6, false);
  const std::string expect = id_line(greedy);
  const CliResult g = run_cli(with_device({"generate", "--weights", m.path(), "--prompt-ids",
                                           std::to_string(prompt[0]) + "," + std::to_string(prompt[1]) + "," +
                                               std::to_string(prompt[2]),
                                           "--max-new-tokens", "6", "--ignore-eos", "--ignore-context-limit"}),
                              m.dir.path);
  check_clean_exit(g);
  REQUIRE(g.code == 0);
  CHECK(g.out == expect + "\n");
}

TEST_CASE("cli model: generate stops after eos_token_id unless --ignore-eos") {
  std::mt19937 rng(std::random_device{}());
  test::TinyModel shape;
  shape.gate = GateKind::headwise;
  const std::vector<int64_t> prompt{5, 17, 42};
  // eos: the second id the model generates greedily.
  test::RandomModel probe(shape.config(), rng);
  const auto greedy = reference::greedy_generate(probe.cfg, probe.map, prompt, 4, false);
  rng.seed(7);
  ModelDir m(shape, rng, DType::F32, false, {{"eos_token_id", json::array({greedy[1] == 0 ? 1 : 0, greedy[1]})}});
  const auto first4 = reference::greedy_generate(m.model.cfg, m.map, prompt, 4, false);
  std::vector<int64_t> eos_list{first4[1]};
  write_text(m.dir / "generation_config.json", json{{"eos_token_id", eos_list}}.dump());
  auto text = [](std::span<const int64_t> v) {
    std::string s;
    for (int64_t id : v) {
      if (!s.empty()) s += ' ';
      s += std::to_string(id);
    }
    return s + "\n";
  };
  const CliResult stop = run_cli(with_device({"generate", "--weights", m.path(), "--prompt-ids", "5,17,42", "--max-new-tokens", "4"}), m.dir.path);
  check_clean_exit(stop);
  REQUIRE(stop.code == 0);
  CHECK(stop.out == text(std::span(first4).first(2)));
  const CliResult all = run_cli(with_device({"generate", "--weights", m.path(), "--prompt-ids", "5,17,42", "--max-new-tokens", "4", "--ignore-eos"}), m.dir.path);
  check_clean_exit(all);
  REQUIRE(all.code == 0);
  CHECK(all.out == text(first4));
}

// A model whose vocabulary is exactly a small tokenizer's (tests/tokenizer/unit),
// so every id it chooses decodes: the text on stdout is the reference's greedy
// ids decoded, streamed piece by piece; --json carries it too.
TEST_CASE("cli model: generate --prompt tokenizes with the model's tokenizer.json and streams the text") {
  std::mt19937 rng(std::random_device{}());
  TextModel text(rng);
  const std::string& unit = text.unit;
  const Tokenizer& tok = text.tok;
  ModelDir& m = text.m;
  const std::string prompt = "hello world, hello";
  const std::vector<int32_t> ids32 = tok.encode(prompt);
  const std::vector<int64_t> ids(ids32.begin(), ids32.end());
  const auto greedy = reference::greedy_generate(m.model.cfg, m.map, ids, 6, false);
  const std::vector<int32_t> greedy32(greedy.begin(), greedy.end());
  const std::string want = tok.decode(greedy32);

  const CliResult r = run_cli(
      with_device({"generate", "--weights", m.path(), "--prompt", prompt, "--max-new-tokens", "6", "--ignore-eos"}), m.dir.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  CHECK(r.out == want);
  CHECK(r.err.find("tokens/s") != std::string::npos);
  const CliResult j = run_cli(with_device({"generate", "--weights", m.path(), "--prompt", prompt, "--max-new-tokens",
                                           "6", "--ignore-eos", "--json"}),
                              m.dir.path);
  REQUIRE(j.code == 0);
  const json doc = json::parse(j.out);  // valid JSON even when the random ids are not UTF-8
  bool want_is_utf8 = true;
  try {
    (void)json(want).dump();
  } catch (const json::type_error&) {
    want_is_utf8 = false;
  }
  if (want_is_utf8) CHECK(doc.at("text") == want);
  else CHECK(doc.at("text").get<std::string>().find("\xEF\xBF\xBD") != std::string::npos);  // U+FFFD
  CHECK(doc.at("generated").get<std::vector<int64_t>>() == greedy);
  CHECK(doc.at("prompt_tokens") == ids.size());

  // No tokenizer.json beside the weights: an error naming it, nothing on stdout.
  std::filesystem::remove(m.dir / "tokenizer.json");
  const CliResult missing = run_cli(
      with_device({"generate", "--weights", m.path(), "--prompt", prompt, "--max-new-tokens", "2"}), m.dir.path);
  CHECK(missing.code == 1);
  CHECK(missing.out.empty());
  CHECK(missing.err.find("tokenizer.json") != std::string::npos);
  // --tokenizer names it instead; --prompt and --prompt-ids together are a usage error.
  const CliResult named = run_cli(with_device({"generate", "--weights", m.path(), "--prompt", prompt, "--tokenizer",
                                               unit, "--max-new-tokens", "6", "--ignore-eos"}),
                                  m.dir.path);
  REQUIRE(named.code == 0);
  CHECK(named.out == want);
  const CliResult both = run_cli(with_device({"generate", "--weights", m.path(), "--prompt", prompt, "--prompt-ids",
                                              "1,2", "--max-new-tokens", "2"}),
                                 m.dir.path);
  CHECK(both.code == 2);
  const CliResult bad = run_cli(with_device({"generate", "--weights", m.path(), "--prompt", "ok\xC3(", "--tokenizer",
                                             unit, "--max-new-tokens", "2"}),
                                m.dir.path);
  CHECK(bad.code == 1);
  CHECK(bad.out.empty());
  CHECK(bad.err.find("--prompt: the text to tokenize is not valid UTF-8 at byte offset 2") != std::string::npos);
}

// The text as --json writes it: bytes that are not UTF-8 as U+FFFD.
std::string json_string_of(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

TEST_CASE("cli model: generate samples with --seed, reads --prompt-file, stops at --stop, and decodes ids beyond the "
          "tokenizer as no text") {
  std::mt19937 rng(std::random_device{}());
  TextModel tm(rng);
  const std::string& unit = tm.unit;
  const Tokenizer& tok = tm.tok;
  const test::TinyModel& shape = tm.shape;
  ModelDir& m = tm.m;
  write_text(m.dir / "prompt.txt", "hello world, hello");
  const std::vector<std::string> sample = {"--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--min-p",
                                           "0.01", "--repeat-penalty", "1.2", "--seed", "17", "--max-new-tokens",
                                           "8", "--ignore-eos", "--json"};
  auto generate = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "--weights", m.path(), "--prompt-file", m.dir / "prompt.txt"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(with_device(args), m.dir.path);
    check_clean_exit(r);
    INFO("stderr: " << r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out);
  };
  // The library with the same options gives the same ids: the CLI passes each option through.
  Model model(test::context(), m.model.cfg, m.model.tensors);
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.stop_at_eos = false;
  o.sampling = {.temperature = 0.9, .top_k = 40, .top_p = 0.95, .min_p = 0.01, .repeat_penalty = 1.2, .seed = 17};
  const GenerateResult want = model.generate(tok, "hello world, hello", o);
  const json a = generate(sample);
  CHECK(a.at("generated").get<std::vector<int64_t>>() == want.ids);
  CHECK(a.at("finish_reason") == "length");
  CHECK(generate(sample).at("generated") == a.at("generated"));  // the seed repeats the draws

  // --stop: the text ends before the first occurrence of a 2-byte piece of the full text.
  const std::string text = want.text;
  size_t at = std::string::npos;
  for (size_t i = 1; i + 2 <= text.size() && at == std::string::npos; ++i)
    if (text.find(text.substr(i, 2)) == i) at = i;
  if (at != std::string::npos) {
    std::vector<std::string> stopping = sample;
    stopping.insert(stopping.end(), {"--stop", text.substr(at, 2)});
    const json s = generate(stopping);
    CHECK(s.at("finish_reason") == "stop");
    CHECK(s.at("text") == json_string_of(text.substr(0, at)));
  }
  const CliResult both = run_cli(with_device({"generate", "--weights", m.path(), "--prompt", "a", "--prompt-file",
                                              m.dir / "prompt.txt", "--max-new-tokens", "1"}),
                                 m.dir.path);
  CHECK(both.code == 2);
  const CliResult no_file = run_cli(
      with_device({"generate", "--weights", m.path(), "--prompt-file", m.dir / "none.txt", "--max-new-tokens", "1"}),
      m.dir.path);
  CHECK(no_file.code == 1);
  CHECK(no_file.err.find("none.txt") != std::string::npos);

  // A model with 40 more rows than the tokenizer has tokens, whose lm_head picks only those rows.
  test::TinyModel padded = shape;
  padded.vocab = tok.vocab_size() + 40;
  ModelDir p(padded, rng, DType::F32, false);
  write_text(p.dir / "tokenizer.json", test::read_file_text(unit));
  {
    FileBuilder f;
    for (const TensorSpec& spec : expected_model_weights(p.model.cfg)) {
      std::vector<float> v = p.stored.at(spec.name);
      if (spec.name == "lm_head.weight") std::fill(v.begin(), v.begin() + long(tok.vocab_size()) * shape.hidden, 0.0f);
      f.add(spec.name, spec.shape, v, DType::F32);
    }
    f.write(p.dir / "model.safetensors");
  }
  const std::vector<std::string> args = {"generate", "--weights", p.path(), "--prompt", "hello", "--max-new-tokens", "3",
                                         "--ignore-eos"};
  const CliResult plain = run_cli(with_device(args), p.dir.path);
  check_clean_exit(plain);
  INFO("stderr: " << plain.err);
  CHECK(plain.code == 0);
  CHECK(plain.out.empty());
  const auto said = [](const std::string& err) {
    size_t n = 0;
    for (size_t i = err.find("decoded as no text"); i != std::string::npos; i = err.find("decoded as no text", i + 1)) ++n;
    return n;
  };
  CHECK(said(plain.err) == 1);
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const CliResult j = run_cli(with_device(json_args), p.dir.path);
  REQUIRE(j.code == 0);
  const json doc = json::parse(j.out);
  CHECK(doc.at("text") == "");
  CHECK(doc.at("undecoded_ids") == doc.at("generated"));
  CHECK(doc.at("generated").size() == 3);
}

TEST_CASE("cli model: the context limit (max_position_embeddings) refuses longer input and stops generate, "
          "unless --ignore-context-limit") {
  std::mt19937 rng(std::random_device{}());
  test::TinyModel shape;
  ModelDir m(shape, rng, DType::F32, false, {{"max_position_embeddings", 6}});
  auto cli = [&](std::vector<std::string> args) {
    const CliResult r = run_cli(with_device(args), m.dir.path);
    check_clean_exit(r);
    return r;
  };
  const CliResult stopped = cli({"generate", "--weights", m.path(), "--prompt-ids", "1,2,3", "--max-new-tokens", "10",
                                 "--ignore-eos", "--json"});
  INFO("stderr: " << stopped.err);
  REQUIRE(stopped.code == 0);
  const json doc = json::parse(stopped.out);
  CHECK(doc.at("generated").size() == 3);
  CHECK(doc.at("finish_reason") == "context_limit");
  CHECK(stopped.err.find("context limit of 6") != std::string::npos);
  const CliResult on = cli({"generate", "--weights", m.path(), "--prompt-ids", "1,2,3", "--max-new-tokens", "10",
                            "--ignore-eos", "--json", "--ignore-context-limit"});
  REQUIRE(on.code == 0);
  CHECK(json::parse(on.out).at("generated").size() == 10);
  const CliResult long_prompt =
      cli({"generate", "--weights", m.path(), "--prompt-ids", "1,2,3,4,5,6,7", "--max-new-tokens", "1"});
  CHECK(long_prompt.code == 1);
  CHECK(long_prompt.out.empty());
  CHECK(long_prompt.err.find("prompt's 7 tokens") != std::string::npos);
  CHECK(long_prompt.err.find("context limit of 6") != std::string::npos);

  const std::string ids = m.ids_file("long.safetensors", {1, 2, 3, 4, 5, 6, 7}, 1, 7);
  const std::string out = m.dir / "logits.safetensors";
  const CliResult run = cli({"run", "--weights", m.path(), "--input", ids, "--output", out});
  CHECK(run.code == 1);
  CHECK(run.err.find("long.safetensors: tensor 'input_ids' holds 7 positions") != std::string::npos);
  CHECK(run.err.find("context limit of 6") != std::string::npos);
  CHECK(!fs::exists(out));
  const CliResult run_on = cli({"run", "--weights", m.path(), "--input", ids, "--output", out, "--ignore-context-limit"});
  CHECK(run_on.code == 0);
  CHECK(fs::exists(out));
}

TEST_CASE("cli model: malformed model directories and inputs exit 1 or 2 naming the file and tensor or key, writing nothing") {
  std::mt19937 rng(11);
  test::TinyModel shape;
  shape.layers = 2;
  ModelDir m(shape, rng, DType::F32, true);
  const std::string good_ids = m.ids_file("ids.safetensors", {1, 2, 3}, 1, 3);
  struct Case {
    std::string name;
    std::function<void(const fs::path& dir)> damage;  // applied to a copy of the model directory
    std::vector<std::string> args;                     // {} : run on good_ids
    int code;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"a layer's tensor missing", [&](const fs::path& d) { rewrite_tensor(d, "model.layers.1.mlp.up_proj.weight", {}); },
       {}, 1, {"model.layers.1.mlp.up_proj.weight"}},
      {"a layer's tensor misshapen", [&](const fs::path& d) { rewrite_tensor(d, "model.layers.0.self_attn.k_proj.weight", {32, 63}); },
       {}, 1, {"model.layers.0.self_attn.k_proj.weight", "[32, 63]", "[32, 64]", ".safetensors"}},
      {"num_hidden_layers beyond the tensors", [&](const fs::path& d) { rewrite_config(d, {{"num_hidden_layers", 3}}); },
       {}, 1, {"model.layers.2.", "num_hidden_layers is 3"}},
      // Bounded before anything is sized from it (10^9 layers took 23 GB of host memory).
      {"num_hidden_layers 10^9", [&](const fs::path& d) { rewrite_config(d, {{"num_hidden_layers", 1000000000}}); },
       {}, 1, {"config.json", "key 'num_hidden_layers' must be in 1..4096, got 1000000000"}},
      {"num_hidden_layers far beyond the tensors",
       [&](const fs::path& d) { rewrite_config(d, {{"num_hidden_layers", 4000}}); },
       {}, 1, {"num_hidden_layers is 4000", "layers 0..1 only", "model.layers.2."}},
      {"hidden_size 10^9", [&](const fs::path& d) { rewrite_config(d, {{"hidden_size", 1000000000}}); },
       {}, 1, {"config.json", "key 'hidden_size' must be in 1..16777216, got 1000000000"}},
      {"vocab mismatch between embedding and lm_head", [&](const fs::path& d) { rewrite_tensor(d, "lm_head.weight", {199, 64}); },
       {}, 1, {"lm_head.weight", "[199, 64]", "[200, 64]"}},
      {"a bad hidden_act", [&](const fs::path& d) { rewrite_config(d, {{"hidden_act", "relu2"}}); },
       {}, 1, {"config.json", "hidden_act", "relu2"}},
      {"rope_scaling longrope", [&](const fs::path& d) { rewrite_config(d, {{"rope_scaling", {{"type", "longrope"}}}}); },
       {}, 1, {"config.json", "rope_scaling.type", "\"longrope\"", "yarn, llama3"}},
      {"rope_scaling llama3 without low_freq_factor",
       [&](const fs::path& d) {
         rewrite_config(d, {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}}}});
       },
       {}, 1, {"config.json", "rope_scaling.low_freq_factor", "required"}},
      {"an id out of range", nullptr, {"ids:1,200,3"}, 1, {"input_ids", "input id 200 at [0, 1]", "[0, 200)"}},
      {"a negative id", nullptr, {"ids:-4,2,3"}, 1, {"input_ids", "input id -4 at [0, 0]"}},
      {"ids of rank 1", nullptr, {"rank1"}, 1, {"input_ids", "expected [B, T]"}},
      {"--layer with input_ids", nullptr, {"--layer", "0"}, 2, {"--layer", "input_ids"}},
      {"generate: an id out of range", nullptr, {"generate", "--prompt-ids", "1,2,999", "--max-new-tokens", "2"}, 1,
       {"id 999 at position 2", "[0, 200)"}},
      {"generate: a prompt that is not a list of integers", nullptr,
       {"generate", "--prompt-ids", "1,x,3", "--max-new-tokens", "2"}, 2, {"--prompt-ids", "'x'"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TempDir work("bad_model");
    const fs::path dir = work.path / "model";
    fs::copy(m.dir.path, dir, fs::copy_options::recursive);
    if (c.damage) c.damage(dir);
    const std::string out = work / "out.safetensors";
    std::vector<std::string> args;
    if (!c.args.empty() && c.args[0] == "generate") {
      args = {"generate", "--weights", dir.string()};
      args.insert(args.end(), c.args.begin() + 1, c.args.end());
    } else {
      std::string input = good_ids;
      if (!c.args.empty() && c.args[0].starts_with("ids:")) {
        std::vector<int64_t> ids;
        for (const char* p = c.args[0].c_str() + 4; *p;) {
          char* end = nullptr;
          ids.push_back(std::strtoll(p, &end, 10));
          p = *end ? end + 1 : end;
        }
        input = m.ids_file("case_ids.safetensors", ids, 1, int64_t(ids.size()));
      } else if (!c.args.empty() && c.args[0] == "rank1") {
        FileBuilder f;
        f.add_ids("input_ids", {3}, std::vector<int64_t>{1, 2, 3});
        f.write(work / "rank1.safetensors");
        input = work / "rank1.safetensors";
      }
      args = {"run", "--weights", dir.string(), "--input", input, "--output", out};
      if (!c.args.empty() && c.args[0] == "--layer") args.insert(args.end(), c.args.begin(), c.args.end());
    }
    const CliResult r = run_cli(with_device(args), work.path);
    check_clean_exit(r);
    INFO("stderr: " << r.err);
    CHECK(r.code == c.code);
    for (const std::string& what : c.mentions) {
      CAPTURE(what);
      CHECK(r.err.find(what) != std::string::npos);
    }
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!fs::exists(out));
    CHECK(r.out.empty());
  }
}

}  // namespace test_cli_model
#endif  // VKGATE_CLI
