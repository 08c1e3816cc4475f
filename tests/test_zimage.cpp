// Z-Image (issue 42): the released layouts of the transformer and of Qwen3-4B (reference/keys)
// read into the configurations the shapes give and loaded on the meta device without a missing or
// unexpected key; a file that is not the layout is refused by name.
#include "core/error.h"
#include "families/family.h"
#include "families/zimage/qwen3.h"
#include "families/zimage/zimage_transformer.h"
#include "keys_files.h"

using namespace fp8s;

class TestZImage : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  static uint64_t params_of(const QJsonObject& keys, const std::function<bool(const QString&)>& take) {
    uint64_t n = 0;
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      if (!take(it.key())) continue;
      uint64_t p = 1;
      for (const auto& d : it.value().toObject()["shape"].toArray()) p *= static_cast<uint64_t>(d.toInteger());
      n += p;
    }
    return n;
  }
  static uint64_t module_params(torch::nn::Module& m) {
    uint64_t n = 0;
    for (const auto& p : m.parameters(true)) n += static_cast<uint64_t>(p.numel());
    return n;
  }

 private Q_SLOTS:
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
      const BuildOn on(at::Device(at::kMeta));
      ZImageTransformer m(c);
      load_module_weights(*m, z, "", {WeightType::FP8_E4M3, Fp8Scale::Tensor, false}, true, ZImageTransformerImpl::ignorable_keys(),
                          {}, at::Device(at::kMeta), true);
      // every tensor of the file is a parameter of the module: 6,154,908,736 (the README's count)
      QCOMPARE(module_params(*m), params_of(zkeys, [](const QString&) { return true; }));
      QCOMPARE(module_params(*m), uint64_t(6'154'908'736ull));
      QCOMPARE(int(m->blocks().size()), 34);
    }
    const auto qkeys = test::load_keys("qwen3-4b.json");
    const SafetensorsFile q(test::sparse_file(m_dir.path(), "qwen_3_4b.safetensors", qkeys));
    const auto qc = qwen3_config(q, "model.");
    QCOMPARE(qc.hidden, 2560);
    QCOMPARE(qc.layers, 36);
    QCOMPARE(qc.heads, 32);
    QCOMPARE(qc.kv_heads, 8);
    QCOMPARE(qc.head_dim, 128);
    QCOMPARE(qc.intermediate, 9728);
    QCOMPARE(qc.vocab_size, 151936);
    {
      const BuildOn on(at::Device(at::kMeta));
      Qwen3Encoder enc(qc);
      load_module_weights(*enc, q, "model.", {WeightType::BF16, Fp8Scale::None, false}, false, enc->ignorable_keys(), {},
                          at::Device(at::kMeta), true);
      // all but the last layer and the final norm (hidden_states[-2] never reads them)
      QCOMPARE(module_params(*enc), params_of(qkeys, [](const QString& k) {
                 return !k.startsWith("model.layers.35.") && k != "model.norm.weight";
               }));
      QCOMPARE(params_of(qkeys, [](const QString&) { return true; }), uint64_t(4'022'468'096ull));
    }
    // a transformer without one of its tensors is refused naming it
    const SafetensorsFile broken(test::sparse_file(m_dir.path(), "broken.safetensors", zkeys, "layers.7.feed_forward.w2.weight"));
    try {
      const BuildOn on(at::Device(at::kMeta));
      ZImageTransformer m(zimage_config(broken, ""));
      load_module_weights(*m, broken, "", {WeightType::BF16, Fp8Scale::None, false}, true, {}, {}, at::Device(at::kMeta), true);
      QFAIL("a transformer without layers.7.feed_forward.w2.weight loaded");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("layers.7.feed_forward.w2.weight"), e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestZImage)
#include "test_zimage.moc"
