// Qwen-Image (issue 58), its networks against ../shared/reference/qwenimage's cases, run on the
// modules directly: the transformer (one call; the batch with a padded text, the odd token grid, the
// all-F8 and comfy_quant files, the edits' reference tokens and Edit-2511's timestep-0 modulation)
// and Qwen2.5-VL's language model with the pipeline's prompt embeddings; the template's token ids;
// and the full-size key lists on the meta device with no missing or unexpected key.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include "core/error.h"
#include "diffusers_folder.h"
#include "families/qwenimage/qwenimage_lora_keys.h"
#include "families/qwenimage/qwenimage_text.h"
#include "families/qwenimage/qwenimage_transformer.h"
#include "families/qwenimage/qwenimage_vae.h"
#include "io/safetensors.h"
#include "keys_files.h"
#include "models/lm/decoder_lm.h"
#include "pipeline/engine.h"
#include "support.h"
#include "text/qwen_tokenizer.h"

using namespace fp8s;

namespace {

QString folder() { return QString::fromStdString(test::reference_path("qwenimage/")); }

QJsonObject case_named(const QString& name) {
  const auto text = test::read_bytes(test::reference_path("qwenimage/cases.json"));
  for (const auto& v : QJsonDocument::fromJson(QByteArray::fromStdString(text)).array()) {
    if (v.toObject()["name"].toString() == name) return v.toObject();
  }
  return {};
}

// max |mine - ref| over max |ref|: the README's measure against its rtol.
double relative_error(const at::Tensor& mine, const at::Tensor& ref) {
  return (mine.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>() / ref.to(at::kDouble).abs().max().item<double>();
}

const StorageSpec kFp32{WeightType::FP32, Fp8Scale::None, false};

}  // namespace

class TestQwenImage : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  // The case's input `name` (F32 or I64) from cases.safetensors.
  static at::Tensor input(const SafetensorsFile& cases, const QJsonObject& c, const char* name) {
    const auto key = c["prefix"].toString().toStdString() + name;
    const auto* rec = cases.find(key);
    if (!rec) throw std::runtime_error("cases.safetensors lacks " + key);
    return read_tensor(cases, *rec);
  }


