// Fused CPU kernels for the lab engine's batch-decode step (one new token per item, fp32 activations).
//
// Why: at one token per step a layer's non-matmul work is ~30 tiny ATen ops (RMSNorm alone is five,
// rotary and the cache writes another ten, then SDPA, the SwiGLU's chunk/silu/mul, the residual adds),
// each paying dispatch and thread start-up; on two cores that was ~11 ms of a 27 ms int8 step. These
// kernels do the same maths in one pass each.
// Numerics: fp32 throughout, same formulas as the torch path (exp from the SLEEF build torch's own
// silu uses); only summation order differs. The KV cache may be bf16 (int8/int4 steps, where the cache
// read is a third of a batch-8 step's memory traffic): values are rounded once when written and
// widened exactly when read.

// ATen and torch's pybind11 casters alone, not <torch/extension.h>: its C++ frontend doubled each level's build
// (37 s against 18 here), and kernels.py compiles one build per level.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/Exceptions.h>      // torch::wrap_pybind_function: C++ errors as Python exceptions
#include <torch/csrc/utils/pybind.h>    // at::Tensor <-> torch.Tensor

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

// The dispatch level this build is for: kernels.py compiles one build per level, passing one -DLAB_ISA_* with the
// compiler flags of that level (cpu.py's LEVELS), so an AVX-512 machine can build and test the AVX2 code too.
#if defined(LAB_ISA_AVX512_VNNI)
#define LAB_512 1     // 512-bit code: AVX-512 F/BW/VL/DQ + VNNI
#elif defined(LAB_ISA_AVX_VNNI)
#define LAB_256 1     // 256-bit code: AVX2 + FMA + F16C
#define LAB_VNNI256 1 // ... with vpdpbusd on 256-bit registers
#elif defined(LAB_ISA_AVX2)
#define LAB_256 1
#endif

#if defined(LAB_512) || defined(LAB_256)
#include <immintrin.h>
#include <sleef.h>  // torch's libtorch_cpu exports these; its own Vectorized<float>::exp calls them
#endif

// The SIMD width of this build's glue kernels (norms, attention, fp32 rows).
std::string simd() {
#if defined(LAB_512)
  return "avx512";
#elif defined(LAB_256)
  return "avx2";
#else
  return "scalar";
#endif
}

// Cache rows are fp32, bf16 or int8 lines (kv_cache.py); a bf16 value is the top half of the fp32 it widens to
// (exactly), an int8 one widens exactly too (its line's scale is applied to the score or the weight, once a
// position), so a row is widened in registers as it is read, 16 (or 8) values at a time, with no scalar pass over it.
#if defined(LAB_512)
static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 load16(const at::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
static inline __m512 load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
#elif defined(LAB_256)
static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
static inline __m256 load8(const at::BFloat16* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
static inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
#endif

// A cached position's scale: an int8 line's own (its 4 bytes after the Dh values), else 1.
template <typename T>
static inline float line_scale(const T* line, int64_t Dh) {
  if constexpr (std::is_same_v<T, int8_t>) {
    float scale;
    std::memcpy(&scale, line + Dh, sizeof scale);
    return scale;
  } else {
    return 1.f;
  }
}

// The scales of n int8 lines of 64 values from position t on, into `out`; false (nothing written) for fp32 and bf16
// caches, whose positions have none.
template <typename T>
static inline bool line_scales(const T* kbase, int64_t line, int64_t t, int n, float* out) {
  if constexpr (!std::is_same_v<T, int8_t>) return false;
  for (int j = 0; j < n; ++j) out[j] = line_scale(kbase + (t + j) * line, 64);
  return true;
}

// Writes Dh values as a cache line: as they are (rounded once to bf16), or int8 with their scale max|v|/127
// (kv_cache.write's rounding: to nearest, ties to even).
template <typename T>
static inline void store_line(T* line, const float* v, int64_t Dh) {
  if constexpr (std::is_same_v<T, int8_t>) {
    float amax = 0.f;
    for (int64_t j = 0; j < Dh; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    for (int64_t j = 0; j < Dh; ++j) line[j] = static_cast<int8_t>(std::nearbyint(v[j] / scale));
    std::memcpy(line + Dh, &scale, sizeof scale);
  } else {
    for (int64_t j = 0; j < Dh; ++j) line[j] = static_cast<T>(v[j]);
  }
}

// a . b over n values (8 or 16 lanes at a time where the CPU has AVX2 + FMA or AVX-512; the compiler
// cannot vectorise a float sum by itself without licence to reorder it). b: fp32, bf16 or int8 (unscaled).
template <typename T>
static inline float dot(const float* a, const T* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.f;
#if defined(LAB_512)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load16(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load16(b + i + 16), acc1);
  }
  sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(LAB_256)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load8(b + i + 8), acc1);
  }
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  sum = _mm_cvtss_f32(lo);
#endif
  for (; i < n; ++i) sum += a[i] * static_cast<float>(b[i]);
  return sum;
}

