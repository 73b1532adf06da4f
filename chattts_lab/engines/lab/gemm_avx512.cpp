// The packed int8 and int4 GEMMs for CPUs with AVX-512 VNNI (gemm_formats.cpp's formats): one `vpdpbusd`
// multiplies 4 k of 16 output rows (one 64-byte line) by 4 bytes of one activation row.
// int8: activations quantized per row to 8 bits and shifted by +128 into the unsigned operand vpdpbusd takes; the
// shift is undone with each row's weight sum. int4: the nibbles widened to bytes (and, shift) are the unsigned
// operand, the signed activations the other.

#if defined(LAB_512)
namespace avx512 {

constexpr int BLOCKS = 4;  // blocks a micro-kernel walks together at one row: 4 independent accumulator chains
constexpr int TILE = 8;    // rows of x per tile at more rows (16 accumulators at most)

// One row of x -> uint8 (x / scale rounded, + 128) and its scale.
static float quantize_row(const float* x, uint8_t* q, int64_t K) {
  __m512 top = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) top = _mm512_max_ps(top, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  const float amax = _mm512_reduce_max_ps(top);
  const float scale = amax > 0.f ? amax / 127.f : 1.f;
  const __m512 inv = _mm512_set1_ps(1.f / scale);
  const __m512i shift = _mm512_set1_epi32(128);
  for (int64_t k = 0; k < K; k += 16) {
    const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), inv)), shift);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtusepi32_epi8(v));  // 1..255 after rounding
  }
  return scale;
}

// y[m, block b0 .. b0+NB) for MT rows of q: walks K once, reading each block's 16 * K weight bytes once.
template <int MT, int NB>
static void micro(const uint8_t* q, int64_t K, const int8_t* w, int64_t b0, const int32_t* sums,
                  const float* wscale, const float* xscale, float* y, int64_t N) {
  __m512i acc[MT][NB];
  for (int m = 0; m < MT; ++m)
    for (int b = 0; b < NB; ++b) acc[m][b] = _mm512_setzero_si512();
  const int8_t* wb = w + b0 * K * ROWS;
  for (int64_t k = 0; k < K; k += 4) {
    __m512i wv[NB];
    for (int b = 0; b < NB; ++b) {
      wv[b] = _mm512_loadu_si512(wb + b * K * ROWS + k * ROWS);
      if constexpr (MT > 1)  // one row: the hardware prefetchers keep up (prefetching there cost 0-4 %)
        _mm_prefetch(reinterpret_cast<const char*>(wb + b * K * ROWS + (k + 4 * PREFETCH_LINES) * ROWS), _MM_HINT_T0);
    }
    for (int m = 0; m < MT; ++m) {
      const __m512i xv = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(q + m * K + k));
      for (int b = 0; b < NB; ++b) acc[m][b] = _mm512_dpbusd_epi32(acc[m][b], xv, wv[b]);
    }
  }
  for (int b = 0; b < NB; ++b) {
    const int64_t n0 = (b0 + b) * ROWS;
    const __m512i shift = _mm512_slli_epi32(_mm512_loadu_si512(sums + n0), 7);  // 128 * row sum
    const __m512 ws = _mm512_loadu_ps(wscale + n0);
    const __mmask16 keep = first_lanes(N - n0);
    for (int m = 0; m < MT; ++m) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[m][b], shift));
      _mm512_mask_storeu_ps(y + m * N + n0, keep, _mm512_mul_ps(v, _mm512_mul_ps(ws, _mm512_set1_ps(xscale[m]))));
    }
  }
}

// Full-size GPT, one step's 80 int8 projections, 2 threads, Zen 4, interleaved against tiles of 2 blocks x 8 rows:
// one block per tile took 0.80x the time at 2 rows, 0.81x at 4, 0.69x at 8 (4.8 -> 3.4 ms), 0.82x at 440.
static void int8_gemm(const Int8Gemm& c) {
  const QuantizedRows<uint8_t> x(c.x, c.M, c.K, false, quantize_row);
  const uint8_t* q = x.q.data();
  const float* xs = x.scale.data();
  over_blocks(
      c.M, c.N, BLOCKS, TILE,
      [&](int64_t b0, int64_t nb) {
        if (nb == BLOCKS) return micro<1, BLOCKS>(q, c.K, c.w, b0, c.sums, c.scales, xs, c.y, c.N);
        for (int64_t b = b0; b < b0 + nb; ++b) micro<1, 1>(q, c.K, c.w, b, c.sums, c.scales, xs, c.y, c.N);
      },
      [&](int64_t b, int64_t m0, int64_t mt) {
        with_rows(mt, [&](auto rows) {
          micro<rows(), 1>(q + m0 * c.K, c.K, c.w, b, c.sums, c.scales, xs + m0, c.y + m0 * c.N, c.N);
        });
      });
}

