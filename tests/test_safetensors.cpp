// The safetensors reader and writer: round trips of every dtype and the
// metadata, malformed files rejected naming the path and the culprit, and the
// writer's rules for what an output path names (vkgate/output_file.hpp):
// symbolic links, FIFOs, read-only files, modes, directories, sockets, "-",
// and signals during a write.
#include "doctest.hpp"
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include "test_util.hpp"
#include "vkgate/config.hpp"
#include "vkgate/error.hpp"
#include "vkgate/output_file.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"
#include "fifo_reader.hpp"
#include "golden.hpp"

namespace test_safetensors {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using test::expect_error;
using test::read_text;
using test::TempDir;
using test::write_text;

// ---- safetensors ----

namespace {


template <typename T>
std::span<const std::byte> as_bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// A file with the given header text and `data_bytes` zero bytes of data.
std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

void expect_open_error(const std::string& path, ErrorCode code, const std::string& mention) {
  CAPTURE(mention);
  try {
    SafetensorsFile f(path);
    FAIL("opened a malformed file");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(e.code() == code);
    CHECK(msg.rfind(path, 0) == 0);  // starts with the path
    CHECK(msg.find(mention) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors: writer and reader round trip every dtype and the metadata") {
  TempDir dir;
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 1e-3f, 65504.0f, -0.0f};
  const std::vector<double> f64 = {0.1, -1e300, 3.0};
  const std::vector<int64_t> i64 = {0, -1, int64_t(1) << 40, std::numeric_limits<int64_t>::max()};
  const std::vector<int32_t> i32 = {7, -7, std::numeric_limits<int32_t>::min()};
  std::vector<uint16_t> f16, bf16;
  for (float v : f32) {
    f16.push_back(float_to_half(v));
    bf16.push_back(float_to_bf16(v));
  }
  const std::string path = dir.file("round_trip.safetensors");
  write_safetensors(path,
                    {{"a.f32", DType::F32, {2, 3}, as_bytes(f32)},
                     {"b.f16", DType::F16, {6}, as_bytes(f16)},
                     {"c.bf16", DType::BF16, {3, 1, 2}, as_bytes(bf16)},
                     {"d.f64", DType::F64, {3}, as_bytes(f64)},
                     {"e.empty", DType::F32, {0, 4}, {}},
                     {"f.i64", DType::I64, {2, 2}, as_bytes(i64)},
                     {"g.i32", DType::I32, {3}, as_bytes(i32)}},
                    {{"format", "pt"}, {"note", "round trip"}});

  // Nothing but the file itself is left behind.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  const SafetensorsFile file(path);
  CHECK(file.path() == path);
  CHECK(file.names() ==
        std::vector<std::string>{"a.f32", "b.f16", "c.bf16", "d.f64", "e.empty", "f.i64", "g.i32"});
  CHECK(file.metadata() ==
        std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}});
  CHECK(file.contains("a.f32"));
  CHECK(!file.contains("zzz"));

  const TensorView& a = file.at("a.f32");
  CHECK(a.dtype == DType::F32);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.numel() == 6);
  CHECK(a.to_f32() == f32);
  CHECK(std::memcmp(a.bytes.data(), f32.data(), a.bytes.size()) == 0);

  const TensorView& h = file.at("b.f16");
  CHECK(h.dtype == DType::F16);
  const std::vector<float> h_vals = h.to_f32();
  for (size_t i = 0; i < f32.size(); ++i) CHECK(h_vals[i] == half_to_float(f16[i]));
  CHECK(h_vals[0] == 1.5f);
  CHECK(h_vals[4] == 65504.0f);

  const TensorView& b = file.at("c.bf16");
  CHECK(b.dtype == DType::BF16);
  CHECK(b.shape == std::vector<int64_t>{3, 1, 2});
  const std::vector<double> b_vals = b.to_f64();
  for (size_t i = 0; i < f32.size(); ++i) CHECK(b_vals[i] == double(bf16_to_float(bf16[i])));

