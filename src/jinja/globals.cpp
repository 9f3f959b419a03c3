#include "jinja/globals.h"

#include <chrono>
#include <ctime>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "jinja/arguments.h"

namespace nanovllm::jinja {
namespace {

using Global = Value (*)(const CallArgs& a);

// namespace(key=value, ...) or namespace(dict): the one object templates may assign attributes to.
Value make_namespace(const CallArgs& a) {
  auto ns = std::make_shared<Namespace>();
  for (const Value& p : a.positional) {
    if (!p.is_dict()) throw Error("namespace() takes keyword arguments or a dict");
    ns->attributes = p.as_dict();
  }
  for (const auto& [k, v] : a.keyword) ns->attributes.emplace_back(k, v);
  return Value(ns);
}

Value range(const CallArgs& a) {
  int64_t start = 0, stop = 0, step = 1;
  for (const Value& p : a.positional) {
    if (!p.is_int()) throw Error("range() takes integers");
  }
  if (a.positional.size() == 1) {
    stop = a.positional[0].as_int();
  } else if (a.positional.size() >= 2) {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() >= 3) step = a.positional[2].as_int();
  } else {
    throw Error("range() needs arguments");
  }
  if (step == 0) throw Error("range() step cannot be zero");
  ValueList out;
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) throw Error("range() is too long");
    out.emplace_back(static_cast<int64_t>(i));
  }
  return Value(out);
}

Value raise_exception(const CallArgs& a) {
  throw Error("template raised an exception: " + (a.positional.empty() ? std::string() : a.positional[0].to_output()));
}

// transformers' strftime_now: the local time formatted by strftime.
Value strftime_now(const CallArgs& a) {
  const std::string& format = string_arg(a, 0, "format", "strftime_now");
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
  return Value(std::string(buf, n));
}

Value dict(const CallArgs& a) {
  ValueDict d;
  for (const auto& [k, v] : a.keyword) d.emplace_back(k, v);
  return Value(d);
}

const std::unordered_map<std::string_view, Global> kGlobals = {{"namespace", make_namespace},
                                                               {"range", range},
                                                               {"raise_exception", raise_exception},
                                                               {"strftime_now", strftime_now},
                                                               {"dict", dict}};

}  // namespace

std::optional<Value> global_function(const std::string& name) {
  const auto it = kGlobals.find(name);
  if (it == kGlobals.end()) return std::nullopt;
  return Value(Function(it->second));
}

}  // namespace nanovllm::jinja
