// Samplers against update formulas derived by hand on toy denoisers with known answers (issue 3).
//
// Toy model: data ~ N(0, 1) has the ideal denoiser D(x, s) = x / (1 + s^2). Its probability-flow
// ODE dx/ds = (x - D)/s = x s / (1 + s^2) has the exact solution x(s) = x0 sqrt((1+s^2)/(1+s0^2)).
#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "sampling/samplers.h"
#include "sampling/schedule.h"
#include "support.h"

using namespace fp8s;

namespace {

at::Tensor ideal_denoiser(const at::Tensor& x, const at::Tensor& s) { return x / (1 + s * s); }

at::Tensor sigma_tensor(const std::vector<double>& s) {
  std::vector<float> f(s.begin(), s.end());
  return at::tensor(f, at::kFloat);
}

double scalar(const at::Tensor& t) { return t.item<double>(); }

}  // namespace

class TestSamplers : public QObject {
  Q_OBJECT

  const std::vector<double> m_sigmas{10.0, 4.0, 1.5, 0.5, 0.1, 0.0};

 private Q_SLOTS:
  void eulerStepByStep() {
    // x_{i+1} = x_i + (x_i - D_i)/s_i (s_{i+1} - s_i) = x_i (1 + s_i (s_{i+1} - s_i)/(1 + s_i^2))
    double x = 3.0;
    std::vector<double> expected;
    for (std::size_t i = 0; i + 1 < m_sigmas.size(); ++i) {
      const double s = m_sigmas[i], n = m_sigmas[i + 1];
      x *= 1 + s * (n - s) / (1 + s * s);
      expected.push_back(x);
    }
    std::vector<double> seen, seen_sigma;
    auto out = sample_euler(ideal_denoiser, at::full({1}, 3.0f), sigma_tensor(m_sigmas),
                            [&](int, int, float sigma, const at::Tensor& xi, const at::Tensor&) {
                              seen.push_back(scalar(xi));
                              seen_sigma.push_back(sigma);
                            });
    QCOMPARE(seen.size(), expected.size());
    // the callback carries the sigma each step started from (k-diffusion's callback `sigma`)
    for (std::size_t i = 0; i < seen.size(); ++i) QVERIFY(std::fabs(seen_sigma[i] - m_sigmas[i]) <= 1e-6 * m_sigmas[i]);
    for (std::size_t i = 0; i < seen.size(); ++i) QVERIFY(std::fabs(seen[i] - expected[i]) < 1e-5 * std::fabs(expected[i]) + 1e-6);
    QVERIFY(std::fabs(scalar(out) - expected.back()) < 1e-5);
  }

  void heunIsSecondOrderAndEulerFirstOrder() {
    // Against the exact ODE solution from s=10 to s=0.5: halving the step size divides Euler's
    // error by ~2 and Heun's by ~4.
    auto run = [&](int n, bool heun) {
      std::vector<double> s;
      for (int i = 0; i <= n; ++i) s.push_back(10.0 * std::pow(0.05, double(i) / n));  // 10 -> 0.5 geometric
      auto sig = sigma_tensor(s);
      auto out = heun ? sample_heun(ideal_denoiser, at::full({1}, 1.0, at::kDouble).to(at::kFloat), sig)
                      : sample_euler(ideal_denoiser, at::full({1}, 1.0f), sig);
      const double exact = std::sqrt((1 + 0.25) / (1 + 100.0));
      return std::fabs(scalar(out) - exact);
    };
    const double e1 = run(8, false), e2 = run(16, false);
    const double h1 = run(8, true), h2 = run(16, true);
    QVERIFY2(e1 / e2 > 1.7 && e1 / e2 < 2.3, qPrintable(QString("euler ratio %1").arg(e1 / e2)));
    QVERIFY2(h1 / h2 > 3.3 && h1 / h2 < 4.7, qPrintable(QString("heun ratio %1").arg(h1 / h2)));
    QVERIFY(h1 < e1);
  }

