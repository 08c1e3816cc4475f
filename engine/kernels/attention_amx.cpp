#include "kernels/attention_amx.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define FP8S_HAVE_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define FP8S_HAVE_AMX 0
#endif

namespace fp8s::kernels {

#if FP8S_HAVE_AMX
namespace {

// Tiles (16 rows x 64 bytes each): accumulators of 16 x 16 FP32 (scores of 16 keys; output columns),
// A operands of 16 x 32 BF16 (queries over 32 of d; probabilities over 32 keys) and B operands in
// the tile unit's pair-interleaved layout (keys, values: packed once per head).
constexpr int kRows = 16;              // queries per block
constexpr int kKeyBlock = 32;          // keys per block (2 score tiles, one 32-key step of p v)
constexpr int kTile = 512;             // BF16 elements in one 16 x 64-byte B tile
constexpr int64_t kQueryChunk = 256;   // queries per work item

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool cpu_and_os_allow_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);  // F, BW, VL
  const bool amx = ((d >> 24) & 1) && ((d >> 22) & 1);                          // AMX-TILE, AMX-BF16
  if (!avx512 || !amx) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return false;  // AVX512-BF16
  // Linux hands out the 8 KB tile state only to a process that asks (arch_prctl XCOMP_PERM).
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

// K as score-tile B operands: kp[t][half][r][j][e] = K[16 t + j][32 half + 2 r + e] (0 past d/nk).
void pack_keys(const uint16_t* k, int64_t stride, int64_t nk, int64_t nk_pad, int64_t d, uint16_t* kp) {
  std::memset(kp, 0, static_cast<std::size_t>(nk_pad) * 64 * sizeof(uint16_t));
  for (int64_t j = 0; j < nk; ++j) {
    const uint16_t* row = k + j * stride;
    uint16_t* tile = kp + (j / 16) * 2 * kTile + (j % 16) * 2;
    for (int64_t c = 0; c < d; ++c) tile[(c / 32) * kTile + ((c % 32) / 2) * 32 + (c % 2)] = row[c];
  }
}

// V as output-tile B operands: vp[s][dt][r][c][e] = V[32 s + 2 r + e][16 dt + c] (0 past d/nk).
void pack_values(const uint16_t* v, int64_t stride, int64_t nk, int64_t nk_pad, int64_t d, int ndt, uint16_t* vp) {
  std::memset(vp, 0, static_cast<std::size_t>(nk_pad / 32) * ndt * kTile * sizeof(uint16_t));
  for (int64_t j = 0; j < nk; ++j) {
    const uint16_t* row = v + j * stride;
    uint16_t* step = vp + (j / 32) * ndt * kTile + ((j % 32) / 2) * 32 + (j % 2);
    for (int64_t c = 0; c < d; ++c) step[(c / 16) * kTile + (c % 16) * 2] = row[c];
  }
}

#define FP8S_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

// 2^x for x <= 0 (a score minus its row's maximum, in log2 units), clamped below at -126 (no
// denormals): 2^n · P(f), f = x - n in [-1/2, 1/2], P degree 5 in f·ln 2 (relative error < 3e-6).
FP8S_AMX_TARGET inline __m512 exp2_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.3333558e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

FP8S_AMX_TARGET inline __mmask16 lanes_below(int valid, int first) {
  const int n = std::clamp(valid - first, 0, 16);
  return static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
}

// Queries [q0, q1) of one head against its packed keys and values, 16 at a time, in two passes over
// the keys: the first finds each row's maximum score m, the second sums p = 2^(s·scale·log2 e - m)
// (<= 1) and p v without rescaling: the outputs accumulate on the tiles, the sums in vectors, and no
// horizontal reduction runs per block. Software-pipelined: the tile unit computes block kb + 1's
// scores while the vector unit turns block kb's into probabilities (tile registers are not renamed:
// each reuse waits for its last reader). Tiles: 0-1 scores, 2-4 output columns (d <= 48), 5 the A
// operand, 6-7 B operands.
FP8S_AMX_TARGET void attend_rows(const uint16_t* q, int64_t q_stride, const uint16_t* kp, const uint16_t* vp,
                                 uint16_t* out, int64_t out_stride, int64_t q0, int64_t q1, int64_t nk,
                                 int64_t nk_pad, int64_t d, int ndt, float scale) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = kRows;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t qp[2 * kRows * 32];
  alignas(64) float s[2][kRows * kKeyBlock];
  alignas(64) uint16_t p[kRows * kKeyBlock];
  alignas(64) float o[kRows * 48];
  alignas(64) float sum[kRows * 16];  // per row: 16 lanes of the sum of p
  float m[kRows];                     // each row's maximum score, in log2 units
  const float c = scale * 1.44269504088896341f;
  const __m512 c_v = _mm512_set1_ps(c);
  const int64_t blocks = nk_pad / kKeyBlock;
  const int last_valid = static_cast<int>(nk - (blocks - 1) * kKeyBlock);
  // the real keys among lanes [first, first + 16) of block kb (only the last block has padding)
  auto valid_lanes = [&](int64_t kb, int first) {
    return kb == blocks - 1 ? lanes_below(last_valid, first) : static_cast<__mmask16>(0xFFFF);
  };
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  auto scores = [&](int64_t kb) {  // tiles 0-1 = q kᵀ for keys [32 kb, 32 kb + 32)
    const uint16_t* kt = kp + kb * 4 * kTile;
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(5, qp, 64);
    _tile_loadd(6, kt, 64);
    _tile_loadd(7, kt + 2 * kTile, 64);
    _tile_dpbf16ps(0, 5, 6);
    _tile_dpbf16ps(1, 5, 7);
    _tile_loadd(5, qp + kRows * 32, 64);
    _tile_loadd(6, kt + kTile, 64);
    _tile_loadd(7, kt + 3 * kTile, 64);
    _tile_dpbf16ps(0, 5, 6);
    _tile_dpbf16ps(1, 5, 7);
  };
  for (int64_t qb = q0; qb < q1; qb += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, q1 - qb));
    std::memset(qp, 0, sizeof qp);
    for (int i = 0; i < rows; ++i) {
      const uint16_t* row = q + (qb + i) * q_stride;
      for (int64_t j = 0; j < d; ++j) qp[((j / 32) * kRows + i) * 32 + (j % 32)] = row[j];
    }
    // pass 1: each row's maximum score (valid keys only)
    __m512 mx[kRows];
    for (int i = 0; i < kRows; ++i) mx[i] = minus_inf;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      scores(kb);
      _tile_stored(0, s[0], kKeyBlock * 4);
      _tile_stored(1, s[0] + 16, kKeyBlock * 4);
      const __mmask16 m0 = valid_lanes(kb, 0), m1 = valid_lanes(kb, 16);
      for (int i = 0; i < kRows; ++i) {
        mx[i] = _mm512_mask_max_ps(mx[i], m0, mx[i], _mm512_load_ps(s[0] + i * kKeyBlock));
        mx[i] = _mm512_mask_max_ps(mx[i], m1, mx[i], _mm512_load_ps(s[0] + i * kKeyBlock + 16));
      }
    }
    for (int i = 0; i < kRows; ++i) m[i] = _mm512_reduce_max_ps(mx[i]) * c;  // scale > 0
    std::memset(sum, 0, sizeof sum);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    scores(0);
    for (int64_t kb = 0; kb < blocks; ++kb) {
      float* sb = s[kb & 1];
      _tile_stored(0, sb, kKeyBlock * 4);
      _tile_stored(1, sb + 16, kKeyBlock * 4);
      if (kb + 1 < blocks) scores(kb + 1);
      const __mmask16 m0 = valid_lanes(kb, 0), m1 = valid_lanes(kb, 16);
      for (int i = 0; i < kRows; ++i) {
        const __m512 shift = _mm512_set1_ps(m[i]);
        const __m512 x0 = _mm512_maskz_mov_ps(m0, exp2_ps(_mm512_fmsub_ps(_mm512_load_ps(sb + i * kKeyBlock), c_v, shift)));
        const __m512 x1 = _mm512_maskz_mov_ps(m1, exp2_ps(_mm512_fmsub_ps(_mm512_load_ps(sb + i * kKeyBlock + 16), c_v, shift)));
        _mm512_store_ps(sum + 16 * i, _mm512_add_ps(_mm512_load_ps(sum + 16 * i), _mm512_add_ps(x0, x1)));
        _mm512_store_si512(p + i * kKeyBlock, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
      }
      // o += p v, 16 output columns per tile (2-4)
      const uint16_t* vt = vp + kb * ndt * kTile;
      _tile_loadd(5, p, kKeyBlock * 2);
      _tile_loadd(6, vt, 64);
      _tile_dpbf16ps(2, 5, 6);
      if (ndt > 1) {
        _tile_loadd(7, vt + kTile, 64);
        _tile_dpbf16ps(3, 5, 7);
      }
      if (ndt > 2) {
        _tile_loadd(6, vt + 2 * kTile, 64);
        _tile_dpbf16ps(4, 5, 6);
      }
    }
    _tile_stored(2, o, 48 * 4);
    _tile_stored(3, o + 16, 48 * 4);
    _tile_stored(4, o + 32, 48 * 4);
    for (int i = 0; i < rows; ++i) {
      const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_load_ps(sum + 16 * i)));
      uint16_t* dst = out + (qb + i) * out_stride;
      for (int dt = 0; dt < ndt; ++dt) {
        const __m256bh y = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_load_ps(o + i * 48 + 16 * dt), inv));
        _mm256_mask_storeu_epi16(dst + 16 * dt, lanes_below(static_cast<int>(d), 16 * dt), (__m256i)y);
      }
    }
  }
  _tile_release();
}

}  // namespace

