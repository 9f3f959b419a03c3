// The extension module nanovllm._core: the engine handle, its settings and the raw request output. The public
// API (nanovllm.LLM, SamplingParams, RequestOutput, Tokenizer) is written in Python on top of it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <variant>
#include <vector>

#include "common/error.h"
#include "engine_handle.h"

namespace py = pybind11;
using namespace nanovllm;
using nanovllm::python::EngineHandle;
using nanovllm::python::StreamRun;

namespace {
// A read-write attribute that is also listed in the class's `fields` (the Python layer's keyword list).
template <class Class, class T>
void bind_field(py::class_<Class>& cls, std::vector<std::string>& fields, const char* name, T Class::*member) {
  cls.def_readwrite(name, member);
  fields.emplace_back(name);
}

// Engine text may be cut anywhere by a stop string; a broken UTF-8 tail becomes U+FFFD rather than an error.
py::str utf8_text(const std::string& text) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
}

void bind_engine_config(py::module_& m) {
  py::class_<EngineConfig> cls(m, "EngineConfig", "Engine settings (include/nanovllm/config.h).");
  cls.def(py::init<>());
  std::vector<std::string> fields;
  bind_field(cls, fields, "device", &EngineConfig::device);
  bind_field(cls, fields, "max_num_batched_tokens", &EngineConfig::max_num_batched_tokens);
  bind_field(cls, fields, "max_num_seqs", &EngineConfig::max_num_seqs);
  bind_field(cls, fields, "max_model_len", &EngineConfig::max_model_len);
  bind_field(cls, fields, "gpu_memory_utilization", &EngineConfig::gpu_memory_utilization);
  bind_field(cls, fields, "tensor_parallel_size", &EngineConfig::tensor_parallel_size);
  bind_field(cls, fields, "enforce_eager", &EngineConfig::enforce_eager);
  bind_field(cls, fields, "kvcache_block_size", &EngineConfig::kvcache_block_size);
  bind_field(cls, fields, "num_kvcache_blocks", &EngineConfig::num_kvcache_blocks);
  bind_field(cls, fields, "cpu_kvcache_space_gib", &EngineConfig::cpu_kvcache_space_gib);
  bind_field(cls, fields, "kv_cache_dtype", &EngineConfig::kv_cache_dtype);
  bind_field(cls, fields, "enable_prefix_caching", &EngineConfig::enable_prefix_caching);
  bind_field(cls, fields, "async_scheduling", &EngineConfig::async_scheduling);
  bind_field(cls, fields, "seed", &EngineConfig::seed);
  bind_field(cls, fields, "quantization", &EngineConfig::quantization);
  cls.def_property(
      "step_policy", [](const EngineConfig& c) { return to_string(c.step_policy); },
      [](EngineConfig& c, const std::string& name) { c.step_policy = parse_step_policy(name); });
  fields.emplace_back("step_policy");
  // Set by LLM() itself: the model path, load_format="dummy", and generate's use_tqdm.
  cls.def_readwrite("model", &EngineConfig::model);
  cls.def_readwrite("load_dummy_weights", &EngineConfig::load_dummy_weights);
  cls.def_readwrite("show_progress", &EngineConfig::show_progress);
  cls.def("validate", &EngineConfig::validate);
  cls.attr("fields") = py::tuple(py::cast(fields));
}

void bind_sampling_params(py::module_& m) {
  py::class_<SamplingParams> cls(m, "SamplingParams", "Sampling controls (include/nanovllm/sampling_params.h).");
  cls.def(py::init<>());
  std::vector<std::string> fields;
  bind_field(cls, fields, "temperature", &SamplingParams::temperature);
  bind_field(cls, fields, "top_k", &SamplingParams::top_k);
  bind_field(cls, fields, "top_p", &SamplingParams::top_p);
  bind_field(cls, fields, "min_p", &SamplingParams::min_p);
  bind_field(cls, fields, "seed", &SamplingParams::seed);
  bind_field(cls, fields, "max_tokens", &SamplingParams::max_tokens);
  bind_field(cls, fields, "min_tokens", &SamplingParams::min_tokens);
  bind_field(cls, fields, "ignore_eos", &SamplingParams::ignore_eos);
  bind_field(cls, fields, "stop_token_ids", &SamplingParams::stop_token_ids);
  bind_field(cls, fields, "stop", &SamplingParams::stop);
  bind_field(cls, fields, "logprobs", &SamplingParams::logprobs);
  bind_field(cls, fields, "prompt_logprobs", &SamplingParams::prompt_logprobs);
  bind_field(cls, fields, "skip_special_tokens", &SamplingParams::skip_special_tokens);
  cls.def("validate", &SamplingParams::validate);
  cls.attr("fields") = py::tuple(py::cast(fields));
  cls.attr("MAX_LOGPROBS") = SamplingParams::kMaxLogprobs;
}