  void heunStepByStep() {
    double x = 2.0;
    for (std::size_t i = 0; i + 1 < m_sigmas.size(); ++i) {
      const double s = m_sigmas[i], n = m_sigmas[i + 1];
      const double d = x * s / (1 + s * s);
      if (n == 0) {
        x += d * (n - s);
      } else {
        const double x2 = x + d * (n - s);
        const double d2 = x2 * n / (1 + n * n);
        x += (d + d2) / 2 * (n - s);
      }
    }
    auto out = sample_heun(ideal_denoiser, at::full({1}, 2.0f), sigma_tensor(m_sigmas));
    QVERIFY(std::fabs(scalar(out) - x) < 1e-5);
  }

  void dpmpp2mStepByStep() {
    // t = -log s, h = t_{i+1} - t_i; first step and the step to 0 are first order:
    //   x <- (s_{i+1}/s_i) x + (1 - e^{-h}) D_i ;  second order: D' = (1 + 1/2r) D_i - (1/2r) D_{i-1}
    double x = 1.5, old_d = 0;
    for (std::size_t i = 0; i + 1 < m_sigmas.size(); ++i) {
      const double s = m_sigmas[i], n = m_sigmas[i + 1];
      const double d = x / (1 + s * s);
      if (i == 0 || n == 0) {
        x = (n / s) * x + (n == 0 ? 1.0 : 1 - n / s) * d;
      } else {
        const double h = std::log(s / n), h_last = std::log(m_sigmas[i - 1] / s), r = h_last / h;
        const double dd = (1 + 1 / (2 * r)) * d - (1 / (2 * r)) * old_d;
        x = (n / s) * x + (1 - n / s) * dd;
      }
      old_d = d;
    }
    auto out = sample_dpmpp_2m(ideal_denoiser, at::full({1}, 1.5f), sigma_tensor(m_sigmas));
    QVERIFY2(std::fabs(scalar(out) - x) < 1e-5, qPrintable(QString("%1 vs %2").arg(scalar(out)).arg(x)));
  }

  void eulerAncestralStepByStep() {
    // s_up = min(n, sqrt(n^2 (s^2 - n^2)/s^2)), s_down = sqrt(n^2 - s_up^2);
    // x <- x + d (s_down - s) + z s_up, with the noise z = 0.5, -1, 2, ... given in order.
    const std::vector<double> z{0.5, -1.0, 2.0, 0.25, -0.75};
    std::size_t draw = 0;
    double x = 1.0;
    for (std::size_t i = 0; i + 1 < m_sigmas.size(); ++i) {
      const double s = m_sigmas[i], n = m_sigmas[i + 1];
      const double up = std::min(n, std::sqrt(n * n * (s * s - n * n) / (s * s)));
      const double down = std::sqrt(n * n - up * up);
      x += x * s / (1 + s * s) * (down - s);
      if (n > 0) x += z[draw++] * up;
    }
    std::size_t k = 0;
    auto out = sample_euler_ancestral(ideal_denoiser, at::full({1}, 1.0f), sigma_tensor(m_sigmas),
                                      [&] { return at::full({1}, static_cast<float>(z[k++])); });
    QCOMPARE(k, std::size_t(4));  // no draw for the final step to sigma 0
    QVERIFY(std::fabs(scalar(out) - x) < 1e-5);
  }

  void lcmStepByStep() {
    // x <- D; then x <- x + s_{i+1} z while s_{i+1} > 0. With D = 0.3 x: x_{i+1} = 0.3 x_i + s z.
    double x = 2.0;
    int draws = 0;
    for (std::size_t i = 0; i + 1 < m_sigmas.size(); ++i) {
      x = 0.3 * x;
      if (m_sigmas[i + 1] > 0) x += m_sigmas[i + 1] * 1.0, ++draws;
    }
    int k = 0;
    auto out = sample_lcm([](const at::Tensor& xi, const at::Tensor&) { return xi * 0.3; },
                          at::full({1}, 2.0f), sigma_tensor(m_sigmas), [&] { ++k; return at::ones({1}); });
    QCOMPARE(k, draws);
    QVERIFY(std::fabs(scalar(out) - x) < 1e-5);
  }

