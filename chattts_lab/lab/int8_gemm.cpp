// The lab's int8 matrix multiply for CPUs with AVX-512 VNNI: y[M, N] = x[M, K] . W[N, K]^T, x and y fp32.
//
// Why its own: a decode step multiplies a few rows (one per batch item) by every weight of the GPT, so it is
// bound by reading the weights, and at batch 8 it should cost what batch 1 costs. fbgemm's dynamic-int8 GEMM
// (what the lab used before) read the weights at about 60 % of the AVX-512 build machine's bandwidth at batch 1,
// cost twice as much at batch 8 as at batch 1, and keeps a second, unpacked copy of every weight for
// `linear_unpack`. Here every weight byte is read once per call whatever M is, from one packed copy.
//
// Layout: W is int8 in [-127, 127] with one fp32 scale per output row (symmetric per-channel, as the lab's other
// int8 formats), packed in blocks of 16 output rows: for each block, for each 4 consecutive k, 64 bytes holding
// those 4 k of the 16 rows. Activations are quantized per call and per row to 8 bits (symmetric, scale
// max|x|/127). One `vpdpbusd` multiplies 4 k of 16 rows by 4 bytes of one activation row; activations are
// shifted by +128 into the unsigned operand it takes, and the shift is undone with each row's weight sum.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define LAB_INT8_VNNI 1
#endif

namespace {

constexpr int64_t ROWS = 16;   // output rows per packed block (one zmm of int32 accumulators)
constexpr int BLOCKS = 4;      // blocks a micro-kernel walks together: 4 independent accumulator chains at M=1
// How far ahead of its reads a micro-kernel prefetches each block's weights, in 64-byte lines (4 KB). With more
// than one row of x, the multiplies between one line and the next leave the hardware prefetchers behind. Full-size
// GPT, one step's 80 projections, 2 threads, Zen 5 with AVX-512 VNNI, interleaved with the kernel without it: 0.93x
// the time at 2 rows, 0.90x at 4, 0.66-0.69x at 8 (7.0 -> 4.8 ms), 0.99x at a batch-8 prompt's 440. 16 or 128
// lines ahead did worse at 8 rows in back-to-back runs. A prefetch past the end of the weights is harmless: x86 prefetches never fault.
constexpr int PREFETCH_LINES = 64;

}  // namespace

// The instruction set this build's int8 GEMM runs on ("avx512_vnni"), or "" where it has none: the lab then runs
// fbgemm. An AVX2 version (vpmaddubsw on |x| and sign-moved W) was tried: built here without AVX-512, its
// prefill-sized products (M = 55-440 rows) took 1.6-2.9x fbgemm's time (fbgemm ran its VNNI code here; no AVX2
// machine was at hand to compare on), so AVX2 CPUs keep fbgemm.
std::string int8_isa() {
#if defined(LAB_INT8_VNNI)
  return "avx512_vnni";
#else
  return "";
#endif
}

// weight int8 [N, K] (K a multiple of 4) -> (packed int8 [ceil(N/16) * K * 16], row sums int32 [N padded to 16]).
std::vector<torch::Tensor> int8_pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kChar, "int8_pack: an int8 [N, K] weight");
  TORCH_CHECK(weight.size(1) % 4 == 0, "int8_pack: K must be a multiple of 4");
  const auto w = weight.contiguous();
  const int64_t N = w.size(0), K = w.size(1), blocks = (N + ROWS - 1) / ROWS;
  auto packed = torch::zeros({blocks * K * ROWS}, w.options());
  auto sums = torch::zeros({blocks * ROWS}, w.options().dtype(at::kInt));
  const int8_t* src = w.data_ptr<int8_t>();
  int8_t* dst = packed.data_ptr<int8_t>();
  int32_t* ps = sums.data_ptr<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t block = n / ROWS, r = n % ROWS;
    int32_t sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      dst[block * K * ROWS + (k / 4) * ROWS * 4 + r * 4 + k % 4] = src[n * K + k];
      sum += src[n * K + k];
    }
    ps[n] = sum;
  }
  return {packed, sums};
}

