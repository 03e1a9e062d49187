#!/usr/bin/env bash
# Installs the clients that `vkgate serve`'s tests drive it with into a build
# tree (never into the repository):
#   tools/fetch_test_clients.sh BUILD_DIR
# puts the npm packages under BUILD_DIR/npm-clients/node_modules:
#   openai@7.57.0          OpenAI's official client (tests/serve/openai_client.test.mjs)
#   puppeteer-core@25.16.0 drives Debian's chromium (tests/serve/chat_page.test.mjs)
# A prefix apart from tools/fetch_tokenizers.sh's: npm prunes packages it did
# not install itself from a prefix it installs into.
# Does nothing (and needs no network) when both are there at these versions.
# Prints the node_modules directory on its last line.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: tools/fetch_test_clients.sh BUILD_DIR" >&2
  exit 2
fi
prefix=$1/npm-clients
modules=$prefix/node_modules
packages=("openai@7.57.0" "puppeteer-core@25.16.0")

all_present() {
  local spec name version pj
  command -v node >/dev/null 2>&1 || return 1
  for spec in "${packages[@]}"; do
    name=${spec%@*}
    version=${spec##*@}
    pj=$modules/$name/package.json
    [ -f "$pj" ] || return 1
    [ "$(node -e 'process.stdout.write(String(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).version))' "$pj")" = "$version" ] || return 1
  done
}

if ! all_present; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_test_clients: npm not found; install it with: apt-get install npm" >&2
    exit 1
  fi
  mkdir -p "$prefix"
  [ -f "$prefix/package.json" ] ||
    printf '{\n  "name": "vkgate-test-clients",\n  "private": true\n}\n' >"$prefix/package.json"
  echo "fetch_test_clients: installing ${packages[*]} into $modules" >&2
  npm install --prefix "$prefix" --no-save --no-audit --no-fund --no-package-lock \
    --loglevel=error "${packages[@]}" >&2
  if ! all_present; then
    echo "fetch_test_clients: after npm install, $modules still lacks one of ${packages[*]}" >&2
    exit 1
  fi
fi
echo "$(cd "$modules" && pwd)"
