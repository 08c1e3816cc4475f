#include "io/control_image.h"

#ifdef FP8S_WITH_OPENCV
#include <opencv2/imgproc.hpp>
#endif

#include "core/error.h"
#include "io/image_ops.h"

namespace fp8s {

RgbImage canny_edges(const RgbImage& image, int low, int high) {
#ifndef FP8S_WITH_OPENCV
  (void)image, (void)low, (void)high;
  throw InputError("this build has no OpenCV, which the canny preprocessor uses: install libopencv-imgproc-dev and "
                   "rebuild, or pass an edge map with --control-preprocessor none");
#else
  // cv::Canny on a 3-channel image takes each pixel's largest channel gradient (as A1111's canny
  // module calls it on the RGB image); L1 gradient and a 3x3 Sobel aperture, OpenCV's defaults
  const cv::Mat rgb(image.height, image.width, CV_8UC3, const_cast<uint8_t*>(image.pixels.data()));
  cv::Mat edges;
  cv::Canny(rgb, edges, low, high);
  RgbImage out;
  out.width = image.width;
  out.height = image.height;
  out.pixels.resize(static_cast<std::size_t>(image.width) * image.height * 3);
  for (int y = 0; y < image.height; ++y) {
    const uint8_t* row = edges.ptr<uint8_t>(y);
    for (int x = 0; x < image.width; ++x) {
      for (int c = 0; c < 3; ++c) out.pixels[(static_cast<std::size_t>(y) * image.width + x) * 3 + c] = row[x];
    }
  }
  return out;
#endif
}

RgbImage preprocess_control(const RgbImage& image, ControlPreprocessor preprocessor, int low, int high) {
  switch (preprocessor) {
    case ControlPreprocessor::Canny: return canny_edges(image, low, high);
    case ControlPreprocessor::Invert: {
      RgbImage out = image;
      for (auto& v : out.pixels) v = static_cast<uint8_t>(255 - v);
      return out;
    }
    case ControlPreprocessor::None: break;
  }
  return image;
}

RgbImage control_hint(const RgbImage& image, int width, int height, ResizeMode mode, ControlPreprocessor preprocessor,
                      int low, int high) {
  const RgbImage sized = image.width == width && image.height == height ? image : resize_to(image, width, height, mode);
  return preprocess_control(sized, preprocessor, low, high);
}

}  // namespace fp8s
