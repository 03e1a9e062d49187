// vkgate.Model, vkgate.Sequence and the streaming text generator.
#include <algorithm>
#include <filesystem>

#include "common.hpp"
#include "vkgate/model.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::py_bind {

namespace {

struct PyModel {
  std::optional<Model> model;
  std::string dir;                     // where Model.load read it ("" when built from a dict)
  std::optional<Tokenizer> tokenizer;  // loaded from dir on first use of text
  std::optional<ModelStats> last_stats;
  Busy busy;

  const Tokenizer& text_tokenizer(const py::handle& given) {
    if (!given.is_none()) return instance_arg<Tokenizer>(given, "tokenizer", "Tokenizer");
    if (!tokenizer) {
      if (dir.empty())
        fail(ErrorCode::invalid_argument, "tokenizer: this model was built from a dict; pass tokenizer=vkgate.Tokenizer(path)");
      // A GGUF file carries its own tokenizer; a checkpoint directory its tokenizer.json.
      if (!std::filesystem::is_directory(dir)) return tokenizer.emplace(Tokenizer::load(dir));
      if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
        fail(ErrorCode::invalid_argument, "tokenizer: " + dir + " has no tokenizer.json; pass token ids or tokenizer=");
      tokenizer = Tokenizer::load(dir);
    }
    return *tokenizer;
  }
};

struct PySequence {
  std::optional<Sequence> seq;
};

py::dict model_stats_dict(const ModelStats& s) {
  py::dict r;
  r["layers"] = s.layers;
  r["heads"] = s.heads;
  const int64_t La = int64_t(s.attention_layers.size()), Lm = int64_t(s.moe_layers.size());
  r["attention_layers"] = to_numpy(std::vector<int64_t>(s.attention_layers.begin(), s.attention_layers.end()), {La});
  r["first_token_attn"] = to_numpy(std::vector<double>(s.first_token_attn), {La, s.heads});
  r["max_activation"] = to_numpy(std::vector<double>(s.max_activation), {int64_t(s.max_activation.size())});
  r["gate_mean"] = to_numpy(std::vector<double>(s.gate_mean), {int64_t(s.gate_mean.size())});
  r["moe_layers"] = to_numpy(std::vector<int64_t>(s.moe_layers.begin(), s.moe_layers.end()), {Lm});
  r["expert_load"] = to_numpy(std::vector<double>(s.expert_load), {Lm, s.experts});
  return r;
}

// The keywords Model.load and Model() share. quant: None, or a block format
// (parse_quant's spellings) the float linear weights are quantized to on load.
ModelOptions model_options(const py::handle& precision, const py::handle& check_finite,
                           const py::handle& ignore_context_limit, const py::handle& quant) {
  const BlockOptions b = block_options(precision, check_finite);
  ModelOptions o{b.precision, b.check_finite, bool_arg(ignore_context_limit, "ignore_context_limit")};
  if (!quant.is_none()) {
    const std::string name = str_arg(quant, "quant");
    o.quant = parse_quant(name);
    if (!o.quant) {
      std::string names;
      for (std::string_view s : quant_spellings()) names += (names.empty() ? "'" : ", '") + std::string(s) + "'";
      fail(ErrorCode::invalid_argument, "quant: expected None or one of " + names + ", got '" + name + "'");
    }
  }
  return o;
}

// ids as [batch, tokens]: a 1-D array is one row.
std::pair<int, int> batch_tokens(const IdsArg& ids, const char* what) {
  if (ids.shape.size() == 1) return {1, int(ids.shape[0])};
  if (ids.shape.size() == 2) return {int(ids.shape[0]), int(ids.shape[1])};
  fail(ErrorCode::shape_mismatch, std::string(what) + ": expected [tokens] or [batch, tokens], got " + shape_text(ids.shape));
}

// Model.extend_together's and extend_top's sequences (a list) and their ids:
// one each, or with `rows_of_ids` [n, tokens] too.
std::pair<std::vector<Sequence*>, IdsArg> sequences_and_ids(const arg::Sequences& sequences, const arg::Ids& ids,
                                                            bool rows_of_ids = false) {
  if (!py::isinstance<py::list>(sequences.obj) && !py::isinstance<py::tuple>(sequences.obj))
    fail(ErrorCode::invalid_argument, "sequences: expected a list of vkgate.Sequence, got " + describe(sequences.obj));
  std::vector<Sequence*> seqs;
  for (const py::handle& item : sequences.obj) {
    const std::string what = "sequences[" + std::to_string(seqs.size()) + "]";
    seqs.push_back(&*instance_arg<PySequence>(item, what.c_str(), "Sequence").seq);
  }
  IdsArg a = ids_arg(ids, "ids");
  const bool rows = rows_of_ids && a.shape.size() == 2;
  if ((a.shape.size() != 1 && !rows) || a.shape[0] != int64_t(seqs.size()))
    fail(ErrorCode::shape_mismatch, std::string("ids: expected one id per sequence, [") + std::to_string(seqs.size()) +
                                        "]" + (rows_of_ids ? ", or [" + std::to_string(seqs.size()) + ", tokens]" : "") +
                                        ", got " + shape_text(a.shape));
  return {std::move(seqs), std::move(a)};
}

// Model.generate(text): one Generation step per next() (several while the
// new ids complete no character), the GIL released while the device runs.
struct TextStream {
  py::object owner;  // the Python Model, kept alive while the stream is
  PyModel* model;
  Tokenizer tokenizer;  // the Generation reads it: kept here, beside it
  std::vector<int64_t> prompt;
  Generation generation;

