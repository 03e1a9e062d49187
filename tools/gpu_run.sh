#!/usr/bin/env bash
# Runs vkgate on a lent GPU machine (the agent tools' `run` on an H100/H200) in one call:
# device list, the GPU test suite under the validation layer (fused and
# unfused paths), `vkgate bench` and the PyTorch peer on the same card.
# Carry [".gl", "build"]: .gl holds libvulkan1, vulkan-validationlayers and the
# glvnd libraries as .debs (tools/build_peer.sh fetches them), .gl/lib the CLI's
# cpp-httplib, OpenSSL and brotli. The golden cases come with the working tree (tests/golden).
# Results go to $OUT (JSON and text).
# Usage: [BUILD=dir] tools/gpu_run.sh [tests|bench|all|quick|peer|sweep]   (default: all)
# sweep: one ~8-minute call for issue 30: the staged matmul's tiles swept
# (`vkgate bench --op matmul --tiles all`, with compiler statistics) at
# 8192³ and at llama.cpp's test-backend-ops shapes beside its own kernels,
# the quantized decode kernels too (`--op qmatmul --tiles all`), and the
# tensor-core flash attention's tiles (`--op attention --tiles all`);
# the qwen3-0.6b shape as F16, Q8_0 and Q4_K GGUF files (made there by
# tools/make_random_gguf.py and llama-quantize) in vkgate (with 1, 8 and 16
# sequences decoding together) and llama-bench;
# PyTorch's block, matmul and model; the suite. Carry [".gl", ".peer",
# "build/tools/vkgate", "build/tests/vkgate_tests"]; tools/build_peer.sh makes
# both (.peer: llama-bench, llama-quantize and test-backend-ops xz-compressed,
# run through .peer/xzrun; ~10 minutes here).
# SWEEP_STEPS picks steps, in order (default "tiles flash qmatmul models splits batch
# next topk int8 torch torchmodel suite"; all of them take over 10 minutes with the
# suite at its default, more than one call's 600 s: e.g. SWEEP_STEPS="qmatmul
# models splits suite"). The qmatmul and flash steps export their winners
# (VKGATE_QROWS_TILE, VKGATE_FLASH_TILE) to the steps after them unless
# SWEEP_ADOPT=0. SUITE_S bounds the suite (default 300 s; 170 s ran 252 of
# its ~340 cases on the H100 on 11-27), SWEEP_DEADLINE_S ends it that many
# seconds after the sweep began, SUITE_FILTER (doctest -tc patterns) narrows it.
# quick: one ~8-minute call for a session's whole device budget: the library
# tests (no CLI) on the default path, whole-model benches (qwen3-0.6b fp16 and
# bf16), the block and the matmul against PyTorch on the same card; every
# step bounded by `timeout`. Carry [".gl", "build/tools/vkgate",
# "build/tests/vkgate_tests"] (the test binary finds the golden cases through
# VKGATE_GOLDEN_DIR).
# peer: llama.cpp's llama-bench (Vulkan) against `vkgate bench --model-shape`,
# the KHR cooperative-matrix build against this one, the GDN layer, the mixers'
# tests. Also carry ".peer": llama-bench (built outside the repository from
# llama.cpp's source, BENCHMARKS.md says how) and vkgate-khr (this tree built
# with a newer glslang, outside the repository, never in CI).
set -uo pipefail
what=${1:-all}
build=${BUILD:-build}  # the carried Release tree
cli=$build/tools/vkgate
out=${OUT:-/tmp/vkgate-gpu}
mkdir -p "$out"
# The cases of `vkgate bench --json` documents, one line each.
print_cases() {
  python3 - "$1" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
dec = json.JSONDecoder(); i = 0
while i < len(text):
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    doc, i = dec.raw_decode(text, i)
    for c in doc["cases"]:
        print(f'{c["name"]:48s} {c["median_us"]:12.1f} us {c["gflops"]:10.1f} GFLOP/s {c["gbps"]:8.1f} GB/s nmse {c["nmse"]:.1e} mem {c["device_bytes"]/2**20:.0f} MiB')
    if "peak" in doc: print("peak", doc["peak"])
PY
}
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
# The CLI links cpp-httplib (serve) and through it OpenSSL and brotli, which the
# card's image may lack: .gl/lib's packages are unpacked apart from / and put on
# the library path only for the libraries ldd cannot find, so nothing the
# image has (PyTorch's OpenSSL) is shadowed.
deps=/opt/vkgate-deps
if ldd "$cli" | grep -q "not found"; then
  for f in .gl/lib/*.deb; do dpkg -x "$f" /tmp/vkgate-deb; done
  mkdir -p $deps
  export LD_LIBRARY_PATH=$deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for round in 1 2 3; do  # a missing library hides its own dependencies from ldd
    for lib in $(ldd "$cli" | awk '/not found/ {print $1}'); do
      found=$(find /tmp/vkgate-deb -name "$lib" | head -1)
      [ -n "$found" ] && cp -a "$(dirname "$found")"/${lib%%.so*}.so* $deps/
    done
  done
  rm -rf /tmp/vkgate-deb
fi
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if ! $cli devices 2>/dev/null | grep -qi nvidia; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
{
  echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== vkgate devices"
  $cli devices
} 2>&1 | tee "$out/devices.txt"
if [ "$what" = quick ]; then
  export VKGATE_GOLDEN_DIR=$PWD/tests/golden
  echo "== pwd $PWD"
  echo "== tests, default path (validation + synchronization validation), no CLI or soak tests"
  timeout 240 env VKGATE_TEST_DEVICE=nvidia $build/tests/vkgate_tests -tce='cli*,soak*,consumer*' \
    > "$out/tests.txt" 2>&1
  echo "exit $?"; grep -E "^\[doctest\] (test cases|assertions)|TEST CASE:|ERROR" "$out/tests.txt" | head -40
  echo "== whole models: qwen3-0.6b (random weights), prefill 64 and 512 tokens, decode 64"
  for p in fp16 bf16; do
    timeout 90 $cli bench --device nvidia --quiet --model-shape qwen3-0.6b --precision $p --prompts 64,512 \
      --decode 64 2>&1 | grep -vE "^device" | tee -a "$out/model_bench.txt"
  done
  echo "== block prefill T 4096, decode over 32k, matmul 8192³ (fp16)"
  {
    timeout 60 $cli bench --device nvidia --quiet --json --peak --op matmul --m 8192 --n 8192 --k 8192 --dtype f16
    timeout 60 $cli bench --device nvidia --quiet --json --block --T 4096 --precision fp16
    timeout 60 $cli bench --device nvidia --quiet --json --block --past 32768 --T 1 --precision fp16
  } > "$out/vkgate_bench.jsonl" 2> "$out/vkgate_bench.err"
  grep -hoE '"name": "[^"]*"|"median_us": [0-9.]*|"gflops": [0-9.]*|"gbps": [0-9.]*' "$out/vkgate_bench.jsonl" | paste - - - - 
  echo "== PyTorch, the same block"
  PYTHONUNBUFFERED=1 timeout 90 python3 tools/bench_torch.py > "$out/torch_bench.json" 2> "$out/torch_bench.err"
  tail -2 "$out/torch_bench.err"
  grep -hoE '"name": "[^"]*"|"median_us": [0-9.]*' "$out/torch_bench.json" | paste - -
  exit 0
fi
if [ "$what" = sweep ]; then
  export VKGATE_GOLDEN_DIR=$PWD/tests/golden
  t0=$(date +%s)
  stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
  # SWEEP_DEADLINE_S: seconds after the start by which the suite must end,
  # so that a call bounded by its timeout still brings the suite's log back.
  suite_s() {
    local s=${SUITE_S:-300} left
    if [ -n "${SWEEP_DEADLINE_S:-}" ]; then
      left=$(( SWEEP_DEADLINE_S - ($(date +%s) - t0) - 5 ))
      [ $left -lt $s ] && s=$left
    fi
    echo $(( s > 10 ? s : 10 ))
  }
  # adopt VAR FILE PATTERN: VAR set, for the steps after this one, to the
  # fastest tile of FILE's `--tiles all` line "fastest of N: ... tile T (...)"
  # matching PATTERN, as a default chosen from the sweep would be
  # (SWEEP_ADOPT=0 keeps the built-in ones).
  adopt() {
    local tile
    tile=$(grep -h "^fastest.*$3" "$2" | tail -1 | sed -nE 's/.* tile ([^ ]+) \(.*/\1/p')
    if [ "${SWEEP_ADOPT:-1}" = 1 ] && [ -n "$tile" ]; then
      export "$1=$tile"; stamp "adopted $1=$tile for the later steps"
    fi
  }
  # The GGUF files the model steps share, made once (tried once).
  ggufs() {
    [ -n "${ggufs_tried:-}" ] && return
    ggufs_tried=1
    stamp "GGUF files of the qwen3-0.6b shape: F16 (random), Q8_0 and Q4_K (llama-quantize)"
    timeout 60 python3 tools/make_random_gguf.py --shape qwen3-0.6b --output /tmp/q06-F16.gguf
    for q in Q8_0 Q4_K; do
      timeout 60 .peer/xzrun llama-quantize --pure /tmp/q06-F16.gguf /tmp/q06-$q.gguf $q 16 > /tmp/quantize.log 2>&1
      echo "llama-quantize $q: exit $?"
    done
  }
  for step in ${SWEEP_STEPS:-tiles flash qmatmul models splits batch next topk int8 torch torchmodel suite}; do
    case $step in
    tiles)
      stamp "tile sweep, matmul 8192³ f16 (compiler statistics of each pipeline in sweep.err)"
      VKGATE_PIPELINE_STATS=1 timeout 120 $cli bench --device nvidia --quiet --json --op matmul --m 8192 --n 8192 \
        --k 8192 --dtype f16 --tiles all --reps 10 --warmup 3 > "$out/sweep.jsonl" 2> "$out/sweep.err"
      echo "exit $?"
      for shape in "512 4096 14336" "512 6144 1024" "512 1024 3072"; do
        set -- $shape
        stamp "tile sweep, matmul M $1 N $2 K $3 f16"
        timeout 60 $cli bench --device nvidia --quiet --json --op matmul --m $1 --n $2 --k $3 --dtype f16 \
          --tiles all --reps 20 --warmup 5 >> "$out/sweep.jsonl" 2>> "$out/sweep.err"
      done
      print_cases "$out/sweep.jsonl"
      grep -E "skipped|rror" "$out/sweep.err" | sort -u | head -20
      grep -E "vkgate: pipeline matmul_staged" "$out/sweep.err" | sort -u | cut -c1-220 | head -40 ;;
    flash)
      # flash_coopmat.comp's tiles (strips, keys per block, fp16 partial sums
      # of P·V or of both products): the prefill attention of the block
      # (Qwen3-Next: 16 heads, 2 KV heads, head_dim 256) and of qwen3-0.6b
      # (16/8, 128), then the block's prefill at the tiles that fit head_dim
      # 256 in 48 KiB, beside PyTorch's block in the torch step.
      for shape in "4096 16 2 256" "512 16 8 128"; do
        set -- $shape
        stamp "flash tile sweep, attention T $1, heads $2/$3, head_dim $4, f16 (compiler statistics in flash.err)"
        VKGATE_PIPELINE_STATS=1 timeout 90 $cli bench --device nvidia --quiet --op attention --T $1 --heads $2 \
          --kv-heads $3 --head-dim $4 --dtype f16 --tiles all --reps 20 --warmup 5 2>> "$out/flash.err" \
          | grep -E "^(attention|fastest)" | tee -a "$out/flash.txt"
      done
      grep -E "skipped|rror" "$out/flash.err" | sort -u | head -20
      grep -E "vkgate: pipeline flash_coopmat" "$out/flash.err" | sort -u | cut -c1-220 | head -20
      adopt VKGATE_FLASH_TILE "$out/flash.txt" "H16/8 Dh128"  # qwen3-0.6b's attention, for the model steps
      for tile in 2x32 2x32p 2x32h; do
        stamp "block prefill T 4096 fp16, VKGATE_FLASH_TILE=$tile"
        VKGATE_FLASH_TILE=$tile timeout 60 $cli bench --device nvidia --block --T 4096 --precision fp16 --reps 20 \
          --warmup 5 2>&1 | grep -vE "^device" | tee -a "$out/flash.txt"
      done ;;
    qmatmul)
      stamp "llama.cpp's own kernels: test-backend-ops perf, MUL_MAT 4096 x {1, 512} x 14336"
      timeout 60 .peer/xzrun test-backend-ops perf -o MUL_MAT -b Vulkan0 \
        -p 'type_a=(f16|q8_0|q4_K|q3_K|iq4_xs),type_b=f32,m=4096,n=(1|512),k=14336,' 2>&1 | grep -E "MUL_MAT|Device desc" \
        | tee -a "$out/peer_ops.txt"
      stamp "vkgate's quantized kernels at the same shapes: decode at every decode tile (--tiles all), prefill as a model runs it (dequantized, then the f16 matmul)"
      for m in 1 512; do for q in q8_0 q4_k q3_k iq4_xs; do
        tiles=(); [ $m = 1 ] && tiles=(--tiles all)
        timeout 60 $cli bench --device nvidia --quiet --op qmatmul --m $m --n 4096 --k 14336 --quant $q --dtype f16 \
          "${tiles[@]}" --reps 20 2>&1 | grep -E "^(q?matmul|q|fastest)" | tee -a "$out/peer_ops.txt"
      done; done
      adopt VKGATE_QROWS_TILE "$out/peer_ops.txt" "1x4096x14336 Q4_K" ;;
    models)
      ggufs
      # Decode after a 1-token prompt runs over 1-129 keys, as llama-bench's
      # tg128 does from an empty cache; after 512 it runs over 512-640. The
      # sequences decoding together start after the first length (512, as in
      # earlier runs), the dispatches printed are the last's.
      for q in F16 Q8_0 Q4_K; do
        stamp "$q: vkgate bench (prefill 512 and 1, decode 128 after each, 1, 8 and 16 sequences decoding together), then llama-bench pp512 / tg128"
        timeout 90 $cli bench --device nvidia --quiet --model /tmp/q06-$q.gguf --precision fp16 --prompts 512,1 \
          --decode 128 --sequences 1,8,16 2>&1 | grep -vE "^device" | tee -a "$out/models.txt"
        timeout 100 .peer/llama-bench -m /tmp/q06-$q.gguf -ngl 99 -p 512 -n 128 -r 3 -o json \
          > "/tmp/llama_$q.json" 2> /tmp/llama_bench.err
        echo "exit $?"; grep -hoE '"n_prompt": [0-9]+|"n_gen": [0-9]+|"avg_ts": [0-9.]+|"stddev_ts": [0-9.]+' \
          "/tmp/llama_$q.json" | paste - - - - | sed "s/^/llama $q /" | tee -a "$out/models.txt"
      done ;;
    splits)
      ggufs
      # flash_decode.comp's splits: the fewest keys per split (NVIDIA's default
      # 64 since the 11-28 H200 sweep, where 64 beat 128 and 256), its rows
      # per workgroup, the splits merged by attention_combine.comp instead of
      # flash_decode.comp's last workgroup (unmeasured on a GPU before), q, k
      # and v prepared by a qkv_prepare pass instead of in flash_decode_prep.comp
      # (unmeasured too), the workgroup counts read by the device (VKGATE_DIRECT_DISPATCH=0) instead
      # of in the command buffer, then the decode step without per-dispatch
      # timestamps (wall time only, as llama-bench's): the defaults, the
      # counts read by the device, the host asleep for the whole step
      # (VKGATE_FENCE_SPIN_US=0) instead of polling its end.
      for env in VKGATE_FLASH_SPLIT_KEYS=32 VKGATE_FLASH_SPLIT_KEYS=128 VKGATE_DISABLE_DECODE_MERGE=1 \
        VKGATE_DISABLE_DECODE_PREPARE=1 VKGATE_DIRECT_DISPATCH=0; do
        stamp "F16 decode with $env"
        timeout 60 env $env $cli bench --device nvidia --quiet --model /tmp/q06-F16.gguf \
          --precision fp16 --prompts 512 --decode 128 2>&1 | grep -E "decode|flash|combine|prepare" | tee -a "$out/models.txt"
      done
      # The block's decode over 32k keys (Qwen3-Next's 8 query heads per KV
      # head): 8 rows per workgroup (200 registers on the H100) against 4,
      # then more splits than the plan's 128 (256 workgroups for 2 KV heads:
      # 22 % of the copy bandwidth on the H200), then those 128 merged by
      # flash_decode.comp's last workgroup instead of the combine pass (the
      # default up to 32 splits, VKGATE_DECODE_MERGE_SPLITS).
      for env in VKGATE_FLASH_DECODE_ROWS=8 VKGATE_FLASH_DECODE_ROWS=4 VKGATE_FLASH_SPLITS=256 VKGATE_FLASH_SPLITS=512 \
        VKGATE_DECODE_MERGE_SPLITS=65535 VKGATE_DISABLE_DECODE_PREPARE=1 VKGATE_DIRECT_DISPATCH=0; do
        stamp "block decode over 32k, fp16, $env"
        timeout 60 env $env $cli bench --device nvidia --block --past 32768 --T 1 \
          --precision fp16 --reps 100 --warmup 10 2>&1 | grep -E "^block|flash|combine|prepare" | tee -a "$out/models.txt"
      done
      for env in VKGATE_DIRECT_DISPATCH=1 VKGATE_DIRECT_DISPATCH=0 VKGATE_FENCE_SPIN_US=0; do
        stamp "F16 decode without per-dispatch timestamps (VKGATE_TIMESTAMPS=0), $env"
        VKGATE_TIMESTAMPS=0 timeout 60 env $env $cli bench --device nvidia --quiet --model /tmp/q06-F16.gguf \
          --precision fp16 --prompts 1,512 --decode 128 2>&1 | grep -vE "^device" | tee -a "$out/models.txt"
      done ;;
    batch)
      ggufs
      # Batched decode on GPUs (11-28 on the H200: 16 sequences 1.61x one's):
      # each sequence's own qkv_prepare/flash_decode/combine against one
      # attention_step dispatch per 8 (VKGATE_STEP_ATTENTION_GPU), and 9-16
      # rows in the tiled matmul against the matrix-vector kernel
      # (VKGATE_MATVEC_ROWS=16), then both.
      for env in "" VKGATE_STEP_ATTENTION_GPU=1 VKGATE_MATVEC_ROWS=16 "VKGATE_STEP_ATTENTION_GPU=1 VKGATE_MATVEC_ROWS=16"; do
        stamp "F16 and Q4_K, 1, 8 and 16 sequences decoding together: ${env:-(defaults)}"
        for q in F16 Q4_K; do
          timeout 60 env $env $cli bench --device nvidia --quiet --model /tmp/q06-$q.gguf --precision fp16 --prompts 512 \
            --decode 64 --sequences 1,8,16 2>&1 | grep -E "together|sequences by dispatch" | sed "s/^/$q /" \
            | tee -a "$out/models.txt"
        done
      done ;;
    next)
      stamp "Qwen3-Next: Gated DeltaNet at the 80B's shape, fp16 (decode step, T 512 and 4096, both forms)"
      for T in 1 512 4096; do
        timeout 60 $cli bench --device nvidia --quiet --op gdn --T $T --precision fp16 --mode both 2>&1 | grep -vE "^device"
      done | tee -a "$out/models.txt"
      stamp "Qwen3-Next-80B-A3B's shape, 4 layers (3 Gated DeltaNet, 1 gated attention), 64 of 512 experts, fp16"
      timeout 120 $cli bench --device nvidia --quiet --model-shape qwen3-next-80b-a3b --layers 4 --experts 64 \
        --vocab 32000 --precision fp16 --prompts 512 --decode 64 2>&1 | grep -vE "^device" | tee -a "$out/models.txt"
      # Quantized experts (moe_experts reading Q4_K as stored). The host makes
      # and quantizes the random experts single-threaded: about 0.4 s per
      # expert here, so 2 layers of 64.
      stamp "Qwen3.5-35B-A3B's shape, 4 layers, 64 of 256 experts, Q4_K (its four Gated DeltaNet projections one Q4_K product)"
      timeout 120 $cli bench --device nvidia --quiet --model-shape qwen3.5-35b-a3b --layers 4 --experts 64 \
        --vocab 32000 --precision fp16 --quant q4_k --prompts 512 --decode 64 2>&1 | grep -vE "^device" \
        | tee -a "$out/models.txt"
      stamp "Qwen3-30B-A3B's shape, 2 layers, 64 of 128 experts, Q4_K"
      timeout 120 $cli bench --device nvidia --quiet --model-shape qwen3-30b-a3b --layers 2 --experts 64 \
        --vocab 32000 --precision fp16 --quant q4_k --prompts 512 --decode 64 2>&1 | grep -vE "^device" \
        | tee -a "$out/models.txt" ;;
    topk)
      stamp "device top-k: 8 rows of the 151,936 vocabulary at k 1 and 40 (what a sampler reads instead of the rows)"
      for k in 1 40; do
        timeout 30 $cli bench --device nvidia --quiet --op topk --rows 8 --n 151936 --k $k 2>&1 | grep -E "^top_k" \
          | tee -a "$out/models.txt"
      done ;;
    int8)
      ggufs
      stamp "Q8_0 with int8 activations (--int8)"
      timeout 60 $cli bench --device nvidia --quiet --model /tmp/q06-Q8_0.gguf --precision fp16 --prompts 512 \
        --decode 64 --int8 2>&1 | grep -vE "^device" | tee -a "$out/models.txt" ;;
    torch)
      stamp "PyTorch: the block (prefill T 4096, decode over 32k) and matmul 8192³"
      PYTHONUNBUFFERED=1 timeout 90 python3 tools/bench_torch.py > "$out/torch_bench.json" 2> /tmp/torch_bench.err
      echo "exit $?"; tail -2 /tmp/torch_bench.err
      grep -hoE '"name": "[^"]*"|"median_us": [0-9.]*' "$out/torch_bench.json" | paste - - ;;
    torchmodel)
      stamp "PyTorch: the qwen3-0.6b model (prefill 512, decode 128)"
      PYTHONUNBUFFERED=1 timeout 120 python3 tools/bench_torch_model.py > "$out/torch_model.json" 2> /tmp/torch.err
      echo "exit $?"; tail -3 /tmp/torch.err
      grep -hoE '"name": "[^"]*"|"(prefill|decode)_tokens_per_s": [0-9.]*' "$out/torch_model.json" | paste - - - ;;
    suite)
      stamp "the suite (validation + synchronization validation), soak and consumer-build tests left out"
      timeout $(suite_s) env VKGATE_TEST_DEVICE=nvidia $build/tests/vkgate_tests -tce='soak*,consumer*' \
        ${SUITE_FILTER:+"-tc=$SUITE_FILTER"} > "$out/tests.txt" 2>&1
      echo "exit $?"; grep -E "^\[doctest\] (test cases|assertions)|TEST CASE:|ERROR" "$out/tests.txt" | head -30 ;;
    *) echo "gpu_run.sh: unknown sweep step '$step' (tiles flash qmatmul models splits batch next topk int8 torch torchmodel suite)"; exit 2 ;;
    esac
  done
  stamp done
  exit 0
