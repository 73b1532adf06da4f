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
// GPT, one step's 80 projections, 2 threads, Zen 5 with AVX-512 VNNI, interleaved with the kernel without it (and
// with the tiles of 2 blocks of then): 0.93x the time at 2 rows, 0.90x at 4, 0.66-0.69x at 8 (7.0 -> 4.8 ms),
// 0.99x at 440. 16 or 128 lines ahead did worse at 8 rows in back-to-back runs. A prefetch past the end of the
// weights is harmless: x86 prefetches never fault.
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
    const __mmask16 keep = first_lanes(N - n0);
    for (int m = 0; m < MT; ++m) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[m][b], shift));
      _mm512_mask_storeu_ps(y + m * N + n0, keep, _mm512_mul_ps(v, _mm512_mul_ps(ws, _mm512_set1_ps(xscale[m]))));
    }
  }
}

// Runs a GEMM over y's blocks of 16 output rows, BLOCKS at a time in parallel (threads split the output columns:
// each reads its own part of the weights once, for every row of x). One row: four(b0), 4 blocks at a time (4
// independent accumulator chains). More rows: one(b, m0, mt), one block at a time in tiles of up to 8 rows; a batch
// of 8 still reads each weight once, and a block's bytes stay in L1 across a prompt's tiles. Full-size GPT, one
// step's 80 int8 projections, 2 threads, Zen 5, interleaved against the tiles of 2 blocks x 8 rows used before:
// 0.80x the time at 2 rows, 0.81x at 4, 0.69x at 8 (4.8 -> 3.4 ms), 0.82x at a batch-8 prompt's 440.
// Out of line on purpose: inlined into the parallel region, batch 1 ran about 6 % slower (interleaved A/B).
template <typename Four, typename One>
__attribute__((noinline)) static void over_group(int64_t M, int64_t b0, int64_t nb, const Four& four, const One& one) {
  if (M == 1 && nb == BLOCKS) return four(b0);
  for (int64_t b = b0; b < b0 + nb; ++b)
    for (int64_t m0 = 0; m0 < M; m0 += 8) one(b, m0, std::min<int64_t>(8, M - m0));
}

template <typename Four, typename One>
static void over_blocks(int64_t M, int64_t blocks, const Four& four, const One& one) {
  at::parallel_for(0, (blocks + BLOCKS - 1) / BLOCKS, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g)
      over_group(M, g * BLOCKS, std::min<int64_t>(BLOCKS, blocks - g * BLOCKS), four, one);
  });
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

  auto y = rows_of(xc, N);
  const int8_t* pw = packed.data_ptr<int8_t>();
  const int32_t* ps = sums.data_ptr<int32_t>();
  const float* pws = scales.data_ptr<float>();
  float* py = y.data_ptr<float>();
  over_blocks(
      M, blocks, [&](int64_t b0) { micro<1, BLOCKS>(q.data(), K, pw, b0, ps, pws, xscale.data(), py, N); },
      [&](int64_t b, int64_t m0, int64_t mt) {
        with_rows(mt, [&](auto rows) {
          micro<rows(), 1>(q.data() + m0 * K, K, pw, b, ps, pws, xscale.data() + m0, py + m0 * N, N);
        });
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
// Layout: W ~= u * scale + min per output row and group of INT4_GROUP along K, u in [0, 15] (asymmetric, as the
// lab's int4 was before: symmetric groups drifted further from fp32). Blocks of 16 output rows as int8_pack's; for
// each 8 consecutive k, 64 bytes: byte r*4 + j holds k0+j of row r in its low nibble and k0+4+j in its high one.
// The kernel widens the nibbles to bytes (and, shift) and runs `vpdpbusd` with them as the unsigned operand and the
// activations, quantized per row to signed 8 bits, as the signed one. When a group ends its int32 sums become fp32:
// sum += scale * (u . x) + min * sum(x over the group).

constexpr int64_t INT4_GROUP = 128;

int64_t int4_group() { return INT4_GROUP; }

// u uint8 [N, K] in [0, 15], scales and mins fp32 [N, K / INT4_GROUP] -> (packed uint8 [blocks * K/2 * 16],
// group scales fp32 [blocks * K/INT4_GROUP * 16], group mins the same); rows padded to whole blocks with zeros.
std::vector<torch::Tensor> int4_pack(const torch::Tensor& u, const torch::Tensor& scales, const torch::Tensor& mins) {
  TORCH_CHECK(u.dim() == 2 && u.scalar_type() == at::kByte, "int4_pack: a uint8 [N, K] of values in [0, 15]");
  TORCH_CHECK(u.size(1) % INT4_GROUP == 0, "int4_pack: K must be a multiple of ", INT4_GROUP);
  const auto uc = u.contiguous();
  const auto sc = scales.to(at::kFloat).contiguous(), mc = mins.to(at::kFloat).contiguous();
  const int64_t N = uc.size(0), K = uc.size(1), groups = K / INT4_GROUP, blocks = (N + ROWS - 1) / ROWS;
  TORCH_CHECK(sc.numel() == N * groups && mc.numel() == N * groups, "int4_pack: one scale and min per row and group");
  auto packed = torch::zeros({blocks * K / 2 * ROWS}, uc.options());
  auto gscales = torch::zeros({blocks * groups * ROWS}, sc.options()), gmins = torch::zeros_like(gscales);
  const uint8_t* src = uc.data_ptr<uint8_t>();
  uint8_t* dst = packed.data_ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t block = n / ROWS, r = n % ROWS;
    for (int64_t g = 0; g < groups; ++g) {
      gscales.data_ptr<float>()[(block * groups + g) * ROWS + r] = sc.data_ptr<float>()[n * groups + g];
      gmins.data_ptr<float>()[(block * groups + g) * ROWS + r] = mc.data_ptr<float>()[n * groups + g];
    }
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t nibble = src[n * K + k] & 0x0F;
      dst[block * (K / 2) * ROWS + (k / 8) * 64 + r * 4 + k % 4] |= (k % 8) < 4 ? nibble : static_cast<uint8_t>(nibble << 4);
    }
  }
  return {packed, gscales, gmins};
}

