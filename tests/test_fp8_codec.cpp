// FP8 codec against an independent reference: the OCP formula for decoding and a nearest-value
// search over all codes (ties to the even code) for encoding, exhaustively (issue 2).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "fp8/codec.h"
#include "fp8/quantize.h"
#include "support.h"

using namespace fp8s;

namespace {

struct FormatSpec {
  Fp8Format format;
  int exp_bits, mant_bits, bias;
  uint8_t max_code;  // largest finite magnitude code
  const char* name;
};
const FormatSpec kFormats[] = {{Fp8Format::E4M3FN, 4, 3, 7, 0x7E, "E4M3FN"},
                               {Fp8Format::E5M2, 5, 2, 15, 0x7B, "E5M2"}};

// OCP 8-bit floating point specification, written out directly.
double ocp_value(uint8_t code, const FormatSpec& f) {
  const int s = code >> 7;
  const int e = (code >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = code & ((1 << f.mant_bits) - 1);
  const double sign = s ? -1.0 : 1.0;
  if (f.format == Fp8Format::E4M3FN && e == 15 && m == 7) return std::nan("");
  if (f.format == Fp8Format::E5M2 && e == 31) {
    return m == 0 ? sign * INFINITY : std::nan("");
  }
  if (e == 0) return sign * std::pow(2.0, 1 - f.bias) * (m / std::pow(2.0, f.mant_bits));
  return sign * std::pow(2.0, e - f.bias) * (1.0 + m / std::pow(2.0, f.mant_bits));
}

// Reference encoder: nearest finite value, ties to the even code; saturation as docs/architecture.md says.
class ReferenceEncoder {
 public:
  explicit ReferenceEncoder(const FormatSpec& f) : f_(f) {
    for (int c = 0; c <= f.max_code; ++c) values_.push_back(ocp_value(static_cast<uint8_t>(c), f));
  }
  // Returns the code, or -1 for "any NaN code".
  int encode(float x) const {
    if (std::isnan(x)) return -1;
    const int sign = std::signbit(x) ? 0x80 : 0;
    const long double a = std::fabs(static_cast<long double>(x));
    if (std::isinf(x)) return sign | (f_.format == Fp8Format::E5M2 ? 0x7C : f_.max_code);
    if (a >= values_.back()) return sign | f_.max_code;
    auto it = std::upper_bound(values_.begin(), values_.end(), static_cast<double>(a));
    const int hi = static_cast<int>(it - values_.begin());
    const int lo = hi - 1;
    const long double dlo = a - values_[lo], dhi = values_[hi] - a;
    int code = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | code;
  }
  const std::vector<double>& values() const { return values_; }

 private:
  FormatSpec f_;
  std::vector<double> values_;
};

float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void check_encode(const ReferenceEncoder& ref, const FormatSpec& f, float x, int* failures) {
  const int want = ref.encode(x);
  const uint8_t got = encode_fp8(x, f.format);
  const bool ok = want < 0 ? fp8_is_nan(got, f.format) : got == want;
  if (!ok && (*failures)++ < 5) {
    qWarning("%s encode(%.9g) = 0x%02X, want 0x%02X", f.name, x, got, want);
  }
}

}  // namespace

// Every 16-bit pattern of a type, widened by `to_f32`, encoded in each format against the reference
// encoder: the failures.
template <class Widen>
int failures_over_16bit(Widen to_f32) {
  int failures = 0;
  for (const auto& f : kFormats) {
    ReferenceEncoder ref(f);
    for (uint32_t bits = 0; bits < 65536; ++bits) check_encode(ref, f, to_f32(static_cast<uint16_t>(bits)), &failures);
  }
  return failures;
}

class TestFp8Codec : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void decodesAll256CodesToOcpValues() {
    for (const auto& f : kFormats) {
      const float* table = fp8_decode_table(f.format);
      for (int c = 0; c < 256; ++c) {
        const double want = ocp_value(static_cast<uint8_t>(c), f);
        const float got = decode_fp8(static_cast<uint8_t>(c), f.format);
        QCOMPARE(table[c], got);
        if (std::isnan(want)) {
          QVERIFY2(std::isnan(got), qPrintable(QString("%1 code %2").arg(f.name).arg(c)));
          QVERIFY(fp8_is_nan(static_cast<uint8_t>(c), f.format));
        } else {
          QCOMPARE(static_cast<double>(got), want);
          QCOMPARE(std::signbit(got), std::signbit(want));
          QVERIFY(!fp8_is_nan(static_cast<uint8_t>(c), f.format));
        }
      }
    }
    QCOMPARE(decode_fp8(0x7E, Fp8Format::E4M3FN), 448.0f);
    QCOMPARE(decode_fp8(0x7B, Fp8Format::E5M2), 57344.0f);
    QCOMPARE(decode_fp8(0x01, Fp8Format::E4M3FN), std::ldexp(1.0f, -9));
    QCOMPARE(decode_fp8(0x01, Fp8Format::E5M2), std::ldexp(1.0f, -16));
    QVERIFY(std::isinf(decode_fp8(0xFC, Fp8Format::E5M2)));
  }

