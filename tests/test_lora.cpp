// LoRA: key mapping onto ldm names, exact restore when removed, refusal of other architectures
// (issue 3's LoRA cases; the numerics are replayed in test_reference_sd1).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <fstream>
#include <map>

#include "core/error.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "lora/lora_library.h"
#include "families/sd/model.h"
#include "support.h"

using namespace fp8s;

class TestLora : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void diffusersNamesOfLdmModules() {
    const auto c = preset_sd15().unet;
    QCOMPARE(ldm_to_diffusers_unet("input_blocks.1.0.in_layers.2", c), std::string("down_blocks.0.resnets.0.conv1"));
    QCOMPARE(ldm_to_diffusers_unet("input_blocks.4.0.emb_layers.1", c), std::string("down_blocks.1.resnets.0.time_emb_proj"));
    QCOMPARE(ldm_to_diffusers_unet("middle_block.0.in_layers.2", c), std::string("mid_block.resnets.0.conv1"));
    QCOMPARE(ldm_to_diffusers_unet("middle_block.2.emb_layers.1", c), std::string("mid_block.resnets.1.time_emb_proj"));
    QCOMPARE(ldm_to_diffusers_unet("output_blocks.1.0.emb_layers.1", c), std::string("up_blocks.0.resnets.1.time_emb_proj"));
    QCOMPARE(ldm_to_diffusers_unet("output_blocks.6.0.in_layers.2", c), std::string("up_blocks.2.resnets.0.conv1"));
    QCOMPARE(ldm_to_diffusers_unet("input_blocks.1.1.proj_in", c), std::string("down_blocks.0.attentions.0.proj_in"));
    QCOMPARE(ldm_to_diffusers_unet("input_blocks.1.1.transformer_blocks.0.attn1.to_out.0", c),
             std::string("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0"));
    QCOMPARE(ldm_to_diffusers_unet("input_blocks.3.0.op", c), std::string("down_blocks.0.downsamplers.0.conv"));
    QCOMPARE(ldm_to_diffusers_unet("output_blocks.2.1.conv", c), std::string("up_blocks.0.upsamplers.0.conv"));
    QCOMPARE(ldm_to_diffusers_unet("output_blocks.5.2.conv", c), std::string("up_blocks.1.upsamplers.0.conv"));
    QCOMPARE(kohya_name_of("unet.down_blocks.0.attentions.0.proj_in"), std::string("lora_unet_down_blocks_0_attentions_0_proj_in"));
    const auto map = lora_key_map(preset_sd15());
    QCOMPARE(map.at("lora_te_text_model_encoder_layers_11_mlp_fc2"),
             std::string("cond_stage_model.transformer.text_model.encoder.layers.11.mlp.fc2.weight"));
  }

  void referenceLoraMapsCompletely() {
    FP8S_REQUIRE_REFERENCE();
    const auto lora = read_lora(test::reference_path("sd1/lora-tiny-sd1.safetensors"));
    QCOMPARE(lora.modules.size(), std::size_t(156));
    SafetensorsFile ckpt(test::reference_path("sd1/tiny-sd1.safetensors"));
    const auto plan = plan_lora(lora, config_for(ckpt));
    QCOMPARE(plan.targets.size(), std::size_t(156));
    QVERIFY(plan.unmatched.empty());
    QCOMPARE(lora.modules[0].alpha, 2.0);
    QCOMPARE(lora.modules[0].rank(), int64_t(4));
  }

  void removingRestoresTheBaseExactly() {
    FP8S_REQUIRE_REFERENCE();
    for (auto weights : {WeightType::FP32, WeightType::FP8_E4M3}) {
      StorageSpec s;
      s.weights = weights;
      Model model(test::reference_path("sd1/tiny-sd1.safetensors"), s);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
      auto x = at::randn({1, 4, 8, 8}, gen);
      auto t = at::full({1}, 500.0f);
      auto ctx = at::randn({1, 77, 64}, gen);
      const auto base = model.unet(x, t, ctx, {}, ComputeType::FP32);
      const std::vector<LoraRequest> lora{{test::reference_path("sd1/lora-tiny-sd1.safetensors"), 0.8, 0.8}};
      QVERIFY(model.set_loras(lora) > 100);
      const auto with = model.unet(x, t, ctx, {}, ComputeType::FP32);
      QVERIFY((with - base).abs().max().item<float>() > 1e-3);
      QCOMPARE(model.set_loras(lora), std::size_t(0));  // unchanged request: nothing to do
      model.set_loras({});
      QVERIFY(at::equal(model.unet(x, t, ctx, {}, ComputeType::FP32), base));
    }
  }

  void onlineEqualsMergeAndLorasAdd() {
    FP8S_REQUIRE_REFERENCE();
    StorageSpec s;  // FP32 storage: merge and online must agree to rounding
    Model model(test::reference_path("sd1/tiny-sd1.safetensors"), s);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    auto x = at::randn({1, 4, 8, 8}, gen);
    auto t = at::full({1}, 300.0f);
    auto ctx = at::randn({1, 77, 64}, gen);
    const auto path = test::reference_path("sd1/lora-tiny-sd1.safetensors");
    const auto base = model.unet(x, t, ctx, {}, ComputeType::FP32);
    auto effect = [&](const std::vector<LoraRequest>& l, LoraMode m) {
      model.set_loras(l, m);
      return model.unet(x, t, ctx, {}, ComputeType::FP32) - base;
    };
    const auto merged = effect({{path, 0.8, 0.8}}, LoraMode::Merge);
    const auto online = effect({{path, 0.8, 0.8}}, LoraMode::Online);
    QVERIFY(at::allclose(online, merged, 1e-4, 1e-5));
    // a negative multiplier pulls the other way (in the linear regime of small multipliers)
    const auto small = effect({{path, 0.002, 0.002}}, LoraMode::Online);
    const auto negative = effect({{path, -0.002, -0.002}}, LoraMode::Online);
    const double asym = ((negative + small).norm() / small.norm()).item<double>();
    QVERIFY2(asym < 0.05, qPrintable(QString("asymmetry %1, |small| %2").arg(asym).arg(small.norm().item<double>())));
    const auto twice = effect({{path, 0.4, 0.4}, {path, 0.4, 0.4}}, LoraMode::Online);
    QVERIFY(at::allclose(twice, online, 1e-4, 1e-5));
    // multiplier changes in online mode touch no weight: the base stays bit-identical
    model.set_loras({{path, 0.3, 0.3}}, LoraMode::Online);
    model.set_loras({}, LoraMode::Online);
    QVERIFY(at::equal(model.unet(x, t, ctx, {}, ComputeType::FP32), base));
  }

  void unmatchedKeysAreCountedNotFatal() {
    FP8S_REQUIRE_REFERENCE();
    QTemporaryDir dir;
    const auto src = read_lora(test::reference_path("sd1/lora-tiny-sd1.safetensors"));
    // the reference LoRA plus one module that names no layer
    SafetensorsFile in(test::reference_path("sd1/lora-tiny-sd1.safetensors"));
    std::vector<TensorSpec> specs;
    for (const auto& t : in.tensors()) specs.push_back({t.name, t.dtype, t.shape});
    specs.push_back({"lora_unet_no_such_block.lora_down.weight", Dtype::F16, {4, 8}});
    specs.push_back({"lora_unet_no_such_block.lora_up.weight", Dtype::F16, {8, 4}});
    const std::string out = (dir.path() + "/extra.safetensors").toStdString();
    {
      SafetensorsWriter w(out, specs, in.metadata());
      for (const auto& t : in.tensors()) {
        std::vector<uint8_t> raw(t.nbytes());
        in.read(t, raw.data());
        w.append(raw.data(), raw.size());
      }
      std::vector<uint16_t> zeros(32, 0);
      w.append(zeros.data(), 64);
      w.append(zeros.data(), 64);
      w.commit();
    }
    SafetensorsFile ckpt(test::reference_path("sd1/tiny-sd1.safetensors"));
    const auto plan = plan_lora(read_lora(out), config_for(ckpt));
    QCOMPARE(plan.targets.size(), src.modules.size());
    QCOMPARE(plan.unmatched, std::vector<std::string>{"lora_unet_no_such_block"});
  }

  void syntheticLoraHasTheAskedStrength() {
    QTemporaryDir dir;
    const std::string out = (dir.path() + "/syn.safetensors").toStdString();
    make_synthetic_lora(preset_tiny_sd1(), 8, 8, 0.2, 3, out, false);
    const auto lora = read_lora(out);
    SafetensorsFile f(out);
    QCOMPARE(f.metadata().at("ss_network_dim"), std::string("8"));
    const auto plan = plan_lora(lora, preset_tiny_sd1());
    QVERIFY(plan.unmatched.empty());
    // rms(ΔW) ≈ 0.2 / sqrt(fan_in) on a large layer (which must exist: a renamed module fails here)
    int checked = 0;
    for (const auto& m : lora.modules) {
      if (m.name != "lora_unet_down_blocks_1_resnets_0_conv2") continue;
      ++checked;
      auto d = m.delta(1.0, {64, 64, 3, 3});
      const double rms = d.pow(2).mean().sqrt().item<double>();
      const double want = 0.2 / std::sqrt(64.0 * 9);
      QVERIFY2(std::fabs(rms / want - 1) < 0.15, qPrintable(QString("rms %1 want %2").arg(rms).arg(want)));
    }
    QCOMPARE(checked, 1);
  }

  void refusesOtherArchitectures() {
    FP8S_REQUIRE_REFERENCE();
    const auto lora = read_lora(test::reference_path("sdxl/lora-tiny-sdxl.safetensors"));
    SafetensorsFile ckpt(test::reference_path("sd1/tiny-sd1.safetensors"));
    QVERIFY_EXCEPTION_THROWN(plan_lora(lora, config_for(ckpt)), InputError);
    QVERIFY_EXCEPTION_THROWN(read_lora(test::reference_path("sd1/tiny-sd1.safetensors")), InputError);
  }
  // The LoRA panel's folder listing: kohya metadata, trigger words summed over datasets, keys-based
  // guesses without metadata, and a broken file listed with its reason instead of failing the list.
  void listsTheLoraFolderWithMetadata() {
    QTemporaryDir dir;
    const auto d = dir.path().toStdString();
    const std::map<std::string, std::string> meta{
        {"ss_base_model_version", "sd_v1"},
        {"ss_network_dim", "16"},
        {"ss_network_alpha", "8.0"},
        {"ss_tag_frequency", R"({"10_fox": {"red fox": 7, "snow": 2}, "5_cat": {"snow": 6, "tabby": 1}})"}};
    auto write = [&](const std::string& name, const std::map<std::string, std::string>& m, int rank) {
      SafetensorsWriter w(d + "/" + name, {{"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", Dtype::F16, {rank, 4}}}, m);
      std::vector<uint16_t> zeros(static_cast<std::size_t>(rank) * 4, 0);
      w.append(zeros.data(), zeros.size() * 2);
      w.commit();
    };
    write("b_style.safetensors", meta, 4);
    write("a_plain.safetensors", {}, 4);
    { std::ofstream(d + "/c_broken.safetensors") << "not a safetensors file"; }
    { std::ofstream(d + "/notes.txt") << "ignored"; }
    const auto list = list_loras(d);
    QCOMPARE(list.size(), std::size_t(3));
    QCOMPARE(list[0].name, std::string("a_plain"));
    QCOMPARE(list[0].base_model, std::string("sdxl"));  // lora_te1_ keys
    QCOMPARE(list[0].rank, 4);
    QCOMPARE(list[0].alpha, 4.0);
    QCOMPARE(list[0].modules, 1);
    QVERIFY(list[0].error.empty());
    QCOMPARE(list[1].name, std::string("b_style"));
    QCOMPARE(list[1].base_model, std::string("sd_v1"));
    QCOMPARE(list[1].rank, 16);
    QCOMPARE(list[1].alpha, 8.0);
    QCOMPARE(list[1].trigger_words, (std::vector<std::string>{"snow", "red fox", "tabby"}));  // 8, 7, 1
    QCOMPARE(list[2].name, std::string("c_broken"));
    QVERIFY(!list[2].error.empty());
    QVERIFY_EXCEPTION_THROWN(list_loras(d + "/missing"), InputError);
  }

  void loraNamesCannotEscapeTheFolder() {
    QTemporaryDir dir;
    const auto d = dir.path().toStdString();
    { std::ofstream(d + "/ok.safetensors") << "x"; }
    QCOMPARE(resolve_lora_name(d, "ok"), d + "/ok.safetensors");
    for (const char* bad : {"../ok", "..", "sub/ok", "/etc/passwd", "a\\b", ""}) {
      QVERIFY_EXCEPTION_THROWN(resolve_lora_name(d, bad), InputError);
    }
    QVERIFY_EXCEPTION_THROWN(resolve_lora_name(d, "missing"), InputError);
    QVERIFY_EXCEPTION_THROWN(resolve_lora_name("", "ok"), InputError);
  }
};

QTEST_GUILESS_MAIN(TestLora)
#include "test_lora.moc"