  const TensorView& d = file.at("d.f64");
  CHECK(d.dtype == DType::F64);
  CHECK(d.to_f64() == f64);
  CHECK(d.to_f32()[0] == 0.1f);

  CHECK(file.at("e.empty").numel() == 0);
  CHECK(file.at("e.empty").to_f32().empty());

  // Integer tensors (token ids) read exactly through to_i64, and only through it.
  const TensorView& n64 = file.at("f.i64");
  CHECK(n64.dtype == DType::I64);
  CHECK(n64.shape == std::vector<int64_t>{2, 2});
  CHECK(n64.to_i64() == i64);
  CHECK(file.at("g.i32").dtype == DType::I32);
  CHECK(file.at("g.i32").to_i64() == std::vector<int64_t>(i32.begin(), i32.end()));
  for (const char* name : {"f.i64", "g.i32"}) {
    CAPTURE(name);
    for (auto read : {+[](const TensorView& t) { (void)t.to_f32(); },
                      +[](const TensorView& t) { (void)t.to_f64(); }}) {
      try {
        read(file.at(name));
        FAIL("read an integer tensor as floats");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::shape_mismatch);
        CHECK(std::string(e.what()).rfind(path + ": tensor '" + name + "': unsupported dtype", 0) == 0);
      }
    }
  }
  try {
    (void)a.to_i64();
    FAIL("read a float tensor as integers");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::shape_mismatch);
    CHECK(std::string(e.what()) ==
          path + ": tensor 'a.f32' has dtype F32, expected an integer dtype (I64 or I32)");
  }

  // The header is padded so that the data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  CHECK(header_len % 8 == 0);
}

TEST_CASE("safetensors: reader moves and rejects missing tensors by name") {
  TempDir dir;
  const std::vector<float> v = {1, 2};
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, {{"w", DType::F32, {2}, as_bytes(v)}});
  SafetensorsFile first(path);
  SafetensorsFile moved(std::move(first));
  CHECK(moved.at("w").to_f32() == v);
  try {
    (void)moved.at("nope.weight");
    FAIL("at() found a tensor that is not there");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::missing_tensor);
    CHECK(std::string(e.what()).rfind(path, 0) == 0);
    CHECK(std::string(e.what()).find("nope.weight") != std::string::npos);
  }
}

