#include "py_json.h"

#include <string>

namespace nanovllm::python {

namespace py = pybind11;

nlohmann::ordered_json to_json(py::handle value) {
  if (value.is_none()) return nullptr;
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (auto [key, item] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key))
        throw py::type_error("chat template input: dict keys must be str, got " +
                             std::string(py::str(py::type::of(key).attr("__name__"))));
      object[key.cast<std::string>()] = to_json(item);
    }
    return object;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    nlohmann::ordered_json array = nlohmann::ordered_json::array();
    for (py::handle item : value) array.push_back(to_json(item));
    return array;
  }
  throw py::type_error("chat template input: a " + std::string(py::str(py::type::of(value).attr("__name__"))) +
                       " has no JSON form (use dict, list, str, int, float, bool or None)");
}

}  // namespace nanovllm::python