  // A Wan 2.1 VAE name as AutoencoderKLQwenImage spells it: diffusers' convert_wan_vae_to_diffusers,
  // written out here on its own (checked against the converter on the tiny VAE's 194 names).
  static std::string diffusers_vae_name(const std::string& n) {
    static const std::pair<const char*, const char*> fixed[] = {
        {"conv1.", "quant_conv."}, {"conv2.", "post_quant_conv."}, {"encoder.conv1.", "encoder.conv_in."},
        {"decoder.conv1.", "decoder.conv_in."}, {"encoder.head.0.", "encoder.norm_out."}, {"decoder.head.0.", "decoder.norm_out."},
        {"encoder.head.2.", "encoder.conv_out."}, {"decoder.head.2.", "decoder.conv_out."},
        {"encoder.middle.1.", "encoder.mid_block.attentions.0."}, {"decoder.middle.1.", "decoder.mid_block.attentions.0."}};
    for (const auto& [from, to] : fixed) {
      if (n.rfind(from, 0) == 0) return to + n.substr(std::string(from).size());
    }
    auto resnet = [](const QString& part) {
      static const std::pair<const char*, const char*> parts[] = {{"residual.0.", "norm1."}, {"residual.2.", "conv1."}, {"residual.3.", "norm2."},
                                                                  {"residual.6.", "conv2."}, {"shortcut.", "conv_shortcut."}};
      for (const auto& [from, to] : parts) {
        if (part.startsWith(from)) return to + part.mid(int(strlen(from)));
      }
      return part;
    };
    const QString s = QString::fromStdString(n);
    QRegularExpressionMatch m;
    if ((m = QRegularExpression("^(encoder|decoder)\\.middle\\.(\\d+)\\.(.*)$").match(s)).hasMatch()) {
      return (m.captured(1) + ".mid_block.resnets." + QString::number(m.captured(2).toInt() / 2) + "." + resnet(m.captured(3))).toStdString();
    }
    if ((m = QRegularExpression("^encoder\\.downsamples\\.(\\d+)\\.(.*)$").match(s)).hasMatch()) {
      return ("encoder.down_blocks." + m.captured(1) + "." + resnet(m.captured(2))).toStdString();
    }
    if ((m = QRegularExpression("^decoder\\.upsamples\\.(\\d+)\\.(.*)$").match(s)).hasMatch()) {
      const int k = m.captured(1).toInt();
      if (k % 4 == 3) return ("decoder.up_blocks." + QString::number(k / 4) + ".upsamplers.0." + m.captured(2)).toStdString();
      return ("decoder.up_blocks." + QString::number(k / 4) + ".resnets." + QString::number(k % 4) + "." + resnet(m.captured(2))).toStdString();
    }
    return n;
  }
  static LoadOptions split_files() {
    LoadOptions o;
    o.checkpoint = (folder() + "tiny-qwen-image.safetensors").toStdString();
    o.components["text_encoder"] = (folder() + "tiny-qwen25vl.safetensors").toStdString();
    o.components["vae"] = (folder() + "tiny-qwen-image-vae.safetensors").toStdString();
    o.components["qwen_tokenizer"] = test::reference_path("zimage/qwen_tokenizer");
    o.storage = {WeightType::BF16, Fp8Scale::None, false};
    o.device = "cpu";
    return o;
  }
  static std::vector<uint8_t> pixels(Engine& engine) {
    GenerationRequest r;
    r.prompt = "a lighthouse on a cliff at dusk";
    r.negative = "blurry";
    r.seed = 7;
    r.steps = 3;
    r.width = 32;
    r.height = 48;
    r.cfg = 2.5f;  // true CFG: both prompts through the text encoder
    r.sampler = Sampler::Euler;
    r.compute = ComputeType::FP32;
    r.storage = {WeightType::BF16, Fp8Scale::None, false};
    std::atomic<bool> cancel{false};
    return engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
  }
 private Q_SLOTS:
  void transformerCases_data() {
    QTest::addColumn<QString>("name");
    for (const char* n : {"qwenimage_b2", "qwenimage_fp8_b2", "qwenimage_fp8_scaled_b2", "qwenimage_b1_odd", "qwenimage_edit",
                          "qwenimage_edit_2511"}) {
      QTest::newRow(n) << QString(n);
    }
  }
  // One transformer call in FP32 within the case's rtol (1e-4).
  void transformerCases() {
    FP8S_REQUIRE_REFERENCE();
    QFETCH(QString, name);
    const auto c = case_named(name);
    QVERIFY2(!c.isEmpty(), qPrintable(name));
    const SafetensorsFile file((folder() + c["model"].toString()).toStdString());
    const auto prefix = qwenimage_prefix(file);
    QVERIFY(prefix.has_value());
    const auto config = qwenimage_config(file, *prefix);
    QCOMPARE(config.zero_cond_t, name == "qwenimage_edit_2511");
    QwenImageTransformer model(config);
    load_module_weights(*model, file, *prefix, kFp32, true, QwenImageTransformerImpl::ignorable_keys(), {}, at::Device(at::kCPU), true);
    const SafetensorsFile cases((folder() + c["tensors"].toString()).toStdString());
    std::vector<at::Tensor> refs;
    if (cases.find(c["prefix"].toString().toStdString() + "ref")) refs.push_back(input(cases, c, "ref"));
    const auto pred = model->forward(input(cases, c, "x"), input(cases, c, "t"), input(cases, c, "txt"),
                                     input(cases, c, "txt_mask"), refs, at::kFloat);
    const auto ref = input(cases, c, "pred");
    QCOMPARE(pred.sizes().vec(), ref.sizes().vec());
    const double err = relative_error(pred, ref);
    QVERIFY2(err <= c["rtol"].toDouble(), qPrintable(QString("%1: %2 relative").arg(name).arg(err)));
    qInfo("%s: %.2e relative (rtol %.0e)", qPrintable(name), err, c["rtol"].toDouble());
    // BF16 compute stays near (the released files' type): a loose bound, not the reference's
    const double bf16 = relative_error(model->forward(input(cases, c, "x"), input(cases, c, "t"), input(cases, c, "txt"),
                                                      input(cases, c, "txt_mask"), refs, at::kBFloat16),
                                       ref);
    QVERIFY2(bf16 < 0.05, qPrintable(QString("%1 in BF16: %2 relative").arg(name).arg(bf16)));
  }

