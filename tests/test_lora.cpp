// LoRA: key mapping onto ldm names, exact restore when removed, refusal of other architectures
// (issue 3's LoRA cases; the numerics are replayed in test_reference_sd1).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"
#include "lora/lora.h"
#include "pipeline/model.h"
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

  void refusesOtherArchitectures() {
    FP8S_REQUIRE_REFERENCE();
    const auto lora = read_lora(test::reference_path("sdxl/lora-tiny-sdxl.safetensors"));
    SafetensorsFile ckpt(test::reference_path("sd1/tiny-sd1.safetensors"));
    QVERIFY_EXCEPTION_THROWN(plan_lora(lora, config_for(ckpt)), InputError);
    QVERIFY_EXCEPTION_THROWN(read_lora(test::reference_path("sd1/tiny-sd1.safetensors")), InputError);
  }
};

QTEST_GUILESS_MAIN(TestLora)
#include "test_lora.moc"
