// CUDA graph capture and replay through CudaBackend (and Backend::capture_graph): ops captured once read
// whatever their (fixed) input buffers hold at replay time.
#include <memory>
#include <stdexcept>

#include "tests/cuda/ops/sampler_test_support.h"

namespace nanovllm::test {
namespace {

TEST_F(SamplerTest, CapturedOpsReplayOnNewInputs) {
  const int t = 17, h = 1024, inter = 3072, rows = 4, vocab = 1003;
  const auto w_norm = random_bf16_values(rng_, h);
  const auto w_gate_up = random_bf16_values(rng_, int64_t{2} * inter * h, 0.05f);
  Tensor x = gpu_empty(DType::BF16, {t, h});
  Tensor norm_w = gpu_bf16(w_norm, {h});
  Tensor gate_up_w = gpu_bf16(w_gate_up, {2 * inter, h});
  Tensor y = gpu_empty(DType::BF16, {t, h});
  Tensor gate_up = gpu_empty(DType::BF16, {t, 2 * inter});
  Tensor act = gpu_empty(DType::BF16, {t, inter});
  Tensor logits = gpu_empty(DType::F32, {rows, vocab});
  Tensor ids = gpu_empty(DType::I32, {rows});
  SamplerRows controls;
  controls.add(0.0f, -1, 1.0f, 0.0f, 5, 0);
  controls.add(1.0f, -1, 1.0f, 0.0f, 5, 1);
  controls.add(0.8f, 40, 0.9f, 0.0f, 5, 2);
  controls.add(1.2f, -1, 1.0f, 0.05f, 5, 3);
  const SamplerInputs in = gpu_inputs(controls);

  auto enqueue = [&] {
    gpu().rms_norm(x, norm_w, 1e-6f, y);
    gpu().linear(y, gate_up_w, Tensor(), gate_up);
    gpu().silu_and_mul(gate_up, act);
    gpu().sample(logits, in, ids);
  };
  // Warm up eagerly (cuBLASLt picks its algorithm, modules load), then capture.
  gpu().upload_converted(random_bf16_values(rng_, int64_t{t} * h).data(), DType::F32, x.data, int64_t{t} * h);
  std::vector<float> warm_logits(rows * vocab, 0.5f);
  gpu().upload(warm_logits.data(), logits.data, logits.bytes());
  enqueue();
  gpu().synchronize();
  CudaGraph graph = gpu().capture(enqueue);
  ASSERT_FALSE(graph.empty());

  for (int round = 0; round < 3; ++round) {
    const auto xv = random_bf16_values(rng_, int64_t{t} * h, 2.0f);
    const auto lv = random_logits(rows, vocab);
    gpu().upload_converted(xv.data(), DType::F32, x.data, int64_t{t} * h);
    gpu().upload(lv.data(), logits.data, logits.bytes());
    gpu().replay(graph);
    gpu().synchronize();

    // CPU reference of the same chain on the same inputs (the GPU's bf16 intermediates round twice more).
    Tensor cy = cpu_empty(DType::F32, {t, h});
    cpu().rms_norm(cpu_f32(xv, {t, h}), cpu_f32(w_norm, {h}), 1e-6f, cy);
    std::vector<float> y_rounded = read_cpu(cy);
    for (auto& v : y_rounded) v = bf16_to_float(float_to_bf16(v));
    Tensor cgu = cpu_empty(DType::F32, {t, 2 * inter});
    cpu().linear(cpu_f32(y_rounded, {t, h}), cpu_f32(w_gate_up, {2 * inter, h}), Tensor(), cgu);
    std::vector<float> gu_rounded = read_cpu(cgu);
    for (auto& v : gu_rounded) v = bf16_to_float(float_to_bf16(v));
    Tensor cact = cpu_empty(DType::F32, {t, inter});
    cpu().silu_and_mul(cpu_f32(gu_rounded, {t, 2 * inter}), cact);
    expect_rel_l2(read_gpu(y), read_cpu(cy), 1e-2, "replayed rms_norm, round " + std::to_string(round));
    expect_rel_l2(read_gpu(act), read_cpu(cact), 2e-2, "replayed chain, round " + std::to_string(round));
    EXPECT_EQ(read_gpu_i32(ids), sample_cpu(lv, vocab, controls)) << "replayed sampler, round " << round;

    // The replay equals an eager run on the same inputs, bit for bit.
    const auto replayed_act = read_gpu(act);
    const auto replayed_ids = read_gpu_i32(ids);
    enqueue();
    gpu().synchronize();
    EXPECT_EQ(read_gpu(act), replayed_act);
    EXPECT_EQ(read_gpu_i32(ids), replayed_ids);
  }
}

// The same capture behind the Backend interface (the engine's decode graphs): recording runs nothing, and a
// replay computes on the inputs at replay time exactly what an eager run does.
TEST_F(CudaOpsTest, BackendInterfaceCapturesGraphs) {
  Backend& backend = gpu();
  ASSERT_TRUE(backend.can_capture_graphs());
  const int h = 256;
  Tensor x = gpu_bf16(random_bf16_values(rng_, h), {1, h});
  Tensor w = gpu_bf16(random_bf16_values(rng_, h), {h});
  Tensor out = gpu_bf16(std::vector<float>(h, 0.0f), {1, h});
  auto enqueue = [&] { backend.rms_norm(x, w, 1e-6f, out); };
  enqueue();  // eager first, as the engine does
  backend.synchronize();
  const std::vector<float> zeros(h, 0.0f);
  backend.upload_converted(zeros.data(), DType::F32, out.data, h);
  std::unique_ptr<OpGraph> graph = backend.capture_graph(enqueue);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(read_gpu(out), zeros) << "capturing must not run the ops";

  const auto xv = random_bf16_values(rng_, h, 3.0f);
  backend.upload_converted(xv.data(), DType::F32, x.data, h);
  graph->replay();
  backend.synchronize();
  const std::vector<float> replayed = read_gpu(out);
  EXPECT_NE(replayed, zeros);
  enqueue();
  backend.synchronize();
  EXPECT_EQ(read_gpu(out), replayed);
}

TEST_F(CudaOpsTest, FailedCaptureLeavesTheStreamUsable) {
  EXPECT_THROW(gpu().capture([] { throw std::runtime_error("inside capture"); }), std::runtime_error);
  const auto xv = random_bf16_values(rng_, 64);
  Tensor out = gpu_empty(DType::BF16, {1, 64});
  gpu().rms_norm(gpu_bf16(xv, {1, 64}), gpu_bf16(xv, {64}), 1e-6f, out);
  gpu().synchronize();
  for (float v : read_gpu(out)) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace nanovllm::test
