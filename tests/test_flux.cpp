// Flux.1 beside the UNet family (issue 31): make-synthetic's layouts against the released files'
// keys (reference/keys), the full-size layout loaded without a missing or unexpected key (sparse
// files of the released headers, on the meta device), the memory rule that refuses FP16 Flux on a
// 24 GB machine with its estimate, and the 2x2 token packing against its index formula.
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonArray>

#include <cmath>
#include <limits>

#include "backend/backend.h"
#include "core/error.h"
#include "models/flux/flux.h"
#include "families/flux/flux_family.h"
#include "families/flux/flux_model.h"
#include "keys_files.h"
#include "support.h"

using namespace fp8s;
using fp8s::test::load_keys;
using fp8s::test::sparse_file;


class TestFlux : public QObject {
  Q_OBJECT
  QTemporaryDir m_dir;

  FluxFiles full_size(const QString& drop = {}) {
    FluxFiles f;
    f.transformer = {sparse_file(m_dir.path(), "flux1-dev.safetensors", load_keys("flux1-dev.json"), drop), ""};
    f.t5 = {sparse_file(m_dir.path(), "t5xxl_fp16.safetensors", load_keys("t5xxl.json")), ""};
    f.clip_l = {sparse_file(m_dir.path(), "clip_l.safetensors", load_keys("clip_l.json")), ""};
    f.vae = {sparse_file(m_dir.path(), "ae.safetensors", load_keys("flux-ae.json")), ""};
    f.dev = true;
    return f;
  }

