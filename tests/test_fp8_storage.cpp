// FP8 weight storage in the engine: every layer kind converted, decode equal to the codec, no
// full-precision copy left resident, and the compare report's files (issue 4).
#include <ATen/ATen.h>

#include <QJsonArray>
#include <map>
#include <set>
#include <QJsonDocument>
#include <QJsonObject>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "fp8/codec.h"
#include "fp8/quantize.h"
#include "lora/lora_apply.h"
#include "models/convert.h"
#include "io/png.h"
#include "memory/tracking_allocator.h"
#include "models/architecture.h"
#include "families/sd/model.h"
#include "models/vae.h"
#include "models/text_encoder.h"
#include "models/unet.h"
#include "pipeline/engine.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "pipeline/family.h"
#include "support.h"

using namespace fp8s;

namespace {

// A CPU engine's options for a checkpoint in `storage`, with the reference CLIP vocabulary.
LoadOptions reference_load(const std::string& checkpoint, const StorageSpec& storage) {
  LoadOptions o;
  o.checkpoint = checkpoint;
  o.vocab = test::reference_path("clip");
  o.device = "cpu";
  o.storage = storage;
  return o;
}

// "a red circle" at 64x64 with Euler in `storage`.
GenerationRequest red_circle(const StorageSpec& storage, int64_t seed, int steps) {
  GenerationRequest r;
  r.prompt = "a red circle";
  r.seed = seed;
  r.steps = steps;
  r.width = r.height = 64;
  r.storage = storage;
  r.sampler = Sampler::Euler;
  return r;
}

}  // namespace