fi
if [ "$what" = peer ]; then
  # The peers of issue 30 in one call: llama.cpp's Vulkan backend on a random
  # GGUF of the same model shape; the matmul, block and model built with a
  # newer glslang (GL_KHR_cooperative_matrix, .peer/vkgate-khr) against this
  # build (GL_NV_cooperative_matrix); the Gated DeltaNet layer; tests; PyTorch.
  # Steps: PEER_STEPS (default "llama model coopmat gdn tests torch"; tests:
  # the mixers' and models', "suite": the library suite without the CLI,
  # "full": with the CLI tests, which find build/tools/vkgate where it was built).
  export VKGATE_GOLDEN_DIR=$PWD/tests/golden
  khr=.peer/vkgate-khr
  echo "== $khr devices"; timeout 30 $khr devices 2>&1 | grep -i nvidia
  for step in ${PEER_STEPS:-llama model coopmat gdn tests torch}; do
    case $step in
    llama)
      echo "== llama.cpp Vulkan: llama-bench pp512 / tg128 on a random qwen3-0.6b GGUF (F16)"
      timeout 60 python3 tools/make_random_gguf.py --shape qwen3-0.6b --output /tmp/q06.gguf
      for env in "" GGML_VK_DISABLE_COOPMAT2=1; do
        echo "-- llama-bench ${env:-(default)}"
        timeout 120 env $env .peer/llama-bench -m /tmp/q06.gguf -ngl 99 -p 512 -n 128 -r 5 -o json \
          > "$out/llama_bench${env:+_nocm2}.json" 2> /tmp/llama_bench.err
        echo "exit $?"; grep -E "ggml_vulkan: 0" /tmp/llama_bench.err | head -1
        grep -hoE '"n_prompt": [0-9]+|"n_gen": [0-9]+|"avg_ts": [0-9.]+|"stddev_ts": [0-9.]+' \
          "$out/llama_bench${env:+_nocm2}.json" | paste - - - -
      done ;;
    model | coopmat)
      echo "== $step: this build (GL_NV_cooperative_matrix), then the KHR build"
      for build_kind in nv khr; do
        bin=$cli; [ $build_kind = khr ] && bin=$khr
        echo "-- $build_kind: $bin"
        if [ $step = model ]; then  # the same model shape: prefill 512, decode 128
          timeout 90 $bin bench --device nvidia --quiet --model-shape qwen3-0.6b --precision fp16 --prompts 512 \
            --decode 128 2>&1 | grep -vE "^device" | tee -a "$out/model_bench.txt"
        else  # matmul 8192³ f16 and block prefill T 4096 fp16
          {
            timeout 60 $bin bench --device nvidia --quiet --json --op matmul --m 8192 --n 8192 --k 8192 --dtype f16
            timeout 60 $bin bench --device nvidia --quiet --json --block --T 4096 --precision fp16
          } > "$out/coopmat_$build_kind.jsonl" 2> /tmp/coopmat.err
          grep -hoE '"name": "[^"]*"|"median_us": [0-9.]*|"gflops": [0-9.]*' "$out/coopmat_$build_kind.jsonl" | paste - - -
        fi
      done ;;
    gdn)
      echo "== Gated DeltaNet at Qwen3-Next-80B's shape, fp16: decode step, T 512 and 4096 in both forms"
      for T in 1 512 4096; do
        timeout 60 $cli bench --device nvidia --quiet --op gdn --T $T --precision fp16 --mode both 2>&1 | grep -vE "^device"
      done | tee "$out/gdn_bench.txt" ;;
    tests | suite | full)
      filter=-tc='gdn*,gla*,model*'; [ $step = suite ] && filter=-tce='cli*,soak*,consumer*'
      [ $step = full ] && filter=-tce='soak*,consumer*'
      echo "== tests ($filter; validation + synchronization validation)"
      timeout 240 env VKGATE_TEST_DEVICE=nvidia $build/tests/vkgate_tests "$filter" > "$out/tests.txt" 2>&1
      echo "exit $?"; grep -E "^\[doctest\] (test cases|assertions)|TEST CASE:|ERROR" "$out/tests.txt" | head -20 ;;
    torch)
      echo "== PyTorch, the same block and matmul"
      PYTHONUNBUFFERED=1 timeout 90 python3 tools/bench_torch.py > "$out/torch_bench.json" 2> /tmp/torch_bench.err
      tail -2 /tmp/torch_bench.err
      grep -hoE '"name": "[^"]*"|"median_us": [0-9.]*' "$out/torch_bench.json" | paste - - ;;
    esac
  done
  exit 0
