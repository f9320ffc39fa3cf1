//! Exponential backoff with jitter, and the worker's log lines.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Exponential backoff with jitter: by default 200 ms, 400 ms, 800 ms … up to 5 s, each plus up
/// to 20 %.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay (default 200 ms).
    pub initial: Duration,
    /// Largest delay (default 5 s).
    pub max: Duration,
    /// Growth (default 2).
    pub factor: f64,
    /// Random extra share of each delay, 0–1 (default 0.2).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(5),
            factor: 2.0,
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The wait before retry number `attempt` (from 0).
    pub fn delay(&self, attempt: u32) -> Duration {
        let max = self.max.as_secs_f64();
        let factor = if self.factor < 1.0 { 2.0 } else { self.factor };
        let jitter = if (0.0..=1.0).contains(&self.jitter) {
            self.jitter
        } else {
            0.2
        };
        let base = (self.initial.as_secs_f64() * factor.powi(attempt.min(64) as i32)).min(max);
        Duration::from_secs_f64((base * (1.0 + random() * jitter)).min(max))
    }
}

/// Counts the consecutive failures of one loop.
pub(crate) struct Retrier {
    b: Backoff,
    attempt: u32,
}

impl Retrier {
    pub(crate) fn new(b: Backoff) -> Retrier {
        Retrier { b, attempt: 0 }
    }
    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = self.b.delay(self.attempt);
        self.attempt += 1;
        d
    }
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

static SEED: AtomicU64 = AtomicU64::new(0);

/// A number in [0, 1): splitmix64 over a clock-seeded counter (jitter needs no better).
pub(crate) fn random() -> f64 {
    if SEED.load(Ordering::Relaxed) == 0 {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let _ = SEED.compare_exchange(0, t | 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    let mut z = SEED.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Log levels of the worker's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// Where the worker's log lines go: `(level, "orbit worker registered …")`.
pub type Logger = std::sync::Arc<dyn Fn(Level, &str) + Send + Sync>;

/// The default logger: standard error, `2026-12-06T17:56:24.123Z INFO orbit …`.
pub fn stderr_logger() -> Logger {
    std::sync::Arc::new(|level, line| {
        eprintln!("{} {} {}", timestamp(), level.as_str(), line);
    })
}

/// Now as RFC 3339 UTC with milliseconds.
pub fn timestamp() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil from days (H. Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        year,
        month,
        day,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}
