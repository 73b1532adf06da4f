"""The peak rate of the instructions an AVX2 byte dot product is made of, on one core of this CPU: `vpmaddubsw`
(32 byte products a ymm instruction), `vpmaddwd` (the widening to int32 without VNNI), both interleaved (do they
share a port?), and fp32 FMA for comparison. With the lab's many-rows int8 form (one of each per 32 products) the
interleaved rate bounds what 2 cores can do: the compute floor of a prefill, a decoder or a vocoder pass on AVX2.

    python scripts/probes/byte_product_peak.py

Needs a C++ compiler (the one the lab's kernels are built with). Eight independent chains per instruction, so the
rate is the port's throughput, not the instruction's latency; the chains' loops are unrolled so that they stay in
registers. Until 2026-12-06 they were not: at -O2 each step loaded and stored its chain, and the probe timed those
round trips (on a Zen 4 core held to AVX2, 1.5-1.7 G `vpmaddubsw` a second against 4.5 unrolled; FMA 1.4-1.6 against
5.6: docs/measurements/2026-12-06-avx2-only-zen4.md)."""
import pathlib
import subprocess
import tempfile

SOURCE = r"""
#include <immintrin.h>
#include <chrono>
#include <cstdio>
static volatile int sink;
template <class F> static double per_ns(F body, long n, int instructions) {
  auto t0 = std::chrono::steady_clock::now();
  body(n);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return n * 8.0 * instructions / s / 1e9;
}
int main() {
  const long n = 40000000;
  const __m256i w = _mm256_set1_epi8(5), ones = _mm256_set1_epi16(1);
  double maddubs = per_ns([&](long n) {
    __m256i a[8]; _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) a[j] = _mm256_set1_epi8(j + 1);
    for (long i = 0; i < n; ++i) _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) a[j] = _mm256_maddubs_epi16(a[j], w);
    for (int j = 0; j < 8; ++j) sink += _mm256_extract_epi32(a[j], 0); }, n, 1);
  double madd = per_ns([&](long n) {
    __m256i a[8]; _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) a[j] = _mm256_set1_epi16(j + 1);
    for (long i = 0; i < n; ++i) _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) a[j] = _mm256_madd_epi16(a[j], ones);
    for (int j = 0; j < 8; ++j) sink += _mm256_extract_epi32(a[j], 0); }, n, 1);
  double both = per_ns([&](long n) {
    __m256i a[4], b[4]; for (int j = 0; j < 4; ++j) a[j] = b[j] = _mm256_set1_epi8(j + 1);
    for (long i = 0; i < n; ++i) _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) {
      a[j] = _mm256_maddubs_epi16(a[j], w); b[j] = _mm256_madd_epi16(b[j], ones); }
    for (int j = 0; j < 4; ++j) sink += _mm256_extract_epi32(a[j], 0) + _mm256_extract_epi32(b[j], 0); }, n, 1);
  double fma = per_ns([&](long n) {
    __m256 a[8]; _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) a[j] = _mm256_set1_ps(1.f + j);
    const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
    for (long i = 0; i < n; ++i) _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
    for (int j = 0; j < 8; ++j) sink += (int)_mm256_cvtss_f32(a[j]); }, n, 1);
  std::printf("vpmaddubsw ymm            %.2f G/s: %.1f G byte products\n", maddubs, 32 * maddubs);
  std::printf("vpmaddwd ymm              %.2f G/s: %.1f G int16 products\n", madd, 16 * madd);
  std::printf("both interleaved          %.2f G/s (%s)\n", both, both < 1.3 * (maddubs < madd ? maddubs : madd)
              ? "the same ports: they queue for them" : "separate ports");
  std::printf("one of each per 32 bytes  %.1f G byte products a core (the many-rows int8 form's bound)\n",
              32 * both / 2);
  std::printf("vfmadd231ps ymm           %.2f G/s: %.1f G fp32 products\n", fma, 8 * fma);
  return 0;
}
"""

with tempfile.TemporaryDirectory() as tmp:
    src, exe = pathlib.Path(tmp, "peak.cpp"), pathlib.Path(tmp, "peak")
    src.write_text(SOURCE)
    subprocess.run(["c++", "-O2", "-mavx2", "-mfma", "-o", str(exe), str(src)], check=True)
    print(pathlib.Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0].strip(" :\t"), "| one core")
    subprocess.run([str(exe)], check=True)