void bind_request_output(py::module_& m) {
  py::class_<RequestOutput>(m, "RequestOutput", "One finished request as the engine reports it.")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("token_ids", &RequestOutput::token_ids)
      .def_property_readonly("text", [](const RequestOutput& o) { return utf8_text(o.text); })
      .def_readonly("finish_reason", &RequestOutput::finish_reason)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("logprobs", &RequestOutput::logprobs)
      .def_readonly("prompt_logprobs", &RequestOutput::prompt_logprobs);
}

void bind_request_delta(py::module_& m) {
  py::class_<RequestDelta>(m, "RequestDelta", "What one engine step added to one request.")
      .def_readonly("request_id", &RequestDelta::request_id)
      .def_readonly("prompt_token_ids", &RequestDelta::prompt_token_ids)
      .def_readonly("token_ids", &RequestDelta::token_ids)
      .def_property_readonly("text", [](const RequestDelta& d) { return utf8_text(d.text); })
      .def_readonly("logprobs", &RequestDelta::logprobs)
      .def_readonly("prompt_logprobs", &RequestDelta::prompt_logprobs)
      .def_readonly("finished", &RequestDelta::finished)
      .def_readonly("finish_reason", &RequestDelta::finish_reason)
      .def_readonly("error", &RequestDelta::error);
}

void bind_stream_run(py::module_& m) {
  py::class_<StreamRun>(m, "StreamRun", "One stream() call: pull a step's deltas with next(), close() to end it.")
      .def("next", &StreamRun::next)
      .def("token_text", &StreamRun::token_text, py::arg("token"))
      .def("close", &StreamRun::close)
      .def_property_readonly("closed", &StreamRun::closed);
}

using PromptInput = std::variant<std::string, std::vector<int32_t>>;

std::vector<Prompt> to_prompts(const std::vector<PromptInput>& prompts) {
  std::vector<Prompt> converted;
  converted.reserve(prompts.size());
  for (const PromptInput& p : prompts) {
    if (const auto* text = std::get_if<std::string>(&p)) converted.push_back(Prompt::from_text(*text));
    else converted.push_back(Prompt::from_tokens(std::get<std::vector<int32_t>>(p)));
  }
  return converted;
}

void bind_engine(py::module_& m) {
  py::class_<EngineHandle>(m, "Engine", "The loaded engine: generate, tokenizer calls and close.")
      .def(py::init<EngineConfig>(), py::arg("config"))
      .def(
          "generate",
          [](EngineHandle& self, const std::vector<PromptInput>& prompts, const std::vector<SamplingParams>& params,
             const py::object& on_step,
             bool native_progress) { return self.generate(to_prompts(prompts), params, on_step, native_progress); },
          py::arg("prompts"), py::arg("params"), py::arg("on_step") = py::none(), py::arg("native_progress") = false)
      .def(
          "stream",
          [](EngineHandle& self, const std::vector<PromptInput>& prompts, const std::vector<SamplingParams>& params) {
            return self.stream(to_prompts(prompts), params);
          },
          py::arg("prompts"), py::arg("params"), py::keep_alive<0, 1>())  // the engine outlives its streams
      .def("has_tokenizer", &EngineHandle::has_tokenizer)
      .def("encode", &EngineHandle::encode, py::arg("text"))
      .def("decode", &EngineHandle::decode, py::arg("token_ids"), py::arg("skip_special_tokens"))
      .def("apply_chat_template", &EngineHandle::apply_chat_template, py::arg("messages"), py::arg("tools"),
           py::arg("add_generation_prompt"), py::arg("template_variables"))
      .def("special_tokens", &EngineHandle::special_tokens)
      .def("token_to_id", &EngineHandle::token_to_id, py::arg("token"))
      .def("token_text", &EngineHandle::token_text, py::arg("token"))
      .def("vocab_size", &EngineHandle::vocab_size)
      .def("backend_name", &EngineHandle::backend_name)
      .def("close", &EngineHandle::close)
      .def_property_readonly("closed", &EngineHandle::closed);
}
}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "nanovllm's engine, bound for the Python API in nanovllm/";
  m.attr("__version__") = NANOVLLM_VERSION;
  // Engine input errors are the caller's: ValueError with the engine's message. Everything else stays a
  // RuntimeError (pybind11's mapping of std::runtime_error).
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const InvalidInput& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  bind_engine_config(m);
  bind_sampling_params(m);
  bind_request_output(m);
  bind_request_delta(m);
  bind_stream_run(m);
  bind_engine(m);
}