fi
if [ "$what" != bench ]; then
  export VKGATE_GOLDEN_DIR=$PWD/tests/golden  # the build compiled in this checkout's path
  # test_pass TITLE FILTER [VAR=VALUE...]: the test cases FILTER selects, with
  # those variables set; the log goes to tests.txt, the summary to the screen.
  : > "$out/tests.txt"
  test_pass() {
    local title=$1 filter=$2
    shift 2
    echo "== $title"
    env "$@" VKGATE_TEST_DEVICE=nvidia $build/tests/vkgate_tests -tc="$filter" 2>&1 | tee -a "$out/tests.txt" | tail -3
  }
  test_pass "tests, fused path (validation + synchronization validation)" '*'
  test_pass "tests, unfused path and no tensor cores" '*' VKGATE_DISABLE_FUSED=1 VKGATE_DISABLE_COOPMAT=1
  test_pass "flash, matmul, block and CLI tests with the opt-in staged matmul (VKGATE_COOPMAT_STAGED=1)" \
    'flash*,matmul*,block*,cli*' VKGATE_COOPMAT_STAGED=1
  test_pass "block tests, fp16 attention on the scalar flash kernel (VKGATE_COOPMAT_FLASH=0)" 'block*' \
    VKGATE_COOPMAT_FLASH=0
  test_pass "block tests, decode steps on flash_coopmat / the general flash kernel (VKGATE_DISABLE_FLASH_DECODE)" \
    'block*' VKGATE_DISABLE_FLASH_DECODE=1
  test_pass "matmul and block tests, split-K forced (VKGATE_MATMUL_SPLITS=3)" 'matmul*,block*' VKGATE_MATMUL_SPLITS=3
  test_pass "block tests, a pass each for the norms, RoPE and v (VKGATE_DISABLE_PASS_FUSION)" 'block*' \
    VKGATE_DISABLE_PASS_FUSION=1
  test_pass "block and CLI tests, decode inputs and outputs copied (VKGATE_DISABLE_DIRECT_IO)" 'block*,cli*' \
    VKGATE_DISABLE_DIRECT_IO=1