// out += w * v over n values; v: fp32, bf16 or int8 (unscaled)
template <typename T>
static inline void axpy(float* out, float w, const T* v, int64_t n) {
  int64_t i = 0;
#if defined(LAB_512)
  const __m512 wv = _mm512_set1_ps(w);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_fmadd_ps(wv, load16(v + i), _mm512_loadu_ps(out + i)));
#elif defined(LAB_256)
  const __m256 wv = _mm256_set1_ps(w);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load8(v + i), _mm256_loadu_ps(out + i)));
#endif
  for (; i < n; ++i) out[i] += w * static_cast<float>(v[i]);
}

// o = r * rsqrt(mean(r^2) + eps) * w over one row of D floats
static inline void rms_norm_row(const float* r, const float* w, float* o, int64_t D, float eps) {
  const float inv = 1.f / std::sqrt(dot(r, r, D) / static_cast<float>(D) + eps);
  for (int64_t i = 0; i < D; ++i) o[i] = r[i] * inv * w[i];
}

static void check_fp32(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(), what, ": contiguous fp32 only");
}

// An uninitialised tensor of x's shape and dtype with N in its last dimension (kernels' outputs; int8_gemm.cpp too).
static at::Tensor rows_of(const at::Tensor& x, int64_t N) {
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return at::empty(sizes, x.options());
}

// out = x * rsqrt(mean(x^2) + eps) * w, per row of a contiguous fp32 [N, D].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  check_fp32(x, "rms_norm");
  check_fp32(w, "rms_norm");
  auto out = at::empty_like(x);
  const int64_t D = x.size(-1), N = x.numel() / D;
  for (int64_t n = 0; n < N; ++n)
    rms_norm_row(x.data_ptr<float>() + n * D, w.data_ptr<float>(), out.data_ptr<float>() + n * D, D, eps);
  return out;
}

// The residual add and the next RMSNorm in one pass: (x + delta, rms_norm(x + delta, w)), rows [N, D].
std::vector<at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w,
                                        double eps) {
  check_fp32(x, "add_rms_norm");
  check_fp32(delta, "add_rms_norm");
  check_fp32(w, "add_rms_norm");
  TORCH_CHECK(x.numel() == delta.numel(), "add_rms_norm: x and delta differ in size");
  auto sum = at::empty_like(x), normed = at::empty_like(x);
  const int64_t D = x.size(-1), N = x.numel() / D, total = N * D;
  const float *px = x.data_ptr<float>(), *pd = delta.data_ptr<float>();
  float* ps = sum.data_ptr<float>();
  for (int64_t i = 0; i < total; ++i) ps[i] = px[i] + pd[i];
  for (int64_t n = 0; n < N; ++n)
    rms_norm_row(ps + n * D, w.data_ptr<float>(), normed.data_ptr<float>() + n * D, D, eps);
  return {sum, normed};
}

// SwiGLU's middle: gate_up [N, 2F] (gate then up, as one fused projection) -> silu(gate) * up [N, F].
at::Tensor silu_mul(const at::Tensor& gate_up) {
  check_fp32(gate_up, "silu_mul");
  const int64_t F = gate_up.size(-1) / 2, N = gate_up.numel() / (2 * F);
  auto out = rows_of(gate_up, F);
  const float* pg = gate_up.data_ptr<float>();
  float* po = out.data_ptr<float>();
  // A decode step's few rows take microseconds on one thread: waking a second costs more than that,
  // and far more when the cores are shared. Rows are split over threads only past ~64K values.
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(F, 1));
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t stop) {
    for (int64_t n = begin; n < stop; ++n) {
      const float *g = pg + n * 2 * F, *u = g + F;
      float* o = po + n * F;
      int64_t i = 0;
#if defined(LAB_512)
      const __m512 one = _mm512_set1_ps(1.f);
      for (; i + 16 <= F; i += 16) {  // x / (1 + exp(-x)), as torch's vectorised silu
        const __m512 x = _mm512_loadu_ps(g + i);
        const __m512 e = Sleef_expf16_u10(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
      }
#elif defined(LAB_256)
      const __m256 one = _mm256_set1_ps(1.f);
      for (; i + 8 <= F; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = Sleef_expf8_u10(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
      }
#endif
      for (; i < F; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
    }
  });
  return out;
}

// f(std::integral_constant<int, MT>{}) for MT = rows, 1 to 8: a kernel templated on its row count, picked at run
// time (the fp32 rows here, the int8 and int4 tiles of int8_gemm.cpp).
template <typename F>
static void with_rows(int64_t rows, F&& f) {
  switch (rows) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
  }
  TORCH_CHECK(false, "no kernel for ", rows, " rows (1 to 8)");
}

