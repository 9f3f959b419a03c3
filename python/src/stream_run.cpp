#include "stream_run.h"

#include <pybind11/pybind11.h>

#include <string>

#include "common/error.h"
#include "token_text.h"

namespace nanovllm::python {

namespace py = pybind11;

StreamRun::StreamRun(LLMEngine& engine, EngineCall call, const std::vector<Prompt>& prompts,
                     const std::vector<SamplingParams>& params)
    : engine_(engine), call_(std::move(call)), in_flight_(std::make_unique<RequestsInFlight>(engine)) {
  if (params.size() != prompts.size())
    throw InvalidInput("stream: " + std::to_string(prompts.size()) + " prompts but " + std::to_string(params.size()) +
                       " sampling params");
  py::gil_scoped_release release;  // tokenizing long prompts takes a while
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      const int64_t id = engine_.add_request(prompts[i], params[i]);
      in_flight_->started(id);
      index_of_[id] = i;
    } catch (const InvalidInput& e) {
      throw InvalidInput("request " + std::to_string(i) + ": " + e.what());
    }
  }
}

std::vector<std::pair<size_t, RequestDelta>> StreamRun::next() {
  if (closed()) throw std::runtime_error("this stream is closed");
  std::vector<std::pair<size_t, RequestDelta>> out;
  while (out.empty() && !in_flight_->empty()) {
    // Runs Python's signal handlers first: Ctrl-C raises KeyboardInterrupt here, between two steps.
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    std::vector<RequestDelta> deltas;
    {
      py::gil_scoped_release release;
      deltas = engine_.step_deltas();
    }
    for (RequestDelta& d : deltas) {
      if (d.finished) in_flight_->finished(d.request_id);
      out.emplace_back(index_of_.at(d.request_id), std::move(d));
    }
  }
  if (out.empty()) close();
  return out;
}

std::optional<std::string> StreamRun::token_text(int32_t token) {
  if (closed()) throw std::runtime_error("this stream is closed");
  return python::token_text(engine_, token);
}

void StreamRun::close() {
  if (closed()) return;
  {
    py::gil_scoped_release release;
    in_flight_->abort_all();
  }
  call_.reset();
}

}  // namespace nanovllm::python
