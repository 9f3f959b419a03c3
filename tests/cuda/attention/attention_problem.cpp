#include "attention_problem.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "common/error.h"
#include "common/fp8.h"
#include "common/half_float.h"

namespace nanovllm::attention_test {

namespace {
constexpr uint16_t kBf16Nan = 0x7fc0;
constexpr uint8_t kFp8Nan = 0x7f;

uint16_t random_bf16(std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  return float_to_bf16(dist(rng));
}
}  // namespace

std::string Problem::describe() const {
  std::ostringstream s;
  s << "nh=" << num_heads << " nkv=" << num_kv_heads << " d=" << head_dim << " bs=" << block_size << " seqs=[";
  for (size_t i = 0; i < seqs.size(); ++i) s << (i ? " " : "") << seqs[i].q_len << "/" << seqs[i].seq_len;
  s << "]";
  if (extra_bound_q || extra_bound_k) s << " extra_bound=" << extra_bound_q << "/" << extra_bound_k;
  if (fp8) s << " fp8 k_scale=" << k_scale << " v_scale=" << v_scale;
  return s.str();
}

HostBatch make_batch(const Problem& p) {
  std::mt19937_64 rng(p.seed);
  HostBatch b;
  const int n = static_cast<int>(p.seqs.size());
  const int d = p.head_dim;
  const int bs = p.block_size;
  b.scale = 1.0f / std::sqrt(static_cast<float>(d));

  int max_q = 0, max_k = 0, needed_blocks = 0;
  b.cu_seqlens_q.push_back(0);
  for (const SeqSpec& s : p.seqs) {
    if (s.q_len > s.seq_len) throw InvalidInput("test problem: q_len > seq_len");
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + s.q_len);
    b.seq_lens_k.push_back(s.seq_len);
    max_q = std::max(max_q, s.q_len);
    max_k = std::max(max_k, s.seq_len);
    needed_blocks += (s.seq_len + bs - 1) / bs;
  }
  b.total_q = b.cu_seqlens_q.back();
  b.max_seqlen_q = max_q + p.extra_bound_q;
  b.max_seqlen_k = max_k + p.extra_bound_k;
  b.max_blocks_per_seq = (b.max_seqlen_k + bs - 1) / bs + 1;  // one spare column of -1
  // Spare blocks that nobody owns (NaN-filled) are mixed in among the owned ones.
  b.num_blocks = needed_blocks + needed_blocks / 2 + 3;
  std::vector<int> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  const size_t slot_elems = static_cast<size_t>(p.num_kv_heads) * d;
  const size_t cache_elems = static_cast<size_t>(b.num_blocks) * bs * slot_elems;
  if (p.fp8) {
    b.k_codes.assign(cache_elems, kFp8Nan);
    b.v_codes.assign(cache_elems, kFp8Nan);
  } else {
    b.k_cache.assign(cache_elems, kBf16Nan);
    b.v_cache.assign(cache_elems, kBf16Nan);
  }
  b.block_tables.assign(static_cast<size_t>(n) * b.max_blocks_per_seq, -1);
  int next = 0;
  for (int s = 0; s < n; ++s) {
    const int blocks = (p.seqs[s].seq_len + bs - 1) / bs;
    for (int j = 0; j < blocks; ++j) b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + j] = ids[next++];
    for (int key = 0; key < p.seqs[s].seq_len; ++key) {
      const int block = b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + key / bs];
      const size_t base = (static_cast<size_t>(block) * bs + key % bs) * slot_elems;
      for (size_t e = 0; e < slot_elems; ++e) {
        const uint16_t k = random_bf16(rng, -2.f, 2.f), v = random_bf16(rng, -1.f, 1.f);
        if (p.fp8) {
          b.k_codes[base + e] = float_to_fp8_e4m3(bf16_to_float(k) / p.k_scale);
          b.v_codes[base + e] = float_to_fp8_e4m3(bf16_to_float(v) / p.v_scale);
        } else {
          b.k_cache[base + e] = k;
          b.v_cache[base + e] = v;
        }
      }
    }
  }
  b.q.resize(static_cast<size_t>(b.total_q) * p.num_heads * d);
  for (auto& x : b.q) x = random_bf16(rng, -2.f, 2.f);
  return b;
}