bool amx_attention_available() {
  static const bool ok = cpu_and_os_allow_amx();
  return ok;
}

void attention_bf16_amx(const Bf16View& q, const Bf16View& k, const Bf16View& v, const Bf16Out& out,
                        int64_t batch, int64_t heads, int64_t nq, int64_t nk, int64_t d, float scale) {
  const int64_t nk_pad = (nk + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  const int ndt = static_cast<int>((d + 15) / 16);
  const int64_t chunks = (nq + kQueryChunk - 1) / kQueryChunk;
  at::parallel_for(0, batch * heads * chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint16_t> kp(static_cast<std::size_t>(nk_pad) * 64), vp(static_cast<std::size_t>(nk_pad / 32) * ndt * kTile);
    int64_t packed = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t bh = item / chunks, chunk = item % chunks, b = bh / heads, h = bh % heads;
      if (bh != packed) {
        pack_keys(k.data + b * k.batch_stride + h * k.head_stride, k.token_stride, nk, nk_pad, d, kp.data());
        pack_values(v.data + b * v.batch_stride + h * v.head_stride, v.token_stride, nk, nk_pad, d, ndt, vp.data());
        packed = bh;
      }
      const int64_t q0 = chunk * kQueryChunk, q1 = std::min(nq, q0 + kQueryChunk);
      attend_rows(q.data + b * q.batch_stride + h * q.head_stride, q.token_stride, kp.data(), vp.data(),
                  out.data + b * out.batch_stride + h * out.head_stride, out.token_stride, q0, q1, nk, nk_pad, d,
                  ndt, scale);
    }
  });
}

#else

bool amx_attention_available() { return false; }
void attention_bf16_amx(const Bf16View&, const Bf16View&, const Bf16View&, const Bf16Out&, int64_t, int64_t,
                        int64_t, int64_t, int64_t, float) {
  // callers check amx_attention_available(); an output left unwritten would be silent garbage
  throw std::logic_error("attention_bf16_amx: this build has no AMX kernel (check amx_attention_available)");
}

#endif

}  // namespace fp8s::kernels
