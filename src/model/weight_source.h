#pragma once
// Where the model's parameters come from. The model asks for each parameter by its Hugging Face name and the
// shape it expects; a source either maps it from a checkpoint or generates it (dummy weights).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/dummy_values.h"
#include "model/fp8_weight_block.h"
#include "model/hf_config.h"
#include "model/parameter_layout.h"
#include "model/safetensors.h"

namespace nanovllm {

class WeightSource {
 public:
  virtual ~WeightSource();
  // Throws InvalidInput when the tensor is missing, its shape differs from expected_shape or (checkpoints) a
  // sampled element is NaN or Inf. Safe to call from
  // several threads at once (tensor-parallel ranks load concurrently).
  virtual HostTensor get(const std::string& name, const std::vector<int64_t>& expected_shape) = 0;
  virtual bool contains(const std::string& name) const = 0;
  // A tensor in whatever shape it is stored, for tensors whose shape varies between checkpoints (a scalar
  // scale stored as [] or [1]); checked like get() otherwise. Throws EngineError where the source has no
  // stored tensors (generated weights).
  virtual HostTensor get_as_stored(const std::string& name);
  // The block rows × cols of a parameter seen as [shape[0], rest] (a 1-D parameter has one column), as a
  // dense row-major tensor of shape [rows, cols] ([rows] for 1-D): one tensor-parallel rank's shard. Row
  // blocks of a stored tensor are views into it; column blocks are copied.
  virtual HostTensor get_block(const std::string& name, const std::vector<int64_t>& expected_shape, IndexRange rows,
                               IndexRange cols);
  // The block rows x cols of the FP8 linear `module` whose weight is [N, K] = shape: `module`.weight as stored
  // (F8_E4M3) and the blocks of `module`.weight_scale_inv (F32 or BF16, [ceil(N / 128), ceil(K / 128)]) it
  // covers, as F32. Throws InvalidInput naming the tensor for a weight that is not F8_E4M3, a missing scale, a
  // scale of the wrong shape or dtype, one that is not finite and positive, or a block that cuts scale blocks
  // (see fp8_scale_ranges).
  virtual Fp8HostBlock get_fp8_block(const std::string& module, const std::vector<int64_t>& shape, IndexRange rows,
                                     IndexRange cols);
};

// The tensors of a checkpoint folder, as stored (F32, BF16 or F16), memory-mapped.
class CheckpointWeights : public WeightSource {
 public:
  explicit CheckpointWeights(CheckpointReader reader) : reader_(std::move(reader)) {}
  static std::unique_ptr<CheckpointWeights> open(const std::filesystem::path& dir);

  HostTensor get(const std::string& name, const std::vector<int64_t>& expected_shape) override;
  bool contains(const std::string& name) const override { return reader_.contains(name); }
  HostTensor get_as_stored(const std::string& name) override;
  const CheckpointReader& reader() const { return reader_; }

 private:
  // The stored tensor, its shape checked against *expected_shape unless that is null, its values sampled.
  HostTensor read(const std::string& name, const std::vector<int64_t>* expected_shape);
  CheckpointReader reader_;
};

// Random BF16 weights for every parameter of config's architecture, generated on demand from (seed, name).
class DummyWeights : public WeightSource {
 public:
  DummyWeights(const ModelConfig& config, uint64_t seed, DummyWeightScales scales = {});

  HostTensor get(const std::string& name, const std::vector<int64_t>& expected_shape) override;
  bool contains(const std::string& name) const override { return index_.count(name) != 0; }
  // Generates only the block.
  HostTensor get_block(const std::string& name, const std::vector<int64_t>& expected_shape, IndexRange rows,
                       IndexRange cols) override;
  const std::vector<ParameterSpec>& layout() const { return layout_; }

 private:
  const ParameterSpec& spec_of(const std::string& name, const std::vector<int64_t>& expected_shape) const;

  uint64_t seed_;
  DummyWeightScales scales_;
  std::vector<ParameterSpec> layout_;
  std::unordered_map<std::string, size_t> index_;  // name -> layout_ entry
};

// The engine's choice: DummyWeights(config, seed) when `dummy` (vLLM's load_format=dummy), else the
// checkpoint in model_dir; its linear weights quantised to FP8 as they load when `quantize_fp8`
// (Fp8QuantizingWeights; see apply_quantization_setting).
std::unique_ptr<WeightSource> open_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                           bool dummy, uint64_t seed, bool quantize_fp8 = false);

}  // namespace nanovllm
