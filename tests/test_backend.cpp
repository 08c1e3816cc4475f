// The backend seam (backend/backend.h) on this build's LibTorch: native float8 against the table
// codec on every FP16 bit pattern, fused attention against the sliced path, device choice errors,
// and device placement: a forward on the meta device catches any tensor a module creates on the
// CPU instead of on its input's device (what would fail on a user's GPU and never here).
#include <QtTest>
#include <torch/library.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "backend/backend.h"
#include "core/compute_choice.h"
#include "core/error.h"
#include "core/threads.h"
#include "memory/host_pinning.h"
#include "memory/process_memory.h"
#include "support.h"
#include "fp8/codec.h"
#include "fp8/quantize.h"
#include "kernels/attention_amx.h"
#include "backend/kernel_options.h"
#include "demo/demo_model.h"
#include "models/architecture.h"
#include "models/nn.h"
#include "models/synthetic.h"
#include "models/text_encoder.h"
#include "models/unet.h"
#include "models/vae.h"
#include "pipeline/engine.h"

using namespace fp8s;

namespace {

#if TORCH_VERSION_MAJOR >= 2
// LibTorch's C++ has no meta kernel for convolution (PyTorch's lives in Python): the shape rule,
// registered for the Meta key, so that whole UNets and VAEs run on the meta device.
at::Tensor meta_convolution(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>&,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool,
                            at::IntArrayRef, int64_t) {
  std::vector<int64_t> out{input.size(0), weight.size(0)};
  for (int64_t i = 0; i < input.dim() - 2; ++i) {
    const int64_t k = weight.size(i + 2);
    out.push_back((input.size(i + 2) + 2 * padding[i] - dilation[i] * (k - 1) - 1) / stride[i] + 1);
  }
  return at::empty(out, input.options());
}

// var_mean (the norms' statistics): the reduced shape, twice.
std::tuple<at::Tensor, at::Tensor> meta_var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                 const c10::optional<at::Scalar>&, bool keepdim) {
  std::vector<int64_t> out;
  std::vector<bool> reduced(static_cast<std::size_t>(self.dim()), !dim.has_value());
  if (dim) {
    for (auto d : *dim) reduced[static_cast<std::size_t>(d < 0 ? d + self.dim() : d)] = true;
  }
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (!reduced[static_cast<std::size_t>(i)]) out.push_back(self.size(i));
    else if (keepdim) out.push_back(1);
  }
  return {at::empty(out, self.options()), at::empty(out, self.options())};
}

// native_batch_norm (group_norm's decomposition off CPU/CUDA): the input's shape, and per-channel stats.
std::tuple<at::Tensor, at::Tensor, at::Tensor> meta_batch_norm(const at::Tensor& input, const c10::optional<at::Tensor>&,
                                                               const c10::optional<at::Tensor>&,
                                                               const c10::optional<at::Tensor>&,
                                                               const c10::optional<at::Tensor>&, bool, double, double) {
  return {at::empty_like(input), at::empty({input.size(1)}, input.options()), at::empty({input.size(1)}, input.options())};
}

// where (the fused attention's masking): the broadcast shape.
at::Tensor& meta_where_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  out.resize_(at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes()));
  return out;
}

// index_select (the token embedding): `dim` becomes the index's length.
at::Tensor meta_index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  auto sizes = self.sizes().vec();
  sizes[static_cast<std::size_t>(dim < 0 ? dim + self.dim() : dim)] = index.numel();
  return at::empty(sizes, self.options());
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("index_select", meta_index_select);
  m.impl("where.self_out", meta_where_out);
  m.impl("native_batch_norm", meta_batch_norm);
  m.impl("convolution_overrideable", meta_convolution);
  m.impl("var_mean.correction", meta_var_mean);
}
#endif

}  // namespace

