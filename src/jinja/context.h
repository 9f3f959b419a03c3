#pragma once
// The state of one render: variable scopes, macro depth, and the budgets that keep a hostile template from
// running forever or exhausting memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/globals.h"
#include "jinja/value.h"

namespace nanovllm::jinja {

constexpr uint64_t kMaxSteps = 20'000'000;
constexpr size_t kMaxOutputBytes = 64u << 20;
constexpr size_t kMaxValueSize = 16u << 20;
constexpr uint64_t kMaxProducedBytes = 1ull << 28;

struct Context {
  std::vector<std::unordered_map<std::string, Value>> scopes;
  int depth = 0;  // macro recursion guard
  uint64_t steps = 0;
  uint64_t bytes = 0;  // produced by operators, filters and calls

  // Counts what a value costs to build; throws past the budget.
  const Value& charge(const Value& v) {
    bytes += v.is_string() ? v.as_string().size()
             : v.is_list() ? v.as_list().size() * 16
             : v.is_dict() ? v.as_dict().size() * 32
                           : 1;
    if (bytes > kMaxProducedBytes) throw Error("rendering exceeds its memory budget");
    return v;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      if (const auto f = it->find(name); f != it->end()) return f->second;
    }
    if (auto g = global_function(name)) return *g;
    return Value::undefined(name);
  }
  void assign(const std::string& name, Value v) { scopes.back()[name] = std::move(v); }
};

// Using an undefined value (other than printing or testing it) is an error naming what was looked up.
inline void require_defined(const Value& v) {
  if (v.is_undefined()) throw Error("'" + v.undefined_name() + "' is undefined");
}

}  // namespace nanovllm::jinja
