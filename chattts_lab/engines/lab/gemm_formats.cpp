// The packed weight formats of the lab's int8 and int4 matrix multiplies, shared by every dispatch level
// (gemm_avx512.cpp, gemm_avx2.cpp, gemm_portable.cpp): what each byte means, the activations' quantization and the
// tiling that splits a GEMM over threads (gemm_pack.cpp packs torch tensors into these formats). y[M, N] =
// x[M, K] . W[N, K]^T, x and y fp32. Nothing here needs torch but at::parallel_for, so tests/arm64_gemm_harness.cpp
// builds it for ARM64 with a stand-in.
//
// Why its own: a decode step multiplies a few rows (one per batch item) by every weight of the GPT, so it is bound by
// reading the weights, and at batch 8 it should cost what batch 1 costs. Every level reads each weight byte once per
// call whatever M is, from one packed copy.
//
// int8: W in [-127, 127] with one fp32 scale per output row (symmetric per-channel), packed in blocks of 16 output
// rows: for each block, for each 4 consecutive k, 64 bytes holding those 4 k of the 16 rows (byte r*4 + j: row r,
// k0 + j). One 512-bit register holds a line; AVX2 reads it as two 256-bit halves of 8 rows.
// int4: W ~= u * scale + min per output row and group of INT4_GROUP along K, u in [0, 15]. Blocks of 16 output rows
// as int8's; for each 8 consecutive k, 64 bytes: byte r*4 + j holds k0+j of row r in its low nibble and k0+4+j in
// its high one.

constexpr int64_t ROWS = 16;   // output rows per packed block
constexpr int64_t INT4_GROUP = 128;
// How far ahead of its reads a micro-kernel prefetches each block's weights, in 64-byte lines (4 KB). With more
// than one row of x, the multiplies between one line and the next leave the hardware prefetchers behind. Full-size
// GPT, one step's 80 projections, 2 threads, Zen 4 with AVX-512 VNNI, interleaved with the kernel without it:
// 0.93x the time at 2 rows, 0.90x at 4, 0.66-0.69x at 8 (7.0 -> 4.8 ms), 0.99x at 440. 16 or 128 lines ahead did
// worse at 8 rows in back-to-back runs. A prefetch past the end of the weights is harmless: prefetches never fault.
constexpr int PREFETCH_LINES = 64;

// What one call multiplies, as every level's kernels take it. x: M rows of K fp32; y: M rows of N fp32.
struct Int8Gemm {
  const float* x;
  int64_t M, K, N;
  const int8_t* w;       // int8_pack's packed bytes
  const int32_t* sums;   // int8_pack's row sums (padded to whole blocks)
  const float* scales;   // one per output row (padded to whole blocks)
  float* y;
};

struct Int4Gemm {
  const float* x;
  int64_t M, K, N;
  const uint8_t* w;        // int4_pack's packed bytes
  const float* gscales;    // int4_pack's group scales
  const float* gmins;      // int4_pack's group mins
  float* y;
};

// One row of x -> int8 in [-127, 127] (x / scale rounded to nearest, scale max|x|/127) and its scale. The scalar
// form every level can use; the x86 levels vectorise the same arithmetic.
static float quantize_row_portable(const float* x, int8_t* q, int64_t K) {
  float amax = 0.f;
  for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[k]));
  const float scale = amax > 0.f ? amax / 127.f : 1.f, inv = 1.f / scale;
  for (int64_t k = 0; k < K; ++k) q[k] = static_cast<int8_t>(std::nearbyint(x[k] * inv));
  return scale;
}

// The sums of each INT4_GROUP of a quantized row (the int4 formula's min * sum(x) term).
static void group_sums(const int8_t* q, int32_t* sums, int64_t K) {
  for (int64_t g = 0; g < K / INT4_GROUP; ++g) {
    int32_t sum = 0;
    for (int64_t k = g * INT4_GROUP; k < (g + 1) * INT4_GROUP; ++k) sum += q[k];
    sums[g] = sum;
  }
}

// x's rows quantized once per call, as a level's kernels read them: the bytes (`Byte`: int8, or uint8 shifted by +128
// for the VNNI levels' int8), each row's scale and, for int4, the sums of each group of a row's signed values.
template <typename Byte>
struct QuantizedRows {
  std::vector<Byte> q;
  std::vector<float> scale;
  std::vector<int32_t> sums;  // [M, K / INT4_GROUP] when asked for, else empty

  // quantize(row, bytes, K) -> the row's scale
  template <typename Quantize>
  QuantizedRows(const float* x, int64_t M, int64_t K, bool group_sums_too, Quantize quantize)
      : q(M * K), scale(M), sums(group_sums_too ? M * (K / INT4_GROUP) : 0) {
    for (int64_t m = 0; m < M; ++m) {
      scale[m] = quantize(x + m * K, q.data() + m * K, K);
      if (group_sums_too) group_sums(reinterpret_cast<const int8_t*>(q.data() + m * K), sums.data() + m * (K / INT4_GROUP), K);
    }
  }
};

// Runs a GEMM over y's blocks of 16 output rows, `group` blocks at a time in parallel (threads split the output
// columns: each reads its own part of the weights once, for every row of x). One row: wide(b0, nb), a whole group
// of blocks with independent accumulator chains. More rows: tile(b, m0, mt), one block at a time in tiles of up to
// `tile` rows of x; a batch of 8 still reads each weight from memory once, and a block's bytes stay in cache across
// the tiles. Out of line on purpose: inlined into the parallel region, batch 1 ran about 6 % slower (interleaved A/B).
template <typename Wide, typename Tile>
__attribute__((noinline)) static void over_group(int64_t M, int64_t b0, int64_t nb, int64_t tile, const Wide& wide,
                                                  const Tile& one) {
  if (M == 1) return wide(b0, nb);
  for (int64_t b = b0; b < b0 + nb; ++b)
    for (int64_t m0 = 0; m0 < M; m0 += tile) one(b, m0, std::min<int64_t>(tile, M - m0));
}

template <typename Wide, typename Tile>
static void over_blocks(int64_t M, int64_t N, int64_t group, int64_t tile, const Wide& wide, const Tile& one) {
  const int64_t blocks = (N + ROWS - 1) / ROWS;
  at::parallel_for(0, (blocks + group - 1) / group, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g)
      over_group(M, g * group, std::min<int64_t>(group, blocks - g * group), tile, wide, one);
  });
}