  TextStream(py::object o, PyModel* m, const Tokenizer& t, std::vector<int64_t> p, const GenerateOptions& options)
      : owner(std::move(o)), model(m), tokenizer(t), prompt(std::move(p)),
        generation(*m->model, prompt, options, &tokenizer) {}

  py::str next() {
    std::string piece;
    while (piece.empty()) {
      if (generation.done()) throw py::stop_iteration();
      // Ids that complete no character keep this loop from returning to Python,
      // which checks for Ctrl-C between next() calls: check here too.
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      Busy::Scope guard(model->busy, "this Model");
      py::gil_scoped_release nogil;
      piece = generation.step().text;
    }
    return text_of(piece);
  }
};

// GenerateOptions::logprobs' entries as Python: (id, logprob, [(id, logprob), ...]) each.
py::list logprobs_list(const std::vector<TokenLogprob>& entries) {
  py::list out;
  for (const TokenLogprob& t : entries) out.append(py::make_tuple(t.id, t.logprob, py::cast(t.top)));
  return out;
}

// TextStream.step_all's and prefill_all's streams (a list), of one Model.
std::vector<TextStream*> streams_arg(const arg::TextStreams& streams) {
  if (!py::isinstance<py::list>(streams.obj) && !py::isinstance<py::tuple>(streams.obj))
    fail(ErrorCode::invalid_argument, "streams: expected a list of vkgate.TextStream, got " + describe(streams.obj));
  std::vector<TextStream*> out;
  for (const py::handle& item : streams.obj) {
    const std::string what = "streams[" + std::to_string(out.size()) + "]";
    out.push_back(&instance_arg<TextStream>(item, what.c_str(), "TextStream"));
    if (out.back()->model != out[0]->model)
      fail(ErrorCode::invalid_argument, what + ": a stream of another Model than streams[0]'s");
  }
  return out;
}

// Generation::step_all or prefill_all of the streams, the GIL released.
template <class F>
auto together(const arg::TextStreams& streams, F&& f) {
  const std::vector<TextStream*> s = streams_arg(streams);
  std::vector<Generation*> gens;
  for (TextStream* t : s) gens.push_back(&t->generation);
  using R = decltype(f(std::span<Generation* const>(gens)));
  if (gens.empty()) return R{};
  Busy::Scope guard(s[0]->model->busy, "this Model");
  py::gil_scoped_release nogil;
  return f(std::span<Generation* const>(gens));
}

// The sampling and stop keywords of Model.generate.
GenerateOptions generate_options(const py::handle& max_new_tokens, const py::handle& stop_at_eos,
                                 const py::handle& temperature, const py::handle& top_k, const py::handle& top_p,
                                 const py::handle& min_p, const py::handle& repeat_penalty,
                                 const py::handle& repeat_last_n, const py::handle& presence_penalty,
                                 const py::handle& frequency_penalty, const py::handle& seed, const py::handle& stop,
                                 const py::handle& logprobs) {
  GenerateOptions o;
  if (!logprobs.is_none()) o.logprobs = int(integer_arg(logprobs, "logprobs", 0, GenerateOptions::kMaxLogprobs));
  o.max_new_tokens = int(integer_arg(max_new_tokens, "max_new_tokens", 0, 1 << 24));
  o.stop_at_eos = bool_arg(stop_at_eos, "stop_at_eos");
  SamplingOptions& s = o.sampling;
  s.temperature = float_value_arg(temperature, "temperature");
  s.top_k = int(integer_arg(top_k, "top_k", 0, INT_MAX));
  s.top_p = float_value_arg(top_p, "top_p");
  s.min_p = float_value_arg(min_p, "min_p");
  s.repeat_penalty = float_value_arg(repeat_penalty, "repeat_penalty");
  s.repeat_last_n = int(integer_arg(repeat_last_n, "repeat_last_n", -1, INT_MAX));
  s.presence_penalty = float_value_arg(presence_penalty, "presence_penalty");
  s.frequency_penalty = float_value_arg(frequency_penalty, "frequency_penalty");
  if (!seed.is_none()) s.seed = uint64_arg(seed, "seed");
  if (py::isinstance<py::str>(stop)) {
    o.stop.push_back(str_arg(stop, "stop"));
  } else if (!stop.is_none()) {
    if (!py::isinstance<py::list>(stop) && !py::isinstance<py::tuple>(stop))
      fail(ErrorCode::invalid_argument, "stop: expected None, a str or a list of str, got " + describe(stop));
    for (const py::handle& item : stop) o.stop.push_back(str_arg(item, "stop"));
  }
  Sampler check(s);  // a sampling option out of range is refused before any step
  return o;
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<PySequence>(m, "Sequence",
                         "One generation's KV caches (Model.start): fed by Model.extend. Keeps its Model alive.")
      .def_property_readonly("batch", [](PySequence& s) { return s.seq->batch(); })
      .def_property_readonly("capacity", [](PySequence& s) { return s.seq->capacity(); })
      .def_property_readonly("length", [](PySequence& s) { return s.seq->length(); })
      .def("truncate", [](PySequence& s, arg::Int length) { s.seq->truncate(int_arg(length, "length")); },
           py::arg("length"),
           "Forgets the positions from `length` on. Recurrent states (GLA, Gated DeltaNet) go back only to 0,\n"
           "the current length or the checkpoint's.")
      .def("checkpoint", [](PySequence& s) { s.seq->checkpoint(); },
           "Saves the recurrent states at the current length, for truncate() to return to (one checkpoint).")
      .def_property_readonly("checkpoint_length", [](PySequence& s) { return s.seq->checkpoint_length(); },
                             "The checkpoint's length; -1 when there is none.")
      .def("rollback_length", [](PySequence& s, arg::Int at_most) {
             return s.seq->rollback_length(int_arg(at_most, "at_most"));
           },
           py::arg("at_most"), "The longest length <= at_most that truncate() accepts.")
      .def("reserve", [](PySequence& s, arg::Int capacity) { s.seq->reserve(int_arg(capacity, "capacity")); },
           py::arg("capacity"),
           "Gives the sequence room for `capacity` positions, its positions, states and checkpoint kept.");

  py::class_<TextStream>(m, "TextStream",
                         "Model.generate(text): iterate for the generated text piece by piece (whole characters).\n"
                         ".ids and .text hold what was generated so far; .finish_reason says why it ended\n"
                         "(None while it runs); .undecoded_ids lists ids the tokenizer does not know (no text).")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TextStream::next)
      .def_property_readonly("ids", [](TextStream& s) { return s.generation.result().ids; })
      .def_property_readonly("prompt_ids", [](TextStream& s) { return s.prompt; })
      .def_property_readonly("text", [](TextStream& s) { return text_of(s.generation.result().text); })
      .def_property_readonly("undecoded_ids", [](TextStream& s) { return s.generation.result().undecoded_ids; })
      .def_property_readonly("logprobs", [](TextStream& s) { return logprobs_list(s.generation.result().logprobs); })
      .def_property_readonly("finish_reason", [](TextStream& s) -> py::object {
        if (!s.generation.done()) return py::none();
        return py::str(to_string(s.generation.result().finish));
      })
      .def_static(
          "step_all",
          [](arg::TextStreams streams) {
            const auto steps = together(streams, [](std::span<Generation* const> g) { return Generation::step_all(g); });
            py::list out;
            for (const Generation::Step& step : steps) out.append(text_of(step.text));
            return out;
          },
          py::arg("streams"),
          "One id for each of several streams of one Model (a server's round): those whose prompt has run\n"
          "take their next position together in one device step, the weights read once for all. Returns\n"
          "the text each id completes (\"\" while an id completes no character). A stream that has ended\n"
          "is an error.")
      .def_static(
          "prefill_all",
          [](arg::TextStreams streams, arg::Int tokens) {
            const int n = int(integer_arg(tokens, "tokens", 1, INT_MAX));
            return together(streams, [n](std::span<Generation* const> g) { return Generation::prefill_all(g, n); });
          },
          py::arg("streams"), py::arg("tokens"),
          "Runs up to `tokens` more positions of each stream's prompt; the streams that run as many run\n"
          "together in one device step. Returns whether each one's whole prompt has run; step_all (or\n"
          "next()) then chooses the first ids.");

