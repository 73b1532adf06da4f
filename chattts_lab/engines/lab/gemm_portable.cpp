// The packed int8 and int4 GEMMs in plain C++ (gemm_formats.cpp's formats): the level of CPUs without AVX2 and of
// ARM64. Always compiled: it is also the readable reference of what the SIMD levels compute. On ARM64 CPUs with the
// dot-product extension (-mcpu=native enables it where the CPU has it: Graviton 2+, Apple M1+) a line's 16 rows x 4 k
// are four `sdot`s, signed x signed bytes, so neither the VNNI shift nor AVX2's sign trick is needed; elsewhere the
// compiler vectorises the loops itself (GCC 12 for armv8.2-a: NEON widening multiplies).

#if defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#define LAB_SDOT 1
#endif

namespace portable {

// acc[r] += line[r*4 + j] * x[j] over j < 4 for the 16 rows of one 64-byte int8 line.
static inline void dot_line(int32_t* acc, const int8_t* line, const int8_t* x) {
#if defined(LAB_SDOT)
  int32_t four;
  std::memcpy(&four, x, 4);
  const int8x16_t xv = vreinterpretq_s8_s32(vdupq_n_s32(four));
  for (int q = 0; q < 4; ++q) vst1q_s32(acc + 4 * q, vdotq_s32(vld1q_s32(acc + 4 * q), vld1q_s8(line + 16 * q), xv));
#else
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < 4; ++j) acc[r] += static_cast<int32_t>(line[r * 4 + j]) * x[j];
#endif
}

// acc[r] += low nibble . x[0..3] + high nibble . x[4..7] for the 16 rows of one 64-byte int4 line.
static inline void dot_line_nibbles(int32_t* acc, const uint8_t* line, const int8_t* x) {
#if defined(LAB_SDOT)
  int32_t four[2];
  std::memcpy(four, x, 8);
  const int8x16_t x0 = vreinterpretq_s8_s32(vdupq_n_s32(four[0])), x1 = vreinterpretq_s8_s32(vdupq_n_s32(four[1]));
  for (int q = 0; q < 4; ++q) {
    const uint8x16_t v = vld1q_u8(line + 16 * q);
    const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
    vst1q_s32(acc + 4 * q, vdotq_s32(vdotq_s32(vld1q_s32(acc + 4 * q), lo, x0), hi, x1));
  }
#else
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < 4; ++j) acc[r] += (line[r * 4 + j] & 0x0F) * x[j] + (line[r * 4 + j] >> 4) * x[4 + j];
#endif
}

// y[m, block b] for the rows m0 .. m0+mt of x (quantized: q, per-row scales xs).
static void int8_block(const Int8Gemm& c, const int8_t* q, const float* xs, int64_t b, int64_t m0, int64_t mt) {
  const int8_t* wb = c.w + b * c.K * ROWS;
  for (int64_t m = m0; m < m0 + mt; ++m) {
    int32_t acc[ROWS] = {0};
    const int8_t* qm = q + m * c.K;
    for (int64_t k = 0; k < c.K; k += 4) dot_line(acc, wb + k * ROWS, qm + k);
    for (int64_t r = 0; r < ROWS && b * ROWS + r < c.N; ++r)
      c.y[m * c.N + b * ROWS + r] = static_cast<float>(acc[r]) * c.scales[b * ROWS + r] * xs[m];
  }
}

static void int8_gemm(const Int8Gemm& c) {
  const QuantizedRows<int8_t> x(c.x, c.M, c.K, false, quantize_row_portable);
  over_blocks(c.M, c.N, 1, 8, [&](int64_t b0, int64_t) { int8_block(c, x.q.data(), x.scale.data(), b0, 0, 1); },
              [&](int64_t b, int64_t m0, int64_t mt) { int8_block(c, x.q.data(), x.scale.data(), b, m0, mt); });
}

static void int4_block(const Int4Gemm& c, const int8_t* q, const int32_t* xsums, const float* xs, int64_t b,
                       int64_t m0, int64_t mt) {
  const int64_t groups = c.K / INT4_GROUP;
  const uint8_t* wb = c.w + b * (c.K / 2) * ROWS;
  for (int64_t m = m0; m < m0 + mt; ++m) {
    float sums[ROWS] = {0.f};
    const int8_t* qm = q + m * c.K;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t acc[ROWS] = {0};
      for (int64_t k = g * INT4_GROUP; k < (g + 1) * INT4_GROUP; k += 8) dot_line_nibbles(acc, wb + (k / 8) * 64, qm + k);
      const float *s = c.gscales + (b * groups + g) * ROWS, *mn = c.gmins + (b * groups + g) * ROWS;
      for (int r = 0; r < ROWS; ++r)
        sums[r] += s[r] * static_cast<float>(acc[r]) + mn[r] * static_cast<float>(xsums[m * groups + g]);
    }
    for (int64_t r = 0; r < ROWS && b * ROWS + r < c.N; ++r) c.y[m * c.N + b * ROWS + r] = sums[r] * xs[m];
  }
}

static void int4_gemm(const Int4Gemm& c) {
  const QuantizedRows<int8_t> x(c.x, c.M, c.K, true, quantize_row_portable);
  over_blocks(c.M, c.N, 1, 8,
              [&](int64_t b0, int64_t) { int4_block(c, x.q.data(), x.sums.data(), x.scale.data(), b0, 0, 1); },
              [&](int64_t b, int64_t m0, int64_t mt) {
                int4_block(c, x.q.data(), x.sums.data(), x.scale.data(), b, m0, mt);
              });
}

}  // namespace portable