fi
if [ "$what" != tests ]; then
  echo "== compiler statistics of the pipelines of decode and prefill (VKGATE_PIPELINE_STATS) -> pipeline_stats.txt"
  for args in "--past 32768 --T 1" "--T 256"; do
    for p in fp16 fp32; do
      VKGATE_PIPELINE_STATS=1 $cli bench --device nvidia --block $args --precision $p --reps 1 --warmup 0 2>&1
    done
  done | grep -E "vkgate: pipeline|lacks" | sort -u > "$out/pipeline_stats.txt"
  cut -c1-160 "$out/pipeline_stats.txt"
  echo "== vkgate bench"
  {
    $cli bench --device nvidia --json --peak --op matmul --m 8192 --n 8192 --k 8192 --dtype f16
    for p in fp16 bf16 fp32; do
      $cli bench --device nvidia --json --block --T 4096 --precision $p
      $cli bench --device nvidia --json --block --past 32768 --T 1 --precision $p
    done
    VKGATE_DISABLE_FUSED=1 $cli bench --device nvidia --json --block --T 4096 --precision fp16
    $cli bench --device nvidia --json --block --sweep --sweep-max 32768 --precision fp16 --reps 3
  } > "$out/vkgate_bench.jsonl" 2> "$out/vkgate_bench.err"
  tail -3 "$out/vkgate_bench.err"
  print_cases "$out/vkgate_bench.jsonl"
  echo "== decode over 32k, fp16, 200 reps each: the default (flash_decode.comp, direct I/O, fused passes),"
  echo "   then VKGATE_DISABLE_PASS_FUSION=1, VKGATE_DISABLE_DIRECT_IO=1, VKGATE_DISABLE_FLASH_DECODE=1 (flash_coopmat.comp)"
  for sw in "" VKGATE_DISABLE_PASS_FUSION=1 VKGATE_DISABLE_DIRECT_IO=1 VKGATE_DISABLE_FLASH_DECODE=1; do
    env $sw $cli bench --device nvidia --block --past 32768 --T 1 --precision fp16 \
      --reps 200 --warmup 20 2>&1 | grep -vE "^device"
  done
  echo "== prefill T 4096 fp16 and attention T 4096 on the scalar flash kernel (VKGATE_COOPMAT_FLASH=0), then the default"
  for cf in 0 1; do
    VKGATE_COOPMAT_FLASH=$cf $cli bench --device nvidia --block --T 4096 --precision fp16 --reps 20 --warmup 5 \
      2>&1 | grep -E "^block|flash|combine|matmul"
    VKGATE_COOPMAT_FLASH=$cf $cli bench --device nvidia --op attention --T 4096 --heads 16 --kv-heads 2 --head-dim 256 \
      --dtype f16 --reps 20 --warmup 5 2>&1 | grep -E "^attention"
  done
  echo "== split-K: o_proj of a 128-token prefill (128×2048×4096 f16) and prefill T 128 fp16, default then VKGATE_DISABLE_SPLIT_K=1"
  for sk in 0 1; do
    VKGATE_DISABLE_SPLIT_K=$sk $cli bench --device nvidia --op matmul --m 128 --n 2048 --k 4096 --dtype f16 --reps 50 \
      2>&1 | grep -E "^matmul"
    VKGATE_DISABLE_SPLIT_K=$sk $cli bench --device nvidia --block --T 128 --precision fp16 --reps 50 --warmup 10 \
      2>&1 | grep -vE "^device"
  done
  echo "== matmul 8192³ fp16: staged (VKGATE_COOPMAT_STAGED=1), then direct-load"
  for st in 1 0; do
    VKGATE_COOPMAT_STAGED=$st $cli bench --device nvidia --op matmul --m 8192 --n 8192 --k 8192 --dtype f16 --reps 30 \
      2>&1 | grep -E "^matmul"
  done
  echo "== whole models: qwen3-0.6b (random weights) prefill at 64 and 512 tokens and decode, fp16 and bf16"
  for p in fp16 bf16; do
    $cli bench --device nvidia --model-shape qwen3-0.6b --precision $p --prompts 64,512 --decode 64 2>&1 | grep -vE "^device"
  done
  echo "== PyTorch"
  PYTHONUNBUFFERED=1 python3 tools/bench_torch.py > "$out/torch_bench.json" 2> "$out/torch_bench.err"
  tail -3 "$out/torch_bench.err"
  python3 -c "
import json,sys
for c in json.load(open('$out/torch_bench.json'))['cases']:
    print(f'{c[\"name\"]:48s} {c[\"median_us\"]:12.1f} us {c[\"gflops\"]:10.1f} GFLOP/s {c[\"gbps\"]:8.1f} GB/s')"
fi