  py::class_<PyModel>(m, "Model",
                      "A whole decoder-only model (Qwen3 with the paper's gate flags, Llama, or fla's GLA) on the device.\n\n"
                      "Model.load(ctx, dir, precision='fp32', check_finite=True, ignore_context_limit=False, quant=None):\n"
                      "a Hugging Face checkpoint directory (config.json, model.safetensors or its index and shards)\n"
                      "or a .gguf file.\n"
                      "Model(ctx, config, weights, precision='fp32', check_finite=True, ignore_context_limit=False,\n"
                      "quant=None): a vkgate.ModelConfig and a dict {full Hugging Face name: float32/float16 array}\n"
                      "(vkgate.expected_model_weights). ignore_context_limit: run past context_limit. quant: None or\n"
                      "'q8_0', 'q4_0', 'q4_1', 'q5_0', 'q5_1', 'q2_k', 'q3_k', 'q4_k', 'q5_k', 'q6_k', 'iq4_nl', 'iq4_xs':\n"
                      "the float linear weights (projections, experts, an untied lm_head) quantized to that block format on load.\n"
                      "One Model is used by one thread at a time.")
      .def_static(
          "load",
          [](arg::Context ctx_arg, arg::Path dir, arg::Str precision, arg::Bool check_finite,
             arg::Bool ignore_context_limit, arg::OptionalStr quant) {
            Context& ctx = context_arg(ctx_arg);
            const ModelOptions o = model_options(precision, check_finite, ignore_context_limit, quant);
            auto pm = std::make_unique<PyModel>();
            pm->dir = fspath(dir, "dir");
            py::gil_scoped_release nogil;
            pm->model.emplace(Model::load(ctx, pm->dir, o));
            return pm;
          },
          py::arg("ctx"), py::arg("dir"), py::arg("precision") = "fp32", py::arg("check_finite") = true,
          py::arg("ignore_context_limit") = false, py::arg("quant") = py::none(), py::keep_alive<0, 1>(),
          "Reads DIR's config.json and checkpoint (or a .gguf file: config, tensors and tokenizer from it),\n"
          "checks every tensor and uploads it. Errors name the file and the tensor or key. precision: 'fp32',\n"
          "'fp16' or 'bf16' device storage. quant: None or a block format ('q8_0', 'q4_k', ...) to quantize\n"
          "the float linear weights to.")
      .def(py::init([](arg::Context ctx_arg, arg::ModelConfig config, arg::Weights weights, arg::Str precision,
                       arg::Bool check_finite, arg::Bool ignore_context_limit, arg::OptionalStr quant) {
             Context& ctx = context_arg(ctx_arg);
             const ModelConfig cfg = config_arg<ModelConfig>(config, "config", "ModelConfig");
             const ModelOptions o = model_options(precision, check_finite, ignore_context_limit, quant);
             std::vector<py::array> holders;
             const TensorMap map = tensor_map(dict_arg(weights, "weights", "a dict {name: numpy array}"), holders, "weights");
             auto pm = std::make_unique<PyModel>();
             py::gil_scoped_release nogil;
             pm->model.emplace(ctx, cfg, map, o);
             return pm;
           }),
           py::arg("ctx"), py::arg("config"), py::arg("weights"), py::arg("precision") = "fp32",
           py::arg("check_finite") = true, py::arg("ignore_context_limit") = false, py::arg("quant") = py::none(),
           py::keep_alive<1, 2>())
      .def(
          "logits",
          [](PyModel& self, arg::Ids ids, arg::Bool stats_arg) -> py::object {
            Busy::Scope guard(self.busy, "this Model");
            IdsArg a = ids_arg(ids, "ids");
            const bool stats = bool_arg(stats_arg, "stats");
            const auto [B, T] = batch_tokens(a, "ids");
            std::vector<float> out;
            ModelStats st;
            {
              py::gil_scoped_release nogil;
              out = self.model->logits(a.data, B, T, stats ? &st : nullptr);
            }
            const int64_t V = self.model->config().vocab_size;
            std::vector<int64_t> shape = a.shape;
            shape.push_back(V);
            py::object y = to_numpy(std::move(out), shape);
            if (!stats) return y;
            self.last_stats = st;
            return py::make_tuple(y, model_stats_dict(st));
          },
          py::arg("ids"), py::arg("stats") = false,
          "logits(ids, stats=False)\n\n"
          "ids: token ids [tokens] or [batch, tokens] (any integer array or list), each in [0, vocab_size).\n"
          "Returns float32 logits [..., vocab_size] of every position (each row causal from its first token).\n"
          "stats: also return the paper's per-layer measurements (a dict of numpy arrays: attention_layers\n"
          "[L_attn] and for them first_token_attn [L_attn, heads], gate_mean [L_attn] or empty;\n"
          "max_activation [layers]; moe_layers [L_moe] and expert_load [L_moe, E]), also kept as .stats.")
      .def_property_readonly(
          "stats",
          [](PyModel& self) -> py::object {
            if (!self.last_stats) return py::none();
            return model_stats_dict(*self.last_stats);
          },
          "The statistics of the last logits(..., stats=True), or None.")
      .def(
          "generate",
          [](py::object self_obj, const py::object& prompt, arg::Int max_new_tokens, arg::Bool stop_at_eos,
             const py::object& tokenizer, arg::Float temperature, arg::Int top_k, arg::Float top_p, arg::Float min_p,
             arg::Float repeat_penalty, arg::Int repeat_last_n, arg::Float presence_penalty,
             arg::Float frequency_penalty, arg::OptionalInt seed, const py::object& stop,
             arg::OptionalInt logprobs) -> py::object {
            PyModel& self = self_obj.cast<PyModel&>();
            GenerateOptions o = generate_options(max_new_tokens, stop_at_eos, temperature, top_k, top_p, min_p,
                                                 repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,
                                                 seed, stop, logprobs);
            if (py::isinstance<py::str>(prompt)) {
              const Tokenizer& tok = self.text_tokenizer(tokenizer);
              const std::vector<int32_t> ids32 = tok.encode(str_arg(prompt, "prompt"));
              if (ids32.empty()) fail(ErrorCode::invalid_argument, "prompt: encodes to no tokens");
              return py::cast(std::make_unique<TextStream>(self_obj, &self, tok,
                                                           std::vector<int64_t>(ids32.begin(), ids32.end()), o));
            }
            Busy::Scope guard(self.busy, "this Model");
            IdsArg a = ids_arg(prompt, "prompt");
            if (a.shape.size() != 1) fail(ErrorCode::shape_mismatch, "prompt: expected 1-D token ids, got " + shape_text(a.shape));
            if (!o.stop.empty()) fail(ErrorCode::invalid_argument, "stop: stop strings are matched in text: give the prompt as a str");
            // Ctrl-C between steps stops the generation and raises KeyboardInterrupt; the model stays usable.
            Interrupts interrupts;
            o.on_token = [&interrupts](int64_t) { return interrupts.poll(); };
            GenerateResult r;
            {
              py::gil_scoped_release nogil;
              r = self.model->generate(a.data, o);
            }
            interrupts.raise_pending();
            const int64_t n = int64_t(r.ids.size());
            py::object ids = to_numpy(std::move(r.ids), {n});
            if (o.logprobs < 0) return ids;
            return py::make_tuple(ids, logprobs_list(r.logprobs));
          },
          py::arg("prompt"), py::arg("max_new_tokens") = 16, py::arg("stop_at_eos") = true,
          py::arg("tokenizer") = py::none(), py::kw_only(), py::arg("temperature") = 0.0, py::arg("top_k") = 0,
          py::arg("top_p") = 1.0, py::arg("min_p") = 0.0, py::arg("repeat_penalty") = 1.0,
          py::arg("repeat_last_n") = 64, py::arg("presence_penalty") = 0.0, py::arg("frequency_penalty") = 0.0,
          py::arg("seed") = py::none(), py::arg("stop") = py::none(), py::arg("logprobs") = py::none(),
          "generate(prompt, max_new_tokens=16, stop_at_eos=True, tokenizer=None, *, temperature=0.0, top_k=0,\n"
          "         top_p=1.0, min_p=0.0, repeat_penalty=1.0, repeat_last_n=64, presence_penalty=0.0,\n"
          "         frequency_penalty=0.0, seed=None, stop=None, logprobs=None)\n\n"
          "Decoding with the KV cache on the device: greedy while temperature is 0, else sampled as\n"
          "transformers' generate() samples (penalties, temperature, top_k, top_p, min_p; seed repeats the draws).\n"
          "prompt: token ids (1-D) -> the generated ids (int64 array, without the prompt); or text (str)\n"
          "  -> a TextStream iterator of text pieces as they are generated, with the model directory's\n"
          "  tokenizer.json (or `tokenizer`); stop: a str or list of str that ends the text (left out of it).\n"
          "Stops after an EOS id of the config when stop_at_eos. Ctrl-C stops it (KeyboardInterrupt).\n"
          "logprobs: N in [0, 20] also gives each generated id's log-probability under the model (the\n"
          "  log-softmax of its logits, before temperature, penalties or truncation) and the N likeliest ids',\n"
          "  as (id, logprob, [(id, logprob), ...]) per id: a TextStream's .logprobs, or with ids a tuple\n"
          "  (ids, logprobs).")
      .def(
          "start",
          [](PyModel& self, arg::Int batch, arg::Int capacity) {
            Busy::Scope guard(self.busy, "this Model");
            const int b = int(integer_arg(batch, "batch", 1, INT_MAX)), c = int(integer_arg(capacity, "capacity", 1, INT_MAX));
            auto s = std::make_unique<PySequence>();
            s->seq.emplace(self.model->start(b, c));
            return s;
          },
          py::arg("batch"), py::arg("capacity"), py::keep_alive<0, 1>(),
          "A Sequence of `batch` rows with room for `capacity` positions each.")
      .def(
          "extend",
          [](PyModel& self, arg::Sequence sequence, arg::Ids ids) {
            Busy::Scope guard(self.busy, "this Model");
            PySequence& seq = instance_arg<PySequence>(sequence, "sequence", "Sequence");
            IdsArg a = ids_arg(ids, "ids");
            const auto [B, T] = batch_tokens(a, "ids");
            if (B != seq.seq->batch())
              fail(ErrorCode::shape_mismatch, "ids: " + std::to_string(B) + " rows for a sequence of batch " +
                                                  std::to_string(seq.seq->batch()));
            std::vector<float> out;
            {
              py::gil_scoped_release nogil;
              out = self.model->extend(*seq.seq, a.data, T);
            }
            std::vector<int64_t> shape = a.shape.size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{B};
            shape.push_back(self.model->config().vocab_size);
            return to_numpy(std::move(out), shape);
          },
          py::arg("sequence"), py::arg("ids"),
          "Runs ids [tokens] or [batch, tokens] as the next positions of `sequence`; returns the logits\n"
          "of the last of them ([vocab] or [batch, vocab]).")
      .def(
          "extend_together",
          [](PyModel& self, arg::Sequences sequences, arg::Ids ids) {
            Busy::Scope guard(self.busy, "this Model");
            auto [seqs, a] = sequences_and_ids(sequences, ids, true);
            const int tokens = a.shape.size() == 2 ? int(a.shape[1]) : 1;
            std::vector<float> out;
            {
              py::gil_scoped_release nogil;
              out = self.model->extend(seqs, a.data, tokens);
            }
            return to_numpy(std::move(out), {int64_t(seqs.size()), self.model->config().vocab_size});
          },
          py::arg("sequences"), py::arg("ids"),
          "Runs ids[i] as the next position of sequences[i] (each of batch 1, at its own length) in one\n"
          "device step, the weights read once for all; returns the logits [len(sequences), vocab].\n"
          "ids [len(sequences), tokens]: the next `tokens` positions of each (prompts together), the\n"
          "logits of each one's last.")
      .def(
          "extend_top",
          [](PyModel& self, arg::Sequences sequences, arg::Ids ids, arg::Int k) {
            Busy::Scope guard(self.busy, "this Model");
            auto [seqs, a] = sequences_and_ids(sequences, ids);
            const int top = int(integer_arg(k, "k", 1, INT_MAX));
            TopLogits t;
            {
              py::gil_scoped_release nogil;
              t = self.model->extend_top(seqs, a.data, top);
            }
            const int64_t n = int64_t(seqs.size());
            py::dict full;
            for (auto& [row, logits] : t.full) {
              const int64_t V = int64_t(logits.size());
              full[py::int_(row)] = to_numpy(std::move(logits), {V});
            }
            return py::make_tuple(to_numpy(std::move(t.ids), {n, t.k}), to_numpy(std::move(t.logits), {n, t.k}), full);
          },
          py::arg("sequences"), py::arg("ids"), py::arg("k"),
          "As extend_together, but returns only each row's k largest logits, found on the device (k <= 256):\n"
          "(ids [n, k] int64, logits [n, k] float32), most likely first, equal logits the lower id first,\n"
          "and a dict {row: logits [vocab]} of the rows where more ids tie with the k-th than fit in k.")
      .def_property_readonly("config", [](PyModel& self) { return self.model->config(); })
      .def_property_readonly("precision", [](PyModel& self) { return std::string(to_string(self.model->precision())); })
      .def_property_readonly("context_limit", [](PyModel& self) { return self.model->context_limit(); },
                             "Positions one sequence may hold (max_position_embeddings, or as its rope_scaling\n"
                             "reaches); longer prompts are refused and generation stops there. 0: none\n"
                             "(ignore_context_limit=True, a GLA model).")
      .def_property_readonly("memory",
                             [](PyModel& self) {
                               const MemoryUse u = self.model->memory();
                               py::dict r;
                               r["weights"] = u.weights;
                               r["kv_cache"] = u.kv_cache;
                               r["workspace"] = u.workspace;
                               return r;
                             },
                             "Device memory held, bytes: weights, kv_cache, workspace.")
      .def_property_readonly("recordings", [](PyModel& self) { return self.model->recordings(); })
      .def("last_timings", [](PyModel& self) { return timings_list(self.model->last_timings()); },
           "[(stage, microseconds)] of the last step's dispatches (empty without GPU timestamps:\n"
           "Context(timestamps=True), or VKGATE_TIMESTAMPS=1 when the Context was made).")
      .def(
          "set_poison",
          [](PyModel& self, arg::Bool on) {
            Busy::Scope guard(self.busy, "this Model");
            self.model->set_poison(bool_arg(on, "on"));
          },
          py::arg("on"));
}

}  // namespace vkgate::py_bind
