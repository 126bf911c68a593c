//! Objects are created once and never replaced: every upload is a conditional create. What a
//! writer does when the name is taken is its own business (compaction, see
//! `log::partition::compaction`).

use object_store::path::Path;
use object_store::PutPayload;

use super::LogContext;
use crate::store::StoreError;

/// What a conditional create found.
#[derive(Debug)]
pub(crate) enum PutOutcome {
    Created,
    /// Another object (different bytes) holds the name.
    Occupied,
}

/// Creates `path` with `object`; an existing object with the very same bytes counts as
/// created (a retried PUT whose first attempt went through).
pub(crate) async fn put_new(
    ctx: &LogContext,
    path: &Path,
    object: impl Into<PutPayload>,
) -> Result<PutOutcome, StoreError> {
    let object = object.into();
    let started = std::time::Instant::now();
    let put = ctx.store.put_new(path, object.clone()).await;
    ctx.metrics
        .upload_duration
        .observe(started.elapsed().as_secs_f64());
    if matches!(put, Err(ref e) if !matches!(e, StoreError::AlreadyExists(_))) {
        ctx.metrics.upload_errors.inc();
    }
    match put {
        Ok(()) => Ok(PutOutcome::Created),
        Err(StoreError::AlreadyExists(_)) if holds(&ctx.store.get(path).await?, &object) => {
            Ok(PutOutcome::Created)
        }
        Err(StoreError::AlreadyExists(_)) => Ok(PutOutcome::Occupied),
        Err(e) => Err(e),
    }
}

/// Whether `found` is the bytes of `payload`, piece after piece.
fn holds(found: &[u8], payload: &PutPayload) -> bool {
    if found.len() != payload.content_length() {
        return false;
    }
    let mut rest = found;
    payload.iter().all(|piece| {
        let (head, tail) = rest.split_at(piece.len());
        rest = tail;
        head == &piece[..]
    })
}
