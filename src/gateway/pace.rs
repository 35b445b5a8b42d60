//! A pace shared by many readers: bytes a second, with a second's worth of burst after a quiet
//! spell. Each read reserves the time its bytes take at the pace and sleeps until its turn
//! comes, so every waiter is woken once, in the order it asked: a thousand clients waiting
//! their turn cost a thousand sleeps, not a thousand wake-ups for every turn handed out (as
//! waiters that each poll a shared bucket would).

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// How much unused time a pace may hand out at once after a quiet spell.
const BURST: Duration = Duration::from_secs(1);

pub struct Pace {
    /// Bytes a second.
    rate: f64,
    /// When the time reserved so far runs out.
    next: Mutex<Option<Instant>>,
}

impl Pace {
    /// A pace of `bytes_per_second`; `None` for 0 (unpaced).
    pub fn new(bytes_per_second: usize) -> Option<Pace> {
        (bytes_per_second > 0).then(|| Pace {
            rate: bytes_per_second as f64,
            next: Mutex::new(None),
        })
    }

    /// Reserves the time `n` bytes take at the pace and waits until their turn: at once while
    /// the time reserved runs out less than [`BURST`] from now, else until it does.
    pub async fn take(&self, n: usize) {
        let now = Instant::now();
        let cost = Duration::from_secs_f64(n as f64 / self.rate);
        let reserved_to = {
            let mut next = self.next.lock();
            // Time left unused is not saved up beyond the burst.
            let reserved_to = next.map_or(now, |t| t.max(now)) + cost;
            *next = Some(reserved_to);
            reserved_to
        };
        if let Some(turn) = reserved_to.checked_sub(BURST).filter(|turn| *turn > now) {
            tokio::time::sleep_until(turn).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_second_of_bytes_goes_at_once_and_the_rest_at_the_pace() {
        let pace = Pace::new(8192).unwrap();
        let began = Instant::now();
        pace.take(8192).await;
        assert_eq!(began.elapsed(), Duration::ZERO, "the burst goes at once");
        pace.take(1024).await;
        assert_eq!(
            began.elapsed(),
            Duration::from_millis(125),
            "1 KiB at 8 KiB/s"
        );
        pace.take(2048).await;
        assert_eq!(began.elapsed(), Duration::from_millis(375));
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_take_their_turns_in_the_order_they_asked() {
        let pace = std::sync::Arc::new(Pace::new(1000).unwrap());
        pace.take(1000).await;
        let began = Instant::now();
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let waiters: Vec<_> = (0..5)
            .map(|n| {
                let (pace, order) = (pace.clone(), order.clone());
                tokio::spawn(async move {
                    pace.take(100).await;
                    order.lock().push((n, began.elapsed().as_millis()));
                })
            })
            .collect();
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(
            *order.lock(),
            [(0, 100), (1, 200), (2, 300), (3, 400), (4, 500)]
        );
    }

    #[test]
    fn no_pace_for_zero() {
        assert!(Pace::new(0).is_none());
    }
}
