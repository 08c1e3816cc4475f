// FLUX.2 (issue 57) at full size on the meta device: the released key lists
// (../shared/reference/keys/) as header-only files load into the transformer, the text encoders
// and the autoencoder with no missing or unexpected key and the README's parameter counts, and the
// registry names each variant from its keys. The numbers of every stage are the reference cases'
// (test_reference_flux2).
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "families/flux2/flux2_ae.h"
#include "families/flux2/flux2_model.h"
#include "core/error.h"
#include "keys_files.h"
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
      const BuildOn on(at::Device(at::kMeta));
      Flux2 m(c);
      load_module_weights(*m, f, "", {WeightType::FP8_E4M3, Fp8Scale::Tensor, false}, true, {}, {}, at::Device(at::kMeta), true);
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
      const BuildOn on(at::Device(at::kMeta));
      DecoderLm m(c);
      load_module_weights(*m, f, "model.", {WeightType::FP8_E4M3, Fp8Scale::Tensor, false}, true, DecoderLmImpl::ignorable_keys(c), {},
                          at::Device(at::kMeta), true);
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
      QCOMPARE(c.hidden, 5120);
      QCOMPARE(c.heads, 32);
      QCOMPARE(c.kv_heads, 8);
      QCOMPARE(c.head_dim, 128);
      QCOMPARE(c.intermediate, 32768);
      QCOMPARE(c.layers, 30);
      QVERIFY(!c.qk_norm);
      const BuildOn on(at::Device(at::kMeta));
      DecoderLm m(c);
      load_module_weights(*m, f, "model.", {WeightType::FP8_E4M3, Fp8Scale::Tensor, false}, true, DecoderLmImpl::ignorable_keys(c), {},
                          at::Device(at::kMeta), true);
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
    GenerationRequest r;
    r.prompt = "a lighthouse on a cliff at dusk";
    r.steps = 2;
    r.seed = 5;
    r.cfg = 1;
    r.sampler = Sampler::Euler;
    r.width = 24;
    r.height = 16;
    r.compute = ComputeType::FP32;
    r.storage = StorageSpec{WeightType::FP32};
    LoadOptions o;
    o.checkpoint = (root + "/diffusion_models/flux-2-klein-4b.safetensors").toStdString();
    o.device = "cpu";
    o.storage = r.storage;
    o.components["qwen_tokenizer"] = test::reference_path("zimage/qwen_tokenizer");
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
        LoadOptions o;
        o.checkpoint = ref + (dev ? "tiny-flux2-dev.safetensors" : "tiny-flux2-klein.safetensors");
        o.device = "cpu";
        o.storage = StorageSpec{storage};
        o.components["text_encoder"] = ref + (dev ? "tiny-mistral3-small-te.safetensors" : "tiny-qwen3.safetensors");
        o.components["vae"] = ref + "tiny-flux2-ae.safetensors";
        o.components["qwen_tokenizer"] = test::reference_path("zimage/qwen_tokenizer");
        GenerationRequest r;
        r.prompt = "a lighthouse on a cliff at dusk";
        r.steps = 2;
        r.seed = 7;
        r.sampler = Sampler::Euler;
        r.width = 20;
        r.height = 16;
        r.compute = ComputeType::FP32;
        r.storage = o.storage;
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
};

QTEST_GUILESS_MAIN(TestFlux2)
#include "test_flux2.moc"