#ifdef LAB_INT8_VNNI

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
    const __mmask16 keep = n0 + ROWS <= N ? 0xFFFF : static_cast<__mmask16>((1u << (N - n0)) - 1);
    for (int m = 0; m < MT; ++m) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[m][b], shift));
      _mm512_mask_storeu_ps(y + m * N + n0, keep, _mm512_mul_ps(v, _mm512_mul_ps(ws, _mm512_set1_ps(xscale[m]))));
    }
  }
}

// MT rows (1 to 4 with NB = 4, 1 to 8 with NB = 2: at most 16 accumulators) of one tile.
template <int NB>
static void tile(int MT, const uint8_t* q, int64_t K, const int8_t* w, int64_t b0, const int32_t* sums,
                 const float* wscale, const float* xscale, float* y, int64_t N) {
  switch (MT) {
    case 8: if constexpr (NB == 2) return micro<8, NB>(q, K, w, b0, sums, wscale, xscale, y, N); break;
    case 7: if constexpr (NB == 2) return micro<7, NB>(q, K, w, b0, sums, wscale, xscale, y, N); break;
    case 6: if constexpr (NB == 2) return micro<6, NB>(q, K, w, b0, sums, wscale, xscale, y, N); break;
    case 5: if constexpr (NB == 2) return micro<5, NB>(q, K, w, b0, sums, wscale, xscale, y, N); break;
    case 4: return micro<4, NB>(q, K, w, b0, sums, wscale, xscale, y, N);
    case 3: return micro<3, NB>(q, K, w, b0, sums, wscale, xscale, y, N);
    case 2: return micro<2, NB>(q, K, w, b0, sums, wscale, xscale, y, N);
    case 1: return micro<1, NB>(q, K, w, b0, sums, wscale, xscale, y, N);
  }
  TORCH_CHECK(false, "int8_linear: no tile of ", MT, " rows by ", NB, " blocks");
}

// Blocks b0 .. b0+nb of y for all M rows. Up to 4 rows: one pass, 4 blocks at a time (4 accumulator chains
// per row). More rows: 2 blocks at a time in tiles of up to 8 rows, so a batch of 8 still reads each weight
// once, in one pass that overlaps the weights' arrival with the multiplies (two 4-row passes did not).
static void group(const uint8_t* q, int64_t M, int64_t K, const int8_t* w, int64_t b0, int64_t nb,
                  const int32_t* sums, const float* wscale, const float* xscale, float* y, int64_t N) {
  if (M <= 4 && nb == 4) return tile<4>(static_cast<int>(M), q, K, w, b0, sums, wscale, xscale, y, N);
  for (int64_t b = b0; b < b0 + nb; b += 2) {
    const bool pair = b + 2 <= b0 + nb;  // else the last, odd block alone: tile<1> holds up to 4 rows
    const int64_t rows = pair ? 8 : 4;
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
      const int mt = static_cast<int>(std::min<int64_t>(rows, M - m0));
      if (pair) tile<2>(mt, q + m0 * K, K, w, b, sums, wscale, xscale + m0, y + m0 * N, N);
      else tile<1>(mt, q + m0 * K, K, w, b, sums, wscale, xscale + m0, y + m0 * N, N);
    }
  }
}

#endif

// x fp32 [..., K] . packed int8 weight (int8_pack) -> y fp32 [..., N], y = (x . W^T) * scales[n];
// scales: fp32, one per output row, zero-padded to whole blocks of 16 (K a multiple of 16).
torch::Tensor int8_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& sums,
                          const torch::Tensor& scales, int64_t N) {
#if defined(LAB_INT8_VNNI)
  TORCH_CHECK(x.scalar_type() == at::kFloat, "int8_linear: fp32 activations");
  const auto xc = x.contiguous();
  const int64_t K = xc.size(-1), M = xc.numel() / K, blocks = (N + ROWS - 1) / ROWS;
  TORCH_CHECK(K % 16 == 0 && packed.numel() == blocks * K * ROWS, "int8_linear: weight packed for another shape");
  // scales and sums padded to whole blocks (as int8_pack makes them), so the epilogue loads 16 at a time
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == blocks * ROWS, "int8_linear: padded scales");
  TORCH_CHECK(sums.numel() == blocks * ROWS, "int8_linear: padded row sums");
  std::vector<uint8_t> q(M * K);
  std::vector<float> xscale(M);
  const float* px = xc.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) xscale[m] = quantize_row(px + m * K, q.data() + m * K, K);

  auto sizes = xc.sizes().vec();
  sizes.back() = N;
  auto y = torch::empty(sizes, xc.options());
  const int8_t* pw = packed.data_ptr<int8_t>();
  const int32_t* ps = sums.data_ptr<int32_t>();
  const float* pws = scales.data_ptr<float>();
  float* py = y.data_ptr<float>();
  const int64_t groups = (blocks + BLOCKS - 1) / BLOCKS;
  // threads split the output columns: each reads its own part of the weights once, for every row of x
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t b0 = g * BLOCKS;
      group(q.data(), M, K, pw, b0, std::min<int64_t>(BLOCKS, blocks - b0), ps, pws, xscale.data(), py, N);
    }
  });
  return y;