std::vector<double> reference_attention(const Problem& p, const HostBatch& b) {
  const int d = p.head_dim;
  const int nh = p.num_heads;
  const int group = p.num_heads / p.num_kv_heads;
  const size_t slot_elems = static_cast<size_t>(p.num_kv_heads) * d;
  std::vector<double> out(static_cast<size_t>(b.total_q) * nh * d, 0.0);
  struct Item {
    int seq, row;
  };
  std::vector<Item> items;
  for (int s = 0; s < static_cast<int>(p.seqs.size()); ++s)
    for (int i = 0; i < p.seqs[s].q_len; ++i) items.push_back({s, i});

#pragma omp parallel for schedule(dynamic, 1)
  for (long it = 0; it < static_cast<long>(items.size()) * nh; ++it) {
    const Item item = items[it / nh];
    const int h = static_cast<int>(it % nh);
    const int seq_len = p.seqs[item.seq].seq_len;
    const int pos = seq_len - p.seqs[item.seq].q_len + item.row;
    const int t = b.cu_seqlens_q[item.seq] + item.row;
    const int kvh = h / group;
    const auto cached = [&](const std::vector<uint16_t>& values, const std::vector<uint8_t>& codes, float scale,
                            size_t at) {
      return p.fp8 ? static_cast<double>(fp8_e4m3_to_float(codes[at])) * scale : bf16_to_float(values[at]);
    };
    std::vector<double> q(d), scores(pos + 1), acc(d, 0.0);
    for (int e = 0; e < d; ++e) q[e] = bf16_to_float(b.q[(static_cast<size_t>(t) * nh + h) * d + e]);
    double max_score = -INFINITY;
    const auto slot_of = [&](int key) {
      const int block = b.block_tables[static_cast<size_t>(item.seq) * b.max_blocks_per_seq + key / p.block_size];
      return (static_cast<size_t>(block) * p.block_size + key % p.block_size) * slot_elems +
             static_cast<size_t>(kvh) * d;
    };
    for (int key = 0; key <= pos; ++key) {
      const size_t base = slot_of(key);
      double dot = 0;
      for (int e = 0; e < d; ++e) dot += q[e] * cached(b.k_cache, b.k_codes, p.k_scale, base + e);
      scores[key] = dot * static_cast<double>(b.scale);
      max_score = std::max(max_score, scores[key]);
    }
    double sum = 0;
    for (int key = 0; key <= pos; ++key) {
      const double w = std::exp(scores[key] - max_score);
      sum += w;
      const size_t base = slot_of(key);
      for (int e = 0; e < d; ++e) acc[e] += w * cached(b.v_cache, b.v_codes, p.v_scale, base + e);
    }
    for (int e = 0; e < d; ++e) out[(static_cast<size_t>(t) * nh + h) * d + e] = sum > 0 ? acc[e] / sum : 0.0;
  }
  return out;
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw EngineError(std::string(what) + ": " + cudaGetErrorString(err));
}

DevicePtr device_alloc(size_t bytes) {
  void* ptr = nullptr;
  check(cudaMalloc(&ptr, std::max<size_t>(bytes, 16)), "cudaMalloc");
  return DevicePtr(ptr);
}

namespace {
template <class T>
DevicePtr upload_vector(const std::vector<T>& v) {
  DevicePtr p = device_alloc(v.size() * sizeof(T));
  if (!v.empty()) check(cudaMemcpy(p.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return p;
}
}  // namespace

DeviceBatch upload(const Problem& p, const HostBatch& b) {
  DeviceBatch d;
  d.q = upload_vector(b.q);
  d.k_cache = p.fp8 ? upload_vector(b.k_codes) : upload_vector(b.k_cache);
  d.v_cache = p.fp8 ? upload_vector(b.v_codes) : upload_vector(b.v_cache);
  d.cu_seqlens_q = upload_vector(b.cu_seqlens_q);
  d.seq_lens_k = upload_vector(b.seq_lens_k);
  d.block_tables = upload_vector(b.block_tables);
  d.out_elems = static_cast<size_t>(b.total_q + 1) * p.num_heads * p.head_dim;
  d.out = device_alloc(d.out_elems * sizeof(uint16_t));
  auto& a = d.args;
  a.q = static_cast<const __nv_bfloat16*>(d.q.get());
  a.k_cache = d.k_cache.get();
  a.v_cache = d.v_cache.get();
  a.fp8_cache = p.fp8;
  a.k_scale = p.k_scale;
  a.v_scale = p.v_scale;
  a.cu_seqlens_q = static_cast<const int*>(d.cu_seqlens_q.get());
  a.seq_lens_k = static_cast<const int*>(d.seq_lens_k.get());
  a.block_tables = static_cast<const int*>(d.block_tables.get());
  a.out = static_cast<__nv_bfloat16*>(d.out.get());
  a.num_seqs = static_cast<int>(p.seqs.size());
  a.max_seqlen_q = b.max_seqlen_q;
  a.max_seqlen_k = b.max_seqlen_k;
  a.max_blocks_per_seq = b.max_blocks_per_seq;
  a.block_size = p.block_size;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.scale = b.scale;
  return d;
}

void poison_output(DeviceBatch& d) {
  check(cudaMemset(d.out.get(), 0xff, d.out_elems * sizeof(uint16_t)), "poison output");  // 0xffff: a NaN
}

std::vector<uint16_t> download_output(const DeviceBatch& d) {
  check(cudaDeviceSynchronize(), "kernel execution");
  std::vector<uint16_t> out(d.out_elems);
  check(cudaMemcpy(out.data(), d.out.get(), out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost), "download");
  return out;
}

Comparison compare(const std::vector<uint16_t>& out, const std::vector<double>& ref, size_t guard_elems) {
  Comparison c;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double x = bf16_to_float(out[i]);
    if (!std::isfinite(x)) {
      ++c.unwritten;
      continue;
    }
    const double e = std::abs(x - ref[i]);
    c.max_abs = std::max(c.max_abs, e);
    diff2 += e * e;
    ref2 += ref[i] * ref[i];
  }
  for (size_t i = ref.size(); i < ref.size() + guard_elems && i < out.size(); ++i)
    if (out[i] != 0xffff) ++c.guard_touched;
  c.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return c;
}

std::string Comparison::str() const {
  std::ostringstream s;
  s << "rel=" << rel << " max_abs=" << max_abs << " unwritten=" << unwritten << " guard_touched=" << guard_touched;
  return s.str();
}

}  // namespace nanovllm::attention_test
