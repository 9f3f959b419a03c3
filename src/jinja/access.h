#pragma once
// Reading into values: attributes, items, slices, membership, and dict items.
#include <cstdint>
#include <optional>
#include <string>

#include "jinja/value.h"

namespace nanovllm::jinja {

// obj.name: a dict key, a namespace attribute, or a bound str/dict method; undefined when absent.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: dict key or list/string index (negative counts from the end); undefined when absent.
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step);
// `a in b`.
bool contains(const Value& container, const Value& item);
// Looks up a dotted path ("a.b", "items.0") on a value, as Jinja's attribute= arguments do.
Value attribute_path(const Value& item, const std::string& path);
// dict.items() as [key, value] lists; empty for undefined.
ValueList items_of(const Value& v);

}  // namespace nanovllm::jinja
