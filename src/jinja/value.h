#pragma once
// Values of the Jinja subset that chat templates use, with Python's semantics (truthiness, str(), ==, ordering).
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "jinja/error.h"

namespace nanovllm::jinja {

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python dicts

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* get(size_t index, std::string_view name) const;
};
using Function = std::function<Value(const CallArgs&)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};
// namespace(): the one mutable object templates may assign attributes to.
struct Namespace {
  ValueDict attributes;
};

class Value {
 public:
  using Storage =
      std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const ValueList>,
                   std::shared_ptr<const ValueDict>, std::shared_ptr<Namespace>, std::shared_ptr<const Function>>;

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(ValueList l) : v_(std::make_shared<const ValueList>(std::move(l))) {}
  Value(ValueDict d) : v_(std::make_shared<const ValueDict>(std::move(d))) {}
  Value(std::shared_ptr<Namespace> n) : v_(std::move(n)) {}
  Value(Function f) : v_(std::make_shared<const Function>(std::move(f))) {}
  static Value undefined(std::string name) {
    Value v;
    v.v_ = Undefined{std::move(name)};
    return v;
  }
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const ValueList>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const ValueDict>>(v_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Function>>(v_); }

  // Typed access; a wrong type is a template error (an Error), never a crash.
  bool as_bool() const { return get<bool>("a bool"); }
  int64_t as_int() const { return get<int64_t>("an integer"); }
  double as_number() const {
    if (is_int()) return static_cast<double>(as_int());
    if (is_bool()) return as_bool() ? 1.0 : 0.0;
    return get<double>("a number");
  }
  const std::string& as_string() const { return get<std::string>("a string"); }
  const ValueList& as_list() const { return *get<std::shared_ptr<const ValueList>>("a list"); }
  const ValueDict& as_dict() const { return *get<std::shared_ptr<const ValueDict>>("a dict"); }
  Namespace& as_namespace() const { return *get<std::shared_ptr<Namespace>>("a namespace"); }
  const Function& as_function() const { return *get<std::shared_ptr<const Function>>("a function"); }
  const std::string& undefined_name() const { return get<Undefined>("undefined").name; }

  // Python's bool().
  bool truthy() const;
  // Jinja's output of {{ value }}: str() for most, '' for undefined and none prints 'None'.
  std::string to_output() const;
  // Python's repr() (how lists and dicts print their items).
  std::string repr() const;
  // Python's json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=False), as transformers' tojson.
  std::string to_json(int indent = -1) const;
  // Python's ==.
  bool equals(const Value& other) const;
  // Python's <; throws for types that do not order.
  bool less_than(const Value& other) const;
  // The type's name for messages.
  std::string type_name() const;
  // Items for iteration (list items, dict keys, string characters); throws if not iterable.
  ValueList iterate() const;
  // Dict lookup; nullptr when absent.
  const Value* find_key(std::string_view key) const;

 private:
  template <typename T>
  const T& get(const char* expected) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw Error(std::string("expected ") + expected + ", got a " + type_name());
  }
  Storage v_;
};

// Python's float repr: shortest round-trip digits, with '.0' on integral values.
std::string python_float_repr(double d);

}  // namespace nanovllm::jinja
