// Packing torch tensors into the formats of gemm_formats.cpp (run once per weight, at load).

int64_t int4_group() { return INT4_GROUP; }

// weight int8 [N, K] (K a multiple of 4) -> (packed int8 [ceil(N/16) * K * 16], row sums int32 [N padded to 16]).
// The row sums undo the +128 shift of the VNNI levels' unsigned activations; the other levels ignore them.
std::vector<at::Tensor> int8_pack(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kChar, "int8_pack: an int8 [N, K] weight");
  TORCH_CHECK(weight.size(1) % 4 == 0, "int8_pack: K must be a multiple of 4");
  const auto w = weight.contiguous();
  const int64_t N = w.size(0), K = w.size(1), blocks = (N + ROWS - 1) / ROWS;
  auto packed = at::zeros({blocks * K * ROWS}, w.options());
  auto sums = at::zeros({blocks * ROWS}, w.options().dtype(at::kInt));
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

// u uint8 [N, K] in [0, 15], scales and mins fp32 [N, K / INT4_GROUP] -> (packed uint8 [blocks * K/2 * 16],
// group scales fp32 [blocks * K/INT4_GROUP * 16], group mins the same); rows padded to whole blocks with zeros.
std::vector<at::Tensor> int4_pack(const at::Tensor& u, const at::Tensor& scales, const at::Tensor& mins) {
  TORCH_CHECK(u.dim() == 2 && u.scalar_type() == at::kByte, "int4_pack: a uint8 [N, K] of values in [0, 15]");
  TORCH_CHECK(u.size(1) % INT4_GROUP == 0, "int4_pack: K must be a multiple of ", INT4_GROUP);
  const auto uc = u.contiguous();
  const auto sc = scales.to(at::kFloat).contiguous(), mc = mins.to(at::kFloat).contiguous();
  const int64_t N = uc.size(0), K = uc.size(1), groups = K / INT4_GROUP, blocks = (N + ROWS - 1) / ROWS;
  TORCH_CHECK(sc.numel() == N * groups && mc.numel() == N * groups, "int4_pack: one scale and min per row and group");
  auto packed = at::zeros({blocks * K / 2 * ROWS}, uc.options());
  auto gscales = at::zeros({blocks * groups * ROWS}, sc.options()), gmins = at::zeros_like(gscales);
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