TEST_CASE("safetensors: malformed files are rejected with the path and the culprit named") {
  TempDir dir;
  auto make = [&](const std::string& name, const std::string& bytes) {
    const std::string path = dir.file(name);
    write_raw(path, bytes);
    return path;
  };
  const std::string good_entry = R"("x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";

  SUBCASE("missing file") {
    expect_open_error(dir.file("absent.safetensors"), ErrorCode::io, "cannot open");
  }
  SUBCASE("empty file") { expect_open_error(make("empty", ""), ErrorCode::io, "too short"); }
  SUBCASE("truncated before the header length ends") {
    expect_open_error(make("short", std::string(5, '\x10')), ErrorCode::io, "too short");
  }
  SUBCASE("header length beyond the file") {
    std::string bytes = raw_file("{" + good_entry + "}", 8);
    const uint64_t huge = 1u << 20;
    std::memcpy(bytes.data(), &huge, 8);
    expect_open_error(make("long_header", bytes), ErrorCode::io, "header length");
  }
  SUBCASE("header length that overflows") {
    std::string bytes = raw_file("{}", 0);
    const uint64_t huge = ~uint64_t(0) - 3;
    std::memcpy(bytes.data(), &huge, 8);
    expect_open_error(make("overflow_header", bytes), ErrorCode::io, "header length");
  }
  SUBCASE("bad JSON") {
    expect_open_error(make("bad_json", raw_file(R"({"x": {"dtype": "F32",)", 8)), ErrorCode::io,
                      "not valid JSON");
  }
  SUBCASE("header not an object") {
    expect_open_error(make("array", raw_file("[1, 2]", 0)), ErrorCode::io, "not a JSON object");
  }
  SUBCASE("offsets beyond the data section") {
    expect_open_error(make("oob", raw_file("{" + good_entry + "}", 4)), ErrorCode::io, "'x'");
  }
  SUBCASE("begin after end") {
    const std::string h = R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})";
    expect_open_error(make("reversed", raw_file(h, 8)), ErrorCode::io, "begin > end");
  }
  SUBCASE("overlapping tensors") {
    const std::string h =
        "{" + good_entry + R"(, "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
    expect_open_error(make("overlap", raw_file(h, 12)), ErrorCode::io, "overlap");
  }
  SUBCASE("unknown dtype") {
    const std::string h = R"({"q": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})";
    expect_open_error(make("f8", raw_file(h, 8)), ErrorCode::io, "'q': unsupported dtype 'F8_E4M3'");
  }
  SUBCASE("an integer tensor whose byte count disagrees with its shape") {
    const std::string h = R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 8]}})";
    expect_open_error(make("i64_short", raw_file(h, 8)), ErrorCode::shape_mismatch, "'ids'");
  }
  SUBCASE("shape disagrees with the byte count") {
    const std::string h = R"({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})";
    expect_open_error(make("mismatch", raw_file(h, 8)), ErrorCode::shape_mismatch, "'x'");
  }
  SUBCASE("shape that overflows") {
    const std::string h =
        R"({"x": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})";
    expect_open_error(make("huge_shape", raw_file(h, 8)), ErrorCode::shape_mismatch, "'x'");
  }
  SUBCASE("negative dimension") {
    const std::string h = R"({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})";
    expect_open_error(make("negative", raw_file(h, 8)), ErrorCode::io, "'shape'");
  }
  SUBCASE("missing dtype") {
    const std::string h = R"({"x": {"shape": [2], "data_offsets": [0, 8]}})";
    expect_open_error(make("no_dtype", raw_file(h, 8)), ErrorCode::io, "'dtype'");
  }
  SUBCASE("data_offsets of the wrong form") {
    const std::string h = R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})";
    expect_open_error(make("one_offset", raw_file(h, 8)), ErrorCode::io, "'data_offsets'");
  }
  SUBCASE("metadata with a non-string value") {
    const std::string h = R"({"__metadata__": {"step": 3}, )" + good_entry + "}";
    expect_open_error(make("meta", raw_file(h, 8)), ErrorCode::io, "'step'");
  }
  SUBCASE("a golden file cut short") {
    const std::string golden =
        test::golden_dir() + "/g2_gqa_official_headwise.safetensors";
    const std::string cut = dir.file("cut.safetensors");
    fs::copy_file(golden, cut);
    fs::resize_file(cut, fs::file_size(golden) - 100);
    expect_open_error(cut, ErrorCode::io, "run past");
  }
}

TEST_CASE("safetensors: writer validates before it touches the file system") {
  TempDir dir;
  const std::vector<float> v = {1, 2, 3};
  const std::string path = dir.file("w.safetensors");
  auto expect_write_error = [&](const std::vector<TensorToWrite>& tensors, ErrorCode code,
                                const std::string& target = "") {
    const std::string p = target.empty() ? path : target;
    try {
      write_safetensors(p, tensors);
      FAIL("wrote an invalid file");
    } catch (const Error& e) {
      CHECK(e.code() == code);
      CHECK(std::string(e.what()).rfind(p, 0) == 0);
    }
  };
  expect_write_error({{"x", DType::F32, {2}, as_bytes(v)}}, ErrorCode::shape_mismatch);
  expect_write_error({{"x", DType::F32, {3}, as_bytes(v)}, {"x", DType::F32, {3}, as_bytes(v)}},
                     ErrorCode::invalid_argument);
  expect_write_error({{"x", DType::F32, {-3}, as_bytes(v)}}, ErrorCode::invalid_argument);
  expect_write_error({{"__metadata__", DType::F32, {3}, as_bytes(v)}}, ErrorCode::invalid_argument);
  expect_write_error({{"x", DType::F32, {3}, as_bytes(v)}}, ErrorCode::io,
                     dir.file("no_such_dir/w.safetensors"));
  CHECK(fs::is_empty(dir.path));
}

