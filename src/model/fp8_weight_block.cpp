#include "model/fp8_weight_block.h"

#include <memory>

#include "common/error.h"
#include "common/fp8.h"
#include "common/quoted.h"

namespace nanovllm {
namespace {

// The scale blocks of [begin, end) along a dimension of `size`, or false when the range cuts one.
bool scale_range(IndexRange range, int64_t size, IndexRange& out) {
  if (range.begin % kFp8BlockSize != 0 || (range.end % kFp8BlockSize != 0 && range.end != size)) return false;
  out = {range.begin / kFp8BlockSize, fp8_blocks(range.end)};
  return true;
}

}  // namespace

Fp8ScaleRanges fp8_scale_ranges(const std::string& name, const std::vector<int64_t>& shape, IndexRange rows,
                                IndexRange cols) {
  if (shape.size() != 2) throw EngineError("FP8 weight " + quoted_text(name) + " is not a matrix");
  Fp8ScaleRanges out;
  if (!scale_range(rows, shape[0], out.rows) || !scale_range(cols, shape[1], out.cols))
    throw InvalidInput("FP8 weight " + quoted_text(name) + " " + shape_to_string(shape) + ": the block of rows [" +
                       std::to_string(rows.begin) + ", " + std::to_string(rows.end) + ") x columns [" +
                       std::to_string(cols.begin) + ", " + std::to_string(cols.end) +
                       ") cuts its 128 x 128 scale blocks (tensor parallelism must split FP8 weights at multiples "
                       "of 128)");
  return out;
}

Fp8HostBlock to_host_block(Fp8Matrix matrix) {
  auto shared = std::make_shared<Fp8Matrix>(std::move(matrix));
  Fp8HostBlock block;
  block.weight.view = HostTensorView{shared->codes.data(), DType::F8_E4M3, {shared->rows, shared->cols}};
  block.scale.view =
      HostTensorView{shared->scales.data(), DType::F32, {fp8_blocks(shared->rows), fp8_blocks(shared->cols)}};
  block.weight.owned = shared;
  block.scale.owned = shared;
  return block;
}

}  // namespace nanovllm