  void encodesEveryFp16Pattern() { QCOMPARE(failures_over_16bit([](uint16_t b) { return f16_to_f32(b); }), 0); }
  void encodesEveryBf16Pattern() { QCOMPARE(failures_over_16bit([](uint16_t b) { return bf16_to_f32(b); }), 0); }

  void encodesTenMillionRandomFp32() {
    std::mt19937_64 rng(20261130);
    for (const auto& f : kFormats) {
      ReferenceEncoder ref(f);
      int failures = 0;
      for (int i = 0; i < 5'000'000; ++i) {
        // half: any bit pattern; half: magnitudes spread over the format's range and beyond
        check_encode(ref, f, f32_from_bits(static_cast<uint32_t>(rng())), &failures);
        const double e = std::uniform_real_distribution<double>(-20.0, 18.0)(rng);
        const float v = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(e));
        check_encode(ref, f, v, &failures);
      }
      QCOMPARE(failures, 0);
    }
  }

  void encodesEveryMidpointAndItsNeighbours() {
    for (const auto& f : kFormats) {
      ReferenceEncoder ref(f);
      const auto& v = ref.values();
      int failures = 0;
      int exact_ties = 0;
      for (std::size_t i = 0; i + 1 < v.size(); ++i) {
        const float mid = static_cast<float>((v[i] + v[i + 1]) / 2);  // exact in FP32
        QCOMPARE(static_cast<double>(mid), (v[i] + v[i + 1]) / 2);
        ++exact_ties;
        for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
          check_encode(ref, f, x, &failures);
          check_encode(ref, f, -x, &failures);
        }
        // the tie itself goes to the even code
        const uint8_t c = encode_fp8(mid, f.format);
        QCOMPARE(c % 2, 0);
      }
      QVERIFY(exact_ties > 100);
      QCOMPARE(failures, 0);
    }
  }

  void decodeThenEncodeIsIdentity() {
    for (const auto& f : kFormats) {
      for (int c = 0; c < 256; ++c) {
        if (fp8_is_nan(static_cast<uint8_t>(c), f.format)) continue;
        QCOMPARE(int(encode_fp8(decode_fp8(static_cast<uint8_t>(c), f.format), f.format)), c);
      }
    }
  }

  void specialValues() {
    for (const auto& f : kFormats) {
      QCOMPARE(int(encode_fp8(-0.0f, f.format)), 0x80);
      QCOMPARE(int(encode_fp8(0.0f, f.format)), 0x00);
      QVERIFY(fp8_is_nan(encode_fp8(std::nanf(""), f.format), f.format));
      QVERIFY(fp8_is_nan(encode_fp8(-std::nanf(""), f.format), f.format));
      QCOMPARE(int(encode_fp8(1e30f, f.format)), int(f.max_code));
      QCOMPARE(int(encode_fp8(-1e30f, f.format)), 0x80 | f.max_code);
      QCOMPARE(int(encode_fp8(-1e-30f, f.format)), 0x80);  // underflow keeps the sign
    }
    QCOMPARE(int(encode_fp8(INFINITY, Fp8Format::E4M3FN)), 0x7E);
    QCOMPARE(int(encode_fp8(-INFINITY, Fp8Format::E4M3FN)), 0xFE);
    QCOMPARE(int(encode_fp8(INFINITY, Fp8Format::E5M2)), 0x7C);
    QCOMPARE(int(encode_fp8(-INFINITY, Fp8Format::E5M2)), 0xFC);
    QCOMPARE(int(encode_fp8(470.0f, Fp8Format::E4M3FN)), 0x7E);   // would round to 480 = NaN code
    QCOMPARE(int(encode_fp8(61440.0f, Fp8Format::E5M2)), 0x7B);   // would round to inf
  }

  void bulkPathsMatchScalar() {
    std::mt19937 rng(7);
    const std::size_t n = 300'001;  // odd, several parallel chunks
    std::vector<float> x(n);
    for (auto& v : x) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
    x[5] = INFINITY;
    x[6] = -0.0f;
    x[7] = std::nanf("");
    std::vector<uint16_t> b16(n), h16(n);
    f32_to_bf16(x.data(), b16.data(), n);
    f32_to_f16(x.data(), h16.data(), n);
    for (std::size_t i = 0; i < n; i += 997) {
      QCOMPARE(b16[i], f32_to_bf16(x[i]));
      QCOMPARE(h16[i], f32_to_f16(x[i]));
    }
    for (const auto& f : kFormats) {
      for (float divisor : {1.0f, 0.37f}) {
        std::vector<uint8_t> a(n), b(n), c(n);
        encode_f32_to_fp8(x.data(), a.data(), n, f.format, divisor);
        encode_bf16_to_fp8(b16.data(), b.data(), n, f.format, divisor);
        encode_f16_to_fp8(h16.data(), c.data(), n, f.format, divisor);
        for (std::size_t i = 0; i < n; ++i) {
          const auto same = [&](uint8_t got, float src) {
            const uint8_t want = encode_fp8(src / divisor, f.format);
            return got == want || (fp8_is_nan(got, f.format) && fp8_is_nan(want, f.format));
          };
          if (!same(a[i], x[i]) || !same(b[i], bf16_to_f32(b16[i])) || !same(c[i], f16_to_f32(h16[i]))) {
            QFAIL(qPrintable(QString("%1 bulk encode differs at %2").arg(f.name).arg(i)));
          }
        }
        for (float scale : {1.0f, 0.01f}) {
          std::vector<float> d32(n);
          std::vector<uint16_t> dbf(n), dh(n);
          decode_fp8_to_f32(a.data(), d32.data(), n, f.format, scale);
          decode_fp8_to_bf16(a.data(), dbf.data(), n, f.format, scale);
          decode_fp8_to_f16(a.data(), dh.data(), n, f.format, scale);
          for (std::size_t i = 0; i < n; ++i) {
            const float want = decode_fp8(a[i], f.format) * scale;
            if (std::isnan(want)) {
              QVERIFY(std::isnan(d32[i]) && std::isnan(bf16_to_f32(dbf[i])) && std::isnan(f16_to_f32(dh[i])));
              continue;
            }
            if (d32[i] != want || dbf[i] != f32_to_bf16(want) || dh[i] != f32_to_f16(want)) {
              QFAIL(qPrintable(QString("%1 bulk decode differs at %2").arg(f.name).arg(i)));
            }
          }
        }
      }
    }
  }

  // Every code through the bulk BF16 decode (a table lookup on AVX-512 for spans of 4096 and
  // more, 32 codes a step, then a scalar tail), against the scalar decode rounded to BF16.
  void bulkBf16DecodeCoversEveryCode() {
    const std::size_t n = 256 * 97 + 13;
    std::vector<uint8_t> codes(n);
    std::mt19937 rng(11);
    for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>((i * 37 + rng() % 3) & 0xFF);
    for (const auto& f : kFormats) {
      for (float scale : {1.0f, 0.0037f, 3.5f}) {
        std::vector<uint16_t> out(n);
        decode_fp8_to_bf16(codes.data(), out.data(), n, f.format, scale);
        for (std::size_t i = 0; i < n; ++i) {
          const float want = decode_fp8(codes[i], f.format) * scale;
          const bool ok = std::isnan(want) ? std::isnan(bf16_to_f32(out[i])) : out[i] == f32_to_bf16(want);
          if (!ok) QFAIL(qPrintable(QString("%1 code %2 scale %3: %4").arg(f.name).arg(codes[i]).arg(scale).arg(out[i])));
        }
      }
    }
  }

  void fp8ValuesConvertExactlyTo16Bit() {
    for (const auto& f : kFormats) {
      for (int c = 0; c < 256; ++c) {
        const float v = decode_fp8(static_cast<uint8_t>(c), f.format);
        if (std::isnan(v)) continue;
        QCOMPARE(bf16_to_f32(f32_to_bf16(v)), v);
        QCOMPARE(f16_to_f32(f32_to_f16(v)), v);
      }
    }
  }

  void quantizeScales() {
    const int64_t rows = 3, cols = 50;
    std::vector<float> w(rows * cols);
    std::mt19937 rng(3);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        w[r * cols + c] = r == 1 ? 0.0f : std::normal_distribution<float>(0.0f, r == 0 ? 1e-3f : 5.0f)(rng);
      }
    }
    for (const auto& f : kFormats) {
      std::vector<uint8_t> q(w.size());
      QVERIFY(quantize_weight(w.data(), rows, rows * cols, f.format, Fp8Scale::None, q.data()).empty());
      for (std::size_t i = 0; i < w.size(); ++i) QCOMPARE(q[i], encode_fp8(w[i], f.format));

      auto s = quantize_weight(w.data(), rows, rows * cols, f.format, Fp8Scale::Tensor, q.data());
      QCOMPARE(s.size(), std::size_t(1));
      const float amax = std::fabs(*std::max_element(w.begin(), w.end(), [](float a, float b) {
        return std::fabs(a) < std::fabs(b);
      }));
      QCOMPARE(s[0], amax / fp8_max_finite(f.format));
      for (std::size_t i = 0; i < w.size(); ++i) QCOMPARE(q[i], encode_fp8(w[i] / s[0], f.format));

      s = quantize_weight(w.data(), rows, rows * cols, f.format, Fp8Scale::Channel, q.data());
      QCOMPARE(s.size(), std::size_t(rows));
      QCOMPARE(s[1], 1.0f);  // all-zero row
      const double rel = f.format == Fp8Format::E4M3FN ? 1.0 / 16 : 1.0 / 8;  // half ulp at 1.x
      for (int64_t r = 0; r < rows; ++r) {
        float row_amax = 0;
        for (int64_t c = 0; c < cols; ++c) row_amax = std::max(row_amax, std::fabs(w[r * cols + c]));
        for (int64_t c = 0; c < cols; ++c) {
          const float back = decode_fp8(q[r * cols + c], f.format) * s[r];
          QVERIFY(std::fabs(back - w[r * cols + c]) <= rel * row_amax);
        }
      }
    }
    std::vector<float> zeros(8, 0.0f);
    std::vector<uint8_t> q(8);
    QCOMPARE(quantize_weight(zeros.data(), 1, 8, Fp8Format::E4M3FN, Fp8Scale::Tensor, q.data())[0], 1.0f);
  }
};

QTEST_GUILESS_MAIN(TestFp8Codec)
#include "test_fp8_codec.moc"
