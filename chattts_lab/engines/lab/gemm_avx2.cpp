// The packed int8 and int4 GEMMs on 256-bit registers (gemm_formats.cpp's formats): AVX2, and AVX-VNNI where the
// CPU has it (Intel's desktop and laptop chips since the 12th generation). A 64-byte line of a block is read as two
// halves of 8 output rows.
//
// Without VNNI a byte dot product is `vpmaddubsw` (unsigned x signed bytes -> pairs summed to int16, saturating)
// then `vpmaddwd` with ones (int16 pairs -> int32), the form llama.cpp's AVX2 Q8_0 dot product uses:
// - int8: activations quantized per row to [-127, 127]; x's sign is moved onto the weight (`vpsignb`) and |x| is the
//   unsigned operand, so a pair is at most 2 * 127 * 127 = 32258 and never saturates.
// - int4: the nibbles (0..15) are the unsigned operand and the activations the signed one: a pair is at most
//   2 * 15 * 127 = 3810, so four 8-k steps add up in int16 (at most 30480) before one `vpmaddwd` widens them.
// With AVX-VNNI, `vpdpbusd` does the three in one, with the int8 activations shifted by +128 into the unsigned
// operand and the shift undone with each row's weight sum (as the AVX-512 level).

#if defined(LAB_256)
namespace avx2 {

#if defined(LAB_VNNI256)
#if defined(__AVXVNNI__)
static inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#else  // an AVX-512 VNNI CPU running this level for tests: the same instruction in its EVEX form
static inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#endif
#endif

constexpr int BLOCKS = 2;  // blocks walked together at one row: 4 accumulator chains of 8 rows
constexpr int TILE8 = 4;   // rows of x per int8 tile at more rows (8 accumulators of 16 registers)
constexpr int TILE4 = 2;   // rows of x per int4 tile (int16 and fp32 sums per row and half: 8 registers)
// How far ahead of the line being read the weights are prefetched, in 64-byte lines: 12 KB, about one block of a
// 768-wide projection, further than the AVX-512 level's 4 KB. On a 2-core AVX2-only EPYC (family 23) prefetching a
// decode step's one row too cut its 80 projections from 10.5 to 9.2 ms (int8) and 7.7 to 6.9 ms (int4); at 4 and 8
// rows, where the products bound the time, the distance changed nothing (docs/measurements/2026-12-05-avx2-step.md).
constexpr int PREFETCH_AHEAD = 192;

static inline __m256i bcast4(const int8_t* p) { return _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(p)); }

// One row of x -> int8 in [-127, 127] (x / scale rounded to nearest, scale max|x|/127) and its scale; K a multiple
// of 8 (the tail past a multiple of 32 is scalar).
static float quantize_row(const float* x, int8_t* q, int64_t K) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 top = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) top = _mm256_max_ps(top, _mm256_and_ps(_mm256_loadu_ps(x + k), magnitude));
  const float amax = max_lanes(top);
  const float scale = amax > 0.f ? amax / 127.f : 1.f, inv = 1.f / scale;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undo the packs' per-lane interleave
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m256i v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * i), vinv));
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), _mm256_permutevar8x32_epi32(bytes, order));
  }
  for (; k < K; ++k) q[k] = static_cast<int8_t>(std::nearbyint(x[k] * inv));
  return scale;
}

// The unsigned operand of a byte dot product for 4 bytes of x broadcast: |x| (AVX2: x's sign goes onto the weight)
// or x + 128 (AVX-VNNI). Computed once per row and k step at a decode step's few rows; at many rows once per call.
static inline __m256i unsigned_operand(__m256i x) {
#if defined(LAB_VNNI256)
  return _mm256_xor_si256(x, _mm256_set1_epi8(static_cast<char>(0x80)));
#else
  return _mm256_sign_epi8(x, x);
#endif
}