#if defined(LAB_512)
// The mask of a vector's first n lanes (all 16 from n = 16 on): the stores of a last, partial block of 16 outputs.
static inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// The sums of 16 vectors' lanes, as one vector: out[j] = sum of v[j]'s 16 lanes. A transpose-and-add tree
// (45 shuffles and adds) instead of 16 horizontal reductions (about 160).
static inline __m512 sum_lanes16(__m512 v[16]) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [v2i 0+2, v2i+1 0+2, v2i 1+3, v2i+1 1+3]
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: v4i .. v4i+3, each summed over that lane's 4 values
    quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // 128-bit lane L of the result: quads[L] summed over its 4 lanes
  const __m512 a = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Scores q . k[t] * scale for t in [0, end) of one head of 64 dims, 16 positions at a time (q held in 4 registers,
// one reduction tree per 16 positions); a slot `valid` (or nullptr: every slot) rules out scores -inf. Positions are
// `line` values apart (64, or 68 for int8 lines). Returns the largest score.
template <typename T>
static inline float scores64(const float* q, const T* kbase, int64_t line, const bool* valid, int64_t end, float scale,
                             float* p) {
  const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16), q2 = _mm512_loadu_ps(q + 32),
               q3 = _mm512_loadu_ps(q + 48), sv = _mm512_set1_ps(scale);
  __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t t = 0;
  for (; t + 16 <= end; t += 16) {
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) {
      const T* k = kbase + (t + j) * line;
      acc[j] = _mm512_fmadd_ps(q3, load16(k + 48), _mm512_fmadd_ps(q2, load16(k + 32),
               _mm512_fmadd_ps(q1, load16(k + 16), _mm512_mul_ps(q0, load16(k)))));
    }
    __m512 scores = _mm512_mul_ps(sum_lanes16(acc), sv);
    alignas(64) float scales[16];
    if (line_scales(kbase, line, t, 16, scales)) scores = _mm512_mul_ps(scores, _mm512_load_ps(scales));
    _mm512_storeu_ps(p + t, scores);
    if (valid)
      for (int j = 0; j < 16; ++j)
        if (!valid[t + j]) p[t + j] = -std::numeric_limits<float>::infinity();
    top = _mm512_max_ps(top, _mm512_loadu_ps(p + t));
  }
  float best = _mm512_reduce_max_ps(top);
  for (; t < end; ++t) {
    const T* k = kbase + t * line;
    p[t] = valid && !valid[t] ? -std::numeric_limits<float>::infinity() : dot(q, k, 64) * scale * line_scale(k, 64);
    best = std::max(best, p[t]);
  }
  return best;
}

// o = sum over t of w[t] * v[t] * norm for one head of 64 dims, accumulated in registers (two sets, so consecutive
// positions' FMAs do not wait on each other), positions `line` values apart. A masked slot's weight is 0 and its
// value finite (the prompt's pass wrote every slot before `end`), so it adds nothing.
template <typename T>
static inline void weighted_sum64(const float* w, const T* vbase, int64_t line, int64_t end, float norm, float* o) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 b[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t t = 0;
  for (; t + 2 <= end; t += 2) {
    const T *v0 = vbase + t * line, *v1 = v0 + line;
    const __m512 w0 = _mm512_set1_ps(w[t]), w1 = _mm512_set1_ps(w[t + 1]);
    for (int c = 0; c < 4; ++c) {
      a[c] = _mm512_fmadd_ps(w0, load16(v0 + 16 * c), a[c]);
      b[c] = _mm512_fmadd_ps(w1, load16(v1 + 16 * c), b[c]);
    }
  }
  for (; t < end; ++t)
    for (int c = 0; c < 4; ++c) a[c] = _mm512_fmadd_ps(_mm512_set1_ps(w[t]), load16(vbase + t * line + 16 * c), a[c]);
  const __m512 nv = _mm512_set1_ps(norm);
  for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(_mm512_add_ps(a[c], b[c]), nv));
}

