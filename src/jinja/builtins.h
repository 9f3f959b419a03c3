#pragma once
// Jinja's filters, tests, attribute/item access and Python's str/dict methods, over jinja::Value.
#include <optional>
#include <stdexcept>
#include <string>

#include "jinja/value.h"

namespace nanovllm::jinja {

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
// obj.name: a dict key, a namespace attribute, or a bound str/dict method; undefined when absent.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: dict key or list/string index (negative counts from the end); undefined when absent.
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step);
// `a in b`.
bool contains(const Value& container, const Value& item);
// Global functions: namespace, range, raise_exception, strftime_now, dict.
std::optional<Value> global_function(const std::string& name);

}  // namespace nanovllm::jinja