// ---- what a path names decides how it is written (vkgate/output_file.hpp) ----

namespace {

// Files under `dir` named like the writer's temporary files.
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->path().filename().string().find(".tmp.") != std::string::npos) out.push_back(it->path().string());
  return out;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}


}  // namespace

TEST_CASE("safetensors: output file: a symbolic link (a chain, a dangling one) has its target replaced in its own directory") {
  TempDir dir;
  fs::create_directories(dir.path / "real");
  const std::vector<float> old_values = {1, 2, 3}, new_values = {4, 5, 6, 7};
  const std::string target = dir.file("real/out.safetensors");
  write_safetensors(target, {{"x", DType::F32, {3}, as_bytes(old_values)}});
  fs::create_symlink("real/out.safetensors", dir.path / "link");         // relative to the link's directory
  fs::create_symlink(dir.path / "link", dir.path / "link_to_link");      // a chain, absolute
  fs::create_symlink("real/new.safetensors", dir.path / "dangling");     // names nothing yet

  for (const char* name : {"link", "link_to_link"}) {
    CAPTURE(name);
    write_safetensors(dir.file(name), {{"y", DType::F32, {4}, as_bytes(new_values)}});
    CHECK(fs::is_symlink(dir.path / name));
    CHECK(fs::read_symlink(dir.path / "link") == "real/out.safetensors");
    CHECK(fs::is_regular_file(fs::symlink_status(target)));
    CHECK(SafetensorsFile(target).at("y").to_f32() == new_values);
    CHECK(temporaries(dir.path).empty());
  }
  write_file(dir.file("dangling"), "text through a dangling link");
  CHECK(fs::is_symlink(dir.path / "dangling"));
  CHECK(fs::is_regular_file(fs::symlink_status(dir.path / "real/new.safetensors")));
  CHECK(read_text(dir.file("real/new.safetensors")) == "text through a dangling link");

  // A link into a missing directory, and a loop: errors naming the path, nothing created.
  fs::create_symlink("missing/out.txt", dir.path / "into_nothing");
  fs::create_symlink("loop_b", dir.path / "loop_a");
  fs::create_symlink("loop_a", dir.path / "loop_b");
  expect_error([&] { write_file(dir.file("into_nothing"), "x"); }, ErrorCode::io, {dir.file("into_nothing"), "missing"});
  expect_error([&] { write_file(dir.file("loop_a"), "x"); }, ErrorCode::io,
               {dir.file("loop_a"), "too many levels of symbolic links"});
  CHECK(!fs::exists(dir.path / "missing"));
  CHECK(fs::is_symlink(dir.path / "loop_a"));
  CHECK(temporaries(dir.path).empty());
}

TEST_CASE("safetensors: output file: a FIFO is written directly, never replaced by a regular file") {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::vector<float> v = {1.5f, -2.0f, 3.25f};
  const std::vector<TensorToWrite> tensors = {{"x", DType::F32, {3}, as_bytes(v)}};
  {
    test::FifoReader reader(fifo);
    std::string error;
    try {
      write_safetensors(fifo, tensors, {{"k", "v"}});
    } catch (const Error& e) {
      error = e.what();
    }
    const std::string got = reader.finish();
    CHECK(error.empty());
    write_safetensors(dir.file("regular.safetensors"), tensors, {{"k", "v"}});
    CHECK(got == read_text(dir.file("regular.safetensors")));
  }
  {
    test::FifoReader reader(fifo);
    std::string error;
    try {
      write_file(fifo, "some text\n");
    } catch (const Error& e) {
      error = e.what();
    }
    CHECK(reader.finish() == "some text\n");
    CHECK(error.empty());
  }
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(temporaries(dir.path).empty());
}

