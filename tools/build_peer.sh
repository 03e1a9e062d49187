#!/usr/bin/env bash
# tools/build_peer.sh: prepares, in one run, what a session carries to a lent
# GPU machine for issue 30 (llama.cpp's Vulkan backend as the peer of vkgate).
#
# What it makes, in the repository root (both git-ignored; the script adds
# /.gl/ and /.peer/ to .git/info/exclude where nothing ignores them yet):
#   .gl/    the amd64 .debs from Debian 12 (bookworm) that the GPU machine
#           lacks: libvulkan1, vulkan-validationlayers, the glvnd libraries the
#           NVIDIA ICD loads (libglvnd0, libegl1, libgl1, libglx0, libgles2),
#           and libutf8proc2 and libonig5, which the vkgate binaries link.
#           tools/gpu_run.sh unpacks them there with `dpkg -x`.
#   .peer/  llama.cpp's llama-bench, llama-quantize and test-backend-ops
#           (static, Vulkan-enabled, stripped), each xz-compressed as NAME.xz,
#           and xzrun: `.peer/xzrun NAME ARGS...` unpacks .peer/NAME.xz to
#           /tmp/peer-bin/NAME once and execs it with ARGS. Stripped, each
#           binary is ~45-50 MiB (nearly all of it ggml-vulkan's SPIR-V), so
#           llama-bench too is carried compressed: .peer/llama-bench is a
#           two-line script that execs `xzrun llama-bench "$@"`.
# Why: the GPU machine has the NVIDIA driver but no Vulkan loader, no network
# and no compilers, and a call carries at most 64 MiB. tools/gpu_run.sh's
# `sweep` (and `peer`) runs `.peer/xzrun llama-quantize` to make the Q8_0 and
# Q4_K GGUF files, `.peer/xzrun test-backend-ops perf -o MUL_MAT -b Vulkan0`
# for llama.cpp's own matmul kernels, and `.peer/llama-bench -m FILE -ngl 99
# -p 512 -n 128` for pp512 / tg128 beside `vkgate bench`; BENCHMARKS.md
# (2026-11-27 and earlier entries) has the results. The first run of each
# binary on that machine spends ~1-2 s unpacking it.
# How: llama.cpp's source is the git bundle inside the npm package
# node-llama-cpp ($NLC_VERSION, default 3.22.1: llama.cpp commit de3ff81).
# Its Vulkan shaders need a glslc with GL_KHR_cooperative_matrix and
# GL_NV_cooperative_matrix2, which Debian 12's (shaderc 2023.x) lacks, so the
# script downloads Debian trixie's glslc (shaderc 2025.x) and Vulkan 1.4
# headers as .debs, unpacks them under $PEER_DIR/trixie (nothing installed
# system-wide) and runs glslc through trixie's own dynamic loader. Without
# trixie it falls back to Debian 12's glslc and headers (no coopmat shaders).
# The binaries link libvulkan.so.1 (from .gl there) and glibc dynamically,
# libstdc++ and libgcc statically; the script checks that with readelf.
# Time: about 15-25 minutes on 2 cores, nearly all of it `ninja` (run under
# `nice -n 10`); a rerun skips every step whose output exists (delete .gl/*.deb,
# .peer or $PEER_DIR/... to redo one). .peer comes to ~19 MiB, .gl to ~5 MiB.
# Usage: [PEER_DIR=/work/peer] [NLC_VERSION=3.22.1] [JOBS=n] tools/build_peer.sh
# Needs: git, npm, apt-get, dpkg-deb, cmake, ninja, g++, binutils, xz, and
# network access to deb.debian.org and the npm registry.
set -Eeuo pipefail

t0=$SECONDS
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEER_DIR=${PEER_DIR:-/work/peer}
NLC_VERSION=${NLC_VERSION:-3.22.1}
JOBS=${JOBS:-$(nproc)}
gl=$repo/.gl
peer=$repo/.peer
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

