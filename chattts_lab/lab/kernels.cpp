// Fused CPU kernels for the lab engine's batch-decode step (one new token per item, fp32).
//
// Why: at one token per step a layer's non-matmul work is ~30 tiny ATen ops (RMSNorm alone is five,
// rotary and the cache writes another ten, then SDPA), each paying dispatch and thread start-up; on
// two cores that was ~11 ms of a 27 ms int8 step. These kernels do the same maths in one pass each.
// Numerics: fp32 throughout, same formulas as the torch path; only summation order differs.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

// a . b over n floats (8 lanes at a time where the CPU has AVX2 + FMA; the compiler cannot
// vectorise a float sum by itself without licence to reorder it).
static inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  sum = _mm_cvtss_f32(lo);
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out += w * v over n floats
static inline void axpy(float* out, float w, const float* v, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 wv = _mm256_set1_ps(w);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
#endif
  for (; i < n; ++i) out[i] += w * v[i];
}

// out = x * rsqrt(mean(x^2) + eps) * w, per row of a contiguous fp32 [N, D].
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "rms_norm: fp32 only");
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const int64_t D = xc.size(-1), N = xc.numel() / D;
  const float* px = xc.data_ptr<float>();
  const float* pw = w.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* r = px + n * D;
    float* o = po + n * D;
    const float ss = dot(r, r, D);
    const float inv = 1.f / std::sqrt(ss / static_cast<float>(D) + static_cast<float>(eps));
    for (int64_t i = 0; i < D; ++i) o[i] = r[i] * inv * pw[i];
  }
  return out;
}

// One decode step of attention for every (item, head):
//   qkv [B, 3*H*Dh]: the fused projection of this step's token (q and k rows rotary-paired);
//   rot [B, Dh/2, 2]: cos and sin (times rope scaling) at each item's position;
//   k_cache, v_cache [B, H, T, Dh]: this step's rotated k and v are written at `slot`;
//   valid [B, >=end] bool or an empty tensor: which cache slots each item may attend to.
// Returns softmax(q.k / sqrt(Dh)) . v over slots [0, end) as [B, H*Dh].
torch::Tensor decode_attention(const torch::Tensor& qkv, const torch::Tensor& rot, torch::Tensor k_cache,
                               torch::Tensor v_cache, int64_t slot, int64_t end, const torch::Tensor& valid) {
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "decode_attention: contiguous caches");
  TORCH_CHECK(qkv.is_contiguous() && rot.is_contiguous(), "decode_attention: contiguous inputs");
  const int64_t B = k_cache.size(0), H = k_cache.size(1), T = k_cache.size(2), Dh = k_cache.size(3);
  TORCH_CHECK(slot >= 0 && slot < end && end <= T, "decode_attention: slot/end outside the cache");
  auto out = torch::empty({B, H * Dh}, qkv.options());
  const float* pqkv = qkv.data_ptr<float>();
  const float* prot = rot.data_ptr<float>();
  float* pk = k_cache.data_ptr<float>();
  float* pv = v_cache.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const bool masked = valid.numel() > 0;
  const bool* pvalid = masked ? valid.data_ptr<bool>() : nullptr;
  const int64_t valid_stride = masked ? valid.stride(0) : 0;
  const float scale = 1.f / std::sqrt(static_cast<float>(Dh));

  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t stop) {
    std::vector<float> q(Dh), p(end);
    for (int64_t bh = begin; bh < stop; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* src = pqkv + b * 3 * H * Dh;
      const float *qs = src + h * Dh, *ks = src + (H + h) * Dh, *vs = src + (2 * H + h) * Dh;
      const float* r = prot + b * Dh;
      float* kbase = pk + bh * T * Dh;
      float* vbase = pv + bh * T * Dh;
      float* kdst = kbase + slot * Dh;
      for (int64_t j = 0; j < Dh / 2; ++j) {  // (a + ib)(c + is), as the torch path's complex multiply
        const float c = r[2 * j], s = r[2 * j + 1];
        q[2 * j] = qs[2 * j] * c - qs[2 * j + 1] * s;
        q[2 * j + 1] = qs[2 * j] * s + qs[2 * j + 1] * c;
        kdst[2 * j] = ks[2 * j] * c - ks[2 * j + 1] * s;
        kdst[2 * j + 1] = ks[2 * j] * s + ks[2 * j + 1] * c;
      }
      std::memcpy(vbase + slot * Dh, vs, Dh * sizeof(float));

      float top = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < end; ++t) {
        if (masked && !pvalid[b * valid_stride + t]) {
          p[t] = -std::numeric_limits<float>::infinity();
          continue;
        }
        p[t] = dot(q.data(), kbase + t * Dh, Dh) * scale;
        top = std::max(top, p[t]);
      }
      float sum = 0.f;
      for (int64_t t = 0; t < end; ++t) {
        p[t] = std::isinf(p[t]) ? 0.f : std::exp(p[t] - top);
        sum += p[t];
      }
      float* o = po + b * H * Dh + h * Dh;
      std::fill(o, o + Dh, 0.f);
      for (int64_t t = 0; t < end; ++t) {
        if (p[t] == 0.f) continue;
        axpy(o, p[t] / sum, vbase + t * Dh, Dh);
      }
    }
  });
  return out;
}