// acc + q . w for 4 k of 8 output rows: w the weight half-line, x 4 bytes of one activation row broadcast and u its
// unsigned_operand.
static inline __m256i dot4(__m256i acc, __m256i u, [[maybe_unused]] __m256i x, __m256i w) {
#if defined(LAB_VNNI256)
  return dpbusd(acc, u, w);
#else
  const __m256i pairs = _mm256_maddubs_epi16(u, _mm256_sign_epi8(w, x));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

// y[m, blocks b0 .. b0+NB) = the int32 sums of MT rows times each output row's scale and each x row's scale.
template <int MT, int NB>
static void store_int8_tile(const __m256i (&acc)[MT][NB][2], int64_t b0, [[maybe_unused]] const int32_t* sums,
                            const float* wscale, const float* xscale, float* y, int64_t N) {
  for (int b = 0; b < NB; ++b)
    for (int h = 0; h < 2; ++h) {
      const int64_t n0 = (b0 + b) * ROWS + 8 * h;
      if (n0 >= N) continue;
      const __m256 ws = _mm256_loadu_ps(wscale + n0);
#if defined(LAB_VNNI256)
      const __m256i shift = _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + n0)), 7);
#endif
      for (int m = 0; m < MT; ++m) {
#if defined(LAB_VNNI256)
        const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[m][b][h], shift));  // undo 128 * row sum
#else
        const __m256 v = _mm256_cvtepi32_ps(acc[m][b][h]);
#endif
        store_first(y + m * N + n0, _mm256_mul_ps(v, _mm256_mul_ps(ws, _mm256_set1_ps(xscale[m]))), N - n0);
      }
    }
}

// y[m, blocks b0 .. b0+NB) for MT rows of q: walks K once, reading each block's 16 * K weight bytes once. With
// OPERANDS, `u` holds the rows' unsigned operands computed beforehand (many rows); without, they are computed as the
// rows are read (u unused).
template <int MT, int NB, bool OPERANDS = false>
static void micro(const int8_t* q, const uint8_t* u, int64_t K, const int8_t* w, int64_t b0, const int32_t* sums,
                  const float* wscale, const float* xscale, float* y, int64_t N) {
  __m256i acc[MT][NB][2];
  for (int m = 0; m < MT; ++m)
    for (int b = 0; b < NB; ++b) acc[m][b][0] = acc[m][b][1] = _mm256_setzero_si256();
  const int8_t* wb = w + b0 * K * ROWS;
  for (int64_t k = 0; k < K; k += 4) {
    __m256i wv[NB][2];
    for (int b = 0; b < NB; ++b) {
      const int8_t* line = wb + b * K * ROWS + k * ROWS;
      wv[b][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line));
      wv[b][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 32));
      // many rows read a block from cache after the first tile: only a decode step's few rows prefetch
      if constexpr (!OPERANDS) _mm_prefetch(reinterpret_cast<const char*>(line + 64 * PREFETCH_AHEAD), _MM_HINT_T0);
    }
    for (int m = 0; m < MT; ++m) {
      const __m256i xv = bcast4(q + m * K + k);
      const __m256i uv = OPERANDS ? bcast4(reinterpret_cast<const int8_t*>(u) + m * K + k) : unsigned_operand(xv);
      for (int b = 0; b < NB; ++b)
        for (int h = 0; h < 2; ++h) acc[m][b][h] = dot4(acc[m][b][h], uv, xv, wv[b][h]);
    }
  }
  store_int8_tile<MT, NB>(acc, b0, sums, wscale, xscale, y, N);
}

#if !defined(LAB_VNNI256)
// From this many rows of x (a prompt's prefill, a decoder's or vocoder's frames) AVX2's int8 runs many_rows_int8.
constexpr int64_t MANY_ROWS = 16;