  void ddimWithZeroData() {
    // If the data is 0, x_t = sqrt(1 - a_t) eps exactly, the ideal eps model is x / sqrt(1 - a_t),
    // pred_x0 = 0 and every step rescales: x_final = x_T sqrt(1 - a[0]) / sqrt(1 - a[997]) with the
    // last step going to a[0] (ldm's quirk).
    DiscreteSchedule schedule;
    const auto acp = schedule.alphas_cumprod();
    auto model = [&](const at::Tensor& x, int64_t t) { return x / at::sqrt(1 - acp[t]); };
    std::vector<float> sigmas;
    auto out = sample_ddim(model, at::full({1}, 1.0f), 6, acp,
                           [&](int, int, float sigma, const at::Tensor&, const at::Tensor&) { sigmas.push_back(sigma); });
    // each step reports its timestep's sigma, sqrt((1 - a_t) / a_t) (not 0); the first is sigma_max's neighbour
    QCOMPARE(sigmas.size(), std::size_t{7});
    const double a997 = acp[997].item<double>(), a1 = acp[1].item<double>();
    QVERIFY(std::fabs(sigmas.front() - std::sqrt((1 - a997) / a997)) < 1e-4);
    QVERIFY(std::fabs(sigmas.back() - std::sqrt((1 - a1) / a1)) < 1e-6);
    const double expected = std::sqrt(1 - acp[0].item<double>()) / std::sqrt(1 - acp[997].item<double>());
    QVERIFY(std::fabs(scalar(out) - expected) < 1e-5);
    QCOMPARE(ddim_timesteps(6), (std::vector<int64_t>{997, 831, 665, 499, 333, 167, 1}));
    // 1000 // 3 = 333 divides 999: ldm's list would end at 1000, past the schedule; A1111 clips it
    QCOMPARE(ddim_timesteps(3), (std::vector<int64_t>{999, 667, 334, 1}));
    for (int steps = 1; steps <= 1000; ++steps) {
      for (const int64_t t : ddim_timesteps(steps)) QVERIFY2(t >= 1 && t <= 999, qPrintable(QString::number(steps)));
    }
  }

  void schedules() {
    DiscreteSchedule schedule;
    // Hand values: alphas_cumprod[0] = 1 - 0.00085; sigma_max = sqrt((1 - a)/a) at a = prod(1 - beta)
    QVERIFY(std::fabs(schedule.alphas_cumprod()[0].item<double>() - 0.99915) < 1e-7);
    QVERIFY(std::fabs(schedule.sigma_max() - 14.6146421) < 1e-4);
    QVERIFY(std::fabs(schedule.sigma_min() - 0.0291675329) < 1e-7);
    auto normal = schedule.get_sigmas(Schedule::Normal, 6);
    QCOMPARE(normal.size(0), int64_t(7));
    QCOMPARE(normal[6].item<float>(), 0.0f);
    QVERIFY(std::fabs(normal[0].item<double>() - 14.6146) < 1e-3);
    QVERIFY(std::fabs(normal[1].item<double>() - 5.09241) < 1e-4);
    // sigma_to_t inverts t_to_sigma, fractional timesteps included
    for (double t : {999.0, 799.2, 437.25, 0.0}) {
      auto s = schedule.t_to_sigma(at::full({1}, t, at::kFloat));
      QVERIFY(std::fabs(schedule.sigma_to_t(s).item<double>() - t) < 1e-2);
    }
    // karras: (max^(1/7) + i/(n-1) (min^(1/7) - max^(1/7)))^7
    auto karras = schedule.get_sigmas(Schedule::Karras, 4);
    const double lo = std::pow(schedule.sigma_min(), 1 / 7.0), hi = std::pow(schedule.sigma_max(), 1 / 7.0);
    for (int i = 0; i < 4; ++i) {
      const double want = std::pow(hi + i / 3.0 * (lo - hi), 7.0);
      QVERIFY(std::fabs(karras[i].item<double>() - want) < 1e-4 * want);
    }
  }
};

QTEST_GUILESS_MAIN(TestSamplers)
#include "test_samplers.moc"
