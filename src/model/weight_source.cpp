#include "model/weight_source.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "common/error.h"
#include "common/fp8.h"
#include "common/quoted.h"
#include "model/finite_check.h"
#include "model/fp8_quantizing_weights.h"

namespace nanovllm {
namespace {

void check_shape(const std::string& where, const std::string& name, const std::vector<int64_t>& actual,
                 const std::vector<int64_t>& expected) {
  if (actual != expected)
    throw InvalidInput(where + "tensor '" + name + "' has shape " + shape_to_string(actual) + ", expected " +
                       shape_to_string(expected));
}

// Rows and columns of a parameter seen as [shape[0], rest].
std::pair<int64_t, int64_t> as_matrix(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  return {rows, rows == 0 ? 0 : numel / rows};
}

void check_block(const std::string& name, const std::vector<int64_t>& shape, IndexRange rows, IndexRange cols) {
  const auto [num_rows, num_cols] = as_matrix(shape);
  if (rows.begin < 0 || rows.begin > rows.end || rows.end > num_rows || cols.begin < 0 || cols.begin > cols.end ||
      cols.end > num_cols)
    throw EngineError("weights: block rows [" + std::to_string(rows.begin) + ", " + std::to_string(rows.end) +
                      ") cols [" + std::to_string(cols.begin) + ", " + std::to_string(cols.end) + ") is outside '" +
                      name + "' " + shape_to_string(shape));
}

std::vector<int64_t> block_shape(const std::vector<int64_t>& shape, IndexRange rows, IndexRange cols) {
  if (shape.size() <= 1) return {rows.size()};
  return {rows.size(), cols.size()};
}

// The format does not promise aligned data (an odd header length shifts every tensor), but the backends read
// weights as arrays of their element type: a misaligned tensor is copied into memory that is aligned.
HostTensor aligned(HostTensorView view) {
  const size_t alignment = dtype_size(view.dtype);
  if (reinterpret_cast<uintptr_t>(view.data) % alignment == 0) return HostTensor{std::move(view), nullptr};
  std::shared_ptr<std::byte[]> copy = std::make_shared_for_overwrite<std::byte[]>(view.bytes());
  std::memcpy(copy.get(), view.data, view.bytes());
  view.data = copy.get();
  return HostTensor{std::move(view), std::shared_ptr<void>(copy, copy.get())};
}

}  // namespace

WeightSource::~WeightSource() = default;

HostTensor WeightSource::get_block(const std::string& name, const std::vector<int64_t>& expected_shape, IndexRange rows,
                                   IndexRange cols) {
  check_block(name, expected_shape, rows, cols);
  HostTensor whole = get(name, expected_shape);
  const auto [num_rows, num_cols] = as_matrix(expected_shape);
  const size_t elem = dtype_size(whole.view.dtype);
  const char* base = static_cast<const char*>(whole.view.data);
  HostTensor out;
  out.view.dtype = whole.view.dtype;
  out.view.shape = block_shape(expected_shape, rows, cols);
  if (cols.begin == 0 && cols.end == num_cols) {  // whole rows: a view, kept alive with the source's data
    out.view.data = base + static_cast<size_t>(rows.begin * num_cols) * elem;
    out.owned = whole.owned;
    return out;
  }
  const size_t row_bytes = static_cast<size_t>(cols.size()) * elem;
  std::shared_ptr<char[]> copy = std::make_shared_for_overwrite<char[]>(row_bytes * static_cast<size_t>(rows.size()));
  for (int64_t r = 0; r < rows.size(); ++r)
    std::memcpy(copy.get() + static_cast<size_t>(r) * row_bytes,
                base + static_cast<size_t>((rows.begin + r) * num_cols + cols.begin) * elem, row_bytes);
  out.view.data = copy.get();
  out.owned = std::shared_ptr<void>(copy, copy.get());
  return out;
}

HostTensor WeightSource::get_as_stored(const std::string& name) {
  throw EngineError("weights: " + quoted_text(name) + " cannot be read as stored from generated weights");
}

Fp8HostBlock WeightSource::get_fp8_block(const std::string& module, const std::vector<int64_t>& shape, IndexRange rows,
                                         IndexRange cols) {
  const std::string weight_name = module + ".weight", scale_name = module + ".weight_scale_inv";
  const Fp8ScaleRanges blocks = fp8_scale_ranges(weight_name, shape, rows, cols);
  Fp8HostBlock out;
  out.weight = get_block(weight_name, shape, rows, cols);
  if (out.weight.view.dtype != DType::F8_E4M3)
    throw InvalidInput("tensor " + quoted_text(weight_name) + " is " + dtype_name(out.weight.view.dtype) +
                       ", but config.json's quantization_config (fp8) makes it an F8_E4M3 weight");
  if (!contains(scale_name))
    throw InvalidInput("tensor " + quoted_text(weight_name) + " is F8_E4M3 but its scale " + quoted_text(scale_name) +
                       " is missing");
  const HostTensor scale =
      get_block(scale_name, {fp8_blocks(shape[0]), fp8_blocks(shape[1])}, blocks.rows, blocks.cols);
  const DType dtype = scale.view.dtype;
  if (dtype != DType::F32 && dtype != DType::BF16)
    throw InvalidInput("tensor " + quoted_text(scale_name) + " is " + dtype_name(dtype) +
                       ", expected F32 or BF16 block scales");
  auto scales = std::make_shared<std::vector<float>>(floats_of(scale.view));
  for (size_t i = 0; i < scales->size(); ++i) {
    // A zero, negative or non-finite scale would silently zero, flip or poison a whole block of weights.
    const float value = (*scales)[i];
    if (!(std::isfinite(value) && value > 0.0f))
      throw InvalidInput("tensor " + quoted_text(scale_name) + " holds the scale " + std::to_string(value) +
                         " at element " + std::to_string(i) + " of this block; scales must be finite and positive");
  }
  out.scale.view = HostTensorView{scales->data(), DType::F32, scale.view.shape};
  out.scale.owned = scales;
  return out;
}

std::unique_ptr<CheckpointWeights> CheckpointWeights::open(const std::filesystem::path& dir) {
  return std::make_unique<CheckpointWeights>(CheckpointReader::open(dir));
}

HostTensor CheckpointWeights::get(const std::string& name, const std::vector<int64_t>& expected_shape) {
  return read(name, &expected_shape);
}

HostTensor CheckpointWeights::get_as_stored(const std::string& name) { return read(name, nullptr); }

HostTensor CheckpointWeights::read(const std::string& name, const std::vector<int64_t>* expected_shape) {
  HostTensorView view = reader_.get(name);
  const std::string where = reader_.file_of(name).string() + ": ";
  if (expected_shape != nullptr) check_shape(where, name, view.shape, *expected_shape);
  check_finite_sample(view, where, name);
  return aligned(std::move(view));
}

DummyWeights::DummyWeights(const ModelConfig& config, uint64_t seed, DummyWeightScales scales)
    : seed_(seed), scales_(scales), layout_(parameter_layout(config)) {
  for (size_t i = 0; i < layout_.size(); ++i) index_.emplace(layout_[i].name, i);
}

const ParameterSpec& DummyWeights::spec_of(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw InvalidInput("dummy weights have no tensor '" + name + "'");
  const ParameterSpec& spec = layout_[it->second];
  check_shape("dummy weights: ", name, spec.shape, expected_shape);
  return spec;
}

HostTensor DummyWeights::get_block(const std::string& name, const std::vector<int64_t>& expected_shape, IndexRange rows,
                                   IndexRange cols) {
  const ParameterSpec& spec = spec_of(name, expected_shape);
  check_block(name, expected_shape, rows, cols);
  std::shared_ptr<uint16_t[]> values =
      std::make_shared_for_overwrite<uint16_t[]>(static_cast<size_t>(rows.size() * cols.size()));
  fill_dummy_bf16_block(spec, seed_, scales_, rows.begin, rows.end, cols.begin, cols.end, values.get());
  HostTensor out;
  out.view = HostTensorView{values.get(), DType::BF16, block_shape(spec.shape, rows, cols)};
  out.owned = std::shared_ptr<void>(values, values.get());
  return out;
}

HostTensor DummyWeights::get(const std::string& name, const std::vector<int64_t>& expected_shape) {
  const auto [rows, cols] = as_matrix(expected_shape);
  HostTensor out = get_block(name, expected_shape, {0, rows}, {0, cols});
  out.view.shape = expected_shape;  // the block is [rows, rest]; the whole keeps its own shape
  return out;
}

std::unique_ptr<WeightSource> open_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                           bool dummy, uint64_t seed, bool quantize_fp8) {
  std::unique_ptr<WeightSource> source;
  if (dummy) source = std::make_unique<DummyWeights>(config, seed);
  else source = CheckpointWeights::open(model_dir);
  if (quantize_fp8) return std::make_unique<Fp8QuantizingWeights>(std::move(source));
  return source;
}

}  // namespace nanovllm
