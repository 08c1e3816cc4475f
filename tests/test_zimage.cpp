// Z-Image (issue 42): the released layouts of the transformer and of Qwen3-4B (reference/keys)
// read into the configurations the shapes give and loaded on the meta device without a missing or
// unexpected key, and written by make-synthetic exactly; a file that is not the layout is refused
// by name. Generation through the engine: the components found in a ComfyUI models folder give
// the image the explicit files give, every block streamed gives it bit for bit, and what is
// missing or unsupported is refused by name. LoRAs: every spelling maps onto its weight, and a
// LoRA merged or online (FP8 too) gives the output of W + s·up·down summed by hand.
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>

#include "core/error.h"
#include "families/zimage/zimage_sampling.h"
#include "pipeline/family.h"
#include "models/inspect.h"
#include "fp8/quantize.h"
#include "pipeline/engine.h"
#include "pipeline/infotext.h"
#include "models/lm/decoder_lm.h"
#include "families/zimage/zimage_lora_keys.h"
#include "families/zimage/zimage_transformer.h"
#include "families/lora_set.h"
#include "models/nn.h"
#include "diffusers_folder.h"
#include "hand_sum.h"
#include "keys_files.h"

using namespace fp8s;
using test::diffusers_vae_name;
using test::Out;
using test::write_config;
using test::write_shards;