// One block of 16 output rows n0..n0+16 (fewer at the end) for MT rows of x: each weight row is read once, in
// order, and dotted with every row of x (2 accumulators per row of x: consecutive FMAs do not wait on each other).
template <int MT>
static void fp32_rows_block(const float* x, const float* w, float* y, int64_t K, int64_t N, int64_t n0) {
  __m512 sums[MT][16];
  const int64_t rows = std::min<int64_t>(16, N - n0);
  for (int64_t r = 0; r < 16; ++r) {
    if (r >= rows) {
      for (int m = 0; m < MT; ++m) sums[m][r] = _mm512_setzero_ps();
      continue;
    }
    const float* wr = w + (n0 + r) * K;
    __m512 a[MT], b[MT];
    for (int m = 0; m < MT; ++m) a[m] = b[m] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
      const __m512 w0 = _mm512_loadu_ps(wr + k), w1 = _mm512_loadu_ps(wr + k + 16);
      for (int m = 0; m < MT; ++m) {
        a[m] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + m * K + k), a[m]);
        b[m] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + m * K + k + 16), b[m]);
      }
    }
    for (int m = 0; m < MT; ++m) sums[m][r] = _mm512_add_ps(a[m], b[m]);
  }
  for (int m = 0; m < MT; ++m) _mm512_mask_storeu_ps(y + m * N + n0, first_lanes(rows), sum_lanes16(sums[m]));
}
#elif defined(LAB_256)
// Stores the first n (1..8) of 8 floats: the last, partial block of output rows.
static inline void store_first(float* y, __m256 v, int64_t n) {
  if (n >= 8) return _mm256_storeu_ps(y, v);
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  std::copy(tmp, tmp + n, y);
}

static inline float max_lanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// The sums of 8 vectors' lanes, as one vector: out[j] = sum of v[j]'s 8 lanes (two rounds of pairwise adds, then
// the 128-bit halves swapped and added), instead of 8 horizontal reductions.
static inline __m256 sum_lanes8(const __m256 v[8]) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// As the AVX-512 scores64 above, 8 cached positions at a time (q held in 8 registers).
template <typename T>
static inline float scores64(const float* q, const T* kbase, int64_t line, const bool* valid, int64_t end, float scale,
                             float* p) {
  __m256 qv[8];
  for (int c = 0; c < 8; ++c) qv[c] = _mm256_loadu_ps(q + 8 * c);
  const __m256 sv = _mm256_set1_ps(scale);
  __m256 top = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t t = 0;
  for (; t + 8 <= end; t += 8) {
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) {
      const T* k = kbase + (t + j) * line;
      __m256 a = _mm256_mul_ps(qv[0], load8(k));
      for (int c = 1; c < 8; ++c) a = _mm256_fmadd_ps(qv[c], load8(k + 8 * c), a);
      acc[j] = a;
    }
    __m256 scores = _mm256_mul_ps(sum_lanes8(acc), sv);
    alignas(32) float scales[8];
    if (line_scales(kbase, line, t, 8, scales)) scores = _mm256_mul_ps(scores, _mm256_load_ps(scales));
    _mm256_storeu_ps(p + t, scores);
    if (valid)
      for (int j = 0; j < 8; ++j)
        if (!valid[t + j]) p[t + j] = -std::numeric_limits<float>::infinity();
    top = _mm256_max_ps(top, _mm256_loadu_ps(p + t));
  }
  float best = max_lanes(top);
  for (; t < end; ++t) {
    const T* k = kbase + t * line;
    p[t] = valid && !valid[t] ? -std::numeric_limits<float>::infinity() : dot(q, k, 64) * scale * line_scale(k, 64);
    best = std::max(best, p[t]);
  }
  return best;
}

// As the AVX-512 weighted_sum64 above: the 64 outputs in 8 registers, one FMA chain each.
template <typename T>
static inline void weighted_sum64(const float* w, const T* vbase, int64_t line, int64_t end, float norm, float* o) {
  __m256 a[8];
  for (int c = 0; c < 8; ++c) a[c] = _mm256_setzero_ps();
  for (int64_t t = 0; t < end; ++t) {
    const __m256 wt = _mm256_set1_ps(w[t]);
    for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(wt, load8(vbase + t * line + 8 * c), a[c]);
  }
  const __m256 nv = _mm256_set1_ps(norm);
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(o + 8 * c, _mm256_mul_ps(a[c], nv));
}

