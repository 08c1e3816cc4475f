// FLUX.2 (issue 57) at full size on the meta device: the released key lists
// (../shared/reference/keys/) as header-only files load into the transformer, the text encoders
// and the autoencoder with no missing or unexpected key and the README's parameter counts, and the
// registry names each variant from its keys. The numbers of every stage are the reference cases'
// (test_reference_flux2).
#include <ATen/CPUGeneratorImpl.h>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "families/flux2/flux2_ae.h"
#include "families/flux2/flux2_lora_keys.h"
#include "families/lora_set.h"
#include "io/safetensors.h"
#include "families/flux2/flux2_model.h"
#include "core/error.h"
#include "keys_files.h"
#include "diffusers_folder.h"
#include "hand_sum.h"
#include "support.h"
#include "models/flux2/flux2.h"
#include "models/lm/decoder_lm.h"
#include "pipeline/engine.h"
#include "pipeline/family.h"
#include "pipeline/infotext.h"

using namespace fp8s;

class TestFlux2 : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  // The tiny klein (or dev) with its components, in `storage`.
  static LoadOptions tiny_options(bool dev, WeightType storage) {
    const std::string ref = test::reference_path("flux2/");
    LoadOptions o;
    o.checkpoint = ref + (dev ? "tiny-flux2-dev.safetensors" : "tiny-flux2-klein.safetensors");
    o.device = "cpu";
    o.storage = StorageSpec{storage};
    o.components["text_encoder"] = ref + (dev ? "tiny-mistral3-small-te.safetensors" : "tiny-qwen3.safetensors");
    o.components["vae"] = ref + "tiny-flux2-ae.safetensors";
    o.components["qwen_tokenizer"] = test::reference_path("zimage/qwen_tokenizer");
    return o;
  }
  static GenerationRequest tiny_request(const LoadOptions& o) {
    GenerationRequest r;
    r.prompt = "a lighthouse on a cliff at dusk";
    r.steps = 2;
    r.seed = 7;
    r.sampler = Sampler::Euler;
    r.width = 20;
    r.height = 16;
    r.compute = ComputeType::FP32;
    r.storage = o.storage;
    return r;
  }
  static std::vector<uint8_t> pixels(Engine& engine, const GenerationRequest& r) {
    std::atomic<bool> cancel{false};
    return engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
  }
  static int worst_gap(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    int worst = a.size() == b.size() ? 0 : 255;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(int(a[i]) - int(b[i])));
    return worst;
  }

  // A LoRA over some of the tiny klein transformer's 2-D weights: rank 4, alpha 4 (scale 1).
  struct HandModule {
    std::string bfl;  // the BFL module
    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> diffusers;  // diffusers module -> its rows of the weight
    bool swapped = false;  // diffusers' norm_out: the (shift, scale) halves as (scale, shift)
    at::Tensor down = {}, up = {};
  };
  // The diffusers names are the README's ("diffusers' names"), written out by hand here.
  static std::vector<HandModule> hand_modules(uint64_t seed) {
    std::vector<HandModule> m = {
        {"double_blocks.0.img_attn.qkv", {{"transformer_blocks.0.attn.to_q", {0, 64}}, {"transformer_blocks.0.attn.to_k", {64, 64}},
                                          {"transformer_blocks.0.attn.to_v", {128, 64}}}},
        {"double_blocks.1.txt_attn.qkv", {{"transformer_blocks.1.attn.add_q_proj", {0, 64}}, {"transformer_blocks.1.attn.add_k_proj", {64, 64}},
                                          {"transformer_blocks.1.attn.add_v_proj", {128, 64}}}},
        {"double_blocks.1.txt_mlp.0", {{"transformer_blocks.1.ff_context.linear_in", {0, 384}}}},
        {"double_blocks.0.img_mlp.2", {{"transformer_blocks.0.ff.linear_out", {0, 64}}}},
        {"single_blocks.0.linear1", {{"single_transformer_blocks.0.attn.to_qkv_mlp_proj", {0, 576}}}},
        {"single_blocks.1.linear2", {{"single_transformer_blocks.1.attn.to_out", {0, 64}}}},
        {"img_in", {{"x_embedder", {0, 64}}}},
        {"double_stream_modulation_txt.lin", {{"double_stream_modulation_txt.linear", {0, 384}}}},
        {"final_layer.adaLN_modulation.1", {{"norm_out.linear", {0, 128}}}, true}};
    const SafetensorsFile base(test::reference_path("flux2/tiny-flux2-klein.safetensors"));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (auto& h : m) {
      const auto& shape = base.at(h.bfl + ".weight").shape;
      h.down = at::randn({4, shape[1]}, gen, at::kFloat) * 0.3;
      h.up = at::randn({shape[0], 4}, gen, at::kFloat) * 0.3;
    }
    return m;
  }
  // The modules in one spelling: "bfl" (ai-toolkit: diffusion_model.<module>.lora_A/B), "kohya"
  // (lora_unet_<underscored>.lora_down/up with alpha), "diffusers" (PEFT: transformer.<module>.lora_A/B).
  static void write_lora(const std::string& path, const std::vector<HandModule>& modules, const std::string& spelling) {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& h : modules) {
      if (spelling == "kohya") {
        std::string k = h.bfl;
        std::replace(k.begin(), k.end(), '.', '_');
        tensors.push_back({"lora_unet_" + k + ".lora_down.weight", h.down});
        tensors.push_back({"lora_unet_" + k + ".lora_up.weight", h.up});
        tensors.push_back({"lora_unet_" + k + ".alpha", at::full({}, 4.0f)});
      } else if (spelling == "bfl") {
        tensors.push_back({"diffusion_model." + h.bfl + ".lora_A.weight", h.down});
        tensors.push_back({"diffusion_model." + h.bfl + ".lora_B.weight", h.up});
      } else {
        for (const auto& [name, rows] : h.diffusers) {
          auto up = h.up.narrow(0, rows.first, rows.second);
          if (h.swapped) up = at::cat({up.narrow(0, up.size(0) / 2, up.size(0) / 2), up.narrow(0, 0, up.size(0) / 2)});
          tensors.push_back({"transformer." + name + ".lora_A.weight", h.down});
          tensors.push_back({"transformer." + name + ".lora_B.weight", up});
        }
      }
    }
    std::vector<TensorSpec> specs;
    for (const auto& [name, t] : tensors) specs.push_back({name, Dtype::F32, t.sizes().vec()});
    SafetensorsWriter w(path, specs, {});
    for (const auto& [name, t] : tensors) w.append(t.contiguous().data_ptr<float>(), static_cast<std::size_t>(t.numel()) * 4);
    w.commit();
  }
  // The klein transformer with W + multiplier · up · down summed here in FP32, the rest as it is.
  static void write_hand_merged(const std::string& to, const std::vector<HandModule>& modules, double multiplier) {
    const std::string from = test::reference_path("flux2/tiny-flux2-klein.safetensors");
    const SafetensorsFile base(from);
    std::map<std::string, at::Tensor> merged;
    for (const auto& h : modules) merged[h.bfl + ".weight"] = read_tensor(base, base.at(h.bfl + ".weight")) + at::matmul(h.up, h.down) * multiplier;
    test::write_with_tensors(from, to, merged);
  }

 private Q_SLOTS:
  // dev 32B, klein 4B and 9B: sizes off the shapes, every tensor a parameter, the README's counts
  void transformersLoadOnTheMetaDevice() {
    FP8S_REQUIRE_REFERENCE();
    struct Variant {
      const char* keys;
      const char* name;
      int hidden, heads, depth, singles, context;
      bool dev;
      uint64_t params;
    };
    const Variant variants[] = {{"flux2-dev.json", "FLUX.2 [dev]", 6144, 48, 8, 48, 15360, true, 32'223'281'152ull},
                                {"flux2-klein-4b.json", "FLUX.2 [klein] 4B", 3072, 24, 5, 20, 7680, false, 3'875'544'576ull},
                                {"flux2-klein-9b.json", "FLUX.2 [klein] 9B", 4096, 32, 8, 24, 12288, false, 9'078'581'248ull}};
    for (const auto& v : variants) {
      const auto keys = test::load_keys(v.keys);
      const SafetensorsFile f(test::sparse_file(m_dir.path(), v.keys, keys));
      const auto* family = find_family(f);
      QVERIFY(family && family->id == "flux2");
      QCOMPARE(QString::fromStdString(family->traits(f).name), QString(v.name));
      const auto c = flux2_config(f, "");
      QCOMPARE(c.hidden_size, v.hidden);
      QCOMPARE(c.num_heads, v.heads);
      QCOMPARE(c.depth, v.depth);
      QCOMPARE(c.depth_single_blocks, v.singles);
      QCOMPARE(c.context_in_dim, v.context);
      QCOMPARE(c.guidance_embed, v.dev);
      QCOMPARE(c.mlp_ratio, 3.0);
      auto m = test::meta_loaded<Flux2>(c, f);
      QCOMPARE(test::module_params(*m), test::params_of(keys));
      QCOMPARE(test::module_params(*m), v.params);
      QCOMPARE(int(m->blocks().size()), v.depth + v.singles);
    }
  }

  // Qwen3-8B (klein 9B) builds and reads its first 27 layers; ComfyUI's pruned Mistral (dev) its 30,
  // 32 heads of 128 on a 5120-wide stream; neither reads a final norm
  void textEncodersLoadOnTheMetaDevice() {
    FP8S_REQUIRE_REFERENCE();
    {
      const auto keys = test::load_keys("qwen3-8b.json");
      const SafetensorsFile f(test::sparse_file(m_dir.path(), "qwen_3_8b.safetensors", keys));
      const auto c = flux2_text_config(f, false);
      QCOMPARE(c.hidden, 4096);
      QCOMPARE(c.layers, 36);
      QCOMPARE(c.layers_run(), 27);
      QVERIFY(!c.final_norm());
      auto m = test::meta_loaded<DecoderLm>(c, f, "model.", DecoderLmImpl::ignorable_keys(c));
      QCOMPARE(test::module_params(*m), test::params_of(keys, [](const QString& k) {
                 const auto parts = k.split('.');
                 return k != "model.norm.weight" && !(parts.size() > 2 && parts[1] == "layers" && parts[2].toInt() >= 27);
               }));
      QCOMPARE(test::params_of(keys), uint64_t(7'568'405'504ull));
    }
    {
      const auto keys = test::load_keys("mistral3-small-te.json");
      const SafetensorsFile f(test::sparse_file(m_dir.path(), "mistral_3_small_flux2.safetensors", keys));
      const auto c = flux2_text_config(f, true);
      QCOMPARE(test::lm_shape(c), (std::vector<int64_t>{5120, 30, 32, 8, 128, 32768}));
      QVERIFY(!c.qk_norm);
      auto m = test::meta_loaded<DecoderLm>(c, f, "model.", DecoderLmImpl::ignorable_keys(c));
      QCOMPARE(test::module_params(*m), test::params_of(keys, [](const QString& k) { return k.startsWith("model."); }));
      QCOMPARE(test::module_params(*m), uint64_t(17'343'754'240ull));
    }
  }

  // the autoencoder: Flux.1's names with 32 channels, the quant convs inside the coders, bn.* read apart
  void autoencoderLoadsOnTheMetaDevice() {
    FP8S_REQUIRE_REFERENCE();
    const auto keys = test::load_keys("flux2-ae.json");
    const SafetensorsFile f(test::sparse_file(m_dir.path(), "flux2-vae.safetensors", keys));
    const auto ae = load_flux2_autoencoder(f, "", {WeightType::BF16}, at::Device(at::kMeta));  // a missing or unexpected key throws
    QCOMPARE(ae->factor(), 8);
    // Flux.1's autoencoder file has no bn.*: refused by name, not loaded as FLUX.2's
    const auto flux1 = test::load_keys("flux-ae.json");
    const SafetensorsFile old(test::sparse_file(m_dir.path(), "ae.safetensors", flux1));
    QVERIFY_THROWS_EXCEPTION(InputError, load_flux2_autoencoder(old, "", {WeightType::BF16}, at::Device(at::kMeta)));
  }

  // make-synthetic writes every FLUX.2 layout as released: names, shapes and types of the key lists
  void syntheticLayoutsAreTheReleasedOnes() {
    FP8S_REQUIRE_REFERENCE();
    for (const auto& [arch, keys_file] : {std::pair{"flux2-dev", "flux2-dev.json"}, std::pair{"flux2-klein-4b", "flux2-klein-4b.json"},
                                          std::pair{"flux2-klein-9b", "flux2-klein-9b.json"}, std::pair{"flux2-ae", "flux2-ae.json"},
                                          std::pair{"qwen3-8b", "qwen3-8b.json"}, std::pair{"mistral3-small-te", "mistral3-small-te.json"}}) {
      test::compare_synthetic_layout(arch, keys_file, "flux2");
      if (QTest::currentTestFailed()) return;
    }
  }

  // ComfyUI's split files (diffusion_models/, text_encoders/, vae/) are found by the roles' hints and
  // give the pixels the explicit components give; a models/ tree without a text encoder of the
  // transformer's width names the flag
  void splitFilesAreFound() {
    FP8S_REQUIRE_REFERENCE();
    const QString root = m_dir.filePath("comfy/models");
    for (const char* sub : {"diffusion_models", "text_encoders", "vae"}) QVERIFY(QDir().mkpath(root + "/" + sub));
    const std::string ref = test::reference_path("flux2/");
    const auto link = [&](const std::string& from, const QString& to) { QVERIFY(QFile::link(QString::fromStdString(ref + from), root + to)); };
    link("tiny-flux2-klein.safetensors", "/diffusion_models/flux-2-klein-4b.safetensors");
    link("tiny-flux2-ae.safetensors", "/vae/flux2-vae.safetensors");
    auto o = tiny_options(false, WeightType::FP32);
    o.checkpoint = (root + "/diffusion_models/flux-2-klein-4b.safetensors").toStdString();
    o.components.erase("text_encoder");
    o.components.erase("vae");
    auto r = tiny_request(o);
    try {
      Engine missing(o);
      QFAIL("loaded without a text encoder");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("--text-encoder"), e.what());
    }
    link("tiny-qwen3.safetensors", "/text_encoders/qwen_3_4b.safetensors");
    std::atomic<bool> cancel{false};
    const auto found = Engine(o).generate(r, nullptr, cancel).images.at(0).image;
    o.components["text_encoder"] = ref + "tiny-qwen3.safetensors";
    o.components["vae"] = ref + "tiny-flux2-ae.safetensors";
    const auto given = Engine(o).generate(r, nullptr, cancel).images.at(0).image;
    QVERIFY(found.pixels == given.pixels);
    // an edit names its reference image in the infotext, and reading it back restores it
    r.options["ref-image"] = ref + "e2e_klein_edit_input.png";
    const auto edit = Engine(o).generate(r, nullptr, cancel).images.at(0);
    QVERIFY(edit.image.pixels != given.pixels);
    QVERIFY2(edit.parameters.find("Reference image: " + ref + "e2e_klein_edit_input.png") != std::string::npos, edit.parameters.c_str());
    QCOMPARE(QString::fromStdString(parse_infotext(edit.parameters).options.at("ref-image")),
             QString::fromStdString(ref + "e2e_klein_edit_input.png"));
    r.options["ref-image"] = ref + "missing.png";
    QVERIFY_THROWS_EXCEPTION(InputError, Engine(o).generate(r, nullptr, cancel));
  }
  // The component set streams FLUX.2: at budget 0 every block of the transformer and of the text
  // encoder streams, and the pixels are the resident ones bit for bit, for
  // klein with CFG and a reference image and for dev; a storage switch on the loaded engine gives
  // what a fresh load in that storage gives (no reload asked of the user).
  void streamedEqualsResidentBitForBit() {
    FP8S_REQUIRE_REFERENCE();
    const std::string ref = test::reference_path("flux2/");
    for (const bool dev : {false, true}) {
      for (const WeightType storage : {WeightType::BF16, WeightType::FP8_E4M3}) {
        auto o = tiny_options(dev, storage);
        auto r = tiny_request(o);
        if (!dev) {
          r.cfg = 3.0f;  // both prompts through the streamed blocks
          r.negative = "fog";
          r.options["ref-image"] = ref + "e2e_klein_edit_input.png";
        }
        Engine engine(o);
        std::atomic<bool> cancel{false};
        const auto resident = engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
        QCOMPARE(engine.info().streamed_blocks, 0);
        r.weight_budget = 0;
        const auto result = engine.generate(r, nullptr, cancel);
        QVERIFY(engine.info().blocks >= 3);  // klein's 2 double and 2 single blocks, dev's 3
        QCOMPARE(engine.info().streamed_blocks, engine.info().blocks);
        QVERIFY(result.streamed_bytes > 0);
        QVERIFY(result.images.at(0).image.pixels == resident);
        // the other storage on the same engine = a fresh load in it
        r.weight_budget.reset();
        r.storage.weights = storage == WeightType::BF16 ? WeightType::FP8_E4M3 : WeightType::BF16;
        const auto switched = engine.generate(r, nullptr, cancel).images.at(0).image.pixels;
        o.storage = r.storage;
        QVERIFY(switched == Engine(o).generate(r, nullptr, cancel).images.at(0).image.pixels);
        QVERIFY(switched != resident);
      }
    }
  }

  // FLUX.2 LoRAs in the spellings people share: ai-toolkit's BFL names under diffusion_model.,
  // kohya's lora_unet_ with alpha, and diffusers/PEFT with the fused layers split (qkv thirds) and
  // norm_out's halves swapped. Each reaches the same weights (the same pixels); online is the
  // transformer summed by hand (pixels within a level, the denoiser probe within 1e-5), and merged
  // within a level of it; streamed online equals resident; merging while the transformer streams
  // is refused with the reason; a Z-Image LoRA is refused; removed, it leaves no trace.
  void loraSpellingsReachTheSameWeights() {
    FP8S_REQUIRE_REFERENCE();
    const auto modules = hand_modules(23);
    const std::string dir = m_dir.path().toStdString() + "/loras/";
    QVERIFY(QDir().mkpath(QString::fromStdString(dir)));
    for (const char* spelling : {"bfl", "kohya", "diffusers"}) write_lora(dir + spelling + ".safetensors", modules, spelling);
    const std::string hand = dir + "../hand-merged-klein.safetensors";
    write_hand_merged(hand, modules, 0.8);
    // the key map: every diffusers module of the README's names reaches its rows
    const auto weights = lora_linear_weights({test::reference_path("flux2/tiny-flux2-klein.safetensors"), ""});
    const auto map = flux2_lora_key_map(weights);
    for (const auto& h : modules) {
      for (const auto& [name, rows] : h.diffusers) {
        const std::string whole = h.bfl + ".weight", expected = h.swapped ? whole + "#swap"
                                                                 : rows.second == weights.at(whole)[0] ? whole
                                                                 : lora_rows_target(whole, rows.first, rows.second);
        QCOMPARE(QString::fromStdString(map.count("transformer." + name) ? map.at("transformer." + name) : "(none)"),
                 QString::fromStdString(expected));
      }
    }
    auto o = tiny_options(false, WeightType::FP32);
    o.lora_dir = dir;
    Engine engine(o);
    auto r = tiny_request(o);
    const auto plain = pixels(engine, r);
    auto h = o;
    h.checkpoint = hand;
    Engine by_hand(h);
    const auto expected = pixels(by_hand, r);
    QVERIFY2(worst_gap(plain, expected) > 8, "the LoRA hardly moves the picture");
    std::vector<uint8_t> first;
    for (const char* spelling : {"bfl", "kohya", "diffusers"}) {
      r.prompt = std::string("<lora:") + spelling + ":0.8>a lighthouse on a cliff at dusk";  // the prompt the hand sum sees
      r.lora_mode = LoraMode::Online;
      const auto online = pixels(engine, r);
      QVERIFY2(worst_gap(online, expected) <= 1, qPrintable(QString("%1 online against the hand sum: %2 levels").arg(spelling).arg(worst_gap(online, expected))));
      if (first.empty()) first = online;
      QVERIFY2(worst_gap(online, first) == 0, spelling);
      r.lora_mode = LoraMode::Merge;
      QVERIFY(worst_gap(pixels(engine, r), expected) <= 1);
    }
    r.lora_mode = LoraMode::Online;
    r.weight_budget = 0;
    QCOMPARE(pixels(engine, r), first);
    QCOMPARE(engine.info().streamed_blocks, 4);
    r.lora_mode = LoraMode::Merge;
    QVERIFY2(test::refusal(engine, r).contains("streams"), qPrintable(test::refusal(engine, r)));
    r.weight_budget.reset();
    r.lora_mode = LoraMode::Online;
    // the denoiser probe (one transformer call) with the LoRA online, against the hand-summed file's
    {
      const StorageSpec fp32{WeightType::FP32};
      const std::vector<LoraRequest> request{{dir + "diffusers.safetensors", 1.0, 0.8}};
      const auto want = by_hand.unet_probe(fp32, ComputeType::FP32, 3, 4);
      const auto got = engine.unet_probe(fp32, ComputeType::FP32, 3, 4, request, LoraMode::Online);
      const auto base = engine.unet_probe(fp32, ComputeType::FP32, 3, 4);
      QCOMPARE(got.size(), std::size_t(16 * 128));
      double gap = 0, moved = 0, scale = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        gap = std::max(gap, double(std::fabs(got[i] - want[i])));
        moved = std::max(moved, double(std::fabs(base[i] - want[i])));
        scale = std::max(scale, double(std::fabs(want[i])));
      }
      QVERIFY2(moved > 1e-2 * scale, "the LoRA hardly moves the probe");
      QVERIFY2(gap <= 1e-5 * scale, qPrintable(QString("probe with the LoRA online against the hand sum: %1 of %2").arg(gap).arg(scale)));
    }
    // a Z-Image LoRA (its transformer's names) reaches nothing here
    auto zimage = modules;
    zimage.resize(1);
    zimage[0].bfl = "layers.0.attention.qkv";
    write_lora(dir + "zimage.safetensors", zimage, "bfl");
    r.prompt = "<lora:zimage:1>a lighthouse on a cliff at dusk";
    QVERIFY2(test::refusal(engine, r).contains("does not fit the loaded FLUX.2 model"), qPrintable(test::refusal(engine, r)));
    r.prompt = "a lighthouse on a cliff at dusk";
    QCOMPARE(pixels(engine, r), plain);  // removed: no trace
  }
  // A diffusers folder as black-forest-labs/FLUX.2-klein-4B is downloaded, written from the tiny
  // files by the README's "diffusers' names" (spelled out here on their own): the transformer's
  // fused q/k/v as three tensors each, norm_out's halves swapped, 2 shards with their index; the
  // text encoder in transformers' names; the autoencoder in AutoencoderKLFlux2's (top-level quant
  // convs). It gives the split files' pixels.
  void diffusersFolderGivesTheSplitFilesPixels() {
    FP8S_REQUIRE_REFERENCE();
    const std::string ref = test::reference_path("flux2/");
    const QString root = m_dir.filePath("FLUX.2-klein-4B");
    {  // transformer/
      const std::string swapped = m_dir.filePath("klein-swapped.safetensors").toStdString();
      {
        const SafetensorsFile k(ref + "tiny-flux2-klein.safetensors");
        const auto w = read_tensor(k, k.at("final_layer.adaLN_modulation.1.weight"));
        const int64_t half = w.size(0) / 2;  // diffusers' (scale, shift)
        test::write_with_tensors(k.path(), swapped, {{"final_layer.adaLN_modulation.1.weight", at::cat({w.narrow(0, half, half), w.narrow(0, 0, half)})}});
      }
      const SafetensorsFile t(swapped);
      static const std::map<std::string, std::string> global = {
          {"img_in.weight", "x_embedder.weight"}, {"txt_in.weight", "context_embedder.weight"},
          {"time_in.in_layer.weight", "time_guidance_embed.timestep_embedder.linear_1.weight"},
          {"time_in.out_layer.weight", "time_guidance_embed.timestep_embedder.linear_2.weight"},
          {"double_stream_modulation_img.lin.weight", "double_stream_modulation_img.linear.weight"},
          {"double_stream_modulation_txt.lin.weight", "double_stream_modulation_txt.linear.weight"},
          {"single_stream_modulation.lin.weight", "single_stream_modulation.linear.weight"},
          {"final_layer.linear.weight", "proj_out.weight"}, {"final_layer.adaLN_modulation.1.weight", "norm_out.linear.weight"}};
      static const std::map<std::string, std::string> in_block = {
          {"img_attn.norm.query_norm.scale", "attn.norm_q.weight"}, {"img_attn.norm.key_norm.scale", "attn.norm_k.weight"},
          {"txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"}, {"txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"},
          {"img_attn.proj.weight", "attn.to_out.0.weight"}, {"txt_attn.proj.weight", "attn.to_add_out.weight"},
          {"img_mlp.0.weight", "ff.linear_in.weight"}, {"img_mlp.2.weight", "ff.linear_out.weight"},
          {"txt_mlp.0.weight", "ff_context.linear_in.weight"}, {"txt_mlp.2.weight", "ff_context.linear_out.weight"},
          {"linear1.weight", "attn.to_qkv_mlp_proj.weight"}, {"linear2.weight", "attn.to_out.weight"},
          {"norm.query_norm.scale", "attn.norm_q.weight"}, {"norm.key_norm.scale", "attn.norm_k.weight"}};
      std::vector<test::Out> out;
      for (const auto& r : t.tensors()) {
        if (global.count(r.name)) {
          out.push_back({global.at(r.name), &r, r.shape});
          continue;
        }
        const bool dbl = r.name.rfind("double_blocks.", 0) == 0;  // else single_blocks., as long
        const std::size_t dot = r.name.find('.', 14);
        const std::string n = r.name.substr(14, dot - 14), rest = r.name.substr(dot + 1);
        const std::string block = (dbl ? "transformer_blocks." : "single_transformer_blocks.") + n + ".";
        if (rest == "img_attn.qkv.weight" || rest == "txt_attn.qkv.weight") {
          const bool img = rest[0] == 'i';
          const int64_t third = r.shape[0] / 3;
          const char* parts[] = {"q", "k", "v"};
          for (int i = 0; i < 3; ++i) {
            out.push_back({block + (img ? std::string("attn.to_") + parts[i] : std::string("attn.add_") + parts[i] + "_proj") + ".weight", &r,
                           {third, r.shape[1]}, i * third});
          }
          continue;
        }
        QVERIFY2(in_block.count(rest), r.name.c_str());
        out.push_back({block + in_block.at(rest), &r, r.shape});
      }
      test::write_shards(t, out, root + "/transformer", "diffusion_pytorch_model", 2, "diffusion_pytorch_model.safetensors.index.json");
      QFile f(root + "/transformer/config.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"_class_name": "Flux2Transformer2DModel", "num_attention_heads": 4, "attention_head_dim": 16,
                  "axes_dims_rope": [2, 6, 4, 4], "rope_theta": 2000, "eps": 1e-6, "guidance_embeds": false})");
    }
    {  // text_encoder/: transformers' names, 2 shards
      const SafetensorsFile q(ref + "tiny-qwen3.safetensors");
      std::vector<test::Out> out;
      for (const auto& r : q.tensors()) out.push_back({r.name, &r, r.shape});
      test::write_shards(q, out, root + "/text_encoder", "model", 2, "model.safetensors.index.json");
      test::write_config(q, "qwen3.config", root + "/text_encoder/config.json", {{"model_type", "qwen3"}});
    }
    {  // vae/: AutoencoderKLFlux2's names
      const SafetensorsFile v(ref + "tiny-flux2-ae.safetensors");
      int levels = 0;
      while (v.find("decoder.up." + std::to_string(levels) + ".block.0.conv1.weight")) ++levels;
      std::vector<test::Out> out;
      for (const auto& r : v.tensors()) {
        auto shape = r.shape;
        if (r.name.find(".mid.attn_1.") != std::string::npos && shape.size() == 4) shape = {shape[0], shape[1]};
        std::string name = test::diffusers_vae_name(r.name, levels);
        if (name.rfind("encoder.quant_conv.", 0) == 0) name = name.substr(8);
        if (name.rfind("decoder.post_quant_conv.", 0) == 0) name = name.substr(8);
        out.push_back({name, &r, shape});
      }
      test::write_shards(v, out, root + "/vae", "diffusion_pytorch_model", 1, "");
      QFile f(root + "/vae/config.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"_class_name": "AutoencoderKLFlux2", "batch_norm_eps": 0.0001})");
    }
    QVERIFY(QFile::link(QString::fromStdString(test::reference_path("zimage/qwen_tokenizer")), root + "/tokenizer"));
    {
      QFile f(root + "/model_index.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"_class_name": "Flux2KleinPipeline"})");
    }
    auto split = tiny_options(false, WeightType::BF16);
    LoadOptions folder;
    folder.checkpoint = root.toStdString();
    folder.device = "cpu";
    folder.storage = split.storage;
    Engine a(folder), b(split);
    const auto info = a.info();
    QCOMPARE(QString::fromStdString(info.architecture), QString("FLUX.2 [klein]"));
    QCOMPARE(QString::fromStdString(info.components.at(1).path), root + "/text_encoder");
    QCOMPARE(QString::fromStdString(info.components.at(2).path), root + "/vae");
    const auto r = tiny_request(split);
    QVERIFY(pixels(a, r) == pixels(b, r));
  }
};

QTEST_GUILESS_MAIN(TestFlux2)
#include "test_flux2.moc"