log() { printf '[build_peer %4ds] %s\n' $((SECONDS - t0)) "$*"; }
die() { printf 'build_peer.sh: error: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "build_peer.sh: FAILED (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

for t in git npm tar apt-get apt-cache dpkg-deb cmake ninja g++ strip readelf objdump xz nice; do
  command -v "$t" >/dev/null || die "'$t' not found; it is needed (see the comment at the top)"
done
[ -f "$keyring" ] || die "$keyring missing (package debian-archive-keyring)"
mkdir -p "$PEER_DIR" "$gl" "$peer"
case $PEER_DIR in "$repo"|"$repo"/*) die "PEER_DIR ($PEER_DIR) must be outside the repository";; esac

# ---- 0. keep .gl and .peer out of git --------------------------------------
exclude=$(cd "$repo" && git rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude=$repo/$exclude;; esac
for d in .gl .peer; do
  if (cd "$repo" && git check-ignore -q "$d/x"); then
    log "/$d/ is already git-ignored"
  else
    mkdir -p "$(dirname "$exclude")"
    echo "/$d/" >> "$exclude"
    log "added /$d/ to $exclude"
  fi
done

# apt with a private state (lists, cache, sources; no dpkg status) under
# $PEER_DIR/apt-NAME: sets the array apt_o. Nothing system-wide changes.
apt_setup() {
  local name=$1; shift
  local d=$PEER_DIR/apt-$name
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/sources.list.d" "$d/preferences.d"
  printf '%s\n' "$@" > "$d/sources.list"
  apt_o=(-q -oAPT::Architecture=amd64 -oAPT::Architectures=amd64
    -oDir::State::Lists="$d/lists" -oDir::State::status=/dev/null -oDir::Cache="$d/cache"
    -oDir::Etc::SourceList="$d/sources.list" -oDir::Etc::SourceParts="$d/sources.list.d"
    -oDir::Etc::Preferences=/dev/null -oDir::Etc::PreferencesParts="$d/preferences.d"
    -oAPT::Sandbox::User=root -oDebug::NoLocking=1)
}

# ---- 1. .gl: Debian 12 .debs for the GPU machine ---------------------------
# .gl/lib: what the CLI links (`vkgate serve`) and the card's image may lack;
# gpu_run.sh unpacks those apart from / and only for libraries ldd misses.
gl_pkgs=(libvulkan1 vulkan-validationlayers libglvnd0 libegl1 libgl1 libglx0 libgles2 libutf8proc2 libonig5
  lib/libcpp-httplib0.11 lib/libbrotli1 lib/libssl3)
mkdir -p "$gl/lib"
missing=()
for p in "${gl_pkgs[@]}"; do
  compgen -G "$gl/${p}_*_amd64.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  log ".gl: all ${#gl_pkgs[@]} .debs present, skipped"
else
  log ".gl: downloading ${missing[*]} (bookworm, amd64)"
  apt_setup bookworm \
    "deb [signed-by=$keyring] http://deb.debian.org/debian bookworm main" \
    "deb [signed-by=$keyring] http://deb.debian.org/debian bookworm-updates main" \
    "deb [signed-by=$keyring] http://deb.debian.org/debian-security bookworm-security main"
  apt-get "${apt_o[@]}" -qq update && compgen -G "$PEER_DIR/apt-bookworm/lists/*bookworm_main*Packages*" >/dev/null \
    || die "apt-get update for bookworm failed (is deb.debian.org reachable?)"
  for p in "${missing[@]}"; do
    if apt-cache "${apt_o[@]}" show "${p#lib/}" >/dev/null 2>&1; then
      (cd "$gl/$(dirname "$p")" && apt-get "${apt_o[@]}" -qq download "${p#lib/}") \
        || die "apt-get download of $p into .gl failed"
    else log ".gl: $p does not exist in Debian 12, skipped"; fi
  done
fi

# ---- 2. glslc and Vulkan headers (trixie's, unpacked under $PEER_DIR) ------
T=$PEER_DIR/trixie
glslc=$PEER_DIR/bin/glslc
vk_include=$T/usr/include
spirv_dir=$T/usr/share/cmake/SPIRV-Headers  # ggml-vulkan's find_package(SPIRV-Headers)
if [ -x "$glslc" ] && "$glslc" --version >/dev/null 2>&1 && [ -f "$vk_include/vulkan/vulkan_core.h" ] \
   && [ -f "$spirv_dir/SPIRV-HeadersConfig.cmake" ]; then
  glslc_from=trixie
  log "glslc: trixie's, unpacked before ($glslc), skipped"
else
  apt_setup trixie "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main"
  if apt-get "${apt_o[@]}" -qq update 2>"$PEER_DIR/apt-trixie.err" \
     && compgen -G "$PEER_DIR/apt-trixie/lists/*trixie_main*Packages*" >/dev/null; then
    # glslc and everything it needs at run time (libshaderc1, libstdc++6,
    # libc6, ...), plus the Vulkan 1.4 and SPIR-V headers.
    mapfile -t tpkgs < <(apt-cache "${apt_o[@]}" depends --recurse --no-recommends --no-suggests \
      --no-conflicts --no-breaks --no-replaces --no-enhances glslc | grep -v -e '^ ' -e '^<' | sort -u)
    tpkgs+=(libvulkan-dev libvulkan1 spirv-headers)
    log "glslc: downloading trixie's ${tpkgs[*]}"
    rm -rf "$PEER_DIR/trixie-debs"; mkdir -p "$PEER_DIR/trixie-debs"
    (cd "$PEER_DIR/trixie-debs" && apt-get "${apt_o[@]}" -qq download "${tpkgs[@]}") \
      || die "apt-get download from trixie failed"
    rm -rf "$T"; mkdir -p "$T"
    for f in "$PEER_DIR"/trixie-debs/*.deb; do dpkg-deb -x "$f" "$T"; done
    ld_so=$(find "$T" -name 'ld-linux-x86-64.so.2' \( -type f -o -type l \) | sort | sed -n 1p)
    [ -n "$ld_so" ] || die "trixie's dynamic loader not found under $T"
    [ -x "$T/usr/bin/glslc" ] || die "trixie's glslc not found under $T/usr/bin"
    mkdir -p "$PEER_DIR/bin"
    cat > "$glslc" <<EOF
#!/bin/sh
# Debian trixie's glslc, run through trixie's own loader and libraries
# (made by tools/build_peer.sh; nothing of trixie is installed system-wide).
exec "$ld_so" --library-path "$T/usr/lib/x86_64-linux-gnu:$T/lib/x86_64-linux-gnu" "$T/usr/bin/glslc" "\$@"
EOF
    chmod +x "$glslc"
    "$glslc" --version >/dev/null || die "trixie's glslc does not run through $ld_so"
    glslc_from=trixie
  else
    log "WARNING: Debian trixie is not reachable ($(tail -1 "$PEER_DIR/apt-trixie.err" 2>/dev/null));"
    log "WARNING: falling back to Debian 12's glslc and Vulkan 1.3 headers: no coopmat/coopmat2 shaders"
    if ! command -v glslc >/dev/null || [ ! -f /usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake ]; then
      log "glslc: apt-get install glslc spirv-headers (Debian 12)"
      apt-get install -y -q glslc spirv-headers || die "apt-get install glslc spirv-headers failed"
    fi
    mkdir -p "$PEER_DIR/bin"
    ln -sf "$(command -v glslc)" "$glslc"
    vk_include=/usr/include
    spirv_dir=/usr/share/cmake/SPIRV-Headers
    glslc_from="Debian 12 (fallback)"
  fi
fi
[ -f "$vk_include/vulkan/vulkan_core.h" ] || die "Vulkan headers missing under $vk_include (install libvulkan-dev)"
[ -f "$spirv_dir/SPIRV-HeadersConfig.cmake" ] || die "SPIRV-Headers' CMake config missing under $spirv_dir"
glslc_version=$("$glslc" --version | sed -n 1,2p | tr '\n' ' ')
# Does this glslc take the cooperative-matrix extensions?
coopmat_probe() {
  printf '#version 450\n#extension %s : require\nvoid main() {}\n' "$1" \
    | "$glslc" -fshader-stage=compute --target-env=vulkan1.3 -o /dev/null - >/dev/null 2>&1
}
coopmat=""
coopmat_probe GL_KHR_cooperative_matrix && coopmat+=" KHR_coopmat"
coopmat_probe GL_NV_cooperative_matrix2 && coopmat+=" NV_coopmat2"
log "glslc: $glslc_from: $glslc_version; extensions:${coopmat:- none of KHR_coopmat/NV_coopmat2}"

# ---- 3. llama.cpp's source from node-llama-cpp's git bundle -----------------
src=$PEER_DIR/llama.cpp
if [ -f "$src/CMakeLists.txt" ]; then
  log "llama.cpp: source present ($src), skipped"
else
  tgz=$PEER_DIR/node-llama-cpp-$NLC_VERSION.tgz
  if [ ! -f "$tgz" ]; then
    log "llama.cpp: npm pack node-llama-cpp@$NLC_VERSION"
    (cd "$PEER_DIR" && npm pack --silent "node-llama-cpp@$NLC_VERSION" >/dev/null) || die "npm pack failed"
    [ -f "$tgz" ] || die "npm pack did not make $tgz"
  fi
  rm -rf "$PEER_DIR/package"
  tar -xzf "$tgz" -C "$PEER_DIR" package/llama/gitRelease.bundle \
    || die "$tgz has no package/llama/gitRelease.bundle"
  bundle=$PEER_DIR/package/llama/gitRelease.bundle
  rm -rf "$src"
  git clone -q "$bundle" "$src" 2>/dev/null || true
  if [ ! -f "$src/CMakeLists.txt" ]; then  # the bundle may have no HEAD
    head_ref=$(git bundle list-heads "$bundle" | sed -n 1p | cut -d' ' -f1)
    [ -n "$head_ref" ] || die "the git bundle $bundle has no refs"
    [ -d "$src/.git" ] || git init -q "$src"
    git -C "$src" fetch -q "$bundle" "$head_ref" && git -C "$src" checkout -q FETCH_HEAD
  fi
  [ -f "$src/CMakeLists.txt" ] || die "cloning $bundle gave no llama.cpp tree"
  log "llama.cpp: cloned the bundle into $src"
fi
llama_commit=$(git -C "$src" rev-parse --short HEAD)
log "llama.cpp: commit $llama_commit"

# ---- 4. build llama-bench, llama-quantize, test-backend-ops -----------------
targets=(llama-bench llama-quantize test-backend-ops)
bld=$PEER_DIR/build-vk
have_peer=1
peer_files=(llama-bench llama-bench.xz llama-quantize.xz test-backend-ops.xz xzrun)
for f in "${peer_files[@]}"; do [ -s "$peer/$f" ] || have_peer=0; done
if [ $have_peer = 1 ]; then
  log ".peer: ${peer_files[*]} present, build skipped"
else
  vk_lib=/usr/lib/x86_64-linux-gnu/libvulkan.so
  if [ ! -e "$vk_lib" ]; then  # no libvulkan-dev: link against the loader itself
    [ -e /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || die "no libvulkan.so.1 to link against (install libvulkan1)"
    mkdir -p "$PEER_DIR/lib"; ln -sf /usr/lib/x86_64-linux-gnu/libvulkan.so.1 "$PEER_DIR/lib/libvulkan.so"
    vk_lib=$PEER_DIR/lib/libvulkan.so
  fi
  # Configure every time (a few seconds on a configured tree) so that the
  # options below always hold; ninja then rebuilds only what they change.
  log "build: cmake configure$([ -f "$bld/build.ninja" ] && echo " (configured before)") (log: $PEER_DIR/configure.log)"
  nice -n 10 cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_VULKAN=ON -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
    -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=ON \
    -DLLAMA_OPENSSL=OFF \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" \
    -DVulkan_GLSLC_EXECUTABLE="$glslc" -DVulkan_INCLUDE_DIR="$vk_include" -DVulkan_LIBRARY="$vk_lib" \
    -DSPIRV-Headers_DIR="$spirv_dir" \
    > "$PEER_DIR/configure.log" 2>&1 \
    || { tail -30 "$PEER_DIR/configure.log" >&2; die "cmake configure failed (see $PEER_DIR/configure.log)"; }
  grep -i -E 'cooperative|coopmat|bfloat16|integer dot' "$PEER_DIR/configure.log" | sed 's/^/  cmake: /' || true
  log "build: nice -n 10 ninja -j $JOBS ${targets[*]} (10-20 minutes; log: $PEER_DIR/build.log)"
  nice -n 10 ninja -C "$bld" -j "$JOBS" "${targets[@]}" > "$PEER_DIR/build.log" 2>&1 \
    || { tail -40 "$PEER_DIR/build.log" >&2; die "ninja failed (see $PEER_DIR/build.log)"; }
  log "build: done"

  # Only libraries every GPU machine has (or gets from .gl) may be NEEDED.
  ok_needed='^(libvulkan\.so\.1|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2)$'
  for t in "${targets[@]}"; do
    b=$bld/bin/$t
    [ -x "$b" ] || die "$b was not built"
    needed=$(readelf -d "$b" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
    bad=$(grep -v -E "$ok_needed" <<<"$needed" || true)
    [ -z "$bad" ] || die "$t needs libraries the GPU machine lacks: $bad"
    glibc=$(objdump -T "$b" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
    log "check: $t needs $(tr '\n' ' ' <<<"$needed")(newest symbol $glibc)"
  done

  for t in "${targets[@]}"; do
    log ".peer: strip and xz -9 $t"
    strip -o "$PEER_DIR/$t.stripped" "$bld/bin/$t"
    xz -9 -T "$JOBS" -c "$PEER_DIR/$t.stripped" > "$peer/$t.xz.tmp" && mv -f "$peer/$t.xz.tmp" "$peer/$t.xz"
    rm -f "$PEER_DIR/$t.stripped"
  done
  cat > "$peer/xzrun" <<'EOF'
#!/bin/sh
# .peer/xzrun NAME ARGS...: unpacks .peer/NAME.xz to /tmp/peer-bin/NAME once
# (again when the .xz is newer), then execs it with ARGS. Made by
# tools/build_peer.sh.
set -e
[ $# -ge 1 ] || { echo "usage: $0 NAME [ARGS...]" >&2; exit 2; }
name=$1; shift
src=$(dirname "$0")/$name.xz
[ -f "$src" ] || { echo "xzrun: $src not found" >&2; exit 2; }
dir=${XZRUN_DIR:-/tmp/peer-bin}
bin=$dir/$name
if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; then
  mkdir -p "$dir"
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$src" > "$bin.$$"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$src" > "$bin.$$"
  fi
  chmod +x "$bin.$$"
  mv -f "$bin.$$" "$bin"
fi
exec "$bin" "$@"
EOF
  chmod +x "$peer/xzrun"
  cat > "$peer/llama-bench" <<'EOF'
#!/bin/sh
# llama.cpp's llama-bench, carried xz-compressed (see xzrun; tools/build_peer.sh).
exec "$(dirname "$0")/xzrun" llama-bench "$@"
EOF
  chmod +x "$peer/llama-bench"
  log ".peer: wrote ${peer_files[*]}"
fi

peer_bytes=$(du -cb "$peer"/* | tail -1 | cut -f1)
[ "$peer_bytes" -lt $((40 * 1024 * 1024)) ] || die ".peer holds $((peer_bytes / 1048576)) MiB, over the 40 MiB allowed"

# ---- 5. smoke test here, if this machine has a Vulkan loader ----------------
if ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1 ' >/dev/null; then
  if "$peer/llama-bench" --help >/dev/null 2>&1; then log "smoke: .peer/llama-bench --help ok"
  else die ".peer/llama-bench --help failed here"; fi
  tbo_help=$("$peer/xzrun" test-backend-ops --help 2>&1 || true)  # exits 1 after its usage
  if grep -i '^usage' <<<"$tbo_help" >/dev/null; then log "smoke: .peer/xzrun test-backend-ops --help ok"
  else die ".peer/xzrun test-backend-ops --help failed here"; fi
else
  log "smoke: no libvulkan.so.1 on this machine, binaries not run"
fi

# ---- summary ----------------------------------------------------------------
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
gl_bytes=$(du -cb "$gl"/*.deb | tail -1 | cut -f1)
echo
echo "build_peer.sh: done in $((SECONDS - t0)) s"
echo "  llama.cpp: node-llama-cpp $NLC_VERSION, commit $llama_commit; glslc: $glslc_from, $glslc_version(${coopmat# })"
echo "  .peer ($(mib "$peer_bytes")):"
for f in "$peer"/*; do printf '    %-24s %s\n' "$(basename "$f")" "$(mib "$(stat -c %s "$f")")"; done
echo "  .gl ($(mib "$gl_bytes")): $(cd "$gl" && ls *.deb | tr '\n' ' ')"
echo "  carry [\".gl\", \".peer\", ...] to the GPU machine; tools/gpu_run.sh uses .peer/llama-bench,"
echo "  .peer/xzrun llama-quantize and .peer/xzrun test-backend-ops"
