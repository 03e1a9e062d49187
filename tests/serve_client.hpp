// A client of `vkgate serve` for the tests: the server as a child process
// on port 0 (Served), one HTTP request per connection (http), server-sent
// events, OpenAI's error shape. A few lines on POSIX sockets: the test binary
// does not link cpp-httplib (Debian's is a compiled library with its own flags).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <string>
#include <vector>

#include "doctest.hpp"

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"

namespace vkgate::cli_test {

using nlohmann::json;

struct HttpReply {
  int status = 0;
  std::string headers, body;
};

// A connection to the server with one request sent (Connection: close).
inline int send_request(int port, const std::string& method, const std::string& path, const std::string& body,
                 const std::vector<std::string>& headers) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  timeval tv{300, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    FAIL("cannot connect to 127.0.0.1:" << port);
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (method == "POST") req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  for (size_t at = 0; at < req.size();) {
    const ssize_t n = ::send(fd, req.data() + at, req.size() - at, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (413) before reading it all
    at += size_t(n);
  }
  return fd;
}

// Reads from `fd` until `needle` has arrived (or the end); returns what was read.
inline std::string read_until(int fd, const std::string& needle) {
  std::string got;
  char buf[4096];
  while (got.find(needle) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

// One request on a fresh connection, read to the end; a chunked body is put back together.
inline HttpReply http(int port, const std::string& method, const std::string& path, const std::string& body = "",
               const std::vector<std::string>& headers = {}) {
  HttpReply r;
  const int fd = send_request(port, method, path, body, headers);
  std::string raw;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  const size_t head_end = raw.find("\r\n\r\n");
  REQUIRE_MESSAGE(head_end != std::string::npos, "no HTTP response: " << raw);
  r.headers = raw.substr(0, head_end);
  r.status = std::atoi(r.headers.c_str() + r.headers.find(' ') + 1);
  std::string rest = raw.substr(head_end + 4);
  if (contains_ci(r.headers, "transfer-encoding: chunked")) {
    size_t at = 0;
    for (;;) {
      const size_t eol = rest.find("\r\n", at);
      REQUIRE(eol != std::string::npos);
      const size_t len = std::stoul(rest.substr(at, eol - at), nullptr, 16);
      if (len == 0) break;
      r.body += rest.substr(eol + 2, len);
      at = eol + 2 + len + 2;
    }
  } else {
    r.body = rest;
  }
  return r;
}

// The "data: " payloads of a server-sent event stream.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  for (size_t end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string e = body.substr(at, end - at);
    REQUIRE_MESSAGE(e.rfind("data: ", 0) == 0, "not an SSE data line: " << e);
    events.push_back(e.substr(6));
  }
  CHECK_MESSAGE(at == body.size(), "trailing bytes after the last event: " << body.substr(at));
  return events;
}


// `vkgate serve --port 0` running, its port read from the listening line.
struct Served {
  TempDir tmp{"serve"};
  Child child;
  int port = 0;
  bool reaped = false;

  explicit Served(const std::string& weights, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"serve", "--weights", weights, "--port", "0", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    child = spawn_cli(with_device(args), tmp.path);
    REQUIRE(child.pid > 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
      const std::string out = read_text(child.out);
      if (const size_t nl = out.find('\n'); nl != std::string::npos) {
        const std::string line = out.substr(0, nl);
        const std::string prefix = "vkgate serve: listening on http://127.0.0.1:";
        REQUIRE_MESSAGE(line.rfind(prefix, 0) == 0, "unexpected first line: " << line);
        port = std::stoi(line.substr(prefix.size()));
        REQUIRE(port > 0);
        return;
      }
      int status = 0;
      if (::waitpid(child.pid, &status, WNOHANG) == child.pid) {
        reaped = true;
        FAIL("vkgate serve exited before listening: " << read_text(child.err));
      }
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "no listening line in 120 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // SIGTERM, then the exit within `bound`.
  CliResult stop(std::chrono::seconds bound = std::chrono::seconds(5)) {
    ::kill(child.pid, SIGTERM);
    reaped = true;
    return finish(child, bound);
  }
  ~Served() {
    if (!reaped && child.pid > 0) {
      ::kill(child.pid, SIGKILL);
      int status = 0;
      ::waitpid(child.pid, &status, 0);
    }
  }
};

inline void check_error(const HttpReply& r, int status) {
  INFO("body: " << r.body);
  CHECK(r.status == status);
  const json j = json::parse(r.body, nullptr, false);
  REQUIRE(j.is_object());
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["message"].is_string());
  CHECK(j["error"]["type"].is_string());
  CHECK(j["error"]["code"].is_string());
}

inline json post_json(int port, const std::string& path, const json& body) {
  const HttpReply r = http(port, "POST", path, body.dump());
  INFO("body: " << r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

// The text of a streamed completion, checking the stream's shape on the way.
inline std::string streamed_text(int port, json body, bool chat = false, json* usage = nullptr) {
  body["stream"] = true;
  const HttpReply r = http(port, "POST", chat ? "/v1/chat/completions" : "/v1/completions", body.dump());
  INFO("body: " << r.body);
  REQUIRE(r.status == 200);
  CHECK(contains_ci(r.headers, "content-type: text/event-stream"));
  const std::vector<std::string> events = sse_events(r.body);
  REQUIRE(events.size() >= 2);
  CHECK(events.back() == "[DONE]");
  std::string text;
  bool finished = false;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    CHECK(c["object"] == (chat ? "chat.completion.chunk" : "text_completion"));
    if (c["choices"].empty()) {  // the usage chunk
      REQUIRE(usage);
      *usage = c["usage"];
      continue;
    }
    const json& choice = c["choices"][0];
    if (!choice["finish_reason"].is_null()) finished = true;
    if (chat) {
      if (i == 0) CHECK(choice["delta"]["role"] == "assistant");
      text += choice["delta"].value("content", "");
    } else {
      text += choice["text"].get<std::string>();
    }
  }
  CHECK(finished);
  return text;
}

}  // namespace vkgate::cli_test