// As the AVX-512 fp32_rows_block above, for a block of 8 output rows (two accumulators per row of x up to 4 rows;
// past that the rows' own chains are independent enough, and registers run out).
template <int MT>
static void fp32_rows_block(const float* x, const float* w, float* y, int64_t K, int64_t N, int64_t n0) {
  constexpr int ACC = MT <= 4 ? 2 : 1;
  __m256 sums[MT][8];
  const int64_t rows = std::min<int64_t>(8, N - n0);
  for (int64_t r = 0; r < 8; ++r) {
    if (r >= rows) {
      for (int m = 0; m < MT; ++m) sums[m][r] = _mm256_setzero_ps();
      continue;
    }
    const float* wr = w + (n0 + r) * K;
    __m256 a[MT][ACC];
    for (int m = 0; m < MT; ++m)
      for (int i = 0; i < ACC; ++i) a[m][i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 8 * ACC)
      for (int i = 0; i < ACC; ++i) {
        const __m256 wv = _mm256_loadu_ps(wr + k + 8 * i);
        for (int m = 0; m < MT; ++m) a[m][i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + m * K + k + 8 * i), a[m][i]);
      }
    for (int m = 0; m < MT; ++m) sums[m][r] = ACC == 2 ? _mm256_add_ps(a[m][0], a[m][ACC - 1]) : a[m][0];
  }
  for (int m = 0; m < MT; ++m) store_first(y + m * N + n0, sum_lanes8(sums[m]), rows);
}
#endif

// y [M, N] = x [M, K] . w [N, K]^T in fp32, for the few rows of a decode step (M <= 8, K a multiple of 32), with w
// as torch holds it. Why: torch's fp32 GEMV (MKL's, in the PyPI build) read the weights at about 19 GB/s on a
// Zen 4 machine that reads 55-88; one pass over w per call, every row of x at once, reads at the memory's pace.
// Larger M (a prompt) stays with torch's GEMM, which is compute-bound there and good at it.
at::Tensor fp32_linear_rows(const at::Tensor& x, const at::Tensor& w) {
#if defined(LAB_512) || defined(LAB_256)
#if defined(LAB_512)
  constexpr int64_t BLOCK = 16;  // output rows a block reduces into one vector
#else
  constexpr int64_t BLOCK = 8;
#endif
  check_fp32(w, "fp32_linear_rows");
  const auto xc = x.contiguous();
  TORCH_CHECK(xc.scalar_type() == at::kFloat, "fp32_linear_rows: fp32 activations");
  const int64_t K = w.size(1), N = w.size(0), M = xc.numel() / K;
  TORCH_CHECK(xc.size(-1) == K && K % 32 == 0 && M >= 1 && M <= 8, "fp32_linear_rows: 1-8 rows, K a multiple of 32");
  auto y = rows_of(xc, N);
  const float *px = xc.data_ptr<float>(), *pw = w.data_ptr<float>();
  float* py = y.data_ptr<float>();
  at::parallel_for(0, (N + BLOCK - 1) / BLOCK, 1, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t n0 = blk * BLOCK;
      with_rows(M, [&](auto rows) { fp32_rows_block<rows()>(px, pw, py, K, N, n0); });
    }
  });
  return y;
#else
  TORCH_CHECK(false, "fp32_linear_rows: this build has no AVX2 or AVX-512 (see simd())");
#endif
}

// Per item: where its valid slots are a prefix [0, n) and then only `slot` (a continuous batch's row behind the
// longest: its own slots, then the slot this step writes for the whole batch), n; else -1 (every slot is scored, the
// masked ones -inf). The prefix form reads only the item's own slots, not the masked ones up to the longest row's.
static std::vector<int64_t> own_prefixes(const bool* valid, int64_t stride, int64_t B, int64_t slot, int64_t end) {
  std::vector<int64_t> own(B, -1);
  for (int64_t b = 0; valid && b < B; ++b) {
    const bool* v = valid + b * stride;
    int64_t n = 0;
    while (n < end && v[n]) ++n;
    if (n >= slot || !v[slot]) continue;
    bool others = false;
    for (int64_t t = n; t < end && !others; ++t) others = v[t] && t != slot;
    if (!others) own[b] = n;
  }
  return own;
}