class TestFp8Storage : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  QString m_model;
  int m_runs = 0;

 private Q_SLOTS:
  void initTestCase() {
    install_tracking_allocator();
    m_model = m_dir.path() + "/tiny.safetensors";
    auto r = test::run_cli({"make-synthetic", "--arch", "tiny-sd1", "--seed", "7", "--out", m_model});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
  }

  void everyLayerKindIsStoredAndDecodedExactly() {
    for (auto [weights, format] : {std::pair{WeightType::FP8_E4M3, Fp8Format::E4M3FN},
                                   std::pair{WeightType::FP8_E5M2, Fp8Format::E5M2}}) {
      for (auto scale : {Fp8Scale::None, Fp8Scale::Tensor, Fp8Scale::Channel}) {
        StorageSpec s{weights, scale, false};
        Model model(m_model.toStdString(), s);
        int linear = 0, conv = 0;
        for (const auto& [key, layer] : model.layers()) {
          const bool vae = key.rfind("first_stage_model.", 0) == 0;
          const bool embedding = key.find("time_embed") != std::string::npos;
          if (vae || embedding) {
            QCOMPARE(layer->store.weight.scalar_type(), at::kHalf);  // the VAE and embeddings stay 16-bit
            QVERIFY(!layer->store.fp8);
            continue;
          }
          QVERIFY2(layer->store.fp8 && layer->store.weight.scalar_type() == at::kByte, key.c_str());
          (layer->store.weight.dim() == 4 ? conv : linear) += 1;
          // independent path: the file's weight, quantised by quantize_weight, decoded by the codec
          const auto& rec = model.file().at(key);
          std::vector<uint16_t> raw(rec.numel());
          model.file().read(rec, raw.data());
          std::vector<float> w(raw.size());
          f16_to_f32(raw.data(), w.data(), w.size());
          std::vector<uint8_t> codes(w.size());
          const auto scales = quantize_weight(w.data(), rec.shape[0], static_cast<int64_t>(w.size()), format, scale, codes.data());
          // a convolution's codes are kept channels_last (its activations are, for BF16 compute):
          // compared element by element in the file's OIHW order
          // (or packed in oneDNN's order where the build packs them: stored_weight unpacks)
          const auto logical = layer->store.logical();
          if (logical.dim() == 4) QVERIFY2(logical.is_contiguous(at::MemoryFormat::ChannelsLast), key.c_str());
          // every scaling packs, where the build packs and the defaults do (a CPU with BF16 instructions)
          const bool packable = logical.dim() == 4 && backend::has_packed_conv() && backend::current_kernel_options().packed_conv;
          QVERIFY2(layer->store.packed.defined() == packable, key.c_str());
          const auto stored = logical.contiguous();
          auto decoded = layer->store.decode(at::kFloat).contiguous().clone();
          const int64_t cols = static_cast<int64_t>(w.size()) / rec.shape[0];
          for (std::size_t i = 0; i < w.size(); ++i) {
            QCOMPARE(stored.data_ptr<uint8_t>()[i], codes[i]);
            const float sc = scales.empty() ? 1.0f : scales[scales.size() == 1 ? 0 : i / cols];
            const float want = decode_fp8(codes[i], format) * sc;
            if (decoded.data_ptr<float>()[i] != want) QFAIL(key.c_str());
          }
          // the BF16 decode is the FP32 one rounded (exact for unscaled codes)
          auto bf = layer->store.decode(at::kBFloat16).to(at::kFloat);
          QVERIFY(at::allclose(bf, decoded, 1.0 / 128, 0));
        }
        QVERIFY(linear > 50);
        QVERIFY(conv > 20);
      }
    }
  }

  // The file's codes and scales as they are (its scaled Linear layers and unscaled convolutions
  // alike), one byte a weight, decoding to code x scale.
  // The weight store, every kind the loader makes (dense BF16/FP16, FP8 unscaled, per tensor and
  // per channel; a convolution packed where the build packs): its logical weight, decode,
  // decode_into and bytes against the codec applied by hand; and an online LoRA term against
  // y + scale · up(down(x)) written out.
  void weightStoreOwnsEveryStorageKind() {
    at::manual_seed(11);
    struct Kind { WeightType type; Fp8Scale scale; };
    for (const bool conv : {false, true}) {
      for (const Kind k : {Kind{WeightType::BF16, Fp8Scale::None}, Kind{WeightType::FP16, Fp8Scale::None},
                           Kind{WeightType::FP8_E4M3, Fp8Scale::None}, Kind{WeightType::FP8_E4M3, Fp8Scale::Tensor},
                           Kind{WeightType::FP8_E5M2, Fp8Scale::Channel}}) {
        const bool fp8 = is_fp8(k.type);
        const QString how = QString(conv ? "conv " : "linear ") + QString::fromStdString(storage_display_name({k.type, k.scale, false}));
        const at::Tensor w = conv ? at::randn({8, 4, 3, 3}) : at::randn({8, 16});
        std::shared_ptr<torch::nn::Module> module;
        QuantisedLayer* layer = nullptr;
        if (conv) {
          auto c = std::make_shared<QConv2dImpl>(4, 8, 3);
          layer = c.get(), module = c;
        } else {
          auto l = std::make_shared<QLinearImpl>(16, 8);
          layer = l.get(), module = l;
        }
        layer->bias.set_data(at::zeros({8}));
        const auto placeholder_dtype = fp8 ? at::kByte : k.type == WeightType::BF16 ? at::kBFloat16 : at::kHalf;
        layer->store.weight.set_data(at::empty({1}, placeholder_dtype).expand(w.sizes()));
        layer->store.fp8 = fp8;
        if (fp8) layer->store.format = fp8_format(k.type);
        store_layer_weight(*layer, w, StorageSpec{k.type, k.scale, false});
        const WeightStore& st = layer->store;

        // what it should hold, from the codec
        at::Tensor want_logical, want_values;
        uint64_t scale_bytes = 0;
        if (fp8) {
          std::vector<uint8_t> codes(static_cast<std::size_t>(w.numel()));
          const auto scales = quantize_weight(w.data_ptr<float>(), 8, w.numel(), fp8_format(k.type), k.scale, codes.data());
          want_logical = at::from_blob(codes.data(), w.sizes(), at::kByte).clone();
          want_values = at::empty(w.sizes(), at::kFloat);
          const int64_t per_row = w.numel() / 8;
          for (int64_t i = 0; i < w.numel(); ++i) {
            const float s = scales.empty() ? 1.0f : scales[scales.size() == 1 ? 0 : static_cast<std::size_t>(i / per_row)];
            want_values.view({-1})[i] = decode_fp8(codes[static_cast<std::size_t>(i)], fp8_format(k.type)) * s;
          }
          scale_bytes = 4 * scales.size();
        } else {
          want_logical = w.to(placeholder_dtype);
          want_values = want_logical.to(at::kFloat);
        }
        const bool packed = conv && backend::has_packed_conv() && backend::current_kernel_options().packed_conv;
        const auto kind = packed ? (fp8 ? WeightStore::Kind::PackedFp8 : WeightStore::Kind::PackedDense)
                                 : (fp8 ? WeightStore::Kind::Fp8 : WeightStore::Kind::Dense);
        QVERIFY2(st.kind() == kind, qPrintable(how));
        QVERIFY2(at::equal(st.logical().contiguous(), want_logical), qPrintable(how + ": logical"));
        QVERIFY2(at::equal(st.decode(at::kFloat).contiguous(), want_values), qPrintable(how + ": decode"));
        at::Tensor into = at::empty(w.sizes(), at::kFloat);
        st.decode_into(into);
        QVERIFY2(at::equal(into, want_values), qPrintable(how + ": decode_into"));
        if (conv) {  // into a channels_last BF16 buffer: the BF16 decode, whatever the strides
          at::Tensor cl = at::empty(w.sizes(), at::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
          st.decode_into(cl);
          QVERIFY2(at::equal(cl.contiguous(), st.decode(at::kBFloat16).contiguous()), qPrintable(how + ": decode_into BF16"));
        }
        const uint64_t element = fp8 ? 1 : 2;
        const uint64_t elements = packed ? static_cast<uint64_t>(st.layout.elements) : static_cast<uint64_t>(w.numel());
        QCOMPARE(st.bytes(), elements * element + scale_bytes);

        // an online LoRA term, then none
        const at::Tensor down = conv ? at::randn({2, 4, 3, 3}) : at::randn({2, 16});
        const at::Tensor up = conv ? at::randn({8, 2, 1, 1}) : at::randn({8, 2});
        const at::Tensor x = conv ? at::randn({1, 4, 6, 6}) : at::randn({3, 16});
        const auto forward = [&] {
          return conv ? std::static_pointer_cast<QConv2dImpl>(module)->forward(x) : std::static_pointer_cast<QLinearImpl>(module)->forward(x);
        };
        const at::Tensor base = forward();
        add_online_lora(*layer, {down, up, 0.75});
        const at::Tensor term = conv ? at::conv2d(at::conv2d(x, down, {}, 1, 1), up) : at::linear(at::linear(x, down), up);
        QVERIFY2(at::allclose(forward(), base + 0.75 * term, 1e-5, 1e-5), qPrintable(how + ": online LoRA"));
        QVERIFY(clear_online_loras(*layer));
        QVERIFY(!clear_online_loras(*layer));
        QVERIFY2(at::equal(forward(), base), qPrintable(how + ": LoRA removed"));
      }
    }
  }

  void fp8CheckpointsLoadWithoutUpcasting() {
    const QString fp8 = m_dir.path() + "/tiny-fp8.safetensors";
    auto r = test::run_cli({"convert", "--model", m_model, "--weights", "fp8-e5m2", "--fp8-scale", "channel", "--out", fp8});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    StorageSpec s{WeightType::FP8_E5M2, Fp8Scale::Channel, false};
    Model from_file(fp8.toStdString(), s);
    const auto& file = from_file.file();
    int checked = 0, scaled = 0;
    for (const auto& [key, layer] : from_file.layers()) {
      const auto& rec = file.at(key);
      QCOMPARE(layer->store.fp8, rec.dtype == Dtype::F8_E5M2);
      if (!layer->store.fp8) continue;
      QCOMPARE(layer->store.format, Fp8Format::E5M2);
      std::vector<uint8_t> codes(rec.numel());
      file.read(rec, codes.data());
      const auto stored = layer->store.logical().contiguous();
      QVERIFY(std::equal(codes.begin(), codes.end(), stored.data_ptr<uint8_t>()));  // the file's codes, as they are
      std::vector<float> scales(static_cast<std::size_t>(rec.shape[0]), 1.0f);
      if (const auto* sc = file.find(key.substr(0, key.size() - 7) + ".weight_scale")) {
        file.read(*sc, scales.data());
        ++scaled;
      }
      const auto mine = layer->store.decode(at::kFloat).contiguous();
      const uint64_t cols = rec.numel() / static_cast<uint64_t>(rec.shape[0]);
      for (uint64_t i = 0; i < rec.numel(); ++i) {
        if (mine.data_ptr<float>()[i] != decode_fp8(codes[i], Fp8Format::E5M2) * scales[i / cols]) QFAIL(key.c_str());
      }
      ++checked;
    }
    QVERIFY(checked > 50);
    QVERIFY(scaled > 10);
  }

  // FP32 compute from FP8 storage (issue 53): each layer's codes decode straight into FP32, so the
  // denoiser's output and the image equal those of the same FP8 file upcast to FP32 at load, bit
  // for bit, for both formats and scalings
  void fp32ComputeFromFp8EqualsUpcastAtLoad() {
    FP8S_REQUIRE_REFERENCE();
    std::atomic<bool> cancel{false};
    for (const char* weights : {"fp8-e4m3", "fp8-e5m2"}) {
      for (const char* scale : {"none", "tensor", "channel"}) {
        const QString fp8 = m_dir.path() + QString("/sd1-%1-%2.safetensors").arg(weights, scale);
        auto r = test::run_cli({"convert", "--model", QString::fromStdString(test::reference_path("sd1/tiny-sd1.safetensors")),
                                "--weights", weights, "--fp8-scale", scale, "--out", fp8});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        auto run = [&](const StorageSpec& storage) {
          Engine engine(reference_load(fp8.toStdString(), storage));
          GenerationRequest g = red_circle(storage, 3, 2);
          g.compute = ComputeType::FP32;
          auto image = engine.generate(g, nullptr, cancel).images.at(0).image;
          return std::pair{engine.unet_probe(storage, ComputeType::FP32, 9, 8), image.pixels};
        };
        const auto stored = *parse_weight_type(weights);
        const auto [probe8, pixels8] = run({stored, *parse_fp8_scale(scale), false});
        const auto [probe32, pixels32] = run({WeightType::FP32, Fp8Scale::None, false});
        QVERIFY(!probe8.empty());
        QVERIFY2(probe8 == probe32, qPrintable(QString("%1 %2").arg(weights, scale)));
        QVERIFY2(pixels8 == pixels32, qPrintable(QString("%1 %2").arg(weights, scale)));
      }
    }
  }

  // An FP8 checkpoint asked for 16-bit storage is really held in 16 bits (issue 22): each
  // quantised weight is its FP8 value (code x scale, decoded by the codec) rounded to FP16, two
  // bytes a weight; another FP8 format is quantised again; the infotext names what was stored.
  void fp8CheckpointAskedForSixteenBitsIsUpcast() {
    const QString fp8 = m_dir.path() + "/tiny-e4m3.safetensors";
    auto r = test::run_cli({"convert", "--model", m_model, "--weights", "fp8-e4m3", "--fp8-scale", "channel", "--out", fp8});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const StorageSpec fp16{WeightType::FP16, Fp8Scale::None, false};
    Model upcast(fp8.toStdString(), fp16);
    Model sixteen(m_model.toStdString(), fp16);
    QVERIFY(upcast.source_storage() && upcast.source_storage()->weights == WeightType::FP8_E4M3);
    QCOMPARE(upcast.source_storage()->scale, Fp8Scale::Channel);
    QVERIFY(!upcast.source_note().empty());
    QVERIFY(sixteen.source_note().empty());
    QCOMPARE(upcast.weight_bytes().total(), sixteen.weight_bytes().total());
    int checked = 0;
    for (const auto& [key, layer] : upcast.layers()) {
      const auto& rec = upcast.file().at(key);
      if (rec.dtype != Dtype::F8_E4M3) continue;
      QVERIFY2(!layer->store.fp8 && layer->store.weight.scalar_type() == at::kHalf, key.c_str());
      QCOMPARE(static_cast<uint64_t>(layer->store.weight.nbytes()), 2 * rec.numel());
      std::vector<uint8_t> codes(rec.numel());
      upcast.file().read(rec, codes.data());
      std::vector<float> scales(static_cast<std::size_t>(rec.shape[0]), 1.0f);  // unscaled: convolutions
      if (const auto* srec = upcast.file().find(key.substr(0, key.size() - 7) + ".weight_scale")) {
        QCOMPARE(static_cast<int64_t>(srec->numel()), rec.shape[0]);
        upcast.file().read(*srec, scales.data());
      }
      const uint64_t cols = rec.numel() / rec.shape[0];
      const auto w = layer->store.logical().contiguous();  // packed or not, the logical FP16 weight
      QCOMPARE(w.scalar_type(), at::kHalf);
      const auto* half = reinterpret_cast<const uint16_t*>(w.data_ptr());
      for (uint64_t i = 0; i < rec.numel(); ++i) {
        if (half[i] != f32_to_f16(decode_fp8(codes[i], Fp8Format::E4M3FN) * scales[i / cols])) QFAIL(key.c_str());
      }
      ++checked;
    }
    QVERIFY(checked > 50);
    // the other FP8 format: E5M2 codes made from the E4M3 values, one byte a weight
    Model e5m2(fp8.toStdString(), StorageSpec{WeightType::FP8_E5M2, Fp8Scale::Channel, false});
    for (const auto& [key, layer] : e5m2.layers()) {
      if (e5m2.file().at(key).dtype != Dtype::F8_E4M3) continue;
      QVERIFY2(layer->store.fp8 && layer->store.format == Fp8Format::E5M2 && layer->store.weight.scalar_type() == at::kByte, key.c_str());
    }
    FP8S_SKIP_WITHOUT_REFERENCE("the infotext half needs the CLIP vocabulary from ../shared/reference/clip");
    auto generate = [&](const QStringList& extra) {
      const QString out = m_dir.path() + "/gen-" + QString::number(++m_runs);
      auto g = test::run_cli(QStringList{"generate", "--model", fp8, "--vocab", test::reference_dir() + "/clip", "--prompt",
                                         "a cat", "--width", "64", "--height", "64", "--steps", "2", "--seed", "3",
                                         "--compute", "fp32", "--outdir", out, "--json"} + extra);
      if (g.exit_code != 0) qWarning("%s", qPrintable(g.err));
      const auto j = QJsonDocument::fromJson(g.out.toUtf8()).object();
      const auto png = read_png(j["images"].toArray()[0].toObject()["path"].toString().toStdString());
      return std::pair{QString::fromStdString(png.parameters), j["weight_bytes"].toDouble()};
    };
    const auto [asked16, bytes16] = generate({"--weights", "fp16"});
    QVERIFY2(asked16.contains("FP8 weight: Disable") && asked16.contains("Weights: fp16"), qPrintable(asked16));
    QCOMPARE(bytes16, double(sixteen.weight_bytes().total()));
    // without --weights: the checkpoint's own storage, FP8
    const auto [own, own_bytes] = generate({});
    QVERIFY2(own.contains("FP8 weight: fp8-e4m3") && own.contains("Weights: fp8-e4m3") && own.contains("FP8 scale: channel"),
             qPrintable(own));
    Model own_storage(fp8.toStdString(), StorageSpec{WeightType::FP8_E4M3, Fp8Scale::Channel, false});
    QCOMPARE(own_bytes, double(own_storage.weight_bytes().total()));
    QVERIFY(own_storage.weight_bytes().denoiser < 0.55 * sixteen.weight_bytes().denoiser);
  }

  // The bytes a load reports are the bytes its tensors hold: a packed convolution counts its
  // packed elements (padding included), not its placeholder's logical size (the placeholder owns
  // one element). Summed here over the distinct storages, for every storage type.
  // The UNet under a weight budget (issue 41) on the tiny SD1 and SDXL reference checkpoints, in
  // FP16 and FP8: with 0 blocks, 1 block and all blocks but one resident, and with an online LoRA,
  // every image equals the resident one bit for bit; the tracked peak stays within the resident
  // weights + two staged blocks + the working-memory estimate; a merge is refused while streaming
  void streamedUnetEqualsResidentBitForBit() {
    FP8S_REQUIRE_REFERENCE();
    std::atomic<bool> cancel{false};
    for (const char* family : {"sd1", "sdxl"}) {
      const std::string ckpt = test::reference_path(QString("%1/tiny-%1.safetensors").arg(family));
      const std::string lora = test::reference_path(QString("%1/lora-tiny-%1.safetensors").arg(family));
      for (const WeightType storage : {WeightType::FP16, WeightType::FP8_E4M3}) {
        const LoadOptions o = reference_load(ckpt, {storage, Fp8Scale::Tensor, false});
        Engine engine(o);
        GenerationRequest r = red_circle(o.storage, 5, 3);
        const auto resident = engine.generate(r, nullptr, cancel);
        const uint64_t all = resident.unet_bytes;
        QCOMPARE(engine.info().streamed_blocks, 0);
        // budget 0 streams every block; the plan lists them with their bytes
        r.weight_budget = 0;
        const auto none = engine.generate(r, nullptr, cancel);
        const auto plan = engine.info().block_plan;
        const int blocks = static_cast<int>(plan.size());
        QVERIFY(blocks > 3);
        QVERIFY(none.unet_bytes < all);  // the blocks' layers are not held
        const uint64_t outside = engine.info().fixed_bytes;  // the layers outside the blocks stay resident
        // the block that stays when all others stream: the plan streams the most compute per byte
        // first, the later block on a tie, so the last to go is the first block of the least compute
        std::size_t keep = 0;
        for (std::size_t i = 1; i < plan.size(); ++i) {
          if (plan[i].compute_per_byte < plan[keep].compute_per_byte) keep = i;
        }
        uint64_t planned = outside;  // the plan's bytes of every streamable layer
        for (const auto& b : plan) planned += b.bytes;
        QVERIFY(planned <= all);
        const std::pair<uint64_t, int> cases[] = {{0, blocks}, {outside + plan[keep].bytes, blocks - 1}, {planned - 1, 1}};
        for (const auto& [budget, want] : cases) {
          r.weight_budget = budget;
          const auto out = engine.generate(r, nullptr, cancel);
          const auto info = engine.info();
          QCOMPARE(info.streamed_blocks, want);
          if (want == blocks - 1) QVERIFY(!info.block_plan[keep].streamed);
          // the family's plan from the header (inspect's) is the load's
          const auto planned_here = find_family(SafetensorsFile(ckpt))->tools.plan(o, o.storage, budget);
          QCOMPARE(planned_here.blocks.size(), info.block_plan.size());
          for (std::size_t i = 0; i < info.block_plan.size(); ++i) {
            QCOMPARE(planned_here.blocks[i].name, info.block_plan[i].name);
            QCOMPARE(planned_here.blocks[i].bytes, info.block_plan[i].bytes);
            QCOMPARE(bool(planned_here.streamed[i]), info.block_plan[i].streamed);
          }
          QVERIFY2(out.images.at(0).image.pixels == resident.images.at(0).image.pixels,
                   qPrintable(QString("%1 %2 budget %3: the streamed image differs").arg(family, weight_type_name(storage)).arg(budget)));
          QVERIFY(out.streamed_bytes >= info.streamed_block_bytes);
          // the peak: what is resident, two staged blocks (each at most the streamed bytes), the working memory
          const auto config = config_for(SafetensorsFile(ckpt));
          const uint64_t working = estimate_working_bytes(config.unet, config.vae, 64, 64, 1, r.compute);
          uint64_t largest = 0;
          for (const auto& b : info.block_plan) largest = std::max(largest, b.streamed ? b.bytes : 0);
          const uint64_t bound = out.unet_bytes + out.text_bytes + out.vae_bytes + 2 * largest + working;
          QVERIFY2(out.tracked_peak_bytes <= bound, qPrintable(QString("peak %1 > %2").arg(out.tracked_peak_bytes).arg(bound)));
        }
        // the host transport (a GPU's: blocks held in host memory, copied in when entered), run
        // here onto the CPU: the same images
        qputenv("FP8S_STREAM_TRANSPORT", "host");
        for (const uint64_t budget : {uint64_t(0), planned - 1}) {
          r.weight_budget = budget;
          const auto out = engine.generate(r, nullptr, cancel);
          QVERIFY(engine.info().streamed_blocks > 0);
          QVERIFY(out.streamed_bytes >= engine.info().streamed_block_bytes);
          QVERIFY2(out.images.at(0).image.pixels == resident.images.at(0).image.pixels,
                   qPrintable(QString("%1 %2 host transport, budget %3: the streamed image differs").arg(family, weight_type_name(storage)).arg(budget)));
        }
        qunsetenv("FP8S_STREAM_TRANSPORT");
        r.weight_budget.reset();
        // an online LoRA, streamed and resident alike; merge refused while streaming
        r.loras = {{lora, 1.0f, 1.0f}};
        r.lora_mode = LoraMode::Online;
        const auto lora_resident = engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
        QVERIFY(lora_resident != resident.images.at(0).image.pixels);
        r.weight_budget = 0;
        QCOMPARE(engine.generate(r, nullptr, cancel).images.at(0).image.pixels, lora_resident);
        r.lora_mode = LoraMode::Merge;
        {
          const QString msg = test::refusal(engine, r);
          QVERIFY2(msg.contains("cannot apply while the UNet streams"), qPrintable(msg));
        }
      }
    }
  }

  void weightBytesAreWhatTheTensorsHold() {
    SafetensorsFile file(m_model.toStdString());
    const auto config = config_for(file);
    for (const StorageSpec s : {StorageSpec{WeightType::BF16, Fp8Scale::None, false}, StorageSpec{WeightType::FP16, Fp8Scale::None, false},
                                StorageSpec{WeightType::FP8_E4M3, Fp8Scale::Tensor, false},
                                StorageSpec{WeightType::FP8_E4M3, Fp8Scale::Channel, false}}) {
      UNetImpl unet(config.unet);
      const auto report = load_module_weights(unet, file, "model.diffusion_model.", s, true);
      std::set<const void*> seen;
      uint64_t held = 0, layers = 0;
      auto add = [&](const at::Tensor& t) {
        if (t.defined() && seen.insert(t.storage().unsafeGetStorageImpl()).second) held += t.storage().nbytes();
      };
      for (const auto& p : unet.named_parameters(true)) add(p.value());
      for (const auto& b : unet.named_buffers(true)) add(b.value());
      for (const auto& m : unet.named_modules("", false)) {
        if (auto* layer = dynamic_cast<QuantisedLayer*>(m.value().get())) {
          add(layer->store.packed);
          ++layers;
        }
      }
      // the placeholders' one element each is all that may differ
      QVERIFY2(report.bytes <= held && held - report.bytes <= 2 * layers,
               qPrintable(QString("%1: reported %2, held %3").arg(QString::fromStdString(storage_display_name(s))).arg(report.bytes).arg(held)));
    }
  }

  // Under FP8 storage everything that is not a Linear/Conv2d weight of the UNet or text encoder
  // stays 16-bit: biases, norms, the token/position/time embeddings, the whole VAE. Counted per
  // kind, so a renamed module cannot make the check vacuous.
  void nonQuantisedTensorsKeepSixteenBits() {
    // the modules as the engine loads them (models/ + the loader, as families/sd/model.cpp does)
    SafetensorsFile file(m_model.toStdString());
    const auto config = config_for(file);
    const StorageSpec s{WeightType::FP8_E4M3, Fp8Scale::None, false};
    UNetImpl unet(config.unet);
    load_module_weights(unet, file, "model.diffusion_model.", s, true);
    TextEncoderImpl te(config.text_encoders.at(0));
    load_module_weights(te, file, config.text_encoders[0].prefix, s, true, te.ignorable_keys(), te.fused_layers());
    VaeImpl vae(config.vae);
    load_module_weights(vae, file, "first_stage_model.", s, false);
    std::map<std::string, int> kinds;
    auto check = [&](torch::nn::Module& root) {
      std::set<const at::TensorImpl*> quantised;
      for (const auto& item : root.named_modules("", false)) {
        if (auto* layer = dynamic_cast<QuantisedLayer*>(item.value().get()); layer && layer->store.fp8) {
          quantised.insert(layer->store.weight.unsafeGetTensorImpl());
        }
      }
      for (const auto& p : root.named_parameters(true)) {
        const auto& name = p.key();
        const auto& t = p.value();
        if (quantised.count(t.unsafeGetTensorImpl())) {
          QCOMPARE(t.scalar_type(), at::kByte);
          ++kinds["fp8"];
          continue;
        }
        QVERIFY2(t.scalar_type() == at::kHalf, name.c_str());
        if (name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos) ++kinds["norm"];
        else if (name.find("embedding") != std::string::npos) ++kinds["embedding"];
        else if (name.find("time_embed") != std::string::npos) ++kinds["time_embed"];
        else if (name.find("bias") != std::string::npos) ++kinds["bias"];
        else ++kinds["other"];
      }
    };
    check(unet);
    check(te);
    for (const auto& [kind, n] : kinds) qInfo("%s: %d tensors", kind.c_str(), n);
    QVERIFY(kinds["fp8"] > 50);
    QVERIFY(kinds["norm"] > 20);
    QVERIFY(kinds["embedding"] >= 2);  // token and position embeddings
    QVERIFY(kinds["time_embed"] >= 2);
    QVERIFY(kinds["bias"] > 50);
    for (const auto& p : vae.named_parameters(true)) QVERIFY2(p.value().scalar_type() == at::kHalf, p.key().c_str());
  }

  void noFullPrecisionCopyStaysResident() {
    for (auto weights : {WeightType::FP16, WeightType::FP8_E4M3, WeightType::FP32}) {
      const auto before = tracked_bytes().live;
      {
        StorageSpec s{weights, Fp8Scale::Tensor, false};
        Model model(m_model.toStdString(), s);
        const auto after = tracked_bytes().live;
        const auto stored = model.weight_bytes().total();
        const double held = double(after - before);
        qInfo("%s: tracked %.0f bytes for %llu stored bytes", weight_type_name(weights), held,
              static_cast<unsigned long long>(stored));
        QVERIFY2(held >= 0.99 * stored && held <= 1.02 * stored + 64 * 1024,
                 qPrintable(QString("held %1 vs stored %2").arg(held).arg(stored)));
      }
      QVERIFY(tracked_bytes().live <= before + 64 * 1024);  // released with the model
    }
  }

  void compareWritesItsReport() {
    FP8S_SKIP_WITHOUT_REFERENCE("needs the CLIP vocabulary from ../shared/reference/clip");
    const QString out = m_dir.path() + "/cmp";
    auto r = test::run_cli({"compare", "--model", m_model, "--modes", "fp16,fp8-e4m3/channel", "--vocab",
                            test::reference_dir() + "/clip", "--width", "64", "--height", "64", "--steps", "3",
                            "--seed", "11", "--compute", "fp32", "--outdir", out, "--json"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const QString folder = out + "/compare-00001";
    for (const char* f : {"fp16.png", "fp8-e4m3-channel.png", "side_by_side.png", "diff_heatmap.png", "report.md", "report.json"}) {
      QVERIFY2(QFileInfo::exists(folder + "/" + f), f);
    }
    const auto j = QJsonDocument::fromJson(QByteArray::fromStdString(test::read_bytes((folder + "/report.json").toStdString()))).object();
    const auto modes = j["modes"].toArray();
    QCOMPARE(modes.size(), 2);
    QCOMPARE(modes[0].toObject()["psnr_db_vs_first"].toString(), QString("inf"));
    const auto fp8 = modes[1].toObject();
    const auto fp16 = modes[0].toObject();
    QVERIFY(fp8["psnr_db_vs_first"].toDouble() > 10);
    QVERIFY(fp8["ssim_vs_first"].toDouble() > 0.5 && fp8["ssim_vs_first"].toDouble() < 1);
    QVERIFY(fp8["weight_bytes"].toObject()["unet"].toDouble() < 0.55 * fp16["weight_bytes"].toObject()["unet"].toDouble());
    QVERIFY(fp8["unet_rel_l2_vs_fp32"].toDouble() > 0);
    QCOMPARE(fp8["step_ms"].toArray().size(), 3);
    QVERIFY(QString::fromStdString(test::read_bytes((folder + "/report.md").toStdString())).contains("| fp8-e4m3/channel |"));
    // the report matches its images
    const auto a = read_png((folder + "/fp16.png").toStdString()), b = read_png((folder + "/fp8-e4m3-channel.png").toStdString());
    int worst = 0;
    for (std::size_t i = 0; i < a.image.pixels.size(); ++i) worst = std::max(worst, std::abs(int(a.image.pixels[i]) - int(b.image.pixels[i])));
    QCOMPARE(fp8["max_abs_diff_vs_first"].toInt(), worst);
  }
};

QTEST_GUILESS_MAIN(TestFp8Storage)
#include "test_fp8_storage.moc"