#ifdef LAB_INT8_VNNI

// One row of x -> int8 (x / scale rounded, scale max|x|/127) and its scale; sums[g] = the sum of group g's values.
static float quantize_row_signed(const float* x, int8_t* q, int32_t* sums, int64_t K) {
  const float scale = quantize_row(x, reinterpret_cast<uint8_t*>(q), K);  // + 128, then shifted back below
  for (int64_t g = 0; g < K / INT4_GROUP; ++g) {
    int32_t sum = 0;
    for (int64_t k = g * INT4_GROUP; k < (g + 1) * INT4_GROUP; ++k) {
      q[k] = static_cast<int8_t>(static_cast<int32_t>(reinterpret_cast<uint8_t*>(q)[k]) - 128);
      sum += q[k];
    }
    sums[g] = sum;
  }
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

#endif

// x fp32 [..., K] . int4-packed weight (int4_pack) -> y fp32 [..., N].
torch::Tensor int4_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& gscales,
                          const torch::Tensor& gmins, int64_t N) {
#if defined(LAB_INT8_VNNI)
  TORCH_CHECK(x.scalar_type() == at::kFloat, "int4_linear: fp32 activations");
  const auto xc = x.contiguous();
  const int64_t K = xc.size(-1), M = xc.numel() / K, blocks = (N + ROWS - 1) / ROWS, groups = K / INT4_GROUP;
  TORCH_CHECK(K % INT4_GROUP == 0 && packed.numel() == blocks * K / 2 * ROWS, "int4_linear: weight packed for another shape");
  TORCH_CHECK(gscales.numel() == blocks * groups * ROWS && gmins.numel() == blocks * groups * ROWS,
              "int4_linear: group scales or mins of another shape");
  std::vector<int8_t> q(M * K);
  std::vector<int32_t> xsums(M * groups);
  std::vector<float> xscale(M);
  const float* px = xc.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) xscale[m] = quantize_row_signed(px + m * K, q.data() + m * K, xsums.data() + m * groups, K);
  auto y = rows_of(xc, N);
  const uint8_t* pw = packed.data_ptr<uint8_t>();
  const float *pg = gscales.data_ptr<float>(), *pm = gmins.data_ptr<float>();
  float* py = y.data_ptr<float>();
  over_blocks(
      M, blocks, [&](int64_t b0) { micro4<1, BLOCKS>(q.data(), xsums.data(), K, pw, b0, pg, pm, xscale.data(), py, N); },
      [&](int64_t b, int64_t m0, int64_t mt) {
        with_rows(mt, [&](auto rows) {
          micro4<rows(), 1>(q.data() + m0 * K, xsums.data() + m0 * groups, K, pw, b, pg, pm, xscale.data() + m0,
                            py + m0 * N, N);
        });
      });
  return y;
#else
  TORCH_CHECK(false, "int4_linear: this build has no AVX-512 VNNI (see int8_isa())");
#endif
}

// One projection in either packed format, told apart by the packed weights' dtype: int8 (int8_pack: packed, row
// sums, scales) or int4 (int4_pack: packed uint8, group scales, group mins).
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
