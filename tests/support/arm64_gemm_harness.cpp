// Torch-free harness (tests/test_kernels_arm64.py builds it for ARM64 and runs it under qemu): the portable level's
// GEMMs (chattts_lab/engines/lab/gemm_portable.cpp, with `sdot` where compiled for it) against plain scalar sums over
// the same packed bytes, in the formats of gemm_formats.cpp (torch has no ARM64 build here, and those two files need
// none of it but at::parallel_for).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
// the one torch piece gemm_formats.cpp uses: at::parallel_for, here one thread
namespace at {
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t, const F& f) { f(begin, end); }
}  // namespace at
#include "gemm_formats.cpp"
#include "gemm_portable.cpp"
int main() {
  std::mt19937 rng(0);
  std::uniform_int_distribution<int> w8(-127, 127), u4(0, 15);
  std::normal_distribution<float> nd;
  int bad = 0;
  struct Case { int64_t N, K, M; };
  const Case cases[] = {{16, 128, 1}, {37, 256, 3}, {100, 768, 9}};
  for (const Case& cs : cases) {
    const int64_t N = cs.N, K = cs.K, M = cs.M;
    const int64_t blocks = (N + 15) / 16;
    std::vector<int8_t> w(blocks * 16 * K); std::vector<uint8_t> w4(blocks * 16 * K / 2);
    for (auto& v : w) v = w8(rng);
    for (auto& v : w4) v = u4(rng) | (u4(rng) << 4);
    std::vector<float> x(M * K), y(M * N), y4(M * N), sc(blocks * 16, 0.01f), gs(blocks * 16 * K / 128, 0.02f), gm(blocks * 16 * K / 128, -0.1f);
    for (auto& v : x) v = nd(rng);
    std::vector<int32_t> sums(blocks * 16, 0);
    Int8Gemm g8{x.data(), M, K, N, w.data(), sums.data(), sc.data(), y.data()};
    portable::int8_gemm(g8);
    Int4Gemm g4{x.data(), M, K, N, w4.data(), gs.data(), gm.data(), y4.data()};
    portable::int4_gemm(g4);
    std::vector<int8_t> q(K);
    for (int64_t m = 0; m < M; ++m) {
      const float xs = quantize_row_portable(x.data() + m * K, q.data(), K);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t b = n / 16, r = n % 16;
        double s8 = 0, s4 = 0;
        for (int64_t k = 0; k < K; ++k) {
          s8 += double(w[b * K * 16 + (k / 4) * 64 + r * 4 + k % 4]) * q[k];
          const uint8_t byte = w4[b * (K / 2) * 16 + (k / 8) * 64 + r * 4 + k % 4];
          s4 += double(((k % 8) < 4 ? byte & 15 : byte >> 4) * 0.02 - 0.1) * q[k];
        }
        const double want8 = s8 * 0.01 * xs, want4 = s4 * xs;
        if (std::fabs(y[m * N + n] - want8) > 1e-3 * (1 + std::fabs(want8)) || std::fabs(y4[m * N + n] - want4) > 1e-3 * (1 + std::fabs(want4))) ++bad;
      }
    }
  }
  std::printf("%s: %d mismatches\n",
#if defined(LAB_SDOT)
              "sdot",
#else
              "scalar",
#endif
              bad);
  return bad != 0;
}