// One row of x -> int8 (x / scale rounded, scale max|x|/127) and its scale.
static float quantize_row_signed(const float* x, int8_t* q, int64_t K) {
  const float scale = quantize_row(x, reinterpret_cast<uint8_t*>(q), K);  // + 128, shifted back below
  for (int64_t k = 0; k < K; ++k) q[k] = static_cast<int8_t>(static_cast<int32_t>(reinterpret_cast<uint8_t*>(q)[k]) - 128);
  return scale;
}

// y[m, blocks b0 .. b0+NB) for MT rows of q (at most 16 accumulators and 16 fp32 sums: MT * NB <= 8).
template <int MT, int NB>
static void micro4(const int8_t* q, const int32_t* xsums, int64_t K, const uint8_t* w, int64_t b0, const float* gscales,
                   const float* gmins, const float* xscale, float* y, int64_t N) {
  const int64_t groups = K / INT4_GROUP;
  __m512 sums[MT][NB];
  for (int m = 0; m < MT; ++m)
    for (int b = 0; b < NB; ++b) sums[m][b] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F);
  const uint8_t* wb = w + b0 * (K / 2) * ROWS;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i acc[MT][NB];
    for (int m = 0; m < MT; ++m)
      for (int b = 0; b < NB; ++b) acc[m][b] = _mm512_setzero_si512();
    for (int64_t k = g * INT4_GROUP; k < (g + 1) * INT4_GROUP; k += 8) {
      __m512i lo[NB], hi[NB];
      for (int b = 0; b < NB; ++b) {
        const uint8_t* line = wb + b * (K / 2) * ROWS + (k / 8) * 64;
        const __m512i v = _mm512_loadu_si512(line);
        if constexpr (MT > 1)  // as micro above
          _mm_prefetch(reinterpret_cast<const char*>(line + 64 * PREFETCH_LINES), _MM_HINT_T0);
        lo[b] = _mm512_and_si512(v, low);
        hi[b] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
      for (int m = 0; m < MT; ++m) {
        const __m512i x0 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(q + m * K + k));
        const __m512i x1 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(q + m * K + k + 4));
        for (int b = 0; b < NB; ++b) acc[m][b] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[m][b], lo[b], x0), hi[b], x1);
      }
    }
    for (int b = 0; b < NB; ++b) {
      const __m512 s = _mm512_loadu_ps(gscales + ((b0 + b) * groups + g) * ROWS);
      const __m512 mn = _mm512_loadu_ps(gmins + ((b0 + b) * groups + g) * ROWS);
      for (int m = 0; m < MT; ++m)
        sums[m][b] = _mm512_fmadd_ps(mn, _mm512_set1_ps(static_cast<float>(xsums[m * groups + g])),
                                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][b]), s, sums[m][b]));
    }
  }
  for (int b = 0; b < NB; ++b) {
    const int64_t n0 = (b0 + b) * ROWS;
    const __mmask16 keep = first_lanes(N - n0);
    for (int m = 0; m < MT; ++m)
      _mm512_mask_storeu_ps(y + m * N + n0, keep, _mm512_mul_ps(sums[m][b], _mm512_set1_ps(xscale[m])));
  }
}

static void int4_gemm(const Int4Gemm& c) {
  const int64_t groups = c.K / INT4_GROUP;
  const QuantizedRows<int8_t> x(c.x, c.M, c.K, true, quantize_row_signed);
  const int8_t* q = x.q.data();
  const int32_t* pxs = x.sums.data();
  const float* xs = x.scale.data();
  over_blocks(
      c.M, c.N, BLOCKS, TILE,
      [&](int64_t b0, int64_t nb) {
        if (nb == BLOCKS)
          return micro4<1, BLOCKS>(q, pxs, c.K, c.w, b0, c.gscales, c.gmins, xs, c.y, c.N);
        for (int64_t b = b0; b < b0 + nb; ++b)
          micro4<1, 1>(q, pxs, c.K, c.w, b, c.gscales, c.gmins, xs, c.y, c.N);
      },
      [&](int64_t b, int64_t m0, int64_t mt) {
        with_rows(mt, [&](auto rows) {
          micro4<rows(), 1>(q + m0 * c.K, pxs + m0 * groups, c.K, c.w, b, c.gscales, c.gmins, xs + m0,
                            c.y + m0 * c.N, c.N);
        });
      });
}

}  // namespace avx512
#endif
