// train-demo's loss curves: loss.csv (phase, step, loss, seconds) drawn as a PNG, log10(loss)
// against step with each phase in its own band. LibTorch-free.
#pragma once

#include <string>

namespace fp8s::demo {

// The curves of `csv_path` into `png_path` (replaced): VAE blue, UNet orange, decoder green. A
// resumed run's repeated steps count once (the last). Nothing is written for an empty log.
void plot_losses(const std::string& csv_path, const std::string& png_path);

}  // namespace fp8s::demo
