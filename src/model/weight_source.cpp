#include "model/weight_source.h"

#include <memory>

#include "common/error.h"

namespace nanovllm {
namespace {

void check_shape(const std::string& where, const std::string& name, const std::vector<int64_t>& actual,
                 const std::vector<int64_t>& expected) {
  if (actual != expected)
    throw InvalidInput(where + "tensor '" + name + "' has shape " + shape_to_string(actual) + ", expected " +
                       shape_to_string(expected));
}

}  // namespace

WeightSource::~WeightSource() = default;

std::unique_ptr<CheckpointWeights> CheckpointWeights::open(const std::filesystem::path& dir) {
  return std::make_unique<CheckpointWeights>(CheckpointReader::open(dir));
}

HostTensor CheckpointWeights::get(const std::string& name, const std::vector<int64_t>& expected_shape) {
  HostTensorView view = reader_.get(name);
  check_shape(reader_.file_of(name).string() + ": ", name, view.shape, expected_shape);
  return HostTensor{std::move(view), nullptr};
}

DummyWeights::DummyWeights(const ModelConfig& config, uint64_t seed, DummyWeightScales scales)
    : seed_(seed), scales_(scales), layout_(parameter_layout(config)) {
  for (size_t i = 0; i < layout_.size(); ++i) index_.emplace(layout_[i].name, i);
}

HostTensor DummyWeights::get(const std::string& name, const std::vector<int64_t>& expected_shape) {
  auto it = index_.find(name);
  if (it == index_.end()) throw InvalidInput("dummy weights have no tensor '" + name + "'");
  const ParameterSpec& spec = layout_[it->second];
  check_shape("dummy weights: ", name, spec.shape, expected_shape);
  int64_t numel = 1;
  for (int64_t d : spec.shape) numel *= d;
  std::shared_ptr<uint16_t[]> values = std::make_shared_for_overwrite<uint16_t[]>(static_cast<size_t>(numel));
  fill_dummy_bf16(spec, seed_, scales_, values.get());
  HostTensor out;
  out.view = HostTensorView{values.get(), DType::BF16, spec.shape};
  out.owned = std::shared_ptr<void>(values, values.get());
  return out;
}

std::unique_ptr<WeightSource> open_weights(const std::filesystem::path& model_dir, const ModelConfig& config, bool dummy,
                                           uint64_t seed) {
  if (dummy) return std::make_unique<DummyWeights>(config, seed);
  return CheckpointWeights::open(model_dir);
}

}  // namespace nanovllm