class TestZImage : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  // Generation through the engine on the tiny reference files
  static QString ref(const char* name) { return test::reference_dir() + "/zimage/" + name; }
  static LoadOptions tiny_options() {
    LoadOptions o;
    o.checkpoint = ref("tiny-zimage-turbo.safetensors").toStdString();
    o.components["text_encoder"] = ref("tiny-qwen3.safetensors").toStdString();
    o.components["vae"] = ref("tiny-ae.safetensors").toStdString();
    o.components["qwen_tokenizer"] = ref("qwen_tokenizer").toStdString();
    o.storage = {WeightType::BF16, Fp8Scale::None, false};
    o.device = "cpu";
    return o;
  }
  // The InputError a load is refused with; "loaded" when it loads.
  static QString load_refusal(const LoadOptions& o) {
    try {
      Engine engine(o);
    } catch (const InputError& e) {
      return QString::fromUtf8(e.what());
    }
    return QStringLiteral("loaded");
  }
  static GenerationRequest tiny_request() {
    GenerationRequest r;
    r.prompt = "a lighthouse on a cliff at dusk";
    r.seed = 7;
    r.steps = 4;
    r.width = 32;
    r.height = 24;
    r.cfg = 1.0f;
    r.sampler = Sampler::Euler;
    r.schedule = Schedule::Normal;
    r.compute = ComputeType::FP32;
    r.storage = {WeightType::BF16, Fp8Scale::None, false};
    return r;
  }
  static std::vector<uint8_t> pixels(Engine& engine, const GenerationRequest& r) {
    std::atomic<bool> cancel{false};
    return engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
  }

 private Q_SLOTS:
  // The one CFG the generation and the sampling loop share (issue 56: the two copies differed in a
  // batch): pos + g·(pos − neg), each item's 2-norm capped at K times its own positive's. By hand,
  // g = 1, K = 1.5: item 0 pos (3, 4), neg 0 gives (6, 8), norm 10 > 7.5, scaled by 0.75 to
  // (4.5, 6); item 1 pos = neg = (1, 0) gives (1, 0), under its own cap and left alone (capping the
  // whole batch's norm would have scaled it by 7.65 / 10.05)
  void guidanceCapsEachItemOnItsOwn() {
    const auto pos = at::tensor({3.0f, 4.0f, 1.0f, 0.0f}).view({2, 1, 1, 2});
    const auto neg = at::tensor({0.0f, 0.0f, 1.0f, 0.0f}).view({2, 1, 1, 2});
    const auto capped = zimage_guidance(pos, neg, 1.0, 1.5).flatten();
    const std::vector<float> want{4.5f, 6.0f, 1.0f, 0.0f};
    for (int i = 0; i < 4; ++i) QCOMPARE(capped[i].item<float>(), want[static_cast<std::size_t>(i)]);
    const auto free = zimage_guidance(pos, neg, 1.0, 0.0).flatten();
    const std::vector<float> uncapped{6.0f, 8.0f, 1.0f, 0.0f};
    for (int i = 0; i < 4; ++i) QCOMPARE(free[i].item<float>(), uncapped[static_cast<std::size_t>(i)]);
  }

  // A Z-Image image's parameters restore every setting it was made with (issue 56: the shared parser
  // read "Shift" as Flux's switch and dropped CFG normalization, CFG truncation and Qwen length)
  void infotextRestoresEverySetting() {
    FP8S_REQUIRE_REFERENCE();
    GenerationRequest r = tiny_request();
    r.negative = "blurry";
    r.cfg = 4.0f;
    r.options = {{"shift", "5"}, {"cfg-norm", "1.5"}, {"cfg-truncation", "0.75"}, {"qwen-max-length", "64"}};
    Engine engine(tiny_options());
    std::atomic<bool> cancel{false};
    const std::string text = engine.generate(r, nullptr, cancel).images.at(0).parameters;
    const GenerationRequest back = parse_infotext(text);
    QCOMPARE(QString::fromStdString(back.prompt), QString::fromStdString(r.prompt));
    QCOMPARE(QString::fromStdString(back.negative), QString("blurry"));
    QCOMPARE(back.steps, r.steps);
    QCOMPARE(back.cfg, 4.0f);
    QCOMPARE(back.seed, int64_t{7});
    QCOMPARE(back.width, 32);
    QCOMPARE(back.height, 24);
    // exactly Z-Image's four, and nothing of Flux's ("Shift: 5" is not Flux's "Shift: off")
    QCOMPARE(back.options, r.options);
    QVERIFY2(QString::fromStdString(text).contains("Shift: 5"), text.c_str());
  }

  void fullSizeLayoutsLoadOnTheMetaDevice() {
    FP8S_REQUIRE_REFERENCE();
    const auto zkeys = test::load_keys("zimage-turbo.json");
    const SafetensorsFile z(test::sparse_file(m_dir.path(), "z_image_turbo_bf16.safetensors", zkeys));
    QVERIFY(find_family(z) && find_family(z)->id == "zimage");
    const auto c = zimage_config(z, "");
    QCOMPARE(c.dim, 3840);
    QCOMPARE(c.layers, 30);
    QCOMPARE(c.noise_refiners, 2);
    QCOMPARE(c.context_refiners, 2);
    QCOMPARE(c.heads, 30);
    QCOMPARE(c.cap_dim, 2560);
    QCOMPARE(c.ffn, 10240);
    QCOMPARE(c.adaln, 256);
    {
      auto m = test::meta_loaded<ZImageTransformer>(c, z, "", ZImageTransformerImpl::ignorable_keys());
      // every tensor of the file is a parameter of the module: 6,154,908,736 (the README's count)
      QCOMPARE(test::module_params(*m), test::params_of(zkeys, [](const QString&) { return true; }));
      QCOMPARE(test::module_params(*m), uint64_t(6'154'908'736ull));
      QCOMPARE(int(m->blocks().size()), 34);
    }
    const auto qkeys = test::load_keys("qwen3-4b.json");
    const SafetensorsFile q(test::sparse_file(m_dir.path(), "qwen_3_4b.safetensors", qkeys));
    const auto qc = decoder_lm_config(q, "model.", {}, "qwen3.config");
    QCOMPARE(test::lm_shape(qc), (std::vector<int64_t>{2560, 36, 32, 8, 128, 9728}));
    QCOMPARE(qc.vocab_size, 151936);
    {
      auto enc = test::meta_loaded<DecoderLm>(qc, q, "model.", DecoderLmImpl::ignorable_keys(qc));
      // all but the last layer and the final norm (hidden_states[-2] never reads them)
      QCOMPARE(test::module_params(*enc), test::params_of(qkeys, [](const QString& k) {
                 return !k.startsWith("model.layers.35.") && k != "model.norm.weight";
               }));
      QCOMPARE(test::params_of(qkeys, [](const QString&) { return true; }), uint64_t(4'022'468'096ull));
    }
    // a transformer without one of its tensors is refused naming it
    const SafetensorsFile broken(test::sparse_file(m_dir.path(), "broken.safetensors", zkeys, "layers.7.feed_forward.w2.weight"));
    try {
      (void)test::meta_loaded<ZImageTransformer>(zimage_config(broken, ""), broken);
      QFAIL("a transformer without layers.7.feed_forward.w2.weight loaded");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("layers.7.feed_forward.w2.weight"), e.what());
    }
  }
  void syntheticLayoutsAreTheReleasedOnes() {
    FP8S_REQUIRE_REFERENCE();
    for (const auto& [arch, keys_file] : {std::pair{"zimage-turbo", "zimage-turbo.json"}, std::pair{"qwen3-4b", "qwen3-4b.json"}}) {
      test::compare_synthetic_layout(arch, keys_file, "zimage");
      if (QTest::currentTestFailed()) return;
    }
  }

  void comfyFolderFindsTheComponents() {
    FP8S_REQUIRE_REFERENCE();
    // models/diffusion_models/MODEL, models/text_encoders/qwen_3_4b*, models/vae/ae*, the tokenizer beside the model
    const QString root = m_dir.path() + "/comfy/models";
    for (const char* d : {"diffusion_models", "text_encoders", "vae"}) QVERIFY(QDir().mkpath(root + "/" + d));
    QVERIFY(QFile::link(ref("tiny-zimage-turbo.safetensors"), root + "/diffusion_models/z_image_turbo_bf16.safetensors"));
    QVERIFY(QFile::link(ref("tiny-qwen3.safetensors"), root + "/text_encoders/qwen_3_4b.safetensors"));
    QVERIFY(QFile::link(ref("tiny-ae.safetensors"), root + "/vae/ae.safetensors"));
    QVERIFY(QFile::link(ref("qwen_tokenizer"), root + "/diffusion_models/qwen_tokenizer"));
    LoadOptions found;
    found.checkpoint = (root + "/diffusion_models/z_image_turbo_bf16.safetensors").toStdString();
    found.storage = {WeightType::BF16, Fp8Scale::None, false};
    found.device = "cpu";
    Engine a(found), b(tiny_options());
    const auto info = a.info();
    QCOMPARE(QString::fromStdString(info.architecture), QString("Z-Image Turbo"));
    QCOMPARE(int(info.components.size()), 3);
    QVERIFY(QString::fromStdString(info.components[1].path).endsWith("text_encoders/qwen_3_4b.safetensors"));
    QVERIFY(QString::fromStdString(info.components[2].path).endsWith("vae/ae.safetensors"));
    QVERIFY(pixels(a, tiny_request()) == pixels(b, tiny_request()));
    // without the text encoder: refused naming the option
    QVERIFY(QFile::remove(root + "/text_encoders/qwen_3_4b.safetensors"));
    const QString refused = load_refusal(found);
    QVERIFY2(refused.contains("--text-encoder"), qPrintable("a Z-Image model without its text encoder: " + refused));
  }

  // (helpers, not tests)
 private:
  // A diffusers model folder written from the tiny files by the names diffusers gives them
  // (../shared/reference/zimage/README.md: convert_z_image_transformer_checkpoint_to_diffusers and
  // convert_ldm_vae_checkpoint, spelled out here on their own): q/k/v split into three tensors,
  // the autoencoder's blocks renamed and its up blocks reversed, the attention's 1x1 convolutions
  // as Linear weights; the transformer and the text encoder in shards with their index.
  static std::string diffusers_transformer_name(const std::string& n) {
    static const std::pair<const char*, const char*> renames[] = {
        {"x_embedder.", "all_x_embedder.2-1."}, {"final_layer.", "all_final_layer.2-1."},
        {".attention.out.", ".attention.to_out.0."}, {".attention.q_norm.", ".attention.norm_q."},
        {".attention.k_norm.", ".attention.norm_k."}};
    std::string out = n;
    for (const auto& [from, to] : renames) {
      const auto at = out.find(from);
      if (at != std::string::npos && (from[0] == '.' || at == 0)) out.replace(at, std::string(from).size(), to);
    }
    return out;
  }
 private Q_SLOTS:
  // inspect names the family and counts its Linear weights as FP8-able (the autoencoder's not)
  void inspectNamesTheFamilyAndItsComponents() {
    FP8S_REQUIRE_REFERENCE();
    const SafetensorsFile t(ref("tiny-zimage-turbo.safetensors").toStdString());
    const auto r = inspect_model_file(t);
    QCOMPARE(QString::fromStdString(r.architecture()), QString("Z-Image Turbo"));
    QCOMPARE(int(r.components.size()), 1);
    QCOMPARE(QString::fromStdString(r.components[0].name), QString("transformer"));
    uint64_t linear = 0;  // by hand: every 2-D weight of the transformer
    for (const auto& rec : t.tensors()) linear += rec.shape.size() == 2 && rec.name.size() > 7 && rec.name.compare(rec.name.size() - 7, 7, ".weight") == 0;
    QCOMPARE(r.components[0].quantisable_tensors, linear);
    const SafetensorsFile q(ref("tiny-qwen3.safetensors").toStdString());
    const auto rq = inspect_checkpoint(q, {"Z-Image Turbo", {{"text_encoder", "model.", true}}});
    uint64_t q_linear = 0;  // the embedding stays 16-bit
    for (const auto& rec : q.tensors()) q_linear += rec.shape.size() == 2 && rec.name.find("embed_tokens") == std::string::npos;
    QCOMPARE(rq.components.at(0).quantisable_tensors, q_linear);
    // inspect --weight-budget plans the transformer as a load does (it once refused Z-Image): the
    // tiny file's 4 blocks (1 noise refiner, 1 context refiner, 2 layers) all stream at 0, none at 1 GB
    auto plan = [&](const char* budget) {
      const auto r = test::run_cli({"inspect", "--model", ref("tiny-zimage-turbo.safetensors"), "--weights", "bf16", "--weight-budget", budget});
      if (r.exit_code != 0) return r.err;
      return r.out;
    };
    const QString streamed = plan("0"), resident = plan("1G");
    QVERIFY2(streamed.contains("resident 0 of 4 blocks") && streamed.contains("layers.1 ") && streamed.contains("streamed"),
             qPrintable(streamed));
    QVERIFY2(resident.contains("resident 4 of 4 blocks"), qPrintable(resident));
  }

  void diffusersFolderGivesTheSplitFilesImage() {
    FP8S_REQUIRE_REFERENCE();
    const QString root = m_dir.path() + "/Z-Image-Turbo";
    {  // transformer/: q, k, v as three tensors, 3 shards
      const SafetensorsFile t(ref("tiny-zimage-turbo.safetensors").toStdString());
      std::vector<Out> out;
      for (const auto& r : t.tensors()) {
        const auto qkv = r.name.find(".attention.qkv.");
        if (qkv == std::string::npos) {
          out.push_back({diffusers_transformer_name(r.name), &r, r.shape});
          continue;
        }
        const int64_t third = r.shape[0] / 3;
        const char* parts[] = {"to_q.", "to_k.", "to_v."};
        for (int i = 0; i < 3; ++i) {
          auto shape = r.shape;
          shape[0] = third;
          out.push_back({r.name.substr(0, qkv) + ".attention." + parts[i] + r.name.substr(qkv + 15), &r, shape, i * third});
        }
      }
      write_shards(t, out, root + "/transformer", "diffusion_pytorch_model", 3, "diffusion_pytorch_model.safetensors.index.json");
      write_config(t, "zimage.config", root + "/transformer/config.json", {{"_class_name", "ZImageTransformer2DModel"}});
    }
    {  // text_encoder/: transformers' names as they are, 2 shards
      const SafetensorsFile q(ref("tiny-qwen3.safetensors").toStdString());
      std::vector<Out> out;
      for (const auto& r : q.tensors()) out.push_back({r.name, &r, r.shape});
      write_shards(q, out, root + "/text_encoder", "model", 2, "model.safetensors.index.json");
      write_config(q, "qwen3.config", root + "/text_encoder/config.json", {{"model_type", "qwen3"}});
    }
    {  // vae/: AutoencoderKL's names, one file
      const SafetensorsFile v(ref("tiny-ae.safetensors").toStdString());
      int levels = 0;
      while (v.find("decoder.up." + std::to_string(levels) + ".block.0.conv1.weight")) ++levels;
      std::vector<Out> out;
      for (const auto& r : v.tensors()) {
        auto shape = r.shape;
        if (r.name.find(".mid.attn_1.") != std::string::npos && shape.size() == 4) shape = {shape[0], shape[1]};
        out.push_back({diffusers_vae_name(r.name, levels), &r, shape});
      }
      write_shards(v, out, root + "/vae", "diffusion_pytorch_model", 1, "");
      const auto ae = QJsonDocument::fromJson(QByteArray::fromStdString(v.metadata().at("ae.config"))).object();
      QFile f(root + "/vae/config.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QJsonDocument(QJsonObject{{"_class_name", "AutoencoderKL"}, {"scaling_factor", ae["scale_factor"]},
                                        {"shift_factor", ae["shift_factor"]}}).toJson());
    }
    QVERIFY(QFile::link(ref("qwen_tokenizer"), root + "/tokenizer"));
    {
      QFile f(root + "/model_index.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"_class_name": "ZImagePipeline"})");
    }
    LoadOptions folder;
    folder.checkpoint = root.toStdString();
    folder.storage = {WeightType::BF16, Fp8Scale::None, false};
    folder.device = "cpu";
    Engine a(folder), b(tiny_options());
    const auto info = a.info();
    QCOMPARE(QString::fromStdString(info.architecture), QString("Z-Image Turbo"));
    QCOMPARE(QString::fromStdString(info.components[1].path), root + "/text_encoder");
    QCOMPARE(QString::fromStdString(info.components[2].path), root + "/vae");
    QCOMPARE(info.unet_bytes + info.text_bytes + info.vae_bytes, b.info().unet_bytes + b.info().text_bytes + b.info().vae_bytes);
    QVERIFY(pixels(a, tiny_request()) == pixels(b, tiny_request()));
    // an index that places every tensor in the first shard names a tensor the shard lacks (it once
    // blamed the tokenizer)
    const QString index = root + "/transformer/diffusion_pytorch_model.safetensors.index.json";
    {
      QFile f(index);
      QVERIFY(f.open(QIODevice::ReadOnly));
      const QByteArray original = f.readAll();
      f.close();
      QJsonObject j = QJsonDocument::fromJson(original).object();
      QJsonObject map = j["weight_map"].toObject();
      for (auto it = map.begin(); it != map.end(); ++it) it.value() = "diffusion_pytorch_model-00001-of-00003.safetensors";
      j["weight_map"] = map;
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
      f.write(QJsonDocument(j).toJson());
      f.close();
      const QString wrong = load_refusal(folder);
      QVERIFY2(wrong.contains("in diffusion_pytorch_model-00001-of-00003.safetensors, which does not hold it") &&
                   wrong.contains("from different downloads"),
               qPrintable("an index that does not match its shards: " + wrong));
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
      f.write(original);
    }
    // a missing shard is named with what to do
    QVERIFY(QFile::remove(root + "/transformer/diffusion_pytorch_model-00002-of-00003.safetensors"));
    const QString refused = load_refusal(folder);
    QVERIFY2(refused.contains("00002-of-00003.safetensors, which is missing"), qPrintable("a folder with a missing shard: " + refused));
  }

  // A scaled FP8 Qwen3 file in ComfyUI's comfy_quant layout (F8 weights, .weight_scale, a
  // .comfy_quant description; the last layer, which Z-Image never runs, included) gives the image
  // of the plain file quantised at load with the same per-tensor scales.
  void comfyQuantQwen3FileGivesThePlainFilesImage() {
    FP8S_REQUIRE_REFERENCE();
    const SafetensorsFile plain(ref("tiny-qwen3.safetensors").toStdString());
    std::vector<TensorSpec> specs;
    std::vector<std::vector<uint8_t>> data;
    for (const auto& r : plain.tensors()) {
      std::vector<uint8_t> bytes(r.nbytes());
      plain.read(r, bytes.data());
      const bool linear = r.shape.size() == 2 && r.name.find("embed_tokens") == std::string::npos;
      if (!linear) {
        specs.push_back({r.name, r.dtype, r.shape});
        data.push_back(std::move(bytes));
        continue;
      }
      QVERIFY(r.dtype == Dtype::BF16 || r.dtype == Dtype::F32);
      std::vector<float> w(r.numel());  // BF16 is FP32's upper half
      for (std::size_t i = 0; i < w.size(); ++i) {
        uint32_t bits = 0;
        if (r.dtype == Dtype::BF16) bits = uint32_t(bytes[2 * i] | bytes[2 * i + 1] << 8) << 16;
        else std::memcpy(&bits, bytes.data() + 4 * i, 4);
        std::memcpy(&w[i], &bits, 4);
      }
      std::vector<uint8_t> codes(r.numel());
      const auto scales = quantize_weight(w.data(), r.shape[0], static_cast<int64_t>(r.numel()), Fp8Format::E4M3FN,
                                          Fp8Scale::Tensor, codes.data());
      const std::string layer = r.name.substr(0, r.name.size() - 7);
      specs.push_back({r.name, Dtype::F8_E4M3, r.shape});
      data.push_back(std::move(codes));
      specs.push_back({layer + ".weight_scale", Dtype::F32, {}});
      data.emplace_back(reinterpret_cast<const uint8_t*>(scales.data()), reinterpret_cast<const uint8_t*>(scales.data()) + 4);
      const std::string conf = R"({"format": "float8_e4m3fn"})";
      specs.push_back({layer + ".comfy_quant", Dtype::U8, {static_cast<int64_t>(conf.size())}});
      data.emplace_back(conf.begin(), conf.end());
    }
    const std::string scaled = (m_dir.path() + "/qwen_3_4b_fp8_scaled.safetensors").toStdString();
    {
      SafetensorsWriter w(scaled, specs, plain.metadata());
      for (const auto& d : data) w.append(d.data(), d.size());
      w.commit();
    }
    auto a_options = tiny_options(), b_options = tiny_options();
    a_options.components["text_encoder"] = scaled;
    for (auto* o : {&a_options, &b_options}) o->storage = {WeightType::FP8_E4M3, Fp8Scale::Tensor, false};
    Engine a(a_options), b(b_options);
    auto r = tiny_request();
    r.storage = a_options.storage;
    QVERIFY(pixels(a, r) == pixels(b, r));
  }

  void streamedEqualsResidentBitForBit() {
    FP8S_REQUIRE_REFERENCE();
    for (const WeightType storage : {WeightType::BF16, WeightType::FP8_E4M3}) {
      auto o = tiny_options();
      o.storage.weights = storage;
      Engine engine(o);
      auto r = tiny_request();
      r.storage.weights = storage;
      r.cfg = 3.0f;  // both captions through the streamed blocks
      r.negative = "blurry";
      const auto resident = pixels(engine, r);
      QCOMPARE(engine.info().streamed_blocks, 0);
      r.weight_budget = 0;
      const auto streamed = pixels(engine, r);
      // two layers, one noise and one context refiner
      QCOMPARE(engine.info().streamed_blocks, 4);
      QVERIFY(streamed == resident);
    }
  }

  // Every spelling people's Z-Image LoRAs use reaches its weight: the original names (bare, under
  // diffusion_model., kohya's lora_unet_ with the fused qkv) and diffusers' (the names the diffusers
  // folder above is written with, spelled out there: to_q/to_k/to_v the thirds of qkv, to_out.0 out,
  // all_x_embedder.2-1, all_final_layer.2-1), each 2-D weight of the tiny transformer by each
  void loraKeysMapEverySpelling() {
    FP8S_REQUIRE_REFERENCE();
    const auto weights = lora_linear_weights({ref("tiny-zimage-turbo.safetensors").toStdString(), ""});
    const auto map = zimage_lora_key_map(weights);
    auto underscored = [](std::string s) {
      std::replace(s.begin(), s.end(), '.', '_');
      return s;
    };
    int checked = 0;
    for (const auto& [key, shape] : weights) {
      const std::string module = key.substr(0, key.size() - 7);
      for (const std::string& name : {module, "diffusion_model." + module, "lora_unet_" + underscored(module)}) {
        QCOMPARE(QString::fromStdString(map.count(name) ? map.at(name) : "(none)"), QString::fromStdString(key));
      }
      const auto qkv = key.find(".attention.qkv.");
      std::vector<std::pair<std::string, std::string>> diffusers;  // module -> target
      if (qkv != std::string::npos) {
        const int64_t third = shape[0] / 3;
        const char* parts[] = {"to_q", "to_k", "to_v"};
        for (int i = 0; i < 3; ++i) {
          diffusers.push_back({key.substr(0, qkv) + ".attention." + parts[i],
                               key + "#rows:" + std::to_string(i * third) + ":" + std::to_string(third)});
        }
      } else {
        const std::string d = diffusers_transformer_name(key);
        diffusers.push_back({d.substr(0, d.size() - 7), key});
      }
      for (const auto& [d, target] : diffusers) {
        for (const std::string& name : {"transformer." + d, "diffusion_model." + d, d, "lora_transformer_" + underscored(d)}) {
          QCOMPARE(QString::fromStdString(map.count(name) ? map.at(name) : "(none: " + name + ")"), QString::fromStdString(target));
        }
      }
      ++checked;
    }
    QCOMPARE(checked, 2 * 6 + 6 + 5 + 6);  // 2 layers and a noise refiner (6 Linear each), a context refiner (5), 6 global
  }

 private:
  // One module of a hand-made Z-Image LoRA: its name and factor suffixes, the weight and rows it
  // reaches, its alpha (0: none, alpha = rank).
  struct HandModule {
    std::string name, down, up, key;
    int64_t row0, rows;
    double alpha;
  };
  static std::vector<HandModule> hand_modules() {
    return {{"diffusion_model.layers.0.attention.to_q", ".lora_A.weight", ".lora_B.weight", "layers.0.attention.qkv.weight", 0, 64, 0},
            {"transformer.layers.0.attention.to_v", ".lora_A.default.weight", ".lora_B.default.weight",
             "layers.0.attention.qkv.weight", 128, 64, 0},
            {"lora_unet_layers_1_attention_qkv", ".lora_down.weight", ".lora_up.weight", "layers.1.attention.qkv.weight", 0, 192, 2},
            {"transformer.noise_refiner.0.feed_forward.w2", ".lora_A.weight", ".lora_B.weight",
             "noise_refiner.0.feed_forward.w2.weight", 0, 64, 0},
            {"context_refiner.0.attention.to_out.0", ".lora.down.weight", ".lora.up.weight", "context_refiner.0.attention.out.weight",
             0, 64, 0},
            {"diffusion_model.all_final_layer.2-1.linear", ".lora_A.weight", ".lora_B.weight", "final_layer.linear.weight", 0, 64, 0},
            {"lora_unet_layers_0_adaLN_modulation_0", ".lora_down.weight", ".lora_up.weight", "layers.0.adaLN_modulation.0.weight", 0,
             256, 8}};
  }
  // Writes the LoRA (rank 4, random factors from `seed`) and returns each module's factors.
  static std::vector<std::pair<at::Tensor, at::Tensor>> write_hand_lora(const std::string& path, uint64_t seed) {
    const SafetensorsFile base(ref("tiny-zimage-turbo.safetensors").toStdString());
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    std::vector<TensorSpec> specs;
    std::vector<at::Tensor> data;
    std::vector<std::pair<at::Tensor, at::Tensor>> factors;
    for (const auto& m : hand_modules()) {
      const int64_t in = base.at(m.key).shape[1];
      const auto down = at::randn({4, in}, gen, at::kFloat) * 0.2, up = at::randn({m.rows, 4}, gen, at::kFloat) * 0.2;
      factors.push_back({down, up});
      specs.push_back({m.name + m.down, Dtype::F32, {4, in}});
      data.push_back(down);
      specs.push_back({m.name + m.up, Dtype::F32, {m.rows, 4}});
      data.push_back(up);
      if (m.alpha > 0) {
        specs.push_back({m.name + ".alpha", Dtype::F32, {}});
        data.push_back(at::full({}, m.alpha, at::kFloat));
      }
    }
    SafetensorsWriter w(path, specs, {});
    for (const auto& t : data) w.append(t.contiguous().data_ptr<float>(), static_cast<std::size_t>(t.numel()) * 4);
    w.commit();
    return factors;
  }
  // A copy of the transformer file `from` whose LoRA'd weights are W + multiplier·(alpha/rank)·up·down,
  // summed here (FP32; W as the file has it, F8 codes decoded), the other tensors as they are.
  static void write_hand_merged(const std::string& from, const std::string& to,
                                const std::vector<std::pair<at::Tensor, at::Tensor>>& factors, double multiplier) {
    const SafetensorsFile base(from);
    std::map<std::string, at::Tensor> merged;
    const auto modules = hand_modules();
    for (std::size_t i = 0; i < modules.size(); ++i) {
      const auto& m = modules[i];
      if (!merged.count(m.key)) {
        merged[m.key] = read_tensor(base, base.at(m.key));  // F8 codes decoded (fp8/codec, tested exhaustively)
      }
      const double scale = multiplier * (m.alpha > 0 ? m.alpha : 4.0) / 4.0;
      merged[m.key].narrow(0, m.row0, m.rows).add_(at::matmul(factors[i].second, factors[i].first) * scale);
    }
    test::write_with_tensors(from, to, merged);
  }
  static double max_gap(const std::vector<float>& a, const std::vector<float>& b) {
    double gap = 0;
    for (std::size_t i = 0; i < a.size(); ++i) gap = std::max(gap, double(std::fabs(a[i] - b[i])));
    return gap;
  }
  static double max_abs(const std::vector<float>& a) { return max_gap(a, std::vector<float>(a.size(), 0.0f)); }

 private Q_SLOTS:
  // A LoRA in every spelling at once, merged (FP32) or online (FP32, and over the F8 file's codes):
  // the transformer's output is that of a file holding W + s·up·down summed by hand
  void loraIsTheHandSumOfItsFactors() {
    FP8S_REQUIRE_REFERENCE();
    const std::string lora = (m_dir.path() + "/hand-lora.safetensors").toStdString();
    const auto factors = write_hand_lora(lora, 11);
    const std::vector<LoraRequest> request{{lora, 1.0, 0.8}};
    const StorageSpec fp32{WeightType::FP32};
    for (const bool fp8 : {false, true}) {
      const std::string base = ref(fp8 ? "tiny-zimage-turbo-fp8.safetensors" : "tiny-zimage-turbo.safetensors").toStdString();
      const std::string hand = (m_dir.path() + (fp8 ? "/hand-merged-fp8.safetensors" : "/hand-merged.safetensors")).toStdString();
      write_hand_merged(base, hand, factors, 0.8);
      auto o = tiny_options(), h = tiny_options();
      o.checkpoint = base;
      h.checkpoint = hand;
      Engine engine(o), by_hand(h);
      const auto expected = by_hand.unet_probe(fp32, ComputeType::FP32, 3, 8);
      const StorageSpec storage = fp8 ? StorageSpec{WeightType::FP8_E4M3} : fp32;
      const auto plain = engine.unet_probe(storage, ComputeType::FP32, 3, 8);
      const double scale = max_abs(expected);
      QVERIFY2(max_gap(plain, expected) > 1e-2 * scale, "the LoRA hardly moves the output");
      const auto online = engine.unet_probe(storage, ComputeType::FP32, 3, 8, request, LoraMode::Online);
      QVERIFY2(max_gap(online, expected) <= 1e-5 * scale,
               qPrintable(QString("online (%1) against the hand sum: %2 of %3").arg(fp8 ? "FP8" : "FP32").arg(max_gap(online, expected)).arg(scale)));
      // merged: the sum stored as the layer stores its weight; under FP8 quantised again, as the
      // hand-summed file's F32 weights are quantised at load
      const auto merged = engine.unet_probe(storage, ComputeType::FP32, 3, 8, request, LoraMode::Merge);
      const auto merged_by_hand = fp8 ? by_hand.unet_probe(storage, ComputeType::FP32, 3, 8) : expected;
      QVERIFY2(max_gap(merged, merged_by_hand) <= 1e-5 * scale,
               qPrintable(QString("merged against the hand sum: %1").arg(max_gap(merged, merged_by_hand))));
      QCOMPARE(engine.unet_probe(storage, ComputeType::FP32, 3, 8), plain);  // removed: no trace
    }
  }

  // <lora:NAME:W> tags on Z-Image: merged and online within a level; the infotext names it; an SD
  // LoRA is refused by name; streamed with the LoRA online equals resident bit for bit, and a merge
  // under streaming is refused with the reason
  void loraTagsWorkOnZImage() {
    FP8S_REQUIRE_REFERENCE();
    const QString dir = m_dir.path() + "/loras";
    QVERIFY(QDir().mkpath(dir));
    write_hand_lora((dir + "/zlora.safetensors").toStdString(), 5);
    auto o = tiny_options();
    o.lora_dir = dir.toStdString();
    Engine engine(o);
    std::atomic<bool> cancel{false};
    auto r = tiny_request();
    const auto plain = pixels(engine, r);
    r.prompt += " <lora:zlora:0.8>";
    r.lora_mode = LoraMode::Merge;
    const auto merged = engine.generate(r, nullptr, cancel).images.at(0);
    QVERIFY(merged.image.pixels != plain);
    QVERIFY2(QString::fromStdString(merged.parameters).contains("LoRA: \"zlora: 0.8\""), merged.parameters.c_str());
    r.lora_mode = LoraMode::Online;
    const auto online = pixels(engine, r);
    int worst = 0;
    for (std::size_t i = 0; i < online.size(); ++i) worst = std::max(worst, std::abs(online[i] - merged.image.pixels[i]));
    QVERIFY2(worst <= 1, qPrintable(QString("merged and online differ by %1 levels").arg(worst)));
    r.weight_budget = 0;
    QCOMPARE(pixels(engine, r), online);
    QCOMPARE(engine.info().streamed_blocks, 4);
    r.lora_mode = LoraMode::Merge;
    QVERIFY2(test::refusal(engine, r).contains("cannot apply while the Z-Image transformer streams"), qPrintable(test::refusal(engine, r)));
    r.weight_budget.reset();
    r.prompt = tiny_request().prompt;
    QCOMPARE(pixels(engine, r), plain);
    r.loras = {{test::reference_path("sd1/lora-tiny-sd1.safetensors"), 1, 1}};
    QVERIFY2(test::refusal(engine, r).contains("does not fit the loaded Z-Image model"), qPrintable(test::refusal(engine, r)));
  }
};

QTEST_GUILESS_MAIN(TestZImage)
#include "test_zimage.moc"