#else
  TORCH_CHECK(false, "int8_linear: this build has no AVX-512 VNNI (see int8_isa())");
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// int4 weights, the same int8 dot products. Why: a decode step is bound by reading the weights, and int4 halves
// them; torch's int4 CPU kernel (bf16 activations) ran a step slower than this file's int8 one.
//
// Layout: W is int4 in [-7, 7], symmetric, one fp32 scale per output row and group of INT4_GROUP along K. Blocks of
// 16 output rows as int8_pack's; for each 8 consecutive k, 64 bytes: byte r*4 + j holds k0+j of row r in its low
// nibble and k0+4+j in its high one, each stored + 8. The kernel widens the nibbles back to int8 (and, shift,
// subtract 8) and runs `vpdpbusd` on them; each group's int32 sums are scaled into fp32 sums when the group ends.
// The +128 shift of the activations is undone once per row with `corr` = 128 * sum over groups of scale * sum(q).

constexpr int64_t INT4_GROUP = 128;

int64_t int4_group() { return INT4_GROUP; }

// q int8 [N, K] in [-7, 7], scales fp32 [N, K / INT4_GROUP] -> (packed uint8 [blocks * K/2 * 16],
// group scales fp32 [blocks * K/INT4_GROUP * 16], corr fp32 [blocks * 16]); rows padded to whole blocks with zeros.
std::vector<torch::Tensor> int4_pack(const torch::Tensor& q, const torch::Tensor& scales) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kChar, "int4_pack: an int8 [N, K] of values in [-7, 7]");
  TORCH_CHECK(q.size(1) % INT4_GROUP == 0, "int4_pack: K must be a multiple of ", INT4_GROUP);
  const auto qc = q.contiguous();
  const auto sc = scales.to(at::kFloat).contiguous();
  const int64_t N = qc.size(0), K = qc.size(1), groups = K / INT4_GROUP, blocks = (N + ROWS - 1) / ROWS;
  TORCH_CHECK(sc.numel() == N * groups, "int4_pack: one scale per row and group");
  auto packed = torch::full({blocks * K / 2 * ROWS}, 0x88, qc.options().dtype(at::kByte));  // padding rows: 0
  auto gscales = torch::zeros({blocks * groups * ROWS}, sc.options());
  auto corr = torch::zeros({blocks * ROWS}, sc.options());
  const int8_t* src = qc.data_ptr<int8_t>();
  const float* ps = sc.data_ptr<float>();
  uint8_t* dst = packed.data_ptr<uint8_t>();
  float *pg = gscales.data_ptr<float>(), *pc = corr.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t block = n / ROWS, r = n % ROWS;
    double correction = 0.0;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t sum = 0;
      for (int64_t k = g * INT4_GROUP; k < (g + 1) * INT4_GROUP; ++k) sum += src[n * K + k];
      pg[(block * groups + g) * ROWS + r] = ps[n * groups + g];
      correction += 128.0 * ps[n * groups + g] * static_cast<double>(sum);
    }
    pc[n] = static_cast<float>(correction);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t k8 = k / 8, j = k % 4;
      uint8_t& byte = dst[block * (K / 2) * ROWS + k8 * 64 + r * 4 + j];
      const uint8_t nibble = static_cast<uint8_t>(src[n * K + k] + 8);
      byte = (k % 8) < 4 ? static_cast<uint8_t>((byte & 0xF0) | nibble) : static_cast<uint8_t>((byte & 0x0F) | (nibble << 4));
    }
  }
  return {packed, gscales, corr};
}

