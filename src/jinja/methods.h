#pragma once
// Python's str and dict methods, bound to their object (obj.method then called). Lists have no methods:
// their mutators are refused, templates run in an immutable sandbox.
#include <string>

#include "jinja/value.h"

namespace nanovllm::jinja {

// obj.name as a callable; undefined when obj's type has no such method.
Value bound_method(const Value& obj, const std::string& name);

// The str method `name` bound to s; undefined when there is none.
Value string_method(const std::string& s, const std::string& name);
// The dict method `name` bound to dict; undefined when there is none.
Value dict_method(const Value& dict, const std::string& name);

}  // namespace nanovllm::jinja
