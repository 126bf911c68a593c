//! Password hashing for logins: PBKDF2 (RFC 5802's Hi) runs thousands of HMAC rounds, some
//! milliseconds of CPU each time. A SCRAM login of a users-file user and a SASL/PLAIN login
//! against a stored SCRAM credential each hash a password. On the async workers that serve
//! produce and fetch, a flood of logins stalled every other connection (tens of logins a second
//! took produce latency from 60 ms to 2 s). So hashing runs on tokio's blocking threads, and at
//! most a few at once: further logins wait their turn, which slows logins down, not the data
//! path. The delay after a failed login is applied by the connection as before.

use tokio::sync::Semaphore;

use super::scram::{ScramCredential, ScramMechanism};

/// Hashes passwords off the async workers, a bounded number at once.
pub(crate) struct PasswordHashing {
    turns: Semaphore,
}

impl PasswordHashing {
    /// At most `concurrent` hashings at once (at least one).
    pub(crate) fn new(concurrent: usize) -> PasswordHashing {
        PasswordHashing {
            turns: Semaphore::new(concurrent.max(1)),
        }
    }

    /// Half the machine's cores, so that logins never take more than half the CPU from the
    /// data path.
    pub(crate) fn for_this_machine() -> PasswordHashing {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        PasswordHashing::new(cores / 2)
    }

    /// The credential `password` becomes with this salt and iteration count.
    pub(crate) async fn credential(
        &self,
        mechanism: ScramMechanism,
        password: &str,
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let password = password.to_string();
        self.run(move || ScramCredential::from_password(mechanism, &password, salt, iterations))
            .await
    }

    /// Whether `password` is the one `credential` was made from (SASL/PLAIN against a stored
    /// SCRAM credential).
    pub(crate) async fn matches(
        &self,
        credential: &ScramCredential,
        mechanism: ScramMechanism,
        password: &str,
    ) -> bool {
        let again = self
            .credential(
                mechanism,
                password,
                credential.salt.clone(),
                credential.iterations,
            )
            .await;
        super::scram::same(&again.stored_key, &credential.stored_key)
    }

    /// Runs `job` on a blocking thread once a turn is free.
    async fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> T {
        // The semaphore is never closed.
        let _turn = self.turns.acquire().await.expect("never closed");
        match tokio::task::spawn_blocking(job).await {
            Ok(value) => value,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // Blocking tasks are cancelled only by a runtime shutting down, which drops the
            // connection awaiting this as well.
            Err(error) => unreachable!("password hashing cancelled: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[tokio::test]
    async fn at_most_the_bound_hash_at_once_and_the_rest_wait_their_turn() {
        let hashing = PasswordHashing::new(1);
        let (release, released) = mpsc::channel::<()>();
        let (started, first_started) = tokio::sync::oneshot::channel();
        let first = hashing.run(move || {
            started.send(()).unwrap();
            released.recv().unwrap();
            1
        });
        let second = hashing.run(|| 2);
        tokio::pin!(first, second);
        assert!(futures::poll!(&mut first).is_pending());
        first_started.await.unwrap();
        // The first holds the only turn: the second does not start however often it is polled.
        for _ in 0..3 {
            assert!(futures::poll!(&mut second).is_pending());
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        assert_eq!(first.await, 1);
        assert_eq!(second.await, 2);
    }

    #[tokio::test]
    async fn hashing_runs_off_the_async_worker() {
        // A current-thread runtime: its one async worker is this test's thread.
        let hashing = PasswordHashing::new(1);
        let worker = std::thread::current().id();
        let hashed_on = hashing.run(|| std::thread::current().id()).await;
        assert_ne!(hashed_on, worker);
    }

    #[tokio::test]
    async fn credentials_made_and_checked_off_the_workers_are_scrams() {
        let hashing = PasswordHashing::new(2);
        let credential = hashing
            .credential(ScramMechanism::Sha256, "pencil", b"salt".to_vec(), 4096)
            .await;
        let expected = ScramCredential::from_password(
            ScramMechanism::Sha256,
            "pencil",
            b"salt".to_vec(),
            4096,
        );
        assert_eq!(credential, expected);
        assert!(
            hashing
                .matches(&credential, ScramMechanism::Sha256, "pencil")
                .await
        );
        assert!(
            !hashing
                .matches(&credential, ScramMechanism::Sha256, "pencil2")
                .await
        );
    }
}