// Many rows without VNNI, where a byte product costs four instructions (`vpsignb`, `vpmaddubsw`, `vpmaddwd`,
// `vpaddd`) and the instruction count bounds the time: tiles of 2 rows x 2 blocks (8 accumulators of 8 outputs),
// each row's |x| computed once per call rather than once per tile and block. A thread walks its blocks' rows tile by
// tile, so a pair of blocks (32 * K weight bytes) stays in cache while every row passes it. One thread, Zen 4 held
// to AVX2: 0.85-1.0x the time of the decode-step tiles (4 rows x 1 block) at 16-256 rows
// (docs/measurements/2026-12-04-avx2-many-rows.md). With AVX-VNNI (one `vpdpbusd` a product) the same tiles were
// slower than the decode-step ones (a pair of blocks at K = 2048 outgrows L1): that level keeps them.
static void many_rows_int8(const Int8Gemm& c, const int8_t* q, const float* xs) {
  std::vector<uint8_t> operands(c.M * c.K);
  for (int64_t i = 0; i < c.M * c.K; i += 16) {  // M * K a multiple of 16 (int8_linear checks K)
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(operands.data() + i),
                     _mm256_castsi256_si128(unsigned_operand(_mm256_castsi128_si256(x))));
  }
  const int64_t blocks = (c.N + ROWS - 1) / ROWS;
  at::parallel_for(0, (blocks + 1) / 2, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = 2 * begin; b0 < std::min(2 * end, blocks); b0 += 2)
      for (int64_t m0 = 0; m0 < c.M; m0 += 2) {
        const int8_t* qm = q + m0 * c.K;
        const uint8_t* um = operands.data() + m0 * c.K;
        float* ym = c.y + m0 * c.N;
        const bool two_rows = m0 + 2 <= c.M, two_blocks = b0 + 2 <= blocks;
        if (two_rows && two_blocks) micro<2, 2, true>(qm, um, c.K, c.w, b0, c.sums, c.scales, xs + m0, ym, c.N);
        else if (two_rows) micro<2, 1, true>(qm, um, c.K, c.w, b0, c.sums, c.scales, xs + m0, ym, c.N);
        else if (two_blocks) micro<1, 2, true>(qm, um, c.K, c.w, b0, c.sums, c.scales, xs + m0, ym, c.N);
        else micro<1, 1, true>(qm, um, c.K, c.w, b0, c.sums, c.scales, xs + m0, ym, c.N);
      }
  });
}
#endif

static void int8_gemm(const Int8Gemm& c) {
  const QuantizedRows<int8_t> x(c.x, c.M, c.K, false, quantize_row);
  const int8_t* q = x.q.data();
  const float* xs = x.scale.data();
#if !defined(LAB_VNNI256)
  if (c.M >= MANY_ROWS) return many_rows_int8(c, q, xs);
#endif
  over_blocks(
      c.M, c.N, BLOCKS, TILE8,
      [&](int64_t b0, int64_t nb) {
        if (nb == BLOCKS) return micro<1, BLOCKS>(q, nullptr, c.K, c.w, b0, c.sums, c.scales, xs, c.y, c.N);
        for (int64_t b = b0; b < b0 + nb; ++b) micro<1, 1>(q, nullptr, c.K, c.w, b, c.sums, c.scales, xs, c.y, c.N);
      },
      [&](int64_t b, int64_t m0, int64_t mt) {
        with_rows(mt, [&](auto rows) {
          if constexpr (rows() <= TILE8)
            micro<rows(), 1>(q + m0 * c.K, nullptr, c.K, c.w, b, c.sums, c.scales, xs + m0, c.y + m0 * c.N, c.N);
        });
      });
}

// int4: acc + u . x for 8 k of 8 output rows (lo: the nibbles of k0..k0+3, hi: k0+4..k0+7; x0, x1: their
// activations broadcast). AVX2 accumulates int16 (four steps at most, see the top), AVX-VNNI int32.
static inline __m256i dot8_nibbles(__m256i acc, __m256i lo, __m256i hi, __m256i x0, __m256i x1) {
#if defined(LAB_VNNI256)
  return dpbusd(dpbusd(acc, lo, x0), hi, x1);
#else
  return _mm256_add_epi16(acc, _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1)));
#endif
}

static inline __m256 widen(__m256i acc) {
#if defined(LAB_VNNI256)
  return _mm256_cvtepi32_ps(acc);
#else
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
#endif
}