TEST_CASE("safetensors: output file: a read-only file is refused naming it and left as it was, a writable one keeps its mode") {
  TempDir dir;
  const std::vector<float> v = {1, 2};
  const std::vector<TensorToWrite> tensors = {{"x", DType::F32, {2}, as_bytes(v)}};
  const std::string ro = dir.write("ro.safetensors", "old bytes");
  ::chmod(ro.c_str(), 0444);
  // Refused even as root, who may write it: the mode says not to.
  expect_error([&] { write_safetensors(ro, tensors); }, ErrorCode::io, {ro + ": is read-only (mode 0444)", "not replaced"});
  expect_error([&] { check_output_path(ro); }, ErrorCode::io, {ro, "read-only"});
  fs::create_symlink("ro.safetensors", dir.path / "link_to_ro");
  expect_error([&] { write_file(dir.file("link_to_ro"), "new"); }, ErrorCode::io,
               {dir.file("link_to_ro") + ": links to " + ro + ", which is read-only (mode 0444)"});
  CHECK(read_text(ro) == "old bytes");
  CHECK(mode_of(ro) == 0444);
  CHECK(temporaries(dir.path).empty());

  for (const mode_t mode : {mode_t(0600), mode_t(0640), mode_t(0755), mode_t(0666)}) {
    CAPTURE(mode);
    const std::string p = dir.write("kept.safetensors", "old");
    REQUIRE(::chmod(p.c_str(), mode) == 0);
    write_safetensors(p, tensors);
    CHECK(mode_of(p) == mode);
    CHECK(SafetensorsFile(p).at("x").to_f32() == v);
    fs::remove(p);
  }
  // A new file: 0666 less the umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  write_file(dir.file("new.txt"), "x");
  CHECK(mode_of(dir.file("new.txt")) == (0666 & ~mask));
}

TEST_CASE("safetensors: output file: a directory and a socket are refused naming them, \"-\" is standard output") {
  TempDir dir;
  fs::create_directories(dir.path / "sub");
  expect_error([&] { write_file(dir.file("sub"), "x"); }, ErrorCode::io, {dir.file("sub") + ": is a directory"});
  expect_error([&] { check_output_path(dir.file("sub")); }, ErrorCode::io, {"is a directory"});
  expect_error([&] { check_output_path(dir.file("missing/out.txt")); }, ErrorCode::io, {dir.file("missing/out.txt")});
  check_output_path(dir.file("fresh.txt"));  // fine, and creates nothing
  CHECK(!fs::exists(dir.path / "fresh.txt"));

  const std::string sock = dir.file("sock");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sock.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  REQUIRE(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  expect_error([&] { write_file(sock, "x"); }, ErrorCode::io, {sock + ": is a socket"});
  ::close(s);
  CHECK(fs::is_socket(sock));

  // "-": standard output, here redirected to a file for the length of the writes.
  const std::vector<float> v = {7, 8, 9};
  const std::string captured = dir.file("stdout.bin");
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int fd = ::open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDOUT_FILENO);
  ::close(fd);
  std::string error;
  try {
    write_file("-", "text ");
    write_safetensors("-", {{"x", DType::F32, {3}, as_bytes(v)}});
  } catch (const Error& e) {
    error = e.what();
  }
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  CHECK(error.empty());
  CHECK(!fs::exists("-"));
  const std::string got = read_text(captured);
  REQUIRE(got.rfind("text ", 0) == 0);
  write_text(dir.file("from_stdout.safetensors"), got.substr(5));
  CHECK(SafetensorsFile(dir.file("from_stdout.safetensors")).at("x").to_f32() == v);
}