// Asks for `bytes` from `start` into L2 (x86; elsewhere nothing). Why: a head's keys or values are a short stream
// (6.8 KB at 100 positions of int8 lines), too short for the hardware prefetchers to get ahead of before it ends,
// so a step at many rows waited on memory between short bursts of arithmetic. Fetching the next head's keys as a
// head starts, and its values once the head's scores are done, took 8 rows x 20 layers' attention at 100 positions
// from 2.15 to 1.59 ms (int8 lines; 1.16 -> 0.86 at 60, 3.27 -> 2.82 at 170; fp32 4.20 -> 3.44 at 100) on the Zen 4
// VM, interleaved builds (scripts/probes/attention_cache.py); one head ahead did as well as two or three, L1
// (T0) worse than L2.
static inline void prefetch_to_l2(const void* start, int64_t bytes) {
#if defined(LAB_512) || defined(LAB_256)
  const char* p = static_cast<const char*>(start);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(p + i, _MM_HINT_T1);
#else
  (void)start, (void)bytes;
#endif
}

// One decode step of attention for every (item, head):
//   qkv [B, 3*H*Dh]: the fused projection of this step's token (q and k rows rotary-paired);
//   rot [B, Dh/2, 2]: cos and sin (times rope scaling) at each item's position;
//   k_cache, v_cache [B, H, T, line], fp32 or bf16 (line = Dh) or int8 lines (line = Dh + 4: kv_cache.py): this
//   step's rotated k and v are written at `slot`;
//   valid [B, >=end] bool or an empty tensor: which cache slots each item may attend to.
// Returns softmax(q.k / sqrt(Dh)) . v over slots [0, end) as [B, H*Dh] fp32.
template <typename T>
static void attend(const float* pqkv, const float* prot, T* pk, T* pv, float* po, const bool* pvalid,
                   int64_t valid_stride, int64_t B, int64_t H, int64_t T_, int64_t Dh, int64_t line, int64_t slot,
                   int64_t end) {
  const float scale = 1.f / std::sqrt(static_cast<float>(Dh));
  const std::vector<int64_t> own = own_prefixes(pvalid, valid_stride, B, slot, end);
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t stop) {
    std::vector<float> q(Dh), k(Dh), p(end + 1);
    for (int64_t bh = begin; bh < stop; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* src = pqkv + b * 3 * H * Dh;
      const float *qs = src + h * Dh, *ks = src + (H + h) * Dh, *vs = src + (2 * H + h) * Dh;
      const float* r = prot + b * Dh;
      T* kbase = pk + bh * T_ * line;
      T* vbase = pv + bh * T_ * line;
      const bool next = bh + 1 < stop;  // the next (item, head) of this thread: its keys now, its values below
      if (next) prefetch_to_l2(kbase + T_ * line, end * line * sizeof(T));
      for (int64_t j = 0; j < Dh / 2; ++j) {  // (a + ib)(c + is), as the torch path's complex multiply
        const float c = r[2 * j], s = r[2 * j + 1];
        q[2 * j] = qs[2 * j] * c - qs[2 * j + 1] * s;
        q[2 * j + 1] = qs[2 * j] * s + qs[2 * j + 1] * c;
        k[2 * j] = ks[2 * j] * c - ks[2 * j + 1] * s;
        k[2 * j + 1] = ks[2 * j] * s + ks[2 * j + 1] * c;
      }
      store_line(kbase + slot * line, k.data(), Dh);
      store_line(vbase + slot * line, vs, Dh);

      // scored: slots [0, span) (masked ones -inf), then with an own prefix the step's slot as p[span]
      const bool* valid = own[b] >= 0 ? nullptr : pvalid ? pvalid + b * valid_stride : nullptr;
      const int64_t span = own[b] >= 0 ? own[b] : end, scored = span + (own[b] >= 0);
      float top = -std::numeric_limits<float>::infinity();
#if defined(LAB_512) || defined(LAB_256)
      if (Dh == 64) {
        top = scores64(q.data(), kbase, line, valid, span, scale, p.data());
      } else
#endif
      for (int64_t t = 0; t < span; ++t) {
        if (valid && !valid[t]) {
          p[t] = -std::numeric_limits<float>::infinity();
          continue;
        }
        p[t] = dot(q.data(), kbase + t * line, Dh) * scale * line_scale(kbase + t * line, Dh);
        top = std::max(top, p[t]);
      }
      if (scored > span) {
        p[span] = dot(q.data(), kbase + slot * line, Dh) * scale * line_scale(kbase + slot * line, Dh);
        top = std::max(top, p[span]);
      }
      float sum = 0.f;
      int64_t t = 0;
#if defined(LAB_512)
      // exp 16 scores at a time (SLEEF, as torch's own vectorised exp): at batch 8 the scalar exp of every cached
      // position, head and layer took about a third of the step's attention. A masked score, -inf, becomes 0.
      const __m512 shift = _mm512_set1_ps(top);
      __m512 acc = _mm512_setzero_ps();
      for (; t + 16 <= scored; t += 16) {
        const __m512 e = Sleef_expf16_u10(_mm512_sub_ps(_mm512_loadu_ps(p.data() + t), shift));
        _mm512_storeu_ps(p.data() + t, e);
        acc = _mm512_add_ps(acc, e);
      }
      sum = _mm512_reduce_add_ps(acc);
#elif defined(LAB_256)
      const __m256 shift = _mm256_set1_ps(top);
      __m256 acc = _mm256_setzero_ps();
      for (; t + 8 <= scored; t += 8) {
        const __m256 e = Sleef_expf8_u10(_mm256_sub_ps(_mm256_loadu_ps(p.data() + t), shift));
        _mm256_storeu_ps(p.data() + t, e);
        acc = _mm256_add_ps(acc, e);
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc);
      for (float lane : lanes) sum += lane;
#endif
      for (; t < scored; ++t) {
        p[t] = std::isinf(p[t]) ? 0.f : std::exp(p[t] - top);
        sum += p[t];
      }
      if (next) prefetch_to_l2(vbase + T_ * line, end * line * sizeof(T));
      if constexpr (std::is_same_v<T, int8_t>)  // each value line's scale goes into its weight
        for (int64_t t = 0; t < span; ++t) p[t] *= line_scale(vbase + t * line, Dh);
      float* o = po + b * H * Dh + h * Dh;
#if defined(LAB_512) || defined(LAB_256)
      if (Dh == 64) {
        weighted_sum64(p.data(), vbase, line, span, 1.f / sum, o);
      } else
#endif
      {
        std::fill(o, o + Dh, 0.f);
        for (int64_t t = 0; t < span; ++t)
          if (p[t] != 0.f) axpy(o, p[t] / sum, vbase + t * line, Dh);
      }
      if (scored > span) axpy(o, p[span] / sum * line_scale(vbase + slot * line, Dh), vbase + slot * line, Dh);
    }
  });
}

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& rot, at::Tensor k_cache,
                               at::Tensor v_cache, int64_t slot, int64_t end, const at::Tensor& valid) {
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "decode_attention: contiguous caches");
  TORCH_CHECK(k_cache.scalar_type() == v_cache.scalar_type(), "decode_attention: k and v caches differ in dtype");
  check_fp32(qkv, "decode_attention");
  check_fp32(rot, "decode_attention");
  const int64_t B = k_cache.size(0), H = k_cache.size(1), T = k_cache.size(2), line = k_cache.size(3);
  const bool int8_lines = k_cache.scalar_type() == at::kChar;
  const int64_t Dh = int8_lines ? line - 4 : line;  // an int8 line ends in its fp32 scale (kv_cache.py)
  TORCH_CHECK(Dh > 0 && Dh % 4 == 0 && qkv.size(-1) == 3 * H * Dh, "decode_attention: qkv and cache lines differ");
  TORCH_CHECK(slot >= 0 && slot < end && end <= T, "decode_attention: slot/end outside the cache");
  auto out = at::empty({B, H * Dh}, qkv.options());
  const bool* pvalid = valid.numel() > 0 ? valid.data_ptr<bool>() : nullptr;
  const int64_t valid_stride = pvalid ? valid.stride(0) : 0;
  const auto run = [&](auto* pk, auto* pv) {
    attend(qkv.data_ptr<float>(), rot.data_ptr<float>(), pk, pv, out.data_ptr<float>(), pvalid, valid_stride, B, H, T,
           Dh, line, slot, end);
  };
  if (int8_lines) {
    run(k_cache.data_ptr<int8_t>(), v_cache.data_ptr<int8_t>());
  } else if (k_cache.scalar_type() == at::kBFloat16) {
    run(k_cache.data_ptr<at::BFloat16>(), v_cache.data_ptr<at::BFloat16>());
  } else {
    TORCH_CHECK(k_cache.scalar_type() == at::kFloat, "decode_attention: fp32, bf16 or int8-line caches only");
    run(k_cache.data_ptr<float>(), v_cache.data_ptr<float>());
  }
  return out;
}