// y[m, blocks b0 .. b0+NB) for MT rows of q. Every 4 steps of 8 k (32 k: a quarter of a group) the integer sums
// are widened and scaled into fp32 sums; each group's min * sum(x) joins at the group's end.
template <int MT, int NB>
static void micro4(const int8_t* q, const int32_t* xsums, int64_t K, const uint8_t* w, int64_t b0, const float* gscales,
                   const float* gmins, const float* xscale, float* y, int64_t N) {
  const int64_t groups = K / INT4_GROUP;
  __m256 sums[MT][NB][2];
  for (int m = 0; m < MT; ++m)
    for (int b = 0; b < NB; ++b) sums[m][b][0] = sums[m][b][1] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0F);
  const uint8_t* wb = w + b0 * (K / 2) * ROWS;
  for (int64_t g = 0; g < groups; ++g) {
    __m256 scale[NB][2];
    for (int b = 0; b < NB; ++b)
      for (int h = 0; h < 2; ++h) scale[b][h] = _mm256_loadu_ps(gscales + ((b0 + b) * groups + g) * ROWS + 8 * h);
    for (int64_t k32 = g * INT4_GROUP; k32 < (g + 1) * INT4_GROUP; k32 += 32) {
      __m256i acc[MT][NB][2];
      for (int m = 0; m < MT; ++m)
        for (int b = 0; b < NB; ++b) acc[m][b][0] = acc[m][b][1] = _mm256_setzero_si256();
      for (int64_t k = k32; k < k32 + 32; k += 8)
        for (int b = 0; b < NB; ++b) {
          const uint8_t* line = wb + b * (K / 2) * ROWS + (k / 8) * 64;
          _mm_prefetch(reinterpret_cast<const char*>(line + 64 * PREFETCH_AHEAD), _MM_HINT_T0);
          for (int h = 0; h < 2; ++h) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 32 * h));
            const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            for (int m = 0; m < MT; ++m)
              acc[m][b][h] = dot8_nibbles(acc[m][b][h], lo, hi, bcast4(q + m * K + k), bcast4(q + m * K + k + 4));
          }
        }
      for (int m = 0; m < MT; ++m)
        for (int b = 0; b < NB; ++b)
          for (int h = 0; h < 2; ++h) sums[m][b][h] = _mm256_fmadd_ps(widen(acc[m][b][h]), scale[b][h], sums[m][b][h]);
    }
    for (int b = 0; b < NB; ++b)
      for (int h = 0; h < 2; ++h) {
        const __m256 mn = _mm256_loadu_ps(gmins + ((b0 + b) * groups + g) * ROWS + 8 * h);
        for (int m = 0; m < MT; ++m)
          sums[m][b][h] = _mm256_fmadd_ps(mn, _mm256_set1_ps(static_cast<float>(xsums[m * groups + g])), sums[m][b][h]);
      }
  }
  for (int b = 0; b < NB; ++b)
    for (int h = 0; h < 2; ++h) {
      const int64_t n0 = (b0 + b) * ROWS + 8 * h;
      if (n0 >= N) continue;
      for (int m = 0; m < MT; ++m)
        store_first(y + m * N + n0, _mm256_mul_ps(sums[m][b][h], _mm256_set1_ps(xscale[m])), N - n0);
    }
}

static void int4_gemm(const Int4Gemm& c) {
  const int64_t groups = c.K / INT4_GROUP;
  const QuantizedRows<int8_t> x(c.x, c.M, c.K, true, quantize_row);
  const int8_t* q = x.q.data();
  const int32_t* pxs = x.sums.data();
  const float* xs = x.scale.data();
  over_blocks(
      c.M, c.N, BLOCKS, TILE4,
      [&](int64_t b0, int64_t nb) {
        if (nb == BLOCKS)
          return micro4<1, BLOCKS>(q, pxs, c.K, c.w, b0, c.gscales, c.gmins, xs, c.y, c.N);
        for (int64_t b = b0; b < b0 + nb; ++b)
          micro4<1, 1>(q, pxs, c.K, c.w, b, c.gscales, c.gmins, xs, c.y, c.N);
      },
      [&](int64_t b, int64_t m0, int64_t mt) {
        with_rows(mt, [&](auto rows) {
          if constexpr (rows() <= TILE4)
            micro4<rows(), 1>(q + m0 * c.K, pxs + m0 * groups, c.K, c.w, b, c.gscales, c.gmins, xs + m0,
                              c.y + m0 * c.N, c.N);
        });
      });
}

}  // namespace avx2
#endif