TEST_CASE("safetensors: output file: /dev/stdout and /proc/self/fd/N are written through, to a pipe or a regular file") {
  // Links to open descriptors, which only the kernel follows: "pipe:[1234]" is no path.
  TempDir dir;
  int ends[2];
  REQUIRE(::pipe(ends) == 0);
  std::string error;
  try {
    write_file("/proc/self/fd/" + std::to_string(ends[1]), "through the pipe");
  } catch (const Error& e) {
    error = e.what();
  }
  ::close(ends[1]);
  std::string got(64, '\0');
  const ssize_t n = ::read(ends[0], got.data(), got.size());
  ::close(ends[0]);
  CHECK(error.empty());
  CHECK(got.substr(0, size_t(std::max<ssize_t>(n, 0))) == "through the pipe");

  // /dev/stdout on a regular file (a shell's "> file"): the file is truncated and written, not replaced.
  const std::string file = dir.write("stdout.txt", "a longer old text that must go");
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int fd = ::open(file.c_str(), O_WRONLY);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDOUT_FILENO);
  ::close(fd);
  struct stat before {};
  ::stat(file.c_str(), &before);
  error.clear();
  try {
    write_file("/dev/stdout", "new");
  } catch (const Error& e) {
    error = e.what();
  }
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  CHECK(error.empty());
  CHECK(read_text(file) == "new");
  struct stat after {};
  ::stat(file.c_str(), &after);
  CHECK(after.st_ino == before.st_ino);
  CHECK(temporaries(dir.path).empty());
}

TEST_CASE("safetensors: output file: SIGTERM, SIGINT or SIGHUP during a write leaves no temporary file") {
  // A child writes a 64 GiB span of the zero page (a read-only anonymous
  // mapping: no memory, and far more than it can write before the signal);
  // the parent waits for its temporary file, signals it, and looks again.
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    CAPTURE(sig);
    TempDir dir;
    const std::string target = dir.file("huge.bin");
    constexpr size_t kHuge = size_t(1) << 36;
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // A program with the default dispositions (doctest catches SIGINT and SIGTERM itself).
      for (int s : {SIGTERM, SIGINT, SIGHUP}) ::signal(s, SIG_DFL);
      void* zeros = ::mmap(nullptr, kHuge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (zeros == MAP_FAILED) ::_exit(3);
      try {
        write_file(target, std::string_view(static_cast<const char*>(zeros), kHuge));
      } catch (...) {
        ::_exit(4);
      }
      ::_exit(5);
    }
    bool seen = false, exited = false;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!seen && !exited && std::chrono::steady_clock::now() < deadline) {
      seen = !temporaries(dir.path).empty();
      exited = !seen && ::waitpid(pid, &status, WNOHANG) == pid;
      if (!seen && !exited) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!exited) {
      ::kill(pid, sig);
      ::waitpid(pid, &status, 0);
    }
    CHECK(seen);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK(temporaries(dir.path).empty());
    CHECK(!fs::exists(target));
  }
}

TEST_CASE("safetensors: output file: a signal handler of the program's own, or an ignored signal, is left alone") {
  TempDir dir;
  struct sigaction mine {}, old_hup {}, old_int {}, now {};
  mine.sa_handler = +[](int) {};
  sigemptyset(&mine.sa_mask);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  REQUIRE(::sigaction(SIGHUP, &mine, &old_hup) == 0);
  REQUIRE(::sigaction(SIGINT, &ignore, &old_int) == 0);
  write_file(dir.file("a.txt"), "x");
  ::sigaction(SIGHUP, nullptr, &now);
  CHECK((now.sa_handler == mine.sa_handler));
  ::sigaction(SIGINT, nullptr, &now);
  CHECK((now.sa_handler == SIG_IGN));
  ::sigaction(SIGHUP, &old_hup, nullptr);
  ::sigaction(SIGINT, &old_int, nullptr);
  CHECK(read_text(dir.file("a.txt")) == "x");
}

}  // namespace test_safetensors