static void check_int8_lines(const at::Tensor& cache, const char* what) {
  TORCH_CHECK(cache.scalar_type() == at::kChar && cache.dim() == 4 && cache.stride(3) == 1 && cache.size(3) > 4,
              what, ": an int8-line cache [B, H, T, Dh + 4] with contiguous lines");
}

// kv_cache.write into an int8-line cache: values [B, H, S, Dh] fp32 (lines contiguous, any other strides) at slots
// start..start+S, each line quantized as a decode step quantizes its own (store_line). Why here: a prompt slice's
// quantizing in torch ops was about 11 small ops a cache and layer, 2-3 ms of a 16-position slice.
void kv_store_int8(at::Tensor cache, int64_t start, const at::Tensor& values) {
  check_int8_lines(cache, "kv_store_int8");
  TORCH_CHECK(values.scalar_type() == at::kFloat && values.dim() == 4 && values.stride(3) == 1,
              "kv_store_int8: fp32 values [B, H, S, Dh] with contiguous lines");
  const int64_t B = values.size(0), H = values.size(1), S = values.size(2), Dh = values.size(3);
  TORCH_CHECK(cache.size(0) == B && cache.size(1) == H && cache.size(3) == Dh + 4 && start >= 0 &&
              start + S <= cache.size(2), "kv_store_int8: values outside the cache");
  const float* pv = values.data_ptr<float>();
  int8_t* pc = cache.data_ptr<int8_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < S; ++t)
        store_line(pc + b * cache.stride(0) + h * cache.stride(1) + (start + t) * cache.stride(2),
                   pv + b * values.stride(0) + h * values.stride(1) + t * values.stride(2), Dh);
}