  // Qwen2.5-VL's last hidden state (after the final norm) and the pipeline's prompt embeddings.
  void textEncoderCases_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("qwen25vl_b2") << QString("qwen25vl_b2");
    QTest::newRow("qwen25vl_long") << QString("qwen25vl_long");
  }
  void textEncoderCases() {
    FP8S_REQUIRE_REFERENCE();
    QFETCH(QString, name);
    const auto c = case_named(name);
    const SafetensorsFile file((folder() + c["model"].toString()).toStdString());
    const auto config = qwen25vl_config(file);
    QCOMPARE(config.head_dim, 8);  // the tiny file's metadata: 2 heads of 8
    DecoderLm model(config);
    load_module_weights(*model, file, "model.", kFp32, false, DecoderLmImpl::ignorable_keys(config), {}, at::Device(at::kCPU), true);
    const SafetensorsFile cases((folder() + c["tensors"].toString()).toStdString());
    const auto tokens = input(cases, c, "tokens").to(at::kLong), mask = input(cases, c, "mask").to(at::kLong);
    const auto hidden = model->forward(tokens, mask, at::kFloat);
    const double err = relative_error(hidden, input(cases, c, "hidden"));
    QVERIFY2(err <= c["rtol"].toDouble(), qPrintable(QString("hidden: %1 relative").arg(err)));
    qInfo("%s hidden: %.2e relative", qPrintable(name), err);
    const auto [embeds, keep] = qwenimage_prompt_embeds(hidden, mask, 512);
    const auto ref = input(cases, c, "embeds");
    QCOMPARE(embeds.sizes().vec(), ref.sizes().vec());
    QVERIFY2(relative_error(embeds, ref) <= c["rtol"].toDouble(), "embeds");
    // the kept rows: each prompt's length less the 34 dropped
    const auto lengths = mask.sum(1) - kQwenImageTemplateDrop;
    QCOMPARE(keep.sum(1).to(at::kLong).equal(lengths), true);
    // cut to fewer rows: the first ones
    const auto [cut, cut_keep] = qwenimage_prompt_embeds(hidden, mask, 8);
    QCOMPARE(cut.size(1), int64_t(8));
    QVERIFY(cut.equal(embeds.slice(1, 0, 8)));
  }

  // The autoencoder on one frame: decode(latent·std + mean) clamped, and the normalised posterior mean.
  void autoencoderCases() {
    FP8S_REQUIRE_REFERENCE();
    const SafetensorsFile file((folder() + "tiny-qwen-image-vae.safetensors").toStdString());
    const auto config = qwenimage_vae_config(file, "");
    QCOMPARE(config.base_dim, 8);
    QwenImageVae vae(config);
    load_module_weights(*vae, file, "", kFp32, false, vae->ignorable_keys(), {}, at::Device(at::kCPU), true);
    const SafetensorsFile cases((folder() + "cases.safetensors").toStdString());
    const auto dc = case_named("vae_decode"), ec = case_named("vae_encode");
    const auto image = vae->decode(input(cases, dc, "latent"), at::kFloat);
    const auto want = input(cases, dc, "image");
    QCOMPARE(image.sizes().vec(), want.sizes().vec());
    const double derr = relative_error(image, want);
    QVERIFY2(derr <= dc["rtol"].toDouble(), qPrintable(QString("decode: %1 relative").arg(derr)));
    QVERIFY(image.abs().max().item<float>() <= 1.0f);
    const auto latent = vae->encode(input(cases, ec, "image"), at::kFloat);
    const double eerr = relative_error(latent, input(cases, ec, "latent"));
    QVERIFY2(eerr <= ec["rtol"].toDouble(), qPrintable(QString("encode: %1 relative").arg(eerr)));
    qInfo("autoencoder: decode %.2e, encode %.2e relative", derr, eerr);
    // normalising inverts
    QVERIFY(at::allclose(vae->normalise(vae->denormalise(latent)), latent, 1e-5, 1e-5));
    // BF16 compute stays near
    QVERIFY(relative_error(vae->decode(input(cases, dc, "latent"), at::kBFloat16), want) < 0.05);
    // a side that is not a multiple of 8 is refused by name
    try {
      (void)vae->encode(at::zeros({1, 3, 12, 16}), at::kFloat);
      QFAIL("a 12-pixel side encoded");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("multiples of 8"), e.what());
    }
  }

  // The template's ids through Qwen's tokenizer, as the README lists them (the empty prompt, an
  // emoji and digits included), and the 34 rows dropped are the system turn and the user header.
  void templateTokens() {
    FP8S_REQUIRE_REFERENCE();
    const auto tokenizer = QwenTokenizer::load(test::reference_path("zimage/qwen_tokenizer"));
    const auto text = test::read_bytes(test::reference_path("qwenimage/qwenimage_template_cases.json"));
    const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(text));
    const QJsonArray rows = doc.isArray() ? doc.array() : doc.object()["cases"].toArray();
    QVERIFY(!rows.isEmpty());
    for (const auto& v : rows) {
      const auto row = v.toObject();
      const auto ids = tokenizer.encode(qwenimage_template(row["prompt"].toString().toStdString()));
      const auto want = row["ids"].toArray();
      QCOMPARE(int(ids.size()), int(want.size()));
      for (int i = 0; i < want.size(); ++i) QCOMPARE(int64_t(ids[std::size_t(i)]), want[i].toInteger());
      QCOMPARE(row["drop"].toInt(), kQwenImageTemplateDrop);
    }
  }

  // The released layouts at full size: the transformer's 1,933 tensors (20,430,401,088 parameters)
  // and the text encoder's language model load with nothing missing or left over.
  void fullSizeLayoutsLoadOnTheMetaDevice() {
    FP8S_REQUIRE_REFERENCE();
    const auto keys = test::load_keys("qwen-image.json");
    const SafetensorsFile f(test::sparse_file(m_dir.path(), "qwen_image_bf16.safetensors", keys));
    const auto prefix = qwenimage_prefix(f);
    QVERIFY(prefix && prefix->empty());
    const auto c = qwenimage_config(f, "");
    QCOMPARE(c.dim, 3072);
    QCOMPARE(c.heads, 24);
    QCOMPARE(c.layers, 60);
    QCOMPARE(c.text_dim, 3584);
    QCOMPARE(c.mlp, 12288);
    {
      auto m = test::meta_loaded<QwenImageTransformer>(c, f);
      QCOMPARE(test::module_params(*m), test::params_of(keys));
      QCOMPARE(test::module_params(*m), uint64_t(20'430'401'088ull));
      QCOMPARE(int(m->blocks().size()), 60);
    }
    const auto tkeys = test::load_keys("qwen2.5-vl-7b.json");
    const SafetensorsFile t(test::sparse_file(m_dir.path(), "qwen_2.5_vl_7b.safetensors", tkeys));
    const auto tc = qwen25vl_config(t);
    QCOMPARE(test::lm_shape(tc), (std::vector<int64_t>{3584, 28, 28, 4, 128, 18944}));
    QVERIFY(tc.qkv_bias && !tc.qk_norm && tc.final_norm());
    {
      auto m = test::meta_loaded<DecoderLm>(tc, t, "model.", DecoderLmImpl::ignorable_keys(tc));
      // every model.* tensor (the vision tower and lm_head are not loaded)
      QCOMPARE(test::module_params(*m), test::params_of(tkeys, [](const QString& k) { return k.startsWith("model."); }));
      const uint64_t vision = test::params_of(tkeys, [](const QString& k) { return k.startsWith("visual."); });
      QVERIFY(vision > 600'000'000ull);  // what text-only use never reads
    }
    QCOMPARE(test::params_of(tkeys), uint64_t(8'292'166'656ull));
    // the autoencoder: every tensor but the temporal convolutions one frame never runs
    const auto vkeys = test::load_keys("qwen-image-vae.json");
    const SafetensorsFile v(test::sparse_file(m_dir.path(), "qwen_image_vae.safetensors", vkeys));
    const auto vc = qwenimage_vae_config(v, "");
    QCOMPARE(vc.base_dim, 96);
    QCOMPARE(vc.z_dim, 16);
    {
      const BuildOn on(at::Device(at::kMeta));
      QwenImageVae vae(vc);
      load_module_weights(*vae, v, "", kFp32, false, vae->ignorable_keys(), {}, at::Device(at::kMeta), true);
      QCOMPARE(test::module_params(*vae), test::params_of(vkeys, [](const QString& k) { return !k.contains("time_conv"); }));
      QCOMPARE(test::params_of(vkeys), uint64_t(126'892'531ull));
      QCOMPARE(int(vae->ignorable_keys().size()), 8);
    }
    // a transformer without one of its tensors is refused naming it
    const SafetensorsFile broken(test::sparse_file(m_dir.path(), "broken.safetensors", keys, "transformer_blocks.7.attn.add_v_proj.weight"));
    try {
      (void)test::meta_loaded<QwenImageTransformer>(qwenimage_config(broken, ""), broken);
      QFAIL("a transformer without transformer_blocks.7.attn.add_v_proj.weight loaded");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("transformer_blocks.7.attn.add_v_proj.weight"), e.what());
    }
  }

  // make-synthetic writes the released layouts: every name, shape and type of the key lists
  void syntheticLayoutsAreTheReleasedOnes() {
    FP8S_REQUIRE_REFERENCE();
    test::compare_synthetic_layout("qwen-image", "qwen-image.json", "qwenimage");
    if (QTest::currentTestFailed()) return;
    test::compare_synthetic_layout("qwen2.5-vl-7b", "qwen2.5-vl-7b.json", "qwenimage");
    if (QTest::currentTestFailed()) return;
    test::compare_synthetic_layout("qwen-image-vae", "qwen-image-vae.json", "qwenimage");
  }

  // `Qwen/Qwen-Image` as downloaded: transformer/ in the released names (2 shards), text_encoder/
  // in transformers 5's names (model.language_model.*, model.visual.*; its config's text_config),
  // vae/ in AutoencoderKLQwenImage's, the tokenizer folder: the split files' pixels exactly.
  void diffusersFolderGivesTheSplitFilesImage() {
    FP8S_REQUIRE_REFERENCE();
    using test::Out;
    const QString root = m_dir.path() + "/Qwen-Image";
    {
      const SafetensorsFile t((folder() + "tiny-qwen-image.safetensors").toStdString());
      std::vector<Out> out;
      for (const auto& r : t.tensors()) out.push_back({r.name, &r, r.shape});
      test::write_shards(t, out, root + "/transformer", "diffusion_pytorch_model", 2, "diffusion_pytorch_model.safetensors.index.json");
      test::write_config(t, "qwenimage.config", root + "/transformer/config.json", {{"_class_name", "QwenImageTransformer2DModel"}});
    }
    {
      const SafetensorsFile q((folder() + "tiny-qwen25vl.safetensors").toStdString());
      std::vector<Out> out;
      for (const auto& r : q.tensors()) {
        const std::string n = r.name.rfind("model.", 0) == 0 ? "model.language_model." + r.name.substr(6)
                              : r.name.rfind("visual.", 0) == 0 ? "model." + r.name
                                                                : r.name;
        out.push_back({n, &r, r.shape});
      }
      test::write_shards(q, out, root + "/text_encoder", "model", 2, "model.safetensors.index.json");
      const auto tiny = QJsonDocument::fromJson(QByteArray::fromStdString(q.metadata().at("qwen25vl.config"))).object();
      QFile f(root + "/text_encoder/config.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QJsonDocument(QJsonObject{{"architectures", QJsonArray{"Qwen2_5_VLForConditionalGeneration"}},
                                        {"text_config", tiny["text"]}, {"vision_config", tiny["vision"]}}).toJson());
    }
    {
      const SafetensorsFile v((folder() + "tiny-qwen-image-vae.safetensors").toStdString());
      std::vector<Out> out;
      for (const auto& r : v.tensors()) out.push_back({diffusers_vae_name(r.name), &r, r.shape});
      test::write_shards(v, out, root + "/vae", "diffusion_pytorch_model", 1, "");
      test::write_config(v, "qwenimage_vae.config", root + "/vae/config.json", {{"_class_name", "AutoencoderKLQwenImage"}});
    }
    QVERIFY(QFile::link(QString::fromStdString(test::reference_path("zimage/qwen_tokenizer")), root + "/tokenizer"));
    {
      QFile f(root + "/model_index.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"_class_name": "QwenImagePipeline"})");
    }
    LoadOptions diffusers;
    diffusers.checkpoint = root.toStdString();
    diffusers.storage = {WeightType::BF16, Fp8Scale::None, false};
    diffusers.device = "cpu";
    Engine a(diffusers), b(split_files());
    const auto info = a.info();
    QCOMPARE(QString::fromStdString(info.architecture), QString::fromStdString(b.info().architecture));
    QCOMPARE(QString::fromStdString(info.components.at(1).path), root + "/text_encoder");
    QCOMPARE(QString::fromStdString(info.components.at(2).path), root + "/vae");
    QCOMPARE(info.unet_bytes + info.text_bytes + info.vae_bytes, b.info().unet_bytes + b.info().text_bytes + b.info().vae_bytes);
    QVERIFY(pixels(a) == pixels(b));
  }

  // Every spelling of a LoRA module people share names the same transformer weight.
  void loraSpellingsMapOntoTheSameWeights() {
    const std::map<std::string, std::vector<int64_t>> weights{{"transformer_blocks.0.attn.to_q.weight", {32, 32}},
                                                              {"transformer_blocks.1.img_mlp.net.0.proj.weight", {128, 32}},
                                                              {"txt_in.weight", {32, 16}}};
    const auto map = qwenimage_lora_key_map(weights);
    for (const auto& [module, key] : std::vector<std::pair<std::string, std::string>>{
             {"transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_q.weight"},
             {"diffusion_model.transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_q.weight"},
             {"model.diffusion_model.transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_q.weight"},
             {"transformer.transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_q.weight"},
             {"lora_unet_transformer_blocks_0_attn_to_q", "transformer_blocks.0.attn.to_q.weight"},
             {"lora_transformer_transformer_blocks_1_img_mlp_net_0_proj", "transformer_blocks.1.img_mlp.net.0.proj.weight"},
             {"transformer.txt_in", "txt_in.weight"}}) {
      QVERIFY2(map.count(module), module.c_str());
      QCOMPARE(QString::fromStdString(map.at(module)), QString::fromStdString(key));
    }
    // a module of another model matches nothing and is refused by name
    LoraModuleLayout sd;
    sd.name = "lora_unet_down_blocks_0_attentions_0_proj_in";
    sd.down.shape = {4, 320};
    sd.up.shape = {320, 4};
    try {
      (void)plan_qwenimage_lora_layout({sd}, {}, weights, "sd.safetensors");
      QFAIL("an SD LoRA was planned onto Qwen-Image");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("sd.safetensors"), e.what());
    }
  }

  // Positions are centred (odd grids one more negative row) and the text starts after the largest
  // image (the packing is Flux's, channel-major: the transformer cases pin it down).
  void positions() {
    // a 3x5 grid: rows -2..0, columns -3..1; text of 2 rows after max(floor(3/2), floor(5/2)) = 2
    const auto ids = qwenimage_positions(2, {{6, 10}});
    QCOMPARE(ids.size(0), int64_t(2 + 15));
    QCOMPARE(ids[0][0].item<double>(), 2.0);
    QCOMPARE(ids[1][2].item<double>(), 3.0);
    QCOMPARE(ids[2][1].item<double>(), -2.0);
    QCOMPARE(ids[2][2].item<double>(), -3.0);
    QCOMPARE(ids[16][1].item<double>(), 0.0);
    QCOMPARE(ids[16][2].item<double>(), 1.0);
    // a larger reference moves the text start; its frame index is 1
    const auto edit = qwenimage_positions(1, {{8, 8}, {8, 12}});
    QCOMPARE(edit[0][0].item<double>(), 3.0);
    QCOMPARE(edit[1 + 16][0].item<double>(), 1.0);
  }
};

QTEST_GUILESS_MAIN(TestQwenImage)
#include "test_qwenimage.moc"
