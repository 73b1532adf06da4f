// The lab's packed int8 and int4 projections as torch ops, and the one-call decode step that runs them: each op
// checks its tensors and hands them to the GEMM of the level this build is for (gemm_avx512.cpp, gemm_avx2.cpp, or
// gemm_portable.cpp), in the formats of gemm_formats.cpp.

// The dispatch level this build's int8 and int4 GEMMs run at, as `kernels` columns name it.
std::string int8_isa() {
#if defined(LAB_512)
  return "avx512_vnni";
#elif defined(LAB_VNNI256)
  return "avx_vnni";
#elif defined(LAB_256)
  return "avx2";
#elif defined(LAB_SDOT)
  return "portable+sdot";  // ARM64 with the dot-product extension
#else
  return "portable";
#endif
}

static void int8_gemm(const Int8Gemm& c) {
#if defined(LAB_512)
  avx512::int8_gemm(c);
#elif defined(LAB_256)
  avx2::int8_gemm(c);
#else
  portable::int8_gemm(c);
#endif
}

static void int4_gemm(const Int4Gemm& c) {
#if defined(LAB_512)
  avx512::int4_gemm(c);
#elif defined(LAB_256)
  avx2::int4_gemm(c);
#else
  portable::int4_gemm(c);
#endif
}

// x fp32 [..., K] . packed int8 weight (int8_pack) -> y fp32 [..., N], y = (x . W^T) * scales[n];
// scales: fp32, one per output row, zero-padded to whole blocks of 16 (K a multiple of 16).
static at::Tensor int8_linear_at(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& sums,
                                    const at::Tensor& scales, int64_t N, void (*gemm)(const Int8Gemm&)) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "int8_linear: fp32 activations");
  const auto xc = x.contiguous();
  const int64_t K = xc.size(-1), M = xc.numel() / K, blocks = (N + ROWS - 1) / ROWS;
  TORCH_CHECK(K % 16 == 0 && packed.numel() == blocks * K * ROWS, "int8_linear: weight packed for another shape");
  // scales and sums padded to whole blocks (as int8_pack makes them), so an epilogue loads 16 at a time
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == blocks * ROWS, "int8_linear: padded scales");
  TORCH_CHECK(sums.numel() == blocks * ROWS, "int8_linear: padded row sums");
  auto y = rows_of(xc, N);
  gemm({xc.data_ptr<float>(), M, K, N, packed.data_ptr<int8_t>(), sums.data_ptr<int32_t>(), scales.data_ptr<float>(),
        y.data_ptr<float>()});
  return y;
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& sums,
                          const at::Tensor& scales, int64_t N) {
  return int8_linear_at(x, packed, sums, scales, N, int8_gemm);
}

// The same GEMMs at the portable level, whatever this build's level: what every level is compared with in tests.
at::Tensor int8_linear_portable(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& sums,
                                   const at::Tensor& scales, int64_t N) {
  return int8_linear_at(x, packed, sums, scales, N, portable::int8_gemm);
}

// x fp32 [..., K] . int4-packed weight (int4_pack) -> y fp32 [..., N].
static at::Tensor int4_linear_at(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& gscales,
                                    const at::Tensor& gmins, int64_t N, void (*gemm)(const Int4Gemm&)) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "int4_linear: fp32 activations");
  const auto xc = x.contiguous();
  const int64_t K = xc.size(-1), M = xc.numel() / K, blocks = (N + ROWS - 1) / ROWS, groups = K / INT4_GROUP;
  TORCH_CHECK(K % INT4_GROUP == 0 && packed.numel() == blocks * K / 2 * ROWS, "int4_linear: weight packed for another shape");
  TORCH_CHECK(gscales.numel() == blocks * groups * ROWS && gmins.numel() == blocks * groups * ROWS,
              "int4_linear: group scales or mins of another shape");
  auto y = rows_of(xc, N);
  gemm({xc.data_ptr<float>(), M, K, N, packed.data_ptr<uint8_t>(), gscales.data_ptr<float>(), gmins.data_ptr<float>(),
        y.data_ptr<float>()});
  return y;
}

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& gscales,
                          const at::Tensor& gmins, int64_t N) {
  return int4_linear_at(x, packed, gscales, gmins, N, int4_gemm);
}

at::Tensor int4_linear_portable(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& gscales,
                                   const at::Tensor& gmins, int64_t N) {
  return int4_linear_at(x, packed, gscales, gmins, N, portable::int4_gemm);
}

// One projection in either packed format, told apart by the packed weights' dtype: int8 (int8_pack: packed, row
// sums, scales) or int4 (int4_pack: packed uint8, group scales, group mins).
static at::Tensor packed_linear(const at::Tensor& x, const at::Tensor* w, int64_t N) {
  return w[0].scalar_type() == at::kByte ? int4_linear(x, w[0], w[1], w[2], N) : int8_linear(x, w[0], w[1], w[2], N);
}

// A whole int8 or int4 decode step of the GPT in one call: for each layer, the same kernels the lab's Python loop
// calls one by one (kernels.cpp's rms_norm, decode_attention, add_rms_norm, silu_mul; int8_linear or int4_linear
// above), then the final norm. Why: from Python a step is 9 calls per layer, 180 in all, and at about 7 us each
// their dispatch was ~1.3 ms of a ~9 ms batch-1 step; here it is one.
//   x [B, 1, dim] fp32; layers: 14 tensors per layer (norm1, qkv's 3 packed tensors, o's 3, norm2, gate_up's 3,
//   down's 3); out: the 4 projections' output sizes; caches: k, v per layer; rot, slot, end, valid as for
//   decode_attention. Returns the final-normed last hidden state [B, dim].
at::Tensor decode_step_packed(at::Tensor x, const std::vector<at::Tensor>& layers,
                                 const std::vector<int64_t>& out, const std::vector<at::Tensor>& caches,
                                 const at::Tensor& rot, int64_t slot, int64_t end, const at::Tensor& valid,
                                 double eps, const at::Tensor& final_norm) {
  constexpr size_t PER_LAYER = 14;
  const size_t n_layers = caches.size() / 2;
  TORCH_CHECK(layers.size() == n_layers * PER_LAYER && out.size() == 4, "decode_step_packed: 14 tensors per layer");
  const int64_t B = x.size(0), dim = x.size(-1);
  for (size_t l = 0; l < n_layers; ++l) {
    const at::Tensor* w = layers.data() + l * PER_LAYER;
    const auto qkv = packed_linear(rms_norm(x, w[0], eps), w + 1, out[0]);
    const auto y = decode_attention(qkv.view({B, -1}), rot, caches[2 * l], caches[2 * l + 1], slot, end, valid);
    const auto sum_normed = add_rms_norm(x, packed_linear(y.view({B, 1, dim}), w + 4, out[1]), w[7], eps);
    const auto gate_up = packed_linear(sum_normed[1], w + 8, out[2]);
    x = sum_normed[0] + packed_linear(silu_mul(gate_up), w + 11, out[3]);
  }
  return rms_norm(x.select(1, x.size(1) - 1).contiguous(), final_norm, eps);
}