// kv_cache.read of an int8-line cache: slots [0, end) as fp32 [B, H, end, Dh] (value = int8 * its line's scale).
at::Tensor kv_load_int8(const at::Tensor& cache, int64_t end) {
  check_int8_lines(cache, "kv_load_int8");
  const int64_t B = cache.size(0), H = cache.size(1), Dh = cache.size(3) - 4;
  TORCH_CHECK(end >= 0 && end <= cache.size(2), "kv_load_int8: end outside the cache");
  auto out = at::empty({B, H, end, Dh}, cache.options().dtype(at::kFloat));
  const int8_t* pc = cache.data_ptr<int8_t>();
  float* po = out.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < end; ++t) {
        const int8_t* line = pc + b * cache.stride(0) + h * cache.stride(1) + t * cache.stride(2);
        const float scale = line_scale(line, Dh);
        float* o = po + ((b * H + h) * end + t) * Dh;
        for (int64_t j = 0; j < Dh; ++j) o[j] = static_cast<float>(line[j]) * scale;
      }
  return out;
}

// Continuous batching (continuous.RowDecoder._copy_behind): a step wrote every row's keys and values at the longest
// row's next slot `from`; each row of `rows` moves them to its own next slot `to[i]`, in every cache [B, H, T, Dh].
// One call for the 40 caches of a step, where torch's indexing took 1.3 ms a step at 6 rows (two ops a cache).
void copy_behind(const std::vector<at::Tensor>& caches, const at::Tensor& rows, const at::Tensor& to, int64_t from) {
  TORCH_CHECK(rows.scalar_type() == at::kLong && to.scalar_type() == at::kLong && rows.numel() == to.numel(),
              "copy_behind: int64 rows and slots, one slot a row");
  const auto r = rows.contiguous(), t = to.contiguous();
  const int64_t *pr = r.data_ptr<int64_t>(), *pt = t.data_ptr<int64_t>();
  for (const auto& cache : caches) {
    TORCH_CHECK(cache.dim() == 4 && cache.is_contiguous(), "copy_behind: contiguous [B, H, T, Dh] caches");
    const int64_t B = cache.size(0), H = cache.size(1), T = cache.size(2), line = cache.size(3) * cache.element_size();
    TORCH_CHECK(from >= 0 && from < T, "copy_behind: slot outside the cache");
    auto* base = static_cast<char*>(cache.data_ptr());
    for (int64_t i = 0; i < r.numel(); ++i) {
      TORCH_CHECK(pr[i] >= 0 && pr[i] < B && pt[i] >= 0 && pt[i] < T, "copy_behind: row or slot outside the cache");
      if (pt[i] == from) continue;
      for (int64_t h = 0; h < H; ++h) {
        char* head = base + (pr[i] * H + h) * T * line;
        std::memcpy(head + pt[i] * line, head + from * line, line);
      }
    }
  }
}
