// ChatTTS's usual logits chain in one call: the repetition penalty, then top-P and top-K (sampler.py's
// `Sampler._penalty` and `_top_p_top_k`, and `sample_rows`), then the min-new-token end mask, on logits already
// divided by the temperature. Softmax and the draw stay torch's, so the draw uses the generator as stock does.
//
// Why: as torch ops the chain is about 25 calls on a [4, 626] tensor, each costing its dispatch more than its
// arithmetic: 0.75-0.85 ms of a 10.65 ms one-row int8 step on a 2-core AVX2-only EPYC, more at 8 rows.
//
// Numerics: the penalty's factor is looked up in a table that torch.pow made at the same positions (`alphas`:
// table[n][row][v] = pow(penalty, n) for each count n), so the penalised logits are the torch path's, bit for bit;
// the masked ones are the same values; the top-P cut is summed in float64 and compared in float32 as there (only the
// order of the log-sum-exp's sum differs, far below the float32 rounding the comparison sees).

#include <functional>  // std::greater

// logits [R, V] fp32, changed in place and returned. freqs, alphas: one entry per item of q = R / items rows (no
// entries: no penalty): the token counts [q, V] int64 and their factors [W + 1, q, V] fp32 (counts up to W).
// limit [R] fp32 (1 - top_p), top_k [R] int64, keep: the largest always kept, eos: the end token, masked in rows
// whose `early` [R] bool is set.
at::Tensor sampling_filter(at::Tensor logits, const std::vector<at::Tensor>& freqs,
                              const std::vector<at::Tensor>& alphas, const at::Tensor& limit, const at::Tensor& top_k,
                              int64_t keep, int64_t eos, const at::Tensor& early) {
  check_fp32(logits, "sampling_filter: logits");
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous(), "sampling_filter: contiguous logits [rows, vocab]");
  const int64_t R = logits.size(0), V = logits.size(1), items = static_cast<int64_t>(freqs.size());
  TORCH_CHECK(alphas.size() == freqs.size() && (items == 0 || R % items == 0),
              "sampling_filter: one count table a row group");
  TORCH_CHECK(limit.scalar_type() == at::kFloat && limit.numel() == R && top_k.scalar_type() == at::kLong &&
              top_k.numel() == R && early.scalar_type() == at::kBool && early.numel() == R,
              "sampling_filter: limit fp32, top_k int64 and early bool, one per row");
  TORCH_CHECK(eos >= 0 && eos < V, "sampling_filter: end token outside the vocabulary");
  const int64_t q = items ? R / items : R;
  for (int64_t i = 0; i < items; ++i)
    TORCH_CHECK(freqs[i].scalar_type() == at::kLong && freqs[i].is_contiguous() && freqs[i].numel() == q * V &&
                alphas[i].scalar_type() == at::kFloat && alphas[i].is_contiguous() && alphas[i].dim() == 3 &&
                alphas[i].size(1) == q && alphas[i].size(2) == V,
                "sampling_filter: counts [q, vocab] int64 and factors [W + 1, q, vocab] fp32 per item");
  const auto lc = limit.contiguous(), kc = top_k.contiguous(), ec = early.contiguous();
  const float* lim = lc.data_ptr<float>();
  const int64_t* ks = kc.data_ptr<int64_t>();
  const bool* ea = ec.data_ptr<bool>();
  const int64_t k_max = std::min(*std::max_element(ks, ks + R), V);
  TORCH_CHECK(k_max > 0, "sampling_filter: top_k must be at least 1");
  const float minus_inf = -std::numeric_limits<float>::infinity();
  // rows are independent: 8 samplers' 32 rows run on two threads, one sampler's 4 on one
  at::parallel_for(0, R, 8, [&](int64_t first, int64_t last) {
    std::vector<float> top(V);
    for (int64_t r = first; r < last; ++r) {
      float* x = logits.data_ptr<float>() + r * V;
      if (items) {  // x * alpha where x < 0, else x / alpha (stock's repetition penalty)
        const int64_t item = r / q, row = r % q, W = alphas[item].size(0) - 1;
        const int64_t* count = freqs[item].data_ptr<int64_t>() + row * V;
        const float* table = alphas[item].data_ptr<float>() + row * V;
        for (int64_t v = 0; v < V; ++v) {
          TORCH_CHECK(count[v] >= 0 && count[v] <= W, "sampling_filter: a token count beyond the penalty's window");
          const float a = table[count[v] * q * V + v];
          x[v] = x[v] < 0 ? x[v] * a : x[v] / a;
        }
      }
      // the k_max largest, largest first
      std::copy(x, x + V, top.begin());
      std::partial_sort(top.begin(), top.begin() + k_max, top.end(), std::greater<float>());
      // log-sum-exp of the whole row in float64, as torch.logsumexp(x.double()) computes it
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(x[v]));
      const double shift = std::isinf(m) ? 0.0 : m;
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v]) - shift);
      const double lse = std::log(sum) + shift;
      // kept: the first `keep`, and those whose mass at or below them (1 - the mass ranked above) is > 1 - top_p,
      // within the row's own top_k; counted as the torch path counts them
      double cumulative = 0.0;
      int64_t kept = 0;
      for (int64_t j = 0; j < k_max; ++j) {
        const double p = std::exp(static_cast<double>(top[j]) - lse);
        cumulative += p;
        const float at_or_below = static_cast<float>(1.0 - (cumulative - p));
        kept += j < keep || (at_or_below > lim[r] && j < ks[r]);
      }
      const float threshold = top[std::max<int64_t>(kept, 1) - 1];  // the smallest survivor
      for (int64_t v = 0; v < V; ++v)
        if (x[v] < threshold) x[v] = minus_inf;
      if (ea[r]) x[eos] = minus_inf;
    }
  });
  return logits;
}