 private Q_SLOTS:
  // make-synthetic --list prints the layout it writes: exactly the released files' keys, shapes and dtypes
  void syntheticLayoutsAreTheReleasedFiles() {
    FP8S_REQUIRE_REFERENCE();
    for (const auto& [arch, keys] : {std::pair{"flux-dev", "flux1-dev.json"}, std::pair{"flux-schnell", "flux1-schnell.json"},
                                     std::pair{"t5xxl", "t5xxl.json"}, std::pair{"clip-l", "clip_l.json"},
                                     std::pair{"flux-ae", "flux-ae.json"}}) {
      const auto r = test::run_cli({"make-synthetic", "--arch", arch, "--list"});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      const auto mine = QJsonDocument::fromJson(r.out.toUtf8()).object();
      const auto want = load_keys(keys);
      QVERIFY2(mine.size() == want.size(), qPrintable(QString("%1: %2 keys, released %3").arg(arch).arg(mine.size()).arg(want.size())));
      for (auto it = want.begin(); it != want.end(); ++it) {
        QVERIFY2(mine.contains(it.key()), qPrintable(QString(arch) + " lacks " + it.key()));
        const auto m = mine[it.key()].toObject(), w = it.value().toObject();
        QVERIFY2(m["shape"] == w["shape"] && m["dtype"] == w["dtype"], qPrintable(QString(arch) + " differs at " + it.key()));
      }
    }
    // FP8: every Linear weight F8_E4M3 (the transformer's 2-D weights), the rest BF16
    const auto r = test::run_cli({"make-synthetic", "--arch", "flux-dev", "--dtype", "fp8-e4m3", "--list"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const auto fp8 = QJsonDocument::fromJson(r.out.toUtf8()).object();
    for (auto it = fp8.begin(); it != fp8.end(); ++it) {
      const auto v = it.value().toObject();
      const bool linear = it.key().endsWith(".weight") && v["shape"].toArray().size() == 2;
      QCOMPARE(v["dtype"].toString(), QString(linear ? "F8_E4M3" : "BF16"));
    }
  }

  // The released headers (sparse files: zeros, no disk) load into the modules built from the
  // configuration read off their shapes, on the meta device: every key used, none missing.
  void fullSizeLayoutLoadsWithoutMissingOrUnexpectedKeys() {
    FP8S_REQUIRE_REFERENCE();
    {
      FluxModel model(full_size(), StorageSpec{WeightType::BF16, Fp8Scale::None, false}, at::Device(at::kMeta));
      model.load_all();
      QVERIFY(model.dev());
      // what it holds: the transformer's 11.901 B parameters in 16 bits
      QVERIFY2(model.bytes().transformer > 23'700'000'000ull && model.bytes().transformer < 23'900'000'000ull,
               qPrintable(QString::number(model.bytes().transformer)));
    }
    FluxModel broken(full_size("double_blocks.7.txt_mlp.2.weight"), StorageSpec{WeightType::BF16, Fp8Scale::None, false},
                     at::Device(at::kMeta));
    try {
      broken.load_all();
      QFAIL("a transformer without double_blocks.7.txt_mlp.2.weight loaded");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("double_blocks.7.txt_mlp.2.weight"), e.what());
    }
  }

  // The bytes each storage takes, from the keys by hand. On a machine with 23.4 GB available FP16
  // Flux no longer fits resident: auto streams it under a budget below its size; a budget too large
  // and a machine too small even fully streamed (T5 too) are refused with the numbers; FP8 E4M3 fits resident.
  void fp16StreamsWhereItDoesNotFit() {
    FP8S_REQUIRE_REFERENCE();
    const auto files = full_size();
    uint64_t params = 0, linear = 0, block0 = 0;
    const auto keys = load_keys("flux1-dev.json");
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      const auto v = it.value().toObject();
      uint64_t n = 1;
      for (const auto& d : v["shape"].toArray()) n *= static_cast<uint64_t>(d.toInteger());
      params += n;
      if (it.key().endsWith(".weight") && v["shape"].toArray().size() == 2) linear += n;
      if (it.key().startsWith("double_blocks.0.") && it.key().endsWith(".weight") && v["shape"].toArray().size() == 2) block0 += n;
    }
    // a staging slot: the double block's Linear weights
    QCOMPARE(flux_largest_block_bytes(3072, {WeightType::FP16, Fp8Scale::None, false}), 2 * block0);
    QCOMPARE(flux_largest_block_bytes(3072, {WeightType::FP8_E4M3, Fp8Scale::None, false}), block0);
    const auto b16 = flux_storage_bytes(files, {WeightType::FP16, Fp8Scale::None, false});
    const auto b8 = flux_storage_bytes(files, {WeightType::FP8_E4M3, Fp8Scale::None, false});
    QCOMPARE(b16.transformer, 2 * params);
    QCOMPARE(b8.transformer, linear + 2 * (params - linear));
    const uint64_t available = 23'400'000'000ull;
    const StorageSpec fp16{WeightType::FP16, Fp8Scale::None, false}, fp8{WeightType::FP8_E4M3, Fp8Scale::None, false};
    auto bytes_of = [&](const StorageSpec& s) { return flux_storage_bytes(files, s); };
    QVERIFY(flux_peak_bytes(b16, 512, 512, 1, ComputeType::BF16, 3072) > available);
    const auto budget = flux_weight_budget(bytes_of, 3072, fp16, 512, 512, 1, ComputeType::BF16, available, std::nullopt);
    QVERIFY(budget && *budget > 0 && *budget < b16.transformer);
    // the budget, two staged blocks, the autoencoder and the working memory fit; a byte more would not
    FluxComponentBytes capped = b16;
    capped.transformer = *budget + 4 * block0;
    QVERIFY(flux_peak_bytes(capped, 512, 512, 1, ComputeType::BF16, 3072) <= available);
    capped.transformer += 1;
    QVERIFY(flux_peak_bytes(capped, 512, 512, 1, ComputeType::BF16, 3072) > available);
    check_flux_fits(files, fp16, 512, 512, 1, ComputeType::BF16, available);  // auto streams: no refusal
    try {
      flux_weight_budget(bytes_of, 3072, fp16, 512, 512, 1, ComputeType::BF16, available, b16.transformer);
      QFAIL("a budget of the whole transformer fitted in 23.4 GB");
    } catch (const DoesNotFit& e) {
      const QString m = e.what();
      QVERIFY2(m.startsWith("FP16 Flux at 512x512 with a ") && m.contains("weight budget needs") &&
                   m.contains("this machine has 23.4 GB"), e.what());
    }
    // fully streamed, T5's layers stream too: 4 GB holds two staged double blocks (1.4 GB) and the
    // rest; 1 GB cannot hold even the two staged blocks
    check_flux_fits(files, fp16, 512, 512, 1, ComputeType::BF16, 4'000'000'000ull);
    QVERIFY(4 * block0 > 1'000'000'000ull);
    try {
      check_flux_fits(files, fp16, 512, 512, 1, ComputeType::BF16, 1'000'000'000ull);
      QFAIL("FP16 Flux fitted in 1 GB");
    } catch (const DoesNotFit& e) {
      QVERIFY2(QString(e.what()).contains("even with every block streamed") && QString(e.what()).contains("this machine has 1.0 GB"), e.what());
    }
    QVERIFY(!flux_weight_budget(bytes_of, 3072, fp8, 512, 512, 1, ComputeType::BF16, available, std::nullopt));
    // at 1024² the autoencoder's levels (6 maps of 128 channels, 1024² each) outweigh the
    // transformer's 4608 tokens x 3072 x 80 bytes + 256 MiB = 1.40 GB; FP32 compute doubles them
    QCOMPARE(flux_working_bytes(1024, 1024, 1, ComputeType::BF16, 3072), 1024ull * 1024 * 128 * 6 * 2);
    QCOMPARE(flux_working_bytes(1024, 1024, 1, ComputeType::FP32, 3072), 1024ull * 1024 * 128 * 6 * 4);
    QCOMPARE(flux_working_bytes(256, 256, 1, ComputeType::FP32, 3072), (256ull + 512) * 3072 * 80 + (256ull << 20));
  }

  // On a GPU the auto budget fits the card's free memory (issue 55: it used the host's, so FP16
  // Flux on a 24 GB card ran out of memory instead of streaming). FP8S_AVAILABLE_VRAM stands for
  // the card here: 24 GB free streams FP16 dev at 1024², 80 GB holds it resident
  void gpuBudgetFitsTheCardsFreeMemory() {
    FP8S_REQUIRE_REFERENCE();
    const auto files = full_size();
    auto bytes_of = [&](const StorageSpec& s) { return flux_storage_bytes(files, s); };
    const StorageSpec fp16{WeightType::FP16, Fp8Scale::None, false}, fp8{WeightType::FP8_E4M3, Fp8Scale::None, false};
    const at::Device gpu(at::kCUDA, 0);
    QVERIFY(!backend::simulated_vram_bytes());
    qputenv("FP8S_AVAILABLE_VRAM", "24G");
    const uint64_t card = backend::device_available_bytes(gpu);
    QCOMPARE(card, 24'000'000'000ull);  // no GPU here: the simulated card (a GPU would give min(free, 24 GB))
    QCOMPARE(backend::device_available_bytes(at::Device(at::kCPU)), uint64_t{0});  // the CPU's is the host's
    const auto streamed = flux_weight_budget(bytes_of, 3072, fp16, 1024, 1024, 1, ComputeType::BF16, card, std::nullopt);
    QVERIFY(streamed && *streamed < bytes_of(fp16).transformer);
    QVERIFY(!flux_weight_budget(bytes_of, 3072, fp8, 1024, 1024, 1, ComputeType::BF16, card, std::nullopt));
    qputenv("FP8S_AVAILABLE_VRAM", "80G");
    QVERIFY(!flux_weight_budget(bytes_of, 3072, fp16, 1024, 1024, 1, ComputeType::BF16, backend::device_available_bytes(gpu),
                                std::nullopt));
    qputenv("FP8S_AVAILABLE_VRAM", "lots");
    try {
      backend::device_available_bytes(gpu);
      QFAIL("FP8S_AVAILABLE_VRAM=lots was taken as a size");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("lots"), e.what());
    }
    qunsetenv("FP8S_AVAILABLE_VRAM");
  }

  // FP16 compute clamps Flux's streams as ComfyUI does: infinities to ±65504 and NaN to 0, every
  // finite FP16 value unchanged; BF16 and FP32 pass as they are (infinities kept)
  void fp16ClampKeepsFluxStreamsFinite() {
    std::vector<float> v{1.0f, -2.5f, 65504.0f, -65504.0f, 6e-8f, std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
    const auto x = at::tensor(v).to(at::kHalf);
    const auto y = flux_fp16_clamp(x).to(at::kFloat);
    const std::vector<float> want{1.0f, -2.5f, 65504.0f, -65504.0f, static_cast<float>(at::Half(6e-8f)), 65504.0f, -65504.0f, 0.0f};
    for (std::size_t i = 0; i < want.size(); ++i) QCOMPARE(y[static_cast<int64_t>(i)].item<float>(), want[i]);
    for (const auto type : {at::kBFloat16, at::kFloat}) {
      const auto z = flux_fp16_clamp(at::tensor(v).to(type));
      QVERIFY(std::isinf(z[5].item<float>()) && std::isnan(z[7].item<float>()));
    }
  }

  // T5's layers under a weight budget: at 0 every layer streams from the file (the reader stages
  // each, their bytes as the header gives them), and the hidden states equal the resident
  // encoder's bit for bit, in FP32 and FP8 storage
  void t5LayersStreamUnderABudget() {
    FP8S_REQUIRE_REFERENCE();
    FluxFiles files;
    const std::string ref = test::reference_path("flux");
    files.transformer = {ref + "/tiny-flux-dev.safetensors", ""};
    files.t5 = {ref + "/tiny-t5xxl.safetensors", ""};
    const SafetensorsFile t5(files.t5.path);
    uint64_t layer_bytes = 0;  // the encoder layers' Linear weights as the file holds them
    int layers = 0;
    for (const auto& t : t5.tensors()) {
      if (t.name.rfind("encoder.block.", 0) != 0 || t.shape.size() != 2 || t.name.find("relative_attention_bias") != std::string::npos) continue;
      layer_bytes += t.nbytes();
      layers = std::max(layers, std::stoi(t.name.substr(14)) + 1);
    }
    QVERIFY(layers >= 2);
    const at::Tensor tokens = at::arange(1, 9, at::kLong).unsqueeze(0);
    for (const WeightType w : {WeightType::FP32, WeightType::FP8_E4M3}) {
      FluxModel model(files, StorageSpec{w, Fp8Scale::Tensor, false}, at::Device(at::kCPU));
      const at::Tensor resident = model.encode_t5(tokens, at::kFloat);
      model.set_weight_budget(0);
      model.reset_stream_stats();
      const at::Tensor streamed = model.encode_t5(tokens, at::kFloat);
      QVERIFY(at::equal(resident, streamed));
      model.end_streaming();  // the reader joined: its counts are final
      const auto stats = model.stream_stats();
      // every layer once, and perhaps the first again (staged for a next pass while the last
      // computed, unless the end came first)
      QVERIFY2(stats.loads == uint64_t(layers) || stats.loads == uint64_t(layers + 1), qPrintable(QString::number(stats.loads)));
      QVERIFY(stats.bytes_read >= layer_bytes && stats.bytes_read < layer_bytes + layer_bytes / layers + 1);
    }
  }

  // A ComfyUI models folder: the components beside the transformer are found by their folders
  // and names (the FP8 T5 before the FP16 one), and an explicit file that is not its component is refused.
  void componentsFoundInAComfyUiModelsFolder() {
    FP8S_REQUIRE_REFERENCE();
    const QString root = m_dir.path() + "/comfy/models";
    for (const char* d : {"diffusion_models", "text_encoders", "clip", "vae"}) QDir().mkpath(root + "/" + d);
    const QString ref = test::reference_dir() + "/flux/";
    QVERIFY(QFile::copy(ref + "tiny-flux-dev.safetensors", root + "/diffusion_models/flux1-dev.safetensors"));
    QVERIFY(QFile::copy(ref + "tiny-t5xxl.safetensors", root + "/text_encoders/t5xxl_fp16.safetensors"));
    QVERIFY(QFile::copy(ref + "tiny-t5xxl.safetensors", root + "/clip/t5xxl_fp8_e4m3fn.safetensors"));
    QVERIFY(QFile::copy(ref + "tiny-clip-l.safetensors", root + "/clip/clip_l.safetensors"));
    QVERIFY(QFile::copy(ref + "tiny-ae.safetensors", root + "/vae/ae.safetensors"));
    const auto f = resolve_flux_files((root + "/diffusion_models/flux1-dev.safetensors").toStdString(), "", "", "");
    QCOMPARE(QString::fromStdString(f.t5.path), root + "/clip/t5xxl_fp8_e4m3fn.safetensors");
    QCOMPARE(QString::fromStdString(f.clip_l.path), root + "/clip/clip_l.safetensors");
    QCOMPARE(QString::fromStdString(f.vae.path), root + "/vae/ae.safetensors");
    QVERIFY(f.dev && f.transformer.prefix.empty());
    try {
      resolve_flux_files((root + "/diffusion_models/flux1-dev.safetensors").toStdString(), (root + "/vae/ae.safetensors").toStdString(), "", "");
      QFAIL("an autoencoder was taken for T5");
    } catch (const InputError& e) {
      QVERIFY2(QString(e.what()).contains("holds no T5-XXL encoder"), e.what());
    }
  }

  // Token (i, j) of the packed latent holds latent[c, 2i + ph, 2j + pw] at channel 4c + 2ph + pw,
  // rows first; its position id is (0, i, j); unpack inverts pack.
  void packingFollowsTheIndexFormula() {
    const auto latent = at::randn({2, 16, 6, 10});
    const auto tokens = flux_pack(latent);
    QCOMPARE(tokens.sizes().vec(), (std::vector<int64_t>{2, 15, 64}));
    const auto ids = flux_image_ids(2, 6, 10);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          QCOMPARE(ids[b][i * 5 + j][1].item<float>(), float(i));
          QCOMPARE(ids[b][i * 5 + j][2].item<float>(), float(j));
          for (int64_t c = 0; c < 16; ++c)
            for (int64_t ph = 0; ph < 2; ++ph)
              for (int64_t pw = 0; pw < 2; ++pw) {
                QCOMPARE(tokens[b][i * 5 + j][4 * c + 2 * ph + pw].item<float>(), latent[b][c][2 * i + ph][2 * j + pw].item<float>());
              }
        }
    QVERIFY(at::equal(flux_unpack(tokens, 6, 10), latent));
  }
};

QTEST_GUILESS_MAIN(TestFlux)
#include "test_flux.moc"
