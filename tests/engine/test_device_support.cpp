// What the engine learns about its backends through the Backend interface, and the backends (with their
// communicators) of a tensor-parallel group on the CPU.
#include <gtest/gtest.h>

#include "engine/device_support.h"
#include "support/expect_invalid.h"

namespace nanovllm {
namespace {

TEST(DeviceSupport, CpuBackendReportsNoDevice) {
  RankBackends ranks = make_rank_backends("cpu", 1);
  ASSERT_EQ(ranks.backends.size(), 1u);
  Backend& cpu = *ranks.backends[0];
  EXPECT_FALSE(cpu.is_device());
  EXPECT_EQ(cpu.device_name(), "cpu");
  EXPECT_FALSE(cpu.can_capture_graphs());
  EXPECT_THROW(cpu.memory_info(), EngineError);
  EXPECT_THROW(cpu.measure_read_bandwidth_gbs(1 << 20), EngineError);
  EXPECT_THROW(cpu.capture_graph([] {}), EngineError);
}

TEST(DeviceSupport, OneRankHasNoCommunicators) {
  const RankBackends ranks = make_rank_backends("cpu", 1);
  EXPECT_EQ(ranks.comms, nullptr);
}

TEST(DeviceSupport, CpuRanksTalkThroughHostMemory) {
  RankBackends ranks = make_rank_backends("cpu", 3);
  ASSERT_EQ(ranks.backends.size(), 3u);
  ASSERT_NE(ranks.comms, nullptr);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ranks.backends[r]->name(), "cpu");
    EXPECT_EQ(ranks.comms->rank(r).rank(), r);
    EXPECT_EQ(ranks.comms->rank(r).size(), 3);
  }
}

TEST(DeviceSupport, UnknownDevicesAreRefused) {
  testing::expect_invalid([] { make_rank_backends("tpu", 1); }, {"unknown device 'tpu'"});
  if (!cuda_available()) testing::expect_invalid([] { make_rank_backends("cuda", 1); }, {"device 'cuda'"});
}

}  // namespace
}  // namespace nanovllm
