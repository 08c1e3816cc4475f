// The control image as a ControlNet reads it (issue 43): resized to the pass's size by A1111's
// modes (io/image_ops.h resize_to: "Just Resize", "Crop and Resize", "Resize and Fill"), then
// preprocessed: as it is (already a hint), inverted (a sketch's black lines on white become white
// on black), or Canny's edges (OpenCV's cv::Canny on the RGB image with A1111's thresholds, white
// edges on black in all three channels).
#pragma once

#include "core/types.h"
#include "io/png.h"

namespace fp8s {

RgbImage canny_edges(const RgbImage& image, int low, int high);
RgbImage preprocess_control(const RgbImage& image, ControlPreprocessor preprocessor, int low = 100, int high = 200);
// resize_to(width x height, mode), then preprocess_control.
RgbImage control_hint(const RgbImage& image, int width, int height, ResizeMode mode, ControlPreprocessor preprocessor,
                      int low = 100, int high = 200);

}  // namespace fp8s
