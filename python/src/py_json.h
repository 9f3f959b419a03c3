#pragma once
// Python values (dict, list, tuple, str, int, float, bool, None) -> JSON for chat templates. Dict order is kept
// (ordered_json), as the templates render tool definitions in the order given.
#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>

namespace nanovllm::python {

// Throws pybind11::type_error naming the first value that has no JSON form (or a dict key that is not a str).
nlohmann::ordered_json to_json(pybind11::handle value);

}  // namespace nanovllm::python
