// llama.cpp's logits at every position of one sequence of token ids, for
// tools/peer/compare_logits.py: argv[1] a GGUF file, argv[2..] the ids. One
// line per position, the vocabulary's logits. Built against a llama.cpp
// build outside the repository (tools/build_peer.sh); CPU backend.
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: llama_logits FILE.gguf ID...\n");
    return 2;
  }
  const int n = argc - 2;
  llama_log_set(quiet, NULL);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = atoi(argv[i + 2]);
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  if (llama_decode(ctx, b) != 0) return 1;
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (int i = 0; i < n; ++i) {
    const float* l = llama_get_logits_ith(ctx, i);
    for (int v = 0; v < vocab; ++v) printf("%.9g%c", l[v], v + 1 == vocab ? '\n' : ' ');
  }
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