#ifdef LAB_INT8_VNNI

// y[m, blocks b0 .. b0+NB) for MT rows of q (at most 16 accumulators and 16 fp32 sums: MT * NB <= 8).
template <int MT, int NB>
static void micro4(const uint8_t* q, int64_t K, const uint8_t* w, int64_t b0, const float* gscales, const float* corr,
                   const float* xscale, float* y, int64_t N) {
  const int64_t groups = K / INT4_GROUP;
  __m512 sums[MT][NB];
  for (int m = 0; m < MT; ++m)
    for (int b = 0; b < NB; ++b) sums[m][b] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
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
        lo[b] = _mm512_sub_epi8(_mm512_and_si512(v, low), eight);
        hi[b] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), eight);
      }
      for (int m = 0; m < MT; ++m) {
        const __m512i x0 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(q + m * K + k));
        const __m512i x1 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(q + m * K + k + 4));
        for (int b = 0; b < NB; ++b) acc[m][b] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[m][b], x0, lo[b]), x1, hi[b]);
      }
    }
    for (int b = 0; b < NB; ++b) {
      const __m512 s = _mm512_loadu_ps(gscales + ((b0 + b) * groups + g) * ROWS);
      for (int m = 0; m < MT; ++m) sums[m][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][b]), s, sums[m][b]);
    }
  }
  for (int b = 0; b < NB; ++b) {
    const int64_t n0 = (b0 + b) * ROWS;
    const __m512 c = _mm512_loadu_ps(corr + n0);
    const __mmask16 keep = n0 + ROWS <= N ? 0xFFFF : static_cast<__mmask16>((1u << (N - n0)) - 1);
    for (int m = 0; m < MT; ++m)
      _mm512_mask_storeu_ps(y + m * N + n0, keep, _mm512_mul_ps(_mm512_sub_ps(sums[m][b], c), _mm512_set1_ps(xscale[m])));
  }
}

// One block of 16 output rows for 1-8 rows of q.
static void tile4(int MT, const uint8_t* q, int64_t K, const uint8_t* w, int64_t b, const float* gscales,
                  const float* corr, const float* xscale, float* y, int64_t N) {
  switch (MT) {
    case 1: return micro4<1, 1>(q, K, w, b, gscales, corr, xscale, y, N);
    case 2: return micro4<2, 1>(q, K, w, b, gscales, corr, xscale, y, N);
    case 3: return micro4<3, 1>(q, K, w, b, gscales, corr, xscale, y, N);
    case 4: return micro4<4, 1>(q, K, w, b, gscales, corr, xscale, y, N);
    case 5: return micro4<5, 1>(q, K, w, b, gscales, corr, xscale, y, N);
    case 6: return micro4<6, 1>(q, K, w, b, gscales, corr, xscale, y, N);
    case 7: return micro4<7, 1>(q, K, w, b, gscales, corr, xscale, y, N);
    case 8: return micro4<8, 1>(q, K, w, b, gscales, corr, xscale, y, N);
  }
  TORCH_CHECK(false, "int4_linear: no tile of ", MT, " rows");
}

#endif