class TestBackend : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir m_dir;

  std::string tinyCheckpoint(const ModelConfig& config, const char* name) {
    const std::string path = m_dir.filePath(QString::fromLatin1(name)).toStdString();
    if (!QFileInfo::exists(QString::fromStdString(path))) {
      SyntheticOptions o;
      o.config = config;
      o.seed = 3;
      o.out = path;
      make_synthetic(o);
    }
    return path;
  }

  // Every parameter and buffer of a loaded module on `device`.
  static void requireAllOn(torch::nn::Module& m, const at::Device& device) {
    for (const auto& p : m.named_parameters(true)) {
      QVERIFY2(p.value().device() == device, p.key().c_str());
    }
    for (const auto& b : m.named_buffers(true)) {
      if (b.value().defined()) QVERIFY2(b.value().device() == device, b.key().c_str());
    }
  }

 private Q_SLOTS:
  void nativeFp8EncodeMatchesTheCodecOnEveryFp16Value() {
    if (!backend::has_native_fp8()) QSKIP("this LibTorch has no float8 dtypes (1.13): the CPU keeps uint8 codes");
    std::vector<int16_t> bits(65536);
    for (int i = 0; i < 65536; ++i) bits[static_cast<std::size_t>(i)] = static_cast<int16_t>(static_cast<uint16_t>(i));
    auto halves = at::from_blob(bits.data(), {65536}, at::kShort).view(at::kHalf);
    for (auto format : {Fp8Format::E4M3FN, Fp8Format::E5M2}) {
      auto native = backend::encode_native_fp8(halves, format);
      QCOMPARE(native.scalar_type(), backend::native_fp8_dtype(format));
      auto codes = native.view(at::kByte).contiguous();
      const auto* c = codes.data_ptr<uint8_t>();
      int compared = 0, nans = 0;
      for (int i = 0; i < 65536; ++i) {
        const float x = f16_to_f32(static_cast<uint16_t>(i));
        const uint8_t want = encode_fp8(x, format);
        if (std::isnan(x)) {
          QVERIFY2(fp8_is_nan(c[i], format), qPrintable(QString("NaN %1 encoded as non-NaN %2").arg(i).arg(c[i])));
          ++nans;
          continue;
        }
        if (c[i] != want) {
          QFAIL(qPrintable(QString("%1: fp16 0x%2 = %3 -> native 0x%4, codec 0x%5")
                               .arg(fp8_format_name(format)).arg(i, 4, 16, QChar('0')).arg(double(x))
                               .arg(c[i], 2, 16, QChar('0')).arg(want, 2, 16, QChar('0'))));
        }
        ++compared;
      }
      QCOMPARE(compared + nans, 65536);
      QCOMPARE(nans, 2 * 1023);  // FP16 NaNs: exponent all ones, mantissa non-zero, both signs
      // and the native decode of every code is the codec's decode
      std::vector<uint8_t> all(256);
      for (int i = 0; i < 256; ++i) all[static_cast<std::size_t>(i)] = static_cast<uint8_t>(i);
      auto decoded = backend::codes_as_native_fp8(at::from_blob(all.data(), {256}, at::kByte), format).to(at::kFloat);
      for (int i = 0; i < 256; ++i) {
        const float want = decode_fp8(static_cast<uint8_t>(i), format);
        const float got = decoded[i].item<float>();
        if (std::isnan(want)) {
          QVERIFY(std::isnan(got));
        } else {
          QCOMPARE(got, want);
        }
      }
    }
  }

  void fusedAttentionMatchesTheSlicedPath() {
    if (!backend::has_fused_attention()) QSKIP("this LibTorch has no scaled_dot_product_attention (1.13)");
    at::manual_seed(5);
    auto q = at::randn({2, 3, 37, 16});
    auto k = at::randn({2, 3, 29, 16});
    auto v = at::randn({2, 3, 29, 16});
    const double scale = 1.0 / 4.0;
    auto mask = at::full({37, 29}, -std::numeric_limits<float>::infinity()).triu(1);
    for (const auto& m : {at::Tensor(), mask}) {
      auto sliced = sliced_attention(q, k, v, scale, m, /*budget_bytes=*/4096);  // several slices
      auto fused = backend::fused_attention(q, k, v, scale, m);
      const double err = (fused - sliced).abs().max().item<double>();
      QVERIFY2(err < 1e-5, qPrintable(QString("max abs diff %1").arg(err)));
    }
    // BF16 inputs: within BF16 rounding of the FP32 result
    auto fused16 = backend::fused_attention(q.to(at::kBFloat16), k.to(at::kBFloat16), v.to(at::kBFloat16), scale, {});
    const double err16 = (fused16.to(at::kFloat) - sliced_attention(q, k, v, scale)).abs().max().item<double>();
    QVERIFY2(err16 < 0.05, qPrintable(QString("bf16 max abs diff %1").arg(err16)));
  }

  // The AMX kernel against attention computed exactly (FP64) from the same BF16 inputs, within the
  // bound its header derives: p rounded to BF16 (<= 2^-9 relative each, so <= 2^-9 · max|v| in all)
  // and the output rounded to BF16 (<= 2^-9 · |exact|). Shapes cover a partial key block, a partial
  // query block and chunk, d not a multiple of 16, cross-attention's 77 keys and strided heads.
  // The packed-convolution operators are called boxed, so their schemas are checked against the
  // types this code passes (PyTorch 2.4-2.15's, written out here): the same schema matches, one
  // with an added argument, a changed type, an overload or another name does not; on a build that
  // packs, the registered operators all matched.
  void packedConvSchemasAreChecked() {
    const char* real[] = {
        "mkldnn::_reorder_convolution_weight(Tensor self, int[2] padding=0, int[2] stride=1, int[2] dilation=1, int groups=1, int[]? input_size=None) -> Tensor",
        "mkldnn::_convolution_pointwise(Tensor X, Tensor W, Tensor? B, int[] padding, int[] stride, int[] dilation, int groups, str attr, Scalar?[] scalars, str? algorithm) -> Tensor Y",
        "mkldnn::_get_mkldnn_serialized_md(Tensor mkldnn_tensor) -> Tensor",
        "mkldnn::data_ptr(Tensor mkldnn_tensor) -> int",
        "mkldnn::_nbytes(Tensor mkldnn_tensor) -> int",
        "mkldnn::_is_mkldnn_bf16_supported() -> bool",
    };
    for (const char* text : real) QVERIFY2(backend::matches_packed_conv_spec(torch::jit::parseSchema(text)), text);
    const char* changed[] = {
        "mkldnn::_convolution_pointwise(Tensor X, Tensor W, Tensor? B, int[] padding, int[] stride, int[] dilation, int groups, str attr, Scalar?[] scalars, str? algorithm, bool fast=False) -> Tensor Y",
        "mkldnn::_convolution_pointwise(Tensor X, Tensor W, Tensor? B, int[] padding, int[] stride, int[] dilation, int groups, str attr, Scalar[] scalars, str? algorithm) -> Tensor Y",
        "mkldnn::_convolution_pointwise.binary(Tensor X, Tensor W, Tensor? B, int[] padding, int[] stride, int[] dilation, int groups, str attr, Scalar?[] scalars, str? algorithm) -> Tensor Y",
        "mkldnn::_nbytes(Tensor mkldnn_tensor) -> float",
        "mkldnn::_reorder_convolution_weight(Tensor self, int[2] padding=0, int[2] stride=1, int[2] dilation=1, int groups=1) -> Tensor",
        "mkldnn::other_op(Tensor mkldnn_tensor) -> int",
    };
    for (const char* text : changed) QVERIFY2(!backend::matches_packed_conv_spec(torch::jit::parseSchema(text)), text);
  }

  // Inputs the AMX kernel cannot take are refused, not run: no keys (a softmax over nothing), or
  // fewer values than keys; on a CPU or build without AMX, every call.
  void amxAttentionRefusesUnfitInputs() {
    const auto opts = at::TensorOptions().dtype(at::kBFloat16);
    const auto q = at::randn({1, 2, 16, 40}, opts);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, amx_attention(q, at::randn({1, 2, 0, 40}, opts), at::randn({1, 2, 0, 40}, opts), 0.1));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, amx_attention(q, at::randn({1, 2, 16, 40}, opts), at::randn({1, 2, 8, 40}, opts), 0.1));
    if (!kernels::amx_attention_available()) {
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument, amx_attention(q, q, q, 0.1));
    }
  }

  void amxAttentionIsWithinBf16RoundingOfTheExactResult() {
    if (!kernels::amx_attention_available()) QSKIP("this CPU has no AMX-BF16 tile unit");
    at::manual_seed(11);
    struct Shape { int64_t b, h, nq, nk, d; };
    double largest = 0;
    for (const Shape s : {Shape{2, 3, 37, 29, 16}, Shape{1, 2, 300, 77, 40}, Shape{2, 1, 130, 200, 48},
                          Shape{1, 1, 16, 64, 33}, Shape{1, 2, 5, 1, 8}}) {
      // [B, N, H, d] memory viewed as [B, H, N, d], as the UNet's heads are
      auto make = [&](int64_t n, double spread) {
        return (at::randn({s.b, n, s.h, s.d}) * spread).to(at::kBFloat16).transpose(1, 2);
      };
      auto q = make(s.nq, 2.0), k = make(s.nk, 2.0), v = make(s.nk, 1.0);
      const double scale = 1.0 / std::sqrt(double(s.d));
      auto got = amx_attention(q, k, v, scale).to(at::kDouble);
      auto qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble);
      auto exact = at::matmul(at::softmax(at::matmul(qd, kd.transpose(-1, -2)) * scale, -1), vd);
      const double vmax = vd.abs().max().item<double>(), u = std::ldexp(1.0, -9);
      auto bound = exact.abs() * u + vmax * (u + u * u + 1e-5);
      const auto err = (got - exact).abs();
      const double worst = (err - bound).max().item<double>(), max_err = err.max().item<double>();
      const QString what = QString("b%1 h%2 nq%3 nk%4 d%5: max error %6 above the bound, max|err| %7")
                               .arg(s.b).arg(s.h).arg(s.nq).arg(s.nk).arg(s.d).arg(worst).arg(max_err);
      QVERIFY2(worst <= 0, qPrintable(what));
      largest = std::max(largest, max_err);
    }
    // one key is softmax 1 (the output is v, exact); the others show BF16 rounding
    QVERIFY2(largest > 0, "every result is exact in FP64: not the BF16 kernel");
  }

  // Packed convolution weights (LibTorch >= 2.4): packing then unpacking gives the weight back
  // bit for bit, and a convolution on the packed elements is the convolution of the same BF16
  // inputs computed exactly (FP64), within the output's BF16 rounding (2^-8 relative, generous)
  // plus FP32 accumulation (2^-16 of the sum of |x||w|). Shapes: padded channel blocks (4 in or
  // out), 1x1, stride 2, an odd size.
  // `mass_rel` widens the accumulation term where the result is rounded more than once (a per-channel
  // scale applied to the rounded output, then the bias: 2^-7 of the sum of |x||w| covers both).
  static void checkConvWithinBound(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w,
                                   const at::Tensor& bias, int64_t stride, int64_t padding, const QString& what,
                                   double mass_rel = std::ldexp(1.0, -16)) {
    const auto xd = x.to(at::kDouble), wd = w.to(at::kDouble);
    const auto exact = at::conv2d(xd, wd, bias.to(at::kDouble), {stride, stride}, {padding, padding});
    const auto mass = at::conv2d(xd.abs(), wd.abs(), {}, {stride, stride}, {padding, padding}) + bias.to(at::kDouble).abs().view({1, -1, 1, 1});
    const auto excess = (got.to(at::kDouble) - exact).abs() - exact.abs() * std::ldexp(1.0, -8) - mass * mass_rel;
    QVERIFY2(got.sizes() == exact.sizes(), qPrintable(what));
    QVERIFY2(excess.max().item<double>() <= 0, qPrintable(what + QString(": error above the bound by %1").arg(excess.max().item<double>())));
  }

  void packedConvolutionsMatchTheExactConvolution() {
    if (!backend::has_packed_conv()) QSKIP("this build does not pack convolution weights (LibTorch < 2.4, or no oneDNN BF16)");
    // packed whatever the CPU's default (off where auto computes in FP32)
    const backend::KernelOptions packed_on{backend::AttentionKernel::Auto, true};
    const backend::KernelScope scope(packed_on);
    at::manual_seed(3);
    struct Shape { int64_t out, in, k, stride, size; };
    for (const Shape s : {Shape{64, 4, 3, 1, 16}, Shape{4, 64, 3, 1, 16}, Shape{96, 64, 1, 1, 12},
                          Shape{64, 64, 3, 2, 17}, Shape{128, 96, 3, 1, 8}}) {
      const int64_t padding = s.k / 2;
      const QString what = QString("%1x%2x%3x%3 stride %4").arg(s.out).arg(s.in).arg(s.k).arg(s.stride);
      const auto w = (at::randn({s.out, s.in, s.k, s.k}) * 0.1).to(at::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
      const auto x = at::randn({2, s.in, s.size, s.size}).to(at::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
      const auto bias = at::randn({s.out}).to(at::kBFloat16);
      auto [elements, layout] = backend::pack_conv_weight(w, s.stride, padding);
      QVERIFY2(layout.elements >= w.numel() && elements.numel() == layout.elements, qPrintable(what));
      QVERIFY2(at::equal(backend::unpack_conv_weight(elements, layout), w), qPrintable(what));
      const auto y = backend::packed_conv2d(x, elements, layout, bias, s.stride, padding);
      QVERIFY2(y.is_contiguous(at::MemoryFormat::ChannelsLast), qPrintable(what));
      checkConvWithinBound(y, x, w, bias, s.stride, padding, what);

      // The layer: BF16 and FP16 storage and FP8 codes (unscaled and per channel) all packed, so
      // storage types differ in their bytes only; codes and FP16 bits come back as stored; the
      // packed forward (BF16) and the unpacking fallback (FP32 compute) both convolve the stored
      // weight (a per-channel scale applied to the output channels).
      struct Storage { WeightType type; Fp8Scale scale; at::ScalarType placeholder; };
      for (const Storage st : {Storage{WeightType::BF16, Fp8Scale::None, at::kBFloat16}, Storage{WeightType::FP16, Fp8Scale::None, at::kHalf},
                               Storage{WeightType::FP8_E4M3, Fp8Scale::None, at::kByte},
                               Storage{WeightType::FP8_E4M3, Fp8Scale::Channel, at::kByte}}) {
        const bool fp8 = is_fp8(st.type);
        const QString how = what + " " + QString::fromStdString(storage_display_name(StorageSpec{st.type, st.scale, false}));
        QConv2d layer(s.in, s.out, s.k, s.stride);
        layer->bias.set_data(bias.to(at::kFloat));
        layer->store.weight.set_data(at::empty({1}, st.placeholder).expand(w.sizes()));
        layer->store.fp8 = fp8;
        const auto w32 = w.to(at::kFloat);
        store_layer_weight(*layer, w32, StorageSpec{st.type, st.scale, false});
        QVERIFY2(layer->store.packed.defined(), qPrintable(how));
        if (fp8) {
          std::vector<uint8_t> codes(static_cast<std::size_t>(w.numel()));
          const auto wc = w32.contiguous();
          quantize_weight(wc.data_ptr<float>(), s.out, w.numel(), Fp8Format::E4M3FN, st.scale, codes.data());
          const auto want = at::from_blob(codes.data(), w.sizes(), at::kByte);
          QVERIFY2(at::equal(layer->store.logical().contiguous(), want), qPrintable(how + ": codes"));
        } else {
          QVERIFY2(at::equal(layer->store.logical().contiguous(), w.to(st.placeholder).contiguous()), qPrintable(how + ": weight bits"));
        }
        const auto stored = layer->store.decode(at::kFloat).clone();
        // per channel, the weight is never rounded to BF16 (FP8 values are BF16-exact; the FP32
        // scale multiplies the output): the reference is the FP32 weight
        const bool channel = st.scale == Fp8Scale::Channel;
        checkConvWithinBound(layer->forward(x), x, channel ? stored : stored.to(at::kBFloat16), bias, s.stride, padding,
                             how + " layer", channel ? std::ldexp(1.0, -7) : std::ldexp(1.0, -16));
        const auto y32 = layer->forward(x.to(at::kFloat).contiguous());
        const auto ref32 = at::conv2d(x.to(at::kFloat), stored, bias.to(at::kFloat), {s.stride, s.stride}, {padding, padding});
        QVERIFY2(at::allclose(y32, ref32, 1e-5, 1e-4), qPrintable(how + " FP32 fallback"));
      }
    }
  }

  // Threads on a shared machine (issue 44): a cgroup quota read as cores, by hand.
  void cgroupQuotasReadAsCores() {
    QCOMPARE(cgroup_v2_cores("max 100000"), std::optional<int>());
    QCOMPARE(cgroup_v2_cores("200000 100000"), std::optional<int>(2));
    QCOMPARE(cgroup_v2_cores("150000 100000\n"), std::optional<int>(2));  // 1.5 cores: two threads
    QCOMPARE(cgroup_v2_cores("50000 100000"), std::optional<int>(1));
    QCOMPARE(cgroup_v2_cores(""), std::optional<int>());
    QCOMPARE(cgroup_v2_cores("junk 100000"), std::optional<int>());
    QCOMPARE(cgroup_v1_cores("-1", "100000"), std::optional<int>());
    QCOMPARE(cgroup_v1_cores("400000", "100000"), std::optional<int>(4));
    QCOMPARE(cgroup_v1_cores("", ""), std::optional<int>());
    const auto u = usable_cores();
    QVERIFY(u.cores >= 1);
    QVERIFY(u.affinity >= 1);
    QVERIFY(u.cores <= u.affinity);
    if (u.quota) QVERIFY(u.cores <= *u.quota);
  }

  // The CLI starts with bounded OpenMP and OpenBLAS waits unless the user chose (libgomp itself
  // reports what it read: OMP_DISPLAY_ENV), logs its thread choice, and --threads sets the count.
  void cliStartsWithBoundedWaitsAndLogsItsThreads() {
    auto env = QProcessEnvironment::systemEnvironment();
    for (const char* v : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT", "FP8S_DEFAULT_WAITS", "OMP_NUM_THREADS"}) {
      env.remove(QString::fromLatin1(v));
    }
    env.insert(QStringLiteral("OMP_DISPLAY_ENV"), QStringLiteral("verbose"));
    auto r = test::run_cli({"inspect", "--threads", "1"}, QString(), 120000, env);
    QCOMPARE(r.exit_code, 0);
    QVERIFY2(r.err.contains(QStringLiteral("GOMP_SPINCOUNT = '%1'").arg(QString::fromLatin1(kDefaultGompSpinCount))), qPrintable(r.err));
    QVERIFY2(r.err.contains(QStringLiteral("threads: 1 thread (--threads; this process may use %1 core").arg(usable_cores().cores)), qPrintable(r.err));
    QVERIFY2(r.err.contains(QStringLiteral("OpenMP wait GOMP_SPINCOUNT=%1 (default)").arg(QString::fromLatin1(kDefaultGompSpinCount))), qPrintable(r.err));
    env.insert(QStringLiteral("GOMP_SPINCOUNT"), QStringLiteral("777"));  // the user's choice is kept
    r = test::run_cli({"inspect"}, QString(), 120000, env);
    QCOMPARE(r.exit_code, 0);
    QVERIFY2(r.err.contains(QStringLiteral("GOMP_SPINCOUNT = '777'")), qPrintable(r.err));
    QVERIFY2(r.err.contains(QStringLiteral("OpenMP wait GOMP_SPINCOUNT=777\n")), qPrintable(r.err));
    QVERIFY2(r.err.contains(QStringLiteral("threads: %1 thread").arg(usable_cores().cores)), qPrintable(r.err));
    test::expect_one_line_error(test::run_cli({"inspect", "--threads", "-2"}), 2, "--threads");
  }

  // The compute type follows the processor (issue 53): auto is BF16 where the CPU has BF16
  // instructions and FP32 elsewhere, BF16 on a GPU; an explicit bf16 on a CPU without them warns.
  void computeTypeFollowsTheProcessor() {
    const CpuBf16 avx2{CpuIsa::Avx2, true}, avx512{CpuIsa::Avx512Bf16, true}, amx{CpuIsa::Amx, true};
    QCOMPARE(resolve_compute(ComputeType::Auto, false, avx2).type, ComputeType::FP32);
    QCOMPARE(resolve_compute(ComputeType::Auto, false, avx512).type, ComputeType::BF16);
    QCOMPARE(resolve_compute(ComputeType::Auto, false, amx).type, ComputeType::BF16);
    QCOMPARE(resolve_compute(ComputeType::Auto, true, avx2).type, ComputeType::BF16);
    QCOMPARE(describe(resolve_compute(ComputeType::Auto, false, CpuBf16{CpuIsa::Avx2, false})),
             std::string("fp32 (auto: this CPU has no BF16 instructions)"));
    QCOMPARE(describe(resolve_compute(ComputeType::Auto, false, avx2)),
             std::string("fp32 (auto: this CPU has no BF16 instructions (FP8S_CPU_ISA=avx2))"));
    QCOMPARE(describe(resolve_compute(ComputeType::Auto, false, avx512)),
             std::string("bf16 (auto: this CPU has AVX512-BF16 (FP8S_CPU_ISA=avx512bf16))"));
    QCOMPARE(describe(resolve_compute(ComputeType::Auto, false, amx)), std::string("bf16 (auto: this CPU has AMX-BF16 (FP8S_CPU_ISA=amx))"));
    // what was asked is kept; bf16 on a CPU without BF16 instructions warns, elsewhere not
    QVERIFY(resolve_compute(ComputeType::BF16, false, avx2).warning.find("emulated") != std::string::npos);
    QCOMPARE(resolve_compute(ComputeType::BF16, false, avx2).type, ComputeType::BF16);
    for (const auto& [asked, cpu, cuda] : {std::tuple{ComputeType::BF16, avx512, false}, std::tuple{ComputeType::BF16, avx2, true},
                                           std::tuple{ComputeType::FP32, avx2, false}, std::tuple{ComputeType::FP16, avx2, true}}) {
      const auto c = resolve_compute(asked, cuda, cpu);
      QCOMPARE(c.type, asked);
      QVERIFY(c.warning.empty());
    }
    // FP8S_CPU_ISA forces the answer; an unknown value is refused by name
    for (const auto& [name, isa] : {std::pair{"avx2", CpuIsa::Avx2}, std::pair{"avx512bf16", CpuIsa::Avx512Bf16}, std::pair{"amx", CpuIsa::Amx}}) {
      qputenv("FP8S_CPU_ISA", name);
      QCOMPARE(cpu_bf16().isa, isa);
      QVERIFY(cpu_bf16().forced);
    }
    qputenv("FP8S_CPU_ISA", "zen9");
    try {
      (void)cpu_bf16();
      QFAIL("FP8S_CPU_ISA=zen9 was taken");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).startsWith("FP8S_CPU_ISA=zen9 is not a CPU kind"), e.what());
    }
    qunsetenv("FP8S_CPU_ISA");
    // unforced, cpuid's answer agrees with the kernel's flags (/proc/cpuinfo)
    QFile info("/proc/cpuinfo");
    if (!info.open(QIODevice::ReadOnly)) QSKIP("no /proc/cpuinfo");
    QString flags;
    for (const auto& line : QString::fromLatin1(info.readAll()).split('\n')) {
      if (line.startsWith("flags")) {
        flags = " " + line.section(':', 1) + " ";
        break;
      }
    }
    const CpuIsa expected = flags.contains(" amx_bf16 ") && flags.contains(" amx_tile ") ? CpuIsa::Amx
                            : flags.contains(" avx512_bf16 ")                          ? CpuIsa::Avx512Bf16
                                                                                       : CpuIsa::Avx2;
    QCOMPARE(cpu_bf16().isa, expected);
    QVERIFY(!cpu_bf16().forced);
  }

  void deviceChoicesAreCheckedWithClearErrors() {
    QVERIFY(backend::resolve_device("cpu").is_cpu());
    if (backend::cuda_device_count() == 0) {
      QVERIFY(backend::resolve_device("auto").is_cpu());
      // the fallback is named wherever the device is shown (the status bar, --device lists, compare)
      const auto cpu = QString::fromStdString(backend::describe_device(at::Device(at::kCPU)));
      QCOMPARE(cpu.contains("no CUDA GPU found"), backend::built_with_cuda());
      for (const char* choice : {"cuda", "cuda:0", "cuda:3"}) {
        try {
          backend::resolve_device(choice);
          QFAIL("a CUDA device was accepted on a machine without one");
        } catch (const InputError& e) {
          const QString msg = QString::fromUtf8(e.what());
          QVERIFY2(msg.contains(choice) && msg.contains("--device cpu"), e.what());
          QVERIFY2(msg.contains(backend::built_with_cuda() ? "no CUDA device was found" : "no CUDA support"), e.what());
        }
      }
    }
    for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", ""}) {
      QVERIFY_THROWS_EXCEPTION(InputError, backend::resolve_device(bad));
    }
    const auto devices = available_devices();
    QVERIFY(!devices.empty());
    QCOMPARE(QString::fromStdString(devices.front().id), QString("cpu"));
    QCOMPARE(static_cast<int>(devices.size()), 1 + backend::cuda_device_count());
    // the engine refuses before it reads the model
    LoadOptions o;
    o.checkpoint = "/nonexistent/model.safetensors";
    o.device = "tpu";
    try {
      Engine e(o);
      QFAIL("an unknown device was accepted");
    } catch (const InputError& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains("unknown device 'tpu'"), e.what());
    }
  }

  // Weights loaded onto the meta device (tensor by tensor, FP8 as the device keeps it) and every
  // network run there: a tensor created on the CPU inside a forward meets a meta tensor in an
  // element-wise op or a cat and fails ("not on the expected device").
  void forwardsStayOnTheirInputsDevice_data() {
    QTest::addColumn<QString>("preset");
    QTest::addColumn<int>("weights");
    QTest::newRow("sd1 fp16") << "sd1" << int(WeightType::FP16);
    QTest::newRow("sd1 fp8") << "sd1" << int(WeightType::FP8_E4M3);
    QTest::newRow("sdxl fp16") << "sdxl" << int(WeightType::FP16);
    QTest::newRow("sdxl fp8") << "sdxl" << int(WeightType::FP8_E5M2);
  }
  void forwardsStayOnTheirInputsDevice() {
    if (TORCH_VERSION_MAJOR < 2) QSKIP("the meta-device forward needs LibTorch 2.x's meta kernels (the CUDA build runs it)");
    QFETCH(QString, preset);
    QFETCH(int, weights);
    const bool sdxl = preset == "sdxl";
    const auto config = sdxl ? preset_tiny_sdxl() : preset_tiny_sd1();
    SafetensorsFile file(tinyCheckpoint(config, sdxl ? "tiny-sdxl.safetensors" : "tiny-sd1.safetensors"));
    const at::Device meta(at::kMeta);
    StorageSpec storage{static_cast<WeightType>(weights), Fp8Scale::Tensor, true};
    if (!is_fp8(storage.weights)) storage = {WeightType::FP16, Fp8Scale::None, false};
    const auto bf16 = at::TensorOptions().device(meta).dtype(at::kFloat);

    // a stray CPU tensor throws "Expected all tensors to be on the same device": a failure naming it
    try {
      const BuildOn build(meta);
      UNetImpl unet(config.unet);
      const auto report = load_module_weights(unet, file, "model.diffusion_model.", storage, true, {}, {}, meta);
      QCOMPARE(report.quantised > 0, is_fp8(storage.weights));
      requireAllOn(unet, meta);
      const int64_t ctx = config.unet.context_dim;
      auto y = config.unet.adm_in_channels > 0 ? at::zeros({2, config.unet.adm_in_channels}, bf16) : at::Tensor();
      auto eps = unet.forward(at::zeros({2, 4, 8, 8}, bf16), at::full({2}, 500.0, bf16), at::zeros({2, 77, ctx}, bf16), y,
                              at::kBFloat16);
      QVERIFY(eps.device() == meta);
      QCOMPARE(eps.sizes().vec(), (std::vector<int64_t>{2, 4, 8, 8}));

      for (const auto& tc : config.text_encoders) {
        TextEncoderImpl te(tc);
        load_module_weights(te, file, tc.prefix, storage, true, te.ignorable_keys(), te.fused_layers(), meta);
        requireAllOn(te, meta);
        auto out = te.forward(at::zeros({1, 77}, at::TensorOptions().device(meta).dtype(at::kLong)), tc.layers, true,
                              at::kBFloat16);
        QVERIFY(out.hidden.device() == meta);
        if (out.pooled.defined()) QVERIFY(out.pooled.device() == meta);
      }

      VaeImpl vae(config.vae);
      load_module_weights(vae, file, "first_stage_model.", storage, storage.fp8_vae, {}, {}, meta);
      requireAllOn(vae, meta);
      auto image = vae.decode(at::zeros({1, 4, 8, 8}, bf16), at::kBFloat16);
      QVERIFY(image.device() == meta);
      QCOMPARE(image.size(2), 64);
      QVERIFY(vae.encode(at::zeros({1, 3, 64, 64}, bf16), at::kBFloat16).device() == meta);
    } catch (const std::exception& e) {
      QFAIL(e.what());
    }
  }

  // Every report names the attention kernel and the convolution weight layout that ran, from what
  // the calls counted: an engine's own kernel options decide (the sliced kernel forced, packing
  // off), FP32 compute convolves NCHW, and `auto` is the build's best.
  void reportsNameTheKernelsThatRan() {
    struct Case { backend::KernelOptions kernels; ComputeType compute; QString attention, conv; };
    const QString best = backend::has_fused_attention() ? "fused" : kernels::amx_attention_available() ? "amx" : "sliced";
    const QString packed = backend::has_packed_conv() ? "packed (oneDNN blocked)" : "channels_last";
    for (const Case& c : {Case{{backend::AttentionKernel::Sliced, true}, ComputeType::BF16, "sliced", packed},
                         Case{{backend::AttentionKernel::Auto, false}, ComputeType::BF16, best, "channels_last"},
                         Case{{backend::AttentionKernel::Auto, true}, ComputeType::FP32, backend::has_fused_attention() ? "fused" : "sliced", "NCHW"}}) {
      LoadOptions o;
      o.checkpoint = demo::find_demo_model();
      o.storage = StorageSpec{WeightType::BF16, Fp8Scale::None, false};
      o.device = "cpu";
      o.kernels = c.kernels;
      Engine engine(o);
      QCOMPARE(QString::fromStdString(engine.info().kernels), QString::fromStdString(backend::describe(c.kernels)));
      GenerationRequest r;
      r.prompt = "a small yellow star";
      r.steps = 2;
      r.storage = o.storage;
      r.compute = c.compute;
      const std::atomic<bool> cancel{false};
      const auto result = engine.generate(r, nullptr, cancel);
      // AMX where it fits, the sliced kernel for the rest (heads wider than 48)
      const QString attention = QString::fromStdString(result.attention_kernel);
      QVERIFY2(attention == c.attention || (c.attention == "amx" && attention == "amx+sliced"), qPrintable(attention));
      QCOMPARE(QString::fromStdString(result.conv_layout), c.conv);
    }
    // FP8S_ATTENTION / FP8S_PACKED_CONV: parsed once, an unknown value refused by name
    qputenv("FP8S_ATTENTION", "fastest");
    QVERIFY_THROWS_EXCEPTION(InputError, backend::kernel_options_from_environment());
    qputenv("FP8S_ATTENTION", "sliced");
    qputenv("FP8S_PACKED_CONV", "0");
    const auto env = backend::kernel_options_from_environment();
    QCOMPARE(env.attention, backend::AttentionKernel::Sliced);
    QVERIFY(!env.packed_conv);
    qputenv("FP8S_PACKED_CONV", "no");
    QVERIFY_THROWS_EXCEPTION(InputError, backend::kernel_options_from_environment());
    qunsetenv("FP8S_ATTENTION");
    qunsetenv("FP8S_PACKED_CONV");
    // unset, convolutions pack where auto computes in BF16 (a CPU with BF16 instructions) only
    for (const auto& [isa, packed] : {std::pair{"avx2", false}, std::pair{"avx512bf16", true}, std::pair{"amx", true}}) {
      qputenv("FP8S_CPU_ISA", isa);
      QCOMPARE(backend::kernel_options_from_environment().packed_conv, packed);
    }
    qunsetenv("FP8S_CPU_ISA");
  }

  // --fp8-compute's plan for one layer, over every format, size remainder, scale count and output
  // type, against _scaled_mm's rules as ScaledBlas.cpp states them: E4M3 only; N and K multiples of
  // 16 (M free); a per-tensor scale, or row-wise scales with a BF16 output; a bias refused with an
  // FP32 output (added afterwards)
  void fp8MmPlanFollowsScaledMmsRules() {
    int used = 0;
    for (const bool fp8 : {false, true}) {
      for (const auto format : {Fp8Format::E4M3FN, Fp8Format::E5M2}) {
        for (const int64_t n : {3072, 3080, 16}) {
          for (const int64_t k : {3072, 3073, 48}) {
            for (const int64_t scales : {int64_t{0}, int64_t{1}, n, int64_t{7}}) {
              for (const auto out : {at::kBFloat16, at::kHalf, at::kFloat}) {
                const auto p = backend::plan_fp8_mm(fp8, format, scales, n, k, out);
                const bool shapes = n % 16 == 0 && k % 16 == 0;
                const bool per_tensor = scales <= 1;
                const bool want = fp8 && format == Fp8Format::E4M3FN && shapes && (per_tensor || (scales == n && out == at::kBFloat16));
                QCOMPARE(p.scaled_mm, want);
                QCOMPARE(p.rowwise, want && !per_tensor);
                QCOMPARE(p.bias_after, want && out == at::kFloat);
                QCOMPARE(QString(p.reason).isEmpty(), want);
                used += want;
              }
            }
          }
        }
      }
    }
    // 4 (N, K) pairs of multiples of 16, each with 2 per-tensor scale counts x 3 outputs and row-wise in BF16
    QCOMPARE(used, 4 * (2 * 3 + 1));
    QCOMPARE(QString(backend::plan_fp8_mm(true, Fp8Format::E4M3FN, 3072, 3072, 3072, at::kHalf).reason),
             QString("per-channel scales need BF16 compute"));
  }

  // The streaming transport's page-locked memory (issue 55): registered in place byte for byte
  // (the caching host allocator rounded 132 MB up to 256 MiB), never past its cap, and a failed
  // registration leaves that tensor pageable and says why; everything registered is unregistered
  void hostPinningIsExactCappedAndFallsBack() {
    std::vector<void*> live;
    int refuse_at = -1, calls = 0;
    {
      HostPinning pin(300'000'000, [&](void* p, std::size_t) {
        if (calls++ == refuse_at) return false;
        live.push_back(p);
        return true;
      }, [&](void* p) { live.erase(std::find(live.begin(), live.end(), p)); });
      std::vector<std::vector<uint8_t>> blocks;
      for (const std::size_t n : {132'120'576u, 132'120'576u, 7u, 132'120'576u}) blocks.emplace_back(n);
      QVERIFY(pin.pin(blocks[0].data(), blocks[0].size()));
      QVERIFY(pin.pin(blocks[1].data(), blocks[1].size()));
      QVERIFY(pin.pin(blocks[2].data(), blocks[2].size()));
      QCOMPARE(pin.pinned_bytes(), uint64_t{2 * 132'120'576ull + 7});  // exactly the streamed bytes
      QVERIFY(pin.fallback().empty());
      QVERIFY(!pin.pin(blocks[3].data(), blocks[3].size()));  // 264 MB + 132 MB > the 300 MB cap
      QCOMPARE(pin.pageable_bytes(), uint64_t{132'120'576ull});
      QCOMPARE(QString::fromStdString(pin.fallback()), QString("the pinning cap"));
      QCOMPARE(live.size(), std::size_t(3));
    }
    QVERIFY(live.empty());  // the destructor unregistered all three
    refuse_at = 0;
    calls = 0;
    {
      HostPinning pin(1ull << 40, [&](void* p, std::size_t) {
        if (calls++ == refuse_at) return false;
        live.push_back(p);
        return true;
      }, [&](void* p) { live.erase(std::find(live.begin(), live.end(), p)); });
      std::vector<uint8_t> a(1000), b(2000);
      QVERIFY(!pin.pin(a.data(), a.size()));  // the driver refused: pageable, and said
      QVERIFY(pin.pin(b.data(), b.size()));
      QCOMPARE(pin.pinned_bytes(), uint64_t{2000});
      QCOMPARE(pin.pageable_bytes(), uint64_t{1000});
      QCOMPARE(QString::fromStdString(pin.fallback()), QString("page-locking failed"));
    }
    QVERIFY(live.empty());
    // the cap: FP8S_PIN_LIMIT, 0 turning pinning off, else half the memory available
    qputenv("FP8S_PIN_LIMIT", "16G");
    QCOMPARE(default_pin_cap(), 16'000'000'000ull);
    qputenv("FP8S_PIN_LIMIT", "0");
    QCOMPARE(default_pin_cap(), uint64_t{0});
    qputenv("FP8S_PIN_LIMIT", "half");
    QVERIFY_EXCEPTION_THROWN(default_pin_cap(), InputError);
    qunsetenv("FP8S_PIN_LIMIT");
    // half the memory available: pinned to 2 GB by FP8S_AVAILABLE_MEMORY, since MemAvailable moves
    // between two reads while other tests run beside this one
    qputenv("FP8S_AVAILABLE_MEMORY", "2G");
    QCOMPARE(available_memory_bytes(), 2'000'000'000ull);
    QCOMPARE(default_pin_cap(), 1'000'000'000ull);
    qunsetenv("FP8S_AVAILABLE_MEMORY");
    // a build without CUDA cannot page-lock: its registration says so instead of pretending
    if (!backend::built_with_cuda()) {
      std::vector<uint8_t> c(64);
      QVERIFY(!backend::register_host_memory(c.data(), c.size()));
    }
  }
};

QTEST_GUILESS_MAIN(TestBackend)
#include "test_backend.moc"
