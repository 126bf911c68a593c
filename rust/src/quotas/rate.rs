//! A rate over a sliding window, measured as Kafka's quota sensors measure it: `SAMPLES`
//! samples of `SAMPLE_MS` each (Kafka's `quota.window.num` 11 and `quota.window.size.seconds`
//! 1), the rate being their sum over the time they span, which is never taken as less than
//! `SAMPLES - 1` whole samples (so a first burst is not divided by a few milliseconds). Time is
//! passed in (milliseconds on any monotonic clock): tests drive it by hand.

/// Samples kept.
pub(crate) const SAMPLES: usize = 11;
/// One sample's span.
pub(crate) const SAMPLE_MS: u64 = 1000;

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    start_ms: u64,
    value: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct Rate {
    samples: [Sample; SAMPLES],
    /// The sample values are added to.
    current: usize,
    /// When the last value was recorded (idle rates are forgotten).
    pub(crate) last_ms: u64,
}

impl Rate {
    pub(crate) fn new(now_ms: u64) -> Rate {
        Rate {
            samples: [Sample {
                start_ms: now_ms,
                value: 0.0,
            }; SAMPLES],
            current: 0,
            last_ms: now_ms,
        }
    }

    /// Adds `value` at `now_ms` (a negative one takes back what was recorded).
    pub(crate) fn record(&mut self, value: f64, now_ms: u64) {
        let current = &self.samples[self.current];
        if now_ms >= current.start_ms + SAMPLE_MS {
            self.current = (self.current + 1) % SAMPLES;
            self.samples[self.current] = Sample {
                start_ms: now_ms,
                value: 0.0,
            };
        }
        self.samples[self.current].value += value;
        self.last_ms = self.last_ms.max(now_ms);
    }

    /// The rate per second at `now_ms`, and the window (ms) it was measured over.
    pub(crate) fn measure(&mut self, now_ms: u64) -> (f64, u64) {
        let span = SAMPLES as u64 * SAMPLE_MS;
        for sample in &mut self.samples {
            if now_ms.saturating_sub(sample.start_ms) >= span {
                *sample = Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
            }
        }
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let elapsed = now_ms.saturating_sub(oldest);
        let least = (SAMPLES as u64 - 1) * SAMPLE_MS;
        let window = if elapsed / SAMPLE_MS < SAMPLES as u64 - 1 {
            // Kafka adds the whole samples missing and keeps the part of the current one.
            elapsed % SAMPLE_MS + least
        } else {
            elapsed
        };
        (total * 1000.0 / window.max(1) as f64, window)
    }
}

/// How long a client must wait for its rate over `window_ms` to come down to `bound` if it
/// sends nothing meanwhile (Kafka's `QuotaUtils.throttleTime`: rate × W / (W + X) = bound).
pub(crate) fn throttle_ms(rate: f64, bound: f64, window_ms: u64) -> u64 {
    if rate <= bound || bound <= 0.0 {
        return 0;
    }
    ((rate - bound) / bound * window_ms as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_spread_over_ten_samples_at_least() {
        let mut rate = Rate::new(0);
        rate.record(10_000.0, 0);
        // 10 000 over 10 s, not over the 0 ms that passed
        assert_eq!(rate.measure(0), (1000.0, 10_000));
        assert_eq!(rate.measure(500), (10_000.0 * 1000.0 / 10_500.0, 10_500));
    }

    #[test]
    fn a_steady_rate_is_measured_over_the_samples_it_fills_and_old_ones_are_forgotten() {
        let mut rate = Rate::new(0);
        for second in 0..30u64 {
            rate.record(2_000.0, second * 1000);
        }
        let (per_second, window) = rate.measure(29_999);
        assert_eq!(window, 10_999);
        assert!((per_second - 22_000.0 * 1000.0 / 10_999.0).abs() < 1e-9);
        // idle for longer than the samples span: nothing left
        assert_eq!(rate.measure(60_000).0, 0.0);
    }

    #[test]
    fn a_value_taken_back_leaves_the_rate_as_it_was() {
        let mut rate = Rate::new(0);
        rate.record(5_000.0, 100);
        let before = rate.measure(200);
        rate.record(3_000.0, 200);
        rate.record(-3_000.0, 200);
        assert_eq!(rate.measure(200), before);
    }

    #[test]
    fn the_throttle_brings_the_rate_back_to_the_bound() {
        // 1.5 × the bound over 11 s: 5.5 s more at nothing brings it to the bound
        assert_eq!(throttle_ms(1_500.0, 1_000.0, 11_000), 5_500);
        assert_eq!(throttle_ms(1_000.0, 1_000.0, 11_000), 0);
        assert_eq!(throttle_ms(10.0, 0.0, 11_000), 0);
        let (rate, window, bound) = (1_500.0, 11_000u64, 1_000.0);
        let x = throttle_ms(rate, bound, window) as f64;
        assert!((rate * window as f64 / (window as f64 + x) - bound).abs() < 1e-6);
    }
}