// x fp32 [..., K] . int4-packed weight (int4_pack) -> y fp32 [..., N].
torch::Tensor int4_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& gscales,
                          const torch::Tensor& corr, int64_t N) {
#if defined(LAB_INT8_VNNI)
  TORCH_CHECK(x.scalar_type() == at::kFloat, "int4_linear: fp32 activations");
  const auto xc = x.contiguous();
  const int64_t K = xc.size(-1), M = xc.numel() / K, blocks = (N + ROWS - 1) / ROWS;
  TORCH_CHECK(K % INT4_GROUP == 0 && packed.numel() == blocks * K / 2 * ROWS, "int4_linear: weight packed for another shape");
  TORCH_CHECK(gscales.numel() == blocks * (K / INT4_GROUP) * ROWS && corr.numel() == blocks * ROWS,
              "int4_linear: group scales or corrections of another shape");
  std::vector<uint8_t> q(M * K);
  std::vector<float> xscale(M);
  const float* px = xc.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) xscale[m] = quantize_row(px + m * K, q.data() + m * K, K);
  auto sizes = xc.sizes().vec();
  sizes.back() = N;
  auto y = torch::empty(sizes, xc.options());
  const uint8_t* pw = packed.data_ptr<uint8_t>();
  const float *pg = gscales.data_ptr<float>(), *pc = corr.data_ptr<float>();
  float* py = y.data_ptr<float>();
  const int64_t groups = (blocks + BLOCKS - 1) / BLOCKS;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t gi = begin; gi < end; ++gi) {
      const int64_t b0 = gi * BLOCKS, nb = std::min<int64_t>(BLOCKS, blocks - b0);
      if (M == 1 && nb == 4) {  // one row: 4 blocks at a time, 4 independent accumulator chains
        micro4<1, 4>(q.data(), K, pw, b0, pg, pc, xscale.data(), py, N);
        continue;
      }
      for (int64_t b = b0; b < b0 + nb; ++b)  // each block's 16 * K/2 bytes stay in L1 across the row tiles
        for (int64_t m0 = 0; m0 < M; m0 += 8)
          tile4(static_cast<int>(std::min<int64_t>(8, M - m0)), q.data() + m0 * K, K, pw, b, pg, pc,
                xscale.data() + m0, py + m0 * N, N);
    }
  });
  return y;
#else
  TORCH_CHECK(false, "int4_linear: this build has no AVX-512 VNNI (see int8_isa())");
#endif
}

// One projection in either packed format, told apart by the packed weights' dtype: int8 (int8_pack: packed, row
// sums, scales) or int4 (int4_pack: packed uint8, group scales, corrections).
static torch::Tensor packed_linear(const torch::Tensor& x, const torch::Tensor* w, int64_t N) {
  return w[0].scalar_type() == at::kByte ? int4_linear(x, w[0], w[1], w[2], N) : int8_linear(x, w[0], w[1], w[2], N);
}

// A whole int8 or int4 decode step of the GPT in one call: for each layer, the same kernels the lab's Python loop
// calls one by one (kernels.cpp's rms_norm, decode_attention, add_rms_norm, silu_mul; int8_linear or int4_linear
// above), then the final norm. Why: from Python a step is 9 calls per layer, 180 in all, and at about 7 us each
// their dispatch was ~1.3 ms of a ~9 ms batch-1 step; here it is one.
//   x [B, 1, dim] fp32; layers: 14 tensors per layer (norm1, qkv's 3 packed tensors, o's 3, norm2, gate_up's 3,
//   down's 3); out: the 4 projections' output sizes; caches: k, v per layer; rot, slot, end, valid as for
//   decode_attention. Returns the final-normed last hidden state [B, dim].
torch::Tensor decode_step_packed(torch::Tensor x, const std::vector<torch::Tensor>& layers,
                                 const std::vector<int64_t>& out, const std::vector<torch::Tensor>& caches,
                                 const torch::Tensor& rot, int64_t slot, int64_t end, const torch::Tensor& valid,
                                 double eps, const torch::Tensor& final_norm) {
  constexpr size_t PER_LAYER = 14;
  const size_t n_layers = caches.size() / 2;
  TORCH_CHECK(layers.size() == n_layers * PER_LAYER && out.size() == 4, "decode_step_packed: 14 tensors per layer");
  const int64_t B = x.size(0), dim = x.size(-1);
  for (size_t l = 0; l < n_layers; ++l) {
    const torch::Tensor* w = layers.data() + l * PER_LAYER;
    const auto qkv = packed_linear(rms_norm(x, w[0], eps), w + 1, out[0]);
    const auto y = decode_attention(qkv.view({B, -1}), rot, caches[2 * l], caches[2 * l + 1], slot, end, valid);
    const auto sum_normed = add_rms_norm(x, packed_linear(y.view({B, 1, dim}), w + 4, out[1]), w[7], eps);
    const auto gate_up = packed_linear(sum_normed[1], w + 8, out[2]);
    x = sum_normed[0] + packed_linear(silu_mul(gate_up), w + 11, out[3]);
  }
  return rms_norm(x.select(1, x.size(1) - 1).contiguous(), final_norm, eps);
}
